"""API worker processes (``fairpod up --api-workers N``, docs/architecture.md "API workers").

The core process (turns, executor, keepers, every route) serves a private loopback port; N worker processes serve
the public sockets, which the core process bound and hands them (one listening socket shared: the kernel gives
each connection to one worker). :class:`Workers` runs in the core process: it starts each worker, starts it again
when it ends (kill -9 included), and stops them by PID with the core; a worker ends with the core process too
(``PR_SET_PDEATHSIG``), so a core killed -9 leaves no worker holding the port. ``python -m
fairpod.server.runtime.workers`` is one worker (:func:`main`).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from fairpod.executors import state
from fairpod.executors.base import Executor, Traits

log = logging.getLogger("fairpod.workers")
# "core <pid> <private port>", then one "<index> <pid>" line per live worker (operators and tests read it)
PIDS_FILE = "api-workers.pid"
MAX_WORKERS = 64
_WORKER = b"fairpod.server.runtime.workers"  # in a worker's command line (python -m this module)
# a worker's database URL: in its environment, not on its command line (a PostgreSQL URL may hold a password,
# and every user of the host reads command lines)
DB_ENV = "FAIRPOD_DB_URL"


class Workers:
    """The core process's API workers: started, restarted when they end, stopped by PID."""

    def __init__(self, home: Path, count: int, socks: list[socket.socket], core_port: int, url: str,
                 executor: Executor | Traits) -> None:
        self.home, self.count, self.socks = home, count, socks
        self.core_port, self.url, self.traits = core_port, url, Traits.of(executor)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        # a worker's commit wakes the core's loop (SQLite; PostgreSQL: the commit's NOTIFY). Imported here: a
        # worker imports this module before it checks that its core lives, so the less it imports the better
        from fairpod.server.runtime.wakes import Wakes

        self.wakes = Wakes()
        self.restarts = 0
        self._mu = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @classmethod
    def fronting(cls, home: Path, count: int, socks: list[socket.socket], private: list[socket.socket], url: str,
                 executor: Executor | Traits | None) -> tuple[Workers, list[socket.socket]]:
        """``count`` workers (not started) on the public ``socks``, and ``private``, the loopback socket the core
        serves behind them. ``executor`` None (``--ha``): the one the leader recorded (:meth:`start_when_known`)."""
        for s in socks:
            s.listen(2048)  # connections queue while a worker starts again
        traits = Traits("", False, False) if executor is None else executor
        return cls(home, count, socks, private[0].getsockname()[1], url, traits), private

    def _cmd(self, index: int) -> list[str]:
        t = self.traits
        return [sys.executable, "-m", "fairpod.server.runtime.workers", "--index", str(index),
                "--fds", ",".join(str(s.fileno()) for s in self.socks), "--core-port", str(self.core_port),
                "--wake-fd", str(self.wakes.worker_end.fileno()),
                "--executor", t.name, "--resizing", str(int(t.resizing)),
                "--probing", str(int(t.probing)), "--core-pid", str(os.getpid())]

    def start(self) -> None:
        """Start the workers. Their commits' wakes reach the core's loop once it calls ``self.wakes.listen`` (a
        wake sent before is read then)."""
        for i in range(self.count):
            th = threading.Thread(target=self._keep, args=(i,), name=f"api-worker-{i}", daemon=True)
            th.start()
            self._threads.append(th)

    def _keep(self, index: int) -> None:
        """Run worker ``index``, and again whenever it ends (at most once a second), until :meth:`stop`."""
        while not self._stop.is_set():
            began = time.monotonic()
            with self._mu:
                if self._stop.is_set():
                    return
                proc = subprocess.Popen(self._cmd(index), pass_fds=[*(s.fileno() for s in self.socks),
                                                                    self.wakes.worker_end.fileno()],
                                        stdin=subprocess.DEVNULL, env={**os.environ, DB_ENV: self.url})
                self.procs[index] = proc
                self._write()
            code = proc.wait()
            if self._stop.is_set():
                return
            self.restarts += 1
            log.warning("API worker %d (pid %d) ended (%s); starting it again", index, proc.pid, code)
            self._stop.wait(max(0.0, 1.0 - (time.monotonic() - began)))

    def _write(self) -> None:
        text = f"core {os.getpid()} {self.core_port}\n" + "".join(f"{i} {p.pid}\n" for i, p in sorted(self.procs.items()))
        state.write_atomic(self.home / PIDS_FILE, text)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to each worker by its PID, SIGKILL to any still there after ``timeout``."""
        with self._mu:
            self._stop.set()
            procs = list(self.procs.values())
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.wakes.close()
        with contextlib.suppress(OSError):
            (self.home / PIDS_FILE).unlink()

    def start_when_known(self, every: float = 1.0) -> None:
        """``fairpod up --ha``: start the workers once the database holds the executor a leader recorded there
        (:func:`recorded_traits`: a submit is checked against the leader's executor; a standby runs none). Asked
        every ``every`` seconds until then, or until :meth:`stop`; at once where a leader has ever run."""
        def wait() -> None:
            while not self._stop.is_set():
                try:
                    got = recorded_traits(self.url)
                except Exception as e:  # noqa: BLE001 - the database not answering yet: ask again
                    log.warning("API workers wait for the database: %s", str(e).splitlines()[0] if str(e) else e)
                    got = None
                if got is not None:
                    with self._mu:
                        if self._stop.is_set():
                            return
                        self.traits = got
                        self.start()
                    return
                self._stop.wait(every)

        threading.Thread(target=wait, name="api-workers-wait", daemon=True).start()


def recorded_traits(url: str) -> Traits | None:
    """The executor the core (the leader) last recorded in the database at ``url``; None before any has."""
    import json

    from fairpod.server.runtime.wiring import TRAITS_META
    from fairpod.store import Store

    store = Store(url)
    try:
        raw = store.get_meta(TRAITS_META)
    finally:
        store.close()
    return None if raw is None else Traits(**json.loads(raw))


def stop_leftovers(home: Path, timeout: float = 10.0) -> list[int]:
    """``fairpod down`` after its core process ended, and ``fairpod up`` before it binds the port again: SIGTERM
    (SIGKILL after ``timeout``) to each API worker of the core ``api-workers.pid`` names that is still alive,
    those the file lists and any started by that core as it was killed (its command line names the core's pid:
    a worker still importing holds the public port until it notices its core is gone); the PIDs stopped. A PID
    reused by another process is left alone (its command line says so). A core that ended normally stopped its
    workers itself and removed the file."""
    try:
        lines = (home / PIDS_FILE).read_text().splitlines()
    except OSError:
        return []
    pids = []
    for line in lines[1:]:
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and _is_worker(int(parts[1])):
            pids.append(int(parts[1]))
    head = lines[0].split() if lines else []
    if len(head) >= 2 and head[0] == "core" and head[1].isdigit():
        pids += [p for p in _workers_of(int(head[1])) if p not in pids]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for pid in pids:  # until it has ended: an exiting process's command line reads empty before it closes its files
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _running(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while _running(pid) and time.monotonic() < deadline + timeout:
                time.sleep(0.05)
    with contextlib.suppress(OSError):
        (home / PIDS_FILE).unlink()
    return pids


def _workers_of(core: int) -> list[int]:
    """The live API worker processes started by ``core`` (their ``--core-pid``), of this user only (another's
    process that names them is not ours to stop)."""
    said = f"\0--core-pid\0{core}\0".encode()
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes() + b"\0"
                if os.stat(f"/proc/{entry}").st_uid != os.getuid():
                    continue
            except OSError:
                continue
            if said in cmd and _WORKER in cmd and _running(int(entry)):
                out.append(int(entry))
    return out


def _is_worker(pid: int) -> bool:
    """``pid`` is a live API worker (not a zombie, and its command line runs this module)."""
    try:
        return _running(pid) and _WORKER in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _running(pid: int) -> bool:
    """``pid`` has not ended (is there, and neither a zombie nor dead)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def _die_with_parent(core: int) -> None:
    """End this process when the core process that started it (``core``) ends (Linux ``PR_SET_PDEATHSIG``). A
    core that ended before the call (killed while this worker imported) is seen by the parent's PID: an orphan is
    taken by init or by the nearest subreaper (``systemd --user``, a container's init), so its new parent's PID
    need not be 1."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != core:  # the core ended before the call
        raise SystemExit(0)


def main(argv: list[str] | None = None) -> None:
    """One API worker: serves the inherited sockets until SIGTERM (or its core process ends)."""
    import uvicorn

    from fairpod.paths import fairpod_home
    from fairpod.server.runtime import heap
    from fairpod.server.runtime.wiring import build_worker

    p = argparse.ArgumentParser(prog="fairpod-api-worker")
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--fds", required=True)
    p.add_argument("--core-port", type=int, required=True)
    p.add_argument("--executor", required=True)
    p.add_argument("--resizing", type=int, required=True)
    p.add_argument("--probing", type=int, required=True)
    p.add_argument("--core-pid", type=int, required=True)
    p.add_argument("--wake-fd", type=int, help="this worker's end of the core's wakes (fairpod.server.runtime.wakes)")
    a = p.parse_args(argv)
    _die_with_parent(a.core_pid)
    os.umask(0o077)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s api-worker-{a.index}: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request forwarded to the core
    socks = [socket.socket(fileno=int(fd)) for fd in a.fds.split(",")]
    heap.watch()  # the core's thresholds: a submit allocates as much as a turn's step, and is as hot
    app = build_worker(fairpod_home(), os.environ[DB_ENV], Traits(a.executor, bool(a.resizing), bool(a.probing)),
                       f"http://127.0.0.1:{a.core_port}",
                       wake=None if a.wake_fd is None else socket.socket(fileno=a.wake_fd))
    logging.info(heap.app_built())  # the app and its imports (FastAPI's, pydantic's, SQLAlchemy's) not walked again
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    server.run(sockets=socks)


if __name__ == "__main__":
    main()
