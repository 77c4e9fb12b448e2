"""Throwaway PostgreSQL clusters for the guarantee's tests and fuzzer, as scripts/lib.sh makes them:
initdb and the server run as the postgres OS user (initdb refuses root), each cluster in its own
folder under $RUN_DIR on a free port, the library preloaded. PG_BIN names the PostgreSQL
(tests/guarantee/run.sh sets it from scripts/lib.sh's select_pg)."""

import os
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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, name, conf=(), preload=True):
        self.dir = os.path.join(RUN_DIR, name)
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")
        self.port = free_port()
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._pg_ctl("stop", "-m", "immediate", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir, mode=0o755)
        os.chmod(RUN_DIR, 0o755)
        if os.getuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        as_postgres([f"{PG_BIN}/initdb", "-D", self.data, "-U", "postgres", "--auth=trust",
                     "--encoding=UTF8", "--locale=C.UTF-8"])
        lines = [f"port = {self.port}", "listen_addresses = '127.0.0.1'",
                 f"unix_socket_directories = '{self.dir}'", "max_connections = 60", "fsync = off"]
        if preload:
            lines.append("shared_preload_libraries = 'pg_shard_id'")
        lines += list(conf)
        self.append_conf(lines)
        self.start()

    def append_conf(self, lines):
        text = "".join(line + "\n" for line in lines)
        as_postgres(["sh", "-c", f"cat >> '{self.data}/postgresql.conf'"], input=text)

    def _pg_ctl(self, *args, check=True):
        try:
            return as_postgres([f"{PG_BIN}/pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60",
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
