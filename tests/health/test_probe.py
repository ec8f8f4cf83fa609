"""A probe's readings of this host: real (/proc/meminfo, statvfs), read once per second for all the nodes a
health round probes here, not once per node (10,000 nodes on the timed executor: a fifth of the server's CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairpod.health import probe as probe_mod
from fairpod.health.probe import Probe


def test_one_reading_of_this_host_serves_every_node_of_a_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    reads = {"mem": 0, "disk": 0}
    real_mem, real_disk = probe_mod._memory_available_fraction, probe_mod._disk_free_fraction

    def mem() -> float:
        reads["mem"] += 1
        return real_mem()

    def disk(path: str) -> float:
        reads["disk"] += 1
        return real_disk(path)

    monkeypatch.setattr(probe_mod, "_memory_available_fraction", mem)
    monkeypatch.setattr(probe_mod, "_disk_free_fraction", disk)
    monkeypatch.setattr(probe_mod, "_readings", {})
    other = tmp_path / "other"
    other.mkdir()
    probes = [Probe(f"n{i}", str(tmp_path if i % 2 else other), 0, True) for i in range(200)]
    got = [(p.memory_available_fraction(), p.disk_free_fraction()) for p in probes]
    assert all(0 < m <= 1 and 0 < d <= 1 for m, d in got)
    assert reads == {"mem": 1, "disk": 2}, reads  # one per host reading and scratch path (was 200 and 200)
    monkeypatch.setattr(probe_mod, "FRESH", 0.0)  # older than FRESH: read again
    probes[0].memory_available_fraction()
    assert reads["mem"] == 2
