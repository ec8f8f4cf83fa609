"""No read waits for a reconcile turn: while a turn holds the control plane (held inside by a keeper that waits for
an event the test sets), list-jobs, get-job (its queue position), explain, the replicas and logs of a job, the
nodes (their jobs), the cluster, ``/metrics``, the dashboard's data and a spec's dry run answer, each from a
consistent view at most one turn old that says which turn it is of (``as_of``, ``queue_position_as_of``,
``fairpod_figures_as_of_turn``). A turn paused between two of its changes (a reclaim's preemption taken, its
commit not yet made) is never seen half done: get-job's state, reason and queue position and the nodes' jobs
are all of before the turn, then all of after it (``fairpod.server.core.facts``). The first read of a view no reader asked for before (an
explain of a job just submitted) waits for the turn, as every read did before, and answers with the turn's view
once it ended; from then on the turns publish it (``fairpod.server.core.published``). (The dashboard's tasks page
among them: it had a test of its own, with the same turn held the same way, that this one took in.)"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from fairpod.server.core.transitions import admit

from ..inproc_api import Api

DEADLINE = 20.0  # seconds: a bound on each wait, never a pause


@contextmanager
def turn_held(api: Api) -> Iterator[threading.Thread]:
    """A reconcile turn that holds the control plane's lock until the block ends (a keeper after its commit waits)."""
    inside, release = threading.Event(), threading.Event()

    def long_keeper(cp: Any) -> None:  # runs in the turn, under the control plane's lock
        inside.set()
        release.wait(DEADLINE)

    api.cp.keepers.after.append(long_keeper)
    turn = threading.Thread(target=api.turn, name="long-turn")
    turn.start()
    try:
        assert inside.wait(DEADLINE), "the turn did not reach its keeper"
        yield turn
        assert not release.is_set() and turn.is_alive()  # the turn still held the lock when the reads answered
    finally:
        release.set()
        turn.join(DEADLINE)
        api.cp.keepers.after.remove(long_keeper)


def read_all(reads: dict[str, Callable[[], httpx.Response]]) -> dict[str, httpx.Response]:
    """Every read, one after the other in a thread of their own; each must answer within DEADLINE."""
    got: dict[str, httpx.Response] = {}
    done = threading.Event()

    def run() -> None:
        for name, read in reads.items():
            got[name] = read()
        done.set()

    threading.Thread(target=run, name="reads", daemon=True).start()
    assert done.wait(DEADLINE), f"waited for the turn: {next(n for n in reads if n not in got)}"
    return got


def figures_turn(r: httpx.Response) -> int:
    m = re.search(r"^fairpod_figures_as_of_turn (\S+)$", r.text, re.M)
    assert m, r.text[:500]
    return int(float(m.group(1)))


def test_reads_answer_while_a_turn_holds_the_control_plane(api: Api) -> None:
    big = api.submit(name="big", team="john", nodes=4, command=["sleep", "600"])
    api.turn()  # big runs: the team's quota is used, the jobs below wait in its queue
    for i in range(3):
        api.submit(name=f"w{i}", team="john", nodes=4, command=["sleep", "60"])
    api.turn()

    def get(path: str) -> Callable[[], httpx.Response]:
        return lambda: api.api("GET", path)

    reads = {
        "list-jobs": get("/jobs?limit=100"),
        "get-job": get("/jobs/w0"),
        "explain job": get("/explain/jobs/w0"),
        "explain teams": get("/explain/teams?team=john&team=smith"),
        "replicas": get(f"/jobs/{big['id']}/replicas"),
        "logs": get(f"/jobs/{big['id']}/logs"),
        "nodes": get("/nodes"),
        "cluster": get("/cluster"),
        "dashboard tasks": get("/dashboard/tasks"),
        "usage history": get("/usage/history"),
        "metrics": lambda: api.request("GET", "/metrics"),
        "spec dry run": lambda: api.api("POST", "/spec/dry-run", json=api.cp.spec.model_dump(mode="json")),
    }
    before = read_all(reads)  # the core is free: each read computes its view now
    assert {n: r.status_code for n, r in before.items() if r.status_code >= 500} == {}
    turn = api.cp.cycles
    assert before["explain job"].json()["as_of"]["turn"] == turn
    assert before["explain job"].json()["queue_position"] == 1
    assert before["cluster"].json()["as_of"]["turn"] == turn
    assert figures_turn(before["metrics"]) == turn
    assert before["spec dry run"].json()["would_start"] == []

    api.submit(name="w3", team="john", nodes=4, command=["sleep", "60"])  # queued: in no published view yet
    first: dict[str, httpx.Response] = {}
    asker = threading.Thread(target=lambda: first.update(r=get("/explain/jobs/w3")()), name="first-explain")
    with turn_held(api):
        asker.start()
        during = read_all({**reads, "get-job new": get("/jobs/w3")})
        assert asker.is_alive() and not first, "the first explain of w3 answered while the turn held the core"
    asker.join(DEADLINE)
    new = first["r"]  # it waited for the turn, then answered with the turn's view
    assert new.status_code == 200 and new.json()["as_of"]["turn"] == turn + 1, new.text
    assert new.json()["queue_position"] == 4
    for name, r in during.items():
        assert r.status_code == before.get(name, r).status_code, (name, r.status_code, r.text[:300])
    # the views of before the turn: explain, the cluster and the figures as of the turn before it
    assert during["explain job"].json()["as_of"] == before["explain job"].json()["as_of"]
    assert during["explain job"].json()["queue_position"] == 1
    assert during["explain teams"].json()["as_of"] == before["explain teams"].json()["as_of"]
    assert during["cluster"].json()["as_of"]["turn"] == turn
    assert figures_turn(during["metrics"]) == turn
    positions = {t["name"]: t["queue_position"] for t in during["dashboard tasks"].json()["tasks"]}
    assert positions["w0"] == 1 and positions["w2"] == 3 and positions["w3"] is None  # w3: queued since
    assert during["dashboard tasks"].json()["queue_positions_as_of"]["turn"] == turn
    # get-job's place in the queue and the nodes' jobs: as the turn before published them (w3 queued since)
    assert during["get-job"].json()["queue_position"] == 1
    assert during["get-job"].json()["queue_position_as_of"]["turn"] == turn
    assert during["get-job new"].json()["queue_position"] is None
    assert during["get-job new"].json()["queue_position_as_of"]["turn"] == turn
    assert during["nodes"].json()["as_of"]["turn"] == turn
    assert during["nodes"].json()["nodes"] == before["nodes"].json()["nodes"]
    assert during["spec dry run"].json()["would_start"] == []

    # the next turn publishes, when it ends, every view read lately: w3's explain too, read now without waiting
    api.turn()
    with turn_held(api):
        again = read_all({"explain new": get("/explain/jobs/w3"), "metrics": reads["metrics"]})
    assert again["explain new"].status_code == 200, again["explain new"].text
    assert again["explain new"].json()["as_of"]["turn"] == turn + 2
    assert again["explain new"].json()["queue_position"] == 4
    assert figures_turn(again["metrics"]) == turn + 2


TOPOLOGY_SPEC = """
cluster:
  name: demo
  topology_levels: [rack]
  instance_groups:
    - {name: workers, instance_type: ml.g5.12xlarge, count: 4, topology: {rack: r1}}
teams:
  - {name: john, sharing: {strategy: LendAndBorrow, borrow_limit: 50}, quota: [{instance_type: ml.g5.12xlarge, count: 3}]}
  - {name: smith, sharing: {strategy: LendAndBorrow, borrow_limit: 100}, quota: [{instance_type: ml.g5.12xlarge, count: 1}]}
"""  # the seed cluster (examples/seed/spec.yaml) with its nodes in one rack


@pytest.fixture
def racked(tmp_path: Any) -> Any:
    a = Api(tmp_path, TOPOLOGY_SPEC)
    yield a
    a.close()


def test_a_turn_half_done_is_never_read(racked: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reclaim turn paused after it took the engine's preemption of a borrower and before its commit: the
    engine's memory is then of after the turn (the borrower off its nodes, the lender's job and the two waiting
    jobs on them), the store of before it (read half from each, w0 was pending with no place in the queue). get-job (state, reason, queue positions), the nodes' jobs and the job's
    topology read while it is paused are all of before the turn, and all of after it once it ended."""
    api = racked
    big = api.submit(name="big", team="john", nodes=4, command=["sleep", "600"])  # borrows smith's node
    api.turn()
    for name in ("w0", "w1"):
        api.submit(name=name, team="john", nodes=1, command=["sleep", "60"])
    api.turn()

    def view() -> dict[str, Any]:
        got = read_all({n: (lambda n=n: api.api("GET", f"/jobs/{n}")) for n in ("big", "w0", "w1")}
                       | {"nodes": lambda: api.api("GET", "/nodes")})
        jobs = {n: r.json() for n, r in got.items() if n != "nodes"}
        return {"big": (jobs["big"]["state"], jobs["big"]["reason"], jobs["big"]["topology"]),
                "positions": [jobs[n]["queue_position"] for n in ("w0", "w1")],
                "nodes": {nd["name"]: nd["jobs"] for nd in got["nodes"].json()["nodes"]}}

    before = view()
    assert before["big"][0] == "Running" and before["big"][1].startswith("admitted, borrowing"), before
    assert before["big"][2]["placed"] == {"rack": ["r1"]}
    assert before["positions"] == [1, 2]
    assert all(j == [big["id"]] for j in before["nodes"].values()), before["nodes"]

    api.submit(name="s0", team="smith", nodes=1, command=["sleep", "600"])  # smith takes its node back
    inside, release = threading.Event(), threading.Event()
    preempt = admit.preempt

    def paused(cp: Any, d: Any) -> None:  # in the turn, under the lock: the preemption taken, not committed
        preempt(cp, d)
        inside.set()
        release.wait(DEADLINE)

    monkeypatch.setattr(admit, "preempt", paused)
    turn = threading.Thread(target=api.turn, name="reclaim-turn")
    turn.start()
    try:
        assert inside.wait(DEADLINE), "the turn did not preempt"
        during = view()
        assert turn.is_alive() and not release.is_set()
    finally:
        release.set()
        turn.join(DEADLINE)
    after = view()
    assert during == before, (during, before)
    # after: big reclaimed, s0 on smith's node and w0, w1 started in john's quota (nothing waits: no positions)
    assert after["big"][0] == "Preempted" and after["positions"] == [None, None], after
    assert sorted(j for js in after["nodes"].values() for j in js) == sorted(
        api.job(n)["id"] for n in ("w0", "w1", "s0")), after


def test_a_borrower_read_while_the_turn_that_admitted_it_holds_the_core_keeps_its_reason(racked: Api) -> None:
    """The turn that admitted a borrower committed it (Running, its lenders) and still holds the lock (its keepers
    run): the facts reads take are the turn's before, which know of no lending. get-job says the reason it was
    admitted with, not that it runs within its team's quota now (a read of the store newer than the facts)."""
    api = racked
    api.submit(name="big", team="john", nodes=4, command=["sleep", "600"])  # 3 nodes of quota + 1 of smith's
    with turn_held(api):
        during = read_all({"big": lambda: api.api("GET", "/jobs/big")})["big"].json()
    assert during["state"] == "Running", during
    assert during["reason"] == "admitted, borrowing 4 accelerators from smith", during["reason"]
    assert api.job("big")["reason"] == during["reason"]
