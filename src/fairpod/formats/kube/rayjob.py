"""KubeRay ``RayJob`` manifests (``apiVersion: ray.io/v1``) read into a fairpod Ray job (``JobSpec.ray``).

The head group and the worker groups become one gang: 1 + the workers' ``replicas`` replicas, the head on rank 0;
``entrypoint`` is the command, run against the job's own Ray cluster (docs/workloads.md, docs/ray.md). Each replica
has one shape: the largest of the groups' containers' resources (a note says so when they differ). The team comes
from ``metadata.namespace`` or the label ``kueue.x-k8s.io/queue-name`` as for a PyTorchJob, the priority from
``kueue.x-k8s.io/priority-class``, the instance type from the head's ``nodeSelector``; ``activeDeadlineSeconds`` is
the runtime limit, ``backoffLimit`` the retries.

- **image**: the groups' container image (one for all of them, resolved as Kubernetes resolves a short name) runs
  each replica through podman as any job's image (docs/containers.md); the image must hold Ray and a ``python``
  (or ``python3``) that imports it, as KubeRay's ``rayproject/ray`` images do. fairpod binds its launcher in and
  starts Ray itself (``fairpod.executors.raycluster``). ``--on-host`` runs the Ray installed on the nodes instead.
- **container**: ``env`` (``value`` entries), ``imagePullPolicy``, ``volumeMounts`` of ``hostPath`` and
  ``emptyDir`` volumes (other volumes refused by name: a ConfigMap is a Kubernetes object).
- **runtimeEnvYAML**: ``env_vars`` are the job's environment (the entrypoint and every Ray node, whose workers
  inherit it); a local ``working_dir`` is the job's working directory (bound into the image at its own path);
  the rest (``pip``, ``conda``, ``uv``, ``py_modules``, a remote ``working_dir``) is given to the entrypoint's
  driver as Ray's job submission gives it (``FAIRPOD_RAY_RUNTIME_ENV``), so Ray sets it up on the nodes as on a
  KubeRay cluster (that needs Ray's ``default`` extra and, for packages, the package index).
- **worker groups**: with ``rayClusterSpec.enableInTreeAutoscaling: true``, ``minReplicas``..``maxReplicas`` make
  an elastic job (1 + the minimum replicas to start, growing into idle capacity up to 1 + the maximum, shrinking
  back instead of being preempted whole); without it KubeRay runs ``replicas`` and so does fairpod.
- **rayStartParams** (each group's): ``num-cpus``, ``num-gpus``, ``memory``, ``object-store-memory`` and
  ``resources`` are given to ``ray start`` of that group's nodes; where Ray writes or which cluster it joins
  (``temp-dir``, ``address``, ``node-ip-address``, ...) is refused by name; the rest (the dashboard's, ports,
  ``block``, ...) is accepted with one warning naming it (fairpod.formats.kube.ray_start).
- **shutdownAfterJobFinishes/ttlSecondsAfterFinished**: ``true`` with a TTL keeps the job's Ray cluster that many
  seconds after the entrypoint ends, ``false`` until the job is stopped; without the field fairpod stops it when the
  entrypoint ends (fairpod.formats.kube.ray_start).
- **noted, not used**: ``entrypointNum*``, ports, lifecycle hooks, a container's ``command``.
- **refused, by name**: ``submitterPodTemplate``, ``clusterSelector`` (fairpod starts a cluster per job),
  ``suspend: true``, several images, unknown ``spec`` fields.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from fairpod.formats.kube import container as C
from fairpod.formats.kube import ray_start
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

KNOWN_SPEC = {"entrypoint", "rayClusterSpec", "shutdownAfterJobFinishes", "ttlSecondsAfterFinished",
              "activeDeadlineSeconds", "submissionMode", "suspend", "runtimeEnvYAML", "submitterPodTemplate",
              "metadata", "jobId", "entrypointNumCpus", "entrypointNumGpus", "entrypointResources",
              "backoffLimit", "managedBy", "deletionPolicy", "clusterSelector", "deletionStrategy"}
KNOWN_CONTAINER = {"name", "image", "imagePullPolicy", "resources", "env", "envFrom", "ports", "volumeMounts",
                   "lifecycle", "command", "args", "workingDir", "securityContext", "readinessProbe",
                   "livenessProbe", "startupProbe"}
NOTED_POD = {"volumes", "containers", "nodeSelector", "tolerations", "affinity", "serviceAccountName",
             "restartPolicy", "securityContext", "terminationGracePeriodSeconds", "imagePullSecrets",
             "initContainers", "priorityClassName", "schedulerName"}
RUNTIME_ENV = "FAIRPOD_RAY_RUNTIME_ENV"  # read by fairpod.executors.raycluster (the entrypoint's job config)
SIZE_KEYS = ("accelerators", "vcpu", "memory_gib")


class _Reader:
    """The fields of one RayJob, with what is refused, warned and noted on the way."""

    def __init__(self, name: str, on_host: bool, registry: str) -> None:
        self.name, self.on_host, self.registry = name, on_host, registry
        self.refused: list[str] = []
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.images: dict[str, tuple[str, str]] = {}  # the resolved image -> (as written, where)
        self.env: dict[str, str] = {}
        self.mounts: list[str] = []
        self.scratch: list[str] = []
        self.pull: str | None = None
        self.instance_type: str | None = None
        self.grace: float | None = None
        self.start: list[dict[str, str]] = []  # each group's rayStartParams applied, the head's first
        self.counts: list[int] = []  # each worker group's replicas, for the ranks its parameters go to
        self.ignored: list[str] = []  # rayStartParams with no meaning here

    def group(self, g: dict[str, Any], where: str) -> dict[str, Any]:
        """One group's container: its resources; its image, env and volumes kept on the reader."""
        params = mapping(g.get("rayStartParams"), f"{where}.rayStartParams")
        pod = mapping(mapping(g.get("template"), f"{where}.template").get("spec"), f"{where}.template.spec")
        for key in sorted(set(pod) - NOTED_POD):
            self.refused.append(f"{where}.template.spec.{key}: not known to fairpod")
        for key in ("tolerations", "affinity", "initContainers"):
            if pod.get(key):
                self.warnings.append(f"{where}.template.spec.{key}: not used (fairpod places the job by its quota "
                                     "rules; init containers are not run)")
        selector = mapping(pod.get("nodeSelector"), f"{where}.template.spec.nodeSelector")
        itype = next((str(selector[k]) for k in INSTANCE_TYPE_LABELS if k in selector), None)
        if itype and self.instance_type and itype != self.instance_type:
            self.refused.append(f"{where}.template.spec.nodeSelector: instance type {itype}, another group's is "
                                f"{self.instance_type}: fairpod runs a Ray job on one instance type")
        self.instance_type = self.instance_type or itype
        if pod.get("terminationGracePeriodSeconds") is not None:
            self.grace = float(pod["terminationGracePeriodSeconds"])
        containers = pod.get("containers") or []
        if not isinstance(containers, list) or not containers or not isinstance(containers[0], dict):
            self.refused.append(f"{where}.template.spec.containers: the pod template has no container")
            return {}
        c = containers[0]
        cw = f"{where}.template.spec.containers[{c.get('name', 0)}]"
        if len(containers) > 1:
            others = ", ".join(str(x.get("name")) for x in containers[1:] if isinstance(x, dict))
            self.warnings.append(f"{where}: only the container {c.get('name')!r} runs (the Ray node); not run: "
                                 f"{others}")
        for key in sorted(set(c) - KNOWN_CONTAINER):
            self.refused.append(f"{cw}.{key}: not known to fairpod")
        noted = [k for k in ("ports", "lifecycle", "command", "args", "workingDir", "securityContext",
                             "readinessProbe", "livenessProbe", "startupProbe") if c.get(k)]
        if noted:
            self.notes.append(f"{cw}: {', '.join(noted)} not used (fairpod starts the Ray node itself, on free "
                              "ports, as the replica's user)")
        self.env.update(C.env(c, cw, self.warnings))
        self._image(c, cw, pod)
        res = C.resources(c, cw, self.notes)
        self.start.append(ray_start.read(params, where, res.get("memory_gib"), self.refused, self.ignored))
        return res

    def start_env(self) -> dict[str, str]:
        """The groups' rayStartParams for the launcher (and one warning naming those not used)."""
        if self.ignored:
            self.warnings.append(ray_start.ignored_warning(self.ignored))
        if not self.start:
            return {}
        return ray_start.start_env(self.start[0], list(zip(self.counts, self.start[1:], strict=False)), self.notes)

    def _image(self, c: dict[str, Any], cw: str, pod: dict[str, Any]) -> None:
        if not c.get("image"):  # the Ray installed on the nodes runs (convert says so)
            return
        ref = qualify(str(c["image"]), self.registry)
        self.images.setdefault(ref, (str(c["image"]), cw))
        if self.on_host:
            return
        if c.get("imagePullPolicy"):
            if c["imagePullPolicy"] not in ("Always", "IfNotPresent", "Never"):
                self.refused.append(f"{cw}.imagePullPolicy: {c['imagePullPolicy']!r} is not Always, IfNotPresent or "
                                    "Never")
            else:
                self.pull = str(c["imagePullPolicy"])
        try:
            mounts, scratch = volumes(c, pod, cw)
        except VolumeError as e:
            self.refused.append(str(e))
            return
        self.mounts += [m for m in mounts if m not in self.mounts]
        self.scratch += [s for s in scratch if s not in self.scratch]

    def runtime_env(self, text: Any, cwd: str) -> str | None:
        """``runtimeEnvYAML``: env_vars into the env, a local working_dir as the job's workdir (returned), the rest
        for Ray (``FAIRPOD_RAY_RUNTIME_ENV``)."""
        try:
            renv = yaml.safe_load(str(text)) if text else None
        except yaml.YAMLError as e:
            self.refused.append(f"spec.runtimeEnvYAML: not YAML: {str(e).splitlines()[0]}")
            return None
        if renv is None:
            return None
        if not isinstance(renv, dict):
            self.refused.append("spec.runtimeEnvYAML: a mapping of runtime environment fields (env_vars, "
                                "working_dir, pip, ...)")
            return None
        renv = dict(renv)
        ev = renv.pop("env_vars", None) or {}
        if not isinstance(ev, dict):
            self.refused.append("spec.runtimeEnvYAML env_vars: a mapping of names to values")
        else:
            self.env.update({str(k): "" if v is None else str(v) for k, v in ev.items()})
        workdir = None
        wd = renv.get("working_dir")
        if isinstance(wd, str) and "://" not in wd:
            path = Path(cwd, wd).resolve()
            if not path.is_dir():
                self.refused.append(f"spec.runtimeEnvYAML working_dir {wd}: no such directory here ({path})")
            else:
                workdir = str(path)
                renv.pop("working_dir")
                self.notes.append(f"runtimeEnvYAML working_dir {wd}: the job's working directory {path}"
                                  + ("" if self.on_host else ", bound into the image at that path"))
        if renv:
            self.env[RUNTIME_ENV] = json.dumps(renv, sort_keys=True)
            self.notes.append(f"runtimeEnvYAML {', '.join(sorted(renv))}: given to the entrypoint's Ray driver; Ray "
                              "sets it up on the nodes as on KubeRay (needs Ray's default extra in the image, and "
                              "the package index for packages)")
        return workdir


def _spec_fields(spec: dict[str, Any], r: _Reader) -> None:
    if spec.get("submitterPodTemplate"):
        r.refused.append("spec.submitterPodTemplate: fairpod runs the entrypoint on the head's replica itself")
    if spec.get("suspend"):
        r.refused.append("spec.suspend: true: fairpod queues the job itself; submit it when it should run")
    if spec.get("clusterSelector"):
        r.refused.append("spec.clusterSelector: fairpod starts a Ray cluster per job; it joins no existing one")
    for key in sorted(set(spec) - KNOWN_SPEC):
        r.refused.append(f"spec.{key}: not known to fairpod")
    r.env.update(ray_start.keep_env(spec, r.refused, r.notes))
    used = [k for k in ("entrypointNumCpus", "entrypointNumGpus", "entrypointResources", "submissionMode",
                        "deletionPolicy", "deletionStrategy", "managedBy", "jobId") if spec.get(k) is not None]
    if used:
        r.notes.append(f"spec.{', spec.'.join(used)} not used: the entrypoint runs on the head's replica, with its "
                       "resources")


def _workers(rc: dict[str, Any], r: _Reader, sizes: list[dict[str, Any]], at: str = "spec.rayClusterSpec",
             kind: str = "RayJob") -> dict[str, int]:
    """The replicas: {nodes} or, with the autoscaler, {nodes, max_nodes} (elastic); ``at`` is where the cluster's
    spec is in the manifest."""
    workers = rc.get("workerGroupSpecs") or []
    if not isinstance(workers, list):
        raise ManifestError(f"{kind} {r.name}: {at}.workerGroupSpecs must be a list")
    autoscale = bool(rc.get("enableInTreeAutoscaling"))
    lo = hi = n_all = 0
    for i, g in enumerate(workers):
        where = f"{at}.workerGroupSpecs[{i}]"
        g = mapping(g, where)
        try:
            n = whole(g.get("replicas", g.get("minReplicas", 1)), f"{where}.replicas", 0)
            least = whole(g.get("minReplicas", 0 if autoscale else n), f"{where}.minReplicas", 0)
            most = whole(g.get("maxReplicas", n), f"{where}.maxReplicas", 0)
        except ManifestError as e:
            r.refused.append(str(e))
            continue
        if g.get("numOfHosts", 1) != 1:
            r.refused.append(f"{where}.numOfHosts {g['numOfHosts']}: fairpod runs one Ray node per replica")
        if g.get("suspend"):
            r.refused.append(f"{where}.suspend: true: submit the job without the group")
        sizes.append(r.group(g, where))
        r.counts.append(max(most, least) if autoscale else n)
        n_all += n
        lo, hi = lo + least, hi + max(most, least)
    if autoscale and hi > lo:
        r.notes.append(f"enableInTreeAutoscaling: elastic, {1 + lo}..{1 + hi} replicas (the head and "
                       f"{lo}..{hi} workers): it starts with {1 + lo} and grows into idle capacity")
        if rc.get("autoscalerOptions"):
            r.notes.append(f"{at.removeprefix('spec.')}.autoscalerOptions not used: fairpod's engine grows and shrinks the job")
        return {"nodes": 1 + lo, "min_nodes": 1 + lo, "max_nodes": 1 + hi}
    if not autoscale and any(k in mapping(g, "") for g in workers if isinstance(g, dict)
                             for k in ("minReplicas", "maxReplicas")):
        r.notes.append("workerGroupSpecs minReplicas/maxReplicas not used: without enableInTreeAutoscaling KubeRay "
                       "runs the replicas given, and so does fairpod")
    return {"nodes": 1 + n_all}


def _shape(sizes: list[dict[str, Any]], r: _Reader) -> dict[str, Any]:
    """One replica shape for all: the largest of each resource over the groups (a note when they differ)."""
    out: dict[str, Any] = {}
    for s in sizes:
        for k, v in s.items():
            out[k] = max(out.get(k, v), v) if k in SIZE_KEYS else out.get(k, v)
    if len({json.dumps(s, sort_keys=True) for s in sizes}) > 1:
        r.notes.append(f"the groups' resources differ ({'; '.join(str(s or 'none') for s in sizes)}): every "
                       f"replica gets the largest, {out or 'none'} (fairpod runs a Ray job as one gang of one shape)")
    return out


def opening(doc: dict[str, Any], kind: str, teams: Teams | None, on_host: bool,
            registry: str) -> tuple[str, dict[str, Any], _Reader, dict[str, Any], str]:
    """What a RayJob and a RayCluster read alike first: (name, spec, reader, labels, team); a wrong apiVersion
    and an unknown team are refusals of the reader."""
    meta = mapping(doc.get("metadata"), "metadata")
    name = str(meta.get("name") or "")
    spec = mapping(doc.get("spec"), "spec")
    r = _Reader(name, on_host, registry)
    if str(doc.get("apiVersion", "")) not in ("ray.io/v1", "ray.io/v1alpha1"):
        r.refused.append(f"apiVersion {doc.get('apiVersion')!r}: fairpod reads ray.io/v1 {kind}s")
    labels = mapping(meta.get("labels"), "metadata.labels")
    try:
        team, team_src = team_of(meta, [labels], teams)
        r.notes.append(f"team {team} ({team_src})")
    except ManifestError as e:
        r.refused.append(str(e))
        team = ""
    return name, spec, r, labels, team


def place(body: dict[str, Any], r: _Reader, on_host: bool, host_workdir: str, image_workdir: str | None,
          host_note: str) -> str | None:
    """The groups' image into ``body`` (with its mounts, scratch and pull policy, in ``image_workdir``), or, on the
    host (``--on-host`` or no image), the Ray installed on the nodes in ``host_workdir``; returns the image."""
    image = next(iter(r.images), None)
    if on_host or image is None:
        body["workdir"] = host_workdir
        if image:
            r.warnings.append(f"the image {image} is not used (--on-host): the Ray installed on the nodes runs")
        else:
            r.notes.append(host_note)
    else:
        body.update(image=image, mounts=r.mounts, scratch=r.scratch, image_pull_policy=r.pull, workdir=image_workdir)
        if image != r.images[image][0]:
            r.notes.append(f"image {image} (as Kubernetes reads a name without a registry)")
    return image


def convert_kind(docs: list[Any], kind: str, convert_one: Callable[[dict[str, Any]], Converted]) -> list[Converted]:
    """Every document of ``kind`` in ``docs`` converted; ManifestError naming every refused field of all of them."""
    out, errors = [], []
    for d in docs:
        if isinstance(d, dict) and d.get("kind") == kind:
            try:
                out.append(convert_one(d))
            except ManifestError as e:
                errors.append(str(e))
    if errors:
        raise ManifestError("\n".join(errors))
    return out


def convert(doc: dict[str, Any], *, cwd: str, teams: Teams | None = None, on_host: bool = False,
            registry: str = DOCKER_HUB) -> Converted:
    """One RayJob as the body of a fairpod job submit; ManifestError with one line per refused field."""
    name, spec, r, labels, team = opening(doc, "RayJob", teams, on_host, registry)
    entry = spec.get("entrypoint")
    try:
        command = shlex.split(entry) if isinstance(entry, str) else []
    except ValueError as e:
        r.refused.append(f"spec.entrypoint: cannot split it into words: {e}")
        command = []
    if not command:
        r.refused.append("spec.entrypoint: the command to run against the Ray cluster is missing")
    _spec_fields(spec, r)
    rc = mapping(spec.get("rayClusterSpec"), "spec.rayClusterSpec")
    sizes = [r.group(mapping(rc.get("headGroupSpec"), "spec.rayClusterSpec.headGroupSpec"),
                     "spec.rayClusterSpec.headGroupSpec")]
    size = _workers(rc, r, sizes)
    workdir = r.runtime_env(spec.get("runtimeEnvYAML"), cwd)
    r.env.update(r.start_env())
    if len(r.images) > 1 and not on_host:
        r.refused.append(f"{', '.join(f'{w}.image {i}' for i, w in r.images.values())}: one image for every Ray "
                         "node of a job")
    if r.refused:
        raise ManifestError("\n".join(f"RayJob {name}: {x}" for x in r.refused))
    priority = str(labels[PRIORITY_LABEL]).removesuffix("-priority") if labels.get(PRIORITY_LABEL) else None
    body: dict[str, Any] = {"name": name, "team": team, "priority": priority, "instance_type": r.instance_type,
                            **size, "command": command, "ray": True, "env": r.env, **_shape(sizes, r)}
    image = place(body, r, on_host, workdir or cwd, workdir,
                  f"no container image: the Ray installed on the nodes runs, in the working directory {workdir or cwd}")
    if spec.get("activeDeadlineSeconds") is not None:
        body["max_runtime_seconds"] = float(whole(spec["activeDeadlineSeconds"], "spec.activeDeadlineSeconds", 1))
    if spec.get("backoffLimit"):
        body.update(auto_resume=True, max_retry=whole(spec["backoffLimit"], "spec.backoffLimit", 0))
        r.notes.append(f"backoffLimit {spec['backoffLimit']}: a failed job runs again up to that many times")
    if r.grace is not None:
        body["termination_grace_seconds"] = r.grace
    if rc.get("rayVersion"):
        r.notes.append(f"rayVersion {rc['rayVersion']}: the Ray " + ("installed on the nodes" if on_host or not image
                                                                     else "in the image") + " runs")
    return Converted({k: v for k, v in body.items() if v not in (None, [], {})}, r.warnings, r.notes,
                     ("RayJob", "rayjob.ray.io"))


def convert_all(docs: list[Any], *, cwd: str, teams: Teams | None = None, on_host: bool = False,
                registry: str = DOCKER_HUB) -> list[Converted]:
    """Every RayJob of ``docs``; ManifestError naming every refused field of all of them."""
    return convert_kind(docs, "RayJob", lambda d: convert(d, cwd=cwd, teams=teams, on_host=on_host,
                                                          registry=registry))
