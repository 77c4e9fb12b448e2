#!/usr/bin/env bash
# Issue 31's timed figures, earlier releases beside this build in one run (PostgreSQL 15 unless
# PG_MAJOR says otherwise), written to docs/speed-<version>.md by bench/speed.py:
#   1. generation: nextval() against next_shard_id (borrow), one session, in rounds; each round
#      measures every build in its own throwaway cluster, the library swapped between them, the
#      order of the builds reversed every other round
#   2. inserts (this build): pgbench, prepared, 2 clients, next_shard_id against bigserial and
#      against an identity column, interleaved in one pgbench run (each transaction inserts into
#      one of the three tables, at random) and in alternated pairs of runs
#   3. callgrind's instructions per id above nextval() of every build (bench/cost_compare.sh)
# Each generation run also times two generators of bench/reference_ids.c (nextval() + one clock
# read, without a guard and with one spinlock): the cap, measured in the same run.
# Every build is made before anything is timed. Run it on an otherwise idle machine (~15 min once
# the earlier releases are built and cached).
#   bench/speed_compare.sh                              0.3.0 and 0.5.0 beside this build
#   bench/speed_compare.sh 0.5.0=0eea5d9                one release beside this build
#   SPEED_ROUNDS=4 SPEED_RUNS=5 SPEED_IDS=2000000 SPEED_PAIRS=40 SPEED_PAIR_SECONDS=2
#   SPEED_MIXED_RUNS=10 SPEED_MIXED_SECONDS=5 (defaults)
#   SPEED_REPORT=file.md                                write the report there instead
source "$(dirname "$0")/../scripts/lib.sh"
stop_clusters_at_exit
cd "$REPO"
releases=("$@")
[ ${#releases[@]} -gt 0 ] || releases=(0.3.0=0b3df35 0.5.0=0eea5d9)
out="$RUN_DIR/speed-results"  # not $RUN_DIR/speed: that is the cluster
report="${SPEED_REPORT:-$REPO/docs/speed-$EXTENSION_VERSION.md}"
rm -rf "$out" && mkdir -p "$out" && chmod 755 "$out"

labels=() dirs=()
for r in "${releases[@]}"; do
    labels+=("${r%%=*}") dirs+=("$(release_build "${r#*=}")")
done
install_extension release >/dev/null
this="$out/this-build"
mkdir -p "$this/lib" "$this/extension"
cp "$RUN_DIR/install-$PG_MAJOR$("$PG_CONFIG" --pkglibdir)/pg_shard_id.so" "$this/lib/"
cp "$RUN_DIR/install-$PG_MAJOR$("$PG_CONFIG" --sharedir)"/extension/pg_shard_id* "$this/extension/"
labels+=("this build") dirs+=("$this")
# the reference generators (nextval() + the clock, with no guard and with one spinlock), timed in
# the same runs: the cap, measured
build_reference_ids "$out"

# bench_cluster: a fresh cluster with the installed build preloaded and database bench
bench_cluster() {
    start_cluster speed yes "synchronous_commit = off" "jit = off"
    createdb bench
    q -d bench -c "SET client_min_messages = warning" -c "CREATE EXTENSION pg_shard_id" \
        -c "CREATE SEQUENCE plain_seq" -c "CREATE SEQUENCE borrow_seq" -c "CREATE SEQUENCE ins_seq"
    local f
    for f in reference_unguarded_id reference_one_lock_id; do
        q -d bench -c "CREATE FUNCTION $f(regclass, integer) RETURNS bigint VOLATILE STRICT
                       LANGUAGE c AS '$out/reference_ids.so', '$f'"
    done
}

for round in $(seq 1 "${SPEED_ROUNDS:-4}"); do
    order=("${!labels[@]}")
    [ $((round % 2)) = 0 ] && order=($(printf '%s\n' "${order[@]}" | tac))
    for i in "${order[@]}"; do
        install_release_build "${dirs[$i]}"
        bench_cluster
        python3 bench/speed.py generation "${labels[$i]}" "$round" "$out/generation-$i-$round.json"
        stop_cluster speed
    done
done

say "inserts (this build)"
install_release_build "$this"
bench_cluster
python3 bench/speed.py inserts "$out/inserts.json"
stop_cluster speed
python3 bench/speed.py clock "$out/clock.json"

say "instructions per id (callgrind)"
bash bench/cost_compare.sh "${releases[@]}" | tee "$out/instructions.txt"
python3 - "$out/instructions.txt" "$out/instructions.json" <<'PY'
import json, re, sys
rows = re.findall(r"^  (.+?) \([0-9a-f]{7,40}\) ([0-9.]+)$", open(sys.argv[1]).read(), re.M)
refs = re.findall(r"^  (unguarded \(C\)|one lock \(C\)) ([0-9.]+)$", open(sys.argv[1]).read(), re.M)
json.dump({"instructions": {label: float(n) for label, n in rows},
           "reference_instructions": {label: float(n) for label, n in refs}}, open(sys.argv[2], "w"))
PY
python3 bench/speed.py report "$report" "$out"/generation-*.json "$out/inserts.json" "$out/clock.json" \
    "$out/instructions.json"
say "wrote $report"
cat "$report"
