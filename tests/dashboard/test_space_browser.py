"""Spaces end to end (docs/spaces.md): a real server, a real JupyterLab in a replica's sandbox, headless Chromium
through the space's proxy. One server for the module.

Two 1-accelerator nodes, one in each team's quota. smith's own node runs a job; alice (smith) creates a Jupyter
space with one accelerator: it borrows john's node. She opens it with a one-time link, runs a notebook cell that
writes a file, and john reclaims his node: the space is preempted, its tab shows why and that the files are kept;
once john's job ends the space starts again by itself with its files, in the same tab.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..server.conftest import Server, running, wait_for

SPEC = """
cluster:
  name: two
  instance_groups:
    - {name: g, instance_type: unit1, count: 2}
instance_types:
  - {name: unit1, accelerators: 1, vcpu: 2, memory_gib: 4}
teams:
  - {name: john, sharing: {strategy: LendAndBorrow, borrow_limit: 100}, quota: [{instance_type: unit1, count: 1}]}
  - {name: smith, sharing: {strategy: LendAndBorrow, borrow_limit: 100}, quota: [{instance_type: unit1, count: 1}]}
"""

pytestmark = pytest.mark.skipif(
    __import__("importlib").util.find_spec("jupyterlab") is None, reason="jupyterlab is not installed "
    "(pip install -e '.[test]')")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from running(tmp_path_factory.mktemp("spaces"), SPEC)


@pytest.fixture(scope="module")
def users(server: Server) -> dict[str, str]:
    out = {}
    for name, team in (("alice", "smith"), ("bob", "smith"), ("eve", "john")):
        out[name] = server.api("POST", "/users", json={"name": name, "role": "member", "teams": [team]}).json()["token"]
    return out


def space(server: Server, token: str) -> dict[str, Any]:
    return server.api("GET", "/spaces/nb", token=token).json()


def test_a_space_opens_runs_a_cell_is_preempted_with_a_notice_and_starts_again_with_its_files(
        server: Server, users: dict[str, str], browser_context: Any):
    alice = users["alice"]
    server.cli("start-job", "--name", "smith-busy", "--team", "smith", "--", "sleep", "600")
    server.wait_state("smith-busy", "Running")
    out = server.cli("space", "create", "nb", "--ide", "jupyter", "--team", "smith", "--accelerators", "1",
                     token=alice).stdout
    assert "space nb (jupyter, OwnerOnly, team smith)" in out
    s = wait_for(lambda: (s := space(server, alice))["state"] == "Running" and s["url"] and s, 60, "nb running")
    assert s["owner"] == "alice" and s["files"].endswith("/smith/space.nb")
    ide = httpx.Client(base_url=s["url"], headers={"Authorization": f"Bearer {alice}"}, timeout=20)
    wait_for(lambda: ide.get("api/status").status_code == 200, 90, "JupyterLab to answer through the proxy")
    listed = json.loads(server.cli("space", "list", "-o", "json", token=alice).stdout)["spaces"]
    assert [(x["name"], x["state"]) for x in listed] == [("nb", "Running")]

    # who else may come in: nobody (the API and the proxy)
    for who in ("bob", "eve"):
        r = server.api("POST", "/spaces/nb/links", token=users[who])
        assert r.status_code in (403, 404), r.text
        assert httpx.get(s["url"] + "api/status", headers={"Authorization": f"Bearer {users[who]}"}).status_code == 403
    assert httpx.get(s["url"] + "api/status", headers={"Authorization": f"Bearer {server.token}"}).status_code == 403
    assert httpx.get(s["url"] + "api/status").status_code == 401
    files = Path(s["files"])
    # port-forward: a local port that adds alice's token (HyperPod's 'hyp portforward hyp-space')
    fwd = subprocess.Popen([sys.executable, "-m", "fairpod.cli.main", "hyp", "portforward", "hyp-space", "--name",
                            "nb", "-n", "hyperpod-ns-smith", "--local-port", "0"],
                           env={**server.env, "FAIRPOD_TOKEN": alice}, stdout=subprocess.PIPE, text=True)
    try:
        local = (fwd.stdout.readline().split() or ["", "(nothing)"])[1]  # type: ignore[union-attr]
        assert local.startswith("http://127.0.0.1:") and local.endswith("/spaces/smith/nb/"), local
        assert httpx.get(local + "api/status", timeout=20).status_code == 200
    finally:
        fwd.terminate()
        fwd.wait(timeout=10)
    assert ide.put("api/contents/t.ipynb", json={"type": "notebook", "content": {
        "cells": [], "metadata": {"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}}).status_code in (200, 201)

    link = server.cli("space", "open", "nb", token=alice).stdout.strip()
    page = browser_context.new_page()
    page.goto(link)
    assert "/_fairpod/signin" not in page.url and "code=" not in page.url
    page.goto(s["url"] + "lab/tree/t.ipynb")
    cell = page.locator(".jp-Notebook .jp-Cell .cm-content").first
    cell.wait_for(timeout=90_000)
    dialog = page.locator(".jp-Dialog .jp-mod-accept")  # a first start may ask for the kernel: the default

    def kernel_idle() -> bool:
        """The notebook's kernel has started and is idle (its session, read through the proxy). A dialog that
        asks for the kernel, whenever it opens, is answered first: the session starts after it."""
        if dialog.count():
            dialog.first.click()
            return False
        return any(x["path"].endswith("t.ipynb") and (x.get("kernel") or {}).get("execution_state") == "idle"
                   for x in ide.get("api/sessions").json())

    wait_for(kernel_idle, 90, "the notebook's kernel to start and be idle")
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
    cell.click()
    # the cell looks for the server's admin token (by its hash) in its environment and tries fairpod's config and
    # database
    admin = hashlib.sha256(server.token.encode()).hexdigest()
    page.keyboard.type(f"import os, pathlib, hashlib; pathlib.Path('kept.txt').write_text('kept'); "
                       f"print('secrets:', [k for k, v in os.environ.items() if hashlib.sha256(v.encode())"
                       f".hexdigest() == '{admin}'], os.access('{server.env['FAIRPOD_CONFIG']}', os.R_OK), "
                       f"os.access('{server.home / 'fairpod.db'}', os.R_OK))")
    # the text is in the cell before it is run (typing that went elsewhere fails here, saying so)
    page.locator(".jp-Notebook .jp-Cell .cm-content", has_text="kept.txt").first.wait_for(timeout=30_000)
    page.keyboard.press("Shift+Enter")
    output = page.locator(".jp-OutputArea-output").first
    output.wait_for(timeout=60_000)
    assert "secrets: [] False False" in output.inner_text()  # the server's token, config and database: out of reach
    page.keyboard.press("Control+s")
    wait_for(lambda: "secrets:" in (files / "t.ipynb").read_text(), 20, "the notebook saved with its output")
    assert (files / "kept.txt").read_text() == "kept"

    # john reclaims his node: the space is preempted, its tab says why and that the files are kept
    server.cli("start-job", "--name", "john-reclaim", "--team", "john", "--", "sleep", "600")
    wait_for(lambda: (j := space(server, alice))["job_state"] == "Pending" and j["preemptions"] == 1, 60,
             "nb preempted")
    page.goto(s["url"] + "lab/tree/t.ipynb")
    notice = page.locator("#notice")
    notice.wait_for()
    text = notice.inner_text()
    assert "reclaimed by team john" in text and "files are kept" in text, text
    assert (files / "kept.txt").read_text() == "kept"

    # john's job ends: the space starts again by itself; the same tab opens it again, with its files
    server.cli("cancel-job", "john-reclaim")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=120_000)
    assert "secrets: [] False False" in page.locator(".jp-OutputArea-output").first.inner_text()
    assert space(server, alice)["state"] == "Running"
    ide.close()

    # stop keeps the files; start runs it again; delete removes them (HyperPod's forms for two of them)
    server.cli("hyp", "stop", "hyp-space", "--name", "nb", "-n", "hyperpod-ns-smith", token=alice)
    wait_for(lambda: space(server, alice)["state"] == "Stopped", 60, "nb stopped")
    assert (files / "kept.txt").exists()
    assert server.api("POST", "/spaces/nb/start", token=users["bob"]).status_code == 403  # not bob's
    server.cli("hyp", "start", "hyp-space", "--name", "nb", "-n", "hyperpod-ns-smith", token=alice)
    wait_for(lambda: space(server, alice)["state"] == "Running", 60, "nb running again")
    server.cli("space", "delete", "nb", token=alice)
    assert not files.exists() and server.api("GET", "/spaces/nb", token=alice).status_code == 404

    # a space nobody uses is stopped after its idle time, its files kept
    server.cli("hyp", "create", "hyp-space", "--name", "idle", "--display-name", "Idle", "--queue-name",
               "hyperpod-ns-smith-localqueue", "--app-type", "jupyterlab", "--idle-shutdown",
               "enabled=true,idleTimeoutInMinutes=0.05", token=alice)
    idle = wait_for(lambda: (s := server.api("GET", "/spaces/idle", token=alice).json())["state"] == "Stopped"
                    and s, 90, "the idle space stopped")
    assert Path(idle["files"]).is_dir()
    events = server.api("GET", f"/jobs/{idle['job_id']}/events").json()
    assert any(e["kind"] == "SpaceIdle" for e in events["events"]), events
