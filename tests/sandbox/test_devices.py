"""A replica's private /dev (the files sandbox): only its own GPUs' device files exist there, on this kernel.

The GPUs are device nodes made here with NVIDIA's major (195) in a directory the sandbox takes them from
(``FAIRPOD_DEV_SOURCE``, tests only): with no driver an open of one that is there fails with ENXIO, one that is
not there with ENOENT. With the v1 device cgroup turned off (``FAIRPOD_DEVICE_CGROUP=off``) the private /dev is
all that holds, as on a cgroup v2 host.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairpod.executors import LocalExecutor
from fairpod.executors.base import JobLaunch, ReplicaExit, ReplicaLaunch
from fairpod.sandbox import capabilities, devices, namespaces

from .conftest import local_executor, wait_for
from .test_files import made_users  # noqa: F401, F811 - the fixture

PROBE = """
import errno, json, os
out = {"nvidia": sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))}
for n in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm"):
    try:
        os.close(os.open("/dev/" + n, os.O_RDWR))
        out[n] = "opened"
    except OSError as e:
        out[n] = errno.errorcode[e.errno]
with open("/dev/null", "w") as f:
    f.write("gone")
with open("/dev/zero", "rb") as f:
    out["zero"] = f.read(4) == bytes(4)
with open("/dev/urandom", "rb") as f:
    out["urandom"] = len(f.read(8))
m, s = os.openpty()
os.write(m, b"hi\\n")
out["pty"] = os.read(s, 16).decode()
out["pts"] = os.ttyname(s).startswith("/dev/pts/")
with open("/dev/shm/x", "w") as f:
    f.write("x")
out["shm"] = True
out["links"] = all(os.path.exists(f"/dev/{n}") for n in ("stdin", "stdout", "stderr", "fd"))
print("RESULT", json.dumps(out), flush=True)
"""


@pytest.fixture
def dev_source(tmp_path: Path) -> Path:
    """A host /dev as far as NVIDIA goes: GPUs 0, 1, 2, nvidiactl (195:255) and nvidia-uvm (a made-up major)."""
    if why := namespaces.supported():
        pytest.skip(why)
    src = tmp_path / "hostdev"
    src.mkdir()
    try:
        for minor in (0, 1, 2):
            os.mknod(src / f"nvidia{minor}", stat.S_IFCHR | 0o666, os.makedev(195, minor))
        os.mknod(src / "nvidiactl", stat.S_IFCHR | 0o666, os.makedev(195, 255))
        os.mknod(src / "nvidia-uvm", stat.S_IFCHR | 0o666, os.makedev(511, 0))
    except PermissionError:
        pytest.skip("cannot make device nodes here (not root)")
    for node in src.iterdir():
        node.chmod(0o666)  # as the host's (mknod's mode went through the umask): the per-team user may open them
    return src


@pytest.fixture(params=["cgroup-on", "cgroup-off"])
def dev_ex(request: pytest.FixtureRequest, dev_source: Path, tmp_path: Path, made_users: None,  # noqa: F811
           monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalExecutor]:
    monkeypatch.setenv("FAIRPOD_SANDBOX", "full")
    monkeypatch.setenv(devices.SOURCE_ENV, str(dev_source))
    if request.param == "cgroup-off":
        monkeypatch.setenv(devices.CGROUP_ENV, "off")
    yield from local_executor(tmp_path / "runs")


def probe(ex: LocalExecutor, tmp_path: Path, name: str, gpus: tuple[int, ...]) -> dict:
    ex.launch(JobLaunch(job=name, team="a", attempt=0, command=[sys.executable, "-c", PROBE], workdir="/",
                        checkpoint_dir=str(tmp_path / "ckpt" / name), grace_seconds=1.0,
                        replicas=(ReplicaLaunch(rank=0, node="n0", accelerators=gpus, real_gpus=True),)))
    got: list[ReplicaExit] = []
    done = wait_for(lambda: next((x for x in got if x.job == name), None) or got.extend(ex.poll()), 60.0)
    log = (tmp_path / "runs" / name / "0" / "0" / "output.log").read_text()
    assert done.returncode == 0, log
    return json.loads(next(ln for ln in log.splitlines() if ln.startswith("RESULT "))[len("RESULT "):])


BASICS = {"zero": True, "urandom": 8, "pty": "hi\n", "pts": True, "shm": True, "links": True}


def test_a_replica_given_gpu_1_sees_only_it_and_the_control_devices(dev_ex: LocalExecutor, tmp_path: Path) -> None:
    out = probe(dev_ex, tmp_path, "one", (1,))
    assert out["nvidia"] == ["nvidia-uvm", "nvidia1", "nvidiactl"]
    assert {k: out[k] for k in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl")} == {
        "nvidia0": "ENOENT", "nvidia1": "ENXIO", "nvidia2": "ENOENT", "nvidiactl": "ENXIO"}
    assert {k: out[k] for k in BASICS} == BASICS


def test_a_replica_with_no_gpu_sees_no_nvidia_device(dev_ex: LocalExecutor, tmp_path: Path) -> None:
    out = probe(dev_ex, tmp_path, "none", ())
    assert out["nvidia"] == []
    assert {out[n] for n in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm")} == {"ENOENT"}
    assert {k: out[k] for k in BASICS} == BASICS


def test_devices_are_enforced_by_the_private_dev_without_a_device_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``fairpod up`` says: with the files sandbox, devices are enforced without a device cgroup (as on a
    cgroup v2 host); with neither, they are not."""
    if why := namespaces.supported():
        pytest.skip(why)
    monkeypatch.setenv(devices.CGROUP_ENV, "off")
    capabilities._host.cache_clear()
    try:
        assert capabilities._host("full").enforced("devices")
        limits = capabilities._host("limits")  # no files sandbox, no device cgroup: nothing holds devices
        assert not limits.enforced("files") and not limits.enforced("devices")
    finally:
        capabilities._host.cache_clear()


def test_the_plan_binds_only_own_gpus(tmp_path: Path) -> None:
    src = tmp_path / "dev"
    (src / "nvidia-caps").mkdir(parents=True)
    for n in ("nvidia0", "nvidia1", "nvidia10", "nvidiactl", "nvidia-uvm", "nvidia-caps/nvidia-cap21",
              "nvidia-caps/nvidia-cap30"):
        (src / n).touch()
    caps = tmp_path / "caps"
    for gpu, minor in ((1, 21), (0, 30)):
        (caps / f"gpu{gpu}" / "mig" / "gi1").mkdir(parents=True)
        (caps / f"gpu{gpu}" / "mig" / "gi1" / "access").write_text(f"DeviceFileName: x\nDeviceFileMinor: {minor}\n")
    plan = devices.plan((1,), str(src), caps=caps)
    nvidia = sorted(d.name for d in plan if d.name.startswith("nvidia"))
    assert nvidia == ["nvidia-caps", "nvidia-caps/nvidia-cap21", "nvidia-uvm", "nvidia1", "nvidiactl"]
    assert not [d for d in devices.plan((), str(src), caps=caps) if d.name.startswith("nvidia")]
