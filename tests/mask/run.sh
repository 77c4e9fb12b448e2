#!/usr/bin/env bash
# Masking under its threat model (issue 38): test_threats.py against real clusters (a rotation
# seen by every process of a parallel query at once, a key file of another OS user, a restored
# copy and a physical standby given another key under a recorded id). Uses the guarantee
# suite's virtualenv and cluster helper. Needs a test build installed (scripts/test.sh does that).
source "$(dirname "$0")/../../scripts/lib.sh"
VENV="$REPO/target/guarantee/venv"
ensure_venv "$VENV" "$REPO/tests/guarantee/requirements.txt"
export PG_BIN PG_SHARD_ID_RUN_DIR="$RUN_DIR"
cd "$REPO/tests/mask"
say "masking's threat model (PostgreSQL $PG_MAJOR)"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider test_threats.py "$@"
