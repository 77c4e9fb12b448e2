"""What bench.py and speed.py share: queries, timings and the statistics of their reports. Every
function works on the cluster the environment names (PGHOST, PGPORT, PGUSER), database `bench`
unless told otherwise."""
import os
import re
import shutil
import statistics
import subprocess


def psql(sql, db="bench"):
    return subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql],
                          check=True, capture_output=True, text=True).stdout.strip()


def timed(sql, setup="", db="bench"):
    """Wall time in seconds of `sql` in a fresh session, as psql's \\timing gives it (EXPLAIN
    ANALYZE would add instrumentation cost)."""
    script = f"{setup}\n\\timing on\n{sql};\n"
    out = subprocess.run(["psql", "-X", "-q", "-d", db, "-v", "ON_ERROR_STOP=1"], input=script,
                         check=True, capture_output=True, text=True).stdout
    return float(re.findall(r"Time: ([0-9.]+) ms", out)[-1]) / 1000.0


def median_ci(values, level=0.95):
    """Distribution-free confidence interval of the median: the order statistics x(k) and
    x(n+1-k) for the largest k with P(Binomial(n, 1/2) < k) <= (1 - level) / 2. Assumes only
    that the values are independent draws of one distribution; returns (low, high, coverage)."""
    from math import comb
    xs, n = sorted(values), len(values)
    below = lambda k: sum(comb(n, i) for i in range(k)) / 2 ** n  # P(B < k)
    k = max([k for k in range(1, n // 2 + 1) if below(k) <= (1 - level) / 2], default=1)
    return xs[k - 1], xs[n - k], 1 - 2 * below(k)


def pgbench_tps(table, script, seconds, protocol="simple", db="bench"):
    """Inserts per second of pgbench running `script` (one INSERT into `table`) with 2 clients;
    every run starts alike: an empty table and no checkpoint debt."""
    psql(f"TRUNCATE {table}; CHECKPOINT", db)
    out = subprocess.run(["pgbench", "-n", "-M", protocol, "-c", "2", "-j", "2", "-T", str(seconds), "-f", script,
                          db], check=True, capture_output=True, text=True).stdout
    return float(re.search(r"tps = ([0-9.]+)", out).group(1))


def insert_script(table, column):
    """(Re)creates `table` with the id column `column` and writes the pgbench script that inserts
    one row into it; returns (table, script path). Autovacuum is off, so that it adds no noise."""
    psql(f"DROP TABLE IF EXISTS {table}; "
         f"CREATE TABLE {table} ({column}, payload int) WITH (autovacuum_enabled = off)")
    script = os.path.join(os.environ["PGHOST"], f"{table}.sql")
    with open(script, "w") as f:
        f.write(f"INSERT INTO {table} DEFAULT VALUES;\n")
    return table, script


def alternated_pairs(a, b, pairs, seconds, protocol):
    """pgbench inserts of b against a in `pairs` pairs of short runs, the order alternating from pair
    to pair (a b, b a, ...) so that a drift of the machine within a pair cancels out. a and b are
    insert_script() results; returns the ratios tps(b) / tps(a), one per pair."""
    ratios = []
    for k in range(pairs):
        tps = {}
        for side, target in ((("a", a), ("b", b)) if k % 2 == 0 else (("b", b), ("a", a))):
            tps[side] = pgbench_tps(*target, seconds=seconds, protocol=protocol)
        ratios.append(tps["b"] / tps["a"])
    return ratios


def interleaved_latencies(targets, seconds, protocol="prepared", db="bench", clients=2):
    """One pgbench run, `clients` clients (2 unless told), in which every transaction is an insert into one of `targets`
    (insert_script() results), chosen at random with equal weights: all of them meet the same
    machine at the same moments, so a drift of the machine cancels out within the run. Returns
    the mean latency in microseconds of each target's inserts, from pgbench's per-transaction log
    (its summary rounds latencies to a microsecond)."""
    tables = ", ".join(table for table, _ in targets)
    psql(f"TRUNCATE {tables}; CHECKPOINT", db)
    logs = os.path.join(os.environ["PGHOST"], "pgbench-log")
    shutil.rmtree(logs, ignore_errors=True)
    os.makedirs(logs)
    scripts = [arg for _, script in targets for arg in ("-f", f"{script}@1")]
    subprocess.run(["pgbench", "-n", "-M", protocol, "-c", str(clients), "-j", str(clients), "-T", str(seconds), "-l",
                    "--log-prefix", os.path.join(logs, "log"), *scripts, db],
                   check=True, capture_output=True, text=True)
    # a log line: client, transaction, latency (us), script number, epoch seconds, microseconds
    latencies = [[] for _ in targets]
    for name in os.listdir(logs):
        with open(os.path.join(logs, name)) as f:
            for line in f:
                fields = line.split()
                latencies[int(fields[3])].append(int(fields[2]))
    shutil.rmtree(logs)
    return [statistics.mean(values) for values in latencies]


def clock_read_ns(work_dir, runs=3):
    """What one read of the wall clock costs on this machine (bench/clock_cost.c, the call the
    extension makes per id), the median of `runs` runs of 10 million reads."""
    binary = os.path.join(work_dir, "clock_cost")
    subprocess.run(["cc", "-O2", "-o", binary, os.path.join(os.path.dirname(__file__), "clock_cost.c")],
                   check=True)
    return statistics.median(
        float(subprocess.run([binary], check=True, capture_output=True, text=True).stdout) for _ in range(runs))
