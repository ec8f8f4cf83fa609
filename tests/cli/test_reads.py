"""Reads as users expect them: units, logs of pending and multi-replica jobs, checkpoints, status, -o yaml,
aliases, shell completion."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from ..server.conftest import Server, wait_for

ROOT = Path(__file__).resolve().parents[2]


def test_the_tour_in_accelerators_and_nodes_with_logs_and_checkpoints(server: Server):
    server.cli("start-job", "--name", "john-train", "--team", "john", "--node-count", "2", "--", "sleep", "120")
    server.wait_state("john-train", "Running")
    server.cli("start-job", "--name", "smith-train", "--team", "smith", "--node-count", "2", "--auto-resume",
               "--max-retry", "3", "--grace-seconds", "10", "--workdir", str(ROOT), "--", sys.executable,
               "examples/resumable.py", "100000")
    server.wait_state("smith-train", "Running")
    out = server.cli("cluster", "show").stdout
    john = next(ln for ln in out.splitlines() if ln.startswith("john "))
    smith = next(ln for ln in out.splitlines() if ln.startswith("smith "))
    assert "12 acc (3 nodes)" in john and "4 acc (1 node)" in john.split("12 acc (3 nodes)")[1], out  # lent
    assert "4 acc (1 node)  john: 4 acc (1 node)" in smith, out  # borrowed, from john
    got = server.cli("get-job", "smith-train").stdout
    assert "Borrowed from:   john: 4 acc (1 node)" in got, got
    assert "borrowing 4 accelerators (1 node) from john" in got, got
    assert "borrowing 4 accelerators (1 node) from john" in server.cli("list-jobs").stdout
    wait_for(lambda: "starting at step" in server.cli("get-logs", "smith-train", "--replica", "1").stdout, 20,
             "replica 1's first line")

    def both_started() -> list[str] | None:  # each replica writes its first line when it gets there
        lines = server.cli("logs", "smith-train", "--all-replicas").stdout.splitlines()
        return lines if all(any(ln.startswith(f"[{r}] rank {r} of 2: starting at step 0") for ln in lines)
                            for r in (0, 1)) else None

    both = wait_for(both_started, 20, "each replica's first line, with its prefix, in logs --all-replicas")
    assert both is not None
    # john reclaims: smith's job checkpoints through the SDK and get-job shows it
    server.cli("start-job", "--name", "john-eval", "--team", "john", "--", "sleep", "4")
    wait_for(lambda: server.job("smith-train")["checkpoint"]["path"], 30, "smith-train's checkpoint")
    got = server.cli("describe", "smith-train").stdout
    assert "Checkpoint:      " in got and "step-rank0 (step " in got, got
    server.wait_state("smith-train", "Pending", 30)
    server.wait_state("smith-train", "Running", 60)  # john-eval done: smith resumes from its checkpoint
    wait_for(lambda: "(resuming)" in server.cli("get-logs", "smith-train").stdout, 30, "the resumed run's output")
    log = server.cli("get-logs", "smith-train").stdout
    assert "attempt 0, resumed after 1 preemption(s) replica 0/2" in log, log
    # a job that never ran: get-logs says so and why
    server.cli("start-job", "--name", "smith-wait", "--team", "smith", "--node-count", "4", "--", "true")
    r = server.cli("get-logs", "smith-wait")
    assert r.stdout == "" and r.stderr.startswith("job smith-wait is Pending and has not run yet: "), r.stderr
    st = server.cli("status").stdout
    assert f"server:  {server.url} is up" in st and "you:     admin (admin)" in st, st
    assert "john   ml.g5.12xlarge  12 acc (3 nodes)" in st and "john-train" in st and "smith-wait" in st, st
    assert json.loads(server.cli("status", "-o", "json").stdout)["user"]["name"] == "admin"
    as_yaml = yaml.safe_load(server.cli("get-job", "john-train", "-o", "yaml").stdout)
    as_json = json.loads(server.cli("get-job", "john-train", "-o", "json").stdout)
    assert as_yaml["id"] == as_json["id"] and as_yaml["command"] == ["sleep", "120"]
    for cmd in (["list-jobs"], ["cluster", "show"], ["node", "list"], ["team", "list"], ["policy", "show"],
                ["user", "list"], ["list-pods", "john-train"], ["squeue"], ["sinfo"]):
        assert yaml.safe_load(server.cli(*cmd, "-o", "yaml").stdout) is not None, cmd
    def untimed(out: str) -> object:  # elapsed times move on between the two calls
        doc = json.loads(out)
        for row in doc if isinstance(doc, list) else doc.get("jobs", []):
            row.pop("time", None)
        return doc

    assert untimed(server.cli("squeue", "-o", "json").stdout) == untimed(server.cli("squeue", "--json").stdout)


def complete(script: str, *words: str) -> list[str]:
    """What bash completes for ``words`` (the last one being typed) with fairpod's completion script."""
    arr = " ".join(f"'{w}'" for w in words)
    prog = f"{script}\nCOMP_WORDS=({arr}); COMP_CWORD={len(words) - 1}; _fairpod; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    r = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_completion_bash_and_zsh(tmp_path: Path):
    server = Server(tmp_path)  # never started: completion is the command's own, it asks no server
    script = server.cli("completion", "bash").stdout
    assert complete(script, "fairpod", "start-j") == ["start-job"]
    assert complete(script, "fairpod", "start-job", "--node") == ["--node-count"]
    assert {"list", "cordon", "health"} <= set(complete(script, "fairpod", "node", ""))
    assert complete(script, "fairpod", "team", "create", "--wei") == ["--weight"]
    zsh = server.cli("completion", "zsh").stdout
    assert zsh.startswith("autoload -U +X bashcompinit && bashcompinit\n") and "complete -o default" in zsh


def test_get_logs_of_a_job_that_failed_before_starting_says_why_and_fails(server: Server, tmp_path: Path):
    server.cli("start-job", "--name", "nowhere", "--team", "john", "--accelerators", "1", "--workdir",
               str(tmp_path / "missing"), "--", "true")
    server.wait_state("nowhere", "Failed")
    r = server.cli("get-logs", "nowhere", check=False)
    assert r.returncode == 1 and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith("job nowhere has no logs: it failed before it started (could not start: ")
    assert "does not exist" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    # a job that did start and print keeps exit 0
    server.cli("start-job", "--name", "talks", "--team", "john", "--accelerators", "1", "--", "echo", "hi")
    server.wait_state("talks", "Succeeded")
    r = server.cli("get-logs", "talks")
    assert "hi" in r.stdout and r.returncode == 0
