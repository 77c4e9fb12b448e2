#!/usr/bin/env bash
# Builds the SQL edition (issue 56: the ids and their guard in SQL and PL/pgSQL, for managed
# PostgreSQL, where no library can be loaded) from sql/edition/*.sql into target/sql_edition/
# (or the folder given as $1):
#   pg_shard_id_sql--VERSION.sql  the extension script (its schema written @extschema@), which
#                                 pg_tle installs (RDS, Aurora, Supabase's database.dev)
#   pg_shard_id_sql.control       for a server whose extension folder one may write to
#   pg_shard_id_sql_pgtle.sql     SELECT pgtle.install_extension(...) of that script
#   pg_shard_id_sql.sql           the plain script, into a schema of the caller's choosing:
#                                 psql -v schema=ids -f pg_shard_id_sql.sql (Cloud SQL, AlloyDB,
#                                 Azure, Neon, Crunchy Bridge)
# docs/managed.md says how each is installed; tests/sql_edition installs each for real.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/sql_edition}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
mkdir -p "$out"
script="$out/pg_shard_id_sql--$version.sql"
{
    echo "-- pg_shard_id $version, SQL edition: made by scripts/sql_edition.sh from sql/edition/ (do not edit)"
    for part in ${SQL_EDITION_PARTS:-settings generate switch decode}; do
        echo
        cat "sql/edition/$part.sql"
    done
} > "$script"
if grep -qi "MODULE_PATHNAME\|LANGUAGE c\b" "$script"; then
    echo "!!! $script names a library" >&2
    exit 1
fi
cat > "$out/pg_shard_id_sql.control" <<CONTROL
comment = 'Instagram-style 64-bit ids, guarded against repeats, in SQL (pg_shard_id''s SQL edition)'
default_version = '$version'
relocatable = false
trusted = false
CONTROL
body="$(cat "$script")"
cat > "$out/pg_shard_id_sql_pgtle.sql" <<PGTLE
-- pg_shard_id $version, SQL edition, for pg_tle (as a member of pgtle_admin), then
-- CREATE EXTENSION pg_shard_id_sql SCHEMA ids; (docs/managed.md#pg_tle)
SELECT pgtle.install_extension('pg_shard_id_sql', '$version',
    'Instagram-style 64-bit ids, guarded against repeats, in SQL (pg_shard_id''s SQL edition)',
\$pg_shard_id_sql\$
$body
\$pg_shard_id_sql\$);
PGTLE
cat > "$out/pg_shard_id_sql.sql" <<PLAIN
-- pg_shard_id $version, SQL edition, as a plain script (docs/managed.md#script):
--     psql -v schema=ids -f pg_shard_id_sql.sql
-- installs it into schema ids (made if missing), in one transaction, with the rights of the role
-- that runs it (no superuser needed: CREATE on the database, or a schema it owns). Without
-- psql, set the schema's name in the set_config line below.
\\set ON_ERROR_STOP on
SELECT pg_catalog.set_config('pg_shard_id_sql.schema', :'schema', false);
DO \$pg_shard_id_install\$
DECLARE
    target text := pg_catalog.current_setting('pg_shard_id_sql.schema');
BEGIN
    IF pg_catalog.to_regnamespace(pg_catalog.quote_ident(target)) IS NULL THEN
        -- (a schema made here: every role may call its functions, as in public)
        EXECUTE pg_catalog.format('CREATE SCHEMA %I', target);
        EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %I TO PUBLIC', target);
    END IF;
    EXECUTE pg_catalog.replace(\$pg_shard_id_sql\$
$body
\$pg_shard_id_sql\$, '@extschema@', pg_catalog.quote_ident(target));
END
\$pg_shard_id_install\$;
PLAIN
echo "$out: pg_shard_id_sql--$version.sql, pg_shard_id_sql.control, pg_shard_id_sql_pgtle.sql, pg_shard_id_sql.sql"
