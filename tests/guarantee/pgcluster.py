"""Throwaway PostgreSQL clusters for the guarantee's tests and fuzzer, as scripts/lib.sh makes them:
initdb and the server run as the postgres OS user (initdb refuses root), each cluster in its own
folder under $RUN_DIR on a free port, the library preloaded. PG_BIN names the PostgreSQL
(tests/guarantee/run.sh sets it from scripts/lib.sh's select_pg)."""

import os
import random
import shutil
import socket
import subprocess
import time

import psycopg

PG_BIN = os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin")
RUN_DIR = os.environ.get("PG_SHARD_ID_RUN_DIR", "/tmp/pg_shard_id")


def as_postgres(args, **kwargs):
    if os.getuid() == 0:
        args = ["sudo", "-u", "postgres", "--"] + list(args)
    return subprocess.run(args, check=True, capture_output=True, text=True, **kwargs)


CHOSEN_PORTS = set()
PORT_RANDOM = random.SystemRandom()  # not the module's generator, which seeded fuzzers use


def free_port():
    """A port free now that this process has not chosen before, and under pytest-xdist one of
    this worker's own share of 20000-29999 (as scripts/lib.sh's free_port does for the cluster
    tests' lanes). A cluster's port is chosen when it is made and bound only once initdb or
    pg_basebackup is done, and the kernel's choice (bind to port 0) may give a port again once
    its socket is closed: two clusters made before either started, or made in two workers at
    once, could get the same port (the Patroni runbook's members did, in a fresh-clone run)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    while True:
        if worker.startswith("gw") and workers > 1:
            width = 10000 // workers
            port = 20000 + int(worker[2:]) % workers * width + PORT_RANDOM.randrange(width)
        else:
            port = 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = s.getsockname()[1]
        if port not in CHOSEN_PORTS:
            CHOSEN_PORTS.add(port)
            return port


LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"  # Debian's faketime


class Cluster:
    """A cluster made by initdb, or (standby_of) a physical standby of another one by
    pg_basebackup. With fake_clock, its postmaster and every backend run under libfaketime: the
    real clock plus the offset set_clock writes (re-read at every reading; monotonic clocks are
    left alone)."""

    def __init__(self, name, conf=(), preload=True, fake_clock=False, standby_of=None):
        self.dir = os.path.join(RUN_DIR, name)
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")
        self.port = free_port()
        self.env = []
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._pg_ctl("stop", "-m", "immediate", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir, mode=0o755)
        os.chmod(RUN_DIR, 0o755)
        if os.getuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        if fake_clock:
            self.clock_file = os.path.join(self.dir, "faketime")
            self.set_clock(0)
            # (sudo drops LD_PRELOAD: it is passed through env)
            self.env = ["env", f"LD_PRELOAD={LIBFAKETIME}", f"FAKETIME_TIMESTAMP_FILE={self.clock_file}",
                        "FAKETIME_NO_CACHE=1", "DONT_FAKE_MONOTONIC=1"]
        lines = [f"port = {self.port}", f"unix_socket_directories = '{self.dir}'"]
        if standby_of is None:
            as_postgres([f"{PG_BIN}/initdb", "-D", self.data, "-U", "postgres", "--auth=trust",
                         "--encoding=UTF8", "--locale=C.UTF-8"])
            lines += ["listen_addresses = '127.0.0.1'", "max_connections = 60", "fsync = off"]
            if preload:
                lines.append("shared_preload_libraries = 'pg_shard_id'")
        else:
            # the source's configuration (a later line wins), streaming from it (-R)
            as_postgres([f"{PG_BIN}/pg_basebackup", "-h", standby_of.dir, "-p", str(standby_of.port),
                         "-U", "postgres", "-D", self.data, "-R", "-X", "stream", "-c", "fast"])
        lines += list(conf)
        self.append_conf(lines)
        self.start()

    def set_clock(self, offset_s):
        """This cluster's clock: the real one plus offset_s seconds (fake_clock clusters only)."""
        tmp = self.clock_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{int(offset_s):+d}\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.clock_file)

    def promote(self):
        """A standby becomes a primary (pg_ctl promote, waiting until it is)."""
        self._pg_ctl("promote")

    def append_conf(self, lines):
        text = "".join(line + "\n" for line in lines)
        as_postgres(["sh", "-c", f"cat >> '{self.data}/postgresql.conf'"], input=text)

    def _pg_ctl(self, *args, check=True):
        try:
            return as_postgres([*self.env, f"{PG_BIN}/pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60",
                                *args])
        except subprocess.CalledProcessError:
            if check:
                raise
            return None

    def start(self):
        self._pg_ctl("start")

    def stop(self, mode="fast"):
        self._pg_ctl("stop", "-m", mode, check=False)

    def restart(self, mode="fast"):
        """A clean restart (fast) or a crash (immediate) and start-up."""
        self.stop(mode)
        self.start()

    def connect(self, dbname="postgres", autocommit=True, **kwargs):
        return psycopg.connect(host=self.dir, port=self.port, user="postgres", dbname=dbname,
                               autocommit=autocommit, **kwargs)

    def sql(self, query, dbname="postgres", params=None):
        """Runs one statement in a new session; returns all its rows (or None)."""
        with self.connect(dbname) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else None

    def one(self, query, dbname="postgres", params=None):
        return self.sql(query, dbname, params)[0][0]

    def log_text(self):
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                return f.read()
        except PermissionError:
            return as_postgres(["cat", self.log]).stdout

    def destroy(self):
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


def wait_for(predicate, timeout=10.0, step=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def vacuum_until_nothing_dead(conn, table, timeout=20.0):
    """VACUUM `table` until it reports no dead row left (pg_stat_user_tables.n_dead_tup, which
    VACUUM sets to what it could not remove). A plain VACUUM may leave a dead row behind: a page
    whose cleanup lock another process holds for a moment (the checkpointer writing it) is only
    read, and a snapshot older than the delete keeps the row. A test that needs the row gone asks
    again instead of failing at random; one that never gets there fails here, saying why."""
    def clean():
        conn.execute(f"VACUUM {table}")
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return conn.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = %s::regclass",
                            (table,)).fetchone()[0] == 0
    if not wait_for(clean, timeout=timeout, step=0.5):
        horizon = conn.execute("SELECT string_agg(format('%s %s %s', pid, backend_type, backend_xmin), '; ') "
                               "  FROM pg_stat_activity WHERE backend_xmin IS NOT NULL").fetchone()[0]
        raise AssertionError(f"VACUUM {table} left dead rows for {timeout} s; snapshots held: {horizon}")
