"""Masking under its threat model (issue 38), against real clusters (tests/guarantee/pgcluster.py):
a rotation that every process of one query sees at once, a key file owned by another OS user,
and a key id whose key is not the one the database recorded, on a restored copy (pg_dump) and
on a physical standby given another key file. (Privileges, symbolic links, the records and the
health check row are in pg_regress `mask`.) Run by tests/mask/run.sh."""

import os
import subprocess
import sys

import psycopg
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "guarantee"))
from pgcluster import PG_BIN, Cluster, as_postgres, wait_for  # noqa: E402

KEY_1 = "11" * 32
KEY_1_OTHER = "12" * 32
KEY_2 = "22" * 32


def write_keys(cluster, *lines):
    """Replaces the key file as a rotation should: a new owner-only file renamed over the old."""
    path = os.path.join(cluster.data, "pg_shard_id.keys")
    as_postgres(["sh", "-c", f"umask 077 && cat > '{path}.new' && mv '{path}.new' '{path}'"],
                input="".join(line + "\n" for line in lines))


@pytest.fixture(scope="module")
def cluster():
    c = Cluster("mask_threats", ["max_worker_processes = 8", "max_parallel_workers = 4"])
    yield c
    c.destroy()


def new_db(cluster, name):
    cluster.sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    cluster.sql(f"CREATE DATABASE {name}")
    cluster.sql("SET client_min_messages = warning; CREATE EXTENSION pg_shard_id", name)
    return name


PARALLEL = ("SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; "
            "SET min_parallel_table_scan_size = 0; SET max_parallel_workers_per_gather = 2")


def test_a_rotation_reaches_every_process_of_a_query_at_once(cluster):
    """0.6.0: the leader kept the key it read first, its parallel workers read the rotated file,
    and one query masked rows under two keys, silently."""
    db = new_db(cluster, "rotation")
    write_keys(cluster, f"key 1 {KEY_1}", "current 1")
    rows = 300_000
    with cluster.connect(db) as conn, cluster.connect(db) as other:
        conn.execute(f"CREATE TABLE big AS SELECT g::bigint AS id FROM generate_series(1, {rows}) g")
        conn.execute("ANALYZE big")
        # both sessions read key 1 as current
        assert conn.execute("SELECT shard_id_mask(7, 'x') = shard_id_mask(7, 'x', 1)").fetchone()[0]
        assert other.execute("SELECT shard_id_mask(7, 'x') = shard_id_mask(7, 'x', 1)").fetchone()[0]
        conn.execute(PARALLEL)
        query = "SELECT id, shard_id_mask(id, 'x') AS m, shard_id_unmask(id, 'x') AS u FROM big"
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + query).fetchall())
        assert "Workers Launched: 2" in plan, plan  # (else this test proves nothing)
        write_keys(cluster, f"key 1 {KEY_1}", f"key 2 {KEY_2}", "current 2")
        # what key 2 makes, computed by a session that starts after the rotation, without workers
        with cluster.connect(db) as fresh:
            fresh.execute("SET max_parallel_workers_per_gather = 0")
            fresh.execute("CREATE TABLE want AS SELECT id, shard_id_mask(id, 'x') AS m, "
                          "shard_id_unmask(id, 'x') AS u FROM big")
        # one parallel CREATE TABLE AS in the session that read key 1 before: its first mask after
        # the rotation reads the new file (and the database's check values) inside it
        conn.execute("CREATE TABLE got AS " + query)
        differ = conn.execute("SELECT count(*) FILTER (WHERE g.m <> w.m), count(*) FILTER (WHERE g.u <> w.u), "
                              "count(*) FROM got g JOIN want w USING (id)").fetchone()
        assert differ == (0, 0, rows), f"masked / unmasked under another key, of {rows}: {differ}"
        # the other session, which read key 1 before the rotation, sees key 2 at its next statement
        assert other.execute("SELECT shard_id_mask(7, 'x') = shard_id_mask(7, 'x', 2)").fetchone()[0]


def test_within_a_transaction_the_keys_never_change(cluster):
    """A cursor fetched in parts (a JDBC fetch size, the extended protocol's portals) masks every
    row under the key its transaction started with; the next transaction has the new one."""
    db = new_db(cluster, "cursor")
    write_keys(cluster, f"key 1 {KEY_1}", "current 1")
    with cluster.connect(db, autocommit=False) as conn:
        conn.execute("DECLARE c CURSOR FOR SELECT g, shard_id_mask(g, 'x') FROM generate_series(1, 20) g")
        first = conn.execute("FETCH 10 FROM c").fetchall()
        write_keys(cluster, f"key 1 {KEY_1}", f"key 2 {KEY_2}", "current 2")
        rest = conn.execute("FETCH 10 FROM c").fetchall()
        under_1 = conn.execute("SELECT g, shard_id_mask(g, 'x', 1) FROM generate_series(1, 20) g").fetchall()
        assert first + rest == under_1
        conn.commit()
        assert conn.execute("SELECT shard_id_mask(7, 'x') = shard_id_mask(7, 'x', 2)").fetchone()[0]


def test_the_current_key_forms_run_in_the_leader_only(cluster):
    """What cannot be made consistent across processes is not labelled PARALLEL SAFE."""
    db = new_db(cluster, "labels")
    rows = cluster.sql("SELECT p.oid::regprocedure::text, p.proparallel, p.provolatile FROM pg_proc p "
                       "WHERE p.proname LIKE 'shard_id_%mask%' ORDER BY 1", db)
    assert dict((r[0], (r[1], r[2])) for r in rows) == {
        "shard_id_mask(bigint,text)": ("r", "s"),
        "shard_id_mask(bigint,text,integer)": ("s", "i"),
        "shard_id_mask_keys_record()": ("u", "v"),
        "shard_id_mask_shortcode(bigint,text)": ("r", "s"),
        "shard_id_unmask(bigint,text)": ("r", "s"),
        "shard_id_unmask(bigint,text,integer)": ("s", "i"),
        "shard_id_unmask_shortcode(text,text)": ("s", "i"),
    }


def test_a_key_file_of_another_os_user_is_refused(cluster):
    db = new_db(cluster, "owner")
    path = os.path.join(cluster.data, "pg_shard_id.keys")
    write_keys(cluster, f"key 1 {KEY_1}", "current 1")
    try:
        os.chown(path, 0, 0)  # root's (these tests run as root, the server as postgres)
        os.chmod(path, 0o644)  # readable, so that only the owner check can refuse it
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="owned by the OS user 0"):
            cluster.sql("SELECT shard_id_mask(1, 'x')", db)
    finally:
        os.remove(path)


def test_a_restored_copy_with_another_key_under_the_same_id_is_refused(cluster):
    """The records travel with pg_dump; the restored server's key 1 is another key."""
    db = new_db(cluster, "restore_src")
    write_keys(cluster, f"key 1 {KEY_1}", "current 1")
    cluster.sql("SELECT * FROM shard_id_mask_keys_record()", db)
    cluster.sql("CREATE SEQUENCE s; CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 1), "
                "public_id bigint GENERATED ALWAYS AS (shard_id_mask(id, 'photos', 1)) STORED); "
                "INSERT INTO photos SELECT FROM generate_series(1, 100)", db)
    dump = subprocess.run([f"{PG_BIN}/pg_dump", "-h", cluster.dir, "-p", str(cluster.port), "-U", "postgres", db],
                          check=True, capture_output=True).stdout
    other = Cluster("mask_threats_copy")
    try:
        write_keys(other, f"key 1 {KEY_1_OTHER}", "current 1")
        other.sql("CREATE DATABASE copy")
        restore = subprocess.run([f"{PG_BIN}/psql", "-X", "-q", "-h", other.dir, "-p", str(other.port), "-U",
                                  "postgres", "-d", "copy"], input=dump, capture_output=True)
        # the records come before the table (schema _pg_shard_id): its masked column is refused,
        # not recomputed under the other key
        assert b"its key for the id(s) 1 is not the key this database recorded" in restore.stderr, restore.stderr
        assert other.one("SELECT count(*) FROM photos", "copy") == 0
        with pytest.raises(psycopg.errors.ConfigFileError, match="for the id\\(s\\) 1 is not the key"):
            other.sql("SELECT shard_id_mask(1, 'photos', 1)", "copy")
        status = other.one("SELECT status FROM shard_id_check() WHERE \"check\" = 'mask_keys'", "copy")
        assert status == "failed"
        # with the right key, the same dump restores and every masked value is the source's
        write_keys(other, f"key 1 {KEY_1}", "current 1")
        other.sql("DROP DATABASE copy")
        other.sql("CREATE DATABASE copy")
        subprocess.run([f"{PG_BIN}/psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", other.dir, "-p",
                        str(other.port), "-U", "postgres", "-d", "copy"], input=dump, check=True, capture_output=True)
        assert other.sql("SELECT sum(public_id % 1000003) FROM photos", "copy") == \
            cluster.sql("SELECT sum(public_id % 1000003) FROM photos", db)
    finally:
        other.destroy()


def test_a_standby_given_another_key_is_refused(cluster):
    """The records reach a physical standby through WAL; its own key file says another key."""
    db = new_db(cluster, "standby_src")
    write_keys(cluster, f"key 1 {KEY_1}", "current 1")
    cluster.sql("SELECT * FROM shard_id_mask_keys_record()", db)
    standby = Cluster("mask_threats_standby", standby_of=cluster)
    try:
        lsn = cluster.one("SELECT pg_current_wal_lsn()::text")
        assert wait_for(lambda: standby.one("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", params=(lsn,)), 30)
        write_keys(standby, f"key 1 {KEY_1_OTHER}", "current 1")
        with pytest.raises(psycopg.errors.ConfigFileError, match="for the id\\(s\\) 1 is not the key"):
            standby.sql("SELECT shard_id_mask(1, 'photos')", db)
        write_keys(standby, f"key 1 {KEY_1}", "current 1")
        assert standby.one("SELECT shard_id_mask(1, 'photos')", db) == cluster.one("SELECT shard_id_mask(1, 'photos')", db)
    finally:
        standby.destroy()
