"""The CLI config that ``fairpod up`` writes (``$FAIRPOD_CONFIG``, else ``$XDG_CONFIG_HOME/fairpod/config.json``):
the server's URL, the admin token and the home of the server it belongs to. A config is never overwritten for
another home's server, whose token it holds."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fairpod.paths import config_path


def write_config(url: str, token: str, home: Path | None = None) -> Path:
    """The CLI config: the server's URL, the admin token and the home of the server it belongs to (``fairpod
    status`` and ``fairpod down`` use it to tell this home's server from another one)."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    doc = {"url": url, "token": token, **({"home": str(home)} if home is not None else {})}
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1)
    os.chmod(path, 0o600)
    return path


def config_home(path: Path) -> str | None:
    """The home recorded in the CLI config at ``path`` (None: no config, or one without a home)."""
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    home = cfg.get("home") if isinstance(cfg, dict) else None
    return str(home) if home else None


def write_own_config(url: str, token: str, home: Path) -> Path:
    """The CLI config for a new admin token; when the config there belongs to another home's server (whose
    token it holds), this one goes to ``$FAIRPOD_HOME/cli-config.json`` instead, to use with FAIRPOD_CONFIG."""
    other = config_home(config_path())
    if other is None or other == str(home):
        return write_config(url, token, home)
    path = home / "cli-config.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"url": url, "token": token, "home": str(home)}, f, indent=1)
    print(f"{config_path()} belongs to the fairpod of {other} and is left as it is; "
          f"use this server with FAIRPOD_CONFIG={path}")
    return path


def update_config_url(url: str, home: Path) -> None:
    """Point the CLI config at this server, unless the config belongs to another home's server (then its
    token is of no use here and must not be lost)."""
    path = config_path()
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(cfg, dict) or cfg.get("home", str(home)) != str(home):
        return
    if cfg.get("url") != url or "home" not in cfg:
        write_config(url, cfg.get("token", ""), home)
