#!/usr/bin/env bash
# One backend draws an id from each of N new temporary sequences (default 1,000,000), each created,
# used and dropped in its own transaction, and reports the backend's anonymous memory (RssAnon)
# every tenth of the way, and the guard table's evictions. A measurement for issue 24 (the
# per-backend map of sequence to slot must stay bounded), not a test: it takes minutes.
# PostgreSQL's own nextval() keeps an entry per sequence a backend used (sequence.c's SeqTable,
# freed only by DISCARD SEQUENCES), so the backend grows without pg_shard_id too:
# DRAW=nextval measures that floor.
#   PG_VERSIONS=18 [DRAW=nextval] bash bench/temp_sequence_churn.sh [N]
source "$(dirname "$0")/../scripts/lib.sh"
stop_clusters_at_exit
N="${1:-1000000}"
select_pg "${PG_VERSIONS:-18}"
start_cluster churn yes "fsync = off" "synchronous_commit = off"
q -c "CREATE EXTENSION pg_shard_id"
step=$((N / 10))
draw="next_shard_id('churn', 1)"
[ "${DRAW:-}" = nextval ] && draw="nextval('churn')"
{
    echo "SELECT 'start ' || substring(pg_read_file('/proc/self/status') from 'RssAnon:\s+(\d+ kB)');"
    for i in $(seq 1 10); do
        cat <<SQL
DO \$\$ BEGIN
  FOR i IN 1..$step LOOP
    CREATE TEMP SEQUENCE churn;
    PERFORM $draw;
    DROP SEQUENCE churn;
    COMMIT;
  END LOOP;
END \$\$;
SELECT '$((i * step)) sequences ' || substring(pg_read_file('/proc/self/status') from 'RssAnon:\s+(\d+ kB)')
       || ', evictions ' || guard_evictions FROM pg_shard_id_info();
SQL
    done
} | q
