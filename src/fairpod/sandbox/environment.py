"""The environment and OS user a replica gets (the rest of its sandbox: :mod:`fairpod.sandbox`).

Jobs are other people's code. A replica gets:

- an **allow-listed environment**: ``PATH``, ``HOME``, ``USER``/``LOGNAME``/``SHELL``, ``LANG``/``LANGUAGE``/
  ``LC_*``, ``TZ``, ``TERM`` and ``TMPDIR`` of the process that supervises it, then the job's own ``env`` and the
  ``FAIRPOD_*`` variables of the job (:func:`fairpod.executors.base.replica_env`). Nothing else of the control
  plane's environment reaches it: no ``FAIRPOD_CONFIG``, ``FAIRPOD_HOME``, ``FAIRPOD_DB_URL``, cloud credentials
  or whatever else the server was started with.
- optionally **another OS user** (``cluster.run_as`` or ``teams[].run_as`` in the spec). When fairpod runs as
  root the supervisor starts the command as that user (its uid, primary gid and supplementary groups, ``HOME``,
  ``USER``, ``LOGNAME`` and ``SHELL`` from the password database) after handing it the job's checkpoint
  directory (mode 0700). The control plane's state (database, logs of other jobs, the CLI's config) is
  0600/0700 and owned by fairpod's user, so such a replica can read none of it. When fairpod does not run as
  root, a ``run_as`` other than its own user is refused with a clear reason instead of being ignored.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ALLOWED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def base_env(source: Mapping[str, str]) -> dict[str, str]:
    """The part of ``source`` (a supervisor's environment) that a replica inherits."""
    env = {k: v for k, v in source.items() if k in ALLOWED_ENV or k.startswith("LC_")}
    env.setdefault("PATH", DEFAULT_PATH)
    return env


@dataclass(frozen=True)
class RunAs:
    """An OS user a replica runs as."""

    name: str
    uid: int
    gid: int
    home: str
    shell: str

    @property
    def env(self) -> dict[str, str]:
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name, "SHELL": self.shell}

    def groups(self) -> list[int]:
        return os.getgrouplist(self.name, self.gid)


class RunAsError(RuntimeError):
    """A ``run_as`` that cannot be honoured; the message is the job's failure reason."""


def resolve(user: str | None) -> RunAs | None:
    """The user to switch to, or None to run as ourselves; raises :class:`RunAsError` when we cannot."""
    if not user:
        return None
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise RunAsError(f"run_as user {user!r} does not exist on node") from None
    if pw.pw_uid == os.geteuid():
        return None
    if os.geteuid() != 0:
        me = pwd.getpwuid(os.geteuid()).pw_name
        raise RunAsError(f"cannot run as {user!r}: fairpod runs as {me!r}, not root")
    return RunAs(pw.pw_name, pw.pw_uid, pw.pw_gid, pw.pw_dir or "/", pw.pw_shell or "/bin/sh")


def hand_over(checkpoint_dir: Path, user: RunAs, levels: int = 3) -> None:
    """Make ``checkpoint_dir`` the user's own (0700) and let the user traverse (not list) its parents.

    The ``levels`` parents fairpod owns (``<team>/``, ``checkpoints/``, fairpod's home) get the search bit for
    others and nothing more: every file in them stays 0600/0700, so the user reaches its own directory and
    reads nothing else. Ancestors above those are not changed; if one of them shuts the user out,
    :class:`RunAsError` says which.
    """
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    os.chown(checkpoint_dir, user.uid, user.gid)
    os.chmod(checkpoint_dir, 0o700)
    for i, parent in enumerate(checkpoint_dir.parents):
        mode = parent.stat().st_mode
        if mode & stat.S_IXOTH:
            continue
        if i < levels:
            os.chmod(parent, stat.S_IMODE(mode) | stat.S_IXOTH)
        else:
            raise RunAsError(
                f"run_as user {user.name!r} cannot reach {checkpoint_dir}: {parent} is not searchable by "
                f"other users (put FAIRPOD_HOME somewhere they can traverse, e.g. /var/lib/fairpod)"
            )
