"""Docs that run: every fenced block of README.md and docs/*.md whose info string is ``sh runnable`` is run, line by
line (a line ending in ``\\`` goes on), against one fresh server (the seed cluster) shared by all of them, from a
directory of its own where the repository's ``examples`` are at hand; each command must exit 0. ``fairpod`` is this
checkout's CLI. A block is marked so only where its commands are quick and need nothing beyond this machine."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .server.conftest import Server, running

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```sh runnable\n(.*?)^```$", re.M | re.S)


def commands(text: str) -> list[str]:
    out: list[str] = []
    for block in BLOCK.findall(text):
        cmd = ""
        for line in block.splitlines():
            cmd += line[:-1] + " " if line.endswith("\\") else line
            if not line.endswith("\\"):
                if cmd.strip() and not cmd.lstrip().startswith("#"):
                    out.append(cmd.strip())
                cmd = ""
    return out


BLOCKS = [(f"{d.relative_to(ROOT)}: {c}", c) for d in DOCS for c in commands(d.read_text())]

# one worker runs them all, in order, against its one server: a tour's later commands need its earlier ones (get-job
# a job that start-job submitted); spread over pytest-xdist's workers, each worker's server had only its share
pytestmark = pytest.mark.xdist_group("docs_run")


def test_some_blocks_are_marked():
    assert len(BLOCKS) >= 5, BLOCKS
    assert commands("```sh runnable\nfairpod a \\\n  --b # c\n# only a comment\n```\n") == ["fairpod a    --b # c"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    tmp = tmp_path_factory.mktemp("docs")
    here = tmp / "cwd"
    here.mkdir()
    (here / "examples").symlink_to(ROOT / "examples")
    bindir = tmp / "bin"
    bindir.mkdir()
    (bindir / "fairpod").write_text(f'#!/bin/sh\nexec {sys.executable} -m fairpod.cli.main "$@"\n')
    (bindir / "fairpod").chmod(0o755)
    for s in running(tmp):
        s.env["PATH"] = f"{bindir}:{s.env.get('PATH', '/usr/bin:/bin')}"
        yield s, here


@pytest.mark.parametrize("cmd", [c for _, c in BLOCKS], ids=[i for i, _ in BLOCKS])
def test_the_command_runs(server: tuple[Server, Path], cmd: str) -> None:
    s, here = server
    r = subprocess.run(["bash", "-c", cmd], cwd=here, env=s.env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{cmd}\nexit {r.returncode}\n{r.stderr}{r.stdout}"
