"""JSON views of jobs, nodes and the cluster, as the API returns them."""

from __future__ import annotations

from typing import Any

from fairpod.executors import registry
from fairpod.governance import explain
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.topology import domain_name
from fairpod.model.catalog import InstanceType
from fairpod.model.jobs import JobState
from fairpod.server.access.auth import Principal
from fairpod.server.accounting import goodput
from fairpod.server.accounting.figures import group_figures, instance_types, team_figures
from fairpod.server.arrays import array_view
from fairpod.server.core.api import Core
from fairpod.server.errors import Problem
from fairpod.server.nodes import status_labels
from fairpod.server.runs import to_engine
from fairpod.store import Job, Node


def queue_position(cp: Core, job: Job) -> tuple[int | None, dict[str, Any] | None]:
    """The pending job's place in its team's queue (1 is next) and the view it is of (``as_of``: the turn; None:
    the job is not pending). Never waits for a turn (``Core.engine_facts``): while one holds the core, the place as
    the last turn left it (None for a job queued since), never one from a turn half done."""
    if job.state != JobState.PENDING or not cp.engine_memory:  # (an API worker: the core's memory)
        return None, None
    pos, as_of = cp.engine_facts(lambda f: f.position(job.team, to_engine(job.id)))
    return pos, as_of.json()


def job_in_engine(snap: Snapshot, jid: int, team: str, itype: str, pending: bool) -> dict[str, Any] | None:
    """What ``fairpod explain`` shows of a job in the engine's snapshot (read under the core's lock, or published
    at a turn's end): its team's levels and, while it waits, its place in the queue, its team's check and whether
    its team's offer for the next idle capacity is this job."""
    w = snap.pending.get(to_engine(jid))
    t = snap.teams.get(team)
    if t is None:
        return None
    it = w.itype if w is not None else itype
    got: dict[str, Any] = {"levels": explain.levels(snap, t, it)}
    if pending and w is not None:
        got["queue_position"] = t.queue.position(w.id)
        got["team_check"] = explain.holds(snap, w)
        offers = explain.next_idle(snap, it)
        got["next_idle"] = offers
        head = next((o for o in offers if o["team"] == team), None)
        got["team_head"] = bool(head and head["job"] == to_engine(jid))
    return got


def reason_now(cp: Core, job: Job) -> str | None:
    """The job's reason; for a running job admitted as a borrower whose lenders are no longer whom its team
    borrows from (a quota was cut, a lender's quota freed up), what its team borrows now, so the reason agrees
    with ``cluster show``. Facts older than the job's start are of before its admission: its reason then."""
    if job.state != JobState.RUNNING or not job.borrowed_from or not cp.engine_memory or not (
            job.reason or "").startswith("admitted, borrowing"):
        return job.reason
    lending, as_of = cp.engine_facts(lambda f: f.lending(job.instance_type).get(job.team, {}))
    if job.started_at is not None and as_of.at < job.started_at:
        return job.reason  # facts of before its admission (the turn that admitted it still holds the core)
    now = dict(lending)
    if set(job.borrowed_from) <= set(now):
        return job.reason
    then = ", ".join(job.borrowed_from)
    if not now:
        return f"running within team {job.team}'s quota now (admitted borrowing from {then})"
    whom = ", ".join(f"{'capacity no quota holds' if k == '(unallocated)' else k} ({n})" for k, n in now.items())
    return (f"admitted borrowing from {then}; team {job.team} now borrows {sum(now.values())} accelerators "
            f"from {whom}")


HIDDEN = "(hidden)"
_NO_TYPE = InstanceType(name="unknown", accelerators=0, vcpu=1, memory_gib=1)


def job_view(cp: Core, job: Job, *, detail: bool = False, reader: Principal | None = None) -> dict[str, Any]:
    """A job as the API shows it. Env values (where secrets live) only to those who act for the job's team
    (its members and admins) and to the job itself (``reader`` None): anyone else sees the keys only."""
    position, position_as_of = queue_position(cp, job) if detail else (None, None)
    out: dict[str, Any] = {
        "id": job.id,
        "name": job.name,
        "team": job.team,
        "user": job.spec.user,
        "state": job.state.value,
        "reason": reason_now(cp, job),
        "priority": job.spec.priority,
        "instance_type": job.instance_type,
        "nodes": job.nodes,
        "min_nodes": job.spec.nodes if job.spec.max_nodes else None,  # elastic: nodes is its size now
        "max_nodes": job.spec.max_nodes,
        "accelerators_per_node": job.acc,
        "submit_time": job.submit_time,
        "started_at": job.started_at,
        "first_started_at": job.first_started_at,
        "finished_at": job.finished_at,
        "restarts": job.attempt,
        "max_retry": job.max_retry,
        "auto_resume": job.auto_resume,
        "preemptions": job.preemptions,
        "placement": job.placement,
        "borrowed_from": job.borrowed_from,
        "topology": topology_view(cp, job),
        "queue_position": position,
        "queue_position_as_of": position_as_of,  # the turn the place is of: at most one turn old
        "estimated_start": cp.eta.get(job),  # an estimate (fairpod.server.accounting.eta); None: unknown or not pending
        "expected_duration_seconds": job.spec.expected_duration_seconds,
        "array": array_view(job),
        "kind": job.spec.kind,
    }
    if detail:
        out.update(
            command=job.spec.command,
            env=job.spec.env if reader is None or reader.acts_for(job.team) else dict.fromkeys(job.spec.env, HIDDEN),
            workdir=job.spec.workdir,
            image=job.spec.image, image_pull_policy=job.spec.image_pull_policy, mounts=job.spec.mounts,
            labels=job.spec.labels,
            checkpoint={"at": job.checkpoint_at, "step": job.checkpoint_step, "path": job.checkpoint_path},
            master_port=job.master_port,
            termination_grace_seconds=job.spec.termination_grace_seconds,
            scratch=job.spec.scratch, max_runtime_seconds=job.spec.max_runtime_seconds,
            vcpu_per_node=job.mcpu / 1000, memory_gib_per_node=job.mib / 1024,
            exit=(job.run_state or {}).get("exits"),
            usage=usage_view(job),
            limits=limits_view(cp, job),
            goodput=goodput.of_job(job, cp.queries.list_events, attempt_of(cp, job), cp.clock()),
        )
    return out


def attempt_of(cp: Core, job: Job) -> dict[str, Any] | None:
    """The job's live attempt: the core's memory of it, or (an API worker, which has none) the ``run_state`` of
    the record in hand, the one the rest of the view shows, not a second read of the job's row (measured: that
    read was a ninth of a worker's submit, benchmarks/README.md "The CPU of a worker's submit")."""
    return cp.attempt_state(job.id) if cp.engine_memory else job.run_state


def usage_view(job: Job) -> dict[str, Any] | None:
    """What the ended replicas of the job's last attempt used (from their cgroups): per replica and in all."""
    per = (job.run_state or {}).get("usage") or {}
    if not per:
        return None
    cpu = [u["cpu_seconds"] for u in per.values() if u.get("cpu_seconds") is not None]
    peak = [u["memory_peak_bytes"] for u in per.values() if u.get("memory_peak_bytes") is not None]
    return {"cpu_seconds": sum(cpu) if cpu else None, "memory_peak_bytes": max(peak) if peak else None,
            "replicas": per}


def topology_view(cp: Core, job: Job) -> dict[str, Any] | None:
    """What the job asks of the topology and where it runs: per level (outermost first), the domains its
    replicas are in. None in a cluster without topology levels."""
    levels = cp.spec.cluster.topology_levels
    if not levels:
        return None
    placed: dict[str, list[str]] = {lv: [] for lv in levels}
    topos = cp.engine_facts(lambda f: [nd.topo if (nd := f.node(name)) is not None else None
                                       for name in job.placement or ()])[0]
    for topo in topos:
        for i, lv in enumerate(levels):
            d = domain_name(topo[i]) if topo is not None and i < len(topo) else "?"
            if d not in placed[lv]:
                placed[lv].append(d)
    return {"required": job.spec.required_topology, "preferred": job.spec.preferred_topology,
            "placed": placed if job.placement else None}


def limits_view(cp: Core, job: Job) -> dict[str, Any]:
    """The job's runtime bounds as in force: protected from preemption for ``min_runtime_seconds`` (at most the
    policy's maximum), stopped at ``max_runtime_seconds`` (its own or its class's), and its hang watch."""
    limit, action = cp.spec.runtime_limit(job.spec.max_runtime_seconds, job.spec.priority)
    return {"min_runtime_seconds": min(job.spec.min_runtime_seconds, cp.spec.policy.max_min_runtime_seconds),
            "max_runtime_seconds": limit, "on_runtime_limit": action if limit is not None else None,
            "hang_timeout_seconds": job.spec.hang_timeout_seconds,
            "hang_action": job.spec.hang_action if job.spec.hang_timeout_seconds is not None else None}


def replicas_view(cp: Core, job: Job) -> list[dict[str, Any]]:
    info = cp.attempt_state(job.id) or (job.run_state or {})
    exits = info.get("exits") or {}
    slots = info.get("slots") or {}
    out = []
    for rank, node in enumerate(job.placement or [None] * 0):
        ended = exits.get(str(rank))
        if job.state == JobState.RUNNING:
            state = "Succeeded" if ended == "exited 0" else ("Ended" if ended else
                                                            ("Running" if info.get("launched") else "Starting"))
        elif job.state == JobState.PREEMPTED:
            state = "Stopped" if ended else "Terminating"
        else:
            state = job.state.value
        out.append({"replica": rank, "node": node, "accelerators": slots.get(node, []), "state": state,
                    "exit": ended})
    return out


def node_views(nodes: list[Node], cp: Core, reader: Principal | None = None) -> tuple[list[dict[str, Any]],
                                                                                        dict[str, Any]]:
    """Nodes as the API shows them, from one view of the engine that never waits for a turn
    (``Core.engine_facts``), and that view's ``as_of``. A member sees the ids of its own teams' jobs on a node, and
    only how many others there are."""
    facts, as_of = cp.engine_facts(lambda f: [f.node(n.name) for n in nodes])
    teams = reader.visible_teams() if reader is not None else None
    return [_node_view(n, nf, cp, teams) for n, nf in zip(nodes, facts, strict=True)], as_of.json()


def node_view(node: Node, cp: Core, reader: Principal | None = None) -> dict[str, Any]:
    """One node (``node_views``), with its ``as_of``."""
    views, as_of = node_views([node], cp, reader)
    return {**views[0], "as_of": as_of}


def _node_view(node: Node, snode: Any, cp: Core, teams: Any) -> dict[str, Any]:
    # snode: the node's fairpod.server.core.facts.NodeFacts (None: not in the engine's view)
    jobs = [j for j, _ in snode.jobs] if snode else []
    if teams is None:
        others = 0
    else:
        jobs = [j for j, team in snode.jobs if team is not None and team in teams] if snode else []
        others = len(snode.jobs) - len(jobs) if snode else 0
    return {
        "name": node.name,
        "instance_group": node.instance_group,
        "instance_type": node.instance_type,
        "health_status": node.health_status.value,
        "deep_health_check": node.deep_health_check.value if node.deep_health_check else None,
        "cordoned": node.cordoned,
        "schedulable": node.schedulable,
        "fault_type": node.fault_type,
        "fault_reason": node.fault_reason,
        "last_check_at": node.last_check_at,
        "labels": node.labels,
        "status_labels": status_labels(node.health_status.value, node.fault_type, node.fault_reason),
        "accelerators": snode.accelerators if snode else None,
        "accelerators_free": snode.free if snode else None,
        "jobs": [int(j) for j in jobs],
        "other_jobs": others,
        "accelerators_are": "gpus" if cp.spec.gpus_are_real(node.instance_group) else "slots",
        "accelerator_kind": (cp.spec.catalog().get(node.instance_type) or _NO_TYPE).accelerator_kind,
        "gpu": node.labels.get("gpu"),  # model and memory as the last deep health check read them
        "topology": ({lv: domain_name(snode.topo[i]) for i, lv in enumerate(cp.spec.cluster.topology_levels)}
                     if snode is not None and len(snode.topo) == len(cp.spec.cluster.topology_levels) else None),
        "enforced": enforced_view(cp),
        "containers": containers_view(cp),
    }


def enforced_view(cp: Core) -> dict[str, bool] | None:
    """Which of cpu / memory / devices / files a replica is held to on the node (fairpod.sandbox.capabilities):
    an executor whose nodes are all this host (fairpod.executors.registry); None where fairpod cannot tell (another
    executor's nodes)."""
    if not registry.on_this_host(cp.executor.name):
        return None
    from fairpod.sandbox import capabilities

    return capabilities.host().view()


def containers_view(cp: Core) -> dict[str, Any] | None:
    """The container engine of the node and the images in its cache (fairpod.sandbox.container): an executor whose
    nodes are all this host; None where fairpod cannot tell (another executor's nodes)."""
    if not registry.on_this_host(cp.executor.name):
        return None
    from fairpod.sandbox import container

    return container.node_view()


def cluster_view(cp: Core) -> dict[str, Any]:
    """Capacity and, per team and instance type, quota / in use / borrowed / lent / available, from a consistent
    view of the engine that never waits for a turn (``Core.engine_view``); ``as_of``: the turn it is of."""
    got = cp.engine_view(("cluster",), lambda snap: _cluster_view(cp, snap))
    if got is None:
        raise Problem(503, "busy", "the control plane is in a scheduling turn and has no view of the cluster yet; "
                      "ask again in a moment (the turn publishes it when it ends)")
    return {**got[0], "as_of": got[1].json()}  # a new dict: the caller may set its keys, not change what they hold


def _cluster_view(cp: Core, snap: Snapshot) -> dict[str, Any]:
    capacity = {}
    teams: list[dict[str, Any]] = []
    # every turn that a reader asked for it lately computes this again (core.published): the spec's teams and
    # types looked up in dicts made once, not a scan of 500 teams for each of them on each instance type
    cat, spec_teams = cp.spec.catalog(), {t.name: t for t in cp.spec.teams}
    for it in instance_types(snap):
        nodes = snap.by_type.get(it, [])
        cap = sum(n.cap[0] for n in nodes)
        healthy = sum(n.cap[0] for n in nodes if n.schedulable)
        in_use = sum(n.cap[0] - n.free[0] for n in nodes)
        capacity[it] = {"nodes": len(nodes), "accelerators": cap, "schedulable_accelerators": healthy,
                        "in_use": in_use, "utilization": round(in_use / cap, 4) if cap else 0.0,
                        "accelerator_kind": (cat.get(it) or _NO_TYPE).accelerator_kind}
        for f in team_figures(snap, it):
            name, q, u, t = f.team, f.quota[0], f.used[0], snap.teams[f.team]
            if not q and not u:
                continue
            spec_team = spec_teams.get(name)
            teams.append({
                "team": name, "group": t.path[0] if t.path else None, "instance_type": it, "quota": q, "in_use": u,
                "borrowed": f.borrowed[0], "borrowed_from": f.borrowed_from, "lent": f.lent,
                "available": max(0, q - u - f.lent),
                "utilization": round(u / q, 4) if q else None,
                "fair_share_weight": t.weight,
                "sharing": spec_team.sharing.strategy.value if spec_team else None,
                "borrow_limit": t.borrow_limit,
                "lending_limit": lim[0] if (lim := t.lend_limit.get(it)) is not None else None,
                "absolute_borrow_limit": ab[0] if (ab := t.borrow_abs.get(it)) is not None else None,
                # FairShareHistory: the decayed mean share of lendable capacity it borrowed (None: not kept)
                "fair_share_history": round(t.history.get(it, 0.0), 6) if snap.history_half_life else None,
            })  # fmt: skip
    tree = [{"group": g.group, "parent": g.parent, "instance_type": g.instance_type, "quota": g.quota[0],
             "in_use": g.used[0], "borrowed": g.borrowed[0], "fair_share_weight": g.weight,
             "sharing": sg.sharing.strategy.value if (sg := cp.spec.group(g.group)) else None,
             "borrow_limit": sg.sharing.borrow_limit if sg else None, "teams": list(g.teams)}
            for it in instance_types(snap) for g in group_figures(snap, it)]
    return {"name": cp.spec.cluster.name, "capacity": capacity, "teams": teams, "groups": tree,
            "policy": cp.spec.policy.model_dump(mode="json")}
