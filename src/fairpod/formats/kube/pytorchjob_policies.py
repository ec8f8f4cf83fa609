"""A PyTorchJob's policies (fairpod.formats.kube.pytorchjob): restarts (the replicas' ``restartPolicy`` and
``runPolicy.backoffLimit``), ``runPolicy``'s deadline, the ``elasticPolicy``'s size, Kueue's topology annotations."""

from __future__ import annotations

from typing import Any

from fairpod.formats.kube.manifest import ManifestError, whole

REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
DEFAULT_MAX_RETRY = 3
RESTARTING = ("OnFailure", "Always", "ExitCode")


def retries(rp: dict[str, Any], policies: dict[str, str], notes: list[str]) -> tuple[bool, int]:
    """(auto_resume, max_retry) of a job without HyperPod's annotations: the replicas' ``restartPolicy`` says
    whether a failed job runs again (OnFailure, Always, ExitCode: yes; Never or none: no), ``runPolicy.backoffLimit``
    how often (the training operator's count of restarts; none: fairpod's default, 3)."""
    for rtype, pol in policies.items():
        if pol and pol not in (*RESTARTING, "Never"):
            raise ManifestError(f"spec.pytorchReplicaSpecs.{rtype}.restartPolicy: {pol!r} is not OnFailure, Always, "
                                "ExitCode or Never")
    limit = None if rp.get("backoffLimit") is None else whole(rp["backoffLimit"], "spec.runPolicy.backoffLimit", 0)
    restarting = sorted({p for p in policies.values() if p in RESTARTING})
    if not restarting:
        if limit:
            notes.append(f"runPolicy.backoffLimit {limit} with restartPolicy Never (or none): the training operator "
                         "restarts no replica, so neither does fairpod")
        return False, 0
    if limit is None:
        notes.append(f"restartPolicy {'/'.join(restarting)} without runPolicy.backoffLimit: up to "
                     f"{DEFAULT_MAX_RETRY} restarts of the whole job")
        return True, DEFAULT_MAX_RETRY
    if limit > 1000:
        raise ManifestError(f"spec.runPolicy.backoffLimit: {limit} restarts; fairpod allows at most 1000")
    notes.append(f"restartPolicy {'/'.join(restarting)}, runPolicy.backoffLimit {limit}: the job is restarted whole "
                 f"up to {limit} times")
    return limit > 0, limit


def run_policy(rp: dict[str, Any], notes: list[str]) -> float | None:
    """``runPolicy``'s deadline (``activeDeadlineSeconds``: fairpod's runtime limit); what only Kubernetes' pods
    mean is noted, ``suspend: true`` refused."""
    if rp.get("suspend"):
        raise ManifestError("spec.runPolicy.suspend: true: fairpod queues the job itself; submit it when it should "
                            "run")
    for key in ("cleanPodPolicy", "ttlSecondsAfterFinished", "schedulingPolicy", "managedBy"):
        if rp.get(key) is not None:
            notes.append(f"runPolicy.{key}: about Kubernetes pods or another scheduler; fairpod keeps each replica's "
                         "log and exit, and schedules the job itself")
    if rp.get("activeDeadlineSeconds") is None:
        return None
    return float(whole(rp["activeDeadlineSeconds"], "spec.runPolicy.activeDeadlineSeconds", 1))



def elastic_size(ep: dict[str, Any], backend: str, replicas: int, notes: list[str]) -> dict[str, int]:
    """The fairpod size of a job with an elasticPolicy of ``replicas`` (Master + Worker) replicas.

    With torchrun's c10d rendezvous (the default) and ``minReplicas`` below the replica count, the job is
    elastic: ``min_nodes`` = max(1, minReplicas), ``max_nodes`` = the replica count (lowered to maxReplicas when
    that is smaller; fairpod never runs more replicas than the manifest asks). Any other rendezvous backend
    (etcd, etcd-v2, static) names a rendezvous that is not fairpod's, so the job runs its replicas exactly."""
    lo = None if ep.get("minReplicas") is None else whole(ep["minReplicas"], "spec.elasticPolicy.minReplicas", 0)
    hi = None if ep.get("maxReplicas") is None else whole(ep["maxReplicas"], "spec.elasticPolicy.maxReplicas", 1)
    if lo is not None and hi is not None and lo > hi:
        raise ManifestError(f"spec.elasticPolicy: minReplicas {lo} is more than maxReplicas {hi}")
    if lo is None and hi is None:
        return {"nodes": replicas}
    asked = f"elasticPolicy min/max replicas {'-' if lo is None else lo}/{'-' if hi is None else hi}"
    if backend != "c10d":
        notes.append(f"{asked}: not elastic here, the {backend} rendezvous it names is not fairpod's; fairpod runs "
                     f"exactly {replicas} replicas at once (PET_NNODES={replicas})")
        return {"nodes": replicas}
    if lo is None or lo >= replicas:
        why = "no minReplicas" if lo is None else f"minReplicas is not below the {replicas} replicas"
        notes.append(f"{asked}: {why}, so fairpod runs exactly {replicas} replicas at once (PET_NNODES={replicas})")
        return {"nodes": replicas}
    lo, top = max(1, lo), replicas
    if hi is not None and hi < replicas:
        top = max(hi, lo)
        notes.append(f"elasticPolicy maxReplicas {hi} is below the {replicas} replicas: fairpod runs at most {top}")
    if top == lo:
        notes.append(f"{asked}: fairpod runs exactly {lo} replicas at once (PET_NNODES={lo})")
        return {"nodes": lo}
    notes.append(f"{asked}: elastic, fairpod starts it with {lo} replicas when only {lo} fit and grows it up to "
                 f"{top} (PET_NNODES={lo}:{top})")
    return {"nodes": lo, "min_nodes": lo, "max_nodes": top}


def topology(annotations: list[dict[str, Any]]) -> dict[str, str]:
    """Kueue's podset topology annotations (on the job or its pod templates): the level is the node label's
    last part, ``cloud.provider.com/topology-rack`` -> ``rack`` (a level of the cluster spec's topology_levels)."""
    out: dict[str, str] = {}
    for ann in annotations:
        for key, field_name in ((REQUIRED_TOPOLOGY, "required_topology"), (PREFERRED_TOPOLOGY, "preferred_topology")):
            if ann.get(key):
                level = str(ann[key]).rsplit("/", 1)[-1]
                level = level.removeprefix("topology-") or level
                if out.get(field_name, level) != level:
                    raise ManifestError(f"annotation {key}: the templates name different levels "
                                        f"({out[field_name]}, {level})")
                out[field_name] = level
    if len(out) > 1:
        raise ManifestError(f"annotations {REQUIRED_TOPOLOGY} and {PREFERRED_TOPOLOGY}: give one, not both")
    return out

