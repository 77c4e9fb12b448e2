#!/usr/bin/env bash
# The documentation, checked (issue 41):
#   1. the site: `mkdocs build --strict` (mkdocs.yml; pinned in tests/docs/requirements.txt, in a
#      virtualenv in target/docs/venv) fails on a broken link or anchor, a page missing from the
#      nav, a nav entry without a page; the site goes to target/docs/site;
#   2. the links of README.md, ARCHITECTURE.md and sql/README.md (outside the site): each names a
#      file that exists, and an anchor into a page is an id of that page in the built site;
#   3. every ```sql example of README.md and docs/*.md runs (tests/docs/sql_examples.py): each file
#      in one psql session, its blocks in order, in a fresh database of its own, on a throwaway
#      cluster with the library preloaded; blocks marked `<!-- sql: output -->` are compared with
#      the output of the block before them; `<!-- sql: skip (reason) -->` opts a block out;
#   4. the rules the pages state in several places agree (tests/docs/rules.py, issue 52): one
#      CACHE rule, the README's headline with the guarantee's conditions, no step that rewrites a
#      loaded library, the conversion's thresholds.
# The masking examples need a key file: written here into the data directory as the postgres user,
# owner-only (key 1 and key 2, key 1 current), as tests/clients/run.sh does. The examples run as
# a superuser (postgres), which may mask, unmask and record check values.
# Needs the extension installed in the selected PostgreSQL (scripts/test.sh installs the test
# build first). Ends with "docs: N passed, M failed"; exits non-zero if any failed.
source "$(dirname "$0")/../../scripts/lib.sh"
stop_clusters_at_exit
HERE="$REPO/tests/docs"
VENV="$REPO/target/docs/venv"
started=$SECONDS

say "mkdocs (PyPI, pinned) in $VENV"
ensure_venv "$VENV" "$HERE/requirements.txt"
say "the site: mkdocs build --strict"
if (cd "$REPO" && "$VENV/bin/mkdocs" build --strict --site-dir "$REPO/target/docs/site" 2>&1 | sed 's/^/  /'; exit "${PIPESTATUS[0]}"); then
    check "mkdocs build --strict" passed passed
else
    check "mkdocs build --strict" failed passed
fi

say "links of the files outside docs/ (README.md, ARCHITECTURE.md, sql/README.md) to files and to the site's anchors"
if (cd "$REPO" && python3 "$HERE/sql_examples.py" --check-links "$REPO/target/docs/site" README.md ARCHITECTURE.md sql/README.md); then
    check "links outside docs/" passed passed
else
    check "links outside docs/" failed passed
fi

say "the rules the pages state in several places agree (tests/docs/rules.py)"
if (cd "$REPO" && python3 "$HERE/rules.py"); then
    check "the documentation's rules" passed passed
else
    check "the documentation's rules" failed passed
fi

say "every SQL example of README.md and docs/ (PostgreSQL $PG_MAJOR)"
start_cluster docs yes "fsync = off"
key() { printf "%02x" $(seq "$1" $(($1 + 31))); } # 32 fixed bytes as hex: a test key, not a secret
as_pg sh -c "umask 077 && printf 'key 1 %s\nkey 2 %s\ncurrent 1\n' '$(key 0)' '$(key 32)' > '$PGHOST/data/pg_shard_id.keys'"
export PGHOST PGPORT PGUSER
# (docs/managed.md's session installs the SQL edition's plain script first: sql_examples.py)
bash "$REPO/scripts/sql_edition.sh" "$RUN_DIR/docs/sql_edition" >/dev/null
export SQL_EDITION_SCRIPT="$RUN_DIR/docs/sql_edition/pg_shard_id_sql.sql"
files=("$REPO/README.md" "$REPO"/docs/*.md)
if (cd "$REPO" && python3 "$HERE/sql_examples.py" "${files[@]#"$REPO/"}") >"$RUN_DIR/docs/examples.out" 2>&1; then
    ok=yes
else
    ok=no
fi
cat "$RUN_DIR/docs/examples.out"
summary="$(tail -1 "$RUN_DIR/docs/examples.out")"
passed="$(sed -n 's/^sql examples: \([0-9]*\) passed.*/\1/p' <<<"$summary")"
failed="$(grep -c '^  FAIL' "$RUN_DIR/docs/examples.out" || true)"
PASSED=$((PASSED + ${passed:-0}))
FAILED=$((FAILED + failed))
[ "$ok" = yes ] || [ "$failed" -gt 0 ] || FAILED=$((FAILED + 1)) # a failure that printed no FAIL line
stop_cluster docs
echo
echo "docs: $PASSED passed, $FAILED failed ($summary; the site and the links counted too; $((SECONDS - started)) s)"
[ "$FAILED" = 0 ]
