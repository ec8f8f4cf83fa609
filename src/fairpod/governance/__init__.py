"""The governance engine: pure, deterministic scheduling decisions over a snapshot.

- ``snapshot``   — the engine's state (nodes, teams, queues, running jobs) and its bookkeeping, of parts each in
  its module: ``workload`` (a job), ``teams`` (a team, a group), ``pending`` (a team's queue), ``nodes`` (nodes,
  per-type sums and the fit index)
- ``quota``      — quota, borrow limit and lending arithmetic (rules 2, 3)
- ``lending``    — lending limits and absolute borrow limits per instance type (rule 2a)
- ``fairshare``  — weighted dominant share of idle capacity (rule 5)
- ``history``    — FairShareHistory: each team's decayed past borrowing (rule 5b)
- ``users``      — per-user cap and round-robin order inside a team (rule 9)
- ``budget``     — budgets over time: accelerator-hours per period (rule 10)
- ``placement``  — gang placement, best fit (rule 1)
- ``ordering``   — the order of preemption victims (rules 3, 7)
- ``preemption`` — picking victims: reclaim (and when a costly one waits), priority, fair share (rules 3, 3b, 4, 5, 7)
  with ``fair_victims`` (which jobs fair share may stop), ``victim_bounds`` (checked before any is stopped) and
  ``costly_reclaim`` (rule 3b)
- ``elastic``    — elastic jobs: admission at N..M replicas, growth, shrink before preemption (rule 11)
- ``scheduler``  — one cycle over a snapshot (rules 4, 6, 8), its levels: ``cycle_state`` (what a cycle holds),
  ``team_checks`` (a team check, remembered across cycles when it failed on the team's own quota), ``starvation``
  (the starvation guard's holds and backfill, rule 6), ``verdicts`` (what is known to fail, teams that sit the
  rounds out), ``offers`` (a round's offers and their order), ``admission`` (one job's try: admit, preempt, wait)
- ``protected``  — protected jobs and a service's minimum run within their team's quota only (rule 7)
- ``feasible``   — can a job ever run on this cluster (the control plane at submit, the simulator at load)

The modules above run as native code when ``python -m fairpod.native build`` has compiled this very source
(``fairpod.native``); otherwise as Python. Both make the same decisions.
"""

from fairpod import native

native.activate(__path__)  # a native build of exactly this source, when there is one (``fairpod.native``)

from fairpod.governance import scheduler as _scheduler  # noqa: E402
from fairpod.governance.decisions import Admit, Decision, Grow, Preempt, Shrink, Wait, net_changes  # noqa: E402
from fairpod.governance.nodes import Node  # noqa: E402
from fairpod.governance.scheduler import schedule  # noqa: E402
from fairpod.governance.snapshot import Snapshot  # noqa: E402
from fairpod.governance.teams import Team  # noqa: E402
from fairpod.governance.workload import Workload  # noqa: E402


def is_native() -> bool:
    """Does the engine loaded in this process run natively (compiled by ``python -m fairpod.native build``)?"""
    return not str(_scheduler.__file__).endswith(".py")


def engine_name() -> str:
    return "native (mypyc)" if is_native() else "pure Python"


__all__ = ["Admit", "Decision", "Grow", "Node", "Preempt", "Shrink", "Snapshot", "Team", "Wait", "Workload", "engine_name",
           "is_native", "net_changes", "schedule"]
