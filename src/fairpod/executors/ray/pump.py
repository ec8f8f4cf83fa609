"""The log and exit pump: the background pass that copies logs, collects exits and cleans up attempts."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fairpod.executors import state
from fairpod.executors.base import ReplicaExit
from fairpod.executors.ray.attempts import _Attempt, _Rep

log = logging.getLogger("fairpod.executors.ray")

CHUNK = 1 << 20  # log bytes per pull
STOP_MARGIN = 15.0  # after grace + this, a replica that has not ended gets its actor killed
UNAVAILABLE_LIMIT = 30.0  # an agent unreachable this long (its node alive) counts as lost


class Pump:
    """The part of :class:`~fairpod.executors.ray.executor.RayExecutor` that runs in its background thread."""

    _ray: Any
    _lock: threading.RLock
    _attempts: dict[tuple[str, int], _Attempt]
    _exits: list[ReplicaExit]
    _notify: Callable[[], None] | None
    _closed: threading.Event
    _wake: threading.Event
    _pump_lock: threading.Lock
    poll_interval: float
    startup_timeout: float
    root: Path

    # -- the background thread -----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(self.poll_interval)
            self._wake.clear()
            if self._closed.is_set():
                return
            try:
                self._pump_once(wait=min(0.2, self.poll_interval))
            except Exception:  # keep going: Ray may be briefly unavailable
                log.exception("Ray executor: pump failed")

    def _pump_once(self, wait: float) -> None:
        with self._pump_lock:  # one pass at a time (the thread, and adopt)
            self._pump(wait)

    def _pump(self, wait: float) -> None:
        ray = self._ray
        self._refresh_nodes()
        now = time.monotonic()
        with self._lock:
            atts = list(self._attempts.values())
            for att in atts:
                for rep in att.reps:
                    if rep.final is None:
                        self._check_rep(att, rep, now)
            inflight = {}
            for att in atts:
                for rep in att.reps:
                    if rep.final is not None or rep.handle is None:
                        continue
                    if rep.start_ref is not None:
                        inflight[rep.start_ref] = (rep, "start")
                    else:
                        if rep.sync_ref is None:
                            rep.sync_ref = rep.handle.sync.remote(rep.offset, CHUNK)
                        inflight[rep.sync_ref] = (rep, "sync")
        if inflight:
            ready, _ = ray.wait(list(inflight), num_returns=len(inflight), timeout=wait)
            for ref in ready:
                rep, kind = inflight[ref]
                self._collect(rep, kind, ref)
        with self._lock:
            for att in list(self._attempts.values()):
                if not att.cleaned and all(r.final is not None for r in att.reps):
                    self._cleanup(att, force=False)

    def _check_rep(self, att: _Attempt, rep: _Rep, now: float) -> None:
        """Exits that need no answer from the agent: node lost, never placed, stop overdue."""
        rn = self._nodes.get(rep.node_id)
        if rn is None or not rn.alive:
            why = rn.death if rn is not None and rn.death else "it left the Ray cluster"
            self._finalize(rep, {"returncode": None, "signal": None, "reason": f"node lost: {rep.node}: {why}"})
            return
        placed = rep.start_ref is None or self._pg_created(att)
        if not placed and now - att.created > self.startup_timeout:
            self._finalize(rep, {"returncode": None, "signal": None, "reason": (
                f"not started: Ray could not place it on node {rep.node} within {self.startup_timeout:g} s "
                "(are that node's GPUs used by work fairpod does not manage?)")})
            return
        if rep.stop_at is not None:
            if not placed:
                self._finalize(rep, {"returncode": None, "signal": None, "reason": "stopped before start"})
            elif now > rep.stop_at + rep.stop_grace + STOP_MARGIN:
                if rep.handle is not None:
                    self._ray.kill(rep.handle, no_restart=True)
                self._finalize(rep, {"returncode": None, "signal": int(signal.SIGKILL), "reason": (
                    f"killed: it did not stop within {rep.stop_grace:g} s + {STOP_MARGIN:g} s; its Ray actor was "
                    "killed and its supervisor stops what is left")})
        if rep.unavailable_since is not None and now - rep.unavailable_since > UNAVAILABLE_LIMIT:
            self._finalize(rep, {"returncode": None, "signal": None, "reason": (
                f"node lost: the replica's agent on {rep.node} has been unreachable for {UNAVAILABLE_LIMIT:g} s")})

    def _pg_created(self, att: _Attempt) -> bool:
        if att.pg is None:
            return False
        from ray.util.placement_group import placement_group_table

        try:
            return placement_group_table(att.pg).get("state") == "CREATED"
        except Exception:  # noqa: BLE001
            return False

    def _collect(self, rep: _Rep, kind: str, ref: Any) -> None:
        ray = self._ray
        try:
            result = ray.get(ref, timeout=0)
        except ray.exceptions.GetTimeoutError:
            return
        except ray.exceptions.ActorUnavailableError:
            with self._lock:
                rep.unavailable_since = rep.unavailable_since or time.monotonic()
                if kind == "sync":
                    rep.sync_ref = None
            return
        except ray.exceptions.RayError as e:
            with self._lock:
                if kind == "sync":
                    rep.sync_ref = None
                if rep.final is not None:
                    return
                rn = self._nodes.get(rep.node_id)
                if rn is None or not rn.alive:
                    why = rn.death if rn is not None and rn.death else "it left the Ray cluster"
                    reason = f"node lost: {rep.node}: {why}"
                elif isinstance(e, ray.exceptions.ActorDiedError | ray.exceptions.RayActorError):
                    reason = f"the replica's Ray actor died: {_first_line(e)}; its supervisor stops the replica"
                else:
                    reason = f"could not start on Ray: {_first_line(e)}"
                self._finalize(rep, {"returncode": None, "signal": None, "reason": reason})
            return
        with self._lock:
            rep.unavailable_since = None
            if kind == "start":
                rep.start_ref = None
                if rep.stop_at is not None and rep.stop_ref is None and rep.handle is not None:
                    rep.stop_ref = rep.handle.stop.remote(rep.stop_grace)
                return
            rep.sync_ref = None
            if rep.final is not None:
                return
            data: bytes = result.get("data", b"")
            if data:
                with open(rep.dir / state.OUTPUT, "ab") as f:
                    f.write(data)
                rep.offset += len(data)
            st = result.get("status")
            if st is not None and rep.offset >= int(result.get("size", 0)):
                rep.agent_final = True
                self._finalize(rep, st)
            elif data:
                self._wake.set()  # more to pull

    def _finalize(self, rep: _Rep, st: dict[str, Any]) -> None:
        """Record a replica's exit (once): ``status.json`` on the control plane's disk, then queue it."""
        if rep.final is not None:
            return
        st = {**st, "ended_at": float(st.get("ended_at") or time.time())}
        rep.final = st
        state.write_json(rep.dir / state.STATUS, st)
        self._exits.append(ReplicaExit(job=rep.job, attempt=rep.attempt, rank=rep.rank,
                                       returncode=st.get("returncode"), signal=st.get("signal"),
                                       reason=str(st.get("reason", "")), ended_at=float(st["ended_at"])))
        fn = self._notify
        if fn is not None:
            fn()

    def _cleanup(self, att: _Attempt, force: bool) -> None:
        """Once every replica of an attempt has ended: agents that reported an exit delete their run dirs
        (waited for up to 10 s, unless ``force``), then actors and the placement group go (capacity back to
        Ray)."""
        ray = self._ray
        if att.cleanup_refs is None:
            att.cleanup_refs = [] if force else [r.handle.finish.remote() for r in att.reps
                                                 if r.handle is not None and r.agent_final]
            att.cleanup_at = time.monotonic()
        if att.cleanup_refs and not force:
            done, _ = ray.wait(att.cleanup_refs, num_returns=len(att.cleanup_refs), timeout=0)
            if len(done) < len(att.cleanup_refs) and time.monotonic() - (att.cleanup_at or 0) < 10:
                return
        for r in att.reps:
            if r.handle is not None:
                try:
                    ray.kill(r.handle, no_restart=True)
                except Exception:  # noqa: BLE001 - already dead
                    pass
        self._remove_pg(att.pg)
        att.cleaned = True

    def _remove_pg(self, pg: Any) -> None:
        if pg is None:
            return
        from ray.util.placement_group import remove_placement_group

        try:
            remove_placement_group(pg)
        except Exception:  # noqa: BLE001 - already removed
            pass



def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
