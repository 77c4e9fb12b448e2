#!/usr/bin/env bash
# The benchmark suite (docs/benchmarks.md): for each PostgreSQL in PG_VERSIONS (default "15 16 17 18"),
# starts its own throwaway cluster with a release build preloaded and measures; then writes one
# report with the versions side by side (docs/benchmarks.md, docs/benchmarks.png and the
# docs/benchmarks-<version>.json it was made from).
#   scripts/bench.sh           full run (about 15 minutes per version; run it on an idle machine)
#   scripts/bench.sh --smoke   tiny sizes, writes to $RUN_DIR/bench-smoke/ only (CI runs this)
#   BENCH_OUT_DIR=dir          write the report there instead of docs/
#   BENCH_INSERT_ROUNDS=n, BENCH_CLOSE_PAIRS=n   fewer insert rounds (5) and close pairs (16), for
#                              a shorter full run; the report says how many it used
source "$(dirname "$0")/lib.sh"
stop_clusters_at_exit
cd "$REPO"
smoke=""
[ "${1:-}" = --smoke ] && smoke="--smoke"
out_dir="${BENCH_OUT_DIR:-$REPO/docs}"
[ -n "$smoke" ] && out_dir="$RUN_DIR/bench-smoke" && mkdir -p "$out_dir"

python3 -c "import matplotlib" 2>/dev/null || pip install --quiet matplotlib
results=()
for version in ${PG_VERSIONS:-15 16 17 18}; do
    select_pg "$version"
    ensure_setup
    install_extension release
    # synchronous_commit = off: so that inserts measure the generators, not the disk's fsync;
    # jit = off: so that a one-off compile does not distort the 2M-row queries;
    # wal_keep_size: keeps the WAL of a whole section, where bench.py counts the lease records
    start_cluster bench yes "synchronous_commit = off" "jit = off" "wal_keep_size = '16GB'"
    createdb bench
    # a mask key for section 5 (masked ids), owner-only in the data directory
    as_pg sh -c "umask 077 && printf 'key 1 %s\\ncurrent 1\\n' '$(printf '5a%.0s' $(seq 32))' > '$PGHOST/data/pg_shard_id.keys'"
    psql -X -q -d bench -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id" \
        -f bench/generators.sql
    say "benchmarking PostgreSQL $PG_MAJOR, ${smoke:-full size}"
    python3 bench/bench.py $smoke --out "$out_dir/benchmarks-$PG_MAJOR.json"
    results+=("$out_dir/benchmarks-$PG_MAJOR.json")
    stop_cluster bench
    # the SQL edition beside the native one, Instagram's function, nextval() (and uuidv7() on 18):
    # docs/managed.md#cost (its own cluster; smoke: tiny sizes)
    say "the SQL edition's cost, PostgreSQL $PG_MAJOR"
    ensure_venv "$REPO/target/guarantee/venv" "$REPO/tests/guarantee/requirements.txt"
    PG_BIN="$PG_BIN" PG_SHARD_ID_RUN_DIR="$RUN_DIR" "$REPO/target/guarantee/venv/bin/python" bench/sql_edition.py \
        $([ -n "$smoke" ] && echo "--ids 5000 --seconds 1") | tee "$out_dir/sql_edition-$PG_MAJOR.md"
done
python3 bench/report.py "$out_dir/benchmarks.md" "$out_dir/benchmarks.png" "${results[@]}"
say "wrote $out_dir/benchmarks.md and benchmarks.png"
