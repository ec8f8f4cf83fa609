"""API workers on PostgreSQL (``fairpod up --api-workers N --db postgresql://…``, ``fairpod api``): two worker apps,
each over its own connections, and a core built for API workers, all on one real PostgreSQL server the module
starts (tests/store/conftest.py). What SQLite's one writer gave for free is checked here with two transactions
really open at once: the first submit is held inside its transaction (after its insert) until the second is seen
waiting for it in ``pg_stat_activity``."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from fairpod.executors.base import Traits
from fairpod.server.core.foreign import Foreign
from fairpod.server.runtime.wiring import build_worker
from fairpod.store import Store
from fairpod.store.core import Tx
from tests.store.conftest import pg_url, wipe  # noqa: F401  (the fixture: a real PostgreSQL server)

from ..conftest import wait_for
from ..inproc_api import Api

WORKER = "fairpod-api-worker"


def job(name: str) -> dict[str, Any]:
    return {"name": name, "team": "john", "instance_type": "ml.g5.12xlarge", "nodes": 1, "accelerators": 1,
            "command": ["sleep", "5"]}


class Two:
    """A core (in-process, built for API workers) and two worker apps over their own stores, one PostgreSQL."""

    def __init__(self, tmp: Path, url: str, api_workers: bool = True) -> None:
        s = Store(url)
        wipe(s.engine)
        s.close()
        self.core = Api(tmp, api_workers=api_workers, db=url)
        self.workers = [TestClient(build_worker(self.core.home, url, Traits.of(self.core.rt.executor),
                                                "http://127.0.0.1:9"), base_url="http://127.0.0.1:9")
                        for _ in range(2)]
        for c in self.workers:
            c.__enter__()
        self.auth = {"Authorization": f"Bearer {self.core.token}"}

    def post(self, i: int, body: dict[str, Any], **headers: str) -> httpx.Response:
        return self.workers[i].post("/api/v1/jobs", json=body, headers={**self.auth, **headers})

    def waiting(self) -> int:
        """Backends of this database waiting for a lock another transaction holds."""
        with self.core.store.engine.connect() as c:
            return int(c.execute(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                      "AND datname = current_database()")).scalar() or 0)

    def close(self) -> None:
        for c in self.workers:
            c.__exit__(None, None, None)
            c.app.app.app.state.cp.store.close()  # type: ignore[attr-defined] - Signed(LeanSubmit(app))
        self.core.close()


@pytest.fixture
def two(tmp_path: Path, pg_url: str) -> Iterator[Two]:  # noqa: F811
    t = Two(tmp_path, pg_url)
    yield t
    t.close()


def at_once(t: Two, monkeypatch: pytest.MonkeyPatch, first: Callable[[], httpx.Response],
            second: Callable[[], httpx.Response], between: Callable[[], None] = lambda: None,
            ) -> tuple[httpx.Response, httpx.Response]:
    """``first`` is held inside its write transaction, after its job's insert (at its audit entry), until
    ``second`` waits on a lock; both answers. ``between()`` runs while both are open. (The routes run on the
    app's own threads: the first audit entries of the test, a group's in one call, are the first submit's.)"""
    inside, go = threading.Event(), threading.Event()
    audit = Tx.append_audits

    def held(self: Tx, *a: Any, **kw: Any) -> Any:
        if not inside.is_set():  # the first audit entry written: the first submit's (the second starts after)
            inside.set()
            assert go.wait(60), "the test did not let the first submit go on"
        return audit(self, *a, **kw)

    monkeypatch.setattr(Tx, "append_audits", held)
    out: dict[str, httpx.Response] = {}
    threads = [threading.Thread(target=lambda: out.__setitem__("first", first()), name="first"),
               threading.Thread(target=lambda: out.__setitem__("second", second()), name="second")]
    threads[0].start()
    try:  # (the second thread is started only once the first is inside: joined only if started)
        assert inside.wait(60), "the first submit did not reach its transaction"
        threads[1].start()
        wait_for(lambda: t.waiting() >= 1 or "second" in out, 30, "the second submit to wait for the first")
        between()
    finally:
        go.set()
        for th in threads:
            if th.ident is not None:
                th.join(60)
    assert not any(th.is_alive() for th in threads) and len(out) == 2
    return out["first"], out["second"]


def test_one_idempotency_key_on_two_workers_at_once_answers_one_job(two: Two, monkeypatch: pytest.MonkeyPatch):
    key = {"Idempotency-Key": "pg-same-key"}
    a, b = at_once(two, monkeypatch, lambda: two.post(0, job("pg-idem"), **key),
                   lambda: two.post(1, job("pg-idem"), **key))
    assert a.status_code == 201, a.text
    # the same job (whether the second says 200 'replayed' rests on the route's look-up before the submit, which
    # found no key yet: 201 too, as on SQLite when two such submits race to the core)
    assert b.status_code in (200, 201), b.text
    assert a.json()["id"] == b.json()["id"]
    listed = [j for j in two.core.api("GET", "/jobs?team=john&limit=0").json()["jobs"] if j["name"] == "pg-idem"]
    assert len(listed) == 1


def test_one_name_on_two_workers_at_once_is_one_job_and_one_clean_409(two: Two, monkeypatch: pytest.MonkeyPatch):
    a, b = at_once(two, monkeypatch, lambda: two.post(0, job("pg-name")), lambda: two.post(1, job("pg-name")))
    assert a.status_code == 201, a.text
    assert b.status_code == 409, b.text
    assert b.json() == two.core.api("POST", "/jobs", json=job("pg-name")).json()  # the core's own answer
    listed = [j for j in two.core.api("GET", "/jobs?team=john&limit=0").json()["jobs"] if j["name"] == "pg-name"]
    assert len(listed) == 1


def test_the_core_takes_both_of_two_concurrent_commits_in_seq_order(two: Two, monkeypatch: pytest.MonkeyPatch):
    """The first holds the next seq, uncommitted; the second waits for it (the seq counter's row, and the events'
    advisory lock: either alone orders the writers), so it cannot commit a larger seq first: a turn meanwhile
    takes neither, a turn after takes both (none skipped)."""
    core = two.core
    [foreign] = [k.__self__ for k in core.cp.keepers.before if isinstance(getattr(k, "__self__", None), Foreign)]

    def turn_meanwhile() -> None:
        core.turn()
        assert foreign.taken == 0 and not core.cp.snap.pending and not core.cp.snap.running

    a, b = at_once(two, monkeypatch, lambda: two.post(0, job("pg-seq-a")), lambda: two.post(1, job("pg-seq-b")),
                   turn_meanwhile)
    assert (a.status_code, b.status_code) == (201, 201), (a.text, b.text)
    sa, sb = (core.store.get_job(r.json()["id"]).seq for r in (a, b))  # type: ignore[union-attr]
    assert sa < sb  # commit order
    core.turn()
    assert foreign.taken == 2
    for r in (a, b):
        assert core.api("GET", f"/jobs/{r.json()['id']}").json()["state"] == "Running"


def test_a_commit_by_another_process_wakes_the_core_through_the_database(two: Two):
    """A worker on PostgreSQL wakes the core by a ``NOTIFY`` in its submit's transaction, not over HTTP (its core URL
    here is a port where nothing listens, and it holds no Poke): the core's listener sets the loop's wake on the
    commit. Its connection killed (``pg_terminate_backend``), it listens again and the next commit wakes the loop."""
    core = two.core
    listener = core.rt.listener
    assert listener is not None
    assert all(w.app.app.app.state.cp.wake is None for w in two.workers)  # type: ignore[attr-defined] - Signed(Lean..)
    listener.start()
    wake = core.cp.wake
    for n in (1, 2):
        wait_for(lambda n=n: listener.listening.is_set() and listener.connects == n, 30, f"listening (connection {n})")
        wake.clear()
        r = two.post(0, job(f"pg-wake-{n}"))
        assert r.status_code == 201, r.text
        wait_for(wake.is_set, 30, "the commit's NOTIFY to wake the core's loop")
        with core.store.engine.connect() as c:  # the listener's connection dropped, as a database restart drops it
            c.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": listener.pid})
    core.turn()
    assert all(core.api("GET", f"/jobs/pg-wake-{n}").json()["state"] == "Running" for n in (1, 2))


def test_a_core_on_postgresql_takes_in_what_another_process_committed(tmp_path: Path, pg_url: str):  # noqa: F811
    """A core on PostgreSQL built without API workers of its own (``fairpod up --db postgresql://…``) still takes in
    the jobs another process committed (``fairpod api`` on another host), and records its executor for it."""
    from fairpod.server.runtime.apiserver import core_traits

    t = Two(tmp_path, pg_url, api_workers=False)
    try:
        assert core_traits(t.core.store) == Traits.of(t.core.rt.executor)
        r = t.post(0, job("pg-other"))
        assert r.status_code == 201, r.text
        t.core.turn()
        assert t.core.api("GET", f"/jobs/{r.json()['id']}").json()["state"] == "Running"
        # its own submits are not taken in twice
        own = t.core.api("POST", "/jobs", json=job("pg-own"))
        t.core.turn()
        assert t.core.api("GET", f"/jobs/{own.json()['id']}").json()["state"] == "Running"
        assert len(t.core.cp.snap.running) == 2
    finally:
        t.close()


def test_fairpod_api_refuses_what_it_cannot_start_with_in_one_line(tmp_path: Path, pg_url: str,  # noqa: F811
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``fairpod api``'s bad input, each one line naming the flag, file or variable, nothing written; a password
    given on the command line is refused and never echoed. (In-process: the CLI's main, before it would serve.)"""
    from fairpod.cli.main import main

    s = Store(pg_url)
    wipe(s.engine)  # a database no core has started on
    s.close()
    good = tmp_path / "key"
    good.write_text(secrets.token_hex(32) + "\n")
    good.chmod(0o600)
    loose = tmp_path / "loose"
    loose.write_text(good.read_text())
    loose.chmod(0o644)
    junk = tmp_path / "junk"
    junk.write_text("not a key\n")
    junk.chmod(0o600)
    monkeypatch.setenv("FAIRPOD_HOME", str(tmp_path / "h"))
    core = ["--core", "http://127.0.0.1:9", "--secret-file", str(good)]
    cases: list[tuple[str | None, list[str], str]] = [
        (None, core, "needs the cluster's PostgreSQL database: set FAIRPOD_DB_URL"),
        (None, [*core, "--db", f"sqlite:///{tmp_path}/x.db"], "--db: fairpod api serves a PostgreSQL"),
        (None, [*core, "--db", "postgresql+psycopg://u:hunter2@db.example/x"], "--db holds a password"),
        (None, [*core, "--db", "nonsense"], "--db is not a database URL"),
        (pg_url, ["--core", "ftp://x", "--secret-file", str(good)], "--core 'ftp://x': give the core's URL"),
        (pg_url, ["--core", "http://h:99999"], "--core 'http://h:99999' is not a URL"),
        (pg_url, ["--core", "http://h:1/api/v1"], "(no path, query or user)"),
        (pg_url, [*core, "--port", "0"], "--port 0: give a port from 1 to 65535"),
        (pg_url, ["--core", "http://h:1", "--secret-file", str(tmp_path / "none")], "no such file; copy the core's"),
        (pg_url, ["--core", "http://h:1", "--secret-file", str(loose)], "is readable by other users (mode 644)"),
        (pg_url, ["--core", "http://h:1", "--secret-file", str(junk)], "is not a fairpod job secret"),
        (pg_url, ["--core", "http://h:1", "--secret-file", str(tmp_path)], "not a regular file"),
        (pg_url, ["--core", "http://h:1", "--secret-file", "/dev/zero"], "not a regular file"),
        (pg_url, core, "cannot read the cluster from the database"),  # no core has made its tables yet
        ("postgresql+psycopg://fairpod@/postgres?host=/nonexistent&port=1", core, "cannot read the cluster"),
    ]
    for url, flags, says in cases:
        if url is None:
            monkeypatch.delenv("FAIRPOD_DB_URL", raising=False)
        else:
            monkeypatch.setenv("FAIRPOD_DB_URL", url)
        assert main(["api", *flags]) == 2, flags
        err = capsys.readouterr().err
        assert says in err and err.startswith("fairpod: error: ") and err.count("\n") == 1, (flags, err)
        assert "hunter2" not in err
    monkeypatch.setenv("FAIRPOD_DB_URL", pg_url)
    for gc in ("700,10", "0,10,10", "a,b,c"):  # the cycle collector's thresholds, as `fairpod up` refuses them
        monkeypatch.setenv("FAIRPOD_GC_THRESHOLDS", gc)
        assert main(["api", *core]) == 2, gc
        err = capsys.readouterr().err
        assert err.startswith("fairpod: error: FAIRPOD_GC_THRESHOLDS must be three whole numbers") and \
            err.count("\n") == 1 and repr(gc) in err, (gc, err)
    assert not (tmp_path / "h").exists()  # nothing written
