#!/usr/bin/env bash
# The pg_regress suite in tests/pg_regress (sql/ in, expected/ out), against a throwaway cluster
# with the library preloaded and the build that scripts/test.sh installed.
#
# `cargo pgrx regress` reads the same folders, but it starts its server as the current user and
# initdb refuses root, so this script runs pg_regress itself (same client_min_messages=warning, so
# outputs match). Pass test names to run only those; REGRESS_ACCEPT=1 promotes actual output.
source "$(dirname "$0")/lib.sh"
stop_clusters_at_exit

cd "$REPO/tests/pg_regress"
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
    for f in sql/*.sql; do
        t="$(basename "$f" .sql)"
        [ "$t" = setup ] || tests+=("$t")
    done
fi
start_cluster regress yes
PG_REGRESS="$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress"
status=0
PGOPTIONS="-c client_min_messages=warning" "$PG_REGRESS" \
    --bindir="$PG_BIN" --host="$PGHOST" --port="$PGPORT" --user=postgres \
    --dbname=pg_shard_id_regress --inputdir=. --outputdir=. \
    setup "${tests[@]}" || status=$?
if [ "$status" != 0 ] && [ "${REGRESS_ACCEPT:-0}" = 1 ]; then
    for t in setup "${tests[@]}"; do cp "results/$t.out" "expected/$t.out"; done
    say "promoted results/ to expected/"
fi
stop_cluster regress
[ "$status" = 0 ] || { [ -f regression.diffs ] && head -200 regression.diffs; }
exit "$status"
