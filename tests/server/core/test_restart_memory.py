"""A restarted control plane builds its memory from what the store holds without reading every job back whole
(``Store.engine_jobs``, ``ControlPlane._recover``): a restart with jobs in every state must give the API the same
answers (get-job, list-jobs) and the engine the same workloads, holds and decisions as the control plane it
replaces had built transition by transition. (Elastic jobs, services and Ray jobs need other executors than the
timed one: their fields are checked against the store in ``tests/store/test_engine_jobs.py``.)"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from fairpod.governance import net_changes, schedule
from fairpod.server.core import ControlPlane
from fairpod.server.runtime.wiring import build, make_executor

from ..inproc_api import Api


def memory(cp: ControlPlane) -> dict[str, Any]:
    """What the engine is given (every field of every workload, running and pending), the holds kept out of it,
    the live attempts and their slots."""
    def fields(ws: Any) -> dict[str, Any]:
        # not ``started``: a running workload's is the admission's time in the memory that admitted it, and the
        # start recorded at its launch (``started_at``, a turn's work later) in a memory built from the store; so
        # it was before the memory was built from ``engine_jobs`` as well
        return {w.id: {f.name: getattr(w, f.name) for f in dataclasses.fields(w) if f.name != "started"} for w in ws}

    return {"pending": fields(cp.snap.pending.values()), "running": fields(cp.snap.running.values()),
            "array holds": {k: (h.limit, h.tasks, h.held) for k, h in cp.array_holds.items()},
            "restart holds": dict(cp.restart_holds),
            "runs": {jid: run.to_json() for jid, run in cp.runs.items()},
            "slots": {n: sorted(used) for n, used in cp.slots.used.items() if used}}


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Where two memories differ: (part, job, field, before, after)."""
    out = []
    for part in before.keys() | after.keys():
        b, a = before.get(part, {}), after.get(part, {})
        for key in b.keys() | a.keys():
            x, y = b.get(key), a.get(key)
            if isinstance(x, dict) and isinstance(y, dict):
                out += [f"{part} {key} {f}: {x.get(f)!r} != {y.get(f)!r}" for f in x.keys() | y.keys()
                        if x.get(f) != y.get(f)]
            elif x != y:
                out.append(f"{part} {key}: {x!r} != {y!r}")
    return out


def answer_differences(before: dict[Any, Any], after: dict[Any, Any]) -> list[str]:
    def flat(x: Any, at: str = "") -> dict[str, Any]:
        if isinstance(x, dict):
            return {k: v for key, val in x.items() for k, v in flat(val, f"{at}.{key}").items()}
        if isinstance(x, list):
            return {k: v for i, val in enumerate(x) for k, v in flat(val, f"{at}[{i}]").items()}
        return {at: x}

    b, a = flat(before), flat(after)
    return [f"{k}: {b.get(k)!r} != {a.get(k)!r}" for k in sorted(b.keys() | a.keys()) if b.get(k) != a.get(k)]


def decisions(cp: ControlPlane, now: float) -> list[str]:
    cp.snap.now = now
    return [repr(d) for d in net_changes(schedule(cp.snap))]


# worked out from the wall clock at the request, or naming the turn a view is of (a restart counts turns from 0)
CLOCKED = {"estimated_start", "running_accelerator_seconds", "queue_position_as_of"}


def answers(client: TestClient, token: str, ids: list[int]) -> dict[Any, Any]:
    """list-jobs and get-job of every job, without what the wall clock at the request works out."""
    def steady(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: steady(v) for k, v in x.items() if k not in CLOCKED}
        return [steady(v) for v in x] if isinstance(x, list) else x

    h = {"Authorization": f"Bearer {token}"}
    out: dict[Any, Any] = {"list": client.get("/api/v1/jobs", params={"limit": 500}, headers=h).json()}
    for jid in ids:
        out[jid] = client.get(f"/api/v1/jobs/{jid}", headers=h).json()
    return steady(out)


def test_a_restart_restores_every_field_the_engine_and_the_api_read(tmp_path: Path) -> None:
    a = Api(tmp_path)
    for body in (
        dict(name="big", team="john", command=["sleep", "3600"], nodes=2, expected_duration_seconds=0.1 + 0.2),
        dict(name="odd", team="smith", command=["sleep", "3600"], min_runtime_seconds=123.456),
        dict(name="mine", team="john", command=["sleep", "3600"], user="mia", deep_health_check_passed_nodes_only=True),
        dict(name="wait", team="smith", command=["sleep", "3600"], nodes=4),
    ):
        a.submit(**body)
    arr = a.api("POST", "/jobs/array", json={"array": "0-5%2", "job": {"name": "arr", "team": "john",
                                                                       "command": ["sleep", "3600"]}})
    assert arr.status_code == 201, arr.text
    a.turn(3)
    a.submit(name="late", team="john", command=["sleep", "3600"])
    a.submit(name="gone", team="smith", command=["sleep", "3600"])
    stop = a.api("POST", "/jobs/gone/cancel")  # finished: in the answers, not in the memory
    assert stop.status_code in (200, 202), stop.text
    ids = [j.id for j in a.store.list_jobs()]
    states = {j.state for j in a.store.list_jobs()}
    assert len(states) >= 3, states  # running, pending, cancelled (the test would prove little otherwise)
    assert a.cp.array_holds and len(a.cp.snap.pending) >= 3, "no held task or too few waiting jobs"
    before_answers = answers(a.client, a.admin, ids)
    before = memory(a.cp)
    now = a.cp.clock() + 1.0
    before_decisions = decisions(a.cp, now)
    # the restart: a new runtime on the same home and store (the old control plane is not asked to stop first)
    rt = build(a.home, a.url, make_executor(a.home, "timed"), "http://127.0.0.1:9")
    try:
        with TestClient(rt.app, base_url="http://127.0.0.1:9") as client:
            after = memory(rt.cp)
            assert after == before, differences(before, after)
            after_answers = answers(client, a.admin, ids)
            assert after_answers == before_answers, answer_differences(before_answers, after_answers)
            assert decisions(rt.cp, now) == before_decisions
    finally:
        rt.close()
        a.close()
