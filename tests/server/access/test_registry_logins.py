"""Registry logins per team on a live server: a member keeps one for the team (fairpod registry login), no answer
and no listing ever holds the password, another team's member cannot touch it, the team's image jobs get the
login file for their pulls and other teams' jobs do not, and no container (not even the team's) can read it."""

from __future__ import annotations

import json
import stat
import subprocess
import sys

from tests.sandbox import images

from ..conftest import Server

SECRET = "s3cret-registry-token"


def login(server: Server, token: str, team: str) -> subprocess.CompletedProcess:
    env = {**server.env, "FAIRPOD_TOKEN": token}
    return subprocess.run([sys.executable, "-m", "fairpod.cli.main", "registry", "login", "reg.example:5000",
                           "--team", team, "-u", "alice", "--password-stdin"], env=env, input=SECRET + "\n",
                          capture_output=True, text=True, timeout=60)


def user(server: Server, name: str, team: str) -> str:
    r = server.api("POST", "/users", json={"name": name, "role": "member", "teams": [team]})
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


def test_a_teams_registry_login_reaches_only_its_own_pulls(server: Server) -> None:
    image = images.busybox()
    alice, bob = user(server, "alice", "john"), user(server, "bob", "smith")
    r = login(server, alice, "john")
    assert r.returncode == 0 and "login for reg.example:5000 kept (user alice)" in r.stdout, r.stderr
    path = server.home / "registries" / "john.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert "reg.example:5000" in json.loads(path.read_text())["auths"]
    r = login(server, bob, "john")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "cannot act for team john" in r.stderr
    listed = server.cli("registry", "list", "--team", "john", "-o", "json", token=alice).stdout
    assert json.loads(listed) == [{"registry": "reg.example:5000", "username": "alice"}]
    assert SECRET not in listed and SECRET not in server.api("GET", "/teams/john/registry-logins").text

    probe = ["sh", "-c", f"cat {path} 2>&1; ls {path.parent} 2>&1; echo probe-done"]
    for team in ("john", "smith"):
        server.submit(name=f"peek-{team}", team=team, image=image, image_pull_policy="IfNotPresent", command=probe)
    for team, token in (("john", alice), ("smith", bob)):
        job = server.wait_state(f"peek-{team}", "Succeeded", 120)
        out = server.api("GET", f"/jobs/{job['id']}/logs", token).text
        assert "probe-done" in out and SECRET not in out and "reg.example" not in out, out
        launch = json.loads((server.home / "runs" / f"peek-{team}-{job['id']}" / "0" / "0" / "launch.json").read_text())
        assert launch["container"]["auth_file"] == (str(path) if team == "john" else None)
    r = server.cli("registry", "logout", "reg.example:5000", "--team", "john", token=alice)
    assert "removed" in r.stdout
    assert json.loads(path.read_text())["auths"] == {}
