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
from fairpod.executors.logs import CappedLog
from fairpod.executors.ray.agents import (  # noqa: F401
    AGENT_TIMEOUT,
    PING_EVERY,
    _Agent,
    _first_line,
    gone_errors,
    task_error,
)
from fairpod.executors.ray.attempts import RECORD, STARTED, _Attempt, _Rep
from fairpod.executors.ray.nodes import RayNode

log = logging.getLogger("fairpod.executors.ray")

CHUNK = 1 << 20  # log bytes per replica and pull
STOP_MARGIN = 15.0  # after grace + this, a replica that has not ended is killed by its agent


class Pump:
    """The part of :class:`~fairpod.executors.ray.executor.RayExecutor` that runs in its background thread."""

    _ray: Any
    _lock: threading.RLock
    _attempts: dict[tuple[str, int], _Attempt]
    _agents: dict[str, _Agent]
    _nodes: dict[str, RayNode]
    _exits: list[ReplicaExit]
    _notify: Callable[[], None] | None
    _closed: threading.Event
    _wake: threading.Event
    _pump_lock: threading.Lock
    poll_interval: float
    startup_timeout: float
    root: Path
    _refresh_nodes: Callable[[], None]
    _agent_answer: Callable[[_Agent, Any], dict[str, Any] | None]
    _agent_lost: Callable[[_Agent, str], None]
    _may: Callable[[str], bool]  # the fence (Agents.set_fence)

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
        """One pass: node table (and agents), then one sync per agent for all its replicas, then clean-ups.
        None while fenced (``set_fence``): a pass may kill, stop, clean up and record exits."""
        if not self._may("the Ray executor's pass (exits, kills, clean-ups)"):
            return
        ray = self._ray
        self._refresh_nodes()
        now = time.monotonic()
        with self._lock:
            atts = list(self._attempts.values())
            for att in atts:
                for rep in att.reps:
                    if rep.final is None:
                        self._check_rep(rep, now)
            live: dict[int, list[_Rep]] = {}
            inflight: dict[Any, tuple[str, Any]] = {}
            for att in atts:
                for rep in att.reps:
                    if rep.final is not None or rep.agent is None:
                        continue
                    if rep.start_ref is not None:
                        inflight[rep.start_ref] = ("start", rep)
                    else:
                        live.setdefault(id(rep.agent), []).append(rep)
            for agent in list(self._agents.values()):
                if agent.lost is not None:
                    continue
                if agent.sync_ref is not None and agent.ready and now - agent.sync_sent > AGENT_TIMEOUT:
                    self._agent_lost(agent, f"stopped answering (no answer for {AGENT_TIMEOUT:g} s)")
                    continue
                reps = live.get(id(agent), [])
                if agent.sync_ref is None and (reps or now - agent.last_ok >= PING_EVERY):
                    agent.sync_reps = reps
                    agent.sync_ref = agent.handle.sync.remote([(r.key, r.offset, CHUNK) for r in reps])
                    agent.sync_sent = now
                if agent.sync_ref is not None:
                    inflight[agent.sync_ref] = ("sync", agent)
        if inflight:
            ready, _ = ray.wait(list(inflight), num_returns=len(inflight), timeout=wait)
            for ref in ready:
                kind, what = inflight[ref]
                if kind == "start":
                    self._collect_start(what, ref)
                else:
                    self._collect_sync(what, ref)
        with self._lock:
            for att in list(self._attempts.values()):
                if not att.cleaned and all(r.final is not None for r in att.reps):
                    self._cleanup(att, force=False)

    def _check_rep(self, rep: _Rep, now: float) -> None:
        """Exits that need no answer from the agent: node lost, never started, stop overdue."""
        rn = self._nodes.get(rep.node_id)
        if rn is None or not rn.alive:
            why = rn.death if rn is not None and rn.death else "it left the Ray cluster"
            self._finalize(rep, {"returncode": None, "signal": None, "reason": f"node lost: {rep.node}: {why}"})
            return
        if rep.start_ref is not None and now - rep.started > self.startup_timeout:
            self._finalize(rep, {"returncode": None, "signal": None, "reason": (
                f"not started: the fairpod agent on node {rep.node} did not start it within "
                f"{self.startup_timeout:g} s")})
            return
        if rep.stop_at is not None and now > rep.stop_at + rep.stop_grace + STOP_MARGIN:
            if rep.agent is not None:
                rep.agent.handle.kill.remote(rep.key)
            self._finalize(rep, {"returncode": None, "signal": int(signal.SIGKILL), "reason": (
                f"killed: it did not stop within {rep.stop_grace:g} s + {STOP_MARGIN:g} s; its agent killed "
                "its supervisor and its process group")})

    def _collect_start(self, rep: _Rep, ref: Any) -> None:
        ray = self._ray
        try:
            ray.get(ref, timeout=0)
        except ray.exceptions.GetTimeoutError:
            return
        except ray.exceptions.RayTaskError as e:
            with self._lock:
                rep.start_ref = None
                self._finalize(rep, {"returncode": None, "signal": None,
                                     "reason": f"could not start on node {rep.node}: {task_error(e)}"})
            return
        except gone_errors(ray):
            with self._lock:
                rep.start_ref = None
            if rep.agent is not None:
                self._agent_answer(rep.agent, ref)  # marks the agent lost, and with it this replica
            return
        with self._lock:
            rep.start_ref = None
            if rep.stop_at is not None and rep.stop_ref is None and rep.agent is not None:
                rep.stop_ref = rep.agent.handle.stop.remote(rep.key, rep.stop_grace)
            self._note_port(self._attempts.get((rep.job, rep.attempt)))
        self._wake.set()  # sync it at once

    def _note_port(self, att: _Attempt | None) -> None:
        """Once a replica's start has returned, its attempt's MASTER_PORT is known: kept in memory and in the
        attempt's record (a restart in place uses it again, also after a restart of the control plane)."""
        if att is None or att.master_port or att.port_ref is None:
            return
        try:
            att.master_port = int(self._ray.get(att.port_ref, timeout=0))
        except Exception:  # noqa: BLE001 - not resolved (its agent was lost): a restart in place asks the ref
            return
        path = self.root / att.job / str(att.attempt) / RECORD
        rec = state.read_json(path)
        if rec is not None:
            state.write_json(path, {**rec, "master_port": att.master_port})

    def _collect_sync(self, agent: _Agent, ref: Any) -> None:
        reps = agent.sync_reps
        result = self._agent_answer(agent, ref)
        if result is None:
            return
        more = False
        with self._lock:
            agent.sync_reps = []
            answers: dict[str, Any] = result.get("replicas") or {}
            for rep in reps:
                if rep.final is not None or rep.key not in answers:
                    continue
                ans = answers[rep.key]
                if ans is None:
                    self._no_record(agent, rep)
                    continue
                if ans.get("started", True) and not rep.running:  # an agent of an older fairpod does not say
                    rep.running = True
                    state.write_atomic(rep.dir / STARTED, f"{time.time()}\n")
                if ans.get("ready") is not None and bool(ans["ready"]) != rep.ready:
                    rep.ready = bool(ans["ready"])
                    state.write_json(rep.dir / state.READY, {"ready": rep.ready, "at": time.time()})
                data: bytes = ans.get("data", b"")
                if data:
                    copy = CappedLog(rep.dir / state.OUTPUT, rep.log_cap)  # the copy within the cap too
                    try:
                        copy.write(data)
                    finally:
                        copy.close()
                rep.offset = int(ans.get("next", rep.offset + len(data)))  # past output the node's log dropped
                st = ans.get("status")
                if st is not None and rep.offset >= int(ans.get("size", 0)):
                    rep.agent_final = True
                    self._finalize(rep, st)
                elif data:
                    more = True
        if more:
            self._wake.set()  # more to pull

    def _no_record(self, agent: _Agent, rep: _Rep) -> None:
        """Its agent has never heard of the replica (the lock is held). Never said to have started (no
        ``STARTED``): its start never reached the agent, because the control plane that sent it stopped first
        (adopted from its record): the agent is told to stop it, so that a start still on its way finds it
        stopped and never runs it, and the exit says it never started (the job goes back to its queue).
        Said to have started: it is lost."""
        if rep.running or (rep.dir / STARTED).exists():
            self._finalize(rep, {"returncode": None, "signal": None, "reason": (
                f"lost: the fairpod agent on node {rep.node} has no record of it")})
            return
        agent.handle.stop.remote(rep.key, 0.0)
        self._finalize(rep, {"returncode": None, "signal": None, "started": False, "reason": (
            f"never started: its start did not reach the fairpod agent on node {rep.node} before the control "
            "plane that sent it stopped")})

    def _agent_replicas_lost(self, agent: _Agent) -> None:
        """Called with the lock held when ``agent`` is lost: each of its replicas ends ``node lost``."""
        for att in self._attempts.values():
            for rep in att.reps:
                if rep.agent is agent and rep.final is None:
                    self._finalize(rep, {"returncode": None, "signal": None,
                                         "reason": f"node lost: {rep.node}: {agent.lost}"})

    def _finalize(self, rep: _Rep, st: dict[str, Any]) -> None:
        """Record a replica's exit (once): ``status.json`` on the control plane's disk, then queue it."""
        if rep.final is not None:
            return
        st = {**st, "ended_at": float(st.get("ended_at") or time.time())}
        rep.final = st
        state.write_json(rep.dir / state.STATUS, st)
        self._exits.append(state.exit_of(rep.job, rep.attempt, rep.rank, st))
        fn = self._notify
        if fn is not None:
            fn()

    def _cleanup(self, att: _Attempt, force: bool) -> None:
        """Once every replica of an attempt has ended: agents that reported an exit delete its run dirs (waited
        for up to 10 s, unless ``force``)."""
        ray = self._ray
        if att.cleanup_refs is None:
            keys: dict[int, tuple[_Agent, list[str]]] = {}
            for r in att.reps:
                if r.agent is not None and r.agent_final and r.agent.lost is None:
                    keys.setdefault(id(r.agent), (r.agent, []))[1].append(r.key)
            att.cleanup_refs = [] if force else [a.handle.finish.remote(k) for a, k in keys.values()]
            att.cleanup_at = time.monotonic()
        if att.cleanup_refs and not force:
            done, _ = ray.wait(att.cleanup_refs, num_returns=len(att.cleanup_refs), timeout=0)
            if len(done) < len(att.cleanup_refs) and time.monotonic() - (att.cleanup_at or 0) < 10:
                return
        att.cleaned = True
