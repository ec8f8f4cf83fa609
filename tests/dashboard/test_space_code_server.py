"""A code-server space end to end (docs/spaces.md): a real server, a real code-server (installed from the npm
registry by scripts/install-code-server.sh) in a replica's sandbox, headless Chromium through the space's proxy.

alice (smith) creates a code-server space. She opens it with a one-time link: VS Code's workbench loads through
fairpod's proxy with no password prompt (the proxy sends code-server's session cookie for her), its explorer lists
the space's files over the IDE's WebSocket, and a cookie she sends herself never reaches code-server. Stopped and
started again, the space keeps its address and its files.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..server.conftest import Server, running, wait_for

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / ".venv" / "code-server" / "node_modules" / ".bin"

SPEC = """
cluster:
  name: one
  instance_groups:
    - {name: g, instance_type: cpu4, count: 1}
instance_types:
  - {name: cpu4, accelerators: 0, vcpu: 4, memory_gib: 8}
teams:
  - {name: smith, quota: [{instance_type: cpu4, count: 1}]}
"""

pytestmark = pytest.mark.skipif(not (BIN / "code-server").exists(), reason=f"code-server is not installed at {BIN} "
                                "(bash scripts/install-code-server.sh; scripts/test.sh runs it)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    def path(s: Server) -> None:  # the node finds code-server on its PATH (docs/spaces.md)
        s.env["PATH"] = f"{BIN}{os.pathsep}{s.env.get('PATH', '/usr/local/bin:/usr/bin:/bin')}"

    yield from running(tmp_path_factory.mktemp("code-server"), SPEC, before_start=path)


def space(server: Server, token: str) -> dict[str, Any]:
    return server.api("GET", "/spaces/ed", token=token).json()


def answers(ide: httpx.Client) -> bool:
    """code-server answers through the proxy (a connection the proxy closes while the IDE starts is a no)."""
    try:
        return ide.get("healthz").status_code == 200
    except httpx.TransportError:
        return False


def test_a_code_server_space_opens_in_the_browser_without_a_password_and_keeps_its_files(
        server: Server, browser_context: Any):
    alice = server.api("POST", "/users", json={"name": "alice", "role": "member", "teams": ["smith"]}).json()["token"]
    out = server.cli("space", "create", "ed", "--ide", "code-server", "--team", "smith", token=alice).stdout
    assert "space ed (code-server, OwnerOnly, team smith)" in out
    s = wait_for(lambda: (s := space(server, alice))["state"] == "Running" and s["url"] and s, 60, "ed running")
    files = Path(s["files"])
    (files / "hello.py").write_text("print('hello from fairpod')\n")
    (files / "hello.py").chmod(0o644)
    ide = httpx.Client(base_url=s["url"], headers={"Authorization": f"Bearer {alice}"}, timeout=20)
    wait_for(lambda: answers(ide), 90, "code-server to answer through the proxy")
    # the workbench, not code-server's login page: the proxy signed alice in; a session cookie of her own making
    # is dropped, not passed on (code-server sees only the one the proxy adds)
    for cookie in ("", "code-server-session=made-up"):
        r = ide.get("", headers={"Cookie": cookie} if cookie else {})
        while r.is_redirect:  # code-server adds the folder it opens: ./?folder=...; a sign-in would be ./login
            assert "login" not in r.headers["location"], r.headers["location"]
            r = ide.get(str(r.url.join(r.headers["location"])), headers={"Cookie": cookie} if cookie else {})
        assert r.status_code == 200 and "workbench" in r.text, (r.status_code, r.url)
    assert httpx.get(s["url"]).status_code == 401  # nobody signed in: the proxy's page, not the IDE

    link = server.cli("space", "open", "ed", token=alice).stdout.strip()
    page = browser_context.new_page()
    page.goto(link)
    assert "/_fairpod/signin" not in page.url and "code=" not in page.url
    page.goto(s["url"])
    page.locator(".monaco-workbench").wait_for(timeout=90_000)
    # the explorer lists the folder over the IDE's WebSocket (the remote file system), through the proxy
    page.locator(".explorer-folders-view .monaco-list-row", has_text="hello.py").first.wait_for(timeout=90_000)
    assert "login" not in page.url

    # stop keeps the files; start runs it again and the same page shows them
    server.cli("space", "stop", "ed", token=alice)
    wait_for(lambda: space(server, alice)["state"] == "Stopped", 60, "ed stopped")
    assert (files / "hello.py").exists()
    server.cli("space", "start", "ed", token=alice)
    wait_for(lambda: space(server, alice)["state"] == "Running", 60, "ed running again")
    # started again, the space is a new job with the address it had: its tab, its link and its session still work
    url = wait_for(lambda: space(server, alice)["url"], 30, "ed's address again")
    assert url == s["url"]
    wait_for(lambda: answers(ide), 90, "code-server to answer again")
    page.goto(s["url"])
    page.locator(".explorer-folders-view .monaco-list-row", has_text="hello.py").first.wait_for(timeout=90_000)
    ide.close()
    server.cli("space", "delete", "ed", token=alice)
    assert not files.exists()
