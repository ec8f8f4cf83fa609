"""The one table of job flags: each field of a job (``fairpod.model.jobs.JobSpec``) in the words of ``fairpod
start-job``'s flag for it. Every front end takes its flags from here: ``fairpod start-job`` all of them (and the
server's errors are said in them), ``start-service`` a subset under its own names (``SERVICE_NAMES``), sbatch's
``#FAIRPOD`` lines and fairpod options those of ``SBATCH_FIELDS``, ``hyperpod start-job`` those it has. A leaf
module (no imports): the CLI and fairpod.formats read it for nothing."""

from __future__ import annotations

# the API's job fields in the words of start-job's flags (also for the server's error messages)
JOB_FLAGS = {"name": "--name", "team": "--team", "priority": "--priority", "instance_type": "--instance-type",
             "nodes": "--node-count", "accelerators": "--accelerators", "vcpu": "--vcpu", "memory_gib": "--memory",
             "command": "the command after --", "env": "--env", "workdir": "--workdir",
             "auto_resume": "--auto-resume", "max_retry": "--max-retry",
             "termination_grace_seconds": "--grace-seconds", "min_runtime_seconds": "--min-runtime",
             "expected_duration_seconds": "--expected-duration",
             "deep_health_check_passed_nodes_only": "--deep-health-check-passed-nodes-only",
             "max_runtime_seconds": "--max-runtime", "hang_timeout_seconds": "--hang-timeout",
             "hang_action": "--hang-action", "required_topology": "--required-topology",
             "preferred_topology": "--preferred-topology",
             "accelerator_partition_type": "--accelerator-partition-type",
             "accelerator_partition_count": "--accelerator-partition-count",
             "min_nodes": "--min-nodes", "max_nodes": "--max-nodes",
             "service": "the service's checks (fairpod start-service)", "ray": "--ray",
             "image": "--image", "image_pull_policy": "--image-pull-policy", "mounts": "--mount",
             "replace_entrypoint": "replace_entrypoint (--config-file: the command replaces the image's ENTRYPOINT)",
             "scratch": "--scratch", "ready_timeout_seconds": "--ready-timeout", "ready_signal": "--ready-signal",
             "restarts_in_place": "--restarts-in-place", "restart_eval_period_seconds": "--restart-eval-period",
             "peer_recovery": "--peer-recovery",
             "log_rules": "--log-rule", "labels": "labels (--config-file's labels: a mapping)",
             "array": "--array", "job": "the job"}  # fmt: skip

# start-service's names where they differ from start-job's (its replicas are a job's nodes)
SERVICE_NAMES = {"nodes": "--min-replicas", "min_nodes": "--min-replicas", "max_nodes": "--max-replicas",
                 "service.readiness_path": "--readiness-path", "service.readiness_command": "--readiness-command",
                 "service.drain_seconds": "--drain-seconds",
                 "service.restart_backoff_seconds": "--restart-backoff-seconds",
                 "service.restart_backoff_max_seconds": "--restart-backoff-max-seconds",
                 "service.restart_reset_seconds": "--restart-reset-seconds",
                 "service": "the service", "job": "the service"}  # fmt: skip
SERVICE_FIELDS = ("name", "team", "priority", "instance_type", "accelerators", "vcpu", "memory_gib", "command", "env",
                  "workdir", "termination_grace_seconds")
# the fields sbatch takes as fairpod options (#FAIRPOD lines and its command line), by the same flags
SBATCH_FIELDS = ("team", "priority", "max_retry", "instance_type", "accelerators", "termination_grace_seconds",
                 "min_runtime_seconds", "required_topology", "preferred_topology")


def service_flags() -> dict[str, str]:
    """The API's fields in start-service's words (for the server's error messages)."""
    return {**{f: JOB_FLAGS[f] for f in SERVICE_FIELDS}, **SERVICE_NAMES}


def dest(field: str) -> str:
    """The argparse dest of a field's flag: the flag's name with '_' (``termination_grace_seconds`` ->
    ``grace_seconds``)."""
    return JOB_FLAGS[field][2:].replace("-", "_")
