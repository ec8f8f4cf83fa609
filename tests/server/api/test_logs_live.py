"""Replica logs against a hostile job, on one live server (``fairpod up``, local executor, real processes): a log
rule's pattern cannot stall the control plane (RE2, matched off its lock), a pattern RE2 cannot bound is refused
at submit; a huge log is downloaded in bounded memory, its tail and byte ranges read without reading the rest; a
metric rule acts on a number read from the log crossing a threshold in N readings in a row."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ..conftest import Server, running, wait_for

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


def _proc(pid: int, table: str, key: str) -> int:
    """A figure of ``/proc/PID/<table>``: ``VmHWM`` of ``status`` in KiB, ``rchar`` of ``io`` in bytes."""
    for line in Path(f"/proc/{pid}/{table}").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/{pid}/{table}")


@pytest.fixture(scope="module")
def biglog(srv: Server) -> Path:
    """A finished job's log made 256 MiB long: a sparse hole (no disk), then 1,000 numbered lines."""
    s = srv
    s.submit(name="biglog", team="john", command=["echo", "hello"], termination_grace_seconds=1)
    s.wait_state("biglog", "Succeeded", 60)
    path = log_of(s, "biglog")
    assert path is not None
    with open(path, "r+b") as f:
        f.truncate(256 << 20)
        f.seek(0, 2)
        f.write(b"".join(f"line {i}\n".encode() for i in range(1, 1001)))
    return path


def test_a_huge_log_downloads_in_bounded_memory(srv: Server, biglog: Path) -> None:
    """The whole 256 MiB log, read by the server CHUNK by CHUNK: its peak RSS (VmHWM) grows by far less than the
    log (it read the file whole: 1 GB took RSS from 112 MB to 2,065 MB)."""
    s = srv
    assert s.proc is not None
    before = _proc(s.proc.pid, "status", "VmHWM")
    got = 0
    with httpx.stream("GET", f"{s.url}/api/v1/jobs/biglog/logs", headers={"Authorization": f"Bearer {s.token}"},
                      timeout=120) as r:
        assert r.status_code == 200
        for chunk in r.iter_bytes():
            got += len(chunk)
    assert got == biglog.stat().st_size
    grew = _proc(s.proc.pid, "status", "VmHWM") - before
    print(f"peak RSS grew by {grew} KiB for a {got >> 20} MiB download")
    assert grew < 32 << 10, f"the server's peak RSS grew by {grew} KiB for a {got >> 20} MiB download"
    assert r.headers["accept-ranges"] == "bytes"


def test_tail_reads_only_the_end_of_a_huge_log(srv: Server, biglog: Path) -> None:
    """``get-logs --tail 3``: the last 3 lines, the server having read (rchar) far less than the log."""
    s = srv
    assert s.proc is not None
    before = _proc(s.proc.pid, "io", "rchar")
    r = s.api("GET", "/jobs/biglog/logs?tail=3&replica=0")
    read = _proc(s.proc.pid, "io", "rchar") - before
    print(f"the server read {read} bytes for the last 3 lines")
    assert read < 8 << 20, f"the server read {read} bytes for the last 3 lines of a 256 MiB log"
    assert r.text == "line 998\nline 999\nline 1000\n", r.text[-300:]
    out = s.cli("get-logs", "biglog", "--tail", "1")
    assert out.stdout == "line 1000\n", out.stdout[-300:]


def test_a_range_request_is_answered_206_with_those_bytes(srv: Server, biglog: Path) -> None:
    s, size = srv, biglog.stat().st_size
    r = s.api("GET", "/jobs/biglog/logs", headers={"Range": "bytes=-9"})
    assert (r.status_code, r.text, r.headers["content-range"]) == (206, "line 999\nline 1000\n"[-9:],
                                                                    f"bytes {size - 9}-{size - 1}/{size}")
    r = s.api("GET", "/jobs/biglog/logs", headers={"Range": "bytes=0-9"})
    assert r.status_code == 206 and r.content.startswith(b"==== fairp") and len(r.content) == 10
    assert r.headers["content-range"] == f"bytes 0-9/{size}"
    r = s.api("GET", "/jobs/biglog/logs", headers={"Range": f"bytes={size}-"})
    assert r.status_code == 416 and r.headers["content-range"] == f"bytes */{size}"
    r = s.api("GET", "/jobs/biglog/logs", headers={"Range": "lines=1-2"})
    assert r.status_code == 400 and "give one byte range" in r.json()["detail"]


# A replica whose loss diverges on its first run: loss=2.1, 11.5, 12.0, nan, then a checkpoint line; after the
# test's "go", loss=13.2 (the third reading above 10 in a row: nan is no reading). A second run prints a calm loss
# and waits for "done". The lines' form is HyperPod's "Training loss spike" sample (training_loss_step N), from
# docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-eks-operator-usage.html (metricThreshold 2.0, operator gt,
# metricEvaluationDataPoints 5), here as loss=N with --log-rule diverged restart:metric>10:points=3.
LOSS = """
import pathlib, sys, time
d = pathlib.Path(sys.argv[1])
second = (d / "ran").exists()
(d / "ran").touch()
def wait(name):
    for _ in range(600):
        if (d / name).exists():
            return
        time.sleep(0.1)
if second:
    print("step 9 loss=1.700", flush=True)
    wait("done")
    sys.exit(0)
for step, loss in enumerate(["2.1", "11.5", "12.0", "nan"]):
    print(f"step {step} loss={loss}", flush=True)
print("checkpoint saved", flush=True)
wait("go")
print("step 5 loss=13.2", flush=True)
wait("done")
"""


def test_a_metric_rule_restarts_a_diverging_job_after_three_readings_not_two(srv: Server, tmp_path: Path) -> None:
    s, d = srv, tmp_path / "loss"
    d.mkdir()
    (tmp_path / "loss.py").write_text(LOSS)
    s.cli("start-job", "--name", "diverge", "--team", "john", "--grace-seconds", "1", "--auto-resume", "true",
          "--max-retry", "1", "--log-rule", "diverged", "restart:metric>10:points=3", r"loss=(\S+)",
          "--log-rule", "saved", "notify", "^checkpoint saved$", "--", sys.executable, str(tmp_path / "loss.py"),
          str(d))
    wait_for(lambda: rule_events(s, "diverge"), 30, "the checkpoint line's rule (every line before it was read)")
    assert [e["data"]["rule"] for e in rule_events(s, "diverge")] == ["saved"]  # 2 readings above 10: no fault
    assert s.job("diverge")["restarts"] == 0
    (d / "go").touch()
    wait_for(lambda: len(rule_events(s, "diverge")) == 2, 30, "the metric rule to fire")
    fired = rule_events(s, "diverge")[1]
    assert fired["data"]["rule"] == "diverged" and fired["data"]["action"] == "restart"
    assert ("log rule 'diverged' (3 readings in a row of /loss=(\\S+)/ > 10): replica 0 read 3 in a row > 10 "
            "(last 11.5, 12.0, 13.2), the last in 'step 5 loss=13.2'; restarting the job") in fired["message"], \
        fired["message"]
    wait_for(lambda: s.job("diverge")["restarts"] == 1 and s.job("diverge")["state"] == "Running", 30,
             "the job's second attempt")
    (d / "done").touch()
    done = s.wait_state("diverge", "Succeeded", 30)
    assert done["restarts"] == 1 and len(rule_events(s, "diverge")) == 2  # the second run: calm, no checkpoint line
