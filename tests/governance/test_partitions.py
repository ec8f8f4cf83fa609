"""MIG partitions: a group's GPUs split into one profile; quotas and jobs count partitions; the engine places them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairpod.governance import Workload
from fairpod.governance.build import snapshot_from_spec
from fairpod.governance.decisions import Admit, net_changes
from fairpod.governance.snapshot import Snapshot
from fairpod.model.jobs import JobSpec, resolve_job
from fairpod.model.spec import ClusterSpec, SpecError, parse_spec

from .helpers import admitted, cycle, preempted, waits

MIG = "ml.p4de.24xlarge.mig-1g.10gb"  # A100 80GB: 7 x 1g.10gb per GPU, 56 per node


def mig_spec(nodes: int = 1, teams: list[dict[str, Any]] | None = None, **group: Any) -> ClusterSpec:
    teams = teams or [{"name": "a", "quota": 56 * nodes}]
    return parse_spec({
        "cluster": {"name": "mig", "instance_groups": [
            {"name": "mig", "instance_type": "ml.p4de.24xlarge", "count": nodes,
             "accelerator_partition_type": "mig-1g.10gb", **group}]},
        "teams": [{"name": t["name"], "sharing": {"strategy": "LendAndBorrow", "borrow_limit": t.get("limit", 100)},
                   "quota": [{"instance_type": MIG, "accelerators": t["quota"]}] if t.get("quota") else []}
                  for t in teams],
    })


def job(spec: ClusterSpec, snap: Snapshot, jid: str, team: str, parts: int, n: int = 1) -> Workload:
    r = resolve_job(JobSpec(name=jid, team=team, nodes=n, accelerator_partition_type="mig-1g.10gb",
                            accelerator_partition_count=parts), spec)
    w = Workload(jid, team, r.instance_type, n, r.request, submit=snap.now)
    snap.add_pending(w)
    return w


def test_a_partitioned_group_counts_partitions():
    spec = mig_spec(2)
    assert spec.capacity()[MIG].acc == 112
    other = parse_spec({"cluster": {"instance_groups": [{"name": "h", "instance_type": "ml.p5.48xlarge", "count": 1,
                                                         "accelerator_partition_type": "mig-3g.40gb"}]}})
    assert other.capacity()["ml.p5.48xlarge.mig-3g.40gb"].acc == 16  # 2 per H100
    r = resolve_job(JobSpec(name="j", team="a", accelerator_partition_type="mig-1g.10gb",
                            accelerator_partition_count=3), spec)
    assert r.instance_type == MIG and r.per_replica[0] == 3


@pytest.mark.parametrize(("group", "problem"), [
    ({"instance_type": "ml.g5.12xlarge"}, "ml.g5.12xlarge (NVIDIA A10G) has no MIG partitions"),
    ({"instance_type": "ml.p4d.24xlarge", "accelerator_partition_type": "mig-1g.20gb"},
     "'mig-1g.20gb' is not a MIG profile of NVIDIA A100 40GB (mig-1g.5gb, mig-1g.10gb, mig-2g.10gb"),
])
def test_partition_problems_are_named(group: dict[str, Any], problem: str):
    with pytest.raises(SpecError) as e:
        mig_spec(1, **group)
    assert any(problem in p and p.startswith("cluster.instance_groups[0].accelerator_partition_type: ")
               for p in e.value.problems), e.value.problems


def test_quota_in_partitions_borrowing_and_reclaim():
    spec = mig_spec(1, [{"name": "a", "quota": 14}, {"name": "b", "quota": 42, "limit": 100}])
    snap = snapshot_from_spec(spec)
    for i in range(7):
        job(spec, snap, f"a{i}", "a", 2)
    job(spec, snap, "a-over", "a", 2)  # 16 > a's 14 partitions: borrows b's idle ones
    ds = cycle(snap)
    assert len(admitted(ds)) == 8 and snap.teams["a"].u(MIG)[0] == 16
    job(spec, snap, "b-all", "b", 42)  # b wants its whole quota back: a's borrowed job is reclaimed
    ds = cycle(snap, 1)
    assert admitted(ds) == ["b-all"] and len(preempted(ds)) == 1
    assert snap.teams["a"].u(MIG)[0] == 14 and snap.teams["b"].u(MIG)[0] == 42


def test_a_replica_asking_more_partitions_than_a_node_has_never_fits():
    spec = mig_spec(2)
    with pytest.raises(ValueError, match="each replica asks for 57 accelerators"):
        resolve_job(JobSpec(name="j", team="a", accelerator_partition_type="mig-1g.10gb",
                            accelerator_partition_count=57), spec)
    snap = snapshot_from_spec(spec)
    job(spec, snap, "two-nodes", "a", 56, n=2)
    job(spec, snap, "one-more", "a", 1)
    ds = cycle(snap)
    assert admitted(ds) == ["two-nodes"]
    assert "one-more" in waits(ds)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 56), st.integers(1, 2), st.booleans()),
                min_size=1, max_size=25))
def test_partitions_are_never_overcommitted(evs):
    spec = mig_spec(2, [{"name": "a", "quota": 70}, {"name": "b", "quota": 42, "limit": 50}])
    snap = snapshot_from_spec(spec)
    for i, (team, parts, n, finish) in enumerate(evs):
        if finish and snap.running:
            snap.finish(sorted(snap.running)[i % len(snap.running)])
        else:
            job(spec, snap, f"j{i}", team, parts, n)
        ds = net_changes(cycle(snap, float(i)))
        for d in ds:
            if isinstance(d, Admit):
                assert len(d.nodes) == snap.running[d.job].n == len(set(d.nodes))  # the whole gang, distinct nodes
        for nd in snap.nodes.values():
            assert 0 <= nd.free[0] <= 56
            assert nd.free[0] == 56 - sum(snap.running[j].req.acc for j in nd.jobs)
        b = snap.teams["b"]
        assert b.u(MIG)[0] <= 42 + 21  # b's borrow limit: 50 % of its quota


def test_every_partition_of_a_node_can_be_used():
    spec = mig_spec(1)
    snap = snapshot_from_spec(spec)
    for i in range(28):
        job(spec, snap, f"p{i}", "a", 2)  # 28 x 2 = all 56 partitions
    job(spec, snap, "extra", "a", 1)
    ds = cycle(snap)
    assert len(admitted(ds)) == 28 and "extra" in waits(ds)
    assert snap.nodes["mig-0"].free[0] == 0


def test_kueue_export_refuses_partitions_in_one_line():
    from fairpod.formats.kube.export import ExportError, export_kueue

    with pytest.raises(ExportError, match=r"instance_groups\[0\].accelerator_partition_type: MIG partitions "
                                          r"\(mig-1g.10gb\) are not exported to Kueue yet"):
        export_kueue(mig_spec(1))


def test_partitions_of_real_gpus_are_refused_on_ray():
    with pytest.raises(SpecError, match="MIG partitions of real GPUs are not supported on Ray yet"):
        parse_spec({"cluster": {"executor": {"kind": "ray"}, "instance_groups": [
            {"name": "m", "instance_type": "ml.p5.48xlarge", "count": 1, "accelerator_partition_type": "mig-1g.10gb",
             "accelerators_are": "gpus"}]}})


def test_partition_slots_are_packed_onto_one_gpu_best_fit():
    from fairpod.server.runs import Slots, SlotsBusy

    slots = Slots()
    assert slots.take("n", 3, 56, per_gpu=7) == [0, 1, 2]
    assert slots.take("n", 5, 56, per_gpu=7) == [7, 8, 9, 10, 11]  # GPU 0 has 4 left: GPU 1
    assert slots.take("n", 4, 56, per_gpu=7) == [3, 4, 5, 6]  # GPU 0's 4 fit exactly (best fit), not GPU 2
    assert slots.take("n", 2, 56, per_gpu=7) == [12, 13]  # GPU 1 has 2 left
    assert slots.take("n", 10, 56, per_gpu=7) == list(range(14, 24))  # more than a GPU: lowest first
    with pytest.raises(SlotsBusy):
        slots.take("n", 40, 56, per_gpu=7)
