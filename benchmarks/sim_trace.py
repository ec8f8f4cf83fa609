#!/usr/bin/env python3
"""A seeded job trace of any size for ``fairpod simulate``: by default a million jobs in one day on the
10,000-node spec of ``benchmarks/datacenter.py`` (``examples/datacenter/spec.yaml``).

Arrivals are one Poisson process over ``--hours`` (``--jobs`` of them). Each job belongs to a team drawn with
a log-normal weight per team (a few busy teams that borrow, many quiet ones that lend) and runs on the first
instance type of its team's quota. Shapes (nodes x accelerators per node): 1x1 30 %, 1x2 20 %, 1x4 20 %,
1x8 20 %, 2x8 7 %, 4x8 3 %. Durations are log-normal (sigma 1), at least 30 s and at most 6 h, with their
mean set so that the work offered is ``--load`` times the cluster's accelerators over the trace's span
(default 0.9). The same ``--seed`` and sizes give the same file, byte for byte.

    .venv/bin/python benchmarks/sim_trace.py -o /tmp/dc-1m.csv                 # 1,000,000 jobs, ~40 MB, ~10 s
    .venv/bin/python -m fairpod.cli.main simulate examples/datacenter/spec.yaml /tmp/dc-1m.csv -o /tmp/dc.json \\
        --progress

Columns: submit_time, team, duration, accelerators, nodes, instance_type (the fairpod trace format, see
docs/simulator.md).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ((1, 1, 30), (1, 2, 20), (1, 4, 20), (1, 8, 20), (2, 8, 7), (4, 8, 3))  # nodes, acc per node, %
MIN_DURATION, MAX_DURATION = 30.0, 6 * 3600.0
SIGMA = 1.0


def _fail(msg: str) -> None:
    print(f"sim_trace: {msg}", file=sys.stderr)
    raise SystemExit(2)


def teams_of(spec_path: Path) -> tuple[list[tuple[str, str]], int]:
    """(team, instance type it runs on) in spec order, and the cluster's accelerators."""
    from fairpod.model.spec import SpecError, load_spec

    try:
        spec = load_spec(spec_path)
    except SpecError as e:
        _fail(f"{spec_path}: {e.problems[0]}")
    except OSError as e:
        _fail(f"{spec_path}: cannot read: {e.strerror}")
    types = sorted({g.node_type for g in spec.cluster.instance_groups})
    catalog = spec.catalog()
    with_acc = [t for t in types if catalog[t].accelerators >= 8]
    if not with_acc:
        _fail(f"{spec_path}: no instance type with 8 or more accelerators (the trace's shapes need 8 per node)")
    out = []
    for i, t in enumerate(spec.teams):
        mine = [q.instance_type for q in t.quota if q.instance_type in with_acc]
        out.append((t.name, mine[0] if mine else with_acc[i % len(with_acc)]))
    if not out:
        _fail(f"{spec_path}: the spec has no teams")
    return out, sum(c.acc for c in spec.capacity().values())


def generate(spec_path: Path, jobs: int, hours: float, load: float, seed: int) -> list[str]:
    """The trace's lines, header first."""
    teams, capacity = teams_of(spec_path)
    rng = random.Random(seed)
    span = hours * 3600.0
    mean_acc = sum(n * a * p for n, a, p in SHAPES) / 100
    # the mean of a log-normal is exp(mu + sigma^2 / 2); the clamp moves it a little, which --load ignores
    mean_duration = load * capacity * span / (jobs * mean_acc)
    mu = math.log(mean_duration) - SIGMA * SIGMA / 2
    weights = [rng.lognormvariate(0.0, 1.0) for _ in teams]
    team_idx = rng.choices(range(len(teams)), weights=weights, k=jobs)
    shapes = rng.choices(range(len(SHAPES)), weights=[p for *_, p in SHAPES], k=jobs)
    rate = jobs / span
    lines = ["submit_time,team,duration,accelerators,nodes,instance_type"]
    t = 0.0
    for i in range(jobs):
        t += rng.expovariate(rate)
        d = min(MAX_DURATION, max(MIN_DURATION, rng.lognormvariate(mu, SIGMA)))
        team, itype = teams[team_idx[i]]
        n, a, _ = SHAPES[shapes[i]]
        lines.append(f"{t:.3f},{team},{d:.0f},{n * a},{n},{itype}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "datacenter" / "spec.yaml",
                    help="the cluster spec whose teams submit (default examples/datacenter/spec.yaml)")
    ap.add_argument("--jobs", type=int, default=1_000_000, help="jobs in the trace (default 1,000,000)")
    ap.add_argument("--hours", type=float, default=24.0, help="span of the arrivals in hours (default 24)")
    ap.add_argument("--load", type=float, default=0.9,
                    help="work offered / the cluster's accelerator-hours over the span (default 0.9)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    ap.add_argument("-o", "--output", type=Path, required=True, help="write the CSV trace here")
    a = ap.parse_args(argv)
    if a.jobs <= 0:
        _fail(f"--jobs must be > 0, got {a.jobs}")
    if not a.hours > 0 or not math.isfinite(a.hours):
        _fail(f"--hours must be > 0, got {a.hours:g}")
    if not a.load > 0 or not math.isfinite(a.load):
        _fail(f"--load must be > 0, got {a.load:g}")
    if not a.output.parent.is_dir():
        _fail(f"{a.output}: cannot write the trace: no such directory {str(a.output.parent)!r}")
    lines = generate(a.spec, a.jobs, a.hours, a.load, a.seed)
    try:
        a.output.write_text("\n".join(lines) + "\n")
    except OSError as e:
        _fail(f"{a.output}: cannot write the trace: {e.strerror}")
    print(f"{a.output}: {a.jobs:,} jobs over {a.hours:g} h from {a.spec} (seed {a.seed}, load {a.load:g})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
