"""Restart to the first admission with many waiting jobs in the store (issue 34), in-process.

A SQLite store in a temporary directory with the datacenter benchmark's spec (``--nodes`` nodes of 8
accelerators in 10 instance types, ``--teams`` teams; ``benchmarks/datacenter.py``) and ``--waiting`` pending
jobs of one node and 1-8 accelerators (stored as job arrays, one per team in turn). Every node but one is
cordoned, so the first turn admits a few jobs, not thousands. Then, as a restarted server does, a new control
plane (the timed executor: no processes) is built on the store and turns until it admits a job; the script
prints the time to build it (reading the jobs back, the engine's snapshot) and to the first admission, with the
process's CPU. The cache of built specs is emptied first (a restarted process has none).

``--running-nodes K``: before that, K nodes are left open to a first control plane, which admits and starts
what fits on them (jobs running for an hour), and is then dropped without a stop, as by ``kill -9``; the
restarted one (a new timed executor on the same runs directory: it adopts them from its journal) has those
running jobs to take in as well, and one more node open for its first admission.

Run: ``.venv/bin/python benchmarks/recovery.py [--nodes 1000] [--teams 500] [--waiting 100000] [--compare-reads 2]
[--running-nodes 0] [--postgres]``
(``--compare-reads``: the store's read of the unfinished jobs, with the specs validated again and built from the
stored dump, alternately; ``--profile FILE``: a cProfile of the restart).
Goal (issue 34): the first admission <= 30 s after the restart with 100,000 jobs waiting.

``--replica-fault [ARGS]``: instead, a replica of a DDP job killed at step k, and the job's way back by checkpoint
restart, restart in place and recovery from peers side by side (issue 49; ``benchmarks/replica_fault.py``, whose
arguments follow).
"""

from __future__ import annotations

import argparse
import cProfile
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from datacenter import TYPES, postgres, spec_yaml  # noqa: E402
from fairpod.executors.timed import TimedExecutor  # noqa: E402
from fairpod.model.jobs import JobSpec, resolve_job  # noqa: E402
from fairpod.model.spec import load_spec  # noqa: E402
from fairpod.server.nodes import sync_nodes  # noqa: E402
from fairpod.server.runtime.wiring import control_plane  # noqa: E402
from fairpod.store import Store  # noqa: E402
from fairpod.store import jobs as store_jobs  # noqa: E402


def main() -> None:
    if "--replica-fault" in sys.argv[1:]:
        import replica_fault

        return replica_fault.main([a for a in sys.argv[1:] if a != "--replica-fault"])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--teams", type=int, default=500)
    ap.add_argument("--waiting", type=int, default=100_000)
    ap.add_argument("--profile", type=Path, help="write a cProfile of the restart to this file")
    ap.add_argument("--running-nodes", type=int, default=0, metavar="K",
                    help="first fill K nodes with running jobs (a control plane dropped as by kill -9)")
    ap.add_argument("--compare-reads", type=int, default=0, metavar="N",
                    help="first read the unfinished jobs back N times each way, specs validated again (as before "
                         "store.jobs.stored_spec) and built from the stored dump, alternately, and print the CPU")
    ap.add_argument("--postgres", action="store_true",
                    help="a private PostgreSQL server (initdb/pg_ctl, as datacenter.py --postgres) instead of SQLite")
    args = ap.parse_args()
    if args.postgres:
        with postgres() as url:
            return run(args, url)
    return run(args, None)


def run(args: argparse.Namespace, db_url: str | None) -> None:
    rng = random.Random(34)
    with tempfile.TemporaryDirectory(prefix="fairpod-recovery-") as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(spec_yaml(args.nodes, args.teams))
        spec = load_spec(str(path))
        store = Store(db_url or f"sqlite:///{tmp}/fairpod.db")
        store.create_all()
        sync_nodes(store, spec)
        store.put_spec(spec)
        t0 = time.perf_counter()
        stored, array = 0, 1
        per_array = max(50, args.waiting // args.teams)  # one array per team in turn: every team has some
        while stored < args.waiting:
            k = min(per_array, 5000, args.waiting - stored)
            team = (array // per_array) % args.teams
            acc = rng.choice([1, 2, 4, 8])
            specs = [JobSpec(name=f"w{stored + i}", team=f"t{team:03d}", instance_type=f"dc{team % TYPES}",
                             accelerators=acc, command=["sleep", "3600"]) for i in range(k)]
            store.insert_tasks(specs, resolve_job(specs[0], spec), ["queued"] * k, array, None)
            stored += k
            array += k
        nodes = store.list_nodes()
        filled = min(args.running_nodes, len(nodes) - 1)  # nodes[:filled] take running jobs, nodes[filled] is open
        for nd in nodes[filled + 1:]:
            store.update_node(nd.name, {"cordoned": True})
        print(f"stored            {stored} waiting jobs, {len(nodes)} nodes ({len(nodes) - 1 - filled} cordoned) "
              f"in {time.perf_counter() - t0:.1f} s")
        if filled:
            store.update_node(nodes[filled].name, {"cordoned": True})  # open again for the restart's admission
            t1 = time.perf_counter()
            first = control_plane(store, TimedExecutor(Path(tmp) / "runs"), Path(tmp))
            while True:
                before = len(first.snap.running)
                first.reconcile_once()
                if len(first.snap.running) == before:
                    break
            print(f"running           {len(first.snap.running)} jobs started on {filled} nodes in "
                  f"{time.perf_counter() - t1:.1f} s; that control plane dropped as by kill -9")
            stored -= len(first.snap.running)
            del first
            store.update_node(nodes[filled].name, {"cordoned": False})
        built_from_store = store_jobs.stored_spec
        for _ in range(args.compare_reads):
            for how, fn in (("validated", JobSpec.model_validate), ("from the dump", built_from_store)):
                store_jobs.stored_spec = fn  # type: ignore[assignment]
                store_jobs._SPECS.clear()
                c = time.process_time()
                store.list_jobs(finished=False)
                print(f"read back         {stored} jobs, specs {how}: {time.process_time() - c:.2f} s CPU")
        store_jobs.stored_spec = built_from_store
        store_jobs._SPECS.clear()  # a restarted process has built none
        prof = cProfile.Profile() if args.profile else None
        if prof:
            prof.enable()
        cpu0, t0 = time.process_time(), time.perf_counter()
        cp = control_plane(store, TimedExecutor(Path(tmp) / "runs"), Path(tmp))
        built, built_cpu = time.perf_counter() - t0, time.process_time() - cpu0
        turns, adopted = 0, len(cp.snap.running)
        while len(cp.snap.running) == adopted and turns < 20:
            cp.reconcile_once()
            turns += 1
        first, first_cpu = time.perf_counter() - t0, time.process_time() - cpu0
        if prof:
            prof.disable()
            prof.dump_stats(args.profile)
        print(f"control plane     built in {built:.2f} s ({built_cpu:.2f} s CPU): {len(cp.snap.pending)} pending "
              f"in the engine's snapshot")
        print(f"first admission   {first:.2f} s after the restart ({first_cpu:.2f} s CPU, {turns} turn(s), "
              f"{len(cp.snap.running) - adopted} admitted; {adopted} running adopted) (goal <= 30 s)")
        cp.stop()
        store.close()


if __name__ == "__main__":
    main()
