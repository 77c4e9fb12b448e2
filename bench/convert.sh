#!/usr/bin/env bash
# Converting a 10 M-row table's keys while two clients insert (issue 37): bench/convert.py, in a
# throwaway cluster of the selected PostgreSQL (PG_MAJOR, default 15) with the installed build.
# About 15 minutes at 10 M rows on 2 cores.
#   bench/convert.sh                       CONVERT_ROWS=10000000 CONVERT_BATCH=50000 CONVERT_ABANDON=0
source "$(dirname "$0")/../scripts/lib.sh"
VENV="$REPO/target/guarantee/venv"
ensure_venv "$VENV" "$REPO/tests/guarantee/requirements.txt"
export PG_BIN PG_SHARD_ID_RUN_DIR="$RUN_DIR"
"$VENV/bin/python" "$REPO/bench/convert.py"
