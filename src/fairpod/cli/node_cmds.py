"""The node commands: list, cordon, uncordon, drain, reboot, replace, check, inject-fault, health."""

from __future__ import annotations

import argparse
import shlex
import sys

from fairpod.cli.client import Client
from fairpod.cli.output import add_output, emit, fmt, natural, table

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    n = sub.add_parser("node", help="list, cordon, reboot, replace and check nodes",
                       description="Nodes: their health, deep health checks, accelerators and jobs; admins cordon, "
                       "reboot, replace and check them.").add_subparsers(dest="node_cmd", metavar="ACTION",
                                                                          required=True)
    p = n.add_parser("list", help="list nodes: health, deep check, accelerators free, jobs")
    add_output(p)
    p.set_defaults(func=node_list)
    for action, hlp in [("cordon", "take a node out of scheduling (its jobs keep running)"),
                        ("uncordon", "let the engine place work on a node again"),
                        ("reboot", "reboot a node: its jobs stop (auto-resume restarts them elsewhere), then deep checks"),
                        ("replace", "replace a node with a fresh one of the same type, then deep checks"),
                        ("check", "run the node's deep health checks now (it takes no work while they run)")]:
        p = n.add_parser(action, help=f"{hlp} (admin)", description=f"{hlp[0].upper()}{hlp[1:]}.")
        p.add_argument("node", nargs="+", help="node name(s)")
        p.set_defaults(func=lambda a, act=action: node_do(a.node, act))
    p = n.add_parser("quarantine", help="no new work on a suspect node; its jobs keep running (admin)",
                     description="Quarantine nodes: the engine places no new work there, the jobs on them keep "
                     "running, and the fault type and reason are shown in 'node list', -o json (status_labels) and "
                     "the metric fairpod_node_status until 'node unquarantine', a reboot or a replacement.")
    p.add_argument("node", nargs="+", help="node name(s)")
    p.add_argument("--fault-type", default="Quarantined", metavar="TYPE", help="e.g. NvidiaXid (default %(default)s)")
    p.add_argument("--reason", default="", metavar="TEXT", help="why (default: quarantined by you)")
    p.set_defaults(func=node_quarantine)
    p = n.add_parser("unquarantine", help="let the engine place work on a quarantined node again (admin)",
                     description="Release quarantined nodes: they take new work again and their fault is cleared.")
    p.add_argument("node", nargs="+", help="node name(s)")
    p.set_defaults(func=lambda a: node_do(a.node, "unquarantine"))
    p = n.add_parser("drain", help="cordon nodes and wait until their running jobs have ended (admin)",
                     description="Slurm's 'scontrol update nodename=N state=drain': cordon the nodes (no new work), "
                     "then wait until no job runs on them; the jobs are not stopped. Exit 1 if --timeout passes "
                     "first (the nodes stay cordoned).")
    p.add_argument("node", nargs="+", help="node name(s)")
    p.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                   help="how long to wait (default %(default)g; 0: cordon only)")
    p.set_defaults(func=node_drain)
    p = n.add_parser("inject-fault", help="make the node's next check see a fault (admin; for tests and demos)",
                     description="Inject a fault into a node's readings: its next health check sees it through "
                     "the same code path as a real fault. A reboot clears xid, heartbeat-lost and disk-full; "
                     "only a replacement clears gpu-lost and stress-fail.")
    p.add_argument("node", help="node name")
    p.add_argument("--kind", required=True, choices=["xid", "gpu-lost", "heartbeat-lost", "disk-full", "stress-fail"])
    p.set_defaults(func=lambda a: print(
        f"node {Client().post(f'/nodes/{a.node}/inject-fault', {'kind': a.kind})['name']}: {a.kind} injected"))
    p = n.add_parser("health", help="a node's health labels and its deep-health-check results (JSON events)")
    p.add_argument("node", help="node name")
    add_output(p)
    p.set_defaults(func=node_health)


def gpu_text(nd: dict[str, Any]) -> str:
    """'NVIDIA H100 80GB HBM3, 79.6 GiB (real)' from what the last deep check read; else the catalog's kind."""
    gpu = nd.get("gpu") or {}
    model = gpu.get("model") or nd.get("accelerator_kind") or "-"
    mem = f", {gpu['memory_mib'] / 1024:.1f} GiB" if gpu.get("memory_mib") else ""
    real = " (real)" if nd.get("accelerators_are") == "gpus" else ""
    return f"{model}{mem}{real}"


def engine_text(c: dict[str, Any] | None) -> str:
    """'podman 4.3.1/runc, 2 images' (the list: -o json); '-' where there is none or fairpod cannot tell."""
    if not c or not c.get("engine"):
        return "-"
    n = len(c.get("images") or [])
    return f"{c['engine']}/{c['runtime']}, {n} image{'s' if n != 1 else ''}"


def node_list(a: argparse.Namespace) -> int:
    nodes = sorted(Client().get("/nodes")["nodes"], key=lambda nd: natural(nd["name"]))
    if emit(nodes, a.output):
        return 0
    rows = [{**nd, "acc": f"{nd['accelerators_free']}/{nd['accelerators']} free", "gpus": gpu_text(nd),
             "topo": " ".join(f"{lv}={d}" for lv, d in (nd.get("topology") or {}).items()),
             "enf": ",".join(k for k, v in (nd.get("enforced") or {}).items() if v) or "-",
             "engine": engine_text(nd.get("containers")),
             "fault": f"{nd['fault_type']}: {nd.get('fault_reason') or ''}" if nd.get("fault_type") else "-"}
            for nd in nodes]
    cols = [("name", "NODE"), ("instance_type", "INSTANCE TYPE"), ("gpus", "GPU"), ("health_status", "HEALTH"),
            ("deep_health_check", "DEEP CHECK"), ("cordoned", "CORDONED"), ("acc", "ACCELERATORS"), ("jobs", "JOB IDS"),
            ("enf", "ENFORCED"), ("fault", "FAULT"), ("engine", "CONTAINERS")]
    if any(nd.get("topology") for nd in nodes):
        cols.append(("topo", "TOPOLOGY"))
    table(rows, cols)
    return 0


def node_do(nodes: list[str], action: str) -> int:
    c = Client()
    for name in nodes:
        nd = c.post(f"/nodes/{name}/{action}")
        print(f"node {nd['name']}: {action} " + ("done" if action in ("cordon", "uncordon", "unquarantine")
                                                 else "requested")
              + f" (health {nd['health_status']})")
    return 0


def node_quarantine(a: argparse.Namespace) -> int:
    c = Client()
    for name in a.node:
        body = {"fault_type": a.fault_type, **({"reason": a.reason} if a.reason else {})}
        nd = c.post(f"/nodes/{name}/quarantine", body)
        print(f"node {nd['name']}: quarantined ({nd['fault_type']}: {nd['fault_reason']}); its jobs keep running")
    return 0


DRAIN_POLL = 1.0  # seconds between looks at the jobs of draining nodes


def node_drain(a: argparse.Namespace) -> int:
    import time

    node_do(a.node, "cordon")
    c = Client()
    deadline = time.monotonic() + a.timeout
    said: dict[str, tuple[str, ...]] = {}
    while True:
        busy = {nd["name"]: tuple(map(str, nd.get("jobs") or ())) for nd in c.get("/nodes")["nodes"]
                if nd["name"] in a.node and nd.get("jobs")}
        if not busy:
            print(f"drained: {', '.join(a.node)} (cordoned, no jobs running)")
            return 0
        for name, jobs in busy.items():
            if said.get(name) != jobs:
                print(f"node {name}: waiting for {len(jobs)} job(s) to end: {', '.join(jobs)}", flush=True)
                said[name] = jobs
        if time.monotonic() >= deadline:
            print(f"fairpod: error: --timeout {a.timeout:g} s passed with jobs still running on "
                  f"{', '.join(sorted(busy))} (cordoned; 'fairpod node drain' again waits on)", file=sys.stderr)
            return 1
        time.sleep(min(DRAIN_POLL, max(0.0, deadline - time.monotonic())))


def node_health(a: argparse.Namespace) -> int:
    res = Client().get(f"/nodes/{a.node}/health")
    if emit(res, a.output):
        return 0
    nd = res["node"]
    print(f"node {nd['name']}: {nd['health_status']}, deep-health-check {nd['deep_health_check'] or '-'}"
          + (f", last fault {nd['fault_type']}: {nd['fault_reason']}" if nd["fault_type"] else ""))
    for e in res["checks"]:
        vals = {k: v for k, v in e.items() if k not in ("level", "ts", "node", "check", "msg")}
        # key=value, as the rest of the line; a value with a space quoted ("name:virtual slot" of a GPU reading)
        figures = " ".join(f"{k}={shlex.quote(fmt(v))}" for k, v in vals.items())
        print(f"  {e['level']:<7} {e['check']:<20} {e['msg']}" + (f"  ({figures})" if vals else ""))
    for e in res["events"][-10:]:
        print(f"  event   {e['kind']:<20} {e['message']}")
    return 0
