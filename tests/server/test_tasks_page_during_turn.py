"""The dashboard's tasks page answers while a reconcile turn holds the control plane's lock: the turn here is
held inside by a keeper that waits for an event the test sets, and the page answers meanwhile, with the queue
positions it read before the turn (and says when they were read)."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from .api import Api

DEADLINE = 20.0  # seconds: a bound on each wait, never a pause


def test_the_tasks_page_answers_while_a_turn_holds_the_lock(api: Api) -> None:
    api.submit(name="big", team="john", nodes=4, command=["sleep", "600"])
    api.turn()  # big runs: the team's quota is used, the jobs below wait in its queue
    for i in range(3):
        api.submit(name=f"w{i}", team="john", nodes=4, command=["sleep", "60"])
    api.turn()
    before = api.api("GET", "/dashboard/tasks").json()
    want = {t["name"]: t["queue_position"] for t in before["tasks"]}
    assert want["w0"] == 1 and want["w2"] == 3

    inside, release = threading.Event(), threading.Event()

    def long_keeper(cp: Any) -> None:  # runs in the turn, under the control plane's lock
        inside.set()
        release.wait(DEADLINE)

    api.cp.keepers.after.append(long_keeper)
    turn = threading.Thread(target=api.turn, name="long-turn")
    turn.start()
    answered: list[httpx.Response] = []
    done = threading.Event()

    def page() -> None:
        answered.append(api.api("GET", "/dashboard/tasks"))
        done.set()

    try:
        assert inside.wait(DEADLINE), "the turn did not reach its keeper"
        threading.Thread(target=page, name="tasks-page", daemon=True).start()
        assert done.wait(DEADLINE), "the tasks page waited for the turn's lock"
        assert not release.is_set() and turn.is_alive()  # the turn still held the lock when the page answered
    finally:
        release.set()
        turn.join(DEADLINE)
        api.cp.keepers.after.remove(long_keeper)
    r = answered[0]
    assert r.status_code == 200, r.text
    got = {t["name"]: t["queue_position"] for t in r.json()["tasks"]}
    assert got == want  # the positions read before the turn
    assert before["queue_positions_at"] is not None
    assert r.json()["queue_positions_at"] == before["queue_positions_at"]
