"""Per-team OS users: when fairpod runs as root and the spec gives a team no ``run_as``, its replicas run as
``fairpod-<team>``, an unprivileged system user (no home, no login shell) created on first use with ``useradd``.

The name is ``fairpod-`` and the team's name, cut to 32 characters (the limit of user names) and made of the
characters a user name may hold; two teams whose names differ only beyond that share a user (documented in
docs/isolation.md). A replica run so gets ``HOME=/tmp`` (its private /tmp) and the user's name in ``USER`` and
``LOGNAME``.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import re
import subprocess

from fairpod.sandbox.environment import RunAs, RunAsError

PREFIX = "fairpod-"
MAX_NAME = 32
# held while a user is looked up again and created: the replicas of a job start at once, and two ``useradd`` of one
# name at the same moment each wrote an entry (replicas of one team ran under two uids)
LOCK = "/run/lock/fairpod-users.lock" if os.path.isdir("/run/lock") else "/tmp/fairpod-users.lock"


def user_name(team: str) -> str:
    clean = re.sub(r"[^a-z0-9_-]", "-", team.lower())
    return (PREFIX + clean)[:MAX_NAME].rstrip("-")


def team_user(team: str) -> RunAs:
    """The team's user, created when missing; raises :class:`RunAsError` when it cannot be had."""
    name = user_name(team)
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        pw = _create(name, team)
    return RunAs(pw.pw_name, pw.pw_uid, pw.pw_gid, "/tmp", "/bin/sh")


def _create(name: str, team: str) -> pwd.struct_passwd:
    """``useradd`` of ``name``, one at a time on this machine (:data:`LOCK`), unless another made it meanwhile."""
    try:
        lock = open(LOCK, "a")  # noqa: SIM115 - closed below, which releases the lock
    except OSError as e:
        raise RunAsError(f"cannot create user {name} for team {team}: cannot open {LOCK}: {e.strerror}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return pwd.getpwnam(name)  # another supervisor made it while this one waited
        except KeyError:
            pass
        r = subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                            "--shell", "/usr/sbin/nologin", "--user-group", name],
                           capture_output=True, text=True, timeout=30)
        try:
            return pwd.getpwnam(name)
        except KeyError:
            why = (r.stderr or r.stdout).strip().splitlines()[-1:] or [f"exit {r.returncode}"]
            raise RunAsError(f"cannot create user {name} for team {team}: {why[0]}") from None
