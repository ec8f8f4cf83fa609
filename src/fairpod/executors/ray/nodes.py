"""The node table: which Ray nodes are fairpod nodes, under which names."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairpod.executors import state

ITYPE_RESOURCE = "fairpod/instance-type:"
ITYPE_LABEL = "fairpod/instance-type"
NODE_ID_LABEL = "ray.io/node-id"
NODES_FILE = "ray-nodes.json"
GROUP = "ray"  # the instance group of every fairpod node of a Ray cluster
NODE_ID = "ray_node_id"  # the stored labels of such a node: its Ray node id and address
ADDRESS = "ray_address"


@dataclass(frozen=True, slots=True)
class RayNode:
    """A Ray node as fairpod sees it. ``instance_type`` None: not a fairpod node (e.g. a CPU-only head)."""

    name: str
    node_id: str
    address: str
    alive: bool
    instance_type: str | None
    gpus: float
    problem: str | None = None  # why it cannot be a fairpod node although it asks to be one
    death: str | None = None  # Ray's reason, for a dead node
    expected_death: bool = False  # stopped on purpose (ray stop, scaled down) rather than lost
    labels: tuple[tuple[str, str], ...] = ()  # the node's own Ray labels (e.g. rack, block), not Ray's ray.io/ ones

    @property
    def group(self) -> str:
        """The instance group fairpod stores the node under."""
        return GROUP

    @property
    def store_labels(self) -> dict[str, str]:
        """The labels fairpod stores with the node (``NodeTable.node_label`` among them)."""
        return {NODE_ID: self.node_id, ADDRESS: self.address}


def _instance_type(raw: dict[str, Any]) -> tuple[str | None, str | None]:
    types = {k[len(ITYPE_RESOURCE):] for k in (raw.get("Resources") or {}) if k.startswith(ITYPE_RESOURCE)}
    label = (raw.get("Labels") or {}).get(ITYPE_LABEL)
    if label:
        types.add(str(label))
    if not types:
        return None, None
    if len(types) > 1:
        return sorted(types)[0], f"it names several instance types ({', '.join(sorted(types))})"
    return types.pop(), None


def _sanitize(name: str) -> str:
    out = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "ray-node"
    return out[:200]


class NodeTable:
    """The part of :class:`~fairpod.executors.ray.executor.RayExecutor` that keeps the node table."""

    _ray: Any
    _lock: threading.RLock
    _names: dict[str, str]
    _nodes: dict[str, RayNode]
    _by_name: dict[str, RayNode]
    nodes_version: int
    node_label = NODE_ID  # every stored node of this table has it (NodeTable)
    root: Path

    def cluster_nodes(self) -> list[RayNode]:
        """Every named Ray node, live and dead, as of the last refresh (every ``poll_interval``)."""
        with self._lock:
            return list(self._by_name.values())

    def _refresh_nodes(self) -> None:
        raw = self._ray.nodes()
        with self._lock:
            table: dict[str, RayNode] = {}
            taken = {name: nid for nid, name in self._names.items()}
            alive_ids = {n["NodeID"] for n in raw if n.get("Alive")}
            changed = False
            for n in sorted(raw, key=lambda n: (not n.get("Alive"), n["NodeID"])):
                nid = n["NodeID"]
                itype, problem = _instance_type(n)
                if itype is None:
                    continue
                name = self._names.get(nid)
                if name is None:
                    if not n.get("Alive"):
                        continue  # died before we saw it
                    base = _sanitize(str(n.get("NodeName") or n.get("NodeManagerAddress") or nid))
                    owner = taken.get(base)
                    name = base if owner is None or owner not in alive_ids else f"{base}-{nid[:8]}"
                    if owner is not None and name == base:
                        self._names.pop(owner, None)  # a dead node's name passes to the new one
                    self._names[nid] = name
                    taken[name] = nid
                    changed = True
                death = None
                if not n.get("Alive"):
                    death = str(n.get("DeathReasonMessage") or "") or "dead"
                table[nid] = RayNode(
                    name=name, node_id=nid, address=str(n.get("NodeManagerAddress", "")), alive=bool(n.get("Alive")),
                    instance_type=itype, gpus=float((n.get("Resources") or {}).get("GPU", 0)), problem=problem,
                    death=death, expected_death=n.get("DeathReason") in (1, 4),
                    labels=tuple(sorted((str(k), str(v)) for k, v in (n.get("Labels") or {}).items()
                                        if not str(k).startswith("ray.io/") and k != ITYPE_LABEL)),
                )  # fmt: skip
            known = {n["NodeID"] for n in raw}
            for nid in [nid for nid in self._names if nid not in known]:
                del self._names[nid]  # Ray forgot the node: membership sees its name as gone
                changed = True
            table = self._with_agents(table)
            by_name = {r.name: r for r in table.values()}
            if by_name != self._by_name or table != self._nodes:
                self.nodes_version += 1
            self._nodes, self._by_name = table, by_name
            if changed:
                self._save_names()

    def _with_agents(self, table: dict[str, RayNode]) -> dict[str, RayNode]:
        return table  # see :class:`fairpod.executors.ray.agents.Agents`

    def _load_names(self) -> dict[str, str]:
        data = state.read_json(self.root / NODES_FILE) or {}
        return {str(k): str(v) for k, v in data.items()}

    def _save_names(self) -> None:
        state.write_json(self.root / NODES_FILE, dict(self._names))

