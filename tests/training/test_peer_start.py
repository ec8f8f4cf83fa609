"""fairpod.sdk.peers without a server: a replacement that starts later than ``timeout`` (a cold interpreter
importing torch on a busy node: 77 s, seen) is still waited for, up to ``start_timeout``, and a replacement that
never comes ends the wait in one clear error, not a hang.

Two real processes with gloo over loopback. The test plays fairpod's part: it kills rank 1 at step 3, raises the
restart generation (a file the ranks read in place of ``sdk.peer_restarts()``) and starts the replacement; the
replacement's program holds itself back until the survivor has waited for it longer than ``timeout``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ports import free_port

pytest.importorskip("torch", reason="torch is not installed")

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 3.0  # the collective timeout: the replacement comes 2 x later than it

PROGRAM = r'''
import os, sys, time
from pathlib import Path
import torch
from fairpod.sdk.peers import PeerRecovery, RecoveryFailed

d, role, start_timeout = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
TIMEOUT = %(timeout)r

def generation():
    g = int((d / "gen").read_text() or 0) if (d / "gen").exists() else 0
    if g and not (d / "since").exists():  # the survivor starts to wait for its replacement now
        (d / "since").write_text(repr(time.monotonic()))
    return g

if role == "replacement":  # a slow start: on until the survivor has waited 2 x TIMEOUT
    while not (d / "since").exists():
        time.sleep(0.02)
    time.sleep(max(0.0, float((d / "since").read_text()) + 2 * TIMEOUT - time.monotonic()))
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
try:
    rec = PeerRecovery(model, opt, timeout=TIMEOUT, start_timeout=start_timeout, generation=generation)
    ddp = rec.wrap()
    x = torch.ones(8, 4) * (int(os.environ["RANK"]) + 1)
    while rec.step < 6:
        try:
            opt.zero_grad()
            ddp(x).sum().backward()
            opt.step()
        except rec.errors:
            ddp = rec.recover()
            print("recovered", rec.last["step"], rec.last["behind"], flush=True)
            continue
        rec.step += 1
        print("step", rec.step, flush=True)
        if role == "victim" and rec.step == 3:
            os._exit(9)
except RecoveryFailed as e:
    print("RecoveryFailed:", e, flush=True)
    sys.exit(3)
print("done", [round(float(p.sum()), 6) for p in model.parameters()], flush=True)
'''


def start(d: Path, port: int, rank: int, role: str, start_timeout: float, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", PROGRAM % {"timeout": TIMEOUT}, str(d), role, str(start_timeout)],
        stdout=open(d / f"{role}.log", "w"), stderr=subprocess.STDOUT,  # noqa: SIM115 - the child holds it
        env={**os.environ, "PYTHONPATH": str(REPO / "src"), "RANK": str(rank), "WORLD_SIZE": "2",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **env})


def lose_rank_1(d: Path, start_timeout: float) -> tuple[int, subprocess.Popen]:
    """Ranks 0 and 1 train; rank 1 ends itself at step 3 (exit 9, as if killed); the generation grows to 1.
    Returns the rendezvous port and the survivor."""
    port = free_port()
    survivor = start(d, port, 0, "survivor", start_timeout)
    victim = start(d, port, 1, "victim", start_timeout)
    try:
        assert victim.wait(timeout=600) == 9, (d / "victim.log").read_text()
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    (d / "gen").write_text("1")
    return port, survivor


def ended(p: subprocess.Popen, log: Path) -> tuple[int, str]:
    try:
        rc = p.wait(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return rc, log.read_text()


@pytest.mark.slow
def test_a_replacement_slower_than_the_timeout_is_waited_for_and_given_the_state(tmp_path: Path) -> None:
    port, survivor = lose_rank_1(tmp_path, start_timeout=600)
    replacement = start(tmp_path, port, 1, "replacement", 600,
                        FAIRPOD_REPLICA_RESTARTS="1", FAIRPOD_RESTART_GENERATION="1")
    rc0, out0 = ended(survivor, tmp_path / "survivor.log")
    rc1, out1 = ended(replacement, tmp_path / "replacement.log")
    assert rc0 == 0 and rc1 == 0, (out0, out1)
    # the survivor waited longer than its timeout, then gave its state at step 3 (the replacement behind it)
    assert "recovered 3 [1]" in out0, out0
    assert [ln for ln in out0.splitlines() if ln.startswith("step")] == [f"step {i}" for i in range(1, 7)], out0
    assert [ln for ln in out1.splitlines() if ln.startswith("step")] == [f"step {i}" for i in range(4, 7)], out1
    done0, done1 = (next(ln for ln in o.splitlines() if ln.startswith("done")) for o in (out0, out1))
    assert done0 == done1  # the same model on both ranks


@pytest.mark.slow
def test_a_replacement_that_never_comes_ends_the_wait_in_one_error(tmp_path: Path) -> None:
    _, survivor = lose_rank_1(tmp_path, start_timeout=2 * TIMEOUT)
    rc, out = ended(survivor, tmp_path / "survivor.log")
    assert rc == 3, out
    assert "RecoveryFailed: rank 0: not every rank came to the rendezvous of generation 1 within 6 s (came: [0])" \
        in out, out
