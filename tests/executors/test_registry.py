"""The executor registry: one list of executors that the spec, ``fairpod up`` and the composition root read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fairpod.executors import registry
from fairpod.executors.base import ExecutorError, JobLaunch, ReplicaLaunch
from fairpod.executors.timed import TimedExecutor
from fairpod.model.spec import ExecutorInfo
from fairpod.server.runtime.wiring import make_executor


def test_every_registered_executor_is_offered_by_fairpod_up() -> None:
    out = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "up", "--help"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    flat = " ".join(out.stdout.split())
    for kind in registry.KINDS.values():
        assert f"'{kind.name}'" in flat, kind.name
    assert "{" + ",".join(registry.names()) + "}" in flat


def test_the_spec_names_only_executors_a_spec_may_name() -> None:
    assert registry.names(in_spec=True) == ["local", "ray"]
    for name in registry.names(in_spec=True):
        assert ExecutorInfo(kind=name).kind == name
    with pytest.raises(ValueError, match="Input should be 'local' or 'ray'"):
        ExecutorInfo(kind="timed")  # benchmarks only: the command line's


def test_the_timed_executor_is_built_through_the_registry(tmp_path: Path) -> None:
    ex = make_executor(tmp_path, "timed")
    try:
        assert isinstance(ex, TimedExecutor) and ex.name == "timed"
    finally:
        ex.close()
    with pytest.raises(ValueError, match=r"unknown executor 'nope' \(local, ray, timed\)"):
        make_executor(tmp_path, "nope")


def test_a_registered_executor_is_found_by_its_name(tmp_path: Path) -> None:
    made: list[Path] = []
    kind = registry.ExecutorKind("probe", "a test's own", lambda root, **o: made.append(root) or "built",
                                 in_spec=False)
    registry.register(kind)
    try:
        assert make_executor(tmp_path, "probe") == "built" and made == [tmp_path / "runs"]
        assert "probe" in registry.names() and "probe" not in registry.names(in_spec=True)
    finally:
        del registry.KINDS["probe"]


def test_ray_nodes_carry_the_label_the_registry_names() -> None:
    from fairpod.executors.ray.nodes import NODE_ID, RayNode

    assert registry.get("ray").node_label == NODE_ID == registry.node_labels()[0]
    row = RayNode(name="n1", node_id="abc", address="10.0.0.1", alive=True, instance_type="x", gpus=1)
    assert row.group == "ray" and row.store_labels == {NODE_ID: "abc", "ray_address": "10.0.0.1"}


def _launch(**kw: object) -> JobLaunch:
    base: dict[str, object] = {"job": "j-1", "team": "t", "attempt": 0, "command": ["true"], "checkpoint_dir": "/x",
                               "replicas": (ReplicaLaunch(rank=0, node="a"), ReplicaLaunch(rank=1, node="a"))}
    return JobLaunch(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(("kw", "opts", "msg"), [
    ({"job": "../x"}, {}, "invalid job name"),
    ({"job": "a:b"}, {}, "invalid job name"),
    ({"attempt": -1}, {}, "invalid attempt -1"),
    ({"command": []}, {}, "has no command"),
    ({"replicas": (ReplicaLaunch(rank=1, node="a"),)}, {}, "replica ranks must be 0..n-1"),
    ({}, {"one_per_node": True}, "one replica per node"),
    ({"grace_seconds": -1.0}, {}, "negative grace period"),
    ({"workdir": "/no/such/dir"}, {"workdir_here": True}, "workdir /no/such/dir does not exist"),
])
def test_one_validate_refuses_a_bad_launch_in_one_line(kw: dict[str, object], opts: dict[str, object],
                                                      msg: str) -> None:
    with pytest.raises(ExecutorError, match=msg):
        _launch(**kw).validate(**opts)  # type: ignore[arg-type]


def test_a_good_launch_passes_validate() -> None:
    _launch().validate()
    _launch(workdir="/no/such/dir").validate()  # the workdir is checked where the replicas run



def test_each_executor_option_is_a_flag_of_fairpod_up_and_a_field_of_the_spec() -> None:
    """An executor's options are declared in its registry entry: fairpod up offers each as a flag (from the
    entry, not a list of its own) and the spec's cluster.executor has each as a field with the same default."""
    from fairpod.cli.main import build_parser

    up = build_parser("up")._subparsers._group_actions[0].choices["up"]  # type: ignore[union-attr]
    flags = {s for a in up._actions for s in a.option_strings}
    for _, o in registry.options():
        assert o.flag in flags, o.flag
        assert ExecutorInfo.model_fields[o.name].default == o.default, o.name
    probe = registry.ExecutorKind("probe", "a test's own", lambda root, **o: o, in_spec=False,
                                  options=(registry.ExecutorOption("probe_depth", "3", "N", "how deep"),))
    registry.register(probe)
    try:
        up = build_parser("up")._subparsers._group_actions[0].choices["up"]  # type: ignore[union-attr]
        assert "--probe-depth" in {s for a in up._actions for s in a.option_strings}
        assert make_executor(Path("/nonexistent"), "probe", {"probe_depth": "5"}) == {"probe_depth": "5",
                                                                                        "exclusive": True}
        assert make_executor(Path("/nonexistent"), "probe")["probe_depth"] == "3"  # the entry's default
    finally:
        del registry.KINDS["probe"]


def test_the_sandbox_names_no_executor() -> None:
    """fairpod.sandbox sits below every executor: it is told whose nodes are elsewhere, it names none itself."""
    text = (Path(__file__).resolve().parents[2] / "src/fairpod/sandbox/capabilities.py").read_text()
    assert '"local"' not in text and "ray" not in text.lower().replace("array", "")
    from fairpod.sandbox import capabilities

    assert capabilities.required_gap("required", registry.elsewhere("ray")) == (
        "cluster.isolation: required: the ray executor's nodes are not checked for isolation in this version")
    assert registry.elsewhere("local") is None and registry.elsewhere("timed") is not None
