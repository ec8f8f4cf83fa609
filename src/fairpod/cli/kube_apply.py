"""``fairpod apply -f job.yaml`` for Kubernetes manifests: submit each PyTorchJob (read by ``fairpod.formats.kube``)
and each KubeRay RayJob (``fairpod.formats.kube.rayjob``) as a fairpod job, each KubeRay RayCluster
(``fairpod.formats.kube.raycluster``) as a fairpod service (a standing Ray cluster), each KubeRay RayService
(``fairpod.formats.kube.rayservice``) as a fairpod service: a standing Ray cluster serving its Ray Serve
applications."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.cli.output import emit_json
from fairpod.formats.kube.manifest import ManifestError
from fairpod.formats.kube.pytorchjob import convert_all
from fairpod.formats.kube.teams import Teams


def _kind(d: Any) -> str:
    return str(d.get("kind", "")) if isinstance(d, dict) else ""


def _teams(a: argparse.Namespace, c: Client) -> Teams:
    """The cluster's teams' names (the spec's), ``--team``, and the submitter's only team, asked when needed."""

    def only() -> str | None:
        me = c.get("/me")
        mine = me.get("teams") or []
        return str(mine[0]) if me.get("role") == "member" and len(mine) == 1 else None

    spec = c.get("/spec")
    return Teams.of(spec.get("teams") or [], flag=getattr(a, "team", None), only=only, spec=spec)


RUN = ("PyTorchJob", "RayJob", "RayCluster", "RayService", "Job", "Pod")


def _convert(a: argparse.Namespace, docs: list[Any], teams: Teams) -> tuple[list[Any], list[str]]:
    """Every job of the file, or a CliError naming every document or field that cannot run (one answer)."""
    from fairpod.formats.kube import batch
    from fairpod.formats.kube.image import DOCKER_HUB, REGISTRY_ENV

    registry = os.environ.get(REGISTRY_ENV) or DOCKER_HUB
    on_host = bool(getattr(a, "on_host", False))
    errors = batch.refusals(docs)
    jobs: list[Any] = []
    warnings: list[str] = []
    if any(_kind(d) == "RayJob" for d in docs):  # KubeRay RayJobs (fairpod.formats.kube.rayjob)
        from fairpod.formats.kube import rayjob

        try:
            jobs = rayjob.convert_all(docs, cwd=os.getcwd(), teams=teams, on_host=on_host, registry=registry)
        except ManifestError as e:  # one line per refused field
            errors += str(e).splitlines()
    if any(_kind(d) == "RayCluster" for d in docs):  # standing Ray clusters: services (formats.kube.raycluster)
        from fairpod.formats.kube import raycluster

        try:
            jobs += raycluster.convert_all(docs, cwd=os.getcwd(), teams=teams, on_host=on_host, registry=registry)
        except ManifestError as e:
            errors += str(e).splitlines()
    if any(_kind(d) == "RayService" for d in docs):  # Ray Serve on a standing cluster (formats.kube.rayservice)
        from fairpod.formats.kube import rayservice

        try:
            jobs += rayservice.convert_all(docs, cwd=os.getcwd(), teams=teams, on_host=on_host, registry=registry)
        except ManifestError as e:
            errors += str(e).splitlines()
    for d in docs:
        if _kind(d) in ("Job", "Pod") and str(d.get("apiVersion")) in ("batch/v1", "v1"):
            try:
                jobs.append(batch.convert(d, cwd=os.getcwd(), on_host=on_host, teams=teams, registry=registry))
            except ManifestError as e:
                errors.append(f"{_kind(d)} {(d.get('metadata') or {}).get('name', '?')}: {e}")
    torch = [d for d in docs if _kind(d) == "PyTorchJob"]
    if torch or (not jobs and not errors):
        try:
            more, _ = convert_all(torch or docs, python=sys.executable, cwd=os.getcwd(), on_host=on_host, teams=teams,
                                  registry=registry)
            jobs += more
        except ManifestError as e:
            errors.append(str(e))
    if errors:
        raise CliError("\n".join(f"{a.file}: {line}" for line in errors))
    rest = [f"{_kind(d) or '(no kind)'}/{(d.get('metadata') or {}).get('name', '?')}" for d in docs
            if isinstance(d, dict) and _kind(d) not in RUN]
    if rest:
        warnings.append(f"skipped {', '.join(rest)}: fairpod runs the PyTorchJob, RayJob, RayCluster, RayService, Job and Pod documents "
                        "(a PyTorchJob's torchrun rendezvous needs no etcd service)")
    return jobs, warnings


def apply_manifests(a: argparse.Namespace, docs: list[Any]) -> int:
    _convert(a, docs, Teams(flag=getattr(a, "team", None), check=False))  # the file's own errors, before the server
    c = Client()
    teams = _teams(a, c)
    jobs, warnings = _convert(a, docs, teams)
    for j in jobs:  # no instance type named: the team's, in order, as Kueue assigns a flavor
        if not j.body.get("instance_type") and (types := teams.instance_types(j.body["team"], j.body)):
            if j.body.get("max_nodes"):  # an elastic job grows on one instance type
                types = types.split(",")[0]
            j.body["instance_type"] = types
            j.notes.append(f"no instance type named: the first of {types} that fits (the team's quota first)")
    for w in [*warnings, *teams.notes]:
        print(f"fairpod: warning: {w}", file=sys.stderr)
    submitted = []
    for j in jobs:
        kind, res = j.kind
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
