"""``fairpod simulate --cadence SECONDS``: decide as the live control plane's loop does, one cycle for everything
since the last one, at most every SECONDS of simulated time; the default decides after every event."""

from __future__ import annotations

import json
import random
import subprocess
import sys

from fairpod.model.spec import load_spec
from fairpod.sim.run import simulate
from fairpod.sim.trace import load_trace

from .helpers import SEED_SPEC, SEED_TRACE, write_trace

CMD = [sys.executable, "-m", "fairpod.cli.main", "simulate", str(SEED_SPEC), str(SEED_TRACE)]


def _busy(tmp_path):
    rng = random.Random(5)
    rows, t = [], 0.0
    for _ in range(200):
        t += rng.expovariate(1 / 3)
        rows.append(f"{t:.3f},{rng.choice(['john', 'smith'])},{rng.randint(20, 300)},{rng.choice([1, 2, 4])},1")
    return write_trace(tmp_path, rows, header="submit_time,team,duration,accelerators,nodes")


def test_at_a_cadence_cycles_are_that_far_apart_and_jobs_start_at_them(tmp_path):
    spec = load_spec(SEED_SPEC)
    jobs = load_trace(_busy(tmp_path), spec)
    times: list[float] = []
    each = simulate(spec, jobs)
    paced = simulate(spec, load_trace(_busy(tmp_path), spec), cadence=10.0,
                     on_cycle=lambda t, ds: times.append(t))
    assert all(b - a >= 10.0 - 1e-6 for a, b in zip(times, times[1:], strict=False))
    assert paced.cycles == len(times) < each.cycles * 0.7
    assert {sj.first_start for sj in paced.jobs} <= set(times)  # started by a cycle, at its time
    assert sum(sj.end is not None for sj in paced.jobs) == sum(sj.end is not None for sj in each.jobs) == 200
    # a job ends at its own time (not at a cycle's): its run is exactly its duration
    assert all(abs(sj.end - sj.first_start - sj.job.duration) < 1e-6 for sj in paced.jobs if not sj.preemptions)


def test_an_arrival_between_cycles_is_decided_at_the_next_one(tmp_path):
    rows = ["0,john,100,4,1", "0.3,smith,100,4,1", "25,smith,50,4,1"]
    trace = write_trace(tmp_path, rows, header="submit_time,team,duration,accelerators,nodes")
    spec = load_spec(SEED_SPEC)
    starts = {sj.job.team + str(sj.job.submit): sj.first_start for sj in simulate(spec, load_trace(trace, spec),
                                                                                 cadence=1.0).jobs}
    assert starts == {"john0.0": 0.0, "smith0.3": 1.0, "smith25.0": 25.0}  # 25: a second after the last cycle
    each = {sj.job.team + str(sj.job.submit): sj.first_start for sj in simulate(spec, load_trace(trace, spec)).jobs}
    assert each == {"john0.0": 0.0, "smith0.3": 0.3, "smith25.0": 25.0}


def test_the_default_is_a_cycle_after_every_event_and_the_flag_is_in_help():
    default = subprocess.run(CMD, capture_output=True, text=True, timeout=120)
    zero = subprocess.run([*CMD, "--cadence", "0"], capture_output=True, text=True, timeout=120)
    assert default.returncode == zero.returncode == 0
    reports = [json.loads(p.stdout) for p in (default, zero)]
    for r in reports:  # the engine's CPU time differs from run to run; its counts do not
        for timed in ("cpu_seconds", "decisions_per_cpu_second"):
            r["engine"].pop(timed)
    assert reports[0] == reports[1] and reports[0]["engine"]["cycles"] == 6
    assert reports[0]["cluster"]["completed"] == 3
    helped = subprocess.run([*CMD[:4], "--help"], capture_output=True, text=True, timeout=120).stdout
    assert "--cadence SECONDS" in helped and "live control plane" in helped


def test_a_bad_cadence_is_one_line_in_the_flags_words():
    for bad, words in (("-1", "must be 0 or more seconds"), ("soon", "not a number of seconds"),
                       ("inf", "must be 0 or more seconds"), ("nan", "must be 0 or more seconds")):
        p = subprocess.run([*CMD, "--cadence", bad], capture_output=True, text=True, timeout=120)
        assert p.returncode != 0 and p.stdout == ""
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and f"--cadence {bad}: {words}" in lines[0] and "Traceback" not in p.stderr
