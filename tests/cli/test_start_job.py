"""start-job as HyperPod users type it: no silently wrong job, HyperPod's flag forms, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ..server.conftest import Server, wait_for


def one_line_error(r, *needles: str) -> str:
    """The command failed with exactly one line on stderr, naming what the user typed, no traceback."""
    assert r.returncode != 0, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr and "(HTTP" not in r.stderr, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_the_seed_form_config_file_auto_resume_true_max_retry_2(server: Server, tmp_path: Path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"name": "seed", "team": "hyperpod-ns-john",
                                   "command": ["sh", "-c", "echo attempt $FAIRPOD_RESTART_COUNT; exit 3"]}))
    r = server.cli("start-job", "--config-file", str(cfg), "--auto-resume", "true", "--max-retry", "2")
    assert "job seed" in r.stdout
    job = server.wait_state("seed", "Failed", 60)
    assert job["command"] == ["sh", "-c", "echo attempt $FAIRPOD_RESTART_COUNT; exit 3"]  # not 'true --max-retry 2'
    assert job["auto_resume"] and job["max_retry"] == 2 and job["restarts"] == 2 and job["team"] == "john"
    r = server.cli("start-job", "--name", "off", "--team", "john", "--auto-resume", "false", "-o", "json", "--",
                   "true")
    assert json.loads(r.stdout)["auto_resume"] is False
    r = server.cli("start-job", "--name", "bare", "--team", "john", "--auto-resume", "-o", "json", "--", "true")
    assert json.loads(r.stdout)["auto_resume"] is True
    one_line_error(server.cli("start-job", "--name", "x", "--team", "john", "--auto-resume", "maybe", "--", "true",
                              check=False), "--auto-resume", "'maybe' is not true or false")


def test_what_used_to_run_wrong_is_refused(server: Server, tmp_path: Path):
    one_line_error(server.cli("start-job", "--name", "half", "--team", "john", "--accelerators", "0.5", "--", "true",
                              check=False), "--accelerators", "whole")
    r = server.api("POST", "/jobs", json={"name": "half", "team": "john", "accelerators": 0.5, "command": ["true"]})
    assert r.status_code == 400 and "whole" in r.json()["detail"]  # the API refuses it too (manifests, sbatch)
    one_line_error(server.cli("start-job", "--name", "empty", "--team", "john", "--", "", check=False),
                   "no program to run")
    one_line_error(server.cli("start-job", "--name", "nr", "--team", "john", "--max-retry", "3", "--", "true",
                              check=False), "--max-retry 3", "--auto-resume true")
    one_line_error(server.cli("start-job", "--config-file", str(tmp_path / "nope.yaml"), check=False),
                   "nope.yaml: no such file")
    one_line_error(server.cli("start-job", "--name", "x", "--team", "john", "true", "--max-retry", "2",
                              check=False), "unexpected argument 'true'", "after --")
    assert server.api("GET", "/jobs").json()["total"] == 0  # nothing was submitted


def test_hyperpod_namespace_queue_and_priority_forms(server: Server):
    server.cli("policy", "set", "--task-prioritization", "TaskRanking", "--priority-class", "training=50")
    r = server.cli("start-job", "--name", "a", "--namespace", "hyperpod-ns-john", "--priority", "training-priority",
                   "-o", "json", "--", "true")
    job = json.loads(r.stdout)
    assert job["team"] == "john" and job["priority"] == "training"
    r = server.cli("start-job", "--name", "b", "--queue-name", "hyperpod-ns-smith-localqueue", "-o", "json", "--",
                   "true")
    assert json.loads(r.stdout)["team"] == "smith"
    r = server.cli("start-job", "--name", "c", "--team", "hyperpod-ns-smith", "-o", "json", "--", "true")
    assert json.loads(r.stdout)["team"] == "smith"
    names = {j["name"] for j in json.loads(server.cli("list-jobs", "--all-namespaces", "-o", "json").stdout)}
    assert names == {"a", "b", "c"}
    assert {j["name"] for j in json.loads(server.cli("list-jobs", "--namespace", "hyperpod-ns-smith", "-o",
                                                     "json").stdout)} == {"b", "c"}
    assert server.cli("get-job", "a", "-n", "hyperpod-ns-john", "-o", "json").returncode == 0


def test_help_lists_every_action_and_flag(shared_server: Server):
    server = shared_server
    for group, actions in [("node", ["list", "cordon", "health"]), ("policy", ["show", "set"]),
                           ("user", ["create", "list", "revoke"]), ("team", ["create", "list"])]:
        out = server.cli(group, "--help").stdout
        for act in actions:
            assert f"    {act} " in out or f"    {act}\n" in out, f"{group} --help hides {act}:\n{out}"
    out = server.cli("start-job", "--help").stdout
    flag = out.split("options:", 1)[1].split("--deep-health-check-passed-nodes-only", 1)[1]
    assert "deep health checks passed" in " ".join(flag.split()[:20])


@pytest.mark.parametrize("args, needles", [
    (["start-job", "--nodecount", "2"], ["fairpod start-job: error: unknown option --nodecount",
                                         "did you mean --node-count?", "fairpod start-job --help"]),
    (["node", "cordon", "--frob", "workers-0"], ["fairpod node cordon: error: unknown option --frob"]),
    (["start-job", "--name", "Bad_Name", "--team", "john", "--", "true"], ["--name", "'Bad_Name'",
                                                                             "lower-case letters"]),
    (["start-job", "--name", "x", "--team", "john", "--node-count", "0", "--", "true"], ["--node-count", "0"]),
    (["start-job", "--name", "x", "--team", "john", "--node-count", "9", "--", "true"], ["asks for 9"]),
    (["start-job", "--name", "x", "--team", "john", "--priority", "nope", "--", "true"],
     ["unknown priority class 'nope'"]),
    (["team", "create", "big", "--quota", "ml.g5.12xlarge=9"], ["--quota"]),
    (["team", "create", "w", "--weight", "500"], ["--weight"]),
    (["start-job", "--name", "z", "--team", "john", "--expected-duration", "0", "--", "true"],
     ["expected-duration"]),
])
def test_errors_are_one_line_in_the_words_of_the_flag(shared_server: Server, args: list[str], needles: list[str]):
    line = one_line_error(shared_server.cli(*args, check=False), *needles)
    assert "teams[" not in line and "max_retry" not in line and "nodes:" not in line and "^[" not in line, line
    assert_unchanged(shared_server)


def assert_unchanged(server: Server) -> None:
    """Nothing was written: no job, only the seed spec's teams (the tests that share a server refuse only)."""
    assert server.api("GET", "/jobs").json()["total"] == 0
    assert {t["name"] for t in server.api("GET", "/teams").json()["teams"]} == {"john", "smith"}


def test_file_errors_name_the_file_line_and_column(shared_server: Server, tmp_path: Path):
    server = shared_server
    bad = tmp_path / "job.yaml"
    bad.write_text("name: x\nteam: john\n command: [true\n")
    one_line_error(server.cli("start-job", "--config-file", str(bad), check=False), f"{bad} line ", "column",
                   "not valid YAML")
    bad.write_text("name: x\nteam: john\nnodez: 2\ncommand: [true]\n")
    one_line_error(server.cli("start-job", "--config-file", str(bad), check=False), "unknown field(s) nodez")
    spec = tmp_path / "spec.yaml"
    spec.write_text("- a\n- b\n")
    one_line_error(server.cli("apply", "-f", str(spec), check=False), f"{spec}: a cluster spec is a mapping")
    spec.write_text("cluster: {name: x\n")
    one_line_error(server.cli("apply", "-f", str(spec), check=False), f"{spec} line 2")
    line = one_line_error(server.cli("validate", str(spec), check=False), f"{spec} line 2, column 1")
    assert "<unicode string>" not in line
    assert_unchanged(server)


def test_cannot_reach_says_how_to_start_it_on_its_port(tmp_path: Path):
    s = Server(tmp_path)
    s.env["FAIRPOD_URL"] = f"http://127.0.0.1:{s.port}"
    line = one_line_error(s.cli("list-jobs", check=False), "cannot reach the fairpod server",
                          f"fairpod up --port {s.port}")
    assert "FAIRPOD_URL" in line
    wait_for(lambda: True, 1)
