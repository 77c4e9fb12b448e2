"""The same results from both editions (issue 56): every line of cases.sql (a decode, compose,
bound, partition, shortcode or routing call: ordinary values, edges, bad input) run as
`SELECT <line>` in a database with the native extension and in one with the SQL edition (the plain
script into ids, first on the search_path), compared value for value, or SQLSTATE for SQLSTATE. And the labels: every
function both editions have bears the same volatility, strictness, parallel safety, argument names
and result type. Needs a build of pg_shard_id installed (scripts/test.sh does that)."""

import os

import psycopg
import pytest

from conftest import install_plain

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = [line.strip() for line in open(os.path.join(HERE, "cases.sql"), encoding="utf-8")
         if line.strip() and not line.lstrip().startswith("--")]


@pytest.fixture(scope="module")
def editions(cluster, edition):
    for name in ("same_native", "same_sql"):
        cluster.sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        cluster.sql(f"CREATE DATABASE {name}")
    cluster.sql("SET client_min_messages = warning; CREATE EXTENSION pg_shard_id", "same_native")
    install_plain(cluster, "same_sql", edition)  # (schema ids: the install refuses public, which another role owns)
    cluster.sql("ALTER DATABASE same_sql SET search_path = ids, public")
    native = cluster.connect("same_native")
    sql = cluster.connect("same_sql")
    for conn in (native, sql):
        conn.execute("SET TimeZone = 'UTC'")
        conn.execute("SET DateStyle = 'ISO, YMD'")
        conn.execute("SET IntervalStyle = 'postgres'")
    yield native, sql
    native.close()
    sql.close()


def outcome(conn, case):
    try:
        rows = conn.execute(f"SELECT {case}").fetchall()
        return "rows", [tuple(None if v is None else str(v) for v in row) for row in rows]
    except psycopg.Error as e:
        return "error", e.sqlstate


def test_every_case_gives_the_same_result(editions):
    native, sql = editions
    differences = []
    for case in CASES:
        a, b = outcome(native, case), outcome(sql, case)
        if a != b:
            differences.append(f"{case}\n    native: {a}\n    sql:    {b}")
    assert len(CASES) >= 50
    assert differences == [], "\n".join(differences)


LABELS = """
    SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_function_result(p.oid),
           p.provolatile, p.proisstrict, p.proparallel, p.proargnames
      FROM pg_proc p WHERE p.pronamespace = %s::regnamespace AND p.proname NOT LIKE '\\_%%'
"""


def test_the_functions_both_have_the_same_labels(editions):
    native, sql = editions
    ours = {(r[0], r[1]): r for r in sql.execute(LABELS, ("ids",)).fetchall()}
    theirs = {(r[0], r[1]): r for r in native.execute(LABELS, ("public",)).fetchall()}
    shared = set(ours) & set(theirs)
    assert {("next_shard_id", "seq regclass, shard integer"), ("shard_id_extract_timestamp", "id bigint"),
            ("shard_id_decode", "id bigint, OUT ts timestamp with time zone, OUT shard integer, OUT seq integer")} <= shared
    assert [ours[k] for k in sorted(shared)] == [theirs[k] for k in sorted(shared)]
