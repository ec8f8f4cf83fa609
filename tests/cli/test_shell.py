"""``fairpod shell`` / ``salloc`` / ``srun --pty``: a shell on a real pseudo-terminal, its allocation a job."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import sys
import time

from ..server.conftest import Server, wait_for


class Terminal:
    """``fairpod ARGS`` run on a pseudo-terminal (the pty module), as a user at a terminal runs it."""

    def __init__(self, server: Server, *args: str) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execvpe(sys.executable, [sys.executable, "-m", "fairpod.cli.main", *args],
                       {**server.env, "SHELL": "/bin/sh", "PS1": "$ "})
        self.out = b""
        self.status: int | None = None

    def expect(self, pattern: bytes, timeout: float = 30.0) -> re.Match[bytes]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.out)
            if m:
                return m
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    break
                self.out += data
        m = re.search(pattern, self.out)
        assert m, f"no {pattern!r} within {timeout} s; the terminal showed: {self.out.decode(errors='replace')}"
        return m

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def wait(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                return self.status
            try:
                ready, _, _ = select.select([self.fd], [], [], 0.2)
                if ready:
                    self.out += os.read(self.fd, 65536)
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"fairpod did not exit within {timeout} s: {self.out.decode(errors='replace')}")

    def hang_up(self) -> int:
        """The terminal dies (its master side closed: the kernel sends SIGHUP to the session); fairpod's status."""
        os.close(self.fd)
        self.fd = -1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                return self.status
            time.sleep(0.05)
        raise AssertionError("fairpod did not end within 30 s of its terminal's hang-up")

    def close(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        if self.fd >= 0:
            os.close(self.fd)


def shell_job(server: Server) -> dict:
    jobs = [j for j in server.api("GET", "/jobs").json()["jobs"] if j["name"].startswith("shell-")]
    assert len(jobs) == 1, jobs
    return jobs[0]


def test_srun_pty_gives_a_shell_in_an_allocation_that_ends_with_it(server: Server):
    t = Terminal(server, "srun", "--pty", "-A", "john", "-G", "1", "sh")
    try:
        t.expect(rb"granted job allocation (\d+) on workers-\d")
        job = shell_job(server)
        assert job["state"] == "Running" and job["team"] == "john" and job["accelerators_per_node"] == 1
        t.expect(rb"[$#] $")  # the shell's prompt: what is typed before it starts may be lost (seen under load)
        t.send("echo JOB=$FAIRPOD_JOB_ID SLURM=$SLURM_JOB_ID; tty\n")
        m = t.expect(rb"JOB=(\d+) SLURM=(\d+)")
        assert int(m.group(1)) == int(m.group(2)) == job["id"]
        t.expect(rb"/dev/pts/\d+")  # a terminal of its own
        t.send("exit 3\n")
        assert t.wait() == 3
        assert b"relinquished job allocation" in t.out
        done = server.wait_state(job["name"], "Succeeded")  # left with exit: Slurm's COMPLETED, not cancelled
        assert done["reason"] == "the shell exited 3; allocation relinquished by admin", done["reason"]
    finally:
        t.close()


def test_an_idle_shell_ends_and_a_preempted_one_is_told(server: Server):
    t = Terminal(server, "shell", "--team", "john", "--accelerators", "1", "--idle-timeout", "2")
    try:
        t.expect(rb"granted job allocation")
        t.expect(rb"no input or output for \d+ s \(idle timeout 2 s\); the shell ends", 20)
        t.wait()
        wait_for(lambda: shell_job(server)["state"] == "Cancelled", 20, "the allocation to end")
    finally:
        t.close()
    t = Terminal(server, "salloc", "-A", "john", "-G", "4")
    try:
        t.expect(rb"granted job allocation (\d+)")
        job = [j for j in server.api("GET", "/jobs").json()["jobs"] if j["state"] == "Running"][0]
        server.cli("cancel-job", str(job["id"]))  # as a preemption or an admin would stop it
        t.expect(rb"job \d+ is Cancelled: .*; the shell ends in 10 s", 20)
        t.wait(40)
    finally:
        t.close()


def test_a_terminal_that_dies_ends_its_allocation(server: Server):
    """salloc's terminal hangs up (an ssh session dropped, a window closed): its shell ends and the allocation is
    cancelled, whether it was granted or still queued. Before, fairpod died of the SIGHUP without a word to the
    server: the job stayed queued with no client, or kept its nodes until its maximum duration."""
    t = Terminal(server, "salloc", "-A", "john", "-G", "4")
    try:
        t.expect(rb"granted job allocation (\d+)")
        t.expect(rb"[$#] $")
        job = shell_job(server)
        assert t.hang_up() != 0
        done = server.wait_state(job["name"], "Cancelled", 20)
        assert done["reason"] == "cancelled by admin", done["reason"]
    finally:
        t.close()
    for team, nodes in (("john", 3), ("smith", 1)):  # the whole cluster taken
        server.submit(name=f"hold-{team}", team=team, nodes=nodes, command=["sleep", "300"])
        server.wait_state(f"hold-{team}", "Running")
    t = Terminal(server, "salloc", "-A", "john", "-N", "1")
    try:
        t.expect(rb"queued and waiting for resources")
        queued = [j for j in server.api("GET", "/jobs").json()["jobs"] if j["name"].startswith("shell-")
                  and j["state"] == "Pending"]
        assert len(queued) == 1, queued
        t.hang_up()
        server.wait_state(queued[0]["name"], "Cancelled", 20)
    finally:
        t.close()
        for team in ("john", "smith"):
            server.cli("cancel-job", f"hold-{team}")


def test_slurm_time_forms():
    from fairpod.cli.shell_cmds import slurm_time

    assert [slurm_time(x) for x in ("30", "30:00", "1:00:00", "2-12", "0:45")] == [1800, 1800, 3600, 216000, 45]
