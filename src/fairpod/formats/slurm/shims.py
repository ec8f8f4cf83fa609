"""``scontrol`` and ``hostname`` as a batch script sees them on the local executor.

* ``scontrol show hostnames [LIST]`` prints one host per line (default: ``$SLURM_JOB_NODELIST``);
  ``scontrol show hostlist LIST`` compresses; ``scontrol show job [ID]`` prints the job's Slurm fields.
* ``hostname`` prints the node's name (as in ``$SLURM_JOB_NODELIST``); ``hostname -i``/``-I``/
  ``--ip-address`` print 127.0.0.1: every node of the local executor is this machine. Other uses go to the
  system's ``hostname``.
"""

from __future__ import annotations

import os
import sys

from fairpod.formats.slurm.hostlist import HostlistError, compress, expand


def scontrol(args: list[str]) -> int:
    if len(args) >= 2 and args[0] == "show" and args[1] in ("hostnames", "hostname"):
        text = args[2] if len(args) > 2 else os.environ.get("SLURM_JOB_NODELIST", "")
        try:
            print("\n".join(expand(text)))
        except HostlistError as e:
            print(f"scontrol: error: {e}", file=sys.stderr)
            return 1
        return 0
    if len(args) >= 3 and args[0] == "show" and args[1] == "hostlist":
        try:
            print(compress(expand(args[2])))
        except HostlistError as e:
            print(f"scontrol: error: {e}", file=sys.stderr)
            return 1
        return 0
    if len(args) >= 2 and args[0] == "show" and args[1] == "job":
        env = os.environ
        if len(args) > 2 and args[2] != env.get("SLURM_JOB_ID"):
            print(f"scontrol: error: inside a job, only its own job ({env.get('SLURM_JOB_ID')}) can be shown",
                  file=sys.stderr)
            return 1
        fields = [("JobId", "SLURM_JOB_ID"), ("JobName", "SLURM_JOB_NAME"), ("Account", "SLURM_JOB_ACCOUNT"),
                  ("Partition", "SLURM_JOB_PARTITION"), ("NumNodes", "SLURM_JOB_NUM_NODES"),
                  ("NumTasks", "SLURM_NTASKS"), ("NodeList", "SLURM_JOB_NODELIST"),
                  ("BatchHost", "SLURMD_NODENAME"), ("Restarts", "SLURM_RESTART_COUNT"),
                  ("WorkDir", "SLURM_SUBMIT_DIR")]
        print(" ".join(f"{k}={env.get(v, '')}" for k, v in fields) + " JobState=RUNNING")
        return 0
    print("scontrol: error: fairpod's scontrol supports 'show hostnames [LIST]', 'show hostlist LIST' and "
          "'show job'", file=sys.stderr)
    return 1


def hostname(args: list[str]) -> int:
    node = os.environ.get("SLURMD_NODENAME") or os.environ.get("FAIRPOD_NODE")
    if not args or all(a in ("-s", "--short", "-f", "--fqdn", "--long", "-A", "--all-fqdns") for a in args):
        if node:
            print(node)
            return 0
    elif all(a in ("-i", "--ip-address", "-I", "--all-ip-addresses") for a in args):
        print("127.0.0.1")
        return 0
    here = os.path.dirname(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else ""
    bindir = os.environ.get("FAIRPOD_SLURM_DIR", "")
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and not (bindir and p.startswith(os.path.join(bindir, "bin"))) and p != here]
    for p in path:
        exe = os.path.join(p, "hostname")
        if os.access(exe, os.X_OK):
            os.execv(exe, [exe, *args])
    print("hostname: the system's hostname command is not on PATH", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("scontrol", "hostname"):
        print("usage: python -m fairpod.formats.slurm.shims {scontrol|hostname} ARGS...", file=sys.stderr)
        return 2
    return scontrol(args[1:]) if args[0] == "scontrol" else hostname(args[1:])


if __name__ == "__main__":
    sys.exit(main())
