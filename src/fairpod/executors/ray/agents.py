"""The node agents: one detached fairpod agent actor per fairpod Ray node, started when the node joins, re-attached
after a restart of the control plane, re-created when it is gone; an agent that dies or stops answering is a
node fault."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fairpod.executors.base import ExecutorError
from fairpod.executors.ray.nodes import RayNode

log = logging.getLogger("fairpod.executors.ray")

AGENT_PREFIX = "fairpod-agent:"  # + the Ray node id: the agent's actor name in the fairpod namespace
AGENT_TIMEOUT = 10.0  # a ready agent that has not answered a call for this long is lost (a node fault)
AGENT_HOLD = 10.0  # a lost agent's node stays faulted this long before a new agent is started there
PING_EVERY = 1.0  # an agent with no replica to ask about is pinged this often
STARTING = "its fairpod agent has not started yet"


@dataclass(slots=True, eq=False)
class _Agent:
    node_id: str
    node: str  # fairpod name of the node
    handle: Any
    created: float  # monotonic
    ready: bool = False
    pid: int | None = None
    sync_ref: Any = None
    sync_reps: list[Any] = field(default_factory=list)  # the replicas the outstanding sync asks about
    sync_sent: float = 0.0  # monotonic
    last_ok: float = 0.0  # monotonic: the last answer
    lost: str | None = None  # why the agent is lost (its node is faulted until the agent is replaced)
    lost_at: float = 0.0


class Agents:
    """The part of :class:`~fairpod.executors.ray.executor.RayExecutor` that keeps one agent per node."""

    _ray: Any
    _lock: threading.RLock
    _agents: dict[str, _Agent]  # by Ray node id
    _agent_cls: Any
    namespace: str
    node_dir: str
    startup_timeout: float
    _agent_replicas_lost: Callable[[_Agent], None]
    _nodes: dict[str, RayNode]
    _by_name: dict[str, RayNode]
    nodes_version: int
    _fence: Callable[[str], None] | None

    def set_fence(self, fence: Callable[[str], None] | None) -> None:
        """``fence(what)`` raises :class:`ExecutorError` when this executor may no longer act (``fairpod up --ha``:
        the lease is lost, :class:`fairpod.server.ha.leader.FencedExecutor`); it is asked before every action the
        executor takes on its own, in its background thread: a pass that may kill an overdue replica or a lost
        agent, stop a replica whose stop came before its start, or clean up; the start of a new agent."""
        self._fence = fence

    def _may(self, what: str) -> bool:
        """Whether the fence lets this executor act on its own now (the fence logs and counts a refusal)."""
        fence = self._fence
        if fence is None:
            return True
        try:
            fence(what)
        except ExecutorError:
            return False
        return True

    def _with_agents(self, table: dict[str, RayNode]) -> dict[str, RayNode]:
        """Start (or find) the agents of live fairpod nodes, forget those of dead nodes; a live Ray node is live
        for fairpod only while its agent answers."""
        now = time.monotonic()
        out: dict[str, RayNode] = {}
        with self._lock:
            for nid in [nid for nid in self._agents if nid not in table or not table[nid].alive]:
                del self._agents[nid]  # the node is gone: so is its agent
            for nid, rn in table.items():
                if not rn.alive or rn.problem is not None:
                    out[nid] = rn
                    continue
                agent = self._agents.get(nid)
                if agent is not None and agent.lost is not None and now - agent.lost_at >= AGENT_HOLD:
                    if not self._may("the start of a node agent"):
                        out[nid] = dataclasses.replace(rn, alive=False, death=agent.lost)
                        continue
                    del self._agents[nid]  # replace it
                    agent = None
                if agent is None:
                    if not self._may("the start of a node agent"):
                        out[nid] = dataclasses.replace(rn, alive=False, death=STARTING)
                        continue
                    agent = self._agents[nid] = self._start_agent(rn)
                if agent.lost is not None:
                    out[nid] = dataclasses.replace(rn, alive=False, death=agent.lost)
                elif not agent.ready:
                    why = STARTING if now - agent.created < self.startup_timeout else (
                        f"its fairpod agent could not start within {self.startup_timeout:g} s (are the node's GPUs "
                        "held by Ray work fairpod does not manage?)")
                    out[nid] = dataclasses.replace(rn, alive=False, death=why)
                else:
                    out[nid] = rn
        return out

    def _start_agent(self, rn: RayNode) -> _Agent:
        """The node's agent: the one already running (a restart of the control plane), else a new one."""
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        name = AGENT_PREFIX + rn.node_id
        try:
            handle = ray.get_actor(name, namespace=self.namespace)
            log.info("re-attached to the fairpod agent of node %s", rn.name)
        except ValueError:
            handle = self._agent_cls.options(
                name=name, namespace=self.namespace, lifetime="detached", max_restarts=0, max_concurrency=16,
                num_cpus=0, num_gpus=rn.gpus,  # the node's GPUs: Ray lends none of them to other work
                scheduling_strategy=NodeAffinitySchedulingStrategy(rn.node_id, soft=False),
            ).remote(f"{self.node_dir}/{self.namespace}")  # fmt: skip
            log.info("started a fairpod agent on node %s", rn.name)
        agent = _Agent(rn.node_id, rn.name, handle, time.monotonic())
        agent.sync_ref = handle.sync.remote([])  # the first answer makes it ready
        agent.sync_sent = agent.created
        return agent

    def _wait_agents(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) until every agent has answered once (at start-up: re-attached agents)."""
        ray = self._ray
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                refs = {a.sync_ref: a for a in self._agents.values() if not a.ready and a.lost is None
                        and a.sync_ref is not None and not a.sync_reps}
            if not refs:
                return
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=max(0.0, deadline - time.monotonic()))
            for ref in ready:
                self._agent_answer(refs[ref], ref)
            if len(ready) == len(refs):
                return

    def _agent_answer(self, agent: _Agent, ref: Any) -> dict[str, Any] | None:
        """The result of an agent's call; a dead agent is marked lost (None)."""
        ray = self._ray
        try:
            result = ray.get(ref, timeout=0)
        except ray.exceptions.GetTimeoutError:
            return None
        except ray.exceptions.ActorUnavailableError:
            return None  # e.g. its node is briefly unreachable: AGENT_TIMEOUT decides
        except gone_errors(ray) as e:
            self._agent_lost(agent, f"died ({_first_line(e)})")
            return None
        now = time.monotonic()
        with self._lock:
            if ref is agent.sync_ref:
                agent.sync_ref = None
            agent.last_ok = now
            if isinstance(result, dict) and "pid" in result:
                agent.pid = int(result["pid"])
                if not agent.ready and agent.lost is None:
                    agent.ready = True
                    log.info("the fairpod agent of node %s is ready (pid %s)", agent.node, agent.pid)
        return result if isinstance(result, dict) else {"result": result}

    def _agent_lost(self, agent: _Agent, why: str) -> None:
        """A node fault: the agent died or stops answering. Its replicas end ``node lost``; a live agent that
        stopped answering is killed, so that its supervisors stop what is left. Not while fenced: a control plane
        that was paused sees every agent silent for as long as it was stopped, and must not kill them."""
        if agent.lost is None and not self._may("the kill of a lost node agent"):
            return
        with self._lock:
            if agent.lost is not None:
                return
            agent.lost = f"its fairpod agent {why}"
            agent.lost_at = time.monotonic()
            agent.sync_ref = None
            log.warning("node %s: %s", agent.node, agent.lost)
            self._node_down(agent)  # the node table says so before any of its replicas' exits is taken
            try:
                self._ray.kill(agent.handle, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
            self._agent_replicas_lost(agent)


    def _node_down(self, agent: _Agent) -> None:
        """With the lock held: the node of a lost agent is not alive in the node table from now on (as the next
        refresh would say), so that the control plane takes the node fault before the replicas' exits and does
        not start the job again on that node (one agent death costs one retry, not two)."""
        rn = self._nodes.get(agent.node_id)
        if rn is None or not rn.alive:
            return
        down = dataclasses.replace(rn, alive=False, death=agent.lost)
        self._nodes = {**self._nodes, agent.node_id: down}
        self._by_name = {**self._by_name, down.name: down}
        self.nodes_version += 1


def gone_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """What a call to an agent raises when the agent is gone: it died, or it could never be placed because its
    node died before it started (Ray's ``ActorUnschedulableError``, which is no ``RayActorError``)."""
    return ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError


def task_error(e: BaseException) -> str:
    """What went wrong in a Ray task or actor call: the exception raised there (its type and last line), not
    Ray's header line (``ray::NodeAgent.start() (pid=…, ip=…)``)."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException) and cause is not e:
        lines = str(cause).strip().splitlines()
        return f"{type(cause).__name__}: {lines[-1]}" if lines else type(cause).__name__
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
