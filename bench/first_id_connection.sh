#!/usr/bin/env bash
# A new connection's first id (issue 57): what an application that connects per request (PHP,
# serverless functions, scripts, a pooler recycling its server connections) pays on every
# request. bench/first_id_connection.py in a throwaway cluster with the library preloaded:
# FIRST_CONN_ROUNDS rounds (default 15) of a new connection per statement (SELECT 1, nextval(),
# next_shard_id() of sequences other connections use), medians of the first and second call;
# then FIRST_CONN_RESTARTS restarts (default 5), each followed by the first id of the sequence
# since the start (its data floor read) against nextval()'s first call then.
#   bench/first_id_connection.sh              PostgreSQL 15, the installed build
#   FIRST_CONN_PG=18 bench/first_id_connection.sh
# Prints markdown. Needs a build installed (scripts/install.sh, scripts/test.sh) and an idle
# machine for numbers worth keeping.
source "$(dirname "$0")/../scripts/lib.sh"
stop_clusters_at_exit
select_pg "${FIRST_CONN_PG:-15}"
VENV="$REPO/target/guarantee/venv"
ensure_venv "$VENV" "$REPO/tests/guarantee/requirements.txt"
start_cluster firstconn yes >/dev/null
q -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE s" -c "CREATE SEQUENCE n" \
  -c "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 1))" -c "SELECT next_shard_id('s', 1), nextval('n')" >/dev/null
echo "PostgreSQL $PG_MAJOR, $(q -c "SELECT extversion FROM pg_extension WHERE extname = 'pg_shard_id'"), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
"$VENV/bin/python" "$REPO/bench/first_id_connection.py" --rounds "${FIRST_CONN_ROUNDS:-15}"
results=()
for _ in $(seq "${FIRST_CONN_RESTARTS:-5}"); do
    restart_cluster firstconn >/dev/null
    results+=("$("$VENV/bin/python" "$REPO/bench/first_id_connection.py" --after-restart)")
done
printf '%s\n' "${results[@]}" | python3 -c '
import statistics, sys
rows = [l.split()[1:] for l in sys.stdin if l.startswith("after-restart")]
n = statistics.median(float(a) for a, _ in rows); s = statistics.median(float(b) for _, b in rows)
print(f"\nafter a restart, a new connection (median of {len(rows)} restarts): nextval() first call {n:.3f} ms, "
      f"next_shard_id() first id of the sequence since the start {s:.3f} ms")'
