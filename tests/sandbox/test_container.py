"""The ``podman run`` a replica in an image gets (fairpod.sandbox.container), read from the flags it builds: its
user, cgroup, limits, mounts, environment and GPUs (the GPU flags are checked here against a /dev made in a
temporary directory: no GPU is needed); the runtime choice; Kubernetes' pull-policy default and ``$(VAR)``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fairpod.executors.base import JobLaunch, ReplicaLaunch
from fairpod.sandbox import container
from fairpod.sandbox.container import Engine

from . import images
from .test_limits import exit_of

ENGINE = Engine("/usr/bin/podman", "4.3.1", "runc", "cgroup v1 controllers")


def spec(**over: object) -> dict:
    s = {"job": "train-3", "attempt": 1, "rank": 0, "team": "a", "command": ["torchrun", "$(RANK)", "$$(RANK)"],
         "limits": {"mcpu": 2500, "mib": 1024, "gpus": []},
         "env": {"FAIRPOD_CHECKPOINT_DIR": "/ck/a/train-3", "RANK": "0"},
         "container": {"image": "reg.example/t:1", "pull": None, "mounts": ["/data:/data:ro"], "workdir": "/w"}}
    s.update(over)
    return s


def test_the_run_flags_hold_the_replica_to_its_rules() -> None:
    env = {"PATH": "/usr/bin", "HOME": "/tmp", "RANK": "0", "PET_NODE_RANK": "$(RANK)",
           "FAIRPOD_CHECKPOINT_DIR": "/ck/a/train-3"}
    argv = container.run_argv(ENGINE, spec(), env, user=(990, 990), cgroup_parent="/fairpod/train-3.1.0", pids=64)
    line = " ".join(argv)
    assert argv[:4] == ["/usr/bin/podman", "--runtime", "runc", "--cgroup-manager"]
    for flag in ("--rm", "--network host", "--pull never", "--init", "--name fairpod-train-3.1.0",
                 "--cgroup-parent /fairpod/train-3.1.0", "--cpus 2.5", "--pids-limit 64", "--ulimit nproc=64:64",
                 "--volume /ck/a/train-3:/ck/a/train-3", "--volume /w:/w", "--workdir /w",
                 "--volume /data:/data:ro", "--env PET_NODE_RANK=0", "--env HOME=/tmp",
                 "--cap-drop ALL", "--security-opt no-new-privileges"):
        assert flag in line, flag
    # as root: a user namespace of the replica's user alone (its root is that user); else podman is rootless
    who = "--uidmap 0:990:1 --gidmap 0:990:1 --user 0:0" if os.geteuid() == 0 else "--user 990:990"
    assert who in line
    assert "PATH=/usr/bin" not in line  # the image's own PATH
    shm = container.run_argv(ENGINE, spec(container={"image": "i", "mounts": ["/dev/shm:/dev/shm"]}), env,
                             user=None, cgroup_parent=None, pids=None)
    assert "--shm-size 1024m" in " ".join(shm) and "/dev/shm:/dev/shm" not in shm  # its own, never the host's
    assert argv[-4:] == ["reg.example/t:1", "torchrun", "0", "$(RANK)"]
    assert "--device" not in line  # no GPU, no device


def test_a_submitters_container_keeps_its_groups_and_umask(monkeypatch: pytest.MonkeyPatch) -> None:
    """identity unix: the user's supplementary groups are mapped (gids 1, 2 inside) and held; its umask is set."""
    monkeypatch.setattr(container.os, "geteuid", lambda: 0)  # the flags of a root fairpod, whoever runs the test
    argv = " ".join(container.run_argv(ENGINE, spec(umask=0o027), {}, user=(1001, 1001, 1001, 2002, 3003),
                                       cgroup_parent=None, pids=None))
    assert ("--uidmap 0:1001:1 --gidmap 0:1001:1 --gidmap 1:2002:1 --gidmap 2:3003:1 --user 0:0 "
            "--group-add 1 --group-add 2 --umask 0027") in argv, argv
    plain = " ".join(container.run_argv(ENGINE, spec(), {}, user=(990, 990, 990), cgroup_parent=None, pids=None))
    assert "--gidmap 0:990:1 --user 0:0" in plain and "--group-add" not in plain and "--umask" not in plain


def test_gpu_flags_name_exactly_the_replicas_gpus(tmp_path: Path) -> None:
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    (tmp_path / "nvidia-caps").mkdir()
    (tmp_path / "nvidia-caps" / "nvidia-cap1").touch()
    flags = container.gpu_flags((1, 3), dev=tmp_path, cdi=False)
    assert flags == [f"--device={tmp_path}/nvidia1", f"--device={tmp_path}/nvidia3", f"--device={tmp_path}/nvidiactl",
                     f"--device={tmp_path}/nvidia-uvm", f"--device={tmp_path}/nvidia-caps/nvidia-cap1"]
    assert container.gpu_flags((2,), cdi=True) == ["--device=nvidia.com/gpu=2"]
    assert container.gpu_flags(()) == []
    assert container.gpu_flags((7,), dev=tmp_path, cdi=False) == []  # no such device file: none given


def test_the_run_flags_give_the_replicas_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl"):
        (tmp_path / name).touch()
    monkeypatch.setenv("FAIRPOD_DEV_SOURCE", str(tmp_path))
    argv = container.run_argv(ENGINE, spec(limits={"gpus": [2]}), {}, user=None, cgroup_parent=None, pids=None)
    want = container.gpu_flags((2,))
    assert [a for a in argv if a.startswith("--device")] == want
    assert want in ([f"--device={tmp_path}/nvidia2", f"--device={tmp_path}/nvidiactl"], ["--device=nvidia.com/gpu=2"])


@pytest.mark.parametrize(("have", "v1", "want"), [
    ({"runc": True, "crun": True}, True, "runc"),   # hybrid or v1: crun cannot set limits there
    ({"runc": True, "crun": True}, False, "crun"),
    ({"runc": False, "crun": True}, True, "crun"),
    ({"runc": True, "crun": False}, False, "runc"),
])
def test_the_runtime_is_runc_on_cgroup_v1_hosts(have: dict, v1: bool, want: str) -> None:
    got = container.choose_runtime(have, v1)
    assert got is not None and got[0] == want
    assert container.choose_runtime({"runc": False, "crun": False}, v1) is None


def test_kubernetes_defaults_and_variables() -> None:
    assert container.default_policy("reg/x") == "Always"
    assert container.default_policy("reg:5000/x:latest") == "Always"
    assert container.default_policy("reg:5000/x:1.2") == "IfNotPresent"
    assert container.default_policy("reg/x@sha256:abc") == "IfNotPresent"
    assert container.expand("$(A):$(B) $$(A) $(C)", {"A": "1", "B": "2"}) == "1:2 $(A) $(C)"


def test_two_fairpods_on_one_host_never_share_a_container_name() -> None:
    a, b = container.name_of(spec(), "/home/a/runs/train-3/1/0"), container.name_of(spec(), "/home/b/runs/train-3/1/0")
    assert a != b and a.startswith("fairpod-train-3.1.0-") and a == container.name_of(spec(), "/home/a/runs/train-3/1/0")


def launch(ex, tmp: Path, name: str, image: str, pull: str) -> None:  # type: ignore[no-untyped-def]
    ex.launch(JobLaunch(job=name, team="a", attempt=0, command=["true"], checkpoint_dir=str(tmp / "ck" / name),
                        container={"image": image, "pull": pull, "mounts": [], "workdir": None},
                        replicas=(ReplicaLaunch(rank=0, node="n0", mcpu=1000, mib=256),)))


def test_a_missing_image_fails_the_replica_with_the_registrys_answer(ex, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    images.engine()
    launch(ex, tmp_path, "gone", "127.0.0.1:9/fairpod-test/none:1", "IfNotPresent")  # a closed local port
    e = exit_of(ex, "gone", [], 120.0)
    assert e.reason.startswith("image pull failed: 127.0.0.1:9/fairpod-test/none:1: "), e.reason
    assert "connection refused" in e.reason.lower() or "127.0.0.1:9" in e.reason[40:], e.reason
    launch(ex, tmp_path, "never", "localhost/fairpod-test/none:1", "Never")
    e = exit_of(ex, "never", [], 60.0)
    assert e.reason == "image localhost/fairpod-test/none:1 is not on this node (imagePullPolicy Never)"


def test_a_kubernetes_command_replaces_the_images_entrypoint_and_a_ray_job_gets_its_launcher() -> None:
    """Kubernetes' ``command`` replaces the image's ENTRYPOINT (``--entrypoint ""``, then the command), its ``args``
    alone keep it (podman's ``run IMAGE ARGS``); a Ray job's launcher is the node's own file, bound read-only."""
    keep = container.run_argv(ENGINE, spec(), {}, user=None, cgroup_parent=None, pids=None)
    assert "--entrypoint" not in keep and keep[-3:] == ["torchrun", "$(RANK)", "$(RANK)"]
    c = {"image": "reg.example/t:1", "mounts": [], "entrypoint": "replace", "ray": True,
         "launcher": "/opt/fp/raycluster.py"}
    argv = container.run_argv(ENGINE, spec(container=c), {}, user=None, cgroup_parent=None, pids=None)
    i = argv.index("--entrypoint")
    assert argv[i + 1] == "" and argv.index("reg.example/t:1") > i and argv[-3] == "torchrun"
    assert f"/opt/fp/raycluster.py:{container.RAY_LAUNCHER}:ro" in argv
    assert not [a for a in argv if "rayserve" in a]  # no Serve driver beside that launcher: none bound


def test_a_ray_services_serve_driver_is_bound_in_beside_its_launcher() -> None:
    """A RayService's head runs fairpod's Serve driver, the file beside the launcher (fairpod.executors.rayserve):
    bound in read-only next to the launcher's place in the container."""
    from fairpod.executors import raycluster, rayserve

    c = {"image": "reg.example/t:1", "mounts": [], "ray": True, "launcher": raycluster.__file__}
    argv = container.run_argv(ENGINE, spec(container=c), {}, user=None, cgroup_parent=None, pids=None)
    assert f"{rayserve.__file__}:/run/fairpod/rayserve.py:ro" in argv


def test_the_launch_of_a_ray_job_in_an_image() -> None:
    """The control plane's container of a Ray job: the entrypoint replaced, its own /dev/shm (Ray's object store),
    and the command that finds the image's Python with Ray and runs the bound launcher."""
    from fairpod.server.core.transitions.launch import container_of
    from fairpod.server.core.transitions.rayjobs import IN_IMAGE_SH

    c = container_of("i:1", None, [], None, Path("/nonexistent"), ray=True)
    assert c is not None and (c["entrypoint"], c["ray"], c["scratch"]) == ("replace", True, ["/dev/shm"])
    c = container_of("i:1", None, [], None, Path("/nonexistent"), ["/dev/shm:512"], ray=True)
    assert c is not None and c["scratch"] == ["/dev/shm:512"]
    c = container_of("i:1", None, [], None, Path("/nonexistent"), entrypoint=True)
    assert c is not None and c["entrypoint"] == "replace" and "ray" not in c and "scratch" not in c
    assert container_of("i:1", None, [], None, Path("/nonexistent")).get("entrypoint") is None  # type: ignore[union-attr]
    assert container.RAY_LAUNCHER in IN_IMAGE_SH and "find_spec('ray')" in IN_IMAGE_SH
