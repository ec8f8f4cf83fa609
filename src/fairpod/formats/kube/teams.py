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

    @classmethod
    def of(cls, teams: Iterable[dict[str, Any]] | None, *, flag: str | None = None,
           only: Callable[[], str | None] | None = None) -> Teams:
        """From the teams of a spec (``GET /spec``'s): each one's listed names, else HyperPod's."""
        out = cls(flag=flag, only=only)
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

    def _ns(self, ns: str) -> str | None:
        return self.namespaces.get(ns) if self.known is not None else K.team_in(K.NS_RE, ns)

    def _queue(self, q: str) -> str | None:
        return self.queues.get(q) if self.known is not None else K.team_in(K.QUEUE_RE, q)

    def resolve(self, meta: dict[str, Any], labels: list[dict[str, Any]]) -> tuple[str, str]:
        """(team, where it came from) of a manifest with ``meta`` and the label maps ``labels`` (the job's, its
        templates')."""
        found: dict[str, str] = {}
        ns = meta.get("namespace")
        if ns is not None and (team := self._ns(str(ns))):
            found[team] = f"namespace {ns}"
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
            else:
                self.notes.append(f"label {QUEUE_LABEL}: {q!r} is no team's LocalQueue here; --team {self.flag} "
                                  "says which team")
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
