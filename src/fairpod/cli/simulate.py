"""``fairpod simulate SPEC TRACE -o report.json``: replay a job trace through the governance engine."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import TextIO

from fairpod.cli.errors import CliError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="replay a job trace on a cluster spec and report utilization, waits and fairness",
        description="Replay a job trace (CSV: submit_time, team, duration, accelerators, and optionally nodes, "
        "instance_type, priority, name, checkpoint_interval, min_runtime, required_topology, preferred_topology, user, "
        "min_nodes (an elastic job: min_nodes..nodes replicas; the report counts its shrinks and grows); "
        "or a directory of ITP files "
        "job_id,submission_time,duration,num_gpu, one team per file) through the governance engine on a "
        "virtual clock, and write a JSON report.",
    )
    p.add_argument("spec", help="path to the cluster spec (YAML)")
    p.add_argument("trace", help="trace CSV file, or a directory of CSV files")
    p.add_argument("-o", "--output", metavar="REPORT", help="write the JSON report here (default: stdout)")
    p.add_argument("--plot", metavar="PNG", help="also draw accelerators in use per team over time")
    p.add_argument("--timeline", action="store_true", help="add allocation per team at every change")
    p.add_argument("--jobs", action="store_true", help="add each job's submit, start, end, wait, preemptions")
    p.add_argument("--compare", action="append", choices=["private", "fcfs", "history"],
                   help="also replay with every team on its private quota (private), one global FCFS queue "
                   "(fcfs) or the other fair share, FairShare <-> FairShareHistory (history), and report per team "
                   "wait, completion time and rho = JCT shared / JCT private")
    p.add_argument("--cadence", metavar="SECONDS", default="0",
                   help="decide at most every SECONDS of simulated time, as the live control plane's loop turns "
                   "(one cycle for everything that arrived or ended since the last one; events still happen at "
                   "their own times, what they free is given out at the next cycle): far fewer cycles on a busy "
                   "trace, waits up to SECONDS longer; default 0: a cycle after every event")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show a progress line on stderr while it runs (simulated time, jobs completed, wall time, "
                   "rate); default: only when stderr is a terminal")
    p.set_defaults(func=run)


class Progress:
    """The progress line: on a terminal one line rewritten in place every second, else a line every 10 s; a last
    line when the replay ends. Only ever on ``out`` (stderr), never mixed into the report."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self.every = 1.0 if self.tty else 10.0
        self.t0 = self.last = time.monotonic()
        self.state: tuple[float, int, int] | None = None
        self.open = False  # a line written on the terminal without its newline

    def __call__(self, t: float, done: int, total: int) -> None:
        self.state = (t, done, total)
        now = time.monotonic()
        final = done == total
        if now - self.last < self.every and not final:
            return
        self.last = now
        self._write(now, t, done, total, final)

    def close(self) -> None:
        """After the replay: the last state, if it was not shown, and the terminal's line ended."""
        if self.state is not None and self.state[1] != self.state[2]:
            self._write(time.monotonic(), *self.state, True)
        elif self.open:
            self.out.write("\n")
            self.out.flush()
        self.open = False

    def _write(self, now: float, t: float, done: int, total: int, final: bool) -> None:
        wall = now - self.t0
        rate = done / wall if wall > 0 else 0.0
        line = (f"simulate: {t:,.0f} s simulated, {done:,}/{total:,} jobs completed, {wall:,.1f} s wall, "
                f"{rate:,.0f} jobs/s")
        if self.tty:
            self.out.write("\r\x1b[K" + line + ("\n" if final else ""))
            self.open = not final
        else:
            self.out.write(line + "\n")
        self.out.flush()


def _summary(r: dict) -> str:
    c = r["cluster"]
    e = r["engine"]
    jain = r["fairness"]["jain"]
    return (f"{c['completed']}/{c['jobs']} jobs completed, makespan {r['makespan']:,.0f} s, utilization "
            f"{c['utilization']:.1%}, goodput {_pct(c.get('goodput'))}, {c['preemptions']} preemption(s), jain {jain if jain is not None else '-'}, "
            f"engine {e['cpu_seconds']:.3f} CPU s for {e['decisions']} decisions"
            f" ({'native' if e.get('native') else 'Python; python -m fairpod.native build runs it ~2x faster'})"
            + (f"; {len(r['never_ran'])} job(s) never ran" if r["never_ran"] else ""))


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.2%}"


PLOT_FORMATS = (".png", ".svg", ".pdf", ".jpg", ".jpeg")


def _cadence(text: str) -> float:
    """``--cadence``: a number of seconds, 0 or more."""
    try:
        v = float(text)
    except ValueError:
        raise CliError(f"--cadence {text}: not a number of seconds (0 or more; 0: a cycle after every event)") from None
    if not math.isfinite(v) or v < 0:
        raise CliError(f"--cadence {text}: must be 0 or more seconds (0: a cycle after every event)")
    return v


def _check_out(path: str | None, what: str) -> None:
    """Fail before a long run, not after it, when an output cannot be written."""
    if path in (None, "-"):
        return
    from pathlib import Path

    assert path is not None
    parent = Path(path).parent
    if not parent.is_dir():
        raise CliError(f"{path}: cannot write the {what}: no such directory {str(parent)!r}")
    if Path(path).is_dir():
        raise CliError(f"{path}: cannot write the {what}: it is a directory")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.plot is not None and Path(args.plot).suffix.lower() not in PLOT_FORMATS:
        raise CliError(f"{args.plot}: the plot file must end in {', '.join(PLOT_FORMATS)}")
    _check_out(args.output, "report")
    _check_out(args.plot, "plot")
    from fairpod.cli.files import read_yaml

    cadence = _cadence(args.cadence)
    read_yaml(args.spec)  # unreadable or not YAML: one line naming the file, line and column
    from fairpod.model.spec import SpecError
    from fairpod.sim.replay import replay
    from fairpod.sim.trace import TraceError

    show = sys.stderr.isatty() if args.progress is None else args.progress
    progress = Progress(sys.stderr) if show else None
    try:
        report = replay(args.spec, args.trace, timeline=args.timeline, jobs=args.jobs, plot=args.plot,
                        compare=args.compare, on_progress=progress, cadence=cadence)
    except SpecError as e:
        more = f" (and {len(e.problems) - 1} more problem(s); see fairpod validate)" if len(e.problems) > 1 else ""
        first = e.problems[0]
        raise CliError((first if first.startswith(str(args.spec)) else f"{args.spec}: {first}") + more) from None
    except TraceError as e:
        raise CliError(str(e)) from None
    except OSError as e:
        raise CliError(f"{e.filename or args.plot}: cannot write the plot: {e.strerror or e}") from None
    finally:
        if progress is not None:
            progress.close()
    text = json.dumps(report, indent=2)
    if args.output in (None, "-"):
        print(text)
        return 0
    try:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    except OSError as e:
        raise CliError(f"{args.output}: cannot write the report: {e.strerror}") from None
    print(_summary(report))
    for line in report.get("compare", {}).get("verdict", []):
        print(line)
    return 0
