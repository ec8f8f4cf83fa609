"""Standby control planes for tests and ``benchmarks/takeover.py``: several ``fairpod up --ha`` on 127.0.200.x
loopback addresses, each with its own home and its own PostgreSQL role (so that one can be cut off from the
database), sharing one database and one runs directory; the faults of the chaos test; and a record, kept by
the database itself, of every write made by a control plane that did not hold the lease.

Every process is started here and stopped here by its PID.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Connection, create_engine, text

from tests import reaper
from tests.executors.helpers import kill_recorded
from tests.ports import free_port
from tests.ray.cluster import beside

from .. import httpclient

# the loopback /24 of the standby control planes (200 above FAIRPOD_TEST_LOOPBACK_NET's): their group "standby" runs
# beside the Ray clusters' (tests/conftest.py)
NET = beside(200)

SEED_SPEC = Path(__file__).resolve().parents[2] / "examples" / "seed" / "spec.yaml"



def wait_for(pred: Callable[[], Any], timeout: float, what: str, step: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


# A statement-level trigger on every fairpod table: a write by a role whose node does not hold the lease at
# that moment is recorded in ha_test_violations (the fence's share lock keeps the lease still while it runs).
WATCH_SQL = """
CREATE TABLE IF NOT EXISTS ha_test_roles (url text, role text);
CREATE TABLE IF NOT EXISTS ha_test_violations (ts float, role text, holder text, tbl text, op text);
CREATE OR REPLACE FUNCTION ha_test_check() RETURNS trigger AS $$
DECLARE h text;
BEGIN
  SELECT holder INTO h FROM ha_lease WHERE id = 1;
  IF NOT EXISTS (SELECT 1 FROM ha_test_roles WHERE role = current_user AND url = h) THEN
    INSERT INTO ha_test_violations VALUES (extract(epoch from clock_timestamp()), current_user, h,
                                           TG_TABLE_NAME, TG_OP);
  END IF;
  RETURN NULL;
END $$ LANGUAGE plpgsql;
"""


class Node:
    def __init__(self, cluster: HaCluster, i: int) -> None:
        self.i = i
        self.role = f"fairpod_node{i}"
        self.home = cluster.tmp / f"node{i}"
        self.address = f"{NET}.{2 + i}"
        self.port = free_port()
        self.url = f"http://{self.address}:{self.port}"
        self.db = re.sub(r"://[^@/]*@", f"://{self.role}@", cluster.pg_url, count=1)
        self.log = cluster.tmp / f"node{i}.log"
        self.env = {**cluster.env, "FAIRPOD_HOME": str(self.home), "FAIRPOD_CONFIG": str(self.home / "config.json")}
        self.proc: subprocess.Popen[bytes] | None = None

    def health(self) -> dict[str, Any] | None:
        try:
            r = httpclient.get(self.url + "/healthz", timeout=1.0)
            return dict(r.json()) if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def leading(self) -> bool:
        """This node serves as the leader (its app answers /healthz, not the standby's stand-in)."""
        h = self.health()
        return h is not None and "role" not in h and self.proc is not None and h.get("pid") == self.proc.pid

    def standing_by(self) -> bool:
        h = self.health()
        return h is not None and h.get("role") == "standby" and self.proc is not None and h.get("pid") == self.proc.pid

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def empty_database(pg_url: str) -> None:
    """The store's tables emptied and the standbys' tables (lease, members, the tests' roles and violations)
    dropped: a cluster started on it starts as on a new database."""
    from fairpod.store import Store
    from tests.store.conftest import wipe

    s = Store(pg_url)
    try:
        wipe(s.engine)
        with s.engine.begin() as c:
            c.execute(text("DROP TABLE IF EXISTS ha_lease, ha_members, ha_test_roles, ha_test_violations"))
    finally:
        s.close()


class HaCluster:
    """``n`` control planes on one PostgreSQL server (``pg_url``, whose user may create roles)."""

    def __init__(self, tmp: Path, pg_url: str, n: int = 2, lease: float = 3.0,
                 env: dict[str, str] | None = None, api_workers: int = 0) -> None:
        self.tmp = tmp
        self.api_workers = api_workers  # each node's --api-workers
        self.pg_url = pg_url
        self.lease = lease
        self.runs = tmp / "runs"
        reaper.runs(self.runs)
        self.marks = tmp / "marks"
        self.marks.mkdir(parents=True, exist_ok=True)
        nvml = tmp / "no-gpus.json"
        nvml.write_text(json.dumps({"gpus": []}))
        inherited = {k: v for k, v in os.environ.items()
                     if k not in ("FAIRPOD_URL", "FAIRPOD_TOKEN", "FAIRPOD_DB_URL", "FAIRPOD_API_URL")}
        # replicas write their marks under /tmp: limits only, no private /tmp (docs/isolation.md)
        self.env = {"FAIRPOD_SANDBOX": "limits", **inherited, "FAIRPOD_RUNS_DIR": str(self.runs),
                    "FAIRPOD_FAKE_NVML": str(nvml), **(env or {})}
        self.admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
        self.nodes = [Node(self, i) for i in range(n)]
        with self.admin.connect() as c:
            for node in self.nodes:
                c.execute(text(f"DROP ROLE IF EXISTS {node.role}"))
                c.execute(text(f"CREATE ROLE {node.role} LOGIN SUPERUSER"))
        self.token = ""

    # -- processes -------------------------------------------------------------------------------
    def start(self, i: int, spec: Path | None = None, wait: bool = True) -> Node:
        node = self.nodes[i]
        node.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        first = self.nodes[0].home / "job-token.key"
        if i != 0 and first.exists() and not (node.home / "job-token.key").exists():
            shutil.copy2(first, node.home / "job-token.key")  # every node signs job tokens with one key
        args = [sys.executable, "-m", "fairpod.cli.main", "up", "--foreground", "--ha", "--lease-seconds",
                f"{self.lease:g}", "--port", str(node.port), "--advertise-address", node.address, "--db", node.db]
        if spec is not None:
            args += ["--spec", str(spec)]
        if self.api_workers:
            args += ["--api-workers", str(self.api_workers)]
        with open(node.log, "ab") as log:
            node.proc = subprocess.Popen(args, env=node.env, stdout=log, stderr=log, start_new_session=True)
            reaper.started(node.proc.pid)
        if wait:
            wait_for(lambda: self._up(node), 60, f"node {i} to answer /healthz")
        return node

    def _up(self, node: Node) -> bool:
        assert node.proc is not None
        if node.proc.poll() is not None:
            raise AssertionError(f"node {node.i} exited {node.proc.returncode}:\n{node.log_text()[-3000:]}")
        h = node.health()
        return h is not None and h.get("pid") == node.proc.pid

    def boot(self, spec: Path = SEED_SPEC) -> None:
        """Node 0 with the spec, elected; the watch on writes; then the others as standbys."""
        self.start(0, spec)
        wait_for(self.nodes[0].leading, 30, "node 0 to lead")
        self.token = json.loads((self.nodes[0].home / "config.json").read_text())["token"]
        with self.admin.connect() as c:
            c.execute(text(WATCH_SQL))
            for node in self.nodes:
                c.execute(text("INSERT INTO ha_test_roles VALUES (:u, :r)"), {"u": node.url, "r": node.role})
            tables = c.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename "
                                    "NOT LIKE 'ha_%' AND tablename <> 'alembic_version'")).scalars().all()
            for t in tables:
                c.execute(text(f"DROP TRIGGER IF EXISTS ha_test_watch ON {t}"))
                c.execute(text(f"CREATE TRIGGER ha_test_watch AFTER INSERT OR UPDATE OR DELETE ON {t} "
                               f"FOR EACH STATEMENT EXECUTE FUNCTION ha_test_check()"))
        for i in range(1, len(self.nodes)):
            self.start(i)

    def leader(self, timeout: float = 60.0, besides: Node | None = None) -> Node:
        try:
            return wait_for(lambda: next((n for n in self.nodes if n is not besides and n.proc is not None
                                          and n.proc.poll() is None and n.leading()), None),
                            timeout, "a leader", step=0.02)
        except AssertionError as e:  # how each node stood, and what it last said (for the failure's message)
            raise AssertionError(f"{e}; {self.standing()}") from None

    def standing(self) -> str:
        out = []
        for n in self.nodes:
            code = n.proc.poll() if n.proc is not None else "not started"
            tail = n.log_text()[-1200:]
            out.append(f"\n--- node {n.i} ({n.url}): exit {code}, /healthz {n.health()!r}; its log ends:\n{tail}")
        return "".join(out)

    @property
    def resume_hold(self) -> float:
        """How long a continued old leader's renewals may be held up: less than the new leader's local margin
        (lease - margin - renewal interval), so the new leader keeps its lease meanwhile."""
        return min(1.2, self.lease * 0.4)

    @contextlib.contextmanager
    def admin_tx(self) -> Iterator[Connection]:
        """A transaction of the database's admin (its locks held until the block ends)."""
        eng = create_engine(self.pg_url)
        try:
            with eng.begin() as c:
                yield c
        finally:
            eng.dispose()

    def violations(self) -> list[tuple[Any, ...]]:
        with self.admin.connect() as c:
            return [tuple(r) for r in c.execute(text("SELECT * FROM ha_test_violations ORDER BY ts")).all()]

    # -- faults ----------------------------------------------------------------------------------
    def kill(self, node: Node) -> None:
        assert node.proc is not None
        node.proc.kill()
        node.proc.wait(timeout=30)

    def cut(self, node: Node) -> None:
        """``node`` can no longer reach the database: its role may not log in and its sessions are ended."""
        with self.admin.connect() as c:
            c.execute(text(f"ALTER ROLE {node.role} NOLOGIN"))
            c.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = :r"),
                      {"r": node.role})

    def heal(self, node: Node) -> None:
        with self.admin.connect() as c:
            c.execute(text(f"ALTER ROLE {node.role} LOGIN"))

    def stop_all(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                os.kill(node.proc.pid, signal.SIGCONT)
                node.proc.terminate()
                try:
                    node.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait(timeout=30)
        kill_recorded(self.runs)  # what is left of the replicas, by recorded PID and start time
        self.admin.dispose()

    # -- the API, through whichever node leads ----------------------------------------------------
    def request(self, method: str, path: str, timeout: float = 60.0, **kw: Any) -> httpx.Response:
        """``method path`` answered by the leader, following failovers (connection errors, 503 of a standby, 500
        of a leader cut off from the database). Only for requests that may be repeated (reads, keyed submits)."""
        headers = {"Authorization": f"Bearer {self.token}", **kw.pop("headers", {})}
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            for node in self.nodes:
                try:
                    r = httpclient.request(method, node.url + "/api/v1" + path, headers=headers, timeout=5.0, **kw)
                except httpx.HTTPError as e:
                    last = f"{node.url}: {e!r}"
                    continue
                if r.status_code < 500:
                    return r
                last = f"{node.url}: {r.status_code} {r.text[:200]}"
            time.sleep(0.05)
        raise AssertionError(f"no leader answered {method} {path} within {timeout:g} s: {last}")

    def submit(self, name: str, seconds: float, code: int, *, until_released: bool = False) -> int:
        """A job that marks each of its runs in ``marks/`` and exits ``code`` after ``seconds``, or with
        ``until_released`` once ``release(name)`` was called (``seconds`` then bounds the wait); its id. Retried
        with one Idempotency-Key, so a submit cut by a failover is accepted once."""
        if until_released:
            tenths = int(seconds * 10)
            wait = (f'i=0; while [ ! -e {self.marks}/{name}.release ] && [ $i -lt {tenths} ]; do sleep 0.1; '
                    f'i=$((i+1)); done')
        else:
            wait = f"sleep {seconds:g}"
        cmd = f'echo "$FAIRPOD_RESTART_COUNT $$" >> {self.marks}/{name}; {wait}; exit {code}'
        r = self.request("POST", "/jobs", json={"name": name, "team": "john", "nodes": 1,
                                                "command": ["sh", "-c", cmd]},
                         headers={"Idempotency-Key": f"ha-{name}"})
        assert r.status_code in (200, 201), r.text
        return int(r.json()["id"])

    def release(self, name: str) -> None:
        """Let a job submitted ``until_released`` end."""
        (self.marks / f"{name}.release").touch()

    def jobs(self) -> list[dict[str, Any]]:
        r = self.request("GET", "/jobs", params={"limit": 10000})
        assert r.status_code == 200, r.text
        body = r.json()
        return list(body["jobs"] if isinstance(body, dict) else body)


def failover(ha: HaCluster, kind: str, stopped_for: float = 0.0) -> float:
    """One failover of ``kind``; the seconds from the fault until another node serves as the leader.

    ``stop`` is the fence's own test: the leader is stopped while it has work it is about to do (a job queued,
    jobs running that end while it is stopped), the standby takes over and launches a job the stopped leader
    still believes queued, then the old leader is continued while its renewals are held up (the lease row
    locked for ``resume_hold`` s, as a slow database would). Fenced, it does nothing and steps down at once; not
    fenced (``FAIRPOD_TEST_FAULT_NO_FENCE=1``), it acts in that window: a write the database records as a
    violation, a job launched a second time (check_outcome). ``stopped_for``: the least seconds it stays stopped
    (the Ray executor takes agents silent for longer than its AGENT_TIMEOUT for lost)."""
    old = ha.leader()
    assert old.proc is not None
    queued: list[str] = []
    if kind == "stop":  # work it holds: a queued job behind running ones (the stream keeps the cluster full)
        queued = wait_for(lambda: [j["name"] for j in ha.jobs() if j["state"] == "Pending"], 60,
                          "a queued job before the pause")
    mark = len(old.log_text())  # the log is appended to across restarts: read what this fault made it say

    def logged(line: str) -> bool:
        return line in old.log_text()[mark:]

    t0 = time.monotonic()
    if kind == "kill":
        ha.kill(old)
    elif kind == "stop":
        old.proc.send_signal(signal.SIGSTOP)
    else:
        ha.cut(old)
    new = ha.leader(timeout=60, besides=old)
    took = time.monotonic() - t0
    if kind == "kill":
        ha.start(old.i)
    elif kind == "stop":
        wait_for(lambda: any(j["name"] in queued and j["state"] != "Pending" for j in ha.jobs()), 60,
                 "the new leader to start a job the stopped one holds queued")
        while time.monotonic() < t0 + stopped_for:  # the fault's length, not a wait for an event
            time.sleep(0.1)
        with ha.admin_tx() as c:  # the old leader's renewals wait for this lock; its fence must not
            c.execute(text("SELECT 1 FROM ha_lease WHERE id = 1 FOR UPDATE"))
            old.proc.send_signal(signal.SIGCONT)
            try:
                wait_for(lambda: logged("stepping down"), ha.resume_hold, "")
            except AssertionError:
                pass  # not fenced: it acted for resume_hold s; its next renewal finds the new leader
    else:  # healed only once the old leader, stepped down, has restarted as a standby that waits for the
        # database (it used to exit there: a standby that a database outage outlasted was gone for good)
        wait_for(lambda: logged("a standby waits for it"), 60,
                 f"node {old.i} to wait for the database as a standby")
        assert old.proc.poll() is None, old.log_text()[-3000:]
        ha.heal(old)
    if kind != "kill":  # it answers as a standby from the moment it steps down, before it restarts as one
        wait_for(lambda: logged("restarting as a standby"), 60, f"node {old.i} to restart after {kind}")
    wait_for(old.standing_by, 60, f"node {old.i} to stand by again after {kind}")
    assert new.leading()
    return took


class JobStream:
    """Jobs submitted one after another (``pause`` seconds apart) through whichever node leads: every fifth
    exits 3 (it must end Failed), the others 0 (Succeeded); each runs 0.5 to 3.5 s."""

    def __init__(self, ha: HaCluster, pause: float = 0.3, limit: int = 2000) -> None:
        self.ha, self.pause, self.limit = ha, pause, limit
        self.expect: dict[str, str] = {}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __len__(self) -> int:
        return len(self.expect)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    def _run(self) -> None:
        for k in range(self.limit):
            if self._stop.is_set():
                return
            code = 3 if k % 5 == 4 else 0
            try:
                self.ha.submit(f"j{k}", seconds=0.5 + (k % 4), code=code)
            except BaseException as e:  # noqa: BLE001 - the caller reports it
                self.errors.append(e)
                return
            self.expect[f"j{k}"] = "Failed" if code else "Succeeded"
            self._stop.wait(self.pause)

    def grown(self, by: int, timeout: float = 60.0) -> None:
        seen = len(self)
        wait_for(lambda: self.errors or len(self) >= seen + by, timeout, "more jobs to be accepted")
        assert not self.errors, self.errors


def check_outcome(ha: HaCluster, stream: JobStream, timeout: float = 180.0) -> int:
    """Every accepted job is one job, ended in its right state, run exactly once (one mark); no write by a
    node without the lease. Returns the number of jobs."""
    final = ("Succeeded", "Failed", "Cancelled")
    jobs = wait_for(lambda: (js := ha.jobs()) and all(j["state"] in final for j in js) and js, timeout,
                    "every job to finish", step=0.5)
    by_name = {j["name"]: j for j in jobs if re.fullmatch(r"j\d+", j["name"])}  # the stream's jobs
    assert sorted(by_name) == sorted(stream.expect), "a job lost or accepted twice"
    for name, state in stream.expect.items():
        assert by_name[name]["state"] == state, (name, by_name[name])
        runs = (ha.marks / name).read_text().splitlines()
        assert len(runs) == 1, (name, runs)  # no job launched twice, none restarted by a takeover
    assert ha.violations() == [], "a write by a control plane that did not hold the lease"
    return len(by_name)
