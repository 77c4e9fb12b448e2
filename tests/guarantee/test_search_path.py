"""No call in the extension's SQL can be hijacked through the search_path (issue 49; PostgreSQL's
"Security Considerations for Extensions", the CVE-2018-1058 pattern).

A role allowed to CREATE in a schema on the caller's search_path (public, as in every database made
before PostgreSQL 15) plants, in that schema, overloads of every function and operator name the
extension's own SQL calls (read from the bodies of its functions and procedures, so a new call is
covered without editing this test): the same argument types as pg_catalog's, and more exact ones
(each polymorphic or "any" argument made a concrete type). Each planted function records that it
ran, and as whom, then does what pg_catalog's would. Then the table owner runs every function and
procedure of the extension (the list is read from the catalog: one without a call here fails the
test), with public first on its search_path and then last: none of the planted functions may run.
Run by tests/guarantee/run.sh."""

import itertools
import re

import psycopg

# concrete types the planted overloads take in place of a polymorphic or "any" argument, and as
# operand types of the planted operators
TYPES = ["text", "bigint", "integer", "smallint", "name", "oid", "regclass", "boolean", "timestamptz",
         "jsonb", "interval", "numeric", "regtype", "int2vector", "oidvector", "pg_node_tree"]
VARIADIC_TYPES = ["text", "bigint", "integer", "name", "regclass", "boolean", "oid"]
OPERATORS = ["=", "<>", "<", ">", "<=", ">=", "+", "-", "*", "/", "%", "||", "->>", "->", "@>", "<@", "~",
             "!~", "~~", "!~~", "&&", "#>>"]
POLYMORPHIC = {'"any"', "anyelement", "anyarray", "anynonarray", "anycompatible", "anycompatiblearray",
               "anycompatiblenonarray", "any", "anyenum", "anyrange", "anymultirange", "record"}
SKIP = {"internal", "cstring", "trigger", "event_trigger", "language_handler", "fdw_handler",
        "index_am_handler", "tsm_handler", "table_am_handler", "void", "unknown", "anycompatiblerange",
        "anycompatiblemultirange"}


def called_names(conn):
    """The names the extension's SQL calls that pg_catalog has functions of: every identifier
    followed by "(" in the bodies of its SQL and PL/pgSQL functions and procedures (including the
    statements they build as text)."""
    bodies = " ".join(r[0] for r in conn.execute(
        "SELECT p.prosrc FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid "
        " JOIN pg_extension e ON e.oid = d.refobjid AND d.deptype = 'e' "
        "WHERE e.extname = 'pg_shard_id' AND p.prolang <> (SELECT oid FROM pg_language WHERE lanname = 'c')"))
    names = set(re.findall(r"\b([a-z_][a-z0-9_]*)\s*\(", bodies.lower()))
    return sorted(r[0] for r in conn.execute(
        "SELECT DISTINCT proname::text FROM pg_proc WHERE pronamespace = 'pg_catalog'::regnamespace "
        "AND proname = ANY(%s) AND prokind IN ('f', 'a')", (list(names),)))


def plant(conn, schema):
    """Overloads in `schema` of every called name (functions and aggregates) and operator, each
    logging to public.hijacks before doing pg_catalog's work. Returns how many were planted."""
    conn.execute("CREATE TABLE public.hijacks (what text, who name)")
    conn.execute("GRANT INSERT ON public.hijacks TO PUBLIC")
    planted = 0
    signatures = set()
    for name in called_names(conn):
        for args, variadic, result, kind, retset in conn.execute(
                "SELECT proargtypes::regtype[]::text[], provariadic <> 0, prorettype::regtype::text, prokind, "
                "       proretset "
                "FROM pg_proc WHERE pronamespace = 'pg_catalog'::regnamespace AND proname = %s", (name,)).fetchall():
            if result in SKIP or any(a in SKIP for a in args):
                continue
            choices = []
            for i, a in enumerate(args):
                if variadic and i == len(args) - 1:
                    choices.append(None)  # expanded below
                elif a in POLYMORPHIC:
                    choices.append(TYPES)
                else:
                    choices.append([a])
            fixed = [c for c in choices if c is not None]
            combos = list(itertools.product(*fixed)) if fixed else [()]
            for combo in combos[:400]:
                tails = [()]
                if variadic:
                    tails = [t for n in range(0, 4) for t in itertools.product(VARIADIC_TYPES, repeat=n)]
                for tail in tails:
                    sig = tuple(combo) + tuple(tail)
                    if (name, sig, kind) in signatures or len(sig) > 6:
                        continue
                    signatures.add((name, sig, kind))
                    planted += plant_one(conn, schema, name, sig, result, kind, retset)
    for op in OPERATORS:
        for left, right in itertools.product(TYPES[:10], TYPES[:10]):
            planted += plant_operator(conn, schema, op, left, right)
    return planted


def attempt(conn, statements):
    try:
        with conn.transaction():
            for s in statements:
                conn.execute(s)
        return 1
    except Exception:  # noqa: BLE001 (a signature PostgreSQL will not take is simply not planted)
        return 0


def plant_one(conn, schema, name, sig, result, kind, retset):
    params = ", ".join(f"${i + 1}" for i in range(len(sig)))
    typed = ", ".join(sig)
    if result in POLYMORPHIC and result != "record":
        result = sig[0] if sig and sig[0] not in POLYMORPHIC else "text"
    label = f"{name}({typed})"
    if kind == "a":
        if len(sig) != 1:
            return 0
        state = f'"{schema}".hijack_state_{abs(hash(label))}'
        return attempt(conn, [
            f"CREATE FUNCTION {state}(s {sig[0]}, v {sig[0]}) RETURNS {sig[0]} LANGUAGE plpgsql AS $$ BEGIN "
            f"{log(label)} RETURN v; END $$",
            f'CREATE AGGREGATE "{schema}".{quote_ident(name)}({sig[0]}) (SFUNC = {state}, STYPE = {sig[0]})'])
    if retset:
        # (a set of records: a caller without a column list fails, which the test sees too)
        return attempt(conn, [
            f'CREATE FUNCTION "{schema}".{quote_ident(name)}({typed}) RETURNS SETOF {result} LANGUAGE plpgsql '
            f"AS $$ BEGIN {log(label)} "
            f"RETURN QUERY SELECT * FROM pg_catalog.{quote_ident(name)}({params}); END $$"])
    if result == "record":
        return 0
    return attempt(conn, [
        f'CREATE FUNCTION "{schema}".{quote_ident(name)}({typed}) RETURNS {result} LANGUAGE plpgsql AS $$ BEGIN '
        f"{log(label)} RETURN pg_catalog.{quote_ident(name)}({params}); END $$"])


def plant_operator(conn, schema, op, left, right):
    fn = f'"{schema}".hijack_op_{abs(hash((op, left, right)))}'
    label = f"operator {op}({left}, {right})"
    return attempt(conn, [
        f"CREATE FUNCTION {fn}(a {left}, b {right}) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN "
        f"{log(label)} RETURN false; END $$",
        f'CREATE OPERATOR "{schema}".{op} (LEFTARG = {left}, RIGHTARG = {right}, FUNCTION = {fn})'])


def log(label):
    """What a planted function does first: a WARNING (sent to the client at once, whatever happens
    to the transaction) and a row in public.hijacks (kept when the caller's statement commits)."""
    return (f"RAISE WARNING 'hijacked: % as %', {quote(label)}, current_user; "
            f"INSERT INTO public.hijacks VALUES ({quote(label)}, current_user);")


def quote(s):
    return "'" + s.replace("'", "''") + "'"


def quote_ident(s):
    return s if re.fullmatch(r"[a-z_][a-z0-9_]*", s) else '"' + s.replace('"', '""') + '"'


# Every function and procedure of the extension, by signature, with how the test runs it: a
# statement, or the name of the one whose run calls it. A signature missing here fails the test.
CALLS = {
    "next_shard_id(regclass,integer)": "SELECT next_shard_id('photos_seq', 1)",
    "next_shard_id(regclass)": "SELECT next_shard_id('photos_seq')",
    "next_shard_id_at(regclass,integer,timestamp with time zone)":
        "BEGIN; INSERT INTO photos (id, created_at) VALUES (next_shard_id_at('photos_seq', 1, pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 day'), pg_catalog.now()); COMMIT",
    "pg_shard_id_info()": "SELECT * FROM pg_shard_id_info()",
    "pg_shard_id_stats()": "SELECT * FROM pg_shard_id_stats",
    "pg_shard_id_stats_reset()": "SELECT pg_shard_id_stats_reset()",
    "shard_id_check()": "SELECT * FROM shard_id_check()",
    "shard_id_compose(timestamp with time zone,integer,integer)": "SELECT shard_id_compose(pg_catalog.now(), 1, 2)",
    "shard_id_compose(timestamp with time zone,integer,integer,timestamp with time zone)":
        "SELECT shard_id_compose(pg_catalog.now(), 1, 2, '2020-01-01+00')",
    "shard_id_extract_seq(bigint)": "SELECT shard_id_extract_seq(12345678901)",
    "shard_id_extract_shard(bigint)": "SELECT shard_id_extract_shard(12345678901)",
    "shard_id_extract_timestamp(bigint)": "SELECT shard_id_extract_timestamp(12345678901)",
    "shard_id_extract_timestamp(bigint,timestamp with time zone)":
        "SELECT shard_id_extract_timestamp(12345678901, '2020-01-01+00')",
    "shard_id_decode(bigint)": "SELECT * FROM shard_id_decode(12345678901)",
    "shard_id_decode(bigint,timestamp with time zone)": "SELECT * FROM shard_id_decode(12345678901, '2020-01-01+00')",
    "shard_id_from_shortcode(text)": "SELECT shard_id_from_shortcode(shard_id_to_shortcode(12345678901))",
    "shard_id_to_shortcode(bigint)": "shard_id_from_shortcode(text)",
    "shard_id_lower_bound(timestamp with time zone)": "SELECT shard_id_lower_bound(pg_catalog.now())",
    "shard_id_lower_bound(timestamp with time zone,timestamp with time zone)":
        "SELECT shard_id_lower_bound(pg_catalog.now(), '2020-01-01+00')",
    "shard_id_mask(bigint,text)": "SELECT shard_id_unmask(shard_id_mask(42, 't'), 't')",
    "shard_id_unmask(bigint,text)": "shard_id_mask(bigint,text)",
    "shard_id_mask(bigint,text,integer)": "SELECT shard_id_unmask(shard_id_mask(42, 't', 1), 't', 1)",
    "shard_id_unmask(bigint,text,integer)": "shard_id_mask(bigint,text,integer)",
    "shard_id_mask_shortcode(bigint,text)": "SELECT shard_id_unmask_shortcode(shard_id_mask_shortcode(42, 't'), 't')",
    "shard_id_unmask_shortcode(text,text)": "shard_id_mask_shortcode(bigint,text)",
    "shard_id_mask_keys_record()": "SELECT * FROM shard_id_mask_keys_record()",
    "shard_id_partition_bounds(timestamp with time zone,timestamp with time zone,interval)":
        "SELECT * FROM shard_id_partition_bounds(pg_catalog.now(), pg_catalog.now() OPERATOR(pg_catalog.+) interval '3 days', interval '1 day')",
    "shard_id_resync(regclass)": "SELECT shard_id_resync('photos_seq')",
    "shard_id_shard_for(bigint,integer)": "SELECT shard_id_shard_for(42::bigint, 16)",
    "shard_id_shard_for(text,integer)": "SELECT shard_id_shard_for('tenant', 16)",
    "shard_id_to_jsonb(anyelement)": "SELECT shard_id_to_jsonb(row(12345678901::bigint))",
    "shard_id_adopt(regclass,name,integer)": "SELECT shard_id_adopt('adopted', 'id', 4)",
    "shard_id_convert_plan(regclass,name,regclass,integer,name,boolean,boolean)":
        "SELECT * FROM shard_id_convert_plan('orders', 'created_at', 'orders_shard_seq', 2)",
    "shard_id_convert_prepare(regclass,name,regclass,integer,name,boolean,boolean)":
        "CALL shard_id_convert_prepare('orders', 'created_at', 'orders_shard_seq', 2)",
    # (0.7.0's signature, before issue 49: to show this test failing there)
    "shard_id_convert_prepare(regclass,name,regclass,integer,name)":
        "CALL shard_id_convert_prepare('orders', 'created_at', 'orders_shard_seq', 2)",
    "shard_id_convert_indexes(regclass)": "INDEXES",  # run by the test, statement by statement
    "shard_id_convert(regclass,integer)": "CALL shard_id_convert('orders', 300)",
    "shard_id_convert_finish(regclass)": "CALL shard_id_convert_finish('orders')",
    "shard_id_convert_abandon(regclass)":
        "CALL shard_id_convert_prepare('drafts', 'created_at', 'drafts_seq', 2); CALL shard_id_convert_abandon('drafts')",
}
# run as a superuser (with the same search_path): the calls only a superuser may make
SUPERUSER = {"pg_shard_id_stats_reset()", "shard_id_mask_keys_record()", "shard_id_mask(bigint,text)",
             "shard_id_mask(bigint,text,integer)", "shard_id_mask_shortcode(bigint,text)"}  # (unmask: granted to none)
# the extension's internal functions, each reached through the public one named
INTERNAL = {
    "_pg_shard_id.record_origin()": "next_shard_id(regclass,integer)",
}


def extension_functions(conn):
    """The extension's functions and procedures, by signature (those in the extension's own schema
    without it)."""
    return sorted(r[0].removeprefix("public.") for r in conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass "
        " AND d.objid = p.oid AND d.deptype = 'e' JOIN pg_extension e ON e.oid = d.refobjid "
        "WHERE e.extname = 'pg_shard_id'"))


def schema(conn, owner):
    conn.execute(f"SET ROLE {owner}")
    conn.execute("CREATE SEQUENCE photos_seq")
    conn.execute("CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_shard_id('photos_seq', 1), "
                 "created_at timestamptz)")
    conn.execute("INSERT INTO photos (created_at) SELECT pg_catalog.now() FROM generate_series(1, 10)")
    conn.execute("CREATE TABLE adopted (id bigserial PRIMARY KEY)")
    conn.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, note text)")
    conn.execute("CREATE TABLE lines (id bigserial PRIMARY KEY, order_id bigint REFERENCES orders, qty int)")
    conn.execute("CREATE VIEW order_ids AS SELECT id, note FROM orders WHERE id > 0")
    conn.execute("CREATE INDEX orders_note_id ON orders (note, id) WHERE id > 5")
    conn.execute("ALTER TABLE orders ADD CONSTRAINT orders_id_positive CHECK (id > 0)")
    conn.execute("INSERT INTO orders (created_at, note) SELECT '2026-01-05'::timestamptz + g * interval '1 min', 'n' "
                 "FROM generate_series(1, 1000) g")
    conn.execute("INSERT INTO lines (order_id, qty) SELECT g, g FROM generate_series(1, 1000) g")
    conn.execute("CREATE SEQUENCE orders_shard_seq")
    conn.execute("CREATE TABLE drafts (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL)")
    conn.execute("INSERT INTO drafts (created_at) SELECT '2026-01-05'::timestamptz + g * interval '1 min' "
                 "FROM generate_series(1, 100) g")
    conn.execute("CREATE SEQUENCE drafts_seq")
    conn.execute("RESET ROLE")


def test_no_planted_function_or_operator_runs(cluster, db):
    """With the attacker's schema first on the path: an overload with pg_catalog's own argument
    types wins there, as does a more exact one wherever the schema is."""
    with cluster.connect(db) as conn:
        conn.execute("SELECT pg_catalog.set_config('client_min_messages', 'warning', false)")
        owner, attacker = f"{db}_owner"[-50:], f"{db}_mallory"[-50:]
        for r in (owner, attacker):
            conn.execute(f'DROP ROLE IF EXISTS "{r}"')
        conn.execute(f'CREATE ROLE "{owner}"')
        conn.execute(f'CREATE ROLE "{attacker}"')
        conn.execute(f'GRANT CREATE ON SCHEMA public TO "{owner}", "{attacker}"')
        conn.execute(f'ALTER SCHEMA public OWNER TO "{attacker}"')  # as in databases before PostgreSQL 15
        # the key file for the masking calls
        conn.execute("COPY (SELECT unnest(ARRAY['key 1 000102030405060708090a0b0c0d0e0f"
                     "101112131415161718191a1b1c1d1e1f', 'current 1'])) TO PROGRAM "
                     "'umask 077 && cat > pg_shard_id.keys.new && mv pg_shard_id.keys.new pg_shard_id.keys'")
        schema(conn, f'"{owner}"')
        # (the node number for next_shard_id(seq), a server setting)
        conn.execute("ALTER SYSTEM SET pg_shard_id.node = 3")
        conn.execute("SELECT pg_reload_conf()")
        conn.execute(f'GRANT pg_read_all_stats TO "{owner}"')
        conn.execute(f'SET ROLE "{attacker}"')
        planted = plant(conn, "public")
        conn.execute("RESET ROLE")
        assert planted > 1000, planted

        # (this test's own catalog queries, now that the overloads are there, with pg_catalog only)
        conn.execute("SET search_path = pg_catalog, pg_temp")
        functions = extension_functions(conn)
        assert len(functions) > 30, functions
        unlisted = [f for f in functions if f not in CALLS and f not in INTERNAL
                    and not f.startswith(("_pg_shard_id.", "tests."))]  # (tests.: the #[pg_test]s)
        assert unlisted == [], f"functions of the extension this test does not run: {unlisted}"

        warnings, errors, current = [], [], [None]
        conn.add_notice_handler(lambda d: warnings.append(f"{current[0]}: {d.message_primary}")
                                if (d.message_primary or "").startswith("hijacked") else None)
        conn.execute(f'SET ROLE "{owner}"')
        conn.execute("SET search_path = public, pg_catalog")
        ran = []
        for signature, call in CALLS.items():
            if signature not in functions or call in CALLS:
                continue
            current[0] = signature
            try:
                run(conn, signature, call, owner)
            except psycopg.Error as e:
                errors.append(f"{signature}: {e.diag.message_primary}")
                conn.execute(f'SET ROLE "{owner}"')
            ran.append(signature)
        conn.execute("SET search_path = pg_catalog, pg_temp")
        conn.execute("RESET ROLE")
        conn.execute("ALTER SYSTEM RESET pg_shard_id.node")
        conn.execute("SELECT pg_reload_conf()")
        assert len(ran) == len([s for s, c in CALLS.items() if s in functions and c not in CALLS]), ran
        hijacks = conn.execute("SELECT what, who, count(*) FROM public.hijacks GROUP BY 1, 2 ORDER BY 3 DESC").fetchall()
        assert (sorted(set(warnings)), hijacks, errors) == ([], [], []), \
            f"planted functions ran ({planted} planted, {len(ran)} calls):\n" + "\n".join(
                sorted(set(warnings)) + [f"{h}" for h in hijacks] + errors)
        assert conn.execute("SELECT count(*) FROM public.orders WHERE "
                            "public.shard_id_extract_timestamp(id) <> created_at").fetchone()[0] == 0


def run(conn, signature, call, owner):
    """One function's call, as the table owner (or a superuser, for those only a superuser may
    call)."""
    if call == "INDEXES":
        # (statements given to the user to run: run, as docs/adopting.md says, with the search_path
        # pinned, since CREATE INDEX CONCURRENTLY cannot run in a function that would pin it)
        statements = conn.execute("SELECT * FROM shard_id_convert_indexes('orders')").fetchall()
        path = conn.execute("SHOW search_path").fetchone()[0]
        conn.execute("SET search_path = pg_catalog, pg_temp")
        for (statement,) in statements:
            conn.execute(statement)
        conn.execute(f"SET search_path = {path}")
    elif signature in SUPERUSER:
        conn.execute("RESET ROLE")
        conn.execute(call)
        conn.execute(f'SET ROLE "{owner}"')
    else:
        for statement in call.split("; "):
            conn.execute(statement)
