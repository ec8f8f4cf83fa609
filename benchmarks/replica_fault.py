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
the steps lost (completed before the fault and done again after it; the step in flight is not counted).

Run: ``.venv/bin/python benchmarks/recovery.py --replica-fault [--steps 200] [--save-every 50] [--kill-at 90]
[--step-seconds 0.1] [--backend gloo] [--only peers]`` (``benchmarks/recovery.py`` hands these arguments here).
Goal (issue 49): (c) <= 20 % of (a)'s time, and 0 steps lost.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

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


def run_one(srv: LiveServer, http: httpx.Client, way: str, args: argparse.Namespace) -> dict[str, float]:
    recovery = "peers" if way == "peers" else "checkpoint"
    cmd = [sys.executable, str(SCRIPT), "--steps", str(args.steps), "--save_every", str(args.save_every),
           "--step_seconds", str(args.step_seconds), "--backend", args.backend, "--recovery", recovery,
           "--timeout", "120"]  # steps and the final model go to the job's checkpoint directory
    job = {"name": f"ddp-{way}", "team": "john", "nodes": 3, "termination_grace_seconds": 5, "command": cmd,
           "env": {"PYTHONPATH": str(REPO / "src")}, **WAYS[way]}
    r = http.post("/jobs", json=job)
    r.raise_for_status()
    out = srv.home / "checkpoints" / "john" / f"{job['name']}-{r.json()['id']}"
    wait(lambda: len(completed(out, 0)) >= args.kill_at, 600, f"{way}: rank 0 to complete step {args.kill_at}")
    victim = host_pid(srv.home / "runs" / f"{job['name']}-{r.json()['id']}" / "0" / "1")
    before = max(s for s, _, _ in completed(out, 0))
    t_fault = time.time()
    os.kill(victim, signal.SIGKILL)
    after = lambda: [row for row in completed(out, 0) if row[1] > t_fault]  # noqa: E731
    wait(lambda: any(s > before for s, _, _ in after()), 600, f"{way}: progress after the fault")
    rows = after()
    first = rows[0]
    progress = next(row for row in rows if row[0] > before)
    lost = max(0, before - (first[0] - 1))
    wait(lambda: http.get(f"/jobs/{job['name']}").json()["state"] in ("Succeeded", "Failed"), 900,
         f"{way}: the job to end")
    state = http.get(f"/jobs/{job['name']}").json()
    return {"fault_to_progress_s": progress[1] - t_fault, "fault_to_first_step_s": first[1] - t_fault,
            "steps_lost": lost, "killed_after_step": before, "resumed_at_step": first[0] - 1,
            "attempt": state["restarts"], "state": state["state"]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--kill-at", type=int, default=90)
    ap.add_argument("--step-seconds", type=float, default=0.1)
    ap.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    ap.add_argument("--only", choices=list(WAYS), action="append", help="run only this way (repeatable)")
    args = ap.parse_args(argv)
    if not 0 < args.kill_at < args.steps:
        ap.error("--kill-at must be between 0 and --steps")
    ways = args.only or list(WAYS)
    print(f"3 replicas x 1 process, {args.backend}; {args.steps} steps of >= {args.step_seconds:g} s, a "
          f"checkpoint every {args.save_every}; replica 1 killed (SIGKILL) after rank 0's step {args.kill_at}")
    results = {}
    with LiveServer(SPEC.read_text()) as srv, httpx.Client(base_url=srv.url + "/api/v1", timeout=60,
                                                         headers={"Authorization": f"Bearer {srv.token}"}) as http:
        for way in ways:
            results[way] = res = run_one(srv, http, way, args)
            print(f"({'abc'[list(WAYS).index(way)]}) {way:<10}  fault -> next step of progress "
                  f"{res['fault_to_progress_s']:6.2f} s   fault -> first step {res['fault_to_first_step_s']:6.2f} s   "
                  f"steps lost {res['steps_lost']:3d} (killed after step {res['killed_after_step']}, went on from "
                  f"step {res['resumed_at_step']})   attempt {res['attempt']}, {res['state']}", flush=True)
    if "checkpoint" in results and "peers" in results:
        ratio = results["peers"]["fault_to_progress_s"] / results["checkpoint"]["fault_to_progress_s"]
        print(f"peers / checkpoint: {ratio:.0%} of the time (goal <= 20 %), "
              f"{results['peers']['steps_lost']} steps lost (goal 0)")


if __name__ == "__main__":
    main()
