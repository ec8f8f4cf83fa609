"""The local executor grows and shrinks a live attempt (elastic jobs): real processes and signals."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fairpod.executors import LocalExecutor, ReplicaLaunch
from fairpod.executors.base import ExecutorError

from .helpers import job, wait_exits, wait_for

CMD = ["sh", "-c", 'echo "$RANK $WORLD_SIZE $MASTER_PORT" > "$FAIRPOD_CHECKPOINT_DIR/r$RANK"; exec sleep 60']


def seen(tmp: Path, name: str, rank: int) -> list[str]:
    f = tmp / "ckpt" / name / f"r{rank}"
    wait_for(lambda: f.exists() and f.read_text().strip(), 10)
    return f.read_text().split()


def test_add_replicas_joins_the_live_attempt_and_stop_replicas_stops_only_those(ex: LocalExecutor, tmp_path: Path):
    base = job("el", CMD, tmp_path, n=1)
    ex.launch(base)
    rank0 = seen(tmp_path, "el", 0)
    assert rank0[:2] == ["0", "1"]
    more = dataclasses.replace(base, world=3, replicas=tuple(ReplicaLaunch(rank=r, node=f"node-{r}") for r in (1, 2)))
    ex.add_replicas(more)
    r1, r2 = seen(tmp_path, "el", 1), seen(tmp_path, "el", 2)
    assert r1 == ["1", "3", rank0[2]] and r2 == ["2", "3", rank0[2]]  # world size 3, the attempt's port
    with pytest.raises(ExecutorError, match="overlap"):
        ex.add_replicas(more)
    ex.stop_replicas("el", 0, [2], 0.0)
    (e,) = wait_exits(ex, 1)
    assert (e.job, e.attempt, e.rank) == ("el", 0, 2) and e.signal is not None
    assert ex.running() == {"el": 0}  # ranks 0 and 1 go on
    ex.stop("el", 0, 0.0)
    assert sorted(x.rank for x in wait_exits(ex, 2)) == [0, 1]
    with pytest.raises(ExecutorError, match="no live replica"):
        ex.add_replicas(more)


def test_a_service_replica_starts_again_when_none_of_its_replicas_is_live(ex: LocalExecutor, tmp_path: Path):
    base = job("svc", CMD, tmp_path, n=1)
    base = dataclasses.replace(base, env={**base.env, "FAIRPOD_SERVICE_PORTS": "41000"})
    ex.launch(base)
    seen(tmp_path, "svc", 0)
    ex.stop("svc", 0, 0.0)
    wait_exits(ex, 1)
    (tmp_path / "ckpt" / "svc" / "r0").unlink()
    ex.add_replicas(base)  # a service's only replica, restarted after its exit (its restart backoff)
    assert seen(tmp_path, "svc", 0)[:2] == ["0", "1"]
    assert ex.running() == {"svc": 0}
    ex.stop("svc", 0, 0.0)
    wait_exits(ex, 1)
