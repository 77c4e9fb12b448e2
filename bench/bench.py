#!/usr/bin/env python3
"""pg_shard_id benchmarks: run by scripts/bench.sh against a throwaway cluster (PGHOST etc. set).

Every figure is the median of 3 runs, measured in this one run on this one machine. Writes a JSON
file of results; report.py turns it into docs/benchmarks.md and the chart.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import time

from benchlib import alternated_pairs, clock_read_ns, insert_script, median_ci, pgbench_tps, psql, timed

SMOKE = "--smoke" in sys.argv
OUT = sys.argv[sys.argv.index("--out") + 1]
N_GEN = 20_000 if SMOKE else 2_000_000
PGBENCH_SECONDS = 1 if SMOKE else 10
# BENCH_INSERT_ROUNDS and BENCH_CLOSE_PAIRS shorten a full run (the report names what was used)
INSERT_ROUNDS = 1 if SMOKE else int(os.environ.get("BENCH_INSERT_ROUNDS", 5))
# next_shard_id against bigserial alone, in short alternating runs: enough pairs that the
# confidence interval of the median ratio is narrower than the difference worth claiming
CLOSE_PAIRS = 2 if SMOKE else int(os.environ.get("BENCH_CLOSE_PAIRS", 16))
CLOSE_SECONDS = 1 if SMOKE else 5
N_SCALE = 20_000 if SMOKE else 5_000_000
N_DECODE = 20_000 if SMOKE else 2_000_000
RUNS = 3


def median_of(f):
    return statistics.median(f() for _ in range(RUNS))


def lease_records(since_lsn):
    """Lease records (WAL records of pg_shard_id's resource manager, id 211) written since
    `since_lsn`, counted by pg_waldump in this cluster's WAL: each is one extension of the lease
    (a file write, a WAL record and a flush)."""
    now_lsn = psql("SELECT pg_current_wal_insert_lsn()")
    if since_lsn == now_lsn:
        return 0
    psql("SELECT pg_switch_wal()")  # writes and flushes the WAL up to now_lsn, for pg_waldump to read
    run = subprocess.run(["pg_waldump", "--stats=record", "-p", os.path.join(os.environ["PGHOST"], "data", "pg_wal"),
                          "-s", since_lsn, "-e", now_lsn], capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"pg_waldump failed: {run.stderr.strip()}")
    out = run.stdout
    return sum(int(m) for m in re.findall(r"^custom211/\S+(?: \(\w+\))?\s+(\d+)", out, re.M))


def lease_rate(label, since_lsn, started):
    seconds = time.monotonic() - started
    n = lease_records(since_lsn)
    results.setdefault("lease_writes", []).append(
        {"part": label, "records": n, "seconds": seconds, "per_second": n / seconds})
    print(f"  lease writes during {label}: {n} in {seconds:.0f} s ({n / seconds:.2f}/s)", flush=True)


results = {"smoke": SMOKE, "n_gen": N_GEN, "pgbench_seconds": PGBENCH_SECONDS,
           "insert_rounds": INSERT_ROUNDS, "close_pairs": CLOSE_PAIRS, "close_seconds": CLOSE_SECONDS,
           "n_scale": N_SCALE,
           "n_decode": N_DECODE}
results["machine"] = {
    "cpu": subprocess.run("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2", shell=True,
                          capture_output=True, text=True).stdout.strip(),
    "cores": os.cpu_count(),
    "postgres": psql("SHOW server_version"),
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
}

# 1. Generation rate, one session
GENERATORS = [
    ("nextval()", "nextval('plain_seq')", ""),
    ("next_shard_id, wait", "next_shard_id('shard_seq', 5)", "SET pg_shard_id.overflow = wait;"),
    # its own sequence: borrow leaves its guard ahead of the clock, which wait would then sit out
    ("next_shard_id, borrow", "next_shard_id('borrow_seq', 5)", "SET pg_shard_id.overflow = borrow;"),
    ("Instagram PL/pgSQL next_id()", "insta5.next_id()", ""),
    ("same formula, inline SQL",
     "((floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1314220021721) << 23)"
     " | (5 << 10) | (nextval('inline_seq') % 1024)", ""),
    ("gen_random_uuid()", "gen_random_uuid()", ""),
]
# PostgreSQL 18 has uuidv7(), the time-ordered generator users weigh pg_shard_id against
HAS_UUIDV7 = int(psql("SHOW server_version_num")) >= 180000
if HAS_UUIDV7:
    GENERATORS.append(("uuidv7()", "uuidv7()", ""))
# The rows come from generate_series in a select list, which streams them (a ProjectSet node). In
# FROM, it would first store all N_GEN rows in a tuplestore and only then call the generator: time
# that every generator pays alike, which made `wait` look slower than the layout's cap (measured:
# 2.16 s for 2,000,000 ids whose timestamps spanned 1,955 ms).
ROWS = f"(SELECT generate_series(1, {N_GEN})) AS g"
generation = []
lease_since, lease_started = psql("SELECT pg_current_wal_insert_lsn()"), time.monotonic()
for name, expr, setup in GENERATORS:
    seconds = median_of(lambda: timed(f"SELECT count({expr}) FROM {ROWS}", setup))
    dups = int(psql(f"{setup} SELECT count(*) - count(DISTINCT x) FROM (SELECT {expr} AS x FROM {ROWS}) s"))
    generation.append({"name": name, "seconds": seconds, "rate": N_GEN / seconds, "duplicates": dups})
    print(f"  {name:32} {N_GEN / seconds / 1e6:6.2f} M ids/s  {dups} duplicates", flush=True)
lease_rate("generation (one session)", lease_since, lease_started)
base = generation[0]["rate"]
for g in generation:
    g["ratio_to_nextval"] = g["rate"] / base
    g["ns_per_id"] = 1e9 / g["rate"]
# What one read of the wall clock costs on this machine (bench/clock_cost.c, the call the extension
# makes per id): no generator that stamps each id with the current millisecond can cost less
# above nextval() than that.
results["clock_read_ns"] = clock_read_ns(os.environ["PGHOST"], RUNS)
print(f"  one clock_gettime(CLOCK_REALTIME): {results['clock_read_ns']:.1f} ns", flush=True)
# next_shard_id's own cost: what a call costs beyond the nextval() it makes (borrow: not capped)
borrow = next(g for g in generation if g["name"] == "next_shard_id, borrow")
generation.insert(3, {"name": "next_shard_id's own cost (borrow − nextval)",
                      "overhead_ns": borrow["ns_per_id"] - generation[0]["ns_per_id"]})
# the best ratio to nextval() any generator can reach that reads the clock once per id
results["clock_bound_ratio"] = generation[0]["ns_per_id"] / (generation[0]["ns_per_id"] + results["clock_read_ns"])
results["generation"] = generation

# 1b. Two sessions on one sequence at once: ids/s of both together, wall time of the pair
TWO_SESSIONS = [GENERATORS[0], GENERATORS[1], GENERATORS[2]]


def two_sessions(expr, setup):
    sql = f"{setup}\nSELECT count({expr}) FROM {ROWS};\n"
    start = time.perf_counter()
    procs = [subprocess.Popen(["psql", "-X", "-q", "-At", "-d", "bench", "-v", "ON_ERROR_STOP=1"],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
             for _ in range(2)]
    for p in procs:
        p.stdin.write(sql)
        p.stdin.close()
    if any(p.wait() for p in procs):
        raise SystemExit(f"two sessions of {expr} failed")
    return time.perf_counter() - start


pairs = []
for name, expr, setup in TWO_SESSIONS:
    seconds = median_of(lambda: two_sessions(expr, setup))
    pairs.append({"name": name, "seconds": seconds, "rate": 2 * N_GEN / seconds})
    print(f"  2 sessions: {name:20} {2 * N_GEN / seconds / 1e6:6.2f} M ids/s", flush=True)
for g in pairs:
    g["ratio_to_nextval"] = g["rate"] / pairs[0]["rate"]
results["generation_two_sessions"] = pairs

# 2. Insert throughput with pgbench, 2 clients
lease_since, lease_started = psql("SELECT pg_current_wal_insert_lsn()"), time.monotonic()
TABLES = [
    ("bigserial", "id bigserial PRIMARY KEY"),
    ("next_shard_id", "id bigint PRIMARY KEY DEFAULT next_shard_id('tps_seq', 5)"),
    ("identity column", "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY"),
    ("Instagram PL/pgSQL next_id()", "id bigint PRIMARY KEY DEFAULT insta5.next_id()"),
    ("gen_random_uuid()", "id uuid PRIMARY KEY DEFAULT gen_random_uuid()"),
]
if HAS_UUIDV7:
    TABLES.append(("uuidv7()", "id uuid PRIMARY KEY DEFAULT uuidv7()"))
psql("CREATE SEQUENCE IF NOT EXISTS tps_seq")
# every run starts from an empty table, so autovacuum has nothing to do but add noise
scripts = [insert_script(f"tps_{i}", column) for i, (_, column) in enumerate(TABLES)]


# Rounds: each runs every generator once, one after the other, so that drift in the machine hits
# all of them alike. A generator's ratio to bigserial is taken within each round (paired), and the
# report gives the median of those ratios with their range: the range says how far to trust it.
runs = [[] for _ in TABLES]
for _ in range(INSERT_ROUNDS):
    for i, (table, script) in enumerate(scripts):
        runs[i].append(pgbench_tps(table, script, PGBENCH_SECONDS))
inserts = []
for (name, _), tps_runs in zip(TABLES, runs):
    ratios = [t / b for t, b in zip(tps_runs, runs[0])]
    inserts.append({"name": name, "tps": statistics.median(tps_runs), "runs": tps_runs,
                    "ratio_to_bigserial": statistics.median(ratios),
                    "ratio_range": [min(ratios), max(ratios)]})
    print(f"  {name:32} {inserts[-1]['tps']:10.0f} tps  x bigserial {inserts[-1]['ratio_to_bigserial']:.3f} "
          f"({min(ratios):.3f}-{max(ratios):.3f})", flush=True)
results["inserts"] = inserts

# 2b. next_shard_id against bigserial closely: pairs of short runs, the order alternating from
# pair to pair (A B, B A, ...) so that a drift of the machine within a pair cancels out. Once with
# the simple protocol, where PostgreSQL reads and plans the column's DEFAULT for every INSERT,
# and once with prepared statements, as most drivers send them, where the plan is kept.
close = []
for protocol in ("simple", "prepared"):
    pair_ratios = alternated_pairs(scripts[0], scripts[1], CLOSE_PAIRS, CLOSE_SECONDS, protocol)
    low, high, coverage = median_ci(pair_ratios)
    close.append({"name": f"{TABLES[1][0]}, {protocol} protocol", "protocol": protocol,
                  "pairs": CLOSE_PAIRS, "seconds": CLOSE_SECONDS, "ratios": pair_ratios,
                  "ratio_to_bigserial": statistics.median(pair_ratios), "ci": [low, high],
                  "ci_coverage": coverage})
    print(f"  {TABLES[1][0]} x bigserial, {protocol}, {CLOSE_PAIRS} pairs: "
          f"{statistics.median(pair_ratios):.3f} ({coverage:.0%} CI {low:.3f}-{high:.3f})", flush=True)
results["inserts_close"] = close
lease_rate("inserts (pgbench, every table)", lease_since, lease_started)

# 3. Scale: N_SCALE rows per generator, primary key size and load time
scale = []
for i, (name, column) in enumerate(TABLES):
    table = f"scale_{i}"

    def load():
        psql(f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} ({column}, payload int)")
        return timed(f"INSERT INTO {table} (payload) SELECT 1 FROM generate_series(1, {N_SCALE})")

    seconds = median_of(load)
    index_bytes = int(psql(f"SELECT pg_relation_size('{table}_pkey')"))
    scale.append({"name": name, "seconds": seconds, "index_bytes": index_bytes})
    print(f"  {name:32} {seconds:6.2f} s  pkey {index_bytes / 2**20:6.1f} MiB", flush=True)
    psql(f"DROP TABLE {table}")
results["scale"] = scale

# 4. Decode: the extension's function against the same arithmetic inline in SQL. The epoch and the
# timestamp field's shift are read from the extension, not written here a second time.
epoch_ms = int(psql("SELECT (extract(epoch FROM epoch) * 1000)::bigint FROM pg_shard_id_info()"))
shift = int(psql("SELECT log(2, shard_id_compose(epoch + interval '1 ms', 0, 0))::int FROM pg_shard_id_info()"))
first = 1 << 40
DECODERS = [
    ("shard_id_extract_timestamp(id)", "shard_id_extract_timestamp(g)"),
    ("inline SQL arithmetic",
     f"to_timestamp(((g >> {shift}) + {epoch_ms}) / 1000.0)"),
]
decode = []
for name, expr in DECODERS:
    seconds = median_of(lambda: timed(
        f"SELECT count({expr}) FROM generate_series({first}::bigint, {first + N_DECODE - 1}::bigint) g"))
    decode.append({"name": name, "seconds": seconds, "rate": N_DECODE / seconds})
    print(f"  {name:32} {N_DECODE / seconds / 1e6:6.2f} M/s", flush=True)
for d in decode:
    d["ratio_to_inline"] = d["rate"] / decode[1]["rate"]
results["decode"] = decode

# 5. Masked ids, one session (one core): masking and unmasking against the plain shortcode, over
# the same ids (scripts/bench.sh writes the cluster's key file, pg_shard_id.keys)
MASKERS = [
    ("shard_id_to_shortcode(id)", "shard_id_to_shortcode(g)"),
    ("shard_id_mask(id, tweak)", "shard_id_mask(g, 'photos')"),
    ("shard_id_unmask(masked, tweak)", "shard_id_unmask(g, 'photos')"),
    ("shard_id_mask_shortcode(id, tweak)", "shard_id_mask_shortcode(g, 'photos')"),
]
mask = []
for name, expr in MASKERS:
    seconds = median_of(lambda: timed(
        f"SELECT count({expr}) FROM generate_series({first}::bigint, {first + N_DECODE - 1}::bigint) g"))
    mask.append({"name": name, "seconds": seconds, "rate": N_DECODE / seconds})
    print(f"  {name:36} {N_DECODE / seconds / 1e6:6.2f} M/s", flush=True)
for m in mask:
    m["ratio_to_shortcode"] = m["rate"] / mask[0]["rate"]
results["mask"] = mask

with open(OUT, "w") as f:
    json.dump(results, f, indent=2)
