#!/usr/bin/env bash
# Where one call's time goes: instructions per id, by function, for nextval() and next_shard_id
# (borrow), counted by valgrind's callgrind in a single-user PostgreSQL backend. Instruction
# counts do not depend on what else the machine is doing, so before/after comparisons hold on a
# busy machine too (they do not count what a syscall or a cache miss costs: the benchmark's ids/s
# are the measure of speed; this says where the instructions are).
#
#   bench/profile.sh [LABEL]    writes docs/profile-LABEL.json (default LABEL: current)
#   PROFILE_PG=15 bench/profile.sh ...   (default PostgreSQL 18)
#   PROFILE_KEEP_INSTALLED=1 ...   profile the build installed now (say, a previous release)
# Then bench/profile_chart.py docs/profile-before.json docs/profile-after.json docs/profile.png
source "$(dirname "$0")/../scripts/lib.sh"
stop_clusters_at_exit
label="${1:-current}"
N="${PROFILE_IDS:-200000}"
select_pg "${PROFILE_PG:-18}"
ensure_setup
[ -n "${PROFILE_KEEP_INSTALLED:-}" ] || install_extension release
start_cluster profile yes
stop_cluster profile
dir="$RUN_DIR/profile"

# profile NAME FUNCTION SQL: runs SQL in a single-user backend under callgrind, counting only
# inside FUNCTION (and what it calls).
profile() {
    as_pg valgrind --tool=callgrind --toggle-collect="$2" --callgrind-out-file="$dir/$1.callgrind" \
        "$PG_BIN/postgres" --single -D "$dir/data" -c jit=off -c pg_shard_id.overflow=borrow postgres \
        >"$dir/$1.log" 2>&1 <<<"CREATE SEQUENCE IF NOT EXISTS s;
$3"
    callgrind_annotate --inclusive=no --threshold=100 "$dir/$1.callgrind" >"$dir/$1.txt"
}
say "callgrind: $N ids with nextval() and with next_shard_id (PostgreSQL $PG_MAJOR)"
as_pg "$PG_BIN/postgres" --single -D "$dir/data" postgres <<<"CREATE EXTENSION pg_shard_id;" >/dev/null
profile nextval nextval_oid "SELECT count(nextval('s')) FROM generate_series(1, $N);"
profile next_shard_id next_shard_id_wrapper "SELECT count(next_shard_id('s', 1)) FROM generate_series(1, $N);"
python3 "$REPO/bench/profile_parse.py" "$N" "$dir/nextval.txt" "$dir/next_shard_id.txt" \
    >"$REPO/docs/profile-$label.json"
say "wrote docs/profile-$label.json"
cat "$REPO/docs/profile-$label.json"
