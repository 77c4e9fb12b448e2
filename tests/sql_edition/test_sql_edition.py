"""The SQL edition (issue 56), installed as a plain script by a role that is not a superuser on a
server where pg_shard_id's library is never loaded, then attacked: bursts far past 1,024 ids per
millisecond (a frozen clock), sessions at once on one sequence with and without CACHE, rolled-back
transactions, a crash, the clock stepped back and forward (libfaketime), bad input, and a role's
look-alike operators on the search_path. Every test asserts no id repeats; each ran against
Instagram's function first where it repeats (test_instagram_repeats_where_the_edition_does_not)."""

import os
import threading

import psycopg
import pytest

from conftest import install_plain, psql
from pgcluster import Cluster

EPOCH_MS = 1767225600000


def one(conn, query, params=None):
    return conn.execute(query, params).fetchone()[0]


@pytest.fixture
def db(cluster, edition, request):
    """A database with the edition in schema ids, installed by role `owner` (CREATE on the database
    only), and a guarded sequence s owned by role `app`, which may draw from it."""
    name = "e_" + request.node.name.lower().replace("[", "_").replace("]", "").replace("-", "_")[:50]
    cluster.sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    cluster.sql(f"CREATE DATABASE {name}")
    for role in ("owner", "app", "other"):
        if not cluster.sql("SELECT 1 FROM pg_roles WHERE rolname = %s", params=(role,)):
            cluster.sql(f"CREATE ROLE {role} LOGIN")
    cluster.sql(f"GRANT CREATE ON DATABASE {name} TO owner")
    cluster.sql("GRANT CREATE ON SCHEMA public TO app", name)
    install_plain(cluster, name, edition, user="owner")
    with cluster.connect(name) as conn:
        conn.execute("SET ROLE app")
        conn.execute("CREATE SEQUENCE s")
        conn.execute("SELECT ids.shard_id_guard('s')")  # (grants the edition's owner SELECT on s)
    return name


def app(cluster, db):
    conn = cluster.connect(db)
    conn.execute("SET ROLE app")
    return conn


def draw(conn, count, seq="s", shard=5):
    return [r[0] for r in conn.execute(
        "SELECT ids.next_shard_id(%s, %s) FROM generate_series(1, %s)", (seq, shard, count)).fetchall()]


def test_installed_by_a_role_that_is_not_a_superuser_without_the_library(cluster, db):
    with cluster.connect(db) as conn:
        assert one(conn, "SELECT rolsuper FROM pg_roles WHERE rolname = 'owner'") is False
        assert one(conn, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'ids'::regnamespace "
                         "AND prolang NOT IN (SELECT oid FROM pg_language WHERE lanname IN ('sql', 'plpgsql'))") == 0
        assert one(conn, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'ids'::regnamespace "
                         "AND proowner <> 'owner'::regrole") == 0
        assert one(conn, "SELECT current_setting('shared_preload_libraries')") == ""
        assert one(conn, "SELECT count(*) FROM pg_extension WHERE extname = 'pg_shard_id'") == 0
    with app(cluster, db) as conn:
        ids = draw(conn, 1000)
        # the backend that made them never mapped the library
        with open(f"/proc/{one(conn, 'SELECT pg_backend_pid()')}/maps") as f:
            assert "/pg_shard_id.so" not in f.read()
    assert len(set(ids)) == 1000


def test_the_ids_have_the_layout(cluster, db):
    with app(cluster, db) as conn:
        before = one(conn, "SELECT ids._shard_id_clock_ms()")
        rows = conn.execute("SELECT ids.next_shard_id('s', 8191), currval('s') FROM generate_series(1, 3000)").fetchall()
        after = one(conn, "SELECT ids._shard_id_clock_ms()")
    for id_, value in rows:
        assert id_ > 0
        assert id_ & 1023 == value % 1024
        assert (id_ >> 10) & 8191 == 8191
        assert before <= id_ >> 23 <= after + 5  # (a burst may run a few ms ahead)
    ids = [r[0] for r in rows]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def frozen(cluster):
    """The cluster's clock stopped (libfaketime reads the file at every reading)."""
    with open(cluster.clock_file + ".tmp", "w") as f:
        f.write("2026-11-27 12:00:00\n")
    os.chmod(cluster.clock_file + ".tmp", 0o644)
    os.replace(cluster.clock_file + ".tmp", cluster.clock_file)


@pytest.fixture(scope="module")
def fake(edition):
    c = Cluster("sqled_fake", preload=False, fake_clock=True)
    for role in ("owner", "app", "other"):
        c.sql(f"CREATE ROLE {role} LOGIN")
    yield c
    c.destroy()


def fresh(fake, edition, name):
    fake.set_clock(0)
    fake.sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    fake.sql(f"CREATE DATABASE {name}")
    install_plain(fake, name, edition)
    fake.sql("CREATE SEQUENCE s; SELECT ids.shard_id_guard('s')", name)
    fake.sql("CREATE SCHEMA insta5; CREATE SEQUENCE insta5.table_id_seq", name)
    fake.sql(open(os.path.join(os.path.dirname(__file__), "..", "..", "bench", "generators.sql")).read()
             .split("-- For the same formula")[0].split("CREATE SEQUENCE insta5.table_id_seq;")[1], name)


def test_instagram_repeats_where_the_edition_does_not(fake, edition):
    """With the clock stopped, every id falls in one millisecond: Instagram's function repeats
    from the 1,025th; the edition's run ahead of the clock, none repeated."""
    fresh(fake, edition, "frozen")
    frozen(fake)
    with fake.connect("frozen") as conn:
        insta = [r[0] for r in conn.execute("SELECT insta5.next_id() FROM generate_series(1, 5000)").fetchall()]
        ours = draw(conn, 50000)
    fake.set_clock(0)
    assert len(set(insta)) == 1024
    assert len(set(ours)) == 50000
    assert ours == sorted(ours)
    assert (ours[-1] >> 23) - (ours[0] >> 23) >= 48  # 50,000 ids: 49 milliseconds or more


def test_sessions_at_once_with_and_without_cache(fake, edition):
    fresh(fake, edition, "sessions")
    frozen(fake)  # (every id in one millisecond by the clock: the hardest case)
    results, errors = [], []

    def worker(seq):
        try:
            with fake.connect("sessions") as c:
                results.extend(draw(c, 20000, seq))
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    for cache in (1, 32):
        fake.sql(f"ALTER SEQUENCE s CACHE {cache}", "sessions")
        results.clear()
        threads = [threading.Thread(target=worker, args=("s",)) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert errors == []
        assert len(results) == 80000 and len(set(results)) == 80000, cache
    fake.set_clock(0)


def test_a_rolled_back_id_is_never_given_again(fake, edition):
    """Ids handed out in a transaction that rolled back (the registers' changes in it are not undone:
    they are sequences), then more, with the clock stepped back in between."""
    fresh(fake, edition, "rollback")
    fake.set_clock(3600)
    with fake.connect("rollback", autocommit=False) as conn:
        gone = draw(conn, 30000)
        conn.rollback()
    fake.set_clock(0)  # an hour back
    with fake.connect("rollback") as conn:
        after = draw(conn, 60000)
    assert not set(gone) & set(after)
    assert min(after) > max(gone)


def test_a_crash_and_the_clock_stepped_back_and_forward(fake, edition):
    fresh(fake, edition, "crash")
    seen = []
    for offset, crash in ((7200, False), (0, True), (-600, True), (86400, False), (0, True)):
        fake.set_clock(offset)
        with fake.connect("crash") as conn:
            seen.extend(draw(conn, 20000))
        fake.restart("immediate" if crash else "fast")
    fake.set_clock(0)
    assert len(set(seen)) == len(seen)
    assert seen == sorted(seen)  # never back, whatever the clock did


def test_bad_input(cluster, db, edition):
    with app(cluster, db) as conn:
        for shard, state in ((-1, "22003"), (8192, "22003")):
            with pytest.raises(psycopg.Error) as e:
                one(conn, "SELECT ids.next_shard_id('s', %s)", (shard,))
            assert e.value.sqlstate == state
        assert one(conn, "SELECT ids.next_shard_id(NULL, 5)") is None
        assert one(conn, "SELECT ids.next_shard_id('s', NULL)") is None
        conn.execute("CREATE TABLE t (x int)")
        with pytest.raises(psycopg.Error) as e:
            one(conn, "SELECT ids.next_shard_id('t', 5)")
        assert e.value.sqlstate == "42809"
        conn.execute("CREATE SEQUENCE unguarded")
        with pytest.raises(psycopg.Error) as e:
            one(conn, "SELECT ids.next_shard_id('unguarded', 5)")
        assert e.value.sqlstate == "55000" and "shard_id_guard" in e.value.diag.message_hint
        with pytest.raises(psycopg.Error) as e:
            one(conn, "SELECT ids.next_shard_id('s')")  # no node number set
        assert e.value.sqlstate == "55000"
        conn.execute("CREATE SEQUENCE down INCREMENT BY -1")
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT ids.shard_id_guard('down')")
        assert e.value.sqlstate == "22023"
        # settings that change ids are the owner's
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT ids.shard_id_configure(node => 3)")
        assert e.value.sqlstate == "42501"
    with cluster.connect(db) as conn:
        conn.execute("SET ROLE other")  # no USAGE on s
        with pytest.raises(psycopg.Error) as e:
            one(conn, "SELECT ids.next_shard_id('s', 5)")
        assert e.value.sqlstate == "42501"
        conn.execute("RESET ROLE")
        conn.execute("SET ROLE owner")
        conn.execute("SELECT ids.shard_id_configure(node => 3)")
        with pytest.raises(psycopg.Error) as e:  # ids were made with the epoch in force
            conn.execute("SELECT ids.shard_id_configure(epoch => '2025-01-01 00:00:00+00')")
        assert e.value.sqlstate == "55000"
    with app(cluster, db) as conn:
        assert (one(conn, "SELECT ids.next_shard_id('s')") >> 10) & 8191 == 3


def test_the_clock_before_the_epoch(cluster, edition):
    cluster.sql("DROP DATABASE IF EXISTS early WITH (FORCE)")
    cluster.sql("CREATE DATABASE early")
    install_plain(cluster, "early", edition)
    cluster.sql("SELECT ids.shard_id_configure(epoch => date_trunc('day', now()) + interval '2 days')", "early")
    cluster.sql("CREATE SEQUENCE s; SELECT ids.shard_id_guard('s')", "early")
    with cluster.connect("early") as conn:
        with pytest.raises(psycopg.Error) as e:
            one(conn, "SELECT ids.next_shard_id('s', 5)")
        assert e.value.sqlstate == "22008"


def test_a_role_s_look_alike_operators_on_the_search_path(cluster, db):
    """A caller that puts its own >>, +, |, & and >= for bigint before pg_catalog gets the same ids,
    and none of its functions runs."""
    cluster.sql(f"GRANT CREATE ON DATABASE {db} TO app")
    with app(cluster, db) as conn:
        conn.execute("CREATE SCHEMA evil")
        conn.execute("CREATE TABLE evil.calls (n int)")
        for op, fn in ((">>", "int8shr"), ("+", "int8pl"), ("|", "int8or"), ("&", "int8and"), ("<<", "int8shl")):
            right = "integer" if op in (">>", "<<") else "bigint"
            conn.execute(f"CREATE FUNCTION evil.f_{fn}(a bigint, b {right}) RETURNS bigint LANGUAGE sql "
                         f"AS $$ INSERT INTO evil.calls VALUES (1); SELECT pg_catalog.{fn}(a, b) $$")
            conn.execute(f"CREATE OPERATOR evil.{op} (LEFTARG = bigint, RIGHTARG = {right}, FUNCTION = evil.f_{fn})")
        conn.execute("SET search_path = evil, pg_catalog, public")
        ids = draw(conn, 3000)
        assert one(conn, "SELECT count(*) FROM evil.calls") == 0
    assert len(set(ids)) == 3000 and ids == sorted(ids)


def test_a_jump_asked_for_by_any_role_never_takes_ids_back(fake, edition):
    """The jump is SECURITY DEFINER and anyone may call it: after the clock stepped back an hour,
    jumps asked for by hand (and by stale cached values) must not lower the offset."""
    fresh(fake, edition, "jumps")
    fake.sql("ALTER SEQUENCE s CACHE 20", "jumps")
    fake.set_clock(3600)
    with fake.connect("jumps") as conn:
        before = draw(conn, 5000)
    fake.set_clock(0)
    with fake.connect("jumps") as conn, fake.connect("jumps") as other:
        other.execute("SET ROLE other")
        after = []
        for _ in range(20):
            other.execute("SELECT ids._shard_id_jump('s')")
            after += draw(conn, 50)
    assert min(after) > max(before)
    assert after == sorted(after) and len(set(after)) == len(after)


def test_a_sequence_set_back_is_refused_until_it_passes_its_guard(cluster, db):
    """setval back below values already used: refused with the setval that moves it on (the guard
    followed the sequence down before, and the ids of the values drawn again could repeat)."""
    with app(cluster, db) as conn:
        before = draw(conn, 5000)
        conn.execute("SELECT setval('s', 10)")
        with pytest.raises(psycopg.Error) as e:
            one(conn, "SELECT ids.next_shard_id('s', 5)")
        assert e.value.sqlstate == "55000"
        conn.execute(e.value.diag.message_hint.removeprefix("Move it past them: "))
        after = draw(conn, 5000)
    assert min(after) > max(before) and len(set(after)) == 5000


def test_a_dump_restored_into_another_database_goes_on_above(cluster, db, edition):
    """pg_dump and pg_restore (a new database: every oid changes): the guard's registers are
    restored with their values, named by the old oids; next_shard_id refuses the sequence (55000)
    until the edition's owner runs shard_id_restored, which gives each sequence its own back,
    offset kept: the ids go on above the restored ones, even ones ahead of the clock (INCREMENT BY
    1024: every value a millisecond further)."""
    with cluster.connect(db) as conn:
        conn.execute("CREATE SEQUENCE fast INCREMENT BY 1024")
        conn.execute("SELECT ids.shard_id_guard('fast')")
        conn.execute("CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT ids.next_shard_id('fast', 5), x int)")
        conn.execute("INSERT INTO photos (x) SELECT g FROM generate_series(1, 3000) g")
        stored = one(conn, "SELECT max(id) FROM photos")
    dump = os.path.join(cluster.dir, "edition.dump")
    from pgcluster import as_postgres
    as_postgres([os.path.join(os.environ["PG_BIN"], "pg_dump"), "-h", cluster.dir, "-p", str(cluster.port), "-U", "postgres",
                 "-Fc", "-f", dump, db])
    cluster.sql("DROP DATABASE IF EXISTS restored WITH (FORCE)")
    cluster.sql("CREATE DATABASE restored")
    as_postgres([os.path.join(os.environ["PG_BIN"], "pg_restore"), "-h", cluster.dir, "-p", str(cluster.port), "-U", "postgres",
                 "-d", "restored", dump])
    with cluster.connect("restored") as conn:
        with pytest.raises(psycopg.Error) as e:
            conn.execute("INSERT INTO photos (x) VALUES (0)")
        assert e.value.sqlstate == "55000" and "shard_id_restored" in e.value.diag.message_hint
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT ids.shard_id_guard('fast')")
        assert e.value.sqlstate == "55000"
        assert [r[0] for r in conn.execute("SELECT ids.shard_id_restored()::text")] == ["public.s", "fast"] \
            or {r[0] for r in conn.execute("SELECT seq::text FROM ids.shard_id_guards")} == {"s", "fast"}
        conn.execute("INSERT INTO photos (x) SELECT g FROM generate_series(1, 1000) g")
        assert one(conn, "SELECT min(id) FROM photos WHERE x > 0 AND id > %s", (stored,)) is not None
        assert one(conn, "SELECT count(*) FROM photos") == 4000
        assert one(conn, "SELECT count(DISTINCT id) FROM photos") == 4000
        assert one(conn, "SELECT min(id) FROM (SELECT id FROM photos ORDER BY id DESC LIMIT 1000) x") > stored


def test_no_role_can_hold_the_jumps_and_a_cancelled_jump_holds_nothing(cluster, db):
    """A jump locks its sequence's row of ids.shard_id_guards, which only the edition's owner may
    lock (an advisory lock, as first written, could be taken by any role, and was left held by a
    cancel that came as it was granted: the fourth outside review). A jump cancelled while it waits
    leaves nothing held: the next one goes through at once."""
    import time
    with cluster.connect(db) as stranger:
        stranger.execute("SET ROLE other")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            stranger.execute("SELECT FROM ids.shard_id_guards FOR UPDATE")
    with cluster.connect(db, autocommit=False) as holder, app(cluster, db) as waiter, app(cluster, db) as after:
        holder.execute("SELECT FROM ids.shard_id_guards WHERE seq = 's'::regclass FOR UPDATE")
        pid = one(waiter, "SELECT pg_backend_pid()")
        waiter_errors = []

        def wait():
            try:
                waiter.execute("SELECT ids._shard_id_jump('s')")
            except psycopg.Error as e:
                waiter_errors.append(e.sqlstate)
        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.5)
        holder.execute("SELECT pg_cancel_backend(%s)", (pid,))
        holder.commit()
        t.join()
        assert waiter_errors == ["57014"]
        after.execute("SET lock_timeout = '2s'")
        after.execute("SELECT ids._shard_id_jump('s')")
        assert len(set(draw(after, 2000))) == 2000


def test_a_large_cache_in_several_sessions_does_not_stall(cluster, db):
    """Each session's CACHE filled before another's jump is stale: its values are put aside
    without a jump each (one jump per value took 4 s per refill at CACHE 100000: the fourth
    outside review)."""
    import time
    with app(cluster, db) as a, app(cluster, db) as b:
        a.execute("CREATE SEQUENCE big CACHE 100000")
        a.execute("SELECT ids.shard_id_guard('big')")
        started = time.monotonic()
        ids_ = []
        for _ in range(5):
            ids_ += draw(a, 10, "big") + draw(b, 10, "big")
        assert time.monotonic() - started < 5
    assert len(set(ids_)) == 100


def test_a_schema_other_roles_may_create_in_is_refused(cluster, edition):
    """The guard finds its registers by name: a role that may create objects in the edition's schema
    could make a sequence's registers before its guard (the fifth outside review forged an offset
    that way in public). The install refuses such a schema."""
    import subprocess
    cluster.sql("DROP DATABASE IF EXISTS shared WITH (FORCE)")
    cluster.sql("CREATE DATABASE shared")
    cluster.sql("GRANT CREATE ON SCHEMA public TO PUBLIC", "shared")
    with pytest.raises(subprocess.CalledProcessError) as e:
        install_plain(cluster, "shared", edition, schema="public")
    assert "roles other than its owner may create objects" in e.value.stderr
    assert cluster.one("SELECT count(*) FROM pg_proc WHERE proname = 'next_shard_id'", "shared") == 0


def test_a_schema_another_role_owns_is_refused(cluster, edition):
    """The owner of the edition's schema could swap the registers, or the helpers the edition's
    SECURITY DEFINER functions call by name (the sixth outside review made itself superuser so,
    in public, owned by pg_database_owner). The install refuses a schema the installer does not
    own."""
    import subprocess
    cluster.sql("DROP DATABASE IF EXISTS theirs WITH (FORCE)")
    cluster.sql("CREATE DATABASE theirs")
    with pytest.raises(subprocess.CalledProcessError) as e:
        install_plain(cluster, "theirs", edition, schema="public")  # (pg_database_owner's)
    assert "is not owned by" in e.value.stderr
