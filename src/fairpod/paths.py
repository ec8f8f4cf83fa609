"""Where fairpod keeps its files, for the server and the CLI alike.

- ``$FAIRPOD_HOME`` (default ``~/.local/share/fairpod``): the control plane's state: ``fairpod.db`` (SQLite,
  WAL), ``server.pid``, ``server.log``, ``runs/`` (replica state and logs), ``checkpoints/``;
- ``$FAIRPOD_CONFIG`` (default ``$XDG_CONFIG_HOME/fairpod/config.json``, ``~/.config/fairpod/config.json``
  without ``XDG_CONFIG_HOME``): the CLI's server URL and token (mode 0600);
- ``$FAIRPOD_DB_URL``: a database URL instead of the SQLite file under the home;
- ``$FAIRPOD_RUNS_DIR``: the runs directory instead of ``runs/`` under the home (docs/ha.md).
"""

from __future__ import annotations

import os
from pathlib import Path


def fairpod_home() -> Path:
    return Path(os.environ.get("FAIRPOD_HOME") or Path.home() / ".local/share/fairpod").absolute()


def config_path() -> Path:
    explicit = os.environ.get("FAIRPOD_CONFIG")
    if explicit:
        return Path(explicit).absolute()
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    # the XDG base directory spec: a relative XDG_CONFIG_HOME is invalid and ignored
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return (root / "fairpod" / "config.json").absolute()


def db_url(home: Path, url: str | None = None) -> str:
    """``url``, else ``$FAIRPOD_DB_URL``, else the SQLite file ``fairpod.db`` under ``home``."""
    return url or os.environ.get("FAIRPOD_DB_URL") or f"sqlite:///{home / 'fairpod.db'}"


def runs_dir(home: Path) -> Path:
    """``$FAIRPOD_RUNS_DIR``, else ``home/runs``: where the local executor keeps replicas' state and logs
    (standby control planes on one machine share it, so that the leader of the day re-attaches to them)."""
    shared = os.environ.get("FAIRPOD_RUNS_DIR")
    return Path(shared).absolute() if shared else home / "runs"
