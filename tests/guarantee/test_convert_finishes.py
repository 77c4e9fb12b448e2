"""The conversion finishes whatever its prepare accepts (issue 55): the shapes whose finish could
not complete on cec376e are refused by the plan and the prepare before anything changes, naming
the object and the way out; a prepared conversion can be abandoned, leaving the table as it was;
a table never analyzed gets batches of about the size asked.

Each test fails on cec376e (the prepare accepted and changed the table, or no abandon existed, or
a batch converted every row at once). Run by tests/guarantee/run.sh."""

import threading
import time

import psycopg
import pytest

from pgcluster import Cluster, wait_for
from test_convert_schema import PURCHASES, base_schema, convert, one, prepare, role


@pytest.fixture(scope="module")
def cluster():
    """conftest's cluster, with prepared transactions allowed (a coordinator's, held)."""
    c = Cluster("convert_finishes", conf=["max_prepared_transactions = 4"])
    yield c
    c.destroy()


def columns(conn, table):
    return [r[0] for r in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (table,)).fetchall()]


def refused_before_anything_changed(conn, kind, word, tables=("purchases", "purchase_lines")):
    before = {t: columns(conn, t) for t in tables}
    plan = conn.execute("SELECT object, statement, detail FROM shard_id_convert_plan('purchases', 'created_at', "
                        "'purchases_shard_id_seq', 5) WHERE kind = %s AND action = 'refuse'", (kind,)).fetchall()
    assert plan, f"the plan does not refuse {kind}"
    assert any(word in (o or "") + (n or "") for o, _, n in plan), plan
    with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
        prepare(conn)
    assert word in str(refused.value) + (refused.value.diag.message_detail or "")
    assert {t: columns(conn, t) for t in tables} == before, "the prepare changed a table"
    assert one(conn, "SELECT count(*) FROM _pg_shard_id.conversions") == 0


def test_a_partitioned_referencing_table_is_refused_before_postgresql_18(cluster, db):
    with cluster.connect(db) as conn:
        if one(conn, "SELECT current_setting('server_version_num')::int") >= 180000:
            pytest.skip("PostgreSQL 18 makes NOT VALID foreign keys on partitioned tables")
        base_schema(conn)
        conn.execute("CREATE TABLE events (id bigint, purchase_id bigint REFERENCES purchases, at date NOT NULL) "
                     "PARTITION BY RANGE (at)")
        conn.execute("CREATE TABLE events_1 PARTITION OF events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')")
        refused_before_anything_changed(conn, "partitioned referencing table", "events", ("purchases", "events"))


def test_a_table_without_an_index_led_by_the_key_is_refused(cluster, db):
    with cluster.connect(db) as conn:
        conn.execute("CREATE TABLE ev (region int, id bigint, created_at timestamptz NOT NULL, PRIMARY KEY (region, id)) "
                     "PARTITION BY LIST (region)")
        conn.execute("CREATE TABLE ev_1 PARTITION OF ev FOR VALUES IN (1)")
        conn.execute("INSERT INTO ev SELECT 1, g, now() - interval '1 day' FROM generate_series(1, 100) g")
        conn.execute("CREATE SEQUENCE ev_seq")
        plan = conn.execute("SELECT statement FROM shard_id_convert_plan('ev', 'created_at', 'ev_seq', 5) "
                            "WHERE kind = 'no index on the key'").fetchall()
        assert plan and "CREATE INDEX ON public.ev (id)" in plan[0][0].replace('"', ''), plan
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            conn.execute("CALL shard_id_convert_prepare('ev', 'created_at', 'ev_seq', 5)")
        assert "shard_id" not in columns(conn, "ev")
        # the way out the plan gives: then it converts
        conn.execute("CREATE INDEX ON ev (id)")
        conn.execute("CALL shard_id_convert_prepare('ev', 'created_at', 'ev_seq', 5)")
        convert_after_the_prepare(conn, "ev", 50)
        assert one(conn, "SELECT count(*) FROM ev WHERE shard_id_extract_shard(id) = 5") == 100


def test_a_check_the_new_ids_cannot_satisfy_is_refused(cluster, db):
    with cluster.connect(db) as conn:
        base_schema(conn)
        conn.execute("ALTER TABLE purchases ADD CONSTRAINT small_ids CHECK (id < 100000)")
        refused_before_anything_changed(conn, "check constraint on the key", "small_ids")
        # a CHECK new ids satisfy is carried as before
        conn.execute("ALTER TABLE purchases DROP CONSTRAINT small_ids, ADD CONSTRAINT positive CHECK (id > 0)")
        assert one(conn, "SELECT count(*) FROM shard_id_convert_plan('purchases', 'created_at', "
                         "'purchases_shard_id_seq', 5) WHERE action = 'refuse'") == 0


def test_a_not_valid_check_is_refused(cluster, db):
    with cluster.connect(db) as conn:
        base_schema(conn)
        conn.execute("UPDATE purchases SET item = '' WHERE id = 7")
        conn.execute("ALTER TABLE purchases ADD CONSTRAINT item_set CHECK (item <> '') NOT VALID")
        refused_before_anything_changed(conn, "check constraint not valid", "item_set")


def test_a_view_that_depends_on_the_primary_key_is_refused(cluster, db):
    with cluster.connect(db) as conn:
        base_schema(conn)
        conn.execute("CREATE VIEW per_purchase AS SELECT p.id, p.item, count(l.*) AS lines "
                     "FROM purchases p LEFT JOIN purchase_lines l ON l.purchase_id = p.id GROUP BY p.id")
        refused_before_anything_changed(conn, "depends on the key's constraint", "per_purchase")


def test_abandoning_a_prepared_conversion_leaves_the_table_as_it_was(cluster, db):
    with cluster.connect(db) as conn:
        base_schema(conn)
        def shape():
            return (columns(conn, "purchases"), columns(conn, "purchase_lines"),
                    conn.execute("SELECT tgrelid::regclass::text, tgname FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1, 2").fetchall(),
                    conn.execute("SELECT conrelid::regclass::text, conname FROM pg_constraint WHERE conrelid IN "
                                 "('purchases'::regclass, 'purchase_lines'::regclass) ORDER BY 1, 2").fetchall(),
                    conn.execute("SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid IN "
                                 "('purchases'::regclass, 'purchase_lines'::regclass) ORDER BY 1").fetchall(),
                    conn.execute("SELECT sum(id), count(*) FROM purchases").fetchone())
        before = shape()
        # prepared, indexes built, half the batches, the finish's CHECKs added
        prepare_with_twin_indexes(conn)
        conn.execute("CALL shard_id_convert('purchases', 700)")
        conn.execute("SELECT _pg_shard_id.finish_step('purchases', 'public')")
        assert shape() != before
        conn.execute("CALL shard_id_convert_abandon('purchases')")
        assert shape() == before
        assert one(conn, "SELECT count(*) FROM _pg_shard_id.conversions") == 0
        # inserts work as before, and it can be converted from scratch
        conn.execute("INSERT INTO purchases (created_at, item) VALUES (now(), 'after')")
        convert(conn)
        assert one(conn, "SELECT count(*) FROM purchases WHERE shard_id_extract_shard(id) = 5") == one(
            conn, "SELECT count(*) FROM purchases")
        # after the swap: refused, nothing changed
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
            conn.execute("CALL shard_id_convert_abandon('purchases')")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
            conn.execute("CALL shard_id_convert_abandon('purchase_lines')")


def test_a_table_without_statistics_gets_batches_of_the_size_asked(cluster, db):
    with cluster.connect(db) as conn:
        conn.execute("CREATE TABLE big (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL) "
                     "WITH (autovacuum_enabled = off)")
        conn.execute("INSERT INTO big (created_at) SELECT now() - interval '1 day' + g * interval '1 ms' "
                     "FROM generate_series(1, 50000) g")
        assert one(conn, "SELECT reltuples FROM pg_class WHERE oid = 'big'::regclass") < 0
        conn.execute("CREATE SEQUENCE big_seq")
        conn.execute("CALL shard_id_convert_prepare('big', 'created_at', 'big_seq', 1)")
        for (statement,) in conn.execute("SELECT * FROM shard_id_convert_indexes('big')").fetchall():
            conn.execute(statement)
        # (building an index records the row count; a table that was never analyzed nor indexed
        # since it filled has none, which the catalog says with -1)
        conn.execute("UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid = 'big'::regclass")
        conn.execute("SELECT _pg_shard_id.convert_step('big', 1000, 'public')")  # prepared -> filling
        conn.execute("SELECT _pg_shard_id.convert_step('big', 1000, 'public')")  # the first batch
        done = one(conn, "SELECT rows_done FROM _pg_shard_id.conversions WHERE relid = 'big'::regclass")
        assert 500 <= done <= 2000, f"a batch of 1,000 rows converted {done}"


def test_a_trigger_disabled_on_one_partition_stays_disabled_there(cluster, db):
    with cluster.connect(db) as conn:
        conn.execute("CREATE TABLE ev (id bigserial, region int NOT NULL, created_at timestamptz NOT NULL, PRIMARY KEY (id, region)) "
                     "PARTITION BY LIST (region)")
        conn.execute("CREATE TABLE ev_1 PARTITION OF ev FOR VALUES IN (1)")
        conn.execute("CREATE TABLE ev_2 PARTITION OF ev FOR VALUES IN (2)")
        conn.execute("CREATE INDEX ON ev (id)")
        conn.execute("INSERT INTO ev (region, created_at) SELECT 1 + g % 2, now() - interval '1 day' FROM generate_series(1, 200) g")
        conn.execute("CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$")
        conn.execute("CREATE TRIGGER keyed BEFORE UPDATE OF id ON ev FOR EACH ROW EXECUTE FUNCTION touch()")
        conn.execute("ALTER TABLE ev_2 DISABLE TRIGGER keyed")
        conn.execute("CREATE SEQUENCE ev_seq")

        def states():
            return conn.execute("SELECT tgrelid::regclass::text, tgenabled FROM pg_trigger WHERE tgname = 'keyed' ORDER BY 1").fetchall()
        before = states()
        assert ("ev_2", "D") in before
        conn.execute("CALL shard_id_convert_prepare('ev', 'created_at', 'ev_seq', 5)")
        for (statement,) in conn.execute("SELECT * FROM shard_id_convert_indexes('ev')").fetchall():
            conn.execute(statement)
        conn.execute("CALL shard_id_convert('ev', 100)")
        conn.execute("CALL shard_id_convert_finish('ev')")
        assert states() == before


def test_an_index_keeps_its_operator_class_parameters_and_statistics_target(cluster, db):
    with cluster.connect(db) as conn:
        if not one(conn, "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_trgm'"):
            pytest.skip("pg_trgm is not installed with this server")
        conn.execute("CREATE EXTENSION pg_trgm")
        base_schema(conn)
        conn.execute("CREATE INDEX purchases_id_text ON purchases USING gist ((id::text) gist_trgm_ops (siglen = 64))")
        conn.execute("ALTER INDEX purchases_id_text ALTER COLUMN 1 SET STATISTICS 700")

        def props():
            return (one(conn, "SELECT pg_get_indexdef('purchases_id_text'::regclass)").replace("id_before_shard_id", "id"),
                    one(conn, "SELECT attstattarget::int FROM pg_attribute WHERE attrelid = 'purchases_id_text'::regclass AND attnum = 1"))
        before = props()
        assert "siglen" in before[0] and before[1] == 700
        convert(conn)
        assert props() == before


def test_a_leakproof_function_is_refused_to_a_caller_who_is_not_a_superuser(cluster, db):
    with cluster.connect(db) as conn:
        base_schema(conn)
        owner = f"{db}_owner"[-60:]
        conn.execute(f'DROP ROLE IF EXISTS "{owner}"')
        conn.execute(f'CREATE ROLE "{owner}"')
        conn.execute(f'ALTER TABLE purchases OWNER TO "{owner}"')
        conn.execute(f'ALTER TABLE purchase_lines OWNER TO "{owner}"')
        conn.execute(f'ALTER SEQUENCE purchases_shard_id_seq OWNER TO "{owner}"')
        conn.execute("CREATE FUNCTION newest() RETURNS bigint LANGUAGE sql STABLE LEAKPROOF BEGIN ATOMIC SELECT max(id) FROM purchases; END")
        conn.execute(f'ALTER FUNCTION newest() OWNER TO "{owner}"')
        conn.execute(f'SET ROLE "{owner}"')
        refused = conn.execute("SELECT detail FROM shard_id_convert_plan('purchases', 'created_at', 'purchases_shard_id_seq', 5) "
                               "WHERE kind = 'function' AND action = 'refuse'").fetchall()
        conn.execute("RESET ROLE")
        assert refused and "LEAKPROOF" in refused[0][0]
        # a superuser carries it
        assert one(conn, "SELECT count(*) FROM shard_id_convert_plan('purchases', 'created_at', 'purchases_shard_id_seq', 5) "
                         "WHERE kind = 'function' AND action = 'refuse'") == 0


def test_old_style_ids_written_after_the_swap_are_refused(cluster, db):
    with cluster.connect(db) as conn:
        base_schema(conn)
        convert(conn)
        # what JPA's SEQUENCE generator or a script does: the old sequence's next value, into the key
        with pytest.raises(psycopg.errors.CheckViolation) as refused:
            conn.execute("INSERT INTO purchases (id, created_at, item) VALUES (nextval('purchases_id_seq'), now(), 'old style')")
        assert "id_shard_id_floor" in str(refused.value)
        assert one(conn, "SELECT convalidated FROM pg_constraint WHERE conname = 'id_shard_id_floor'")
        # the DEFAULT, next_shard_id_at and the rows converted are all above it
        conn.execute("INSERT INTO purchases (created_at, item) VALUES (now(), 'new style')")
        conn.execute("INSERT INTO purchases (id, created_at, item) "
                     "SELECT next_shard_id_at('purchases_shard_id_seq', 5, now() - interval '1 minute'), now(), 'backfilled'")
        assert one(conn, "SELECT count(*) FROM purchases WHERE item = 'old style'") == 0


def test_a_check_on_a_referencing_column_that_a_placeholder_fails_is_refused(cluster, db):
    with cluster.connect(db) as conn:
        base_schema(conn)
        conn.execute("ALTER TABLE purchase_lines ADD CONSTRAINT positive_reference CHECK (purchase_id > 0)")
        refused_before_anything_changed(conn, "check constraint on the key", "positive_reference")


RENAMES = {
    # column renamed after the prepare: (table, old name, new name)
    "referencing column": ("purchase_lines", "purchase_id", "order_id"),
    "key": ("purchases", "id", "purchase_no"),
    "time column": ("purchases", "created_at", "bought_at"),
    "new column": ("purchases", "shard_id", "sid"),
    "new referencing column": ("purchase_lines", "purchase_id_shard_id", "pid_new"),
}


@pytest.mark.parametrize("renamed", sorted(RENAMES))
def test_a_column_renamed_after_the_prepare_stops_every_step_until_renamed_back(cluster, db, renamed):
    """On a6a7f0e a referencing column renamed after the prepare stranded the conversion: the index
    step failed on a column named after the old name, and abandoning it left the new column. Now
    each step refuses (55000) naming the column, before it changes anything; writers go on; renamed
    back, the conversion finishes, and the rows written meanwhile reference their parent's new id."""
    table, old, new = RENAMES[renamed]
    with cluster.connect(db) as conn:
        conn.autocommit = True
        base_schema(conn)
        prepare(conn)
        before = {t: columns(conn, t) for t in ("purchases", "purchase_lines")}
        conn.execute(f"ALTER TABLE {table} RENAME COLUMN {old} TO {new}")
        fk = "order_id" if renamed == "referencing column" else "purchase_id"
        created = "bought_at" if renamed == "time column" else "created_at"
        key = "purchase_no" if renamed == "key" else "id"
        # writers go on
        conn.execute(f"INSERT INTO purchases ({created}, item) VALUES (now(), 'during')")
        conn.execute(f"INSERT INTO purchase_lines ({fk}, qty) SELECT {key}, 7 FROM purchases WHERE item = 'during'")
        conn.execute("UPDATE purchase_lines SET qty = qty + 1 WHERE qty < 10")
        for step in ("SELECT * FROM shard_id_convert_indexes('purchases')",
                     "CALL shard_id_convert('purchases', 700)",
                     "CALL shard_id_convert_abandon('purchases')"):
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
                conn.execute(step)
            assert "renamed or dropped after its prepare" in str(refused.value), step
            assert f"has no column {old}" in refused.value.diag.message_detail, refused.value.diag.message_detail
        after = {t: columns(conn, t) for t in ("purchases", "purchase_lines")}
        assert {t: [c.replace(new, old) for c in cs] for t, cs in after.items()} == before, "a step changed a table"
        conn.execute(f"ALTER TABLE {table} RENAME COLUMN {new} TO {old}")
        convert_after_the_prepare(conn)
        assert one(conn, "SELECT count(*) FROM purchase_lines l JOIN purchases p ON p.id = l.purchase_id "
                         "WHERE p.item = 'during' AND l.qty = 8") == 1
        assert one(conn, "SELECT count(*) FROM purchase_lines l LEFT JOIN purchases p ON p.id = l.purchase_id "
                         "WHERE p.id IS NULL") == 0
        assert one(conn, "SELECT count(*) FROM purchases WHERE shard_id_extract_timestamp(id) IS NULL") == 0


def build_twins(conn, table="purchases"):
    """The index step: the statements shard_id_convert_indexes emits, run."""
    for (statement,) in conn.execute("SELECT * FROM shard_id_convert_indexes(%s)", (table,)).fetchall():
        conn.execute(statement)


def prepare_with_twin_indexes(conn):
    """The prepare, then the index step (the twins built)."""
    prepare(conn)
    build_twins(conn)


def convert_after_the_prepare(conn, table="purchases", batch=700):
    build_twins(conn, table)
    conn.execute("CALL shard_id_convert(%s, %s)", (table, batch))
    conn.execute("CALL shard_id_convert_finish(%s)", (table,))


def test_a_check_that_spans_the_key_and_other_columns_is_refused(cluster, db):
    """On 0221c01 the prepare accepted CHECK (kind <> 'legacy' OR id < 100000): the finish's
    validation of its twin failed on every call, and from the finish's CHECK on every writer of a
    'legacy' row failed (the eighth review). Whether new ids satisfy it depends on each row's other
    columns, so it is refused before anything changes, with the way out (split it)."""
    with cluster.connect(db) as conn:
        base_schema(conn)
        conn.execute("ALTER TABLE purchases ADD CONSTRAINT legacy_small CHECK (item <> 'legacy' OR id < 100000)")
        conn.execute("INSERT INTO purchases (created_at, item) VALUES (now() - interval '1 day', 'legacy')")
        refused_before_anything_changed(conn, "check constraint on the key", "legacy_small")


def test_writers_in_replica_mode_keep_their_references(cluster, db):
    """On 0221c01 the conversion's triggers were enabled for origin sessions only: a writer with
    session_replication_role = replica (pglogical's or Bucardo's apply, a bulk load) skipped them:
    a line moved to another order kept its old order's new id, and after the swap it pointed at the
    wrong order (the eighth review). They are ENABLE ALWAYS now."""
    with cluster.connect(db) as conn:
        conn.autocommit = True
        base_schema(conn)
        prepare(conn)
        assert one(conn, "SELECT string_agg(DISTINCT tgenabled::text, '') FROM pg_trigger "
                         "WHERE tgfoid::regproc::text LIKE '_pg_shard_id.conversion_%'") == "A"
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE purchase_lines SET purchase_id = 6 WHERE purchase_id = 5")
        conn.execute("INSERT INTO purchases (created_at, item) VALUES (now(), 'in replica mode')")
        conn.execute("INSERT INTO purchase_lines (purchase_id, qty) "
                     "SELECT id, 99 FROM purchases WHERE item = 'in replica mode'")
        conn.execute("RESET session_replication_role")
        convert_after_the_prepare(conn)
        assert one(conn, "SELECT count(*) FROM purchase_lines l LEFT JOIN purchases p ON p.id = l.purchase_id "
                         "WHERE p.id IS NULL") == 0
        assert one(conn, "SELECT count(*) FROM purchase_lines l JOIN purchases p ON p.id = l.purchase_id "
                         "WHERE p.id_before_shard_id = 6") == 4  # (2 lines of 5's and 2 of 6's)
        assert one(conn, "SELECT count(*) FROM purchase_lines l JOIN purchases p ON p.id = l.purchase_id "
                         "WHERE p.id_before_shard_id = 5") == 0
        assert one(conn, "SELECT count(*) FROM purchase_lines l JOIN purchases p ON p.id = l.purchase_id "
                         "WHERE p.item = 'in replica mode' AND l.qty = 99") == 1


def test_a_trigger_of_another_role_with_made_up_arguments_stops_nothing(cluster, db):
    """On 51b418e the rename check decoded the arguments of every trigger of the database that
    calls the conversion's functions: a role's own trigger with an argument holding a backslash and
    000 made the decoding fail, and every step of every conversion, abandoning included, with it
    (the ninth review). Only the triggers on the table and its referencing tables are read now, and
    an argument is split on its zero byte."""
    with cluster.connect(db) as conn:
        conn.autocommit = True
        base_schema(conn)
        prepare(conn)
        mallory = role(conn, db, "mallory")
        conn.execute(f'CREATE SCHEMA m AUTHORIZATION "{mallory}"')
        conn.execute(f'SET ROLE "{mallory}"')
        conn.execute("CREATE TABLE m.t (a int)")
        conn.execute("CREATE TRIGGER x BEFORE INSERT ON m.t FOR EACH ROW "
                     "EXECUTE FUNCTION _pg_shard_id.conversion_fill_reference(E'a\\\\000', 'b', 'c')")
        conn.execute("RESET ROLE")
        convert_after_the_prepare(conn)
        assert one(conn, "SELECT count(*) FROM purchases WHERE shard_id_extract_shard(id) = 5") == \
            one(conn, "SELECT count(*) FROM purchases")


def test_a_latin1_database_with_accented_names_converts(cluster, db):
    """On 51b418e the rename check decoded trigger arguments as UTF-8: in a LATIN1 database a
    column named créé_le stopped every step after the prepare (the ninth review)."""
    latin1 = (db + "_latin1")[-60:]
    cluster.sql(f"DROP DATABASE IF EXISTS {latin1}")
    cluster.sql(f"CREATE DATABASE {latin1} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    cluster.sql("SET client_min_messages = warning; CREATE EXTENSION pg_shard_id", latin1)
    with cluster.connect(latin1) as conn:
        conn.autocommit = True
        conn.execute('CREATE TABLE commandes (id bigserial PRIMARY KEY, "créé_le" timestamptz NOT NULL)')
        conn.execute('CREATE TABLE lignes (id bigserial PRIMARY KEY, "commandé" bigint REFERENCES commandes)')
        conn.execute("""INSERT INTO commandes ("créé_le") SELECT now() - g * interval '1 min' FROM generate_series(1, 300) g""")
        conn.execute("""INSERT INTO lignes ("commandé") SELECT id FROM commandes""")
        conn.execute("CREATE SEQUENCE commandes_shard_id_seq")
        conn.execute("CALL shard_id_convert_prepare('commandes', 'créé_le', 'commandes_shard_id_seq', 5)")
        for (statement,) in conn.execute("SELECT * FROM shard_id_convert_indexes('commandes')").fetchall():
            conn.execute(statement)
        conn.execute("CALL shard_id_convert('commandes', 100)")
        conn.execute("CALL shard_id_convert_finish('commandes')")
        assert one(conn, """SELECT count(*) FROM lignes l JOIN commandes c ON c.id = l."commandé" """
                         "WHERE shard_id_extract_shard(c.id) = 5") == 300


def test_a_text_key_converts(cluster, db):
    """On 51b418e a text key was accepted by the plan and the prepare, then its twin index asked
    for COLLATE on the bigint column ("collations are not supported by type bigint"): the
    conversion could not go on (the ninth review). (An index with text_pattern_ops on it is refused:
    test_what_reads_a_text_key_is_refused.)"""
    with cluster.connect(db) as conn:
        conn.autocommit = True
        conn.execute("CREATE TABLE codes (code text PRIMARY KEY, created_at timestamptz NOT NULL)")
        conn.execute("CREATE TABLE uses (id bigserial PRIMARY KEY, code text REFERENCES codes)")
        conn.execute("INSERT INTO codes SELECT 'c' || g, now() - g * interval '1 min' FROM generate_series(1, 200) g")
        conn.execute("INSERT INTO uses (code) SELECT code FROM codes")
        conn.execute("CREATE SEQUENCE codes_shard_id_seq")
        conn.execute("CALL shard_id_convert_prepare('codes', 'created_at', 'codes_shard_id_seq', 5)")
        for (statement,) in conn.execute("SELECT * FROM shard_id_convert_indexes('codes')").fetchall():
            conn.execute(statement)
        conn.execute("INSERT INTO codes VALUES ('during', now())")
        conn.execute("INSERT INTO uses (code) VALUES ('during')")
        conn.execute("CALL shard_id_convert('codes', 100)")
        conn.execute("CALL shard_id_convert_finish('codes')")
        assert one(conn, "SELECT count(*) FROM uses u JOIN codes c ON c.code = u.code") == 201
        assert one(conn, "SELECT count(*) FROM codes WHERE shard_id_extract_shard(code) = 5") == 201


def test_a_check_of_the_whole_row_is_refused(cluster, db):
    """On 51b418e CHECK (f(t)), which takes the whole row, was carried untouched through the
    conversion, and from the swap on a writer of a 'legacy' row failed (the ninth review)."""
    with cluster.connect(db) as conn:
        base_schema(conn)
        conn.execute("CREATE FUNCTION purchase_ok(p purchases) RETURNS boolean LANGUAGE sql IMMUTABLE "
                     "AS $$ SELECT p.item <> 'legacy' OR p.id < 100000 $$")
        conn.execute("ALTER TABLE purchases ADD CONSTRAINT legacy_small CHECK (purchase_ok(purchases))")
        refused_before_anything_changed(conn, "check constraint of the whole row", "legacy_small")


def test_a_key_type_of_an_extension_is_refused(cluster, db):
    """On 51b418e the plan accepted an ltree key and the prepare failed on its trigger's WHEN
    clause (operator does not exist: ltree = ltree, under the pinned search_path): the plan and the
    prepare disagreed (the ninth review). Both refuse it now, naming the column."""
    with cluster.connect(db) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS ltree")
        conn.execute("CREATE TABLE purchases (id ltree PRIMARY KEY, created_at timestamptz NOT NULL, item text)")
        conn.execute("CREATE TABLE purchase_lines (id bigserial PRIMARY KEY, purchase_id ltree REFERENCES purchases)")
        conn.execute("INSERT INTO purchases VALUES ('a.b', now() - interval '1 day', 'x')")
        conn.execute("CREATE SEQUENCE purchases_shard_id_seq")
        refused_before_anything_changed(conn, "key type", "purchases.id")


@pytest.mark.parametrize("shape", ["index_lower", "index_pattern_ops", "trigger_when", "policy"])
def test_what_reads_a_text_key_is_refused(cluster, db, shape):
    """On 9040ad9 a text key's index expression (lower(code)), trigger WHEN clause and policy were
    carried untried: the index step or every finish failed on bigint (the tenth review)."""
    with cluster.connect(db) as conn:
        conn.execute("CREATE TABLE codes (code text PRIMARY KEY, created_at timestamptz NOT NULL)")
        conn.execute("INSERT INTO codes SELECT 'c' || g, now() - g * interval '1 min' FROM generate_series(1, 20) g")
        conn.execute("CREATE SEQUENCE codes_shard_id_seq")
        conn.execute({"index_lower": "CREATE INDEX codes_lower ON codes (lower(code))",
                      "index_pattern_ops": "CREATE INDEX codes_prefix ON codes (code text_pattern_ops)",
                      "trigger_when": "CREATE FUNCTION nothing() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'; "
                                      "CREATE TRIGGER codes_set BEFORE UPDATE ON codes FOR EACH ROW WHEN (NEW.code <> '') "
                                      "EXECUTE FUNCTION nothing()",
                      "policy": "ALTER TABLE codes ENABLE ROW LEVEL SECURITY; "
                                "CREATE POLICY codes_a ON codes USING (code LIKE 'c%')"}[shape])
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            conn.execute("CALL shard_id_convert_prepare('codes', 'created_at', 'codes_shard_id_seq', 5)")
        assert "on a key that is not bigint" in refused.value.diag.message_detail, refused.value.diag.message_detail
        assert one(conn, "SELECT count(*) FROM pg_attribute WHERE attrelid = 'codes'::regclass AND attname = 'shard_id'") == 0


def test_a_varchar_key_is_not_refused_for_its_type(cluster, db):
    """On 9040ad9 a varchar key was refused as a type without PostgreSQL's own equality (varchar
    compares with text's), with a wrong reason (the tenth review)."""
    with cluster.connect(db) as conn:
        conn.execute("CREATE TABLE codes (code varchar(20) PRIMARY KEY, created_at timestamptz NOT NULL)")
        conn.execute("CREATE SEQUENCE codes_shard_id_seq")
        assert one(conn, "SELECT count(*) FROM shard_id_convert_plan('codes', 'created_at', 'codes_shard_id_seq', 5) "
                         "WHERE action = 'refuse'") == 0


def test_a_foreign_key_added_after_the_prepare_stops_the_steps_naming_it(cluster, db):
    """On 9040ad9 a foreign key to the key added after the prepare (a deploy during a long
    conversion) made the index step ask for an index on a column that did not exist, and the
    conversion could not go on (the tenth review). Each step refuses it now, naming it, before it
    changes anything; dropped, the conversion finishes, and added again it references new ids."""
    with cluster.connect(db) as conn:
        conn.autocommit = True
        base_schema(conn)
        prepare(conn)
        conn.execute("CREATE TABLE late (id bigserial PRIMARY KEY, purchase_id bigint REFERENCES purchases)")
        conn.execute("INSERT INTO late (purchase_id) SELECT id FROM purchases LIMIT 10")
        for step in ("SELECT * FROM shard_id_convert_indexes('purchases')", "CALL shard_id_convert('purchases', 700)"):
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
                conn.execute(step)
            assert "was added after its prepare" in str(refused.value)
            assert "column public.late.purchase_id" in refused.value.diag.message_detail
        conn.execute("ALTER TABLE late DROP CONSTRAINT late_purchase_id_fkey")
        convert_after_the_prepare(conn)
        assert conn.execute("SELECT * FROM shard_id_convert_indexes('purchases')").fetchall() == []


def test_two_conversions_that_share_a_table_are_refused(cluster, db):
    """On 9040ad9 two conversions in progress that moved columns of one table gave the twins of
    its indexes the same names, and the second one's finish failed (the tenth review). The second
    prepare is refused now, naming the first."""
    with cluster.connect(db) as conn:
        base_schema(conn)
        prepare(conn)
        conn.execute("CREATE SEQUENCE lines_shard_id_seq")
        plan = conn.execute("SELECT detail FROM shard_id_convert_plan('purchase_lines', 'purchase_id', "
                            "'lines_shard_id_seq', 6) WHERE kind = 'another conversion'").fetchall()
        assert plan and "the conversion of public.purchases, in progress" in plan[0][0], plan


def test_the_swap_waits_for_a_snapshot_older_than_the_batches(cluster, db):
    """On f5b2bbd a REPEATABLE READ transaction that took its snapshot before the batches, and no
    lock on the table, read every key as NULL after the swap, and copied NULL into a referencing
    row without an error (the eleventh review). The swap now waits for the transactions older than
    it (10 s at most, then 55P03 with nothing done); once they end, it goes on."""
    with cluster.connect(db) as conn, cluster.connect(db) as old:
        conn.autocommit = True
        base_schema(conn)
        prepare_with_twin_indexes(conn)
        old.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        old.execute("SELECT 1 FROM pg_class LIMIT 1")  # (its snapshot: before the batches)
        conn.execute("CALL shard_id_convert('purchases', 700)")
        with pytest.raises(psycopg.errors.LockNotAvailable) as waited:
            conn.execute("CALL shard_id_convert_finish('purchases')")
        assert "waited 10 s for snapshots older than it" in str(waited.value)
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "filled"
        # what it would have read: nothing, yet; it ends
        assert one(old, "SELECT count(*) FROM purchases WHERE id IS NULL") == 0
        old.execute("COMMIT")
        conn.execute("CALL shard_id_convert_finish('purchases')")
        assert one(conn, "SELECT count(*) FROM purchases WHERE id IS NULL") == 0
        assert one(conn, "SELECT count(*) FROM purchases WHERE shard_id_extract_shard(id) = 5") == \
            one(conn, "SELECT count(*) FROM purchases")


def test_a_partition_attached_during_the_conversion_gets_the_new_default(cluster, db):
    """On f5b2bbd a partition attached after the prepare (with the new column its owner had to add)
    had no DEFAULT for the key after the swap: its inserts failed with 23502 (the eleventh
    review). The swap sets the DEFAULT again, on every partition."""
    with cluster.connect(db) as conn:
        conn.autocommit = True
        conn.execute("CREATE TABLE qt (id bigserial, region int NOT NULL, created_at timestamptz NOT NULL, "
                     "PRIMARY KEY (id, region)) PARTITION BY LIST (region)")
        conn.execute("CREATE TABLE qt1 PARTITION OF qt FOR VALUES IN (1)")
        conn.execute("CREATE INDEX ON qt (id)")
        conn.execute("INSERT INTO qt (region, created_at) SELECT 1, now() - g * interval '1 min' FROM generate_series(1, 50) g")
        conn.execute("CREATE TABLE qt_later (LIKE qt INCLUDING DEFAULTS)")
        conn.execute("CREATE SEQUENCE qt_shard_id_seq")
        conn.execute("CALL shard_id_convert_prepare('qt', 'created_at', 'qt_shard_id_seq', 5)")
        conn.execute("ALTER TABLE qt_later ADD COLUMN shard_id bigint")
        conn.execute("ALTER TABLE qt ATTACH PARTITION qt_later FOR VALUES IN (4)")
        for (statement,) in conn.execute("SELECT * FROM shard_id_convert_indexes('qt')").fetchall():
            conn.execute(statement)
        conn.execute("CALL shard_id_convert('qt', 100)")
        conn.execute("CALL shard_id_convert_finish('qt')")
        conn.execute("INSERT INTO qt_later (region, created_at) VALUES (4, now())")
        assert one(conn, "SELECT shard_id_extract_shard(id) FROM qt_later") == 5


def test_the_swap_waits_for_a_snapshot_imported_from_an_older_transaction(cluster, db):
    """On 9c1015d the swap waited for the transactions older than it, listed once: a transaction
    that began during the wait and imported an older one's exported snapshot (SET TRANSACTION
    SNAPSHOT) got past it and read the key as NULL after the swap (the twelfth review). The wait
    now looks at every session's snapshot (its xmin) on every pass."""
    import threading
    with cluster.connect(db) as conn, cluster.connect(db) as exporter, cluster.connect(db) as importer:
        conn.autocommit = True
        base_schema(conn)
        prepare_with_twin_indexes(conn)
        exporter.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        snapshot = one(exporter, "SELECT pg_export_snapshot()")
        conn.execute("CALL shard_id_convert('purchases', 700)")
        outcome = {}

        def finish():
            with cluster.connect(db) as f:
                f.autocommit = True
                try:
                    f.execute("CALL shard_id_convert_finish('purchases')")
                    outcome["finish"] = "done"
                except psycopg.Error as e:
                    outcome["finish"] = e.sqlstate
        waiting = threading.Thread(target=finish)
        waiting.start()
        import time
        time.sleep(1)  # (the finish is waiting for the exporter)
        importer.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        importer.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
        exporter.execute("COMMIT")
        waiting.join()
        assert outcome["finish"] == "55P03", outcome  # (the importer's snapshot is as old)
        assert one(importer, "SELECT count(*) FROM purchases WHERE id IS NULL") == 0
        importer.execute("COMMIT")
        conn.execute("CALL shard_id_convert_finish('purchases')")
        assert one(conn, "SELECT count(*) FROM purchases WHERE id IS NULL") == 0


def test_a_citext_key_is_refused(cluster, db):
    """On 9c1015d a citext key passed the plan (its values compare as text under pg_catalog), but
    its foreign keys compare without case: references never resolved and every finish failed
    (the twelfth review). The key's primary key compares with citext's own operator: refused."""
    with cluster.connect(db) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS citext")
        conn.execute("CREATE TABLE purchases (id citext PRIMARY KEY, created_at timestamptz NOT NULL)")
        conn.execute("CREATE TABLE purchase_lines (id bigserial PRIMARY KEY, purchase_id citext REFERENCES purchases)")
        conn.execute("INSERT INTO purchases VALUES ('abc', now() - interval '1 day')")
        conn.execute("INSERT INTO purchase_lines (purchase_id) VALUES ('ABC')")
        conn.execute("CREATE SEQUENCE purchases_shard_id_seq")
        refused_before_anything_changed(conn, "key type", "purchases")


def test_an_integer_key_s_indexes_that_do_not_read_it_differently_are_not_refused(cluster, db):
    """On 9c1015d every index with an expression or a predicate was refused when the key was not
    bigint, even one whose expression and predicate do not read the key (the twelfth review). On
    a797413 the twin of an expression index on an integer key, (id % 16), was not taken for the
    conversion's own (its expression is a bigint on the new column, another operator class), and
    every step after the index step was refused (the twenty-second review): they convert."""
    with cluster.connect(db) as conn:
        conn.execute("CREATE TABLE ip (id serial PRIMARY KEY, created_at timestamptz NOT NULL, name text, archived boolean)")
        conn.execute("CREATE INDEX ip_live ON ip (id) WHERE NOT archived")
        conn.execute("CREATE INDEX ip_name ON ip (lower(name), id)")
        conn.execute("CREATE INDEX ip_bucket ON ip ((id % 16))")
        conn.execute("INSERT INTO ip (created_at, name, archived) SELECT now() - g * interval '1 min', 'n' || g, g % 3 = 0 "
                     "FROM generate_series(1, 300) g")
        conn.execute("CREATE SEQUENCE ip_shard_id_seq")
        assert conn.execute("SELECT object, detail FROM shard_id_convert_plan('ip', 'created_at', 'ip_shard_id_seq', 5) "
                            "WHERE action = 'refuse'").fetchall() == []
        conn.execute("CALL shard_id_convert_prepare('ip', 'created_at', 'ip_shard_id_seq', 5)")
        convert_after_the_prepare(conn, "ip", 100)
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"
        assert one(conn, "SELECT count(*) FROM ip WHERE shard_id_extract_shard(id) = 5") == 300
        assert "((id % (16)::bigint))" in one(conn, "SELECT pg_get_indexdef('ip_bucket'::regclass)")


@pytest.mark.parametrize("where", ["expression", "predicate"])
def test_an_index_of_the_whole_row_is_refused(cluster, db, where):
    """On 359ad0a an index whose expression or predicate takes the whole row
    (CREATE UNIQUE INDEX ON purchases (purchase_code(purchases)), PostgREST-style computed
    columns) was neither refused nor built again: pg_depend ties it to the table, not the key, so
    after the swap it held what purchase_code() computed from the old keys and index scans missed
    rows (the thirteenth review). The plan and the prepare refuse it before anything changes."""
    with cluster.connect(db) as conn:
        base_schema(conn)
        conn.execute("CREATE FUNCTION purchase_code(p purchases) RETURNS text LANGUAGE sql IMMUTABLE "
                     "AS $$ SELECT p.id::text || '-' || p.item $$")
        conn.execute({"expression": "CREATE UNIQUE INDEX purchases_code ON purchases (purchase_code(purchases))",
                      "predicate": "CREATE INDEX purchases_code ON purchases (item) "
                                   "WHERE purchase_code(purchases) LIKE '1%'"}[where])
        refused_before_anything_changed(conn, "index of the whole row", "purchases_code")


def test_an_index_of_the_whole_row_made_after_the_prepare_stops_the_swap(cluster, db):
    """On 359ad0a such an index made after the prepare (a deploy during a long conversion) went
    through the swap and kept the old keys' values: this lookup found nothing. The swap reads the
    inventory again under its locks and refuses it, nothing done; dropped, the finish swaps."""
    with cluster.connect(db) as conn:
        conn.autocommit = True
        base_schema(conn)
        prepare_with_twin_indexes(conn)
        conn.execute("CALL shard_id_convert('purchases', 700)")
        conn.execute("CREATE FUNCTION purchase_code(p purchases) RETURNS text LANGUAGE sql IMMUTABLE "
                     "AS $$ SELECT p.id::text || '-' || p.item $$")
        conn.execute("CREATE INDEX purchases_code ON purchases (purchase_code(purchases))")
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            conn.execute("CALL shard_id_convert_finish('purchases')")
        assert "purchases_code" in refused.value.diag.message_detail, refused.value.diag.message_detail
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "filled"
        assert "id_before_shard_id" not in columns(conn, "purchases")
        conn.execute("DROP INDEX purchases_code")
        conn.execute("CALL shard_id_convert_finish('purchases')")
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"


def test_the_swap_goes_on_once_an_older_snapshot_ends_during_its_wait(cluster, db):
    """On 359ad0a the wait for older snapshots read pg_stat_activity, which PostgreSQL keeps
    unchanged for the rest of a transaction: every pass saw the first pass's sessions, so a
    snapshot that ended 1.5 s into the wait failed the finish after 10 s all the same, and on a
    busy database the finish might never complete (the thirteenth review)."""
    with cluster.connect(db) as conn, cluster.connect(db) as old:
        conn.autocommit = True
        base_schema(conn)
        prepare_with_twin_indexes(conn)
        old.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        old.execute("SELECT 1 FROM pg_class LIMIT 1")  # (its snapshot: before the batches)
        conn.execute("CALL shard_id_convert('purchases', 700)")
        ends = threading.Timer(1.5, old.commit)
        ends.start()
        try:
            conn.execute("CALL shard_id_convert_finish('purchases')")
        finally:
            ends.join()
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"
        assert one(conn, "SELECT count(*) FROM purchases WHERE shard_id_extract_shard(id) = 5") == \
            one(conn, "SELECT count(*) FROM purchases")


def test_a_prepared_transaction_that_holds_the_wait_is_named(cluster, db):
    """On 359ad0a a prepared transaction (or an idle writer) held every newer snapshot's xmin
    back, and the wait's 55P03 named those sessions, not the cause, and the finish called it a
    lock (the thirteenth review). It names the prepared transaction and says how to end it."""
    with cluster.connect(db) as conn, cluster.connect(db) as writer, cluster.connect(db) as reader:
        conn.autocommit = True
        base_schema(conn)
        prepare_with_twin_indexes(conn)
        # (a write elsewhere: one into purchase_lines would hold its parent's row, and the batches
        # would wait for it, as any UPDATE of a key does)
        conn.execute("CREATE TABLE coordinator_log (note text)")
        writer.execute("BEGIN")
        writer.execute("INSERT INTO coordinator_log VALUES ('phase one')")
        writer.execute("PREPARE TRANSACTION 'held_by_a_coordinator'")
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT 1")  # (a snapshot newer than the batches, its xmin held back)
        conn.execute("CALL shard_id_convert('purchases', 700)")
        try:
            with pytest.raises(psycopg.errors.LockNotAvailable) as waited:
                conn.execute("CALL shard_id_convert_finish('purchases')")
            assert "waited 10 s for snapshots older than it" in waited.value.diag.message_primary
            assert "held_by_a_coordinator" in (waited.value.diag.message_detail or ""), waited.value.diag.message_detail
            assert "ROLLBACK PREPARED" in waited.value.diag.message_hint
        finally:
            reader.execute("COMMIT")
            conn.execute("ROLLBACK PREPARED 'held_by_a_coordinator'")
        conn.execute("CALL shard_id_convert_finish('purchases')")
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"


CHANGES_DURING_THE_WAIT = {
    "foreign key": ("ALTER TABLE late ADD FOREIGN KEY (purchase_id) REFERENCES purchases",
                    "55000", "was added after its prepare", "late.purchase_id",
                    "ALTER TABLE late DROP CONSTRAINT late_purchase_id_fkey"),
    "index of the whole row": ("CREATE INDEX purchases_code ON purchases (purchase_code(purchases))",
                               "0A000", "would not follow the new key", "purchases_code",
                               "DROP INDEX purchases_code"),
}


@pytest.mark.parametrize("isolation", ["read committed", "repeatable read"])
@pytest.mark.parametrize("change", sorted(CHANGES_DURING_THE_WAIT))
def test_what_is_made_while_the_finish_waits_stops_the_swap(cluster, db, change, isolation):
    """On 359ad0a the finish checked for foreign keys added after the prepare before it waited
    for older snapshots and took its locks: one committed during the wait got past, and the swap
    failed on it (the fourteenth review). The swap checks again under its locks, and (the
    fifteenth review) in a transaction of its own at READ COMMITTED: under a REPEATABLE READ
    default_transaction_isolation its checks read the snapshot taken before the wait, and an index
    of the whole row made meanwhile went through the swap with the old keys' values (on 104bb2f).
    Refused, naming it, nothing done; dropped, the finish swaps."""
    statement, sqlstate, message, named, way_out = CHANGES_DURING_THE_WAIT[change]
    with cluster.connect(db) as conn, cluster.connect(db) as old, cluster.connect(db) as deploy:
        base_schema(conn)
        prepare_with_twin_indexes(conn)
        conn.execute("CREATE TABLE late (id bigserial PRIMARY KEY, purchase_id bigint)")
        conn.execute("CREATE FUNCTION purchase_code(p purchases) RETURNS text LANGUAGE sql IMMUTABLE "
                     "AS $$ SELECT p.id::text || '-' || p.item $$")
        conn.execute("CALL shard_id_convert('purchases', 700)")
        old.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        old.execute("SELECT 1")
        outcome = {}

        def finish():
            # (libpq's options split on spaces unless escaped)
            with cluster.connect(db, options="-c default_transaction_isolation=" + isolation.replace(" ", "\\ ")) as f:
                try:
                    f.execute("CALL shard_id_convert_finish('purchases')")
                    outcome["finish"] = ("done", "", "")
                except psycopg.Error as e:
                    outcome["finish"] = (e.sqlstate, str(e), e.diag.message_detail or "")
        waiting = threading.Thread(target=finish)
        waiting.start()
        time.sleep(1)  # (the finish is waiting for the old snapshot)
        deploy.execute(statement)
        old.execute("COMMIT")
        waiting.join()
        assert outcome["finish"][0] == sqlstate, outcome
        assert message in outcome["finish"][1], outcome
        assert named in outcome["finish"][2], outcome
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "filled"
        conn.execute(way_out)
        conn.execute("CALL shard_id_convert_finish('purchases')")
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"


def test_a_check_of_the_whole_row_added_after_the_prepare_stops_the_swap(cluster, db):
    """On 104bb2f a CHECK of the whole row was refused only before the prepare: one added after
    it passed the swap, and then an update of a row failed it, the function reading the new id
    (the fifteenth review). The swap refuses it, nothing done."""
    with cluster.connect(db) as conn:
        base_schema(conn)
        prepare_with_twin_indexes(conn)
        conn.execute("CALL shard_id_convert('purchases', 700)")
        conn.execute("CREATE FUNCTION small(p purchases) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$ SELECT p.id < 1000000 $$")
        conn.execute("ALTER TABLE purchases ADD CONSTRAINT small_ids CHECK (small(purchases))")
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            conn.execute("CALL shard_id_convert_finish('purchases')")
        assert "small_ids" in refused.value.diag.message_detail, refused.value.diag.message_detail
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "filled"
        conn.execute("ALTER TABLE purchases DROP CONSTRAINT small_ids")
        conn.execute("CALL shard_id_convert_finish('purchases')")
        conn.execute("UPDATE purchases SET item = 'updated' WHERE item = 'item 1'")
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"


def test_a_batch_that_waits_for_a_writer_under_repeatable_read_goes_on(cluster, db):
    """On 104bb2f the batches ran at the caller's isolation level: under a REPEATABLE READ
    default_transaction_isolation, a batch whose UPDATE waited for a writer's row failed with
    40001 once the writer committed (the fifteenth review). Each batch is READ COMMITTED now."""
    with cluster.connect(db) as conn, cluster.connect(db) as writer:
        base_schema(conn)
        prepare_with_twin_indexes(conn)
        writer.execute("BEGIN")
        writer.execute("UPDATE purchases SET item = 'held' WHERE item = 'item 1'")
        outcome = {}

        def batches():
            with cluster.connect(db, options="-c default_transaction_isolation=repeatable\\ read") as b:
                try:
                    b.execute("CALL shard_id_convert('purchases', 5000)")
                    outcome["convert"] = "done"
                except psycopg.Error as e:
                    outcome["convert"] = f"{e.sqlstate}: {e}"
        converting = threading.Thread(target=batches)
        converting.start()
        # until the batch waits for the writer's row, then the writer commits
        assert wait_for(lambda: one(conn, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                          "AND query LIKE 'CALL shard_id_convert(%'") == 1, timeout=5)
        writer.execute("COMMIT")
        converting.join()
        assert outcome["convert"] == "done", outcome
        assert one(conn, "SELECT count(*) FROM purchases WHERE shard_id IS NULL") == 0


def test_a_standby_streaming_through_a_slot_holds_the_swap_for_its_older_snapshots(cluster, db):
    """On 104bb2f the wait for older snapshots read the walsenders' backend_xmin, which a standby
    streaming through a physical replication slot leaves empty (its hot_standby_feedback goes into
    the slot's xmin): a REPEATABLE READ query on the standby that began before the batches got past
    the wait, and read the keys as NULL after the swap (the fifteenth review). The slot's xmin is
    waited for now, and the 55P03 names the slot."""
    slot = (db + "_slot")[-60:]
    with cluster.connect(db) as conn:
        base_schema(conn)
        prepare_with_twin_indexes(conn)
        conn.execute("SELECT pg_create_physical_replication_slot(%s)", (slot,))
    standby = Cluster("convert_finishes_standby", standby_of=cluster,
                      conf=[f"primary_slot_name = '{slot}'", "hot_standby_feedback = on", "wal_receiver_status_interval = 1"])
    try:
        with cluster.connect(db) as conn, standby.connect(db) as query:
            query.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            query.execute("SELECT count(*) FROM purchases")  # (its snapshot: before the batches)
            assert wait_for(lambda: one(conn, "SELECT xmin IS NOT NULL FROM pg_replication_slots WHERE slot_name = %s",
                                        (slot,)), timeout=20)
            assert one(conn, "SELECT backend_xmin IS NULL FROM pg_stat_activity WHERE backend_type = 'walsender'")
            conn.execute("CALL shard_id_convert('purchases', 700)")
            with pytest.raises(psycopg.errors.LockNotAvailable) as waited:
                conn.execute("CALL shard_id_convert_finish('purchases')")
            assert f"the standby of replication slot {slot}" in str(waited.value), str(waited.value)
            # (a standby's xmin moves at its feedback: it is given 20 s, not 10)
            assert "waited 20 s for snapshots older than it" in str(waited.value), str(waited.value)
            assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "filled"
            assert one(query, "SELECT count(*) FROM purchases WHERE id IS NULL") == 0
            query.execute("COMMIT")
    finally:
        standby.destroy()
        with cluster.connect(db) as conn:
            wait_for(lambda: not one(conn, "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)))
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def test_abandoning_after_a_foreign_key_was_added_goes_on(cluster, db):
    """On 359ad0a abandoning a conversion after a foreign key to its key had been added was
    refused, with a hint that said to abandon (the fourteenth review). Abandoning drops only what
    the prepare made: the foreign key stays, on the old key, as the user made it."""
    with cluster.connect(db) as conn:
        conn.autocommit = True
        base_schema(conn)
        prepare(conn)
        # (with a CHECK and an expression index on its column: their moved twins had a NULL new
        # column, and abandoning failed in expression_moved: the seventeenth review)
        conn.execute("CREATE TABLE late (id bigserial PRIMARY KEY, purchase_id bigint REFERENCES purchases CHECK (purchase_id > 0))")
        conn.execute("CREATE INDEX late_by_purchase ON late ((purchase_id % 100))")
        conn.execute("CALL shard_id_convert_abandon('purchases')")
        assert "shard_id" not in columns(conn, "purchases") and "shard_id" not in columns(conn, "purchase_lines")
        assert one(conn, "SELECT count(*) FROM _pg_shard_id.conversions") == 0
        assert one(conn, "SELECT count(*) FROM pg_constraint WHERE conname = 'late_purchase_id_fkey'") == 1


def test_a_column_of_an_array_of_the_row_type_is_refused_by_the_plan(cluster, db):
    """On 104bb2f the plan accepted a table whose row type's array is a column's type elsewhere,
    and the prepare failed on its new column (PostgreSQL refuses to add one then: the fifteenth
    review). The plan and the prepare refuse it alike, naming the column."""
    with cluster.connect(db) as conn:
        base_schema(conn)
        conn.execute("CREATE TABLE snapshots (taken timestamptz, rows purchases[])")
        refused_before_anything_changed(conn, "row type used", "snapshots")


@pytest.mark.parametrize("check", ["id < 2147483648", "item <> 'legacy' OR id < 100000", "shard_id <> id"])
def test_a_check_on_the_key_added_after_the_prepare_is_refused_before_the_finish_adds_its_twin(cluster, db, check):
    """On fe0aff7 a CHECK on the key added after the prepare was carried as a twin, which the
    finish's first step added NOT VALID: PostgreSQL enforced it on new rows at once, and every
    insert failed (CHECK (id < 2^31): the new ids are far above), the validation too (the
    sixteenth review). The finish refuses it before it adds any twin; writers go on. On fbe6c4a
    one that names the new column too (CHECK (shard_id <> id)) was taken for one of the
    conversion's own CHECKs, which were told by their new column, and got a twin, CHECK (shard_id
    <> shard_id), that failed every writer (the eighteenth review): they are told by their names
    and columns, both."""
    with cluster.connect(db) as conn:
        base_schema(conn)
        prepare_with_twin_indexes(conn)
        conn.execute("CALL shard_id_convert('purchases', 700)")
        conn.execute(f"ALTER TABLE purchases ADD CONSTRAINT late_check CHECK ({check})")
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            conn.execute("CALL shard_id_convert_finish('purchases')")
        assert "late_check" in refused.value.diag.message_detail, refused.value.diag.message_detail
        conn.execute("INSERT INTO purchases (created_at, item) VALUES (now(), 'after the refusal')")
        assert one(conn, "SELECT count(*) FROM pg_constraint WHERE conrelid = 'purchases'::regclass "
                         "AND conname LIKE '%shard_id%'") == 0
        conn.execute("ALTER TABLE purchases DROP CONSTRAINT late_check")
        conn.execute("CALL shard_id_convert_finish('purchases')")
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"


def test_abandoning_refuses_an_index_of_the_whole_row_made_since_the_prepare(cluster, db):
    """On fe0aff7 abandoning dropped the new column under an index of the whole row made after
    the prepare: DROP COLUMN keeps the index, built over rows that had the column, and an index
    scan then missed a row a sequential scan found (the sixteenth review). Abandoning refuses it,
    naming it, nothing changed; dropped, abandoning goes on."""
    with cluster.connect(db) as conn:
        base_schema(conn)
        prepare(conn)
        conn.execute("CREATE FUNCTION purchase_text(p purchases) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT p::text $$")
        conn.execute("CREATE INDEX purchases_text ON purchases (purchase_text(purchases))")
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            conn.execute("CALL shard_id_convert_abandon('purchases')")
        assert "purchases_text" in refused.value.diag.message_detail, refused.value.diag.message_detail
        assert "shard_id" in columns(conn, "purchases")
        conn.execute("DROP INDEX purchases_text")
        conn.execute("CALL shard_id_convert_abandon('purchases')")
        assert "shard_id" not in columns(conn, "purchases")


def abandon_while_it_waits(cluster, db, conn, held, meanwhile, session_sql=None):
    """Abandoning purchases' conversion while another session holds a lock on `held`, so that it
    waits for its locks; `meanwhile(conn)` runs during the wait, then that session ends. Returns
    ("done", "") or (the SQLSTATE, the message and its detail)."""
    with cluster.connect(db) as reader:
        reader.execute("BEGIN")
        reader.execute(f"SELECT count(*) FROM {held}")
        outcome = {}

        def abandon():
            with cluster.connect(db) as a:
                if session_sql:
                    a.execute(session_sql)
                try:
                    a.execute("CALL shard_id_convert_abandon('purchases')")
                    outcome["abandon"] = ("done", "")
                except psycopg.Error as e:
                    outcome["abandon"] = (e.sqlstate, str(e) + " " + (e.diag.message_detail or ""))
        waiting = threading.Thread(target=abandon)
        waiting.start()
        time.sleep(1)  # (abandoning waits for its locks)
        meanwhile(conn)
        reader.execute("COMMIT")
        waiting.join()
    return outcome["abandon"]


def test_abandoning_refuses_a_conversion_that_changed_while_it_waited_for_its_locks(cluster, db):
    """On fe0aff7 abandoning read the conversion's phase before it waited for its locks: a finish
    that swapped meanwhile was then "abandoned", its record deleted and its foreign keys left NOT
    VALID, the table swapped all the same (the sixteenth review). It reads the phase again under
    its locks. (The swap's commit during the wait is stood in for by writing the phase.)"""
    with cluster.connect(db) as conn:
        base_schema(conn)
        prepare(conn)
        outcome = abandon_while_it_waits(cluster, db, conn, "purchases",
                                         lambda c: c.execute("UPDATE _pg_shard_id.conversions SET phase = 'finished'"))
        assert outcome[0] == "55000", outcome
        assert "changed while abandoning it waited for its locks (now finished)" in outcome[1], outcome
        assert "shard_id" in columns(conn, "purchases")
        assert one(conn, "SELECT count(*) FROM _pg_shard_id.conversions") == 1


def test_a_referencing_column_with_a_long_name_converts(cluster, db):
    """On 6d5d65b the finish refused the conversion's own CHECKs on a referencing column whose name
    is 38 bytes or more: derived_name shortens such names, so they lost the prefix by which the
    refusal of NOT VALID CHECKs knew them, and the finish stopped after its first step (the
    seventeenth review). The conversion's own constraints are told by their new column now."""
    long_name = "purchase_id_of_the_order_this_line_belongs_to"  # (45 bytes)
    with cluster.connect(db) as conn:
        base_schema(conn)
        conn.execute(f"ALTER TABLE purchase_lines RENAME COLUMN purchase_id TO {long_name}")
        conn.execute("CREATE TABLE notes (id bigserial PRIMARY KEY, "
                     f"{long_name} bigint REFERENCES purchases)")  # (nullable: the other CHECK)
        conn.execute(f"INSERT INTO notes ({long_name}) SELECT id FROM purchases LIMIT 50")
        prepare(conn)
        convert_after_the_prepare(conn)
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"
        assert one(conn, f"SELECT count(*) FROM purchase_lines l JOIN purchases p ON p.id = l.{long_name} "
                         "WHERE shard_id_extract_shard(p.id) = 5") == one(conn, "SELECT count(*) FROM purchase_lines")


def test_a_virtual_generated_column_on_a_referencing_table_converts(cluster, db):
    """On 6d5d65b (PostgreSQL 18) a virtual generated column computed from a referencing column
    was refused by the finish once its first step had added the conversion's own CHECK to that
    table, a refusal meant for the user's CHECKs (the swap drops the conversion's before it sets
    the expression again: the seventeenth review)."""
    with cluster.connect(db) as conn:
        if one(conn, "SELECT current_setting('server_version_num')::int") < 180000:
            pytest.skip("virtual generated columns are PostgreSQL 18's")
        base_schema(conn)
        conn.execute("ALTER TABLE purchase_lines ADD COLUMN purchase_ref text GENERATED ALWAYS AS ('p' || purchase_id) VIRTUAL")
        prepare(conn)
        convert_after_the_prepare(conn)
        assert one(conn, "SELECT count(*) FROM purchase_lines l JOIN purchases p ON l.purchase_ref = 'p' || p.id") == \
            one(conn, "SELECT count(*) FROM purchase_lines")


@pytest.mark.parametrize("isolation", ["read committed", "repeatable read"])
def test_abandoning_sees_an_index_of_the_whole_row_made_while_it_waited(cluster, db, isolation):
    """On fbe6c4a abandoning under REPEATABLE READ read the catalog through the snapshot it took
    before its lock wait: an index of the whole row made while it waited for a referencing
    table's lock was not seen, and the new column was dropped under it (index scans then missed
    rows: the eighteenth review). Abandoning runs only at READ COMMITTED now (25000 otherwise,
    nothing changed); there, it sees the index and refuses, naming it."""
    with cluster.connect(db) as conn:
        base_schema(conn)
        prepare(conn)
        conn.execute("CREATE FUNCTION purchase_text(p purchases) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT p::text $$")
        # (abandoning locks the referencing table first, and waits there)
        outcome = abandon_while_it_waits(
            cluster, db, conn, "purchase_lines",
            lambda c: c.execute("CREATE INDEX purchases_text ON purchases (purchase_text(purchases))"),
            session_sql=f"SET default_transaction_isolation = '{isolation}'")
        expected = "0A000" if isolation == "read committed" else "25000"
        assert outcome[0] == expected, outcome
        assert "shard_id" in columns(conn, "purchases"), "abandoned under an index of the whole row"
        if isolation == "read committed":
            assert "purchases_text" in outcome[1], outcome


def test_abandoning_goes_on_while_the_batches_run(cluster, db):
    """On fbe6c4a abandoning compared the whole progress row before and after its lock wait, and
    each batch changes it (rows done, its phase, its time): abandoning while the batches ran was
    refused every time (the eighteenth review). It compares which conversion it is. (A batch's
    commit during the wait is stood in for by writing what a batch writes.)"""
    with cluster.connect(db) as conn:
        base_schema(conn)
        prepare(conn)
        outcome = abandon_while_it_waits(
            cluster, db, conn, "purchase_lines",
            lambda c: c.execute("UPDATE _pg_shard_id.conversions SET phase = 'filling', next_block = 3, rows_done = 400, "
                                "updated_at = clock_timestamp(), rows_per_second = 1000"))
        assert outcome == ("done", ""), outcome
        assert "shard_id" not in columns(conn, "purchases")
        assert one(conn, "SELECT count(*) FROM _pg_shard_id.conversions") == 0


def test_a_virtual_generated_column_of_a_published_table_is_refused(cluster, db):
    """On fbe6c4a (PostgreSQL 18) the plan carried a virtual generated column computed from the key
    of a table a publication names, and the swap's SET EXPRESSION, which PostgreSQL 18 refuses in
    such a table, stopped every finish (the eighteenth review). The plan and the prepare refuse
    it, naming the publication."""
    with cluster.connect(db) as conn:
        if one(conn, "SELECT current_setting('server_version_num')::int") < 180000:
            pytest.skip("virtual generated columns are PostgreSQL 18's")
        base_schema(conn)
        conn.execute("ALTER TABLE purchase_lines ADD COLUMN purchase_ref text GENERATED ALWAYS AS ('p' || purchase_id) VIRTUAL")
        conn.execute(f"CREATE PUBLICATION {db}_lines FOR TABLE purchase_lines")
        try:
            refused_before_anything_changed(conn, "generated column", f"{db}_lines")
        finally:
            conn.execute(f"DROP PUBLICATION {db}_lines")


def test_two_long_referencing_columns_that_begin_alike_convert(cluster, db):
    """On fbe6c4a two referencing columns of one table whose names share their first 54 bytes got
    one trigger name when the new column's name is short (derived_name shortened the base,
    'shard_id_convert_', and PostgreSQL cut the long suffix, the new referencing column's name),
    and the prepare failed (the eighteenth review). Each gets its own name now, and both
    convert."""
    stem = "purchase_that_this_line_was_split_from_during_the_reorg_"  # (56 bytes)
    assert len(stem) == 56
    first, second = stem + "aa", stem + "bb"
    with cluster.connect(db) as conn:
        base_schema(conn)
        conn.execute(f"ALTER TABLE purchase_lines ADD COLUMN {first} bigint REFERENCES purchases, "
                     f"ADD COLUMN {second} bigint REFERENCES purchases")
        conn.execute(f"UPDATE purchase_lines SET {first} = purchase_id, {second} = purchase_id WHERE id % 3 = 0")
        prepare(conn, new_column="k")
        convert_after_the_prepare(conn)
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"
        for column in (first, second):
            assert one(conn, f"SELECT count(*) FROM purchase_lines l JOIN purchases p ON p.id = l.{column} "
                             "WHERE l.purchase_id = p.id") == one(conn, "SELECT count(*) FROM purchase_lines WHERE id % 3 = 0")


def test_a_name_the_conversion_would_give_that_is_taken_is_refused(cluster, db):
    """On 018ce48 a CHECK named like the twin the conversion gives another (pos_shard_id_twin)
    was taken for that twin: the twin was never made, and every finish failed at the swap (the
    nineteenth review). The plan and the prepare refuse a name that is taken, before anything
    changes; renamed, it converts."""
    with cluster.connect(db) as conn:
        base_schema(conn)
        conn.execute("ALTER TABLE purchases ADD CONSTRAINT pos CHECK (id > 0), "
                     "ADD CONSTRAINT pos_shard_id_twin CHECK (amount > -5)")
        refused_before_anything_changed(conn, "name taken", "pos_shard_id_twin")
        conn.execute("ALTER TABLE purchases RENAME CONSTRAINT pos_shard_id_twin TO amount_floor")
        prepare(conn)
        convert_after_the_prepare(conn)
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"
        assert one(conn, "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'pos'") == "CHECK ((id > 0))"


def test_two_lookup_indexes_named_alike_are_refused(cluster, db):
    """On 018ce48 two referencing tables whose lookup indexes derive one name ("user" with
    group_owner_id, user_group with owner_id: user_group_owner_id_shard_id_idx both) were
    accepted, and the index step failed on the second every time: the batches refused forever
    (the nineteenth review). The plan refuses the name given twice."""
    with cluster.connect(db) as conn:
        base_schema(conn)
        conn.execute('CREATE TABLE "user" (id bigserial PRIMARY KEY, group_owner_id bigint REFERENCES purchases)')
        conn.execute("CREATE TABLE user_group (id bigserial PRIMARY KEY, owner_id bigint REFERENCES purchases)")
        refused_before_anything_changed(conn, "name taken", "user_group_owner_id_shard_id_idx",
                                        ("purchases", "purchase_lines", '"user"', "user_group"))


def test_two_referencing_columns_whose_check_names_met_convert(cluster, db):
    """On 018ce48 a referencing column a's NOT NULL CHECK (shard_id_convert_nn_a_shard_id) had the
    name of column nn_a's CHECK: the second was never made, and every finish failed at the swap
    (the nineteenth review). The NOT NULL CHECK has a suffix of its own now."""
    with cluster.connect(db) as conn:
        base_schema(conn)
        conn.execute("CREATE TABLE pairs (id bigserial PRIMARY KEY, a bigint NOT NULL REFERENCES purchases, "
                     "nn_a bigint REFERENCES purchases)")
        conn.execute("INSERT INTO pairs (a, nn_a) SELECT id, id FROM purchases LIMIT 40")
        prepare(conn)
        convert_after_the_prepare(conn)
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"
        assert one(conn, "SELECT count(*) FROM pairs x JOIN purchases p ON p.id = x.a JOIN purchases q ON q.id = x.nn_a") == 40


def test_two_prepares_at_once_are_one_after_the_other(cluster, db):
    """On 018ce48 two prepares of tables that one table references, run at once, both planned
    before either wrote: both were accepted, the second twinned the first one's twin index, and
    its swap failed forever (the nineteenth review). Prepares run one at a time now: the second
    sees the first and refuses (two conversions share a table). Under REPEATABLE READ the prepare
    refuses (25000)."""
    with cluster.connect(db) as conn, cluster.connect(db) as holder:
        base_schema(conn)
        conn.execute("CREATE TABLE vendors (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now() - interval '1 day')")
        conn.execute("INSERT INTO vendors DEFAULT VALUES")
        conn.execute("CREATE SEQUENCE vendors_shard_id_seq")
        conn.execute("ALTER TABLE purchase_lines ADD COLUMN vendor_id bigint REFERENCES vendors")
        conn.execute("CREATE INDEX lines_both ON purchase_lines (purchase_id, vendor_id)")
        with pytest.raises(psycopg.errors.InvalidTransactionState):
            with cluster.connect(db, options="-c default_transaction_isolation=repeatable\\ read") as rr:
                rr.execute("CALL shard_id_convert_prepare('vendors', 'created_at', 'vendors_shard_id_seq', 5)")
        holder.execute("BEGIN")
        holder.execute("LOCK vendors IN ACCESS SHARE MODE")  # (the first prepare waits here, after its plan)
        outcome = {}

        def prepare_vendors():
            with cluster.connect(db) as v:
                try:
                    v.execute("CALL shard_id_convert_prepare('vendors', 'created_at', 'vendors_shard_id_seq', 5)")
                    outcome["vendors"] = "done"
                except psycopg.Error as e:
                    outcome["vendors"] = e.sqlstate
        first = threading.Thread(target=prepare_vendors)
        first.start()
        time.sleep(1)
        second = {}

        def prepare_purchases():
            with cluster.connect(db) as p:
                try:
                    prepare(p)
                    second["purchases"] = "done"
                except psycopg.Error as e:
                    second["purchases"] = e.sqlstate + " " + str(e) + " " + (e.diag.message_detail or "")
        then = threading.Thread(target=prepare_purchases)
        then.start()
        time.sleep(1)
        holder.execute("COMMIT")
        first.join()
        then.join()
        assert outcome["vendors"] == "done", outcome
        assert second["purchases"].startswith("0A000") and "vendors" in second["purchases"], second
        assert one(conn, "SELECT count(*) FROM _pg_shard_id.conversions") == 1


def test_a_foreign_key_dropped_after_the_prepare_leaves_nothing_behind(cluster, db):
    """On 018ce48 a foreign key to the key dropped after the prepare left its table with the new
    column, both ALWAYS triggers writing placeholders and the NOT NULL CHECK, after the finish and
    after abandoning: an insert of a NULL reference then failed (the nineteenth review). Every
    step refuses now, naming the statements that drop them; abandoning drops them itself."""
    with cluster.connect(db) as conn:
        base_schema(conn)
        prepare_with_twin_indexes(conn)
        conn.execute("CALL shard_id_convert('purchases', 700)")
        conn.execute("ALTER TABLE purchase_lines DROP CONSTRAINT purchase_lines_purchase_id_fkey")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
            conn.execute("CALL shard_id_convert_finish('purchases')")
        assert "was dropped after its prepare" in str(refused.value)
        assert "DROP TRIGGER" in refused.value.diag.message_detail, refused.value.diag.message_detail
        conn.execute("CALL shard_id_convert_abandon('purchases')")
        assert "purchase_id_shard_id" not in columns(conn, "purchase_lines")
        assert one(conn, "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'purchase_lines'::regclass AND NOT tgisinternal") == 0
        conn.execute("ALTER TABLE purchase_lines ALTER purchase_id DROP NOT NULL")
        conn.execute("INSERT INTO purchase_lines (purchase_id) VALUES (NULL)")


def test_a_check_not_enforced_stays_not_enforced(cluster, db):
    """On 018ce48 (PostgreSQL 18) a NOT ENFORCED CHECK on the key came back enforced after the
    swap: its twin was added NOT VALID and validated (the nineteenth review)."""
    with cluster.connect(db) as conn:
        if one(conn, "SELECT current_setting('server_version_num')::int") < 180000:
            pytest.skip("NOT ENFORCED CHECKs are PostgreSQL 18's")
        base_schema(conn)
        conn.execute("ALTER TABLE purchases ADD CONSTRAINT id_small CHECK (id < 100) NOT ENFORCED")
        prepare(conn)
        convert_after_the_prepare(conn)
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"
        assert one(conn, "SELECT conenforced FROM pg_constraint WHERE conname = 'id_small'") is False
        conn.execute("INSERT INTO purchases (created_at, item) VALUES (now(), 'after')")


def test_one_of_two_foreign_keys_of_a_table_dropped_after_the_prepare_leaves_nothing_behind(cluster, db):
    """On 006cc4f the leftovers of a foreign key dropped after the prepare were found by table:
    a table that kept another foreign key to the key was not searched, and abandoning left the
    dropped one's new column and CHECKs behind (an insert then failed them), the finish its
    triggers (the twentieth review). They are found by table and column now."""
    with cluster.connect(db) as conn:
        base_schema(conn)
        conn.execute("ALTER TABLE purchase_lines ADD COLUMN refund_of bigint CONSTRAINT lines_refund_fk REFERENCES purchases")
        conn.execute("UPDATE purchase_lines SET refund_of = purchase_id WHERE id % 4 = 0")
        prepare_with_twin_indexes(conn)
        conn.execute("CALL shard_id_convert('purchases', 700)")
        conn.execute("ALTER TABLE purchase_lines DROP CONSTRAINT lines_refund_fk")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
            conn.execute("CALL shard_id_convert_finish('purchases')")
        assert "refund_of_shard_id" in refused.value.diag.message_detail, refused.value.diag.message_detail
        conn.execute("CALL shard_id_convert_abandon('purchases')")
        assert [c for c in columns(conn, "purchase_lines") if "shard_id" in c] == []
        assert one(conn, "SELECT count(*) FROM pg_constraint WHERE conrelid = 'purchase_lines'::regclass AND conname LIKE 'shard_id%'") == 0
        conn.execute("INSERT INTO purchase_lines (purchase_id, refund_of) VALUES (1, 1)")


def test_a_new_referencing_column_named_like_a_kept_column_is_refused(cluster, db):
    """On 006cc4f a referencing column purchase_id_before got the new column
    purchase_id_before_shard_id, the name the swap keeps the old purchase_id under: the plan
    accepted it and the finish refused every time (the twentieth review). The plan refuses the
    name given twice."""
    with cluster.connect(db) as conn:
        base_schema(conn)
        conn.execute("ALTER TABLE purchase_lines ADD COLUMN purchase_id_before bigint REFERENCES purchases")
        refused_before_anything_changed(conn, "name taken", "purchase_id_before_shard_id")


def test_a_partition_of_a_referencing_table_detached_after_the_prepare_stops_the_finish(cluster, db):
    """On 006cc4f a partition of a partitioned referencing table detached after the prepare lost
    the conversion's triggers (PostgreSQL drops the clones) and became a referencing table of its
    own: its writers left the new column NULL and the swap failed on every retry (the twentieth
    review). Every step refuses now, naming it and the way out; abandoning goes on."""
    with cluster.connect(db) as conn:
        if one(conn, "SELECT current_setting('server_version_num')::int") < 180000:
            pytest.skip("PostgreSQL 15-17 refuse a partitioned referencing table (the swap's NOT VALID foreign key)")
        base_schema(conn)
        conn.execute("CREATE TABLE events (id int, region int, purchase_id bigint REFERENCES purchases, PRIMARY KEY (id, region)) "
                     "PARTITION BY LIST (region)")
        conn.execute("CREATE TABLE events_1 PARTITION OF events FOR VALUES IN (1)")
        conn.execute("CREATE TABLE events_2 PARTITION OF events FOR VALUES IN (2)")
        conn.execute("CREATE INDEX ON events (purchase_id)")
        conn.execute("INSERT INTO events SELECT g, 1 + g % 2, 1 + g % 50 FROM generate_series(1, 100) g")
        prepare_with_twin_indexes(conn)
        conn.execute("ALTER TABLE events DETACH PARTITION events_2")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
            conn.execute("CALL shard_id_convert('purchases', 700)")
        assert "events_2" in refused.value.diag.message_detail, refused.value.diag.message_detail
        conn.execute("CALL shard_id_convert_abandon('purchases')")
        assert "shard_id" not in columns(conn, "purchases")


# what is made after the prepare under a name the conversion gives: (statements, the name taken,
# what renames it); each case failed on the commit the test's docstring names
TAKEN_AFTER_THE_PREPARE = {
    # 5d23a4f: counted as twinned, the swap dropped the CHECK and renamed the other in its place
    "check": (["ALTER TABLE purchases ADD CONSTRAINT positive_shard_id_twin CHECK (amount > -5), "
               "ADD CONSTRAINT positive CHECK (id > 0)"], "positive_shard_id_twin", "TABLE purchases RENAME CONSTRAINT"),
    # 5d23a4f: the other index was made the key's
    "index": (["CREATE INDEX by_item_shard_id_twin ON purchases (amount)", "CREATE INDEX by_item ON purchases (item, id)"],
              "by_item_shard_id_twin", "INDEX"),
    # 8624a3a: an index of another shape that names the new column was taken for the twin
    "index on the new column": (["CREATE INDEX by_item ON purchases (item, id)",
                                 "CREATE INDEX by_item_shard_id_twin ON purchases (amount) WHERE shard_id > 0"],
                                "by_item_shard_id_twin", "INDEX"),
    # 725b7b5: an index of another collation was taken for the twin
    "index of another collation": (["CREATE INDEX by_item ON purchases (item, id)",
                                    'CREATE INDEX by_item_shard_id_twin ON purchases (item COLLATE "C", shard_id)'],
                                   "by_item_shard_id_twin", "INDEX"),
    # 8624a3a: taken for the conversion's NOT NULL CHECK, and dropped at the swap
    "not-null check": (["ALTER TABLE purchases ADD CONSTRAINT shard_id_convert_shard_id_not_null CHECK (amount > -5)"],
                       "shard_id_convert_shard_id_not_null", "TABLE purchases RENAME CONSTRAINT"),
    # 8624a3a: the swap's floor CHECK failed on every retry ("already exists")
    "floor check": (["ALTER TABLE purchases ADD CONSTRAINT id_shard_id_floor CHECK (amount > -5)"],
                    "id_shard_id_floor", "TABLE purchases RENAME CONSTRAINT"),
}


@pytest.mark.parametrize("kind", list(TAKEN_AFTER_THE_PREPARE))
def test_a_name_taken_after_the_prepare_is_refused(cluster, db, kind):
    """An object made after the prepare (a deploy during a long conversion) under a name the
    conversion gives: on 5d23a4f a twin's name taken counted as twinned, and the swap dropped x
    and renamed the other in its place (the twentieth review); on 8624a3a an index of another
    shape naming the new column was taken for the twin, a CHECK named like the conversion's NOT
    NULL CHECK was dropped at the swap, one named like the floor CHECK failed every finish (the
    twenty-first). Each is refused before any step, naming it; renamed, the conversion finishes
    and the user's object is there, as it was."""
    statements, taken, rename = TAKEN_AFTER_THE_PREPARE[kind]
    with cluster.connect(db) as conn:
        base_schema(conn)
        prepare_with_twin_indexes(conn)
        conn.execute("CALL shard_id_convert('purchases', 700)")
        for statement in statements:
            conn.execute(statement)
        definition = (one(conn, f"SELECT pg_get_indexdef('{taken}'::regclass)") if rename == "INDEX" else
                      one(conn, f"SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = '{taken}'"))
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            conn.execute("CALL shard_id_convert_finish('purchases')")
        assert taken in refused.value.diag.message_detail, refused.value.diag.message_detail
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") != "finished"
        if rename == "INDEX":  # (nor does the index step build over it)
            with pytest.raises(psycopg.errors.FeatureNotSupported):
                conn.execute("SELECT * FROM shard_id_convert_indexes('purchases')").fetchall()
        conn.execute(f"ALTER {rename} {taken} {'RENAME TO' if rename == 'INDEX' else 'TO'} other_one")
        convert_after_the_prepare(conn)
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"
        if rename == "INDEX":
            # (the user's index, renamed; its new column is the key now)
            assert one(conn, "SELECT pg_get_indexdef('other_one'::regclass)") == \
                definition.replace(taken, "other_one").replace("shard_id", "id")
            assert "(item, id)" in one(conn, "SELECT pg_get_indexdef('by_item'::regclass)")
        else:
            assert one(conn, "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'other_one'") == definition
        if kind == "check":
            assert one(conn, "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'positive'") == "CHECK ((id > 0))"


def test_a_partition_s_constraint_with_a_twin_s_name_is_refused(cluster, db):
    """On 8624a3a a partition's constraint named like the twin of its parent's CHECK was not seen
    (the name was looked for on the parent alone): the plan and the prepare accepted, and every
    finish failed adding the twin ("already exists" on the partition: the twenty-first review).
    The name is taken wherever ADD CONSTRAINT adds the twin: refused before anything changes."""
    with cluster.connect(db) as conn:
        conn.execute("CREATE TABLE pp (id bigserial CHECK (id > 0), created_at timestamptz NOT NULL DEFAULT now(), a int, "
                     "PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at)")
        conn.execute("CREATE TABLE pp1 PARTITION OF pp FOR VALUES FROM ('2020-10-01') TO ('2030-01-01')")
        conn.execute("ALTER TABLE pp1 ADD CONSTRAINT pp_id_check_shard_id_twin CHECK (a IS DISTINCT FROM -1)")
        conn.execute("INSERT INTO pp (created_at, a) SELECT '2026-02-01'::timestamptz + g * interval '1 min', g "
                     "FROM generate_series(1, 200) g")
        conn.execute("CREATE SEQUENCE pp_seq")
        refusals = conn.execute("SELECT object FROM shard_id_convert_plan('pp', 'created_at', 'pp_seq', 5) "
                                "WHERE kind = 'name taken' AND action = 'refuse'").fetchall()
        assert any("pp_id_check_shard_id_twin" in o and "pp1" in o for (o,) in refusals), refusals
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            conn.execute("CALL shard_id_convert_prepare('pp', 'created_at', 'pp_seq', 5)")
        assert "shard_id" not in columns(conn, "pp1")
        conn.execute("ALTER TABLE pp1 RENAME CONSTRAINT pp_id_check_shard_id_twin TO a_set")
        conn.execute("CALL shard_id_convert_prepare('pp', 'created_at', 'pp_seq', 5)")
        convert_after_the_prepare(conn, "pp")
        assert one(conn, "SELECT count(*) FROM pp WHERE shard_id_extract_shard(id) = 5") == 200
        assert one(conn, "SELECT count(*) FROM pg_constraint WHERE conname = 'a_set' AND conrelid = 'pp1'::regclass") == 1


CONVERSION_TRIGGERS = {
    # the conversion's trigger: (table, name)
    "fill": ("purchases", "shard_id_convert_shard_id"),
    "rekeyed": ("purchases", "shard_id_convert_shard_id_rekeyed"),
    "reference": ("purchase_lines", '"~shard_id_convert_purchase_id_shard_id"'),
}


@pytest.mark.parametrize("trigger", sorted(CONVERSION_TRIGGERS))
def test_a_trigger_of_the_conversion_renamed_after_the_prepare_stops_every_step_until_renamed_back(cluster, db, trigger):
    """On 725b7b5 a trigger of the conversion renamed after the prepare (a migration tool that
    renames triggers to its own convention) was found by nobody: the batches ran, and every
    finish failed at the swap's DROP TRIGGER ("does not exist": the twenty-second review). Now
    every step refuses (55000) naming it and its new name, before it changes anything; renamed
    back, the conversion finishes. One dropped is refused too, and abandoning still works."""
    table, name = CONVERSION_TRIGGERS[trigger]
    with cluster.connect(db) as conn:
        conn.autocommit = True
        base_schema(conn)
        prepare(conn)
        conn.execute(f"ALTER TRIGGER {name} ON {table} RENAME TO audit_{trigger}")
        conn.execute("INSERT INTO purchases (created_at, item) VALUES (now(), 'during')")

        def refused_until_renamed_back(*steps):
            for step in steps:
                with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
                    conn.execute(step)
                assert f"trigger {name} on public.{table}: renamed to audit_{trigger}" in \
                    (refused.value.diag.message_detail or ""), (step, str(refused.value))
            conn.execute(f"ALTER TRIGGER audit_{trigger} ON {table} RENAME TO {name}")

        refused_until_renamed_back("SELECT * FROM shard_id_convert_indexes('purchases')", "CALL shard_id_convert('purchases', 700)")
        assert one(conn, "SELECT count(*) FROM pg_class WHERE relname LIKE '%shard_id_twin'") == 0, "the index step ran"
        # (and once every row has its id: the finish)
        build_twins(conn)
        conn.execute("CALL shard_id_convert('purchases', 700)")
        conn.execute(f"ALTER TRIGGER {name} ON {table} RENAME TO audit_{trigger}")
        refused_until_renamed_back("CALL shard_id_convert_finish('purchases')")
        convert_after_the_prepare(conn)
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"
        assert one(conn, "SELECT count(*) FROM purchases WHERE shard_id_extract_timestamp(id) IS NULL") == 0
        # dropped: refused, and abandoning takes the rest away
        conn.execute("DROP TABLE purchase_lines, purchases; DROP SEQUENCE purchases_shard_id_seq")
        base_schema(conn)
        prepare(conn)
        conn.execute(f"DROP TRIGGER {name} ON {table}")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
            conn.execute("CALL shard_id_convert('purchases', 700)")
        assert f"trigger {name} on public.{table}: dropped" in refused.value.diag.message_detail
        conn.execute("CALL shard_id_convert_abandon('purchases')")
        assert "shard_id" not in columns(conn, "purchases")
        assert one(conn, "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'shard_id_convert%'") == 0


def test_a_trigger_of_the_conversion_disabled_after_the_prepare_stops_every_step(cluster, db):
    """On 725b7b5 the conversion's triggers disabled after the prepare, or enabled again by a
    plain ENABLE TRIGGER ALL (as pg_restore --disable-triggers leaves them), went unseen: a
    referencing row updated by a writer as replica kept its old parent's new id, pointed at
    another row after the finish, and writers failed the finish's CHECKs (the twenty-third
    review). Every step refuses (55000) naming the trigger and how, on the table or on one
    partition (PostgreSQL allows disabling a partition's clone). A trigger disabled and enabled
    again between two steps no catalog check can see: on 26b0485 the reference written meanwhile
    went through the swap pointing at another row (the twenty-fourth review); the finish makes
    every reference agree with its parent, by the old key, before the swap."""
    with cluster.connect(db) as conn:
        conn.autocommit = True
        base_schema(conn)
        prepare(conn)
        conn.execute("ALTER TABLE purchase_lines DISABLE TRIGGER ALL")
        conn.execute("ALTER TABLE purchase_lines ENABLE TRIGGER ALL")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
            conn.execute("CALL shard_id_convert('purchases', 700)")
        detail = refused.value.diag.message_detail
        assert ("trigger \"~shard_id_convert_purchase_id_shard_id\" on public.purchase_lines: "
                "not ENABLE ALWAYS (writers as replica skip it) on public.purchase_lines") in detail, detail
        conn.execute("ALTER TABLE purchase_lines ENABLE ALWAYS TRIGGER \"~shard_id_convert_purchase_id_shard_id\", "
                     "ENABLE REPLICA TRIGGER \"~shard_id_convert_purchase_id_shard_id_update\"")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
            conn.execute("CALL shard_id_convert('purchases', 700)")
        assert "_update\" on public.purchase_lines: ENABLE REPLICA (ordinary writers skip it)" in refused.value.diag.message_detail
        conn.execute("ALTER TABLE purchase_lines ENABLE ALWAYS TRIGGER \"~shard_id_convert_purchase_id_shard_id_update\"")
        build_twins(conn)
        conn.execute("CALL shard_id_convert('purchases', 700)")
        # off and on again between two steps, a writer in between
        conn.execute("ALTER TABLE purchase_lines DISABLE TRIGGER \"~shard_id_convert_purchase_id_shard_id_update\"")
        conn.execute("UPDATE purchase_lines SET purchase_id = 2 WHERE id IN (1, 3)")
        conn.execute("ALTER TABLE purchase_lines ENABLE ALWAYS TRIGGER \"~shard_id_convert_purchase_id_shard_id_update\"")
        conn.execute("ALTER TABLE purchases DISABLE TRIGGER shard_id_convert_shard_id_deleted")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
            conn.execute("CALL shard_id_convert_finish('purchases')")
        assert "shard_id_convert_shard_id_deleted on public.purchases: disabled on public.purchases" in \
            refused.value.diag.message_detail
        conn.execute("ALTER TABLE purchases ENABLE ALWAYS TRIGGER shard_id_convert_shard_id_deleted")
        convert_after_the_prepare(conn)
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"
        assert one(conn, "SELECT count(*) FROM purchase_lines l JOIN purchases p ON p.id = l.purchase_id "
                         "WHERE l.purchase_id_before_shard_id = p.id_before_shard_id") == 2 * PURCHASES
        assert one(conn, "SELECT count(*) FROM purchase_lines WHERE purchase_id_before_shard_id = 2 AND id IN (1, 3)") == 2
        # a partition's clone
        conn.execute("CREATE TABLE pp (id bigserial, created_at timestamptz NOT NULL DEFAULT now(), "
                     "PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at)")
        conn.execute("CREATE TABLE pp1 PARTITION OF pp FOR VALUES FROM ('2020-10-01') TO ('2030-01-01')")
        conn.execute("CREATE TABLE pp2 PARTITION OF pp FOR VALUES FROM ('2030-01-01') TO ('2040-01-01')")
        conn.execute("INSERT INTO pp (created_at) SELECT '2026-02-01'::timestamptz + g * interval '1 min' FROM generate_series(1, 50) g")
        conn.execute("CREATE SEQUENCE pp_seq")
        conn.execute("CALL shard_id_convert_prepare('pp', 'created_at', 'pp_seq', 5)")
        conn.execute("ALTER TABLE pp2 DISABLE TRIGGER shard_id_convert_shard_id")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
            conn.execute("SELECT * FROM shard_id_convert_indexes('pp')")
        assert "trigger shard_id_convert_shard_id on public.pp: disabled on public.pp2" in refused.value.diag.message_detail
        conn.execute("ALTER TABLE pp2 ENABLE ALWAYS TRIGGER shard_id_convert_shard_id")
        convert_after_the_prepare(conn, "pp")
        assert one(conn, "SELECT count(*) FROM pp WHERE shard_id_extract_shard(id) = 5") == 50


def test_an_interrupted_twin_build_is_built_again_by_the_index_step(cluster, db):
    """A twin's CREATE INDEX CONCURRENTLY interrupted (a statement timeout, a cancel) leaves it
    invalid; the index step then emits DROP INDEX CONCURRENTLY and the build again. On 010dbbb
    that DROP failed wherever the library was preloaded ("must be first action in transaction":
    its catalog hook gave the transaction an id first, the twenty-fifth review), and the
    conversion could go on only by abandoning it or a plain DROP INDEX that stops writers."""
    with cluster.connect(db) as conn, cluster.connect(db) as writer:
        conn.autocommit = True
        base_schema(conn)
        prepare(conn)
        (statement,) = [s for (s,) in conn.execute("SELECT * FROM shard_id_convert_indexes('purchases')").fetchall()
                        if "purchases_pkey_shard_id_twin" in s]
        writer.autocommit = False  # (a transaction that wrote to the table: the build waits for it)
        writer.execute("INSERT INTO purchases (created_at, item) VALUES (now(), 'held')")
        conn.execute("SET statement_timeout = '500ms'")
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute(statement)
        conn.execute("RESET statement_timeout")
        writer.commit()
        assert one(conn, "SELECT indisvalid FROM pg_index WHERE indexrelid = 'purchases_pkey_shard_id_twin'::regclass") is False
        emitted = [s for (s,) in conn.execute("SELECT * FROM shard_id_convert_indexes('purchases')").fetchall()]
        assert any(s.startswith("DROP INDEX CONCURRENTLY") and "purchases_pkey_shard_id_twin" in s for s in emitted), emitted
        convert_after_the_prepare(conn)
        assert one(conn, "SELECT phase FROM _pg_shard_id.conversions") == "finished"
        assert one(conn, "SELECT count(*) FROM purchases WHERE item = 'held' AND shard_id_extract_shard(id) = 5") == 1
