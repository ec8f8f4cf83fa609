"""Which fairpod team a Kubernetes manifest is for (docs/kubernetes.md, "Which team").

In order: the team ``fairpod apply --team`` names; the team whose namespace ``metadata.namespace`` is, or whose
LocalQueue the label ``kueue.x-k8s.io/queue-name`` names (a team's names are those its spec entry lists under
``namespaces`` and ``local_queues``, else HyperPod's ``hyperpod-ns-<team>`` and ``hyperpod-ns-<team>-localqueue``:
``fairpod.formats.kube.kueue``); when the file names no team of the cluster, the submitter's only team. A namespace
that is no team's (``default``, ``kubeflow``) names nothing; a queue name that is no team's is an error unless
``--team`` says which team (its quota is then the queue's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fairpod.formats.kube import kueue as K

QUEUE_LABEL = f"{K.GROUP}/queue-name"


class TeamError(ValueError):
    """No team, or two; the message names the field."""


@dataclass
class Teams:
    """The names a cluster's teams go by. ``known`` None: no spec was read (offline), any HyperPod name is read."""

    namespaces: dict[str, str] = field(default_factory=dict)
    queues: dict[str, str] = field(default_factory=dict)
    known: list[str] | None = None
    flag: str | None = None
    only: Callable[[], str | None] | None = None  # the submitter's only team, asked only when needed
    notes: list[str] = field(default_factory=list)
    check: bool = True  # False: a first reading of a file before the server is asked; no team is no error
    types: dict[str, list[str]] = field(default_factory=dict)  # team -> instance types, its quota's first
    sizes: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # type -> (acc, vcpu, GiB) per node

    @classmethod
    def of(cls, teams: Iterable[dict[str, Any]] | None, *, flag: str | None = None,
           only: Callable[[], str | None] | None = None, spec: dict[str, Any] | None = None) -> Teams:
        """From the teams of a spec (``GET /spec``'s): each one's listed names, else HyperPod's; with the whole
        ``spec``, also the instance types a job that names none may run on (``instance_types``)."""
        out = cls(flag=flag, only=only)
        if spec is not None:
            out._cluster(spec)
        if teams is None:
            return out
        out.known = []
        for t in teams:
            name = str(t["name"])
            out.known.append(name)
            for n in t.get("namespaces") or [K.namespace(name)]:
                out.namespaces.setdefault(str(n), name)
            for q in t.get("local_queues") or [K.local_queue(name)]:
                out.queues.setdefault(str(q), name)
        return out

    def _cluster(self, spec: dict[str, Any]) -> None:
        from fairpod.model.catalog import BUILTIN_INSTANCE_TYPES

        cat = {n: (float(t.accelerators), t.vcpu, t.memory_gib) for n, t in BUILTIN_INSTANCE_TYPES.items()}
        cat.update({str(t["name"]): (float(t.get("accelerators", 0)), float(t.get("vcpu", 0)),
                                     float(t.get("memory_gib", 0))) for t in spec.get("instance_types") or []})
        groups = list(dict.fromkeys(str(g["instance_type"]) for g in (spec.get("cluster") or {}).get(
            "instance_groups") or [] if not g.get("accelerator_partition_type")))
        self.sizes = {it: cat[it] for it in groups if it in cat}
        for t in spec.get("teams") or []:
            own = [str(q["instance_type"]) for q in t.get("quota") or [] if q.get("instance_type") in self.sizes]
            self.types[str(t["name"])] = list(dict.fromkeys([*own, *self.sizes]))

    def instance_types(self, team: str, body: dict[str, Any]) -> str | None:
        """For a job that names no instance type in a cluster of several: the types whose nodes fit one replica,
        the team's quota's first, as Kueue tries a ClusterQueue's flavors in order ("a,b": the first that fits
        now); None where the cluster has one type (or none fits: the server says why)."""
        if len(self.sizes) < 2:
            return None
        want = (float(body.get("accelerators") or 0), float(body.get("vcpu") or 0),
                float(body.get("memory_gib") or 0))
        fit = [it for it in self.types.get(team, list(self.sizes))
               if all(w <= have for w, have in zip(want, self.sizes[it], strict=True))
               and (not want[0] or self.sizes[it][0])]
        return ",".join(fit) if fit else None

    def _ns(self, ns: str) -> str | None:
        return self.namespaces.get(ns) if self.known is not None else K.team_in(K.NS_RE, ns)

    def _queue(self, q: str) -> str | None:
        return self.queues.get(q) if self.known is not None else K.team_in(K.QUEUE_RE, q)

    def resolve(self, meta: dict[str, Any], labels: list[dict[str, Any]]) -> tuple[str, str]:
        """(team, where it came from) of a manifest with ``meta`` and the label maps ``labels`` (the job's, its
        templates')."""
        found: dict[str, str] = {}
        ns = meta.get("namespace")
        ns_team = self._ns(str(ns)) if ns is not None else None
        # HyperPod's namespace is one team's own; a namespace the spec lists may hold other teams' LocalQueues
        # too (Kueue's samples put every queue in ``default``), so there the queue the job names decides
        shared = ns_team is not None and self.known is not None and str(ns) != K.namespace(ns_team)
        if ns_team is not None and not shared:
            found[ns_team] = f"namespace {ns}"
        for lab in labels:
            q = lab.get(QUEUE_LABEL)
            if q is None:
                continue
            team = self._queue(str(q))
            if team is not None:
                found.setdefault(team, f"label {QUEUE_LABEL}: {q}")
            elif self.flag is None and self.check:
                raise TeamError(f"label {QUEUE_LABEL}: {q!r} is no LocalQueue of a team of this cluster "
                                f"({self._queues_known()}); list it under the team's local_queues, import the Kueue "
                                "objects that define it, or give --team")
            elif self.flag is not None:
                self.notes.append(f"label {QUEUE_LABEL}: {q!r} is no team's LocalQueue here; --team {self.flag} "
                                  "says which team")
        if shared and not found:
            found[str(ns_team)] = f"namespace {ns}"
        if len(found) > 1:
            raise TeamError("the namespace and the queue-name labels name different teams: "
                            + "; ".join(f"{t} ({src})" for t, src in found.items()))
        if self.flag is not None:
            if found and self.flag not in found:
                team, src = next(iter(found.items()))
                raise TeamError(f"--team {self.flag}, but the file's {src} is team {team}'s")
            return self.flag, "--team"
        if found:
            return next(iter(found.items()))
        team = self.only() if self.only is not None else None
        if team:
            return team, "your only team"
        if not self.check:
            return "", "not known yet"
        said = f" (metadata.namespace {ns} is no team's)" if ns is not None else ""
        raise TeamError(f"which team? the file names no team of this cluster{said}: give --team, or set "
                        f"metadata.namespace to a team's namespace ({self._ns_known()}) or the label "
                        f"{QUEUE_LABEL} to a team's LocalQueue")

    def _ns_known(self) -> str:
        if self.known is None:
            return K.namespace("<team>")
        return ", ".join(sorted(self.namespaces)[:6]) + (", …" if len(self.namespaces) > 6 else "") or "none"

    def _queues_known(self) -> str:
        if self.known is None:
            return f"HyperPod's {K.local_queue('<team>')}"
        return "known: " + (", ".join(sorted(self.queues)[:6]) + (", …" if len(self.queues) > 6 else "") or "none")
