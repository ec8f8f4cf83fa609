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

The shared parts live beside it: the container (``kube.container``), the policies (``kube.pytorchjob_policies``),
the manifest's error, quantities and team (``kube.manifest``), the pod's start (``kube.pod``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fairpod.formats.kube import container as C
from fairpod.formats.kube import pytorchjob_policies as P
from fairpod.formats.kube.image import DOCKER_HUB, VolumeError, image_env, qualify, volumes
from fairpod.formats.kube.manifest import (
    INSTANCE_TYPE_LABELS,
    NAME_RE,
    PRIORITY_LABEL,
    Converted,
    ManifestError,
    mapping,
    team_of,
    whole,
)
from fairpod.formats.kube.pod import ENV_CONFIG
from fairpod.formats.kube.teams import Teams

AUTO_RESUME = "sagemaker.amazonaws.com/enable-job-auto-resume"
MAX_RETRY = "sagemaker.amazonaws.com/job-max-retry-count"
DHC_LABEL = "sagemaker.amazonaws.com/deep-health-check-status"
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"


def convert(doc: dict[str, Any], *, python: str, cwd: str, on_host: bool = False, teams: Teams | None = None,
            registry: str = DOCKER_HUB) -> Converted:
    """The fairpod job (POST /jobs body) of one PyTorchJob document."""
    warnings: list[str] = []
    notes: list[str] = []
    api = str(doc.get("apiVersion", ""))
    if not api.startswith("kubeflow.org/"):
        warnings.append(f"apiVersion {api!r}: expected kubeflow.org/v1; reading it as one")
    meta = mapping(doc.get("metadata"), "metadata")
    spec = mapping(doc.get("spec"), "spec")
    name = str(meta.get("name") or "")
    if not NAME_RE.match(name) or len(name) > 63:
        raise ManifestError(f"metadata.name {name!r}: fairpod job names are lower-case letters, digits and '-' "
                            "(at most 63)")
    replicas = mapping(spec.get("pytorchReplicaSpecs"), "spec.pytorchReplicaSpecs")
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
        rs = mapping(rs, f"spec.pytorchReplicaSpecs.{rtype}")
        n = rs.get("replicas", 1)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ManifestError(f"spec.pytorchReplicaSpecs.{rtype}.replicas must be a whole number >= 1, got {n!r}")
        if rtype == "Master" and n != 1:
            raise ManifestError(f"spec.pytorchReplicaSpecs.Master.replicas must be 1, got {n}")
        counts[rtype] = n
        restart_policies[rtype] = str(rs.get("restartPolicy") or "")
        tpl = mapping(rs.get("template"), f"spec.pytorchReplicaSpecs.{rtype}.template")
        tspec = mapping(tpl.get("spec"), f"spec.pytorchReplicaSpecs.{rtype}.template.spec")
        where = f"spec.pytorchReplicaSpecs.{rtype}.template"
        templates[rtype] = (mapping(tpl.get("metadata"), f"{where}.metadata"), tspec, C.container(tspec, where, warnings))
    if len({C.signature(c, s) for _, s, c in templates.values()}) > 1:
        raise ManifestError("Master and Worker differ (command, env, resources, image or nodeSelector): fairpod runs "
                            "every replica of a job alike; give both the same template")
    rtype = "Worker" if "Worker" in templates else "Master"
    tmeta, tspec, c = templates[rtype]
    where = f"spec.pytorchReplicaSpecs.{rtype}.template.spec.containers[{c.get('name')}]"
    labels = [mapping(meta.get("labels"), "metadata.labels")] + [mapping(m.get("labels"), "template.metadata.labels")
                                                              for m, _, _ in templates.values()]
    team, team_src = team_of(meta, labels, teams)
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
    res = C.resources(c, where, warnings)
    ann = mapping(meta.get("annotations"), "metadata.annotations")
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
        max_retry = P.DEFAULT_MAX_RETRY
        notes.append(f"auto-resume on without {MAX_RETRY}: up to {P.DEFAULT_MAX_RETRY} restarts")
    run_policy = mapping(spec.get("runPolicy"), "spec.runPolicy")
    if AUTO_RESUME not in ann and MAX_RETRY not in ann:
        auto, max_retry = P.retries(run_policy, restart_policies, notes)
    selector = mapping(tspec.get("nodeSelector"), "nodeSelector")
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
    types = C.instance_types_in(affinity)
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
    argv = C.command(c, where, in_image)
    if not in_image and argv[0].startswith("/") and not Path(argv[0]).exists():
        warnings.append(f"{argv[0]} does not exist on this machine: each replica runs "
                        f"{os.path.basename(argv[0])} from its PATH instead")
    env = C.env(c, where, warnings)
    elastic = spec.get("elasticPolicy")
    pet: dict[str, Any] = {"elastic": elastic is not None}
    size: dict[str, int] = {"nodes": nodes}
    if elastic is not None:
        ep = mapping(elastic, "spec.elasticPolicy")
        backend = str(ep.get("rdzvBackend", "c10d"))
        if backend != "c10d" or ep.get("rdzvHost") or ep.get("rdzvPort"):
            warnings.append(f"elasticPolicy: rendezvous {backend} at {ep.get('rdzvHost', '-')}:{ep.get('rdzvPort', '-')} "
                            "is replaced by torchrun's c10d store on 127.0.0.1 and the job's port")
        size = P.elastic_size(ep, backend, nodes, notes)
        fixed = [a for a in argv if a.startswith(("--nnodes", "--nnodes_", "--nnodes-"))]
        if "max_nodes" in size and fixed:
            warnings.append(f"the command's {fixed[0]} overrides PET_NNODES={size['nodes']}:{size['max_nodes']}: "
                            "give torchrun no --nnodes so that it takes the elastic range")
        if ep.get("metrics"):
            warnings.append("elasticPolicy.metrics (autoscaling) is not used")
        for key, pk in (("maxRestarts", "max_restarts"), ("nProcPerNode", "nproc_per_node")):
            if ep.get(key) is not None:
                pet[pk] = whole(ep[key], f"spec.elasticPolicy.{key}", 0)
        if ep.get("rdzvConf"):
            pet["rdzv_conf"] = ",".join(f"{x.get('key')}={x.get('value')}" for x in ep["rdzvConf"] if isinstance(x, dict))
    if spec.get("nprocPerNode") is not None:
        pet["nproc_per_node"] = str(spec["nprocPerNode"])
    deadline = P.run_policy(run_policy, notes)
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
    body.update(P.topology([ann] + [mapping(m.get("annotations"), "template.metadata.annotations")
                                   for m, _, _ in templates.values()]))
    return Converted({k: v for k, v in body.items() if v is not None}, warnings, notes)


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
                name = mapping(d.get("metadata"), "metadata").get("name", "?")
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
