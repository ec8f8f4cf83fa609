"""Auto-resume restarts back off exponentially after the job's own failure (fairpod.server.core.transitions.backoff)."""

from __future__ import annotations

from pathlib import Path

from fairpod.model.spec import Policy
from fairpod.server.core.transitions.backoff import delay

from ..conftest import Server, wait_for

SPEC = """\
cluster:
  name: b
  instance_groups: [{name: w, instance_type: ml.g5.12xlarge, count: 1}]
policy:
  restart_backoff_base_seconds: 1
  restart_backoff_max_seconds: 3
teams:
  - name: john
    quota: [{instance_type: ml.g5.12xlarge, count: 1}]
"""


def test_the_rule_doubles_up_to_the_cap_and_spares_node_faults():
    p = Policy(restart_backoff_base_seconds=2, restart_backoff_max_seconds=10)
    assert [delay(p, k, "replica 0 exited 2") for k in (1, 2, 3, 4, 5)] == [2, 4, 8, 10, 10]
    assert delay(p, 1, "node workers-1 failed: xid 79") == 0
    assert delay(Policy(restart_backoff_base_seconds=0), 3, "replica 0 exited 1") == 0


def test_a_crash_loop_spends_its_retries_backing_off(tmp_path: Path):
    s = Server(tmp_path, tmp_path / "spec.yaml")
    (tmp_path / "spec.yaml").write_text(SPEC)
    s.start()
    try:
        s.cli("start-job", "--name", "loop", "--team", "john", "--auto-resume", "true", "--max-retry", "3",
              "--workdir", str(tmp_path), "--", "python3", "missing_train.py")
        backing = wait_for(lambda: "backing off" in (j := s.job("loop"))["reason"] and j, 30, "a backoff")
        assert "backing off 1 s before restart 1 of 3" in backing["reason"], backing["reason"]
        done = s.wait_state("loop", "Failed", 60)
        assert done["restarts"] == 3
        starts = [e["ts"] for e in s.job("loop")["events"] if e["kind"] == "JobStarted"]
        assert len(starts) == 4, starts
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        # restart k waits 1 x 2^(k-1) s, capped at 3: at least 1, 2, 3 s after the previous start
        assert all(g >= want * 0.95 for g, want in zip(gaps, (1, 2, 3), strict=True)), gaps
    finally:
        s.kill()
        s.kill_replicas()
