"""The rules the documentation states in several places, checked to agree (issue 52): each
contradiction a reader once found is a rule here, so that the next one of its kind fails this
check instead of reaching a reader. Run by tests/docs/run.sh from the repository's root; prints a
line per rule and ends with "rules: N passed, M failed"."""

import re
import sys
from pathlib import Path

DOCS = sorted(Path("docs").glob("*.md")) + [Path("README.md")]
CACHE_RULE = "CACHE × the sessions drawing from the sequence at once ≤ 1024"


def text(path):
    # (markdown emphasis and line breaks do not change what a sentence says)
    return re.sub(r"\s+", " ", path.read_text().replace("**", ""))


def rules():
    # one CACHE rule, in the same words, where a reader looks for it
    for page in ("README.md", "docs/reference.md", "docs/performance.md"):
        yield f"{page} states the CACHE rule", CACHE_RULE in text(Path(page))
    # every example sequence a table's DEFAULT draws from follows it (CACHE 32 at most: the rule
    # for a few sessions), and the README's example carries it in its comment
    for page in DOCS:
        for n in re.findall(r"CREATE SEQUENCE \S+ [^;]*\bCACHE (\d+)", page.read_text()):
            yield f"{page}: an example sequence with CACHE {n} follows the rule (<= 32)", int(n) <= 32
    first = Path("README.md").read_text().split("## 30-second example")[1].split("```")[1]
    yield "README's example: CACHE 32 with the rule in its comment", "CACHE 32;" in first and "≤ 1024" in first
    # the headline carries the guarantee's conditions in the first screen
    top = " ".join(Path("README.md").read_text().splitlines()[:12])
    for condition in ("shared_preload_libraries", "synchronous", "one shard number per writing server"):
        yield f"README's first lines name the condition '{condition}'", condition in top
    # never a step that rewrites a loaded library: cargo pgrx install only where a page warns against it
    bad = [f"{page}: {sentence[:80]}" for page in DOCS
           for sentence in re.split(r"(?<=[.:])\s", text(page))
           if "cargo pgrx install" in sentence and not re.search(r"\b(never|not)\b", sentence, re.I)]
    yield "'cargo pgrx install' only with its warning" + "".join(f"\n        {b}" for b in bad), not bad
    # the conversion's live-id threshold is 1.5 s, the backfill's 1 s: said once each, never mixed
    bad = [f"{page}: {m.group(0)[-80:]}" for page in DOCS
           for m in re.finditer(r"shard_id_convert_prepare[^.|]{0,200}less than 1 second", text(page))]
    yield "the conversion's threshold never given as 1 second" + "".join(f"\n        {b}" for b in bad), not bad
    # a serial (integer) key is not adopted in one call: adopt refuses it, the conversion converts it
    bad = [str(page) for page in DOCS
           if re.search(r"serial[^.]{0,80}(switches over|adopts?) (with|in) one call", text(page))]
    yield "no page says a serial key switches over with one call" + "".join(f"\n        {b}" for b in bad), not bad

def main():
    passed = failed = 0
    for name, ok in rules():
        print(f"  {'ok  ' if ok else 'FAIL'}  {name}")
        passed, failed = passed + bool(ok), failed + (not ok)
    print(f"rules: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
