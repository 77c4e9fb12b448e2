"""Reads the two callgrind_annotate listings bench/profile.sh makes and prints, as JSON,
instructions per id: nextval() whole, next_shard_id whole, and next_shard_id's by group of
functions (what a reader needs to see where one call goes)."""
import json
import re
import sys

GROUPS = [  # (group, pattern over "function [object]"), first match wins
    ("pgrx: call boundary (sigsetjmp)", r"sigsetjmp|sigjmp_save|cee_scape"),
    ("pgrx: panic guard", r"run_guarded"),
    ("clock (SystemTime::now, clock_gettime)", r"SystemTime|[Tt]imespec|clock_gettime|clock::"),
    ("thread-locals (__tls_get_addr)", r"__tls_get_addr"),
    ("guard: slot lock, cache, bit set", r"guard_table|guard::|slots::"),
    ("next_shard_id: arguments, settings, compose", r"generate::|next_shard_id|settings::|layout::|node::"),
    ("other (pg_shard_id.so)", r"pg_shard_id\.so\]"),
    # what is left is PostgreSQL's own work (nextval_internal and what it calls), as in nextval()
    ("PostgreSQL: nextval_internal and below", r"."),
]


def load(path, ids):
    per_function = {}
    for line in open(path):
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S+?):(.*?)\s+\[(.*)\]\s*$", line)
        if m:
            name = f"{m.group(3)} [{m.group(4)}]"
            per_function[name] = per_function.get(name, 0) + int(m.group(1).replace(",", "")) / ids
    return per_function


def main():
    ids = int(sys.argv[1])
    nextval = load(sys.argv[2], ids)
    ours = load(sys.argv[3], ids)
    groups = {g: 0.0 for g, _ in GROUPS}
    for name, n in ours.items():
        group = next(g for g, p in GROUPS if re.search(p, name))
        groups[group] += n
    print(json.dumps({
        "ids": ids,
        "nextval_per_id": round(sum(nextval.values()), 1),
        "next_shard_id_per_id": round(sum(ours.values()), 1),
        "next_shard_id_groups_per_id": {g: round(n, 1) for g, n in groups.items()},
        "top_functions_per_id": {re.sub(r" \[.*/", " [", k): round(v, 1)
                                 for k, v in sorted(ours.items(), key=lambda kv: -kv[1])[:25]},
    }, indent=2))


main()
