"""The SQL edition through pg_tle (Trusted Language Extensions: what RDS, Aurora and Supabase's
database.dev install SQL extensions with), built from ../shared/vendor/pg_tle-1.5.3.tar.gz by
tests/sql_edition/run.sh: pgtle.install_extension by a role that is a member of pgtle_admin and not
a superuser, CREATE EXTENSION into a schema of its choosing, ids drawn; then an update installed
with pgtle.install_update_path and ALTER EXTENSION ... UPDATE, the guard and its ids carried across
it; and DROP EXTENSION."""

import os

import pytest

from conftest import psql
from pgcluster import Cluster


def one(conn, query, params=None):
    return conn.execute(query, params).fetchone()[0]


@pytest.fixture(scope="module")
def tle():
    c = Cluster("sqled_pgtle", preload=False, conf=["shared_preload_libraries = 'pg_tle'"])
    c.sql("CREATE EXTENSION pg_tle")
    c.sql("CREATE ROLE dba LOGIN")
    c.sql("GRANT pgtle_admin TO dba")
    c.sql("GRANT CREATE ON DATABASE postgres TO dba")
    c.sql("GRANT CREATE ON SCHEMA public TO dba")
    yield c
    c.destroy()


def test_installed_and_updated_through_pg_tle(tle, edition):
    psql(tle, "postgres", "-f", os.path.join(edition, "pg_shard_id_sql_pgtle.sql"), user="dba")
    with tle.connect() as conn:
        conn.execute("SET ROLE dba")
        assert one(conn, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user") is False
        conn.execute("CREATE SCHEMA ids")
        conn.execute("CREATE EXTENSION pg_shard_id_sql SCHEMA ids")
        assert one(conn, "SELECT extversion FROM pg_extension WHERE extname = 'pg_shard_id_sql'") == "0.7.0"
        conn.execute("CREATE SEQUENCE photos_id_seq")
        conn.execute("SELECT ids.shard_id_guard('photos_id_seq')")
        conn.execute("CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT ids.next_shard_id('photos_id_seq', 5), x int)")
        conn.execute("INSERT INTO photos (x) SELECT g FROM generate_series(1, 20000) g")
        before = one(conn, "SELECT max(id) FROM photos")
        # an update: a script for the next version, installed the way pg_tle installs them
        conn.execute("SELECT pgtle.install_update_path('pg_shard_id_sql', '0.7.0', '0.7.1', "
                     "$u$COMMENT ON FUNCTION @extschema@.next_shard_id(regclass, integer) IS 'updated'$u$)")
        conn.execute("ALTER EXTENSION pg_shard_id_sql UPDATE TO '0.7.1'")
        assert one(conn, "SELECT extversion FROM pg_extension WHERE extname = 'pg_shard_id_sql'") == "0.7.1"
        assert one(conn, "SELECT obj_description('ids.next_shard_id(regclass, integer)'::regprocedure)") == "updated"
        conn.execute("INSERT INTO photos (x) SELECT g FROM generate_series(1, 20000) g")
        assert one(conn, "SELECT min(id) FROM photos WHERE id > %s", (before,)) is not None
        assert one(conn, "SELECT count(*) FROM photos WHERE id <= %s", (before,)) == 20000
        assert one(conn, "SELECT count(DISTINCT id) FROM photos") == 40000
        # its guard's registers belong to the extension's schema and go with it
        conn.execute("DROP TABLE photos")
        conn.execute("DROP EXTENSION pg_shard_id_sql")
        assert one(conn, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'ids'::regnamespace") == 0
