"""``fairpod apply -f job.yaml`` for Kubernetes manifests: submit each PyTorchJob (read by ``fairpod.formats.kube``)
and each KubeRay RayJob (``fairpod.formats.kube.rayjob``) as a fairpod job."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.cli.output import emit_json
from fairpod.formats.kube import ManifestError, convert_all
from fairpod.formats.kube.teams import Teams


def _kind(d: Any) -> str:
    return str(d.get("kind", "")) if isinstance(d, dict) else ""


def _teams(a: argparse.Namespace, c: Client) -> Teams:
    """The cluster's teams' names (the spec's), ``--team``, and the submitter's only team, asked when needed."""

    def only() -> str | None:
        me = c.get("/me")
        mine = me.get("teams") or []
        return str(mine[0]) if me.get("role") == "member" and len(mine) == 1 else None

    return Teams.of(c.get("/spec").get("teams") or [], flag=getattr(a, "team", None), only=only)


def _convert(a: argparse.Namespace, docs: list[Any], teams: Teams) -> tuple[list[Any], list[str]]:
    jobs: list[Any] = []
    warnings: list[str] = []
    if any(_kind(d) == "RayJob" for d in docs):  # KubeRay RayJobs (fairpod.formats.kube.rayjob)
        from fairpod.formats.kube import rayjob

        try:
            jobs = rayjob.convert_all(docs, cwd=os.getcwd(), teams=teams)
        except ManifestError as e:  # one line per refused field
            raise CliError("\n".join(f"{a.file}: {line}" for line in str(e).splitlines())) from None
        rest = [f"{_kind(d) or '(no kind)'}/{(d.get('metadata') or {}).get('name', '?')}" for d in docs
                if _kind(d) not in ("RayJob", "PyTorchJob") and isinstance(d, dict)]
        if rest:
            warnings.append(f"skipped {', '.join(rest)}: fairpod runs only the RayJob and PyTorchJob documents")
    if any(_kind(d) == "PyTorchJob" for d in docs) or not jobs:
        try:
            more, warned = convert_all(docs, python=sys.executable, cwd=os.getcwd(),
                                       on_host=bool(getattr(a, "on_host", False)), teams=teams)
        except ManifestError as e:
            raise CliError(f"{a.file}: {e}") from None
        jobs += more
        warnings += [w for w in warned if "RayJob/" not in w]  # said above
    return jobs, warnings


def apply_manifests(a: argparse.Namespace, docs: list[Any]) -> int:
    _convert(a, docs, Teams(flag=getattr(a, "team", None), check=False))  # the file's own errors, before the server
    c = Client()
    teams = _teams(a, c)
    jobs, warnings = _convert(a, docs, teams)
    for w in [*warnings, *teams.notes]:
        print(f"fairpod: warning: {w}", file=sys.stderr)
    submitted = []
    for j in jobs:
        kind, res = ("RayJob", "rayjob.ray.io") if j.body.get("ray") else ("PyTorchJob", "pytorchjob.kubeflow.org")
        for w in j.warnings:
            print(f"fairpod: warning: {kind} {j.body['name']}: {w}", file=sys.stderr)
        for n in j.notes:
            print(f"fairpod: {kind} {j.body['name']}: {n}", file=sys.stderr)
        job = c.submit(j.body)
        submitted.append(job)
        if getattr(a, "output", "table") != "json":
            print(f"{res}/{job['name']} created: fairpod job {job['id']} for team {job['team']}, "
                  f"{job['nodes']} replica(s) — {job['state']}: {job['reason']}")
    if getattr(a, "output", "table") == "json":
        emit_json(submitted if len(submitted) > 1 else submitted[0])
    return 0
