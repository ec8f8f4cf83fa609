"""start-job's flags and the job spec's fields are one list: every field of JobSpec a user sets has its words in
JOB_FLAGS (for the server's error messages and --config-file's keys) and its flag sets it as is."""

from __future__ import annotations

import argparse

from fairpod.cli import job_cmds, jobbody
from fairpod.model.jobs import JobSpec

SET_BY_THE_SERVER = {"user"}  # who submitted it: the caller, whatever was sent
SENT_BY_THE_CLIENT = {"umask"}  # the CLI's own umask (the files of a job run as its submitter), no flag


def test_every_field_of_the_job_spec_has_its_words_and_nothing_else_does() -> None:
    assert jobbody.CONFIG_KEYS == set(JobSpec.model_fields) - SET_BY_THE_SERVER - SENT_BY_THE_CLIENT


def _start_job(*args: str, command: list[str]) -> argparse.Namespace:
    """start-job's arguments as ``fairpod.cli.main`` parses them (the command after -- is split off first)."""
    parser = argparse.ArgumentParser()
    job_cmds.register(parser.add_subparsers(dest="cmd"))
    a = parser.parse_args(["start-job", *args])
    a.job_command = command
    return a


def test_each_flag_reaches_its_field() -> None:
    a = _start_job("--name", "x", "--team", "t", command=["true"])
    for field, flag in jobbody.SPEC_FLAGS.items():
        assert field in JobSpec.model_fields, field
        assert hasattr(a, flag[2:].replace("-", "_")), flag  # the flag exists under that dest


def test_a_flag_sets_its_field_in_the_body() -> None:
    a = _start_job("--name", "x", "--team", "t", "--node-count", "2", "--grace-seconds", "5", "--hang-action",
                   "cancel", "--min-nodes", "1", "--max-nodes", "3", "--workdir", "/w", command=["true"])
    body = jobbody.job_body(a)
    assert (body["nodes"], body["termination_grace_seconds"], body["hang_action"]) == (2, 5.0, "cancel")
    assert (body["min_nodes"], body["max_nodes"], body["workdir"], body["command"]) == (1, 3, "/w", ["true"])
