"""The job of the recovery-from-peers tests (examples/ddp/peer_ddp.py, 3 replicas) and what they read of it, for
every executor's test (tests/training/test_peer_recovery.py: local; tests/ray/test_ray_peers.py: Ray): its
arguments, the undisturbed run beside the server, the host PID of a replica's training process, each rank's
completed steps, the final model and the job's events."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from tests.ports import free_port
from tests.server.conftest import Server, wait_for

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "ddp" / "peer_ddp.py"
STEPS, SAVE, KILL_AT = 60, 20, 25
SPARE = b"# fairpod spare"  # the first line of the program a spare runs (fairpod.executors.spare_program)
ARGS = ["--steps", str(STEPS), "--save_every", str(SAVE), "--step_seconds", "0.1", "--timeout", "60"]


def reference_run(out: Path) -> Iterator[Path]:
    """The same training undisturbed: three processes started here (no fairpod) writing into ``out``, running
    beside the test (a fixture yields from it; they are killed at its end)."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), *ARGS, "--out", str(out)], cwd=out,
                              env={**os.environ, "PYTHONPATH": str(REPO / "src"), "RANK": str(r), "WORLD_SIZE": "3",
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                   "FAIRPOD_CHECKPOINT_DIR": str(out / "ckpt")},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(3)]
    try:
        yield out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)


def training_pid(rdir: Path) -> int | None:
    """The host PID of the training process of the replica whose run directory is ``rdir`` (its sandbox may have
    a PID namespace of its own, so the program's os.getpid() is not it): the replica's child.pid, or that
    process's descendant running peer_ddp.py (or a spare's program, a replacement the local executor's spare
    runs: python -c <spare>)."""
    try:
        child = int((rdir / "child.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    for pid in [child, *children(child)]:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"peer_ddp.py" in cmdline or SPARE in cmdline:
                return pid
        except OSError:
            continue
    return None


def children(pid: int) -> list[int]:
    """Every descendant of ``pid``."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2:].split()[1]) == pid:
                out += [int(d.name), *children(int(d.name))]
    return out


def final(d: Path) -> dict:
    return torch.load(d / "final.pt", weights_only=True)


def same_model(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def steps(d: Path, rank: int) -> list[tuple[int, int]]:
    """(step, pid in the replica's PID namespace) of each completed step of ``rank``."""
    f = d / f"steps-{rank}"
    lines = f.read_text().split("\n") if f.exists() else []
    return [(int(s), int(p)) for s, _, p in (ln.split() for ln in lines if ln.strip())]


def submit(s: Server, name: str) -> tuple[dict, Path]:
    """The job (3 replicas, recovery from peers, one full restart allowed); its replicas write their steps and
    the final model into its checkpoint directory (the team's user they run as writes there)."""
    job = s.submit(name=name, team="john", nodes=3, restarts_in_place=2, peer_recovery=True, auto_resume=True,
                   max_retry=1, termination_grace_seconds=2, env={"PYTHONPATH": str(REPO / "src")},
                   command=[sys.executable, str(SCRIPT), *ARGS, "--recovery", "peers"])
    return job, s.home / "checkpoints" / "john" / f"{name}-{job['id']}"


def events(s: Server, name: str, *kinds: str) -> list[dict]:
    r = s.api("GET", f"/jobs/{name}/events")
    assert r.status_code == 200, r.text
    return [e for e in r.json()["events"] if e["kind"] in kinds]


def kill_at(s: Server, out: Path, pids: Callable[[], dict[int, int | None]], ranks: list[int],
            first: Callable[[dict[int, int]], None] | None = None) -> dict[int, int | None]:
    """SIGKILL the training processes of ``ranks`` once rank 0 completed step KILL_AT; the host PIDs of every
    rank before (``pids()``: by rank). ``first(pids)``: checks on the live processes just before."""
    wait_for(lambda: len(steps(out, 0)) >= KILL_AT, 60, f"rank 0 to reach step {KILL_AT}", s.activity)
    before = pids()
    assert all(before.values()), before
    if first is not None:
        first(before)  # type: ignore[arg-type]
    for r in ranks:
        os.kill(before[r], signal.SIGKILL)  # type: ignore[arg-type]
    return before


def healthy_but(full: list[int], step: int) -> list[int]:
    """The steps of a healthy rank whose all-reduce of ``step`` failed when the replica was lost while a peer's had
    completed (a stop that lands inside the collective, as a node's fault does, not a SIGKILL between steps): the
    recovery takes the most advanced peer's state, so that rank goes on from ``step`` done, without its line."""
    return [st for st in full if st != step]


def check_recovered(s: Server, name: str, out: Path, reference: Path, lost: int = 1) -> dict:
    """What every recovery from peers of replica ``lost`` must show once the job succeeded: one
    ``ReplicaRecovered`` (that rank, from a healthy peer, at the step of the fault or later, its reason), no full
    restart, every rank's steps 1..N without a gap, the work before the fault kept (goodput), and the undisturbed
    run's model bit for bit. Returns the event's data."""
    done = s.wait_state(name, "Succeeded", 120, s.activity)
    assert done["restarts"] == 0, "no full restart: the job went on in its attempt"
    rec = events(s, name, "ReplicaRecovered")
    assert len(rec) == 1, rec
    d = rec[0]["data"]
    healthy = [r for r in range(3) if r != lost]
    assert d["ranks"] == [lost] and d["source"] in healthy and d["step"] >= KILL_AT, d
    full = list(range(1, STEPS + 1))
    for r in healthy:  # every step 1..N once on the healthy ranks: no gap, nothing done twice
        assert [st for st, _ in steps(out, r)] in (full, healthy_but(full, d["step"])), f"rank {r}"
    # the lost rank: its first process's steps, then the new process's from the step after the peers' state on. The
    # kill may land between a step's update and the line that logs it: the peers, whose all-reduce had its part,
    # then hold that step (done, not written), and that one step alone is missing from its lines
    assert [st for st, _ in steps(out, lost)] in (full, [st for st in full if st != d["step"]]), (lost, d)
    assert d["reason"].startswith(f"replica {lost} "), d  # why it was lost: the exit its executor saw
    gp = [e["data"] for e in events(s, name, "Goodput")]
    kept_to_fault = [g for g in gp if g["cause"] == "restart"]
    assert len(kept_to_fault) == 1 and kept_to_fault[0]["kept"] > 0, gp  # the work before the fault was kept
    # only the recovery's own time is lost (how long that is depends on the machine's load: not compared here)
    assert all(g["lost"] == 0 for g in gp if g["cause"] != "restart"), gp
    wait_for(lambda: (reference / "final.pt").exists(), 120, "the undisturbed run to end")
    assert same_model(final(out), final(reference)), "the recovered run's model differs from the undisturbed one"
    return d


def check_fell_back(s: Server, name: str, out: Path, reference: Path) -> None:
    """Two replicas lost at once: the job restarted whole from its checkpoint by itself, and still ends with the
    undisturbed run's model."""
    done = s.wait_state(name, "Succeeded", 120, s.activity)
    assert done["restarts"] == 1, "the job restarted whole, from its checkpoint"
    falls = [e["data"] for e in events(s, name, "ReplicaRestarting") if e["data"].get("fallback")]
    assert falls and falls[0]["fallback"] == "checkpoint", falls
    assert not events(s, name, "ReplicaRecovered")
    resumed = [st for st, _ in steps(out, 0)]
    assert resumed[-1] == STEPS and SAVE * (KILL_AT // SAVE) + 1 in resumed[KILL_AT:], "resumed at the checkpoint"
    wait_for(lambda: (reference / "final.pt").exists(), 120, "the undisturbed run to end")
    assert same_model(final(out), final(reference))
