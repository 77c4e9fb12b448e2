#!/usr/bin/env bash
# Thousands of tenants (issue 51): schema-per-tenant databases, one table and one sequence per
# tenant, as Citus's schema-based sharding, django-tenants or Rails' apartment make them.
#
# 1. The first id of a sequence against the size of the database: K other tenant tables, each
#    with its own sequence and `DEFAULT next_shard_id(its_seq, 1)`; after a restart, in a backend
#    that already drew another sequence's first id (the server's one-time work and the backend's
#    kept plan done), the time of FIRST_ROUNDS fresh sequences' first ids, and their second ids;
#    then in a new backend (one psql call: its plan is made there) the first id, against
#    nextval()'s first call in a new backend.
# 2. Inserts over N tenants: N tables drawing from their own sequences (ours), N bigserial
#    tables, N identity tables and N tables sharing one sequence (ours, shared); 50,000
#    single-row inserts (pgbench, 2 clients, a tenant at random per insert) after a restart
#    (first touch), then TENANTS_STEADY more runs of each kind, interleaved (steady state);
#    seconds, the ratio bigserial's time / ours (1.0: as fast as bigserial), and the guard's
#    evictions.
# 3. One time-partitioned table, PARTITIONS daily partitions (ten years) on one sequence: the
#    first id after a restart.
# 4. First ids with K_DDL tables, without and with another role's transaction open that made a
#    temp table (issue 57: the catalog watch's change pending all along).
#
#   bench/tenants.sh                             PostgreSQL 15, the installed build
#   TENANTS_K="0 1000 10000 100000"              (default) sizes of part 1
#   TENANTS_N="10 1000 10000 20000"              (default) tenants of part 2
#   TENANTS_INSERTS=50000 TENANTS_PARTITIONS=3650 TENANTS_ROUNDS=5 TENANTS_STEADY=5
#   TENANTS_PARTS="1 2 3 4"                      (default) which parts to run
#   TENANTS_K_DDL=20000                          (default) tables of part 4
#   TENANTS_PG=18
# Prints markdown. Needs a build installed (scripts/install.sh or scripts/test.sh). Run it on an
# otherwise idle machine; 100,000 tables take a few minutes to create.
source "$(dirname "$0")/../scripts/lib.sh"
stop_clusters_at_exit
select_pg "${TENANTS_PG:-15}"
KS="${TENANTS_K:-0 1000 10000 100000}"
NS="${TENANTS_N:-10 1000 10000 20000}"
INSERTS="${TENANTS_INSERTS:-50000}"
PARTITIONS="${TENANTS_PARTITIONS:-3650}"
ROUNDS="${TENANTS_ROUNDS:-5}"
STEADY="${TENANTS_STEADY:-5}"
PARTS=" ${TENANTS_PARTS:-1 2 3 4} "
part() { [[ "$PARTS" == *" $1 "* ]]; }
start_cluster tenants yes "fsync = off" "synchronous_commit = off" "max_locks_per_transaction = 1024" \
    "shared_buffers = '1GB'" "max_wal_size = '8GB'" "autovacuum = off" "jit = off" >/dev/null
dir="$RUN_DIR/tenants"
restart() { restart_cluster tenants; }
echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC'), PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}'), $(nproc) CPUs, $(q -c "SHOW pg_shard_id.max_sequences") guard slots; load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# make_tables DB PREFIX FROM TO COLUMN: tables PREFIX_i (COLUMN, v int) for i in FROM..TO, each
# with its own sequence PREFIX_i_seq where COLUMN says %s_seq, in transactions of 500 tables
make_tables() {
    local db=$1 prefix=$2 from=$3 to=$4 column=${5//\'/\'\'}
    [ "$from" -le "$to" ] || return 0
    q -d "$db" -c "DO \$\$
BEGIN
    FOR i IN $from..$to LOOP
        EXECUTE format('CREATE SEQUENCE ${prefix}_%s_seq', i);
        EXECUTE format('CREATE TABLE ${prefix}_%s ($column, v int)', i, i);
        IF i % 500 = 0 THEN COMMIT; END IF;
    END LOOP;
END \$\$"
}

# ---- 1. the first id against the size of the database ----
if part 1; then
echo
echo "### 1. A sequence's first id, with K other tenant tables in the database"
echo
q -c "CREATE DATABASE first_id"
q -d first_id -c "SET client_min_messages = warning" -c "CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE warm_s" \
  -c "CREATE SEQUENCE plain_s"
make_tables first_id target 1 $((ROUNDS * 7)) "id bigint PRIMARY KEY DEFAULT next_shard_id('target_%s_seq', 2)"
echo "| other tables K | first id, warm backend (µs, median of $((ROUNDS * 5))) | second id (µs) | first id, new backend (ms, median of $ROUNDS) | nextval(), new backend (ms) |"
echo "|---:|---:|---:|---:|---:|"
have=0
for k in $KS; do
    make_tables first_id tenant $((have + 1)) "$k" "id bigint PRIMARY KEY DEFAULT next_shard_id('tenant_%s_seq', 1)"
    [ "$k" -gt "$have" ] && have=$k
    : >"$dir/first.$k"
    for round in $(seq "$ROUNDS"); do
        restart
        base=$(((round - 1) * 7))
        q -d first_id -c "DO \$\$
DECLARE t0 timestamptz; t1 timestamptz; t2 timestamptz; x bigint; seq regclass;
BEGIN
    x := next_shard_id('warm_s', 3);   -- the server's first id and this backend's kept plan
    FOR i IN $((base + 1))..$((base + 5)) LOOP
        seq := format('target_%s_seq', i)::regclass;
        t0 := clock_timestamp(); x := next_shard_id(seq, 2);
        t1 := clock_timestamp(); x := next_shard_id(seq, 2);
        t2 := clock_timestamp();
        RAISE NOTICE 'warm % %', (extract(epoch FROM t1 - t0) * 1e6)::int, (extract(epoch FROM t2 - t1) * 1e6)::int;
    END LOOP;
END \$\$" 2>&1 | sed -n 's/^NOTICE:  //p' >>"$dir/first.$k"
        new=$(printf '\\timing on\nSELECT next_shard_id(%s, 2);\n' "'target_$((base + 6))_seq'" |
            psql -X -q -d first_id | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p')
        plain=$(printf '\\timing on\nSELECT nextval(%s);\n' "'plain_s'" |
            psql -X -q -d first_id | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p')
        echo "new $new $plain" >>"$dir/first.$k"
    done
    python3 - "$dir/first.$k" "$k" <<'PY'
import statistics, sys
lines = [l.split() for l in open(sys.argv[1])]
warm = [list(map(float, l[1:])) for l in lines if l[0] == "warm"]
new = [list(map(float, l[1:])) for l in lines if l[0] == "new"]
m = lambda xs: statistics.median(xs)
print(f"| {int(sys.argv[2]):,} | {m([w[0] for w in warm]):.0f} | {m([w[1] for w in warm]):.0f} | "
      f"{m([n[0] for n in new]):.2f} | {m([n[1] for n in new]):.2f} |")
PY
done

fi

# ---- 2. inserts over N tenants ----
if part 2; then
echo
echo "### 2. $INSERTS single-row inserts over N tenants (pgbench, 2 clients, a tenant at random per insert)"
echo
echo "Seconds per run of $INSERTS inserts; ratio: bigserial's seconds / ours (1.0: as fast as bigserial). First touch: right after a restart, each kind in turn. Steady: then $STEADY runs of each kind, interleaved (the order turning), median and range of the ratios; evictions: per run, median."
echo
echo "| tenants N | run | ours (own sequences) | ratio | evictions | bigserial | identity | ours, one shared sequence | ratio |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
for n in $NS; do
    db="tenants_$n"
    q -c "CREATE DATABASE $db"
    q -d "$db" -c "SET client_min_messages = warning" -c "CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE shared_seq"
    make_tables "$db" ours 1 "$n" "id bigint PRIMARY KEY DEFAULT next_shard_id('ours_%s_seq', 1)"
    make_tables "$db" ser 1 "$n" "id bigint PRIMARY KEY DEFAULT nextval('ser_%s_seq')"
    make_tables "$db" ident 1 "$n" "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
    make_tables "$db" shared 1 "$n" "id bigint PRIMARY KEY DEFAULT next_shard_id('shared_seq', 1)"
    for kind in ours ser ident shared; do
        printf '\\set t random(1, %s)\nINSERT INTO %s_:t (v) VALUES (1);\n' "$n" "$kind" >"$dir/$kind.sql"
    done
    run_kind() { # KIND: seconds of INSERTS inserts
        local out
        out=$(pgbench -n -M simple -c 2 -j 2 -t $((INSERTS / 2)) -f "$dir/$1.sql" "$db" 2>&1)
        python3 -c "import re,sys; t=float(re.search(r'tps = ([0-9.]+)', sys.argv[1]).group(1)); print(f'{$INSERTS / t:.3f}')" "$out"
    }
    evictions() { q -d "$db" -c "SELECT guard_evictions FROM pg_shard_id_info()"; }
    : >"$dir/runs.$n"
    for kind in ours ser ident shared; do
        restart
        before=$(evictions)
        echo "first $kind $(run_kind "$kind") $(($(evictions) - before))" >>"$dir/runs.$n"
    done
    kinds=(ours ser ident shared)
    for run in $(seq "$STEADY"); do
        for i in 0 1 2 3; do
            kind=${kinds[$(((i + run) % 4))]}
            before=$(evictions)
            echo "steady $kind $(run_kind "$kind") $(($(evictions) - before))" >>"$dir/runs.$n"
        done
    done
    python3 - "$dir/runs.$n" "$n" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)  # (phase, kind) -> [(seconds, evictions)]
for line in open(sys.argv[1]):
    phase, kind, secs, ev = line.split()
    runs[phase, kind].append((float(secs), int(ev)))
n = int(sys.argv[2])
first = {k: runs["first", k][0] for k in ("ours", "ser", "ident", "shared")}
print(f"| {n:,} | first touch | {first['ours'][0]:.2f} | {first['ser'][0] / first['ours'][0]:.2f} | {first['ours'][1]} | "
      f"{first['ser'][0]:.2f} | {first['ident'][0]:.2f} | {first['shared'][0]:.2f} | {first['ser'][0] / first['shared'][0]:.2f} |")
steady = {k: runs["steady", k] for k in ("ours", "ser", "ident", "shared")}
med = lambda k: statistics.median(s for s, _ in steady[k])
ratios = [s / o for (s, _), (o, _) in zip(steady["ser"], steady["ours"])]
shared = [s / o for (s, _), (o, _) in zip(steady["ser"], steady["shared"])]
ev = statistics.median(e for _, e in steady["ours"])
print(f"| {n:,} | steady, {len(ratios)} runs | {med('ours'):.2f} | {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | {ev:.0f} | "
      f"{med('ser'):.2f} | {med('ident'):.2f} | {med('shared'):.2f} | {statistics.median(shared):.2f} ({min(shared):.2f}-{max(shared):.2f}) |")
PY
    q -c "DROP DATABASE $db"
done
fi

# ---- 3. ten years of daily partitions on one sequence ----
if part 3; then
echo
echo "### 3. One table of $PARTITIONS daily partitions on one sequence"
echo
# (the epoch moved back $PARTITIONS days, so that ten years of days hold ids: an earlier epoch is
# allowed at a restart; the other parts' databases are done with)
q -c "ALTER SYSTEM SET pg_shard_id.epoch = '$(date -u -d "2026-12-01 - $PARTITIONS days" +%F) 00:00:00+00'" >/dev/null
restart
q -c "CREATE DATABASE parts"
q -d parts -c "SET client_min_messages = warning" -c "CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE events_seq" \
  -c "CREATE SEQUENCE by_id_seq" -c "CREATE SEQUENCE warm_s" \
  -c "CREATE TABLE events (id bigint DEFAULT next_shard_id('events_seq', 1), at timestamptz NOT NULL,
        v int, PRIMARY KEY (id, at)) PARTITION BY RANGE (at)" \
  -c "CREATE TABLE by_id (id bigint PRIMARY KEY DEFAULT next_shard_id('by_id_seq', 1), v int) PARTITION BY RANGE (id)"
# (by the time column, as before; and on the id, by shard_id_partition_bounds: the same days)
q -d parts -c "DO \$\$
DECLARE r record; i int := 0;
BEGIN
    FOR i IN 0..$((PARTITIONS - 1)) LOOP
        EXECUTE format('CREATE TABLE events_%s PARTITION OF events FOR VALUES FROM (%L) TO (%L)', i,
                       date '2026-12-01' - $PARTITIONS + i, date '2026-12-01' - $PARTITIONS + i + 1);
        IF i % 200 = 0 THEN COMMIT; END IF;
    END LOOP;
    FOR r IN SELECT * FROM shard_id_partition_bounds(date '2026-12-01' - $PARTITIONS, date '2026-12-01', '1 day') LOOP
        EXECUTE format('CREATE TABLE by_id_%s PARTITION OF by_id FOR VALUES FROM (%s) TO (%s)', i, r.lower, r.upper);
        i := i + 1;
        IF i % 200 = 0 THEN COMMIT; END IF;
    END LOOP;
END \$\$"
q -d parts -c "INSERT INTO events (at, v) SELECT date '2026-12-01' - $PARTITIONS + (g % $PARTITIONS), 1 FROM generate_series(1, $((PARTITIONS * 3))) g" \
  -c "INSERT INTO by_id SELECT shard_id_compose(date '2026-12-01' - $PARTITIONS + (g % $PARTITIONS) + interval '1 hour', 1, g / $PARTITIONS), 1
        FROM generate_series(1, $((PARTITIONS * 3))) g"
for table in events by_id; do
    : >"$dir/parts-$table"
    for round in $(seq "$ROUNDS"); do
        restart
        q -d parts -c "DO \$\$
DECLARE t0 timestamptz; t1 timestamptz; t2 timestamptz; x bigint;
BEGIN
    x := next_shard_id('warm_s', 3);
    t0 := clock_timestamp(); x := next_shard_id('${table}_seq', 1);
    t1 := clock_timestamp(); x := next_shard_id('${table}_seq', 1);
    t2 := clock_timestamp();
    RAISE NOTICE '% %', (extract(epoch FROM t1 - t0) * 1e3)::numeric(10,2), (extract(epoch FROM t2 - t1) * 1e6)::int;
END \$\$" 2>&1 | sed -n 's/^NOTICE:  //p' >>"$dir/parts-$table"
    done
done
python3 - "$dir/parts-events" "$dir/parts-by_id" "$PARTITIONS" <<'PY'
import statistics, sys
for path, what in zip(sys.argv[1:3], ["`PARTITION BY RANGE (at)` (a timestamp)", "`PARTITION BY RANGE (id)` (shard_id_partition_bounds)"]):
    rows = [list(map(float, l.split())) for l in open(path) if l.strip()]
    print(f"- {what}: first id after a restart, {int(sys.argv[3]):,} partitions holding rows: median "
          f"{statistics.median(r[0] for r in rows):.2f} ms over {len(rows)} restarts (range "
          f"{min(r[0] for r in rows):.2f}-{max(r[0] for r in rows):.2f}); the next id "
          f"{statistics.median(r[1] for r in rows):.0f} µs.")
PY
fi

# ---- 4. first ids while another role holds a DDL transaction open ----
# K_DDL tenant tables; after a restart, in a warm backend, 5 fresh sequences' first ids per
# round, without and then with another role's transaction open that made a temp table (the
# catalog watch's change pending all along), ROUNDS rounds each.
if part 4; then
K_DDL="${TENANTS_K_DDL:-20000}"
echo
echo "### 4. First ids with $K_DDL tables, while another role's DDL transaction is open"
echo
q -c "CREATE DATABASE ddl_open"
q -c "CREATE ROLE ddl_holder LOGIN"
q -c "GRANT TEMP ON DATABASE ddl_open TO ddl_holder"
q -d ddl_open -c "SET client_min_messages = warning" -c "CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE warm_s"
make_tables ddl_open target 1 $((ROUNDS * 10)) "id bigint PRIMARY KEY DEFAULT next_shard_id('target_%s_seq', 2)"
make_tables ddl_open tenant 1 "$K_DDL" "id bigint PRIMARY KEY DEFAULT next_shard_id('tenant_%s_seq', 1)"
: >"$dir/ddl"
for round in $(seq "$ROUNDS"); do
    for open in no yes; do
        restart
        holder=
        if [ "$open" = yes ]; then
            psql -X -q -U ddl_holder -d ddl_open \
                -c "BEGIN" -c "CREATE TEMP TABLE scratch (n int)" -c "SELECT pg_sleep(3600)" >/dev/null 2>&1 &
            holder=$!
            for _ in $(seq 100); do
                [ "$(q -d ddl_open -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'ddl_holder' AND wait_event = 'PgSleep'")" = 1 ] && break
                sleep 0.1
            done
        fi
        base=$(((round - 1) * 10 + $([ "$open" = yes ] && echo 5 || echo 0)))
        q -d ddl_open -c "DO \$\$
DECLARE t0 timestamptz; t1 timestamptz; x bigint; seq regclass;
BEGIN
    x := next_shard_id('warm_s', 3);
    FOR i IN $((base + 1))..$((base + 5)) LOOP
        seq := format('target_%s_seq', i)::regclass;
        t0 := clock_timestamp(); x := next_shard_id(seq, 2);
        t1 := clock_timestamp();
        RAISE NOTICE '$open %', (extract(epoch FROM t1 - t0) * 1e6)::int;
    END LOOP;
END \$\$" 2>&1 | sed -n 's/^NOTICE:  //p' >>"$dir/ddl"
        if [ -n "$holder" ]; then
            q -d ddl_open -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'ddl_holder'" >/dev/null
            wait "$holder" 2>/dev/null || true
        fi
    done
done
python3 - "$dir/ddl" "$ROUNDS" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
for open_, what in (("no", "no other transaction open"), ("yes", "another role's `CREATE TEMP TABLE` in an open transaction")):
    xs = [int(r[1]) for r in rows if r[0] == open_]
    firsts = [int(r[1]) for i, r in enumerate(rows) if r[0] == open_ and (i == 0 or rows[i - 1][0] != open_)]
    print(f"- {what}: first id in a warm backend, median {statistics.median(xs):,.0f} µs over {len(xs)} "
          f"(range {min(xs):,}-{max(xs):,}); the first of each round {statistics.median(firsts):,.0f} µs (median of {len(firsts)})")
PY
fi
