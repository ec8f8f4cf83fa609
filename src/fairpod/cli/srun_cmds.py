"""``fairpod srun [OPTIONS] CMD …`` outside a job, as Slurm users type it: a new allocation, one step in it.

Slurm's ``srun`` run from a login node asks for an allocation with its options (``-N``, ``-n``, ``--gres``, ``-p``,
``-A`` …), runs ``CMD`` as one job step on it, streams the tasks' output, and exits with the step's exit code.
fairpod does the same with a batch job whose script is that one ``srun`` line (``fairpod.formats.slurm``): the
job is queued, governed and placed like any other, its output is streamed from the job's log as it runs, and
``fairpod srun`` exits with the step's status (the highest of its tasks'). pyxis's ``--container-image`` runs the
step in the image (docs/slurm.md). Ctrl-C cancels the job. ``srun --pty CMD`` is the interactive form
(fairpod.cli.shell_cmds).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError

HELP = """Run CMD as one job step in a new allocation, as Slurm's srun does outside a job: the allocation is a
fairpod job of your team's queue (its options: -N, -n, --ntasks-per-node, --gres/-G, -p, -A, -q, -J, --exclusive,
-c, --mem …); the tasks' output is printed as they run; the exit status is the step's. Step options: -l, -K,
--auto-resume=1, pyxis's --container-image=REGISTRY#IMAGE … (the step in an image). --pty CMD: an interactive
command on a terminal instead (fairpod srun --pty --help). Ctrl-C cancels the job."""
# srun's own step options: they stay on the step's srun line (fairpod.formats.slurm.srun reads them)
STEP_VALUE = {"-w", "--nodelist", "--mpi", "--cpu-bind", "--cpu_bind", "--gpus-per-task", "--mem-bind",
              "--distribution", "-m", "--network", "--het-group", "--hint"}
STEP_FLAGS = {"-l", "--label", "-K", "--kill-on-bad-exit", "--auto-resume", "-u", "--unbuffered", "--overlap"}
STREAM_TIMEOUT = 7 * 86400.0  # a step may print nothing for hours; the stream ends with the job
HEADER = b"==== fairpod: "  # the supervisor's lines in a replica's log (one per run), not the step's output


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("srun", help="Slurm's srun: run a command as a job step in a new allocation (--pty: on a "
                       "terminal)", description=HELP, prefix_chars="+", add_help=False,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       usage="fairpod srun [OPTIONS] CMD [ARGS…]  |  fairpod srun --pty [OPTIONS] [CMD …]")
    p.add_argument("argv", nargs=argparse.REMAINDER, help="srun's options, then the command")
    p.set_defaults(func=srun, srun_parser=p)


def split(argv: list[str]) -> tuple[list[str], list[str]]:
    """srun's options and the command (the first word that is neither an option nor an option's value)."""
    from fairpod.formats.slurm import pyxis
    from fairpod.formats.slurm.sbatch import NO_EFFECT_VALUE, VALUE_OPTS

    takes_value = {*VALUE_OPTS, *NO_EFFECT_VALUE, *pyxis.VALUE, *STEP_VALUE, "-t", "--time"}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return argv[:i], argv[i + 1:]
        if not a.startswith("-") or a == "-":
            break
        name = a.partition("=")[0]
        if "=" not in a and (name in takes_value and (len(a) == 2 or a.startswith("--"))):
            i += 1  # its value is the next word
        i += 1
    return argv[:i], argv[i:]


def _allocation(opts: list[str]) -> tuple[list[str], list[str]]:
    """The options of the allocation (read as sbatch reads them) and those of the step (its srun line)."""
    from fairpod.formats.slurm import pyxis

    alloc: list[str] = []
    step: list[str] = []
    i = 0
    while i < len(opts):
        a = opts[i]
        name, eq, _ = a.partition("=")
        short = name[:2] if not name.startswith("--") else name
        with_value = not eq and i + 1 < len(opts) and (name in STEP_VALUE or name in pyxis.VALUE) and \
            not opts[i + 1].startswith("-")
        words = opts[i:i + 2] if with_value else [a]
        if name in pyxis.VALUE or name in pyxis.FLAGS or name in STEP_VALUE or short in STEP_FLAGS or \
                name in STEP_FLAGS:
            step += words
            i += len(words)
            continue
        alloc.append(a)
        i += 1
    return alloc, step


def srun(a: argparse.Namespace) -> int:
    argv = list(a.argv)
    opts, command = split(argv)
    if "--help" in opts or "-h" in opts:
        a.srun_parser.print_help()
        return 0
    if "--pty" in opts:
        from fairpod.cli import shell_cmds

        ns = shell_cmds.pty_parser().parse_args(argv)
        return int(ns.func(ns))
    if not command:
        raise CliError("srun: no command given: fairpod srun [OPTIONS] CMD [ARGS…] (or --pty for a terminal)")
    return run_step(opts, command)


def run_step(opts: list[str], command: list[str]) -> int:
    from fairpod.cli.slurm_cmds import _exit_code, _submit, finish_job
    from fairpod.formats.slurm.sbatch import BatchError, Setting, parse_options, read_script, to_job

    alloc, step = _allocation(opts)
    line = shlex.join(["srun", *step, *command])
    text = f"#!/bin/sh\n{line}\n"
    name = os.path.basename(command[0]) or "srun"
    try:
        bs = read_script(name, text)
        settings, warnings = parse_options(alloc, "", fairpod=False, strict=False)
    except BatchError as e:
        raise CliError(f"srun: {e}") from None
    bs.settings = [Setting("job_name", name, "srun"), *settings]
    bs.warnings += [w.replace("#SBATCH ", "") for w in warnings]
    c = Client()
    try:
        body, notes = to_job(bs, [], cwd=os.getcwd(), environ=dict(os.environ), python=sys.executable)
    except BatchError as e:
        raise CliError(f"srun: {e}") from None
    body = finish_job(bs, body, c)
    if "FAIRPOD_SBATCH" in body.get("env", {}):  # a host step: the runner prints only the step's output
        import json

        cfg = json.loads(body["env"]["FAIRPOD_SBATCH"])
        body["env"]["FAIRPOD_SBATCH"] = json.dumps({**cfg, "srun": True})
    for w in bs.warnings:
        print(f"srun: warning: {w}", file=sys.stderr)
    for n in notes:
        if not n.startswith(("fairpod job name", "image ")):
            print(f"srun: {n}", file=sys.stderr)
    job = _submit(c, body)
    jid = job["id"]
    try:
        if job["state"] == "Pending":
            print(f"srun: job {jid} queued and waiting for resources", file=sys.stderr)
            while job["state"] == "Pending":
                time.sleep(0.5)
                job = c.get(f"/jobs/{jid}")
            print(f"srun: job {jid} has been allocated resources", file=sys.stderr)
        _stream(Client(timeout=STREAM_TIMEOUT), jid)
        job = c.get(f"/jobs/{jid}")
        for _ in range(600):  # the log ends with the job; its final state is written a moment later at most
            if job["state"] in ("Succeeded", "Failed", "Cancelled"):
                break
            time.sleep(0.2)
            job = c.get(f"/jobs/{jid}")
    except KeyboardInterrupt:
        print(f"srun: interrupted: cancelling job {jid}", file=sys.stderr)
        try:
            c.post(f"/jobs/{jid}/cancel")
        except CliError:
            pass
        return 130
    if job["state"] == "Cancelled":
        print(f"srun: error: job {jid} was cancelled: {job.get('reason')}", file=sys.stderr)
    elif job["state"] == "Failed" and not str((job.get("exit") or {}).get("0") or "").startswith("exited "):
        print(f"srun: error: job {jid} failed: {job.get('reason')}", file=sys.stderr)
    return _exit_code(job)


def _stream(c: Client, jid: int) -> None:
    """Replica 0's log (the step's output) as it is written, without the supervisor's header lines."""
    out = sys.stdout.buffer
    rest = b""
    for chunk in c.stream(f"/jobs/{jid}/logs", replica=0, follow="true"):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        kept = [ln + b"\n" for ln in lines if not ln.startswith(HEADER)]
        if kept:
            out.write(b"".join(kept))
            out.flush()
    if rest and not rest.startswith(HEADER):
        out.write(rest)
        out.flush()
