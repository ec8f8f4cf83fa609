"""The engine's choice of a node for one replica whose node was lost (``governance.relocation``): same instance
type, room for the replica, not a node of its own gang, the job's topology kept, the best fit; the job's admission
(its team's usage, borrowing, lending) unchanged by the move, and the snapshot's aggregates still a recount's."""

from __future__ import annotations

import copy

from fairpod.governance import relocation

from .helpers import T, cycle, make, submit
from .test_properties import check_invariants
from .test_topology import job, topo


def running(snap, jid: str) -> list[str]:
    return list(snap.running[jid].nodes or ())


def test_a_lost_replica_moves_to_the_spare_node_and_the_admission_does_not_change():
    snap = make(4, [{"name": "a", "quota": 12, "limit": 100}, {"name": "b", "quota": 4}])
    submit(snap, "train", "a", 4, n=3)
    cycle(snap)
    placed = running(snap, "train")
    spare = next(n for n in snap.nodes if n not in placed)
    usage, pool_over = list(snap.teams["a"].u(T)), list(snap.pool(T).over)
    lost = placed[1]
    snap.set_schedulable(lost, False)  # the node fault takes it out of service
    node, why = relocation.replacement(snap, "train", 1)
    assert (node, why) == (spare, "")
    assert relocation.move(snap, "train", 1, node) == lost
    assert running(snap, "train") == [placed[0], spare, placed[2]]  # ranks 0 and 2 stay where they were
    assert snap.teams["a"].u(T) == usage and snap.pool(T).over == pool_over  # the same admission
    assert snap.nodes[lost].free == list(snap.nodes[lost].cap) and "train" not in snap.nodes[lost].jobs
    assert snap.nodes[spare].free[0] == 0 and "train" in snap.nodes[spare].jobs
    assert snap.pool(T).free[0] == 0  # three nodes in service, all taken
    check_invariants(snap, whole_nodes=True)


def test_no_node_with_room_says_why_and_changes_nothing():
    snap = make(4, [{"name": "a", "quota": 16}])
    submit(snap, "train", "a", 4, n=3)
    submit(snap, "other", "a", 2)
    cycle(snap)
    lost = running(snap, "train")[2]
    snap.set_schedulable(lost, False)
    before = copy.deepcopy([(n.name, list(n.free), set(n.jobs)) for n in snap.nodes.values()])
    node, why = relocation.replacement(snap, "train", 2)
    assert node is None
    assert why == (f"no other schedulable {T} node has room for the replica (4 accelerators, 16000 mCPU, "
                   "65536 MiB): 1 without it")
    assert [(n.name, list(n.free), set(n.jobs)) for n in snap.nodes.values()] == before
    snap.set_schedulable(running(snap, "other")[0], False)
    assert relocation.replacement(snap, "train", 2) == (None, f"no other schedulable {T} node")


def test_best_fit_never_on_a_node_of_its_own_gang_and_passed_only_kept():
    snap = make(5, [{"name": "a", "quota": 20}])
    gang, half = ["g-0", "g-1"], "g-2"
    snap.start(submit(snap, "train", "a", 2, n=2), gang, 0.0)  # two replicas of 2: each of those nodes has 2 free
    snap.start(submit(snap, "half", "a", 2), [half], 0.0)  # a third node with 2 free
    snap.set_schedulable(gang[0], False)
    # fewest free accelerators first: the node of 'half' (2 free), not an empty one; the other replica's node
    # (2 free as well) is never taken: a gang's replicas run on distinct nodes
    assert relocation.replacement(snap, "train", 0) == (half, "")
    snap.running["train"].passed_only = True  # the job asks for deep-check-passed nodes: only one has passed
    passed = "g-4"
    for n in snap.nodes:
        snap.update_node(n, passed=n == passed)
    assert relocation.replacement(snap, "train", 0) == (passed, "")
    relocation.move(snap, "train", 0, passed)
    check_invariants(snap, whole_nodes=False)


def test_a_required_rack_is_kept_and_a_preferred_one_comes_first():
    snap = topo([("b0", "r0", 3), ("b0", "r1", 3)])
    job(snap, "pinned", 2, level="rack", required=True)
    cycle(snap)
    nodes = running(snap, "pinned")
    rack = snap.nodes[nodes[0]].topo[1]
    (same,) = [n for n, nd in snap.nodes.items() if nd.topo[1] == rack and n not in nodes]
    snap.set_schedulable(nodes[1], False)
    assert relocation.replacement(snap, "pinned", 1) == (same, "")  # the rack it runs in has a free node
    snap.set_schedulable(same, False)
    node, why = relocation.replacement(snap, "pinned", 1)  # only the other rack has room: required waits
    assert node is None and why == f"no {T} node with room in {rack}, the rack its replicas must share"
    snap.running["pinned"].topology_required = False  # preferred: the other rack rather than a full restart
    node, why = relocation.replacement(snap, "pinned", 1)
    assert node is not None and snap.nodes[node].topo[1] != rack and why == ""
    relocation.move(snap, "pinned", 1, node)
    check_invariants(snap, whole_nodes=True)
