"""A real multi-node Ray cluster on this machine for the tests: one ``ray start --block`` process per node,
every node on its own loopback address (head NET.2, then NET.3, NET.4, ... as if each were a host, so nothing
works by accident through 127.0.0.1; NET is 127.0.0 serially, one /24 per xdist worker under pytest-xdist), fake GPUs (``--num-gpus 4``) and fairpod instance-type resources.

Nodes are stopped by the PIDs this helper started (never ``ray stop``, which stops every Ray on the machine).
Short Ray health checks (500 ms apart, 10 failures) make a lost node visible in about 5 s.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from fairpod.executors import procs
from tests import reaper
from tests.ports import free_port, free_ports
from tests.server.conftest import _ticks

RAYSTART = Path(__file__).with_name("raystart.py")
ITYPE = "ml.g5.12xlarge"
# the /24 of loopback the suite's own addresses start from (standby control planes, Ray clusters); another
# checkout of fairpod running its tests on this machine at the same time sets another, e.g. 127.0.50
BASE = os.environ.get("FAIRPOD_TEST_LOOPBACK_NET", "127.0.0")


def beside(offset: int) -> str:
    """Another /24 of loopback, ``offset`` above ``BASE`` (127.0.0 -> 127.0.<offset>): for what runs on another
    worker at the same time as the session clusters (tests/conftest.py's groups), so none binds another's
    addresses."""
    a, b, c = BASE.split(".")
    return f"{a}.{b}.{(int(c) + offset) % 256}"


def _worker_net() -> str:
    """The /24 of this process's session cluster: ``BASE`` serially, and under pytest-xdist one per worker (gw0 ->
    10 above BASE, gw1 -> 11, ...), so that Ray tests in several groups would each have a cluster of their own."""
    w = os.environ.get("PYTEST_XDIST_WORKER", "")
    return beside(10 + int(w[2:])) if w.startswith("gw") and w[2:].isdigit() else BASE


NET = _worker_net()
HEAD_IP = f"{NET}.2"
# a lost node is noticed in ~5 s (10 failed checks, 500 ms apart: a killed raylet's port refuses each at once):
# fast for the tests that lose one, and not on a raylet that is only slow for a moment on a loaded 2-core machine
# (3 missed checks marked live nodes dead there; so did 10 with 1 s to answer each, in the suite's first minutes:
# now a check waits 5 s for its answer, and a raylet is dead after 55 s without one)
HEALTH_ENV = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "10",
              "RAY_health_check_timeout_ms": "5000", "RAY_health_check_initial_delay_ms": "1000"}
# what the test cluster's Ray does for nobody: no metrics recorded or exported (nothing scrapes them; fairpod reads
# none), no per-event timing stats, no memory monitor (Ray's own OOM killer, polling every 250 ms: the replicas'
# memory limits are fairpod's sandbox's, tests/ray/test_ray_sandbox.py). With the log monitor off (``ray start
# --include-log-monitor false``: it streams workers' output to drivers, and fairpod's drivers ask for none,
# log_to_driver=False) a node starts one Python process fewer. Measured alone, head and 4 workers: 46.1 s of CPU to
# start and 5.2 s per idle minute before, 35.5 s and 3.0 s after (docs/testing.md)
QUIET_ENV = {"RAY_enable_metrics_collection": "0", "RAY_event_stats": "0", "RAY_memory_monitor_refresh_ms": "0",
             # fairpod's server is this cluster's first driver: under the suite's load, prestarted workers that
             # miss Ray's registration timeout would hold its ray.init forever (docs/ray.md, "A loaded node")
             "RAY_prestart_worker_first_driver": "0"}



@dataclass
class RayNodeProc:
    name: str
    proc: subprocess.Popen
    log: Path
    node_id: str = ""
    pids: dict[int, int | None] = field(default_factory=dict)  # every process of the node: pid -> start time
    tdir: Path | None = None  # its --temp-dir
    old_sessions: set[str] = field(default_factory=set)  # the session directories there before this start

    def raylet_aborted(self) -> str:
        """The raylet's own abort on its fixed 15 s wait for a port file of its agents (Ray's 'Timed out waiting
        for file'), which leaves ``ray start`` waiting ~90 s more; '' when it did not (yet)."""
        if self.tdir is None:
            return ""
        for d in self.tdir.glob("session_2*"):
            if d.name not in self.old_sessions:
                try:
                    text = (d / "logs" / "raylet.out").read_text(errors="replace")
                except OSError:
                    continue
                if "Timed out waiting for file" in text:
                    return text[-3000:]
        return ""

    def remember(self) -> None:
        """Note every process of this node now (it is killed by these PIDs, also after re-parenting)."""
        for pid in [self.proc.pid, *procs.descendants(self.proc.pid)]:
            if pid not in self.pids:
                self.pids[pid] = procs.start_time(pid)


# what a worker's ``ray start`` prints when it gave up on GCS's first answer (a loaded machine), not a fault
TRANSIENT = ("Deadline Exceeded", "GCS cannot find the node", "Failed to get node info", "timed out during startup",
             "Timed out waiting for file")


class NodeExited(AssertionError):
    """A node's ``ray start`` ended while it was joining; ``log`` is the end of its log."""

    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


class RayTestCluster:
    def __init__(self, tmp: Path, net: str = NET) -> None:
        """A cluster whose head is ``<net>.2``, its nodes ``<net>.3``, ``<net>.4``, ..."""
        self.tmp = tmp
        self.net = net
        self.head_ip = f"{net}.2"
        self.temp_dir = Path(os.path.realpath("/tmp")) / f"fpray-{os.getpid()}-{int(time.time() * 1000) % 100000}"
        self.temp_dir.mkdir(parents=True)
        self.port = free_port()
        self.address = f"{self.head_ip}:{self.port}"
        self.nodes: dict[str, RayNodeProc] = {}
        self.ips: dict[str, str] = {}  # node name -> its address
        self.args: dict[str, list[str]] = {}  # node name -> the ``ray start`` arguments it was last started with
        self._next_ip = 3
        # no token authentication (loopback only): a token file another Ray left in ~/.ray would switch it on
        self.env = {**os.environ, **HEALTH_ENV, **QUIET_ENV, "AUTOSCALER_METRIC_PORT": str(free_port()),
                    "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
                    # the node agents' replicas get the suite's sandbox (tests/conftest.py: limits only; the cluster
                    # starts before that per-test setting, so it is given here)
                    "FAIRPOD_SANDBOX": "limits"}
        self.env.pop("RAY_ADDRESS", None)

    # -- nodes ------------------------------------------------------------------------------------
    def start_head(self) -> RayNodeProc:
        return self._start("head", ["--head", "--port", str(self.port), "--num-cpus", "1", "--num-gpus", "0",
                                    "--include-dashboard", "false", "--temp-dir", str(self.temp_dir)])

    def add_node(self, name: str, itype: str | None = ITYPE, gpus: int = 4, *, label: bool = False,
                 cpus: int = 2) -> RayNodeProc:
        return self.add_nodes([(name, itype, gpus, label, cpus)])[0]

    def add_nodes(self, specs: list[tuple[str, str | None, int, bool, int]],
                  labels: dict[str, str] | None = None) -> list[RayNodeProc]:
        """Start worker nodes (name, instance type, GPUs, type as a label, CPUs) at once, each with ``labels``
        (Ray node labels) if given; wait until all joined."""
        started = []
        for name, itype, gpus, label, cpus in specs:
            args = ["--address", self.address, "--num-cpus", str(cpus), "--num-gpus", str(gpus)]
            own = dict(labels or {})
            if itype and label:
                own["fairpod/instance-type"] = itype
            elif itype:
                args += ["--resources", json.dumps({f"fairpod/instance-type:{itype}": 1})]
            if own:
                args += ["--labels", ",".join(f"{k}={v}" for k, v in own.items())]
            started.append((name, args, self._spawn(name, args)))
        return [self._join(name, args, node) for name, args, node in started]

    def _start(self, name: str, args: list[str]) -> RayNodeProc:
        return self._join(name, args, self._spawn(name, args))

    def _join(self, name: str, args: list[str], node: RayNodeProc, tries: int = 5) -> RayNodeProc:
        """Wait until ``node`` is alive in GCS. A worker's ``ray start`` that gives up on its first call to GCS
        (Ray's own RPC deadline: 'Failed to get node info ... Deadline Exceeded', 'GCS cannot find the node', and
        its fixed 30 s wait for the raylet to register: 'timed out during startup') exits 1 on a loaded machine, and
        a raylet aborts when its agents' Python took more than Ray's fixed 15 s to write a port file ('Timed out
        waiting for file'); that start is made again, by the same name and address, ``tries`` times in all. Any other exit, or a node that never joins, fails at once."""
        for attempt in range(1, tries + 1):
            try:
                node.node_id = self._wait_alive(node)
            except NodeExited as e:
                if attempt == tries or not any(m in e.log for m in TRANSIENT):
                    raise
                self.stop_node(name)
                node = self._spawn(name, args)
                continue
            node.remember()
            return node
        raise AssertionError("unreachable")

    def _spawn(self, name: str, args: list[str]) -> RayNodeProc:
        log = self.tmp / f"ray-{name}.log"
        self.args[name] = args
        # each node its own temp dir: nodes started at once would otherwise race for the same socket names
        tdir = self.temp_dir if "--head" in args else self.temp_dir / name
        tdir.mkdir(parents=True, exist_ok=True)
        old = {d.name for d in tdir.glob("session_2*")}
        if "--temp-dir" not in args:
            args = [*args, "--temp-dir", str(tdir)]
        if "--head" in args:
            ip = self.head_ip
        else:
            ip = self.ips.get(name) or f"{self.net}.{self._next_ip}"
            self._next_ip += 0 if name in self.ips else 1
        self.ips[name] = ip
        cmd = [sys.executable, str(RAYSTART), "start", "--block", "--node-ip-address", ip,
               "--node-name", name, "--disable-usage-stats", "--include-log-monitor", "false", *agent_ports("--head" in args), *args]
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        reaper.started(proc.pid)
        node = RayNodeProc(name, proc, log, tdir=tdir, old_sessions=old)
        self.nodes[name] = node
        return node

    def _wait_alive(self, node: RayNodeProc, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node.proc.poll() is not None:
                tail = node.log.read_text(errors="replace")[-3000:]
                raise NodeExited(f"ray node {node.name} exited {node.proc.returncode}:\n{tail}", tail)
            if aborted := node.raylet_aborted():
                raise NodeExited(f"ray node {node.name}: its raylet aborted:\n{aborted}", aborted)
            for info in self.node_table():
                if info["name"] == node.name and info["alive"]:
                    return str(info["node_id"])
            time.sleep(0.2)
        raise AssertionError(f"ray node {node.name} did not join within {timeout:g} s")

    def node_table(self) -> list[dict[str, object]]:
        """Every node GCS knows: name, node_id, alive (read over loopback, without joining the cluster)."""
        from ray._raylet import GcsClient

        try:
            infos = GcsClient(address=self.address).get_all_node_info(timeout=5)
        except Exception:
            return []
        return [{"name": i.node_name, "node_id": nid.hex(), "alive": i.state == 0} for nid, i in infos.items()]

    def heal(self, names: list[str]) -> list[str]:
        """Start anew, by the same name, address and ``ray start`` arguments, each node of ``names`` that GCS no longer
        counts alive (Ray marks a node dead when its raylet misses its health checks, also a live one that a loaded
        machine left without CPU for seconds; a dead node never comes back by itself, and every later test would
        find its GPUs missing). Returns the names started anew; nothing when GCS does not answer (then nothing is known)."""
        table = self.node_table()
        alive = {str(i["node_id"]) for i in table if i["alive"]}
        if not alive:
            return []
        lost = [n for n in names if n in self.args and (n not in self.nodes or self.nodes[n].node_id not in alive)]
        for name in lost:
            if name in self.nodes:
                self.stop_node(name)
            print(f"ray test cluster: node {name} was no longer alive in GCS; started anew", file=sys.stderr)
            self._start(name, self.args[name])
        return lost

    def kill_node(self, name: str) -> list[int]:
        """Lose a node: SIGKILL its ``ray start`` process and its raylet (the machine itself goes on, so
        whatever ran there must notice and end). Returns the PIDs of its remaining processes."""
        node = self.nodes[name]
        node.remember()
        raylets = [p for p in node.pids if "raylet/raylet" in _cmd(p)]
        for pid in [node.proc.pid, *raylets]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        node.proc.wait(timeout=10)
        return [p for p in node.pids if p != node.proc.pid and p not in raylets and procs.alive(p, node.pids[p])]

    def stop_node(self, name: str) -> None:
        """Stop a node for good: SIGKILL to every process it started, by PID (and theirs)."""
        node = self.nodes.pop(name)
        for _ in range(50):
            node.remember()
            live = [p for p, st in node.pids.items() if procs.alive(p, st)]
            for p in live:
                for d in procs.descendants(p):
                    node.pids.setdefault(d, procs.start_time(d))
            live = [p for p, st in node.pids.items() if procs.alive(p, st)]
            if not live:
                break
            procs.signal_all(live, signal.SIGKILL)
            node.proc.poll()
            time.sleep(0.1)
        node.proc.poll()

    def shutdown(self) -> None:
        for name in [n for n in self.nodes if n != "head"] + (["head"] if "head" in self.nodes else []):
            self.stop_node(name)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def cpu(self, name: str) -> int:
        """CPU time so far of node ``name``'s processes (clock ticks): a progress measure for waits on what a node
        starts (a fairpod node agent is a Python worker Ray starts there, seconds of CPU on a loaded machine)."""
        node = self.nodes.get(name)
        if node is None:
            return 0
        node.remember()
        return sum(_ticks(pid) for pid in node.pids)

    def pids(self) -> set[int]:
        out: set[int] = set()
        for node in self.nodes.values():
            node.remember()
            out.update(p for p, st in node.pids.items() if procs.alive(p, st))
        return out


def agent_ports(head: bool = False) -> list[str]:
    """Every port of a node's agents given on the command line. A port left to the agent is one the raylet waits
    for in a file the agent writes once it started, a fixed 15 s per port (not a setting of this Ray): on a loaded
    2-core machine the agent's Python start took longer, the raylet aborted ('Timed out waiting for file
    .../metrics_agent_port_...') and its node never joined. With every port given, the raylet waits for none."""
    flags = ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
             "--metrics-export-port", *(("--dashboard-port",) if head else ()))  # all different (one by one, two
    # ports drawn for one node once were the same: "Ray component runtime_env_agent is trying to use a port number")
    return [a for flag, port in zip(flags, free_ports(len(flags)), strict=True) for a in (flag, str(port))]


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
