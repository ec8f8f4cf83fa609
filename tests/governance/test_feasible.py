"""``feasible.never_fits``: the one answer to "can this job ever run here", for the live cluster (the control
plane at submit) and the fixed one (the simulator), on the seed cluster (4 x ml.g5.12xlarge, john and smith)."""

from __future__ import annotations

from fairpod.governance import Workload, feasible
from fairpod.governance.build import snapshot_from_spec
from fairpod.model.resources import Res
from fairpod.model.spec import seed_spec

G5 = "ml.g5.12xlarge"


def job(n: int, itype: str = G5, acc: int = 4, team: str = "john") -> Workload:
    return Workload("j", team, itype, n, Res(acc, 1000, 1024))


def test_a_job_that_fits_fits_both_ways() -> None:
    snap = snapshot_from_spec(seed_spec())
    assert feasible.never_fits(snap, job(2)) is None
    assert feasible.never_fits(snap, job(2), fixed=True) is None


def test_more_nodes_than_the_cluster_has() -> None:
    snap = snapshot_from_spec(seed_spec())
    assert feasible.never_fits(snap, job(5)) == f"the job asks for 5 {G5} nodes; the cluster has 4"
    assert feasible.never_fits(snap, job(5), declared=6) is None  # two more are still joining
    assert feasible.never_fits(snap, job(5), fixed=True) == f"needs 5 healthy {G5} nodes, the cluster has 4"


def test_a_type_without_nodes_is_allowed_live_only_where_a_team_has_quota_for_it() -> None:
    snap = snapshot_from_spec(seed_spec())
    assert feasible.never_fits(snap, job(1, "ml.p4d.24xlarge")) == (
        f"the cluster has no ml.p4d.24xlarge nodes (it has: {G5})")
    assert feasible.never_fits(snap, job(1, "ml.p4d.24xlarge"), quota_types={"ml.p4d.24xlarge"}) is None


def test_the_fixed_cluster_also_asks_whether_the_team_could_hold_it() -> None:
    spec = seed_spec()
    snap = snapshot_from_spec(spec)
    for t in snap.teams.values():
        t.borrows = False
    assert feasible.never_fits(snap, job(4)) is None  # live: quotas change, the engine says why it waits
    assert feasible.never_fits(snap, job(4), fixed=True) is not None
