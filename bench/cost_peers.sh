#!/usr/bin/env bash
# Instructions per id of nextval(), pgEdge's snowflake.nextval() and next_shard_id side by side
# (issue 40), counted exactly as bench/cost_gate.sh counts: callgrind, a single-user backend,
# `-c pg_shard_id.overflow=borrow`, only the instructions inside each generator's C function
# (--toggle-collect: nextval_oid, snowflake_nextval, next_shard_id_wrapper), marginal over N and 2N
# ids ((2N run - N run) / N), so a sequence's first id and start-up cancel out. Each generator runs
# on sequences with CACHE 1, 32 (the recommendation since issue 40's CACHE table) and 1024. pgEdge gets its own sequences (it writes
# snowflake ids into them), snowflake.node = 1.
# Then, from the same runs, the marginal per-id inclusive profile (callgrind_annotate) of pgEdge
# and next_shard_id at CACHE 1: the top functions of each, and the two side by side.
#   bench/cost_peers.sh                  N=20000, the builds installed in the selected PostgreSQL
#   PEERS_IDS=5000 bench/cost_peers.sh   fewer ids (quicker; the counts are per id either way)
#   PEERS_TOP=25                         functions per profile (default 25)
# Builds and installs pgEdge's snowflake first when missing (bench/pgedge.sh). Prints markdown.
# The callgrind files stay in $PG_SHARD_ID_RUN_DIR/peers (default /tmp/pg_shard_id/peers).
source "$(dirname "$0")/../scripts/lib.sh"
source "$REPO/bench/pgedge.sh"
stop_clusters_at_exit
N="${PEERS_IDS:-20000}"
TOP="${PEERS_TOP:-25}"
ensure_pgedge
start_cluster peers yes
stop_cluster peers
dir="$RUN_DIR/peers"
single() { as_pg "$PG_BIN/postgres" --single -D "$dir/data" -c jit=off -c pg_shard_id.overflow=borrow -c snowflake.node=1 postgres "$@"; }
single >/dev/null <<<"CREATE EXTENSION pg_shard_id; CREATE EXTENSION snowflake; CREATE SEQUENCE s; CREATE SEQUENCE s32 CACHE 32; CREATE SEQUENCE s1024 CACHE 1024; CREATE SEQUENCE p; CREATE SEQUENCE p32 CACHE 32; CREATE SEQUENCE p1024 CACHE 1024;"
# the database's first id records this server in _pg_shard_id.origin (1.77 M instructions, once):
# drawn here, so that it is not inside the smaller counted run (as bench/cost_gate.sh does)
single >/dev/null <<<"SELECT next_shard_id('s', 1);"

# count NAME FUNCTION SQL: callgrind of a single-user backend running SQL, collecting only inside
# FUNCTION; writes $dir/NAME.callgrind and its inclusive profile $dir/NAME.annotate
count() {
    local out="$dir/$1.callgrind"
    as_pg valgrind --tool=callgrind --toggle-collect="$2" --callgrind-out-file="$out" \
        "$PG_BIN/postgres" --single -D "$dir/data" -c jit=off -c pg_shard_id.overflow=borrow \
        -c snowflake.node=1 postgres >"$out.log" 2>&1 <<<"$3"
    callgrind_annotate --inclusive=yes --threshold=100 "$out" >"$dir/$1.annotate" 2>/dev/null
    callgrind_annotate --tree=calling --inclusive=yes --threshold=100 "$out" >"$dir/$1.calling" 2>/dev/null
}
# per_id NAME FUNCTION EXPR: runs EXPR N and 2N times (NAME-1, NAME-2)
per_id() {
    count "$1-1" "$2" "SELECT count($3) FROM generate_series(1, $N);"
    count "$1-2" "$2" "SELECT count($3) FROM generate_series(1, $((2 * N)));"
}
say "callgrind, $N and $((2 * N)) ids, PostgreSQL $PG_MAJOR ($("$PG_BIN/postgres" --version))" >&2
per_id nextval-1 nextval_oid "nextval('s')"
per_id pgedge-1 snowflake_nextval "snowflake.nextval('p')"
per_id shard-1 next_shard_id_wrapper "next_shard_id('s', 1)"
per_id nextval-32 nextval_oid "nextval('s32')"
per_id pgedge-32 snowflake_nextval "snowflake.nextval('p32')"
per_id shard-32 next_shard_id_wrapper "next_shard_id('s32', 1)"
per_id nextval-1024 nextval_oid "nextval('s1024')"
per_id pgedge-1024 snowflake_nextval "snowflake.nextval('p1024')"
per_id shard-1024 next_shard_id_wrapper "next_shard_id('s1024', 1)"

# The tables, from the annotate files: a function's per-id inclusive count is
# (its count in the 2N run - in the N run) / N. Debian's postgres has no symbols for static
# functions; the ones that matter here are named by what they call (PostgreSQL 15.20, Debian).
python3 - "$dir" "$N" "$TOP" <<'EOF'
import re, sys
d, n, top = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
line = re.compile(r'^\s*([0-9,]+)\s+\([^)]*\)\s+(\S+?):(\S+)')
call = re.compile(r'^\s*[0-9,]+\s+\([^)]*\)\s+>\s+\S+?:(\S+) \(([0-9,]+)x\)')
static = {'0x00000000002bee50': 'read_seq_tuple (sequence.c)', '0x00000000002befb0': 'init_sequence (sequence.c)',
          '0x000000000044a690': 'ReadBuffer_common (bufmgr.c)', '0x0000000000446bc0': 'PinBuffer (bufmgr.c)',
          '0x00000000002ff300': 'ExecInterpExpr (the caller)'}
def profile(name):
    p = {}
    for l in open(f'{d}/{name}.annotate'):
        m = line.match(l)
        if m:
            p.setdefault(static.get(m.group(3), m.group(3)), int(m.group(1).replace(',', '')))
    return p
def calls(name):
    c = {}
    for l in open(f'{d}/{name}.calling'):
        m = call.match(l)
        if m:
            f = m.group(1).split('@')[0]
            c[f] = c.get(f, 0) + int(m.group(2).replace(',', ''))
    return c
def total(name):
    for l in open(f'{d}/{name}.callgrind'):
        if l.startswith('summary:'):
            return int(l.split()[1])
    return 0
def marginal(name):
    a, b = profile(name + '-1'), profile(name + '-2')
    return {f: (b.get(f, 0) - a.get(f, 0)) / n for f in set(a) | set(b)}
def per_id(name):
    return (total(name + '-2') - total(name + '-1')) / n
print(f'\n### Instructions per id (callgrind, marginal over {n} and {2*n} ids, borrow)\n')
# steady: the generator's calls from its busiest caller (every call but the backend's first) in
# the 2N run, inclusive, per call: what an id costs once the backend and the cluster are warm
def steady(name, f):
    best = (0, 0)
    for l in open(f'{d}/{name}.calling'):
        m = re.match(r'^\s*([0-9,]+)\s+\([^)]*\)\s+>\s+\S+?:(\S+) \(([0-9,]+)x\)', l)
        if m and m.group(2) == f:
            best = max(best, (int(m.group(3).replace(',', '')), int(m.group(1).replace(',', ''))))
    return best[1] / best[0] if best[0] else 0
print('| generator | CACHE 1 | CACHE 32 | CACHE 1024 | CACHE 1, per call after the first | CACHE 1024, per call after the first |')
print('|---|---:|---:|---:|---:|---:|')
for label, name in (("`nextval('s')`", 'nextval'), ("pgEdge `snowflake.nextval('s')`", 'pgedge'),
                    ("`next_shard_id('s', 1)`", 'shard')):
    f = {'nextval': 'nextval_oid', 'pgedge': 'snowflake_nextval', 'shard': 'next_shard_id_wrapper'}[name]
    print(f'| {label} | {per_id(name + "-1"):,.1f} | {per_id(name + "-32"):,.1f} | {per_id(name + "-1024"):,.1f} | '
          f'{steady(name + "-1-2", f):,.1f} | {steady(name + "-1024-2", f):,.1f} |')
print('\nThe first three columns are cost_gate\'s way (marginal); the last two divide the inclusive count of '
      'the generator\'s calls from its busiest caller (all but the backend\'s first call) in the '
      f'{2*n}-id run by their number.')
for c in ('1', '32', '1024'):
    m = marginal(f'shard-{c}')
    print(f'\nCACHE {c}: next_shard_id above the nextval_internal() it calls: '
          f'{per_id("shard-" + c) - m.get("nextval_internal", 0):,.1f}; '
          f'nextval_internal inside next_shard_id: {m.get("nextval_internal", 0):,.1f}; '
          f'inside nextval(): {marginal("nextval-" + c).get("nextval_internal", 0):,.1f}')
# once per backend, not per id: the data floor's catalog query at a sequence's first id
# (and the origin check, whose first run in a cluster records the origin)
for c in ('1', '1024'):
    for f in ('pg_shard_id::data_floor::settle', 'pg_shard_id::origin::check'):
        a, b = (profile(f'shard-{c}-{r}').get(f, 0) for r in (1, 2))
        print(f'\nCACHE {c}: `{f}` (once per backend): {a:,} in the {n}-id run, '
              f'{b:,} in the {2*n}-id run; their difference, {(b - a) / n:+,.1f} per id, is inside the marginal figures')
# the generator's callers (main ... ExecInterpExpr) hold all its instructions: not shown
fn = {'nextval': 'nextval_oid', 'pgedge': 'snowflake_nextval', 'shard': 'next_shard_id_wrapper'}
profs, tops = {}, {}
for k in ('nextval-1', 'pgedge-1', 'shard-1'):
    profs[k] = marginal(k)
    whole = profile(k + '-2')
    g = whole[fn[k.split('-')[0]]]
    tops[k] = [(f, v) for f, v in sorted(profs[k].items(), key=lambda x: -x[1])
               if f == fn[k.split('-')[0]] or (whole.get(f, 0) < g and 'ExecInterpExpr' not in f)][:top]
for k, label in (('pgedge-1', 'pgEdge snowflake.nextval'), ('shard-1', 'next_shard_id')):
    print(f'\n### {label}, CACHE 1: top {top} functions, inclusive instructions per id\n')
    print('| function | per id |')
    print('|---|---:|')
    for f, v in tops[k]:
        print(f'| `{f}` | {v:,.1f} |')
print('\n### Calls per id inside each generator, CACHE 1 (from callgrind\'s call counts, marginal)\n')
cs = {k: (calls(k + '-1'), calls(k + '-2')) for k in ('nextval-1', 'pgedge-1', 'shard-1')}
print('| callee | nextval() | pgEdge | next_shard_id |')
print('|---|---:|---:|---:|')
for f in ('nextval_internal', 'ReadBuffer', 'LockBuffer', 'SearchSysCache1', 'pg_class_aclcheck', 'hash_search',
          'relation_open', 'XLogInsert', 'GetRedoRecPtr', 'MarkBufferDirty', 'clock_gettime', 'GetTopTransactionId'):
    print(f'| `{f}` | ' + ' | '.join(f'{(b.get(f, 0) - a.get(f, 0)) / n:.4f}' for a, b in cs.values()) + ' |')
names = sorted(set(f for k in ('pgedge-1', 'shard-1') for f, _ in tops[k]),
               key=lambda f: -max(profs['pgedge-1'].get(f, 0), profs['shard-1'].get(f, 0)))
print(f'\n### Side by side, CACHE 1 (inclusive per id; the union of each one\'s top {top})\n')
print('| function | nextval() | pgEdge | next_shard_id | next_shard_id - pgEdge |')
print('|---|---:|---:|---:|---:|')
for f in names:
    a, b, c = (profs[k].get(f, 0) for k in ('nextval-1', 'pgedge-1', 'shard-1'))
    print(f'| `{f}` | {a:,.1f} | {b:,.1f} | {c:,.1f} | {c - b:+,.1f} |')
EOF
