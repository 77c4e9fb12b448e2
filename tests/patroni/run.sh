#!/usr/bin/env bash
# High-availability test (issue 58): docs/production.md's runbook for Patroni, each step run for
# real with Debian's packages: etcd 3.4 and three Patroni 3.0.2 members on loopback, in
# synchronous_mode, pg_shard_id preloaded and its epoch set through Patroni's own configuration
# (the DCS), three writers inserting through a DEFAULT next_shard_id(...) all along: a switchover,
# a failover (the leader's Patroni and PostgreSQL killed), the old leader rejoining through
# Patroni's pg_rewind, a rolling restart (replicas, a switchover, the old leader: what an
# extension upgrade does), and the synchronous standby's restart. Checks: no id acknowledged twice,
# every acknowledged row on the last leader and its replicas, no writer error but the reconnects
# of a leader change (never 23505, never pg_shard_id's own), the library and epoch on every member.
#
# Installs patroni, python3-etcd and etcd-server from Debian when missing (without Recommends, and
# without starting etcd's service); runs its own etcd and members on free ports. Needs a build of
# pg_shard_id installed into PostgreSQL 15 (scripts/test.sh does that): Debian's Patroni 3.0.2
# supports PostgreSQL up to 15. Ends with "patroni: N passed, M failed".
source "$(dirname "$0")/../../scripts/lib.sh"
HERE="$REPO/tests/patroni"

select_pg "${PG_MAJOR:-15}"
ensure_debian_packages patroni python3-etcd etcd-server
VENV="$REPO/target/guarantee/venv"
ensure_venv "$VENV" "$REPO/tests/guarantee/requirements.txt"
WORK="$RUN_DIR/patroni"
as_pg rm -rf "$WORK" 2>/dev/null || rm -rf "$WORK"
mkdir -p "$WORK"
[ "$(id -u)" = 0 ] && chown postgres: "$RUN_DIR" "$WORK"
"$VENV/bin/python" "$HERE/runbook.py" --work "$WORK" --pg-bin "$PG_BIN"
