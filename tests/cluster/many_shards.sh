#!/usr/bin/env bash
# The Instagram model with pg_shard_id, end to end, on 3 throwaway clusters on loopback:
#   1. 12 logical shards (schemas shard_0000 .. shard_0011, each with its own sequence and table
#      whose id DEFAULT is next_shard_id(<that schema's sequence>, <shard number>)); cluster k owns
#      the shards whose number mod 3 is k;
#   2. every shard inserts at once (12 sessions over 3 servers);
#   3. the union of all ids is checked for duplicates, and every id's shard_id_extract_shard is
#      checked to route to the cluster that owns it;
#   4. shard 3 moves from cluster 0 to cluster 1 (pg_dump of its schema, restore, drop the old one),
#      then inserts go on there: the sequence continues and every id stays unique.
# Prints its checks and ends with "N passed, M failed"; exits non-zero if any failed.
# Needs pg_shard_id installed (scripts/try.sh or scripts/test.sh do that).
source "$(dirname "$0")/../../scripts/lib.sh"
stop_clusters_at_exit

SHARDS=12
ROWS="${MANY_SHARDS_ROWS:-100000}"
declare -A HOST PORT
on() { # on CLUSTER psql-args...: run psql against cluster CLUSTER
    local c="$1"; shift
    PGHOST="${HOST[$c]}" PGPORT="${PORT[$c]}" psql -X -q -At -v ON_ERROR_STOP=1 "$@"
}
schema() { printf 'shard_%04d' "$1"; }

say "starting 3 clusters"
for c in 0 1 2; do
    start_cluster "shards$c" yes "fsync = off"
    HOST[$c]="$PGHOST"; PORT[$c]="$PGPORT"
    on "$c" -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id"
done

say "creating $SHARDS logical shards, shard n on cluster n mod 3"
for s in $(seq 0 $((SHARDS - 1))); do
    on $((s % 3)) -c "CREATE SCHEMA $(schema "$s")" \
        -c "CREATE SEQUENCE $(schema "$s").photos_id_seq" \
        -c "CREATE TABLE $(schema "$s").photos (
                id bigint PRIMARY KEY DEFAULT next_shard_id('$(schema "$s").photos_id_seq', $s),
                url text)"
done

insert_all() { # every shard at once, $1 rows each, in batches of 10,000 (one session per shard)
    local pids=()
    for s in $(seq 0 $((SHARDS - 1))); do
        local owner="${OWNER[$s]}"
        (for _ in $(seq $(($1 / 10000))); do
            on "$owner" -c "INSERT INTO $(schema "$s").photos (url) SELECT 'u' FROM generate_series(1, 10000)"
        done) &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
}
declare -A OWNER
for s in $(seq 0 $((SHARDS - 1))); do OWNER[$s]=$((s % 3)); done

say "inserting $ROWS rows into every shard at once"
insert_all "$ROWS"

collect() { # all ids of all clusters, with the cluster they live on, into cluster 0's all_ids
    on 0 -c "SET client_min_messages = warning; DROP TABLE IF EXISTS all_ids; CREATE TABLE all_ids (id bigint, cluster int)"
    for c in 0 1 2; do
        for s in $(on "$c" -c "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'shard\_%' ORDER BY 1"); do
            on "$c" -c "COPY (SELECT id, $c FROM $s.photos) TO STDOUT" | on 0 -c "COPY all_ids FROM STDIN"
        done
    done
}
verify() {
    collect
    check "$1: ids in all clusters" "$(on 0 -c "SELECT count(*) FROM all_ids")" "$2"
    check "$1: duplicates across all clusters" "$(on 0 -c "SELECT count(*) - count(DISTINCT id) FROM all_ids")" 0
    local routes="" s
    for s in $(seq 0 $((SHARDS - 1))); do routes+="($s, ${OWNER[$s]}),"; done
    check "$1: ids whose shard bits route to another cluster" "$(on 0 -c "
        SELECT count(*) FROM all_ids a JOIN (VALUES ${routes%,}) AS owner(shard, cluster)
            ON owner.shard = shard_id_extract_shard(a.id)
         WHERE owner.cluster <> a.cluster")" 0
    check "$1: ids with a shard number nobody owns" \
        "$(on 0 -c "SELECT count(*) FROM all_ids WHERE shard_id_extract_shard(id) >= $SHARDS")" 0
}
verify "after concurrent inserts" $((SHARDS * ROWS))

say "moving shard 3 from cluster 0 to cluster 1"
before_seq="$(on 0 -c "SELECT last_value FROM $(schema 3).photos_id_seq")"
PGHOST="${HOST[0]}" PGPORT="${PORT[0]}" pg_dump --no-owner -n "$(schema 3)" postgres \
    | on 1 >/dev/null
on 0 -c "SET client_min_messages = warning; DROP SCHEMA $(schema 3) CASCADE"
OWNER[3]=1
check "move: the sequence kept its position" \
    "$(on 1 -c "SELECT last_value FROM $(schema 3).photos_id_seq")" "$before_seq"
say "inserting $ROWS more rows into every shard, shard 3 now on cluster 1"
insert_all "$ROWS"
check "move: shard 3's sequence went on from where it was" \
    "$(on 1 -c "SELECT last_value = $before_seq + $ROWS FROM $(schema 3).photos_id_seq")" t
verify "after the move" $((2 * SHARDS * ROWS))

for c in 0 1 2; do stop_cluster "shards$c"; done
echo
echo "many shards: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
