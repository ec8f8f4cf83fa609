"""Reading usage over a window of a busy cluster: every sample integrated, against the rollups.

A busy cluster changes its usage at every turn, so the usage sampler writes a sample every 2 s, a row per team
and instance type and per instance group. This writes ``--hours`` of such samples for ``--teams`` teams into a
SQLite file, rolls them up as the sampler does (``fairpod.server.accounting.rollups.roll_up``, every 30 s of samples), and
prints per dashboard window the seconds of reading and integrating the samples the store still has of it (what
the dashboard, the usage report and the budgets did with every sample) and of reading the rollups (what they do
now), the cost of one roll-up pass, and the rows the store keeps (samples are kept 2 h after their roll-up).

    .venv/bin/python benchmarks/usage_history.py                 # 500 teams, 2 hours
    .venv/bin/python benchmarks/usage_history.py --teams 50 --hours 0.5
"""

from __future__ import annotations

import argparse
import math
import random
import tempfile
import time
from pathlib import Path

from sqlalchemy import func, select

from fairpod.server.accounting.rollups import integrals, roll_up
from fairpod.server.accounting.usage import WINDOWS
from fairpod.server.accounting.usage_math import integrate
from fairpod.store import Store
from fairpod.store.tables import UsageRollupRow, UsageSampleRow
from fairpod.store.usage import GROUP, TEAM, UsageSample

T0 = 1_800_000_000.0


def sample(rnd: random.Random, teams: int, t: float) -> list[UsageSample]:
    out = [UsageSample(GROUP, f"g{k}", f"type{k}", acc=rnd.randint(0, 8000), cap_acc=8000, nodes=1000,
                       healthy_nodes=1000, ts=t) for k in range(10)]
    out += [UsageSample(TEAM, f"team{k:03d}", f"type{k % 10}", acc=rnd.randint(0, 32), cap_acc=16,
                        borrowed=rnd.randint(0, 16), ts=t) for k in range(teams)]
    return out


def count(store: Store, table: type) -> int:
    with store.tx() as t, t._session(False) as s:
        return int(s.scalar(select(func.count()).select_from(table)) or 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--teams", type=int, default=500)
    ap.add_argument("--hours", type=float, default=2.0, help="of samples, one every --interval seconds")
    ap.add_argument("--interval", type=float, default=2.0)
    a = ap.parse_args()
    if not (0 < a.teams <= 5000 and 0 < a.hours <= 48 and a.interval >= 0.5):
        ap.error("--teams 1..5000, --hours up to 48, --interval at least 0.5")
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{Path(tmp) / 'fairpod.db'}", synchronous="OFF")
        store.create_all()
        rnd = random.Random(7)
        n = int(a.hours * 3600 / a.interval)
        written = 0
        t_write = t_roll = 0.0
        passes = 0
        last_roll = -math.inf
        for i in range(n):
            ts = T0 + i * a.interval
            rows = sample(rnd, a.teams, ts)
            written += len(rows)
            c = time.perf_counter()
            store.append_usage(ts, rows)
            t_write += time.perf_counter() - c
            if ts - last_roll >= 30:
                last_roll = ts
                c = time.perf_counter()
                roll_up(store, ts)
                t_roll += time.perf_counter() - c
                passes += 1
        now = T0 + n * a.interval
        print(f"samples: {n} x {a.teams + 10} series over {a.hours:g} h; writing one took {1000 * t_write / n:.1f} ms, "
              f"a roll-up pass {1000 * t_roll / max(passes, 1):.1f} ms ({passes} passes)")
        print(f"kept: {count(store, UsageSampleRow):,} sample rows (of {written:,} written), "
              f"{count(store, UsageRollupRow):,} rollup rows")
        for w, (span, nb) in WINDOWS.items():
            step = span / nb
            end = math.ceil(now / step) * step
            edges = [end - span + i * step for i in range(nb + 1)]
            c = time.perf_counter()
            rows = store.list_usage(edges[0], now)  # the samples the store still has of the window
            integrate(rows, edges, now)
            old = time.perf_counter() - c
            c = time.perf_counter()
            integrals(store, edges, now)
            new = time.perf_counter() - c
            print(f"window {w:>3}: the samples kept ({len(rows):,} rows) read and integrated in {old:.2f} s; "
                  f"the rollups and the last samples in {new:.3f} s")
        store.close()


if __name__ == "__main__":
    main()
