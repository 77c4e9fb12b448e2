"""A seeded, reproducible fuzzer for ids at past times and table conversions (issues 49 and 50):
the promise that no id of a sequence is stored twice, whatever order backfills, conversions, the
DEFAULT, restarts, crashes, copies and the clock come in.

Each seed runs one scenario on a real cluster whose every process reads a clock under libfaketime
(the real clock plus an offset the scenario moves both ways), in a database with one sequence, s,
drawn from by:

* `live`: a table filled by its DEFAULT next_shard_id('s', 7) and by backfills,
  next_shard_id_at('s', 7, t), into a non-unique index (a repeat is stored and counted, not
  refused);
* `conv`: a bigserial table with referencing rows, converted to next_shard_id('s', 7) ids at its
  rows' own times by shard_id_convert (prepare, indexes, batches killed and resumed, finish).

Events, in a random order: DEFAULT inserts; backfills of crowded milliseconds (over 1,024 rows in
one), sparse ones, close to the clock (1.1 to 10 s behind) and far behind it (hours), some rolled
back, some left open in a long transaction across later events (committed or rolled back later,
or lost with a crash); the clock stepped back or forward (up to 15 s); a clean restart; a crash
(immediate stop); a copy (pg_dump and pg_restore into a new database, where the scenario goes
on); a step of the conversion. Issue 55's shapes: a DEFAULT row held 2.5 s by a slow BEFORE
trigger, or an id selected and inserted 2.5 s later, while every remainder of the milliseconds
around it is backfilled ("slow"); writers of the converted tables while it runs ("writes": a row
referencing itself, a child inserted before its parent and a parent deleted and inserted again
with its old key under deferred foreign keys, an insert while the table is renamed); the
conversion abandoned and prepared again later ("abandon"). The 27th review's shape ("retry", in
half the seeds, from a random stream of its own so that the other events stay as they were): ids
drawn, stored in a savepoint, another backfill needing room, the savepoint rolled back, VACUUM, a
third backfill at the same milliseconds, the same ids stored again (an ORM's retry). Half the backfills just behind the clock come as the interleaving
of issue 50, more often than chance would give it: the DEFAULT's last id, the clock moved on, the
backfill, the clock stepped back into its milliseconds, DEFAULT inserts.

The oracle, at the end: no id stored twice among every row of s (both tables, the conversion's
new column whatever its phase); every backfilled or converted id in its row's millisecond, or in a
later one only when every millisecond skipped held 1,024 ids of the shard (stored, or handed out
to a transaction that rolled back: the test keeps those); no insert refused. On a failure it
prints the seed and the events.

    python fuzz_history.py --seeds 10 [--seed S]     # CI: seeds S .. S+9
    python fuzz_history.py --soak 3600 [--seed S]    # soak
"""

import argparse
import datetime
import random
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

import psycopg

from pgcluster import PG_BIN, Cluster

SHARD = 7
EVENTS = ["insert", "insert", "backfill", "backfill", "backfill", "clock", "clock", "restart", "crash", "convert",
          "convert", "convert", "convert", "convert", "convert", "copy", "long_close", "slow", "writes", "writes", "abandon"]
CONV_STEPS = ["prepare", "indexes", "batches_killed", "batches", "finish"]


@dataclass
class Scenario:
    seed: int
    events: list
    overflow: str
    conv_rows: int
    # a BEFORE trigger of the user's on the referencing table that moves or clears references
    # (the twenty-eighth review), by a name that sorted before or after the conversion's own
    # (shard_id_convert_..., before they were named "~shard_id_convert_..."); None: no such
    # trigger. (A name that sorts after '~' is refused: test_convert_writers.py, not fuzzed.)
    resolver: str = None
    log: list = field(default_factory=list)


def make_scenario(seed):
    rng = random.Random(seed)
    events = []
    for _ in range(rng.randint(10, 18)):
        kind = rng.choice(EVENTS)
        if kind == "backfill":
            kind = ("backfill", rng.choice(["crowded", "sparse", "close", "far"]),
                    rng.choice(["commit", "commit", "rollback", "long"]), rng.randint(1, 10**9))
        elif kind == "clock":
            kind = ("clock", rng.choice([-1, -1, 1]) * rng.randint(2, 15))
        elif kind == "insert":
            kind = ("insert", rng.choice([200, 2000, 8000]), rng.randint(1, 3))
        elif kind == "slow":
            kind = ("slow", rng.choice(["trigger", "select"]))
        elif kind == "writes":
            kind = ("writes", rng.randint(1, 10**9))
        else:
            kind = (kind,)
        # the interleaving that matters most, more often than chance would give it (issue 50): a
        # backfill just behind the clock, the DEFAULT's last id well behind it (time passed: the
        # clock moves on), then the clock steps back into the backfill's milliseconds and the
        # DEFAULT inserts
        if kind[0] == "backfill" and kind[1] == "close" and rng.random() < 0.5:
            events += [("insert", 200, 1), ("clock", rng.randint(5, 15)), kind,
                       ("clock", -rng.randint(2, 9)), ("insert", rng.choice([2000, 8000]), rng.randint(1, 3))]
        else:
            events.append(kind)
    sc = Scenario(seed, events, rng.choice(["wait", "borrow"]), rng.choice([400, 1500, 4000]))
    # (a stream of its own: the events above are those the seed always gave)
    retry = random.Random(seed * 7919 + 27)
    if retry.random() < 0.5:
        sc.events.insert(retry.randint(0, len(sc.events)), ("retry", retry.randint(1, 10**9)))
    sc.resolver = random.Random(seed * 104729 + 5).choice(["trg_resolve", "update_lines", "a_resolve", None])
    return sc


class Failure(Exception):
    pass


class HistoryFuzzer:
    def __init__(self):
        self.cluster = Cluster("fuzz_hist", ["pg_shard_id.max_sequences = 1024"], fake_clock=True)
        self.offset = 0

    def close(self):
        self.cluster.set_clock(0)
        self.cluster.destroy()

    def connect(self, db, **kw):
        conn = self.cluster.connect(db, **kw)
        conn.execute(f"SET pg_shard_id.overflow = {self.sc.overflow}")
        return conn

    def run(self, sc):
        self.sc = sc
        self.offset = 0
        self.cluster.set_clock(0)
        self.db = f"fh{sc.seed}"
        self.cluster.sql(f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)")
        self.cluster.sql(f"CREATE DATABASE {self.db}")
        self.rolled = set()   # ids handed out to transactions that did not commit
        self.long = []        # (connection, ids) of transactions left open
        self.conv_step = 0
        self.errors = []
        try:
            self.schema()
            for event in sc.events:
                sc.log.append(repr(event))
                getattr(self, "ev_" + event[0])(*event[1:])
            self.close_long(commit=True)
            # a conversion begun is carried to its end, so that what was written while it ran is
            # judged after its swap (the steps a lock timeout gave up on are tried again)
            for _ in range(2 * len(CONV_STEPS)):
                if not 0 < self.conv_step < len(CONV_STEPS):
                    break
                sc.log.append("('convert',) to the end")
                self.ev_convert()
            self.judge()
        finally:
            self.close_long(commit=False)
            self.cluster.set_clock(0)
            for db in (self.db, f"fh{sc.seed}", f"fh{sc.seed}_copy"):
                try:
                    self.cluster.sql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
                except psycopg.Error:
                    pass

    def schema(self):
        with self.connect(self.db) as c:
            c.execute("SET client_min_messages = warning")
            c.execute("CREATE EXTENSION pg_shard_id")
            c.execute("CREATE SEQUENCE s")
            c.execute(f"CREATE TABLE live (id bigint DEFAULT next_shard_id('s', {SHARD}), at timestamptz, kind text)")
            c.execute("CREATE INDEX ON live (id)")
            c.execute("CREATE FUNCTION slow_row() RETURNS trigger LANGUAGE plpgsql AS "
                      "$$BEGIN IF NEW.kind = 'slow' THEN PERFORM pg_sleep(2.5); END IF; RETURN NEW; END$$")
            c.execute("CREATE TRIGGER slow_row BEFORE INSERT ON live FOR EACH ROW EXECUTE FUNCTION slow_row()")
            c.execute("CREATE TABLE conv (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, note text, "
                      "parent bigint REFERENCES conv DEFERRABLE INITIALLY DEFERRED)")
            c.execute("CREATE TABLE conv_lines (id bigserial PRIMARY KEY, conv_id bigint REFERENCES conv "
                      "DEFERRABLE INITIALLY DEFERRED, n int)")
            # rows a minute to two days back, some crowded into one millisecond
            c.execute("INSERT INTO conv (created_at, note) SELECT n.t0 - (g %% 97) * interval '37 min' "
                      "  - CASE WHEN g %% 3 = 0 THEN interval '0' ELSE g * interval '1 ms' END, 'old' "
                      "  FROM (SELECT clock_timestamp() - interval '1 min' AS t0) n, generate_series(1, %s) g",
                      (self.sc.conv_rows,))
            c.execute("INSERT INTO conv_lines (conv_id, n) SELECT 1 + g %% %s, g FROM generate_series(1, %s) g",
                      (self.sc.conv_rows, self.sc.conv_rows))
            c.execute("UPDATE conv SET parent = CASE WHEN id % 3 = 0 THEN id ELSE 1 + id % 50 END WHERE id % 2 = 0")
            if self.sc.resolver:
                # n = -3: the reference moves to the next row; n = -5: it is cleared
                c.execute("CREATE FUNCTION resolve_line() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN "
                          "IF NEW.n = -3 THEN NEW.conv_id := NEW.conv_id + 1; ELSIF NEW.n = -5 THEN NEW.conv_id := NULL; END IF; "
                          "RETURN NEW; END$$")
                c.execute(f"CREATE TRIGGER {self.sc.resolver} BEFORE INSERT OR UPDATE ON conv_lines "
                          "FOR EACH ROW EXECUTE FUNCTION resolve_line()")
            c.execute("ANALYZE")

    # -- events --------------------------------------------------------------------------------

    def ev_insert(self, rows, sessions):
        def work():
            try:
                with self.connect(self.db) as c:
                    c.execute("INSERT INTO live (kind) SELECT 'default' FROM generate_series(1, %s)",
                              (rows // sessions,))
            except psycopg.Error as e:
                self.errors.append(f"DEFAULT insert: {e.sqlstate} {e}")
        threads = [threading.Thread(target=work) for _ in range(sessions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def ev_backfill(self, mode, end, salt):
        times = {
            # over 1,024 rows in one or two milliseconds: they spill into the next ones
            "crowded": "SELECT n.t0 - (g % 2) * interval '1 ms' "
                       "FROM (SELECT clock_timestamp() - interval '20 min' AS t0) n, generate_series(1, 2600) g",
            "sparse": "SELECT clock_timestamp() - interval '1 s' - random() * interval '6 hours' "
                      "FROM generate_series(1, 500)",
            # just behind the clock (10 s to 1.1 s): what a clock step back later reaches into
            "close": "SELECT t FROM (SELECT clock_timestamp() AS now) n, "
                     "generate_series(n.now - interval '10 s', n.now - interval '1100 ms', interval '1 ms') t, "
                     "generate_series(1, 3)",
            "far": "SELECT n.t0 + (g % 50) * interval '1 ms' "
                   "FROM (SELECT clock_timestamp() - interval '3 days' AS t0) n, generate_series(1, 2000) g",
        }[mode]
        self.backfill(times, mode, end, salt)

    def backfill(self, times, mode, end, salt, params=None):
        statement = (f"INSERT INTO live (id, at, kind) SELECT next_shard_id_at('s', {SHARD}, t.t), t.t, 'backfill' "
                     f"FROM ({times}) t(t) RETURNING id")
        conn = self.connect(self.db, autocommit=False)
        try:
            conn.execute("SELECT setseed(%s)", (salt / 10**9 - 0.5,))
            ids = [r[0] for r in conn.execute(statement, params).fetchall()]
        except psycopg.Error as e:
            conn.close()
            # (the documented refusal: between the conversion's prepare and its index build, its
            # new column draws from s and no index can read it yet)
            if not (e.sqlstate == "55000" and self.conv_step == 1 and "conv.shard_id" in str(e)):
                self.errors.append(f"backfill ({mode}): {e.sqlstate} {e}")
            return
        if end == "commit":
            conn.commit()
            conn.close()
        elif end == "rollback":
            conn.rollback()
            conn.close()
            self.rolled.update(ids)
        else:
            self.long.append((conn, ids))

    def ev_retry(self, salt):
        """Ids drawn, then stored in a savepoint; another backfill of thousands of milliseconds
        (every bucket of the shared reservations needs room); the savepoint rolled back and
        VACUUM; a third backfill at the same milliseconds; the same ids stored again and committed
        (the 27th review: the rolled-back rows had let the reservations go)."""
        rng = random.Random(salt)
        n_ms, per_ms = rng.choice([5, 20, 60]), rng.choice([1, 300, 1024])
        conn = self.connect(self.db, autocommit=False)
        try:
            t0 = conn.execute("SELECT clock_timestamp() - interval '2 hours' - %s * interval '1 ms'",
                              (rng.randint(0, 10**7),)).fetchone()[0]
            span = f"generate_series(%s::timestamptz, %s::timestamptz + interval '{n_ms - 1} ms', interval '1 ms') t"
            drawn = conn.execute(f"SELECT next_shard_id_at('s', {SHARD}, t), t FROM {span}, generate_series(1, {per_ms})",
                                 (t0, t0)).fetchall()
            store = "INSERT INTO live (id, at, kind) SELECT i, a, 'backfill' FROM unnest(%s::bigint[], %s::timestamptz[]) u(i, a)"
            params = ([d[0] for d in drawn], [d[1] for d in drawn])
            conn.execute("SAVEPOINT a")
            conn.execute(store, params)
            self.backfill("SELECT t FROM (SELECT clock_timestamp() - interval '5 hours' AS t0) n, "
                          f"generate_series(n.t0, n.t0 + interval '{rng.randint(6000, 20000)} ms', interval '1 ms') t",
                          "retry pressure", "commit", salt)
            conn.execute("ROLLBACK TO SAVEPOINT a")
            with self.connect(self.db) as other:
                other.execute("VACUUM live")
            self.backfill(f"SELECT t FROM {span}, generate_series(1, {rng.choice([1, 50])})", "retry third", "commit",
                          salt, params=(t0, t0))
            conn.execute(store, params)
            conn.commit()
        except psycopg.Error as e:
            # (the documented refusal between the conversion's prepare and its index build)
            if not (e.sqlstate == "55000" and self.conv_step == 1 and "conv.shard_id" in str(e)):
                self.errors.append(f"retry: {e.sqlstate} {e}")
        finally:
            conn.close()

    def ev_slow(self, how):
        """A DEFAULT id whose row reaches its index 2.5 s after its draw (a slow BEFORE trigger), or
        an id selected and inserted 2.5 s later in its transaction, while every remainder of the
        milliseconds around its draw is backfilled (issue 55)."""
        drawn = []

        def app():
            try:
                with self.connect(self.db, autocommit=False) as c:
                    if how == "trigger":
                        drawn.append(c.execute("SELECT clock_timestamp()").fetchone()[0])
                        c.execute("INSERT INTO live (kind) VALUES ('slow')")
                    else:
                        i = c.execute(f"SELECT next_shard_id('s', {SHARD})").fetchone()[0]
                        drawn.append(c.execute("SELECT shard_id_extract_timestamp(%s)", (i,)).fetchone()[0])
                        time.sleep(2.5)
                        c.execute("INSERT INTO live (id, kind) VALUES (%s, 'slow')", (i,))
                    c.commit()
            except psycopg.Error as e:
                self.errors.append(f"slow DEFAULT insert ({how}): {e.sqlstate} {e}")
                drawn.append(None)
        thread = threading.Thread(target=app)
        thread.start()
        for _ in range(500):
            if drawn:
                break
            time.sleep(0.01)
        if drawn and drawn[0] is not None:
            time.sleep(1.3)
            with self.connect(self.db) as c:
                # (an id ahead of the clock, a guard's lead or a step back: no backfill reaches it)
                behind = c.execute("SELECT %s::timestamptz + interval '60 ms' < clock_timestamp() - interval '1 s'",
                                   (drawn[0],)).fetchone()[0]
            if not behind:
                thread.join()
                return
            self.backfill("SELECT m FROM generate_series(%s::timestamptz - interval '10 ms', %s::timestamptz + interval '60 ms', "
                          "interval '1 ms') m, generate_series(1, 1024)", f"around a slow row ({how})", "commit", 1,
                          (drawn[0], drawn[0]))
        thread.join()

    def ev_writes(self, salt):
        """What applications write while the conversion runs (issue 55): a row referencing itself,
        a child inserted before its parent, a parent deleted and inserted again with its old key
        (deferred foreign keys, one transaction each), an insert into the referencing table while
        the table is renamed."""
        rng = random.Random(salt)
        key = "id_before_shard_id" if self.conv_step >= len(CONV_STEPS) else "id"
        try:
            with self.connect(self.db, autocommit=False) as c:
                # (a rename waits behind a long transaction that read the table: given up, as an
                # application's migration would be)
                c.execute("SET lock_timeout = '2s'")
                c.commit()
                if key == "id":
                    c.execute("INSERT INTO conv (id, created_at, note, parent) "
                              "SELECT nextval('conv_id_seq'), clock_timestamp(), 'self', currval('conv_id_seq')")
                    k = c.execute("SELECT nextval('conv_id_seq')").fetchone()[0]
                    c.execute("INSERT INTO conv_lines (conv_id, n) VALUES (%s, -1)", (k,))
                    c.execute("INSERT INTO conv (id, created_at, note) VALUES (%s, clock_timestamp(), 'late parent')", (k,))
                    c.commit()
                    victim = c.execute("SELECT id, created_at FROM conv WHERE note = 'old' ORDER BY id OFFSET %s LIMIT 1",
                                       (rng.randrange(self.sc.conv_rows // 2),)).fetchone()
                    if victim:
                        c.execute("DELETE FROM conv WHERE id = %s", (victim[0],))
                        c.execute("INSERT INTO conv (id, created_at, note) VALUES (%s, %s, 'again')", victim)
                        c.commit()
                    if self.sc.resolver:
                        # the user's trigger moves a reference, clears one, and moves a row copied
                        # with the conversion's column
                        c.execute("INSERT INTO conv_lines (conv_id, n) VALUES (%s, -3)", (1 + rng.randrange(20),))
                        c.execute("UPDATE conv_lines SET n = -5 WHERE id = (SELECT id FROM conv_lines WHERE n > 0 "
                                  "  AND conv_id IS NOT NULL ORDER BY id OFFSET %s LIMIT 1)", (rng.randrange(100),))
                        if c.execute("SELECT count(*) FROM pg_attribute WHERE attrelid = 'conv_lines'::regclass "
                                     "  AND attname = 'conv_id_shard_id' AND NOT attisdropped").fetchone()[0]:
                            c.execute("INSERT INTO conv_lines (conv_id, n, conv_id_shard_id) SELECT conv_id, -3, conv_id_shard_id "
                                      "  FROM conv_lines WHERE conv_id < 20 ORDER BY id OFFSET %s LIMIT 1", (rng.randrange(10),))
                        c.commit()
                    c.execute("ALTER TABLE conv RENAME TO conv_renamed")
                    c.execute("INSERT INTO conv_lines (conv_id, n) SELECT id, -2 FROM conv_renamed ORDER BY id LIMIT 1")
                    c.execute("ALTER TABLE conv_renamed RENAME TO conv")
                    c.commit()
                else:
                    # after the swap the key is the new id
                    c.execute("INSERT INTO conv (created_at, note) VALUES (clock_timestamp(), 'after')")
                    c.execute("UPDATE conv SET parent = id WHERE note = 'after'")
                    c.commit()
        except psycopg.errors.LockNotAvailable:
            pass  # (the rename waited 10 s behind a long transaction: nothing written)
        except psycopg.Error as e:
            self.errors.append(f"writes ({key}): {e.sqlstate} {e}")

    def ev_abandon(self):
        if not 0 < self.conv_step < len(CONV_STEPS):
            return
        try:
            with self.connect(self.db) as c:
                c.execute("CALL shard_id_convert_abandon('conv')")
            self.conv_step = 0
        except psycopg.errors.LockNotAvailable:
            pass  # a long transaction holds the table: nothing changed
        except psycopg.Error as e:
            self.errors.append(f"abandon: {e.sqlstate} {e}")

    def ev_long_close(self):
        if self.long:
            conn, ids = self.long.pop(0)
            if len(ids) % 2:
                conn.rollback()
                self.rolled.update(ids)
            else:
                conn.commit()
            conn.close()

    def close_long(self, commit):
        while self.long:
            conn, ids = self.long.pop(0)
            try:
                if commit:
                    conn.commit()
                else:
                    conn.rollback()
                    self.rolled.update(ids)
            except psycopg.Error:
                self.rolled.update(ids)  # lost with a restart or a crash
            conn.close()

    def ev_clock(self, delta_s):
        self.offset += delta_s
        self.cluster.set_clock(self.offset)

    def ev_restart(self, mode="fast"):
        # open transactions go with their sessions
        for conn, ids in self.long:
            self.rolled.update(ids)
            conn.close()
        self.long.clear()
        self.cluster.restart(mode)

    def ev_crash(self):
        self.ev_restart("immediate")

    def ev_copy(self):
        if 0 < self.conv_step < len(CONV_STEPS):
            return  # (a dump in the middle of a conversion restores no progress record: docs)
        self.close_long(commit=True)
        copy = f"fh{self.sc.seed}_copy"
        if self.db == copy:
            return
        self.cluster.sql(f"DROP DATABASE IF EXISTS {copy} WITH (FORCE)")
        self.cluster.sql(f"CREATE DATABASE {copy}")
        args = ["-h", self.cluster.dir, "-p", str(self.cluster.port), "-U", "postgres"]
        dump = subprocess.run([f"{PG_BIN}/pg_dump", "-Fc", *args, self.db], check=True, capture_output=True).stdout
        subprocess.run([f"{PG_BIN}/pg_restore", *args, "-d", copy, "--exit-on-error"], input=dump, check=True,
                       capture_output=True)
        self.db = copy

    def ev_convert(self):
        if self.conv_step >= len(CONV_STEPS):
            return
        step = CONV_STEPS[self.conv_step]
        self.conv_step += 1
        try:
            with self.connect(self.db) as c:
                if step == "prepare":
                    c.execute(f"CALL shard_id_convert_prepare('conv', 'created_at', 's', {SHARD})")
                elif step == "indexes":
                    for (statement,) in c.execute("SELECT * FROM shard_id_convert_indexes('conv')").fetchall():
                        c.execute(statement)
                elif step == "batches_killed":
                    self.killed_batches()
                elif step == "batches":
                    c.execute("CALL shard_id_convert('conv', 300)")
                else:
                    c.execute("CALL shard_id_convert_finish('conv')")
        except psycopg.errors.LockNotAvailable:
            # a long transaction holds the table (its backfill read the new column's index): the
            # step gave up after 10 s having done nothing, and the next convert event runs it again
            self.conv_step -= 1
        except psycopg.Error as e:
            self.errors.append(f"conversion ({step}): {e.sqlstate} {e}")

    def killed_batches(self):
        victim = self.connect(self.db)
        pid = victim.info.backend_pid
        done = threading.Event()

        def run():
            try:
                victim.execute("CALL shard_id_convert('conv', 100)")
            except psycopg.Error:
                pass  # killed, or finished
            done.set()
        threading.Thread(target=run).start()
        time.sleep(0.05 + (self.sc.seed % 7) * 0.03)
        with self.connect(self.db) as c:
            c.execute("SELECT pg_terminate_backend(%s)", (pid,))
        done.wait(60)
        victim.close()

    # -- the oracle ----------------------------------------------------------------------------

    def judge(self):
        problems = list(self.errors)
        with self.connect(self.db) as c:
            # the conversion's new ids: in conv.id once swapped, in its new column before (read
            # from the catalog: a copy restores no progress record)
            columns = {r[0] for r in c.execute("SELECT attname FROM pg_attribute WHERE attrelid = 'conv'::regclass "
                                               "AND attnum > 0 AND NOT attisdropped")}
            phase = "finished" if "id_before_shard_id" in columns else "filling" if "shard_id" in columns else None
            conv_id = "id" if phase == "finished" else "shard_id" if phase else None
            c.execute("CREATE TEMP TABLE ids (id bigint, at timestamptz, kind text)")
            c.execute("INSERT INTO ids SELECT id, at, kind FROM live")
            if conv_id:
                # (rows the writes event added got live ids from the new column's DEFAULT, or were
                # converted: checked for repeats, not for their millisecond)
                c.execute(f"INSERT INTO ids SELECT {conv_id}, created_at, CASE WHEN note = 'old' THEN 'conv' ELSE 'conv_live' END "
                          f"FROM conv WHERE {conv_id} IS NOT NULL")
            repeats = c.execute("SELECT count(*) - count(DISTINCT id) FROM ids").fetchone()[0]
            if repeats:
                kinds = c.execute("SELECT string_agg(DISTINCT kind, ', ') FROM ids WHERE id IN "
                                  "(SELECT id FROM ids GROUP BY id HAVING count(*) > 1)").fetchone()[0]
                problems.append(f"{repeats} ids stored twice (among rows of: {kinds})")
            c.execute("CREATE TEMP TABLE rolled (id bigint)")
            c.execute("INSERT INTO rolled SELECT unnest(%s::bigint[])", (sorted(self.rolled),))
            # every backfilled or converted id: in its row's millisecond, or later only past full
            # milliseconds (1,024 ids of the shard, stored or handed out and rolled back)
            # (a table with an index: as a CTE, each skipped millisecond of each row scanned it
            # whole, hours for a retry event's 61,440 ids)
            c.execute(f"""
                CREATE TEMP TABLE per_ms AS
                SELECT shard_id_extract_timestamp(id) AS ms, count(*) AS n
                  FROM (SELECT id FROM ids UNION SELECT id FROM rolled) taken
                 WHERE shard_id_extract_shard(id) = {SHARD} GROUP BY 1""")
            c.execute("CREATE UNIQUE INDEX ON per_ms (ms)")
            c.execute("ANALYZE per_ms")
            bad = c.execute(f"""
                WITH past AS (
                    SELECT id, date_trunc('milliseconds', at) AS at, shard_id_extract_timestamp(id) AS ms, kind
                      FROM ids WHERE kind IN ('backfill', 'conv'))
                SELECT count(*) FILTER (WHERE ms < at),
                       count(*) FILTER (WHERE ms > at AND EXISTS (
                           SELECT FROM generate_series(at, ms - interval '1 ms', interval '1 ms') m
                            WHERE coalesce((SELECT n FROM per_ms WHERE per_ms.ms = m), 0) < 1024))
                  FROM past""").fetchone()
            if bad[0]:
                problems.append(f"{bad[0]} ids at past times before their row's millisecond")
            if bad[1]:
                problems.append(f"{bad[1]} ids at past times later than their row's millisecond with room in it")
            if phase == "finished":
                lost = c.execute("SELECT count(*) FROM conv_lines l LEFT JOIN conv p ON p.id = l.conv_id "
                                 "WHERE l.conv_id IS NOT NULL AND p.id IS NULL").fetchone()[0]
                if lost:
                    problems.append(f"{lost} referencing rows lost their row after the conversion")
                # every reference converted points at the row its old key named
                moved = c.execute("SELECT (SELECT count(*) FROM conv_lines l JOIN conv p ON p.id = l.conv_id "
                                  "         WHERE l.conv_id_before_shard_id IS DISTINCT FROM p.id_before_shard_id "
                                  "           AND l.conv_id_before_shard_id IS NOT NULL) + "
                                  "       (SELECT count(*) FROM conv r JOIN conv p ON p.id = r.parent "
                                  "         WHERE r.parent_before_shard_id IS DISTINCT FROM p.id_before_shard_id "
                                  "           AND r.parent_before_shard_id IS NOT NULL)").fetchone()[0]
                if moved:
                    problems.append(f"{moved} references point at another row than their old key's after the conversion")
                cleared = c.execute("SELECT count(*) FROM conv_lines "
                                    "WHERE (conv_id IS NULL) <> (conv_id_before_shard_id IS NULL)").fetchone()[0]
                if cleared:
                    problems.append(f"{cleared} references cleared on one side of the conversion only")
                invalid = c.execute("SELECT count(*) FROM pg_constraint WHERE conrelid IN ('conv'::regclass, "
                                    "'conv_lines'::regclass) AND NOT convalidated").fetchone()[0]
                if invalid:
                    problems.append(f"{invalid} constraints of the converted tables not validated")
        if problems:
            raise Failure("; ".join(problems))


def describe(sc):
    return (f"seed {sc.seed}: overflow {sc.overflow}, conversion of {sc.conv_rows} rows, "
            f"user trigger {sc.resolver}, events {sc.events}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=None, help="the first seed (default: today's number)")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--soak", type=int, default=0, help="run seeds for this many seconds instead")
    args = parser.parse_args()
    first = args.seed if args.seed is not None else int(datetime.date.today().strftime("%Y%m%d")) * 100
    print(f"fuzz_history: seeds from {first} (re-run one: fuzz_history.py --seed N --seeds 1)", flush=True)
    fuzzer = HistoryFuzzer()
    passed = failed = 0
    started = time.monotonic()
    seed = first
    try:
        while (args.soak and time.monotonic() - started < args.soak) or (not args.soak and seed < first + args.seeds):
            sc = make_scenario(seed)
            t0 = time.monotonic()
            try:
                fuzzer.run(sc)
                passed += 1
                print(f"  ok    {describe(sc)} ({time.monotonic() - t0:.0f} s)", flush=True)
            except Failure as e:
                failed += 1
                print(f"  FAIL  {describe(sc)}\n        {e}", flush=True)
            except Exception:  # noqa: BLE001 (the harness itself: a failure too)
                failed += 1
                print(f"  FAIL  {describe(sc)}\n        the fuzzer failed: {traceback.format_exc()}", flush=True)
            seed += 1
    finally:
        fuzzer.close()
    print(f"fuzz_history: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
