"""Per-team OS users (fairpod.sandbox.users) as the replicas of a job make them: at the same moment, one per
replica supervisor. As root, with the real ``useradd``."""

from __future__ import annotations

import multiprocessing
import os
import pwd
import shutil
import subprocess
import uuid

import pytest

from fairpod.sandbox import users


def _uid(team: str) -> int:
    return users.team_user(team).uid


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"), reason="needs root and useradd")
def test_the_replicas_of_a_job_starting_at_once_run_as_one_user():
    """Six supervisors ask for a new team's user at once: all get the one user ``useradd`` left. Fails without the
    lock around the creation: two ``useradd`` of one name at the same moment each wrote an entry, and the replicas
    ran under two uids (seen on the demo cluster: one replica's ``whoami`` found no name for its uid)."""
    team = f"race{uuid.uuid4().hex[:8]}"
    name = users.user_name(team)
    try:
        # forked from a fork server, a process of one thread: a fork of this one (the suite's worker, whose earlier
        # tests may have left threads) once copied a lock another thread held, and a pool process hung for good
        with multiprocessing.get_context("forkserver").Pool(6) as pool:
            got = pool.map(_uid, [team] * 6)
        entries = [ln for ln in open("/etc/passwd").read().splitlines() if ln.split(":")[0] == name]
        assert len(entries) == 1, entries
        assert set(got) == {pwd.getpwnam(name).pw_uid}, got
    finally:
        for _ in range(3):  # every entry of the name, if the race left two
            if subprocess.run(["userdel", name], capture_output=True, check=False).returncode != 0:
                break
