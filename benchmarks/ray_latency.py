"""Submit-to-running latency of a 2-replica job: the Ray executor against the local executor, in one run.

Two real control planes (``fairpod up --foreground``) run side by side on the same machine: one with the local
executor (the seed cluster's four virtual nodes), one with the Ray executor on a Ray cluster (by default a
loopback cluster of a head and two ml.g5.12xlarge nodes with 4 fake GPUs each, started here and stopped by PID
at the end; or ``--ray-address HOST:PORT`` of a cluster with at least two such nodes). Rounds alternate
between them: each submits one job of 2 replicas whose command writes the time it started
(``date +%s.%N``) and exits; the latency of a replica is that time minus the time just before the submitting
HTTP request. A round waits for the job to succeed, so every job finds the cluster idle.

Printed per executor: first replica running, both replicas running (p50, p90, min, max over the rounds), and
submit-to-succeeded. The Ray figures include what Ray adds per replica: one call to the node's fairpod agent
(started once per node, before the rounds), which forks the replica's supervisor from its fork server.

    .venv/bin/python benchmarks/ray_latency.py [--rounds 10] [--ray-address HOST:PORT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fairpod.executors import procs, state  # noqa: E402
from fairpod.model.spec import seed_spec  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, tmp: Path, spec: dict[str, Any], extra_env: dict[str, str]) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/api/v1"
        (tmp / "spec.yaml").write_text(yaml.safe_dump(spec))
        self.env = {**os.environ, "FAIRPOD_HOME": str(self.home), "FAIRPOD_CONFIG": str(tmp / "config.json"),
                    **extra_env}
        self.proc: subprocess.Popen[bytes] | None = None
        self.token = ""

    def start(self) -> None:
        self.home.mkdir(parents=True)
        with open(self.tmp / "server.out", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fairpod.cli.main", "up", "--foreground", "--port", str(self.port),
                 "--spec", str(self.tmp / "spec.yaml")],
                env=self.env, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited:\n{(self.tmp / 'server.out').read_text()[-3000:]}")
            try:
                if httpx.get(self.url.removesuffix("/api/v1") + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            raise RuntimeError("the server did not come up")
        self.token = json.loads((self.tmp / "config.json").read_text())["token"]
        self.http = httpx.Client(base_url=self.url, timeout=60, headers={"Authorization": f"Bearer {self.token}"})

    def job_state(self, jid: int) -> str:
        return str(self.http.get(f"/jobs/{jid}").json()["state"])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for f in self.tmp.glob("**/*.pid"):  # what a failure may have left: supervisors and commands
            rec = state.read_pid(f)
            if rec is not None and procs.alive(*rec):
                try:
                    os.kill(rec[0], signal.SIGKILL)
                except OSError:
                    pass


def one_round(server: Server, marks: Path, name: str) -> tuple[float, float, float]:
    cmd = ["sh", "-c", f'date +%s.%N > "{marks}/{name}-$RANK"']
    t0 = time.time()
    r = server.http.post("/jobs", json={"name": name, "team": "john", "nodes": 2, "command": cmd})
    r.raise_for_status()
    jid = r.json()["id"]
    files = [marks / f"{name}-{rank}" for rank in (0, 1)]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        st = server.job_state(jid)
        if st in ("Failed", "Cancelled"):
            raise RuntimeError(f"job {name} {st}: {server.http.get(f'/jobs/{jid}').json()['reason']}")
        if st == "Succeeded" and all(f.exists() and f.read_text().strip() for f in files):
            break
        time.sleep(0.02)
    else:
        raise RuntimeError(f"job {name} did not finish in 120 s")
    done = time.time() - t0
    started = sorted(float(f.read_text()) - t0 for f in files)
    return started[0], started[1], done


def fmt(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=10) if len(xs) >= 2 else [xs[0]] * 9
    return (f"p50 {statistics.median(xs) * 1000:7.0f} ms   p90 {q[8] * 1000:7.0f} ms   "
            f"min {min(xs) * 1000:7.0f} ms   max {max(xs) * 1000:7.0f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10, help="jobs per executor (default 10)")
    ap.add_argument("--ray-address", help="an existing Ray cluster (HOST:PORT); default: start a loopback one")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    tmp = Path(tempfile.mkdtemp(prefix="fairpod-ray-bench-"))
    cluster = None
    servers: list[Server] = []
    try:
        address = args.ray_address
        if address is None:
            from tests.ray.cluster import ITYPE, RayTestCluster

            os.environ["RAY_AUTH_MODE"] = "disabled"  # as the loopback test cluster; the servers inherit it

            t0 = time.monotonic()
            cluster = RayTestCluster(tmp)
            cluster.start_head()
            cluster.add_nodes([(w, ITYPE, 4, False, 2) for w in ("w1", "w2")])
            address = cluster.address
            print(f"Ray cluster (head + 2 nodes of {ITYPE}, each on its own loopback address) up in {time.monotonic() - t0:.1f} s")
        base = seed_spec().model_dump(mode="json", exclude_defaults=True)
        ray_spec = json.loads(json.dumps(base))
        ray_spec["cluster"]["executor"] = {"kind": "ray", "ray_address": address,
                                           "ray_namespace": f"bench-{uuid.uuid4().hex[:8]}"}
        (tmp / "local").mkdir()
        (tmp / "ray").mkdir()
        local = Server(tmp / "local", base, {})
        ray = Server(tmp / "ray", ray_spec, {"FAIRPOD_RAY_NODE_DIR": str(tmp / "ray-nodes")})
        servers = [local, ray]
        for s in servers:
            s.start()
        marks = tmp / "marks"
        marks.mkdir()
        deadline = time.monotonic() + 30  # the Ray nodes join the Ray control plane
        while len(ray.http.get("/nodes").json()["nodes"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        results: dict[str, list[tuple[float, float, float]]] = {"local": [], "ray": []}
        for i in range(args.rounds):
            for label, s in (("local", local), ("ray", ray)):
                results[label].append(one_round(s, marks, f"{label}-{i}"))
        print(f"submit-to-running of a 2-replica job, {args.rounds} rounds per executor "
              f"({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}):")
        for label in ("local", "ray"):
            r = results[label]
            print(f"  {label:5s} first replica running   {fmt([x[0] for x in r])}")
            print(f"  {label:5s} both replicas running   {fmt([x[1] for x in r])}")
            print(f"  {label:5s} submit to succeeded     {fmt([x[2] for x in r])}")
        ratio = statistics.median(x[1] for x in results["ray"]) / statistics.median(x[1] for x in results["local"])
        print(f"  ray / local, both replicas running (p50): {ratio:.1f}x")
    finally:
        for s in servers:
            s.stop()
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
