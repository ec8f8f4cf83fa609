"""The rules of the host paths a job names (fairpod.sandbox.hostpaths), on real directories and symlinks: judged
where they lead, inside the allowed directories only, never fairpod's own or the kernel's, and made as the job's
user; ``cluster.mounts.allow`` in the cluster spec."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from fairpod.model.spec import SpecError, parse_spec
from fairpod.sandbox.hostpaths import HostPathError, check, make_as


def rules(tmp: Path) -> dict:
    return {"allow": [str(tmp / "ok")], "protected": [str(tmp / "ok" / "home")]}


def test_a_path_is_judged_where_it_leads(tmp_path: Path) -> None:
    (tmp_path / "ok" / "home").mkdir(parents=True)
    (tmp_path / "ok" / "data").mkdir()
    (tmp_path / "ok" / "out").symlink_to("/etc")
    (tmp_path / "ok" / "in").symlink_to(tmp_path / "ok" / "data")
    (tmp_path / "ok" / "state").symlink_to(tmp_path / "ok" / "home")
    r = rules(tmp_path)
    assert check(str(tmp_path / "ok" / "data" / "new" / "x"), what="m", bound=True, **r) == \
        str(tmp_path / "ok" / "data" / "new" / "x")  # not made yet: still judged
    assert check(str(tmp_path / "ok" / "in"), what="m", bound=True, **r) == str(tmp_path / "ok" / "data")
    refused = {
        str(tmp_path / "ok" / "out" / "x"): "(… leads to /etc/x) is outside",
        str(tmp_path / "ok" / "data" / ".." / ".." / "x"): "is outside the directories the cluster allows",
        str(tmp_path / "ok" / "state" / "db"): f"is inside fairpod's own {tmp_path / 'ok' / 'home'}",
        str(tmp_path / "ok" / "home"): "is inside fairpod's own",
        str(tmp_path / "ok"): f"holds fairpod's own {tmp_path / 'ok' / 'home'}",
        "relative/dir": "is not an absolute path",
    }
    for path, words in refused.items():
        with pytest.raises(HostPathError) as e:
            check(path, what=f"mount {path}:/x", bound=True, **r)
        text = str(e.value)
        assert text.startswith(f"mount {path}:/x: ") and "\n" not in text
        assert words.replace("(… ", f"({path} ") in text, text


def test_a_host_workdir_may_hold_fairpods_directories_a_mount_may_not(tmp_path: Path) -> None:
    (tmp_path / "ok" / "home").mkdir(parents=True)
    r = rules(tmp_path)
    assert check(str(tmp_path / "ok"), what="workdir", bound=False, **r) == str(tmp_path / "ok")
    with pytest.raises(HostPathError, match="holds fairpod's own"):
        check(str(tmp_path / "ok"), what="mount", bound=True, **r)
    for system in ("/proc/1", "/sys/fs/cgroup", "/dev", "/run/munge", "/boot"):
        with pytest.raises(HostPathError, match="which no job may mount"):
            check(system, what="m", bound=True, allow=["/"], protected=[])
    with pytest.raises(HostPathError, match="is or holds the host's /proc"):
        check("/", what="m", bound=True, allow=["/"], protected=[])


def test_a_missing_directory_is_made_as_the_jobs_user_or_not_at_all() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: made as another user")
    nobody = (65534, 65534)
    base = Path(tempfile.mkdtemp(prefix="fairpod-hostpaths-", dir="/var/tmp"))  # (pytest's own is root's, 0700)
    try:
        base.chmod(0o755)
        shared = base / "shared"
        shared.mkdir()
        shared.chmod(0o1777)
        make_as(str(shared / "a" / "b"), nobody, "mount x")
        assert (shared / "a").stat().st_uid == 65534 and (shared / "a" / "b").stat().st_uid == 65534
        closed = base / "closed"
        closed.mkdir(mode=0o755)
        with pytest.raises(HostPathError, match=r"^mount y: cannot make .* as the job's user \(uid 65534\): Perm"):
            make_as(str(closed / "sub" / "dir"), nobody, "mount y")
        assert not (closed / "sub").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_cluster_mounts_allow_in_the_spec() -> None:
    assert parse_spec({}).cluster.mounts.allow == ["/"]
    spec = parse_spec({"cluster": {"mounts": {"allow": ["/fsx", "/home"]}}})
    assert spec.cluster.mounts.allow == ["/fsx", "/home"]
    for bad in (["data"], ["/fsx/../etc"]):
        with pytest.raises(SpecError, match="cluster.mounts.allow.*absolute directory path without '..'"):
            parse_spec({"cluster": {"mounts": {"allow": bad}}})
    with pytest.raises(SpecError, match="cluster.mounts.deny"):
        parse_spec({"cluster": {"mounts": {"deny": ["/x"]}}})


def test_a_host_commands_view_never_brings_back_a_workdir_inside_fairpods_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default workdir (the control plane's own directory) inside the state directory stays hidden; the job's
    checkpoint directory and a workdir elsewhere are kept."""
    from fairpod import sandbox

    home = tmp_path / "home"
    monkeypatch.setenv("FAIRPOD_HOME", str(home))
    monkeypatch.setenv("FAIRPOD_CONFIG", str(tmp_path / "cfg" / "fairpod" / "config.json"))
    rdir = home / "runs" / "j" / "0" / "0"
    rdir.mkdir(parents=True)
    ckpt = str(home / "checkpoints" / "t" / "j")
    for wd, kept in ((str(home), False), (str(home / "runs"), False), (str(tmp_path / "work"), True)):
        view = sandbox.view_of({"workdir": wd, "env": {"FAIRPOD_CHECKPOINT_DIR": ckpt}, "limits": {}}, rdir)
        assert (wd in view.keep) is kept and ckpt in view.keep, (wd, view.keep)
        assert str(home) in view.hide
