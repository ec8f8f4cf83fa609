"""The step server every node of a batch job runs: it starts ``srun``'s tasks on its node and streams their
output and exit back (see :mod:`fairpod.formats.slurm.wire` for the messages).

Each task runs in its own process group with ``srun``'s environment, overlaid with what belongs to this node
(its name, its accelerators) and the task's place in the step (``SLURM_PROCID``, ``SLURM_LOCALID``,
``SLURM_NODEID``, and ``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` for ``env://`` initialisation). When a task's
main process ends, what it left behind in its process group is stopped. When ``srun`` goes away, its tasks
are stopped.
"""

from __future__ import annotations

import hmac
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fairpod.formats.slurm.wire import Conn, WireError, b64, write_private

# variables that describe the node a task runs on: taken from this node's replica, not from srun's caller
NODE_LOCAL = ("FAIRPOD_NODE", "FAIRPOD_ACCELERATORS", "CUDA_VISIBLE_DEVICES", "NODE_RANK", "SLURMD_NODENAME",
              "SLURM_JOB_GPUS", "SLURM_TOPOLOGY_ADDR", "HOSTNAME")
LEFTOVER_GRACE = 5.0


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Step:
    """One ``srun`` request on this node: its tasks, their output pumps and the connection to srun."""

    def __init__(self, server: StepServer, conn: Conn, req: dict[str, Any]) -> None:
        self.server = server
        self.conn = conn
        self.req = req
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.signalled: set[int] = set()
        self.srun_gone = False

    def _send(self, msg: dict[str, Any]) -> None:
        if self.srun_gone:
            return
        try:
            self.conn.send(msg)
        except OSError:
            self.srun_gone = True
            self.signal(signal.SIGTERM)

    def signal(self, sig: int) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                _killpg(p.pid, sig)

    def _env(self, task: dict[str, Any]) -> dict[str, str]:
        env = {str(k): str(v) for k, v in (self.req.get("env") or {}).items()}
        for k in NODE_LOCAL:
            if k in os.environ:
                env[k] = os.environ[k]
            else:
                env.pop(k, None)
        ntasks = int(self.req["ntasks"])
        env.update(
            SLURM_PROCID=str(task["procid"]), SLURM_LOCALID=str(task["localid"]),
            SLURM_NODEID=str(self.req["nodeid"]), SLURM_STEP_ID=str(self.req["step"]),
            SLURM_STEPID=str(self.req["step"]), SLURM_NTASKS=str(ntasks), SLURM_NPROCS=str(ntasks),
            SLURM_STEP_NUM_TASKS=str(ntasks), SLURM_STEP_NUM_NODES=str(self.req["nnodes"]),
            SLURM_STEP_NODELIST=str(self.req["nodelist"]), SLURM_STEP_TASKS_PER_NODE=str(self.req["tasks_per_node"]),
            RANK=str(task["procid"]), LOCAL_RANK=str(task["localid"]), WORLD_SIZE=str(ntasks),
            LOCAL_WORLD_SIZE=str(len(self.req["tasks"])),
        )  # fmt: skip
        return env

    def _pump(self, procid: int, fd: int, stream: Any) -> None:
        tee = sys.stdout.buffer if self.server.tee else None
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            if tee is not None:
                try:
                    tee.write(chunk)
                    tee.flush()
                except OSError:
                    pass
            self._send({"t": "out", "task": procid, "fd": 1 if stream == "out" else 2, "data": b64(chunk)})
        os.close(fd)

    def _control(self) -> None:
        while True:
            try:
                msg = self.conn.recv()
            except (OSError, WireError):
                msg = None
            if msg is None:
                if any(p.poll() is None for p in self.procs.values()):
                    self.srun_gone = True
                    self.signal(signal.SIGTERM)
                    threading.Timer(LEFTOVER_GRACE, self.signal, (signal.SIGKILL,)).start()
                return
            if msg.get("op") == "signal":
                sig = int(msg.get("sig", signal.SIGTERM))
                # a preempted node's processes have their SIGTERM from fairpod already: do not send a second
                if not (sig == signal.SIGTERM and self.server.stopping.is_set()):
                    self.signal(sig)

    def run(self) -> None:
        argv = [str(a) for a in self.req["argv"]]
        cwd = self.req.get("cwd") or None
        pumps: list[threading.Thread] = []
        for task in self.req["tasks"]:
            procid = int(task["procid"])
            try:
                p = subprocess.Popen(argv, cwd=cwd, env=self._env(task), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            except OSError as e:
                why = "command not found" if isinstance(e, FileNotFoundError) else (e.strerror or str(e))
                msg = f"srun: error: {self.server.node}: task {procid}: cannot start {argv[0]}: {why}\n"
                self._send({"t": "out", "task": procid, "fd": 2, "data": b64(msg.encode())})
                self._send({"t": "exit", "task": procid, "code": 127 if isinstance(e, FileNotFoundError) else 126,
                            "signal": None})
                continue
            self.procs[procid] = p
            for stream, f in (("out", p.stdout), ("err", p.stderr)):
                assert f is not None
                t = threading.Thread(target=self._pump, args=(procid, os.dup(f.fileno()), stream), daemon=True)
                f.close()
                t.start()
                pumps.append(t)
        threading.Thread(target=self._control, daemon=True).start()
        for p in self.procs.values():
            rc = p.wait()
            if rc is not None:
                _killpg(p.pid, signal.SIGTERM)  # what the task left behind in its group
        deadline = time.monotonic() + LEFTOVER_GRACE
        for t in pumps:
            t.join(max(0.0, deadline - time.monotonic()))
        for p in self.procs.values():
            _killpg(p.pid, signal.SIGKILL)
        for procid, p in self.procs.items():
            rc = p.returncode
            self._send({"t": "exit", "task": procid, "code": rc if rc >= 0 else None,
                        "signal": -rc if rc < 0 else None})
        self._send({"t": "done"})


class StepServer:
    """Listens on 127.0.0.1 for ``srun`` requests to this node; ``tee`` copies task output to our stdout."""

    def __init__(self, run_dir: Path, rank: int, node: str, *, tee: bool) -> None:
        self.run_dir = run_dir
        self.rank = rank
        self.node = node
        self.tee = tee
        self.key = secrets.token_hex(16)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.25)
        self.port = int(self.sock.getsockname()[1])
        self.steps: list[Step] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()  # SIGTERM from fairpod: the whole job is being stopped
        self.shutdown = threading.Event()  # replica 0's batch script has ended
        self._thread: threading.Thread | None = None

    def publish(self) -> None:
        write_private(self.run_dir / f"node-{self.rank}.json",
                      {"rank": self.rank, "node": self.node, "port": self.port, "key": self.key, "pid": os.getpid()})

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="fairpod-steps", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self.shutdown.is_set():
            try:
                s, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            s.settimeout(None)
            threading.Thread(target=self._handle, args=(Conn(s),), daemon=True).start()

    def _handle(self, conn: Conn) -> None:
        try:
            req = conn.recv()
            if req is None:
                return
            if not hmac.compare_digest(str(req.get("key", "")), self.key):
                conn.send({"t": "error", "msg": "bad key"})
                return
            op = req.get("op")
            if op == "shutdown":
                self.shutdown.set()
                conn.send({"t": "ok"})
            elif op == "ping":
                conn.send({"t": "ok", "node": self.node})
            elif op == "run":
                if self.stopping.is_set() or self.shutdown.is_set():
                    conn.send({"t": "error", "msg": f"node {self.node} is stopping"})
                    return
                step = Step(self, conn, req)
                with self.lock:
                    self.steps.append(step)
                try:
                    step.run()
                finally:
                    with self.lock:
                        self.steps.remove(step)
            else:
                conn.send({"t": "error", "msg": f"unknown op {op!r}"})
        except (OSError, WireError, KeyError, TypeError, ValueError) as e:
            try:
                conn.send({"t": "error", "msg": f"bad request: {e}"})
            except OSError:
                pass
        finally:
            conn.close()

    def busy(self) -> bool:
        with self.lock:
            return bool(self.steps)

    def stop_steps(self, grace: float = LEFTOVER_GRACE) -> None:
        """SIGTERM every running task, SIGKILL after ``grace``; returns when no step is left (bounded)."""
        with self.lock:
            steps = list(self.steps)
        for s in steps:
            s.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.busy() and time.monotonic() < deadline:
            time.sleep(0.05)
        with self.lock:
            steps = list(self.steps)
        for s in steps:
            s.signal(signal.SIGKILL)
        deadline = time.monotonic() + grace + 2 * LEFTOVER_GRACE
        while self.busy() and time.monotonic() < deadline:
            time.sleep(0.05)

    def close(self) -> None:
        self.shutdown.set()
        try:
            self.sock.close()
        except OSError:
            pass
