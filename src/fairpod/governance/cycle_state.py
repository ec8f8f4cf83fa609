"""What one scheduling cycle holds while it runs (``scheduler._Cycle`` is built on it), and its smallest steps.

The cycle's parts are one class, each level in the module named after what it adds (the rule or the cache), each
standing on the one before: ``cycle_state`` (this: the state, a wait, the never-fits verdicts per shape), then
``team_checks`` (a team check once per job and usage, remembered across cycles when it failed on the team's own
quota), ``starvation`` (the starvation guard: holds and backfill, rule 6), ``verdicts`` (what is known to fail,
and teams that sit the rounds out, kept across cycles), ``offers`` (an offer's rank and the team's next offer),
``admission`` (trying a job: admit, preemption plans, fallback types) and ``scheduler`` (the cycle: guard, rounds,
consolidation, growth). One class, not functions passing the state around: the native build compiles its
attributes and methods as native ones, on the engine's hottest path.
"""

from __future__ import annotations

import math

from fairpod.governance.decisions import Decision, Preempt, Wait
from fairpod.governance.placement import never_fits
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.teams import Team
from fairpod.governance.workload import Workload


class CycleState:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.out: list[Decision] = []
        self.reserved: dict[str, str] = {}
        self.holders: set[str] = set()
        self.held_for_borrower: dict[str, str] = {}  # nodes held for a starving job that must borrow
        self.victims: list[tuple[Workload, Preempt]] = []
        # never-fits verdicts by job shape: they read the nodes alone, so they hold across cycles until the nodes change
        if snap.never_at != snap.nodes_version or len(snap.never_fit) > 4096:
            snap.never_fit = {}
            snap.never_at = snap.nodes_version
        self.never = snap.never_fit
        self.until: dict[str, float] = {}  # starving job -> when it is expected to start on its held nodes
        self.borrow_until: float | None = None  # earliest such time of a starving job that must borrow
        self.strict: dict[str, Workload] = {}  # team -> its starving job that could not start
        self.behind_reasons: dict[str, str] = {}  # starving job -> why its team's other jobs wait behind it
        self.started: dict[str, float | None] = {}  # jobs admitted in this cycle: when they were enqueued
        # within the cycle, by usage version (nodes and queues change in it only with usage): team checks, and
        # whether a team's borrow limit is lifted (``quota.team_check``)
        self.checked: dict[tuple, tuple[bool, bool, str]] = {}
        self.lifted: dict[tuple, bool] = {}
        self.ranks: dict[tuple, tuple] = {}  # rank of an offer, by job and its team's usage version
        self.lends: dict[str, list[int]] = {}  # ``lendable`` per instance type
        # the round being tried (``rounds``): its offers in order, the one being tried, the offers known to fail
        # that were left unranked, and those of them found to come before the one being tried (``rank_deferred``)
        self.offers: list[tuple[tuple, str, Team, Workload]] = []
        self.at = 0
        self.deferred: list[tuple[str, Team, Workload]] = []
        self.settled: list[tuple[str, Team, Workload]] = []
        # teams that sit out the round being tried, each with its offers of this phase, all known to fail (the k-th in
        # the phase's k-th round; ``verdict``); the round's number; the shapes failed in the phase; the teams that sat
        # out all of the first phase (only those may sit out the second)
        self.sitting: list[tuple[str, Team, list[Workload]]] = []
        self.round = 0
        self.failed: dict[str, set] = {}
        self.sat: set[str] = set()
        self.sitting_second: dict[str, list[Workload]] = {}  # the second phase's offers of the teams that may sit it
        self.held_version = 0  # counts the calls of ``hold`` (the held nodes and their times change only there)
        self.held_views: dict[tuple, dict[str, str]] = {}  # ``reserved_for``, by what it depends on
        self.collect: list[str] | None = None  # while trying fallback instance types: the reasons of each
        self.passed: str = ""  # why a job admitted on a fallback type passed over the ones before it

    def wait(self, w: Workload, reason: str) -> None:
        if self.collect is not None:  # trying a fallback instance type: the caller words the reason
            self.collect.append(reason)
            return
        if w.reason != reason:
            w.reason = reason
            self.out.append(Wait(w.id, reason))
            self.snap.verdicts.pop(w.team, None)  # what its team's verdict read has changed

    def ends_before(self, w: Workload, t: float) -> bool:
        """Would ``w``, started now, end (by its expected duration) no later than ``t``?"""
        return w.expected is not None and t != math.inf and self.snap.now + w.expected <= t

    def never_fits(self, w: Workload) -> str | None:
        """``placement.never_fits``, once per job shape while the nodes stay as they are (``Snapshot.nodes_version``)."""
        if w.shape not in self.never:
            self.never[w.shape] = never_fits(self.snap, w)
        return self.never[w.shape]

    def lendable(self, itype: str) -> list[int]:
        """``snap.lendable``, once per instance type and cycle (quotas and nodes do not change within one)."""
        got = self.lends.get(itype)
        if got is None:
            got = self.lends[itype] = self.snap.lendable(itype)
        return got

