#!/usr/bin/env bash
# Package test for the selected PostgreSQL (PG_MAJOR, default 15): builds its packages with
# scripts/package.sh and installs the .deb as a user of the PostgreSQL apt repository would
# (apt-get install ./x.deb) into a server laid out as postgresql-NN is (Debian's own for 15; for
# 16-18 the relocatable build copied into that layout and registered as a stand-in postgresql-NN,
# tests/package/apt_layout.sh): first under a running server that has the previous release
# preloaded, and upgrades that server; then on its own, beside the other majors' files (left
# untouched), used and removed with nothing left behind. Then the tarball, by its INSTALL.txt
# steps, into the same server. Leaves the release build installed again at exit, whatever
# happens, in the server the other stages use, so that the next stage and scripts/try.sh find
# the extension where they expect it.
# Ends with "N passed, M failed"; exits non-zero if any failed.
source "$(dirname "$0")/../../scripts/lib.sh"
source "$(dirname "$0")/apt_layout.sh"
[ "$(id -u)" = 0 ] || { echo "the package test installs packages with dpkg and apt-get: run it as root" >&2; exit 2; }

packages="$(bash "$REPO/scripts/package.sh" "$PG_MAJOR")"
deb="$(grep "/postgresql-$PG_MAJOR-pg-shard-id_.*\.deb$" <<<"$packages")"
tarball="$(grep "/pg_shard_id-.*-pg$PG_MAJOR-linux-x86_64\.tar\.gz$" <<<"$packages")"
# The previous release, which the live install upgrades from, built from its release commit (the
# last commit of 0.4.0: its CHANGELOG has [0.4.0] as released; 0.3.0 was 0b3df35), once per
# machine (release_build, scripts/lib.sh), against the server the other stages use.
PREVIOUS_VERSION=0.4.0
PREVIOUS_COMMIT=b97dbcdcccb9d1e19926ec36c4ee09b76a2779d5
PREVIOUS_DIR="$(release_build "$PREVIOUS_COMMIT")"

# the server in the apt layout: Debian's for 15, a stand-in for the others
STANDIN=""
if [ "$PG_BIN" != "/usr/lib/postgresql/$PG_MAJOR/bin" ]; then
    say "PostgreSQL $PG_MAJOR in the apt layout (/usr/lib/postgresql/$PG_MAJOR, /usr/share/postgresql/$PG_MAJOR), a stand-in postgresql-$PG_MAJOR"
    apt_layout_install "$PG_MAJOR" "$PG_BIN"
    STANDIN=yes
    PG_BIN="/usr/lib/postgresql/$PG_MAJOR/bin" PG_CONFIG="/usr/lib/postgresql/$PG_MAJOR/bin/pg_config"
    export PATH="$PG_BIN:$PG_SHARD_ID_BASE_PATH"
fi

PKGLIB="$("$PG_CONFIG" --pkglibdir)"
EXT_DIR="$("$PG_CONFIG" --sharedir)/extension"
# every upgrade script the repository has, as the package must install it
upgrade_scripts=()
for f in "$REPO"/sql/pg_shard_id--*--*.sql; do upgrade_scripts+=("$EXT_DIR/$(basename "$f")"); done
DEB_NAME="postgresql-$PG_MAJOR-pg-shard-id"
installed_files() { ls "$PKGLIB"/pg_shard_id* "$EXT_DIR"/pg_shard_id* 2>/dev/null || true; }
remove_installed_files() { rm -f "$PKGLIB"/pg_shard_id.so "$EXT_DIR"/pg_shard_id.control "$EXT_DIR"/pg_shard_id--*.sql; }

cleanup() {
    for c in "${STARTED_CLUSTERS[@]}"; do stop_cluster "$c"; done
    if dpkg-query -W -f='${Status}' "$DEB_NAME" 2>/dev/null | grep -q "install ok installed"; then
        apt-get remove -y -qq "$DEB_NAME" >/dev/null 2>&1 || true
    fi
    if [ -n "$STANDIN" ]; then
        remove_installed_files
        apt_layout_remove "$PG_MAJOR"
    fi
    select_pg "$PG_MAJOR"  # (the server the other stages use)
    install_extension release >/dev/null || echo "could not reinstall the release build" >&2
}
trap cleanup EXIT

say "testing $(basename "$deb") and $(basename "$tarball")"
check "package: the .deb and the tarball are built, with their checksums" \
    "$([ -s "$deb" ] && [ -s "$tarball" ] && (cd "$(dirname "$deb")" &&
        sha256sum --quiet -c --ignore-missing SHA256SUMS && grep -c " $(basename "$deb")$\| $(basename "$tarball")$" SHA256SUMS))" 2

# install_deb: as a user of the apt repository installs it
install_deb() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall "$deb" >"$RUN_DIR/apt.log" 2>&1 ||
        cat "$RUN_DIR/apt.log"
}

# install_previous_release: the previous release alone
install_previous_release() {
    remove_installed_files
    install_release_build "$PREVIOUS_DIR"
}
extversion() { q -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_shard_id'"; }
# draw PHASE: inserts 1,000 rows into table t, ids from its DEFAULT, in a new connection; prints
# how many it inserted or the error
draw() { q -c "WITH i AS (INSERT INTO t (phase) SELECT $1 FROM generate_series(1, 1000) RETURNING 1)
               SELECT count(*) FROM i" 2>&1; }

# The live install: a running server has the previous release preloaded and a table whose
# DEFAULT draws ids from it. The package is installed under it (it replaces the library file; the
# server keeps the file it mapped until it restarts, where an in-place copy crashed it), new
# connections still draw ids, then the restart and ALTER EXTENSION UPDATE of README "Upgrade".
PREVIOUS_DIR="$(release_build "$PREVIOUS_COMMIT")"
say "installing the package under a running server that has $PREVIOUS_VERSION preloaded"
install_previous_release
start_cluster live yes
q -c "CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE s" \
  -c "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 1), phase int)"
check "live install: the server runs $PREVIOUS_VERSION, and its ids fill a table" \
    "$(extversion) $(draw 1)" "$PREVIOUS_VERSION 1000"
install_deb
postmaster="$(as_pg head -1 "$RUN_DIR/live/data/postmaster.pid")"
check "live install: the package replaced the library file, and the server maps the old, unlinked one" \
    "$(cmp -s "$PKGLIB/pg_shard_id.so" "$PREVIOUS_DIR/lib/pg_shard_id.so" || echo replaced),$(
       as_pg grep -q 'pg_shard_id\.so (deleted)' "/proc/$postmaster/maps" && echo mapped)" "replaced,mapped"
check "live install: new connections still draw ids" "$(draw 2) $(draw 2) $(draw 2)" "1000 1000 1000"
restart_cluster live
check "live install: after the restart, the new library draws ids under the $PREVIOUS_VERSION SQL" \
    "$(extversion) $(draw 3)" "$PREVIOUS_VERSION 1000"
q -c "SET client_min_messages = warning" -c "ALTER EXTENSION pg_shard_id UPDATE"
check "live install: ALTER EXTENSION UPDATE, then ids" "$(extversion) $(draw 4)" "$EXTENSION_VERSION 1000"
check "live install: every id unique" "$(q -c "SELECT count(DISTINCT id) || ' of ' || count(*) FROM t" 2>&1)" \
    "6000 of 6000"
check "live install: each phase's ids are above the previous phase's" \
    "$(q -c "SELECT bool_and(lo > prev_max) FROM (SELECT min(id) lo, lag(max(id)) OVER (ORDER BY phase) AS prev_max
                                               FROM t GROUP BY phase) x" 2>&1)" t
check "live install: the server log has no crash" \
    "$(grep -c 'terminated by signal' "$RUN_DIR/live/server.log" || true)" 0
stop_cluster live
apt-get remove -y -qq "$DEB_NAME" >/dev/null 2>&1 || true
# Start from nothing, so that only the package can provide the extension.
remove_installed_files

# The files of the other majors' servers (Debian's 15, and whatever else is laid out), which
# installing and removing this major's package must leave as they are.
other_majors() {
    find /usr/lib/postgresql /usr/share/postgresql -mindepth 1 -maxdepth 1 ! -name "$PG_MAJOR" -print0 |
        xargs -0 -r -I{} find {} -name 'pg_shard_id*' -type f -print0 | sort -z | xargs -0 -r sha256sum
}
others_before="$(other_majors)"

check "deb: Depends names the server and glibc" \
    "$(dpkg-deb -f "$deb" Depends | grep -c "^postgresql-$PG_MAJOR, libc6 (>= 2\.[0-9]*)$")" 1
check "deb: version" "$(dpkg-deb -f "$deb" Version)" "$EXTENSION_VERSION"
check "deb: laid out as the apt repository's packages (the library in /usr/lib/postgresql/$PG_MAJOR/lib, the rest in /usr/share/postgresql/$PG_MAJOR/extension)" \
    "$(dpkg-deb -c "$deb" | awk '{print $6}' | grep 'pg_shard_id' | grep -v '/doc/' |
       grep -cv "^\./usr/lib/postgresql/$PG_MAJOR/lib/pg_shard_id\.so$\|^\./usr/share/postgresql/$PG_MAJOR/extension/pg_shard_id[-.]" || true)" 0
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" >"$RUN_DIR/apt.log" 2>&1 || cat "$RUN_DIR/apt.log"
check "deb: apt-get installs it (its Depends resolved by postgresql-$PG_MAJOR)" \
    "$(dpkg-query -W -f='${Status} ${Version}' "$DEB_NAME")" "install ok installed $EXTENSION_VERSION"
owned="$(dpkg -L "$DEB_NAME")"
check "deb: dpkg owns the library, the control file, the install script and every upgrade script" \
    "$(for f in "$PKGLIB/pg_shard_id.so" "$EXT_DIR/pg_shard_id.control" \
                "$EXT_DIR/pg_shard_id--$EXTENSION_VERSION.sql" "${upgrade_scripts[@]}"; do
           [ -f "$f" ] || echo "not installed: $f"
           grep -qxF "$(realpath "$f")" <<<"$owned" || echo "not owned: $f"; done)" ""
check "deb: the license is the copyright file" \
    "$(cmp -s "$REPO/LICENSE" "/usr/share/doc/$DEB_NAME/copyright" && echo same)" same
check "deb: the exporter's queries.yaml ships with it" \
    "$(cmp -s "$REPO/monitoring/queries.yaml" "/usr/share/doc/$DEB_NAME/monitoring/queries.yaml" && echo same)" same

# use_it WHAT: a fresh cluster with the extension as installed, 100,000 ids, dropped again
use_it() {
    check "$1: the library is a release build (no test clock in it)" \
        "$(grep -c test_clock_offset_ms "$PKGLIB/pg_shard_id.so" || true)" 0
    start_cluster package yes
q -c "CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE s" \
  -c "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 7), n int)" \
  -c "INSERT INTO t (n) SELECT g FROM generate_series(1, 100000) g"
    check "$1: CREATE EXTENSION makes the current version" \
        "$(q -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_shard_id'")" "$EXTENSION_VERSION"
    check "$1: the guard is the cluster-wide one" "$(q -c "SELECT guard FROM pg_shard_id_info()")" cluster
    check "$1: 100,000 ids, all unique, all shard 7" \
        "$(q -c "SELECT count(DISTINCT id) || ' ' || count(*) FILTER (WHERE shard_id_extract_shard(id) = 7) FROM t")" \
        "100000 100000"
    check "$1: every upgrade script in sql/ is installed (${#upgrade_scripts[@]})" \
        "$(for f in "${upgrade_scripts[@]}"; do [ -f "$f" ] || echo "missing $f"; done)" ""
    check "$1: only the current version is installable (no old install scripts)" \
        "$(q -c "SELECT string_agg(version, ' ') FROM pg_available_extension_versions WHERE name = 'pg_shard_id'")" "$EXTENSION_VERSION"
    check "$1: the test-only setting is absent" \
        "$(q -c "SELECT count(*) FROM pg_settings WHERE name LIKE 'pg_shard_id.test%'")" 0
    q -c "DROP EXTENSION pg_shard_id CASCADE" 2>/dev/null
    stop_cluster package
}
use_it deb
apt-get remove -y -qq "$DEB_NAME" >"$RUN_DIR/apt.log" 2>&1 || cat "$RUN_DIR/apt.log"
check "deb: apt-get remove removes it" \
    "$(dpkg-query -W -f='${Status}' "$DEB_NAME" 2>/dev/null | grep -c ' installed$' || true)" 0
check "deb: no file is left behind" "$(installed_files | wc -l)" 0
check "deb: the other majors' files are as they were ($(grep -c . <<<"$others_before" || true) files, by sha256)" \
    "$(sha256sum <<<"$(other_majors)" | cut -c1-16)" "$(sha256sum <<<"$others_before" | cut -c1-16)"

# The tarball, for other layouts: its INSTALL.txt steps, run as written, into the same server
tmp="$RUN_DIR/tarball"
rm -rf "$tmp" && mkdir -p "$tmp"
tar -C "$tmp" -xzf "$tarball"
dir="$(echo "$tmp"/pg_shard_id-*)"
check "tarball: INSTALL.txt, LICENSE, both folders and the monitoring recipe" \
    "$(ls "$dir" | tr '\n' ' ')" "CHANGELOG.md INSTALL.txt LICENSE README.md extension lib monitoring "
check "tarball: the exporter's queries.yaml ships with it" \
    "$(cmp -s "$REPO/monitoring/queries.yaml" "$dir/monitoring/queries.yaml" && echo same)" same
check "tarball: INSTALL.txt names the major's own pg_config, not the bare one (the newest major's)" \
    "$(grep -c "^  PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config " "$dir/INSTALL.txt")" 1
(cd "$dir" && grep '^  install ' INSTALL.txt | PG_CONFIG="$PG_CONFIG" PATH="$PG_BIN:$PATH" bash -e)
check "tarball: the INSTALL.txt steps install every file" \
    "$(installed_files | wc -l)" "$(find "$dir/lib" "$dir/extension" -type f | wc -l)"
use_it tarball
remove_installed_files
check "tarball: no file is left behind" "$(installed_files | wc -l)" 0

echo
echo "package: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
