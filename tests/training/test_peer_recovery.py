"""Recovery from peers (issue 49) on a live server with real DDP processes (gloo, CPU, local executor).

A 3-replica job of examples/ddp/peer_ddp.py (``--peer-recovery``) loses replica 1 to SIGKILL mid-training: the
other two keep their processes, replica 1 is started again in place and gets its state from a peer's memory, every
rank's completed steps run 1..N without a gap, and the final model is bit for bit the one of the same training run
undisturbed (three plain processes beside the server). The same when replica 1's node fails (an Xid fault injected,
seen by the health agent): replica 1 comes back on the cluster's fourth node, rank 0 (the rendezvous' host) staying
where it was. Then two replicas lost at once: the job falls back to its checkpoint by itself (a full restart) and
still ends with that model.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ports import free_port
from tests.server.conftest import running

from .conftest import Server, wait_for

torch = pytest.importorskip("torch", reason="torch is not installed: the DDP example cannot run")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "ddp" / "peer_ddp.py"
STEPS, SAVE, KILL_AT = 60, 20, 25
SPARE = b"# fairpod spare"  # the first line of the program a spare runs (fairpod.executors.spare_program)
ARGS = ["--steps", str(STEPS), "--save_every", str(SAVE), "--step_seconds", "0.1", "--timeout", "60"]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # the health agent's round every 0.5 s: an injected node fault is seen within a step or two of the training
    yield from running(tmp_path_factory.mktemp("peers"),
                       before_start=lambda s: s.env.update(FAIRPOD_AGENT_INTERVAL="0.5"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The same training undisturbed: three processes started here (no fairpod), running beside the tests."""
    out = tmp_path_factory.mktemp("reference")
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), *ARGS, "--out", str(out)], cwd=out,
                              env={**os.environ, "PYTHONPATH": str(REPO / "src"), "RANK": str(r), "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": str(port), "FAIRPOD_CHECKPOINT_DIR": str(out / "ckpt")},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(3)]
    try:
        yield out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)


def host_pid(runs: Path, job: str, attempt: int, rank: int) -> int | None:
    """The host PID of the training process of ``rank`` (its sandbox has a PID namespace of its own, so the
    program's os.getpid() is not it): the replica's child.pid, or that process's child running peer_ddp.py."""
    try:
        child = int((runs / job / str(attempt) / str(rank) / "child.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    for pid in [child, *_children(child)]:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"peer_ddp.py" in cmdline or SPARE in cmdline:  # a replacement run by its spare: python -c <spare>
                return pid
        except OSError:
            continue
    return None


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2:].split()[1]) == pid:
                out += [int(d.name), *_children(int(d.name))]
    return out


def spares(job: str, rank: int) -> list[int]:
    """Host PIDs of the spare processes of the replica ``rank`` (attempt 0) of ``job``: the spare's program, in a
    cgroup of that replica (fairpod.sandbox.group_name: ``<job>.<attempt>.<rank>.<digest>``)."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and (d / "cmdline").read_bytes().startswith(b"%s\0-c\0%s" % (
                    sys.executable.encode(), SPARE)) and f"/{job}.0.{rank}." in (d / "cgroup").read_text():
                out.append(int(d.name))
        except OSError:
            continue
    return out


def ids(pid: int) -> tuple[str, str, int]:
    """The real uid, the PID namespace and the nice value of a process."""
    status = Path(f"/proc/{pid}/status").read_text()
    uid = next(ln.split()[1] for ln in status.splitlines() if ln.startswith("Uid:"))
    stat = Path(f"/proc/{pid}/stat").read_text()
    return uid, os.readlink(f"/proc/{pid}/ns/pid"), int(stat[stat.rfind(")") + 2:].split()[16])


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
    """The job; its replicas write their steps and the final model into its checkpoint directory (the team's
    user they run as writes there)."""
    job = s.submit(name=name, team="john", nodes=3, restarts_in_place=2, peer_recovery=True, auto_resume=True,
                   max_retry=1, termination_grace_seconds=2, env={"PYTHONPATH": str(REPO / "src")},
                   command=[sys.executable, str(SCRIPT), *ARGS, "--recovery", "peers"])
    return job, s.home / "checkpoints" / "john" / f"{name}-{job['id']}"


def events(s: Server, name: str, *kinds: str) -> list[dict]:
    r = s.api("GET", f"/jobs/{name}/events")
    assert r.status_code == 200, r.text
    return [e for e in r.json()["events"] if e["kind"] in kinds]


def pids(s: Server, job: dict) -> dict[int, int | None]:
    """Host PIDs of the job's training processes, by rank."""
    return {r: host_pid(s.home / "runs", f"{job['name']}-{job['id']}", 0, r) for r in range(3)}


def kill_at(s: Server, job: dict, out: Path, ranks: list[int]) -> dict[int, int | None]:
    """SIGKILL the processes of ``ranks`` once rank 0 completed step KILL_AT; the host PIDs before."""
    wait_for(lambda: len(steps(out, 0)) >= KILL_AT, 60, f"rank 0 to reach step {KILL_AT}", s.activity)
    before = pids(s, job)
    assert all(before.values()), before
    for r in ranks:
        os.kill(before[r], signal.SIGKILL)  # type: ignore[arg-type]
    return before


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_killed_replica_recovers_from_its_peers_and_the_job_goes_on_from_its_step(
        srv: Server, reference: Path) -> None:
    job, out = submit(srv, "peers")
    key = f"{job['name']}-{job['id']}"
    # replica 1's spare: started ahead in the replica's sandbox, its imports done (it says so in the replica's log)
    log1 = srv.home / "runs" / key / "0" / "1" / "output.log"
    wait_for(lambda: log1.exists() and b"fairpod spare: ready" in log1.read_bytes(), 120, "replica 1's spare",
             srv.activity)
    (spare,) = spares(key, 1)
    before = kill_at(srv, job, out, [1])
    wait_for(lambda: events(srv, "peers", "ReplicaRecovered"), 120, "ReplicaRecovered", srv.activity)
    after = pids(srv, job)  # while the job still runs (its last steps take a few seconds)
    assert after[0] == before[0] and after[2] == before[2], (before, after)  # the healthy replicas' processes
    assert after[1] not in (None, before[1]), (before, after)  # replica 1 is a new process
    # ... the spare started before the fault, now in the replacement's sandbox: one of replica 1's cgroups (the
    # one its supervisor reads and removes), as the team's user like its peers, a PID namespace of its own, and
    # the priority of its peers again (it imported at nice 10)
    assert after[1] == spare, (spare, after)
    assert f"/{key}.0.1." in Path(f"/proc/{spare}/cgroup").read_text()
    (uid, ns, nice), (uid0, ns0, nice0) = ids(spare), ids(after[0])  # type: ignore[arg-type]
    assert uid == uid0 != "0" and ns not in (ns0, os.readlink("/proc/self/ns/pid")) and nice == nice0, (
        ids(spare), ids(after[0]))  # type: ignore[arg-type]
    done = srv.wait_state("peers", "Succeeded", 120, srv.activity)
    assert done["restarts"] == 0, "no full restart: the job went on in its attempt"
    rec = events(srv, "peers", "ReplicaRecovered")
    assert len(rec) == 1, rec
    d = rec[0]["data"]
    assert d["ranks"] == [1] and d["source"] in (0, 2) and d["step"] >= KILL_AT, d
    for r in (0, 2):  # every step 1..N once on the healthy ranks: no gap, nothing done twice
        assert [st for st, _ in steps(out, r)] == list(range(1, STEPS + 1)), f"rank {r}"
    # rank 1: its first process's steps, then the new process's from the step after the peers' state on. The kill
    # may land between a step's update and the line that logs it: the peers, whose all-reduce had rank 1's part,
    # then hold that step (done, not written), and that one step alone is missing from rank 1's lines
    full = list(range(1, STEPS + 1))
    assert [st for st, _ in steps(out, 1)] in (full, [st for st in full if st != d["step"]]), ("rank 1", d)
    assert d["reason"].startswith("replica 1 "), d  # why it was lost: the exit its executor saw
    gp = [e["data"] for e in events(srv, "peers", "Goodput")]
    kept_to_fault = [g for g in gp if g["cause"] == "restart"]
    assert len(kept_to_fault) == 1 and kept_to_fault[0]["kept"] > 0, gp  # the work before the fault was kept
    # only the recovery's own time is lost (how long that is depends on the machine's load: not compared here)
    assert all(g["lost"] == 0 for g in gp if g["cause"] != "restart"), gp
    wait_for(lambda: (reference / "final.pt").exists(), 120, "the undisturbed run to end")
    assert same_model(final(out), final(reference)), "the recovered run's model differs from the undisturbed one"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_replica_whose_node_fails_comes_back_on_the_spare_node_with_a_peers_state(
        srv: Server, reference: Path) -> None:
    job, out = submit(srv, "moved")
    placed = srv.wait_state("moved", "Running", 60, srv.activity)["placement"]
    spare = next(n["name"] for n in srv.api("GET", "/nodes").json()["nodes"] if n["name"] not in placed)
    wait_for(lambda: len(steps(out, 0)) >= KILL_AT, 60, f"rank 0 to reach step {KILL_AT}", srv.activity)
    before = pids(srv, job)
    assert all(before.values()), before
    assert srv.cli("node", "inject-fault", placed[1], "--kind", "xid").returncode == 0
    wait_for(lambda: events(srv, "moved", "ReplicaRecovered"), 120, "ReplicaRecovered", srv.activity)
    after = pids(srv, job)
    assert after[0] == before[0] and after[2] == before[2], (before, after)  # the healthy replicas' processes
    assert after[1] not in (None, before[1]), (before, after)
    (moved,) = events(srv, "moved", "ReplicaMoved")
    assert (moved["data"]["source"], moved["data"]["target"]) == (placed[1], spare), moved
    assert moved["data"]["reason"].startswith(f"node {placed[1]} fault: NvidiaErrorReboot"), moved
    done = srv.wait_state("moved", "Succeeded", 120, srv.activity)
    assert done["restarts"] == 0 and done["placement"] == [placed[0], spare, placed[2]], done
    assert not events(srv, "moved", "JobRestarting")
    (rec,) = events(srv, "moved", "ReplicaRecovered")
    d = rec["data"]
    assert d["ranks"] == [1] and d["source"] in (0, 2) and d["step"] >= KILL_AT, d
    for r in (0, 2):  # every step 1..N once on the healthy ranks: no gap, nothing done twice
        assert [st for st, _ in steps(out, r)] == list(range(1, STEPS + 1)), f"rank {r}"
    full = list(range(1, STEPS + 1))  # rank 1: as above, the step in flight at the stop may be missing from its lines
    assert [st for st, _ in steps(out, 1)] in (full, [st for st in full if st != d["step"]]), ("rank 1", d)
    launch = srv.home / "runs" / f"moved-{job['id']}" / "0" / "1" / "launch.json"
    assert json.loads(launch.read_text())["node"] == spare  # the replacement ran on the spare node
    wait_for(lambda: (reference / "final.pt").exists(), 120, "the undisturbed run to end")
    assert same_model(final(out), final(reference)), "the moved replica's run's model differs from the undisturbed one"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_replicas_lost_at_once_fall_back_to_the_checkpoint(srv: Server, reference: Path) -> None:
    job, out = submit(srv, "twice")
    kill_at(srv, job, out, [1, 2])
    done = srv.wait_state("twice", "Succeeded", 120, srv.activity)
    assert done["restarts"] == 1, "the job restarted whole, from its checkpoint"
    falls = [e["data"] for e in events(srv, "twice", "ReplicaRestarting") if e["data"].get("fallback")]
    assert falls and falls[0]["fallback"] == "checkpoint", falls
    assert not events(srv, "twice", "ReplicaRecovered")
    resumed = [st for st, _ in steps(out, 0)]
    assert resumed[-1] == STEPS and SAVE * (KILL_AT // SAVE) + 1 in resumed[KILL_AT:], "resumed at the checkpoint"
    wait_for(lambda: (reference / "final.pt").exists(), 120, "the undisturbed run to end")
    assert same_model(final(out), final(reference))
