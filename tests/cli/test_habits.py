"""A newcomer's habits from Slurm and HyperPod: one team needs no --team, comma-separated states, USER in
squeue, node drain, team delete asks for --yes, mistyped commands and names answered in words."""

from __future__ import annotations

import json

from ..server.conftest import Server


def test_one_team_needs_no_team_flag_and_squeue_shows_the_user(server: Server):
    token = server.cli("user", "create", "alice", "--team", "john").stdout.split("token (shown once): ")[1].strip()
    r = server.cli("start-job", "--name", "mine", "--accelerators", "1", "--", "sleep", "60", token=token)
    assert "submitted for team john" in r.stdout, r.stdout + r.stderr
    server.wait_state("mine", "Running")
    # the admin belongs to no team: still asked
    r = server.cli("start-job", "--name", "adm", "--", "true", check=False)
    assert r.returncode == 1 and "--team is required" in r.stderr
    server.cli("start-job", "--name", "queued", "--team", "john", "--node-count", "4", "--", "true")
    rows = json.loads(server.cli("list-jobs", "--status", "Running,Pending", "-o", "json").stdout)
    assert sorted((j["name"], j["state"]) for j in rows) == [("mine", "Running"), ("queued", "Pending")]
    r = server.cli("list-jobs", "--status", "Running,Nope", check=False)
    assert r.returncode == 2 and "'Nope' is not a state" in r.stderr
    lines = server.cli("squeue").stdout.splitlines()
    assert lines[0].split()[:5] == ["JOBID", "PARTITION", "NAME", "USER", "ACCOUNT"]
    mine = next(ln for ln in lines if " mine " in ln)
    assert mine.split()[3:5] == ["alice", "john"], mine


def test_node_drain_cordons_and_waits_for_the_running_jobs(server: Server):
    server.cli("start-job", "--name", "busy", "--team", "john", "--", "sleep", "60")
    node = server.wait_state("busy", "Running")["placement"][0]
    r = server.cli("node", "drain", node, "--timeout", "0.5", check=False)
    assert r.returncode == 1 and f"node {node}: waiting for 1 job(s) to end" in r.stdout, r.stdout + r.stderr
    assert "passed with jobs still running" in r.stderr
    nodes = {n["name"]: n for n in json.loads(server.cli("node", "list", "-o", "json").stdout)}
    assert nodes[node]["cordoned"]
    server.cli("cancel-job", "busy")
    r = server.cli("node", "drain", node, "--timeout", "30")
    assert f"drained: {node}" in r.stdout


def test_team_delete_of_a_team_with_jobs_asks_for_yes(server: Server):
    server.cli("team", "create", "tmp")
    server.cli("start-job", "--name", "gone", "--team", "tmp", "--", "true")  # no quota: it waits
    server.cli("cancel-job", "gone")
    server.wait_state("gone", "Cancelled")
    r = server.cli("team", "delete", "tmp", check=False)
    assert r.returncode == 1 and "team tmp has 1 job(s)" in r.stderr and "--yes" in r.stderr
    assert "team tmp deleted" in server.cli("team", "delete", "tmp", "--yes").stdout


def test_mistakes_are_answered_in_words(server: Server):
    r = server.cli("strat-job", check=False)
    assert r.returncode == 2 and "unknown command 'strat-job' (did you mean start-job?)" in r.stderr, r.stderr
    r = server.cli("team", "create", "Bad_Name", check=False)
    assert r.returncode == 1 and "lower-case letters, digits and '-'" in r.stderr and "^[" not in r.stderr, r.stderr
    r = server.cli("team", "create", "new", "--quota", "g5.12xlarge=1", check=False)
    assert r.returncode == 1 and "(did you mean ml.g5.12xlarge?)" in r.stderr, r.stderr
