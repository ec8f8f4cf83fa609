#!/usr/bin/env python3
"""Submit-to-start latency and throughput of trivial real jobs (``true``) through the HTTP API.

A live server with the seed cluster (4 nodes x 4 accelerators, teams john and smith) and the real local
executor: every job is a supervisor process and a ``true`` process. Each job asks for 1 accelerator.

Two phases, each of ``--jobs`` jobs (default 1,000):

- paced: the jobs are sent at ``--rate`` jobs per second (open loop, below what the cluster can run, so no job
  waits for a free accelerator): the latency of the control plane itself;
- burst: the jobs are sent as fast as ``--clients`` concurrent clients can: throughput (jobs per second from
  the first submit to the last job finished) and latency under load (jobs then also wait for accelerators).

Latency is measured from the moment the client sends the request to the job's ``started_at`` as the server
recorded it (it sets it once the replicas' processes are launched), and to its ``finished_at``. The server's
own view (``started_at - submit_time``) leaves out the HTTP request.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _live import (  # noqa: E402
    LiveServer,
    exit_on_sigterm,
    fetch_jobs,
    json_line,
    percentile,
    self_cpu_seconds,
    submit_all,
    table,
    wait_all_finished,
)


def phase(srv: LiveServer, tag: str, n: int, clients: int, rate: float | None) -> dict:
    bodies = [{"name": f"{tag}-{i}", "team": "john" if i % 2 else "smith", "accelerators": 1,
               "command": ["true"], "termination_grace_seconds": 1} for i in range(n)]
    cpu0 = srv.server_cpu_seconds() or 0.0
    t0 = time.time()
    subs = submit_all(srv, bodies, clients, pace=rate)
    t_sub = time.time()
    wait_all_finished(srv, 900, interval=0.1)
    cpu1 = srv.server_cpu_seconds() or 0.0
    jobs = {j["id"]: j for j in fetch_jobs(srv)}
    sent = {jid: t for t, _, jid in subs}
    mine = [jobs[jid] for jid in sent]
    bad = [j for j in mine if j["state"] != "Succeeded"]
    start = [j["started_at"] - sent[j["id"]] for j in mine if j["started_at"]]
    fin = [j["finished_at"] - sent[j["id"]] for j in mine if j["finished_at"]]
    server_view = [j["started_at"] - j["submit_time"] for j in mine if j["started_at"]]
    http = [t1 - t0_ for t0_, t1, _ in subs]
    last = max(j["finished_at"] for j in mine)
    return {
        "jobs": n, "succeeded": n - len(bad), "rate": rate, "clients": clients,
        "start_p50_s": percentile(start, 50), "start_p95_s": percentile(start, 95),
        "start_p99_s": percentile(start, 99), "start_max_s": max(start),
        "finish_p50_s": percentile(fin, 50), "finish_p95_s": percentile(fin, 95),
        "server_start_p50_s": percentile(server_view, 50), "server_start_p95_s": percentile(server_view, 95),
        "http_p50_s": percentile(http, 50), "http_p95_s": percentile(http, 95),
        "submit_s": t_sub - t0, "wall_s": last - t0, "throughput_per_s": n / (last - t0),
        "server_cpu_s": cpu1 - cpu0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1000, help="jobs per phase (default 1000)")
    ap.add_argument("--rate", type=float, default=20.0, help="jobs per second in the paced phase (default 20)")
    ap.add_argument("--clients", type=int, default=4, help="concurrent HTTP clients (default 4)")
    ap.add_argument("--phase", choices=["both", "paced", "burst"], default="both", help="which phases (default both)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary FAIRPOD_HOME (printed)")
    a = ap.parse_args()
    exit_on_sigterm()
    load = os.getloadavg()[0]
    print(f"latency: {a.jobs} jobs of 'true' per phase, local executor (real processes), seed cluster of 16 "
          f"accelerators; load average {load:.1f} on {os.cpu_count()} cores", flush=True)
    out: dict = {"benchmark": "latency", "load_before": load, "cores": os.cpu_count()}
    rows = []
    c0 = self_cpu_seconds()
    with LiveServer(keep=a.keep) as srv:
        if a.keep:
            print(f"  state kept in {srv.tmp}")
        for name in ("paced", "burst"):
            if a.phase not in (name, "both"):
                continue
            r = phase(srv, name, a.jobs, a.clients, a.rate if name == "paced" else None)
            out[name] = r
            how = f"{a.rate:g} jobs/s sent" if name == "paced" else f"as fast as {a.clients} clients send"
            rows += [
                (f"{name}: jobs", f"{r['succeeded']}/{r['jobs']} Succeeded ({how}; all sent after {r['submit_s']:.1f} s)"),
                (f"{name}: submit -> started p50 / p95 / p99",
                 f"{r['start_p50_s'] * 1000:.0f} / {r['start_p95_s'] * 1000:.0f} / {r['start_p99_s'] * 1000:.0f} ms"),
                (f"{name}: submit -> finished p50 / p95",
                 f"{r['finish_p50_s'] * 1000:.0f} / {r['finish_p95_s'] * 1000:.0f} ms"),
                (f"{name}: server's view (submit_time -> started) p50 / p95",
                 f"{r['server_start_p50_s'] * 1000:.0f} / {r['server_start_p95_s'] * 1000:.0f} ms"),
                (f"{name}: HTTP submit p50 / p95", f"{r['http_p50_s'] * 1000:.0f} / {r['http_p95_s'] * 1000:.0f} ms"),
                (f"{name}: throughput", f"{r['throughput_per_s']:.1f} jobs/s ({r['wall_s']:.1f} s from first submit "
                                        f"to last finish)"),
                (f"{name}: server CPU", f"{r['server_cpu_s']:.1f} s ({r['server_cpu_s'] / r['jobs'] * 1000:.1f} ms per job)"),
            ]
    out["client_cpu_s"] = self_cpu_seconds() - c0
    print(table(rows))
    print(json_line(out))
    ok = all(out[p]["succeeded"] == out[p]["jobs"] for p in ("paced", "burst") if p in out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
