#!/usr/bin/env bash
# Package test for the selected PostgreSQL (PG_MAJOR, default 15): builds the package with
# scripts/package.sh, installs it the way a user would (apt-get install ./x.deb for Debian's
# PostgreSQL, the tarball's INSTALL.txt steps for the relocatable one), starts a fresh cluster
# from it, uses it, then removes it and checks that nothing is left behind. Leaves the release
# build installed by cargo pgrx again at exit, whatever happens, so that the next stage and
# scripts/try.sh find the extension where they expect it.
# Ends with "N passed, M failed"; exits non-zero if any failed.
source "$(dirname "$0")/../../scripts/lib.sh"

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
    if [ "$PG_BIN" = "/usr/lib/postgresql/$PG_MAJOR/bin" ] && dpkg-query -W "$DEB_NAME" >/dev/null 2>&1; then
        apt-get remove -y -qq "$DEB_NAME" >/dev/null 2>&1 || true
    fi
    install_extension release >/dev/null || echo "could not reinstall the release build" >&2
}
trap cleanup EXIT

package="$(bash "$REPO/scripts/package.sh" "$PG_MAJOR" | tail -1)"
say "testing $(basename "$package")"
check "package: built" "$([ -s "$package" ] && echo yes)" yes

# install_package: the way a user installs it (apt-get for the .deb, INSTALL.txt for the tarball)
install_package() {
    if [[ "$package" == *.deb ]]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall "$package" >"$RUN_DIR/apt.log" 2>&1 ||
            cat "$RUN_DIR/apt.log"
    else
        local tmp="$RUN_DIR/tarball"
        rm -rf "$tmp" && mkdir -p "$tmp"
        tar -C "$tmp" -xzf "$package"
        (cd "$tmp"/pg_shard_id-* && grep '^  install ' INSTALL.txt | PATH="$PG_BIN:$PATH" bash -e)
    fi
}

# Installing over a running server that has the library preloaded (the build installed now, a
# different file from the package's stripped one) must not crash it: the package replaces the
# file, and the server keeps the one it mapped until it restarts.
say "installing the package under a running server that has the library preloaded"
start_cluster live yes
q -c "CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE s" -c "SELECT next_shard_id('s', 1)" >/dev/null
install_package
check "live install: new connections still draw ids" \
    "$(for i in 1 2 3; do q -c "SELECT next_shard_id('s', 1) > 0" 2>&1; done | sort -u)" t
restart_cluster live
check "live install: after the restart, ALTER EXTENSION UPDATE and ids" \
    "$(q -c "SET client_min_messages = warning" -c "ALTER EXTENSION pg_shard_id UPDATE" \
         -c "SELECT next_shard_id('s', 1) > 0" 2>&1)" t
check "live install: the server log has no crash" \
    "$(grep -c 'terminated by signal' "$RUN_DIR/live/server.log" || true)" 0
stop_cluster live
if [[ "$package" == *.deb ]]; then apt-get remove -y -qq "$DEB_NAME" >/dev/null 2>&1 || true; fi
# Start from nothing, so that only the package can provide the extension.
remove_installed_files

if [[ "$package" == *.deb ]]; then
    check "deb: Depends names the server and glibc" \
        "$(dpkg-deb -f "$package" Depends | grep -c "^postgresql-$PG_MAJOR, libc6 (>= 2\.[0-9]*)$")" 1
    check "deb: version" "$(dpkg-deb -f "$package" Version)" "$EXTENSION_VERSION"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" >"$RUN_DIR/apt.log" 2>&1 ||
        cat "$RUN_DIR/apt.log"
    check "deb: apt-get installs it" "$(dpkg-query -W -f='${Status} ${Version}' "$DEB_NAME")" \
        "install ok installed $EXTENSION_VERSION"
    owned="$(dpkg -L "$DEB_NAME")"
    check "deb: dpkg owns the library, the control file, the install script and every upgrade script" \
        "$(for f in "$PKGLIB/pg_shard_id.so" "$EXT_DIR/pg_shard_id.control" \
                    "$EXT_DIR/pg_shard_id--$EXTENSION_VERSION.sql" "${upgrade_scripts[@]}"; do
               grep -qxF "$f" <<<"$owned" || echo "missing $f"; done)" ""
    check "deb: the license is the copyright file" \
        "$(cmp -s "$REPO/LICENSE" "/usr/share/doc/$DEB_NAME/copyright" && echo same)" same
else
    tmp="$RUN_DIR/tarball"
    rm -rf "$tmp" && mkdir -p "$tmp"
    tar -C "$tmp" -xzf "$package"
    dir="$(echo "$tmp"/pg_shard_id-*)"
    check "tarball: INSTALL.txt, LICENSE and both folders" \
        "$(ls "$dir" | tr '\n' ' ')" "CHANGELOG.md INSTALL.txt LICENSE README.md extension lib "
    # the steps INSTALL.txt gives, run as written
    (cd "$dir" && grep '^  install ' INSTALL.txt | PATH="$PG_BIN:$PATH" bash -e)
    check "tarball: the INSTALL.txt steps install every file" \
        "$(installed_files | wc -l)" "$(find "$dir/lib" "$dir/extension" -type f | wc -l)"
fi
check "package: the library is a release build (no test clock in it)" \
    "$(grep -c test_clock_offset_ms "$PKGLIB/pg_shard_id.so" || true)" 0

start_cluster package yes
q -c "CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE s" \
  -c "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 7), n int)" \
  -c "INSERT INTO t (n) SELECT g FROM generate_series(1, 100000) g"
check "package: CREATE EXTENSION makes the current version" \
    "$(q -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_shard_id'")" "$EXTENSION_VERSION"
check "package: the guard is the cluster-wide one" "$(q -c "SELECT guard FROM pg_shard_id_info()")" cluster
check "package: 100,000 ids, all unique, all shard 7" \
    "$(q -c "SELECT count(DISTINCT id) || ' ' || count(*) FILTER (WHERE shard_id_extract_shard(id) = 7) FROM t")" \
    "100000 100000"
check "package: every upgrade script in sql/ is installed (${#upgrade_scripts[@]})" \
    "$(for f in "${upgrade_scripts[@]}"; do [ -f "$f" ] || echo "missing $f"; done)" ""
check "package: only the current version is installable (no old install scripts)" \
    "$(q -c "SELECT string_agg(version, ' ') FROM pg_available_extension_versions WHERE name = 'pg_shard_id'")" "$EXTENSION_VERSION"
check "package: the test-only setting is absent" \
    "$(q -c "SELECT count(*) FROM pg_settings WHERE name LIKE 'pg_shard_id.test%'")" 0
q -c "DROP EXTENSION pg_shard_id CASCADE" 2>/dev/null
stop_cluster package

if [[ "$package" == *.deb ]]; then
    apt-get remove -y -qq "$DEB_NAME" >"$RUN_DIR/apt.log" 2>&1 || cat "$RUN_DIR/apt.log"
    check "deb: apt-get remove removes it" \
        "$(dpkg-query -W -f='${Status}' "$DEB_NAME" 2>/dev/null | grep -c ' installed$' || true)" 0
else
    remove_installed_files
fi
check "package: no file is left behind" "$(installed_files | wc -l)" 0

echo
echo "package: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
