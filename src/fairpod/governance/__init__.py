"""The governance engine: pure, deterministic scheduling decisions over a snapshot.

- ``snapshot``   — the engine's state (nodes, teams, queues, running jobs) and its bookkeeping
- ``quota``      — quota, borrow limit and lending arithmetic (rules 2, 3)
- ``lending``    — lending limits and absolute borrow limits per instance type (rule 2a)
- ``fairshare``  — weighted dominant share of idle capacity (rule 5)
- ``history``    — FairShareHistory: each team's decayed past borrowing (rule 5b)
- ``users``      — per-user cap and round-robin order inside a team (rule 9)
- ``budget``     — budgets over time: accelerator-hours per period (rule 10)
- ``placement``  — gang placement, best fit (rule 1)
- ``ordering``   — the order of preemption victims (rules 3, 7)
- ``preemption`` — picking victims: reclaim (and when a costly one waits), priority, fair share (rules 3, 3b, 4, 5, 7)
- ``elastic``    — elastic jobs: admission at N..M replicas, growth, shrink before preemption (rule 11)
- ``scheduler``  — one cycle over a snapshot (rules 4, 6, 8)
- ``feasible``   — can a job ever run on this cluster (the control plane at submit, the simulator at load)

The modules above run as native code when ``python -m fairpod.native build`` has compiled this very source
(``fairpod.native``); otherwise as Python. Both make the same decisions.
"""

from fairpod import native

native.activate(__path__)  # a native build of exactly this source, when there is one (``fairpod.native``)

from fairpod.governance import scheduler as _scheduler  # noqa: E402
from fairpod.governance.decisions import Admit, Decision, Grow, Preempt, Shrink, Wait, net_changes  # noqa: E402
from fairpod.governance.scheduler import schedule  # noqa: E402
from fairpod.governance.snapshot import Node, Snapshot, Team, Workload  # noqa: E402


def is_native() -> bool:
    """Does the engine loaded in this process run natively (compiled by ``python -m fairpod.native build``)?"""
    return not str(_scheduler.__file__).endswith(".py")


def engine_name() -> str:
    return "native (mypyc)" if is_native() else "pure Python"


__all__ = ["Admit", "Decision", "Grow", "Node", "Preempt", "Shrink", "Snapshot", "Team", "Wait", "Workload", "engine_name",
           "is_native", "net_changes", "schedule"]
