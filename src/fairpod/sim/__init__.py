"""Trace-driven simulation of a shared cluster under the governance engine (``fairpod simulate``).

- ``trace``  — loading and checking job traces (fairpod CSV, ITP CSV files)
- ``run``    — the discrete-event loop around ``governance.schedule``
- ``report`` — the JSON report (utilization, waits, borrowing, preemptions, fairness, engine cost)
- ``plot``   — accelerators in use per team over time
- ``replay`` — files in, report out: the code path of the CLI and the benchmarks
"""

from fairpod.sim.replay import replay
from fairpod.sim.run import SimResult, simulate
from fairpod.sim.trace import TraceError, TraceJob, load_trace

__all__ = ["SimResult", "TraceError", "TraceJob", "load_trace", "replay", "simulate"]
