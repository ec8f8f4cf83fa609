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
- ``preemption`` — picking victims: reclaim, priority, fair share (rules 3, 4, 5, 7)
- ``elastic``    — elastic jobs: admission at N..M replicas, growth, shrink before preemption (rule 11)
- ``scheduler``  — one cycle over a snapshot (rules 4, 6, 8)
"""

from fairpod.governance.decisions import Admit, Decision, Grow, Preempt, Shrink, Wait, net_changes
from fairpod.governance.scheduler import schedule
from fairpod.governance.snapshot import Node, Snapshot, Team, Workload

__all__ = ["Admit", "Decision", "Grow", "Node", "Preempt", "Shrink", "Snapshot", "Team", "Wait", "Workload", "net_changes",
           "schedule"]
