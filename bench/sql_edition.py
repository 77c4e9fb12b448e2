"""The SQL edition's cost (issue 56), beside the native extension, Instagram's PL/pgSQL function
(bench/generators.sql), nextval() and, on PostgreSQL 18, uuidv7(), in one run on one server:

* ids per second in one session: SELECT count(f()) FROM generate_series(1, N), best of 3;
* ids per second in 2 sessions at once drawing from one sequence (N each, wall time);
* single-row inserts per second (pgbench -n -c 1 and -c 2, -T seconds each, one table per
  generator: bigint DEFAULT f(), and bigserial), and the ratio to bigserial.

    PG_BIN=... python bench/sql_edition.py [--ids 200000] [--seconds 10]

Run by scripts/bench.sh (its smoke run, in CI, at tiny sizes); its output is the table
docs/managed.md#cost shows."""

import argparse
import os
import re
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "guarantee"))
sys.path.insert(0, os.path.join(REPO, "tests", "sql_edition"))

from pgcluster import PG_BIN, Cluster, as_postgres  # noqa: E402
from conftest import BUILD, build_edition, install_plain  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ids", type=int, default=200000)
    ap.add_argument("--seconds", type=int, default=10)
    args = ap.parse_args()
    build_edition()
    c = Cluster("bench_sql_edition", conf=["max_connections = 20"])
    try:
        install_plain(c, "postgres", BUILD)  # schema ids
        c.sql("CREATE SCHEMA native; CREATE EXTENSION pg_shard_id SCHEMA native")
        c.sql(open(os.path.join(HERE, "generators.sql")).read().split("-- For the same formula")[0])
        major = int(c.one("SHOW server_version_num")) // 10000
        gens = {
            "nextval()": "nextval('plain')",
            "Instagram's PL/pgSQL": "insta5.next_id()",
            "SQL edition": "ids.next_shard_id('sqled', 5)",
            "native edition": "native.next_shard_id('nat', 5)",
        }
        if major >= 18:
            gens["uuidv7()"] = "uuidv7()"
        c.sql("CREATE SEQUENCE plain; CREATE SEQUENCE sqled; CREATE SEQUENCE nat; SELECT ids.shard_id_guard('sqled')")
        print(f"PostgreSQL {c.one('SHOW server_version')}, {os.cpu_count()} cores; {args.ids} ids per run")
        print()
        print("| generator | ids/s, 1 session | ids/s, 2 sessions, one sequence | inserts/s, 1 client | ×bigserial | inserts/s, 2 clients | ×bigserial |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        tables = {"bigserial": "CREATE TABLE t_bigserial (id bigserial PRIMARY KEY, x int)"}
        for i, (name, expr) in enumerate(gens.items()):
            col = "uuid" if name.startswith("uuid") else "bigint"
            tables[name] = f"CREATE TABLE t_{i} (id {col} PRIMARY KEY DEFAULT {expr}, x int)"
        for ddl in tables.values():
            c.sql(ddl)
        inserts = {}
        for name, ddl in tables.items():
            table = ddl.split()[2]
            inserts[name] = [pgbench(c, table, clients, args.seconds) for clients in (1, 2)]
        for name, expr in gens.items():
            one = best_of(3, lambda: timed(c, f"SELECT count({expr}) FROM generate_series(1, {args.ids})"))
            two = best_of(3, lambda: two_sessions(c, expr, args.ids))
            ins1, ins2 = inserts[name]
            b1, b2 = inserts["bigserial"]
            print(f"| {name} | {args.ids / one:,.0f} | {2 * args.ids / two:,.0f} | {ins1:,.0f} | {ins1 / b1:.3f} | {ins2:,.0f} | {ins2 / b2:.3f} |")
        b1, b2 = inserts["bigserial"]
        print(f"| bigserial | | | {b1:,.0f} | 1.000 | {b2:,.0f} | 1.000 |")
    finally:
        c.destroy()


def timed(c, query):
    with c.connect() as conn:
        conn.execute("SELECT 1")
        start = time.perf_counter()
        conn.execute(query)
        return time.perf_counter() - start


def best_of(n, f):
    return min(f() for _ in range(n))


def two_sessions(c, expr, ids):
    conns = [c.connect() for _ in range(2)]
    barrier = threading.Barrier(2)

    def run(conn):
        barrier.wait()
        conn.execute(f"SELECT count({expr}) FROM generate_series(1, {ids})")
    threads = [threading.Thread(target=run, args=(conn,)) for conn in conns]
    start = time.perf_counter()
    [t.start() for t in threads]
    [t.join() for t in threads]
    elapsed = time.perf_counter() - start
    [conn.close() for conn in conns]
    return elapsed


def pgbench(c, table, clients, seconds):
    script = os.path.join(c.dir, f"insert_{table}.sql")
    as_postgres(["sh", "-c", f"echo 'INSERT INTO {table} (x) VALUES (1);' > '{script}'"])
    out = as_postgres([os.path.join(PG_BIN, "pgbench"), "-n", "-h", c.dir, "-p", str(c.port), "-U", "postgres",
                       "-c", str(clients), "-j", str(clients), "-T", str(seconds), "-f", script, "postgres"]).stdout
    return float(re.search(r"tps = ([0-9.]+)", out).group(1))


if __name__ == "__main__":
    main()
