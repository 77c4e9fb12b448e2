"""Writers never fail because a conversion runs, and nothing they write is left behind by the swap
(issue 55). Each test prepares, builds the indexes and fills the rows, then runs the finish one
step at a time (_pg_shard_id.finish_step, what shard_id_convert_finish loops over) and, after
every step, writes as an application would:

* a row that references itself (parent = id);
* a child inserted before its parent under a deferred foreign key, in one transaction;
* a child whose parent row security hides from its writer;
* a parent deleted and inserted again with the same old key (deferred foreign key), its children
  kept;
* the table and its sequences renamed after the prepare.

After the swap every reference is to the row it referenced before (through the old keys, kept),
and the foreign keys validate. Each fails on cec376e. Run by tests/guarantee/run.sh."""

import psycopg
import pytest

from test_convert_schema import one, role


def steps_of_the_finish(conn, table, between):
    """Runs the finish one step at a time, calling between() before the first and after each
    until the swap (after it the key holds the new ids: writers that still write the old keys
    are another matter, test_convert_old_ids)."""
    between()
    for _ in range(100):
        more = one(conn, "SELECT _pg_shard_id.finish_step(%s, 'public')", (table,))
        if one(conn, "SELECT phase <> 'finished' FROM _pg_shard_id.conversions WHERE relid = %s::regclass", (table,)):
            between()
        if not more:
            return
    raise AssertionError("the finish did not end")


def filled(conn, table, time_column, seq, shard=5):
    conn.execute("CALL shard_id_convert_prepare(%s, %s, %s, %s)", (table, time_column, seq, shard))
    for (statement,) in conn.execute("SELECT * FROM shard_id_convert_indexes(%s)", (table,)).fetchall():
        conn.execute(statement)
    conn.execute("CALL shard_id_convert(%s, 500)", (table,))


def references_kept(conn, child, fk, parent="purchases"):
    """Every reference of `child` points, through the new keys, at the row its old key named."""
    return one(conn, f"SELECT count(*) FROM {child} c JOIN {parent} p ON p.id = c.{fk} "
                     f"WHERE c.{fk}_before_shard_id IS DISTINCT FROM p.id_before_shard_id")


def validated(conn, table):
    return one(conn, "SELECT bool_and(convalidated) FROM pg_constraint WHERE conrelid = %s::regclass", (table,))


def test_self_referencing_rows_written_during_the_finish(cluster, db):
    with cluster.connect(db) as conn:
        conn.execute("CREATE TABLE nodes (id bigserial PRIMARY KEY, parent bigint REFERENCES nodes, "
                     "created_at timestamptz NOT NULL DEFAULT now() - interval '1 day')")
        conn.execute("INSERT INTO nodes (parent) SELECT NULL FROM generate_series(1, 2000)")
        conn.execute("UPDATE nodes SET parent = id WHERE id % 2 = 0")
        conn.execute("UPDATE nodes SET parent = id - 1 WHERE id % 2 = 1 AND id > 1")
        conn.execute("CREATE SEQUENCE nodes_shard_id_seq")
        conn.execute("ANALYZE nodes")
        filled(conn, "nodes", "created_at", "nodes_shard_id_seq")
        with cluster.connect(db) as writer:
            def write():
                writer.execute("INSERT INTO nodes (id, parent) SELECT nextval('nodes_id_seq'), currval('nodes_id_seq')")
                writer.execute("INSERT INTO nodes (id, parent) SELECT nextval('nodes_id_seq'), currval('nodes_id_seq') - 1")
            steps_of_the_finish(conn, "nodes", write)
        assert one(conn, "SELECT count(*) FROM nodes c JOIN nodes p ON p.id = c.parent "
                         "WHERE c.parent_before_shard_id IS DISTINCT FROM p.id_before_shard_id") == 0
        assert one(conn, "SELECT count(*) FROM nodes WHERE parent_before_shard_id IS NOT NULL AND parent IS NULL") == 0
        assert validated(conn, "nodes")


def purchases(conn, deferred=False):
    conn.execute("CREATE TABLE purchases (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL "
                 "DEFAULT now() - interval '1 day', item text)")
    conn.execute("CREATE TABLE lines (id bigserial PRIMARY KEY, purchase_id bigint NOT NULL REFERENCES purchases"
                 + (" DEFERRABLE INITIALLY DEFERRED" if deferred else "") + ", qty int)")
    conn.execute("INSERT INTO purchases (item) SELECT 'item ' || g FROM generate_series(1, 1000) g")
    conn.execute("INSERT INTO lines (purchase_id, qty) SELECT 1 + g % 1000, g FROM generate_series(1, 2000) g")
    conn.execute("CREATE SEQUENCE purchases_shard_id_seq")
    conn.execute("ANALYZE")


def test_a_child_inserted_before_its_parent_under_a_deferred_foreign_key(cluster, db):
    with cluster.connect(db) as conn:
        purchases(conn, deferred=True)
        filled(conn, "purchases", "created_at", "purchases_shard_id_seq")
        with cluster.connect(db, autocommit=False) as writer:
            def write():
                key = one(writer, "SELECT nextval('purchases_id_seq')")
                writer.execute("INSERT INTO lines (purchase_id, qty) VALUES (%s, 1)", (key,))
                writer.execute("INSERT INTO purchases (id, item) VALUES (%s, 'late parent')", (key,))
                writer.commit()
            steps_of_the_finish(conn, "purchases", write)
        assert references_kept(conn, "lines", "purchase_id") == 0
        assert one(conn, "SELECT count(*) FROM lines WHERE purchase_id IS NULL OR purchase_id < 0") == 0
        assert validated(conn, "lines")


def test_a_child_whose_parent_row_security_hides_from_its_writer(cluster, db):
    with cluster.connect(db) as conn:
        purchases(conn)
        writer_role = role(conn, db, "lines_writer")
        conn.execute(f'GRANT SELECT ON purchases TO "{writer_role}"')
        conn.execute(f'GRANT SELECT, INSERT ON lines TO "{writer_role}"')
        conn.execute(f'GRANT USAGE ON SEQUENCE lines_id_seq TO "{writer_role}"')
        conn.execute("ALTER TABLE purchases ENABLE ROW LEVEL SECURITY")
        conn.execute("CREATE POLICY only_new ON purchases USING (item = 'visible')")
        filled(conn, "purchases", "created_at", "purchases_shard_id_seq")
        with cluster.connect(db) as writer:
            writer.execute(f'SET ROLE "{writer_role}"')

            def write():
                # purchase 5 is not visible to the writer; the foreign key's check sees it
                writer.execute("INSERT INTO lines (purchase_id, qty) VALUES (5, 1)")
            steps_of_the_finish(conn, "purchases", write)
        assert references_kept(conn, "lines", "purchase_id") == 0
        assert one(conn, "SELECT count(*) FROM lines WHERE purchase_id < 0") == 0
        assert validated(conn, "lines")


@pytest.mark.parametrize("gone", ["deleted", "given another key"])
def test_a_parent_gone_and_its_old_key_inserted_again(cluster, db, gone):
    """A parent deleted, or given another key (an UPDATE), and its old key inserted again in the
    same transaction (a deferred foreign key): its children follow the new row."""
    with cluster.connect(db) as conn:
        purchases(conn, deferred=True)
        filled(conn, "purchases", "created_at", "purchases_shard_id_seq")
        keys = iter(range(10, 1000, 7))
        with cluster.connect(db, autocommit=False) as writer:
            def write():
                key = next(keys)
                writer.execute("DELETE FROM purchases WHERE id = %s" if gone == "deleted"
                               else "UPDATE purchases SET id = id + 100000 WHERE id = %s", (key,))
                writer.execute("INSERT INTO purchases (id, item) VALUES (%s, 'again')", (key,))
                writer.commit()
            steps_of_the_finish(conn, "purchases", write)
        assert one(conn, "SELECT count(*) FROM purchases WHERE item = 'again'") > 3
        assert one(conn, "SELECT count(*) FROM lines l WHERE NOT EXISTS (SELECT FROM purchases p WHERE p.id = l.purchase_id)") == 0
        assert references_kept(conn, "lines", "purchase_id") == 0
        assert validated(conn, "lines")


def test_the_table_and_its_sequences_renamed_after_the_prepare(cluster, db):
    with cluster.connect(db) as conn:
        purchases(conn)
        conn.execute("CALL shard_id_convert_prepare('purchases', 'created_at', 'purchases_shard_id_seq', 5)")
        # an ordinary migration in between
        conn.execute("ALTER TABLE purchases RENAME TO orders")
        conn.execute("ALTER SEQUENCE purchases_shard_id_seq RENAME TO orders_shard_id_seq")
        conn.execute("INSERT INTO lines (purchase_id, qty) VALUES (3, 1)")
        conn.execute("INSERT INTO orders (item) VALUES ('after the rename')")
        conn.execute("UPDATE orders SET shard_id = NULL WHERE id = 9")  # the fill trigger: a new id
        for (statement,) in conn.execute("SELECT * FROM shard_id_convert_indexes('orders')").fetchall():
            conn.execute(statement)
        conn.execute("CALL shard_id_convert('orders', 500)")
        with cluster.connect(db) as writer:
            steps_of_the_finish(conn, "orders", lambda: writer.execute("INSERT INTO lines (purchase_id, qty) VALUES (4, 1)"))
        assert references_kept(conn, "lines", "purchase_id", parent="orders") == 0
        assert one(conn, "SELECT count(*) FROM orders WHERE shard_id_extract_shard(id) = 5") == one(conn, "SELECT count(*) FROM orders")
        assert validated(conn, "lines")


def test_children_inserted_before_their_parents_keep_a_unique_index_of_the_referencing_columns(cluster, db):
    """Django's shape: UNIQUE (purchase_id, line_no). Two transactions each insert a child before
    its parent; the placeholders they get differ (one per referenced key), so neither waits for
    the other nor fails on the twin unique index."""
    with cluster.connect(db) as conn:
        purchases(conn, deferred=True)
        conn.execute("ALTER TABLE lines ADD COLUMN line_no int NOT NULL DEFAULT 1")
        conn.execute("UPDATE lines SET line_no = id")
        conn.execute("ALTER TABLE lines ADD UNIQUE (purchase_id, line_no)")
        filled(conn, "purchases", "created_at", "purchases_shard_id_seq")
        with cluster.connect(db, autocommit=False) as t1, cluster.connect(db, autocommit=False) as t2:
            def write():
                keys = [one(t, "SELECT nextval('purchases_id_seq')") for t in (t1, t2)]
                for t, key in zip((t1, t2), keys):
                    t.execute("SET lock_timeout = '2s'")
                    t.execute("INSERT INTO lines (purchase_id, line_no, qty) VALUES (%s, 1, 1)", (key,))
                for t, key in zip((t1, t2), keys):
                    t.execute("INSERT INTO purchases (id, item) VALUES (%s, 'late parent')", (key,))
                    t.commit()
            steps_of_the_finish(conn, "purchases", write)
        assert references_kept(conn, "lines", "purchase_id") == 0
        assert validated(conn, "lines")


def test_the_swap_waits_for_a_writer_holding_the_table_then_its_referencing_table(cluster, db):
    """An order, then its line, in one open transaction (the table first, then the referencing
    table: bench/convert.py's clients). A swap that held the referencing table while waiting for
    the table deadlocked with it (seen at 10 M rows); it must give way and take both once the
    writer commits, and the writer must not fail."""
    import threading
    import time
    with cluster.connect(db) as conn:
        purchases(conn)
        filled(conn, "purchases", "created_at", "purchases_shard_id_seq")
        for _ in range(99):  # every step before the swap
            if one(conn, "SELECT count(*) FROM _pg_shard_id.conversion_inventory('purchases') "
                         "WHERE phase = 'finish' AND NOT done") == 0:
                break
            one(conn, "SELECT _pg_shard_id.finish_step('purchases', 'public')")
        errors = []
        with cluster.connect(db, autocommit=False) as writer:
            key = one(writer, "INSERT INTO purchases (item) VALUES ('held') RETURNING id")

            def finish():
                try:
                    with cluster.connect(db) as c:
                        c.execute("CALL shard_id_convert_finish('purchases')")
                except Exception as e:  # noqa: BLE001
                    errors.append(e)
            t = threading.Thread(target=finish)
            t.start()
            time.sleep(1.5)  # past deadlock_timeout: the swap is trying
            writer.execute("INSERT INTO lines (purchase_id, qty) VALUES (%s, 1)", (key,))
            writer.commit()
            t.join()
        assert errors == [], errors
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions WHERE relid = 'purchases'::regclass") == "finished"
        assert references_kept(conn, "lines", "purchase_id") == 0
