"""Small builders for engine tests: a cluster of 4-accelerator nodes and teams from short dicts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

from fairpod.governance import Snapshot, Workload, schedule
from fairpod.governance.build import snapshot_from_spec
from fairpod.governance.decisions import Admit, Decision, Preempt, Wait
from fairpod.model.resources import Res
from fairpod.model.spec import parse_spec

T = "unit4"
NODE = Res(4, 16000, 64 * 1024)


def per(acc: int) -> Res:
    return Res(acc, 4000 * acc, 16 * 1024 * acc)


def make(nodes: int, teams: list[dict[str, Any]], groups: list[dict[str, Any]] | None = None,
         **policy: Any) -> Snapshot:
    spec = parse_spec({
        "groups": groups or [],
        "cluster": {"name": "t", "instance_groups": [{"name": "g", "instance_type": T, "count": nodes}]},
        "instance_types": [{"name": T, "accelerators": 4, "vcpu": 16, "memory_gib": 64}],
        "policy": {
            "priority_classes": [{"name": "low", "weight": 10}, {"name": "mid", "weight": 50},
                                 {"name": "high", "weight": 90}],
            **policy,
        },
        "teams": [
            {"name": t["name"], "fair_share_weight": t.get("weight", 0), "group": t.get("group"),
             "preempt_team_tasks": t.get("preempt", "LowerPriority"),
             "sharing": {"strategy": t.get("strategy", "LendAndBorrow"), "borrow_limit": t.get("limit", 100),
                         **({"lending_limits": [{"instance_type": T, "accelerators": t["lend"]}]}
                            if t.get("lend") is not None else {}),
                         **({"absolute_borrow_limits": [{"instance_type": T, "accelerators": t["borrow_abs"]}]}
                            if t.get("borrow_abs") is not None else {})},
             "user_limits": {"max_running_accelerators": t.get("user_cap"),
                             "queue_order": "RoundRobin" if t.get("round_robin") else "FirstComeFirstServe"},
             "quota": [{"instance_type": T, "accelerators": t["quota"]}] if t.get("quota") else []}
            for t in teams
        ],
    })
    return snapshot_from_spec(spec)


def submit(snap: Snapshot, jid: str, team: str, acc: int, *, n: int = 1, t: float | None = None,
           prio: int = -1, min_runtime: float = 0.0, user: str = "", preemptions: int = 0) -> Workload:
    w = Workload(jid, team, T, n, per(acc), priority=prio, submit=snap.now if t is None else t,
                 min_runtime=min_runtime, user=user, preemptions=preemptions)
    snap.add_pending(w)
    return w


def cycle(snap: Snapshot, now: float | None = None) -> list[Decision]:
    if now is not None:
        snap.now = now
    return schedule(snap)


def admitted(ds: list[Decision]) -> list[str]:
    return [d.job for d in ds if isinstance(d, Admit)]


def preempted(ds: list[Decision]) -> list[str]:
    return [d.job for d in ds if isinstance(d, Preempt)]


def waits(ds: list[Decision]) -> dict[str, str]:
    return {d.job: d.reason for d in ds if isinstance(d, Wait)}


def usage(snap: Snapshot, team: str) -> int:
    return snap.teams[team].u(T)[0]


# a random history of one queue's life: submits, cancels and cycles (tests/governance/test_queue_position.py)
QUEUE_OPS = st.lists(st.tuples(st.sampled_from(["submit", "cancel", "cycle"]), st.integers(0, 3),
                               st.integers(0, 40)), min_size=1, max_size=60)
QUEUE_PRIORITIES = st.lists(st.sampled_from([-1, 10, 50, 90]), min_size=60, max_size=60)


def play_queue(ops: list[tuple[str, int, int]], priorities: list[int]) -> Iterator[tuple[int, Snapshot]]:
    """Two teams on two nodes living through ``ops`` (QUEUE_OPS): the step's index and the snapshot after each."""
    snap = make(2, [{"name": "a", "quota": 4}, {"name": "b", "quota": 4}], task_prioritization="TaskRanking")
    n = 0
    for i, (op, acc, k) in enumerate(ops):
        if op == "submit":
            n += 1
            submit(snap, f"j{n}", "ab"[k % 2], acc + 1, t=float(i), prio=priorities[i])
        elif op == "cancel" and snap.pending:
            snap.remove_pending(sorted(snap.pending)[k % len(snap.pending)])
        elif op == "cycle":
            snap.now = float(i)
            schedule(snap)
        yield i, snap
