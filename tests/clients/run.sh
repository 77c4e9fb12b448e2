#!/usr/bin/env bash
# Client tests: ids through real drivers and ORMs, pinned from the registries, against a throwaway
# cluster with the extension: node-postgres (js/ids.test.mjs), the JavaScript ORMs Prisma 7, TypeORM,
# Drizzle (+ drizzle-kit), Knex, Sequelize and Kysely (js/orm/, node --test), psycopg 3, SQLAlchemy 2 +
# Alembic and Django (python/, pytest), sqlx and Diesel (rust/, cargo test, its own Cargo project),
# JDBC and Hibernate 3.6 (java/, Debian's jars). Each suite gets a database of its own. The server logs every
# statement (SERVER_LOG): the ORM tests read it to check that no INSERT sends an id. What they check is what the
# docs/javascript.md and docs/orms.md say.
#
# Packages: npm ci into tests/clients/node_modules (package-lock.json), pip into a virtualenv in
# target/clients/venv (requirements.txt), reused while requirements.txt is unchanged; crates by
# cargo (rust/Cargo.lock, built in target/clients/rust); Debian's jars (scripts/lib.sh installs).
# Ends with "clients: N passed, M failed" (suites); exits non-zero if any failed.
source "$(dirname "$0")/../../scripts/lib.sh"
stop_clusters_at_exit
HERE="$REPO/tests/clients"
VENV="$REPO/target/clients/venv"

say "client packages (npm: pg, pg-copy-streams, prisma, typeorm, drizzle, knex, sequelize, kysely; PyPI: psycopg, SQLAlchemy, alembic, Django, pytest)"
(cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error) # exactly the lock file; a few seconds
ensure_venv "$VENV" "$HERE/requirements.txt"

start_cluster clients yes "fsync = off" "log_statement = 'all'"
export SERVER_LOG="$PGHOST/server.log"
# a mask key for the masked-shortcode test, owner-only in the data directory (docs/masking.md)
as_pg sh -c "umask 077 && printf 'key 1 %s\ncurrent 1\n' '$(printf '5a%.0s' $(seq 32))' > '$PGHOST/data/pg_shard_id.keys'"
suite() { # suite NAME COMMAND...: runs COMMAND against a new database NAME with the extension
    local name="$1"
    shift
    say "$name"
    q -c "CREATE DATABASE $name"
    q -d "$name" -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id"
    if (cd "$HERE" && PGDATABASE="$name" "$@" 2>&1 | sed 's/^/  /'; exit "${PIPESTATUS[0]}"); then
        check "$name" passed passed
    else
        check "$name" failed passed
    fi
}
export PGHOST PGPORT PGUSER
pytest=("$VENV/bin/python" -m pytest -q -p no:cacheprovider)
suite clients_node node --test --test-reporter=spec js/ids.test.mjs
for orm in prisma typeorm drizzle knex sequelize kysely; do
    suite "clients_$orm" node --test --test-reporter=spec "js/orm/$orm.test.mjs"
done
suite clients_psycopg "${pytest[@]}" python/test_psycopg.py
suite clients_sqlalchemy "${pytest[@]}" python/test_sqlalchemy.py
suite clients_django "${pytest[@]}" python/test_django.py
# Rust: its own Cargo project (not in the workspace); the first suite compiles it (~40 s on 2 cores)
rust_test=(env CARGO_TARGET_DIR="$REPO/target/clients/rust" cargo test --locked --manifest-path rust/Cargo.toml)
suite clients_sqlx "${rust_test[@]}" --lib --test sqlx
suite clients_diesel "${rust_test[@]}" --test diesel
# Java: Debian's pgjdbc and Hibernate 3.6 (ensure_setup installs them), javac into target/clients/java
suite clients_jdbc bash java/run.sh jdbc
suite clients_hibernate bash java/run.sh hibernate
stop_cluster clients
echo
echo "clients: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
