"""The request is the user's to set, in the words of each format: sbatch ``--mem`` / ``--cpus-per-task``,
start-job ``--memory`` quantities."""

from __future__ import annotations

import argparse

import pytest

from fairpod.cli.jobbody import memory_gib
from fairpod.formats.slurm.sbatch import BatchError, read_script, to_job


def job_of(script: str) -> dict:
    bs = read_script("job.sh", script)
    body, _ = to_job(bs, [], cwd="/", environ={}, python="python3")
    return body


def test_sbatch_mem_and_cpus_per_task_become_the_replica_request() -> None:
    body = job_of("#!/bin/sh\n#SBATCH --mem=16G\n#SBATCH --cpus-per-task=4\n#SBATCH --ntasks-per-node=2\nsrun true\n")
    assert body["memory_gib"] == 16.0 and body["vcpu"] == 8.0
    assert job_of("#!/bin/sh\n#SBATCH --mem=512\nsrun true\n")["memory_gib"] == 0.5  # megabytes by default
    assert "memory_gib" not in job_of("#!/bin/sh\n#SBATCH --mem=0\nsrun true\n")  # all of the node: by ratio
    with pytest.raises(BatchError, match="--mem 'lots'"):
        job_of("#!/bin/sh\n#SBATCH --mem=lots\nsrun true\n")


def test_start_job_memory_takes_kubernetes_quantities() -> None:
    assert memory_gib("16Gi") == 16 and memory_gib("512Mi") == 0.5 and memory_gib("2") == 2
    with pytest.raises(argparse.ArgumentTypeError, match="not a memory size"):
        memory_gib("12Q")
