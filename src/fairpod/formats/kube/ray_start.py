"""A KubeRay group's ``rayStartParams`` and a RayJob's ``shutdownAfterJobFinishes``/``ttlSecondsAfterFinished``
(fairpod.formats.kube.rayjob, .raycluster), as fairpod's Ray nodes are started (fairpod.executors.raycluster).

KubeRay writes each key of ``rayStartParams`` as a flag of that group's ``ray start`` (``num-cpus: "0"`` is
``--num-cpus=0``). fairpod starts each replica's Ray node itself, in the replica's sandbox, with the replica's
exact resources, free ports and a temporary directory of its own. Of the parameters:

- **applied**, to ``ray start`` of that group's Ray nodes, in place of what fairpod would give: ``num-cpus`` and
  ``num-gpus`` (Ray's logical counts: ``num-cpus: "0"`` keeps tasks off the head), ``memory`` and
  ``object-store-memory`` (bytes, at most the replica's memory), ``resources`` (custom resources: a JSON object,
  also in KubeRay's quoted form ``'"{\\"TPU\\": 4}"'``);
- **accepted with one warning naming them** (no meaning here): the dashboard's (fairpod starts no dashboard),
  ports (fairpod picks free ones), ``block`` (fairpod keeps each node up itself), KubeRay's resource isolation
  (each replica is a cgroup of its own), ``redis-password`` (no external Redis), log settings, any other key;
  ``disable-usage-stats`` is always so;
- **refused by name**: where Ray writes and which cluster a node joins (``temp-dir``, ``plasma-directory``,
  ``object-spilling-directory``, ``storage``, ``address``, ``node-ip-address``, ``head``, ``system-config``): each
  would take the node out of the replica's sandbox or out of the job's own Ray cluster.
"""

from __future__ import annotations

import json
import math
from typing import Any

START_PARAMS = "FAIRPOD_RAY_START_PARAMS"  # read by fairpod.executors.raycluster: {"head": {..}, "workers": [[n, {..}]]}
KEEP = "FAIRPOD_RAY_KEEP_SECONDS"  # read by fairpod.executors.raycluster: the cluster stays after the entrypoint
APPLIED = ("num-cpus", "num-gpus", "memory", "object-store-memory", "resources")
REFUSED = {
    "temp-dir": "where Ray writes: each node has a temporary directory of its own in its replica's sandbox",
    "plasma-directory": "where Ray writes: the object store is the replica's own shared memory",
    "object-spilling-directory": "where Ray writes: objects spill into the node's own temporary directory",
    "storage": "where Ray writes: give the job's storage path to your program (Ray Train's storage_path)",
    "address": "which cluster a node joins: each replica's Ray node joins its job's own head",
    "node-ip-address": "which address a node binds: each Ray node listens on its replica's address",
    "head": "which node is the head: the head group's replica (rank 0)",
    "system-config": "Ray's internal settings, which include where it writes and which ports it binds",
}
QUIET = ("disable-usage-stats",)  # fairpod starts every Ray node without usage stats


def _resources(value: Any, where: str) -> str:
    """``resources``: a JSON object of names to amounts, also as KubeRay's samples quote it (a JSON string)."""
    v: Any = value
    for _ in range(2):  # '"{\"TPU\": 4}"' is a JSON string holding the object
        if isinstance(v, str):
            try:
                v = json.loads(v)
            except ValueError:
                break
    if not isinstance(v, dict) or not all(isinstance(k, str) and k and isinstance(n, int | float)
                                          and not isinstance(n, bool) and 0 <= n < 1e15 for k, n in v.items()):
        raise ValueError(f"{where}: {value!r} is not a JSON object of resource names to amounts, e.g. "
                         "'\"{\\\"TPU\\\": 4}\"'")
    if {"CPU", "GPU", "memory", "object_store_memory"} & set(v):
        raise ValueError(f"{where}: CPU, GPU and memory are num-cpus, num-gpus and memory, not custom resources")
    return json.dumps(v, sort_keys=True)


def _whole(value: Any, where: str) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or len(text) > 18:
        raise ValueError(f"{where}: {value!r} is not a whole number")
    return int(text)


def read(params: dict[str, Any], where: str, memory_gib: float | None, refused: list[str],
         ignored: list[str]) -> dict[str, str]:
    """The ``ray start`` parameters applied to one group's nodes; refusals appended to ``refused``, the keys with
    no meaning here to ``ignored`` (``where``.``key``)."""
    out: dict[str, str] = {}
    for key, value in params.items():
        at = f"{where}.rayStartParams.{key}"
        if key in REFUSED:
            refused.append(f"{at}: {REFUSED[key]}")
        elif key in QUIET:
            continue
        elif key not in APPLIED:
            ignored.append(f"{where}.rayStartParams.{key}")
        else:
            try:
                out[key] = _resources(value, at) if key == "resources" else str(_whole(value, at))
                if key in ("memory", "object-store-memory") and memory_gib and int(out[key]) > memory_gib * 2**30:
                    raise ValueError(f"{at}: {out[key]} bytes, more than the replica's memory ({memory_gib:g} GiB)")
            except ValueError as e:
                refused.append(str(e))
    return out


def ignored_warning(ignored: list[str]) -> str:
    return (f"{', '.join(ignored)}: not used: fairpod starts each Ray node itself, without a dashboard, on free "
            "ports, in its replica's own cgroup, and keeps it up until the job ends")


def start_env(head: dict[str, str], workers: list[tuple[int, dict[str, str]]], notes: list[str]) -> dict[str, str]:
    """``FAIRPOD_RAY_START_PARAMS`` for the launcher when any group has parameters to apply: rank 0 takes the
    head's, the next ranks each worker group's in turn (``n`` replicas each), ranks beyond them the last group's."""
    if not head and not any(p for _, p in workers):
        return {}
    if len({json.dumps(p, sort_keys=True) for _, p in workers}) > 1:
        notes.append("the worker groups' rayStartParams differ: replicas 1.. take each group's in the order of "
                     "workerGroupSpecs (its replicas, or maxReplicas with the autoscaler), the last group's beyond")
    return {START_PARAMS: json.dumps({"head": head, "workers": [[n, p] for n, p in workers]}, sort_keys=True)}


def keep_env(spec: dict[str, Any], refused: list[str], notes: list[str]) -> dict[str, str]:
    """A RayJob's ``shutdownAfterJobFinishes``/``ttlSecondsAfterFinished`` as how long its Ray cluster stays after
    the entrypoint ends (``FAIRPOD_RAY_KEEP_SECONDS``): ``true`` with a TTL, that many seconds; ``false``, until the
    job is stopped (``fairpod cancel-job``), as KubeRay keeps the RayCluster until the RayJob is deleted. Without the
    field fairpod stops the cluster when the entrypoint ends (KubeRay's default would hold the quota forever)."""
    shutdown, ttl = spec.get("shutdownAfterJobFinishes"), spec.get("ttlSecondsAfterFinished")
    try:
        seconds = 0 if ttl is None else _whole(ttl, "spec.ttlSecondsAfterFinished")
    except ValueError as e:
        refused.append(f"{e} (seconds, 0 or more)")
        return {}
    if shutdown is not None and not isinstance(shutdown, bool):
        refused.append(f"spec.shutdownAfterJobFinishes: {shutdown!r} is not true or false")
        return {}
    if not shutdown and seconds > 0:
        refused.append(f"spec.ttlSecondsAfterFinished {seconds}: it delays the shutdown of "
                       "shutdownAfterJobFinishes: true, which the RayJob does not ask for (KubeRay refuses it too)")
        return {}
    if shutdown is False:
        notes.append("shutdownAfterJobFinishes false: the job's Ray cluster stays after the entrypoint ends, holding "
                     "its replicas, until you stop it (fairpod cancel-job); its log says the entrypoint's exit code")
        return {KEEP: str(math.inf)}
    if seconds:
        notes.append(f"ttlSecondsAfterFinished {seconds}: the job's Ray cluster stays {seconds} s after the entrypoint "
                     "ends, holding its replicas; then the job ends with the entrypoint's exit code")
        return {KEEP: str(seconds)}
    return {}
