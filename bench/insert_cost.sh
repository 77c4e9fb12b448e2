#!/usr/bin/env bash
# Instructions per INSERT (issue 40: where does a timed insert's gap against bigserial go?), in the
# backends pgbench gets: a server runs under callgrind (every backend it forks writes its own
# profile), a first backend draws each table's first id (the guard's data floor, the origin), then
# one new backend per table and count runs a prepared INSERT N and 2N times. The figure is
# marginal ((2N run - N run) / N), so connection start-up, catalog loads and the backend's first
# id cancel out; every statement is its own transaction, as in pgbench. Tables: next_shard_id('s',
# 1), bigserial, an identity column, and the naive port in C without a guard (bench/reference_ids.c:
# what calling any C function from a library costs).
#   bench/insert_cost.sh                N=2000, the build installed in the selected PostgreSQL
#   INSCOST_CACHESIM=1 bench/insert_cost.sh
#       also callgrind's cache and branch simulation (the host's cache sizes; a model, since this
#       VM has no hardware counters): first-level instruction and data misses, and mispredicted
#       branches, per INSERT
#   INSCOST_TOP=20                      functions in the profile of the differences (default 20)
# Prints one line per table, then the functions whose own (exclusive) count per INSERT differs
# most from bigserial's. Until 0.7.0 this ran a single-user backend, whose first id always reads
# the data floor (its shared memory is new), and that read left the backend's local lock table
# larger, so that every later transaction end scanned more of it (LockReleaseAll's
# hash_seq_search: 214 instructions a call against 98): about 500 instructions per INSERT that
# pgbench's backends, which find the guard settled, do not pay.
# (WAL per insert, the other half of the question, is bench/insert_gap.sh's.)
source "$(dirname "$0")/../scripts/lib.sh"
stop_clusters_at_exit
N="${N:-2000}"
TOP="${INSCOST_TOP:-20}"
start_cluster inscost yes "jit = off" >/dev/null
dir="$RUN_DIR/inscost"
build_reference_ids "$dir/reference"
q -c "CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE s" -c "CREATE SEQUENCE r" \
    -c "CREATE TABLE t_shard (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 1), v int)" \
    -c "CREATE TABLE t_serial (id bigserial PRIMARY KEY, v int)" \
    -c "CREATE TABLE t_ident (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int)" \
    -c "CREATE FUNCTION reference_unguarded_id(regclass, integer) RETURNS bigint VOLATILE STRICT
        LANGUAGE c AS '$dir/reference/reference_ids.so', 'reference_unguarded_id'" \
    -c "CREATE TABLE t_naive_c (id bigint PRIMARY KEY DEFAULT reference_unguarded_id('r', 1), v int)"
as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
mkdir -p "$dir/cg"
chown postgres: "$dir/cg" 2>/dev/null || true
sim=""
[ -z "${INSCOST_CACHESIM:-}" ] || sim="--cache-sim=yes --branch-sim=yes"
as_pg bash -c "valgrind --tool=callgrind $sim --callgrind-out-file=$dir/cg/cg.%p \
    $PG_BIN/postgres -D $dir/data >$dir/valgrind.log 2>&1 &"
for _ in $(seq 1 120); do pg_isready -q -h "$dir" -p "$PGPORT" && break; sleep 1; done
say "instructions per prepared INSERT (callgrind, server backends, $N and $((2 * N)) statements, PostgreSQL $PG_MAJOR)"
q -c "INSERT INTO t_shard (v) VALUES (0)" -c "INSERT INTO t_serial (v) VALUES (0)" \
    -c "INSERT INTO t_ident (v) VALUES (0)" -c "INSERT INTO t_naive_c (v) VALUES (0)"
for t in t_shard t_serial t_ident t_naive_c; do
    for n in "$N" $((2 * N)); do
        {
            echo "SELECT pg_backend_pid() AS pid \\gset"
            echo "\\o $dir/$t-$n.pid"
            echo "SELECT :pid;"
            echo "\\o"
            echo "PREPARE p AS INSERT INTO $t (v) VALUES (1);"
            for _ in $(seq 1 "$n"); do echo "EXECUTE p;"; done
        } >"$dir/$t-$n.sql"
        q -f "$dir/$t-$n.sql" >/dev/null
    done
done
as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
for t in t_shard t_serial t_ident t_naive_c; do
    for n in "$N" $((2 * N)); do
        profile="$dir/cg/cg.$(tr -d ' \n' <"$dir/$t-$n.pid")"
        callgrind_annotate --threshold=100 "$profile" >"$dir/$t-$n.annotate" 2>/dev/null
        callgrind_annotate --inclusive=yes --threshold=100 "$profile" \
            >"$dir/$t-$n.inclusive" 2>/dev/null
    done
done
python3 - "$dir" "$N" "$TOP" <<'EOF'
import re, sys
d, n, top = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tables = ("t_shard", "t_serial", "t_ident", "t_naive_c")
def totals(t, k):
    lines = open(f"{d}/cg/cg.{open(f'{d}/{t}-{k}.pid').read().strip()}").read().splitlines()
    events = next(l.split()[1:] for l in lines if l.startswith("events:"))
    summary = next(l.split()[1:] for l in lines if l.startswith(("summary:", "totals:")))
    return dict(zip(events, map(int, summary)))
def functions(t, k, kind="annotate"):
    p, started = {}, False
    for l in open(f"{d}/{t}-{k}.{kind}"):
        if "file:function" in l:
            started = True
            continue
        m, v = re.search(r"(\S+):(\S+) \[", l), re.match(r"\s*([0-9,]+)", l)
        if started and m and v:
            p[m.group(2)] = p.get(m.group(2), 0) + int(v.group(1).replace(",", ""))
    return p
names = {"I1mr": "I1 misses", "D1mr": "D1 read misses", "D1mw": "D1 write misses",
         "Bcm": "mispredicted cond. branches", "Bim": "mispredicted ind. branches"}
marginal = {}
for t in tables:
    a, b = totals(t, n), totals(t, 2 * n)
    per = {e: (b[e] - a[e]) / n for e in a}
    extra = "".join(f", {names[e]} {per[e]:,.1f}" for e in names if e in per)
    print(f"  {t}: {per['Ir']:,.0f} instructions per INSERT{extra}")
    fa, fb = functions(t, n), functions(t, 2 * n)
    marginal[t] = {f: (fb.get(f, 0) - fa.get(f, 0)) / n for f in set(fa) | set(fb)}
s = marginal["t_serial"]
keys = sorted(set().union(*marginal.values()),
              key=lambda f: -max(abs(marginal[t].get(f, 0) - s.get(f, 0)) for t in ("t_shard", "t_naive_c")))
print(f"\nOwn instructions per INSERT against bigserial's, the {top} functions that differ most:\n")
print("| function | bigserial | next_shard_id | naive C port |")
print("|---|---:|---:|---:|")
for f in keys[:top]:
    print(f"| `{f}` | {s.get(f, 0):,.1f} | {marginal['t_shard'].get(f, 0) - s.get(f, 0):+,.1f} | "
          f"{marginal['t_naive_c'].get(f, 0) - s.get(f, 0):+,.1f} |")
# The same inserts by phase, inclusive (a function with everything it calls): unlike the totals
# above, which move by some hundreds of instructions between backends (a hash table's size, a
# log line), these repeat, and they say which part of an insert a DEFAULT makes dearer.
draws = {"t_shard": "next_shard_id_wrapper", "t_serial": "nextval_oid",
         "t_ident": "ExecEvalNextValueExpr", "t_naive_c": "reference_unguarded_id"}
phases = [("executor start (the plan's expressions built)", lambda t: "standard_ExecutorStart"),
          ("of which `fmgr_info` (the function looked up)", lambda t: "fmgr_info"),
          ("executor run (the row made and stored)", lambda t: "standard_ExecutorRun"),
          ("of which the DEFAULT's function", lambda t: draws[t]),
          ("commit", lambda t: "CommitTransactionCommand")]
inclusive = {}
for t in tables:
    fa, fb = functions(t, n, "inclusive"), functions(t, 2 * n, "inclusive")
    inclusive[t] = {f: (fb.get(f, 0) - fa.get(f, 0)) / n for f in set(fa) | set(fb)}
print("\nInstructions per INSERT by phase, inclusive (against bigserial's in brackets):\n")
print("| phase | bigserial | identity | naive C port | next_shard_id |")
print("|---|---:|---:|---:|---:|")
for label, name in phases:
    base = inclusive["t_serial"].get(name("t_serial"), 0)
    cells = [f"{base:,.0f}"] + [
        f"{inclusive[t].get(name(t), 0):,.0f} ({inclusive[t].get(name(t), 0) - base:+,.0f})"
        for t in ("t_ident", "t_naive_c", "t_shard")]
    print(f"| {label} | " + " | ".join(cells) + " |")
EOF
