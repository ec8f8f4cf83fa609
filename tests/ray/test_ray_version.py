"""The Ray version fairpod needs: declared in pyproject.toml and checked when the executor connects."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

import ray
from fairpod.executors.base import ExecutorError
from fairpod.executors.ray import MIN_RAY_VERSION, check_version
from fairpod.executors.ray.connection import parse_version

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_asks_for_the_ray_version_the_code_checks() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["ray"]
    need = ".".join(map(str, MIN_RAY_VERSION))
    # the extra asks for Ray with its serve extra (a KubeRay RayService's Ray Serve): ray[serve]>=X
    assert any(re.fullmatch(rf"ray(\[[a-z,-]+\])?>={re.escape(need)}", req) for req in extras), extras


def test_the_installed_ray_passes_the_check() -> None:
    assert parse_version(ray.__version__) >= MIN_RAY_VERSION
    check_version(ray)


@pytest.mark.parametrize("version", ["2.9.3", "2.49.1", "2.4", "", "unknown"])
def test_an_older_ray_is_refused_with_one_line(version: str) -> None:
    # a stand-in module object (a fake, labelled as such): the real placement_group, an older version string
    fake_ray = SimpleNamespace(__version__=version, util=ray.util)
    with pytest.raises(ExecutorError) as e:
        check_version(fake_ray)
    msg = str(e.value)
    need = ".".join(map(str, MIN_RAY_VERSION))
    assert "\n" not in msg and "too old for fairpod" in msg and f"Ray >= {need}" in msg


@pytest.mark.parametrize(("text", "parsed"), [("2.60.0", (2, 60, 0)), ("3.0.0.dev0", (3, 0, 0)),
                                              ("2.9.3rc1", (2, 9, 3)), ("2.50+local", (2, 50)), ("x", ())])
def test_parse_version(text: str, parsed: tuple[int, ...]) -> None:
    assert parse_version(text) == parsed
