"""The ``fairpod`` command: one entry point for data scientists and admins.

Each sub-command lives in its own module of ``fairpod.cli`` and registers itself in ``COMMAND_MODULES``.
Errors print one clear line to stderr and exit non-zero; ``-o json`` prints machine-readable output.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from fairpod import __version__
from fairpod.cli.errors import CliError

# modules that define register(subparsers); each adds its commands with set_defaults(func=...)
COMMAND_MODULES = [
    "fairpod.cli.server_cmds",
    "fairpod.cli.job_cmds",
    "fairpod.cli.admin_cmds",
    "fairpod.cli.spec_cmds",
    "fairpod.cli.simulate",
    "fairpod.cli.report_cmds",
    "fairpod.cli.slurm_cmds",
    "fairpod.cli.backup_cmds",
    "fairpod.cli.kube_cmds",
    "fairpod.cli.hyp_cmds",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fairpod",
        description="Share one accelerator cluster fairly between teams: quotas, borrowing, priorities, "
        "preemption with checkpoint and resume.",
    )
    parser.add_argument("--version", action="version", version=f"fairpod {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in COMMAND_MODULES:
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name == mod:
                continue
            raise
        m.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
    except CliError as e:
        print(f"fairpod: error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
