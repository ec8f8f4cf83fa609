"""One replica of a DDP job killed at step k: three ways back, side by side (issue 49), on a live server.

The same job each time: examples/ddp/peer_ddp.py, 3 replicas of one process (gloo on CPU, nccl with ``--backend
nccl`` on a GPU host), ``--steps`` steps of at least ``--step-seconds`` each, rank 0 checkpointing every
``--save-every`` steps. Once rank 0 has completed step k (``--kill-at``) replica 1 is killed with SIGKILL, and the
job comes back by

(a) ``checkpoint``: restart from the checkpoint, today's default (``--auto-resume --max-retry 1``): every replica
    is stopped, the job is requeued (restart backoff, ``policy.restart_backoff_base_seconds``) and started again;
(b) ``in-place``: restart in place, today (``--restarts-in-place 3``): the survivors' collectives fail and they
    exit, each replica is started again on its node and all load the checkpoint;
(c) ``peers``: recovery from peers (``--restarts-in-place 2 --peer-recovery``, ``fairpod.sdk.peers``): only
    replica 1 is started again and gets a survivor's state from its memory.

For each it prints the time from the kill to the next completed step of progress (rank 0 completes step k+1, or
the step after the highest it had completed), the time to the first step completed at all after the kill, and
the steps lost (completed before the fault and done again after it; the step in flight is not counted). Then where
replica 1's way back went, in seconds after the fault: its supervisor wrote the exit (``exit seen``), the control
plane the new launch (``restarted``), the replacement's supervisor its PID file (``supervisor``) and the process's
(``child``; ``spare started``: the process started before the fault, the replica's spare, fairpod.executors.standby), the
program reached PeerRecovery (``ready``: its imports done), formed the group (``group``), received the state
(``state``), and rank 0's first step after the fault (``step``). With (c) the benchmark waits for replica 1's spare
to have done its imports before the kill (``--no-spare``: no spares, the server runs without a fork server).

Run: ``.venv/bin/python benchmarks/recovery.py --replica-fault [--steps 200] [--save-every 50] [--kill-at 90]
[--step-seconds 0.1] [--backend gloo] [--only peers] [--repeat N] [--no-spare]`` (``benchmarks/recovery.py``
hands these arguments here; ``--repeat``: the ways N times in turn, the ratio of the medians).
Goal (issue 49): (c) <= 20 % of (a)'s time, and 0 steps lost.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _live import LiveServer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "ddp" / "peer_ddp.py"
SPEC = REPO / "examples" / "seed" / "spec.yaml"
WAYS = {
    "checkpoint": {"auto_resume": True, "max_retry": 1},
    "in-place": {"restarts_in_place": 3, "restart_eval_period_seconds": 600},
    "peers": {"restarts_in_place": 2, "peer_recovery": True},
}


def completed(out: Path, rank: int) -> list[tuple[int, float, int]]:
    f = out / f"steps-{rank}"
    rows = f.read_text().splitlines() if f.exists() else []
    return [(int(s), float(t), int(p)) for s, t, p in (r.split() for r in rows if r.strip())]


def host_pid(rdir: Path) -> int:
    """The host PID of a replica's training process (its sandbox has a PID namespace of its own): its child.pid,
    or a descendant of it running peer_ddp.py."""
    todo = [int((rdir / "child.pid").read_text().split()[0])]
    while todo:
        pid = todo.pop(0)
        try:
            if b"peer_ddp.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
            todo += [int(c) for t in Path(f"/proc/{pid}/task").iterdir()
                     for c in (t / "children").read_text().split()]
        except OSError:
            continue
    raise SystemExit(f"no training process under {rdir}")


def wait(pred: object, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")


def _ticks_to_wall() -> tuple[float, float]:
    btime = next(float(ln.split()[1]) for ln in Path("/proc/stat").read_text().splitlines() if ln.startswith("btime"))
    return btime, float(os.sysconf("SC_CLK_TCK"))


class Timeline(threading.Thread):
    """Where replica 1's way back went (relative to the fault, from its run directory, sampled every 5 ms): its
    supervisor writes the exit (``ended_at``), the control plane writes the new launch (``launched_at``), the
    replacement's supervisor its PID file (its mtime), the replacement process's start (before the fault: a
    spare), and the replacement's own line (examples/ddp/peer_ddp.py: PeerRecovery reached, its imports done;
    the group formed; the peer's state received)."""

    def __init__(self, rdir: Path, t_fault: float) -> None:
        super().__init__(daemon=True)
        self.rdir, self.t_fault, self.seen = rdir, t_fault, {}
        self.done = threading.Event()

    def run(self) -> None:
        btime, hz = _ticks_to_wall()
        while not self.done.wait(0.005):
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                if "exit seen" not in self.seen and (self.rdir / "status.json").exists():
                    self.seen["exit seen"] = json.loads((self.rdir / "status.json").read_text())["ended_at"]
                launch = json.loads((self.rdir / "launch.json").read_text())
                if launch["launched_at"] > self.t_fault:
                    self.seen.setdefault("restarted", launch["launched_at"])
                    sup = self.rdir / "supervisor.pid"
                    if sup.exists():
                        self.seen.setdefault("supervisor", sup.stat().st_mtime)
                    child = self.rdir / "child.pid"
                    self.seen.setdefault("child", child.stat().st_mtime)  # its supervisor wrote its PID
                    stat = Path(f"/proc/{int(child.read_text().split()[0])}/stat").read_text()
                    start = btime + int(stat[stat.rfind(")") + 2:].split()[19]) / hz  # within a second or so
                    if start < self.t_fault - 1:
                        self.seen.setdefault("spare started", start)

    def report(self) -> str:
        self.done.set()
        with contextlib.suppress(OSError, StopIteration):  # (a): the replacement is another attempt's
            line = next(ln for ln in (self.rdir / "output.log").read_text(errors="replace").splitlines()[::-1]
                        if "replacement:" in ln)
            self.seen.update({k: float(v) for k, v in (w.split("=") for w in line.split("replacement:")[1].split())})
        order = sorted(self.seen.items(), key=lambda kv: kv[1])
        return "  ".join(f"{k} {v - self.t_fault:+.2f}" for k, v in order)


def run_one(srv: LiveServer, http: httpx.Client, way: str, args: argparse.Namespace, name: str) -> dict[str, Any]:
    recovery = "peers" if way == "peers" else "checkpoint"
    cmd = [sys.executable, str(SCRIPT), "--steps", str(args.steps), "--save_every", str(args.save_every),
           "--step_seconds", str(args.step_seconds), "--backend", args.backend, "--recovery", recovery,
           "--timeout", "120"]  # steps and the final model go to the job's checkpoint directory
    job = {"name": name, "team": "john", "nodes": 3, "termination_grace_seconds": 5, "command": cmd,
           "env": {"PYTHONPATH": str(REPO / "src")}, **WAYS[way]}
    r = http.post("/jobs", json=job)
    r.raise_for_status()
    out = srv.home / "checkpoints" / "john" / f"{job['name']}-{r.json()['id']}"
    wait(lambda: len(completed(out, 0)) >= args.kill_at, 600, f"{way}: rank 0 to complete step {args.kill_at}")
    rdir = srv.home / "runs" / f"{job['name']}-{r.json()['id']}" / "0" / "1"
    if way == "peers" and not args.no_spare:  # replica 1's spare (fairpod.executors.standby) has done its imports
        wait(lambda: b"fairpod spare: ready" in (rdir / "output.log").read_bytes(), 600, "replica 1's spare")
    victim = host_pid(rdir)
    before = max(s for s, _, _ in completed(out, 0))
    t_fault = time.time()
    os.kill(victim, signal.SIGKILL)
    timeline = Timeline(rdir, t_fault)
    timeline.start()
    after = lambda: [row for row in completed(out, 0) if row[1] > t_fault]  # noqa: E731
    wait(lambda: any(s > before for s, _, _ in after()), 600, f"{way}: progress after the fault")
    rows = after()
    first = rows[0]
    where = timeline.report()
    progress = next(row for row in rows if row[0] > before)
    lost = max(0, before - (first[0] - 1))
    wait(lambda: http.get(f"/jobs/{job['name']}").json()["state"] in ("Succeeded", "Failed"), 900,
         f"{way}: the job to end")
    state = http.get(f"/jobs/{job['name']}").json()
    return {"fault_to_progress_s": progress[1] - t_fault, "fault_to_first_step_s": first[1] - t_fault,
            "steps_lost": lost, "killed_after_step": before, "resumed_at_step": first[0] - 1,
            "attempt": state["restarts"], "state": state["state"], "timeline": f"{where}  step {first[1] - t_fault:+.2f}"}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--kill-at", type=int, default=90)
    ap.add_argument("--step-seconds", type=float, default=0.1)
    ap.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    ap.add_argument("--only", choices=list(WAYS), action="append", help="run only this way (repeatable)")
    ap.add_argument("--no-spare", action="store_true",
                    help="(c) without spares: FAIRPOD_FORKSERVER=0 for the server, so replicas start afresh")
    ap.add_argument("--repeat", type=int, default=1, help="run the ways this many times, one after the other")
    args = ap.parse_args(argv)
    if not 0 < args.kill_at < args.steps:
        ap.error("--kill-at must be between 0 and --steps")
    ways = args.only or list(WAYS)
    print(f"3 replicas x 1 process, {args.backend}; {args.steps} steps of >= {args.step_seconds:g} s, a "
          f"checkpoint every {args.save_every}; replica 1 killed (SIGKILL) after rank 0's step {args.kill_at}")
    results: dict[str, list[dict]] = {way: [] for way in ways}
    env = {"FAIRPOD_FORKSERVER": "0"} if args.no_spare else None
    with LiveServer(SPEC.read_text(), env=env) as srv, httpx.Client(
            base_url=srv.url + "/api/v1", timeout=60, headers={"Authorization": f"Bearer {srv.token}"}) as http:
        for i in range(args.repeat):
            for way in ways:
                results[way].append(res := run_one(srv, http, way, args, f"ddp-{way}-{i}"))
                print(f"({'abc'[list(WAYS).index(way)]}) {way:<10}  fault -> next step of progress "
                      f"{res['fault_to_progress_s']:6.2f} s   fault -> first step {res['fault_to_first_step_s']:6.2f} s"
                      f"   steps lost {res['steps_lost']:3d} (killed after step {res['killed_after_step']}, went on "
                      f"from step {res['resumed_at_step']})   attempt {res['attempt']}, {res['state']}", flush=True)
                print(f"    replica 1, s after the fault: {res['timeline']}", flush=True)
    if results.get("checkpoint") and results.get("peers"):
        a, c = (statistics.median(r["fault_to_progress_s"] for r in results[w]) for w in ("checkpoint", "peers"))
        print(f"peers / checkpoint: {c / a:.0%} of the time (medians of {args.repeat}: {c:.2f} s / {a:.2f} s; goal "
              f"<= 20 %), {max(r['steps_lost'] for r in results['peers'])} steps lost at most (goal 0)")

if __name__ == "__main__":
    main()
