"""A Kubernetes ``batch/v1`` Job or a bare ``v1`` Pod (as Kueue's samples submit them: ``suspend: true`` and the
label ``kueue.x-k8s.io/queue-name``) read into a fairpod job, and the kinds that have no meaning here, refused by
their own name (docs/kubernetes.md).

A Job's ``parallelism`` pods run at once as the job's replicas, each of one pod's resources, in its image
(``command``/``args``, ``env``, hostPath/emptyDir volumes: fairpod.formats.kube.image); ``completions`` must be
that many (each pod runs once; ``JOB_COMPLETION_INDEX`` is its rank, as in an Indexed Job); ``backoffLimit`` with
a restarting pod is the number of restarts; ``activeDeadlineSeconds`` the runtime limit.
"""

from __future__ import annotations

from typing import Any

from fairpod.formats.kube import container as C
from fairpod.formats.kube.image import DOCKER_HUB, VolumeError, qualify, volumes
from fairpod.formats.kube.manifest import (
    INSTANCE_TYPE_LABELS,
    PRIORITY_LABEL,
    Converted,
    ManifestError,
    mapping,
    team_of,
    whole,
)
from fairpod.formats.kube.teams import Teams

# kinds a user may bring that fairpod does not run: refused by their own name, with what to do instead
REFUSED_KINDS = {
    "MPIJob": "fairpod starts no MPI launcher pod nor SSH between replicas; run the mpirun command's program as a "
    "fairpod job of that many replicas (fairpod start-job --node-count N; each replica gets RANK, WORLD_SIZE, MASTER_ADDR)",
    "TFJob": "fairpod runs PyTorchJob, Job and RayJob manifests; TensorFlow's TF_CONFIG is not made",
    "XGBoostJob": "fairpod runs PyTorchJob, Job and RayJob manifests",
    "PaddleJob": "fairpod runs PyTorchJob, Job and RayJob manifests",
    "MXJob": "fairpod runs PyTorchJob, Job and RayJob manifests",
    "JAXJob": "fairpod runs PyTorchJob, Job and RayJob manifests",
    "TrainJob": "Kubeflow Trainer v2's TrainJob needs its TrainingRuntime objects; write it as a PyTorchJob",
    "JobSet": "fairpod runs one gang of one shape per job; submit each replicated job as a Job or PyTorchJob",
    "AppWrapper": "fairpod runs one gang of one shape per job; submit the wrapped Job or PyTorchJob itself",
}


def refusals(docs: list[Any]) -> list[str]:
    """One line per document whose kind has no meaning here."""
    out = []
    for d in docs:
        kind = str(d.get("kind", "")) if isinstance(d, dict) else ""
        if kind in REFUSED_KINDS:
            name = mapping(d.get("metadata"), "metadata").get("name", "?")
            out.append(f"{kind} {name}: no meaning here: {REFUSED_KINDS[kind]}")
    return out


def convert(doc: dict[str, Any], *, cwd: str, on_host: bool = False, teams: Teams | None = None,
            registry: str = DOCKER_HUB) -> Converted:
    """One Job or Pod as the body of a fairpod job submit."""
    warnings: list[str] = []
    notes: list[str] = []
    kind = str(doc.get("kind"))
    meta = mapping(doc.get("metadata"), "metadata")
    name = str(meta.get("name") or "")
    if not name and meta.get("generateName"):
        name = str(meta["generateName"]).rstrip("-")
        notes.append(f"metadata.generateName {meta['generateName']}: the job is named {name}")
    spec = mapping(doc.get("spec"), "spec")
    if kind == "Pod":
        tmeta, pod, replicas, retries, deadline = meta, spec, 1, None, spec.get("activeDeadlineSeconds")
    else:
        tpl = mapping(spec.get("template"), "spec.template")
        tmeta, pod = mapping(tpl.get("metadata"), "spec.template.metadata"), mapping(tpl.get("spec"), "spec.template.spec")
        replicas = whole(spec.get("parallelism", 1), "spec.parallelism", 1)
        completions = spec.get("completions")
        if completions is not None and whole(completions, "spec.completions", 1) != replicas:
            raise ManifestError(f"spec.completions {completions} with parallelism {replicas}: fairpod runs a job's "
                                "replicas at once, each once (completions = parallelism); for a queue of work items "
                                "use a job array (fairpod start-job --array)")
        retries = spec.get("backoffLimit")
        deadline = spec.get("activeDeadlineSeconds")
        if spec.get("suspend"):
            notes.append("spec.suspend: true (Kueue unsuspends it on admission): fairpod queues and admits it itself")
        for key in ("ttlSecondsAfterFinished", "podFailurePolicy", "successPolicy", "backoffLimitPerIndex"):
            if spec.get(key) is not None:
                notes.append(f"spec.{key}: about Kubernetes pods; not used")
    where = f"{'spec' if kind == 'Pod' else 'spec.template.spec'}"
    c = C.container(pod, where.removesuffix(".spec"), warnings)
    cwhere = f"{where}.containers[{c.get('name')}]"
    labels = [mapping(meta.get("labels"), "metadata.labels"), mapping(tmeta.get("labels"), "template.metadata.labels")]
    team, team_src = team_of(meta, labels, teams)
    notes.append(f"team {team} ({team_src})")
    priority = next((str(lab[PRIORITY_LABEL]).removesuffix("-priority") for lab in labels if lab.get(PRIORITY_LABEL)),
                    None)
    restart = str(pod.get("restartPolicy") or ("Always" if kind == "Pod" else "Never"))
    auto, max_retry = False, 0
    if restart in ("OnFailure", "Always"):
        max_retry = 6 if retries is None else whole(retries, "spec.backoffLimit", 0)  # Kubernetes' default, 6
        auto = max_retry > 0
        notes.append(f"restartPolicy {restart}: a failed job is restarted whole up to {max_retry} times")
    selector = mapping(pod.get("nodeSelector"), f"{where}.nodeSelector")
    instance_type = next((str(selector[k]) for k in INSTANCE_TYPE_LABELS if k in selector), None)
    other = sorted(k for k in selector if k not in INSTANCE_TYPE_LABELS)
    if other:
        warnings.append(f"{where}.nodeSelector {', '.join(other)}: not known to fairpod; ignored")
    image = str(c.get("image") or "")
    in_image = bool(image) and not on_host
    body: dict[str, Any] = {"name": name, "team": team, "priority": priority, "instance_type": instance_type,
                            "nodes": replicas, **C.resources(c, cwhere, warnings),
                            "command": C.command(c, cwhere, in_image), "env": C.env(c, cwhere, warnings),
                            "auto_resume": auto, "max_retry": max_retry,
                            "workdir": None if in_image else cwd}
    body["env"].setdefault("JOB_COMPLETION_INDEX", "$(RANK)" if in_image else "")
    if not in_image:
        body["env"].pop("JOB_COMPLETION_INDEX")
    if in_image:
        if qualify(image, registry) != image:
            notes.append(f"image {image} is {qualify(image, registry)} (as Kubernetes reads a name without a "
                         "registry)")
        try:
            mounts, scratch = volumes(c, pod, cwhere)
        except VolumeError as e:
            raise ManifestError(str(e)) from None
        body.update(image=qualify(image, registry), mounts=mounts, **({"scratch": scratch} if scratch else {}),
                    **({"replace_entrypoint": True} if c.get("command") else {}))  # Kubernetes' command
        if c.get("imagePullPolicy") in ("Always", "IfNotPresent", "Never"):
            body["image_pull_policy"] = c["imagePullPolicy"]
    elif image:
        warnings.append(f"the container image {image} is not used (--on-host)")
    if deadline is not None:
        body["max_runtime_seconds"] = float(whole(deadline, "spec.activeDeadlineSeconds", 1))
    if pod.get("terminationGracePeriodSeconds") is not None:
        body["termination_grace_seconds"] = float(pod["terminationGracePeriodSeconds"])
    return Converted({k: v for k, v in body.items() if v is not None}, warnings, notes,
                     ("Job", "job.batch") if kind == "Job" else ("Pod", "pod"))
