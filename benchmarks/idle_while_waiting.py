"""Where does capacity sit idle while jobs wait? A replay that attributes idle accelerator-seconds to a reason.

After a scheduling cycle, idle accelerators are put in one bucket until the next look (at most every
``--every`` seconds of trace time, default 300 s, so that the look costs little next to the engine):
- "no job waits": nothing is pending;
- "no waiting job fits the free nodes": every team's first job of each shape needs more than the free room
  of the nodes (a gang waits for whole nodes);
- otherwise the engine's reason for the smallest first-of-its-shape job that *would* fit the free nodes: the
  rule that keeps it from the idle capacity (a protected job that may not borrow, a borrow limit, a job held
  back behind a starving job of its team, capacity held for a starving borrower, ...).
The buckets are shares of the whole cluster's accelerator-seconds over the makespan, so the rule buckets add
up to the gap between allocated utilization and what the cluster could have run at once.

Run: ``.venv/bin/python benchmarks/idle_while_waiting.py [--contended [--weights quota]] [--spec YAML] [--fcfs] [--until S] [--top N]``
(the contended ITP replay takes as long as ``itp_replay.py --contended``). ``--fcfs``: the same trace under
one global FCFS queue (the bound ``fairpod simulate --compare fcfs`` reports).
"""

from __future__ import annotations

import argparse
import re
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from fairpod.governance import Decision, Snapshot
from fairpod.model.spec import load_spec
from fairpod.sim.compare import FCFS_TEAM, fcfs_spec
from fairpod.sim.contended import contended_spec
from fairpod.sim.report import build_report
from fairpod.sim.run import Simulation
from fairpod.sim.trace import load_trace

ROOT = Path(__file__).resolve().parents[1]


def _kind(reason: str) -> str:
    """A reason without its job ids, team names and numbers, so that alike reasons share a bucket."""
    r = re.sub(r"\bjob [\w.-]*[\d-][\w.-]*", "job J", reason)
    r = re.sub(r"\bteam [\w.-]+('s)?", lambda m: "team T" + (m.group(1) or ""), r)
    r = re.sub(r"\b\d+(\.\d+)?\b", "N", r)
    return r[:110]


class IdleLedger:
    """Told each cycle of a replay (``Simulation(on_cycle=...)``), it attributes the idle accelerators of
    ``snap`` to a reason (see the module doc)."""

    def __init__(self, snap: Snapshot, every: float) -> None:
        self.snap = snap
        self.every = every
        self.idle: Counter[str] = Counter()
        self._t: float | None = None  # when the buckets in _now began
        self._looked = -float("inf")
        self._now: dict[str, int] = {}

    def __call__(self, t: float, _decisions: list[Decision]) -> None:
        if self._t is not None:
            for k, v in self._now.items():
                self.idle[k] += v * (t - self._t)
        self._t = t
        if t - self._looked >= self.every:
            self._looked = t
            self._now = self._look()

    def _look(self) -> dict[str, int]:
        snap = self.snap
        nodes = [n for n in snap.nodes.values() if n.schedulable]
        free = sum(n.free[0] for n in nodes)
        if free <= 0:
            return {}
        if not snap.pending:
            return {"no job waits": free}
        best = None
        for team in snap.teams.values():
            for w in team.queue.heads():
                r = w.req
                room = sum(1 for n in nodes if n.free[0] >= r.acc and n.free[1] >= r.mcpu and n.free[2] >= r.mib)
                if room >= w.n and (best is None or w.total.acc < best.total.acc):
                    best = w
        if best is None:
            return {"no waiting job fits the free nodes": free}
        return {_kind(best.reason) or "(no reason yet)": free}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=ROOT.parent / "shared" / "traces" / "itp")
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "itp" / "spec.yaml")
    ap.add_argument("--contended", action="store_true", help="128 x p4d, quotas from the traces (itp_replay.py)")
    ap.add_argument("--weights", choices=["equal", "quota"], default="equal",
                    help="with --contended: fair-share weights equal, or each team's quota in nodes")
    ap.add_argument("--fcfs", action="store_true", help="one global FCFS queue instead of the teams")
    ap.add_argument("--until", type=float, help="only jobs submitted in the first S seconds (a quick slice)")
    ap.add_argument("--every", type=float, default=300.0, help="look at most every S seconds of trace time")
    ap.add_argument("--top", type=int, default=12, help="print the N largest buckets")
    args = ap.parse_args()
    w0 = time.perf_counter()
    spec = contended_spec(args.trace, weights=args.weights) if args.contended else load_spec(args.spec)
    jobs = load_trace(args.trace, spec)
    if args.until is not None and jobs:
        jobs = [j for j in jobs if j.submit - jobs[0].submit < args.until]
    if args.fcfs:
        spec = fcfs_spec(spec)
        jobs = [replace(j, team=FCFS_TEAM) for j in jobs]
    sim = Simulation(spec, jobs)
    ledger = sim.on_cycle = IdleLedger(sim.snap, args.every)
    res = sim.run()
    c = build_report(res)["cluster"]
    total = res.capacity * res.makespan
    print(f"cluster      {spec.cluster.name}{' (one global FCFS queue)' if args.fcfs else ''}: "
          f"{res.capacity} GPUs, {len(jobs)} jobs, makespan {res.makespan / 86400:.1f} days "
          f"({time.perf_counter() - w0:.0f} s wall)")
    print(f"utilization  {c['utilization']:.1%} allocated, {c['useful_utilization']:.1%} useful; "
          f"idle {1 - c['utilization']:.1%}, of which:")
    for kind, s in ledger.idle.most_common(args.top):
        print(f"  {s / total if total else 0:6.2%}  {kind}")


if __name__ == "__main__":
    main()
