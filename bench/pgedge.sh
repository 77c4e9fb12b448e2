#!/usr/bin/env bash
# pgEdge's snowflake extension (2.6.0, the closest peer in C) built with PGXS and installed into the
# selected PostgreSQL, for the side-by-side benchmarks (bench/cost_peers.sh, bench/cache_table.sh).
# Idempotent: nothing is built or installed when the installed snowflake.so is already this build.
#   bench/pgedge.sh                       PostgreSQL 15 (PG_MAJOR selects another, 15-18)
#   PGEDGE_TARBALL=/path/x.tar.gz bench/pgedge.sh   another source tarball
#   PGEDGE_BUILD_DIR=/tmp/...             where it is unpacked and built (default under /tmp)
# Sourced (`source bench/pgedge.sh`), it defines ensure_pgedge and does nothing by itself.
# What it installs: snowflake.nextval(regclass) (C function snowflake_nextval), which needs the
# setting snowflake.node (1..1023, SUSET; unset raises an error) and no shared_preload_libraries.
# It carries its own copy of PostgreSQL's sequence code and ignores the sequence's CACHE.
[ -n "${REPO:-}" ] || source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

ensure_pgedge() {
    local tarball="${PGEDGE_TARBALL:-$(vendor_file pgedge-snowflake-2.6.0.tar.gz || true)}"
    [ -f "$tarball" ] || {
        echo "pgedge-snowflake-2.6.0.tar.gz not found: set PG_SHARD_ID_VENDOR to the folder that holds it (or PGEDGE_TARBALL to the file)" >&2
        return 1
    }
    local build="${PGEDGE_BUILD_DIR:-/tmp/pgedge-snowflake-pg$PG_MAJOR}"
    local src="$build/snowflake-2.6.0" lib
    lib="$("$PG_CONFIG" --pkglibdir)/snowflake.so"
    # rebuild when the tarball is newer than the build
    if ! [ -f "$src/snowflake.so" ] || [ "$tarball" -nt "$src/snowflake.so" ]; then
        say "building pgEdge snowflake 2.6.0 for PostgreSQL $PG_MAJOR in $build"
        rm -rf "$build" && mkdir -p "$build"
        tar xzf "$tarball" -C "$build"
        make -C "$src" USE_PGXS=1 PG_CONFIG="$PG_CONFIG" >"$build/build.log" 2>&1 ||
            { tail -20 "$build/build.log" >&2; return 1; }
    fi
    if cmp -s "$src/snowflake.so" "$lib" && [ -f "$("$PG_CONFIG" --sharedir)/extension/snowflake.control" ]; then
        return 0
    fi
    say "installing pgEdge snowflake 2.6.0 into PostgreSQL $PG_MAJOR"
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo make -C "$src" USE_PGXS=1 PG_CONFIG="$PG_CONFIG" install >>"$build/build.log" 2>&1 ||
        { tail -20 "$build/build.log" >&2; return 1; }
}

# run as a script: build and install
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    ensure_pgedge
    echo "pgEdge snowflake: $("$PG_CONFIG" --pkglibdir)/snowflake.so"
fi
