"""The floor under fairpod's submit rate on this machine: the same HTTP stack doing nothing but a submit's HTTP part.

A server process runs uvicorn (httptools, uvloop: what ``fairpod up`` runs) with a FastAPI app of one route,
``POST /api/v1/jobs``, that does what every fairpod submit does before it reaches the control plane -- a bearer
token checked, the body validated as fairpod's ``JobSpec``, a plain route run in the API's thread pool (8 threads,
the 1 ms switch interval of ``fairpod up``), a JSON answer -- and nothing else: no store, no engine, no lock.
The client is ``benchmarks/datacenter.py``'s (8 threads of the standard library's keep-alive client, the same job
bodies) on the same machine. It prints the requests per second, their p50/p99, and the CPU the server and the
client spent per request.

    .venv/bin/python benchmarks/http_floor.py                 # 20 s of submits
    .venv/bin/python benchmarks/http_floor.py --seconds 60 --threads 16

What fairpod's own submits reach is in ``benchmarks/datacenter.py`` (its "sustained submits"); the gap between the
two is what fairpod's submit costs on top of its HTTP stack (benchmarks/README.md, "The floor").
"""

# no `from __future__ import annotations`: FastAPI reads the route's annotations, which name classes imported in
# serve()
import argparse
import contextlib
import itertools
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _live import percentile, submit_all  # noqa: E402
from datacenter import SHAPES, job_body  # noqa: E402

TOKEN = "floor-token"


def serve(port: int) -> None:
    """The server: one route with a submit's HTTP part and nothing behind it."""
    import anyio
    import uvicorn
    from fastapi import FastAPI, Header, HTTPException
    from fastapi.responses import JSONResponse

    from fairpod.model.jobs import JobSpec
    from fairpod.server.api.app import api_threads, switch_interval

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = api_threads()
        sys.setswitchinterval(switch_interval())
        yield

    app = FastAPI(lifespan=lifespan)
    count = iter(range(1, 1 << 62))
    lock = threading.Lock()

    @app.post("/api/v1/jobs", status_code=201)
    def submit(spec: JobSpec, authorization: str | None = Header(default=None)) -> JSONResponse:
        if authorization != f"Bearer {TOKEN}":
            raise HTTPException(401, "no such token")
        with lock:
            n = next(count)
        return JSONResponse({"id": n, "name": spec.name, "team": spec.team, "state": "Pending",
                             "spec": spec.model_dump(mode="json")}, status_code=201)

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"pid": os.getpid()}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) of a process, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="how long the clients submit (default 20)")
    ap.add_argument("--threads", type=int, default=8, help="client threads (default 8, as datacenter.py)")
    ap.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.serve:
        serve(a.serve)
        return 0
    if a.seconds <= 0 or a.seconds > 3600 or not 1 <= a.threads <= 256:
        ap.error("--seconds must be in (0, 3600] and --threads in 1..256")
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port)], stdin=subprocess.DEVNULL)
    try:
        import http.client

        deadline = time.monotonic() + 60
        while True:  # up once /healthz answers with the pid of the process started here
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/healthz")
                r = c.getresponse()
                if r.status == 200 and json.loads(r.read()).get("pid") == proc.pid:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("http_floor: the server did not start")
            time.sleep(0.1)
        rng = random.Random(1)
        bodies = [job_body(f"f{i}", rng.randrange(500), SHAPES[rng.randrange(len(SHAPES))], 60.0)
                  for i in range(int(a.seconds * 20000))]
        srv = SimpleNamespace(port=port, token=TOKEN, addresses=["127.0.0.1"], spread=itertools.count())
        s0, c0, t0 = cpu_of(proc.pid), time.process_time(), time.monotonic()
        sent = submit_all(srv, bodies, a.threads, pace=len(bodies) / a.seconds, until=a.seconds)  # type: ignore[arg-type]
        took = time.monotonic() - t0
        s1, c1 = cpu_of(proc.pid), time.process_time()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    lat = [t1 - t0 for t0, t1, _ in sent]
    n = len(lat)
    r = {"benchmark": "http_floor", "requests": n, "seconds": took, "rate": n / took,
         "p50_ms": percentile(lat, 50) * 1000, "p99_ms": percentile(lat, 99) * 1000,
         "server_cpu_ms_per_request": (s1 - s0) / n * 1000, "client_cpu_ms_per_request": (c1 - c0) / n * 1000,
         "threads": a.threads, "load": os.getloadavg()}
    print(f"  submits (HTTP part only)   {r['rate']:.0f}/s ({n} in {took:.1f} s, {a.threads} client threads)")
    print(f"  p50 / p99                  {r['p50_ms']:.1f} / {r['p99_ms']:.1f} ms")
    print(f"  CPU per request            server {r['server_cpu_ms_per_request']:.2f} ms, "
          f"client {r['client_cpu_ms_per_request']:.2f} ms")
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
