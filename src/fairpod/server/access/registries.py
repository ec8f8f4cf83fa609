"""Container registry credentials per team: ``POST /teams/{team}/registry-logins`` (a member of the team, or an
admin) keeps them in ``$FAIRPOD_HOME/registries/<team>.json`` (podman's ``auth.json`` format, mode 0600 in a 0700
directory, owned by fairpod's user). The team's image jobs pull with that file (``podman pull --authfile``, run by
the replica supervisor, fairpod.sandbox.container); it is never mounted into a container, never in another team's
launch, and no route returns its secrets (the list gives registry and user names only)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from fairpod.server.access.auth import Auth, require_team
from fairpod.server.core.api import Core
from fairpod.server.errors import Problem


class Login(BaseModel):
    registry: str = Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9.-]+(:[0-9]+)?(/[^\s]*)?$")
    username: str = Field(min_length=1, max_length=256)
    password: str = Field(min_length=1, max_length=16384)


def auth_file(home: Path, team: str) -> Path:
    return home / "registries" / f"{team}.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"auths": {}}
    return data if isinstance(data.get("auths"), dict) else {"auths": {}}


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _names(data: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    for reg, v in sorted(data["auths"].items()):
        user = base64.b64decode(v.get("auth", "")).decode(errors="replace").split(":", 1)[0]
        out.append({"registry": reg, "username": user})
    return out


def add_routes(api: APIRouter, cp: Core) -> None:
    def team_of(team: str, p: Any) -> Path:
        if cp.spec.team(team) is None:
            raise Problem(404, "no such team", f"no team {team!r}")
        require_team(p, team)
        return auth_file(cp.home, team)

    @api.post("/teams/{team}/registry-logins", status_code=201, tags=["teams"])
    def registry_login(team: str, body: Login, p: Auth) -> dict[str, Any]:
        """Keep a registry login for the team's image jobs; the answer never holds the password."""
        path = team_of(team, p)
        data = _read(path)
        token = base64.b64encode(f"{body.username}:{body.password}".encode()).decode()
        data["auths"][body.registry] = {"auth": token}
        _write(path, data)
        cp.audit(p.name, "registry.login", team, {"registry": body.registry, "username": body.username})
        return {"team": team, "registry": body.registry, "username": body.username}

    @api.get("/teams/{team}/registry-logins", tags=["teams"])
    def registry_logins(team: str, p: Auth) -> dict[str, Any]:
        """The team's registry logins: registry and user names only."""
        return {"team": team, "logins": _names(_read(team_of(team, p)))}

    @api.delete("/teams/{team}/registry-logins/{registry:path}", tags=["teams"])
    def registry_logout(team: str, registry: str, p: Auth) -> dict[str, Any]:
        path = team_of(team, p)
        data = _read(path)
        if data["auths"].pop(registry, None) is None:
            raise Problem(404, "no such login", f"team {team} has no login for {registry}")
        _write(path, data)
        cp.audit(p.name, "registry.logout", team, {"registry": registry})
        return {"team": team, "registry": registry, "removed": True}
