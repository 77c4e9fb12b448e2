"""docs/production.md's Patroni runbook, each step for real (issue 58): run by tests/patroni/run.sh.

etcd and three Patroni members on loopback, synchronous_mode on, pg_shard_id preloaded with its
epoch through the DCS (bootstrap.dcs.postgresql.parameters: every member gets the same). Three
writers insert through a DEFAULT next_shard_id(...) from the first step to the last, each through
libpq's multi-host string with target_session_attrs=read-write (what an application without a
proxy does), reconnecting after an error. The steps: a switchover, a failover (the leader's
Patroni and PostgreSQL killed -9, as a machine that dies), the old leader's Patroni started again
(it rejoins through pg_rewind), a rolling restart (each replica, a switchover, the old leader: the
order of an extension upgrade), and a restart of the synchronous standby.

Checks, printed as "ok"/"FAIL" lines: every member preloads the library with one epoch and its
guard; no id acknowledged to two writes; every acknowledged row on the last leader and on both
replicas, with its id; the ids acknowledged after each leader change above every id acknowledged
before it (a promoted standby starts past the lease records it replayed); a writer error only
where a leader changes, and only a reconnect (never 23505, never one of pg_shard_id's own); the
old leader rewound. Prints each step's commit latency (the longest one: what a restart of the
synchronous standby costs writers)."""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import psycopg

SCOPE = "pg_shard_id_ha"
EPOCH = "2026-01-01 00:00:00+00"
# what an application sees when the leader changes under it: the connection ends (no SQLSTATE,
# 57P01 at a fast shutdown, 57P02/57P03), or it reached a member that is read-only meanwhile
RECONNECT = {None, "57P01", "57P02", "57P03", "25006", "08000", "08001", "08003", "08004", "08006"}

results = {"passed": 0, "failed": 0}


def check(ok, what):
    results["passed" if ok else "failed"] += 1
    print(f"  {'ok  ' if ok else 'FAIL'}  {what}", flush=True)
    return ok


CHOSEN_PORTS = set()


def free_port():
    """A port free now that this run has not chosen before. The runbook chooses all eight ports
    (etcd's two, each member's PostgreSQL and REST API) before anything binds them, and the
    kernel's choice (bind to port 0) may give a port again once its socket is closed: in a
    fresh-clone run m1's REST API and m3's PostgreSQL both got 45279, and m3 never started."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in CHOSEN_PORTS:
            CHOSEN_PORTS.add(port)
            return port


def as_postgres():
    """Popen arguments that run a child as the postgres OS user (initdb refuses root)."""
    if os.geteuid() != 0:
        return {}
    import pwd
    pw = pwd.getpwnam("postgres")
    env = dict(os.environ, HOME=pw.pw_dir, USER="postgres", LOGNAME="postgres")
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "env": env}


def processes():
    """Every process: its state (R, S, T, Z, ...) and its parent's pid, from /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                found[int(entry)] = (fields[0], int(fields[1]))
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                pass
    return found


def http_json(url, timeout=2):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


class Member:
    def __init__(self, work, name, pg_bin, etcd_port):
        self.name, self.work = name, work
        self.pg_port, self.rest_port = free_port(), free_port()
        self.data = f"{work}/{name}"
        self.config = f"{work}/{name}.yml"
        self.log = f"{work}/{name}.log"
        self.proc = None
        config = {
            "scope": SCOPE, "name": name,
            "restapi": {"listen": f"127.0.0.1:{self.rest_port}", "connect_address": f"127.0.0.1:{self.rest_port}"},
            "etcd3": {"hosts": f"127.0.0.1:{etcd_port}"},
            "bootstrap": {
                # the DCS: the same for every member (patronictl edit-config changes it later)
                "dcs": {
                    "ttl": 20, "loop_wait": 2, "retry_timeout": 5, "maximum_lag_on_failover": 16 * 1024 * 1024,
                    "synchronous_mode": True,
                    "postgresql": {
                        "use_pg_rewind": True, "use_slots": True,
                        "parameters": {
                            "shared_preload_libraries": "pg_shard_id",
                            "pg_shard_id.epoch": EPOCH,
                            "wal_log_hints": "on", "hot_standby": "on", "max_connections": 40,
                            "max_wal_senders": 10, "max_replication_slots": 10, "wal_keep_size": "128MB",
                            # (PostgreSQL's own log, read at the end: a crash must not pass for a
                            # leader change's reconnect)
                            "logging_collector": "on", "log_directory": "log",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}],
                "pg_hba": ["local all all trust", "host all all 127.0.0.1/32 trust",
                           "host replication all 127.0.0.1/32 trust"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.pg_port}", "connect_address": f"127.0.0.1:{self.pg_port}",
                "data_dir": self.data, "bin_dir": pg_bin, "pgpass": f"{work}/{name}.pgpass",
                "authentication": {"superuser": {"username": "postgres", "password": "patroni"},
                                   "replication": {"username": "replicator", "password": "patroni"},
                                   "rewind": {"username": "rewinder", "password": "patroni"}},
                "parameters": {"unix_socket_directories": work},
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
        }
        with open(self.config, "w") as f:
            json.dump(config, f, indent=1)  # (JSON is YAML)
        if os.geteuid() == 0:
            os.chown(self.config, *(lambda p: (p.pw_uid, p.pw_gid))(__import__("pwd").getpwnam("postgres")))

    def start(self):
        log = open(self.log, "a")
        self.proc = subprocess.Popen(["patroni", self.config], stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=self.work, **as_postgres())

    def postmaster_pid(self):
        try:
            with open(f"{self.data}/postmaster.pid") as f:
                return int(f.readline())
        except (FileNotFoundError, ValueError):
            return None

    def kill(self):
        """Patroni and PostgreSQL (the postmaster and every child) killed -9, as when their
        process dies: Patroni runs PostgreSQL detached, so that it survives Patroni; here neither
        does. The postmaster is stopped first, so that it forks no child while they are killed."""
        for pid in (self.proc.pid,):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        postmaster = self.postmaster_pid()
        if not postmaster:
            return
        try:
            os.kill(postmaster, signal.SIGSTOP)
        except ProcessLookupError:
            return
        while True:
            children = [pid for pid, (state, parent) in processes().items() if parent == postmaster and state != "Z"]
            if not children:
                break
            for pid in children:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        os.kill(postmaster, signal.SIGKILL)
        # (gone, or a zombie: this machine's init may never reap it)
        while processes().get(postmaster, ("Z", 0))[0] != "Z":
            time.sleep(0.05)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # (Patroni stops PostgreSQL, then itself)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()

    def connect(self, **kw):
        return psycopg.connect(host="127.0.0.1", port=self.pg_port, dbname="postgres", user="postgres",
                               connect_timeout=3, autocommit=True, **kw)


class Cluster:
    def __init__(self, work, pg_bin):
        self.work, self.pg_bin = work, pg_bin
        self.etcd_port, etcd_peer = free_port(), free_port()
        log = open(f"{work}/etcd.log", "a")
        self.etcd = subprocess.Popen(
            ["etcd", "--name", "e1", "--data-dir", f"{work}/etcd",
             "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
             "--initial-cluster", f"e1=http://127.0.0.1:{etcd_peer}", "--initial-cluster-state", "new"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.wait(lambda: http_json(f"http://127.0.0.1:{self.etcd_port}/health").get("health") == "true", 30, "etcd")
        self.members = {n: Member(work, n, pg_bin, self.etcd_port) for n in ("m1", "m2", "m3")}

    def dsn(self):
        """What an application is given: every member, and only the writable one will do."""
        ms = list(self.members.values())
        return (f"host={','.join('127.0.0.1' for _ in ms)} port={','.join(str(m.pg_port) for m in ms)} "
                "dbname=postgres user=postgres target_session_attrs=read-write connect_timeout=3")

    def state(self):
        for m in self.members.values():
            try:
                return http_json(f"http://127.0.0.1:{m.rest_port}/cluster")["members"]
            except Exception:
                continue
        return []

    @staticmethod
    def wait(condition, seconds, what):
        deadline = time.time() + seconds
        while time.time() < deadline:
            try:
                if condition():
                    return
            except Exception:
                pass
            time.sleep(0.25)
        raise TimeoutError(f"waited {seconds} s for {what}")

    def healthy(self, members=3):
        """One leader and members - 1 replicas running, one of them the synchronous standby."""
        s = self.state()
        leaders = [m for m in s if m["role"] == "leader" and m["state"] == "running"]
        replicas = [m for m in s if m["role"] in ("replica", "sync_standby") and m["state"] in ("running", "streaming")
                    and isinstance(m.get("lag"), int)]
        return (len(leaders) == 1 and len(replicas) == members - 1
                and any(m["role"] == "sync_standby" for m in replicas))

    def wait_healthy(self, members=3, seconds=90):
        self.wait(lambda: self.healthy(members), seconds, f"{members} healthy members")

    def role(self, role):
        return next(self.members[m["name"]] for m in self.state() if m["role"] == role)

    def patronictl(self, *args):
        out = subprocess.run(["patronictl", "-c", self.members["m1"].config, *args],
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"patronictl {' '.join(args)}: {out.stdout}{out.stderr}")
        return out.stdout

    def destroy(self):
        for m in self.members.values():
            m.stop()
        self.etcd.send_signal(signal.SIGTERM)
        self.etcd.wait(30)


class Writers:
    """Writers inserting through the DEFAULT, each reconnecting after an error; every id returned
    (acknowledged: committed, and on the synchronous standby) is kept with its step."""

    def __init__(self, dsn, count=3):
        self.dsn, self.step, self.order, self.stop = dsn, "start", ["start"], threading.Event()
        self.acked, self.uncertain, self.errors = [], [], []  # (step, writer, n, id) / (step, writer, n) / (step, sqlstate, message)
        self.latency = {}
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(w,), daemon=True) for w in range(count)]
        for t in self.threads:
            t.start()

    def run(self, writer):
        conn, n = None, 0
        while not self.stop.is_set():
            step = self.step
            try:
                if conn is None:
                    conn = psycopg.connect(self.dsn, autocommit=True)
                t0 = time.monotonic()
                new_id = conn.execute("INSERT INTO events (writer, n) VALUES (%s, %s) RETURNING id", (writer, n)).fetchone()[0]
                with self.lock:
                    self.latency[step] = max(self.latency.get(step, 0.0), time.monotonic() - t0)
                    self.acked.append((step, writer, n, new_id))
            except psycopg.Error as e:
                self.errors.append((step, e.sqlstate, str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__))
                self.uncertain.append((step, writer, n))  # (the commit may have happened)
                try:
                    if conn is not None:
                        conn.close()
                except Exception:
                    pass
                conn = None
                time.sleep(0.05)
            n += 1
        if conn is not None:
            conn.close()

    def during(self, step, seconds=0.0):
        self.order.append(step)
        self.step = step
        time.sleep(seconds)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(30)
        assert not any(t.is_alive() for t in self.threads), "a writer is stuck"

    def ids(self, step):
        return [i for s, _, _, i in self.acked if s == step]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--pg-bin", required=True)
    args = ap.parse_args()
    t_start = time.time()
    cluster = Cluster(args.work, args.pg_bin)
    writers = None
    try:
        for m in cluster.members.values():
            m.start()
        cluster.wait_healthy(seconds=120)
        leader = cluster.role("leader")
        print(f"bootstrapped in {time.time() - t_start:.0f} s: leader {leader.name}", flush=True)
        with leader.connect() as c:
            c.execute("CREATE EXTENSION pg_shard_id")
            c.execute("CREATE SEQUENCE events_seq")
            c.execute("CREATE TABLE events (id bigint PRIMARY KEY DEFAULT next_shard_id('events_seq', 7), "
                      "writer int NOT NULL, n int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp(), UNIQUE (writer, n))")
        # the settings went where Patroni puts them, the same on every member
        cluster.wait(lambda: all(m.connect().execute("SELECT count(*) FROM pg_extension WHERE extname = 'pg_shard_id'").fetchone()[0] == 1
                                 for m in cluster.members.values()), 30, "the extension on every member")
        seen = {}
        for m in cluster.members.values():
            with m.connect() as c:
                seen[m.name] = c.execute("SELECT current_setting('shared_preload_libraries'), current_setting('pg_shard_id.epoch'), "
                                         "(SELECT guard FROM pg_shard_id_info())").fetchone()
        check(all(v[0] == "pg_shard_id" and v[2] == "cluster" for v in seen.values()) and len({v[1] for v in seen.values()}) == 1,
              f"every member preloads pg_shard_id (guard 'cluster') with one epoch, from the DCS: {seen}")

        writers = Writers(cluster.dsn())
        writers.during("steady", 3)

        # 1. a switchover to the synchronous standby
        old, new = cluster.role("leader"), cluster.role("sync_standby")
        writers.during("switchover")
        t0 = time.time()
        cluster.patronictl("switchover", SCOPE, "--leader", old.name, "--candidate", new.name, "--force")
        cluster.wait(lambda: cluster.role("leader") is new, 60, f"{new.name} leading")
        cluster.wait_healthy()
        print(f"switchover {old.name} -> {new.name}: {time.time() - t0:.1f} s", flush=True)
        writers.during("after switchover", 3)

        # 2. a failover: the leader dies with its machine
        old = cluster.role("leader")
        writers.during("failover")
        t0 = time.time()
        old.kill()
        cluster.wait(lambda: cluster.role("leader") is not old and cluster.healthy(2), 90, "a new leader")
        new = cluster.role("leader")
        print(f"failover {old.name} killed -> {new.name} leading: {time.time() - t0:.1f} s", flush=True)
        writers.during("after failover", 3)

        # 3. the old leader rejoins: Patroni rewinds it (pg_rewind) and starts it as a replica
        writers.during("rejoin")
        t0 = time.time()
        with open(old.log) as f:
            offset = len(f.read())
        old.start()
        cluster.wait_healthy(seconds=120)
        print(f"{old.name} rejoined as a replica: {time.time() - t0:.1f} s", flush=True)
        with open(old.log) as f:
            log = f.read()[offset:]
        check("running pg_rewind from" in log and "pg_rewind exit code=0" in log,
              f"{old.name} rejoined through pg_rewind, which succeeded (its log since the start: "
              f"{[l.split(' INFO: ')[-1] for l in log.splitlines() if 'rewind' in l.lower()][:4]})")
        writers.during("after rejoin", 2)

        # 4. a rolling restart, as for an extension upgrade: each replica, then a switchover,
        # then the old leader (the new files would be installed on each before its restart)
        writers.during("rolling restart: replicas")
        for m in [cluster.members[x["name"]] for x in cluster.state() if x["role"] != "leader"]:
            cluster.patronictl("restart", SCOPE, m.name, "--force")
            cluster.wait_healthy()
        old, new = cluster.role("leader"), cluster.role("sync_standby")
        writers.during("rolling restart: switchover")
        cluster.patronictl("switchover", SCOPE, "--leader", old.name, "--candidate", new.name, "--force")
        cluster.wait(lambda: cluster.role("leader") is new, 60, f"{new.name} leading")
        cluster.wait_healthy()
        writers.during("rolling restart: old leader")
        cluster.patronictl("restart", SCOPE, old.name, "--force")
        cluster.wait_healthy()
        writers.during("after rolling restart", 2)

        # 5. the synchronous standby restarts: commits wait for Patroni to name another
        sync = cluster.role("sync_standby")
        writers.during("synchronous standby restart")
        t0 = time.time()
        names = []
        with cluster.role("leader").connect() as c:
            watching = threading.Event()

            def watch():  # (what the leader asks commits to wait for, while it happens)
                while not watching.is_set():
                    v = c.execute("SELECT current_setting('synchronous_standby_names')").fetchone()[0]
                    if not names or names[-1] != v:
                        names.append(v)
                    time.sleep(0.05)
            watcher = threading.Thread(target=watch)
            watcher.start()
            cluster.patronictl("restart", SCOPE, sync.name, "--force")
            cluster.wait_healthy()
            watching.set()
            watcher.join()
        print(f"synchronous standby {sync.name} restarted: {time.time() - t0:.1f} s; "
              f"the leader's synchronous_standby_names meanwhile: {names}", flush=True)
        check(len(set(names)) >= 2, f"Patroni named another synchronous standby while {sync.name} restarted ({names})")
        writers.during("after synchronous standby restart", 2)
        writers.finish()

        leader = cluster.role("leader")
        with leader.connect() as c:
            stored = dict(((w, n), i) for i, w, n in c.execute("SELECT id, writer, n FROM events").fetchall())
            lsn = c.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        acked = writers.acked
        ids = [i for _, _, _, i in acked]
        print(f"{len(acked)} inserts acknowledged, {len(writers.uncertain)} errors; {len(stored)} rows on {leader.name}", flush=True)
        per_step = {step: len(writers.ids(step)) for step in writers.order if step != "start"}
        check(all(n > 0 for n in per_step.values()), f"the writers wrote in every step ({per_step})")
        check(len(set(ids)) == len(ids), f"no id acknowledged twice ({len(ids) - len(set(ids))} repeats)")
        missing = [(w, n, i) for _, w, n, i in acked if stored.get((w, n)) != i]
        check(not missing, f"every acknowledged row is on the last leader with its id ({len(missing)} missing: {missing[:3]})")
        for m in cluster.members.values():
            if m is leader:
                continue
            with m.connect() as c:
                cluster.wait(lambda: c.execute("SELECT pg_last_wal_replay_lsn() >= %s", (lsn,)).fetchone()[0], 30, f"{m.name} replaying")
                there = c.execute("SELECT count(*), sum(id::numeric) FROM events").fetchone()
            check(there == (len(stored), sum(stored.values())), f"{m.name} holds the same rows ({there[0]})")
        # (the steps before the change: their ids were all drawn on the old leader, and the ids
        # of the step after it on the new one, once the old one was gone. The members share one
        # clock here, seconds pass in between, so this holds by the clock alone: it shows the
        # order of ids across a leader change, not the lease, which tests/cluster/lifecycle.sh
        # tests with the clock moved)
        for change in ("switchover", "failover"):
            earlier = [i for s, _, _, i in acked if writers.order.index(s) < writers.order.index(change)]
            later = writers.ids("after " + change)
            check(earlier and later and min(later) > max(earlier),
                  f"ids after the {change} are above every id acknowledged before it ({len(later)} after, {len(earlier)} before)")
        crashes = []
        for m in cluster.members.values():
            for name in sorted(os.listdir(f"{m.data}/log")) if os.path.isdir(f"{m.data}/log") else []:
                with open(f"{m.data}/log/{name}", errors="replace") as f:
                    crashes += [f"{m.name}: {line.strip()}" for line in f
                                if "terminated by signal" in line or "PANIC" in line or "pg_shard_id" in line and "ERROR" in line]
        check(not crashes, f"no member's PostgreSQL crashed or raised a pg_shard_id ERROR ({crashes[:3]})")
        changes = {"switchover", "failover", "rolling restart: switchover"}
        bad = [e for e in writers.errors if e[1] not in RECONNECT or e[0] not in changes]
        check(not bad, f"writer errors only as the leader changes, and only reconnects ({len(writers.errors)} in all: {bad[:5]})")
        for step in dict.fromkeys(s for s, _, _ in writers.errors):
            print(f"    {step}: {sum(1 for e in writers.errors if e[0] == step)} errors "
                  f"({sorted({str(e[1]) for e in writers.errors if e[0] == step})})", flush=True)
        print("  longest commit per step: " + ", ".join(f"{s} {v * 1000:.0f} ms" for s, v in writers.latency.items()), flush=True)
    except Exception as e:
        check(False, f"the runbook ran to its end: {type(e).__name__}: {e}")
        for m in cluster.members.values():
            if os.path.exists(m.log):
                print(f"--- the last lines of {m.log}:")
                with open(m.log) as f:
                    print("".join(f.readlines()[-15:]))
    finally:
        if writers:
            writers.finish()
        cluster.destroy()
    print(f"\npatroni: {results['passed']} passed, {results['failed']} failed ({time.time() - t_start:.0f} s)")
    sys.exit(1 if results["failed"] else 0)


if __name__ == "__main__":
    main()
