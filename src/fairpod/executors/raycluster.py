"""A Ray job's own Ray cluster, started inside its replicas: ``python -m fairpod.executors.raycluster -- ENTRYPOINT``.

fairpod runs a Ray job (``JobSpec.ray``) as a gang; each replica's command is this program, under any executor:

- **rank 0** starts the Ray head on ``MASTER_ADDR:MASTER_PORT`` (the attempt's free port), waits until every
  replica's node has joined (``WORLD_SIZE`` nodes), then runs the entrypoint with ``RAY_ADDRESS`` set, and exits
  with the entrypoint's code once it has stopped the Ray cluster;
- **the other ranks** wait for the head, join it, and stay until it is gone (then exit 0; 143 after a SIGTERM); a
  worker whose raylet dies meanwhile (or exits because the head marked its node dead) starts its Ray node again and
  joins the head as a new node, as a KubeRay worker pod restarted does (REJOINS times; then it exits 1);
- **started** means ALIVE in the head's node table: ``ray start`` exits 0 before the raylet has registered with
  the head, and a raylet that dies then (one died where it binds its port) is a failed ``ray start`` (stopped, tried
  again on other ports): :meth:`Cluster.came_up` asks the head's GCS (``alive``, a program of its own) within
  NODE_UP seconds, while the raylet runs;
- **resources**: each Ray node gets exactly what the replica was given: ``--num-gpus`` = its accelerators
  (``FAIRPOD_ACCELERATORS``; with real GPUs ``CUDA_VISIBLE_DEVICES`` names them, so Ray's GPU ids are those
  devices), ``--num-cpus`` = its vCPUs (``FAIRPOD_VCPU_MILLI``, rounded down, at least 1), ``--memory`` = its
  memory (``FAIRPOD_MEMORY_MIB``); every other Ray port is a free one, and the Ray processes' files live in a
  temporary directory of their own, so that several Ray jobs (and a Ray executor's cluster) share a machine;
- **stop**: the Ray processes run in a session of their own, so a stop's SIGTERM (sent to the replica's process
  group only: ``FAIRPOD_TERM_GROUP_FIRST``, see :mod:`fairpod.executors.supervisor`) reaches the entrypoint
  while its whole Ray cluster still runs (Ray Train can checkpoint; the workers keep their nodes until the head
  is gone); once the entrypoint has exited the head's Ray processes get SIGTERM, and SIGKILL 5 s later. The
  supervisor's SIGKILL after the job's grace period ends whatever is left.

**A standing cluster** (a service that is a Ray job: a KubeRay RayCluster, ``FAIRPOD_RAY_STANDING=1``): no
entrypoint, and each replica's Ray node is its service port (``PORT``, from ``FAIRPOD_SERVICE_PORTS``): rank 0's
is the head's GCS port (the first of the ports, which the workers join), a worker's its raylet's. Each replica keeps
:data:`READY` (in its private /tmp) from the moment its node is ALIVE in the head's table until it stops: the
service's readiness command (fairpod.model.services.RAY_NODE_READY) tests it. The head waits for no worker (they
come and go, each restarted on its own) and runs until its SIGTERM; a worker ends on its SIGTERM, when the head is
gone (the service starts it again, and it joins the head once that is back), or when its raylet is gone. An entrypoint, when given, runs against it once the head is up.
Serving (a RayService, ``$FAIRPOD_RAY_SERVE``): the head's GCS on the last service port, rank 0's ``PORT`` Serve's
HTTP proxy; the head stands while fairpod's Serve driver runs (``rayserve.py`` beside this file, on rank 0).

**KubeRay's settings** (fairpod.formats.kube.ray_start): ``$FAIRPOD_RAY_START_PARAMS``, each group's resource
flags for ``ray start`` (``APPLIED``), in place of fairpod's own; ``$FAIRPOD_RAY_KEEP_SECONDS`` keeps the cluster
that long after the entrypoint ends (``inf``: until the job is stopped), then exits with its code.

``python -m fairpod.executors.raycluster ray ARGS`` is ``ray ARGS`` keeping a loopback ``--node-ip-address``
(Ray's CLI would replace it with the machine's external address): a cluster on one machine stays on loopback.

Longer than fairpod's usual module: it runs as a lone file in a Ray job's image (``fairpod.sandbox.container``),
where nothing else of fairpod is.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

STANDING = "FAIRPOD_RAY_STANDING"  # "1": a standing cluster (a service), see the module's docstring
SERVE = "FAIRPOD_RAY_SERVE"  # a standing cluster's Ray Serve config (JSON, formats.kube.rayservice)
JOIN_TIMEOUT = 180.0  # seconds for the head to come up and every node to join
STARTS = 3  # tries of ``ray start``
REJOINS = 3  # times a job's worker whose raylet died while its head runs starts its Ray node again
NODE_UP = 120.0  # seconds for a node whose ``ray start`` exited 0 to be ALIVE in the head's node table, from the
# moment the check asks the head's GCS (a raylet that dies is seen at once); $FAIRPOD_RAY_NODE_UP sets it
CHECK_START = 900.0  # seconds for that check to start asking: a Python with Ray's client, 4.5 s of wall on an idle
# machine, minutes on a loaded one (a suite on 2 cores: the check of a node up long since failed at 120 s)
READY = "/tmp/fairpod-ray-ready-{port}"  # a standing cluster's replica: kept while its Ray node is up (model.jobs)
STOP_GRACE = 5.0  # seconds from SIGTERM to SIGKILL for the Ray processes once the entrypoint has exited
START_PARAMS = "FAIRPOD_RAY_START_PARAMS"  # {"head": {..}, "workers": [[replicas, {..}], ..]} (formats.kube.ray_start)
APPLIED = ("num-cpus", "num-gpus", "memory", "object-store-memory", "resources")  # the keys taken from it
KEEP = "FAIRPOD_RAY_KEEP_SECONDS"  # seconds the cluster stays after the entrypoint ends ("inf": until stopped)
# How long the head's GCS waits before it marks a Ray node dead that does not answer its health checks: Ray's own
# default (5 checks, 10 s each, 3 s apart: about a minute) marked a worker dead whose raylet was starved of CPU in its
# replica on a loaded machine, and the job ran on one Ray node of two. fairpod sees a replica that ends itself, so
# Ray may wait longer here: 10 checks of 30 s (a dead raylet refuses at once: 10 x 3 s). A job's own RAY_ setting wins.
HEALTH = {"RAY_health_check_timeout_ms": "30000", "RAY_health_check_failure_threshold": "10"}


def _free_ports(n: int) -> list[int]:
    """``n`` different ports free on every address of this machine (Ray binds some of its ports on all of them):
    held open together while they are chosen, so that no two are the same."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _say(msg: str) -> None:
    """A line of this launcher in the replica's log, with the time (UTC) as Ray's own lines carry theirs."""
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} fairpod ray: {msg}", file=sys.stderr, flush=True)


STORE_SHARE = 0.3  # of the replica's memory for Ray's object store (Ray's own default share of a machine's)
STORE_MIN_MIB = 80  # Ray refuses a smaller object store
SHM_USE = 0.9  # of /dev/shm's free space the store may take (Ray's workers put their own files there too)


def shm_free_mib(path: str = "/dev/shm") -> int | None:
    """What ``/dev/shm`` (the replica's own) has free, in MiB; None when there is none."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize // 2**20


def object_store_mib(mib: int, shm: int | None) -> tuple[int, str | None, bool]:
    """The object store of a Ray node in a replica of ``mib`` MiB whose /dev/shm has ``shm`` MiB free: 30 % of the
    memory, at most what /dev/shm holds; and what to say when that is less, or when not even Ray's minimum fits
    there (then Ray keeps its objects in /tmp instead, slower: RAY_OBJECT_STORE_ALLOW_SLOW_STORAGE, the third value
    True)."""
    want = max(STORE_MIN_MIB, int(mib * STORE_SHARE))
    if shm is None or want <= shm * SHM_USE:
        return want, None, False
    fits = int(shm * SHM_USE)
    if fits >= STORE_MIN_MIB:
        return fits, (f"object store {fits} MiB: {STORE_SHARE:.0%} of the replica's {mib} MiB would be {want} MiB, "
                      f"more than /dev/shm has free ({shm} MiB)"), False
    return want, (f"object store {want} MiB in /tmp, slower: /dev/shm has only {shm} MiB free, less than Ray's "
                  f"minimum {STORE_MIN_MIB} MiB"), True


def _sizes(env: dict[str, str], shm: int | None = None) -> list[str]:
    """``ray start``'s resource flags: exactly what the replica was given (the object store as
    :func:`object_store_mib` says, from ``shm`` MiB free in /dev/shm)."""
    gpus = len([a for a in env.get("FAIRPOD_ACCELERATORS", "").split(",") if a])
    cpus = max(1, int(env.get("FAIRPOD_VCPU_MILLI", "1000") or 1000) // 1000)
    mib = int(env.get("FAIRPOD_MEMORY_MIB", "0") or 0)
    flags = {"num-cpus": str(cpus), "num-gpus": str(gpus), "resources": json.dumps({})}
    if mib:
        flags.update({"memory": str(mib * 2**20), "object-store-memory": str(object_store_mib(mib, shm)[0] * 2**20)})
    flags.update(start_params(env))
    return [a for k, v in flags.items() for a in (f"--{k}", v)]


def start_params(env: dict[str, str]) -> dict[str, str]:
    """This rank's group's parameters of ``$FAIRPOD_RAY_START_PARAMS``: rank 0 the head's, the next ranks each
    worker group's in turn, ranks beyond them the last group's; only APPLIED keys, each a whole number (resources:
    a JSON object)."""
    text, rank = env.get(START_PARAMS), int(env.get("RANK", "0") or 0)
    if not text:
        return {}
    try:
        spec = json.loads(text)
        groups = [(1, spec.get("head") or {})] + [(int(n), p) for n, p in spec.get("workers") or []]
        left, params = rank, groups[-1][1]
        for n, p in groups:
            if left < n:
                params = p
                break
            left -= n
        out = {k: str(v) for k, v in params.items() if k in APPLIED}
        if not all(v.isdigit() or k == "resources" and isinstance(json.loads(v), dict) for k, v in out.items()):
            raise ValueError("a value is not a whole number (resources: a JSON object)")
    except (ValueError, TypeError, AttributeError) as e:
        raise SystemExit(f"fairpod ray: {START_PARAMS} is not the groups' parameters: {e}") from None
    return out


PORT_FLAGS = ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
              "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port",
              "--dashboard-port", "--ray-client-server-port")  # the last HEAD_ONLY: the head's
HEAD_ONLY = 2  # Ray Client's server is at 10001 unless given: a second head at one address had none, or the first's


def _ports(head: bool, raylet: int | None = None) -> tuple[list[str], str]:
    """``ray start``'s port flags (the head's own last; the raylet's ``raylet`` when given) and the autoscaler's
    metrics port: all different, chosen again for each try of ``ray start`` (a port taken meanwhile fails one try)."""
    flags: tuple[str, ...] = PORT_FLAGS if head else PORT_FLAGS[:-HEAD_ONLY]
    if raylet is not None:
        flags = flags[1:]
    *ports, metrics = _free_ports(len(flags) + 1)
    fixed = ["--node-manager-port", str(raylet)] if raylet is not None else []
    return fixed + [a for flag, port in zip(flags, ports, strict=True) for a in (flag, str(port))], str(metrics)


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


class Cluster:
    """This replica's Ray node: started by ``ray start`` in a session of its own, stopped by its process group."""

    def __init__(self) -> None:
        self.env = dict(os.environ)
        self.rank = int(self.env.get("RANK", "0"))
        self.world = int(self.env.get("WORLD_SIZE", "1"))
        self.host = self.env.get("MASTER_ADDR", "127.0.0.1")
        self.port = int(self.env.get("MASTER_PORT") or _free_ports(1)[0])
        self.standing = self.env.get(STANDING) == "1"
        self.raylet: int | None = None
        if self.standing:  # a service: the head's GCS on the first service port, each worker's raylet on its own
            ports = [p for p in self.env.get("FAIRPOD_SERVICE_PORTS", "").split(",") if p]
            if not ports:
                raise SystemExit(f"fairpod ray: {STANDING}=1 without FAIRPOD_SERVICE_PORTS (a service's ports)")
            self.port = int(ports[-1] if self.env.get(SERVE) else ports[0])  # Serve: rank 0's PORT is its HTTP
            self.raylet = None if self.rank == 0 else int(self.env.get("PORT") or ports[self.rank])
        self.tmp = tempfile.mkdtemp(prefix="fpray-", dir="/tmp")  # short: Ray's socket paths have a length limit
        self.pgid: int | None = None
        self.raylet_pid: int | None = None  # this node's raylet, once seen
        self.node_ports = ("", "")  # this try's raylet and object manager ports: how the head's table names it
        self.stopping = False
        self.ready = READY.format(port=self.env["PORT"]) if self.standing and self.env.get("PORT") else None

    def start(self) -> None:
        # this node's address: the Ray executor's node agents say it (FAIRPOD_NODE_ADDRESS); on the local executor
        # every replica runs on this machine, at the head's loopback address
        me = self.env.get("FAIRPOD_NODE_ADDRESS") or (self.host if self.host.startswith("127.") else "")
        shm = shm_free_mib()
        mib = int(self.env.get("FAIRPOD_MEMORY_MIB", "0") or 0)
        _, store_note, slow = object_store_mib(mib, shm) if mib else (0, None, False)
        if store_note:
            _say(f"rank {self.rank}: {store_note}")
        args = ["start", "--temp-dir", self.tmp, "--disable-usage-stats", *_sizes(self.env, shm)]
        if self.rank == 0:
            args += ["--head", "--port", str(self.port), "--include-dashboard", "false"]
        else:
            deadline = time.monotonic() + JOIN_TIMEOUT
            while not _reachable(self.host, self.port):
                if self.stopping or time.monotonic() > deadline:
                    raise SystemExit(f"fairpod ray: the head {self.host}:{self.port} did not come up")
                time.sleep(0.5)
            args += ["--address", f"{self.host}:{self.port}"]
        if me:
            args += ["--node-ip-address", me]
        env = {k: v for k, v in self.env.items() if k != "RAY_ADDRESS"}
        env.update(RAY_USAGE_STATS_ENABLED="0")
        env.setdefault("RAY_AUTH_MODE", "disabled")  # a token file another Ray left in ~/.ray would switch it on
        # Ray holds the first driver's registration until the raylet's prestarted workers register; on a loaded
        # node they can miss the registration timeout (60 s), are killed, and the driver then waits forever
        # (ray-project/ray#40131). Workers start on demand instead; a user's own setting wins.
        env.setdefault("RAY_prestart_worker_first_driver", "0")
        for key, value in HEALTH.items():
            env.setdefault(key, value)
        if slow:
            env["RAY_OBJECT_STORE_ALLOW_SLOW_STORAGE"] = "1"
        for tries in range(STARTS, 0, -1):  # a loaded machine may miss Ray's own 30 s start-up limit
            ports, env["AUTOSCALER_METRIC_PORT"] = _ports(self.rank == 0, self.raylet)
            proc = subprocess.Popen([*_myself(), "ray", *args, *ports],
                                    env=env, start_new_session=True, stdout=sys.stderr, stderr=sys.stderr)
            self.pgid = proc.pid
            self.node_ports = (ports[ports.index("--node-manager-port") + 1],
                               ports[ports.index("--object-manager-port") + 1])  # the latter new on each try
            # ``ray start`` exits 0 once it has started the processes, before the raylet has registered with the
            # head: a raylet that dies then (a port it cannot bind after all) is a failed start too
            why = f"exit {proc.returncode}" if proc.wait() != 0 else self.came_up(me, env)
            if not why:
                break
            self.stop(keep_dir=tries > 1)
            if tries == 1 or self.stopping:
                raise SystemExit(f"fairpod ray: ray start failed ({why}) on rank {self.rank}")
            _say(f"rank {self.rank}: ray start failed ({why}); once more, on other ports")
        _say(f"rank {self.rank}: Ray node up ({'head' if self.rank == 0 else 'worker'}, "
             f"{' '.join(_sizes(self.env, shm)[:4])})")

    def came_up(self, address: str, env: dict[str, str]) -> str:
        """After ``ray start`` exited 0: "" once this node is ALIVE in the head's node table (its raylet registered),
        else why not: its raylet is gone, or it is not there within NODE_UP seconds of the head's GCS answering the
        check. Asked by a short program of its own (``alive``), so that this launcher, which stays for the node's
        life, does not hold Ray's client. Only what the check sees counts against NODE_UP, not its start: on a
        loaded machine importing Ray's client takes minutes, and a node failed for that would start again for
        nothing (and its head with it). A worker whose head is gone meanwhile (its job ended) is done: "" too, and
        :func:`run` sees the head gone."""
        check = subprocess.Popen([*_myself(), "alive", f"{self.host}:{self.port}", address, *self.node_ports],
                                 env=env, stdout=subprocess.PIPE, stderr=sys.stderr)
        assert check.stdout is not None
        os.set_blocking(check.stdout.fileno(), False)
        node_up = _node_up(self.env)
        said, deadline, asking = b"", None, time.monotonic() + CHECK_START
        try:
            while check.poll() is None:
                if not self.up():
                    return "its raylet exited after ray start"
                said += check.stdout.read() or b""
                if deadline is None and b"asking" in said:
                    deadline = time.monotonic() + node_up
                if self.stopping or (deadline is not None and time.monotonic() > deadline):
                    return f"not ALIVE in the head's node table within {node_up:g} s"
                if deadline is None and time.monotonic() > asking:
                    return f"its check of the head's node table did not start in {CHECK_START:g} s"
                if self.rank != 0 and not _reachable(self.host, self.port):
                    _say(f"rank {self.rank}: the head {self.host}:{self.port} is gone")
                    return ""
                time.sleep(0.2)
        finally:
            if check.poll() is None:
                check.kill()
                check.wait()
            check.stdout.close()
        if check.returncode != 0:
            return f"its check of the head's node table failed (exit {check.returncode})"
        return "" if self.up() else "its raylet exited after ray start"

    def mark_ready(self, up: bool) -> None:
        """A standing cluster's replica keeps :data:`READY` while its node is up (the service's readiness command
        tests it)."""
        if self.ready is None:
            return
        if up:
            with open(self.ready, "w"):
                pass
        else:
            try:
                os.unlink(self.ready)
            except FileNotFoundError:
                pass

    def up(self) -> bool:
        """Is this node's raylet still running? (Found once in ray start's session, then that process is read.)"""
        if self.raylet_pid is None or not _is_raylet(self.raylet_pid, self.pgid):
            self.raylet_pid = _raylet(self.pgid)
        return self.raylet_pid is not None

    def raylet_said(self, tail: int = 4096) -> str:
        """The end of this node's raylet logs (what Ray said before the raylet ended), for the replica's log."""
        out = []
        for name in ("raylet.err", "raylet.out"):
            try:
                with open(os.path.join(self.tmp, "session_latest", "logs", name), "rb") as f:
                    start = max(0, f.seek(0, os.SEEK_END) - tail)
                    f.seek(start)
                    lines = f.read().decode(errors="replace").splitlines()[1 if start else 0:][-5:]  # whole lines
            except OSError:
                continue
            out += [f"  {name}: {ln}" for ln in lines if ln.strip()]
        return "\n".join(out)

    def driver_env(self) -> dict[str, str]:
        """What a Ray driver on this node needs: ``RAY_ADDRESS``, and on 127.0.0.1 that Ray keep it (its drivers
        would replace 127.0.0.1 with the machine's external address, where this cluster does not listen)."""
        out = {"RAY_ADDRESS": f"{self.host}:{self.port}"}
        if self.host == "127.0.0.1":
            out["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # Ray's switch for "this machine only": loopback
        return out

    def wait_nodes(self) -> None:
        """Rank 0: until every replica's Ray node has joined, read from the head's node table (GCS) without joining
        the cluster as a driver: a driver here would cost its own start and a Python worker Ray starts for it on the
        head, a few CPU seconds each (on a loaded machine a minute of wall), before the entrypoint's own driver. An
        image's Ray without that client (older than this one) is asked as a driver."""
        try:
            from ray._raylet import GcsClient  # type: ignore[attr-defined]  # compiled; its stub omits it

            gcs = GcsClient(address=f"{self.host}:{self.port}")
            gcs.get_all_node_info  # noqa: B018 - present since Ray 2.10
        except (ImportError, AttributeError, TypeError):
            return self._wait_nodes_as_driver()
        self._until(lambda: _alive_nodes(gcs))

    def _wait_nodes_as_driver(self) -> None:
        os.environ.update(self.driver_env())
        import ray

        ray.init(address=f"{self.host}:{self.port}", logging_level="ERROR", log_to_driver=False)  # type: ignore[arg-type]  # Ray takes a level's name
        try:
            self._until(lambda: sum(1 for n in ray.nodes() if n.get("Alive")))
        finally:
            ray.shutdown()

    def _until(self, alive: Callable[[], int]) -> None:
        deadline = time.monotonic() + JOIN_TIMEOUT
        while alive() < self.world:
            if self.stopping or time.monotonic() > deadline:
                raise SystemExit(f"fairpod ray: {self.world} nodes did not join in {JOIN_TIMEOUT:g} s")
            time.sleep(0.5)

    def stop(self, keep_dir: bool = False) -> None:
        """SIGTERM to the Ray processes, SIGKILL to what is left after STOP_GRACE seconds."""
        if self.pgid is not None:
            for sig, wait in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, 0.0)):
                try:
                    os.killpg(self.pgid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + wait
                while time.monotonic() < deadline and _group_alive(self.pgid):
                    time.sleep(0.1)
        if not keep_dir:
            shutil.rmtree(self.tmp, ignore_errors=True)


def _node_up(env: dict[str, str]) -> float:
    """NODE_UP, or ``$FAIRPOD_RAY_NODE_UP`` seconds; one line, not a traceback, for a value that is not one."""
    text = env.get("FAIRPOD_RAY_NODE_UP")
    try:
        seconds = float(text) if text else NODE_UP
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise SystemExit(f"fairpod ray: FAIRPOD_RAY_NODE_UP is not a number of seconds > 0: {text!r}")
    return seconds


def _alive_nodes(gcs: object) -> int:
    """How many Ray nodes the head's GCS holds alive and whose raylet's port answers (0 while it does not answer).
    A worker's try whose raylet died (it starts again on other ports) stays ALIVE in the table until the head's
    health checks have missed it (HEALTH: 30 s), and was counted as a node that had joined."""
    try:
        infos = gcs.get_all_node_info(timeout=30)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - GCS not answering yet (or for a moment): ask again
        return 0
    raylets = {(i.node_manager_address, i.node_manager_port) for i in infos.values() if i.state == 0}  # ALIVE
    return sum(1 for host, port in raylets if _reachable(host, port))


def _raylet(pgid: int | None) -> int | None:
    """The ``raylet`` running in the session ``ray start`` was started in (``pgid``: its session), read from
    /proc; None when there is none."""
    if pgid is None:
        return None
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return None
    return next((pid for pid in pids if _is_raylet(pid, pgid)), None)


def _is_raylet(pid: int, session: int | None) -> bool:
    """Is process ``pid`` a running (not a zombie) ``raylet`` of ``session``?"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
    return comm == "raylet" and rest[0] != "Z" and int(rest[3]) == session  # fields: state ppid pgrp session


def alive(gcs: str, address: str, port: int, objects: int) -> int:
    """``alive GCS ADDRESS PORT OBJECTS``: wait until the head's node table at ``GCS`` holds the node whose raylet
    is on ``ADDRESS:PORT`` and object manager on ``OBJECTS`` ALIVE (exit 0); prints ``asking`` once it has Ray's
    client (the launcher's NODE_UP counts from then); the launcher bounds the wait and ends it. (A standing worker's
    raylet keeps its port from try to try: a node of an earlier try, its raylet dead, is ALIVE there until the
    head's health checks have missed it, but had another object manager port.) A Ray without the GCS client (older
    than 2.10) is asked as a driver (``ray.nodes()``)."""
    try:
        from ray._raylet import GcsClient  # type: ignore[attr-defined]  # compiled; its stub omits it

        def connect() -> Callable[[], list[tuple[str, int, int, bool]]]:
            client = GcsClient(address=gcs)
            return lambda: [(i.node_manager_address, i.node_manager_port, i.object_manager_port, i.state == 0)
                            for i in client.get_all_node_info(timeout=30).values()]  # state 0: ALIVE
    except (ImportError, AttributeError, TypeError):
        import ray

        def connect() -> Callable[[], list[tuple[str, int, int, bool]]]:
            ray.init(address=gcs, logging_level="ERROR", log_to_driver=False)  # type: ignore[arg-type]  # a level's name
            return lambda: [(n["NodeManagerAddress"], n["NodeManagerPort"], n["ObjectManagerPort"], n["Alive"])
                            for n in ray.nodes()]
    nodes = None
    while nodes is None:
        try:  # the head's GCS may not answer in its client's time on a loaded machine: again
            nodes = connect()
        except Exception:  # noqa: BLE001 - Ray's RpcError, ConnectionError, TimeoutError ...
            time.sleep(1.0)
    print("asking", flush=True)
    while True:
        try:
            if any(ok and (p, o) == (port, objects) and (a == address or not address) for a, p, o, ok in nodes()):
                return 0
        except Exception:  # noqa: BLE001 - the GCS not answering for a moment: ask again
            pass
        time.sleep(0.5)


def _myself() -> list[str]:
    """This program: the module of an installed fairpod, or (in a container image, where fairpod is not installed)
    the file bound in, run by the image's Python."""
    if __package__:
        return [sys.executable, "-m", "fairpod.executors.raycluster"]
    return [sys.executable, os.path.abspath(__file__)]


RUNTIME_ENV = "FAIRPOD_RAY_RUNTIME_ENV"  # a job's Ray runtime environment (JSON), for its entrypoint's driver


def job_config(env: dict[str, str]) -> dict[str, str]:
    """The entrypoint's Ray job config: the runtime environment of ``$FAIRPOD_RAY_RUNTIME_ENV`` (a KubeRay
    RayJob's ``runtimeEnvYAML``, its ``pip``, ``conda``, a remote ``working_dir``, ...) in the variable Ray's job
    submission gives a driver, which ``ray.init`` reads, so Ray sets it up for the job's tasks and actors as on a
    KubeRay cluster. Only the entrypoint gets it (not the launcher's own check of the nodes)."""
    text = env.get(RUNTIME_ENV)
    if not text:
        return {}
    try:
        runtime_env = json.loads(text)
    except ValueError as e:
        raise SystemExit(f"fairpod ray: {RUNTIME_ENV} is not JSON: {e}") from None
    if not isinstance(runtime_env, dict):
        raise SystemExit(f"fairpod ray: {RUNTIME_ENV} is not a JSON object")
    return {"RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"runtime_env": runtime_env})}


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def run(entrypoint: list[str]) -> int:
    c = Cluster()
    child: subprocess.Popen[bytes] | None = None

    def term(signum: int, _frame: object) -> None:
        c.stopping = True  # the entrypoint, in this process group, got the same SIGTERM: it ends first
        if child is None and (c.rank == 0 or c.pgid is None):
            raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, term)
    try:
        c.start()
        c.mark_ready(True)
        if c.rank != 0:  # a worker's Ray node serves until the head is gone, also after a stop's SIGTERM:
            rejoined = 0  # the entrypoint may still use it while it saves its checkpoint
            while _reachable(c.host, c.port):
                if c.standing and c.stopping:  # a standing cluster's worker: no entrypoint to wait for
                    break
                if not c.up():  # its raylet died (or the head marked its node dead and it exited)
                    if c.stopping and not c.standing:  # a job's worker being stopped: its node is done
                        break
                    said = c.raylet_said()
                    ends = f"; its log ends:\n{said}" if said else ""
                    if c.standing or rejoined == REJOINS:  # a service's replica starts again
                        _say(f"rank {c.rank}: the Ray node's raylet is gone{ends}")
                        return 1
                    rejoined += 1  # a job's worker joins its head again as a new node, as a KubeRay worker pod
                    _say(f"rank {c.rank}: the Ray node's raylet is gone; joining the head again "
                         f"({rejoined} of {REJOINS}){ends}")
                    c.stop(keep_dir=True)
                    if not _reachable(c.host, c.port):  # the head is gone meanwhile: its job has ended
                        break
                    c.start()
                time.sleep(0.5)
            return 0 if not c.stopping else 128 + signal.SIGTERM
        if c.standing:
            return _stand(c, entrypoint)
        c.wait_nodes()
        signal.signal(signal.SIGTERM, term)  # a Ray driver of wait_nodes puts its own handler in its place
        _say(f"{c.world} Ray nodes joined; running the entrypoint against {c.host}:{c.port}")
        child = subprocess.Popen(entrypoint, env={**c.env, **c.driver_env(), **job_config(c.env)})
        while True:
            try:
                code = child.wait()
                break
            except InterruptedError:
                continue
        try:
            keep = float(c.env.get(KEEP) or 0)
        except ValueError:
            raise SystemExit(f"fairpod ray: {KEEP} is not a number of seconds (or inf)") from None
        if keep > 0 and not c.stopping:  # KubeRay's shutdownAfterJobFinishes false / ttlSecondsAfterFinished
            _say(f"the entrypoint exited {code}; the Ray cluster at {c.host}:{c.port} stays "
                 + ("until the job is stopped" if keep == float("inf") else f"{keep:g} s"))
            until = time.monotonic() + keep
            while not c.stopping and time.monotonic() < until:
                time.sleep(0.5)
        return code
    finally:
        c.mark_ready(False)
        c.stop()


def _stand(c: Cluster, entrypoint: list[str]) -> int:
    """Rank 0 of a standing cluster: its entrypoint (if any) against it, then on until SIGTERM or the head's end."""
    _say(f"standing Ray cluster: head at {c.host}:{c.port}; attach with RAY_ADDRESS={c.host}:{c.port}")
    if entrypoint:
        code = subprocess.call(entrypoint, env={**c.env, **c.driver_env(), **job_config(c.env)})
        if code != 0:
            return code
    serve = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "rayserve.py")],
                             env={**c.env, **c.driver_env()}) if c.env.get(SERVE) else None
    while c.up() and _reachable(c.host, c.port):
        if serve is not None and serve.poll() is not None:
            _say(f"Ray Serve's driver exited {serve.returncode}")
            return serve.returncode or 1
        time.sleep(0.5)
    c.mark_ready(False)
    _say("the Ray head is gone" if c.up() else "the Ray head's raylet is gone")
    return 1


def ray_cli(args: list[str]) -> None:
    import ray._private.services as services
    from ray._private.utils import get_ray_client_dependency_error
    from ray.scripts.scripts import main

    if "--ray-client-server-port" in args and get_ray_client_dependency_error() is not None:
        i = args.index("--ray-client-server-port")  # a minimal Ray (an image's) has no Ray Client; refuses the port
        del args[i:i + 2]
    services.resolve_ip_for_localhost = lambda host: host  # a loopback node stays on loopback
    raylet_told_agent_port(services)
    sys.argv = ["ray", *args]
    main()


def raylet_told_agent_port(services: Any) -> None:
    """Make ``ray start`` give the raylet the dashboard agent's listen port it gives the agent. Ray (2.5x) gives it
    the agent only: the raylet waits a fixed 15 s for the file the agent writes once started, then aborts ('Timed
    out waiting for file .../dashboard_agent_listen_port_...'; a loaded machine's agent took longer). With the port
    on its command line (a flag the raylet has), it waits for no file. No port given: as Ray does."""
    from ray._private import ray_constants

    start_raylet, start_process = services.start_raylet, services.start_ray_process

    def with_port(*args: Any, **kwargs: Any) -> Any:
        port = kwargs.get("dashboard_agent_listen_port")
        if not port:
            return start_raylet(*args, **kwargs)

        def start(command: list[str], process_type: str, *a: Any, **kw: Any) -> Any:
            if process_type == ray_constants.PROCESS_TYPE_RAYLET and not any(
                    c.startswith("--dashboard_agent_listen_port") for c in command):
                command = [*command, f"--dashboard_agent_listen_port={port}"]
            return start_process(command, process_type, *a, **kw)

        services.start_ray_process = start
        try:
            return start_raylet(*args, **kwargs)
        finally:
            services.start_ray_process = start_process

    services.start_raylet = with_port


def main(argv: list[str]) -> int:
    if argv[:1] == ["ray"]:
        ray_cli(argv[1:])
        return 0
    if argv[:1] == ["alive"] and len(argv) == 5:
        return alive(argv[1], argv[2], int(argv[3]), int(argv[4]))
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv and os.environ.get(STANDING) != "1":
        print("usage: python -m fairpod.executors.raycluster -- ENTRYPOINT ...", file=sys.stderr)
        return 2
    return run(argv)


if __name__ == "__main__":
    if not __package__:  # run by its file: its directory (fairpod/executors, with fairpod's own ray.py) off the path
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.exit(main(sys.argv[1:]))
