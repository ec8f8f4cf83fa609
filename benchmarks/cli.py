#!/usr/bin/env python3
"""How fast the ``fairpod`` command is, against a bare interpreter start, on a live server on this machine.

1. Per command (start-job, list-jobs, get-job, status, --version): the median wall time of ``--runs`` runs of
   the real console script, each a new process, against the median of ``python -c pass`` with the same
   interpreter. Goal: start-job, list-jobs and get-job each at most 4 x the bare interpreter.
2. The loop: ``--loop`` (default 200) ``fairpod start-job ... -- true`` run one after another, as a shell loop
   does, each job asking for 1 of the 16 accelerator slots of the seed cluster, timed until the last job has
   finished ("drained"); then the same jobs as one job array (``start-job --array 0-199``: one request). ``benchmarks/vs_slurm.py --cli --with-slurm`` runs the same loop against Slurm's
   ``sbatch``.

Like ``pip install`` does, the benchmark first compiles fairpod's modules to bytecode (``compileall``), so a
command is timed as users run it, also where PYTHONDONTWRITEBYTECODE is set.

The server is a real ``fairpod up --foreground`` (the seed cluster: 4 nodes x 4 slots, teams john and smith)
with the local executor in a temporary home; it and everything it started are stopped by PID at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _live import (  # noqa: E402
    LiveServer,
    exit_on_sigterm,
    fetch_jobs,
    json_line,
    run_each,
    table,
    wait_all_finished,
)

ROOT = Path(__file__).resolve().parents[1]
SEED = (ROOT / "examples" / "seed" / "spec.yaml").read_text()
GOAL = 4.0  # x a bare interpreter start


def compile_fairpod() -> None:
    """Bytecode for every fairpod module, as an installed package has (an editable install may have none)."""
    import compileall

    import fairpod

    compileall.compile_dir(str(Path(fairpod.__file__).parent), quiet=1)


def fairpod_argv() -> list[str]:
    """The installed console script next to this interpreter (what users run), else ``python -m``."""
    script = Path(sys.executable).parent / "fairpod"
    return [str(script)] if script.exists() else [sys.executable, "-m", "fairpod.cli.main"]


def timed(argv: Sequence[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(list(argv), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.decode(errors='replace')}")
    return dt


def median_ms(argv: Sequence[str], env: dict[str, str], runs: int) -> float:
    timed(argv, env)  # warm the page cache
    return statistics.median(timed(argv, env) for _ in range(runs)) * 1000


def cli_loop(srv: LiveServer, n: int, clients: int = 1, prefix: str = "loop") -> dict:
    """``n`` start-job processes (``clients`` at a time; 1: a shell loop), then wait until every job ended."""
    env = {**srv.env, "FAIRPOD_TOKEN": srv.token}
    fp = fairpod_argv()

    def one(i: int) -> str | None:
        r = subprocess.run([*fp, "start-job", "--name", f"{prefix}-{i}", "--team", "john" if i % 2 else "smith",
                            "--accelerators", "1", "--grace-seconds", "1", "--", "true"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
        return r.stderr.decode(errors="replace").strip() if r.returncode != 0 else None

    t0 = time.time()
    error = run_each(n, clients, one)
    t_sub = time.time()
    if error is not None:
        raise RuntimeError(f"fairpod start-job failed: {error}")
    t_end = wait_all_finished(srv, 600, interval=0.1)
    recs = [j for j in fetch_jobs(srv) if j["name"].startswith(prefix + "-")]
    return {"wall_s": t_end - t0, "submit_s": t_sub - t0, "jobs": len(recs),
            "succeeded": sum(j["state"] == "Succeeded" for j in recs)}


def array_once(srv: LiveServer, n: int) -> dict:
    """The same n jobs as one job array: one start-job process, one request."""
    env = {**srv.env, "FAIRPOD_TOKEN": srv.token}
    t0 = time.time()
    timed([*fairpod_argv(), "start-job", "--name", "arr", "--team", "john", "--accelerators", "1", "--array",
           f"0-{n - 1}", "--grace-seconds", "1", "--", "true"], env)
    t_sub = time.time()
    t_end = wait_all_finished(srv, 600, interval=0.1)
    recs = [j for j in fetch_jobs(srv) if (j.get("array") or {}).get("name") == "arr"]
    return {"wall_s": t_end - t0, "submit_s": t_sub - t0, "jobs": len(recs),
            "succeeded": sum(j["state"] == "Succeeded" for j in recs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15, help="runs per command for the medians (default 15)")
    ap.add_argument("--loop", type=int, default=200, help="start-job calls in the loop (default 200; 0: skip)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary server home")
    a = ap.parse_args()
    if a.runs < 1 or a.loop < 0:
        ap.error("--runs must be at least 1 and --loop at least 0")
    exit_on_sigterm()
    compile_fairpod()
    load = os.getloadavg()[0]
    print(f"cli: medians of {a.runs} runs per command, then {a.loop} start-job calls in a loop; load average "
          f"{load:.1f} on {os.cpu_count()} cores", flush=True)
    out: dict = {"benchmark": "cli", "runs": a.runs, "load_before": load}
    with LiveServer(SEED, keep=a.keep) as srv:
        env = {**srv.env, "FAIRPOD_TOKEN": srv.token}
        fp = fairpod_argv()
        bare = median_ms([sys.executable, "-c", "pass"], env, a.runs)
        timed([*fp, "start-job", "--name", "probe", "--team", "john", "--accelerators", "1", "--", "true"], env)
        seq = iter(range(10**6))
        commands = {
            "start-job": lambda: [*fp, "start-job", "--name", f"s-{next(seq)}", "--team", "john", "--accelerators",
                                  "1", "--grace-seconds", "1", "--", "true"],
            "list-jobs": lambda: [*fp, "list-jobs"],
            "get-job": lambda: [*fp, "get-job", "probe"],
            "status": lambda: [*fp, "status"],
            "--version": lambda: [*fp, "--version"],
        }
        rows = [("python -c pass (bare interpreter)", f"{bare:7.1f} ms")]
        out["bare_ms"] = bare
        ok = True
        for name, argv in commands.items():
            timed(argv(), env)
            ms = statistics.median(timed(argv(), env) for _ in range(a.runs)) * 1000
            ratio = ms / bare
            goal = name in ("start-job", "list-jobs", "get-job")
            ok &= not goal or ratio <= GOAL
            rows.append((f"fairpod {name}", f"{ms:7.1f} ms  {ratio:4.1f} x bare" +
                         (f"  (goal <= {GOAL:g} x: {'met' if ratio <= GOAL else 'MISSED'})" if goal else "")))
            out[f"{name.strip('-')}_ms"] = ms
        if a.loop:
            wait_all_finished(srv, 120, interval=0.1)
            lp = cli_loop(srv, a.loop)
            rows.append((f"{a.loop} x fairpod start-job, one after another, drained",
                         f"{lp['wall_s']:7.2f} s  ({lp['succeeded']}/{lp['jobs']} Succeeded; submitted in "
                         f"{lp['submit_s']:.2f} s)"))
            out.update(loop=a.loop, loop_wall_s=lp["wall_s"], loop_submit_s=lp["submit_s"],
                       loop_succeeded=lp["succeeded"])
            ok &= lp["succeeded"] == lp["jobs"] == a.loop
            ar = array_once(srv, a.loop)
            rows.append((f"1 x fairpod start-job --array 0-{a.loop - 1}, drained",
                         f"{ar['wall_s']:7.2f} s  ({ar['succeeded']}/{ar['jobs']} Succeeded; submitted in "
                         f"{ar['submit_s']:.2f} s)"))
            out.update(array_wall_s=ar["wall_s"], array_submit_s=ar["submit_s"], array_succeeded=ar["succeeded"])
            ok &= ar["succeeded"] == ar["jobs"] == a.loop
    print(table(rows))
    print(json_line(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
