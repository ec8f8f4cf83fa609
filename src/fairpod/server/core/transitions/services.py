"""Services beside the reconcile loop: readiness probes, each service's endpoint list and address, the drain.

- **Readiness**: every ``interval`` seconds each live replica of a running service is probed: its
  ``readiness_path`` over HTTP, else a TCP connect to its ``PORT``, from here (these run nothing of the job's);
  a ``readiness_command`` is the job's own code and never runs here: each replica's supervisor runs it inside
  the replica's sandbox (``executors.readycheck``) and the executor says which ranks passed (``Probing``). The
  endpoint list of a service is its ready replicas that are not being drained, in rank order.
- **Address**: each service gets a round-robin proxy (``server.proxy``) on the control plane's host when it is
  first seen running; the proxy keeps its port for the service's life (kept in ``$FAIRPOD_HOME/services/`` so a
  restarted control plane binds the same one when it is free) and is closed once the service has ended.
- **Drain**: the ranks a shrink removes (``resize._stop_removed``) are taken one at a time, the highest first:
  out of the endpoint list at once, SIGTERM (then SIGKILL after the grace period) ``drain_seconds`` later, the next
  one once it has exited. Requests already sent to it have the drain period to finish; new ones go elsewhere.
  When a rank's drain begins its SIGTERM time is stored with the run (``serving.drain_begun``), so a
  restarted control plane keeps it out of the endpoint list and stops it then (``_resume_drains``); ``draining``
  (get-service) names a rank only once that time is stored (``begin_drain``).

The probes and the endpoint lists are the server's memory, rebuilt by probing; what is kept in the store goes
through the control plane's own transitions (``drain_begun``, ``forget_exits`` in ``control.serving``).
"""

from __future__ import annotations

import http.client
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fairpod.executors.base import Probing, Resizing, capability
from fairpod.model.jobs import JobState
from fairpod.model.services import ServiceSpec
from fairpod.server.core.transitions import serving
from fairpod.server.runs import having, job_key
from fairpod.server.services.proxy import Proxy

log = logging.getLogger("fairpod.services")

HOST = "127.0.0.1"  # the local executor's replicas listen on this machine
PROBE_TIMEOUT = 1.0
# with no service running, the probe round looks again this often (a service's launch wakes it at once: ``poke``),
# not every ``interval``: the round takes the core's lock and looks at every live attempt (~30,000 at 10,000 nodes)
IDLE_WAIT = 2.0


@dataclass(frozen=True)
class _Target:
    jid: int
    name: str
    team: str
    key: str
    attempt: int
    ranks: tuple[tuple[int, int], ...]  # (rank, port) of the live replicas
    check: ServiceSpec
    crashed: frozenset[int] = frozenset()  # ranks with exits in a row (``Run.crashes``)


def probe(check: ServiceSpec, host: str, port: int) -> bool:
    """Is the replica on ``host:port`` ready by ``check``'s HTTP path, else by a TCP connect? (A readiness
    command is not run here: ``Services._probed``.)"""
    try:
        if check.readiness_path is not None:
            conn = http.client.HTTPConnection(host, port, timeout=PROBE_TIMEOUT)
            try:
                conn.request("GET", check.readiness_path)
                return conn.getresponse().status < 400
            finally:
                conn.close()
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT):
            return True
    except (OSError, http.client.HTTPException):
        return False


class Services:
    """Readiness, endpoints, addresses and drains of the services of a control plane ``cp``."""

    def __init__(self, cp: Any, interval: float = 0.25, *, open_space: Callable[[Any, int, str, str], Any] | None = None,
                 stop_idle: Callable[[Any], None] | None = None) -> None:
        self.cp = cp
        # a space's proxy (who comes in) and its idle stop: fairpod.server.services.spaces, which stands on the core's door,
        # so the composition root hands them in (runtime.build); without them no space gets a proxy
        self.open_space = open_space
        self.stop_idle = stop_idle
        self.interval = interval
        self._lock = threading.Lock()
        self._ready: dict[int, dict[int, int]] = {}  # job id -> rank -> port, of ready replicas
        self._draining: set[tuple[int, int]] = set()  # (job id, rank): drained, its SIGTERM time stored
        self._leaving: set[tuple[int, int]] = set()  # (job id, rank): out of the endpoint list (drains, beginning)
        self._turn: dict[int, int] = {}  # job id -> round-robin position
        self._ready_since: dict[tuple[int, int], float] = {}  # (job id, rank) -> ready since (in a row)
        self.proxies: dict[int, Proxy] = {}
        self._drains: queue.Queue[tuple[int, str, int, list[int], float, float, dict[int, float]]] = queue.Queue()
        self._stop = threading.Event()
        self._wake = threading.Event()  # the probe round's: a service launched (``poke``), or the stop
        self._threads: list[threading.Thread] = []
        cp.services = self
        self._resume_drains()

    # -- what the API and the proxy read ----------------------------------------------------------------------

    def endpoints(self, jid: int) -> list[tuple[int, str, int]]:
        """(rank, host, port) of the service's replicas that take requests now, in rank order."""
        with self._lock:
            ready = self._ready.get(jid, {})
            return [(r, HOST, p) for r, p in sorted(ready.items()) if (jid, r) not in self._leaving]

    def draining(self, jid: int) -> list[int]:
        with self._lock:
            return sorted(r for j, r in self._draining if j == jid)

    def address(self, jid: int) -> str | None:
        p = self.proxies.get(jid)
        return p.address if p is not None else None

    def _pick(self, jid: int, tried: set[tuple[str, int]]) -> tuple[str, int] | None:
        eps = [(h, p) for _, h, p in self.endpoints(jid) if (h, p) not in tried]
        if not eps:
            return None
        with self._lock:
            i = self._turn.get(jid, 0)
            self._turn[jid] = i + 1
        return eps[i % len(eps)]

    # -- threads ----------------------------------------------------------------------------------------------

    def start(self) -> None:
        for target, name in ((self._probe_loop, "service-probes"), (self._drain_loop, "service-drains")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def poke(self) -> None:
        """A service is being launched: the probe round, idle while none ran, looks now."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout=10)
        for p in list(self.proxies.values()):
            p.close()
        self.proxies.clear()

    def drain(self, jid: int, key: str, attempt: int, ranks: list[int], grace: float, seconds: float,
              until: dict[int, float] | None = None) -> None:
        """Take ``ranks`` of the service out one at a time (see the module doc); returns at once. ``until``: the
        SIGTERM times of ranks whose drain had begun before a restart of the control plane."""
        self._drains.put((jid, key, attempt, ranks, grace, seconds, dict(until or {})))

    def _resume_drains(self) -> None:
        """Start-up: the ranks a shrink was removing when the control plane stopped are drained again
        (``ControlPlane._carry_out`` leaves a service's to this). A rank whose drain had begun stays out of the
        endpoint list and gets its SIGTERM at the time stored when its drain began (``Run.drain_until``); the
        others are drained in turn after it, each for the whole drain period."""
        with self.cp.lock:
            for jid, run in self.cp.runs.items():
                if not run.launched or run.stopping is not None or not run.removing:
                    continue  # nothing to drain: no read (a restart with 20,000 running jobs read each)
                job = self.cp.store.get_job(jid)
                if job is None or job.spec.service is None or job.state != JobState.RUNNING:
                    continue
                until = {int(r): t for r, t in run.drain_until.items() if r in run.removing}
                with self._lock:
                    self._draining.update((jid, r) for r in until)
                    self._leaving.update((jid, r) for r in until)
                self.drain(jid, job_key(job), run.attempt, sorted(int(r) for r in run.removing),
                           job.spec.termination_grace_seconds, job.spec.service.drain_seconds, until)

    def _drain_loop(self) -> None:
        res = capability(self.cp.executor, Resizing)
        while not self._stop.is_set():
            try:
                jid, key, attempt, ranks, grace, seconds, until = self._drains.get(timeout=0.5)
            except queue.Empty:
                continue
            for rank in sorted(ranks, reverse=True):
                due = self.begin_drain(jid, key, rank, until.get(rank), seconds)
                wait = max(0.0, due - self.cp.clock())
                log.info("service %s: replica %d drained; SIGTERM in %.3g s", key, rank, wait)
                if self._stop.wait(wait):
                    return  # the server stops: start-up drains the removed ranks again (_resume_drains)
                try:
                    if res is not None:
                        res.stop_replicas(key, attempt, [rank], grace)
                    self._wait_gone(jid, rank, grace + 30)
                finally:
                    with self._lock:
                        self._draining.discard((jid, rank))
                        self._leaving.discard((jid, rank))
                        self._ready.get(jid, {}).pop(rank, None)

    def begin_drain(self, jid: int, key: str, rank: int, due: float | None, seconds: float) -> float:
        """``rank`` of service ``jid`` leaves the endpoint list now; its SIGTERM is due at ``due`` (a drain begun
        before a restart) or ``seconds`` from now, kept with the run first (a restarted control plane keeps the
        rank drained until then): ``draining`` names it only once that is stored, so a drain that get-service
        shows goes on across a restart. Returns when its SIGTERM is due."""
        with self._lock:
            self._leaving.add((jid, rank))
        if due is None:
            due = self.cp.clock() + seconds
            try:
                serving.drain_begun(self.cp, jid, rank, due)
            except Exception:  # the drain goes on; only its survival of a restart is lost
                log.exception("service %s: could not store the drain of replica %d", key, rank)
        with self._lock:
            self._draining.add((jid, rank))
        return due

    def _wait_gone(self, jid: int, rank: int, timeout: float) -> None:
        """Until the control plane has taken the exit of the removed ``rank`` (bounded by ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._stop.is_set():
            with self.cp.lock:
                run = self.cp.runs.get(jid)
                if run is None or str(rank) not in run.removing:
                    return
            self._stop.wait(0.05)

    def _probe_loop(self) -> None:
        busy = True
        while True:
            self._wake.wait(self.interval if busy else IDLE_WAIT)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                busy = self.probe_once()
            except Exception as e:  # a probe round must never end the thread
                busy = True
                if not self.cp.database_lost(e):
                    log.exception("service probes failed")

    def _targets(self) -> tuple[list[_Target], set[int]]:
        """The live replicas of running services, and the ids of services that have ended (under the lock)."""
        out, ended = [], set()
        with self.cp.lock:
            # only a service's launch picks ports (control.serving): no read for a batch job, and the ~30,000 live
            # attempts of 10,000 nodes told apart in C (runs.having), not in a Python pass under the lock each second
            for jid, run in having(self.cp.runs, "ports"):
                job = self.cp.store.get_job(jid)
                if job is None or job.spec.service is None:
                    continue
                if job.state != JobState.RUNNING or not run.launched or run.stopping is not None:
                    continue
                skip = {*run.adding, *run.starting}
                ranks = [r for r in range(len(job.placement)) if r not in skip]
                ranks += [int(r) for r in run.removing]
                out.append(_Target(jid, job.name, job.team, job_key(job), run.attempt,
                                   tuple((r, run.ports[r]) for r in sorted(ranks) if r < len(run.ports)),
                                   job.spec.service, frozenset(int(r) for r in run.crashes)))
            for jid in self.proxies:
                job = self.cp.store.get_job(jid)
                if job is None or job.state.finished:
                    ended.add(jid)
        return out, ended

    def probe_once(self) -> bool:
        """One round: probe every live replica, update the endpoint lists, open and close proxies. False when
        there was nothing to probe or close (no service runs)."""
        targets, ended = self._targets()
        busy = bool(targets or ended or self.proxies)
        # the proxies of ended jobs close first: a space started again is a new job, and its proxy takes the port
        # its last run's proxy had (the space's address, its browser tabs and sessions) only once that one let go
        for jid in ended:
            p = self.proxies.pop(jid, None)
            if p is not None:
                p.close()
                self._port_file(jid).unlink(missing_ok=True)
        seen: dict[int, dict[int, int]] = {}
        for t in targets:
            if t.jid not in self.proxies:
                self._open(t.jid, t.name, t.team if t.check.space is not None else None)
            if t.check.readiness_command is not None:
                passed = self._probed(t)
                seen[t.jid] = {r: p for r, p in t.ranks if r in passed}
            else:
                seen[t.jid] = {r: p for r, p in t.ranks if probe(t.check, HOST, p)}
        with self._lock:
            self._ready = seen
        self._forget_exits(targets, seen)
        if self.stop_idle is not None and any(t.check.space is not None for t in targets):
            self.stop_idle(self.cp)
        return busy

    def _probed(self, t: _Target) -> set[int]:
        """The ranks whose readiness command, run by their supervisors in their sandboxes, passed last (an
        executor that cannot run it: none)."""
        probing = capability(self.cp.executor, Probing)
        return probing.probed_ready(t.key, t.attempt) if probing is not None else set()

    def _forget_exits(self, targets: list[_Target], seen: dict[int, dict[int, int]]) -> None:
        """Replicas with exits in a row that have been ready ``restart_reset_seconds`` in a row (by this
        control plane's probes): their restart backoff starts over (``serving.forget_exits``)."""
        now = self.cp.clock()
        since = {k: v for k, v in self._ready_since.items() if k[1] in seen.get(k[0], {})}
        for jid, ready in seen.items():
            for r in ready:
                since.setdefault((jid, r), now)
        self._ready_since = since
        for t in targets:
            due = [r for r in sorted(t.crashed)
                   if (t.jid, r) in since and now - since[(t.jid, r)] >= t.check.restart_reset_seconds]
            if due:
                serving.forget_exits(self.cp, t.jid, due)

    def _port_file(self, jid: int) -> Any:
        return self.cp.home / "services" / f"{jid}.port"

    def _open(self, jid: int, name: str, space_team: str | None = None) -> None:
        """The service's proxy, on the port it had before when that is free; a space's checks who comes in
        (``server.spaces``)."""
        if space_team is not None:
            if self.open_space is not None:
                self.proxies[jid] = self.open_space(self.cp, jid, space_team, name)
            return
        f = self._port_file(jid)
        want = int(f.read_text()) if f.exists() and f.read_text().strip().isdigit() else 0
        try:
            proxy = Proxy(name, lambda tried: self._pick(jid, tried), port=want)
        except OSError:
            proxy = Proxy(name, lambda tried: self._pick(jid, tried))
        self.proxies[jid] = proxy
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(str(proxy.port))
        log.info("service %s: address %s", name, proxy.address)
