"""Services: replicas that run until deleted (inference endpoints), with a readiness check and a stable address.

A job with a ``service`` section is a service: its ``nodes``/``max_nodes`` are its minimum and maximum replicas
(docs/workloads.md). Each replica gets ``PORT`` (its own free port) and listens there; fairpod probes it with the
readiness check and lists only ready replicas behind the service's address.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fairpod.model.spaces import SpaceSpec
from fairpod.model.spec import no_bool_numbers

# a Ray service's readiness when it gives none (fairpod.model.jobs): its Ray node ALIVE in the head's node table, which
# the replica's launcher keeps this file for (fairpod.executors.raycluster.READY), in the replica's own /tmp
RAY_NODE_READY = ["sh", "-c", 'test -e "/tmp/fairpod-ray-ready-$PORT"']


class ServiceSpec(BaseModel):
    """How fairpod checks that a replica serves, and how long a replica is drained before it is stopped."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    readiness_path: str | None = Field(
        default=None, pattern=r"^/[!-~]*$", max_length=1024,
        description="HTTP path: a replica is ready while GET http://<replica>:$PORT<path> answers 2xx or 3xx")
    readiness_command: list[str] | None = Field(
        default=None, min_length=1, max_length=256,
        description="a command run inside each replica's sandbox (as the replica's user, in its cgroup and "
        "namespaces, with its environment and PORT), every second, at most 5 s each: ready while it exits 0")
    drain_seconds: float = Field(
        default=5.0, ge=0, le=3600,
        description="a replica going away leaves the endpoint list, then gets SIGTERM this long after")
    restart_backoff_seconds: float = Field(
        default=1.0, ge=0, le=3600,
        description="a replica that exits starts again this long after its first exit, twice as long after each "
        "further exit in a row (0: at once, always)")
    restart_backoff_max_seconds: float = Field(
        default=60.0, ge=0, le=86400, description="the longest a replica's restart waits")
    restart_reset_seconds: float = Field(
        default=60.0, ge=0, le=86400,
        description="a replica ready this long in a row has its exits in a row forgotten (the next waits "
        "restart_backoff_seconds again)")
    space: SpaceSpec | None = Field(
        default=None, description="a space: an IDE of one user behind fairpod's space proxy (fairpod.model.spaces)")

    @model_validator(mode="before")
    @classmethod
    def _numbers(cls, data: Any) -> Any:
        return no_bool_numbers(cls, data)

    @model_validator(mode="after")
    def _one_check(self) -> ServiceSpec:
        if self.readiness_path is not None and self.readiness_command is not None:
            raise ValueError("give readiness_path or readiness_command, not both")
        return self

    def restart_delay(self, exits: int) -> float:
        """Seconds before a replica starts again after its ``exits``-th exit in a row (1 for the first)."""
        if self.restart_backoff_seconds <= 0 or exits < 1:
            return 0.0
        return float(min(self.restart_backoff_max_seconds, self.restart_backoff_seconds * 2.0 ** min(exits - 1, 60)))

    @property
    def check_text(self) -> str:
        if self.readiness_path is not None:
            return f"GET {self.readiness_path}"
        if self.readiness_command is not None:
            return "command " + " ".join(self.readiness_command)
        return "TCP connect"
