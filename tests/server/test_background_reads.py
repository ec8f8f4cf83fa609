"""The control plane's background loops read from the store what they may act on, not the whole cluster each
time: at datacenter size (``benchmarks/datacenter.py``: 1,000 nodes, 3,000 running jobs) the service probe's
read of every running job under the control plane's lock and the health loop's reads of every node every
0.5 s took half the server's CPU and held up submits and turns for seconds."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fairpod.health.manager import HealthManager
from fairpod.model.nodes import NodeHealth
from fairpod.server.services import Services

from .inproc import InProc


def counting(store: Any, names: tuple[str, ...]) -> Counter:
    """Count the calls of ``names`` on ``store`` and the records they return."""
    got: Counter = Counter()
    for name in names:
        real: Callable[..., Any] = getattr(store, name)

        def wrapped(*a: Any, _real: Callable[..., Any] = real, _name: str = name, **kw: Any) -> Any:
            out = _real(*a, **kw)
            got[_name] += 1
            got[_name + " records"] += len(out) if isinstance(out, list) else out is not None
            return out

        setattr(store, name, wrapped)
    return got


def test_the_service_probe_reads_no_batch_job(tmp_path: Path) -> None:
    h = InProc(tmp_path)
    for i in range(3):
        h.submit(f"batch{i}", "john", 600)
    h.turn(3)
    assert len(h.cp.runs) == 3 and all(r.launched for r in h.cp.runs.values())
    services = Services(h.cp)
    reads = counting(h.cp.store, ("get_job",))
    targets, ended = services._targets()
    assert (targets, ended) == ([], set())
    assert reads["get_job"] == 0, reads  # (was one read per running job, under the control plane's lock)


def test_the_health_loop_reads_only_the_nodes_it_acts_on(tmp_path: Path) -> None:
    h = InProc(tmp_path)
    nodes = h.cp.store.list_nodes()
    hm = HealthManager(h.cp, interval=60)
    reads = counting(h.cp.store, ("list_nodes", "get_node"))
    hm.recovery_round()  # every 0.5 s: no node waits for a reboot or a replacement
    assert reads["list_nodes records"] == 0, reads
    hm.agent_round()  # each schedulable node read once, not again for its probe
    assert reads["list_nodes records"] == len(nodes) and reads["get_node"] == 0, reads
    # a node that waits for a reboot is still found and rebooted
    first = nodes[0].name
    h.cp.store.update_node(first, {"health_status": NodeHealth.PENDING_REBOOT})
    reads.clear()
    hm.recover[first] = "reboot"
    hm.recovery_round()
    assert reads["list_nodes records"] == 1, reads
    assert hm.recover == {}  # taken up: the reboot is under way
