"""The fair-share victim order follows what changed between cycles: a checkpoint reported while the team's usage
stayed the same reorders its jobs (the engine keeps the order across cycles and must notice)."""

from __future__ import annotations

from .helpers import admitted, cycle, make, preempted, submit


def test_a_checkpoint_reported_between_cycles_makes_that_job_the_fair_share_victim():
    snap = make(4, [{"name": "l", "quota": 8}, {"name": "a", "quota": 4, "weight": 100, "limit": 500},
                    {"name": "z", "quota": 4, "weight": 0, "limit": 500}])
    submit(snap, "a0", "a", 4, t=0)
    submit(snap, "z0", "z", 4, t=0)
    assert sorted(admitted(cycle(snap, 0))) == ["a0", "z0"]
    submit(snap, "z1", "z", 4, t=50)
    submit(snap, "z2", "z", 4, t=50)
    assert sorted(admitted(cycle(snap, 50))) == ["z1", "z2"]  # z borrows l's idle quota
    submit(snap, "a1", "a", 4, t=60)
    assert preempted(cycle(snap, 60)) == []  # a1 has waited nothing: z's jobs, z1 and z2 first, lose too much
    snap.running["z0"].checkpoint = 99.9  # z0 now loses 0.1 s x 4 at t=100: at most 1/100 of a1's 40 s x 4
    ds = cycle(snap, 100)  # z1 and z2 (50 s since their start) still lose too much; z0 goes first now
    assert preempted(ds) == ["z0"] and admitted(ds) == ["a1"]
