"""``fairpod validate SPEC``: check a cluster spec and print every problem."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="check a cluster spec (YAML) and list every problem",
        description="Check a cluster spec: instance groups, instance types, policy and team quotas. "
        "Prints one line per problem, naming the field; exit code 1 if there is any.",
    )
    p.add_argument("spec", help="path to the cluster spec (YAML)")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table", help="output format")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fairpod.cli.files import read_yaml
    from fairpod.model.spec import SpecError, load_spec

    read_yaml(args.spec)  # unreadable or not YAML: one line naming the file, line and column
    try:
        spec = load_spec(args.spec)
    except SpecError as e:
        if args.output == "json":
            print(json.dumps({"valid": False, "problems": e.problems}, indent=2))
        else:
            for prob in e.problems:
                print(f"error: {prob}")
            print(f"{args.spec}: {len(e.problems)} problem(s)")
        return 1
    cap = spec.capacity()
    if args.output == "json":
        print(json.dumps({
            "valid": True,
            "cluster": spec.cluster.name,
            "capacity": {k: v.human() for k, v in cap.items()},
            "teams": [t.name for t in spec.teams],
        }, indent=2))
    else:
        total = sum(v.acc for v in cap.values())
        print(f"{args.spec}: valid — cluster {spec.cluster.name}, {len(spec.cluster.instance_groups)} instance "
              f"group(s), {total} accelerators, {len(spec.teams)} team(s)")
    return 0
