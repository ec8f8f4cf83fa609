"""``fairpod up`` where the port is taken: one line, non-zero, nothing written; ``down``/``status`` never act on
another home's server; the CLI config honours XDG_CONFIG_HOME."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from fairpod.server.runtime import daemon

from ..conftest import Server


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fairpod.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=60)


def test_up_on_a_taken_port_fails_and_writes_nothing(tmp_path: Path):
    # the first server: its own home, and (like a user's) the config under HOME/.config
    xdg_home = tmp_path / "user"
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    a = Server(tmp_path / "a")
    a.env.pop("FAIRPOD_CONFIG")
    a.env.update(HOME=str(xdg_home), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    try:
        r = _cli(a.env, "up", "--port", str(a.port))
        assert r.returncode == 0, r.stderr
        cfg_path = tmp_path / "xdg" / "fairpod" / "config.json"  # XDG_CONFIG_HOME, not ~/.config
        assert cfg_path.exists() and not (xdg_home / ".config").exists()
        cfg_before = cfg_path.read_text()
        # a second home, the same user, the same port
        b_env = {**a.env, "FAIRPOD_HOME": str(tmp_path / "b-home")}
        r = _cli(b_env, "up", "--port", str(a.port))
        assert r.returncode == 1, r.stdout + r.stderr
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
        assert f"cannot listen on 127.0.0.1:{a.port}" in r.stderr and "fairpod is up" not in r.stdout
        assert cfg_path.read_text() == cfg_before  # the running server's admin token is not lost
        assert not (tmp_path / "b-home").exists()  # nothing written for the home that did not start
        # status and down of the second home do not touch the first home's server
        r = _cli(b_env, "status")
        assert r.returncode != 0 and "not of this FAIRPOD_HOME" in r.stderr, r.stdout + r.stderr
        r = _cli(b_env, "down")
        assert "not running" in r.stdout
        os.kill(int((a.home / "server.pid").read_text().split()[0]), 0)  # still alive
        assert _cli(a.env, "status").returncode == 0
        # a second home that does start (another port) keeps the first one's config and token
        b = Server(tmp_path / "b")
        b_env2 = {**b.env, "HOME": str(xdg_home), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
        b_env2.pop("FAIRPOD_CONFIG")
        r = _cli(b_env2, "up", "--port", str(b.port))
        try:
            assert r.returncode == 0, r.stderr
            assert cfg_path.read_text() == cfg_before
            own = b.home / "cli-config.json"
            assert f"FAIRPOD_CONFIG={own}" in r.stdout
            assert json.loads(own.read_text())["url"] == b.url
            assert _cli({**b_env2, "FAIRPOD_CONFIG": str(own)}, "status").returncode == 0
        finally:
            _cli(b_env2, "down")
    finally:  # also when the first up failed or timed out: the server it started in the background is stopped
        _cli(a.env, "down")
        left = daemon.read_pid(a.home)  # only while that very process runs (its start time): a PID may be reused
        if left is not None:
            os.kill(left[0], signal.SIGKILL)


def test_the_fixture_draws_another_port_when_its_first_is_taken(tmp_path: Path):
    """Another test may listen on the port this one drew between the draw and the bind (seen in CI): the first
    start draws again instead of failing."""
    import socket

    from ...ports import _ephemeral

    s = Server(tmp_path)
    lo, hi = _ephemeral()
    assert not lo <= s.port <= hi  # never from the range outgoing connections take their ports from
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", s.port))
        other.listen()
        taken = s.port
        try:
            s.start()
            assert s.port != taken and s.url.endswith(f":{s.port}")
            assert s.api("GET", "/jobs").status_code == 200
        finally:
            s.kill()


def test_up_with_a_database_it_cannot_reach_says_so_in_one_line(tmp_path: Path):
    from ...ports import free_port

    s = Server(tmp_path)
    db = f"postgresql+psycopg://fairpod:s3cret@127.0.0.1:{free_port()}/fairpod"  # nothing listens there
    r = _cli(s.env, "up", "--foreground", "--port", str(s.port), "--db", db)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("fairpod: error: cannot reach the database postgresql+psycopg://fairpod:***@")
    assert "s3cret" not in r.stderr + r.stdout
