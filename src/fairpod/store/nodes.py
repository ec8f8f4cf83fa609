"""Nodes: one row per machine, with its health as the control plane last saw it."""

from __future__ import annotations

import json
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Text, cast, select

from fairpod.model.nodes import DeepHealthCheck, NodeHealth
from fairpod.store import fields as f
from fairpod.store.db import Ops
from fairpod.store.records import AlreadyExists, Node, NotFound
from fairpod.store.tables import NodeRow

NODE_FIELDS: dict[str, f.Conv] = {
    "instance_group": f.text,
    "instance_type": f.text,
    "health_status": f.enum(NodeHealth),
    "deep_health_check": f.optional(f.enum(DeepHealthCheck)),
    "cordoned": f.boolean,
    "fault_type": f.optional(f.text),
    "fault_reason": f.optional(f.text),
    "last_check_at": f.optional(f.number),
    "labels": f.json_of(dict),
}


# the columns a node is built from, in the order of :func:`_node`'s parameters
_COLUMNS = ("name", "instance_group", "instance_type", "health_status", "deep_health_check", "cordoned",
            "fault_type", "fault_reason", "last_check_at", "labels", "created_at")
# what ``list_nodes`` selects (every node, read by the health agents' round: 10,000 nodes every 10 s): the labels as
# their JSON text, decoded only when there are some
_ROWS = [cast(NodeRow.labels, Text).label("labels") if c == "labels" else getattr(NodeRow, c) for c in _COLUMNS]
_HEALTH = {h.value: h for h in NodeHealth}  # the enums from a table, not their constructors, for each row
_DEEP = {d.value: d for d in DeepHealthCheck}


def _node(name: str, instance_group: str, instance_type: str, health: str, deep: str | None, cordoned: Any,
          fault_type: str | None, fault_reason: str | None, last_check_at: float | None,
          labels: str | dict[str, Any] | None, created_at: float) -> Node:
    """A node from its columns (``_COLUMNS``); ``labels`` decoded already (an ORM row) or as JSON text (``_ROWS``)."""
    if isinstance(labels, str):
        labels = None if labels in ("{}", "null") else json.loads(labels)
    return Node(name, instance_group, instance_type, _HEALTH.get(health) or NodeHealth(health),
                None if deep is None else _DEEP.get(deep) or DeepHealthCheck(deep), bool(cordoned), fault_type,
                fault_reason, last_check_at, dict(labels or {}), created_at)


def to_node(r: NodeRow) -> Node:
    return _node(*(getattr(r, c) for c in _COLUMNS))


def _many(v: Any | Iterable[Any] | None) -> list[Any] | None:
    if v is None:
        return None
    if isinstance(v, str):
        return [v]
    return list(v)


class NodeOps(Ops):
    def add_node(
        self,
        name: str,
        instance_group: str,
        instance_type: str,
        *,
        health_status: NodeHealth | str = NodeHealth.SCHEDULABLE,
        deep_health_check: DeepHealthCheck | str | None = None,
        cordoned: bool = False,
        labels: Mapping[str, Any] | None = None,
        now: float | None = None,
    ) -> Node:
        """Add a node; raises ``AlreadyExists`` if the name is taken."""
        vals = f.check(
            "node",
            NODE_FIELDS,
            {
                "instance_group": instance_group,
                "instance_type": instance_type,
                "health_status": health_status,
                "deep_health_check": deep_health_check,
                "cordoned": cordoned,
                "labels": dict(labels or {}),
            },
        )
        f.check("node", {"name": f.text}, {"name": name})
        if not name:
            raise ValueError("node.name: must not be empty")
        with self._session(True) as s:
            if s.get(NodeRow, name) is not None:
                raise AlreadyExists(f"node {name!r} exists already")
            row = NodeRow(
                name=name,
                created_at=self._now(now),
                fault_type=None,
                fault_reason=None,
                last_check_at=None,
                **vals,
            )
            s.add(row)
            s.flush()
            return to_node(row)

    def get_node(self, name: str) -> Node | None:
        with self._session(False) as s:
            row = s.get(NodeRow, name)
            return None if row is None else to_node(row)

    def list_nodes(
        self,
        *,
        instance_group: str | Iterable[str] | None = None,
        instance_type: str | Iterable[str] | None = None,
        health_status: NodeHealth | str | Iterable[NodeHealth | str] | None = None,
    ) -> list[Node]:
        """All nodes matching every given filter, by name."""
        q = select(*_ROWS).order_by(NodeRow.name)
        if (g := _many(instance_group)) is not None:
            q = q.where(NodeRow.instance_group.in_(g))
        if (t := _many(instance_type)) is not None:
            q = q.where(NodeRow.instance_type.in_(t))
        if (h := _many(health_status)) is not None:
            q = q.where(NodeRow.health_status.in_([str(NodeHealth(x)) for x in h]))
        with self._session(False) as s:
            return [_node(*typing.cast("tuple[Any, ...]", r)) for r in s.connection().execute(q)]

    def node_states(self) -> list[tuple[str, bool]]:
        """Every node's name and whether it is schedulable (healthy and not cordoned), by name; no record built."""
        q = select(NodeRow.name, NodeRow.health_status, NodeRow.cordoned).order_by(NodeRow.name)
        ok = str(NodeHealth.SCHEDULABLE)
        with self._session(False) as s:
            return [(n, h == ok and not c) for n, h, c in s.execute(q).all()]

    def get_nodes(self, names: Iterable[str]) -> dict[str, Node]:
        """The nodes of these names that exist, by name."""
        wanted = list(names)
        out: dict[str, Node] = {}
        with self._session(False) as s:
            for i in range(0, len(wanted), 500):
                for r in s.scalars(select(NodeRow).where(NodeRow.name.in_(wanted[i:i + 500]))):
                    out[r.name] = to_node(r)
        return out

    def node_groups(self) -> dict[str, str]:
        """Every node's instance group, by node name (two columns: no node record built)."""
        with self._session(False) as s:
            return {n: g for n, g in s.execute(select(NodeRow.name, NodeRow.instance_group)).all()}

    def update_node(self, name: str, changes: Mapping[str, Any]) -> Node:
        """Set the given fields (any of ``NODE_FIELDS``); raises ``NotFound`` or ValueError (nothing changed)."""
        vals = f.check("node", NODE_FIELDS, changes)
        with self._session(True) as s:
            row = s.get(NodeRow, name, with_for_update=True)
            if row is None:
                raise NotFound(f"node {name!r} does not exist")
            for k, v in vals.items():
                setattr(row, k, v)
            s.flush()
            return to_node(row)

    def delete_node(self, name: str) -> bool:
        """Delete a node; False if there was none. Events naming it keep the name."""
        with self._session(True) as s:
            row = s.get(NodeRow, name)
            if row is None:
                return False
            s.delete(row)
            return True
