"""``fairpod apply -f job.yaml`` for Kubernetes manifests: submit each PyTorchJob as a fairpod job (read by
``fairpod.formats.kube``)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.cli.output import emit_json
from fairpod.formats.kube import ManifestError, convert_all


def apply_manifests(a: argparse.Namespace, docs: list[Any]) -> int:
    try:
        jobs, warnings = convert_all(docs, python=sys.executable, cwd=os.getcwd(),
                                     on_host=bool(getattr(a, "on_host", False)))
    except ManifestError as e:
        raise CliError(f"{a.file}: {e}") from None
    for w in warnings:
        print(f"fairpod: warning: {w}", file=sys.stderr)
    c = Client()
    submitted = []
    for j in jobs:
        for w in j.warnings:
            print(f"fairpod: warning: PyTorchJob {j.body['name']}: {w}", file=sys.stderr)
        for n in j.notes:
            print(f"fairpod: PyTorchJob {j.body['name']}: {n}", file=sys.stderr)
        job = c.submit(j.body)
        submitted.append(job)
        if getattr(a, "output", "table") != "json":
            print(f"pytorchjob.kubeflow.org/{job['name']} created: fairpod job {job['id']} for team {job['team']}, "
                  f"{job['nodes']} replica(s) — {job['state']}: {job['reason']}")
    if getattr(a, "output", "table") == "json":
        emit_json(submitted if len(submitted) > 1 else submitted[0])
    return 0
