#!/usr/bin/env bash
# The benchmark suite (docs/benchmarks.md): starts its own throwaway cluster with a release build
# preloaded, measures, and writes docs/benchmarks.md and docs/benchmarks.png.
#   scripts/bench.sh           full run (about 15 minutes; run it on an idle machine)
#   scripts/bench.sh --smoke   tiny sizes, writes to $RUN_DIR/bench-smoke/ only (CI runs this)
source "$(dirname "$0")/lib.sh"
stop_clusters_at_exit
cd "$REPO"
smoke=""
[ "${1:-}" = --smoke ] && smoke="--smoke"

ensure_setup
python3 -c "import matplotlib" 2>/dev/null || pip install --quiet matplotlib
install_extension release
# synchronous_commit = off: so that inserts measure the generators, not the disk's fsync
start_cluster bench yes "synchronous_commit = off"
createdb bench
psql -X -q -d bench -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id" \
    -f bench/generators.sql
out_dir="$REPO/docs"
[ -n "$smoke" ] && out_dir="$RUN_DIR/bench-smoke" && mkdir -p "$out_dir"
say "benchmarking ${smoke:-full size}"
python3 bench/bench.py $smoke --out "$out_dir/benchmarks.json"
python3 bench/report.py "$out_dir/benchmarks.json" "$out_dir/benchmarks.md" "$out_dir/benchmarks.png"
stop_cluster bench
say "wrote $out_dir/benchmarks.md and benchmarks.png"
