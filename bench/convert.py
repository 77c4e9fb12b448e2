"""Converting a table's keys while clients insert (issue 37): a table of N orders (a year of
history) and two referencing tables (N lines, N/10 refunds); two clients insert an order and a
line per transaction through the DEFAULTs for the whole time; the four steps run one after the
other. Prints, per step: its wall time, rows per second where rows are converted, the clients'
transactions per second and longest transaction (the longest wait for a lock that an inserting
client saw), the WAL it wrote and the three tables' size with their indexes after it (issue 55:
the disk a conversion needs). CONVERT_ABANDON=1 abandons the conversion after the batches
(shard_id_convert_abandon) instead of finishing it. Run by bench/convert.sh (which installs
nothing: the build installed in the selected PostgreSQL is measured)."""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "guarantee"))
from pgcluster import Cluster  # noqa: E402

N = int(os.environ.get("CONVERT_ROWS", "10000000"))
BATCH = int(os.environ.get("CONVERT_BATCH", "50000"))
ABANDON = os.environ.get("CONVERT_ABANDON") == "1"
SIZE = "SELECT sum(pg_total_relation_size(r)) FROM unnest(ARRAY['orders', 'lines', 'refunds']::regclass[]) r"
LSN = "SELECT pg_current_wal_lsn()"
WAL = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)"
CLIENTS = 2


class Clients:
    def __init__(self, cluster):
        self.cluster, self.stop, self.events, self.errors = cluster, threading.Event(), [], []
        self.threads = [threading.Thread(target=self.run) for _ in range(CLIENTS)]

    def run(self):
        try:
            with self.cluster.connect() as conn:
                while not self.stop.is_set():
                    t0 = time.monotonic()
                    with conn.transaction():
                        oid = conn.execute("INSERT INTO orders (created_at, item) VALUES (now() - interval '2 s', 'new') "
                                           "RETURNING id").fetchone()[0]
                        conn.execute("INSERT INTO lines (order_id, qty) VALUES (%s, 1)", (oid,))
                    self.events.append((t0, time.monotonic() - t0))
        except Exception as e:  # noqa: BLE001
            self.errors.append(repr(e))

    def during(self, t0, t1):
        lat = [d for (s, d) in list(self.events) if t0 <= s < t1]
        return len(lat) / max(t1 - t0, 1e-9), max(lat, default=0.0)


def main():
    c = Cluster("convert_bench", conf=["max_wal_size = 16GB", "checkpoint_timeout = 30min",
                                       "shared_buffers = 2GB", "maintenance_work_mem = 1GB"])
    try:
        with c.connect() as conn:
            conn.execute("CREATE EXTENSION pg_shard_id")
            conn.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, item text)")
            conn.execute("CREATE TABLE lines (id bigserial PRIMARY KEY, order_id bigint NOT NULL REFERENCES orders, qty int)")
            conn.execute("CREATE TABLE refunds (id bigserial PRIMARY KEY, order_id bigint REFERENCES orders, amount int)")
            t = time.monotonic()
            conn.execute("INSERT INTO orders (created_at, item) SELECT '2026-01-02'::timestamptz + "
                         "g * (interval '300 days' / %s), 'item' FROM generate_series(1, %s) g", (N, N))
            conn.execute("INSERT INTO lines (order_id, qty) SELECT 1 + (g::bigint * 7919) %% %s, 1 FROM generate_series(1, %s) g",
                         (N, N))
            conn.execute("INSERT INTO refunds (order_id, amount) SELECT 1 + (g::bigint * 104729) %% %s, 1 "
                         "  FROM generate_series(1, %s) g", (N, N // 10))
            conn.execute("CREATE INDEX ON lines (order_id)")
            conn.execute("CREATE INDEX ON refunds (order_id)")
            conn.execute("VACUUM ANALYZE")
            conn.execute("CREATE SEQUENCE orders_shard_id_seq")
            print(f"setup: {N:,} orders, {N:,} lines, {N // 10:,} refunds in {time.monotonic() - t:.0f} s", flush=True)
        clients = Clients(c)
        for th in clients.threads:
            th.start()
        time.sleep(3)
        steps = []
        with c.connect() as conn:
            def step(name, statements, rows=None):
                lsn = conn.execute(LSN).fetchone()[0]
                t0 = time.monotonic()
                for s in statements:
                    conn.execute(s)
                t1 = time.monotonic()
                wal = conn.execute(WAL, (lsn,)).fetchone()[0]
                size = conn.execute(SIZE).fetchone()[0]
                steps.append((name, t0, t1, rows, wal, size))
                print(f"  {name}: {t1 - t0:.1f} s, WAL {wal / 2**20:,.0f} MiB, tables {size / 2**20:,.0f} MiB", flush=True)

            size0 = conn.execute(SIZE).fetchone()[0]

            base0 = time.monotonic()
            step("prepare", ["CALL shard_id_convert_prepare('orders', 'created_at', 'orders_shard_id_seq', 5)"])
            indexes = [r[0] for r in conn.execute("SELECT * FROM shard_id_convert_indexes('orders')")]
            step("indexes (concurrently)", indexes)
            converted = N + N + N // 10
            step(f"convert (batches of {BATCH:,})", [f"CALL shard_id_convert('orders', {BATCH})"], converted)
            if ABANDON:
                step("abandon", ["CALL shard_id_convert_abandon('orders')"])
            else:
                step("finish (swap, validate)", ["CALL shard_id_convert_finish('orders')"])
            time.sleep(3)
            base1 = time.monotonic()
        clients.stop.set()
        for th in clients.threads:
            th.join()
        assert clients.errors == [], clients.errors
        before_tps, before_max = clients.during(base0 - 3, base0)
        print()
        print(f"Conversion of {N:,} orders with 2 referencing tables ({N:,} and {N // 10:,} rows), "
              f"{CLIENTS} clients inserting an order and a line per transaction throughout "
              f"({os.cpu_count()} cores):")
        print()
        print("| step | wall time | rows/s | client tx/s | longest client transaction | WAL written | tables with indexes after it |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        print(f"| (before) | | | {before_tps:.0f} | {before_max * 1000:.0f} ms | | {size0 / 2**20:,.0f} MiB |")
        for name, t0, t1, rows, wal, size in steps:
            tps, longest = clients.during(t0, t1)
            rate = f"{rows / (t1 - t0):,.0f}" if rows else ""
            print(f"| {name} | {t1 - t0:.1f} s | {rate} | {tps:.0f} | {longest * 1000:.0f} ms | {wal / 2**20:,.0f} MiB | {size / 2**20:,.0f} MiB |")
        tps, longest = clients.during(steps[-1][2], base1)
        print(f"| (after) | | | {tps:.0f} | {longest * 1000:.0f} ms | | |")
        with c.connect() as conn:
            if ABANDON:
                left = conn.execute("SELECT count(*) FROM pg_attribute WHERE attrelid IN ('orders'::regclass, 'lines'::regclass, "
                                    "'refunds'::regclass) AND attname LIKE '%shard_id%' AND NOT attisdropped").fetchone()[0]
                print(f"\nabandoned: {left} columns of the conversion left")
                return
            total, distinct = conn.execute("SELECT count(*), count(DISTINCT id) FROM orders").fetchone()
            lost = conn.execute("SELECT count(*) FROM lines l LEFT JOIN orders o ON o.id = l.order_id "
                                "WHERE o.id IS NULL").fetchone()[0]
        print(f"\norders: {total:,} rows, {distinct:,} distinct ids; lines without their order: {lost}")
    finally:
        c.destroy()


if __name__ == "__main__":
    main()
