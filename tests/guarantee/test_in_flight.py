"""Ids at past times against DEFAULT ids whose rows are not in an index yet, and against other
roles' backfills (issue 55):

* a DEFAULT id whose row a slow BEFORE INSERT trigger holds for 3 s, while another session hands
  out every remainder of the milliseconds around it with next_shard_id_at: none equals it (the
  backfill waits for the slow row's transaction, then sees its id in the index);
* the same with an id an application takes with SELECT next_shard_id(...) and inserts 3 s later
  in the same transaction;
* a DEFAULT insert left open (idle in transaction) does not hold up a backfill of milliseconds
  before it: the backfill stays below it;
* another role's open backfill of its own table fills every shared reservation; a backfill of a
  table of mine neither fails nor locks that role's table;
* a reservation made by a caller who may read the table: a role without read access is refused
  (42501) instead of being handed a remainder that tells which ids exist.

Each fails on cec376e (before issue 55). Run by tests/guarantee/run.sh."""

import threading
import time

import psycopg
import pytest


def slow_row_setup(conn):
    conn.execute("CREATE SEQUENCE s")
    # a non-unique index: a repeat is stored and counted, not refused
    conn.execute("CREATE TABLE t (id bigint DEFAULT next_shard_id('s', 3), source text)")
    conn.execute("CREATE INDEX ON t (id)")
    conn.execute("""
        CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.source = 'slow' THEN PERFORM pg_sleep(3); END IF;
            RETURN NEW;
        END $$""")
    conn.execute("CREATE TRIGGER slow BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION slow()")


def backfill_around(cluster, db, started, before_ms=15, after_ms=15):
    """Every remainder of every millisecond from before_ms before `started` (a Unix time, s) to
    after_ms after it, handed out by next_shard_id_at and stored; returns how long it took."""
    # the newest of them must be a second in the past
    time.sleep(max(0.0, started + after_ms / 1000 + 1.3 - time.time()))
    began = time.time()
    with cluster.connect(db) as conn:
        conn.execute(
            "INSERT INTO t (id, source) "
            "SELECT next_shard_id_at('s', 3, to_timestamp(%s) + ms * interval '1 ms'), 'backfill' "
            "  FROM generate_series(-%s::int, %s::int) ms, generate_series(1, 1024)",
            (started, before_ms, after_ms))
    return time.time() - began


def repeats(cluster, db):
    return cluster.one("SELECT count(*) - count(DISTINCT id) FROM t", db)


def test_a_default_id_held_by_a_slow_trigger_is_not_handed_out_again(cluster, db):
    with cluster.connect(db) as conn:
        slow_row_setup(conn)
    ready = threading.Event()
    at = []

    def slow_insert():
        with cluster.connect(db) as conn:
            at.append(time.time())
            ready.set()
            conn.execute("INSERT INTO t (source) VALUES ('slow')")

    slow = threading.Thread(target=slow_insert)
    slow.start()
    ready.wait()
    # (a new connection's first id takes some tens of milliseconds: every millisecond from 20
    # before to 150 after the insert was sent, 174,080 ids)
    took = backfill_around(cluster, db, at[0], before_ms=20, after_ms=150)
    slow.join()
    slow_id = cluster.one("SELECT id FROM t WHERE source = 'slow'", db)
    assert cluster.one("SELECT count(*) FROM t WHERE id = %s", db, (slow_id,)) == 1, \
        "the slow row's id was handed out again"
    assert repeats(cluster, db) == 0
    # it waited for the slow row's transaction (the trigger sleeps 3 s from `started`)
    assert took > 0.3


def test_an_id_taken_by_select_and_inserted_later_in_its_transaction_is_not_handed_out_again(cluster, db):
    with cluster.connect(db) as conn:
        slow_row_setup(conn)
    ready = threading.Event()
    at = []

    def app():
        with cluster.connect(db, autocommit=False) as conn:
            id_ = conn.execute("SELECT next_shard_id('s', 3)").fetchone()[0]
            at.append(conn.execute("SELECT extract(epoch FROM shard_id_extract_timestamp(%s))::float8", (id_,)).fetchone()[0])
            ready.set()
            time.sleep(3)
            conn.execute("INSERT INTO t (id, source) VALUES (%s, 'app')", (id_,))
            conn.commit()

    thread = threading.Thread(target=app)
    thread.start()
    ready.wait()
    backfill_around(cluster, db, at[0])
    thread.join()
    assert cluster.one("SELECT count(*) FROM t WHERE source = 'app'", db) == 1
    assert repeats(cluster, db) == 0


def test_an_open_default_insert_does_not_hold_up_a_backfill_of_earlier_milliseconds(cluster, db):
    with cluster.connect(db) as conn:
        slow_row_setup(conn)
    with cluster.connect(db, autocommit=False) as idle:
        idle.execute("INSERT INTO t (source) VALUES ('idle in transaction')")
        with cluster.connect(db) as conn:
            conn.execute("SET lock_timeout = '5s'")
            time.sleep(1.2)
            began = time.time()
            # an hour ago: below the idle transaction's ids, no wait
            conn.execute("INSERT INTO t (id, source) SELECT next_shard_id_at('s', 3, now() - interval '1 hour'), "
                         "'old' FROM generate_series(1, 3000)")
            assert time.time() - began < 4
            # a millisecond at or after the open insert's: it waits for it, and lock_timeout applies
            with pytest.raises(psycopg.errors.LockNotAvailable):
                conn.execute("SET lock_timeout = '300ms'")
                conn.execute("SELECT next_shard_id_at('s', 3, now() - interval '1.1 s')")
        idle.commit()
    assert repeats(cluster, db) == 0


def test_another_roles_open_backfill_neither_fails_nor_is_locked_by_mine(cluster, db):
    with cluster.connect(db) as conn:
        for role in ("bf_alice", "bf_bob"):
            conn.execute(f"DROP OWNED BY {role}" if conn.execute(
                "SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() else "SELECT 1")
            conn.execute(f"DROP ROLE IF EXISTS {role}")
            conn.execute(f"CREATE ROLE {role}")
            conn.execute(f"CREATE SCHEMA {role} AUTHORIZATION {role}")
            conn.execute(f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO {role}")
    with cluster.connect(db, autocommit=False) as bob:
        bob.execute("SET ROLE bf_bob")
        bob.execute("CREATE SEQUENCE bf_bob.s")
        bob.execute("CREATE TABLE bf_bob.t (id bigint PRIMARY KEY DEFAULT next_shard_id('bf_bob.s', 1))")
        bob.commit()
        bob.execute("SET ROLE bf_bob")
        # more milliseconds than the shared reservations hold (4,096), stored, left open
        bob.execute("INSERT INTO bf_bob.t SELECT next_shard_id_at('bf_bob.s', 1, now() - interval '1 day' + ms * interval '1 ms') "
                    "  FROM generate_series(1, 5000) ms")
        with cluster.connect(db, autocommit=False) as alice:
            alice.execute("SET ROLE bf_alice")
            alice.execute("CREATE SEQUENCE bf_alice.s")
            alice.execute("CREATE TABLE bf_alice.t (id bigint PRIMARY KEY DEFAULT next_shard_id('bf_alice.s', 1))")
            stored = alice.execute(
                "INSERT INTO bf_alice.t SELECT next_shard_id_at('bf_alice.s', 1, now() - interval '2 days' + ms * interval '1 ms') "
                "  FROM generate_series(1, 3000) ms RETURNING 1").rowcount
            assert stored == 3000
            # nothing of bob's is left locked by alice
            pid = alice.info.backend_pid
            with cluster.connect(db) as owner:
                assert owner.execute("SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                                     " WHERE l.pid = %s AND c.relnamespace = 'bf_bob'::regnamespace",
                                     (pid,)).fetchone()[0] == 0
            alice.commit()
        bob.commit()


def test_a_reserved_remainder_is_not_handed_to_a_caller_who_may_not_read_the_table(cluster, db):
    with cluster.connect(db) as conn:
        conn.execute("CREATE SEQUENCE s")
        conn.execute("CREATE TABLE private_t (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 2))")
        conn.execute("DROP ROLE IF EXISTS usage_only_55")
        conn.execute("CREATE ROLE usage_only_55")
        conn.execute("GRANT USAGE ON SEQUENCE s TO usage_only_55")
    with cluster.connect(db, autocommit=False) as owner:
        # the owner's backfill leaves a filled reservation of that millisecond, open
        ts = owner.execute("SELECT now() - interval '1 hour'").fetchone()[0]
        owner.execute("INSERT INTO private_t SELECT next_shard_id_at('s', 2, %s)", (ts,))
        with cluster.connect(db) as caller:
            caller.execute("SET ROLE usage_only_55")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                caller.execute("SELECT next_shard_id_at('s', 2, %s)", (ts,))
        owner.rollback()
