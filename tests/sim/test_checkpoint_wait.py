"""Preemption that costs least (policy.preemption_checkpoint_wait_seconds, preemption_min_wait_seconds), through
the simulator on the seed example: john's second job reclaims the node smith borrowed at t=150, 90 s into
smith's run, whose checkpoints come every 60 s (at t=120, 180, ...)."""

from __future__ import annotations

from pathlib import Path

import yaml

from fairpod.sim import replay

from .helpers import SEED_SPEC, seed_rows, write_trace


def spec_with(tmp: Path, **policy: float) -> Path:
    spec = yaml.safe_load(SEED_SPEC.read_text())
    spec["policy"].update(policy)
    path = tmp / f"spec-{'-'.join(f'{k}{v}' for k, v in policy.items())}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def smith(r: dict) -> dict:
    return next(j for j in r["jobs"] if j["name"] == "smith-train")


def test_waiting_for_a_due_checkpoint_lowers_the_lost_work(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, seed_rows(john_b_at=150))
    now = replay(spec_with(tmp_path, preemption_checkpoint_wait_seconds=0), trace, jobs=True)
    assert smith(now)["lost_seconds"] == 30.0  # stopped at t=150: 30 s since its checkpoint at t=120
    waited = replay(spec_with(tmp_path, preemption_checkpoint_wait_seconds=60), trace, jobs=True)
    assert smith(waited)["lost_seconds"] == 0.0  # stopped at t=180, right at its checkpoint
    assert smith(waited)["preemptions"] == 1
    assert waited["teams"]["smith"]["lost_accelerator_seconds"] == 0.0 < now["teams"]["smith"][
        "lost_accelerator_seconds"] == 30.0 * 8
    assert waited["cluster"]["goodput"] > now["cluster"]["goodput"]
    john_b = next(j for j in waited["jobs"] if j["name"] == "john-train-b")
    assert john_b["start"] == 180.0  # it waited the 30 s for smith's checkpoint
    too_short = replay(spec_with(tmp_path, preemption_checkpoint_wait_seconds=20), trace, jobs=True)
    assert smith(too_short)["lost_seconds"] == 30.0  # due in 30 s, more than it may wait: stopped at once


def test_a_job_triggers_preemption_only_after_the_minimum_wait(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, seed_rows(john_b_at=150))
    r = replay(spec_with(tmp_path, preemption_min_wait_seconds=45), trace, jobs=True)
    john_b = next(j for j in r["jobs"] if j["name"] == "john-train-b")
    assert smith(r)["preemptions"] == 1
    assert john_b["start"] >= 195.0  # submitted at 150, it may preempt from 195 on


# -- rule 3b (policy.preemption_cost_wait_seconds, default 900 s): a reclaim that would destroy much work waits
# for room to free by itself, for at most that long. john runs 9 of his 12 accelerators (at least half of his quota); smith
# (no checkpoints) runs 3 on each of two nodes from t=60, borrowing 2 of john's; john's third job (3 accelerators)
# wants them back at t=2,000: stopping smith would lose 6 x 1,940 accelerator-seconds, more than 2 x 900 x 3.


def rows(smith_seconds: int) -> list[str]:
    return ["0,john,10000,8,2,john-train-a,,,", "0,john,10000,1,1,john-c,,,",
            f"60,smith,{smith_seconds},6,2,smith-train,,,", "2000,john,600,3,1,john-train-b,,,"]


def test_a_costly_reclaim_waits_for_the_borrowed_job_to_end(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, rows(2500))  # smith ends at t=2,560, within john-b's 900 s
    r = replay(spec_with(tmp_path), trace, jobs=True)
    john_b = next(j for j in r["jobs"] if j["name"] == "john-train-b")
    assert smith(r)["preemptions"] == 0 and smith(r)["lost_seconds"] == 0.0
    assert john_b["start"] == 2560.0  # the node smith gave back by ending
    off = replay(spec_with(tmp_path, preemption_cost_wait_seconds=0), trace, jobs=True)
    assert smith(off)["preemptions"] == 1 and smith(off)["lost_seconds"] == 1940.0  # reclaimed at once
    assert off["cluster"]["lost_accelerator_seconds"] > r["cluster"]["lost_accelerator_seconds"] == 0.0


def test_a_costly_reclaim_goes_once_its_job_has_waited_the_policys_time(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, rows(9000))  # smith would run until t=9,060
    r = replay(spec_with(tmp_path), trace, jobs=True)
    john_b = next(j for j in r["jobs"] if j["name"] == "john-train-b")
    assert john_b["start"] == 2900.0  # 2,000 + 900: the engine is woken then, nothing else happens at that time
    assert smith(r)["preemptions"] == 1
