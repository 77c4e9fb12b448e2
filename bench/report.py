#!/usr/bin/env python3
"""Turns bench.py's JSON files (one per PostgreSQL version) into docs/benchmarks.md and .png."""
import json
import sys

# report.py OUT.md OUT.png RESULTS.json [RESULTS.json ...]: one results file per PostgreSQL
# version, reported side by side (a column group per version).
md_path, png_path = sys.argv[1], sys.argv[2]
runs = [json.load(open(path)) for path in sys.argv[3:]]
versions = [r["machine"]["postgres"].split()[0] for r in runs]
first = runs[0]


def mib(b):
    return f"{b / 2**20:.1f} MiB"


lines = [
    "# Benchmarks",
    "",
    "Made by `scripts/bench.sh` on one machine, one PostgreSQL version after the other; every figure",
    "is a median (3 runs, or the rounds of section 2), and ratios compare generators measured in the same run. Re-run it to",
    "get your own numbers (it starts its own throwaway cluster, release build, `pg_shard_id`",
    "preloaded, default settings but `synchronous_commit = off` and `jit = off`).",
    "",
]
lines += [f"- PostgreSQL {r['machine']['postgres']}: {r['machine']['date']}, {r['machine']['cpu']}, "
          f"{r['machine']['cores']} cores" for r in runs]
lines += ["", "![ids/s and inserts/s](benchmarks.png)"]


def section(title, intro, key, per_version, rows_of):
    """A heading, what was measured, and one table: a row per generator, per_version columns for
    each PostgreSQL version ("-" where a version lacks the generator)."""
    header = [key] + [f"{h}, PG {v}" for v in versions for h in per_version]
    lines.extend(["", f"## {title}", ""] + intro + ["", "| " + " | ".join(header) + " |",
                  "|---|" + "---:|" * (len(header) - 1)])
    names = []
    for r in runs:
        names += [row["name"] for row in rows_of(r) if row["name"] not in names]
    for name in names:
        cells = [name]
        for r in runs:
            row = next((x for x in rows_of(r) if x["name"] == name), None)
            cells += per_version(row) if row else ["-"] * len(per_version)
        lines.append("| " + " | ".join(cells) + " |")


class Columns(list):
    """Column headers that also render one row's cells."""

    def __init__(self, headers, render):
        super().__init__(headers)
        self.render = render

    def __call__(self, row):
        return self.render(row) if row else None


def clock_lines():
    """The floor under next_shard_id's own cost: one read of the wall clock per id."""
    if not all("clock_read_ns" in r for r in runs):
        return []
    per = "; ".join(f"PG {v}: {r['clock_read_ns']:.0f} ns, so at most {r['clock_bound_ratio']:.3f} × nextval()"
                    for r, v in zip(runs, versions))
    return ["", "Every id carries the current millisecond, so every call reads the wall clock once",
            f"(`clock_gettime`, measured by `bench/clock_cost.c` in the same run). {per}",
            "for any generator that does, before any other work."]


section(f"1. Generation rate, one session, {first['n_gen']:,} ids",
        [f"`SELECT count(<generator>) FROM (SELECT generate_series(1, {first['n_gen']})) g`; duplicates",
         "counted in a separate run of the same size. The layout's limit for one sequence is 1,024,000",
         "ids/s. (`generate_series` in the select list streams its rows; in `FROM` it would first store",
         "all of them, time every generator pays alike and that runs before the first id is drawn.)",
         *clock_lines()],
        "generator",
        Columns(["ids/s", "ns/id", "× nextval()", "duplicates"],
                lambda g: ["-", f"{g['overhead_ns']:,.0f}", "-", "-"] if "overhead_ns" in g else
                [f"{g['rate']:,.0f}", f"{1e9 / g['rate']:,.0f}", f"{g['ratio_to_nextval']:.2f}",
                 f"{g['duplicates']:,}"]),
        lambda r: r["generation"])
if all("generation_two_sessions" in r for r in runs):
    section(f"1b. Generation rate, two sessions on one sequence at once, {first['n_gen']:,} ids each",
            ["Both sessions' ids together over the wall time of the pair (2 cores: one each). The",
             "layout's limit is still 1,024,000 ids/s for the sequence, so `wait` is capped by it."],
            "generator",
            Columns(["ids/s", "× nextval()"], lambda g: [f"{g['rate']:,.0f}", f"{g['ratio_to_nextval']:.2f}"]),
            lambda r: r["generation_two_sessions"])
rounds = first.get("insert_rounds", 3)
section(f"2. Inserts, pgbench, 2 clients, {rounds} rounds of {first['pgbench_seconds']} s",
        ["`INSERT INTO t DEFAULT VALUES`, the primary key's DEFAULT being the generator",
         "(`synchronous_commit = off`, so that the generators are measured rather than the disk; each run",
         "starts from an empty table after a `CHECKPOINT`, autovacuum off for these tables).",
         "Each round runs every generator once, one after the other; a generator's ratio to `bigserial`",
         "is taken within each round, and the table gives the median of those ratios and their range."],
        "primary key default",
        Columns(["tps (median)", "× bigserial", "range of × bigserial"],
                lambda r: [f"{r['tps']:,.0f}", f"{r['ratio_to_bigserial']:.3f}",
                           "{:.3f} to {:.3f}".format(*r["ratio_range"]) if "ratio_range" in r else "-"]),
        lambda r: r["inserts"])
if all(isinstance(r.get("inserts_close"), list) for r in runs):
    c = first["inserts_close"][0]
    section(f"2b. next_shard_id against bigserial, closely: {c['pairs']} pairs of {c['seconds']} s runs",
            ["The same pgbench insert, only these two, in pairs whose order alternates (bigserial first, then",
             "next_shard_id first, ...) so that a drift of the machine within a pair cancels out; once with",
             "the simple protocol (PostgreSQL reads and plans the column's DEFAULT for every INSERT) and once",
             "with prepared statements, as most drivers send them (the plan, DEFAULT included, is kept). The",
             "interval is the distribution-free confidence interval of the median of the pairs' ratios",
             "(order statistics); a claim about the ratio holds only where the whole interval does."],
            "next_shard_id × bigserial",
            Columns(["median", "confidence interval of the median", "range of the pairs"],
                    lambda c: [f"{c['ratio_to_bigserial']:.3f}",
                               "{:.3f} to {:.3f} ({:.0%})".format(*c["ci"], c["ci_coverage"]),
                               f"{min(c['ratios']):.3f} to {max(c['ratios']):.3f}"]),
            lambda r: r["inserts_close"])
section(f"3. Scale: {first['n_scale']:,} rows per generator",
        [f"`INSERT INTO t (payload) SELECT 1 FROM generate_series(1, {first['n_scale']})` into an empty table."],
        "primary key default",
        Columns(["load time", "primary key index"], lambda r: [f"{r['seconds']:.2f} s", mib(r["index_bytes"])]),
        lambda r: r["scale"])
section(f"4. Decode, {first['n_decode']:,} ids",
        ["`SELECT count(<decoder>) FROM generate_series(...)` over valid ids."],
        "decoder",
        Columns(["ids/s", "× inline SQL"], lambda d: [f"{d['rate']:,.0f}", f"{d['ratio_to_inline']:.2f}"]),
        lambda r: r["decode"])
if all(isinstance(r.get("mask"), list) for r in runs):
    section(f"5. Masked ids, {first['n_decode']:,} ids, one session (one core)",
            ["`SELECT count(<function>) FROM generate_series(...)`: FF1-AES-256 with the key expanded once",
             "per backend, against the plain shortcode."],
            "function",
            Columns(["per second", "× shard_id_to_shortcode"],
                    lambda m: [f"{m['rate']:,.0f}", f"{m['ratio_to_shortcode']:.2f}"]),
            lambda r: r["mask"])


def inline_duplicates_note():
    """What the inline formula's duplicate count means in this run: it repeats ids only where one
    session draws more than 1,024 ids of one sequence in one millisecond, so it depends on the
    machine's speed (a 0 here is the machine being slow, not the formula being safe)."""
    inline = [(v, g) for r, v in zip(runs, versions) for g in r["generation"]
              if g["name"] == "same formula, inline SQL"]
    if any(g["duplicates"] for _, g in inline):
        return ["- The duplicates of the inline formula are Instagram's scheme drawing more than 1,024 ids of one",
                "  sequence in one millisecond; the PL/pgSQL original has none here only because it is too slow to."]
    rates = ", ".join(f"{g['rate'] / 1000:,.0f} ids/ms on PG {v}" for v, g in inline)
    return ["- Instagram's formula repeats ids once one session draws more than 1,024 ids of one sequence",
            f"  in one millisecond. In this run it drew {rates} on average, below that, so it",
            "  repeated none; a faster machine does (an earlier run at 2.1 M ids/s: 1,107,918 duplicates",
            "  in 2,000,000). `next_shard_id` is safe at any rate: see the guarantee in the README."]

def lease_lines():
    """Lease writes: each is a file write, a WAL record and a flush (README, guarantee 5)."""
    if not all("lease_writes" in r for r in runs):
        return []
    out = ["", "## Lease writes", "",
           "Extensions of the lease during the runs above (pg_shard_id's WAL records, counted with",
           "`pg_waldump` in the cluster's WAL; each is one file write, one WAL record and one flush):", ""]
    for r, v in zip(runs, versions):
        parts = "; ".join(f"{w['part']}: {w['records']:,} in {w['seconds']:.0f} s ({w['per_second']:.2f}/s)"
                          for w in r["lease_writes"])
        out.append(f"- PG {v}: {parts}")
    return out


lines.extend(lease_lines())
lines.extend([
    "",
    "## Reading the numbers",
    "",
    "- `next_shard_id, wait` is capped by the layout, not by its cost: 1,024 ids per millisecond per",
    "  sequence. Its ratio to `nextval()` is that cap; compare it with 1,024,000. `borrow` shows the cost.",
    *inline_duplicates_note(),
    "- pgbench: each transaction is a round trip of tens of microseconds, against a generator cost of",
    "  well under a microsecond, and on 2 cores the clients share the CPUs with the server: where the",
    "  range of a ratio includes 1.000, the run did not tell that generator from `bigserial`.",
    "- Scale: ids of one stream are strictly increasing, so the primary key grows at its right edge like",
    "  `bigserial`'s (same index size); random UUIDs split pages all over the index.",
    "",
    "## Where one call goes",
    "",
    "Instructions per id by part, before and after the work on speed, counted by callgrind",
    "(`bench/profile.sh`; the table and what changed: [profile.md](profile.md)). Instruction counts",
    "leave out the clock read itself (the vDSO) and cache misses, so the ids/s above are the measure",
    "of speed; this says where the instructions are.",
    "",
    "![instructions per id by part, before and after](profile.png)",
    "",
])
open(md_path, "w").write("\n".join(lines))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, (a, b) = plt.subplots(1, 2, figsize=(13, 5.2))
colors = ["#4477aa", "#ee6677", "#228833", "#ccbb44"]
height = 0.8 / len(runs)


def bars(ax, rows_of, value):
    names = []
    for r in runs:
        names += [row["name"] for row in rows_of(r) if row["name"] not in names]
    names = names[::-1]
    for i, (r, v) in enumerate(zip(runs, versions)):
        by_name = {row["name"]: value(row) for row in rows_of(r)}
        ax.barh([k + i * height for k in range(len(names))], [by_name.get(n, 0) for n in names],
                height=height, color=colors[i % len(colors)], label=f"PostgreSQL {v}")
    ax.set_yticks([k + height * (len(runs) - 1) / 2 for k in range(len(names))], names)


bars(a, lambda r: [g for g in r["generation"] if "rate" in g], lambda g: g["rate"] / 1e6)
a.axvline(1.024, color="#cc3311", linestyle="--", label="layout limit, 1.024 M/s per sequence")
a.set_xlabel("million ids/s, one session")
a.set_title("Generation rate")
a.legend(loc="lower right", fontsize=8)
bars(b, lambda r: r["inserts"], lambda r: r["tps"])
b.set_xlabel("inserts/s, pgbench, 2 clients")
b.set_title("INSERT ... DEFAULT VALUES")
b.legend(loc="lower right", fontsize=8)
fig.suptitle(f"pg_shard_id, PostgreSQL {' and '.join(versions)}, {first['machine']['cores']} cores")
fig.tight_layout()
fig.savefig(png_path, dpi=90)
