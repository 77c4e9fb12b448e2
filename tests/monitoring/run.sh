#!/usr/bin/env bash
# Monitoring test: the recipe of monitoring/README.md end to end, with Debian's packages: a
# throwaway cluster with the extension, prometheus-postgres-exporter on it with
# monitoring/queries.yaml, Prometheus scraping the exporter every second with monitoring/alerts.yaml
# loaded. Ids are drawn through a column DEFAULT, then in a burst over 1,024 ids/ms from one
# sequence (one session's select list, `wait` mode); the metrics are read back through Prometheus's
# HTTP API: the ids counter equals the ids drawn; waits, wait time and exhausted milliseconds
# appear with the burst. Also: rows of two dropped databases with the same labels (one series, and
# the scrape still succeeds); shard_id_check()'s rows as series, with a failed row (rows loaded
# ahead of the clock into a live table) and a warning (one shard number in two sequences' DEFAULTs)
# made for real and their alerts firing or pending (issue 52); a second exporter on a database
# without the extension (what operators see there); the alerting rules checked and unit-tested
# with promtool. As production runs it (issue 58): every exporter connects as a role that is only
# a member of pg_monitor, one per database, and two databases have the extension (postgres and
# shop, both scraped): each sequence's series, the guard's and the dropped databases' are
# exported once, the check rows once per database.
#
#   MONITORING_STANDIN=1       no build of pg_shard_id: a plain SQL view of the same columns
#                              (tests/monitoring/standin.sql) counts the draws; plumbing only
#   MONITORING_CHART=out.png   then several bursts (wait, wait, borrow) with pauses, drawn by
#                              monitoring/chart.py (matplotlib, pinned in monitoring/requirements.txt,
#                              in a virtualenv in $PG_WHEEL_CACHE/monitoring-venv)
#
# Installs prometheus and prometheus-postgres-exporter from Debian when they are missing (without
# Recommends); runs its own instances on free ports, never the packages' services.
# Needs a build of pg_shard_id installed (scripts/test.sh does that), unless MONITORING_STANDIN=1.
# Ends with "monitoring: N passed, M failed"; exits non-zero if any failed.
source "$(dirname "$0")/../../scripts/lib.sh"
HERE="$REPO/tests/monitoring"
STANDIN="${MONITORING_STANDIN:-}"
CHART="${MONITORING_CHART:-}"
[ -z "$CHART" ] || CHART="$(realpath -m "$CHART")"
WORK="$RUN_DIR/monitoring"
SEL='datname="postgres",sequence="s"'

# the daemons this script started (exporters, Prometheus), stopped at exit before the clusters
DAEMONS=()
stop_all() {
    local p c
    for p in "${DAEMONS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${DAEMONS[@]}"; do wait "$p" 2>/dev/null || true; done
    for c in "${STARTED_CLUSTERS[@]}"; do stop_cluster "$c"; done
}
trap stop_all EXIT

# wait_http URL SECONDS: until URL answers 200
wait_http() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        curl -fs -o /dev/null "$1" && return 0
        sleep 0.1
    done
    echo "!!! no answer from $1 in $2 s" >&2
    return 1
}

# exporter NAME DBNAME: starts prometheus-postgres-exporter on DBNAME of the cluster, on a free
# port (in EXPORTER_PORT), logging to $WORK/NAME.log, connected as the role exporter (a member of
# pg_monitor, nothing else: monitoring/README.md)
exporter() {
    EXPORTER_PORT="$(free_port)"
    DATA_SOURCE_NAME="host=$PGHOST port=$PGPORT user=exporter dbname=$2 sslmode=disable" \
        prometheus-postgres-exporter --web.listen-address="127.0.0.1:$EXPORTER_PORT" \
        --extend.query-path="$REPO/monitoring/queries.yaml" >"$WORK/$1.log" 2>&1 &
    EXPORTER_PID=$!
    DAEMONS+=("$!")
    wait_http "http://127.0.0.1:$EXPORTER_PORT/metrics" 20
}

# promql EXPR: the value of the first sample of an instant query ("" when there is none)
promql() {
    curl -fsS --get "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" |
        python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'
}
# wait_for EXPR VALUE SECONDS: until Prometheus has scraped VALUE for EXPR; prints the last value
wait_for() {
    local i v=""
    for ((i = 0; i < $3 * 4; i++)); do
        v="$(promql "$1")"
        [ "$v" = "$2" ] && break
        sleep 0.25
    done
    echo "$v"
}
positive() { python3 -c 'import sys; print("yes" if sys.argv[1] and float(sys.argv[1]) > 0 else "no: " + sys.argv[1])' "$1"; }

ensure_debian_packages prometheus prometheus-postgres-exporter
rm -rf "$WORK" && mkdir -p "$WORK"
say "$(prometheus-postgres-exporter --version 2>&1 | head -1), $(prometheus --version 2>&1 | head -1)"
check "promtool check rules monitoring/alerts.yaml" \
    "$(promtool check rules "$REPO/monitoring/alerts.yaml" >"$WORK/promtool.log" 2>&1 && echo ok)" ok
check "promtool test rules: the alerts fire on made-up series" \
    "$(promtool test rules "$HERE/alerts_test.yaml" >>"$WORK/promtool.log" 2>&1 && echo ok)" ok

DRAWN=0
if [ -n "$STANDIN" ]; then
    say "a cluster with the stand-in view (MONITORING_STANDIN=1: no pg_shard_id, plumbing only)"
    start_cluster mon no "fsync = off"
    q -f "$HERE/standin.sql" -c "CREATE SEQUENCE s"
    # draw N [MODE]: N ids from s, counted by the stand-in as the guard would
    draw() { q -c "CALL standin_draw('s', $1, '${2:-wait}')"; DRAWN=$((DRAWN + $1)); }
    insert_rows() { draw "$1"; } # no DEFAULT here: drawn as above
    INSTALLED=0
else
    say "a cluster with pg_shard_id (PostgreSQL $PG_MAJOR)"
    start_cluster mon yes "fsync = off"
    q -c "SET client_min_messages = warning" -c "CREATE EXTENSION pg_shard_id" \
      -c "CREATE SEQUENCE s" \
      -c "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 1))"
    # draw N [MODE]: N ids from s in one session's select list: faster than 1,024 ids/ms
    draw() {
        q -c "SET pg_shard_id.overflow = ${2:-wait}" \
          -c "SELECT count(next_shard_id('s', 1)) FROM generate_series(1, $1)" >/dev/null
        DRAWN=$((DRAWN + $1))
    }
    # insert_rows N: N rows into t, ids from the column DEFAULT
    insert_rows() { q -c "INSERT INTO t SELECT FROM generate_series(1, $1)"; DRAWN=$((DRAWN + $1)); }
    INSTALLED=1
fi
q -c "CREATE DATABASE noext" -c "CREATE DATABASE shop" -c "CREATE ROLE exporter LOGIN" -c "GRANT pg_monitor TO exporter"
# a second database with the extension and a sequence drawn from, exported by its own data source
if [ -n "$STANDIN" ]; then
    q -d shop -f "$HERE/standin.sql" -c "CREATE SEQUENCE orders_seq" -c "CALL standin_draw('orders_seq', 500)"
else
    q -d shop -c "SET client_min_messages = warning" -c "CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE orders_seq" \
      -c "SELECT count(next_shard_id('orders_seq', 2)) FROM generate_series(1, 500)" >/dev/null
fi

say "exporters (queries.yaml, as a pg_monitor member) on postgres, shop and noext (no extension); Prometheus, 1 s scrapes"
exporter exporter postgres
MAIN_EXPORTER="127.0.0.1:$EXPORTER_PORT"
exporter exporter-shop shop
SHOP_EXPORTER="127.0.0.1:$EXPORTER_PORT"
exporter exporter-noext noext
NOEXT_EXPORTER="127.0.0.1:$EXPORTER_PORT" NOEXT_PID="$EXPORTER_PID"
PROM_PORT="$(free_port)"
cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $REPO/monitoring/alerts.yaml
scrape_configs:
  - job_name: postgres
    static_configs:
      - targets: ['$MAIN_EXPORTER', '$SHOP_EXPORTER']
EOF
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/prometheus-data" \
    --web.listen-address="127.0.0.1:$PROM_PORT" >"$WORK/prometheus.log" 2>&1 &
DAEMONS+=("$!")
wait_http "http://127.0.0.1:$PROM_PORT/-/ready" 30
check "Prometheus scrapes both exporters" "$(wait_for 'sum(up{job="postgres"})' 2 20)" 2

say "200,000 ids through the column DEFAULT"
insert_rows 200000
check "ids_total after the inserts (through Prometheus)" \
    "$(wait_for "pg_shard_id_ids_total{$SEL}" "$DRAWN" 15)" "$DRAWN"
waits_before="$(promql "pg_shard_id_waits_total{$SEL}")"
wait_s_before="$(promql "pg_shard_id_wait_seconds_total{$SEL}")"
exhausted_before="$(promql "pg_shard_id_exhausted_seconds_total{$SEL}")"
burst_start="$(date +%s)"

if [ -z "$CHART" ]; then
    say "a burst: 2,000,000 ids from one session, wait mode"
    t0="$(date +%s%N)"
    draw 2000000
    echo "  $(((2000000 * 1000000) / ($(date +%s%N) - t0))) ids/ms on average over the burst"
else
    say "bursts for the chart: 2M wait, 4M wait, 3M borrow, with pauses"
    sleep 3; draw 2000000; sleep 4; draw 4000000; sleep 4; draw 3000000 borrow; sleep 6
fi
burst_end="$(date +%s)"

check "ids_total equals the ids drawn (through Prometheus)" \
    "$(wait_for "pg_shard_id_ids_total{$SEL}" "$DRAWN" 15)" "$DRAWN"
check "... and the view says the same" \
    "$(q -c "SELECT ids FROM pg_shard_id_stats WHERE sequence = 's'::regclass")" "$DRAWN"
sleep 1.5 # a scrape after the one that saw the last id
waits="$(promql "pg_shard_id_waits_total{$SEL}")"
echo "  waits $waits_before -> $waits, wait seconds $wait_s_before -> $(promql "pg_shard_id_wait_seconds_total{$SEL}"), exhausted seconds $exhausted_before -> $(promql "pg_shard_id_exhausted_seconds_total{$SEL}")"
echo "  the exporter's scrapes took up to $(promql 'max_over_time(pg_exporter_last_scrape_duration_seconds[5m])') s"
check "waits appeared with the burst" "$(positive "$(promql "pg_shard_id_waits_total{$SEL} - $waits_before")")" yes
check "wait time appeared with the burst" \
    "$(positive "$(promql "pg_shard_id_wait_seconds_total{$SEL} - $wait_s_before")")" yes
check "exhausted milliseconds appeared with the burst" \
    "$(positive "$(promql "pg_shard_id_exhausted_seconds_total{$SEL} - $exhausted_before")")" yes
check "waits/s over the burst (rate) is positive" \
    "$(positive "$(promql "max_over_time(rate(pg_shard_id_waits_total{$SEL}[5s])[5m:1s])")")" yes
check "the guard table's slots (pg_shard_id.max_sequences) are exported" \
    "$(promql 'pg_shard_id_guard_slots{datname="postgres"}')" "$( [ -n "$STANDIN" ] && echo 64 || echo 8192)"
check "... and the slots in use (at least s's)" "$(positive "$(promql 'pg_shard_id_guard_slots_in_use{datname="postgres"}')")" yes
check "lead_seconds is there" "$(promql "count(pg_shard_id_lead_seconds{$SEL} >= 0)")" 1
check "clock_steps_total is 0" "$(promql "pg_shard_id_clock_steps_total{$SEL}")" 0
check "lease_writes_total is there" "$(promql "count(pg_shard_id_lease_writes_total{$SEL})")" 1
check "last_issued_timestamp_seconds is within 10 s of the clock" \
    "$(promql "count(abs(pg_shard_id_last_issued_timestamp_seconds{$SEL} - time()) < 10)")" 1
check "pg_shard_id_extension_installed" "$(promql 'pg_shard_id_extension_installed{datname="postgres"}')" "$INSTALLED"
check "the exporters' scrapes have no error (as pg_monitor members, both databases)" \
    "$(promql 'max(max_over_time(pg_exporter_last_scrape_error[5m]))')" 0
check "two databases, two exporters: each sequence's series exported once (s, orders_seq)" \
    "$(promql 'count(pg_shard_id_ids_total{sequence="s"})') $(promql 'count(pg_shard_id_ids_total{datname="shop",sequence="orders_seq"})')" "1 1"
# (the other database's data source sees the same guard table, its sequences by oid: no such
# series may come from it)
check "... each database's sequences by its own database's data source only" \
    "$(curl -fsS --get "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode 'query=pg_shard_id_ids_total' |
       python3 -c 'import json, sys
print(sorted({(r["metric"]["datname"], r["metric"]["instance"]) for r in json.load(sys.stdin)["data"]["result"]}))')" \
    "[('postgres', '$MAIN_EXPORTER'), ('shop', '$SHOP_EXPORTER')]"
check "... and the orders_seq counter is its 500 ids" "$(promql 'pg_shard_id_ids_total{sequence="orders_seq"}')" 500
check "two databases: the guard's series exported once (by the reporting database, postgres)" \
    "$(promql 'count(pg_shard_id_guard_slots)') $(promql 'count(pg_shard_id_guard_slots{datname="postgres"})')" "1 1"
check "two databases: the check rows once per database" \
    "$(wait_for 'count(pg_shard_id_check_status{check="preload"})' 2 10)" 2
check "the alerting rules evaluate on the scraped series" \
    "$(curl -fsS "http://127.0.0.1:$PROM_PORT/api/v1/rules" | python3 -c 'import json, sys
rules = [r for g in json.load(sys.stdin)["data"]["groups"] for r in g["rules"]]
print(len(rules), sorted({r["health"] for r in rules}))')" "9 ['ok']"
# shellcheck disable=SC2016 # the backquotes are the README's code fences
mapfile -t exprs < <(sed -n '/^```promql$/,/^```$/p' "$REPO/monitoring/README.md" | grep -v '^```\|^#')
evaluated=0
for e in "${exprs[@]}"; do
    curl -fsS -o /dev/null --get "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$e" &&
        evaluated=$((evaluated + 1))
done
check "the PromQL expressions of monitoring/README.md evaluate" "$evaluated of ${#exprs[@]}" "10 of 10"
check "the counters are typed counter" \
    "$(curl -fsS "http://$MAIN_EXPORTER/metrics" | grep -c '^# TYPE pg_shard_id_[a-z_]*_total counter$')" 7

say "two dropped databases made from one template: rows with the same labels"
if [ -n "$STANDIN" ]; then
    q -c "INSERT INTO standin_counters (database, sequence_oid, ids, last_issued)
          SELECT d, 99999, 1, now() FROM unnest('{4000000001,4000000002}'::oid[]) d"
else
    q -c "CREATE DATABASE tmpl"
    q -d tmpl -c "SET client_min_messages = warning" -c "CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE x"
    for d in d1 d2; do
        q -c "CREATE DATABASE $d TEMPLATE tmpl"
        q -d "$d" -c "SELECT next_shard_id('x', 1)" >/dev/null
    done
    q -c "DROP DATABASE d1" -c "DROP DATABASE d2"
fi
dup_oid="$(q -c "SELECT sequence_oid FROM pg_shard_id_stats WHERE datname IS NULL
                 GROUP BY 1 HAVING count(*) = 2")"
check "the view has 2 rows with no datname and one sequence_oid" "$([ -n "$dup_oid" ] && echo yes)" yes
check "... one series for both (their ids add up)" \
    "$(wait_for "pg_shard_id_ids_total{datname=\"\",sequence=\"$dup_oid\"}" 2 10)" 2
check "... exported once, by the reporting database alone" \
    "$(promql "count(pg_shard_id_ids_total{datname=\"\",sequence=\"$dup_oid\"})")" 1
check "... and Prometheus still scrapes the exporters" "$(promql 'min(min_over_time(up{job="postgres"}[5m]))')" 1

say "shard_id_check() in Prometheus: a failing row made for real, and its alert"
if [ -n "$STANDIN" ]; then
    q -c "UPDATE standin_check_rows SET status = 'failed', detail = 'public.loaded.id holds ids up to ...' WHERE \"check\" = 'data_floor'" \
      -c "UPDATE standin_check_rows SET status = 'warning', detail = 'shard 11: public.ta.id, public.tb.id' WHERE \"check\" = 'shard_numbers'"
else
    # rows loaded ahead of the clock into a table whose sequence is already issuing (the data
    # floor's documented limit: failed), and one shard number in two sequences' DEFAULTs, as two
    # writers with one node number would have (warning)
    q -c "CREATE SEQUENCE loaded_s" \
      -c "CREATE TABLE loaded (id bigint PRIMARY KEY DEFAULT next_shard_id('loaded_s', 9))" \
      -c "INSERT INTO loaded DEFAULT VALUES" \
      -c "INSERT INTO loaded VALUES (shard_id_compose(now() + interval '5 minutes', 9, 0))" \
      -c "CREATE SEQUENCE a" -c "CREATE SEQUENCE b" \
      -c "CREATE TABLE ta (id bigint PRIMARY KEY DEFAULT next_shard_id('a', 11))" \
      -c "CREATE TABLE tb (id bigint PRIMARY KEY DEFAULT next_shard_id('b', 11))"
    check "shard_id_check() itself: data_floor failed, shard_numbers warning" \
        "$(q -c "SELECT string_agg(\"check\" || ' ' || status, ', ' ORDER BY \"check\") FROM shard_id_check()
                 WHERE \"check\" IN ('data_floor', 'shard_numbers')")" "data_floor failed, shard_numbers warning"
    started="$(date +%s%N)"
    q -c "SELECT count(*) FROM shard_id_check()" >/dev/null
    echo "  shard_id_check() took $((($(date +%s%N) - started) / 1000000)) ms here (with psql's start)"
fi
check "pg_shard_id_check_status: data_floor is 2 (failed), naming the column" \
    "$(wait_for 'pg_shard_id_check_status{datname="postgres",check="data_floor",columns="public.loaded.id"}' 2 15)" 2
check "pg_shard_id_check_status: shard_numbers is 1 (warning), naming both columns" \
    "$(wait_for 'pg_shard_id_check_status{check="shard_numbers",columns="public.ta.id, public.tb.id"}' 1 15)" 1
check "pg_shard_id_check_status: preload is 0" "$(promql 'pg_shard_id_check_status{check="preload"}')" 0
check "pg_shard_id_check_status: mask_keys, skipped (no key file), is -1, not 0" \
    "$(promql 'pg_shard_id_check_status{check="mask_keys"}')" -1
check "the alert PgShardIdCheckFailed fires for data_floor" \
    "$(wait_for 'ALERTS{alertname="PgShardIdCheckFailed",check="data_floor",alertstate="firing"}' 1 15)" 1
check "the alert PgShardIdCheckWarning waits its 30 minutes (pending)" \
    "$(wait_for 'ALERTS{alertname="PgShardIdCheckWarning",check="shard_numbers",alertstate="pending"}' 1 15)" 1
check "no alert PgShardIdNotPreloaded" "$(promql 'count(ALERTS{alertname="PgShardIdNotPreloaded"})')" ""

say "the exporter on a database without the extension"
metrics="$(curl -fsS "http://$NOEXT_EXPORTER/metrics")"
check "no extension: the exporter answers, connected" "$(grep -c '^pg_up 1$' <<<"$metrics")" 1
check "no extension: pg_exporter_last_scrape_error is 1" \
    "$(grep -c '^pg_exporter_last_scrape_error 1$' <<<"$metrics")" 1
check "no extension: pg_shard_id_extension_installed is 0" \
    "$(grep -c '^pg_shard_id_extension_installed{datname="noext",.*} 0$' <<<"$metrics")" 1
check "no extension: no per-sequence metrics" "$(grep -c '^pg_shard_id_ids_total' <<<"$metrics" || true)" 0
check "no extension: the exporter logs the missing view" \
    "$(grep -q 'pg_shard_id_stats.* does not exist' "$WORK/exporter-noext.log" && echo yes)" yes
check "no extension: the exporter still runs and answers" \
    "$(kill -0 "$NOEXT_PID" && curl -fsS "http://$NOEXT_EXPORTER/metrics" | grep -c '^pg_up 1$')" 1

if [ -n "$CHART" ]; then
    say "drawing $CHART"
    VENV="$PG_WHEEL_CACHE/monitoring-venv"
    ensure_venv "$VENV" "$REPO/monitoring/requirements.txt"
    "$VENV/bin/python" "$REPO/monitoring/chart.py" --url "http://127.0.0.1:$PROM_PORT" \
        --start "$((burst_start - 5))" --end "$burst_end" --match "{$SEL}" --out "$CHART"
    check "the chart is a PNG" "$(head -c 4 "$CHART" | tail -c 3)" PNG
fi

echo
echo "monitoring: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
