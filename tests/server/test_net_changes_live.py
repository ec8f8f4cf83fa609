"""The control plane applies a cycle's net changes (governance.net_changes), as the simulator does: a job the
engine admits and takes back within one cycle never starts, is never preempted, and keeps waiting."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from .inproc import InProc

P4D = "ml.p4d.24xlarge"


def test_a_job_admitted_and_displaced_in_one_cycle_is_never_started_nor_preempted(tmp_path: Path):
    # issue #14's small case: one p4d; l lends 2 accelerators, x (quota 2, weight 1) and y (quota 1, weight 10)
    # borrow. At t=10 the engine admits x4 on the last idle accelerator and takes it back in the same cycle.
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "cluster": {"name": "t", "instance_groups": [{"name": "p4d", "instance_type": P4D, "count": 1}]},
        "policy": {},
        "teams": [{"name": n, "fair_share_weight": w, "sharing": {"strategy": "LendAndBorrow", "borrow_limit": b},
                   "quota": [{"instance_type": P4D, "accelerators": q}]}
                  for n, q, w, b in (("l", 2, 10, 100), ("x", 2, 1, 200), ("y", 1, 10, 500))],
    }))
    ip = InProc(tmp_path, spec)
    ip.clock.now = time.time()  # the store stamps submissions with the real clock: the FAKE one starts there
    for name in ("x1", "x2", "x3"):
        ip.submit(name, "x", 1000, accelerators=1)
    ip.submit("y1", "y", 1000, accelerators=1)
    ip.turn()
    ip.clock.advance(10)
    ip.submit("x4", "x", 1000, accelerators=1)
    ip.submit("y2", "y", 1000, accelerators=4)
    ip.submit("y3", "y", 1000, accelerators=1)
    ip.turn(3)
    x4 = ip.job("x4")
    kinds = [e.kind for e in ip.events(x4)]
    assert x4.state.value == "Pending" and x4.preemptions == 0 and x4.first_started_at is None, (x4, kinds)
    assert "JobAdmitted" not in kinds and "JobPreempted" not in kinds and "JobStarted" not in kinds
    assert ip.job("y3").state.value == "Running"  # the job it was given up for did start
    assert "given up again in the same cycle to job" in x4.reason or "no idle" in x4.reason, x4.reason
    ip.close()
