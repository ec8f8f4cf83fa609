"""Property tests: random clusters, teams and event sequences never break the engine's invariants."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairpod.governance.decisions import Admit, Preempt, net_changes
from fairpod.governance.quota import borrow_cap
from fairpod.governance.snapshot import Snapshot

from .helpers import T, cycle, make, submit

STRATS = ["LendAndBorrow", "LendAndBorrow", "Lend", "DontLend"]


@st.composite
def clusters(draw: st.DrawFn):
    nodes = draw(st.integers(1, 6))
    n_teams = draw(st.integers(1, 4))
    left = nodes  # quotas in whole nodes, summing to at most the cluster
    teams = []
    for i in range(n_teams):
        q = draw(st.integers(0, left))
        left -= q
        teams.append({
            "name": f"t{i}", "quota": 4 * q, "strategy": draw(st.sampled_from(STRATS)),
            "limit": draw(st.sampled_from([1, 50, 100, 500])), "weight": draw(st.integers(0, 100)),
            "preempt": draw(st.sampled_from(["LowerPriority", "Never"])),
            # rules 2a and 9: lending and absolute borrow limits, per-user cap and round-robin
            "lend": draw(st.sampled_from([None, None, 0, 2, 4, 8])),
            "borrow_abs": draw(st.sampled_from([None, None, 0, 2, 4, 8])),
            "user_cap": draw(st.sampled_from([None, None, 4, 8, 12])),
            "round_robin": draw(st.booleans()),
            # rule 10: (share of the budget used, hard cap) or no budget
            "budget": draw(st.sampled_from([None, None, (0.5, False), (0.9, False), (1.0, False), (1.2, True)])),
        })
        if teams[-1]["strategy"] == "DontLend":
            teams[-1]["lend"] = None
        if teams[-1]["strategy"] != "LendAndBorrow":
            teams[-1]["borrow_abs"] = None
    policy = {
        "task_prioritization": draw(st.sampled_from(["TaskRanking", "FirstComeFirstServe"])),
        "idle_compute_allocation": draw(st.sampled_from(["FairShare", "FirstComeFirstServe"])),
        "idle_resource_sharing": draw(st.sampled_from(["Enabled", "Disabled"])),
        "starvation_guard_seconds": draw(st.sampled_from([600, 600, 0, 3])),  # 0 and 3: holds and backfill
        "fair_share_half_life_seconds": draw(st.sampled_from([60, 3600])),
    }
    if policy["idle_compute_allocation"] == "FairShare" and draw(st.booleans()):
        policy["idle_compute_allocation"] = "FairShareHistory"
    return nodes, teams, policy


events = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.integers(0, 3), st.sampled_from([1, 2, 4]), st.integers(1, 3),
                  st.sampled_from([-1, 10, 50, 90]), st.sampled_from([None, 1.0, 5.0, 50.0]),
                  st.sampled_from(["ann", "bob", "cy"])),
        st.tuples(st.just("finish"), st.integers(0, 50)),
    ),
    min_size=1,
    max_size=40,
)


def check_invariants(snap, whole_nodes: bool) -> None:
    # capacity: no node over-committed, and each node's free space matches its jobs
    for nd in snap.nodes.values():
        assert min(nd.free) >= 0
        used = sum(snap.running[j].req.acc for j in nd.jobs)
        assert nd.free[0] == nd.cap[0] - used
    # the nodes by count of free accelerators (preemption bounds and the guard read only those with enough)
    assert {b: names for b, names in snap.by_free.get(T, {}).items()} == {
        b: {nd.name for nd in snap.by_type.get(T, ()) if nd.free[0] == b}
        for b in {nd.free[0] for nd in snap.by_type.get(T, ())}}
    assert snap.with_free(T, 1) == [names for b, names in snap.by_free.get(T, {}).items() if b >= 1]
    # gang: every running job has all its replicas, on distinct nodes
    for w in snap.running.values():
        assert w.nodes is not None and len(w.nodes) == w.n == len(set(w.nodes))
    pool = snap.pool(T)
    total_over = [0, 0, 0]
    for team in snap.teams.values():
        u, q = team.u(T), team.q(T)
        cap = borrow_cap(team, T)
        assert u[0] <= max(q[0], cap[0]), f"team {team.name} over its borrow limit"
        if not team.borrows:
            assert u[0] <= q[0]
        for d in range(3):
            total_over[d] += max(0, u[d] - q[d])
    # borrowing is covered by lenders' idle quota (+ unallocated): DontLend quota is never used by others, and
    # no lender lends more than its lending limit (rule 2a), recomputed here from scratch
    ua = snap.unallocated(T) if snap.idle_sharing else [0, 0, 0]
    lendable = [0, 0, 0]
    for team in snap.teams.values():
        if team.lends:
            q, u, lim = team.q(T), team.u(T), team.lend_limit.get(T)
            for d in range(3):
                idle = max(0, q[d] - u[d])
                lendable[d] += idle if lim is None else min(idle, lim[d])
    for d in range(3):
        assert total_over[d] == pool.over[d]
        assert pool.idle_lend[d] == lendable[d]
        assert total_over[d] <= lendable[d] + ua[d], "borrowing beyond the lenders' lending limits"
    # rule 9: no user of a team runs more than the team's per-user cap
    for team in snap.teams.values():
        per_user: dict[str, int] = {}
        for w in snap.running.values():
            if w.team == team.name and w.user:  # jobs with no user (engine tests, traces) count for nobody
                per_user[w.user] = per_user.get(w.user, 0) + w.total.acc
        assert {k: v for k, v in team.user_acc.items() if v} == per_user
        if team.user_cap is not None:
            assert all(v <= team.user_cap for v in per_user.values()), f"team {team.name} over its per-user cap"
    if whole_nodes and snap.starvation_guard >= 600:  # (a held job may keep its team's quota for itself)
        # a job within its team's unused quota on a healthy cluster is admitted in this cycle (after reclaim)
        for team in snap.teams.values():
            unused = team.q(T)[0] - team.u(T)[0]
            held = team.budget.get(T, (0.0, 1.0, False))
            if held[2] and held[0] >= held[1]:
                continue  # a hard cap holds the team's jobs
            for w in team.queue.live.values():
                if team.user_cap is not None and team.user_acc.get(w.user, 0) + w.total.acc > team.user_cap:
                    continue  # held by its user's cap, not by quota
                if w.total.acc <= unused and w.min_runtime == 0:
                    raise AssertionError(f"{w.id} fits in team {team.name}'s unused quota but waits: {w.reason}")


def snapshot_of(cluster: tuple) -> tuple:
    """The engine's snapshot of a drawn cluster (its teams' budgets set), and the drawn teams."""
    nodes, teams, policy = cluster
    snap = make(nodes, teams, **policy)
    for t in teams:
        if t["budget"] is not None:
            snap.teams[t["name"]].budget[T] = (100.0 * t["budget"][0], 100.0, t["budget"][1])
    return snap, teams


def apply(snap: Snapshot, teams: list, ev: tuple, name: str, now: float, whole_nodes: bool) -> None:
    """A drawn event: a job ``name`` submitted, or a running job (picked by the event's number) finished."""
    if ev[0] == "submit":
        _, ti, acc, n, prio, expected, user = ev
        team = teams[ti % len(teams)]["name"]
        w = submit(snap, name, team, 4 if whole_nodes else acc, n=n, t=now, prio=prio, user=user)
        w.expected = expected
    elif snap.running:
        snap.finish(sorted(snap.running)[ev[1] % len(snap.running)])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), events, st.booleans())
def test_invariants_hold_over_random_event_sequences(cluster, evs, whole_nodes):
    snap, teams = snapshot_of(cluster)
    preempted_by: set[tuple[str, str]] = set()
    now = 0.0
    for i, ev in enumerate(evs):
        now += 1
        apply(snap, teams, ev, f"j{i}", now, whole_nodes)
        raw = cycle(snap, now)
        for i, d in enumerate(raw):  # a victim is not offered again in the cycle that preempted it
            if isinstance(d, Preempt):
                assert not [a for a in raw[i:] if isinstance(a, Admit) and a.job == d.job], d
        ds = net_changes(raw)
        started_now = {d.job for d in ds if isinstance(d, Admit)}
        for d in ds:
            if isinstance(d, Preempt):
                assert d.job not in started_now, f"{d.job} admitted and preempted in one cycle"
                assert d.job not in snap.running and d.job in snap.pending
                # no two jobs preempt each other back and forth
                assert (d.by, d.job) not in preempted_by, f"{d.job} and {d.by} preempt each other"
                preempted_by.add((d.job, d.by))
            if isinstance(d, Admit):
                assert d.job in snap.running
                team = snap.teams[snap.running[d.job].team]
                used, hours, hard = team.budget.get(T, (0.0, 1.0, False))
                if used >= hours:  # rule 10: a spent budget borrows nothing; a hard cap starts nothing
                    assert not hard, f"{d.job} started past its team's hard cap"
                    assert d.borrowed == 0, f"{d.job} borrows past its team's budget"
        check_invariants(snap, whole_nodes)
    # at the end the cluster is stable: a further cycle admits and preempts nothing new of itself
    # (only capacity that was not there before could change anything)
    ds = cycle(snap, now + 0.5)
    assert not [d for d in ds if isinstance(d, Preempt)]
