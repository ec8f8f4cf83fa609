"""The cost of a reconcile turn that admits thousands of jobs (issue 34), in-process.

A SQLite store in a temporary directory with the datacenter benchmark's spec (``--nodes`` nodes of 8
accelerators, ``--teams`` teams; ``benchmarks/datacenter.py``) and one pending job of one node and 8
accelerators per node (stored as job arrays), then one turn of a control plane (the timed executor: no
processes) that admits them all, takes their slots, commits, starts them and records the starts. It prints the
turn's wall and CPU time per admission and how many times the runs were serialized for the store
(``Run.to_json``: each is a ``run_state`` written).

Run: ``.venv/bin/python benchmarks/admission_turn.py [--nodes 2000] [--teams 100] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from datacenter import TYPES  # noqa: E402
from fairpod.executors.timed import TimedExecutor  # noqa: E402
from fairpod.model.jobs import JobSpec, resolve_job  # noqa: E402
from fairpod.server import runs  # noqa: E402
from fairpod.server.runtime.wiring import control_plane  # noqa: E402
from turn_cost import datacenter_store  # noqa: E402


def one(nodes: int, teams: int) -> tuple[int, float, float, int]:
    """(admitted, turn wall s, turn CPU s, runs serialized) of one fresh store."""
    with tempfile.TemporaryDirectory(prefix="fairpod-admit-") as tmp:
        store, spec = datacenter_store(Path(tmp), nodes, teams)
        per_type = [nodes // TYPES + (1 if i < nodes % TYPES else 0) for i in range(TYPES)]
        array = 1
        for it, n in enumerate(per_type):  # one whole-node job per node, spread over the type's teams
            mine = [t for t in range(teams) if t % TYPES == it]
            specs = [JobSpec(name=f"a{it}-{i}", team=f"t{mine[i % len(mine)]:03d}", instance_type=f"dc{it}",
                             accelerators=8, command=["sleep", "600"]) for i in range(n)]
            for team in sorted({s.team for s in specs}):
                group = [s for s in specs if s.team == team]
                store.insert_tasks(group, resolve_job(group[0], spec), ["queued"] * len(group), array, None)
                array += len(group)
        cp = control_plane(store, TimedExecutor(Path(tmp) / "runs"), Path(tmp))
        serialized = 0
        real = runs.Run.to_json

        def counted(run: runs.Run) -> dict:
            nonlocal serialized
            serialized += 1
            return real(run)

        runs.Run.to_json = counted  # type: ignore[method-assign]
        try:
            cpu, t0 = time.process_time(), time.perf_counter()
            cp.reconcile_once()
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu
        finally:
            runs.Run.to_json = real  # type: ignore[method-assign]
        admitted = len(cp.snap.running)
        cp.stop()
        store.close()
        return admitted, wall, cpu, serialized


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--teams", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for _ in range(args.repeat):
        admitted, wall, cpu, serialized = one(args.nodes, args.teams)
        print(f"turn admitting {admitted} jobs: {wall:.2f} s wall, {cpu:.2f} s CPU "
              f"({1000 * cpu / max(admitted, 1):.2f} ms CPU per admission); runs serialized {serialized} "
              f"({serialized / max(admitted, 1):.1f} per admission)")


if __name__ == "__main__":
    main()
