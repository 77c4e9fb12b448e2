"""Ids at past times against the clock, privileges and the DEFAULT's own history (issue 50):

* a backfill just behind the clock, then the server's real clock stepped back into its
  milliseconds (libfaketime): the DEFAULT repeats none of its ids, and says the clock stepped;
* a role with USAGE on the sequence only: next_shard_id_at refuses (42501) naming the table it may
  not read, before it locks anything;
* which ids can come back, exactly as docs/guarantee.md says: an id whose row is gone from every
  index (rolled back or deleted, then vacuumed) can be handed out again by next_shard_id_at at its
  millisecond once no shared reservation holds it (a restart, or an eviction); one still in an
  index (a dead entry not vacuumed yet) cannot; the DEFAULT never issues any of them again;
* ids drawn before a savepoint and stored in it (an ORM's retry): while the savepoint is open
  their rows do not let other backfills take their reservations, so rolled back, vacuumed and
  stored again they repeat nothing (the 27th review: 20,480 of them repeated); a savepoint that
  draws and stores its own ids (a conversion's batch) still draws more milliseconds than the
  shared reservations hold, and so do later batches drawing again from the same milliseconds and
  a savepoint per row (the review of that fix: 54000 there).

Run by tests/guarantee/run.sh."""

import time

import psycopg
import pytest
from pgcluster import Cluster, vacuum_until_nothing_dead


@pytest.fixture(scope="module")
def clock_cluster():
    c = Cluster("backfill_clock", fake_clock=True)
    yield c
    c.destroy()


def fresh_db(cluster, name):
    cluster.sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    cluster.sql(f"CREATE DATABASE {name}")
    cluster.sql("SET client_min_messages = warning; CREATE EXTENSION pg_shard_id", name)
    return name


def test_a_clock_step_back_after_a_backfill_near_the_clock_repeats_nothing(clock_cluster):
    db = fresh_db(clock_cluster, "step_after_backfill")
    with clock_cluster.connect(db) as conn:
        conn.execute("CREATE SEQUENCE s")
        # a non-unique index: a repeat is stored and counted, not refused
        conn.execute("CREATE TABLE t (id bigint DEFAULT next_shard_id('s', 1), source text)")
        conn.execute("CREATE INDEX ON t (id)")
        conn.execute("INSERT INTO t (source) SELECT 'default' FROM generate_series(1, 100)")
    clock_cluster.set_clock(11)
    with clock_cluster.connect(db) as conn:
        # every millisecond from 9 s to 2 s before the clock, 20 ids each
        backfilled = conn.execute(
            "WITH at AS (SELECT clock_timestamp() AS now) "
            "INSERT INTO t (id, source) SELECT next_shard_id_at('s', 1, ts), 'backfill' "
            "  FROM at, generate_series(at.now - interval '9 s', at.now - interval '2 s', interval '1 ms') ts, "
            "       generate_series(1, 20) "
            "RETURNING 1").rowcount
    assert backfilled > 100_000
    # NTP, a VM resumed, a snapshot restored: the clock steps back 8 s, into the backfill's
    # milliseconds
    log_before = len(clock_cluster.log_text())
    clock_cluster.set_clock(3)
    with clock_cluster.connect(db) as conn:
        for _ in range(6):
            conn.execute("INSERT INTO t (source) SELECT 'after the step' FROM generate_series(1, 5000)")
        repeats = conn.execute("SELECT count(*) - count(DISTINCT id) FROM t").fetchone()[0]
        after = conn.execute("SELECT min(id) FROM t WHERE source = 'after the step'").fetchone()[0]
        newest_backfill = conn.execute("SELECT max(id) FROM t WHERE source = 'backfill'").fetchone()[0]
    clock_cluster.set_clock(0)
    assert repeats == 0, f"{repeats} ids stored twice"
    assert after > newest_backfill
    assert "stepped back" in clock_cluster.log_text()[log_before:], "no WARNING of the clock step"


def test_a_role_with_usage_only_is_refused_before_anything_is_locked(cluster, db):
    with cluster.connect(db) as conn:
        conn.execute("CREATE SEQUENCE s")
        conn.execute("CREATE TABLE open_t (id bigint DEFAULT next_shard_id('s', 2), note text)")
        conn.execute("CREATE INDEX ON open_t (id)")
        conn.execute("CREATE TABLE private_t (id bigint DEFAULT next_shard_id('s', 2), secret text)")
        conn.execute("CREATE INDEX ON private_t (id)")
        conn.execute("INSERT INTO private_t (secret) SELECT 'x' FROM generate_series(1, 10)")
        role = f"{db}_usage_only"[-60:]
        conn.execute(f'DROP ROLE IF EXISTS "{role}"')
        conn.execute(f'CREATE ROLE "{role}"')
        conn.execute(f'GRANT USAGE ON SEQUENCE s TO "{role}"')
        conn.execute(f'GRANT SELECT, INSERT ON open_t TO "{role}"')
    with cluster.connect(db, autocommit=False) as caller:
        caller.execute(f'SET ROLE "{role}"')
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
            caller.execute("SELECT next_shard_id_at('s', 2, now() - interval '1 hour')")
        assert "public.private_t" in refused.value.diag.message_primary
        assert "GRANT SELECT ON public.private_t" in refused.value.diag.message_hint
        caller.rollback()
        # in an open transaction that failed on it: no lock on the table it may not read, and
        # its owner's ALTER goes through at once
        caller.execute(f'SET ROLE "{role}"')
        caller.execute("SAVEPOINT a")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            caller.execute("SELECT next_shard_id_at('s', 2, now() - interval '1 hour')")
        caller.execute("ROLLBACK TO SAVEPOINT a")
        pid = caller.info.backend_pid
        with cluster.connect(db) as owner:
            locks = owner.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND relation = 'private_t'::regclass",
                                  (pid,)).fetchone()[0]
            assert locks == 0
            owner.execute("SET lock_timeout = '2s'")
            owner.execute("ALTER TABLE private_t ADD COLUMN added int")
        caller.rollback()
        # granted SELECT, the same role gets its id
        with cluster.connect(db) as owner:
            owner.execute(f'GRANT SELECT ON private_t TO "{role}"')
        caller.execute(f'SET ROLE "{role}"')
        assert caller.execute("SELECT next_shard_id_at('s', 2, now() - interval '1 hour')").fetchone()[0] > 0
        caller.rollback()


def handed_out_again(conn, id_):
    """Whether next_shard_id_at hands `id_` out: every remainder of its millisecond and shard,
    drawn (and dropped) in one transaction."""
    with conn.transaction() as tx:
        got = conn.execute("SELECT next_shard_id_at('s', 4, shard_id_extract_timestamp(%s)) "
                           "  FROM generate_series(1, 1024)", (id_,)).fetchall()
        raise psycopg.Rollback(tx)
    return id_ in {g[0] for g in got}


def test_which_ids_can_come_back(cluster, db):
    """docs/guarantee.md, "Ids at past times": next_shard_id_at knows the ids in the indexes of the
    sequence's columns and those its shared reservations hold; an id in no index any more (its
    insert rolled back, or its row deleted, and vacuumed) and in no reservation (after a restart,
    or once the reservation of its millisecond was evicted) can be handed out again at its
    millisecond. The DEFAULT never issues an id twice."""
    with cluster.connect(db) as conn:
        conn.execute("CREATE SEQUENCE s")
        conn.execute("CREATE TABLE t (id bigint DEFAULT next_shard_id('s', 4), note text) WITH (autovacuum_enabled = off)")
        conn.execute("CREATE INDEX ON t (id)")
        with conn.transaction() as tx:
            rolled_back = conn.execute("INSERT INTO t (note) VALUES ('rolled back') RETURNING id").fetchone()[0]
            raise psycopg.Rollback(tx)
        deleted = conn.execute("INSERT INTO t (note) VALUES ('deleted') RETURNING id").fetchone()[0]
        kept = conn.execute("INSERT INTO t (note) VALUES ('kept') RETURNING id").fetchone()[0]
        conn.execute("DELETE FROM t WHERE id = %s", (deleted,))
        time.sleep(1.2)
        # dead index entries not vacuumed yet: still seen
        assert not handed_out_again(conn, rolled_back)
        assert not handed_out_again(conn, deleted)
        assert not handed_out_again(conn, kept)
        vacuum_until_nothing_dead(conn, "t")
    # gone from the index and, with a restart, from the shared reservations: the limit
    # docs/guarantee.md states
    cluster.restart()
    with cluster.connect(db) as conn:
        assert handed_out_again(conn, rolled_back)
        assert handed_out_again(conn, deleted)
        assert not handed_out_again(conn, kept)
        # the DEFAULT issues none of them again
        conn.execute("INSERT INTO t (note) SELECT 'more' FROM generate_series(1, 20000)")
        assert conn.execute("SELECT count(*) FROM t WHERE id IN (%s, %s)", (rolled_back, deleted)).fetchone()[0] == 0


def test_ids_stored_again_after_a_rollback_to_a_savepoint_repeat_nothing(cluster, db):
    with cluster.connect(db) as conn:
        conn.execute("CREATE SEQUENCE s")
        # a non-unique index: a repeat is stored and counted, not refused
        conn.execute("CREATE TABLE t (id bigint DEFAULT next_shard_id('s', 3), source text) "
                     "WITH (autovacuum_enabled = off)")
        conn.execute("CREATE INDEX ON t (id)")
        base = conn.execute("SELECT now() - interval '60 s'").fetchone()[0]
    with cluster.connect(db, autocommit=False) as t1, cluster.connect(db) as others:
        # t1 draws every remainder of 20 milliseconds, then stores them in a savepoint
        drawn = [r[0] for r in t1.execute(
            "SELECT next_shard_id_at('s', 3, ts) FROM generate_series(%s::timestamptz, "
            "  %s::timestamptz + interval '19 ms', interval '1 ms') ts, generate_series(1, 1024)",
            (base, base)).fetchall()]
        assert len(set(drawn)) == 20 * 1024
        t1.execute("SAVEPOINT a")
        t1.execute("INSERT INTO t (id, source) SELECT unnest(%s::bigint[]), 't1'", (drawn,))
        # another backfill of 20,000 milliseconds: every bucket of the shared reservations
        # needs room, and t1's entries look stored
        filled = others.execute(
            "INSERT INTO t (id, source) SELECT next_shard_id_at('s', 3, ts), 't2' "
            "  FROM generate_series(%s::timestamptz + interval '20 s', "
            "                       %s::timestamptz + interval '40 s', interval '1 ms') ts",
            (base, base)).rowcount
        assert filled == 20_001
        # the insert fails for another reason (an ORM's retry): rolled back, and vacuumed
        t1.execute("ROLLBACK TO SAVEPOINT a")
        others.execute("VACUUM t")
        # a third backfill at t1's milliseconds, stored and committed
        others.execute(
            "INSERT INTO t (id, source) SELECT next_shard_id_at('s', 3, ts), 't3' "
            "  FROM generate_series(%s::timestamptz, %s::timestamptz + interval '19 ms', "
            "                       interval '1 ms') ts", (base, base))
        # t1 stores its ids again and commits
        t1.execute("INSERT INTO t (id, source) SELECT unnest(%s::bigint[]), 't1'", (drawn,))
        t1.commit()
        repeats = others.execute("SELECT count(*) - count(DISTINCT id) FROM t").fetchone()[0]
    assert repeats == 0, f"{repeats} ids stored twice"


def test_a_savepoint_that_draws_and_stores_its_own_ids_is_not_limited(cluster, db):
    with cluster.connect(db) as conn:
        conn.execute("CREATE SEQUENCE s")
        conn.execute("CREATE TABLE t (id bigint DEFAULT next_shard_id('s', 6) UNIQUE)")
    with cluster.connect(db, autocommit=False) as conn:
        # 10,001 milliseconds (more than the 4,096 shared reservations) in an exception block
        # (a subtransaction, as a conversion's batch runs in) and in an explicit savepoint
        conn.execute("""
            DO $$ BEGIN
              BEGIN
                INSERT INTO t SELECT next_shard_id_at('s', 6, ts)
                  FROM generate_series(now() - interval '60 s', now() - interval '50 s',
                                       interval '1 ms') ts;
              EXCEPTION WHEN unique_violation THEN RAISE;
              END;
            END $$""")
        conn.execute("SAVEPOINT a")
        conn.execute("INSERT INTO t SELECT next_shard_id_at('s', 6, ts) "
                     "  FROM generate_series(now() - interval '40 s', now() - interval '30 s', "
                     "                       interval '1 ms') ts")
        conn.execute("RELEASE SAVEPOINT a")
        conn.commit()
        assert conn.execute("SELECT count(DISTINCT id) FROM t").fetchone()[0] == 20_002


def test_batches_and_a_savepoint_per_row_draw_again_from_the_same_milliseconds(cluster, db):
    """The review of the savepoint fix: an entry drawn from by a second (sub)transaction was held
    until that one ended, so a conversion's later batches (each in an EXCEPTION block of its own
    transaction) and a plpgsql block per row, drawing again from milliseconds drawn before, got
    54000 once 4,096 such entries were held; the first fix of it let go only when the oldest
    running transaction of the server was newer, which one transaction left open anywhere undid
    (the second review of the fix)."""
    with cluster.connect(db) as conn, cluster.connect("postgres", autocommit=False) as idle:
        idle.execute("SELECT txid_current()")  # (an older transaction left open, with an id)
        conn.execute("CREATE SEQUENCE s")
        conn.execute("CREATE TABLE t (id bigint DEFAULT next_shard_id('s', 8) UNIQUE)")
        base = conn.execute("SELECT now() - interval '3 hours'").fetchone()[0]
        batch = """
            DO $$ BEGIN
              BEGIN
                INSERT INTO t SELECT next_shard_id_at('s', 8, %s::timestamptz
                                                      + floor(random() * 5000) * interval '1 ms')
                  FROM generate_series(1, 10000);
              EXCEPTION WHEN lock_not_available THEN RAISE;
              END;
            END $$"""
        for _ in range(4):
            conn.execute(batch.replace("%s", f"'{base.isoformat()}'"))
        per_row = """
            DO $$ BEGIN
              FOR i IN 1..20000 LOOP
                BEGIN
                  INSERT INTO t SELECT next_shard_id_at('s', 8, %s::timestamptz
                                                        + floor(random() * 5000) * interval '1 ms');
                EXCEPTION WHEN lock_not_available THEN RAISE;
                END;
              END LOOP;
            END $$"""
        conn.execute(per_row.replace("%s", f"'{base.isoformat()}'"))
        assert conn.execute("SELECT count(DISTINCT id) FROM t").fetchone()[0] == 60_000
