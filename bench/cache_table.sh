#!/usr/bin/env bash
# Which sequence CACHE to recommend (issue 40): ids/s under pgbench (one id per transaction,
# prepared protocol, custom script `SELECT <generator>;`) for sequences with CACHE 1, 32 and 1024 at
# 1, 2, 4 and 8 clients, CACHE_RUNS runs of CACHE_T seconds each (median and range), in a cluster
# started with shared_preload_libraries = pg_shard_id. Generators: nextval(), pgEdge's
# snowflake.nextval() (it ignores CACHE: measured on the CACHE 1 sequence only), next_shard_id with
# pg_shard_id.overflow = wait (the default) and with borrow. Every run gets a new sequence (a
# borrow run's lead would otherwise carry into the next runs). For next_shard_id the guard's
# statistics (pg_shard_id_stats, reset before each run) are read after each run: waits and
# wait_seconds, exhausted_ms, and the largest lead_ms of a sampler reading it every 100 ms during
# the run (lead_ms is the lead at the moment it is read).
#   bench/cache_table.sh                                 about 8 minutes with the defaults
#   CACHE_T=4 CACHE_RUNS=3 CACHE_CLIENTS="1 2 4 8" CACHE_SIZES="1 32 1024" bench/cache_table.sh
#   CACHE_OUT=file.tsv                                   also keep the raw runs (one line a run)
# pgbench runs on the same machine as the server (2 vCPUs here): from 2 clients on, client and
# server share the cores. Builds and installs pgEdge's snowflake first when missing
# (bench/pgedge.sh). Prints markdown.
source "$(dirname "$0")/../scripts/lib.sh"
source "$REPO/bench/pgedge.sh"
stop_clusters_at_exit
T="${CACHE_T:-4}"
RUNS="${CACHE_RUNS:-3}"
CLIENTS="${CACHE_CLIENTS:-1 2 4 8}"
SIZES="${CACHE_SIZES:-1 32 1024}"
ensure_pgedge
start_cluster cachetab yes "snowflake.node = 1"
dir="$RUN_DIR/cachetab"
raw="${CACHE_OUT:-$dir/runs.tsv}"
: >"$raw"
q -c "CREATE EXTENSION pg_shard_id; CREATE EXTENSION snowflake;"
SEQ_N=0

# bench LABEL CACHE CLIENTS EXPR [overflow]: RUNS pgbench runs of SELECT EXPR, $SEQ in EXPR being
# each run's own new sequence (made with that CACHE and given its first id); one line a run in $raw:
# label cache clients run ids/s waits wait_seconds exhausted_ms max_lead_ms
bench() {
    local label="$1" cache="$2" clients="$3" expr="$4" overflow="${5:-wait}" r tps stats lead
    for r in $(seq 1 "$RUNS"); do
        # a fresh sequence for every run: a borrow run's lead stays in the guard of its sequence
        # (and would make the next runs on it wait), and a sequence's first id pays once
        SEQ_N=$((SEQ_N + 1))
        q -c "CREATE SEQUENCE b$SEQ_N CACHE $cache; SELECT ${expr//\$SEQ/b$SEQ_N};" >/dev/null
        echo "SELECT ${expr//\$SEQ/b$SEQ_N};" >"$dir/script.sql"
        q -c "SELECT pg_shard_id_stats_reset();" >/dev/null
        # the lead sampler: one session, a row every 100 ms, for as long as pgbench runs
        printf '%s\n' "SELECT max(lead_ms) FROM pg_shard_id_stats WHERE sequence = 'b$SEQ_N'::regclass" \
            '\watch 0.1' >"$dir/lead.sql"
        psql -X -q -At -f "$dir/lead.sql" >"$dir/lead.txt" 2>/dev/null &
        local sampler=$!
        tps="$(PGOPTIONS="-c pg_shard_id.overflow=$overflow" pgbench -n -M prepared -f "$dir/script.sql" \
            -c "$clients" -j "$clients" -T "$T" 2>&1 | sed -n 's/^tps = \([0-9.]*\).*/\1/p')"
        kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true
        lead="$( (grep -aE "^-?[0-9]+$" "$dir/lead.txt" || true) | sort -n | tail -1)"
        stats="$(q -F ' ' -c "SELECT coalesce(sum(waits), 0), round(coalesce(sum(wait_seconds), 0)::numeric, 3),
            coalesce(sum(exhausted_ms), 0) FROM pg_shard_id_stats WHERE sequence = 'b$SEQ_N'::regclass")"
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$cache" "$clients" "$r" "${tps:-0}" \
            "${stats// /$'\t'}" "${lead:-0}" >>"$raw"
    done
}
say "pgbench, $RUNS x ${T} s per configuration, PostgreSQL $PG_MAJOR, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for k in $CLIENTS; do
    first="${SIZES%% *}"
    bench "pgEdge snowflake.nextval" "$first" "$k" "snowflake.nextval('\$SEQ')"
    for c in $SIZES; do
        bench "nextval()" "$c" "$k" "nextval('\$SEQ')"
        bench "next_shard_id, wait" "$c" "$k" "next_shard_id('\$SEQ', 1)" wait
        bench "next_shard_id, borrow" "$c" "$k" "next_shard_id('\$SEQ', 1)" borrow
    done
    say "  $k clients done, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done

python3 - "$raw" "$T" "$RUNS" <<'EOF'
import statistics, sys
from collections import defaultdict
raw, t, runs = sys.argv[1], sys.argv[2], sys.argv[3]
rows = defaultdict(list)
for l in open(raw):
    label, cache, clients, _, tps, waits, wsec, exh, lead = l.rstrip('\n').split('\t')
    rows[(label, int(cache), int(clients))].append((float(tps), int(waits), float(wsec), int(exh), int(lead)))
clients = sorted({k[2] for k in rows})
order = ['nextval()', 'pgEdge snowflake.nextval', 'next_shard_id, wait', 'next_shard_id, borrow']
keys = sorted({k[:2] for k in rows}, key=lambda k: (order.index(k[0]), k[1]))
print(f'\n### ids/s, median of {runs} pgbench runs of {t} s (min-max), one id per transaction\n')
print('| generator | CACHE | ' + ' | '.join(f'{c} client{"s" if c > 1 else ""}' for c in clients) + ' |')
print('|---|---:|' + '---:|' * len(clients))
for label, cache in keys:
    cells = []
    for c in clients:
        v = [r[0] for r in rows.get((label, cache, c), [])]
        cells.append(f'{statistics.median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f})' if v else '-')
    name = label + (' (ignores CACHE)' if label.startswith('pgEdge') else '')
    print(f'| {name} | {cache} | ' + ' | '.join(cells) + ' |')
print(f'\n### next_shard_id: the guard\'s statistics per run (median of {runs}; max over runs for the lead)\n')
print('| overflow | CACHE | clients | ids/s | waits | wait s | exhausted_ms | exhausted_ms per 1,000 ids | max lead_ms (sampled) |')
print('|---|---:|---:|---:|---:|---:|---:|---:|---:|')
for label, cache in keys:
    if not label.startswith('next_shard_id'):
        continue
    for c in clients:
        v = rows.get((label, cache, c))
        if not v:
            continue
        med = lambda i: statistics.median(r[i] for r in v)
        ids = med(0) * float(t)
        print(f'| {label.split(", ")[1]} | {cache} | {c} | {med(0):,.0f} | {med(1):,.0f} | {med(2):.3f} | '
              f'{med(3):,.0f} | {1000 * med(3) / ids if ids else 0:.1f} | {max(r[4] for r in v)} |')
EOF
