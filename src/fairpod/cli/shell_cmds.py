"""Interactive shells, as Slurm users get them: ``fairpod shell`` (and ``fairpod salloc``, ``fairpod srun
--pty bash``).

The allocation is a job like any other: submitted to the team's queue, admitted within quota or borrowing,
preempted like the rest. Its replica holds the nodes (``sleep``, for at most the maximum duration); once it
runs, the shell starts on this terminal, through a pseudo-terminal, with the allocation in its environment
(``FAIRPOD_JOB_ID``, ``SLURM_JOB_ID``, ``SLURM_JOB_NODELIST``, ``CUDA_VISIBLE_DEVICES`` of replica 0). The
shell ends when the user leaves it, after ``policy.shell_idle_timeout_seconds`` without input or output, at
``policy.shell_max_seconds``, or when the job stops (preempted, cancelled): a notice on the terminal first,
then SIGHUP after the job's grace period (SIGKILL a grace period later if it is still there). Leaving the shell
ends the job: Succeeded, as Slurm records a salloc left with ``exit`` (COMPLETED). A terminal that dies (SIGHUP, or
its input gone) or a SIGTERM ends the shell and cancels the job, also while it is still queued.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.formats import hyperpod

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any

POLL = 1.0  # seconds between looks at the job while the shell runs
GRACE = 10  # seconds between the notice that the shell must end and its SIGHUP


def register(sub: argparse._SubParsersAction) -> None:
    for name, hlp in [("shell", "a shell with accelerators allocated to you, governed like any job"),
                      ("salloc", "Slurm's salloc: an allocation, and a shell in it")]:
        _options(sub.add_parser(name, help=hlp, description=_description(hlp)), name)


def _description(hlp: str) -> str:
    return (hlp[0].upper() + hlp[1:] + ". The allocation is a job of your team's queue (quota, borrowing, "
            "preemption); the shell ends when you leave it, after the policy's idle timeout, at its maximum "
            "duration, or when the job is preempted (with a notice on the terminal).")


def pty_parser() -> argparse.ArgumentParser:
    """``fairpod srun --pty CMD``'s parser (fairpod.cli.srun_cmds hands ``--pty`` lines to it)."""
    hlp = "Slurm's srun --pty CMD: an interactive command in a new allocation"
    return _options(argparse.ArgumentParser(prog="fairpod srun", description=_description(hlp)), "srun")


def _options(p: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    p.add_argument("--team", "-A", "--account", dest="team", help="the team (default: your only team)")
    p.add_argument("--accelerators", "-G", "--gpus", dest="accelerators", type=int, metavar="N",
                   help="accelerators per node (default: the whole node)")
    p.add_argument("--node-count", "-N", "--nodes", dest="node_count", type=int, metavar="N",
                   help="nodes (default 1)")
    p.add_argument("--instance-type", "-p", "--partition", dest="instance_type",
                   help="instance type (default: the cluster's only one)")
    p.add_argument("--priority", "-q", "--qos", dest="priority", help="priority class")
    p.add_argument("--idle-timeout", type=float, metavar="SECONDS",
                   help="end the shell after this long without input or output (at most the policy's)")
    p.add_argument("--max-duration", type=float, metavar="SECONDS",
                   help="end it after this long (at most the policy's)")
    p.add_argument("-t", "--time", dest="max_duration", type=slurm_time, metavar="TIME",
                   help="Slurm's form of --max-duration: MINUTES, MM:SS, HH:MM:SS or D-HH[:MM[:SS]]")
    if name == "srun":
        p.add_argument("--pty", action="store_true", required=True, help="run the command on a terminal")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command (default: $SHELL, else sh)")
    p.set_defaults(func=shell, shell_verb=name)
    return p


def slurm_time(v: str) -> float:
    """Slurm's time limit in seconds: ``30`` (minutes), ``30:00``, ``1:00:00``, ``2-12``, ``2-12:30:00``."""
    text = v.strip()
    days, _, rest = text.partition("-") if "-" in text else ("", "", text)
    bad = argparse.ArgumentTypeError(f"{v!r} is not a time: MINUTES, MM:SS, HH:MM:SS or D-HH[:MM[:SS]]")
    try:
        nums = [int(x) for x in rest.split(":")]
        d = int(days) if days else 0
    except ValueError:
        raise bad from None
    if len(nums) > 3 or any(n < 0 for n in nums) or d < 0:
        raise bad
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        h, m, sec = (nums + [0, 0])[:3]
    elif len(nums) == 1:
        h, m, sec = 0, nums[0], 0
    elif len(nums) == 2:
        h, m, sec = 0, nums[0], nums[1]
    else:
        h, m, sec = nums
    return float(((d * 24 + h) * 60 + m) * 60 + sec)


def _limit(asked: float | None, most: float, flag: str) -> float:
    if asked is None:
        return most
    if asked <= 0:
        raise CliError(f"{flag} {asked:g}: give a number of seconds above 0")
    return min(asked, most)


def shell(a: argparse.Namespace) -> int:
    from fairpod.cli.jobbody import finish, only_team

    if not sys.stdin.isatty():
        raise CliError(f"{a.shell_verb} needs a terminal (stdin is not one)")
    c = Client()
    pol = c.get("/policy")
    idle = _limit(a.idle_timeout, float(pol["shell_idle_timeout_seconds"]), "--idle-timeout")
    most = _limit(a.max_duration, float(pol["shell_max_seconds"]), "--max-duration")
    command = [w for w in a.command if w != "--"] or [os.environ.get("SHELL") or "sh"]
    body: dict[str, Any] = {"name": f"shell-{os.urandom(3).hex()}", "team": a.team or only_team(),
                            "command": ["sleep", str(int(most) + 1)], "max_runtime_seconds": most,
                            "termination_grace_seconds": GRACE, "workdir": os.getcwd()}
    for key in ("accelerators", "instance_type", "priority"):
        if getattr(a, key) is not None:
            body[key] = getattr(a, key)
    if a.node_count is not None:
        body["nodes"] = a.node_count
    if body["team"].startswith(hyperpod.PREFIX):
        body["team"] = body["team"].removeprefix(hyperpod.PREFIX)
    body = finish(body)
    import signal

    def hang_up(signum: int, _frame: Any) -> None:
        raise HungUp(signum)

    for sig in (signal.SIGHUP, signal.SIGTERM):  # the terminal died, or we are told to end: end the allocation
        signal.signal(sig, hang_up)
    job = c.submit(body)
    jid = job["id"]
    left: str | None = None
    try:
        job = _wait_running(c, job)
        code, ended = _run(c, job, command, idle, most)
        left = None if ended else f"the shell exited {code}"  # its user left it (not ended by a limit or a stop)
        return code
    except HungUp as e:
        return 128 + e.signum
    finally:
        for sig in (signal.SIGHUP, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)  # the allocation is let go whatever comes now
        c.close()  # (a request the signal cut short leaves its connection half read)
        try:
            cur = c.get(f"/jobs/{jid}")
            if cur["state"] in ("Pending", "Running"):
                c.post(f"/jobs/{jid}/cancel", left=left)
        except CliError:
            pass
        try:
            print(f"fairpod: relinquished job allocation {jid}", file=sys.stderr)
        except OSError:  # no terminal any more
            pass


class HungUp(Exception):  # noqa: N818 - what happened, as the signal's name says
    """The terminal hung up (SIGHUP, or its input ended) or a SIGTERM came."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _wait_running(c: Client, job: dict[str, Any]) -> dict[str, Any]:
    said = None
    while job["state"] == "Pending":
        if job["reason"] != said:
            print(f"fairpod: job {job['id']} queued and waiting for resources: {job['reason']}", file=sys.stderr)
            said = job["reason"]
        time.sleep(POLL)
        job = c.get(f"/jobs/{job['id']}")
    if job["state"] != "Running":
        raise CliError(f"job {job['id']} is {job['state']}: {job['reason']}")
    return job


def _env(c: Client, job: dict[str, Any]) -> dict[str, str]:
    reps = c.get(f"/jobs/{job['id']}/replicas")["replicas"]
    env = {**os.environ, "FAIRPOD_JOB_ID": str(job["id"]), "FAIRPOD_JOB": job["name"],
           "SLURM_JOB_ID": str(job["id"]), "SLURM_JOBID": str(job["id"]),
           "SLURM_JOB_NODELIST": ",".join(job["placement"]), "SLURM_NNODES": str(job["nodes"])}
    if reps and reps[0]["accelerators"]:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in reps[0]["accelerators"])
    return env


def _run(c: Client, job: dict[str, Any], command: list[str], idle: float, most: float) -> tuple[int, bool]:
    """The shell on a pseudo-terminal, bridged to this terminal until it exits or must end: its exit status, and
    whether fairpod ended it (idle, the maximum duration, the job stopped)."""
    import pty
    import select
    import signal
    import termios
    import tty

    env = _env(c, job)
    print(f"fairpod: granted job allocation {job['id']} on {', '.join(job['placement'])} (idle timeout "
          f"{idle:g} s, at most {most:g} s)", file=sys.stderr)
    pid, fd = pty.fork()
    if pid == 0:  # the child: the shell
        try:
            os.execvpe(command[0], command, env)
        except OSError as e:
            os.write(2, f"fairpod: cannot run {command[0]}: {e.strerror}\n".encode())
        os._exit(127)
    stdin = sys.stdin.fileno()
    saved = termios.tcgetattr(stdin)
    tty.setraw(stdin)
    start = last = time.monotonic()
    next_look = start + POLL
    ending_at: float | None = None
    hung_up = False
    try:
        while True:
            now = time.monotonic()
            if ending_at is not None and now >= ending_at:
                os.kill(pid, signal.SIGKILL if hung_up else signal.SIGHUP)  # SIGKILL if SIGHUP did not do it
                hung_up, ending_at = True, now + GRACE
            ready, _, _ = select.select([stdin, fd], [], [], 0.2)
            if fd in ready:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    break
                os.write(sys.stdout.fileno(), data)
                last = time.monotonic()
            if stdin in ready:
                try:
                    data = os.read(stdin, 65536)
                except OSError:
                    data = b""
                if not data:  # raw mode: ^D is a byte; no input at all is a terminal gone
                    raise HungUp(signal.SIGHUP)
                os.write(fd, data)
                last = time.monotonic()
            now = time.monotonic()
            if ending_at is None and now - last >= idle:
                ending_at = _notice(f"no input or output for {now - last:.0f} s (idle timeout {idle:g} s)", 0)
            if ending_at is None and now - start >= most:
                ending_at = _notice(f"the maximum duration {most:g} s is reached", 0)
            if ending_at is None and now >= next_look:
                next_look = now + POLL
                cur = c.get(f"/jobs/{job['id']}")
                if cur["state"] != "Running":
                    ending_at = _notice(f"job {job['id']} is {cur['state']}: {cur['reason']}", GRACE)
    except HungUp:
        _end_shell(pid)
        raise
    finally:
        try:
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        except (termios.error, OSError):  # the terminal is gone
            pass
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
    return code, ending_at is not None


def _end_shell(pid: int) -> None:
    """The terminal is gone: SIGHUP to the shell, as the kernel gives a session whose terminal hangs up; SIGKILL
    after GRACE seconds if it is still there."""
    import signal

    try:
        os.kill(pid, signal.SIGHUP)
        deadline = time.monotonic() + GRACE
        while time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _notice(why: str, grace: float) -> float:
    """Say on the terminal that the shell ends, and when; returns when (time.monotonic())."""
    sys.stderr.write(f"\r\nfairpod: {why}; the shell ends" + (f" in {grace:g} s" if grace else "") + "\r\n")
    sys.stderr.flush()
    return time.monotonic() + grace
