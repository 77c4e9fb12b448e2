"""The guarantee under attack (issue 36): the paths by which copied rows slipped below new ids, the
origin record that blocked and failed inserts, the health check that hung behind a lock, and two
writers with one node number. Each needs several sessions or a restart, so each runs in a real
cluster (pgcluster.py). Run by tests/guarantee/run.sh."""

import threading

import psycopg
import pytest

from pgcluster import Cluster, vacuum_until_nothing_dead, wait_for

MINUTE_MS = 60_000


def lead_ms(conn, id_sql):
    """How far ahead of the clock (ms) the id is."""
    return ts_lead_ms(conn, f"shard_id_extract_timestamp(({id_sql}))")


def ts_lead_ms(conn, ts_sql):
    """How far ahead of the clock (ms) the timestamp is."""
    return conn.execute(
        f"SELECT (extract(epoch FROM ({ts_sql}) - clock_timestamp()) * 1000)::bigint").fetchone()[0]


def other_server_origin(cluster, db):
    """Makes the database's origin say its ids were made by another server (a restore)."""
    with cluster.connect(db) as conn:
        conn.execute("CREATE SEQUENCE origin_probe")
        conn.execute("SELECT next_shard_id('origin_probe', 0)")  # records this server
        conn.execute("UPDATE _pg_shard_id.origin SET system_identifier = system_identifier + 1")
        assert conn.execute("SELECT count(*) FROM _pg_shard_id.origin").fetchone()[0] == 1


# -- the origin record never waits for, nor fails, an insert ----------------------------------

ISOLATIONS = ["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"]


@pytest.mark.parametrize("sessions", [2, 8])
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_the_origin_record_never_waits_nor_fails_an_insert(cluster, db, isolation, sessions):
    with cluster.connect(db) as conn:
        for i in range(sessions + 1):
            conn.execute(f"CREATE SEQUENCE s{i}")
            conn.execute(f"CREATE TABLE t{i} (id bigint PRIMARY KEY DEFAULT next_shard_id('s{i}', {i}))")
    other_server_origin(cluster, db)
    # session 0's first id records the origin, and its transaction stays open
    holder = cluster.connect(db, autocommit=False)
    holder.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
    holder.execute("INSERT INTO t0 DEFAULT VALUES")
    # the other sessions' first inserts, into other tables: none waits (lock_timeout would fail
    # it with 55P03), none fails; a REPEATABLE READ one holds a snapshot taken before session 0
    # commits, and inserts after it did
    early = []
    for i in range(1, sessions + 1):
        c = cluster.connect(db, autocommit=False, options="-c lock_timeout=3s")
        c.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
        c.execute("SELECT 1")  # the snapshot
        early.append(c)
    errors = []

    def first_insert(i, conn):
        try:
            conn.execute(f"INSERT INTO t{i} DEFAULT VALUES")
            conn.commit()
        except psycopg.Error as e:
            errors.append(f"session {i}: {e.sqlstate} {e}")

    half = len(early) // 2
    threads = [threading.Thread(target=first_insert, args=(i + 1, c)) for i, c in enumerate(early[:half])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    holder.commit()  # the others' snapshots predate this commit
    threads = [threading.Thread(target=first_insert, args=(i + 1 + half, c))
               for i, c in enumerate(early[half:])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    for c in early + [holder]:
        c.close()
    assert errors == []
    rows = cluster.one(f"SELECT " + " + ".join(f"(SELECT count(*) FROM t{i})" for i in range(sessions + 1)), db)
    assert rows == sessions + 1
    # recorded by someone, in the end: a new READ COMMITTED session leaves one row, this server's
    cluster.sql("INSERT INTO t0 DEFAULT VALUES", db)
    assert cluster.sql(
        "SELECT count(*), bool_and(system_identifier = (SELECT system_identifier FROM pg_control_system())) "
        "FROM _pg_shard_id.origin", db) == [(1, True)]


# -- sessions drawing from cached blocks of one sequence (issue 40) ---------------------------

def test_sessions_holding_blocks_on_both_sides_of_a_wrap_share_milliseconds(cluster, db):
    """CACHE 32: session a holds 1000..1031 (remainders 1000..1023, then 0..7), b holds 1032..1063
    (8..39), and they draw in turn, faster than the clock ticks. The guard's wrap rule measures a
    remainder against the drawing session's own previous id, so the guard moves on only at b's
    first id (no previous id yet: measured against a's 1000) and at a's own wrap (1023 to 0),
    and waits at most once; measured against the millisecond's highest remainder, whoever drew
    it (0.6.0's rule), nearly every turn looked like a wrap and moved on or waited (bench's
    CACHE table: 710 waits in 4 s at 2 clients). Each session's ids still increase."""
    cluster.sql("CREATE SEQUENCE c32 START 1000 CACHE 32", db)
    a, b = cluster.connect(db), cluster.connect(db)
    ids = {"a": [], "b": []}
    for _ in range(32):
        for name, conn in (("a", a), ("b", b)):
            ids[name].append(conn.execute("SELECT next_shard_id('c32', 1)").fetchone()[0])
    a.close()
    b.close()
    for name, drawn in ids.items():
        assert drawn == sorted(drawn) and len(set(drawn)) == 32, f"session {name}: {drawn}"
        assert [i % 1024 for i in drawn] == [v % 1024 for v in
                                            range(1000 if name == "a" else 1032, 1000 + (32 if name == "a" else 64))]
    assert len(set(ids["a"]) | set(ids["b"])) == 64
    moved, waits = cluster.sql(
        "SELECT exhausted_ms, waits FROM pg_shard_id_stats WHERE sequence_oid = 'c32'::regclass", db)[0]
    assert moved + waits <= 3, f"{moved} moves, {waits} waits"


# -- what the data floor cannot read is flagged, never skipped, and never waited for ------------

def test_a_table_locked_at_the_first_id_is_cannot_tell_named_as_locked(cluster, db):
    with cluster.connect(db) as conn:
        conn.execute("CREATE SEQUENCE s")
        conn.execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 1))")
        conn.execute("CREATE TABLE u (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 2))")
        conn.execute("INSERT INTO t VALUES (shard_id_compose(now() + interval '5 minutes', 1, 0))")
    migration = cluster.connect(db, autocommit=False)
    migration.execute("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
    with cluster.connect(db, options="-c statement_timeout=20s -c client_min_messages=log") as conn:
        notices = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        conn.execute("INSERT INTO u DEFAULT VALUES")  # the first id of s: t cannot be read
        assert lead_ms(conn, "SELECT max(id) FROM u") > 9 * MINUTE_MS
        assert any("t.id (locked by another transaction when read)" in n for n in notices), notices
        # the health check answers behind the lock, and says what it could not read
        detail = conn.execute(
            "SELECT detail FROM shard_id_check() WHERE \"check\" = 'data_floor'").fetchone()[0]
        assert "public.t.id (locked by another transaction when read)" in detail
        assert conn.execute("SELECT count(*) FROM shard_id_check()").fetchone()[0] >= 8
    migration.rollback()
    migration.close()


# -- a table partitioned by RANGE on the id: the newest partitions first (issue 57) ------------

def days_partitioned(conn, ahead, last):
    """t: daily partitions on the id (shard_id_partition_bounds) from 30 days ago to `ahead` days
    ahead (made ahead, empty), then `last` (DEFAULT, or FROM the last bound TO MAXVALUE); rows
    copied into every past day, and one 2 minutes ahead of the clock (today's partition, or
    `last` when the days end today); s: its sequence, never drawn from. The newest id stored."""
    conn.execute("CREATE SEQUENCE s")
    conn.execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 1), n int) PARTITION BY RANGE (id)")
    conn.execute(f"""DO $$ DECLARE r record; k int := 0; top bigint; BEGIN
        FOR r IN SELECT * FROM shard_id_partition_bounds(date_trunc('day', now()) - interval '30 days',
                                                          date_trunc('day', now()) + interval '{ahead} days', '1 day') LOOP
            EXECUTE format('CREATE TABLE t_%s PARTITION OF t FOR VALUES FROM (%s) TO (%s)', k, r.lower, r.upper);
            k := k + 1;
            top := r.upper;
        END LOOP;
        EXECUTE CASE {last!r} WHEN 'default' THEN 'CREATE TABLE t_last PARTITION OF t DEFAULT'
                              ELSE format('CREATE TABLE t_last PARTITION OF t FOR VALUES FROM (%s) TO (MAXVALUE)', top) END;
        END $$""")
    conn.execute("INSERT INTO t SELECT shard_id_compose(now() - g * interval '1 day', 1, 0), g FROM generate_series(1, 29) g")
    conn.execute("INSERT INTO t VALUES (shard_id_compose(now() + interval '2 minutes', 1, 7), 0)")
    return conn.execute("SELECT max(id) FROM t").fetchone()[0]


def first_id_behind_a_lock(cluster, db, locked):
    """The first id of s while another transaction holds `locked` in ACCESS EXCLUSIVE mode: the
    id, and the LOG lines about the data floor."""
    migration = cluster.connect(db, autocommit=False)
    migration.execute(f"LOCK TABLE {locked} IN ACCESS EXCLUSIVE MODE")
    try:
        with cluster.connect(db, options="-c statement_timeout=20s -c client_min_messages=log") as conn:
            notices = []
            conn.add_notice_handler(lambda d: notices.append(d.message_primary))
            # (drawn, not inserted: an insert would wait for the lock on the partition it goes to)
            return conn.execute("SELECT next_shard_id('s', 1)").fetchone()[0], notices
    finally:
        migration.rollback()
        migration.close()


# (where the newest id is: today's partition with empty ones ahead; the default partition or one
# up to MAXVALUE, which no bound limits, and read first; a table partitioned on another column)
PARTITIONED = {"days ahead": (3, "default", None), "default partition": (0, "default", None),
               "partition to MAXVALUE": (0, "maxvalue", None), "another table, on another column": (3, "default", "list")}


@pytest.mark.parametrize("where", list(PARTITIONED))
def test_partitions_on_the_id_are_read_from_the_newest_down(cluster, db, where):
    """The first id of a table partitioned by day on its id reads its newest partitions and stops
    where the rest cannot hold a newer id (issue 57): an old partition locked by a migration is
    not read (on 8624a3a it was: "cannot tell", and the ids jumped 10 minutes ahead); whatever no
    bound limits is read (the default partition, one up to MAXVALUE, a table partitioned on
    another column), and the first id is above the newest stored one."""
    ahead, last, other = PARTITIONED[where]
    with cluster.connect(db) as conn:
        newest = days_partitioned(conn, ahead, last)
        if other:
            conn.execute("CREATE TABLE t_by_n (id bigint DEFAULT next_shard_id('s', 1), n int, PRIMARY KEY (id, n)) PARTITION BY LIST (n)")
            conn.execute("CREATE TABLE t_by_n_1 PARTITION OF t_by_n FOR VALUES IN (1)")
            conn.execute("INSERT INTO t_by_n VALUES (shard_id_compose(now() + interval '4 minutes', 1, 3), 1)")
            newest = conn.execute("SELECT max(id) FROM t_by_n").fetchone()[0]
    new_id, notices = first_id_behind_a_lock(cluster, db, "t_3")
    assert new_id > newest, (new_id, newest)
    assert not any("locked by another transaction" in n for n in notices), notices
    with cluster.connect(db) as conn:
        assert lead_ms(conn, f"SELECT {new_id}::bigint") < 6 * MINUTE_MS


def test_a_partition_being_detached_concurrently_makes_every_leaf_read(cluster, db):
    """A DETACH ... CONCURRENTLY waits only for the lockers it found when it began to wait, so it
    can finish while a first id reads the leaves it bounded (the review of the change): while a
    partition of the parent is pending detach (here: a detach cancelled in its wait), the parent
    gives no bounds, and every leaf is read (the locked old one is "cannot tell" again). (No
    default partition: PostgreSQL detaches concurrently only without one.)"""
    with cluster.connect(db) as conn:
        days_partitioned(conn, 3, "maxvalue")
    holder = cluster.connect(db, autocommit=False)
    holder.execute("SELECT count(*) FROM t")  # (the detach's second transaction waits for it)
    with cluster.connect(db, options="-c statement_timeout=2s") as detacher:
        with pytest.raises(psycopg.errors.QueryCanceled):
            detacher.execute("ALTER TABLE t DETACH PARTITION t_5 CONCURRENTLY")
    holder.rollback()
    holder.close()
    with cluster.connect(db) as conn:
        assert conn.execute("SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = 't_5'::regclass").fetchone()[0]
    _, notices = first_id_behind_a_lock(cluster, db, "t_3")
    assert any("t_3.id (locked by another transaction when read)" in n for n in notices), notices


def test_a_locked_partition_that_may_hold_the_newest_id_is_cannot_tell(cluster, db):
    """Today's partition locked: it may hold the newest id, so it is "cannot tell" as before, and
    the ids start 10 minutes ahead."""
    with cluster.connect(db) as conn:
        newest = days_partitioned(conn, 3, "default")
        today = conn.execute("SELECT tableoid::regclass::text FROM t WHERE id = %s", (newest,)).fetchone()[0]
    new_id, notices = first_id_behind_a_lock(cluster, db, today)
    assert any("locked by another transaction" in n for n in notices), notices
    with cluster.connect(db) as conn:
        assert lead_ms(conn, f"SELECT {new_id}::bigint") > 9 * MINUTE_MS


def test_the_health_check_answers_behind_a_lock_on_the_origin_table(cluster, db):
    """ALTER EXTENSION ... UPDATE, or a user's LOCK TABLE, holds the origin table: the check
    answers within its 1 s wait and says which row it skipped."""
    holder = cluster.connect(db, autocommit=False)
    holder.execute("LOCK TABLE _pg_shard_id.origin IN ACCESS EXCLUSIVE MODE")
    with cluster.connect(db, options="-c statement_timeout=20s") as conn:
        rows = dict((c, (st, d)) for c, st, d in conn.execute("SELECT * FROM shard_id_check()").fetchall())
    holder.rollback()
    holder.close()
    assert rows["epoch"][0] == "skipped" and "held a lock" in rows["epoch"][1]
    assert rows["preload"][0] == "ok" and rows["data_floor"][0] == "ok"


def test_another_sessions_temporary_table_is_cannot_tell(cluster, db):
    with cluster.connect(db) as conn:
        conn.execute("CREATE SEQUENCE s")
        conn.execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 1))")
    staging = cluster.connect(db)
    staging.execute("CREATE TEMP TABLE staged (LIKE t INCLUDING DEFAULTS INCLUDING INDEXES)")
    staging.execute("INSERT INTO staged VALUES (shard_id_compose(now() + interval '5 minutes', 1, 0))")
    with cluster.connect(db) as conn:
        assert lead_ms(conn, "SELECT next_shard_id('s', 1)") > 5 * MINUTE_MS
        detail = conn.execute(
            "SELECT detail FROM shard_id_check() WHERE \"check\" = 'data_floor'").fetchone()[0]
        assert "staged.id (another session's temporary table)" in detail
        # the session's own temporary table is read (its buffers are its own)
        staging.execute("INSERT INTO staged VALUES (shard_id_compose(now() + interval '40 minutes', 1, 0))")
        assert ts_lead_ms(staging, "SELECT shard_id_resync('s')") > 39 * MINUTE_MS
    staging.close()


def test_a_repeatable_read_first_id_sees_a_default_added_after_its_snapshot(cluster, db):
    with cluster.connect(db) as conn:
        conn.execute("CREATE SEQUENCE s")
        conn.execute("CREATE TABLE t (id bigint PRIMARY KEY)")
    reader = cluster.connect(db, autocommit=False)
    reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    reader.execute("SELECT 1")  # the snapshot
    with cluster.connect(db) as conn:
        conn.execute("INSERT INTO t VALUES (shard_id_compose(now() + interval '20 minutes', 1, 0))")
        conn.execute("ALTER TABLE t ALTER id SET DEFAULT next_shard_id('s', 1)")
    assert lead_ms(reader, "SELECT next_shard_id('s', 1)") > 19 * MINUTE_MS
    reader.rollback()
    reader.close()


def test_dead_entries_at_the_top_of_the_index_bound_the_read(cluster, db):
    with cluster.connect(db) as conn:
        conn.execute("CREATE SEQUENCE s")
        conn.execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 1), pad int) "
                     "WITH (autovacuum_enabled = off)")
        conn.execute("INSERT INTO t VALUES (shard_id_compose(now() + interval '2 minutes', 1, 0), 0)")
        conn.execute("INSERT INTO t SELECT shard_id_compose(now() + interval '3 minutes', 1, 0) + g, g "
                     "FROM generate_series(1, 100000) g")
        conn.execute("DELETE FROM t WHERE pad > 0")
        # the read gives up after 100 heap pages of removable rows: cannot tell, 10 minutes ahead
        assert ts_lead_ms(conn, "SELECT shard_id_resync('s')") > 9 * MINUTE_MS
        detail = conn.execute(
            "SELECT detail FROM shard_id_check() WHERE \"check\" = 'data_floor'").fetchone()[0]
        assert "too many dead index entries" in detail
        vacuum_until_nothing_dead(conn, "t")
        lead = ts_lead_ms(conn, "SELECT shard_id_resync('s')")
        assert 1 * MINUTE_MS < lead < 3 * MINUTE_MS


# -- two writers with one node number are noticed ---------------------------------------------

def test_the_node_form_counts_with_the_servers_node_number(cluster, db):
    cluster.append_conf(["pg_shard_id.node = 7"])
    cluster.sql("SELECT pg_reload_conf()")
    assert wait_for(lambda: cluster.one("SHOW pg_shard_id.node", db) == "7")
    with cluster.connect(db) as conn:
        conn.execute("CREATE SEQUENCE a")
        conn.execute("CREATE SEQUENCE b")
        conn.execute("CREATE TABLE ta (id bigint PRIMARY KEY DEFAULT next_shard_id('a'))")
        conn.execute("CREATE TABLE tb (id bigint PRIMARY KEY DEFAULT next_shard_id('b', 7))")
        status, detail = conn.execute(
            "SELECT status, detail FROM shard_id_check() WHERE \"check\" = 'shard_numbers'").fetchone()
        assert status == "warning" and "shard 7" in detail and "ta" in detail and "tb" in detail
    cluster.append_conf(["pg_shard_id.node = -1"])
    cluster.sql("SELECT pg_reload_conf()")


def test_two_writers_with_one_node_number_are_flagged_on_the_receiver():
    """Two servers, each with the node form DEFAULT, one replicating its rows to the other: with
    one node number the receiver's replication row warns; with two, it is ok."""
    pub = Cluster("node_pub", conf=["wal_level = logical", "pg_shard_id.node = 1"])
    sub = Cluster("node_sub", conf=["pg_shard_id.node = 1"])
    try:
        for c in (pub, sub):
            c.sql("SET client_min_messages = warning; CREATE EXTENSION pg_shard_id")
            c.sql("CREATE SEQUENCE s")
            c.sql("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT next_shard_id('s'))")
        pub.sql("CREATE PUBLICATION p FOR TABLE t")
        sub.sql(f"CREATE SUBSCRIPTION sp CONNECTION 'host={pub.dir} port={pub.port} user=postgres "
                "dbname=postgres' PUBLICATION p")
        pub.sql("INSERT INTO t (id) SELECT next_shard_id('s') FROM generate_series(1, 100)")
        assert wait_for(lambda: sub.one("SELECT count(*) FROM t") == 100, 60)

        def replication_row():
            return sub.sql("SELECT status, detail FROM shard_id_check() WHERE \"check\" = 'replication'")[0]

        status, detail = replication_row()
        assert status == "warning" and "shard 1" in detail, detail
        sub.append_conf(["pg_shard_id.node = 2"])
        sub.sql("SELECT pg_reload_conf()")
        assert wait_for(lambda: replication_row()[0] == "ok")
    finally:
        sub.destroy()
        pub.destroy()
