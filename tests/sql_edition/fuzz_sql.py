"""The SQL edition's seeded fuzzer (issue 56): for each seed, a database with the edition (plain
script), 1-3 guarded sequences, and 25 events drawn from the seed: bursts in one statement, 2-6
sessions at once on one sequence, transactions rolled back (their ids remembered), CACHE changed,
the clock stepped back or forward by up to two hours or stopped (libfaketime), clean restarts and
crashes (immediate shutdown), a jump asked for by hand (any role may). The oracle: no id of a sequence stored twice, the ids of each block of 1024 values above those
of the blocks before it, and no id of a rolled-back
transaction handed out again (stored or rolled back), unless the server crashed before any later
transaction committed: PostgreSQL does not write an aborted transaction's WAL at once, so its
nextval() and setval() can be lost in a crash ("make sure that the nextval call has been committed
before" using a value outside the database, the manual on sequence functions), and the edition's
guard is sequences (docs/managed.md#guarantee). The same seeds every CI run (run.sh: 10 from
1); `--soak SECONDS` explores new ones (from the day's number) until the time is up.

    python fuzz_sql.py --seeds 10 --seed 1
"""

import argparse
import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "guarantee"))
sys.path.insert(0, HERE)

from conftest import BUILD, build_edition, install_plain  # noqa: E402
from pgcluster import Cluster  # noqa: E402


def run_seed(cluster, seed, log):
    rng = random.Random(seed)
    db = f"fuzz_{seed}"
    cluster.set_clock(0)
    cluster.sql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    cluster.sql(f"CREATE DATABASE {db}")
    install_plain(cluster, db, BUILD)
    seqs = [f"s{i}" for i in range(rng.randint(1, 3))]
    for s in seqs:
        cluster.sql(f"CREATE SEQUENCE {s} CACHE {rng.choice([1, 1, 8, 50])}; SELECT ids.shard_id_guard('{s}')", db)
    # (no unique index: the oracle counts; n: the value the id was made from)
    cluster.sql("CREATE TABLE stored (id bigint, seq text, n bigint)", db)
    rolled = []     # ids of rolled-back transactions that no crash can have taken back
    pending = []    # ids of rolled-back transactions with no commit since

    def draw_into(conn, seq, count):
        conn.execute("INSERT INTO stored SELECT ids.next_shard_id(%s, 7), %s, currval(%s) FROM generate_series(1, %s)",
                     (seq, seq, seq, count))

    def committed():
        rolled.extend(pending)  # (a commit flushes the WAL: the rolled-back draws are durable)
        pending.clear()

    for step in range(25):
        event = rng.choice(["burst", "burst", "sessions", "rollback", "clock", "clock", "frozen", "restart", "crash",
                            "cache", "jump"])
        seq = rng.choice(seqs)
        if event == "burst":
            with cluster.connect(db) as conn:
                draw_into(conn, seq, rng.randint(100, 20000))
            committed()
        elif event == "sessions":
            errors = []

            def worker(count):
                try:
                    with cluster.connect(db) as conn:
                        for _ in range(3):
                            draw_into(conn, seq, count)
                except Exception as e:  # noqa: BLE001
                    errors.append(e)
            threads = [threading.Thread(target=worker, args=(rng.randint(200, 3000),)) for _ in range(rng.randint(2, 6))]
            [t.start() for t in threads]
            [t.join() for t in threads]
            if errors:
                raise errors[0]
            committed()
        elif event == "rollback":
            with cluster.connect(db, autocommit=False) as conn:
                pending += [(seq, r[0]) for r in conn.execute("SELECT ids.next_shard_id(%s, 7) FROM generate_series(1, %s)",
                                                              (seq, rng.randint(10, 5000))).fetchall()]
                conn.rollback()
        elif event == "clock":
            cluster.set_clock(rng.randint(-7200, 7200))
        elif event == "frozen":
            frozen_at = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() + rng.randint(-3600, 3600)))
            with open(cluster.clock_file + ".tmp", "w") as f:
                f.write(frozen_at + "\n")
            os.chmod(cluster.clock_file + ".tmp", 0o644)
            os.replace(cluster.clock_file + ".tmp", cluster.clock_file)
        elif event in ("restart", "crash"):
            cluster.restart("immediate" if event == "crash" else "fast")
            if event == "restart":
                committed()  # (a clean shutdown writes all WAL)
            else:
                pending.clear()
        elif event == "jump":  # (anyone may ask for one)
            cluster.sql(f"SELECT ids._shard_id_jump('{seq}')", db)
        elif event == "cache":
            cluster.sql(f"ALTER SEQUENCE {seq} CACHE {rng.choice([1, 2, 32, 100])}", db)
            committed()
        log.append(event)
    committed()
    cluster.set_clock(0)
    with cluster.connect(db) as conn:
        # (ids are unique per sequence: two sequences' DEFAULTs in one shard make the same ids, as
        # the native edition's and Instagram's do; each table has its own)
        total, distinct = conn.execute("SELECT count(*), count(DISTINCT (seq, id)) FROM stored").fetchone()
        conn.execute("CREATE TEMP TABLE rolled (seq text, id bigint)")
        with conn.cursor().copy("COPY rolled FROM STDIN") as copy:
            for r in rolled:
                copy.write_row(r)
        again = conn.execute("SELECT count(*) FROM rolled r JOIN stored s USING (seq, id)").fetchone()[0]
        # an id is its value n plus 1024 times its epoch's offset, which a later block never has
        # smaller (generate.sql): every id of a block of 1024 values is below every id of a later
        # one (within a block, sessions that read different epochs may interleave)
        back = conn.execute("SELECT count(*) FROM (SELECT mn <= lag(mx) OVER (PARTITION BY seq ORDER BY blk) AS b "
                            "FROM (SELECT seq, n >> 10 AS blk, min(id) AS mn, max(id) AS mx FROM stored GROUP BY 1, 2) g) x "
                            "WHERE b").fetchone()[0]
    cluster.sql(f"DROP DATABASE {db} WITH (FORCE)")
    problems = []
    if total != distinct:
        problems.append(f"{total - distinct} ids stored twice (of {total})")
    if back:
        problems.append(f"{back} blocks of values with an id below one of an earlier block")
    if again or len(set(rolled)) != len(rolled):
        problems.append(f"{again} rolled-back ids stored later, {len(rolled) - len(set(rolled))} rolled back twice")
    return total, problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--soak", type=int, default=0)
    args = parser.parse_args()
    build_edition()
    cluster = Cluster("sqled_fuzz", preload=False, fake_clock=True)
    passed = failed = 0
    try:
        if args.soak:
            start, seed = time.monotonic(), int(time.time() // 86400) * 1000
            seeds = iter(lambda: None, 0)
        else:
            seeds = range(args.seed, args.seed + args.seeds)
        for s in seeds:
            if args.soak:
                if time.monotonic() - start > args.soak:
                    break
                seed += 1
                s = seed
            log = []
            total, problems = run_seed(cluster, s, log)
            if problems:
                failed += 1
                print(f"seed {s}: FAILED: {'; '.join(problems)} (events: {' '.join(log)})", flush=True)
            else:
                passed += 1
                print(f"seed {s}: ok, {total} ids stored ({' '.join(log)})", flush=True)
    finally:
        cluster.destroy()
    print(f"fuzz_sql: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
