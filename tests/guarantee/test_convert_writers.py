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


def up_to_the_swap(conn, table):
    """Runs every step of the finish before the swap."""
    for _ in range(99):
        if one(conn, "SELECT count(*) FROM _pg_shard_id.conversion_inventory(%s) WHERE phase = 'finish' AND NOT done",
               (table,)) == 0:
            return
        one(conn, "SELECT _pg_shard_id.finish_step(%s, 'public')", (table,))
    raise AssertionError("the finish did not reach the swap")


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
        up_to_the_swap(conn, "purchases")
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


def test_a_writer_that_may_not_read_the_table_inserts_into_a_referencing_table(cluster, db):
    """Without a conversion, an insert into lines needs no privilege on purchases (the foreign
    key's check runs as its owner); the conversion's trigger looked the parent up with the
    writer's rights (42501, the second outside review of issue 55)."""
    with cluster.connect(db) as conn:
        purchases(conn)
        writer_role = role(conn, db, "blind_writer")
        conn.execute(f'GRANT INSERT ON lines TO "{writer_role}"')
        conn.execute(f'GRANT USAGE ON SEQUENCE lines_id_seq TO "{writer_role}"')
        filled(conn, "purchases", "created_at", "purchases_shard_id_seq")
        with cluster.connect(db) as writer:
            writer.execute(f'SET ROLE "{writer_role}"')
            steps_of_the_finish(conn, "purchases", lambda: writer.execute("INSERT INTO lines (purchase_id, qty) VALUES (7, 1)"))
        assert references_kept(conn, "lines", "purchase_id") == 0
        assert validated(conn, "lines")


def test_an_inserter_without_usage_on_the_new_sequence(cluster, db):
    """A role that may insert into the table and draw from its old sequence, and was granted
    nothing on the new one: its inserts failed from the prepare on, on the new column's DEFAULT
    (the second outside review of issue 55). The prepare grants USAGE to such roles, and its plan
    says so."""
    with cluster.connect(db) as conn:
        purchases(conn)
        writer_role = role(conn, db, "inserter")
        conn.execute(f'GRANT INSERT ON purchases TO "{writer_role}"')
        conn.execute(f'GRANT USAGE ON SEQUENCE purchases_id_seq TO "{writer_role}"')
        plan = conn.execute("SELECT kind, action, statement FROM shard_id_convert_plan('purchases', 'created_at', "
                            "'purchases_shard_id_seq', 5)").fetchall()
        grants = [statement for kind, action, statement in plan if kind == "sequence privileges"]
        assert len(grants) == 1 and grants[0].startswith("GRANT USAGE ON SEQUENCE public.purchases_shard_id_seq TO ") \
            and writer_role in grants[0], plan
        filled(conn, "purchases", "created_at", "purchases_shard_id_seq")
        with cluster.connect(db) as writer:
            writer.execute(f'SET ROLE "{writer_role}"')
            steps_of_the_finish(conn, "purchases", lambda: writer.execute("INSERT INTO purchases (item) VALUES ('new')"))
        assert one(conn, "SELECT count(*) FROM purchases WHERE item = 'new'") >= 2
        assert one(conn, "SELECT count(*) FROM purchases WHERE id IS NULL") == 0


def test_the_trigger_that_records_deleted_rows_runs_no_code_as_the_extension_owner(cluster, db):
    """conversion_note_deleted was SECURITY DEFINER and read the whole row with to_jsonb: a cast to
    json of a column's type, defined by any role that may create a table, ran as the extension's
    owner, a superuser (the second outside review of issue 55). Both ways in: a table being
    converted by a role that owns it, and the trigger attached by that role to a table of its own."""
    with cluster.connect(db) as conn:
        mallory = role(conn, db, "mallory")
        conn.execute(f'GRANT CREATE ON SCHEMA public TO "{mallory}"')
        conn.execute(f'SET ROLE "{mallory}"')
        conn.execute("CREATE TYPE mood AS ENUM ('a')")
        conn.execute(f"""CREATE FUNCTION mood_json(mood) RETURNS json LANGUAGE plpgsql AS $$ BEGIN
                            IF current_user <> '{mallory}' THEN EXECUTE 'ALTER ROLE "{mallory}" SUPERUSER'; END IF;
                            RETURN '"a"'; END $$""")
        conn.execute("CREATE CAST (mood AS json) WITH FUNCTION mood_json(mood)")
        conn.execute("CREATE TABLE moods (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL "
                     "DEFAULT now() - interval '1 day', m mood DEFAULT 'a')")
        conn.execute("INSERT INTO moods (m) SELECT 'a' FROM generate_series(1, 100)")
        conn.execute("CREATE SEQUENCE moods_shard_id_seq")
        conn.execute("CREATE INDEX ON moods (id)")
        conn.execute("CALL shard_id_convert_prepare('moods', 'created_at', 'moods_shard_id_seq', 5)")
        for (statement,) in conn.execute("SELECT * FROM shard_id_convert_indexes('moods')").fetchall():
            conn.execute(statement)
        # its own table, with the trigger attached by hand
        # (naming the table being converted: on 9c4038b any role could record ids for it, through
        # conversion_record_deleted, and slow its swap's repair: the seventh review)
        conn.execute("CREATE TABLE bait (k bigint, m mood)")
        moods = one(conn, "SELECT 'moods'::regclass::oid")
        conn.execute("CREATE TRIGGER bait AFTER UPDATE ON bait FOR EACH ROW "
                     f"EXECUTE FUNCTION _pg_shard_id.conversion_note_deleted('{moods}', 'k', 'k')")
        conn.execute("CREATE TRIGGER bait_zero AFTER UPDATE ON bait FOR EACH ROW "
                     "EXECUTE FUNCTION _pg_shard_id.conversion_note_deleted('0', 'k', 'k')")
        conn.execute("INSERT INTO bait VALUES (1, 'a')")
        conn.execute("RESET ROLE")
        # a row of the table being converted deleted by its owner: the cast runs as the deleter
        conn.execute(f'SET ROLE "{mallory}"')
        conn.execute("UPDATE moods SET m = m WHERE id = 3")  # (its new id now, from the trigger: the delete is recorded)
        conn.execute("DELETE FROM moods WHERE id = 3")
        conn.execute("UPDATE bait SET k = 2")  # (nothing recorded: bait has no conversion's trigger)
        conn.execute("RESET ROLE")
        assert one(conn, "SELECT rolsuper FROM pg_roles WHERE rolname = %s", (mallory,)) is False
        assert one(conn, "SELECT count(*) FROM _pg_shard_id.conversion_deleted WHERE relid = 'moods'::regclass") == 1
        assert one(conn, "SELECT count(*) FROM _pg_shard_id.conversion_deleted WHERE relid = 0") == 0
        assert one(conn, "SELECT to_regprocedure('_pg_shard_id.conversion_record_deleted(oid, bigint)')") is None
        conn.execute("CALL shard_id_convert_abandon('moods')")


def test_a_reader_of_a_view_is_never_the_deadlock_victim_of_the_swap(cluster, db):
    """The swap carries a view, a rule and a policy that read the key. It locked only the tables,
    then the view and the rule's and policy's table as it re-created them: a query on the view holds the view and
    waits for the table, so the two deadlocked, and the reader was the victim when the swap came
    to the view soon after the reader began waiting (the second outside review of issue 55). The
    swap now takes the view and the rule's and policy's table first, with its tables, in attempts that hold
    nothing while they wait."""
    import threading
    import time
    with cluster.connect(db) as conn:
        purchases(conn)
        # (the rule first: the swap carried what depends on the key in the catalog's order, so
        # it came to the rule's table, held below, before the view)
        conn.execute("CREATE TABLE audit (ref bigint)")
        conn.execute("CREATE RULE known AS ON INSERT TO audit WHERE NEW.ref NOT IN (SELECT id FROM purchases) DO INSTEAD NOTHING")
        conn.execute("ALTER TABLE audit ENABLE ROW LEVEL SECURITY")
        conn.execute("CREATE POLICY known ON audit USING (ref IN (SELECT id FROM purchases))")
        conn.execute("CREATE VIEW recent AS SELECT id, item FROM purchases WHERE id > 10")
        filled(conn, "purchases", "created_at", "purchases_shard_id_seq")
        up_to_the_swap(conn, "purchases")
        errors, reader_errors = [], []
        with cluster.connect(db, autocommit=False) as holder, cluster.connect(db) as reader:
            holder.execute("LOCK TABLE audit IN ACCESS SHARE MODE")  # stalls the swap at the rule's table

            def finish():
                try:
                    with cluster.connect(db) as c:
                        c.execute("CALL shard_id_convert_finish('purchases')")
                except Exception as e:  # noqa: BLE001
                    errors.append(e)

            def read():
                try:
                    reader.execute("SELECT count(*) FROM recent").fetchone()
                except Exception as e:  # noqa: BLE001
                    reader_errors.append(e)
            t = threading.Thread(target=finish)
            t.start()
            time.sleep(1.5)
            r = threading.Thread(target=read)
            r.start()
            time.sleep(0.3)  # the reader waits; the swap comes to the view well within deadlock_timeout
            holder.rollback()
            r.join()
            t.join()
        assert reader_errors == [], reader_errors
        assert errors == [], errors
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions WHERE relid = 'purchases'::regclass") == "finished"


def test_only_a_writer_of_the_table_records_deleted_rows(cluster, db):
    """The record of deleted rows takes rows from the deleting role's own trigger: a role with no
    privilege on the table could fill it (the swap reads it under its locks; the third outside
    review inserted 1,000,000 rows)."""
    with cluster.connect(db) as conn:
        purchases(conn)
        stranger = role(conn, db, "stranger")
        filled(conn, "purchases", "created_at", "purchases_shard_id_seq")
        conn.execute(f'SET ROLE "{stranger}"')
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO _pg_shard_id.conversion_deleted VALUES ('purchases'::regclass, 1)")
        conn.execute("RESET ROLE")
        conn.execute("CALL shard_id_convert_abandon('purchases')")


def test_an_updater_without_usage_on_the_new_sequence_sets_a_time_before_the_epoch(cluster, db):
    """A role granted UPDATE after the prepare (whose grant step it missed) moves a row's time
    before the epoch: the trigger's fallback, a
    live id, needed USAGE (42501; the third outside review, by reading)."""
    with cluster.connect(db) as conn:
        purchases(conn)
        updater = role(conn, db, "updater")
        conn.execute("CALL shard_id_convert_prepare('purchases', 'created_at', 'purchases_shard_id_seq', 5)")
        # (granted after the prepare, whose grant step gives writers USAGE on the new sequence)
        conn.execute(f'GRANT SELECT, UPDATE ON purchases TO "{updater}"')
        for (statement,) in conn.execute("SELECT * FROM shard_id_convert_indexes('purchases')").fetchall():
            conn.execute(statement)
        conn.execute(f'SET ROLE "{updater}"')
        conn.execute("UPDATE purchases SET created_at = '2020-01-01 00:00:00+00' WHERE id = 7")
        conn.execute("RESET ROLE")
        assert one(conn, "SELECT shard_id IS NULL FROM purchases WHERE id = 7") is True  # (left to the batches)
        conn.execute("CALL shard_id_convert_abandon('purchases')")


def test_a_delete_cascading_from_a_parent_by_a_role_without_privileges_on_the_table(cluster, db):
    """ON DELETE CASCADE runs the referencing table's AFTER triggers as the role that deleted the
    parent: with no privilege on the converted table, the conversion's trigger could not record the
    deleted row (the fourth outside review's F1). The delete succeeds, and the row is recorded."""
    with cluster.connect(db) as conn:
        conn.execute("CREATE TABLE users (id bigint PRIMARY KEY)")
        conn.execute("INSERT INTO users SELECT g FROM generate_series(1, 10) g")
        conn.execute("CREATE TABLE purchases (id bigserial PRIMARY KEY, user_id bigint REFERENCES users ON DELETE CASCADE, "
                     "created_at timestamptz NOT NULL DEFAULT now() - interval '1 day')")
        conn.execute("CREATE INDEX ON purchases (user_id)")
        conn.execute("INSERT INTO purchases (user_id) SELECT 1 + g % 10 FROM generate_series(1, 1000) g")
        conn.execute("CREATE SEQUENCE purchases_shard_id_seq")
        conn.execute("ANALYZE")
        gdpr = role(conn, db, "gdpr")
        conn.execute(f'GRANT SELECT, DELETE ON users TO "{gdpr}"')
        filled(conn, "purchases", "created_at", "purchases_shard_id_seq")
        conn.execute(f'SET ROLE "{gdpr}"')
        conn.execute("DELETE FROM users WHERE id = 1")
        conn.execute("RESET ROLE")
        assert one(conn, "SELECT count(*) FROM purchases WHERE user_id = 1") == 0
        assert one(conn, "SELECT count(*) FROM _pg_shard_id.conversion_deleted WHERE relid = 'purchases'::regclass") == 100
        conn.execute("CALL shard_id_convert_finish('purchases')")
        assert one(conn, "SELECT count(*) FROM _pg_shard_id.conversion_deleted") == 0


def test_an_insert_through_a_view_by_a_role_without_usage_on_the_new_sequence(cluster, db):
    """An insert through a view runs the table's DEFAULTs as the caller: a role that may insert
    through the view (and draw from the old sequence) but holds nothing on the new one failed on
    the new column's DEFAULT from the prepare on (the fourth outside review's F2). The prepare
    grants USAGE on the new sequence to those who may insert through a view of the table, and to
    those who may draw from the old key's sequence."""
    with cluster.connect(db) as conn:
        purchases(conn)
        conn.execute("CREATE VIEW purchases_api AS SELECT id, created_at, item FROM purchases")
        app_role = role(conn, db, "api")
        conn.execute(f'GRANT SELECT, INSERT ON purchases_api TO "{app_role}"')
        conn.execute(f'GRANT USAGE ON SEQUENCE purchases_id_seq TO "{app_role}"')
        filled(conn, "purchases", "created_at", "purchases_shard_id_seq")
        with cluster.connect(db) as writer:
            writer.execute(f'SET ROLE "{app_role}"')
            steps_of_the_finish(conn, "purchases", lambda: writer.execute("INSERT INTO purchases_api (item) VALUES ('via view')"))
        assert one(conn, "SELECT count(*) FROM purchases WHERE item = 'via view'") >= 2
        assert one(conn, "SELECT count(*) FROM purchases WHERE id IS NULL") == 0
        assert "next_shard_id" in one(conn, "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef "
                                            "WHERE adrelid = 'purchases'::regclass AND adnum = "
                                            "(SELECT attnum FROM pg_attribute WHERE attrelid = 'purchases'::regclass AND attname = 'id')")


def test_the_table_s_owner_converted_by_a_superuser_keeps_inserting(cluster, db):
    """A superuser converts a table an application role owns, the new sequence its own: the owner
    could not draw from it, and every insert failed from the prepare on (the fifth outside
    review). The prepare grants the owner USAGE too; and a role that deletes from a table whose
    rule inserts into the converted one (an identity key: it needed no sequence privilege)."""
    with cluster.connect(db) as conn:
        owner = role(conn, db, "app_owner")
        deleter = role(conn, db, "deleter")
        conn.execute("CREATE TABLE purchases (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, "
                     "created_at timestamptz NOT NULL DEFAULT now() - interval '1 day', item text)")
        conn.execute("INSERT INTO purchases (item) SELECT 'item ' || g FROM generate_series(1, 500) g")
        conn.execute(f'ALTER TABLE purchases OWNER TO "{owner}"')
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY)")
        conn.execute("INSERT INTO accounts SELECT g FROM generate_series(1, 50) g")
        conn.execute("CREATE RULE log_delete AS ON DELETE TO accounts DO ALSO INSERT INTO purchases (item) VALUES ('gone ' || OLD.id)")
        conn.execute(f'GRANT SELECT, DELETE ON accounts TO "{deleter}"')
        conn.execute("CREATE SEQUENCE purchases_shard_id_seq")  # (the superuser's)
        conn.execute("ANALYZE")
        filled(conn, "purchases", "created_at", "purchases_shard_id_seq")
        with cluster.connect(db) as app_conn, cluster.connect(db) as del_conn:
            app_conn.execute(f'SET ROLE "{owner}"')
            del_conn.execute(f'SET ROLE "{deleter}"')
            n = iter(range(1, 51))

            def write():
                app_conn.execute("INSERT INTO purchases (item) VALUES ('new')")
                del_conn.execute("DELETE FROM accounts WHERE id = %s", (next(n),))
            steps_of_the_finish(conn, "purchases", write)
        assert one(conn, "SELECT count(*) FROM purchases WHERE item = 'new'") >= 2
        assert one(conn, "SELECT count(*) FROM purchases WHERE item LIKE 'gone %'") >= 2


def test_a_row_inserted_with_the_new_column_null_by_a_writer_that_may_not_read_the_table(cluster, db):
    """The fill trigger could not give the row an id at its own time (next_shard_id_at reads only
    what its caller may: 42501; or it would wait more than 100 ms for another transaction's
    DEFAULT ids: 55P03) and left the new column NULL, for the sweeps. After the finish's NOT NULL
    check (step 500) and before the swap, that row failed its writer (23514; issue 55's outside
    read). Once the check is in place the trigger gives such a row a live id."""
    with cluster.connect(db) as conn:
        purchases(conn)
        writer_role = role(conn, db, "insert_only")
        conn.execute(f'GRANT INSERT ON purchases TO "{writer_role}"')
        conn.execute(f'GRANT USAGE ON SEQUENCE purchases_id_seq TO "{writer_role}"')
        filled(conn, "purchases", "created_at", "purchases_shard_id_seq")
        failures = []

        def insert_named_null():
            try:
                writer.execute("INSERT INTO purchases (item, created_at, shard_id) "
                               "VALUES ('named null', now() - interval '1 day', NULL)")
            except psycopg.Error as e:
                failures.append(f"{e.sqlstate}: {e}")
        with cluster.connect(db) as writer:
            writer.execute(f'SET ROLE "{writer_role}"')
            steps_of_the_finish(conn, "purchases", insert_named_null)
        assert failures == []
        assert one(conn, "SELECT count(*) FROM purchases WHERE item = 'named null'") >= 2
        assert one(conn, "SELECT count(*) FROM purchases WHERE id IS NULL") == 0
        assert validated(conn, "purchases")


# -- the user's triggers that change a reference, and what was made after the prepare ----------
# (the twenty-eighth review: the conversion's reference triggers fired before a user's BEFORE
# trigger whose name sorts after theirs, trg_... or update_..., and the reference it changed did
# not reach the new column)

def lines_with_a_users_trigger(conn, name, body):
    """purchases and nullable lines, with the user's BEFORE INSERT OR UPDATE trigger `name` on
    lines running `body` (plpgsql, on NEW)."""
    conn.execute("CREATE TABLE purchases (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL "
                 "DEFAULT now() - interval '1 day', item text)")
    conn.execute("CREATE TABLE lines (id bigserial PRIMARY KEY, purchase_id bigint REFERENCES purchases, qty int)")
    conn.execute("INSERT INTO purchases (item) SELECT 'item ' || g FROM generate_series(1, 1000) g")
    conn.execute("INSERT INTO lines (purchase_id, qty) SELECT 1 + g % 1000, g FROM generate_series(1, 2000) g")
    conn.execute("CREATE SEQUENCE purchases_shard_id_seq")
    conn.execute(f"CREATE FUNCTION lines_rule() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body} RETURN NEW; END $$")
    conn.execute(f'CREATE TRIGGER "{name}" BEFORE INSERT OR UPDATE ON lines FOR EACH ROW EXECUTE FUNCTION lines_rule()')
    conn.execute("ANALYZE")


USERS_TRIGGERS = {
    # what the user's trigger does to the reference: (its body, a write that makes it act)
    "clears it": ("IF NEW.qty = -1 THEN NEW.purchase_id := NULL; END IF;",
                  ["INSERT INTO lines (purchase_id, qty) VALUES (7, -1)",
                   "UPDATE lines SET qty = -1 WHERE id = (SELECT min(id) FROM lines WHERE qty > 0 AND purchase_id IS NOT NULL)"]),
    "moves it to another parent": ("IF NEW.qty = -2 THEN NEW.purchase_id := 900; END IF;",
                                   ["INSERT INTO lines (purchase_id, qty) VALUES (7, -2)",
                                    "UPDATE lines SET qty = -2 WHERE id = (SELECT min(id) FROM lines WHERE qty > 0)"]),
    "sets it on a row that had none": ("IF NEW.qty = -3 THEN NEW.purchase_id := 901; END IF;",
                                       ["INSERT INTO lines (purchase_id, qty) VALUES (NULL, -3)"]),
    "moves a copied row": ("IF NEW.qty = -4 THEN NEW.purchase_id := 902; END IF;",
                           # INSERT ... SELECT of every column: the new column comes set, from the copied row
                           ["INSERT INTO lines (purchase_id, qty, purchase_id_shard_id) "
                            "  SELECT purchase_id, -4, purchase_id_shard_id FROM lines WHERE id = 3"]),
}


@pytest.mark.parametrize("name", ["trg_lines", "update_lines"])
@pytest.mark.parametrize("does", sorted(USERS_TRIGGERS))
def test_a_users_trigger_that_changes_the_reference(cluster, db, does, name):
    """On fff95fc the conversion's reference triggers (shard_id_convert_...) fired before a user's
    trigger named trg_... or update_...: a reference it cleared kept its old parent's new id, a
    reference it moved kept the old parent (after the swap, the row referenced another row than
    its old key named), one it set on a new row failed the writer from the finish's CHECK on
    (23514); a copied row kept the new column of the row it was copied from. The conversion's
    fire last now, and read what the user's left."""
    body, writes = USERS_TRIGGERS[does]
    with cluster.connect(db) as conn:
        lines_with_a_users_trigger(conn, name, body)
        filled(conn, "purchases", "created_at", "purchases_shard_id_seq")
        failures = []
        with cluster.connect(db) as writer:
            def write():
                for statement in writes:
                    try:
                        writer.execute(statement)
                    except psycopg.Error as e:
                        failures.append(f"{e.sqlstate}: {e}")
            steps_of_the_finish(conn, "purchases", write)
        assert failures == []
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"
        assert one(conn, "SELECT count(*) FROM lines WHERE qty < 0") >= 2
        assert references_kept(conn, "lines", "purchase_id") == 0
        assert one(conn, "SELECT count(*) FROM lines WHERE (purchase_id IS NULL) <> (purchase_id_before_shard_id IS NULL)") == 0
        assert validated(conn, "lines")


@pytest.mark.parametrize("name", ["~~last", "\u00e9tape"])
def test_a_users_trigger_that_would_fire_after_the_conversions_is_refused(cluster, db, name):
    """A name that sorts after the conversion's own ('~...': any that begins with an ASCII
    character sorts before) is refused by the plan and the prepare, nothing changed; made after
    the prepare, by every step until it is renamed (or dropped), and the finish then mends what
    was written meanwhile."""
    with cluster.connect(db) as conn:
        lines_with_a_users_trigger(conn, name, "IF NEW.qty = -2 THEN NEW.purchase_id := 900; END IF;")
        refusals = conn.execute("SELECT object FROM shard_id_convert_plan('purchases', 'created_at', 'purchases_shard_id_seq', 5) "
                                "WHERE action = 'refuse'").fetchall()
        assert [r[0] for r in refusals] == [f'trigger "{name}" on public.lines'], refusals
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            conn.execute("CALL shard_id_convert_prepare('purchases', 'created_at', 'purchases_shard_id_seq', 5)")
        assert f'trigger "{name}" on public.lines' in refused.value.diag.message_detail
        assert one(conn, "SELECT count(*) FROM pg_attribute WHERE attname LIKE '%shard_id' AND attrelid IN ('purchases'::regclass, 'lines'::regclass)") == 0
        # made (here: renamed) after the prepare: the batches and the finish refuse it, and what
        # it wrote meanwhile is mended
        conn.execute(f'ALTER TRIGGER "{name}" ON lines RENAME TO trg_lines')
        conn.execute("CALL shard_id_convert_prepare('purchases', 'created_at', 'purchases_shard_id_seq', 5)")
        for (statement,) in conn.execute("SELECT * FROM shard_id_convert_indexes('purchases')").fetchall():
            conn.execute(statement)

        def refused_while_it_fires_last(step):
            conn.execute(f'ALTER TRIGGER trg_lines ON lines RENAME TO "{name}"')
            conn.execute("INSERT INTO lines (purchase_id, qty) VALUES (7, -2)")
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
                conn.execute(step)
            assert f'trigger "{name}" on public.lines fires after' in refused.value.diag.message_detail, step
            conn.execute(f'ALTER TRIGGER "{name}" ON lines RENAME TO trg_lines')
        refused_while_it_fires_last("CALL shard_id_convert('purchases', 500)")
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "prepared"
        conn.execute("CALL shard_id_convert('purchases', 500)")
        refused_while_it_fires_last("CALL shard_id_convert_finish('purchases')")
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "filled"
        conn.execute("CALL shard_id_convert_finish('purchases')")
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"
        assert one(conn, "SELECT count(*) FROM lines WHERE qty = -2") == 2
        assert references_kept(conn, "lines", "purchase_id") == 0
        assert validated(conn, "lines")


def test_a_view_made_after_the_prepare_that_reads_the_key_and_its_new_column(cluster, db):
    """On fff95fc a view made after the prepare that read both the key and the new column made
    every finish fail at the swap (42703: the swap makes it again from its definition, after the
    renames), and abandoning fail (2BP01: DROP COLUMN under it). Both refuse it now, naming it,
    nothing changed; a view that reads only the new column stops abandoning, and follows the
    swap."""
    with cluster.connect(db) as conn:
        purchases(conn)
        filled(conn, "purchases", "created_at", "purchases_shard_id_seq")
        conn.execute("CREATE VIEW both_ids AS SELECT id, shard_id, item FROM purchases")
        conn.execute("CREATE VIEW new_ids AS SELECT shard_id AS new_id, item FROM purchases")
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            conn.execute("CALL shard_id_convert_abandon('purchases')")
        detail = refused.value.diag.message_detail
        assert "view public.both_ids" in detail and "view public.new_ids" in detail, detail
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            conn.execute("CALL shard_id_convert_finish('purchases')")
        detail = refused.value.diag.message_detail
        assert "view public.both_ids" in detail and "new_ids" not in detail, detail
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "filled"
        assert one(conn, "SELECT count(*) FROM pg_constraint WHERE conname LIKE 'shard_id_convert%'") == 0
        conn.execute("INSERT INTO purchases (item) VALUES ('after the refusals')")
        conn.execute("DROP VIEW both_ids")
        conn.execute("CALL shard_id_convert_finish('purchases')")
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"
        assert one(conn, "SELECT count(*) FROM new_ids v JOIN purchases p ON p.id = v.new_id") == 1001


def test_the_reference_triggers_of_a_long_column_fire_last_too(cluster, db):
    """On 1ad0eb3 the INSERT trigger of a 54-byte new referencing column (a 45-byte column and
    _shard_id) was named '_<md5>...': derived_name shortened its '~shard_id_convert_' to nothing,
    and every trigger of the user's that began with a letter was refused (the twenty-ninth
    review). Both begin with '~' at every length."""
    with cluster.connect(db) as conn:
        for n in range(1, 64):
            column = "a" * n
            for on_update in (False, True):
                name = one(conn, "SELECT _pg_shard_id.reference_trigger(%s::name, %s)", (column + "_shard_id", on_update))
                assert name.startswith("~"), (n, on_update, name)
        column = "a" * 45
        conn.execute("CREATE TABLE purchases (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now())")
        conn.execute(f"CREATE TABLE lines (id bigserial PRIMARY KEY, {column} bigint REFERENCES purchases)")
        conn.execute("CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$")
        conn.execute("CREATE TRIGGER trg_touch BEFORE INSERT OR UPDATE ON lines FOR EACH ROW EXECUTE FUNCTION touch()")
        conn.execute("CREATE SEQUENCE purchases_shard_id_seq")
        assert conn.execute("SELECT object FROM shard_id_convert_plan('purchases', 'created_at', 'purchases_shard_id_seq', 5) "
                            "WHERE action = 'refuse'").fetchall() == []


def test_abandoning_drops_a_check_of_the_users_on_the_new_column_with_it(cluster, db):
    """On 1ad0eb3 abandoning refused a CHECK made after the prepare on the new column, which
    DROP COLUMN drops with it (the twenty-ninth review); a view that reads it is still refused."""
    with cluster.connect(db) as conn:
        purchases(conn)
        conn.execute("CALL shard_id_convert_prepare('purchases', 'created_at', 'purchases_shard_id_seq', 5)")
        conn.execute("ALTER TABLE purchases ADD CONSTRAINT user_check CHECK (shard_id IS NOT NULL OR id < 0) NOT VALID")
        conn.execute("CREATE VIEW new_ids AS SELECT shard_id FROM purchases")
        # (a generated column's dependency is automatic too, yet DROP COLUMN refuses it: the
        # second read of the fix)
        conn.execute("ALTER TABLE purchases ADD COLUMN new_hex text GENERATED ALWAYS AS (to_hex(shard_id)) STORED")
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            conn.execute("CALL shard_id_convert_abandon('purchases')")
        detail = refused.value.diag.message_detail
        assert "column new_hex of table public.purchases" in detail and "view public.new_ids" in detail, detail
        assert "user_check" not in detail, detail
        assert "cannot be abandoned" in str(refused.value)
        conn.execute("DROP VIEW new_ids")
        conn.execute("ALTER TABLE purchases DROP COLUMN new_hex")
        conn.execute("CALL shard_id_convert_abandon('purchases')")
        assert one(conn, "SELECT count(*) FROM pg_constraint WHERE conname = 'user_check'") == 0
        assert one(conn, "SELECT count(*) FROM pg_attribute WHERE attrelid = 'purchases'::regclass AND attname = 'shard_id'") == 0
