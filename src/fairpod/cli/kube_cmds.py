"""``fairpod export kueue`` and ``fairpod import kueue``: the cluster policy as Kueue objects, and back."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export", help="write the cluster policy as Kueue objects (kubectl apply -f DIR)",
        description="Write the cluster spec (SPEC, or the running server's) as Kueue objects: ResourceFlavors, a "
        "Cohort, a ClusterQueue and a LocalQueue per team, WorkloadPriorityClasses, named as HyperPod task "
        "governance names them. Rules Kueue cannot express are listed on stderr and in the files' comments.",
        epilog="example: fairpod export kueue examples/seed/spec.yaml -o kueue/ && kubectl apply -f kueue/")
    p.add_argument("format", choices=["kueue"], help="what to write (kueue)")
    p.add_argument("spec", nargs="?", help="cluster spec (YAML); default: the spec of the running server")
    p.add_argument("-o", "--output-dir", required=True, metavar="DIR", help="directory to write the YAML files to")
    p.set_defaults(func=export_cmd)

    p = sub.add_parser(
        "import", help="read Kueue objects (fairpod's or HyperPod's) back into a cluster spec",
        description="Read Kueue objects (the files of 'fairpod export kueue', or 'kubectl get clusterqueues,"
        "resourceflavors,cohorts,localqueues,workloadpriorityclasses -A -o yaml' of a HyperPod cluster) and "
        "print the fairpod cluster spec they describe. What had to be guessed is listed on stderr.",
        epilog="example: fairpod import kueue kueue/ -o spec.yaml && fairpod apply -f spec.yaml")
    p.add_argument("format", choices=["kueue"], help="what to read (kueue)")
    p.add_argument("dir", metavar="DIR", help="directory (or file) of Kueue objects as YAML or JSON")
    p.add_argument("-o", "--output", metavar="FILE", help="write the spec here (default: stdout)")
    p.add_argument("--flavor", action="append", default=[], metavar="NAME=TYPE",
                   help="read the ResourceFlavor NAME as instance type TYPE (repeatable); by default a flavor's "
                   "type is its node.kubernetes.io/instance-type node label, else its name, else a node type of its "
                   "own sized from the quotas")
    p.set_defaults(func=import_cmd)


def _spec(a: argparse.Namespace) -> Any:
    from fairpod.model.spec import SpecError, load_spec, parse_spec

    try:
        if a.spec:
            return load_spec(a.spec)
        return parse_spec(Client().get("/spec"))
    except SpecError as e:
        where = a.spec or "the server's spec"
        raise CliError(f"{where}: " + "; ".join(e.problems)) from None


def export_cmd(a: argparse.Namespace) -> int:
    from fairpod.formats.kube.export import ExportError, export_kueue, write

    spec = _spec(a)
    try:
        ex = export_kueue(spec)
    except ExportError as e:
        raise CliError(str(e)) from None
    out = Path(a.output_dir)
    if out.exists() and not out.is_dir():
        raise CliError(f"{out} exists and is not a directory")
    try:
        files = write(ex, out)
    except OSError as e:
        raise CliError(f"cannot write to {out}: {e.strerror or e}") from None
    for n in ex.notes:
        print(f"fairpod: Kueue cannot express: {n}", file=sys.stderr)
    kinds: dict[str, int] = {}
    for o in ex.objects:
        kinds[o["kind"]] = kinds.get(o["kind"], 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in kinds.items())
    print(f"wrote {len(files)} files to {out}: {summary} (apply with: kubectl apply -f {out})")
    return 0


def import_cmd(a: argparse.Namespace) -> int:
    from fairpod.formats.kube.importer import import_kueue, read_dir, spec_yaml
    from fairpod.formats.kube.kueue_objects import ImportError_

    given: dict[str, str] = {}
    for f in a.flavor:
        name, eq, it = f.partition("=")
        if not eq or not name.strip() or not it.strip():
            raise CliError(f"--flavor {f!r}: give NAME=TYPE (a ResourceFlavor's name and an instance type)")
        given[name.strip()] = it.strip()
    try:
        res = import_kueue(read_dir(Path(a.dir)), flavors=given)
    except ImportError_ as e:
        raise CliError(f"{a.dir}: {e}") from None
    for n in res.notes:
        print(f"fairpod: note: {n}", file=sys.stderr)
    text = spec_yaml(res.spec)
    if a.output:
        try:
            Path(a.output).write_text(text)
        except OSError as e:
            raise CliError(f"cannot write {a.output}: {e.strerror or e}") from None
        print(f"wrote the spec of cluster {res.spec.cluster.name} ({len(res.spec.teams)} teams) to {a.output}",
              file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
