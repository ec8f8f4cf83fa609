"""What the pieces of a fairpod batch job share: the run directory, node records and the message framing.

A batch job is one fairpod job of N replicas, each running ``python -m fairpod.formats.slurm.runner`` on its node.
Every runner serves *job steps* on a TCP port of 127.0.0.1 and records it in the run directory, which is
next to the job's checkpoint directory (``<checkpoint dir>.slurm/<run id>/``, private to the user, one per
launch of the job, so a relaunch never meets the records of an earlier one)::

    node-<rank>.json   {"rank", "node", "port", "key", "pid"}    (mode 0600; key: the runner's secret)
    bin/               srun, scontrol and hostname for the batch script's PATH
    batch-script       the submitted script
    steps              the job-step counter

Messages are JSON objects, one per line. ``srun`` sends ``{"key", "op": "run", …}`` and reads output
(``{"t": "out", "task", "fd", "data": base64}``) and exits (``{"t": "exit", "task", "code", "signal"}``) until
``{"t": "done"}``; it may send ``{"op": "signal", "sig"}`` meanwhile. Replica 0 ends the others with
``{"key", "op": "shutdown"}`` when the batch script has ended.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

ENV_DIR = "FAIRPOD_SLURM_DIR"
ENV_CONFIG = "FAIRPOD_SBATCH"
NODE_TIMEOUT = float(os.environ.get("FAIRPOD_SLURM_NODE_TIMEOUT", "300"))
MAX_LINE = 16 * 1024 * 1024


class WireError(RuntimeError):
    pass


def run_dir_for(env: dict[str, str] | os._Environ[str]) -> Path:
    """The run directory of this launch, from the replica's environment."""
    ckpt = env.get("FAIRPOD_CHECKPOINT_DIR")
    if not ckpt:
        raise WireError("FAIRPOD_CHECKPOINT_DIR is not set: this runs only as a fairpod job")
    run = env.get("FAIRPOD_RUN_ID") or f"attempt-{env.get('FAIRPOD_RESTART_COUNT', '0')}-{env.get('MASTER_PORT', '0')}"
    base = Path(ckpt.rstrip("/") + ".slurm")
    return base / run


def write_private(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def read_node(run_dir: Path, rank: int) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / f"node-{rank}.json").read_text())
    except (OSError, ValueError):
        return None


def wait_nodes(run_dir: Path, ranks: list[int], timeout: float = NODE_TIMEOUT) -> dict[int, dict[str, Any]]:
    """The records of the given nodes, waiting until each runner has written its record."""
    deadline = time.monotonic() + timeout
    found: dict[int, dict[str, Any]] = {}
    while True:
        for r in ranks:
            if r not in found and (rec := read_node(run_dir, r)) is not None:
                found[r] = rec
        if len(found) == len(ranks):
            return found
        if time.monotonic() > deadline:
            missing = sorted(set(ranks) - set(found))
            raise WireError(f"node(s) {missing} of the job did not come up within {timeout:g} s")
        time.sleep(0.05)


class Conn:
    """A line-framed JSON connection; ``send`` may be called from several threads, ``recv`` from one."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.lock = threading.Lock()

    @classmethod
    def connect(cls, port: int, timeout: float = 10.0) -> Conn:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        s.settimeout(None)
        return cls(s)

    def send(self, msg: dict[str, Any]) -> None:
        data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        with self.lock:
            self.sock.sendall(data)

    def pending(self) -> bool:
        """True when a whole message is buffered already (``recv`` returns it without reading)."""
        return b"\n" in self.buf

    def recv(self) -> dict[str, Any] | None:
        """The next message, None at the end of the connection."""
        while b"\n" not in self.buf:
            if len(self.buf) > MAX_LINE:
                raise WireError("message too long")
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        i = self.buf.index(b"\n")
        line = bytes(self.buf[:i])
        del self.buf[: i + 1]
        try:
            msg = json.loads(line)
        except ValueError as e:
            raise WireError(f"bad message: {e}") from None
        if not isinstance(msg, dict):
            raise WireError("bad message: not an object")
        return msg

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))
