"""No read waits for a reconcile turn: while a turn holds the control plane (held inside by a keeper that waits for
an event the test sets), list-jobs, get-job, explain, the replicas and logs of a job, the nodes, the cluster,
``/metrics`` and the dashboard's data answer, each from a consistent view at most one turn old that says which turn
it is of (``as_of``, ``fairpod_figures_as_of_turn``). The first read of a view no reader asked for before (an
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

from .api import Api

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
    }
    before = read_all(reads)  # the core is free: each read computes its view now
    assert {n: r.status_code for n, r in before.items() if r.status_code >= 500} == {}
    turn = api.cp.cycles
    assert before["explain job"].json()["as_of"]["turn"] == turn
    assert before["explain job"].json()["queue_position"] == 1
    assert before["cluster"].json()["as_of"]["turn"] == turn
    assert figures_turn(before["metrics"]) == turn

    api.submit(name="w3", team="john", nodes=4, command=["sleep", "60"])  # queued: in no published view yet
    first: dict[str, httpx.Response] = {}
    asker = threading.Thread(target=lambda: first.update(r=get("/explain/jobs/w3")()), name="first-explain")
    with turn_held(api):
        asker.start()
        during = read_all(reads)
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
    assert during["dashboard tasks"].json()["queue_positions_at"] == before["dashboard tasks"].json()[
        "queue_positions_at"]

    # the next turn publishes, when it ends, every view read lately: w3's explain too, read now without waiting
    api.turn()
    with turn_held(api):
        again = read_all({"explain new": get("/explain/jobs/w3"), "metrics": reads["metrics"]})
    assert again["explain new"].status_code == 200, again["explain new"].text
    assert again["explain new"].json()["as_of"]["turn"] == turn + 2
    assert again["explain new"].json()["queue_position"] == 4
    assert figures_turn(again["metrics"]) == turn + 2
