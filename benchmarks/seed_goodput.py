"""Goodput of the live seed scenario (docs/resilience.md): a real ``fairpod up`` (local executor) in a temporary
home on a free loopback port, the seed cluster (4 nodes x 4 accelerators, teams john and smith), real processes.

john-train (2 nodes) runs; smith-train (2 nodes) borrows john's idle half; john-eval (1 node) reclaims it: smith's
trainer gets SIGTERM, checkpoints, reports the checkpoint (``fairpod.sdk.report_progress``) and is requeued; it
resumes from the checkpoint once john-eval ends. The trainer also reports a checkpoint every ``--every`` steps.
Prints each job's goodput and ``fairpod report usage``'s per team and cluster figures.

    .venv/bin/python benchmarks/seed_goodput.py            # about a minute
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "seed" / "spec.yaml"
TRAINER = r'''
import os, pathlib, signal, sys, time
from fairpod import sdk
ck = pathlib.Path(os.environ["FAIRPOD_CHECKPOINT_DIR"]) / f"rank{os.environ['RANK']}.txt"
step = int(ck.read_text()) if ck.exists() else 0
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
steps, every = int(sys.argv[1]), int(sys.argv[2])
while step < steps:
    if stop:
        ck.write_text(str(step))
        sdk.report_progress(step, checkpoint=ck)
        sys.exit(0)
    step += 1
    time.sleep(0.02)
    if step % every == 0:
        ck.write_text(str(step))
        sdk.report_progress(step, checkpoint=ck)
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1000, help="smith's training steps (20 ms each)")
    ap.add_argument("--every", type=int, default=250, help="a checkpoint every this many steps")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fairpod-goodput-") as tmp:
        return run(Path(tmp), a.steps, a.every)


def run(tmp: Path, steps: int, every: int) -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "FAIRPOD_HOME": str(tmp / "home"), "FAIRPOD_CONFIG": str(tmp / "config.json"),
           "HOME": str(tmp), "FAIRPOD_SANDBOX": "limits"}  # as the tests: the trainer lives in this temporary dir
    env.pop("FAIRPOD_URL", None)
    env.pop("FAIRPOD_TOKEN", None)
    url = f"http://127.0.0.1:{port}"
    log = open(tmp / "server.out", "ab")  # noqa: SIM115 - closed below
    srv = subprocess.Popen([sys.executable, "-m", "fairpod.cli.main", "up", "--foreground", "--port", str(port),
                            "--spec", str(SPEC)], env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        wait(lambda: ok(url), 60, "the server")
        token = json.loads((tmp / "config.json").read_text())["token"]
        h = {"Authorization": f"Bearer {token}"}
        trainer = tmp / "trainer.py"
        trainer.write_text(TRAINER)

        def submit(**spec: Any) -> None:
            r = httpx.post(f"{url}/api/v1/jobs", json=spec, headers=h, timeout=30)
            assert r.status_code == 201, r.text

        def job(name: str) -> dict[str, Any]:
            return httpx.get(f"{url}/api/v1/jobs/{name}", headers=h, timeout=30).json()

        submit(name="john-train", team="john", nodes=2, command=["sleep", "30"])
        wait(lambda: job("john-train")["state"] == "Running", 60, "john-train")
        submit(name="smith-train", team="smith", nodes=2, termination_grace_seconds=10,
               command=[sys.executable, str(trainer), str(steps), str(every)])
        wait(lambda: job("smith-train")["state"] == "Running", 60, "smith-train", lambda: job("smith-train")["reason"])
        time.sleep(3)  # smith trains a while on borrowed capacity before john reclaims it (the scenario)
        submit(name="john-eval", team="john", nodes=1, command=["sleep", "5"])
        wait(lambda: job("smith-train")["preemptions"] == 1, 60, "the reclaim")
        for name in ("john-train", "john-eval", "smith-train"):
            wait(lambda n=name: job(n)["state"] in ("Succeeded", "Failed", "Cancelled"), 180, f"{name} to end")
        print("job           state      goodput   kept acc-s   lost acc-s (by cause)")
        for name in ("john-train", "smith-train", "john-eval"):
            j = job(name)
            g = j["goodput"]
            lost = {c: v for c, v in g["lost_accelerator_seconds"].items() if v}
            print(f"{name:13} {j['state']:10} {pct(g['goodput']):>8} {g['kept_accelerator_seconds']:12.1f}   "
                  f"{sum(lost.values()):.1f} {lost or ''}")
        rep = httpx.get(f"{url}/api/v1/reports/usage", headers=h, timeout=30).json()["goodput"]
        for team, g in rep.items():
            print(f"{'cluster' if team == '*' else 'team ' + team:13} goodput {pct(g['goodput'])}  "
                  f"(kept {g['kept_accelerator_seconds']:.1f} accelerator-seconds, lost "
                  f"{sum(g['lost_accelerator_seconds'].values()):.1f})")
        return 0
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()
        log.close()


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f} %"


def ok(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def wait(pred: Any, timeout: float, what: str, why: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise SystemExit(f"seed_goodput: timed out waiting for {what}" + (f" ({why()})" if why else ""))


if __name__ == "__main__":
    sys.exit(main())
