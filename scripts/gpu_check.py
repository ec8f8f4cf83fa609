"""End-to-end check of fairpod on a host with NVIDIA GPUs; prints its figures and writes them as JSON.

    python scripts/gpu_check.py [OUT_DIR]

1. NVML readings of every GPU (fairpod.health.nvml);
2. ``fairpod up`` with no spec in a fresh home: real-GPU mode, the host typed from the catalog;
3. isolation: one 1-GPU job per GPU, all at once; each must see exactly one GPU, all different;
4. the deep health check on the node: GEMM TFLOP/s, memory bandwidth and NVML readings with thresholds;
5. examples/ddp/ddp.py on nccl (one GPU), preempted by a higher-priority job, checkpointed and resumed.

Everything runs on 127.0.0.1 in a temporary FAIRPOD_HOME; the server is stopped by its PID at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
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


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Host:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = _port()
        self.env = {**os.environ, "FAIRPOD_HOME": str(home), "FAIRPOD_CONFIG": str(home.parent / "config.json")}
        self.env.pop("FAIRPOD_FAKE_NVML", None)
        self.proc: subprocess.Popen[bytes] | None = None

    def fairpod(self, *args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", *args], env=self.env, capture_output=True,
                           text=True, timeout=120)
        if r.returncode:
            raise SystemExit(f"fairpod {' '.join(args)} failed: {r.stderr}{r.stdout}")
        return r.stdout

    def start(self) -> None:
        log = open(self.home.parent / "server.out", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", "fairpod.cli.main", "up", "--foreground", "--port",
                                      str(self.port)], env=self.env, stdout=log, stderr=log, start_new_session=True)
        self.wait(lambda: self._healthy(), 60, "the server")
        self.token = json.loads(Path(self.env["FAIRPOD_CONFIG"]).read_text())["token"]

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def api(self, method: str, path: str, **kw: Any) -> Any:
        r = httpx.request(method, f"http://127.0.0.1:{self.port}/api/v1{path}",
                          headers={"Authorization": f"Bearer {self.token}"}, timeout=30, **kw)
        r.raise_for_status()
        return r.json()

    def state(self, job: str) -> dict[str, Any]:
        return self.api("GET", f"/jobs/{job}")

    @staticmethod
    def wait(pred: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = pred()
            if v:
                return v
            time.sleep(0.25)
        raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
        for f in self.home.glob("runs/*/*/*/*.pid"):  # replicas and supervisors left behind, by PID
            try:
                os.kill(int(f.read_text().split()[0]), signal.SIGKILL)
            except (OSError, ValueError, IndexError):
                pass


def main() -> int:
    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    from fairpod.health.nvml import read_gpus

    gpus, source = read_gpus()
    report["nvml"] = {"source": source, "gpus": [g.as_event() for g in gpus]}
    print(f"1. {len(gpus)} GPU(s) through {source}: " + "; ".join(f"{g.name} {g.memory_mib} MiB" for g in gpus))
    if not gpus:
        print("no NVIDIA GPU here: nothing to check")
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="fairpod-gpu-"))
    host = Host(tmp / "home")
    try:
        host.start()
        node = host.api("GET", "/nodes")["nodes"][0]
        report["node"] = node
        print(f"2. fairpod up: node {node['name']}, {node['instance_type']}, accelerators {node['accelerators_are']}")
        print(host.fairpod("cluster", "show"))
        probe = ("import os, torch; print('CUDA=' + os.environ.get('CUDA_VISIBLE_DEVICES', '')); "
                 "print('NVIDIA=' + os.environ.get('NVIDIA_VISIBLE_DEVICES', '')); "
                 "print('SEEN', torch.cuda.device_count(), torch.cuda.get_device_name(0)); import time; time.sleep(2)")
        names = [f"iso-{i}" for i in range(len(gpus))]
        for name in names:
            host.api("POST", "/jobs", json={"name": name, "team": "default", "accelerators": 1,
                                            "command": [sys.executable, "-c", probe]})
        seen = {}
        for name in names:
            host.wait(lambda n=name: host.state(n)["state"] in ("Succeeded", "Failed"), 180, name)
            log = host.fairpod("get-logs", name)
            cuda = re.search(r"^CUDA=(.*)$", log, re.M)
            seen[name] = {"cuda": cuda.group(1) if cuda else None, "log_tail": log[-300:]}
        devices = [v["cuda"] for v in seen.values()]
        ok = all(d and d.isdigit() for d in devices) and len(set(devices)) == len(devices) and all(
            "SEEN 1 " in v["log_tail"] for v in seen.values())
        report["isolation"] = {"ok": ok, "jobs": seen}
        print(f"3. isolation: {len(names)} 1-GPU jobs saw CUDA_VISIBLE_DEVICES {devices}: {'ok' if ok else 'FAILED'}")
        before = len(host.api("GET", f"/nodes/{node['name']}/health")["checks"])
        host.fairpod("node", "check", node["name"])
        checks = host.wait(lambda: (c := host.api("GET", f"/nodes/{node['name']}/health")["checks"][before:])
                           and any("memory_gbps" in e for e in c) and c, 300, "the deep health check")
        report["deep_check"] = checks
        for e in checks:
            if any(k in e for k in ("tflops", "memory_gbps", "reading")):
                vals = {k: e[k] for k in ("tflops", "memory_gbps", "threshold") if k in e}
                print(f"4. {e['level']:<7} {e['msg']} {vals if vals else ''}")
        report["ddp"] = _ddp(host, tmp)
        print(f"5. DDP on nccl: {report['ddp']['summary']}")
    finally:
        host.stop()
        (out_dir / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if report.get("isolation", {}).get("ok") and report.get("ddp", {}).get("ok") else 1


def _ddp(host: Host, tmp: Path) -> dict[str, Any]:
    """The DDP example on nccl with training priority; an inference job preempts it; it resumes."""
    spec = host.api("GET", "/spec")
    spec["policy"]["task_prioritization"] = "TaskRanking"
    spec["policy"]["priority_classes"] = [{"name": "inference", "weight": 100}, {"name": "training", "weight": 50}]
    spec["teams"][0]["preempt_team_tasks"] = "LowerPriority"
    host.api("PUT", "/spec", json=spec)
    torchrun = shutil.which("torchrun") or "torchrun"
    cmd = [torchrun, "--nnodes", "1", "--nproc_per_node", "1", str(ROOT / "examples" / "ddp" / "ddp.py"), "800", "20",
           "--backend", "nccl", "--log_every", "0"]
    host.api("POST", "/jobs", json={"name": "ddp", "team": "default", "priority": "training", "auto_resume": True,
                                    "max_retry": 3, "command": cmd, "workdir": str(tmp)})
    host.wait(lambda: "snapshot saved" in host.fairpod("get-logs", "ddp"), 300, "the first DDP snapshot")
    host.api("POST", "/jobs", json={"name": "urgent", "team": "default", "priority": "inference",
                                    "command": ["sleep", "5"]})
    host.wait(lambda: host.state("ddp")["preemptions"] >= 1, 120, "the DDP job to be preempted")
    host.wait(lambda: host.state("urgent")["state"] == "Succeeded", 180, "the urgent job")
    done = host.wait(lambda: (j := host.state("ddp"))["state"] in ("Succeeded", "Failed") and j, 600, "the DDP job")
    log = host.fairpod("get-logs", "ddp")
    resumed = re.findall(r"Resuming training from snapshot.*", log)
    ok = done["state"] == "Succeeded" and done["preemptions"] >= 1 and bool(resumed)
    summary = (f"{done['state']}, preempted {done['preemptions']}x, checkpoint step {done['checkpoint']['step']}, "
               f"resume line: {resumed[0] if resumed else 'none'}")
    return {"ok": ok, "summary": summary, "job": {k: done[k] for k in ("state", "preemptions", "checkpoint")},
            "log_tail": log[-2000:]}


if __name__ == "__main__":
    sys.exit(main())
