"""Runs every ```sql example of the README and the documentation pages (tests/docs/run.sh).

Each Markdown file is one session: its ```sql blocks run in order, in one psql, in a database
made for that file alone (with the extension created first unless a block of the file creates
it). A block opts out only with a marker on the line right before its fence (blank lines
between are allowed):

    <!-- sql: skip (the reason) -->     not run; the reason is required and printed
    <!-- sql: output -->               a ```text block: the psql output of the block before it,
                                        compared after masking timestamps and ids

A page that shows the SQL edition (docs/managed.md) says so anywhere in its text with
`<!-- docs: sql-edition -->`: its session first installs the edition's plain script into schema
ids (the file named by $SQL_EDITION_SCRIPT, which tests/docs/run.sh builds with
scripts/sql_edition.sh), beside the native extension in public.

Any ERROR fails the block that raised it (psql stops there: the file's later blocks are not
run). Output is psql's default aligned format with the row-count footer off; the comparison
ignores runs of blanks and the length of the header rule, and masks timestamps (2026-11-22
02:23:27.201+00 -> <timestamp>) and integers of 13 digits or more (ids, masked ids -> <id>) on
both sides.

    python3 sql_examples.py [--database-prefix P] FILE.md...
    python3 sql_examples.py --check-links SITE_DIR FILE.md...   # links of files outside docs/

The second form checks the relative links of Markdown files that MkDocs does not build (the
README): each must name a file of the repository, and an anchor into a docs/ page must be an id
of that page in the built site.

Needs psql on PATH and PGHOST/PGPORT/PGUSER pointing at a superuser of a server with the
extension installed and preloaded. Prints one line per block and ends with a summary line
"sql examples: N passed, M failed, S skipped, K not run"; exits 1 if any block failed.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^(\s*)(`{3,})\s*([\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*sql:\s*(skip|output)\b(.*?)-->\s*$")
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?([+-]\d{2}(:\d{2})?)?")
ID = re.compile(r"(?<![\w.])-?\d{13,19}(?![\w.])")
RULE = re.compile(r"^[-+]+$")


class Block:
    def __init__(self, path, line, lang, text, marker, reason):
        self.path, self.line, self.lang, self.text = path, line, lang, text
        self.marker, self.reason = marker, reason  # marker: None, "skip" or "output"
        self.status, self.detail = None, ""

    def where(self):
        return f"{self.path}:{self.line}"


class MarkdownError(Exception):
    pass


def blocks_of(path):
    """The fenced blocks of a Markdown file that matter here: every ```sql block, and every
    block marked as output. Markers must be well formed and placed right before a fence."""
    lines = open(path, encoding="utf-8").read().split("\n")
    found, pending, i = [], None, 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if lines[i].lstrip().startswith("<!--") and "sql:" in lines[i] and not m:
            raise MarkdownError(f"{path}:{i + 1}: malformed sql marker: {lines[i].strip()}")
        if m:
            kind, rest = m.group(1), m.group(2).strip()
            if kind == "skip" and not re.fullmatch(r"\(.*\S.*\)", rest):
                raise MarkdownError(f"{path}:{i + 1}: a skip must give its reason: <!-- sql: skip (why) -->")
            pending = (kind, rest[1:-1].strip() if kind == "skip" else "", i + 1)
            i += 1
            continue
        f = FENCE.match(lines[i])
        if f:
            indent, ticks, lang = f.group(1), f.group(2), f.group(3).lower()
            start, body = i + 1, []
            i += 1
            while i < len(lines) and not re.match(r"^\s*" + ticks + r"\s*$", lines[i]):
                body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
                i += 1
            if i == len(lines):
                raise MarkdownError(f"{path}:{start}: unclosed code fence")
            marker, reason = (pending[0], pending[1]) if pending else (None, "")
            if marker == "output" and lang not in ("text", ""):
                raise MarkdownError(f"{path}:{start}: an output block is fenced as ```text")
            if marker == "skip" and lang != "sql":
                raise MarkdownError(f"{path}:{start}: a skip marker before a ```{lang} block")
            if lang == "sql" or marker == "output":
                found.append(Block(path, start, lang, "\n".join(body), marker, reason))
            pending = None
        elif lines[i].strip() and pending:
            raise MarkdownError(f"{path}:{pending[2]}: a sql marker must come right before a code fence")
        i += 1
    if found and found[0].marker == "output":
        raise MarkdownError(f"{found[0].where()}: an output block with no sql block before it")
    return found


def normalize(text):
    out = []
    for line in text.split("\n"):
        line = ID.sub("<id>", TIMESTAMP.sub("<timestamp>", line))
        line = " ".join(line.split())
        if RULE.match(line.replace(" ", "")) and line:
            line = "---"
        out.append(line)
    while out and not out[-1]:
        out.pop()
    while out and not out[0]:
        out.pop(0)
    return out


def psql(args, script, env):
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
        name = f.name
    try:
        p = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-P", "footer=off", *args, "-f", name],
                           capture_output=True, text=True, env=env, timeout=120)
        return p.returncode, p.stdout, p.stderr, name
    finally:
        os.unlink(name)


def run_file(path, blocks, database, env):
    """Runs the file's sql blocks in one psql session; sets each block's status."""
    sql = [b for b in blocks if b.lang == "sql" and b.marker != "skip"]
    for b in blocks:
        if b.marker == "skip":
            b.status, b.detail = "skipped", b.reason
    if not sql:
        return
    admin = ["-d", "postgres", "-At"]
    rc, out, err, _ = psql(admin, f'DROP DATABASE IF EXISTS "{database}";\nCREATE DATABASE "{database}";\n', env)
    if rc != 0:
        raise RuntimeError(f"cannot create database {database}: {err.strip()}")
    script, spans = [], []  # spans: (first script line, last script line, block)
    if not any(re.search(r"CREATE\s+EXTENSION\s+(IF\s+NOT\s+EXISTS\s+)?pg_shard_id", b.text, re.I) for b in sql):
        script.append("SET client_min_messages = warning; CREATE EXTENSION pg_shard_id; RESET client_min_messages;")
    with open(path, encoding="utf-8") as f:
        if "<!-- docs: sql-edition -->" in f.read():
            script += ["\\set schema ids", f"\\i {os.environ['SQL_EDITION_SCRIPT']}"]
    for n, b in enumerate(sql):
        script.append(f"\\echo '<<<docs block {n}>>>'")
        first = len(script) + 1
        script.extend(b.text.split("\n"))
        script.append(";" if not b.text.rstrip().endswith((";", "\\gexec", "\\gset")) else "")
        spans.append((first, len(script), b))
    script.append("\\echo '<<<docs end>>>'")
    rc, out, err, name = psql(["-d", database], "\n".join(script) + "\n", env)
    # stdout split by the markers: block n's output
    outputs, current = {}, None
    for line in out.split("\n"):
        m = re.fullmatch(r"<<<docs block (\d+)>>>", line)
        if m:
            current = int(m.group(1))
            outputs[current] = []
        elif line == "<<<docs end>>>":
            current = None
        elif current is not None:
            outputs[current].append(line)
    failed_at = None
    if rc != 0:
        m = re.search(re.escape(name) + r":(\d+): (ERROR|FATAL|PANIC|error)(.*)", err)
        where = int(m.group(1)) if m else None
        for first, last, b in spans:
            if where is not None and first <= where <= last:
                failed_at = b
                md_line = b.line + (where - first) + 1
                b.status = "failed"
                b.detail = f"line {md_line}: " + re.sub(re.escape(name) + r":\d+: ", "", err[m.start():]).strip()
        if failed_at is None:  # not placed (a crash, a timeout): blame the last block that started
            started = [spans[n][2] for n in outputs] or [spans[0][2]]
            failed_at = started[-1]
            failed_at.status, failed_at.detail = "failed", err.strip() or f"psql exited with {rc}"
    reached = True
    for n, (_, _, b) in enumerate(spans):
        if b is failed_at:
            reached = False
            continue
        if not reached:
            b.status, b.detail = "not run", "an earlier block of this file failed"
            continue
        b.status = "passed"
        b.output = "\n".join(outputs.get(n, []))
    # output blocks: compared with the psql output of the sql block before them
    previous = None
    for b in blocks:
        if b.marker == "output":
            if previous is None or previous.status != "passed":
                b.status, b.detail = "not run", "the block before it did not run"
            elif normalize(previous.output) == normalize(b.text):
                b.status = "passed"
            else:
                b.status = "failed"
                b.detail = ("output differs from the block at line %d's\n      expected (masked):\n%s\n"
                            "      got (masked):\n%s" % (
                                previous.line,
                                "\n".join("        " + x for x in normalize(b.text)),
                                "\n".join("        " + x for x in normalize(previous.output))))
        elif b.lang == "sql" and b.marker != "skip":
            previous = b


LINK = re.compile(r"\]\(([^)\s]+)\)")


def check_links(site, files):
    """Relative links of Markdown files outside docs/: the file exists; an anchor into a docs/
    page is an id of that page as MkDocs built it (SITE/<page>/index.html)."""
    bad = 0
    for path in files:
        base = os.path.dirname(path)
        in_code = False
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            if FENCE.match(line):
                in_code = not in_code
            if in_code:
                continue
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue
                file, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(base, file)) if file else path
                problem = None
                if not os.path.exists(full):
                    problem = "no such file"
                elif anchor:
                    if full.startswith("docs" + os.sep) and full.endswith(".md"):
                        page = full[len("docs" + os.sep):-3]
                        html = os.path.join(site, "" if page == "index" else page, "index.html")
                        ids = set(re.findall(r'id="([^"]+)"', open(html, encoding="utf-8").read()))
                        if anchor not in ids:
                            problem = f"no anchor #{anchor} in {full}"
                    elif full == path:
                        slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                                 for h in re.findall(r"^#+ (.*)$", open(path, encoding="utf-8").read(), re.M)}
                        if anchor not in slugs:
                            problem = f"no heading for #{anchor}"
                if problem:
                    bad += 1
                    print(f"  FAIL  {path}:{n}: link {target}: {problem}")
    print(f"links outside docs/: {'ok' if not bad else str(bad) + ' broken'}")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--database-prefix", default="docs_")
    ap.add_argument("--check-links", metavar="SITE_DIR")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    if args.check_links:
        return check_links(args.check_links, args.files)
    env = dict(os.environ, PGTZ="UTC", PGDATESTYLE="ISO, MDY")
    counts = {"passed": 0, "failed": 0, "skipped": 0, "not run": 0}
    for path in args.files:
        try:
            blocks = blocks_of(path)
        except MarkdownError as e:
            print(f"  FAIL  {e}")
            counts["failed"] += 1
            continue
        if not blocks:
            continue
        rel = os.path.relpath(path)
        database = args.database_prefix + re.sub(r"[^a-z0-9]+", "_", rel.lower()).strip("_")
        run_file(rel, blocks, database, env)
        for b in blocks:
            counts[b.status] += 1
            label = {"passed": "ok   ", "failed": "FAIL ", "skipped": "skip ", "not run": "--   "}[b.status]
            kind = "output" if b.marker == "output" else "sql"
            line = f"  {label} {rel}:{b.line} ({kind})"
            if b.status != "passed":
                line += ": " + b.detail
            print(line)
    print(f"sql examples: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} skipped, {counts['not run']} not run")
    return 1 if counts["failed"] or counts["not run"] else 0


if __name__ == "__main__":
    sys.exit(main())
