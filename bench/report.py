#!/usr/bin/env python3
"""Turns bench.py's JSON into docs/benchmarks.md and docs/benchmarks.png."""
import json
import sys

results = json.load(open(sys.argv[1]))
md_path, png_path = sys.argv[2], sys.argv[3]
m = results["machine"]


def mib(b):
    return f"{b / 2**20:.1f} MiB"


lines = [
    "# Benchmarks",
    "",
    "Made by `scripts/bench.sh` in one run on one machine; every figure is the median of 3 runs.",
    "Re-run it to get your own numbers (it starts its own throwaway cluster, release build,",
    "`pg_shard_id` preloaded, default settings but `synchronous_commit = off`).",
    "",
    f"- machine: {m['cpu']}, {m['cores']} cores",
    f"- PostgreSQL {m['postgres']}",
    f"- date: {m['date']}",
    "",
    "![ids/s and inserts/s](benchmarks.png)",
]


def section(title, intro, header, rows):
    """One part of the report: a heading, what was measured, a table."""
    lines.extend(["", f"## {title}", ""] + intro + ["", "| " + " | ".join(header) + " |",
                  "|---|" + "---:|" * (len(header) - 1)])
    lines.extend("| " + " | ".join(row) + " |" for row in rows)


section(f"1. Generation rate, one session, {results['n_gen']:,} ids",
        [f"`SELECT count(<generator>) FROM generate_series(1, {results['n_gen']})`; duplicates counted in a",
         "separate run of the same size. The layout's limit for one sequence is 1,024,000 ids/s."],
        ["generator", "ids/s", "× nextval()", "duplicates"],
        [[g["name"], f"{g['rate']:,.0f}", f"{g['ratio_to_nextval']:.2f}", f"{g['duplicates']:,}"]
         for g in results["generation"]])
section(f"2. Inserts, pgbench, 2 clients, {results['pgbench_seconds']} s",
        ["`INSERT INTO t DEFAULT VALUES`, the primary key's DEFAULT being the generator",
         "(`synchronous_commit = off`, so that the generators are measured rather than the disk)."],
        ["primary key default", "tps", "× bigserial", "the 3 runs"],
        [[r["name"], f"{r['tps']:,.0f}", f"{r['ratio_to_bigserial']:.2f}",
          ", ".join(f"{t:,.0f}" for t in r.get("runs", []))] for r in results["inserts"]])
section(f"3. Scale: {results['n_scale']:,} rows per generator",
        [f"`INSERT INTO t (payload) SELECT 1 FROM generate_series(1, {results['n_scale']})` into an empty table."],
        ["primary key default", "load time", "primary key index"],
        [[r["name"], f"{r['seconds']:.2f} s", mib(r["index_bytes"])] for r in results["scale"]])
section(f"4. Decode, {results['n_decode']:,} ids",
        ["`SELECT count(<decoder>) FROM generate_series(...)` over valid ids."],
        ["decoder", "ids/s", "× inline SQL"],
        [[d["name"], f"{d['rate']:,.0f}", f"{d['ratio_to_inline']:.2f}"] for d in results["decode"]])
lines.extend([
    "",
    "## Reading the numbers",
    "",
    "- `next_shard_id, wait` is capped by the layout, not by its cost: 1,024 ids per millisecond per",
    "  sequence. Its ratio to `nextval()` is that cap; compare it with 1,024,000. `borrow` shows the cost.",
    "- The duplicates of the inline formula are Instagram's scheme drawing more than 1,024 ids of one",
    "  sequence in one millisecond; the PL/pgSQL original has none here only because it is too slow to.",
    "- pgbench: each transaction is a round trip of tens of microseconds, against a generator cost of",
    "  a few hundred nanoseconds, and on 2 cores the clients share the CPUs with the server, so the",
    "  differences between generators are inside the spread of the 3 runs shown.",
    "- Scale: ids of one stream are strictly increasing, so the primary key grows at its right edge like",
    "  `bigserial`'s (same index size); random UUIDs split pages all over the index.",
    "",
])
open(md_path, "w").write("\n".join(lines))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.8))
gen = results["generation"]
a.barh([g["name"] for g in gen][::-1], [g["rate"] / 1e6 for g in gen][::-1], color="#4477aa")
a.axvline(1.024, color="#cc3311", linestyle="--", label="layout limit, 1.024 M/s per sequence")
a.set_xlabel("million ids/s, one session")
a.set_title("Generation rate")
a.legend(loc="lower right", fontsize=8)
ins = results["inserts"]
b.barh([r["name"] for r in ins][::-1], [r["tps"] for r in ins][::-1], color="#228833")
b.set_xlabel("inserts/s, pgbench, 2 clients")
b.set_title("INSERT ... DEFAULT VALUES")
fig.suptitle(f"pg_shard_id, PostgreSQL {m['postgres'].split()[0]}, {m['cores']} cores, {m['date']}")
fig.tight_layout()
fig.savefig(png_path, dpi=90)
