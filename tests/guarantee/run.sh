#!/usr/bin/env bash
# The guarantee under attack (README, guarantee 9): the scenario tests (test_scenarios.py: the
# origin record with 2 and 8 sessions at every isolation level, locked tables, another session's
# temporary table, REPEATABLE READ catalog reads, dead index entries, the node form, two writers
# with one node number), then the seeded lifecycle fuzzer (fuzz.py) for FUZZ_SEEDS seeds
# (default 12) from FUZZ_SEED (default: the day's number, printed, so a failure can be re-run).
# Needs a test build installed (scripts/test.sh does that). Ends with "N passed, M failed".
source "$(dirname "$0")/../../scripts/lib.sh"
HERE="$REPO/tests/guarantee"
VENV="$REPO/target/guarantee/venv"
if ! [ -x "$VENV/bin/python" ] || ! cmp -s "$HERE/requirements.txt" "$VENV/requirements.txt"; then
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$HERE/requirements.txt"
    cp "$HERE/requirements.txt" "$VENV/requirements.txt"
fi
export PG_BIN PG_SHARD_ID_RUN_DIR="$RUN_DIR"
cd "$HERE"
status=0
say "the guarantee's scenarios (PostgreSQL $PG_MAJOR)"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider test_scenarios.py "$@" || status=1
say "the lifecycle fuzzer (PostgreSQL $PG_MAJOR)"
"$VENV/bin/python" fuzz.py --seeds "${FUZZ_SEEDS:-12}" ${FUZZ_SEED:+--seed "$FUZZ_SEED"} || status=1
exit "$status"
