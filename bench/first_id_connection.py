"""A new connection's first id against nextval()'s first call in a new connection (issue 57):
bench/first_id_connection.sh runs it on its throwaway cluster (PGHOST, PGPORT).

  --rounds N      N rounds; in each, three new connections, one per statement, in a rotating
                  order: SELECT 1, SELECT nextval('n'), SELECT next_shard_id('s', 1) (sequences
                  other connections used already); the first call's and the second call's time
  --after-restart one round, right after a restart: the first id of the sequence since the start
                  (its guard fresh: its data floor is read) against nextval()'s first call
Times are the client's (psycopg, loopback): the statement's round trip, the same for each."""
import argparse
import os
import statistics
import time

import psycopg

STATEMENTS = {"SELECT 1": "SELECT 1", "nextval()": "SELECT nextval('n')",
              "next_shard_id()": "SELECT next_shard_id('s', 1)"}


def first_and_second(sql):
    with psycopg.connect(host=os.environ["PGHOST"], port=os.environ["PGPORT"], dbname="postgres",
                         user=os.environ.get("PGUSER", "postgres"), autocommit=True) as c:
        t0 = time.perf_counter()
        c.execute(sql).fetchone()
        t1 = time.perf_counter()
        c.execute(sql).fetchone()
        t2 = time.perf_counter()
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--after-restart", action="store_true")
    args = ap.parse_args()
    if args.after_restart:
        n, _ = first_and_second("SELECT nextval('n')")
        s, _ = first_and_second("SELECT next_shard_id('s', 1)")
        print(f"after-restart {n:.3f} {s:.3f}")
        return
    names = list(STATEMENTS)
    times = {k: [] for k in names}
    for r in range(args.rounds):
        for k in names[r % 3:] + names[:r % 3]:
            times[k].append(first_and_second(STATEMENTS[k]))
    print("| statement | first call in a new connection (ms, median) | second call (ms) |")
    print("|---|---:|---:|")
    for k in names:
        print(f"| `{STATEMENTS[k]}` | {statistics.median(a for a, _ in times[k]):.3f} | "
              f"{statistics.median(b for _, b in times[k]):.3f} |")
    ours = statistics.median(a for a, _ in times["next_shard_id()"])
    theirs = statistics.median(a for a, _ in times["nextval()"])
    bound = max(2 * theirs, theirs + 1.0)
    print(f"\nnext_shard_id's first call {ours:.3f} ms, nextval's {theirs:.3f} ms: {ours / theirs:.2f}x, "
          f"+{ours - theirs:.3f} ms; issue 57's bound max(2x, +1 ms) = {bound:.3f} ms: "
          f"{'within' if ours <= bound else 'above'} it ({args.rounds} rounds)")


if __name__ == "__main__":
    main()
