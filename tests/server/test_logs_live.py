"""Replica logs against a hostile job, on one live server (``fairpod up``, local executor, real processes): a log
rule's pattern cannot stall the control plane (RE2, matched off its lock), a pattern RE2 cannot bound is refused
at submit."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server, running, wait_for

# A replica that prints what it is told (argv[2], a Python expression for a list of lines), then waits for the
# test's "go", prints argv[3]'s lines, then waits for "done" (each wait bounded: at most 60 s).
PRINTER = """
import pathlib, sys, time
d = pathlib.Path(sys.argv[1])
for line in eval(sys.argv[2]):
    print(line, flush=True)
for _ in range(600):
    if (d / "go").exists():
        break
    time.sleep(0.1)
for line in eval(sys.argv[3]):
    print(line, flush=True)
for _ in range(600):
    if (d / "done").exists():
        break
    time.sleep(0.1)
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with pytest.MonkeyPatch.context() as m:  # as the suite's function-scoped fixture sets it (tests/conftest.py)
        m.setenv("FAIRPOD_SANDBOX", "limits")
        yield from running(tmp_path_factory.mktemp("logs"))


def printer(s: Server, tmp: Path, name: str, first: str, then: str, *rules: list[str]) -> Path:
    d = tmp / name
    d.mkdir()
    (tmp / "printer.py").write_text(PRINTER)
    flags = [w for r in rules for w in ("--log-rule", *r)]
    s.cli("start-job", "--name", name, "--team", "john", "--grace-seconds", "1", *flags, "--",
          sys.executable, str(tmp / "printer.py"), str(d), first, then)
    return d


def log_of(s: Server, name: str) -> Path | None:
    found = sorted((s.home / "runs").glob(f"{name}*/0/0/output.log"))
    return found[0] if found else None


def rule_events(s: Server, name: str) -> list[dict]:
    r = s.api("GET", f"/jobs/{name}/events")
    assert r.status_code == 200, r.text
    return [e for e in r.json()["events"] if e["kind"] == "LogRule"]


def test_a_catastrophic_pattern_against_an_evil_line_never_stalls_the_api(srv: Server, tmp_path: Path) -> None:
    """``(a+)+$`` against ``a`` x 40 and ``!``: Python's re backtracks 2^40 times (the control plane, which matched
    under its lock, answered nothing again). The order of events proves the API answered while the lines were
    matched: the evil lines are in the log, then a submit, a read and a cancel (each needs the control plane's
    lock) are answered, then the job prints its marker, and the marker rule fires only once the reader has gone
    through every evil line before it."""
    s = srv
    evil = "a" * 40 + "!"
    d = printer(s, tmp_path, "evil", f"[{evil!r}] * 2000", "['marker']",
                ["x", "notify", "(a+)+$"], ["seen", "notify", "^marker$"])
    wait_for(lambda: (p := log_of(s, "evil")) is not None and p.read_text().splitlines().count(evil) == 2000, 30,
             "the 2000 evil lines in the log")
    other = s.submit(name="bystander", team="smith", command=["sleep", "30"], termination_grace_seconds=1)
    assert s.job("bystander")["id"] == other["id"]
    r = s.api("POST", "/jobs/bystander/cancel")
    assert r.status_code == 200, r.text
    (d / "go").touch()
    wait_for(lambda: rule_events(s, "evil"), 30, "the marker rule to fire")
    (seen,) = rule_events(s, "evil")
    assert seen["data"]["rule"] == "seen" and "replica 0 printed 'marker'" in seen["message"]
    assert s.job("evil")["state"] == "Running"
    (d / "done").touch()
    s.wait_state("evil", "Succeeded", 30)


@pytest.mark.parametrize(("pattern", "says"), [
    (r"(loss)=\1", "invalid escape sequence"),  # a backreference
    (r"loss(?=nan)", "invalid perl operator"),  # lookahead
    (r"(\pL{50}|\pN{50}){15}", "too costly to match"),
])
def test_a_pattern_re2_cannot_bound_is_refused_at_submit_in_one_line(srv: Server, pattern: str, says: str) -> None:
    bad = srv.cli("start-job", "--name", "bad", "--team", "john", "--log-rule", "r", "notify", pattern, "--",
                  "true", check=False)
    assert bad.returncode == 1 and bad.stderr.startswith("fairpod: error: --log-rule r: pattern ") and says in \
        bad.stderr and "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    r = srv.api("POST", "/jobs", json={"name": "bad", "team": "john", "command": ["true"],
                                       "log_rules": [{"name": "r", "pattern": pattern}]})
    assert r.status_code == 422 and says in r.text, r.text
    assert srv.api("GET", "/jobs/bad").status_code == 404  # nothing half-created
