#!/usr/bin/env bash
# Inserts through next_shard_id's DEFAULT against bigserial, an identity column, pgEdge's
# snowflake.nextval() (built by bench/pgedge.sh), Instagram's PL/pgSQL next_id() (bench/generators.sql)
# and the naive port in C without a guard (bench/reference_ids.c: nextval() + a clock read + the
# shifts, in its own library: what calling any C generator costs) (issue 40), with
# synchronous_commit off and on: pgbench, prepared, 2 clients, the six tables interleaved in one
# run (every transaction inserts into one of them at random, so all six meet the same machine at
# the same moments), GAP_RUNS runs of GAP_SECONDS each; next_shard_id's speed against each is the
# other's mean latency over next_shard_id's, one ratio per run, reported as the median with its
# distribution-free 95 % interval. Then, per table alone (GAP_SECONDS, same settings), what each
# insert writes and waits for: WAL records, bytes, writes and syncs per insert (pg_stat_wal), and
# the wait events sampled from pg_stat_activity every 10 ms.
#   bench/insert_gap.sh                the release build installed in the selected PostgreSQL
#   GAP_RUNS=8 GAP_SECONDS=5           (defaults)
#   GAP_CLIENTS="2 1"                  pgbench clients, one section per number (default 2)
#   GAP_COMMIT="off on"                synchronous_commit settings (default both)
#   GAP_CACHE=32                       next_shard_id's sequence with that CACHE (default 1), and a
#                                      seventh table: bigserial's DEFAULT on a sequence with it too
# Prints markdown. Run it on an otherwise idle machine.
source "$(dirname "$0")/../scripts/lib.sh"
source "$REPO/bench/pgedge.sh"
stop_clusters_at_exit
ensure_pgedge
build_reference_ids "$RUN_DIR/gap-reference"
export REPO GAP_CACHE="${GAP_CACHE:-1}" GAP_RUNS="${GAP_RUNS:-8}" GAP_SECONDS="${GAP_SECONDS:-5}" GAP_CLIENTS="${GAP_CLIENTS:-2}"
echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC'), PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}'), $(nproc) CPUs, $GAP_RUNS interleaved runs of $GAP_SECONDS s per setting; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for commit in ${GAP_COMMIT:-off on}; do
    start_cluster gap yes "synchronous_commit = $commit" "jit = off" "snowflake.node = 1" >/dev/null
    createdb bench
    psql -X -q -d bench -c "SET client_min_messages = warning" -c "CREATE EXTENSION pg_shard_id" \
        -c "CREATE EXTENSION snowflake" -c "CREATE SEQUENCE ins_seq CACHE $GAP_CACHE" -c "CREATE SEQUENCE pgedge_seq" \
        -c "CREATE SEQUENCE serial_cache_seq CACHE $GAP_CACHE" \
        -c "CREATE SEQUENCE ref_seq" \
        -c "CREATE FUNCTION reference_unguarded_id(regclass, integer) RETURNS bigint VOLATILE STRICT
            LANGUAGE c AS '$RUN_DIR/gap-reference/reference_ids.so', 'reference_unguarded_id'" >/dev/null
    psql -X -q -d bench -f "$REPO/bench/generators.sql" >/dev/null
    echo
    echo "### synchronous_commit = $commit"
    echo
    python3 - <<'EOF'
import os, statistics, subprocess, sys, threading, time
sys.path.insert(0, os.path.join(os.environ["REPO"], "bench"))
from benchlib import insert_script, interleaved_latencies, median_ci, psql

runs, seconds = int(os.environ["GAP_RUNS"]), int(os.environ["GAP_SECONDS"])
tables = {
    "next_shard_id": insert_script("ins_shard", "id bigint PRIMARY KEY DEFAULT next_shard_id('ins_seq', 5)"),
    "bigserial": insert_script("ins_bigserial", "id bigserial PRIMARY KEY"),
    "identity column": insert_script("ins_identity", "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY"),
    "pgEdge snowflake": insert_script("ins_pgedge", "id bigint PRIMARY KEY DEFAULT snowflake.nextval('pgedge_seq')"),
    "Instagram PL/pgSQL": insert_script("ins_insta", "id bigint PRIMARY KEY DEFAULT insta5.next_id()"),
    "naive C, no guard": insert_script("ins_ref", "id bigint PRIMARY KEY DEFAULT reference_unguarded_id('ref_seq', 5)"),
}
cache = int(os.environ["GAP_CACHE"])
if cache != 1:
    tables[f"bigserial, CACHE {cache}"] = insert_script(
        "ins_serial_cache", "id bigint PRIMARY KEY DEFAULT nextval('serial_cache_seq')")
    print(f"next_shard_id's sequence has CACHE {cache}; the others CACHE 1 but the last table's.\n")
names = list(tables)
print("| clients | next_shard_id against | median ratio (its latency / ours) | 95 % interval | mean latency, ours / theirs (µs) |")
print("|---:|---|---:|---:|---:|")
for clients in (int(c) for c in os.environ["GAP_CLIENTS"].split()):
    interleaved_latencies([tables[n] for n in names], 2, clients=clients)  # warm-up
    mixed = [interleaved_latencies([tables[n] for n in names], seconds, clients=clients) for _ in range(runs)]
    for i, against in enumerate(names[1:], 1):
        ratios = [run[i] / run[0] for run in mixed]
        low, high, coverage = median_ci(ratios)
        print(f"| {clients} | {against} | {statistics.median(ratios):.3f} | {low:.3f}-{high:.3f} ({coverage:.0%}) | "
              f"{statistics.median(r[0] for r in mixed):.2f} / {statistics.median(r[i] for r in mixed):.2f} |")
print()
print("Each table alone, %d s (what an insert writes and waits for; the rates of these single runs are not a comparison):" % seconds)
print()
print("| table | WAL records per insert | WAL bytes per insert | WAL writes per 1,000 | WAL syncs per 1,000 | wait events sampled (share of samples) |")
print("|---|---:|---:|---:|---:|---|")
for name in names:
    table, script = tables[name]
    psql(f"TRUNCATE {table}; CHECKPOINT")
    psql("SELECT pg_stat_reset_shared('wal')")
    waits, stop = {}, threading.Event()
    def sample():
        while not stop.is_set():
            for row in psql("SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity "
                            "WHERE application_name = 'pgbench' AND state = 'active'").splitlines():
                waits[row] = waits.get(row, 0) + 1
            time.sleep(0.01)
    sampler = threading.Thread(target=sample)
    sampler.start()
    out = subprocess.run(["pgbench", "-n", "-M", "prepared", "-c", "2", "-j", "2", "-T", str(seconds),
                          "-f", script, "bench"], check=True, capture_output=True, text=True).stdout
    stop.set()
    sampler.join()
    inserts = int(psql(f"SELECT count(*) FROM {table}"))
    rec, byt, wr, sy = (int(x) for x in psql(
        "SELECT wal_records, wal_bytes, wal_write, wal_sync FROM pg_stat_wal").split("|"))
    total = sum(waits.values()) or 1
    top = ", ".join(f"{k} {v / total:.0%}" for k, v in sorted(waits.items(), key=lambda kv: -kv[1])[:4])
    print(f"| {name} | {rec / inserts:.3f} | {byt / inserts:.1f} | "
          f"{1000 * wr / inserts:.2f} | {1000 * sy / inserts:.2f} | {top} |")
EOF
    stop_cluster gap
done
