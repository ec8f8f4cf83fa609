"""Kubeflow ``PyTorchJob`` manifests, as written for HyperPod task governance, turned into fairpod jobs.

What is read (everything else is reported, never silently dropped):

* team: ``metadata.namespace: hyperpod-ns-<team>``, or the label ``kueue.x-k8s.io/queue-name:
  hyperpod-ns-<team>-localqueue`` (on the job or its pod templates);
* priority: the label ``kueue.x-k8s.io/priority-class: <class>-priority``;
* replicas: ``Master`` (at most 1) + ``Worker`` replicas, one fairpod replica per node; resources per replica
  from the container's limits (else requests): ``nvidia.com/gpu`` (or ``aws.amazon.com/neurondevice``) are
  accelerators, ``cpu`` and ``memory`` vCPU and GiB; ``nodeSelector`` ``node.kubernetes.io/instance-type``
  is the instance type, ``sagemaker.amazonaws.com/deep-health-check-status: Passed`` keeps the job on
  nodes that passed the deep health check;
* MIG partitions: a container limit ``nvidia.com/mig-1g.10gb: N`` asks for N partitions of that profile per
  replica (``accelerator_partition_type`` / ``accelerator_partition_count``);
* topology: Kueue's annotations ``kueue.x-k8s.io/podset-required-topology`` / ``…-preferred-topology`` (on the
  job or its pod templates); the level is the label's last part (``…/topology-rack`` is the level ``rack``);
* command: the container's ``command`` + ``args``, its ``env`` (``value`` entries) and ``workingDir``;
* auto-resume: the annotations ``sagemaker.amazonaws.com/enable-job-auto-resume`` and
  ``sagemaker.amazonaws.com/job-max-retry-count``;
* torchrun: as the training operator does, replicas get ``PET_*`` variables: with an ``elasticPolicy`` a c10d
  rendezvous (fairpod runs no etcd: the rendezvous is torchrun's own store on 127.0.0.1 and the job's port),
  ``PET_NNODES`` the replica count, ``PET_MAX_RESTARTS``, ``PET_NPROC_PER_NODE``; without one a static
  rendezvous (``PET_NODE_RANK``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``);
* elastic: an ``elasticPolicy`` with the c10d rendezvous (``rdzvBackend: c10d`` or none) and ``minReplicas``
  below the replica count makes an elastic fairpod job: ``min_nodes`` = max(1, minReplicas), ``max_nodes`` =
  the replica count (or ``maxReplicas`` when smaller), ``PET_NNODES=MIN:MAX``. Another backend (etcd,
  etcd-v2, static) runs the replica count exactly, with a note: the rendezvous it names is not fairpod's.

The container's ``image`` runs (docs/containers.md): ``command``/``args`` in it (the image's entrypoint when
none is given; ``$(VAR)`` expanded as Kubernetes does), ``env``, ``imagePullPolicy``, and ``volumeMounts`` of
``hostPath`` volumes bound at their ``mountPath``; the ``PET_*`` variables are given as ``$(VAR)`` templates of
the replica's own. ``fairpod apply --on-host`` runs the command on the node instead, as fairpod did before
images (a warning says the image is not used; an absolute command path that does not exist here, like
``/usr/local/bin/torchrun``, is looked up by name on the replica's PATH; volumes are not mounted). Other documents in the file (the etcd Service and
Deployment of the seed post) are skipped with a warning.

Longer than fairpod's usual module: one PyTorchJob's conversion reads each field of the manifest in one place,
to be checked against Kubeflow's documentation side by side.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fairpod.formats.kube.image import DOCKER_HUB, VolumeError, image_env, qualify, volumes
from fairpod.formats.kube.teams import TeamError, Teams

PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
AUTO_RESUME = "sagemaker.amazonaws.com/enable-job-auto-resume"
MAX_RETRY = "sagemaker.amazonaws.com/job-max-retry-count"
ACCEL_RESOURCES = ("nvidia.com/gpu", "aws.amazon.com/neurondevice", "aws.amazon.com/neuron", "amd.com/gpu")
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
DHC_LABEL = "sagemaker.amazonaws.com/deep-health-check-status"
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
ENV_CONFIG = "FAIRPOD_PYTORCHJOB"
DEFAULT_MAX_RETRY = 3
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class ManifestError(ValueError):
    """A manifest fairpod cannot run; the message names the field."""


@dataclass
class Converted:
    body: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kind: tuple[str, str] = ("PyTorchJob", "pytorchjob.kubeflow.org")  # its kind, and as kubectl names what it made


def _map(v: Any, where: str) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ManifestError(f"{where} must be a mapping")
    return v


def quantity(v: Any, where: str) -> float:
    """A Kubernetes quantity: ``4``, ``500m``, ``32Gi``, ``1.5G``, ``1e3`` … as a plain number."""
    text = str(v).strip()
    m = re.fullmatch(r"([0-9.]+(?:[eE][-+]?\d+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?", text)
    if not m:
        raise ManifestError(f"{where}: cannot read the quantity {v!r}")
    num = float(m.group(1))
    mult = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "Ki": 2**10,
            "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}[m.group(2)]
    return num * mult


def _team(meta: dict[str, Any], labels: list[dict[str, Any]], teams: Teams | None = None) -> tuple[str, str]:
    """The job's team (fairpod.formats.kube.teams); without ``teams``, HyperPod's names are read."""
    try:
        return (teams or Teams()).resolve(meta, labels)
    except TeamError as e:
        raise ManifestError(str(e)) from None


def _container(spec: dict[str, Any], where: str, warnings: list[str]) -> dict[str, Any]:
    containers = spec.get("containers") or []
    if not isinstance(containers, list) or not containers:
        raise ManifestError(f"{where}.spec.containers: the pod template has no container")
    chosen = next((c for c in containers if isinstance(c, dict) and c.get("name") == "pytorch"), containers[0])
    others = [str(c.get("name")) for c in containers if c is not chosen and isinstance(c, dict)]
    if others:
        warnings.append(f"{where}: only the container {chosen.get('name')!r} runs; not run: {', '.join(others)}")
    if spec.get("initContainers"):
        warnings.append(f"{where}.spec.initContainers are not run on the local executor")
    return _map(chosen, f"{where}.spec.containers[{chosen.get('name')}]")


def _resources(c: dict[str, Any], where: str, warnings: list[str]) -> dict[str, Any]:
    res = _map(c.get("resources"), f"{where}.resources")
    limits, requests = _map(res.get("limits"), f"{where}.resources.limits"), _map(res.get("requests"),
                                                                               f"{where}.resources.requests")
    out: dict[str, Any] = {}
    ignored = []
    for key in sorted(set(limits) | set(requests)):
        v = limits.get(key, requests.get(key))
        mig = re.fullmatch(r"nvidia\.com/(mig-[0-9]+g\.[0-9]+gb)", key)
        if mig:  # MIG partitions, as the GPU operator's mixed strategy names them
            n = quantity(v, f"{where}.resources {key}")
            if "accelerator_partition_type" in out or n != int(n) or n < 1:
                raise ManifestError(f"{where}.resources {key}: one MIG profile, a whole number of partitions")
            out.update(accelerator_partition_type=mig.group(1), accelerator_partition_count=int(n))
        elif key in ACCEL_RESOURCES:
            out["accelerators"] = out.get("accelerators", 0.0) + quantity(v, f"{where}.resources {key}")
        elif key == "cpu":
            out["vcpu"] = quantity(v, f"{where}.resources cpu")
        elif key == "memory":
            out["memory_gib"] = quantity(v, f"{where}.resources memory") / 2**30
        else:
            ignored.append(key)
    if ignored:
        warnings.append(f"{where}.resources: {', '.join(ignored)} not known to fairpod; ignored")
    if "accelerator_partition_type" in out and out.get("accelerators"):
        raise ManifestError(f"{where}.resources: whole GPUs and MIG partitions at once; ask for one of them")
    return out


def _command(c: dict[str, Any], where: str, in_image: bool = False) -> list[str]:
    cmd, args = c.get("command") or [], c.get("args") or []
    if not isinstance(cmd, list) or not isinstance(args, list):
        raise ManifestError(f"{where}: command and args must be lists")
    argv = [str(x) for x in [*cmd, *args]]
    if not cmd and not in_image:
        raise ManifestError(f"{where}.command: the container has no command (the image's entrypoint cannot be "
                            "used on the local executor); give the command to run")
    return argv


def _env(c: dict[str, Any], where: str, warnings: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    skipped = []
    for e in c.get("env") or []:
        if not isinstance(e, dict) or "name" not in e:
            raise ManifestError(f"{where}.env: every entry needs a name")
        if "value" in e:
            out[str(e["name"])] = "" if e["value"] is None else str(e["value"])
        else:
            skipped.append(str(e["name"]))
    if skipped:
        warnings.append(f"{where}.env: {', '.join(skipped)} use valueFrom (secrets, config maps, fields), which "
                        "the local executor cannot resolve; not set")
    if c.get("envFrom"):
        warnings.append(f"{where}.envFrom cannot be resolved on the local executor; not set")
    return out


def _signature(c: dict[str, Any], spec: dict[str, Any]) -> str:
    keep = {k: c.get(k) for k in ("command", "args", "env", "resources", "image", "workingDir")}
    return json.dumps([keep, spec.get("nodeSelector")], sort_keys=True, default=str)


def convert(doc: dict[str, Any], *, python: str, cwd: str, on_host: bool = False, teams: Teams | None = None,
            registry: str = DOCKER_HUB) -> Converted:
    """The fairpod job (POST /jobs body) of one PyTorchJob document."""
    warnings: list[str] = []
    notes: list[str] = []
    api = str(doc.get("apiVersion", ""))
    if not api.startswith("kubeflow.org/"):
        warnings.append(f"apiVersion {api!r}: expected kubeflow.org/v1; reading it as one")
    meta = _map(doc.get("metadata"), "metadata")
    spec = _map(doc.get("spec"), "spec")
    name = str(meta.get("name") or "")
    if not NAME_RE.match(name) or len(name) > 63:
        raise ManifestError(f"metadata.name {name!r}: fairpod job names are lower-case letters, digits and '-' "
                            "(at most 63)")
    replicas = _map(spec.get("pytorchReplicaSpecs"), "spec.pytorchReplicaSpecs")
    unknown = sorted(set(replicas) - {"Master", "Worker"})
    if unknown:
        raise ManifestError(f"spec.pytorchReplicaSpecs: unknown replica type(s) {', '.join(unknown)} "
                            "(Master, Worker)")
    if not replicas:
        raise ManifestError("spec.pytorchReplicaSpecs has no Worker (or Master)")
    counts: dict[str, int] = {}
    restart_policies: dict[str, str] = {}
    templates: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {}
    for rtype, rs in replicas.items():
        rs = _map(rs, f"spec.pytorchReplicaSpecs.{rtype}")
        n = rs.get("replicas", 1)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ManifestError(f"spec.pytorchReplicaSpecs.{rtype}.replicas must be a whole number >= 1, got {n!r}")
        if rtype == "Master" and n != 1:
            raise ManifestError(f"spec.pytorchReplicaSpecs.Master.replicas must be 1, got {n}")
        counts[rtype] = n
        restart_policies[rtype] = str(rs.get("restartPolicy") or "")
        tpl = _map(rs.get("template"), f"spec.pytorchReplicaSpecs.{rtype}.template")
        tspec = _map(tpl.get("spec"), f"spec.pytorchReplicaSpecs.{rtype}.template.spec")
        where = f"spec.pytorchReplicaSpecs.{rtype}.template"
        templates[rtype] = (_map(tpl.get("metadata"), f"{where}.metadata"), tspec, _container(tspec, where, warnings))
    if len({_signature(c, s) for _, s, c in templates.values()}) > 1:
        raise ManifestError("Master and Worker differ (command, env, resources, image or nodeSelector): fairpod runs "
                            "every replica of a job alike; give both the same template")
    rtype = "Worker" if "Worker" in templates else "Master"
    tmeta, tspec, c = templates[rtype]
    where = f"spec.pytorchReplicaSpecs.{rtype}.template.spec.containers[{c.get('name')}]"
    labels = [_map(meta.get("labels"), "metadata.labels")] + [_map(m.get("labels"), "template.metadata.labels")
                                                              for m, _, _ in templates.values()]
    team, team_src = _team(meta, labels, teams)
    notes.append(f"team {team} ({team_src})")
    priority = None
    for lab in labels:
        if lab.get(PRIORITY_LABEL):
            pc = str(lab[PRIORITY_LABEL])
            priority = pc[: -len("-priority")] if pc.endswith("-priority") else pc
            if priority == pc:
                warnings.append(f"label {PRIORITY_LABEL}: {pc!r} does not end in -priority; using it as the class")
            break
    nodes = sum(counts.values())
    res = _resources(c, where, warnings)
    ann = _map(meta.get("annotations"), "metadata.annotations")
    auto = str(ann.get(AUTO_RESUME, "false")).strip().lower() in ("true", "1", "yes")
    max_retry = 0
    if MAX_RETRY in ann:
        try:
            max_retry = int(str(ann[MAX_RETRY]))
        except ValueError:
            raise ManifestError(f"annotation {MAX_RETRY}: {ann[MAX_RETRY]!r} is not a whole number") from None
        if not auto:
            warnings.append(f"annotation {MAX_RETRY} without {AUTO_RESUME}: \"true\" has no effect")
    elif auto:
        max_retry = DEFAULT_MAX_RETRY
        notes.append(f"auto-resume on without {MAX_RETRY}: up to {DEFAULT_MAX_RETRY} restarts")
    run_policy = _map(spec.get("runPolicy"), "spec.runPolicy")
    if AUTO_RESUME not in ann and MAX_RETRY not in ann:
        auto, max_retry = _retries(run_policy, restart_policies, notes)
    selector = _map(tspec.get("nodeSelector"), "nodeSelector")
    instance_type = None
    dhc_only = False
    for k, v in selector.items():
        if k in INSTANCE_TYPE_LABELS:
            instance_type = str(v)
        elif k == DHC_LABEL and str(v) == "Passed":
            dhc_only = True
        elif k == HEALTH_LABEL and str(v) == "Schedulable":
            notes.append(f"nodeSelector {HEALTH_LABEL}: fairpod places jobs on schedulable nodes only")
        else:
            warnings.append(f"nodeSelector {k}: {v} is not known to fairpod; ignored")
    affinity = tspec.get("affinity")
    types = _instance_types_in(affinity)
    if types:  # several instance types in order of preference: the job starts on the first that fits now
        if instance_type is not None:
            raise ManifestError("the instance type is given twice (nodeSelector and nodeAffinity): give one")
        instance_type = ",".join(types)
        affinity = None
    if affinity or tspec.get("tolerations"):
        warnings.append("affinity and tolerations are not used: fairpod places the job by its quota rules")
    image = str(c["image"]) if c.get("image") else None
    if image and not on_host and qualify(image, registry) != image:
        notes.append(f"image {image} is {qualify(image, registry)} (as Kubernetes reads a name without a registry)")
        image = qualify(image, registry)
    in_image = image is not None and not on_host
    if image and not in_image:
        warnings.append(f"the container image {image} is not used (--on-host): the command runs on "
                        "this machine, which needs its interpreter, libraries and code")
    mounts = [f"{m.get('mountPath')}" for m in c.get("volumeMounts") or [] if isinstance(m, dict)]
    if mounts and not in_image:
        warnings.append(f"volumes are not mounted on the local executor ({', '.join(mounts)}): paths in the "
                        "command refer to this machine")
    workdir: str | None = cwd
    if in_image:
        workdir = None
        if c.get("workingDir"):
            warnings.append(f"workingDir {c['workingDir']}: the image's own working directory is used")
    elif c.get("workingDir"):
        if Path(str(c["workingDir"])).is_dir():
            workdir = str(c["workingDir"])
        else:
            warnings.append(f"workingDir {c['workingDir']} does not exist here; the job runs in {cwd}")
    argv = _command(c, where, in_image)
    if not in_image and argv[0].startswith("/") and not Path(argv[0]).exists():
        warnings.append(f"{argv[0]} does not exist on this machine: each replica runs "
                        f"{os.path.basename(argv[0])} from its PATH instead")
    env = _env(c, where, warnings)
    elastic = spec.get("elasticPolicy")
    pet: dict[str, Any] = {"elastic": elastic is not None}
    size: dict[str, int] = {"nodes": nodes}
    if elastic is not None:
        ep = _map(elastic, "spec.elasticPolicy")
        backend = str(ep.get("rdzvBackend", "c10d"))
        if backend != "c10d" or ep.get("rdzvHost") or ep.get("rdzvPort"):
            warnings.append(f"elasticPolicy: rendezvous {backend} at {ep.get('rdzvHost', '-')}:{ep.get('rdzvPort', '-')} "
                            "is replaced by torchrun's c10d store on 127.0.0.1 and the job's port")
        size = _elastic_size(ep, backend, nodes, notes)
        fixed = [a for a in argv if a.startswith(("--nnodes", "--nnodes_", "--nnodes-"))]
        if "max_nodes" in size and fixed:
            warnings.append(f"the command's {fixed[0]} overrides PET_NNODES={size['nodes']}:{size['max_nodes']}: "
                            "give torchrun no --nnodes so that it takes the elastic range")
        if ep.get("metrics"):
            warnings.append("elasticPolicy.metrics (autoscaling) is not used")
        for key, pk in (("maxRestarts", "max_restarts"), ("nProcPerNode", "nproc_per_node")):
            if ep.get(key) is not None:
                pet[pk] = _whole(ep[key], f"spec.elasticPolicy.{key}", 0)
        if ep.get("rdzvConf"):
            pet["rdzv_conf"] = ",".join(f"{x.get('key')}={x.get('value')}" for x in ep["rdzvConf"] if isinstance(x, dict))
    if spec.get("nprocPerNode") is not None:
        pet["nproc_per_node"] = str(spec["nprocPerNode"])
    deadline = _run_policy(run_policy, notes)
    if in_image:
        env = {**image_env(pet, size), **env}
        command = argv
    else:
        env[ENV_CONFIG] = json.dumps(pet)
        command = [python, "-m", "fairpod.formats.kube.pod", "--", *argv]
    body: dict[str, Any] = {
        "name": name, "team": team, "priority": priority, "instance_type": instance_type, **size, **res, "command": command, "env": env, "workdir": workdir,
        "auto_resume": auto, "max_retry": max_retry,
    }  # fmt: skip
    if in_image:
        try:
            mounts, scratch = volumes(c, tspec, where)
        except VolumeError as e:
            raise ManifestError(str(e)) from None
        body.update(image=image, mounts=mounts, **({"scratch": scratch} if scratch else {}),
                    **({"replace_entrypoint": True} if c.get("command") else {}))  # Kubernetes' command
        if c.get("imagePullPolicy"):
            if c["imagePullPolicy"] not in ("Always", "IfNotPresent", "Never"):
                raise ManifestError(f"{where}.imagePullPolicy: {c['imagePullPolicy']!r} is not Always, IfNotPresent "
                                    "or Never")
            body["image_pull_policy"] = c["imagePullPolicy"]
    if deadline is not None:
        body["max_runtime_seconds"] = deadline
    grace = tspec.get("terminationGracePeriodSeconds")
    if grace is not None:
        body["termination_grace_seconds"] = float(grace)
    if dhc_only:
        body["deep_health_check_passed_nodes_only"] = True
    body.update(_topology([ann] + [_map(m.get("annotations"), "template.metadata.annotations")
                                   for m, _, _ in templates.values()]))
    return Converted({k: v for k, v in body.items() if v is not None}, warnings, notes)


RESTARTING = ("OnFailure", "Always", "ExitCode")


def _retries(rp: dict[str, Any], policies: dict[str, str], notes: list[str]) -> tuple[bool, int]:
    """(auto_resume, max_retry) of a job without HyperPod's annotations: the replicas' ``restartPolicy`` says
    whether a failed job runs again (OnFailure, Always, ExitCode: yes; Never or none: no), ``runPolicy.backoffLimit``
    how often (the training operator's count of restarts; none: fairpod's default, 3)."""
    for rtype, pol in policies.items():
        if pol and pol not in (*RESTARTING, "Never"):
            raise ManifestError(f"spec.pytorchReplicaSpecs.{rtype}.restartPolicy: {pol!r} is not OnFailure, Always, "
                                "ExitCode or Never")
    limit = None if rp.get("backoffLimit") is None else _whole(rp["backoffLimit"], "spec.runPolicy.backoffLimit", 0)
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


def _run_policy(rp: dict[str, Any], notes: list[str]) -> float | None:
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
    return float(_whole(rp["activeDeadlineSeconds"], "spec.runPolicy.activeDeadlineSeconds", 1))


def _whole(value: Any, where: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip().isdigit() \
            or int(value) < least:
        raise ManifestError(f"{where}: {value!r} is not a whole number of at least {least}")
    return int(value)


def _elastic_size(ep: dict[str, Any], backend: str, replicas: int, notes: list[str]) -> dict[str, int]:
    """The fairpod size of a job with an elasticPolicy of ``replicas`` (Master + Worker) replicas.

    With torchrun's c10d rendezvous (the default) and ``minReplicas`` below the replica count, the job is
    elastic: ``min_nodes`` = max(1, minReplicas), ``max_nodes`` = the replica count (lowered to maxReplicas when
    that is smaller; fairpod never runs more replicas than the manifest asks). Any other rendezvous backend
    (etcd, etcd-v2, static) names a rendezvous that is not fairpod's, so the job runs its replicas exactly."""
    lo = None if ep.get("minReplicas") is None else _whole(ep["minReplicas"], "spec.elasticPolicy.minReplicas", 0)
    hi = None if ep.get("maxReplicas") is None else _whole(ep["maxReplicas"], "spec.elasticPolicy.maxReplicas", 1)
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


def _topology(annotations: list[dict[str, Any]]) -> dict[str, str]:
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


def convert_all(docs: list[Any], *, python: str, cwd: str, on_host: bool = False, teams: Teams | None = None,
                registry: str = DOCKER_HUB) -> tuple[list[Converted], list[str]]:
    """Every PyTorchJob of a file, and warnings about the documents that are skipped."""
    jobs, skipped = [], []
    for i, d in enumerate(docs):
        if not isinstance(d, dict):
            raise ManifestError(f"document {i + 1} is not a mapping")
        kind = str(d.get("kind", ""))
        if kind == "PyTorchJob":
            try:
                jobs.append(convert(d, python=python, cwd=cwd, on_host=on_host, teams=teams, registry=registry))
            except ManifestError as e:
                name = _map(d.get("metadata"), "metadata").get("name", "?")
                raise ManifestError(f"PyTorchJob {name}: {e}") from None
        else:
            name = d.get("metadata", {}).get("name", "?") if isinstance(d.get("metadata"), dict) else "?"
            skipped.append(f"{kind or '(no kind)'}/{name}")
    if not jobs:
        raise ManifestError("no PyTorchJob in the file (fairpod apply takes a cluster spec or Kubeflow "
                            f"PyTorchJob manifests; found: {', '.join(skipped) or 'nothing'})")
    warnings = []
    if skipped:
        warnings.append(f"skipped {', '.join(skipped)}: fairpod runs only the PyTorchJob (its torchrun "
                        "rendezvous needs no etcd service)")
    return jobs, warnings


def _instance_types_in(affinity: Any) -> list[str]:
    """The instance types a pod's required node affinity allows (``node.kubernetes.io/instance-type In [a, b]``),
    in the order listed, when that is all it says; else []."""
    if not isinstance(affinity, dict) or set(affinity) != {"nodeAffinity"}:
        return []
    na = affinity["nodeAffinity"]
    if not isinstance(na, dict) or set(na) != {"requiredDuringSchedulingIgnoredDuringExecution"}:
        return []
    terms = (na["requiredDuringSchedulingIgnoredDuringExecution"] or {}).get("nodeSelectorTerms") or []
    if len(terms) != 1 or not isinstance(terms[0], dict):
        return []
    exprs = terms[0].get("matchExpressions") or []
    if len(exprs) != 1 or not isinstance(exprs[0], dict):
        return []
    e = exprs[0]
    if e.get("key") not in INSTANCE_TYPE_LABELS or e.get("operator") != "In" or not isinstance(e.get("values"), list):
        return []
    return [str(v) for v in e["values"]]
