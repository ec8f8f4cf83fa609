"""One call from files to report: what ``fairpod simulate`` and the benchmarks run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fairpod.model.spec import load_spec
from fairpod.sim.report import build_report
from fairpod.sim.run import simulate
from fairpod.sim.trace import load_trace


def replay(
    spec_path: str | Path,
    trace_path: str | Path,
    *,
    timeline: bool = False,
    jobs: bool = False,
    plot: str | Path | None = None,
    compare: list[str] | None = None,
    on_progress: Callable[[float, int, int], None] | None = None,
    cadence: float = 0.0,
) -> dict[str, Any]:
    """Load the spec and the trace, simulate, optionally plot, and return the report (with ``compare``: the
    same trace also under the other rules named, see ``fairpod.sim.compare``). ``on_progress``: see ``simulate``
    (the main replay only); ``cadence``: see ``simulate`` (every replay, the compared ones too).

    Raises ``SpecError`` or ``TraceError`` for bad input, ``OSError`` if the plot cannot be written.
    """
    spec = load_spec(spec_path)
    trace = load_trace(trace_path, spec)
    res = simulate(spec, trace, record_timeline=timeline or plot is not None, on_progress=on_progress,
                   cadence=cadence)
    if plot is not None:
        from fairpod.sim.plot import plot_usage

        plot_usage(res, plot)
    report = build_report(res, timeline=timeline, jobs=jobs)
    if compare:
        from fairpod.sim.compare import compare as run_compare

        report["compare"] = run_compare(spec, trace, compare, shared=res, cadence=cadence)
    return report
