#!/usr/bin/env bash
# Per-id cost of earlier releases beside this build, in one run: each release's library is built
# from its commit (release_build, scripts/lib.sh: once per PostgreSQL major, cached), installed,
# and measured with bench/cost_gate.sh (callgrind, instructions per id above nextval(),
# marginal); then this build is installed again and measured, with bench/reference_ids.c's two
# C generators (nextval() + one clock read, with no guard and with one spinlock) beside it.
#   bench/cost_compare.sh                    0.3.0 and 0.5.0 beside this build, PostgreSQL 15
#   PG_MAJOR=18 bench/cost_compare.sh 0.5.0=0eea5d9
source "$(dirname "$0")/../scripts/lib.sh"
releases=("$@")
[ ${#releases[@]} -gt 0 ] || releases=(0.3.0=0b3df35 0.5.0=0eea5d9)
measure() { { bash "$REPO/bench/cost_gate.sh" 2>&1 || true; } | sed -n "s/.*above nextval(): //p" | tail -1; }

mkdir -p "$RUN_DIR"
rows=()
for r in "${releases[@]}"; do
    install_release_build "$(release_build "${r#*=}")"
    rows+=("${r%%=*} (${r#*=}) $(measure)")
done
install_extension release >/dev/null
# this build, and the C reference generators in the same cluster (bench/reference_ids.c)
out="$(GATE_REFERENCE=1 bash "$REPO/bench/cost_gate.sh" 2>&1 || true)"
rows+=("this build ($(git -C "$REPO" rev-parse --short HEAD)) $(sed -n "s/.*above nextval(): //p" <<<"$out" | tail -1)")
rows+=("unguarded (C) $(sed -n "s/.*reference reference_unguarded_id: \([0-9.]*\) .*/\1/p" <<<"$out")")
rows+=("one lock (C) $(sed -n "s/.*reference reference_one_lock_id: \([0-9.]*\) .*/\1/p" <<<"$out")")
echo
echo "Instructions per id above nextval() (callgrind, marginal over $(( ${GATE_IDS:-20000} )) ids, borrow, PostgreSQL $PG_MAJOR):"
for row in "${rows[@]}"; do echo "  $row"; done
