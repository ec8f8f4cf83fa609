"""The HyperPod CLI's job config file (``hyperpod start-job --config-file config.yaml``) read into a fairpod job.

Every key of the CLI's shipped template (``src/hyperpod_cli/templates/k8s_pytorch_job_template.py`` and its
``config.yaml``) is mapped, or accepted with a warning where it only means something to Kubernetes; what fairpod
cannot honour is reported, every problem of the file in one answer (docs/kubernetes.md, "The HyperPod CLI's
config file"):

=======================================================  ===========================================================
``defaults``, ``hydra``                                  the CLI's own config loader (Hydra): nothing for the job
``training_cfg.entry_script`` + ``script_args``          ``python SCRIPT ARGS`` on each node (in the image)
``training_cfg.run.name`` / ``nodes``                    the job's name / replicas
``training_cfg.run.ntasks_per_node``                     torchrun's processes per node (``PET_NPROC_PER_NODE``)
``cluster.cluster_type: k8s``, ``instance_type``         HyperPod EKS; the instance type
``cluster_config.namespace``                             the team (``hyperpod-ns-<team>``; another name: your only team)
``cluster_config.custom_labels``                         the job's labels; Kueue's queue-name is the team, its
                                                         priority-class the priority
``cluster_config.priority_class_name``                   the priority (``<class>-priority`` or the class)
``cluster_config.annotations``                           HyperPod's auto-resume annotations; others: a warning
``cluster_config.label_selector``                        the instance-type label is the instance type, the deep
                                                         health check label only passed nodes; node health is how
                                                         fairpod places; ``preferred``/``weights``: a warning
``cluster_config.volumes``                               mounts (``hostPath`` at ``mountPath``), in the image
``cluster_config.pullPolicy`` / ``restartPolicy``        the image pull policy / restarts only with auto-resume
``cluster_config.service_account_name``                  a warning: replicas run as the team's user
``cluster_config.persistent_volume_claims``              refused: there are no volume claims
``base_results_dir``                                     ``<dir>/<run name>/``, made here for you: ``job.json``
                                                         (the job), and the job's ``RESULTS_DIR`` (mounted in the
                                                         image)
``container``, ``env_vars``                              the image, the environment
=======================================================  ===========================================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

LOADER_KEYS = {"defaults", "hydra"}
INSTANCE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
DHC_LABEL = "sagemaker.amazonaws.com/deep-health-check-status"
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
AUTO_RESUME = "sagemaker.amazonaws.com/enable-job-auto-resume"
MAX_RETRY = "sagemaker.amazonaws.com/job-max-retry-count"


@dataclass
class JobConfig:
    """What a config file asks for: job fields as the file wrote them (``values``: field -> text, typed by
    fairpod.cli.jobbody.typed; ``env``: NAME=VALUE) and the rest of the job."""

    values: dict[str, str] = field(default_factory=dict)
    env: list[str] = field(default_factory=list)
    command: list[str] | None = None
    image: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    mounts: list[str] = field(default_factory=list)
    host_volumes: list[str] = field(default_factory=list)  # hostPath at its own path: the node's own files
    pet: dict[str, Any] = field(default_factory=dict)
    results_dir: str | None = None
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _empty(v: Any) -> bool:
    return v is None or v == "???" or v == [] or v == {}


def read(doc: Any, path: str, team_of: Any) -> JobConfig:
    """The job of a parsed config file; ``team_of(namespace)`` is the team of a namespace or None."""
    cfg = JobConfig()
    if not isinstance(doc, dict):
        cfg.problems.append("expected the HyperPod CLI's job config (training_cfg, cluster, container, …)")
        return cfg
    for k in doc:
        if k not in {"training_cfg", "cluster", "container", "env_vars", "base_results_dir", *LOADER_KEYS}:
            cfg.problems.append(f"{k}: not a field of the HyperPod CLI's job config")
    _training(doc.get("training_cfg") or {}, cfg)
    cl = doc.get("cluster") or {}
    if not isinstance(cl, dict):
        cfg.problems.append("cluster: must be a mapping")
        cl = {}
    for k, v in cl.items():
        if k == "instance_type":
            if not _empty(v):
                cfg.values["instance_type"] = str(v)
        elif k == "cluster_type":
            if str(v) != "k8s":
                cfg.problems.append(f"cluster.cluster_type {v!r}: fairpod runs HyperPod's EKS (k8s) jobs")
        elif k == "cluster_config":
            _cluster_config(v or {}, cfg, team_of)
        else:
            cfg.problems.append(f"cluster.{k}: not a field of the HyperPod CLI's job config")
    env = doc.get("env_vars") or {}
    if not isinstance(env, dict):
        cfg.problems.append("env_vars: must be a mapping of NAME: value")
        env = {}
    for k, v in env.items():
        cfg.env.append(f"{k}={'' if v is None else v}")
    if not _empty(doc.get("container")):
        cfg.image = str(doc["container"])
    if not _empty(doc.get("base_results_dir")):
        cfg.results_dir = str(doc["base_results_dir"])
    return cfg


def _training(tc: Any, cfg: JobConfig) -> None:
    if not isinstance(tc, dict):
        cfg.problems.append("training_cfg: must be a mapping (entry_script, script_args, run)")
        return
    for k, v in tc.items():
        if k == "entry_script":
            if not _empty(v):
                cfg.command = ["python", str(v)]
        elif k == "run":
            if not isinstance(v, dict):
                cfg.problems.append("training_cfg.run: must be a mapping (name, nodes, ntasks_per_node)")
                continue
            for rk, rv in v.items():
                if _empty(rv):
                    continue
                if rk == "name":
                    cfg.values["name"] = str(rv)
                elif rk == "nodes":
                    cfg.values["nodes"] = str(rv)
                elif rk == "ntasks_per_node":
                    if str(rv) not in ("auto", "gpu", "cpu") and not str(rv).isdigit():
                        cfg.problems.append(f"training_cfg.run.ntasks_per_node {rv!r}: a number, auto, gpu or cpu")
                    cfg.pet["nproc_per_node"] = str(rv)
                else:
                    cfg.problems.append(f"training_cfg.run.{rk}: not a field of the HyperPod CLI's job config "
                                        "(name, nodes, ntasks_per_node)")
        elif k != "script_args":
            cfg.problems.append(f"training_cfg.{k}: not a field of the HyperPod CLI's job config (entry_script, "
                                "script_args, run)")
    args = tc.get("script_args")
    if not _empty(args) and cfg.command is None:
        cfg.problems.append("training_cfg.script_args: there is no training_cfg.entry_script to give them to")
    elif cfg.command is not None:
        cfg.command += script_args(args, cfg)


def script_args(v: Any, cfg: JobConfig) -> list[str]:
    """HyperPod's script_args: a list of strings, or of one-key mappings ({--epochs: 3}), or one string."""
    if _empty(v):
        return []
    if isinstance(v, str):
        import shlex

        return shlex.split(v)
    if not isinstance(v, list):
        cfg.problems.append("training_cfg.script_args: expected a list ('--epochs', 3 or --epochs: 3)")
        return []
    out: list[str] = []
    for item in v:
        if isinstance(item, dict):
            for k, x in item.items():
                out += [str(k), str(x)]
        else:
            out.append(str(item))
    return out


def _cluster_config(cc: Any, cfg: JobConfig, team_of: Any) -> None:
    where = "cluster.cluster_config"
    if not isinstance(cc, dict):
        cfg.problems.append(f"{where}: must be a mapping")
        return
    for k, v in cc.items():
        if _empty(v) and k != "restartPolicy":
            continue
        if k == "namespace":
            team = team_of(str(v))
            if team is None:
                cfg.warnings.append(f"{where}.namespace {v}: not a team's namespace (hyperpod-ns-<team>); the job "
                                    "goes to your only team")
            else:
                cfg.values["team"] = team
        elif k == "custom_labels":
            _labels(v, cfg, team_of)
        elif k == "priority_class_name":
            cfg.values["priority"] = str(v).removesuffix("-priority")
        elif k == "annotations":
            _annotations(v, cfg)
        elif k == "label_selector":
            _label_selector(v, cfg)
        elif k == "volumes":
            _volumes(v, cfg)
        elif k == "pullPolicy":
            if str(v) not in ("Always", "IfNotPresent", "Never"):
                cfg.problems.append(f"{where}.pullPolicy {v!r}: Always, IfNotPresent or Never")
            else:
                cfg.values["image_pull_policy"] = str(v)
        elif k == "restartPolicy":
            if str(v) in ("Always", "ExitCode"):
                cfg.warnings.append(f"{where}.restartPolicy {v}: a failed job restarts only with auto-resume (the "
                                    f"annotation {AUTO_RESUME}), as with OnFailure")
            elif str(v) not in ("OnFailure", "Never", "None"):
                cfg.problems.append(f"{where}.restartPolicy {v!r}: OnFailure, Never, Always or ExitCode")
        elif k == "service_account_name":
            cfg.warnings.append(f"{where}.service_account_name {v}: Kubernetes only; the replicas run as the "
                                "team's user")
        elif k == "persistent_volume_claims":
            cfg.problems.append(f"{where}.persistent_volume_claims: fairpod has no volume claims; mount the "
                                "node's directory with volumes (hostPath, mountPath) instead")
        else:
            cfg.problems.append(f"{where}.{k}: not a field of the HyperPod CLI's job config")


def _labels(v: Any, cfg: JobConfig, team_of: Any) -> None:
    if not isinstance(v, dict):
        cfg.problems.append("cluster.cluster_config.custom_labels: must be a mapping")
        return
    for lk, lv in v.items():
        if lk == "kueue.x-k8s.io/queue-name":
            team = team_of(str(lv).removesuffix("-localqueue"))
            if team is not None:
                cfg.values["team"] = team
            else:
                cfg.warnings.append(f"custom_labels {lk}: {lv}: not a team's queue (hyperpod-ns-<team>-localqueue);"
                                    " kept as a label")
                cfg.labels[str(lk)] = str(lv)
        elif lk == "kueue.x-k8s.io/priority-class":
            cfg.values["priority"] = str(lv).removesuffix("-priority")
        else:
            cfg.labels[str(lk)] = "" if lv is None else str(lv)


def _annotations(v: Any, cfg: JobConfig) -> None:
    if not isinstance(v, dict):
        cfg.problems.append("cluster.cluster_config.annotations: must be a mapping")
        return
    for ak, av in v.items():
        if ak == AUTO_RESUME:
            on = str(av).lower() == "true"
            cfg.values["auto_resume"] = "true" if on else "false"
            if on and MAX_RETRY not in v:
                cfg.values["max_retry"] = "1"  # the HyperPod CLI's default
        elif ak == MAX_RETRY:
            if not str(av).isdigit():
                cfg.problems.append(f"annotations {ak}: {av!r}: a whole number")
            else:
                cfg.values["max_retry"] = str(av)
        else:
            cfg.warnings.append(f"annotations {ak}: a Kubernetes annotation; fairpod keeps no annotations")


def _label_selector(v: Any, cfg: JobConfig) -> None:
    where = "cluster.cluster_config.label_selector"
    if not isinstance(v, dict):
        cfg.problems.append(f"{where}: a mapping of required, preferred and weights")
        return
    for part, labels in v.items():
        if part == "weights":
            continue
        if part not in ("required", "preferred") or not isinstance(labels, dict):
            cfg.problems.append(f"{where}.{part}: want required: {{LABEL: [VALUES]}} or preferred: {{…}}")
            continue
        for lk, values in labels.items():
            vals = [str(x) for x in (values if isinstance(values, list) else [values])]
            if lk in INSTANCE_LABELS and part == "required":
                if len(vals) == 1:
                    cfg.values["instance_type"] = vals[0]
                else:
                    cfg.values["instance_type"] = ",".join(vals)  # in order of preference
            elif lk == HEALTH_LABEL and vals == ["Schedulable"]:
                continue  # fairpod places jobs on schedulable nodes only
            elif lk == DHC_LABEL and vals == ["Passed"] and part == "required":
                cfg.values["deep_health_check_passed_nodes_only"] = "true"
            elif part == "preferred":
                cfg.warnings.append(f"{where}.preferred {lk}: {', '.join(vals)}: a preference fairpod does not "
                                    "weigh (it places by instance type; required deep health check: only passed "
                                    "nodes)")
            else:
                cfg.problems.append(f"{where}.required {lk}: {', '.join(vals)}: fairpod places by instance type "
                                    f"({INSTANCE_LABELS[0]}) and the deep health check ({DHC_LABEL}) only")


def _volumes(v: Any, cfg: JobConfig) -> None:
    where = "cluster.cluster_config.volumes"
    if not isinstance(v, list):
        cfg.problems.append(f"{where}: a list of volumeName, hostPath, mountPath")
        return
    for i, vol in enumerate(v):
        if not isinstance(vol, dict) or not vol.get("hostPath") or not vol.get("mountPath"):
            cfg.problems.append(f"{where}[{i}]: want volumeName, hostPath and mountPath")
            continue
        host, mnt = str(vol["hostPath"]), str(vol["mountPath"])
        if not os.path.isabs(host) or not os.path.isabs(mnt):
            cfg.problems.append(f"{where}[{i}] ({vol.get('volumeName')}): hostPath and mountPath must be absolute")
            continue
        cfg.mounts.append(f"{host}:{mnt}" + (":ro" if vol.get("readOnly") in (True, "true") else ""))
        if host == mnt:
            cfg.host_volumes.append(host)
