"""Trace-driven simulation of a shared cluster under the governance engine (``fairpod simulate``).

- ``trace``  — loading and checking job traces (fairpod CSV, ITP CSV files)
- ``run``    — the discrete-event loop around ``governance.schedule``
- ``jobs``   — a trace job as the replay follows it, and the replay's result
- ``ledger`` — who borrows and lends how much over the replay, and the timeline
- ``report`` — the JSON report (utilization, waits, borrowing, preemptions, fairness, engine cost)
- ``plot``   — accelerators in use per team over time
- ``replay`` — files in, report out: the code path of the CLI and the benchmarks
"""

from fairpod import native

native.activate(__path__, "sim")  # a native build of exactly this source, when there is one (``fairpod.native``)

from fairpod.sim.jobs import SimResult  # noqa: E402
from fairpod.sim.replay import replay  # noqa: E402
from fairpod.sim.run import simulate  # noqa: E402
from fairpod.sim.trace import TraceError, TraceJob, load_trace  # noqa: E402

__all__ = ["SimResult", "TraceError", "TraceJob", "load_trace", "replay", "simulate"]
