"""Thousands of tenants (issue 51): a sequence's first id reads only the columns whose DEFAULT
names it, plus those whose DEFAULT names no sequence, which count for every sequence. Whether a
database has any of the second kind is remembered across backends until a catalog change
(src/catalog_watch.rs). Each test here makes the database remember "none" (a first id), then
adds a column of the second kind holding rows 5 minutes ahead of the clock, each in its own way
(a new table, SET DEFAULT, a domain's default, a function's new body, a column's new type, a
column's own DEFAULT dropped so that its domain's applies, in an open transaction, in a prepared
one, in one prepared before a restart), and checks that a sequence's first id afterwards starts
above those rows: a watch that missed the change would let it start at the clock, below them.

Run by tests/guarantee/run.sh."""

import time

import psycopg
import pytest
from pgcluster import Cluster

LATE = "next_shard_id(current_setting('app.seq')::regclass, 1)"


@pytest.fixture(scope="module")
def cluster():
    c = Cluster("tenants", ["max_prepared_transactions = 4"])
    yield c
    c.destroy()


def prepare(cluster, db):
    """Sequences before and after, each with its table; then a first id of `before`: the
    database is remembered to have no DEFAULT that names no sequence."""
    cluster.sql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    cluster.sql(f"CREATE DATABASE {db}")
    with cluster.connect(db) as conn:
        conn.execute("SET client_min_messages = warning")
        conn.execute("CREATE EXTENSION pg_shard_id")
        for name in ("before", "during", "after"):
            conn.execute(f"CREATE SEQUENCE {name}")
            conn.execute(f"CREATE TABLE t_{name} (id bigint PRIMARY KEY DEFAULT next_shard_id('{name}', 2))")
        conn.execute("CREATE SEQUENCE app_seq")
    with cluster.connect(db) as conn:
        conn.execute("INSERT INTO t_before DEFAULT VALUES")


def rows_ahead(conn, table):
    """Ten rows 5 minutes ahead of the clock into `table`; returns the newest."""
    conn.execute(f"INSERT INTO {table} (id) SELECT shard_id_compose(clock_timestamp() + interval '5 minutes', 1, g) "
                 "FROM generate_series(0, 9) g")
    return conn.execute(f"SELECT max(id) FROM {table}").fetchone()[0]


def first_id(cluster, db, seq):
    with cluster.connect(db) as conn:
        return conn.execute(f"INSERT INTO t_{seq} DEFAULT VALUES RETURNING id").fetchone()[0]


# each change: statements run after rows_ahead's table exists (None: the change makes it)
CHANGES = {
    "new_table": [f"CREATE TABLE late (id bigint PRIMARY KEY DEFAULT {LATE})"],
    "set_default": ["CREATE TABLE late (id bigint PRIMARY KEY)",
                    "ROWS",
                    f"ALTER TABLE late ALTER id SET DEFAULT {LATE}"],
    "domain_default": ["CREATE DOMAIN late_id AS bigint",
                       "CREATE TABLE late (id late_id PRIMARY KEY)",
                       "ROWS",
                       f"ALTER DOMAIN late_id SET DEFAULT {LATE}"],
    "function_body": ["CREATE FUNCTION pick_id() RETURNS bigint LANGUAGE plpgsql AS $$BEGIN RETURN 0; END$$",
                      "CREATE TABLE late (id bigint PRIMARY KEY DEFAULT pick_id())",
                      "ROWS",
                      f"CREATE OR REPLACE FUNCTION pick_id() RETURNS bigint LANGUAGE plpgsql AS $$BEGIN RETURN {LATE}; END$$"],
    "column_type": [f"CREATE DOMAIN late_id AS bigint DEFAULT {LATE}",
                    "CREATE TABLE late (id bigint PRIMARY KEY)",
                    "ROWS",
                    "ALTER TABLE late ALTER id TYPE late_id"],
    # a column's own DEFAULT dropped: its domain's applies (a drop fires no post-alter hook;
    # an outside review's finding). FIRST_ID: another sequence's first id, remembering "none"
    "drop_default": [f"CREATE DOMAIN late_id AS bigint DEFAULT {LATE}",
                     "CREATE TABLE late (id late_id PRIMARY KEY DEFAULT 0)",
                     "ROWS",
                     "FIRST_ID",
                     "ALTER TABLE late ALTER id DROP DEFAULT"],
    "drop_sequence_cascade": [f"CREATE DOMAIN late_id AS bigint DEFAULT {LATE}",
                              "CREATE SEQUENCE plain_seq",
                              "CREATE TABLE late (id late_id PRIMARY KEY DEFAULT nextval('plain_seq'))",
                              "ROWS",
                              "FIRST_ID",
                              "DROP SEQUENCE plain_seq CASCADE"],
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_first_id_after_the_change_reads_the_new_column(cluster, change):
    db = f"watch_{change}"
    prepare(cluster, db)
    newest = None
    with cluster.connect(db) as conn:
        conn.execute("SET app.seq = 'app_seq'")
        for stmt in CHANGES[change]:
            if stmt == "ROWS":
                newest = rows_ahead(conn, "late")
            elif stmt == "FIRST_ID":
                first_id(cluster, db, "during")
            else:
                conn.execute(stmt)
        if newest is None:
            newest = rows_ahead(conn, "late")
    got = first_id(cluster, db, "after")
    assert got > newest, f"the first id {got} is below the rows 5 minutes ahead ({newest})"


@pytest.mark.parametrize("how", ["open_transaction", "prepared_transaction"])
def test_a_change_not_yet_committed_is_not_remembered_as_none(cluster, how):
    """While the transaction that adds the column runs (or is prepared), other first ids cannot
    see it, and what they read must not be remembered; once it commits, a first id reads it."""
    db = f"watch_{how}"
    prepare(cluster, db)
    with cluster.connect(db, autocommit=False) as writer:
        writer.execute("SET app.seq = 'app_seq'")
        writer.execute(f"CREATE TABLE late (id bigint PRIMARY KEY DEFAULT {LATE})")
        newest = rows_ahead(writer, "late")
        if how == "prepared_transaction":
            writer.execute("PREPARE TRANSACTION 'late_column'")
        # meanwhile: another sequence's first id, in another session
        first_id(cluster, db, "during")
        if how == "prepared_transaction":
            cluster.sql("COMMIT PREPARED 'late_column'", db)
        else:
            writer.commit()
    got = first_id(cluster, db, "after")
    assert got > newest, f"the first id {got} is below the rows 5 minutes ahead ({newest})"


def test_a_transaction_prepared_before_a_restart_is_pending_after_it():
    """A prepared transaction survives a restart, and no hook of the new server saw its change:
    until it ends, nothing read meanwhile is remembered (an outside review's finding). On a
    cluster of its own: the restart must be the first thing its watch sees."""
    cluster = Cluster("tenants_restart", ["max_prepared_transactions = 4"])
    try:
        prepared_before_a_restart(cluster)
    finally:
        cluster.destroy()


def prepared_before_a_restart(cluster):
    db = "watch_prepared_restart"
    prepare(cluster, db)
    with cluster.connect(db, autocommit=False) as writer:
        writer.execute("SET app.seq = 'app_seq'")
        writer.execute(f"CREATE TABLE late (id bigint PRIMARY KEY DEFAULT {LATE})")
        newest = rows_ahead(writer, "late")
        writer.execute("PREPARE TRANSACTION 'across_restart'")
    cluster.restart()
    first_id(cluster, db, "during")
    cluster.sql("COMMIT PREPARED 'across_restart'", db)
    got = first_id(cluster, db, "after")
    assert got > newest, f"the first id {got} is below the rows 5 minutes ahead ({newest})"


def test_in_its_own_transaction_a_change_is_read(cluster):
    """The transaction that adds the column and then draws a sequence's first id sees its own
    column: the answer remembered from before must not be used."""
    db = "watch_own"
    prepare(cluster, db)
    with cluster.connect(db, autocommit=False) as conn:
        conn.execute("SET app.seq = 'app_seq'")
        conn.execute(f"CREATE TABLE late (id bigint PRIMARY KEY DEFAULT {LATE})")
        newest = rows_ahead(conn, "late")
        got = conn.execute("INSERT INTO t_after DEFAULT VALUES RETURNING id").fetchone()[0]
        conn.commit()
    assert got > newest


def test_evicted_sequences_come_back_above_their_ids_and_resync_reaches_them():
    """16 guard slots, 200 tenant sequences drawn from by two sessions at once (evicting one
    another all along): no tenant repeats an id; a tenant evicted after its data floor was read
    comes back without reading it and still issues above its own ids; rows loaded into an
    evicted tenant's table, then shard_id_resync(), are read when it comes back."""
    c = Cluster("tenants_churn", ["pg_shard_id.max_sequences = 16"])
    try:
        db = "churn"
        c.sql(f"CREATE DATABASE {db}")
        with c.connect(db) as conn:
            conn.execute("SET client_min_messages = warning")
            conn.execute("CREATE EXTENSION pg_shard_id")
            conn.execute("""DO $$BEGIN FOR i IN 1..200 LOOP
                EXECUTE format('CREATE SEQUENCE ten_%s_seq', i);
                EXECUTE format('CREATE TABLE ten_%s (id bigint PRIMARY KEY DEFAULT next_shard_id(%L, 5))',
                               i, 'ten_' || i || '_seq');
                END LOOP; END$$""")

        def churn(seed, inserts):
            with c.connect(db) as conn:
                conn.execute("SELECT setseed(%s)", (seed,))
                conn.execute(f"""DO $$BEGIN FOR i IN 1..{inserts} LOOP
                    EXECUTE format('INSERT INTO ten_%s DEFAULT VALUES', 1 + floor(random() * 200)::int);
                    END LOOP; END$$""")

        import threading
        errors = []

        def work(seed):
            try:
                churn(seed, 4000)
            except psycopg.Error as e:
                errors.append(str(e))

        threads = [threading.Thread(target=work, args=(s,)) for s in (0.1, 0.2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert c.one("SELECT guard_evictions FROM pg_shard_id_info()", db) > 1000
        # rows 5 minutes ahead loaded into tenant 7's table while it is evicted, then resync
        churn(0.3, 500)
        with c.connect(db) as conn:
            newest = rows_ahead(conn, "ten_7")
            conn.execute("SELECT shard_id_resync('ten_7_seq')")
        churn(0.4, 500)
        with c.connect(db) as conn:
            got = conn.execute("INSERT INTO ten_7 DEFAULT VALUES RETURNING id").fetchone()[0]
        assert got > newest, "an evicted sequence reads the rows loaded before shard_id_resync()"
    finally:
        c.destroy()


def test_another_roles_open_ddl_transaction_costs_one_read_of_every_default(cluster):
    """Issue 57: while a transaction of another role that made a temp table stays open, the first
    ids of other sessions read what pg_depend lists against their sequence, as without it: what one
    of them read of every default (which cannot see the open change) holds for the others until it
    ends. Counted in rows of pg_attrdef read (300 more tables, each with its own sequence and
    DEFAULT): 10 first ids read every default 10 times before the change, once with it."""
    db = "watch_temp_open"
    prepare(cluster, db)
    with cluster.connect(db) as conn:
        conn.execute("""DO $$BEGIN FOR i IN 1..300 LOOP
            EXECUTE format('CREATE SEQUENCE filler_%s_seq', i);
            EXECUTE format('CREATE TABLE filler_%s (id bigint PRIMARY KEY DEFAULT next_shard_id(%L, 4))', i, 'filler_' || i || '_seq');
            END LOOP; END$$""")
        for i in range(10):
            conn.execute(f"CREATE SEQUENCE tmp_seq_{i}")
            conn.execute(f"CREATE TABLE tmp_t_{i} (id bigint PRIMARY KEY DEFAULT next_shard_id('tmp_seq_{i}', 3))")
        conn.execute("DROP ROLE IF EXISTS temp_holder")
        conn.execute("CREATE ROLE temp_holder LOGIN")
        conn.execute(f"GRANT TEMP ON DATABASE {db} TO temp_holder")
    first_id(cluster, db, "before")  # remembers "none" after the DDL above

    def attrdef_rows_read():
        with cluster.connect(db) as conn:
            return conn.execute("SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_sys_tables "
                                "WHERE relid = 'pg_attrdef'::regclass").fetchone()[0]

    holder = psycopg.connect(host=cluster.dir, port=cluster.port, user="temp_holder", dbname=db, autocommit=False)
    try:
        holder.execute("CREATE TEMP TABLE scratch (n int)")
        time.sleep(1)  # (the statistics of the sessions that ended before: reported at their exit)
        before = attrdef_rows_read()
        for i in range(10):
            with cluster.connect(db) as conn:
                conn.execute("SELECT pg_stat_force_next_flush()")
                conn.execute(f"INSERT INTO tmp_t_{i} DEFAULT VALUES")
                conn.execute("SELECT 1")  # (its statistics reported when it went idle)
        read = attrdef_rows_read() - before
    finally:
        holder.rollback()
        holder.close()
    # every default once (the change is counted), not once per first id
    assert 300 <= read < 3 * 300, f"{read} rows of pg_attrdef read by 10 first ids"


def test_a_database_made_again_under_a_dropped_ones_oid_is_read_afresh(cluster):
    """What the watch remembered of a database must not hold for another one that later gets its
    oid (CREATE DATABASE ... OID, or the oid counter wrapping): the hook of CREATE and DROP
    DATABASE runs in the session's own database. The first database is remembered to have no
    DEFAULT that names no sequence; it is dropped, and a database made from a template that has
    one, with rows 5 minutes ahead, gets its oid: its first id must start above those rows."""
    oid = 3_999_001
    for db in ("watch_oid_a", "watch_oid_b", "watch_oid_tmpl"):
        cluster.sql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    cluster.sql(f"CREATE DATABASE watch_oid_a OID = {oid}")
    with cluster.connect("watch_oid_a") as conn:
        conn.execute("SET client_min_messages = warning")
        conn.execute("CREATE EXTENSION pg_shard_id")
        conn.execute("CREATE SEQUENCE before")
        conn.execute("CREATE TABLE t_before (id bigint PRIMARY KEY DEFAULT next_shard_id('before', 2))")
    first_id(cluster, "watch_oid_a", "before")  # remembers "none" for the oid
    # the template: one column whose DEFAULT names no sequence, holding rows 5 minutes ahead
    prepare(cluster, "watch_oid_tmpl")
    with cluster.connect("watch_oid_tmpl") as conn:
        conn.execute(f"CREATE TABLE late (id bigint PRIMARY KEY DEFAULT {LATE})")
        newest = rows_ahead(conn, "late")
    cluster.sql("DROP DATABASE watch_oid_a")
    cluster.sql(f"CREATE DATABASE watch_oid_b OID = {oid} TEMPLATE watch_oid_tmpl")
    got = first_id(cluster, "watch_oid_b", "after")
    assert got > newest, f"the first id {got} is below the rows 5 minutes ahead ({newest})"
