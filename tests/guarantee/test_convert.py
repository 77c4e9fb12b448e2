"""Converting an existing table's keys to time-ordered ids (issue 37): shard_id_convert under
inserts and updates through the DEFAULT, its backend killed halfway and the call resumed, the
swap, every foreign key carried; a partitioned table; a dump and restore of the result. Run by
tests/guarantee/run.sh."""

import subprocess
import threading
import time

import psycopg
from pgcluster import PG_BIN
import pytest

ORDERS = 60_000


def schema(conn, partitioned=False):
    if partitioned:
        conn.execute(
            "CREATE TABLE orders (id bigserial, created_at timestamptz NOT NULL, note text, "
            "PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at)")
        conn.execute("CREATE TABLE orders_2026_a PARTITION OF orders FOR VALUES FROM ('2026-01-01') TO ('2026-03-01')")
        conn.execute("CREATE TABLE orders_2026_b PARTITION OF orders FOR VALUES FROM ('2026-03-01') TO ('2027-01-01')")
    else:
        conn.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, note text)")
        conn.execute("CREATE TABLE lines (id bigserial PRIMARY KEY, "
                     "order_id bigint NOT NULL REFERENCES orders ON DELETE CASCADE, qty int)")
        conn.execute("CREATE TABLE refunds (id bigserial PRIMARY KEY, order_id bigint REFERENCES orders, amount int)")
    conn.execute(
        "INSERT INTO orders (created_at, note) "
        "SELECT '2026-01-10'::timestamptz + g * interval '150 s' + (g %% 7) * interval '1 ms', 'old' "
        "  FROM generate_series(1, %s) g", (ORDERS,))
    if not partitioned:
        conn.execute("INSERT INTO lines (order_id, qty) SELECT 1 + g %% %s, g FROM generate_series(1, %s) g",
                     (ORDERS, 2 * ORDERS))
        conn.execute("INSERT INTO refunds (order_id, amount) SELECT 1 + g * 7 %% %s, g FROM generate_series(1, 3000) g",
                     (ORDERS,))
    conn.execute("ANALYZE")
    conn.execute("CREATE SEQUENCE orders_shard_id_seq")


def prepare(conn, expect_indexes):
    conn.execute("CALL shard_id_convert_prepare('orders', 'created_at', 'orders_shard_id_seq', 5)")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
        conn.execute("CALL shard_id_convert('orders', 4000)")
    statements = [r[0] for r in conn.execute("SELECT * FROM shard_id_convert_indexes('orders')")]
    assert refused.value.diag.message_detail.splitlines() == statements
    assert len(statements) == expect_indexes, statements
    for statement in statements:
        assert statement.startswith("CREATE ") and "CONCURRENTLY" in statement
        conn.execute(statement)
    assert conn.execute("SELECT count(*) FROM shard_id_convert_indexes('orders')").fetchone()[0] == 0


class Traffic:
    """Inserts through the DEFAULT and updates of old rows, in a loop, recording the longest
    statement it waited for."""

    def __init__(self, cluster, db, lines=True):
        self.cluster, self.db, self.lines = cluster, db, lines
        self.stop, self.errors, self.longest, self.count = threading.Event(), [], 0.0, 0
        self.thread = threading.Thread(target=self.run)

    def run(self):
        try:
            with self.cluster.connect(self.db) as conn:
                i = 0
                while not self.stop.is_set():
                    i += 1
                    t0 = time.monotonic()
                    with conn.transaction():
                        conn.execute("INSERT INTO orders (created_at, note) VALUES (now() - interval '5 s', 'new')")
                        conn.execute("UPDATE orders SET note = note || '.' WHERE id = (SELECT id FROM orders "
                                     "WHERE note LIKE 'old%%' ORDER BY created_at OFFSET %s LIMIT 1)",
                                     ((i * 7919) % ORDERS,))
                        if self.lines:
                            conn.execute("INSERT INTO lines (order_id, qty) SELECT id, 1 FROM orders "
                                         "WHERE note = 'new' ORDER BY created_at DESC LIMIT 1")
                    self.longest = max(self.longest, time.monotonic() - t0)
                    self.count += 1
        except Exception as e:  # noqa: BLE001 (reported by the test)
            self.errors.append(repr(e))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def check_converted(conn, lines=True):
    total, distinct, nulls, misplaced = conn.execute(
        "SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE id IS NULL), "
        "       count(*) FILTER (WHERE note LIKE 'old%' AND "
        "                        shard_id_extract_timestamp(id) <> date_trunc('milliseconds', created_at)) "
        "  FROM orders").fetchone()
    assert (distinct, nulls, misplaced) == (total, 0, 0)
    # rows inserted during the conversion got live ids at the time of their insert (not 10
    # minutes ahead, as when the new column's first id found it without an index)
    ahead = conn.execute("SELECT max(shard_id_extract_timestamp(id) - created_at) FROM orders "
                         " WHERE note = 'new'").fetchone()[0]
    assert ahead is None or ahead.total_seconds() < 60, ahead
    # every id of the history is below every id the DEFAULT made during and after
    assert conn.execute("SELECT coalesce(max(id) FILTER (WHERE note LIKE 'old%') < min(id) FILTER (WHERE note = 'new'), "
                        "                true) FROM orders").fetchone()[0]
    if lines:
        for child in ("lines", "refunds"):
            # every row references the order it referenced before (rows inserted after the swap
            # have no old key)
            wrong = conn.execute(
                f"SELECT count(*) FROM {child} c LEFT JOIN orders o ON o.id = c.order_id "
                f" WHERE o.id IS NULL OR (c.order_id_before_shard_id IS NOT NULL "
                f"                        AND o.id_before_shard_id IS DISTINCT FROM c.order_id_before_shard_id)"
            ).fetchone()[0]
            assert wrong == 0, f"{wrong} rows of {child} lost their order"
        assert conn.execute("SELECT bool_and(convalidated) FROM pg_constraint WHERE contype = 'f' "
                            "  AND confrelid = 'orders'::regclass").fetchone()[0]


def test_a_conversion_killed_halfway_resumes_under_traffic_and_swaps(cluster, db):
    with cluster.connect(db) as conn:
        schema(conn)
        prepare(conn, 3)
    with Traffic(cluster, db) as traffic:
        victim = cluster.connect(db)
        pid = victim.info.backend_pid
        done = threading.Event()

        def convert():
            try:
                victim.execute("CALL shard_id_convert('orders', 4000)")
            except psycopg.OperationalError:
                pass  # killed
            done.set()

        threading.Thread(target=convert).start()
        with cluster.connect(db) as watcher:
            # wait for a few batches, then kill the backend in the middle of one
            deadline = time.monotonic() + 60
            while watcher.execute("SELECT coalesce(max(rows_done), 0) FROM shard_id_conversions").fetchone()[0] < 20_000:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            watcher.execute("SELECT pg_terminate_backend(%s)", (pid,))
            assert done.wait(30)
            phase, rows_done = watcher.execute("SELECT phase, rows_done FROM shard_id_conversions").fetchone()
            assert phase == "filling" and 20_000 <= rows_done < 3 * ORDERS
        with cluster.connect(db) as conn:
            notices = []
            conn.add_notice_handler(lambda d: notices.append(d.message_primary))
            conn.execute("CALL shard_id_convert('orders', 4000)")
            assert any("rows/s" in n and "left" in n for n in notices)
            assert "shard_id_convert_finish" in notices[-1]
            conn.execute("CALL shard_id_convert_finish('orders')")
        time.sleep(0.3)
    assert traffic.errors == [] and traffic.count > 0
    print(f"traffic: {traffic.count} transactions, longest {traffic.longest * 1000:.0f} ms")
    with cluster.connect(db) as conn:
        check_converted(conn)
        assert conn.execute("SELECT phase FROM shard_id_conversions").fetchone()[0] == "finished"
        # the swapped table goes on: new rows by the DEFAULT, referencing rows by the new id
        new = conn.execute("INSERT INTO orders (created_at, note) VALUES (now(), 'new') RETURNING id").fetchone()[0]
        conn.execute("INSERT INTO lines (order_id, qty) VALUES (%s, 1)", (new,))
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute("INSERT INTO lines (order_id, qty) VALUES (42, 1)")


def test_a_partitioned_table_converts_and_its_primary_key_is_swapped(cluster, db):
    with cluster.connect(db) as conn:
        schema(conn, partitioned=True)
        prepare(conn, 2)
    with Traffic(cluster, db, lines=False) as traffic:
        with cluster.connect(db) as conn:
            conn.execute("CALL shard_id_convert('orders', 4000)")
            conn.execute("CALL shard_id_convert_finish('orders')")
        time.sleep(0.3)
    assert traffic.errors == []
    with cluster.connect(db) as conn:
        check_converted(conn, lines=False)
        assert conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'orders'::regclass AND contype = 'p'"
        ).fetchone()[0] == "PRIMARY KEY (id, created_at)"
        # each partition's primary key is the index built concurrently, not a second one built
        # under the swap's lock
        assert conn.execute(
            "SELECT count(*) FROM pg_index i JOIN pg_inherits h ON h.inhrelid = i.indrelid "
            " WHERE h.inhparent = 'orders'::regclass AND i.indisunique "
            "   AND i.indkey[0] = (SELECT attnum FROM pg_attribute WHERE attrelid = i.indrelid AND attname = 'id')"
        ).fetchone()[0] == 2


def test_a_converted_table_dumps_and_restores_and_new_ids_stay_above(cluster, db):
    with cluster.connect(db) as conn:
        schema(conn)
        prepare(conn, 3)
        conn.execute("CALL shard_id_convert('orders', 20000)")
        conn.execute("CALL shard_id_convert_finish('orders')")
        conn.execute("INSERT INTO orders (created_at, note) SELECT now(), 'new' FROM generate_series(1, 10)")
        before = conn.execute("SELECT count(*), sum(id), max(id) FROM orders").fetchone()
    restored = db + "_r"
    cluster.sql(f"DROP DATABASE IF EXISTS {restored}")
    cluster.sql(f"CREATE DATABASE {restored}")
    dump = subprocess.run([f"{PG_BIN}/pg_dump", "-h", cluster.dir, "-p", str(cluster.port), "-U", "postgres",
                           "-Fc", db], check=True, capture_output=True).stdout
    subprocess.run([f"{PG_BIN}/pg_restore", "-h", cluster.dir, "-p", str(cluster.port), "-U", "postgres",
                    "-d", restored, "--exit-on-error"], input=dump, check=True, capture_output=True)
    with cluster.connect(restored) as conn:
        assert conn.execute("SELECT count(*), sum(id), max(id) FROM orders").fetchone() == before
        check_converted(conn)
        new = conn.execute("INSERT INTO orders (created_at, note) VALUES (now(), 'new') RETURNING id").fetchone()[0]
        assert new > before[2]


def test_updates_before_the_index_references_set_to_null_and_other_unique_columns(cluster, db):
    """Review findings on the conversion: an UPDATE between the prepare and the index build must
    not fail; a reference set to NULL during the conversion stays NULL; a foreign key to another
    unique column is left alone; the progress view shows a role only its own tables."""
    with cluster.connect(db) as conn:
        conn.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, number text UNIQUE NOT NULL, "
                     "created_at timestamptz NOT NULL, note text)")
        conn.execute("CREATE TABLE lines (id bigserial PRIMARY KEY, order_id bigint REFERENCES orders ON DELETE SET NULL, "
                     "order_number text REFERENCES orders (number))")
        conn.execute("INSERT INTO orders (number, created_at, note) SELECT 'n' || g, "
                     "'2026-02-01'::timestamptz + g * interval '1 min', 'old' FROM generate_series(1, 2000) g")
        conn.execute("INSERT INTO lines (order_id, order_number) SELECT g, 'n' || g FROM generate_series(1, 2000) g")
        conn.execute("CREATE SEQUENCE orders_shard_id_seq")
        conn.execute("CALL shard_id_convert_prepare('orders', 'created_at', 'orders_shard_id_seq', 5)")
        # before the indexes exist: updates of old rows go through (their ids come later)
        conn.execute("UPDATE orders SET note = 'updated early' WHERE id <= 10")
        conn.execute("UPDATE lines SET order_id = NULL WHERE id <= 5")
        for statement in [r[0] for r in conn.execute("SELECT * FROM shard_id_convert_indexes('orders')")]:
            conn.execute(statement)
        conn.execute("CALL shard_id_convert('orders', 500)")
        # during the conversion: a reference set to NULL, one moved, and a parent deleted
        conn.execute("UPDATE lines SET order_id = NULL WHERE id BETWEEN 6 AND 10")
        conn.execute("UPDATE lines SET order_id = 100 WHERE id = 11")
        conn.execute("UPDATE lines SET order_number = NULL WHERE id = 12")
        conn.execute("DELETE FROM orders WHERE id = 12")
        conn.execute("CREATE ROLE other_owner")
        conn.execute("SET ROLE other_owner")
        assert conn.execute("SELECT count(*) FROM shard_id_conversions").fetchone()[0] == 0
        conn.execute("RESET ROLE")
        conn.execute("CALL shard_id_convert_finish('orders')")
        conn.execute("CALL shard_id_convert_finish('orders')")  # again: nothing left to do
        check_converted(conn, lines=False)
        nulls = conn.execute("SELECT count(*) FROM lines WHERE order_id IS NULL").fetchone()[0]
        assert nulls == 11  # 1-10 set to NULL, 12 by ON DELETE SET NULL
        assert conn.execute("SELECT o.id_before_shard_id FROM lines l JOIN orders o ON o.id = l.order_id "
                            "WHERE l.id = 11").fetchone()[0] == 100
        # the reference by number is untouched and still valid
        assert conn.execute("SELECT count(*) FROM lines l JOIN orders o ON o.number = l.order_number").fetchone()[0] == 1999
        assert conn.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'lines'::regclass "
                            "AND contype = 'f' AND conkey = (SELECT ARRAY[attnum] FROM pg_attribute "
                            "WHERE attrelid = 'lines'::regclass AND attname = 'order_number')").fetchone()[0] \
            == "FOREIGN KEY (order_number) REFERENCES orders(number)"
        assert conn.execute("SELECT bool_and(convalidated) FROM pg_constraint WHERE contype = 'f' "
                            "AND confrelid = 'orders'::regclass").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM orders WHERE note = 'updated early' AND "
                            "shard_id_extract_timestamp(id) = created_at").fetchone()[0] == 10
