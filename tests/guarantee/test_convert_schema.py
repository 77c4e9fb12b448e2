"""The table conversion on real schemas (issue 49): every object PostgreSQL attaches to the key
column, or to a column that references it, follows the new column at the swap, or
shard_id_convert_prepare refuses before it changes anything, naming the object; the user's own
triggers do not fire while rows get their ids; tables whose names need quoting, outside the
search_path; a partitioned table whose primary key lists the partition column first.

One test per kind of object (KINDS, CARRIED_ALONE), each run alone on a small schema, then all of
them at once under writers that insert, update and delete (test_every_kind_at_once_under_traffic).
Run by tests/guarantee/run.sh."""

import threading
import time

import psycopg
import pytest

PURCHASES = 2000


def base_schema(conn):
    conn.execute("CREATE TABLE purchases (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, "
                 "item text NOT NULL, amount int NOT NULL DEFAULT 1, updated_at timestamptz)")
    conn.execute("CREATE TABLE purchase_lines (id bigserial PRIMARY KEY, "
                 "purchase_id bigint NOT NULL REFERENCES purchases ON DELETE CASCADE, qty int)")
    conn.execute("INSERT INTO purchases (created_at, item, amount) "
                 "SELECT '2026-02-01'::timestamptz + g * interval '90 s' + (g %% 5) * interval '1 ms', "
                 "       'item ' || g, g %% 50 FROM generate_series(1, %s) g", (PURCHASES,))
    conn.execute("INSERT INTO purchase_lines (purchase_id, qty) SELECT 1 + g %% %s, g FROM generate_series(1, %s) g",
                 (PURCHASES, 2 * PURCHASES))
    conn.execute("CREATE SEQUENCE purchases_shard_id_seq")
    conn.execute("ANALYZE")


def has_plan(conn):
    """Whether this build has shard_id_convert_plan (0.7.0 as released before issue 49 did not)."""
    return conn.execute("SELECT to_regproc('shard_id_convert_plan') IS NOT NULL").fetchone()[0]


def prepare(conn, table="purchases", time_column="created_at", seq="purchases_shard_id_seq", **options):
    args = [table, time_column, seq, 5]
    named = "".join(f", {k} => %s" for k in options) if has_plan(conn) else ""
    values = list(options.values()) if has_plan(conn) else []
    conn.execute(f"CALL shard_id_convert_prepare(%s, %s, %s, %s{named})", args + values)


def convert(conn, table="purchases", **options):
    """The four documented steps."""
    prepare(conn, table, **options)
    for (statement,) in conn.execute("SELECT * FROM shard_id_convert_indexes(%s)", (table,)).fetchall():
        conn.execute(statement)
    conn.execute("CALL shard_id_convert(%s, 700)", (table,))
    conn.execute("CALL shard_id_convert_finish(%s)", (table,))


def converted_ids_are_new(conn):
    """The swap happened: purchases.id holds ids at the rows' own times."""
    wrong = conn.execute("SELECT count(*) FROM purchases WHERE item LIKE 'item %' AND "
                         "shard_id_extract_timestamp(id) <> date_trunc('milliseconds', created_at)").fetchone()[0]
    assert wrong == 0


def role(conn, db, suffix):
    name = f"{db}_{suffix}"[-60:]
    conn.execute(f'DROP ROLE IF EXISTS "{name}"')
    conn.execute(f'CREATE ROLE "{name}"')
    return name


def as_role(conn, name, query, params=None):
    conn.execute(f'SET ROLE "{name}"')
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.execute("RESET ROLE")


def one(conn, query, params=None):
    return conn.execute(query, params).fetchone()[0]


# ---- each kind: (setup, check after the conversion) -------------------------------------------

def view_on_key(conn, db):
    conn.execute("CREATE VIEW purchase_ids AS SELECT id, item FROM purchases")
    return lambda: (
        one(conn, "SELECT count(*) FROM purchase_ids v JOIN purchases p USING (item) WHERE v.id <> p.id") == 0
        and one(conn, "SELECT count(*) FROM purchase_ids") == one(conn, "SELECT count(*) FROM purchases"))


def view_on_reference(conn, db):
    conn.execute("CREATE VIEW line_purchases AS SELECT id, purchase_id FROM purchase_lines")
    return lambda: one(conn, "SELECT count(*) FROM line_purchases v JOIN purchase_lines l USING (id) "
                             "WHERE v.purchase_id <> l.purchase_id") == 0


def views_in_another_schema_and_over_a_view(conn, db):
    conn.execute("CREATE SCHEMA reports")
    conn.execute("CREATE VIEW reports.recent AS SELECT p.id, p.item FROM purchases p WHERE p.id > 0")
    conn.execute("CREATE VIEW reports.top AS SELECT max(id) AS top FROM reports.recent")
    return lambda: one(conn, "SELECT top = (SELECT max(id) FROM purchases) FROM reports.top")


def view_with_options(conn, db):
    conn.execute("CREATE VIEW paid WITH (security_barrier) AS SELECT id, item, amount FROM purchases "
                 "WHERE amount > 0 WITH LOCAL CHECK OPTION")
    conn.execute("COMMENT ON VIEW paid IS 'paid purchases'")
    grantee = role(conn, db, "paid_reader")
    conn.execute(f'GRANT SELECT ON paid TO "{grantee}"')
    return lambda: (
        one(conn, "SELECT count(*) FROM paid v JOIN purchases p USING (item) WHERE v.id <> p.id") == 0
        and one(conn, "SELECT reloptions::text FROM pg_class WHERE oid = 'paid'::regclass")
        == "{security_barrier=true,check_option=local}"
        and one(conn, "SELECT obj_description('paid'::regclass)") == "paid purchases"
        and one(conn, "SELECT has_table_privilege(%s, 'paid', 'SELECT')", (grantee,)))


def rule(conn, db):
    conn.execute("CREATE TABLE deleted_log (purchase_id bigint)")
    conn.execute("CREATE RULE log_delete AS ON DELETE TO purchases DO ALSO INSERT INTO deleted_log VALUES (OLD.id)")

    def check():
        deleted = one(conn, "DELETE FROM purchases WHERE item = 'item 9' RETURNING id")
        return one(conn, "SELECT count(*) FROM deleted_log WHERE purchase_id = %s", (deleted,)) == 1
    return check


def policy(conn, db):
    reader = role(conn, db, "reader")
    conn.execute(f'GRANT SELECT ON purchases TO "{reader}"')
    conn.execute("ALTER TABLE purchases ENABLE ROW LEVEL SECURITY")
    conn.execute("CREATE POLICY even ON purchases USING (id % 2 = 0)")
    return lambda: (
        as_role(conn, reader, "SELECT count(*) FILTER (WHERE id % 2 <> 0), count(*) FROM purchases")[0]
        == (0, one(conn, "SELECT count(*) FROM purchases WHERE id % 2 = 0")))


def policy_on_a_referencing_table(conn, db):
    reader = role(conn, db, "line_reader")
    conn.execute(f'GRANT SELECT ON purchases, purchase_lines TO "{reader}"')
    conn.execute("ALTER TABLE purchase_lines ENABLE ROW LEVEL SECURITY")
    conn.execute("CREATE POLICY big_purchases ON purchase_lines "
                 "USING (purchase_id IN (SELECT id FROM purchases WHERE amount > 40))")
    def check():
        # the policy's subquery as the reader sees it (with any policy of purchases applied)
        visible = [r[0] for r in as_role(conn, reader, "SELECT id FROM purchases WHERE amount > 40")]
        expected = one(conn, "SELECT count(*) FROM purchase_lines WHERE purchase_id = ANY (%s)", (visible,))
        return as_role(conn, reader, "SELECT count(*) FROM purchase_lines")[0][0] == expected > 0
    return check


def trigger_update_of_the_key(conn, db):
    conn.execute("CREATE TABLE key_changes (old_id bigint, new_id bigint)")
    conn.execute("CREATE FUNCTION log_key_change() RETURNS trigger LANGUAGE plpgsql AS $$ "
                 "BEGIN INSERT INTO key_changes VALUES (OLD.id, NEW.id); RETURN NEW; END $$")
    conn.execute("CREATE TRIGGER key_change AFTER UPDATE OF id ON purchases FOR EACH ROW "
                 "WHEN (OLD.id IS DISTINCT FROM NEW.id) EXECUTE FUNCTION log_key_change()")
    conn.execute("ALTER TABLE purchases ENABLE ALWAYS TRIGGER key_change")

    def check():
        fresh = one(conn, "INSERT INTO purchases (created_at, item) VALUES (now(), 'fresh') RETURNING id")
        conn.execute("UPDATE purchases SET id = id + 1 WHERE item = 'fresh'")
        conn.execute("UPDATE purchases SET id_before_shard_id = -1 WHERE item = 'item 3'")
        return (conn.execute("SELECT * FROM key_changes").fetchall() == [(fresh, fresh + 1)]
                and one(conn, "SELECT tgenabled FROM pg_trigger WHERE tgname = 'key_change'") == "A")
    return check


def trigger_when_on_a_reference(conn, db):
    conn.execute("CREATE TABLE line_moves (line bigint)")
    conn.execute("CREATE FUNCTION log_line_move() RETURNS trigger LANGUAGE plpgsql AS $$ "
                 "BEGIN INSERT INTO line_moves VALUES (NEW.id); RETURN NEW; END $$")
    conn.execute("CREATE TRIGGER line_move BEFORE UPDATE ON purchase_lines FOR EACH ROW "
                 "WHEN (OLD.purchase_id IS DISTINCT FROM NEW.purchase_id) EXECUTE FUNCTION log_line_move()")

    def check():
        conn.execute("UPDATE purchase_lines SET qty = qty + 1 WHERE id = 1")
        conn.execute("UPDATE purchase_lines SET purchase_id = (SELECT id FROM purchases WHERE item = 'item 4') "
                     "WHERE id = 2")
        return conn.execute("SELECT * FROM line_moves").fetchall() == [(2,)]
    return check


def index_with_the_key_among_its_columns(conn, db):
    conn.execute("CREATE INDEX purchases_item_id ON purchases (item, id DESC) INCLUDE (amount)")
    return lambda: one(conn, "SELECT pg_get_indexdef('purchases_item_id'::regclass)") \
        == "CREATE INDEX purchases_item_id ON public.purchases USING btree (item, id DESC) INCLUDE (amount)" \
        and one(conn, "SELECT indisvalid FROM pg_index WHERE indexrelid = 'purchases_item_id'::regclass")


def index_on_an_expression_with_a_predicate(conn, db):
    conn.execute("CREATE INDEX purchases_id_mod ON purchases ((id % 16)) WHERE id > 100 AND item <> 'id'")
    return lambda: one(conn, "SELECT pg_get_indexdef('purchases_id_mod'::regclass)") \
        == "CREATE INDEX purchases_id_mod ON public.purchases USING btree (((id % (16)::bigint))) " \
           "WHERE ((id > 100) AND (item <> 'id'::text))"


def unique_constraint(conn, db):
    conn.execute("ALTER TABLE purchases ADD CONSTRAINT purchases_item_id_key UNIQUE (item, id) DEFERRABLE")
    return lambda: conn.execute(
        "SELECT pg_get_constraintdef(oid), condeferrable FROM pg_constraint WHERE conname = 'purchases_item_id_key'"
    ).fetchall() == [("UNIQUE (item, id) DEFERRABLE", True)]


def index_on_a_reference(conn, db):
    conn.execute("CREATE INDEX lines_purchase_qty ON purchase_lines (purchase_id, qty)")
    return lambda: one(conn, "SELECT pg_get_indexdef('lines_purchase_qty'::regclass)") \
        == "CREATE INDEX lines_purchase_qty ON public.purchase_lines USING btree (purchase_id, qty)"


def check_constraint(conn, db):
    # (on the key alone: one that spans other columns is refused, test_convert_finishes.py)
    conn.execute("ALTER TABLE purchases ADD CONSTRAINT id_positive CHECK (id > 0 AND id <> -13)")
    return lambda: one(conn, "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'id_positive'") \
        == "CHECK (((id > 0) AND (id <> '-13'::integer)))"


def statistics_object(conn, db):
    conn.execute("CREATE STATISTICS purchases_id_item (ndistinct) ON id, item FROM purchases")
    return lambda: one(conn, "SELECT pg_get_statisticsobjdef(oid) FROM pg_statistic_ext "
                             "WHERE stxname = 'purchases_id_item'") \
        == "CREATE STATISTICS public.purchases_id_item (ndistinct) ON item, id FROM purchases"  # (attnum order)


def publication_column_list_and_row_filter(conn, db):
    conn.execute("CREATE PUBLICATION pub_ids FOR TABLE purchases (id, item) WHERE (id % 2 = 0)")
    return lambda: conn.execute(
        "SELECT attnames::text, rowfilter FROM pg_publication_tables WHERE pubname = 'pub_ids'"
    ).fetchall() == [("{item,id}", "((id % (2)::bigint) = 0)")]


def function_with_a_sql_standard_body(conn, db):
    conn.execute("CREATE FUNCTION purchase_id_of(text) RETURNS bigint LANGUAGE sql STABLE "
                 "BEGIN ATOMIC SELECT id FROM purchases WHERE item = $1; END")
    return lambda: one(conn, "SELECT purchase_id_of('item 5') = id FROM purchases WHERE item = 'item 5'")


def column_privileges(conn, db):
    reader = role(conn, db, "column_reader")
    conn.execute(f'GRANT SELECT (id, item) ON purchases TO "{reader}"')
    # (a row security policy of another check may hide the row from the reader: a subset, then)
    return lambda: set(as_role(conn, reader, "SELECT id FROM purchases WHERE item LIKE 'item 6%'")) \
        <= set(conn.execute("SELECT id FROM purchases WHERE item LIKE 'item 6%'").fetchall()) \
        and conn.execute("SELECT count(*) FROM pg_attribute WHERE attrelid = 'purchases'::regclass AND attname = 'id' "
                         "AND has_column_privilege(%s, 'purchases', 'id', 'SELECT')", (reader,)).fetchone()[0] == 1


def column_comment_and_settings(conn, db):
    conn.execute("COMMENT ON COLUMN purchases.id IS 'the purchase'")
    conn.execute("ALTER TABLE purchases ALTER COLUMN id SET STATISTICS 500")
    conn.execute("ALTER TABLE purchases ALTER COLUMN id SET (n_distinct = -1)")
    return lambda: conn.execute(
        "SELECT col_description(attrelid, attnum), attstattarget, 'n_distinct=-1' = ANY (attoptions) FROM pg_attribute "
        "WHERE attrelid = 'purchases'::regclass AND attname = 'id'"
    ).fetchall() == [("the purchase", 500, True)]


def replica_identity_index(conn, db):
    conn.execute("CREATE UNIQUE INDEX purchases_id_item ON purchases (id, item)")
    conn.execute("ALTER TABLE purchases REPLICA IDENTITY USING INDEX purchases_id_item")
    return lambda: conn.execute(
        "SELECT c.relreplident, pg_get_indexdef(i.indexrelid) FROM pg_class c JOIN pg_index i "
        "ON i.indrelid = c.oid AND i.indisreplident WHERE c.oid = 'purchases'::regclass"
    ).fetchall() == [("i", "CREATE UNIQUE INDEX purchases_id_item ON public.purchases USING btree (id, item)")]


def clustered_primary_key(conn, db):
    conn.execute("ALTER TABLE purchases CLUSTER ON purchases_pkey")
    return lambda: conn.execute(
        "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i "
        "WHERE i.indrelid = 'purchases'::regclass AND i.indisclustered"
    ).fetchall() == [("purchases_pkey", "CREATE UNIQUE INDEX purchases_pkey ON public.purchases USING btree (id)")]


def virtual_generated_column(conn, db):
    conn.execute("ALTER TABLE purchases ADD COLUMN code text GENERATED ALWAYS AS ('P-' || id::text) VIRTUAL")
    return lambda: one(conn, "SELECT count(*) FROM purchases WHERE code <> 'P-' || id::text") == 0


def constraint_comments(conn, db):
    """Comments on the constraints made again at the swap: the primary key, a unique constraint and
    a foreign key to the key (not objects of the column: nothing in pg_depend shows them)."""
    conn.execute("ALTER TABLE purchases ADD CONSTRAINT purchases_item_id_unique UNIQUE (item, id)")
    conn.execute("COMMENT ON CONSTRAINT purchases_pkey ON purchases IS 'the key'")
    conn.execute("COMMENT ON CONSTRAINT purchases_item_id_unique ON purchases IS 'one item per purchase'")
    conn.execute("COMMENT ON CONSTRAINT purchase_lines_purchase_id_fkey ON purchase_lines IS 'lines of a purchase'")
    return lambda: conn.execute(
        "SELECT conname, obj_description(oid, 'pg_constraint') FROM pg_constraint WHERE conname IN "
        "('purchases_pkey', 'purchases_item_id_unique', 'purchase_lines_purchase_id_fkey') ORDER BY 1"
    ).fetchall() == [("purchase_lines_purchase_id_fkey", "lines of a purchase"),
                     ("purchases_item_id_unique", "one item per purchase"), ("purchases_pkey", "the key")]


def foreign_keys_left_not_valid(conn, db):
    """Foreign keys the user left NOT VALID stay so: one to another unique column, which a row
    breaks (the finish must neither validate it nor fail on it), and one to the key (carried, its
    values converted, not validated)."""
    conn.execute("ALTER TABLE purchases ADD COLUMN code text UNIQUE")
    conn.execute("UPDATE purchases SET code = 'c' || id WHERE id <= 10")
    conn.execute("CREATE TABLE wishes (code text, purchase_id bigint)")
    # ('orphan': a row the foreign key to the key, left NOT VALID, never checked; issue 55)
    conn.execute("INSERT INTO wishes VALUES ('no such code', NULL), ('c7', 7), ('orphan', 999999)")
    conn.execute("ALTER TABLE wishes ADD CONSTRAINT wishes_code_fkey FOREIGN KEY (code) "
                 "REFERENCES purchases (code) NOT VALID")
    conn.execute("ALTER TABLE wishes ADD CONSTRAINT wishes_purchase_fkey FOREIGN KEY (purchase_id) "
                 "REFERENCES purchases NOT VALID")
    expected = [
        ("purchase_lines_purchase_id_fkey", True, "FOREIGN KEY (purchase_id) REFERENCES purchases(id) ON DELETE CASCADE"),
        ("wishes_code_fkey", False, "FOREIGN KEY (code) REFERENCES purchases(code) NOT VALID"),
        ("wishes_purchase_fkey", False, "FOREIGN KEY (purchase_id) REFERENCES purchases(id) NOT VALID"),
    ]
    if server_version(conn) >= 180000:  # NOT ENFORCED is PostgreSQL 18's
        conn.execute("ALTER TABLE wishes ADD COLUMN gift_for bigint")
        conn.execute("ALTER TABLE wishes ADD CONSTRAINT wishes_unenforced_fkey FOREIGN KEY (gift_for) "
                     "REFERENCES purchases NOT ENFORCED")
        expected.append(("wishes_unenforced_fkey", False, "FOREIGN KEY (gift_for) REFERENCES purchases(id) NOT ENFORCED"))
    return lambda: conn.execute(
        "SELECT conname, convalidated, pg_get_constraintdef(oid) FROM pg_constraint WHERE contype = 'f' "
        "AND conname IN ('purchase_lines_purchase_id_fkey', 'wishes_code_fkey', 'wishes_purchase_fkey', "
        "'wishes_unenforced_fkey') ORDER BY 1"
    ).fetchall() == expected \
        and one(conn, "SELECT count(*) FROM wishes w JOIN purchases p ON p.id = w.purchase_id WHERE p.code = 'c7'") == 1 \
        and one(conn, "SELECT purchase_id FROM wishes WHERE code = 'orphan'") == -1 - 999999


KINDS = [view_on_key, view_on_reference, views_in_another_schema_and_over_a_view, view_with_options, rule,
         policy, policy_on_a_referencing_table, trigger_update_of_the_key, trigger_when_on_a_reference,
         index_with_the_key_among_its_columns, index_on_an_expression_with_a_predicate, unique_constraint,
         index_on_a_reference, check_constraint, statistics_object, publication_column_list_and_row_filter,
         function_with_a_sql_standard_body, column_privileges, column_comment_and_settings,
         replica_identity_index, clustered_primary_key, virtual_generated_column, constraint_comments,
         foreign_keys_left_not_valid]
# the kinds whose check needs the published table acknowledged
PUBLISHED = {publication_column_list_and_row_filter}


def server_version(conn):
    return int(one(conn, "SHOW server_version_num"))


@pytest.mark.parametrize("kind", KINDS, ids=[k.__name__ for k in KINDS])
def test_each_kind_follows_the_new_key(cluster, db, kind):
    with cluster.connect(db) as conn:
        if kind is virtual_generated_column and server_version(conn) < 180000:
            pytest.skip("virtual generated columns are PostgreSQL 18's")
        base_schema(conn)
        check = kind(conn, db)
        options = {"subscribers_ready": True} if kind in PUBLISHED else {}
        convert(conn, **options)
        converted_ids_are_new(conn)
        assert check(), kind.__name__
        # nothing is left on the old key: nothing depends on it but its own sequence, DEFAULT and
        # NOT NULL (PostgreSQL 18)
        left = conn.execute(
            "SELECT pg_describe_object(d.classid, d.objid, d.objsubid) FROM pg_depend d "
            " JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid "
            "WHERE d.refclassid = 'pg_class'::regclass AND a.attname LIKE '%\\_before\\_shard\\_id' "
            "  AND d.classid <> 'pg_class'::regclass "
            "  AND NOT (d.classid = 'pg_attrdef'::regclass AND d.objid IN "
            "           (SELECT oid FROM pg_attrdef WHERE adrelid = d.refobjid AND adnum = d.refobjsubid)) "
            "  AND NOT (d.classid = 'pg_constraint'::regclass AND (SELECT contype FROM pg_constraint "
            "           WHERE oid = d.objid) = 'n') ").fetchall()
        assert left == [], left


# ---- refusals: before anything changes, naming the object ---------------------------------------

REFUSED = {
    "stored generated column": ("ALTER TABLE purchases ADD COLUMN code text GENERATED ALWAYS AS ('P-' || id::text) STORED",
                                "column public.purchases.code"),
    "materialized view": ("CREATE MATERIALIZED VIEW purchase_mv AS SELECT id FROM purchases", "purchase_mv"),
    "exclusion constraint": ("ALTER TABLE purchases ADD CONSTRAINT no_twins EXCLUDE USING btree (id WITH =)",
                             "no_twins"),
    "inheritance": ("CREATE TABLE purchases_archive () INHERITS (purchases)", "purchases_archive"),
    "row type used": ("CREATE TABLE snapshots (p purchases)", "snapshots"),
    "old name taken": ("ALTER TABLE purchases ADD COLUMN id_before_shard_id bigint", "id_before_shard_id"),
    "reference in a partition key": (
        "CREATE TABLE line_notes (purchase_id bigint REFERENCES purchases, note text) "
        "PARTITION BY HASH (purchase_id); "
        "CREATE TABLE line_notes_0 PARTITION OF line_notes FOR VALUES WITH (MODULUS 1, REMAINDER 0)",
        "line_notes"),
    "foreign key to a reference": (
        "ALTER TABLE purchase_lines ADD CONSTRAINT line_key UNIQUE (purchase_id, id); "
        "CREATE TABLE line_audit (purchase_id bigint, line bigint, "
        "FOREIGN KEY (purchase_id, line) REFERENCES purchase_lines (purchase_id, id))",
        "line_audit"),
    "materialized view of a reference": (
        "CREATE MATERIALIZED VIEW line_mv AS SELECT purchase_id FROM purchase_lines", "line_mv"),
    "domain type of a reference": ("CREATE DOMAIN purchase_ref AS bigint CHECK (VALUE > 0); "
                                   "ALTER TABLE purchase_lines ALTER COLUMN purchase_id TYPE purchase_ref",
                                   "column public.purchase_lines.purchase_id"),
    # (next_shard_id_at refuses an owner row security applies to: every batch would fail)
    "row security forced": ("ALTER TABLE purchases ENABLE ROW LEVEL SECURITY; "
                            "ALTER TABLE purchases FORCE ROW LEVEL SECURITY", "table public.purchases"),
    # (the tenth outside review: each was accepted on 9040ad9 and stranded the conversion, or
    # failed writers after it)
    "default of a referencing column": ("ALTER TABLE purchase_lines ALTER COLUMN purchase_id SET DEFAULT 1",
                                        "column public.purchase_lines.purchase_id"),
    "unique index with nulls not distinct": (
        "CREATE UNIQUE INDEX lines_once ON purchase_lines (purchase_id, qty) NULLS NOT DISTINCT", "lines_once"),
    "index expression new ids fail": ("CREATE INDEX purchases_small ON purchases ((id::int4))", "purchases_small"),
    # (the twenty-fifth review: accepted on 010dbbb; its twin could never be built, the
    # batches waited for it; and the new ids' sequence owned by the old key, which the drop of
    # the old column after the finish takes with the new DEFAULT)
    "unique constraint with nulls not distinct": (
        "ALTER TABLE purchases ADD CONSTRAINT purchases_once UNIQUE NULLS NOT DISTINCT (id, amount)", "purchases_once"),
    "sequence of the new ids owned by the key": ("ALTER SEQUENCE purchases_shard_id_seq OWNED BY purchases.id",
                                                 "purchases_shard_id_seq"),
    "row security forced on a referencing table": (
        "ALTER TABLE purchase_lines ENABLE ROW LEVEL SECURITY; ALTER TABLE purchase_lines FORCE ROW LEVEL SECURITY",
        "table public.purchase_lines"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_prepare_refuses_what_cannot_follow_and_changes_nothing(cluster, db, case):
    setup, named = REFUSED[case]
    with cluster.connect(db) as conn:
        base_schema(conn)
        for statement in setup.split("; "):
            conn.execute(statement)
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            prepare(conn)
        message = refused.value.diag.message_primary + "\n" + (refused.value.diag.message_detail or "")
        assert named in message, message
        assert one(conn, "SELECT count(*) FROM pg_attribute WHERE attname IN ('shard_id', 'purchase_id_shard_id') "
                         "AND attrelid IN ('purchases'::regclass, 'purchase_lines'::regclass)") == 0
        assert one(conn, "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'shard_id_convert%'") == 0


def test_a_virtual_generated_column_in_a_table_with_a_check_is_refused(cluster, db):
    with cluster.connect(db) as conn:
        if server_version(conn) < 180000:
            pytest.skip("virtual generated columns are PostgreSQL 18's")
        base_schema(conn)
        conn.execute("ALTER TABLE purchases ADD COLUMN code text GENERATED ALWAYS AS ('P-' || id::text) VIRTUAL")
        conn.execute("ALTER TABLE purchases ADD CONSTRAINT positive CHECK (amount >= 0)")
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            prepare(conn)
        assert "column public.purchases.code" in refused.value.diag.message_detail
        assert "CHECK" in refused.value.diag.message_detail


def test_a_view_of_an_integer_key_is_refused_with_the_reason(cluster, db):
    with cluster.connect(db) as conn:
        conn.execute("CREATE TABLE tickets (id serial PRIMARY KEY, created_at timestamptz NOT NULL)")
        conn.execute("INSERT INTO tickets (created_at) SELECT '2026-03-01'::timestamptz + g * interval '1 s' "
                     "FROM generate_series(1, 10) g")
        conn.execute("CREATE VIEW ticket_ids AS SELECT id FROM tickets")
        conn.execute("CREATE SEQUENCE tickets_seq")
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            conn.execute("CALL shard_id_convert_prepare('tickets', 'created_at', 'tickets_seq', 1)")
        assert "ticket_ids" in refused.value.diag.message_detail
        assert "integer" in refused.value.diag.message_detail


# ---- the user's triggers -----------------------------------------------------------------------

def audited_schema(conn):
    base_schema(conn)
    conn.execute("CREATE TABLE audit (tbl text, op text, at timestamptz DEFAULT clock_timestamp())")
    conn.execute("CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ "
                 "BEGIN NEW.updated_at := clock_timestamp(); RETURN NEW; END $$")
    conn.execute("CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$ "
                 "BEGIN INSERT INTO audit (tbl, op) VALUES (TG_TABLE_NAME, TG_OP || ' ' || TG_LEVEL); "
                 "RETURN NULL; END $$")
    conn.execute("CREATE TRIGGER touch BEFORE UPDATE ON purchases FOR EACH ROW EXECUTE FUNCTION touch()")
    conn.execute("CREATE TRIGGER audit AFTER UPDATE ON purchases FOR EACH ROW EXECUTE FUNCTION audit()")
    conn.execute("CREATE TRIGGER audit_statement AFTER UPDATE ON purchases FOR EACH STATEMENT EXECUTE FUNCTION audit()")
    conn.execute("CREATE TRIGGER audit AFTER UPDATE ON purchase_lines FOR EACH ROW EXECUTE FUNCTION audit()")
    conn.execute("CREATE RULE count_updates AS ON UPDATE TO purchase_lines DO ALSO "
                 "INSERT INTO audit (tbl, op) VALUES ('purchase_lines', 'rule')")


def test_no_user_trigger_or_rule_fires_and_no_user_column_changes(cluster, db):
    with cluster.connect(db) as conn:
        audited_schema(conn)
        convert(conn)
        converted_ids_are_new(conn)
        assert one(conn, "SELECT count(*) FROM audit") == 0
        assert one(conn, "SELECT count(*) FROM purchases WHERE updated_at IS NOT NULL") == 0
        # and they fire again for the application's own writes
        conn.execute("UPDATE purchases SET amount = amount WHERE item = 'item 1'")
        conn.execute("UPDATE purchase_lines SET qty = 0 WHERE id = 1")
        assert one(conn, "SELECT count(*) FROM audit") == 4


def test_an_owner_who_may_not_silence_triggers_is_refused_unless_they_fire_by_choice(cluster, db):
    with cluster.connect(db) as conn:
        audited_schema(conn)
        owner = role(conn, db, "owner")
        conn.execute(f'GRANT CREATE ON SCHEMA public TO "{owner}"')  # (CREATE INDEX needs it)
        for table in ("purchases", "purchase_lines", "audit"):
            conn.execute(f'ALTER TABLE {table} OWNER TO "{owner}"')
        conn.execute(f'ALTER SEQUENCE purchases_shard_id_seq OWNER TO "{owner}"')
        conn.execute(f'GRANT USAGE ON SEQUENCE purchases_id_seq, purchase_lines_id_seq TO "{owner}"')
        conn.execute(f'SET ROLE "{owner}"')
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            prepare(conn)
        detail = refused.value.diag.message_detail
        for name in ("trigger touch", "trigger audit", "trigger audit_statement", "rule count_updates"):
            assert name in detail, detail
        assert "fire_triggers" in refused.value.diag.message_hint
        assert "GRANT SET ON PARAMETER session_replication_role" in refused.value.diag.message_hint
        convert(conn, fire_triggers=True)
        converted_ids_are_new(conn)
        # fired by choice: each row of each batch
        assert one(conn, "SELECT count(*) FROM audit WHERE tbl = 'purchases' AND op = 'UPDATE ROW'") >= PURCHASES
        conn.execute("RESET ROLE")


def test_an_owner_granted_the_setting_converts_quietly(cluster, db):
    with cluster.connect(db) as conn:
        if server_version(conn) < 150000:
            pytest.skip("GRANT SET ON PARAMETER is PostgreSQL 15's")
        audited_schema(conn)
        owner = role(conn, db, "quiet_owner")
        conn.execute(f'GRANT CREATE ON SCHEMA public TO "{owner}"')
        for table in ("purchases", "purchase_lines", "audit"):
            conn.execute(f'ALTER TABLE {table} OWNER TO "{owner}"')
        conn.execute(f'ALTER SEQUENCE purchases_shard_id_seq OWNER TO "{owner}"')
        conn.execute(f'GRANT SET ON PARAMETER session_replication_role TO "{owner}"')
        conn.execute(f'SET ROLE "{owner}"')
        convert(conn)
        conn.execute("RESET ROLE")
        converted_ids_are_new(conn)
        assert one(conn, "SELECT count(*) FROM audit") == 0
        conn.execute(f'REVOKE SET ON PARAMETER session_replication_role FROM "{owner}"')


def test_a_trigger_enabled_always_is_refused_even_for_a_superuser(cluster, db):
    with cluster.connect(db) as conn:
        audited_schema(conn)
        conn.execute("ALTER TABLE purchases ENABLE ALWAYS TRIGGER audit")
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            prepare(conn)
        assert "trigger audit" in refused.value.diag.message_detail


# ---- names ---------------------------------------------------------------------------------------

def test_names_that_need_quoting_outside_the_search_path(cluster, db):
    long_key = "Order Identifier " + "x" * 40
    with cluster.connect(db) as conn:
        conn.execute('CREATE SCHEMA "Sales"')
        conn.execute('CREATE SCHEMA "Sales Lines"')
        conn.execute(f'CREATE TABLE "Sales"."Order List" ("{long_key}" bigserial PRIMARY KEY, '
                     '"Created At" timestamptz NOT NULL, "Note" text)')
        conn.execute(f'CREATE TABLE "Sales Lines"."Line Items" (id bigserial PRIMARY KEY, '
                     f'"Order Ref" bigint REFERENCES "Sales"."Order List", '
                     f'"Order Ref 2" bigint REFERENCES "Sales"."Order List")')
        conn.execute('CREATE INDEX "Line Items by order" ON "Sales Lines"."Line Items" ("Order Ref")')
        conn.execute('CREATE VIEW "Sales"."Order ""Ids""" AS SELECT * FROM "Sales"."Order List"')
        conn.execute('INSERT INTO "Sales"."Order List" ("Created At", "Note") '
                     "SELECT '2026-04-01'::timestamptz + g * interval '1 min', 'n' FROM generate_series(1, 500) g")
        conn.execute(f'INSERT INTO "Sales Lines"."Line Items" ("Order Ref", "Order Ref 2") '
                     f'SELECT g, 501 - g FROM generate_series(1, 500) g')
        conn.execute('CREATE SEQUENCE "Sales"."Order Seq"')
        conn.execute("SET search_path = public")
        table = '"Sales"."Order List"'
        conn.execute(f"CALL shard_id_convert_prepare('{table}', 'Created At', '\"Sales\".\"Order Seq\"', 2)")
        for (statement,) in conn.execute("SELECT * FROM shard_id_convert_indexes(%s)", (table,)).fetchall():
            conn.execute(statement)
        conn.execute("CALL shard_id_convert(%s, 100)", (table,))
        conn.execute("CALL shard_id_convert_finish(%s)", (table,))
        key = conn.execute("SELECT quote_ident(attname) FROM pg_attribute WHERE attrelid = %s::regclass "
                           "AND attnum = (SELECT conkey[1] FROM pg_constraint WHERE conrelid = %s::regclass "
                           "AND contype = 'p')", (table, table)).fetchone()[0]
        assert key == f'"{long_key}"'
        assert one(conn, f'SELECT count(*) FROM {table} WHERE shard_id_extract_timestamp({key}) <> "Created At"') == 0
        for ref, pair in (('"Order Ref"', "g"), ('"Order Ref 2"', "501 - g")):
            wrong = one(conn, f'SELECT count(*) FROM "Sales Lines"."Line Items" l JOIN {table} o ON o.{key} = l.{ref}'
                              f' WHERE shard_id_extract_timestamp(o.{key}) IS NULL')
            assert wrong == 0
            assert one(conn, f'SELECT count(*) FROM "Sales Lines"."Line Items" l JOIN {table} o ON o.{key} = l.{ref}') == 500
        assert one(conn, 'SELECT count(*) FROM "Sales"."Order ""Ids""" v JOIN "Sales"."Order List" o '
                         f'USING ("Created At") WHERE v.{key} <> o.{key}') == 0
        assert one(conn, "SELECT pg_get_indexdef('\"Sales Lines\".\"Line Items by order\"'::regclass)") \
            == 'CREATE INDEX "Line Items by order" ON "Sales Lines"."Line Items" USING btree ("Order Ref")'


def test_a_partitioned_table_with_the_partition_column_first_in_its_key(cluster, db):
    with cluster.connect(db) as conn:
        conn.execute("CREATE TABLE events (region text, id bigserial, created_at timestamptz NOT NULL, "
                     "PRIMARY KEY (region, id)) PARTITION BY LIST (region)")
        conn.execute("CREATE TABLE events_eu PARTITION OF events FOR VALUES IN ('eu')")
        conn.execute("CREATE TABLE events_us PARTITION OF events FOR VALUES IN ('us')")
        conn.execute("CREATE INDEX events_id_created ON events (id, created_at)")
        conn.execute("INSERT INTO events (region, created_at) SELECT CASE WHEN g % 3 = 0 THEN 'eu' ELSE 'us' END, "
                     "'2026-05-01'::timestamptz + g * interval '1 s' FROM generate_series(1, 3000) g")
        conn.execute("CREATE SEQUENCE events_seq")
        conn.execute("CALL shard_id_convert_prepare('events', 'created_at', 'events_seq', 3)")
        for (statement,) in conn.execute("SELECT * FROM shard_id_convert_indexes('events')").fetchall():
            conn.execute(statement)
        conn.execute("CALL shard_id_convert('events', 500)")
        conn.execute("CALL shard_id_convert_finish('events')")
        assert one(conn, "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'events'::regclass "
                         "AND contype = 'p'") == "PRIMARY KEY (region, id)"
        assert one(conn, "SELECT count(*) FROM events WHERE shard_id_extract_timestamp(id) <> created_at") == 0
        assert one(conn, "SELECT pg_get_indexdef('events_id_created'::regclass)") \
            == "CREATE INDEX events_id_created ON ONLY public.events USING btree (id, created_at)"


def test_an_empty_table_converts(cluster, db):
    """A table without rows (its ANALYZE records no statistics: the finish must not wait for them),
    with a referencing table."""
    with cluster.connect(db) as conn:
        conn.execute("SET statement_timeout = '60s'")  # (a finish that never ends fails here)
        conn.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL)")
        conn.execute("CREATE TABLE order_lines (order_id bigint REFERENCES orders)")
        conn.execute("CREATE SEQUENCE orders_seq")
        convert(conn, "orders", seq="orders_seq")
        assert one(conn, "SELECT count(*) FROM pg_attribute WHERE attrelid = 'orders'::regclass "
                         "AND attname = 'id_before_shard_id'") == 1
        new = one(conn, "INSERT INTO orders (created_at) VALUES (now()) RETURNING id")
        assert one(conn, "SELECT shard_id_extract_shard(%s)", (new,)) == 5
        conn.execute("INSERT INTO order_lines VALUES (%s)", (new,))


def test_a_temporary_table_whose_name_a_table_on_the_path_shares(cluster, db):
    """A temporary table converted with the user's triggers firing (the batches then run under the
    caller's search_path), that path putting a table of the same name before pg_temp: every
    statement names the temporary table by its schema, and the other table is not touched."""
    with cluster.connect(db) as conn:
        conn.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, note text)")
        conn.execute("INSERT INTO orders (created_at, note) SELECT now(), 'public' FROM generate_series(1, 50)")
        conn.execute("CREATE TEMP TABLE orders (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, note text)")
        conn.execute("INSERT INTO pg_temp.orders (created_at, note) "
                     "SELECT '2026-07-01'::timestamptz + g * interval '1 s', 'temp' FROM generate_series(1, 200) g")
        conn.execute("CREATE SEQUENCE orders_seq")
        conn.execute("SET search_path = public, pg_temp")
        conn.execute("CALL shard_id_convert_prepare('pg_temp.orders', 'created_at', 'orders_seq', 5, fire_triggers => true)")
        for (statement,) in conn.execute("SELECT * FROM shard_id_convert_indexes('pg_temp.orders')").fetchall():
            conn.execute(statement)
        conn.execute("CALL shard_id_convert('pg_temp.orders', 50)")
        conn.execute("CALL shard_id_convert_finish('pg_temp.orders')")
        assert one(conn, "SELECT count(*) FROM pg_temp.orders WHERE shard_id_extract_timestamp(id) = created_at") == 200
        assert conn.execute("SELECT count(*), min(id), max(id) FROM public.orders").fetchone() == (50, 1, 50)
        assert one(conn, "SELECT count(*) FROM pg_attribute WHERE attrelid = 'public.orders'::regclass "
                         "AND attnum > 0 AND NOT attisdropped") == 3


def test_a_referenced_table_whose_name_holds_parentheses(cluster, db):
    """The foreign key to the key is made again from its definition, whatever the names in it."""
    with cluster.connect(db) as conn:
        conn.execute('CREATE TABLE "orders (2026)" (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL)')
        conn.execute('CREATE TABLE "lines (2026)" (id bigserial PRIMARY KEY, '
                     'order_id bigint REFERENCES "orders (2026)")')
        conn.execute('INSERT INTO "orders (2026)" (created_at) '
                     "SELECT '2026-06-01'::timestamptz + g * interval '1 s' FROM generate_series(1, 300) g")
        conn.execute('INSERT INTO "lines (2026)" (order_id) SELECT g FROM generate_series(1, 300) g')
        conn.execute("CREATE SEQUENCE orders_seq")
        convert(conn, '"orders (2026)"', seq="orders_seq")
        assert conn.execute("SELECT pg_get_constraintdef(oid), convalidated FROM pg_constraint "
                            "WHERE contype = 'f' AND conrelid = '\"lines (2026)\"'::regclass").fetchall() \
            == [('FOREIGN KEY (order_id) REFERENCES "orders (2026)"(id)', True)]
        assert one(conn, 'SELECT count(*) FROM "lines (2026)" l JOIN "orders (2026)" o ON o.id = l.order_id '
                         "WHERE shard_id_extract_timestamp(o.id) = o.created_at") == 300


# ---- everything at once, under writers ------------------------------------------------------------

class Writers:
    """Inserts through the DEFAULT, updates of old rows and deletes (with their lines), in a loop,
    on rows the kinds' checks do not read."""

    def __init__(self, cluster, db):
        self.cluster, self.db = cluster, db
        self.stop, self.errors, self.count = threading.Event(), [], 0
        self.thread = threading.Thread(target=self.run)

    def run(self):
        try:
            with self.cluster.connect(self.db) as conn:
                i = 0
                while not self.stop.is_set():
                    i += 1
                    with conn.transaction():
                        new = one(conn, "INSERT INTO purchases (created_at, item) VALUES (now() - interval '3 s', %s) "
                                        "RETURNING id", (f"new {i}",))
                        conn.execute("INSERT INTO purchase_lines (purchase_id, qty) VALUES (%s, 1)", (new,))
                        conn.execute("UPDATE purchases SET amount = amount + 1 WHERE item = %s",
                                     (f"item {100 + (i * 7) % 1800}",))
                        conn.execute("UPDATE purchase_lines SET qty = qty + 1 WHERE id = %s", (100 + (i * 13) % 3000,))
                        if i % 5 == 0:
                            conn.execute("DELETE FROM purchases WHERE item = %s", (f"new {i - 3}",))
                    self.count += 1
        except Exception as e:  # noqa: BLE001 (reported by the test)
            self.errors.append(repr(e))

    def __enter__(self):
        self.thread.start()
        time.sleep(0.2)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def test_every_kind_at_once_under_traffic(cluster, db):
    with cluster.connect(db) as conn:  # (the kinds' checks use this session)
        base_schema(conn)
        # (a virtual generated column cannot follow in a table with a CHECK: refused, tested below)
        kinds = [k for k in KINDS if k is not virtual_generated_column]
        checks = {k.__name__: k(conn, db) for k in kinds}
        conn.execute("ANALYZE")
        with Writers(cluster, db) as writers:
            plan = conn.execute("SELECT kind, action FROM shard_id_convert_plan('purchases', 'created_at', "
                                "'purchases_shard_id_seq', 5, subscribers_ready => true)").fetchall()
            assert "refuse" not in {action for _, action in plan}, plan
            # the plan names its kinds from the inventory of kinds, the one the catalog test reads
            known = {r[0] for r in conn.execute("SELECT kind FROM _pg_shard_id.conversion_kinds()")}
            assert {kind for kind, _ in plan} - known == set()
            convert(conn, subscribers_ready=True)
            time.sleep(0.3)
        assert writers.errors == [] and writers.count > 0, writers.errors
        print(f"writers: {writers.count} transactions")
        converted_ids_are_new(conn)
        # the rows the writers inserted during the conversion have live ids, above every old one
        assert one(conn, "SELECT max(id) FILTER (WHERE item LIKE 'item %') < min(id) FILTER (WHERE item LIKE 'new %') "
                         "FROM purchases")
        assert one(conn, "SELECT count(*) FROM purchase_lines l LEFT JOIN purchases p ON p.id = l.purchase_id "
                         "WHERE p.id IS NULL") == 0
        failed = [name for name, check in checks.items() if not check()]
        assert failed == []
        # every index of the two tables is valid and on the new columns
        assert one(conn, "SELECT count(*) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                         "AND a.attnum = ANY (i.indkey) WHERE i.indrelid IN ('purchases'::regclass, "
                         "'purchase_lines'::regclass) AND (a.attname LIKE '%before_shard_id' OR NOT i.indisvalid)") == 0


# ---- the catalog: nothing PostgreSQL can attach to a column that the conversion does not know --------

def test_the_catalog_holds_nothing_the_conversion_does_not_know(cluster, db):
    """Every catalog column of the running server that can hold a user column's number, a set of
    them or an expression over them (by type: int2vector, int2[], pg_node_tree; by name: an attnum
    or objsubid), and every column of pg_attribute (a column's own properties), is listed in
    _pg_shard_id.conversion_catalog_columns() with a kind _pg_shard_id.conversion_kinds() has a
    rule for. A new major version that adds one fails here until a rule covers it."""
    with cluster.connect(db) as conn:
        found = set(conn.execute(
            "SELECT c.relname::text, a.attname::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind = 'r' AND a.attnum > 0 "
            "  AND NOT a.attisdropped "
            "  AND (a.atttypid IN ('int2vector'::regtype, 'int2[]'::regtype, 'pg_node_tree'::regtype) "
            "       OR a.attname ~ '(attnum|objsubid|attno|num$)' OR c.relname = 'pg_attribute')").fetchall())
        listed = {(c, col): kind for c, col, kind in
                  conn.execute("SELECT * FROM _pg_shard_id.conversion_catalog_columns()").fetchall()}
        kinds = {r[0] for r in conn.execute("SELECT kind FROM _pg_shard_id.conversion_kinds()")}
        assert sorted(found - set(listed)) == [], "catalog columns no rule covers"
        assert sorted({k for k in listed.values()} - kinds) == [], "kinds without a rule"
