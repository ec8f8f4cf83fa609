"""Replicas in container images on the local executor, with real podman (no mock): the replica's cgroup holds the
container (its memory limit kills a hog with the memory reason), the container sees neither the host's fairpod
state nor another team's files, runs as the team's user with the job's environment, and a stop's SIGTERM reaches
the process inside."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from fairpod.executors import LocalExecutor
from fairpod.executors.base import JobLaunch, ReplicaExit, ReplicaLaunch
from fairpod.sandbox import cgroups, container

from . import images
from .conftest import wait_for
from .test_limits import exit_of, output


@pytest.fixture
def image() -> str:
    return images.busybox()


def launch(ex: LocalExecutor, tmp: Path, name: str, team: str, script: str, image: str, mib: int = 256) -> None:
    ex.launch(JobLaunch(job=name, team=team, attempt=0, command=["sh", "-c", script],
                        checkpoint_dir=str(tmp / "ckpt" / team / name), grace_seconds=5.0,
                        container={"image": image, "pull": "Never", "mounts": [], "workdir": None},
                        replicas=(ReplicaLaunch(rank=0, node="n0", mcpu=1000, mib=mib),)))


def test_a_memory_hog_in_a_container_is_stopped_with_the_memory_reason(
        ex: LocalExecutor, tmp_path: Path, hierarchy: cgroups.Hierarchy, image: str) -> None:
    got: list[ReplicaExit] = []
    launch(ex, tmp_path, "hog", "a", "dd if=/dev/zero of=/dev/null bs=400M count=1 && echo survived", image, mib=128)
    e = exit_of(ex, "hog", got, 120.0)
    assert not e.ok
    assert e.reason == "exceeded its memory limit (0.125 GiB) and was killed", output(tmp_path, "hog")
    assert "\nsurvived" not in output(tmp_path, "hog")


def test_a_container_sees_no_host_state_and_no_other_teams_files(
        ex: LocalExecutor, tmp_path: Path, hierarchy: cgroups.Hierarchy, image: str) -> None:
    secret = tmp_path / "ckpt" / "b" / "their-job"
    secret.mkdir(parents=True)
    (secret / "weights.pt").write_text("team b's weights")
    home = Path(os.environ.get("FAIRPOD_HOME", tmp_path))
    script = (f"cat {secret}/weights.pt; ls {tmp_path / 'runs'}; ls {home}; ls /root; "
              'echo "user $(id -u):$(id -g) job $FAIRPOD_JOB rank $RANK world $WORLD_SIZE"; '
              'echo mine > "$FAIRPOD_CHECKPOINT_DIR/own" && echo wrote own checkpoint')
    launch(ex, tmp_path, "peek", "a", script, image)
    e = exit_of(ex, "peek", [], 120.0)
    out = output(tmp_path, "peek")
    assert "team b's weights" not in out and "output.log" not in out, out
    assert out.count("No such file or directory") >= 3, out
    assert "job peek rank 0 world 1" in out and "wrote own checkpoint" in out, out
    assert (tmp_path / "ckpt" / "a" / "peek" / "own").read_text() == "mine\n"
    if os.geteuid() == 0:  # as root: the team's own user, not root (the container's root is that user alone)
        import pwd
        u = pwd.getpwnam("fairpod-a")
        st = (tmp_path / "ckpt" / "a" / "peek" / "own").stat()
        assert (st.st_uid, st.st_gid) == (u.pw_uid, u.pw_gid)
        assert "user 0:0 " in out, out
    assert e.ok or e.returncode == 1, e  # ls of what is absent exits 1 before the last lines run


def test_a_stop_reaches_the_process_inside_with_its_grace(
        ex: LocalExecutor, tmp_path: Path, hierarchy: cgroups.Hierarchy, image: str) -> None:
    script = "trap 'echo got SIGTERM; exit 7' TERM; echo ready; while true; do sleep 0.2; done"
    launch(ex, tmp_path, "term", "a", script, image)
    wait_for(lambda: "\nready" in output(tmp_path, "term"), 120.0)
    ex.stop("term", 0, 5.0)
    e = exit_of(ex, "term", [], 60.0)
    assert "got SIGTERM" in output(tmp_path, "term")
    assert e.returncode == 7, e
    assert not any(d.name.startswith("term.") for b in hierarchy.bases.values() for d in b.iterdir()), \
        "the replica's cgroup (and the container's inside it) is removed"


def test_a_replica_killed_at_the_end_of_its_grace_leaves_no_container(
        ex: LocalExecutor, tmp_path: Path, hierarchy: cgroups.Hierarchy, image: str) -> None:
    """A stop with no grace (SIGKILL at once, as when a grace period runs out): the engine's ``run --rm`` is killed
    before it removes the container, and the container was left behind, listed as running with no process."""
    launch(ex, tmp_path, "nograce", "a", "trap '' TERM; echo ready; while true; do sleep 0.2; done", image)
    wait_for(lambda: "\nready" in output(tmp_path, "nograce"), 120.0)
    name = container.name_of({"job": "nograce", "attempt": 0, "rank": 0},
                             str((tmp_path / "runs" / "nograce" / "0" / "0").resolve()))
    engine = container.detect()
    assert engine is not None

    def exists() -> bool:
        return subprocess.run([engine.path, "container", "exists", name], timeout=60).returncode == 0

    assert exists()
    ex.stop("nograce", 0, 0.0)
    exit_of(ex, "nograce", [], 60.0)
    sup = tmp_path / "runs" / "nograce" / "0" / "0" / "supervisor.pid"
    pid = int(sup.read_text().split()[0])
    wait_for(lambda: not Path(f"/proc/{pid}").exists() or None, 60.0)  # the supervisor removes it, then ends
    assert not exists(), f"{name} is still there"


@pytest.mark.xfail(reason="known race, open: a stop that comes while podman creates the container is still lost "
                   "in some runs (the replica waits out its grace); the supervisor's retry of podman kill narrows it", strict=False)
def test_a_stop_while_the_engine_creates_the_container_still_reaches_the_process_inside(
        ex: LocalExecutor, tmp_path: Path, hierarchy: cgroups.Hierarchy, image: str) -> None:
    """The stop comes as the supervisor has started the engine, before the container exists: ``podman kill`` is
    refused then, and the SIGTERM was lost (the replica ran out its whole grace period, then SIGKILL)."""
    launch(ex, tmp_path, "early", "a", "trap 'echo got SIGTERM; exit 7' TERM; while true; do sleep 0.2; done", image)
    log = tmp_path / "runs" / "early" / "0" / "0" / "output.log"
    wait_for(lambda: log.exists() and " started " in log.read_text(), 120.0)
    ex.stop("early", 0, 600.0)
    e = exit_of(ex, "early", [], 120.0)  # far inside the 600 s grace: the SIGTERM was not lost
    # the trap's 7, 143 before the shell had set it, or the engine's own exit when the signal reached it before the
    # command started (seen: 2); never the SIGKILL that ended the grace period before
    assert e.signal is None and e.returncode not in (137, -9), (e, output(tmp_path, "early"))


def test_node_list_shows_the_engine_and_the_cached_images(tmp_path: Path, image: str) -> None:
    from ..server.conftest import running

    for server in running(tmp_path):
        nodes = server.api("GET", "/nodes").json()["nodes"]
        c = nodes[0]["containers"]
        assert c["engine"].startswith("podman ") and c["runtime"] in ("runc", "crun") and image in c["images"]
        table = server.cli("node", "list").stdout
        assert "CONTAINERS" in table and f"{c['engine']}/{c['runtime']}, " in table


def test_start_job_image_flags_and_their_bad_input(tmp_path: Path, image: str) -> None:
    from ..server.conftest import running

    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("dataset line\n")
    (tmp_path / "srv").mkdir()
    for server in running(tmp_path / "srv"):
        r = server.cli("start-job", "--name", "img", "--team", "john", "--image", image, "--image-pull-policy",
                       "Never", "--mount", f"{data}:/data:ro", "--", "sh", "-c",
                       "cat /data/in.txt; echo x > /data/new 2>&1 || echo read-only; pwd")
        assert "submitted for team john" in r.stdout
        job = server.wait_state("img", "Succeeded", 120)
        out = server.api("GET", f"/jobs/{job['id']}/logs").text
        assert "dataset line" in out and "read-only" in out and "\n/\n" in out, out  # the image's own workdir
        for args, words in ((["--mount", "data:/data", "--image", image], "--mount data:/data: give HOST:CONTAINER"),
                            (["--image-pull-policy", "Never"], "go with --image"),
                            (["--image-pull-policy", "Sometimes", "--image", image], "'Sometimes'; one of Always, IfNotPresent, Never")):
            r = server.cli("start-job", "--name", "bad", "--team", "john", *args, "--", "true", check=False)
            assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.stderr


def test_a_command_missing_from_the_image_is_named_with_the_image(
        ex: LocalExecutor, tmp_path: Path, hierarchy: cgroups.Hierarchy, image: str) -> None:
    """Was 'exited 127' with only 'ERROR (catatonit:6): failed to exec pid1: No such file or directory' in the log."""
    got: list[ReplicaExit] = []
    ex.launch(JobLaunch(job="nopy", team="a", attempt=0, command=["python3", "train.py"],
                        checkpoint_dir=str(tmp_path / "ckpt" / "a" / "nopy"), grace_seconds=5.0,
                        container={"image": image, "pull": "Never", "mounts": [], "workdir": None},
                        replicas=(ReplicaLaunch(rank=0, node="n0", mcpu=1000, mib=256),)))
    e = exit_of(ex, "nopy", got, 120.0)
    assert e.reason == f"command not found in image {image}: python3", output(tmp_path, "nopy")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"), reason="needs root and useradd")
def test_a_submitters_container_makes_its_files_as_the_submitter(
        ex: LocalExecutor, tmp_path: Path, hierarchy: cgroups.Hierarchy, image: str) -> None:
    """Under cluster.identity unix a job runs as its submitter (run_as, with the umask the CLI sent: what the
    control plane launches, fairpod.server.access.identity): in a container too, its files on the host are the
    submitter's, made with that umask, and a directory open to one of its supplementary groups is open to it.
    Before: 0644 files (podman's umask 0022) and 'Permission denied' in the group's directory."""
    base = Path(tempfile.mkdtemp(prefix="fairpod-ctr-user-", dir="/var/tmp"))
    os.chmod(base, 0o755)
    tag = uuid.uuid4().hex[:6]
    name, group = f"fpc{tag}", f"fpcg{tag}"
    try:
        subprocess.run(["groupadd", group], check=True, capture_output=True)
        subprocess.run(["useradd", "--no-create-home", "--home-dir", str(base / name), "--user-group", "--groups",
                        group, name], check=True, capture_output=True)
        pw, gid = pwd.getpwnam(name), grp.getgrnam(group).gr_gid
        mine, shared = base / name, base / "lab"
        mine.mkdir(mode=0o700)
        os.chown(mine, pw.pw_uid, pw.pw_gid)
        shared.mkdir()
        os.chown(shared, 0, gid)
        os.chmod(shared, 0o2770)  # the lab's: root's, open to the group's members only
        ex.launch(JobLaunch(job="mine", team="a", attempt=0, command=["sh", "-c",
                            f"umask; echo out > made.txt; echo lab > {shared}/ours.txt && echo wrote the lab dir"],
                            checkpoint_dir=str(tmp_path / "ckpt" / "a" / "mine"), grace_seconds=5.0,
                            run_as=name, umask=0o027,
                            container={"image": image, "pull": "Never", "mounts": [f"{shared}:{shared}"],
                                       "workdir": str(mine)},
                            replicas=(ReplicaLaunch(rank=0, node="n0", mcpu=1000, mib=256),)))
        e = exit_of(ex, "mine", [], 120.0)
        out = output(tmp_path, "mine")
        assert e.ok and "0027" in out and "wrote the lab dir" in out, (e, out)
        st = (mine / "made.txt").stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (pw.pw_uid, pw.pw_gid, 0o640), oct(st.st_mode)
        st = (shared / "ours.txt").stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (pw.pw_uid, gid, 0o640), oct(st.st_mode)
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
        subprocess.run(["groupdel", group], capture_output=True, check=False)
        shutil.rmtree(base, ignore_errors=True)
