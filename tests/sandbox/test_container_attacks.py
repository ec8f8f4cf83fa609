"""A member's container job attacks the host, with real podman (no mock): an image with a setuid-root program and
the host's /etc and root-only secrets mounted gets no privilege (no capability, not root on the host, nothing of
/etc/shadow or the secrets read, nothing written to /etc); the host paths it names are checked on the node after
symlinks are resolved (fairpod.sandbox.hostpaths): ``/``, fairpod's own directories, a symlink out of the
allowed directories, a directory it cannot make are refused, nothing is made as root; a mount inside the allowed
directories works, made by and owned by the job's user. Through ``fairpod start-job``: the same refusals at
submit, in one line."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairpod.executors import LocalExecutor
from fairpod.executors.base import JobLaunch, ReplicaExit, ReplicaLaunch
from fairpod.sandbox import cgroups

from . import images
from .conftest import remove_users_made_since, team_users
from .test_limits import exit_of, output

TEAM = "atk"


@pytest.fixture
def root_only() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: the per-team user, and root-owned secrets to guard")


@pytest.fixture
def made_users() -> Iterator[None]:
    before = team_users()
    yield
    remove_users_made_since(before)


def run(ex: LocalExecutor, tmp: Path, name: str, command: list[str], image: str, mounts: list[str],
        workdir: str | None = None, allow: tuple[str, ...] = ("/",)) -> ReplicaExit:
    ex.launch(JobLaunch(job=name, team=TEAM, attempt=0, command=command, checkpoint_dir=str(tmp / "ckpt" / TEAM / name),
                        grace_seconds=2.0, mounts_allow=allow,
                        container={"image": image, "pull": "Never", "mounts": mounts, "workdir": workdir},
                        replicas=(ReplicaLaunch(rank=0, node="n0", mcpu=1000, mib=256),)))
    return exit_of(ex, name, [], 120.0)


def test_a_setuid_image_with_the_hosts_etc_and_secrets_mounted_gets_no_privilege(
        ex: LocalExecutor, tmp_path: Path, hierarchy: cgroups.Hierarchy, root_only: None, made_users: None) -> None:
    image = images.setuid()
    secrets = tmp_path / "secrets"  # as the admin's config and the server's signing key are: root's, 0600
    secrets.mkdir()
    for f, text in (("config.json", '{"token": "TOKEN-OF-THE-ADMIN"}'), ("job-token.key", "KEY-OF-THE-SERVER")):
        (secrets / f).write_text(text)
        (secrets / f).chmod(0o600)
    mark = f"fairpod-attack-{uuid.uuid4().hex[:8]}"
    cmd = ["/bin/escalate", "r:/hostetc/shadow", "r:/secrets/config.json", "r:/secrets/job-token.key",
           f"w:/hostetc/{mark}", "w:/secrets/planted", "w:$(FAIRPOD_CHECKPOINT_DIR)/mine"]
    try:
        e = run(ex, tmp_path, "suid", cmd, image, ["/etc:/hostetc", f"{secrets}:/secrets"])
        out = output(tmp_path, "suid")
        assert e.ok, (e, out)
        assert "CapEff:\t0000000000000000" in out and "NoNewPrivs:\t1" in out, out  # no capability at all
        assert "READ " not in out and "WROTE /hostetc" not in out and "WROTE /secrets" not in out, out
        for secret in ("root:", "TOKEN-OF-THE-ADMIN", "KEY-OF-THE-SERVER"):
            assert secret not in out.split(" ====\n", 1)[1], out
        assert not (Path("/etc") / mark).exists() and not (secrets / "planted").exists()
        # what it wrote where it may write is the team's user's on the host: not root's
        mine = (tmp_path / "ckpt" / TEAM / "suid" / "mine").stat()
        user = pwd.getpwnam(f"fairpod-{TEAM}")
        assert (mine.st_uid, mine.st_gid) == (user.pw_uid, user.pw_gid) and mine.st_uid != 0
    finally:
        (Path("/etc") / mark).unlink(missing_ok=True)


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory the team may write in, as a cluster's /scratch is (1777), where its user can reach it (this
    test's own directory is root's, 0700)."""
    base = Path(tempfile.mkdtemp(prefix="fairpod-scratch-", dir="/var/tmp"))
    try:
        base.chmod(0o755)
        (base / "allowed").mkdir()
        (base / "allowed").chmod(0o1777)
        yield base / "allowed"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_the_node_refuses_the_host_paths_the_rules_refuse_and_makes_none_as_root(
        ex: LocalExecutor, tmp_path: Path, hierarchy: cgroups.Hierarchy, root_only: None, made_users: None,
        scratch: Path) -> None:
    image = images.busybox()
    allowed = scratch
    (allowed / "to-etc").symlink_to("/etc")  # inside the allowed directory, pointing out of it
    (allowed / "to-runs").symlink_to(tmp_path / "runs")
    allow = (str(allowed),)
    made = f"/etc/fairpod-made-{uuid.uuid4().hex[:8]}"
    cases = [  # name, mounts, workdir, allow, the reason's words
        ("root", ["/:/host"], None, ("/",), "mount /:/host: / holds fairpod's own"),
        ("runs", [f"{tmp_path}:/t"], None, ("/",), "holds fairpod's own"),
        ("proc", ["/proc/1:/p"], None, ("/",), "/proc/1 is or holds the host's /proc"),
        ("etcsub", [f"{made}/sub:/made"], None, ("/",), f"cannot make {made}/sub as the job's user"),
        ("link", [f"{allowed}/to-etc/sub:/x"], None, allow, f"{allowed}/to-etc/sub leads to /etc/sub) is outside "
         f"the directories the cluster allows (cluster.mounts.allow: {allowed})"),
        ("linkruns", [f"{allowed}/to-runs:/x"], None, allow, f"is inside fairpod's own {tmp_path / 'runs'}"),
        ("wdruns", [], str(tmp_path / "runs"), ("/",), f"workdir {tmp_path / 'runs'}: "),
        ("wdlink", [], f"{allowed}/to-etc", allow, "is outside the directories the cluster allows"),
    ]
    try:
        for name, mounts, wd, alw, words in cases:
            e = run(ex, tmp_path, name, ["sh", "-c", "echo started"], image, mounts, wd, alw)
            assert not e.ok and words in e.reason, (name, e.reason)
            assert "\nstarted" not in output(tmp_path, name)
        assert not os.path.exists(made)  # nothing made in /etc: the job's user may not write there
    finally:
        subprocess.run(["rm", "-rf", made], check=False)
    # inside the allowed directory: a missing source is made by the job's user, and what it writes is its own
    e = run(ex, tmp_path, "ok", ["sh", "-c", "echo hello > /out/f && echo wrote"], image,
            [f"{allowed}/new/sub:/out"], None, allow)
    assert e.ok and "\nwrote" in output(tmp_path, "ok"), output(tmp_path, "ok")
    user = pwd.getpwnam(f"fairpod-{TEAM}")
    for p in (allowed / "new", allowed / "new" / "sub", allowed / "new" / "sub" / "f"):
        assert p.stat().st_uid == user.pw_uid, p
    assert (allowed / "new" / "sub" / "f").read_text() == "hello\n"


def test_start_job_refuses_host_paths_in_one_line(tmp_path: Path, root_only: None, made_users: None) -> None:
    import yaml

    from ..server.conftest import SEED_SPEC, running

    image = images.busybox()
    allowed = tmp_path / "allowed"
    (allowed / "data").mkdir(parents=True)
    (allowed / "data").chmod(0o777)
    (allowed / "to-etc").symlink_to("/etc")
    spec = yaml.safe_load(SEED_SPEC.read_text())
    spec["cluster"]["mounts"] = {"allow": [str(allowed)]}
    (tmp_path / "srv").mkdir()
    for s in running(tmp_path / "srv", yaml.safe_dump(spec)):
        home = s.home
        for args, words in (
                (["--image", image, "--mount", "/:/host"], "mount /:/host: / holds fairpod's own"),
                (["--image", image, "--mount", "/etc/made/sub:/made"],
                 "mount /etc/made/sub:/made: /etc/made/sub is outside the directories the cluster allows"),
                (["--image", image, "--workdir", str(home)], f"workdir {home}: {home} is inside fairpod's own"),
                (["--workdir", str(home)], f"workdir {home}: {home} is inside fairpod's own"),
                (["--workdir", str(home / "runs")], "is inside fairpod's own"),
                (["--image", image, "--mount", f"{allowed}/to-etc:/e"], f"({allowed}/to-etc leads to /etc) is "
                 "outside the directories the cluster allows")):
            r = s.cli("start-job", "--name", "bad", "--team", "john", *args, "--", "true", check=False)
            assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, \
                (args, r.stderr)
        assert not Path("/etc/made").exists()
        # every way of naming a mount meets the same rule: a PyTorchJob's hostPath (the seed manifest's local disk
        # pointed at fairpod's state directory) and pyxis's --container-mounts of /
        from ..formats.slurm.test_sbatch_live import sbatch

        job = yaml.safe_load((Path(__file__).parents[1] / "formats" / "kube" / "seed" / "fsdp-image.yaml").read_text())
        pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        next(v for v in pod["volumes"] if v["name"] == "local")["hostPath"]["path"] = str(home)
        (tmp_path / "pytorchjob.yaml").write_text(yaml.safe_dump(job))
        r = s.cli("apply", "-f", str(tmp_path / "pytorchjob.yaml"), check=False)
        assert r.returncode != 0 and f"mount {home}:/local: {home} is inside fairpod's own" in r.stderr, r.stderr
        (tmp_path / "pyxis.sh").write_text("#!/bin/bash\n#FAIRPOD --team john\n"
                                           "srun --container-image=localhost#fairpod-test/busybox:2 "
                                           "--container-mounts=/:/host cat /host/etc/shadow\n")
        r = sbatch(s, tmp_path, "pyxis.sh")
        assert r.returncode != 0 and "mount /:/host: / holds fairpod's own" in r.stderr, r.stderr
        r = s.cli("start-job", "--name", "good", "--team", "john", "--image", image, "--image-pull-policy", "Never",
                  "--mount", f"{allowed}/data:/data", "--", "sh", "-c", "echo from-the-job > /data/out")
        assert "submitted for team john" in r.stdout, r.stderr
        s.wait_state("good", "Succeeded", 120)
        out = allowed / "data" / "out"
        assert out.read_text() == "from-the-job\n"
        assert pwd.getpwuid(out.stat().st_uid).pw_name == "fairpod-john"


DEV_PROBE = """
import errno, os, stat, sys
def tried(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
src = sys.argv[1]
for n in ("nvidia0", "nvidia1", "nvidiactl"):
    print(n, tried(lambda: os.close(os.open(f"{src}/{n}", os.O_RDWR))))
print("mknod", tried(lambda: os.mknod("/tmp/gpu0", stat.S_IFCHR | 0o666, os.makedev(195, 0))))
print("nvidia in /dev:", sorted(n for n in os.listdir("/dev") if n.startswith("nvidia")))
"""


def test_a_container_given_gpu_1_opens_it_and_no_other_and_makes_no_device(
        tmp_path: Path, hierarchy: cgroups.Hierarchy, root_only: None, made_users: None,
        monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """The devices probe of tests/sandbox/test_devices.py from a container: device nodes made here with NVIDIA's
    major (195) stand for the host's GPUs (``FAIRPOD_DEV_SOURCE``: given with ``--device`` at their own path);
    with no driver an allowed open fails with ENXIO, a node not given does not exist, and none can be made."""
    from fairpod.sandbox import devices

    from .conftest import local_executor

    image = images.python()
    base = Path(tempfile.mkdtemp(prefix="fairpod-dev-", dir="/var/tmp"))  # reachable, as the host's /dev is: the
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))  # runtime binds it as the team's user
    base.chmod(0o755)
    src = base / "hostdev"
    src.mkdir()
    for minor in (0, 1):
        os.mknod(src / f"nvidia{minor}", 0o20666, os.makedev(195, minor))
    os.mknod(src / "nvidiactl", 0o20666, os.makedev(195, 255))
    for node in src.iterdir():
        node.chmod(0o666)  # as the host's (mknod's mode went through the umask)
    monkeypatch.setenv(devices.SOURCE_ENV, str(src))
    monkeypatch.setenv("FAIRPOD_PIDS_MAX", "64")
    for ex in local_executor(tmp_path / "runs"):
        ex.launch(JobLaunch(job="gpu", team=TEAM, attempt=0, command=["python3", "-c", DEV_PROBE, str(src)],
                            checkpoint_dir=str(tmp_path / "ckpt" / TEAM / "gpu"), grace_seconds=2.0,
                            container={"image": image, "pull": "Never", "mounts": [], "workdir": None},
                            replicas=(ReplicaLaunch(rank=0, node="n0", mcpu=1000, mib=256, accelerators=(1,),
                                                    real_gpus=True),)))
        e = exit_of(ex, "gpu", [], 120.0)
        out = output(tmp_path, "gpu")
        assert e.ok, out
        said = dict(ln.split(" ", 1) for ln in out.splitlines() if ln.split(" ")[0] in
                    ("nvidia0", "nvidia1", "nvidiactl", "mknod"))
        assert said == {"nvidia0": "ENOENT", "nvidia1": "ENXIO", "nvidiactl": "ENXIO", "mknod": "EPERM"}, out
        assert "nvidia in /dev: []" in out, out


FORKS = """
import os, time
n = 0
for _ in range(10_000):  # bounded: stops at the pids limit, or after 10000 children without one
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
print("forked", n, flush=True)
"""


def test_a_fork_bomb_in_a_container_stops_at_the_replicas_pids_limit(
        ex: LocalExecutor, tmp_path: Path, hierarchy: cgroups.Hierarchy, root_only: None, made_users: None) -> None:
    e = run(ex, tmp_path, "forks", ["python3", "-c", FORKS], images.python(), [])
    out = output(tmp_path, "forks")
    line = next((ln for ln in out.splitlines() if ln.startswith("forked")), None)
    assert line is not None and int(line.split()[1]) < 64, (e, out)  # FAIRPOD_PIDS_MAX=64 (conftest)
