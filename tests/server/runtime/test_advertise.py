"""``fairpod up --advertise-address``: the control plane also listens on an address other hosts can reach, and
replicas are given that address (never 127.0.0.1) to report to."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import Server, wait_for

from ... import httpclient

ADDR = "127.0.0.9"  # stands for the head's LAN address: a loopback address other than 127.0.0.1

REPORT = (
    "import os, pathlib; from fairpod import sdk; "
    "pathlib.Path(os.environ['OUT']).write_text(os.environ['FAIRPOD_API_URL']); "
    "assert sdk.report_progress(step=7, checkpoint='ckpt-7', strict=True)"
)


def _start(s: Server, *extra: str) -> None:
    args = [sys.executable, "-m", "fairpod.cli.main", "up", "--foreground", "--port", str(s.port), *extra]
    s.home.mkdir(parents=True, exist_ok=True)
    log = open(s.home.parent / "server.out", "ab")  # noqa: SIM115
    s.proc = subprocess.Popen(args, env=s.env, stdout=log, stderr=log, start_new_session=True)
    wait_for(s._healthy, 30, "the server to answer /healthz")
    s.token = __import__("json").loads(Path(s.env["FAIRPOD_CONFIG"]).read_text())["token"]


def test_replicas_report_to_the_advertised_address(tmp_path: Path) -> None:
    s = Server(tmp_path)
    out = tmp_path / "url.txt"
    _start(s, "--advertise-address", ADDR)
    try:
        assert httpclient.get(f"http://{ADDR}:{s.port}/healthz", timeout=5).status_code == 200
        assert httpclient.get(f"{s.url}/healthz", timeout=5).status_code == 200  # the CLI keeps using 127.0.0.1
        s.submit(name="rep", team="john", command=[sys.executable, "-c", REPORT], env={"OUT": str(out)})
        s.wait_state("rep", "Succeeded", timeout=60)
        assert out.read_text() == f"http://{ADDR}:{s.port}"
        job = s.job("rep")
        assert job["checkpoint"]["step"] == 7 and job["checkpoint"]["path"].endswith("ckpt-7")
    finally:
        s.kill(signal.SIGTERM)
        s.kill_replicas()


def test_without_it_replicas_get_loopback(tmp_path: Path) -> None:
    s = Server(tmp_path)
    out = tmp_path / "url.txt"
    _start(s)
    try:
        s.submit(name="rep", team="john", command=[sys.executable, "-c", REPORT], env={"OUT": str(out)})
        s.wait_state("rep", "Succeeded", timeout=60)
        assert out.read_text() == f"http://127.0.0.1:{s.port}"
        with pytest.raises(httpx.HTTPError):
            httpclient.get(f"http://{ADDR}:{s.port}/healthz", timeout=2)
    finally:
        s.kill(signal.SIGTERM)
        s.kill_replicas()


@pytest.mark.parametrize(("address", "why"), [("not-an-ip", "give an IP address"), ("0.0.0.0", "connect to"),
                                              ("192.0.2.1", "not an address of this machine")])
def test_a_bad_advertise_address_is_one_line(tmp_path: Path, address: str, why: str) -> None:
    s = Server(tmp_path)
    r = s.cli("up", "--port", str(s.port), "--advertise-address", address, check=False)
    assert r.returncode == 2
    assert why in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not (s.home / "server.pid").exists()


def test_listening_sockets_send_small_responses_at_once() -> None:
    """TCP_NODELAY on the listening sockets (connections inherit it): without it each response waited ~40 ms for
    a delayed ACK."""
    import socket

    from fairpod.server.runtime.daemon import _listen
    from tests.server.conftest import free_port

    socks = _listen(["127.0.0.1", ADDR], free_port())
    try:
        assert [s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in socks] == [1, 1]
    finally:
        for s in socks:
            s.close()
