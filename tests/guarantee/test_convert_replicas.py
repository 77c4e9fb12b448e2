"""A conversion on a published table, with a real logical subscriber and a CDC slot (issue 49),
following docs/adopting.md#replicas step by step: the prepare refuses a published table until told
its subscribers are ready; the subscriber, given the new columns first, receives every converted
row; at the swap its apply stops (disable_on_error) before the first change it cannot apply; it
renames its columns as the docs say and goes on with the same ids as the publisher. The CDC slot
(test_decoding) sees one UPDATE per converted row. Run by tests/guarantee/run.sh."""

import subprocess
import time

import psycopg
import pytest
from pgcluster import PG_BIN, Cluster, wait_for

ROWS, LINES = 2000, 3000


@pytest.fixture(scope="module")
def pair():
    publisher = Cluster("convert_pub", conf=["wal_level = logical"])
    subscriber = Cluster("convert_sub")
    yield publisher, subscriber
    subscriber.destroy()
    publisher.destroy()


def counts(conn):
    return conn.execute("SELECT count(*), count(DISTINCT id) FROM purchases").fetchone()


def test_a_subscriber_follows_the_documented_steps_and_cdc_sees_an_update_per_row(pair):
    publisher, subscriber = pair
    with publisher.connect() as p:
        p.execute("SET client_min_messages = warning")
        p.execute("CREATE EXTENSION pg_shard_id")
        p.execute("CREATE TABLE purchases (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, item text)")
        p.execute("CREATE TABLE purchase_lines (id bigserial PRIMARY KEY, "
                  "purchase_id bigint NOT NULL REFERENCES purchases, qty int)")
        p.execute("INSERT INTO purchases (created_at, item) SELECT '2026-02-01'::timestamptz + g * interval '1 min', "
                  "'item ' || g FROM generate_series(1, %s) g", (ROWS,))
        p.execute("INSERT INTO purchase_lines (purchase_id, qty) SELECT 1 + g %% %s, g FROM generate_series(1, %s) g",
                  (ROWS, LINES))
        p.execute("CREATE SEQUENCE purchases_shard_id_seq")
        schema = subprocess.run([f"{PG_BIN}/pg_dump", "-h", publisher.dir, "-p", str(publisher.port), "-U", "postgres",
                                 "--schema-only", "postgres"], check=True, capture_output=True, text=True).stdout
        p.execute("CREATE PUBLICATION pub FOR TABLE purchases, purchase_lines")
        p.execute("SELECT pg_create_logical_replication_slot('cdc', 'test_decoding')")
    # (psql: pg_dump's script holds psql commands)
    subprocess.run([f"{PG_BIN}/psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", subscriber.dir, "-p",
                    str(subscriber.port), "-U", "postgres", "-d", "postgres"], input=schema, check=True,
                   capture_output=True, text=True)
    with subscriber.connect() as s:
        s.execute(f"CREATE SUBSCRIPTION sub CONNECTION 'host={publisher.dir} port={publisher.port} user=postgres "
                  f"dbname=postgres' PUBLICATION pub")
        assert wait_for(lambda: counts(s) == (ROWS, ROWS), timeout=60)
        # a subscription's target is converted on its publisher, never on its own
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            s.execute("CALL shard_id_convert_prepare('purchases', 'created_at', 'purchases_shard_id_seq', 5)")
        assert "subscription sub" in refused.value.diag.message_detail, refused.value.diag.message_detail

    with publisher.connect() as p:
        # refused until the subscribers have the new columns, with the statement for them
        with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
            p.execute("CALL shard_id_convert_prepare('purchases', 'created_at', 'purchases_shard_id_seq', 5)")
        assert "publication pub" in refused.value.diag.message_detail
        assert "ADD COLUMN shard_id bigint" in refused.value.diag.message_detail
    # 1. each subscriber: the new columns first
    with subscriber.connect() as s:
        s.execute("ALTER TABLE purchases ADD COLUMN shard_id bigint")
        s.execute("ALTER TABLE purchase_lines ADD COLUMN purchase_id_shard_id bigint")
    with publisher.connect() as p:
        p.execute("CALL shard_id_convert_prepare('purchases', 'created_at', 'purchases_shard_id_seq', 5, "
                  "subscribers_ready => true)")
        for (statement,) in p.execute("SELECT * FROM shard_id_convert_indexes('purchases')").fetchall():
            p.execute(statement)
        p.execute("CALL shard_id_convert('purchases', 500)")
        p.execute("INSERT INTO purchases (created_at, item) VALUES (now(), 'during')")
        expected = dict(p.execute("SELECT item, shard_id FROM purchases").fetchall())
    with subscriber.connect() as s:
        assert wait_for(lambda: dict(s.execute("SELECT item, shard_id FROM purchases").fetchall()) == expected,
                        timeout=60)
        assert s.execute("SELECT count(*) FROM purchase_lines WHERE purchase_id_shard_id IS NULL").fetchone()[0] == 0
        # 2. its unique index, and the apply stops itself at the first change after the swap
        s.execute("CREATE UNIQUE INDEX CONCURRENTLY purchases_shard_id_key ON purchases (shard_id)")
        s.execute("ALTER SUBSCRIPTION sub SET (disable_on_error = true)")
    with publisher.connect() as p:
        p.execute("CALL shard_id_convert_finish('purchases')")
        p.execute("INSERT INTO purchases (created_at, item) VALUES (now(), 'after')")
        p.execute("INSERT INTO purchase_lines (purchase_id, qty) SELECT id, 1 FROM purchases WHERE item = 'after'")
    with subscriber.connect() as s:
        assert wait_for(lambda: not s.execute("SELECT subenabled FROM pg_subscription").fetchone()[0], timeout=60)
        assert "missing replicated column" in subscriber.log_text()
        # 3. the same swap on the subscriber, then the apply goes on
        with s.transaction():
            s.execute("ALTER TABLE purchase_lines DROP CONSTRAINT purchase_lines_purchase_id_fkey")
            s.execute("ALTER TABLE purchase_lines RENAME COLUMN purchase_id TO purchase_id_before_shard_id")
            s.execute("ALTER TABLE purchase_lines RENAME COLUMN purchase_id_shard_id TO purchase_id")
            s.execute("ALTER TABLE purchase_lines ALTER COLUMN purchase_id_before_shard_id DROP NOT NULL")
            s.execute("ALTER TABLE purchases DROP CONSTRAINT purchases_pkey")
            s.execute("ALTER TABLE purchases ALTER COLUMN shard_id SET NOT NULL")
            s.execute("ALTER TABLE purchases ADD CONSTRAINT purchases_pkey PRIMARY KEY USING INDEX purchases_shard_id_key")
            s.execute("ALTER TABLE purchases RENAME COLUMN id TO id_before_shard_id")
            s.execute("ALTER TABLE purchases RENAME COLUMN shard_id TO id")
            s.execute("ALTER TABLE purchases ALTER COLUMN id_before_shard_id DROP NOT NULL")
            s.execute("ALTER TABLE purchase_lines ADD CONSTRAINT purchase_lines_purchase_id_fkey "
                      "FOREIGN KEY (purchase_id) REFERENCES purchases (id) NOT VALID")
        s.execute("ALTER SUBSCRIPTION sub ENABLE")
    with publisher.connect() as p:
        on_publisher = p.execute("SELECT id, id_before_shard_id, item FROM purchases ORDER BY id").fetchall()
        lines = p.execute("SELECT id, purchase_id FROM purchase_lines ORDER BY id").fetchall()
        cdc = dict(p.execute(
            "SELECT substring(data FROM '^table public\\.(\\w+): UPDATE'), count(*) "
            "FROM pg_logical_slot_get_changes('cdc', NULL, NULL) WHERE data ~ '^table public\\.\\w+: UPDATE' "
            "GROUP BY 1").fetchall())
    with subscriber.connect() as s:
        assert wait_for(lambda: s.execute("SELECT id, id_before_shard_id, item FROM purchases ORDER BY id").fetchall()
                        == on_publisher, timeout=60)
        assert s.execute("SELECT id, purchase_id FROM purchase_lines ORDER BY id").fetchall() == lines
        assert s.execute("SELECT count(*) FROM purchases WHERE item = 'after'").fetchone()[0] == 1
    # CDC: one UPDATE per converted row of each table (the batches'), none hidden by
    # session_replication_role; the finish's sweeps found nothing left
    print(f"CDC updates: {cdc}")
    assert cdc.get("purchases") == ROWS and cdc.get("purchase_lines") == LINES, cdc
    time.sleep(0)
