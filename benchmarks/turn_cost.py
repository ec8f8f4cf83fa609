"""What one reconcile turn costs at datacenter size while submits arrive (issue 47), in-process.

A SQLite store in a temporary directory with the datacenter benchmark's spec (``--nodes`` nodes of 8
accelerators in 10 instance types, ``--teams`` teams; ``benchmarks/datacenter.py``) and ``--waiting`` pending
jobs (the datacenter benchmark's shapes, each array one duration between ``--min-duration`` and
``--max-duration`` s), a control plane on the timed executor (no processes: each job waits out its duration),
turns until the cluster is full, then ``--turns`` measured turns: before each, ``--rate`` submits a second for
as long as the last turn took plus ``--pause`` s are made through the control plane's submit (what ``POST /jobs``
calls), and jobs end as their durations run out. It prints the measured turns' p50 / p99 / max wall and CPU, and
how much of them the engine's cycle took, and what publishing for reads took at each turn's end
(``core.published``: the views read lately, wall; ``core.facts``: the facts of single jobs and nodes, CPU);
``--scrape`` reads ``/metrics``' engine figures and the cluster view once before the measured turns, as a scraper
and the dashboard do, so the turns publish those too (``--profile FILE``: a cProfile of the measured turns only).
``--api-workers``: the submits are committed by an API worker's core (``WorkerCore`` on the same store, what
``fairpod up --api-workers N`` runs in its workers) and the control plane takes them in at each turn
(``core.foreign``), as with ``fairpod up --api-workers``; it prints what taking them in cost (CPU per job).

Run: ``.venv/bin/python benchmarks/turn_cost.py [--nodes 2000] [--teams 500] [--waiting 20000] [--turns 40]
[--rate 1000] [--scrape] [--api-workers] [--profile FILE]``.
Goal (issue 47): turn p99 <= 0.5 s at 10,000 nodes while 1,000 submits/s arrive.
"""

from __future__ import annotations

import argparse
import cProfile
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from datacenter import SHAPES, TYPES, spec_yaml  # noqa: E402
from fairpod.executors.base import Traits  # noqa: E402
from fairpod.executors.timed import TimedExecutor  # noqa: E402
from fairpod.model.jobs import JobSpec, resolve_job  # noqa: E402
from fairpod.model.spec import ClusterSpec, load_spec  # noqa: E402
from fairpod.server.core import Foreign, WorkerCore  # noqa: E402
from fairpod.server.nodes import sync_nodes  # noqa: E402
from fairpod.server.runtime import heap  # noqa: E402
from fairpod.server.runtime.wiring import control_plane  # noqa: E402
from fairpod.store import Store  # noqa: E402


def job(name: str, team: int, teams: int, shape: tuple[int, int], seconds: float) -> JobSpec:
    nodes, acc = shape
    return JobSpec(name=name, team=f"t{team % teams:03d}", instance_type=f"dc{team % TYPES}", nodes=nodes,
                   accelerators=acc, command=["sleep", f"{seconds:g}"],
                   env={"FAIRPOD_BENCH_DURATION": f"{seconds:g}"}, termination_grace_seconds=1)


def datacenter_store(tmp: Path, nodes: int, teams: int) -> tuple[Store, ClusterSpec]:
    """A SQLite store in ``tmp`` holding the datacenter benchmark's spec (``nodes`` nodes, ``teams`` teams) and its
    nodes; the spec."""
    path = tmp / "spec.yaml"
    path.write_text(spec_yaml(nodes, teams))
    spec = load_spec(str(path))
    store = Store(f"sqlite:///{tmp}/fairpod.db")
    store.create_all()
    sync_nodes(store, spec)
    store.put_spec(spec)
    return store, spec


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--teams", type=int, default=500)
    ap.add_argument("--waiting", type=int, default=20_000)
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--rate", type=float, default=1000.0, help="submits per second of turn (default 1,000)")
    ap.add_argument("--pause", type=float, default=0.05, help="seconds between turns besides the submits")
    ap.add_argument("--min-duration", type=float, default=30.0)
    ap.add_argument("--max-duration", type=float, default=600.0)
    ap.add_argument("--profile", type=Path, help="write a cProfile of the measured turns to this file")
    ap.add_argument("--scrape", action="store_true",
                    help="read /metrics' engine figures and the cluster view once, so every turn publishes them")
    ap.add_argument("--api-workers", action="store_true",
                    help="submits committed by an API worker's core, taken in by the control plane at each turn")
    args = ap.parse_args()
    rng = random.Random(47)
    durations = (args.min_duration, args.max_duration)
    with tempfile.TemporaryDirectory(prefix="fairpod-turns-") as tmp:
        store, spec = datacenter_store(Path(tmp), args.nodes, args.teams)
        running_guess = args.nodes * 8 // 3  # ~3 accelerators a job on average: fill the cluster too
        stored, array, t0 = 0, 1, time.perf_counter()
        per_array = 50
        while stored < args.waiting + running_guess:
            team = (array // per_array) % args.teams
            shape = SHAPES[(team + array) % len(SHAPES)]
            secs = rng.uniform(*durations)
            specs = [job(f"w{stored + i}", team, args.teams, shape, secs) for i in range(per_array)]
            store.insert_tasks(specs, resolve_job(specs[0], spec), ["queued"] * per_array, array, None)
            stored += per_array
            array += per_array
        print(f"stored            {stored} jobs in {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        heap.watch()  # the server's heap, as fairpod up keeps it (runtime.wiring.build(own_heap=True))
        with heap.building():
            cp = control_plane(store, TimedExecutor(Path(tmp) / "runs"), Path(tmp))
        heap.settle()
        cp.keepers.after.append(heap.Heap().tick)
        submitter: Any = cp
        foreign_cpu: list[float] = []  # CPU of each turn's take (--api-workers)
        if args.api_workers:  # as runtime.wiring.build does for fairpod up --api-workers
            foreign = Foreign(store.last_seq())

            def take(cp: Any) -> None:
                c0 = time.process_time()
                foreign.take(cp)
                foreign_cpu.append(time.process_time() - c0)

            cp.keepers.before.insert(0, take)
            submitter = WorkerCore(store, Path(tmp), Traits.of(cp.executor), None)
        print(f"control plane     built in {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        while True:
            before = len(cp.snap.running)
            cp.reconcile_once()
            if len(cp.snap.running) - before < 10:
                break
        print(f"filled            {len(cp.snap.running)} running, {len(cp.snap.pending)} pending in "
              f"{time.perf_counter() - t0:.1f} s")
        if args.scrape:  # what a scraper and the dashboard read: each turn publishes them from now on
            from fairpod.server.api.metrics import engine_figures
            from fairpod.server.api.views import cluster_view

            cp.engine_view(("metrics",), lambda snap: engine_figures(cp, snap))
            cluster_view(cp)
        heap.settle()
        gc0 = sum(heap.PAUSES.seconds)
        prof = cProfile.Profile() if args.profile else None
        walls: list[float] = []
        cpus: list[float] = []
        engine: list[float] = []
        publish: list[float] = []
        facts: list[float] = []
        submitted, admitted, last = 0, 0, 0.2
        foreign_cpu.clear()
        taken0 = foreign.taken if args.api_workers else 0
        n = 0
        for _ in range(args.turns):
            specs = []
            for _ in range(int(args.rate * (last + args.pause))):
                team = rng.randrange(args.teams)
                specs.append(job(f"s{n}", team, args.teams, SHAPES[n % len(SHAPES)], rng.uniform(*durations)))
                n += 1
            if args.api_workers:  # from 32 threads, as a worker's clients: its group commit writes them together
                with ThreadPoolExecutor(32) as pool:
                    list(pool.map(lambda js: submitter.submit(js, "bench"), specs))
            else:
                for js in specs:
                    submitter.submit(js, "bench")
            submitted = n
            time.sleep(args.pause)
            before = cp.cycles
            run0 = len(cp.snap.running)
            if prof:
                prof.enable()
            c0, w0 = time.process_time(), time.perf_counter()
            cp.reconcile_once()
            last, cpu = time.perf_counter() - w0, time.process_time() - c0
            if prof:
                prof.disable()
            walls.append(last)
            cpus.append(cpu)
            engine.append(cp.cycle_seconds if cp.cycles > before else 0.0)
            publish.append(cp.published.refresh_seconds)
            facts.append(getattr(cp, "facts_seconds", 0.0))
            admitted += max(0, len(cp.snap.running) - run0)
        if prof:
            prof.dump_stats(args.profile)
        print(f"measured          {len(walls)} turns, {submitted} submits between them, "
              f"{len(cp.snap.running)} running, {len(cp.snap.pending)} pending at the end")
        print(f"turn wall p50 / p99 / max   {pct(walls, .5):.3f} / {pct(walls, .99):.3f} / {max(walls):.3f} s "
              f"(goal p99 <= 0.5 s)")
        print(f"turn CPU  p50 / p99 / max   {pct(cpus, .5):.3f} / {pct(cpus, .99):.3f} / {max(cpus):.3f} s")
        print(f"cycle collector             {sum(heap.PAUSES.seconds) - gc0:.2f} s in the measured turns and between them")
        print(f"engine cycle p50 / max      {pct(engine, .5):.3f} / {max(engine):.3f} s "
              f"({100 * sum(engine) / max(sum(walls), 1e-9):.0f} % of the turns)")
        print(f"published views p50/p99/max {pct(publish, .5) * 1000:.1f} / {pct(publish, .99) * 1000:.1f} / "
              f"{max(publish) * 1000:.1f} ms wall (the views read lately, at each turn's end)")
        print(f"published facts p50/p99/max {pct(facts, .5) * 1000:.1f} / {pct(facts, .99) * 1000:.1f} / "
              f"{max(facts) * 1000:.1f} ms CPU (one job's or node's facts, at each turn's end)")
        if args.api_workers:
            taken = foreign.taken - taken0
            print(f"taken in (foreign)          {taken} jobs the worker committed, {sum(foreign_cpu):.2f} s CPU: "
                  f"{1000 * sum(foreign_cpu) / max(taken, 1):.3f} ms per job")
        cp.stop()
        store.close()


if __name__ == "__main__":
    main()
