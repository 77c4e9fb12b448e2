"""Sequence privileges under a remembered check (issue 40, src/privilege.rs): next_shard_id asks
PostgreSQL's own check once per role and sequence and remembers a yes until a catalog that can
change it is invalidated. Checked against nextval() itself: a seeded random run of catalog changes
from another session (grants and revokes on the sequences, to roles, a group, PUBLIC and
pg_database_owner; memberships; superuser; INHERIT; the sequence's and the database's owner) and
of the drawing session's own moves (SET ROLE, transactions begun, committed and rolled back,
calls inside and outside them). After every call of next_shard_id, nextval() on the same sequence
in the same transaction must give the same answer: both succeed, or both raise 42501. Run by
tests/guarantee/run.sh."""

import random
import threading
import time

import psycopg
import pytest

ROLES = ("regress_priv_a", "regress_priv_b")
GROUP = "regress_priv_group"
SEQUENCES = ("priv_s1", "priv_s2")
STEPS = 1000


def setup_roles(cluster, db):
    with cluster.connect(db) as conn:
        for role in (*ROLES, GROUP):
            conn.execute(f"DROP ROLE IF EXISTS {role}")
        for role in (*ROLES, GROUP):
            conn.execute(f"CREATE ROLE {role}")
        for seq in SEQUENCES:
            conn.execute(f"CREATE SEQUENCE {seq}")
        conn.execute(f"CREATE SEQUENCE priv_s3 CACHE 32")
        return [conn.execute(f"SELECT '{seq}'::regclass::oid").fetchone()[0]
                for seq in (*SEQUENCES, "priv_s3")]


def catalog_change(rnd, db, sequences):
    """One random change, as the other session commits it."""
    seq = rnd.choice(sequences)
    grantee = rnd.choice((*ROLES, *ROLES, GROUP, "PUBLIC", "pg_database_owner"))
    privilege = rnd.choice(("USAGE", "USAGE", "UPDATE", "SELECT", "ALL"))
    role = rnd.choice(ROLES)
    return rnd.choice((
        f"GRANT {privilege} ON SEQUENCE {seq} TO {grantee}",
        f"REVOKE {privilege} ON SEQUENCE {seq} FROM {grantee}",
        f"GRANT {privilege} ON SEQUENCE {seq} TO {grantee}",
        f"REVOKE {privilege} ON SEQUENCE {seq} FROM {grantee}",
        f"GRANT {GROUP} TO {role}",
        f"REVOKE {GROUP} FROM {role}",
        f"ALTER ROLE {role} {rnd.choice(('SUPERUSER', 'NOSUPERUSER', 'NOSUPERUSER'))}",
        f"ALTER ROLE {role} {rnd.choice(('INHERIT', 'NOINHERIT'))}",
        f"ALTER SEQUENCE {seq} OWNER TO {rnd.choice((*ROLES, 'postgres'))}",
        f"ALTER DATABASE {db} OWNER TO {rnd.choice((*ROLES, 'postgres'))}",
    ))


def outcome(conn, in_transaction, sql):
    """'ok' or the SQLSTATE of `sql`, inside a savepoint when a transaction is open."""
    if in_transaction:
        conn.execute("SAVEPOINT attempt")
    try:
        conn.execute(sql)
        result = "ok"
    except psycopg.Error as e:
        result = e.sqlstate
    if in_transaction:
        conn.execute("ROLLBACK TO SAVEPOINT attempt" if result != "ok" else "RELEASE SAVEPOINT attempt")
    return result


# (how the drawer is allowed, the other session's change that takes it away): one per catalog the
# remembered answer depends on (src/privilege.rs registers each)
TAKEN_AWAY = {
    "revoked from the role (pg_class)": (
        "GRANT USAGE ON SEQUENCE priv_s1 TO {a}", "REVOKE USAGE ON SEQUENCE priv_s1 FROM {a}"),
    "sequence given to another owner (pg_class)": (
        "ALTER SEQUENCE priv_s1 OWNER TO {a}", "ALTER SEQUENCE priv_s1 OWNER TO postgres"),
    "membership revoked (pg_auth_members)": (
        "GRANT USAGE ON SEQUENCE priv_s1 TO {g}; GRANT {g} TO {a}", "REVOKE {g} FROM {a}"),
    "superuser taken (pg_authid)": ("ALTER ROLE {a} SUPERUSER", "ALTER ROLE {a} NOSUPERUSER"),
    "database given to another owner (pg_database)": (
        "GRANT USAGE ON SEQUENCE priv_s1 TO pg_database_owner; ALTER DATABASE {db} OWNER TO {a}",
        "ALTER DATABASE {db} OWNER TO postgres"),
}


def drop_roles(cluster, db):
    with cluster.connect(db) as conn:
        conn.execute(f"ALTER DATABASE {db} OWNER TO postgres")
        for seq in (*SEQUENCES, "priv_s3"):
            conn.execute(f"DROP SEQUENCE IF EXISTS {seq}")
        for role in (*ROLES, GROUP):
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


@pytest.mark.parametrize("how", TAKEN_AWAY)
@pytest.mark.parametrize("when", ["between statements", "after BEGIN, before the first call"])
def test_a_privilege_taken_away_is_refused_at_the_next_call(cluster, db, how, when):
    setup_roles(cluster, db)
    grant, take = (sql.format(a=ROLES[0], g=GROUP, db=db) for sql in TAKEN_AWAY[how])
    with cluster.connect(db) as admin, cluster.connect(db) as drawer:
        admin.execute(grant)
        drawer.execute(f"SET ROLE {ROLES[0]}")
        for _ in range(3):  # the yes is remembered
            drawer.execute("SELECT next_shard_id('priv_s1', 1)")
        in_transaction = when != "between statements"
        if in_transaction:
            drawer.execute("BEGIN")
        admin.execute(take)
        assert outcome(drawer, in_transaction, "SELECT next_shard_id('priv_s1', 1)") == "42501"
        assert outcome(drawer, in_transaction, "SELECT nextval('priv_s1')") == "42501"
        if in_transaction:
            drawer.execute("ROLLBACK")
        drawer.execute("RESET ROLE")
    drop_roles(cluster, db)


def test_a_revoke_within_a_transaction_refuses_its_next_draws(cluster, db):
    """A role allowed through a group draws in a transaction that holds the sequence's lock; the
    group's privilege is revoked; the next draws of that transaction and of the next one are
    refused, as nextval() is. (An outside review described a race in a first version: PostgreSQL's
    check receiving the revoke midway, after reading the old ACL, and that yes being kept. The
    rule against it is core's PrivilegeCache::remember, whose unit and property tests fail without
    it; this arrangement did not make PostgreSQL 15 receive the revoke inside its check.)"""
    setup_roles(cluster, db)
    a = ROLES[0]
    with cluster.connect(db) as admin:
        admin.execute(f"GRANT USAGE ON SEQUENCE priv_s1 TO {GROUP}; GRANT {GROUP} TO {a}")
    with cluster.connect(db) as admin, cluster.connect(db) as drawer:
        drawer.execute("BEGIN")
        drawer.execute(f"SET LOCAL ROLE {a}")
        assert outcome(drawer, True, "SELECT next_shard_id('priv_s1', 1)") == "ok"
        admin.execute(f"REVOKE USAGE ON SEQUENCE priv_s1 FROM {GROUP}")
        drawer.execute("SELECT 1 FROM pg_class LIMIT 1")  # a lock: invalidations received
        assert outcome(drawer, True, "SELECT next_shard_id('priv_s1', 1)") == "42501"
        assert outcome(drawer, True, "SELECT nextval('priv_s1')") == "42501"
        drawer.execute("COMMIT")
        drawer.execute(f"SET ROLE {a}")
        assert outcome(drawer, False, "SELECT next_shard_id('priv_s1', 1)") == "42501"
        drawer.execute("RESET ROLE")
    drop_roles(cluster, db)


def test_a_revoke_committed_while_the_draw_waits_for_the_sequence_is_seen(cluster, db):
    """nextval() locks the sequence before it checks: a REVOKE committed by a transaction the lock
    waited for (it altered the sequence) refuses the draw. (An outside review's recipe; the first
    version decided before the lock and drew the id.)"""
    setup_roles(cluster, db)
    a = ROLES[0]
    with cluster.connect(db) as admin, cluster.connect(db) as drawer:
        admin.execute(f"GRANT USAGE ON SEQUENCE priv_s1 TO {a}")
        drawer.execute(f"SET ROLE {a}")
        for _ in range(3):  # remembered in earlier transactions
            drawer.execute("SELECT next_shard_id('priv_s1', 1)")
        admin.execute("BEGIN")
        admin.execute("ALTER SEQUENCE priv_s1 INCREMENT 1")  # ShareRowExclusiveLock until COMMIT
        admin.execute(f"REVOKE USAGE ON SEQUENCE priv_s1 FROM {a}")
        result = {}
        waiting = threading.Thread(
            target=lambda: result.update(draw=outcome(drawer, False, "SELECT next_shard_id('priv_s1', 1)")))
        waiting.start()
        time.sleep(0.5)
        assert waiting.is_alive(), "the draw did not wait for the sequence's lock"
        admin.execute("COMMIT")
        waiting.join(30)
        assert result.get("draw") == "42501", result
        assert outcome(drawer, False, "SELECT nextval('priv_s1')") == "42501"
        drawer.execute("RESET ROLE")
    drop_roles(cluster, db)


def test_each_role_has_its_own_answer(cluster, db):
    setup_roles(cluster, db)
    with cluster.connect(db) as conn:
        conn.execute(f"GRANT USAGE ON SEQUENCE priv_s1 TO {ROLES[0]}")
        conn.execute("BEGIN")
        conn.execute(f"SET LOCAL ROLE {ROLES[0]}")
        conn.execute("SELECT next_shard_id('priv_s1', 1)")
        conn.execute(f"SET LOCAL ROLE {ROLES[1]}")
        assert outcome(conn, True, "SELECT next_shard_id('priv_s1', 1)") == "42501"
        # a SECURITY DEFINER function draws with its owner's privilege
        conn.execute("ROLLBACK")
        conn.execute("CREATE FUNCTION priv_draw() RETURNS bigint SECURITY DEFINER "
                     "LANGUAGE sql AS $$ SELECT next_shard_id('priv_s1', 1) $$")
        conn.execute(f"ALTER FUNCTION priv_draw() OWNER TO {ROLES[0]}")
        conn.execute(f"SET ROLE {ROLES[1]}")
        assert outcome(conn, False, "SELECT priv_draw()") == "ok"
        assert outcome(conn, False, "SELECT next_shard_id('priv_s1', 1)") == "42501"
        conn.execute("RESET ROLE")
        conn.execute("DROP FUNCTION priv_draw()")
    drop_roles(cluster, db)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_next_shard_id_is_allowed_exactly_when_nextval_is(cluster, db, seed):
    rnd = random.Random(seed)
    oids = setup_roles(cluster, db)
    seen = {"ok": 0, "42501": 0}
    with cluster.connect(db) as admin, cluster.connect(db) as drawer:
        admin.execute("SET lock_timeout = '100ms'")
        in_transaction, last = False, None
        for step in range(STEPS):
            move = rnd.random()
            if move < 0.25:
                # ALTER SEQUENCE ... OWNER waits for the drawer's open transaction: skipped then
                outcome(admin, False, catalog_change(rnd, db, SEQUENCES + ("priv_s3",)))
            elif move < 0.3:
                target = rnd.choice((*ROLES, *ROLES, GROUP, "NONE"))
                outcome(drawer, in_transaction,
                        "RESET ROLE" if target == "NONE" else f"SET ROLE {target}")
            elif move < 0.4:
                if in_transaction:
                    drawer.execute(rnd.choice(("COMMIT", "ROLLBACK")))
                else:
                    drawer.execute("BEGIN")
                in_transaction = not in_transaction
            else:
                # mostly the sequence drawn last, so that a change meets a remembered yes
                oid = last = last if last and rnd.random() < 0.6 else rnd.choice(oids)
                ours = outcome(drawer, in_transaction, f"SELECT next_shard_id({oid}::regclass, 1)")
                theirs = outcome(drawer, in_transaction, f"SELECT nextval({oid}::regclass)")
                assert ours == theirs, (
                    f"seed {seed}, step {step}: next_shard_id {ours}, nextval() {theirs} "
                    f"(role {drawer.execute('SELECT current_user').fetchone()[0]}, "
                    f"in a transaction: {in_transaction})")
                seen[ours] = seen.get(ours, 0) + 1
        if in_transaction:
            drawer.execute("ROLLBACK")
        drawer.execute("RESET ROLE")
    # both answers were exercised, many times, and nothing else was raised
    assert set(seen) == {"ok", "42501"}, seen
    assert seen["ok"] > 30 and seen["42501"] > 30, seen
    drop_roles(cluster, db)
