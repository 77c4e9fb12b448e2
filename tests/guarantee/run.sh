#!/usr/bin/env bash
# The guarantee under attack (README, guarantee 9): ids at past times and table conversion
# (test_backfill.py, test_convert.py: issue 37; the conversion on real schemas, with a logical
# subscriber, and the search_path attack on every function: test_convert_schema.py,
# test_convert_replicas.py, test_search_path.py, issue 49), the scenario tests (test_scenarios.py: the
# origin record with 2 and 8 sessions at every isolation level, locked tables, another session's
# temporary table, REPEATABLE READ catalog reads, dead index entries, the node form, two writers
# with one node number), the remembered sequence privilege check against nextval()'s own
# (test_privileges.py: issue 40), thousands of tenants (test_tenants.py: the catalog watch against
# every way of adding a DEFAULT that names no sequence, evicted sequences coming back; issue 51),
# then the seeded lifecycle fuzzer (fuzz.py) for FUZZ_SEEDS seeds (default 20) from FUZZ_SEED
# (default 1), again in its many-sequences mode (--tenants: 16 guard slots, tenant sequences
# evicting s all along) for FUZZ_TENANT_SEEDS seeds (default 4) from FUZZ_TENANT_SEED (default 1: seed 4 resyncs s while evicted; the same four on every version), and the history fuzzer (fuzz_history.py: backfills,
# conversions, clock steps both ways under libfaketime, restarts, crashes, copies; issues 49, 50)
# for FUZZ_HISTORY_SEEDS seeds (default 20). CI runs the same seeds every time, so that a red run
# means a change broke something, not that the dice found an old hole; new seeds are explored by
# the soak mode (`FUZZ_SOAK=3600 bash tests/guarantee/run.sh`: seeds from the day's number for
# an hour), whose failures become fixed seeds here. Needs a test build installed (scripts/test.sh
# does that). Ends with "N passed, M failed".
source "$(dirname "$0")/../../scripts/lib.sh"
HERE="$REPO/tests/guarantee"
VENV="$REPO/target/guarantee/venv"
ensure_venv "$VENV" "$HERE/requirements.txt"
export PG_BIN PG_SHARD_ID_RUN_DIR="$RUN_DIR"
cd "$HERE"
status=0
say "the guarantee's scenarios (PostgreSQL $PG_MAJOR)"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=25 -n 2 --dist loadfile test_scenarios.py test_backfill.py test_convert.py test_convert_schema.py test_convert_replicas.py test_backfill_limits.py \
    test_search_path.py test_privileges.py test_tenants.py test_in_flight.py test_convert_finishes.py test_convert_writers.py "$@" || status=1
say "the lifecycle fuzzer (PostgreSQL $PG_MAJOR)"
if [ -n "${FUZZ_SOAK:-}" ]; then
    # (the soak's time split in three: copies, copies among many sequences, then history)
    "$VENV/bin/python" fuzz.py --soak "$((FUZZ_SOAK / 3))" ${FUZZ_SEED:+--seed "$FUZZ_SEED"} || status=1
    "$VENV/bin/python" fuzz.py --tenants --soak "$((FUZZ_SOAK / 3))" ${FUZZ_SEED:+--seed "$FUZZ_SEED"} || status=1
    "$VENV/bin/python" fuzz_history.py --soak "$((FUZZ_SOAK / 3))" ${FUZZ_SEED:+--seed "$FUZZ_SEED"} || status=1
else
    # (the history fuzzer beside the two copy fuzzers, on the other core: its cluster is its own,
    # fuzz_hist, theirs fuzz_src and fuzz_dst; its output is shown after theirs, whole)
    history_log="$RUN_DIR/fuzz_history-$PG_MAJOR.log"
    (say "the history fuzzer: backfills and conversions with the clock stepping both ways (PostgreSQL $PG_MAJOR)"
     exec "$VENV/bin/python" fuzz_history.py --seeds "${FUZZ_HISTORY_SEEDS:-20}" --seed "${FUZZ_SEED:-1}") >"$history_log" 2>&1 &
    history=$!
    "$VENV/bin/python" fuzz.py --seeds "${FUZZ_SEEDS:-20}" --seed "${FUZZ_SEED:-1}" || status=1
    say "the lifecycle fuzzer, many-sequences mode: 16 guard slots, tenant sequences churning (PostgreSQL $PG_MAJOR)"
    "$VENV/bin/python" fuzz.py --tenants --seeds "${FUZZ_TENANT_SEEDS:-4}" --seed "${FUZZ_TENANT_SEED:-1}" || status=1
    wait "$history" || status=1
    cat "$history_log"
fi
exit "$status"
