#!/usr/bin/env bash
# Citus test: a coordinator and 2 workers on loopback (PostgreSQL 15, 16 or 17: Citus 13.2), with
# shared_preload_libraries = 'citus,pg_shard_id' on each, one DEFAULT next_shard_id('seq') for
# every node, and ids drawn through every path where Citus evaluates a DEFAULT: single-row inserts
# through the coordinator and on the workers (MX), COPY, INSERT ... SELECT pulled to the
# coordinator, repartitioned and pushed down, a reference table, ALTER TABLE ... ADD COLUMN with a
# DEFAULT, a node added later and a rebalance; then every id of the distributed table is counted
# for duplicates. Also the hostile session and decoding in distributed queries.
#
# Citus: the one installed in the selected PostgreSQL is used; otherwise it is built from
# CITUS_SOURCE (default: the Citus 13.2.2 source tarball in ../shared/vendor) and installed into
# it, 1-2 minutes once per PostgreSQL (into the wheel's own lib/ and share/ for 16 and 17,
# whose pg_config is relocatable; build log in $RUN_DIR/citus-build-MAJOR.log). With neither the
# suite fails and says so.
# Needs a build of pg_shard_id installed (scripts/test.sh does that). Ends with "N passed, M failed".
source "$(dirname "$0")/../../scripts/lib.sh"
stop_clusters_at_exit

CITUS_SOURCE="${CITUS_SOURCE:-$(vendor_file citus-13.2.2.tar.gz || true)}"
CITUS_PATCH="${CITUS_PATCH:-$(vendor_file citus-pg15.20.patch || true)}"
ROWS_TARGET=1000000

case "$PG_MAJOR" in
    15 | 16 | 17) ;;
    *) echo "the Citus suite runs on PostgreSQL 15-17 (those Citus 13.2 supports)"; exit 2 ;;
esac

ensure_citus() {
    [ -f "$("$PG_CONFIG" --pkglibdir)/citus.so" ] && return 0
    if [ ! -f "$CITUS_SOURCE" ]; then
        # (a counted skip, said at once, not a failure far into the run)
        echo "!!! Citus is not installed in PostgreSQL $PG_MAJOR and there is no source to build it from:"
        echo "!!! set PG_SHARD_ID_VENDOR to the folder holding citus-13.2.2.tar.gz and citus-pg15.20.patch"
        echo "!!! (or CITUS_SOURCE to a Citus 13.2 source tarball), or install Citus."
        echo "citus: 0 passed, 0 failed, 1 skipped (no Citus source: PG_SHARD_ID_VENDOR)"
        exit 0
    fi
    say "building Citus from $CITUS_SOURCE into PostgreSQL $PG_MAJOR (1-2 minutes, once)"
    local pkgs=(libcurl4-openssl-dev liblz4-dev libzstd-dev libkrb5-dev libselinux1-dev libxslt1-dev
        libpam0g-dev libssl-dev libreadline-dev libxml2-dev libicu-dev zlib1g-dev autoconf flex
        bison make gcc pkg-config)
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >"$RUN_DIR/citus-apt.log" 2>&1 ||
        { cat "$RUN_DIR/citus-apt.log"; return 1; }
    local src="$RUN_DIR/citus-src-$PG_MAJOR" log="$RUN_DIR/citus-build-$PG_MAJOR.log"
    rm -rf "$src" && mkdir -p "$src"
    tar -xzf "$CITUS_SOURCE" -C "$src" --strip-components=1
    # Citus 13.2.2 defines its own have_createdb_privilege() for PostgreSQL 15, which 15.20's
    # commands/dbcommands.h also declares: the patch drops Citus's copy. For 16 and 17 Citus uses
    # the server's (17.11 builds unpatched), so the patch is applied on a 15 that declares it only.
    local patch=""
    if [ "$PG_MAJOR" = 15 ] &&
        grep -qs have_createdb_privilege "$("$PG_CONFIG" --includedir-server)/commands/dbcommands.h"; then
        patch="$CITUS_PATCH"
    fi
    (
        cd "$src"
        if [ -n "$patch" ]; then patch -p1 <"$patch"; fi
        ./configure --without-libcurl PG_CONFIG="$PG_CONFIG"
        make -j"$(nproc)"
        make install
    ) >"$log" 2>&1 || { tail -30 "$log"; return 1; }
    rm -rf "$src"
}

declare -A PORT
# node NAME: start a Citus node (coordinator or worker) in $RUN_DIR/NAME
node() {
    start_cluster "$1" no "shared_preload_libraries = 'citus,pg_shard_id'" "wal_level = logical" \
        "max_connections = 100" "citus.node_conninfo = 'sslmode=disable'" \
        "max_worker_processes = 16" "citus.log_remote_commands = off"
    PORT[$1]="$PGPORT"
}
# on NAME psql-arguments: q (scripts/lib.sh) on one node
on() {
    local name="$1"; shift
    q -h "$RUN_DIR/$name" -p "${PORT[$name]}" -U postgres -d postgres "$@"
}
err_on() { # the SQLSTATE of a statement on a node, as $ROLE ("" if it succeeds)
    local name="$1"; shift
    error_of -h "$RUN_DIR/$name" -p "${PORT[$name]}" -U "${ROLE:-postgres}" -d postgres -c "$1" |
        grep -o 'ERROR:  [0-9A-Z]\{5\}' | cut -c9- || true
}
dups() { on coord -c "SELECT count(*) - count(DISTINCT $2) FROM $1"; }

ensure_citus || { echo; echo "citus: 0 passed, 1 failed"; exit 1; }
say "a coordinator and 2 workers, a third one joins later (PostgreSQL $PG_MAJOR, Citus $(sed -n "s/^default_version = '\(.*\)'/\1/p" "$("$PG_CONFIG" --sharedir)/extension/citus.control"))"
for n in coord w1 w2 w3; do node "$n"; done
for n in coord w1 w2 w3; do on "$n" -c "SET client_min_messages = warning" -c "CREATE EXTENSION citus"; done
on coord -c "SELECT citus_set_coordinator_host('127.0.0.1', ${PORT[coord]})" >/dev/null
on coord -c "SELECT citus_add_node('127.0.0.1', ${PORT[w1]})" -c "SELECT citus_add_node('127.0.0.1', ${PORT[w2]})" >/dev/null
on coord -c "SET client_min_messages = warning" -c "CREATE EXTENSION pg_shard_id"
check "the extension is on every node" \
    "$(for n in coord w1 w2; do on "$n" -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_shard_id'"; done | sort -u | wc -l):$(on w2 -c "SELECT count(*) FROM pg_extension WHERE extname = 'pg_shard_id'")" "1:1"
check "every node's guard is the cluster-wide one" \
    "$(for n in coord w1 w2; do on "$n" -c "SELECT guard FROM pg_shard_id_info()"; done | sort -u)" cluster

say "one DEFAULT for every node: next_shard_id('photos_id_seq')"
on coord -c "CREATE SEQUENCE photos_id_seq" \
    -c "CREATE TABLE photos (id bigint NOT NULL DEFAULT next_shard_id('photos_id_seq'), user_id bigint NOT NULL, n int, via text)" \
    -c "SELECT create_distributed_table('photos', 'user_id')" \
    -c "CREATE SEQUENCE comments_id_seq" \
    -c "CREATE TABLE comments (id bigint NOT NULL DEFAULT next_shard_id('comments_id_seq'), user_id bigint NOT NULL, photo_id bigint)" \
    -c "SELECT create_distributed_table('comments', 'user_id', colocate_with => 'photos')" \
    -c "CREATE SEQUENCE ref_id_seq" \
    -c "CREATE TABLE tags (id bigint PRIMARY KEY DEFAULT next_shard_id('ref_id_seq'), via text)" \
    -c "SELECT create_reference_table('tags')" >/dev/null
check "the sequence exists on the workers (Citus copies it)" \
    "$(on w1 -c "SELECT count(*) FROM pg_class WHERE relname = 'photos_id_seq'")" 1

# single-row inserts, 2 clients for 5 s, through the coordinator and on each worker at once (MX)
echo "INSERT INTO photos (user_id, n, via) VALUES ((random() * 100000)::bigint, 1, ':via');" >"$RUN_DIR/ins.sql"
echo "INSERT INTO tags (via) VALUES (':via');" >"$RUN_DIR/ref.sql"
pids=()
for n in coord w1 w2; do
    pgbench -n -h "$RUN_DIR/$n" -p "${PORT[$n]}" -U postgres -c 2 -j 2 -T 5 -D via="single-$n" \
        -f "$RUN_DIR/ins.sql@9" -f "$RUN_DIR/ref.sql@1" postgres >"$RUN_DIR/pgbench-$n.log" 2>&1 &
    pids+=($!)
done
failed_pgbench=0
for p in "${pids[@]}"; do wait "$p" || failed_pgbench=$((failed_pgbench + 1)); done
check "single-row inserts on the coordinator and both workers ran without an error" \
    "$failed_pgbench:$(cat "$RUN_DIR"/pgbench-*.log | grep -c ERROR || true)" "0:0"
check "rows came in through all three nodes" \
    "$(on coord -c "SELECT count(DISTINCT via) FROM photos")" 3
check "the shard field is the node that made the id (coordinator 0, workers 1 and 2)" \
    "$(on coord -c "SELECT string_agg(DISTINCT via || '=' || shard_id_extract_shard(id), ' ' ORDER BY via || '=' || shard_id_extract_shard(id)) FROM photos")" \
    "single-coord=0 single-w1=1 single-w2=2"

# COPY through the coordinator and on a worker
seq 1 20000 | awk '{print $1 "\t" $1 "\tcopy"}' | on coord -c "COPY photos (user_id, n, via) FROM STDIN"
seq 1 20000 | awk '{print $1 "\t" $1 "\tcopy-w1"}' | on w1 -c "COPY photos (user_id, n, via) FROM STDIN"
check "COPY on the coordinator and on a worker" \
    "$(on coord -c "SELECT count(*) FROM photos WHERE via LIKE 'copy%'")" 40000

# INSERT ... SELECT. Citus pushes one down only when it has no volatile function to evaluate; the
# DEFAULT is one, so a colocated INSERT ... SELECT runs as "repartition" (the rows go to the
# shards' workers, which evaluate next_shard_id), like a non-colocated one; a LIMIT pulls the rows
# to the coordinator first, which then copies them to the shards without an id.
plan() { on coord -c "EXPLAIN $1" | grep -o -m1 'INSERT/SELECT method: [a-z ]*' | sed 's/INSERT.SELECT method: //'; }
colocated="INSERT INTO photos (user_id, n, via) SELECT user_id, n, 'colocated' FROM photos"
explicit="INSERT INTO photos (id, user_id, n, via) SELECT next_shard_id('photos_id_seq'), user_id, n, 'explicit' FROM photos WHERE via LIKE 'copy%'"
repartition="INSERT INTO photos (user_id, n, via) SELECT n, user_id, 'repartition' FROM photos WHERE via <> 'colocated'"
pull="INSERT INTO photos (user_id, n, via) SELECT user_id, n, 'pull' FROM photos ORDER BY id LIMIT 30000"
echo "  methods: colocated: $(plan "$colocated"); next_shard_id in the SELECT list: $(plan "$explicit");" \
     "non-colocated: $(plan "$repartition"); with LIMIT: $(plan "$pull")"
while [ "$(on coord -c "SELECT count(*) FROM photos")" -lt "$ROWS_TARGET" ]; do
    on coord -c "$colocated"
done
on coord -c "$explicit" -c "$repartition" -c "$pull"
check "INSERT ... SELECT: colocated, explicit, repartitioned and pulled all issued ids" \
    "$(on coord -c "SELECT count(DISTINCT via) FROM photos WHERE via IN ('colocated', 'explicit', 'repartition', 'pull')")" 4
check "colocated INSERT ... SELECT made its ids on the workers (shards 1 and 2)" \
    "$(on coord -c "SELECT string_agg(DISTINCT shard_id_extract_shard(id)::text, ' ') FROM photos WHERE via = 'colocated'")" "1 2"
# pulled rows are copied to the shards without an id, so the workers fill the DEFAULT there too
check "INSERT ... SELECT with LIMIT: the workers that hold the shards made the ids" \
    "$(on coord -c "SELECT string_agg(DISTINCT shard_id_extract_shard(id)::text, ' ') FROM photos WHERE via = 'pull'")" "1 2"
on coord -c "INSERT INTO comments (user_id, photo_id) SELECT user_id, id FROM photos WHERE via <> 'colocated'"
check "a colocated table: INSERT INTO comments SELECT ... FROM photos, ids made on the workers" \
    "$(on coord -c "SELECT string_agg(DISTINCT shard_id_extract_shard(id)::text, ' ') FROM comments")" "1 2"
check "a colocated table: every comment points at its photo" \
    "$(on coord -c "SELECT count(*) FROM comments c JOIN photos p ON p.user_id = c.user_id AND p.id = c.photo_id")" \
    "$(on coord -c "SELECT count(*) FROM comments")"

say "a node added later, and a rebalance"
on coord -c "SELECT citus_add_node('127.0.0.1', ${PORT[w3]})" >/dev/null
on coord -c "SET client_min_messages = warning" -c "SELECT citus_rebalance_start(shard_transfer_mode => 'block_writes')" >/dev/null
on coord -c "SET client_min_messages = warning" -c "SELECT citus_rebalance_wait()" >/dev/null
check "the new node holds shards after the rebalance" \
    "$(on coord -c "SELECT count(*) > 0 FROM citus_shards WHERE nodeport = ${PORT[w3]} AND table_name = 'photos'::regclass")" t
check "the new node got the extension and a group id of its own" \
    "$(on w3 -c "SELECT extversion IS NOT NULL FROM pg_extension WHERE extname = 'pg_shard_id'"):$(on w3 -c "SELECT groupid FROM pg_dist_local_group")" "t:3"
on coord -c "INSERT INTO photos (user_id, n, via) SELECT user_id, n, 'after-rebalance' FROM photos WHERE via LIKE 'copy%'"
seq 1 5000 | awk '{print $1 "\t" $1 "\tafter-w3"}' | on w3 -c "COPY photos (user_id, n, via) FROM STDIN"
check "ids made on the new node carry its group id" \
    "$(on coord -c "SELECT string_agg(DISTINCT shard_id_extract_shard(id)::text, ' ') FROM photos WHERE via = 'after-w3'")" 3
check "after the rebalance, INSERT ... SELECT makes ids on all three workers" \
    "$(on coord -c "SELECT string_agg(DISTINCT shard_id_extract_shard(id)::text, ' ') FROM photos WHERE via = 'after-rebalance'")" "1 2 3"

say "ALTER TABLE ... ADD COLUMN with a next_shard_id DEFAULT on the non-empty distributed table"
on coord -c "CREATE SEQUENCE alt_id_seq"
alter_state="$(err_on coord "ALTER TABLE photos ADD COLUMN alt_id bigint DEFAULT next_shard_id('alt_id_seq')")"
if [ -z "$alter_state" ]; then
    check "ADD COLUMN backfilled every row" "$(on coord -c "SELECT count(*) FROM photos WHERE alt_id IS NULL")" 0
    check "ADD COLUMN: duplicates in the backfilled column" "$(dups photos alt_id)" 0
else
    echo "  ADD COLUMN was refused with $alter_state"
    check "ADD COLUMN is refused with Citus's error for non-immutable defaults (0A000)" "$alter_state" 0A000
fi

rows="$(on coord -c "SELECT count(*) FROM photos")"
echo "  $rows rows in photos, $(on coord -c "SELECT count(*) FROM tags") in the reference table"
check "at least $ROWS_TARGET rows" "$([ "$rows" -ge "$ROWS_TARGET" ] && echo yes)" yes
check "duplicates across the whole distributed table" "$(dups photos id)" 0
check "duplicates in the reference table" "$(dups tags id)" 0
check "duplicates in the colocated table" "$(dups comments id)" 0

say "a hostile session: an ordinary role on every node"
on coord -c "CREATE ROLE mallory LOGIN" -c "GRANT ALL ON photos TO mallory" -c "GRANT USAGE ON SEQUENCE photos_id_seq TO mallory" >/dev/null
for n in coord w1; do
    check "$n: SET pg_shard_id.node is refused (55P02)" "$(ROLE=mallory err_on "$n" "SET pg_shard_id.node = 1")" 55P02
    check "$n: PGOPTIONS cannot set it" \
        "$(PGOPTIONS='-c pg_shard_id.node=1' psql -X -q -At -h "$RUN_DIR/$n" -p "${PORT[$n]}" -U mallory -d postgres -c "SHOW pg_shard_id.node" 2>&1 | grep -c 'cannot be changed')" 1
    check "$n: an explicit shard is refused on Citus (0A000)" \
        "$(ROLE=mallory err_on "$n" "INSERT INTO photos (id, user_id) VALUES (next_shard_id('photos_id_seq', 1), 1)")" 0A000
done
check "ALTER ROLE ... SET pg_shard_id.node is refused (55P02), even for the superuser" \
    "$(err_on coord "ALTER ROLE mallory SET pg_shard_id.node = 7")" 55P02

say "decoding in distributed queries"
epoch="$(on coord -c "SELECT epoch FROM pg_shard_id_info()")"
check "RETURNING with the IMMUTABLE decode (explicit epoch)" \
    "$(on coord -c "WITH i AS (INSERT INTO photos (user_id, via) VALUES (7, 'returning') RETURNING shard_id_extract_timestamp(id, '$epoch') AS ts)
                    SELECT ts > now() - interval '1 minute' FROM i")" t
check "RETURNING with the STABLE decode is Citus's error (0A000), not a wrong answer" \
    "$(err_on coord "INSERT INTO photos (user_id, via) VALUES (7, 'returning') RETURNING shard_id_extract_timestamp(id)")" 0A000
total="$(on coord -c "SELECT count(*) FROM photos")"
by_minute="SELECT date_trunc('minute', shard_id_extract_timestamp(id, '$epoch')) m, count(*) c FROM photos GROUP BY 1"
check "GROUP BY the decoded minute" "$(on coord -c "SELECT sum(c) FROM ($by_minute) x")" "$total"
check "... runs on the workers (the task EXPLAIN shows groups by the decoded minute)" \
    "$(on coord -c "EXPLAIN (VERBOSE) $by_minute" | grep -c 'Query: SELECT .*shard_id_extract_timestamp(id,.*GROUP BY')" 1
range="SELECT count(*) FROM photos WHERE id >= shard_id_lower_bound(now() - interval '1 hour', '$epoch')"
check "a time range by id bounds" "$(on coord -c "$range")" "$total"
check "... the bound goes to the workers with the query (the task EXPLAIN shows)" \
    "$(on coord -c "EXPLAIN (VERBOSE) $range" | grep -c 'Query: SELECT .*WHERE (id OPERATOR(pg_catalog.>=)')" 1
echo "  the range's worker query: $(on coord -c "EXPLAIN (VERBOSE) $range" | grep -o 'Query: SELECT .*' | head -1)"
timed() { on coord -c '\timing on' -c "$1" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p'; }
echo "  over $total rows on 3 workers: GROUP BY the decoded minute $(timed "$by_minute" | tail -1) ms," \
     "the last hour by id bound $(timed "$range") ms, count(*) $(timed "SELECT count(*) FROM photos") ms"

say "shard_id_check() on the coordinator: healthy, then each Citus check made unhealthy on purpose"
citus_statuses() {
    on coord -c "SELECT * FROM run_command_on_workers('SELECT 1')" >/dev/null 2>&1 || true # reconnect after a restart
    on coord -c "SELECT string_agg(\"check\" || '=' || status, ' ' ORDER BY \"check\") FROM shard_id_check() WHERE \"check\" LIKE 'citus%'"
}
check "health: a healthy Citus cluster" "$(citus_statuses)" "citus_epoch=ok citus_node_numbers=ok citus_preload=ok"
check "health: on a worker, it says to ask the coordinator" \
    "$(on w1 -c "SELECT status FROM shard_id_check() WHERE \"check\" = 'citus'")" skipped
g2="$(on w2 -c "SELECT groupid FROM pg_dist_local_group")"
on w1 -c "ALTER SYSTEM SET pg_shard_id.node = $g2" -c "SELECT pg_reload_conf()" >/dev/null
sleep 1
check "health: w1's hand-set pg_shard_id.node equals w2's group id ($g2)" "$(citus_statuses)" \
    "citus_epoch=ok citus_node_numbers=failed citus_preload=ok"
check "health: ... and the detail names both and the fix" \
    "$(on coord -c "SELECT detail LIKE '%$g2: %(group id)%(pg_shard_id.node)%Fix: unset pg_shard_id.node%' OR detail LIKE '%$g2: %(pg_shard_id.node)%(group id)%Fix: unset pg_shard_id.node%' FROM shard_id_check() WHERE \"check\" = 'citus_node_numbers'")" t
on w1 -c "ALTER SYSTEM RESET pg_shard_id.node" -c "SELECT pg_reload_conf()" >/dev/null
restart_cluster w2 "pg_shard_id.epoch = '2025-06-01 00:00:00+00'"
check "health: another epoch on w2" "$(citus_statuses)" "citus_epoch=failed citus_node_numbers=ok citus_preload=ok"
restart_cluster w2 "pg_shard_id.epoch = '2026-01-01 00:00:00+00'" "shared_preload_libraries = 'citus'"
check "health: w2 without pg_shard_id preloaded" "$(citus_statuses)" "citus_epoch=ok citus_node_numbers=ok citus_preload=failed"
restart_cluster w2 "shared_preload_libraries = 'citus,pg_shard_id'"
check "health: healthy again" "$(citus_statuses)" "citus_epoch=ok citus_node_numbers=ok citus_preload=ok"

echo
echo "citus: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
