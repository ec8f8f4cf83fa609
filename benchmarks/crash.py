"""Crash benchmark: many mixed jobs on a real ``fairpod up`` (local executor, real processes), the server killed
with SIGKILL several times at random moments and started again; every replica appends a ``start`` line when it
begins and an ``end`` line when it ends, so what really ran is known independently of the server's records.

Jobs (per 10): 7 plain (exit 0 -> Succeeded), 1 failing (exit 3 -> Failed), 2 flaky with auto-resume (exit 3 in
attempt 0, 0 in attempt 1 -> Succeeded after 1 restart); 1, 2 or 4 accelerators per replica, 1 or 2 replicas, two
teams that borrow from each other and reclaim (preemptions), two priority classes. Submissions go on while the
server is killed (retried with an Idempotency-Key, so a request cut by the kill creates no second job).

Reported (all should be 0):
- ``lost``: jobs the server accepted (HTTP 201) that it no longer knows;
- ``stuck``: jobs not finished ``--drain`` seconds after the last submit and kill;
- ``wrongly failed``: jobs whose final state or restart count differs from what their command makes them;
- ``extra runs``: attempts started after the job had already completed one (every replica wrote ``end 0``), or
  more restarts than expected;
- ``short slots``: replicas that started with fewer accelerators than their job asked for;
- ``lost JobStarted``: replica starts (rank 0) with no ``JobStarted`` event of the server for them;
- ``double preemptions``: jobs with more ``JobPreempted`` events than ``JobRequeued`` ones (one stop, counted twice).

With ``--api-workers N`` the server is ``fairpod up --api-workers N`` (docs/architecture.md, "API workers": the
submits committed by worker processes, the core's turns in a process of its own), and the kills take in turn one
API worker (the core starts it again), the core process (its workers end with it; ``fairpod up`` again on the same
home) and both (a worker, then the core).

With ``--postgres`` the server's database is a private PostgreSQL server (``_live.postgres``, as datacenter.py's)
instead of SQLite under its home.

Run: ``.venv/bin/python benchmarks/crash.py [--jobs 1000] [--kills 4] [--seed 1] [--runs 1] [--postgres]``; a smaller
``--jobs 100 --kills 2`` takes a couple of minutes. Exit status 1 if any figure is not 0, or if no replica's start
was counted (the replicas append to ``lines.log`` in their workdir, which the sandbox keeps in their view).

The crash windows of one transition each (``--scenario grow|shrink|cancel|windows``; ``mixed`` is the run
above): on four 1-accelerator nodes, the transition is set off through the API and the server is killed
``--kill-ms`` later (a sweep: 0, step, 2*step ... up to ``--max-ms``), then started again; each trial waits
``--settle`` seconds for the outcome. Replicas write ``start``/``term`` lines, so what ran is known apart from the
server. ``grow``: an elastic job (1..4) on the two nodes a 2-node job leaves, that job cancelled (the elastic job
grows to 4); ``shrink``: the elastic job on all four, a 2-node job of the lending team submitted (it shrinks to 2);
``cancel``: a 2-node job cancelled. Counts (all should be 0): ``lost`` (a job the server no longer knows),
``stuck`` (the outcome not reached: not 4 live ranks / the reclaiming job not running or the removed ranks not
gone / not Cancelled), ``wrong`` (the elastic job failed, or ended in another state than asked), ``extra`` (a
healthy rank started again or stopped, a removed rank stopped twice or started again, a cancelled job restarted).
``.venv/bin/python benchmarks/crash.py --scenario windows --max-ms 30 --step-ms 5`` takes a few minutes.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import signal
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _live import UNFINISHED, LiveServer, RawClient, exit_on_sigterm, marks_dir, postgres, table  # noqa: E402

SPEC = """
cluster:
  name: crash
  instance_groups:
    - name: workers
      instance_type: ml.g5.12xlarge
      count: 12
policy:
  task_prioritization: TaskRanking
  priority_classes:
    - name: inference
      weight: 100
    - name: training
      weight: 50
  idle_compute_allocation: FairShare
teams:
  - name: john
    fair_share_weight: 50
    sharing: {strategy: LendAndBorrow, borrow_limit: 100}
    quota: [{instance_type: ml.g5.12xlarge, count: 6}]
  - name: smith
    fair_share_weight: 50
    sharing: {strategy: LendAndBorrow, borrow_limit: 100}
    quota: [{instance_type: ml.g5.12xlarge, count: 6}]
"""

SCRIPT = (
    'echo "start $FAIRPOD_JOB $FAIRPOD_RESTART_COUNT $RANK $FAIRPOD_ACCELERATORS" >> {log}; sleep {d}; '
    'c=0; if [ {kind} = fail ] || {{ [ {kind} = flaky ] && [ "$FAIRPOD_RESTART_COUNT" = 0 ]; }}; then c=3; fi; '
    'echo "end $FAIRPOD_JOB $FAIRPOD_RESTART_COUNT $RANK $c" >> {log}; exit $c'
)
EXPECT = {"ok": ("Succeeded", 0), "fail": ("Failed", 0), "flaky": ("Succeeded", 1)}


def bodies(n: int, rng: random.Random, log: Path) -> list[dict[str, Any]]:
    """The jobs; their replicas append to ``log``, in their workdir (:func:`_live.marks_dir`)."""
    out = []
    for i in range(n):
        kind = "fail" if i % 10 == 3 else ("flaky" if i % 10 in (5, 8) else "ok")
        acc = rng.choice((1, 1, 2, 4))
        body: dict[str, Any] = {
            "name": f"c{i}", "team": rng.choice(("john", "smith")), "accelerators": acc,
            "nodes": 2 if rng.random() < 0.15 else 1,
            "priority": "inference" if rng.random() < 0.2 else "training",
            "command": ["sh", "-c", SCRIPT.format(log=log, d=round(rng.uniform(0.3, 2.5), 2), kind=kind)],
            "termination_grace_seconds": 1, "workdir": str(log.parent),
        }
        if kind == "flaky":
            body.update(auto_resume=True, max_retry=2)
        out.append({"body": body, "kind": kind, "key": uuid.uuid4().hex})
    return out


class Submitter(threading.Thread):
    """Posts every job in order, retrying (same Idempotency-Key) while the server is down."""

    def __init__(self, server: LiveServer, jobs: list[dict[str, Any]], pace: float) -> None:
        super().__init__(name="submitter", daemon=True)
        self.server, self.jobs, self.pace = server, jobs, pace
        self.accepted: dict[str, int] = {}  # name -> id
        self.error: str | None = None

    def run(self) -> None:
        t0 = time.monotonic()
        client: RawClient | None = None
        for i, j in enumerate(self.jobs):
            delay = t0 + i / self.pace - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            deadline = time.monotonic() + 120
            while True:
                try:
                    if client is None:
                        client = RawClient(self.server, timeout=30)
                        client.headers["Idempotency-Key"] = j["key"]
                    client.headers["Idempotency-Key"] = j["key"]
                    status, job = client.request("POST", "/jobs", j["body"])
                except (OSError, http.client.HTTPException):
                    if client is not None:
                        client.close()
                    client = None
                    if time.monotonic() > deadline:
                        self.error = f"job {j['body']['name']}: the server did not come back"
                        return
                    time.sleep(0.2)
                    continue
                if status not in (200, 201):
                    self.error = f"job {j['body']['name']}: HTTP {status} {str(job)[:200]}"
                    return
                self.accepted[j["body"]["name"]] = int(job["id"])
                break
        if client is not None:
            client.close()


KILLED = {"core": "the server", "worker": "an API worker", "both": "an API worker and the core"}


def kill_and_restart(server: LiveServer, down: float, what: str = "core") -> None:
    """kill -9 of ``what``: the server (its core process, whose API workers end with it: ``core``), one API worker
    (the core starts it again: ``worker``) or a worker and then the core (``both``); the server started again."""
    assert server.proc is not None
    if what in ("worker", "both"):
        workers = server.server_pids()[1:]
        if not workers:
            raise RuntimeError("no API worker to kill: is the server up with --api-workers?")
        os.kill(workers[0], signal.SIGKILL)
        if what == "worker":
            return
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(timeout=30)
    time.sleep(down)  # replicas end while nobody watches
    server.start(timeout=120)


def one_run(n: int, kills: int, seed: int, pace: float, drain: float, keep: bool,
            api_workers: int = 0, db_url: str | None = None) -> dict[str, int]:
    rng = random.Random(seed)
    extra = ["--api-workers", str(api_workers)] if api_workers else []
    targets = ("worker", "core", "both") if api_workers else ("core",)  # taken in turn
    server = LiveServer(SPEC, keep=keep, extra=extra)
    if db_url:  # LiveServer leaves the caller's FAIRPOD_DB_URL out of the server's environment: set it here
        server.env["FAIRPOD_DB_URL"] = db_url
    with server:
        if keep:
            print(f"  files kept in {server.tmp}", flush=True)
        log = marks_dir(server) / "lines.log"
        log.touch(mode=0o666)
        log.chmod(0o666)  # appended to by every team's user
        jobs = bodies(n, rng, log)
        sub = Submitter(server, jobs, pace)
        span = n / pace + 5  # kills fall while jobs are submitted and run
        moments = sorted(rng.uniform(1.0, span) for _ in range(kills))
        t0 = time.monotonic()
        sub.start()
        for k, at in enumerate(moments):
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            what = targets[k % len(targets)]
            kill_and_restart(server, rng.uniform(0.0, 1.5), what)
            back = "the core starts it again" if what == "worker" else "server back"
            print(f"  kill -9 #{k + 1} of {KILLED[what]} at {time.monotonic() - t0:.1f} s; {back}", flush=True)
        sub.join(timeout=n / pace + 300)
        if sub.error or sub.is_alive():
            raise RuntimeError(sub.error or "the submitter did not finish")
        deadline = time.monotonic() + drain
        with server.client(timeout=120) as c:
            while time.monotonic() < deadline:
                if c.get("/jobs", params={"state": list(UNFINISHED), "limit": 1}).json()["count"] == 0:
                    break
                time.sleep(0.5)
            print(f"  drained at {time.monotonic() - t0:.1f} s", flush=True)
            known: dict[str, dict[str, Any]] = {}
            for name, jid in sub.accepted.items():
                r = c.get(f"/jobs/{jid}")
                if r.status_code == 200:
                    known[name] = r.json()
        return count(jobs, sub.accepted, known, log)


def count(jobs: list[dict[str, Any]], accepted: dict[str, int], known: dict[str, dict[str, Any]],
          log: Path) -> dict[str, int]:
    lines = log.read_text().splitlines() if log.exists() else []
    starts: dict[str, list[tuple[int, int]]] = defaultdict(list)  # job key -> (line no, attempt) of rank 0
    ends_ok: dict[tuple[str, int], set[int]] = defaultdict(set)  # (job key, attempt) -> ranks that ended 0
    completed_at: dict[str, int] = {}  # job key -> line no of its first complete successful attempt
    short = 0
    asked = {f"{j['body']['name']}-{accepted[j['body']['name']]}": j["body"] for j in jobs
             if j["body"]["name"] in accepted}
    for no, line in enumerate(lines):
        parts = line.split()
        if len(parts) < 4:
            continue
        what, key, attempt, rank = parts[0], parts[1], int(parts[2]), int(parts[3])
        body = asked.get(key)
        if what == "start":
            accel = parts[4].split(",") if len(parts) > 4 and parts[4] else []
            if body is not None and len(accel) != body["accelerators"]:
                short += 1
            if rank == 0:
                starts[key].append((no, attempt))
        elif what == "end" and len(parts) > 4 and parts[4] == "0":
            ends_ok[(key, attempt)].add(rank)
            if body is not None and len(ends_ok[(key, attempt)]) == body["nodes"]:
                completed_at.setdefault(key, no)
    lost = stuck = wrong = extra = lost_started = double = 0
    for j in jobs:
        name = j["body"]["name"]
        if name not in accepted:
            continue
        job = known.get(name)
        if job is None:
            lost += 1
            continue
        key = f"{name}-{job['id']}"
        if job["state"] in UNFINISHED:
            stuck += 1
            print(f"  stuck: {key} {job['state']} ({job['reason']}); events: "
                  f"{[e['kind'] for e in job['events']]}", flush=True)
            continue
        state, restarts = EXPECT[j["kind"]]
        if job["state"] != state:
            wrong += 1
            print(f"  wrongly {job['state']}: {key} ({job['reason']})", flush=True)
        done = completed_at.get(key)
        extra += sum(1 for no, _ in starts[key] if done is not None and no > done)
        extra += max(0, job["restarts"] - restarts)
        kinds = Counter(e["kind"] for e in job["events"])
        lost_started += max(0, len(starts[key]) - kinds["JobStarted"])
        double += kinds["JobPreempted"] > kinds["JobRequeued"] + kinds["JobSucceeded"] + kinds["JobFailed"]
    return {"jobs": len(accepted), "replica starts": sum(len(v) for v in starts.values()), "lost": lost,
            "stuck": stuck, "wrongly failed": wrong, "extra runs": extra, "short slots": short,
            "lost JobStarted": lost_started, "double preemptions": int(double)}


WINDOWS_SPEC = (Path(__file__).resolve().parents[1] / "examples" / "four" / "spec.yaml").read_text()
REPLICA = ('echo "start $FAIRPOD_JOB $NODE_RANK" >> {log}; trap \'echo "term $FAIRPOD_JOB $NODE_RANK" >> {log}; '
           'exit 1\' TERM; while :; do sleep 0.1; done')


class Trials:
    """One server for a scenario's trials; helpers over its API and the replicas' lines."""

    def __init__(self, server: LiveServer) -> None:
        self.server = server
        self.log = server.tmp / "windows.log"
        self.c = server.client(timeout=30)

    def submit(self, name: str, team: str, nodes: int = 1, elastic: bool = False, sleep: bool = False) -> int:
        body: dict[str, Any] = {"name": name, "team": team, "nodes": nodes, "termination_grace_seconds": 1,
                                "command": ["sh", "-c", "sleep 300" if sleep else REPLICA.format(log=self.log)]}
        if elastic:
            body.update(min_nodes=1, max_nodes=4)
        return int(self.c.post("/jobs", json=body).json()["id"])

    def job(self, jid: int) -> dict[str, Any] | None:
        r = self.c.get(f"/jobs/{jid}")
        return r.json() if r.status_code == 200 else None

    def lines(self, word: str, key: str) -> list[int]:
        """The ranks of job ``key``'s ``word`` lines, in order."""
        text = self.log.read_text() if self.log.exists() else ""
        return [int(p[2]) for ln in text.splitlines() if len(p := ln.split()) == 3 and p[:2] == [word, key]]

    def until(self, what: Any, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if got := what():
                    return got
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        return None

    def kill_after(self, ms: float, trigger: Any) -> None:
        """Set the transition off, kill -9 the server ``ms`` later, start it again."""
        trigger()
        time.sleep(ms / 1000)
        kill_and_restart(self.server, 0.3)  # replicas stopped by the transition end while nobody watches
        self.c.close()
        self.c = self.server.client(timeout=30)

    def clear(self) -> None:
        """Cancel what is left and wait until it has ended (the next trial starts on an idle cluster)."""
        for j in self.c.get("/jobs", params={"state": list(UNFINISHED)}).json()["jobs"]:
            self.c.post(f"/jobs/{j['id']}/cancel")
        self.until(lambda: self.c.get("/jobs", params={"state": list(UNFINISHED), "limit": 1}).json()["count"] == 0,
                   60)


def trial(t: Trials, scenario: str, i: int, ms: float, settle: float) -> Counter[str]:
    """One kill of a scenario's transition; its counts."""
    out: Counter[str] = Counter()
    if scenario == "grow":
        blocker = t.submit(f"b{i}", "john", 2, sleep=True)
        t.until(lambda: (j := t.job(blocker)) and j["state"] == "Running", 30)
        jid = t.submit(f"g{i}", "smith", elastic=True)
        key = f"g{i}-{jid}"
        t.until(lambda: len(t.lines("start", key)) >= 2, 30)
        t.kill_after(ms, lambda: t.c.post(f"/jobs/{blocker}/cancel"))
        ok = t.until(lambda: (j := t.job(jid)) and j["state"] == "Running" and j["nodes"] == 4
                     and set(t.lines("start", key)) == {0, 1, 2, 3} and j, settle)
        job = t.job(jid)
        starts, terms = t.lines("start", key), t.lines("term", key)
        out["stuck"] += not ok
        out["extra"] += starts.count(0) + starts.count(1) - 2 + len(terms)
    elif scenario == "shrink":
        jid = t.submit(f"s{i}", "smith", elastic=True)
        key = f"s{i}-{jid}"
        t.until(lambda: len(t.lines("start", key)) >= 4, 30)
        reclaim: list[int] = []
        t.kill_after(ms, lambda: reclaim.append(t.submit(f"r{i}", "john", 2, sleep=True)))
        ok = t.until(lambda: (r := t.job(reclaim[0])) and r["state"] == "Running" and "JobStarted" in
                     [e["kind"] for e in r["events"]] and (j := t.job(jid)) and j["state"] == "Running"
                     and j["nodes"] == 2 and sorted(t.lines("term", key)) == [2, 3], settle)
        job = t.job(jid)
        starts, terms = t.lines("start", key), t.lines("term", key)
        out["stuck"] += not ok
        out["extra"] += len(starts) - 4 + terms.count(0) + terms.count(1) + max(0, terms.count(2) - 1) \
            + max(0, terms.count(3) - 1)
    else:
        jid = t.submit(f"c{i}", "john", 2)
        key = f"c{i}-{jid}"
        t.until(lambda: len(t.lines("start", key)) >= 2, 30)
        t.kill_after(ms, lambda: t.c.post(f"/jobs/{jid}/cancel"))
        ok = t.until(lambda: (j := t.job(jid)) and j["state"] == "Cancelled", settle)
        job = t.job(jid)
        out["stuck"] += not ok
        out["extra"] += len(t.lines("start", key)) - 2
    if job is None:
        out["lost"] += 1
    elif job["state"] not in UNFINISHED and job["state"] != ("Cancelled" if scenario == "cancel" else ""):
        out["wrong"] += 1
    if not ok or out["extra"] or out["wrong"]:
        print(f"  {scenario} at {ms:g} ms: {dict(out)}; job {job and (job['state'], job['nodes'], job['reason'])}",
              flush=True)
    t.clear()
    return out


def windows(scenario: str, max_ms: float, step: float, settle: float, keep: bool) -> dict[str, int]:
    # the replicas write their lines into the benchmark's directory: cgroup limits, not the files sandbox
    with LiveServer(WINDOWS_SPEC, keep=keep, env={"FAIRPOD_SANDBOX": "limits"}) as server:
        if keep:
            print(f"  files kept in {server.tmp}", flush=True)
        t = Trials(server)
        total: Counter[str] = Counter()
        times = [round(k * step, 3) for k in range(int(max_ms / step) + 1)]
        for i, ms in enumerate(times):
            total += trial(t, scenario, i, ms, settle)
        t.c.close()
    return {"trials": len(times), **{k: total[k] for k in ("lost", "stuck", "wrong", "extra")}}


def main() -> int:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--kills", type=int, default=4, help="kill -9 of the server per run")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pace", type=float, default=8.0, help="jobs submitted per second")
    ap.add_argument("--drain", type=float, default=900.0, help="seconds to wait for the last jobs")
    ap.add_argument("--keep", action="store_true", help="keep the server's home, log and lines.log")
    ap.add_argument("--api-workers", type=int, default=0,
                    help="mixed: fairpod up --api-workers N; the kills take an API worker, the core process, "
                         "both, in turn")
    ap.add_argument("--postgres", action="store_true",
                    help="mixed: a private PostgreSQL server (a new database each run) instead of SQLite")
    ap.add_argument("--scenario", choices=("mixed", "grow", "shrink", "cancel", "windows"), default="mixed",
                    help="mixed jobs (above), or the crash window of one transition (windows: all three)")
    ap.add_argument("--max-ms", type=float, default=30.0, help="windows: the latest kill after the transition")
    ap.add_argument("--step-ms", type=float, default=2.0, help="windows: the sweep's step")
    ap.add_argument("--settle", type=float, default=20.0, help="windows: seconds a trial waits for its outcome")
    args = ap.parse_args()
    bad = 0
    if args.scenario != "mixed":
        for sc in ("grow", "shrink", "cancel") if args.scenario == "windows" else (args.scenario,):
            t0 = time.monotonic()
            print(f"{sc}: kill -9 at 0..{args.max_ms:g} ms (step {args.step_ms:g} ms) after the transition",
                  flush=True)
            figs = windows(sc, args.max_ms, args.step_ms, args.settle, args.keep)
            print(table([(k, str(v)) for k, v in figs.items()] + [("wall", f"{time.monotonic() - t0:.0f} s")]),
                  flush=True)
            bad += sum(v for k, v in figs.items() if k != "trials")
        return 1 if bad else 0
    for r in range(args.runs):
        print(f"run {r + 1} of {args.runs}: {args.jobs} jobs, {args.kills} x kill -9 (seed {args.seed + r}), "
              f"{'PostgreSQL' if args.postgres else 'SQLite'}", flush=True)
        t0 = time.monotonic()
        with postgres() if args.postgres else nullcontext() as db_url:
            figs = one_run(args.jobs, args.kills, args.seed + r, args.pace, args.drain, args.keep, args.api_workers,
                           db_url)
        print(table([(k, str(v)) for k, v in figs.items()] + [("wall", f"{time.monotonic() - t0:.0f} s")]),
              flush=True)
        bad += sum(v for k, v in figs.items() if k not in ("jobs", "replica starts"))
        if figs["jobs"] and not figs["replica starts"]:  # nothing measured is no result, never a pass
            print("  measured nothing: no replica wrote its start line; see the server's log", flush=True)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
