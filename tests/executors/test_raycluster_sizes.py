"""A Ray job's object store fits the replica's /dev/shm (fairpod.executors.raycluster): the Ray job of
docs/workloads.md failed 3 times on an ordinary machine with ``The configured object store size (15.46 GB) exceeds
/dev/shm size (12.64 GB)``: 30 % of a 48 GiB replica, more than the host's /dev/shm held."""

from __future__ import annotations

import os
import tempfile

import pytest

from fairpod.executors import raycluster
from fairpod.sandbox import namespaces


def _store(flags: list[str]) -> int:
    return int(flags[flags.index("--object-store-memory") + 1]) // 2**20


def test_the_store_is_30_percent_of_the_replica_when_shm_holds_it():
    env = {"FAIRPOD_MEMORY_MIB": "8192"}
    assert _store(raycluster._sizes(env, shm=24_000)) == 2457
    assert raycluster.object_store_mib(8192, 24_000)[1:] == (None, False)


def test_the_store_is_cut_to_shm_and_says_so():
    """The issue's figures: a 48 GiB replica (ml.g5.12xlarge by ratio), 12.64 GB free in /dev/shm."""
    shm = 12_640_000_000 // 2**20
    flags = raycluster._sizes({"FAIRPOD_MEMORY_MIB": str(48 * 1024)}, shm=shm)
    assert 80 <= _store(flags) <= shm * 0.9
    store, note, slow = raycluster.object_store_mib(48 * 1024, shm)
    assert not slow and note == (f"object store {store} MiB: 30% of the replica's 49152 MiB would be 14745 MiB, "
                                 f"more than /dev/shm has free ({shm} MiB)")


def test_no_room_in_shm_puts_the_store_in_tmp_and_says_so():
    store, note, slow = raycluster.object_store_mib(4096, 50)
    assert slow and store == 1228 and note is not None and "in /tmp, slower" in note and "50 MiB free" in note


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs of its own (root)")
def test_the_free_space_is_read_from_the_shm_it_runs_with():
    """A /dev/shm of 256 MiB (a tmpfs in a mount namespace of a child): the store asked for fits it."""
    if why := namespaces.supported():
        pytest.skip(why)
    where = tempfile.mkdtemp()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            namespaces.unshare(namespaces.CLONE_NEWNS)
            namespaces.mount(None, "/", None, namespaces.MS_REC | namespaces.MS_PRIVATE)
            namespaces.mount("tmpfs", where, "tmpfs", 0, "size=256m")
            shm = raycluster.shm_free_mib(where)
            os.write(w, f"{shm} {_store(raycluster._sizes({'FAIRPOD_MEMORY_MIB': '4096'}, shm))}".encode())
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 100).decode().split()
    os.waitpid(pid, 0)
    os.close(r)
    os.rmdir(where)
    assert got == ["256", "230"], got  # 30 % of 4 GiB would be 1228 MiB


def test_each_rank_takes_its_groups_ray_start_params():
    """KubeRay's rayStartParams (fairpod.formats.kube.ray_start): rank 0 the head's, then each worker group's for
    its replicas, the last group's beyond; they replace fairpod's own flags; other keys and bad values are not
    passed."""
    params = '{"head": {"num-cpus": "0", "resources": "{\\"r1\\": 2}"}, "workers": [[2, {"num-cpus": "3"}], ' \
        '[1, {"num-gpus": "1", "temp-dir": "/x"}]]}'
    base = {"FAIRPOD_VCPU_MILLI": "2000", "FAIRPOD_RAY_START_PARAMS": params}

    def flags(rank: int) -> dict[str, str]:
        out = raycluster._sizes({**base, "RANK": str(rank)}, shm=None)
        return dict(zip(out[::2], out[1::2], strict=True))

    assert flags(0) == {"--num-cpus": "0", "--num-gpus": "0", "--resources": '{"r1": 2}'}
    assert flags(1)["--num-cpus"] == flags(2)["--num-cpus"] == "3" and flags(1)["--resources"] == "{}"
    assert flags(3) == flags(4) == {"--num-cpus": "2", "--num-gpus": "1", "--resources": "{}"}  # no --temp-dir
    with pytest.raises(SystemExit, match="FAIRPOD_RAY_START_PARAMS is not the groups' parameters"):
        raycluster._sizes({"FAIRPOD_RAY_START_PARAMS": '{"head": {"num-cpus": "-1"}}'}, shm=None)
