"""HyperPod's names of a team's objects, written and read here only: the namespace ``hyperpod-ns-<team>``, its
LocalQueue ``hyperpod-ns-<team>-localqueue``, its ClusterQueue ``hyperpod-ns-<team>-clusterqueue`` and the
priority class ``<class>-priority``. A leaf module (``re`` only): the ``fairpod``, ``hyperpod`` and ``hyp`` commands
read it without the rest of ``fairpod.formats.kube`` (a spec may list other names per team: ``namespaces``,
``local_queues``; fairpod.formats.kube.teams)."""

from __future__ import annotations

import re

PREFIX = "hyperpod-ns-"
_TEAM = r"(?P<team>[a-z0-9]([-a-z0-9]*[a-z0-9])?)"
NS_RE = re.compile(rf"^{PREFIX}{_TEAM}$")
QUEUE_RE = re.compile(rf"^{PREFIX}{_TEAM}-localqueue$")
CQ_RE = re.compile(rf"^{PREFIX}{_TEAM}-clusterqueue$")
PRIORITY_SUFFIX = "-priority"


def namespace(team: str) -> str:
    return f"{PREFIX}{team}"


def local_queue(team: str) -> str:
    return f"{PREFIX}{team}-localqueue"


def cluster_queue(team: str) -> str:
    return f"{PREFIX}{team}-clusterqueue"


def team_in(pattern: re.Pattern[str], name: str) -> str | None:
    """The team HyperPod's name ``name`` (a namespace, LocalQueue or ClusterQueue per ``pattern``) is of."""
    m = pattern.match(name)
    return m.group("team") if m else None


def team_of_any(name: str) -> str | None:
    """The team of a namespace or a LocalQueue of HyperPod's form; None for any other name."""
    return team_in(QUEUE_RE, name) or team_in(NS_RE, name)


def team_part(name: str) -> str:
    """The team a name of HyperPod's form is of, not checked (``hyperpod-ns-<team>``,
    ``hyperpod-ns-<team>-localqueue``); any other name as it is."""
    if not name.startswith(PREFIX) or len(name) == len(PREFIX):
        return name
    rest = name[len(PREFIX):]
    return rest[: -len("-localqueue")] if rest.endswith("-localqueue") and len(rest) > len("-localqueue") else rest


def priority_class(name: str) -> str:
    """The class ``name`` as HyperPod's priority class name (``training`` -> ``training-priority``)."""
    return f"{name}{PRIORITY_SUFFIX}"


def class_of(priority: str) -> str:
    """HyperPod's ``<class>-priority`` as fairpod's class (``training-priority`` -> ``training``); other names as
    they are."""
    suffix = PRIORITY_SUFFIX
    return priority[: -len(suffix)] if priority.endswith(suffix) and len(priority) > len(suffix) else priority
