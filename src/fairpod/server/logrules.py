"""Log rules at work (the rules: :mod:`fairpod.model.logrules`): once a second the reconcile loop reads what the
replicas of each running job with rules wrote since the last look (its own priority class's rules and the job's),
and acts on a rule that fired:

- ``notify``: a ``LogRule`` event, once per rule and replica (start and stall rules: once per episode);
- ``restart_in_place``: a line rule stops that replica (its process group gets SIGTERM, SIGKILL after the
  grace) with the rule noted in ``Run.log_faults``; its exit then restarts it in place
  (:mod:`fairpod.server.restarts`, at least once per evaluation period). A start or stall rule, which no single
  replica broke, and an executor that cannot restart in place, restart the job instead;
- ``restart``: the job restarts whole (auto-resume; it counts against ``max_retry``, and fails without retries);
- ``fail``: the job fails.

The reason (in the event, the job's reason and ``get-job``) names the rule and the line. The logs are read from
the executor's log files (``Executor.log_path``; the Ray executor copies its replicas' output there), at most
``READ_MAX`` bytes per replica per look, from where the last look stopped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fairpod.executors.base import Resizing, RestartingInPlace, capability
from fairpod.model.jobs import JobState
from fairpod.model.logrules import LogRule, effective
from fairpod.server.runs import STOP_FAIL, STOP_RESTART, Run, job_key
from fairpod.store.records import Job

if TYPE_CHECKING:
    from fairpod.server.core_api import Core

EVERY = 1.0  # seconds between looks
READ_MAX = 1 << 20  # bytes per replica per look
EVENT = "LogRule"


@dataclass
class _Watch:
    attempt: int
    started: float  # the attempt's start (a readiness requeue starts the same attempt again)
    rules: list[LogRule]
    compiled: list[re.Pattern[str]]
    offsets: dict[int, int] = field(default_factory=dict)  # rank -> bytes read
    partial: dict[int, bytes] = field(default_factory=dict)  # rank -> an unfinished last line
    last: dict[str, float] = field(default_factory=dict)  # rule -> when a line last matched it
    fired: set[tuple[str, int | None, int]] = field(default_factory=set)  # (rule, rank, its restarts) that fired


def rules_of(cp: Core, job: Job) -> list[LogRule]:
    pc = cp.spec.priority_class(job.spec.priority)
    return effective(job.spec.log_rules, pc.log_rules if pc is not None else [])


class LogWatch:
    def __init__(self, every: float = EVERY) -> None:
        self.every = every
        self.last = float("-inf")
        self.watches: dict[int, _Watch | None] = {}  # job id -> its watch (None: the job has no rules)

    def tick(self, cp: Core) -> None:
        now = cp.clock()
        if now - self.last < self.every:
            return
        self.last = now
        for jid in [j for j in self.watches if j not in cp.runs]:
            del self.watches[jid]
        for jid, run in list(cp.runs.items()):
            if not run.launched or run.stopping is not None:
                continue
            w = self.watches.get(jid)
            if jid in self.watches and w is None:
                continue  # no rules
            job = cp.store.get_job(jid)
            if job is None or job.state != JobState.RUNNING or job.started_at is None:
                continue
            if w is None or (w.attempt, w.started) != (run.attempt, job.started_at):
                rules = rules_of(cp, job)
                if not rules:
                    self.watches[jid] = None
                    continue
                w = _Watch(run.attempt, float(job.started_at), rules, [re.compile(r.pattern) for r in rules])
                if jid in self.watches:  # a relaunch of the same attempt appends to its logs: read on from there
                    w.offsets = dict(self.watches[jid].offsets)  # type: ignore[union-attr]
                self.watches[jid] = w
            self._look(cp, job, run, w, now)

    def _look(self, cp: Core, job: Job, run: Run, w: _Watch, now: float) -> None:
        lines = self._read(cp, job, w)
        start = float(job.started_at or now)
        for rule, rx in zip(w.rules, w.compiled, strict=True):
            hits = [(rank, line) for rank, line in lines if rx.search(line)]
            if rule.kind == "match":
                for rank, line in hits:
                    once = (rule.name, rank, sum(1 for r, _ in run.restarts if int(r) == rank))
                    if once not in w.fired:  # once per replica (a replica restarted in place: once again)
                        w.fired.add(once)
                        if self._fire(cp, job, run, rule, rank, f"replica {rank} printed {line.strip()[:200]!r}"):
                            return
                continue
            if hits:
                w.last[rule.name] = now
                w.fired.discard((rule.name, None, 0))
            seen = w.last.get(rule.name)
            if rule.kind == "within":
                late = seen is None and now - start >= float(rule.within_seconds or 0)
                signal = f"no line matched in the {now - start:.0f} s since the start"
            else:
                since = seen if seen is not None else start
                late = now - since >= float(rule.every_seconds or 0)
                signal = f"no line matched for {now - since:.0f} s"
            if late and (rule.name, None, 0) not in w.fired:
                w.fired.add((rule.name, None, 0))
                if self._fire(cp, job, run, rule, None, signal):
                    return

    @staticmethod
    def _read(cp: Core, job: Job, w: _Watch) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        for rank in range(job.nodes):
            path = cp.executor.log_path(job_key(job), rank, w.attempt)
            if path is None:
                continue
            data = _read_from(path, w.offsets.get(rank, 0))
            if not data:
                continue
            w.offsets[rank] = w.offsets.get(rank, 0) + len(data)
            text = w.partial.pop(rank, b"") + data
            *done, rest = text.split(b"\n")
            if rest:
                w.partial[rank] = rest[-READ_MAX:]
            out += [(rank, line.decode("utf-8", "replace")) for line in done]
        return out

    @staticmethod
    def _fire(cp: Core, job: Job, run: Run, rule: LogRule, rank: int | None, what: str) -> bool:
        """Act on a rule that fired; True when the job is being stopped (no more rules this look)."""
        reason = f"log rule {rule.name!r} ({rule.describe()}): {what}"
        action = rule.action
        sizing = capability(cp.executor, Resizing)
        if action == "restart_in_place" and (rank is None or sizing is None or job.spec.elastic
                                             or capability(cp.executor, RestartingInPlace) is None):
            action = "restart"  # no one replica to restart, or an executor that cannot
        then = {"notify": "notify", "restart_in_place": f"restarting replica {rank} in place",
                "fail": "the job fails"}.get(action, "")
        kind = STOP_FAIL
        if action == "restart":
            kind = STOP_RESTART if job.attempt < job.max_retry else STOP_FAIL
            then = "restarting the job" if kind == STOP_RESTART else "restart asked, no retries left: it fails"
        cp.event(EVENT, f"job {job.name}: {reason}; {then}", job, rule=rule.name, action=rule.action, rank=rank,
                 line=what)
        if action == "notify":
            return False
        if action == "restart_in_place" and sizing is not None and rank is not None:
            run.log_faults[str(rank)] = reason
            job = cp.store.update_job(job.id, {"run_state": run.to_json()})
            key, attempt, grace = job_key(job), run.attempt, job.spec.termination_grace_seconds
            cp.store.after_commit(lambda: sizing.stop_replicas(key, attempt, [rank], grace))
            return False
        cp.begin_stop(job, run, kind, reason)
        return True


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as f:
            if f.seek(0, 2) <= offset:
                return b""
            f.seek(offset)
            return f.read(READ_MAX)
    except OSError:
        return b""
