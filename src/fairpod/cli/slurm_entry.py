"""The ``sbatch``, ``srun``, ``salloc``, ``squeue``, ``sinfo``, ``scancel`` and ``sacct`` executables: Slurm's
commands as their users type them, each ``fairpod NAME …`` (pyproject.toml installs them; docs/slurm.md)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

COMMANDS = ("sbatch", "srun", "salloc", "squeue", "sinfo", "scancel", "sacct")


def main(argv: Sequence[str] | None = None) -> int:
    """``NAME ARGS…`` is ``fairpod NAME ARGS…``, NAME being the name this executable was run by."""
    from fairpod.cli.main import main as fairpod_main

    name = os.path.basename(sys.argv[0])
    if name not in COMMANDS:
        print(f"fairpod: {name!r} is not one of Slurm's commands fairpod provides ({', '.join(COMMANDS)})",
              file=sys.stderr)
        return 2
    return fairpod_main([name, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
