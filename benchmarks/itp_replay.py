"""Replay the ten ITP traces (69,351 real GPU jobs over ~60 days) on a shared cluster.

Default: the code path of ``fairpod simulate examples/itp/spec.yaml ../shared/traces/itp`` (200 x p4d, where
little waits). ``--contended``: the same traces on 128 x p4d (1,024 GPUs), each team's quota 8 nodes plus a
share of the remaining 48 by GPU-hours, LendAndBorrow 100 %, FairShare (``fairpod.sim.contended``).
Prints the wall time, the CPU time of the whole process and of the engine alone, makespan, utilization,
lost work, the most preemptions of one job, Jain's index, and each team's wait. Target: <= 60 s wall.

Run: ``.venv/bin/python benchmarks/itp_replay.py [--contended [--weights quota]] [--compare private|fcfs|history] [--until S]
[--fair-share-history HALF_LIFE_S] [--profile FILE] [--decisions-out FILE] [-o report.json]``. ``--compare`` also replays on private
quotas / one global FCFS queue / under the other fair share (FairShare <-> FairShareHistory) and prints each
team's mean wait and JCT under each and rho = JCT shared / JCT private.
``--decisions-out FILE`` writes every decision the replay applies, one a line (cycle time, kind, job, nodes or
preemptor, reason), so that two versions of the engine can be compared with ``diff`` (use ``--until`` for a slice).
On a shared machine wall time depends on the load; the process CPU time is the steadier figure.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import time
from pathlib import Path
from typing import TextIO

from fairpod import governance
from fairpod.governance import Admit, Decision, Grow, Preempt, Shrink
from fairpod.model.spec import load_spec, parse_spec
from fairpod.sim.compare import compare
from fairpod.sim.contended import contended_spec
from fairpod.sim.report import build_report
from fairpod.sim.run import simulate
from fairpod.sim.trace import load_trace

ROOT = Path(__file__).resolve().parents[1]


def _h(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f} h"


def _log(f: TextIO, t: float, decisions: list[Decision]) -> None:
    """One line per decision: time, kind, job, then what the decision names (nodes, preemptor, reason)."""
    for d in decisions:
        if isinstance(d, Admit):
            rest = f"{','.join(d.nodes)} after={','.join(d.after)} borrowed={d.borrowed} {d.lenders} {d.reason}"
        elif isinstance(d, Preempt):
            rest = f"by={d.by} {d.kind} {d.reason}"
        elif isinstance(d, Grow | Shrink):
            rest = f"{','.join(d.nodes)} {d.reason}"
        else:
            rest = d.reason
        f.write(f"{t:.6f} {type(d).__name__} {d.job} {rest}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "traces" / "itp")
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "itp" / "spec.yaml")
    ap.add_argument("--contended", action="store_true", help="128 x p4d, quotas from the traces (see above)")
    ap.add_argument("--borrow-limit-applies", choices=["Always", "WhileOthersWait"], default="WhileOthersWait",
                    help="with --contended: when the teams' 100 %% borrow limit binds (default: while others wait)")
    ap.add_argument("--weights", choices=["equal", "quota"], default="equal",
                    help="with --contended: equal fair-share weights, or each team's quota in nodes "
                         "(examples/itp/contended-weighted.yaml)")
    ap.add_argument("--until", type=float, help="only jobs submitted in the first S seconds (a quick slice)")
    ap.add_argument("--profile", type=Path, help="write cProfile statistics of the simulation here")
    ap.add_argument("--compare", action="append", choices=["private", "fcfs", "history"],
                    help="also replay on private quotas / one global FCFS queue / under the other fair share "
                         "(FairShare <-> FairShareHistory) and print rho per team")
    ap.add_argument("--fair-share-history", type=float, metavar="HALF_LIFE_S",
                    help="replay under FairShareHistory with this half-life (seconds)")
    ap.add_argument("--decisions-out", type=Path,
                    help="write every applied decision here, one a line (to diff two engine versions)")
    ap.add_argument("-o", "--output", type=Path, help="also write the JSON report here")
    args = ap.parse_args()
    w0, c0 = time.perf_counter(), time.process_time()
    spec = (contended_spec(args.trace, borrow_limit_applies=args.borrow_limit_applies, weights=args.weights)
            if args.contended
            else load_spec(args.spec))
    if args.fair_share_history is not None:
        doc = spec.model_dump(mode="json")
        doc["policy"].update(idle_compute_allocation="FairShareHistory",
                             fair_share_half_life_seconds=args.fair_share_history)
        spec = parse_spec(doc)
    jobs = load_trace(args.trace, spec)
    if args.until is not None and jobs:
        first = jobs[0].submit
        jobs = [j for j in jobs if j.submit - first < args.until]
    prof = cProfile.Profile() if args.profile else None
    if prof:
        prof.enable()
    log = args.decisions_out.open("w", encoding="utf-8") if args.decisions_out else None
    res = simulate(spec, jobs, on_cycle=(lambda t, ds: _log(log, t, ds)) if log else None)
    if log:
        log.close()
    if prof:
        prof.disable()
        prof.dump_stats(args.profile)
    r = build_report(res)
    if args.compare:
        r["compare"] = compare(spec, jobs, args.compare, shared=res)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    if args.output:
        args.output.write_text(json.dumps(r, indent=2) + "\n")
    c, e = r["cluster"], r["engine"]
    print(f"cluster           {spec.cluster.name}: {c['capacity_accelerators']} GPUs")
    print(f"engine            {governance.engine_name()}" + ("" if governance.is_native() else
                                                         "   (python -m fairpod.native build: about 2x faster)"))
    print(f"jobs              {c['jobs']} ({c['completed']} completed, {len(r['never_ran'])} never ran)")
    print(f"wall              {wall:.1f} s   (target <= 60 s)")
    print(f"process cpu       {cpu:.1f} s")
    print(f"engine cpu        {e['cpu_seconds']:.1f} s   ({e['decisions']} decisions in {e['cycles']} cycles, "
          f"{e['decisions_per_cpu_second'] or 0:.0f} decisions/cpu-s)")
    print(f"makespan          {r['makespan']:.0f} s = {r['makespan'] / 86400:.1f} days")
    print(f"utilization       {c['utilization']:.1%} allocated, {c['useful_utilization']:.1%} useful")
    print(f"preemptions       {c['preemptions']} (most of one job: {c['max_preemptions_of_a_job']})")
    print(f"lost work         {c['lost_share']:.2%} of allocated GPU-seconds")
    print(f"goodput           {c['goodput'] or 0:.2%} of allocated GPU-seconds kept (by team: "
          + ", ".join(f"{n} {t['goodput']:.2%}" for n, t in r["teams"].items() if t["goodput"] is not None) + ")")
    print(f"jain              {r['fairness']['jain']}")
    print(f"{'team':10} {'jobs':>6} {'quota':>5} {'used':>6} {'wait mean':>9} {'wait p50':>9} {'wait p95':>9} "
          f"{'preempt':>7}")
    for name, t in r["teams"].items():
        print(f"{name:10} {t['jobs']:6d} {t['quota_accelerators']:5d} {t['used_share']:6.1%} "
              f"{_h(t['wait_mean']):>9} {_h(t['wait_p50']):>9} {_h(t['wait_p95']):>9} {t['preemptions']:7d}")
    if args.compare:
        print_compare(r["compare"])


def print_compare(cmp: dict) -> None:
    modes = [m for m in ("shared", "private", "fcfs", "history") if m in cmp]
    print("useful util.      " + ", ".join(f"{m} {cmp[m]['utilization']:.1%} (makespan "
                                             f"{cmp[m]['makespan'] / 86400:.1f} d)" for m in modes))
    print(f"{'team':10} " + " ".join(f"{m + ' wait':>13} {m + ' JCT':>12}" for m in modes) + f" {'rho':>6}")
    for name, t in cmp["teams"].items():
        cells = " ".join(f"{_h(t[m]['wait_mean']):>13} {_h(t[m]['jct_mean']):>12}" for m in modes)
        rho = t.get("rho")
        print(f"{name:10} {cells} {'-' if rho is None else f'{rho:.2f}':>6}")
    for line in cmp["verdict"]:
        print(line)


if __name__ == "__main__":
    main()
