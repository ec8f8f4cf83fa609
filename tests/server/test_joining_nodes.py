"""A job is judged against the cluster's declared capacity as well as the nodes present now: on Ray, nodes join
one by one after the control plane starts, and a job submitted meanwhile must queue, not be refused. (In-process
ControlPlane, real SQLite store, the timed executor, a FAKE clock: tests/server/inproc.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from fairpod.model.jobs import JobSpec
from fairpod.server.errors import NeverFits

from .inproc import InProc

T = "ml.g5.12xlarge"


def test_a_job_for_nodes_still_joining_queues_and_one_past_the_declared_capacity_is_refused(tmp_path: Path):
    h = InProc(tmp_path)  # the seed cluster: 4 nodes of ml.g5.12xlarge declared
    try:
        for name in sorted(h.cp.snap.nodes)[1:]:  # only one of them has joined so far
            h.cp.snap.remove_node(name)
        assert len(h.cp.snap.by_type[T]) == 1
        job = h.cp.submit(JobSpec(name="pair", team="john", nodes=2, command=["sleep", "1"]), "tester")
        assert job.state.value == "Pending"
        with pytest.raises(NeverFits, match="the job asks for 5 ml.g5.12xlarge nodes; the cluster has 4"):
            h.cp.submit(JobSpec(name="five", team="john", nodes=5, command=["sleep", "1"]), "tester")
    finally:
        h.close()
