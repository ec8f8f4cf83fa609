"""Rule 3b through the control plane (real SQLite, the timed executor, a FAKE clock): a reclaim that would destroy
hours of work waits, with its reason on the job, up to policy.preemption_cost_wait_seconds (900 s by default)
for room to free by itself; then the borrowed job is stopped as any reclaim. The seed cluster: john's 3 nodes
of quota run his jobs, smith runs 3 of the 4 accelerators of his node and john borrows the fourth."""

from __future__ import annotations

import time

from fairpod.model.jobs import JobState

from ..inproc import InProc


def test_a_costly_reclaim_waits_with_its_reason_then_takes_the_node(h: InProc) -> None:
    # the store stamps submissions with the real clock: the FAKE one starts so that it reads the real time (to a
    # few milliseconds) when s is submitted
    h.clock.now = time.time() - 4000
    for i in range(3):
        h.submit(f"base{i}", "john", 100_000)
    h.submit("s0", "smith", 100_000, accelerators=3)
    h.turn()
    h.submit("v", "john", 100_000, accelerators=1)  # the one idle accelerator: smith's, borrowed
    h.turn()
    assert h.job("v").state == JobState.RUNNING and h.job("v").placement == h.job("s0").placement
    h.clock.advance(4000)  # v has run 4,000 s on 1 accelerator: 4,000 >= 2 x 900 x 1 would be lost
    h.submit("s", "smith", 100, accelerators=1)  # smith runs 3 of his 4: at least half of his quota
    h.turn()
    v, s = h.job("v"), h.job("s")
    assert v.state == JobState.RUNNING and v.preemptions == 0
    assert s.state == JobState.PENDING
    assert s.reason.startswith("waiting for reclaim: the borrowed jobs it would stop would lose 1.1 "
                               "accelerator-hours of work, so it waits up to 15 min"), s.reason
    h.clock.advance(890)
    h.turn()
    assert h.job("v").state == JobState.RUNNING and h.job("s").state == JobState.PENDING
    h.clock.advance(200)  # s has waited its 900 s: smith takes his accelerator back
    h.turn()
    v, s = h.job("v"), h.job("s")
    assert (v.state, v.preemptions) == (JobState.PREEMPTED, 1) and v.reason.startswith("reclaimed by team smith")
    assert s.state == JobState.RUNNING
