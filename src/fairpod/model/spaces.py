"""Spaces: a JupyterLab or code-server of one user, run as a job of one replica (docs/spaces.md).

A space is a service (``JobSpec.service``) whose ``space`` section names its IDE and who may open it. To the
engine it is a plain job of one replica (``JobSpec.kind``): it runs within its team's quota or on borrowed
capacity, with its priority class, and a reclaim preempts it as any job; it is not a service's quota-bound
minimum. Its files live in a directory of its own that outlives each of its runs (``server.services.spaces``).

The fields mirror HyperPod's space (aws/sagemaker-hyperpod-cli, doc/cli/space/cli_space.md: ``--app-type``,
``--access-type`` Public or OwnerOnly, ``--idle-shutdown idleTimeoutInMinutes=N``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

IDES = ("jupyter", "code-server")


class SpaceSpec(BaseModel):
    """Which IDE a space runs and who may open it through fairpod's space proxy."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    ide: Literal["jupyter", "code-server"] = Field(description="jupyter (JupyterLab) or code-server")
    access: Literal["OwnerOnly", "Public"] = Field(
        default="OwnerOnly", description="OwnerOnly: only the user who created it (and admins: never, see "
        "docs/spaces.md); Public: every member of its team")
    idle_minutes: float | None = Field(
        default=None, gt=0, le=7 * 24 * 60,
        description="stopped after this many minutes without a request through the proxy (default: the "
        "cluster policy's space_idle_minutes); its files stay and 'fairpod space start' runs it again")


def files_key(name: str) -> str:
    """The name of space ``name``'s directory under its team's checkpoint directory: ``space.NAME`` (a job's own
    directory is ``NAME-ID``, which holds no dot)."""
    return f"space.{name}"
