"""Log rules at work (the rules: :mod:`fairpod.model.logrules`). The replicas' output is read and matched in a
thread of its own, never under the control plane's lock nor in a request: the reconcile loop's keeper
(:meth:`LogWatch.tick`, under the lock) only says which attempts to watch and acts on what the reader found.

- the reader (:meth:`LogWatch._read_loop`): once a second, for each watched replica, what it wrote since the
  last look (at most ``READ_MAX`` bytes per replica per look, from where the last look stopped; a line is matched
  on its first ``LINE_MAX`` bytes), matched by RE2 (time linear in the text) against the rules; it notes the
  first matching line of each rule and replica (once per restart in place of the replica), when a line last
  matched each rule, and for a metric rule each replica's row of readings that crossed its threshold (it fires
  at ``metric_points``), and wakes the loop when it found something;
- the keeper (once a turn): takes what the reader found and acts, and once a second refreshes the attempts
  watched (running jobs with rules: their priority class's and their own) and checks the start and stall rules.

The actions:

- ``notify``: a ``LogRule`` event, once per rule and replica (start and stall rules: once per episode);
- ``restart_in_place``: a line rule stops that replica (its process group gets SIGTERM, SIGKILL after the
  grace) with the rule noted in ``Run.log_faults``; its exit then restarts it in place
  (:mod:`fairpod.server.core.transitions.restarts`, at least once per evaluation period). A start or stall rule, which no single
  replica broke, and an executor that cannot restart in place, restart the job instead;
- ``restart``: the job restarts whole (auto-resume; it counts against ``max_retry``, and fails without retries);
- ``fail``: the job fails.

The reason (in the event, the job's reason and ``get-job``) names the rule and the line. The logs are read from
the executor's log files (``Executor.log_path``; the Ray executor copies its replicas' output there). A rule
stored by an older fairpod whose pattern RE2 cannot compile is not matched, and a ``LogRule`` event says so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import and_, attrgetter, is_, not_
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairpod.executors.base import Resizing, RestartingInPlace, capability
from fairpod.executors.logs import read_output
from fairpod.model.jobs import JobState
from fairpod.model.logrules import CROSSES, LINE_MAX, LogRule, compile_pattern, effective, per_line
from fairpod.server.core.transitions import stop
from fairpod.server.runs import STOP_FAIL, STOP_RESTART, Run, job_key
from fairpod.store.records import Job

if TYPE_CHECKING:
    from fairpod.server.core.state import CoreState

EVERY = 1.0  # seconds between looks
_UNSEEN = object()  # not in LogWatch.watches (None there: a job without rules)
READ_MAX = 1 << 20  # bytes per replica per look
EVENT = "LogRule"


@dataclass
class _Watch:
    """One attempt's rules and what the reader found. The reader alone touches ``offsets``, ``partial`` and
    ``reported``; ``hits`` and ``last`` pass from the reader to the keeper under ``LogWatch.mu``; the keeper
    alone writes ``gens`` and ``fired``."""

    key: str
    nodes: int
    attempt: int
    started: float  # the attempt's start (a readiness requeue starts the same attempt again)
    rules: list[LogRule]
    compiled: list[Any]  # per rule: its RE2 pattern, None for a stored rule RE2 refuses
    offsets: dict[int, int] = field(default_factory=dict)  # rank -> bytes read
    partial: dict[int, bytes] = field(default_factory=dict)  # rank -> the start of an unfinished last line
    reported: set[tuple[int, int, int]] = field(default_factory=set)  # (rule, rank, its restarts) the reader told
    hits: list[tuple[int, int, int, str]] = field(default_factory=list)  # (rule, rank, restarts, what) to act on
    metric: dict[tuple[int, int], tuple[int, int, list[str]]] = field(default_factory=dict)  # (rule, rank) ->
    # (its restarts, readings in a row that crossed, the last of them): a metric rule's row, the reader's
    last: dict[str, float] = field(default_factory=dict)  # rule -> when a line last matched it
    gens: dict[int, int] = field(default_factory=dict)  # rank -> its restarts in place so far
    fired: set[tuple[str, int | None, int]] = field(default_factory=set)  # (rule, rank, its restarts) that fired
    fired_at: dict[str, float] = field(default_factory=dict)  # start or stall rule -> when its episode fired


def rules_of(cp: CoreState, job: Job) -> list[LogRule]:
    pc = cp.spec.priority_class(job.spec.priority)
    return effective(job.spec.log_rules, pc.log_rules if pc is not None else [])


def to_look(runs: dict[int, Run], watches: dict[int, _Watch | None]) -> list[tuple[int, Run]]:
    """The live attempts (started, not stopping) not known to have no rules, in the runs' order. Nearly all of the
    ~30,000 at 10,000 nodes have none, and a Python pass over them cost ~50 ms a look (benchmarks/turn_cost.py):
    they are told apart in C (map, compress)."""
    vals = runs.values()
    ruleless = map(is_, map(watches.get, runs, repeat(_UNSEEN)), repeat(None))
    on = map(and_, map(and_, map(attrgetter("launched"), vals), map(is_, map(attrgetter("stopping"), vals),
                                                                    repeat(None))), map(not_, ruleless))
    return list(compress(runs.items(), on))


class LogWatch:
    """The keeper (``tick``, under the control plane's lock) and the reader thread it starts at the first watch;
    ``close`` stops the thread."""

    def __init__(self, every: float = EVERY) -> None:
        self.every = every
        self.last = float("-inf")
        self.watches: dict[int, _Watch | None] = {}  # job id -> its watch (None: the job has no rules)
        self.mu = threading.Lock()  # the watches the reader sees, and what passes between it and the keeper
        self.reading: dict[int, _Watch] = {}  # what the reader reads (a copy, swapped under mu)
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self.looks = 0  # the reader's passes over every watch, for tests and /metrics

    def tick(self, cp: CoreState) -> None:
        self._act(cp)
        now = cp.clock()
        if now - self.last < self.every:
            return
        self.last = now
        for jid in self.watches.keys() - cp.runs.keys():
            del self.watches[jid]
        look = to_look(cp.runs, self.watches)
        cp.store.prefetch(jid for jid, _ in look if jid not in self.watches)  # the new ones: one query, not one each
        for jid, run in look:
            if not run.launched or run.stopping is not None:
                continue
            w = self.watches.get(jid)
            if jid in self.watches and w is None:
                continue  # no rules
            job = cp.store.get_job(jid)
            if job is None or job.state != JobState.RUNNING or job.started_at is None:
                continue
            if w is None or (w.attempt, w.started) != (run.attempt, job.started_at):
                w = self._watch(cp, job, run, self.watches.get(jid))
                self.watches[jid] = w
                if w is None:
                    continue
            w.gens = _gens(run)
            self._timers(cp, job, run, w, now)
        with self.mu:
            self.reading = {jid: w for jid, w in compress(self.watches.items(), self.watches.values())
                            if w is not None and jid in cp.runs and cp.runs[jid].stopping is None}
        if self.reading and self._thread is None:
            self._start(cp)

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    # -- the keeper ------------------------------------------------------------------------------------------
    @staticmethod
    def _watch(cp: CoreState, job: Job, run: Run, before: _Watch | None) -> _Watch | None:
        rules = rules_of(cp, job)
        if not rules:
            return None
        compiled = []
        for r in rules:
            try:
                compiled.append(compile_pattern(r.pattern))
            except ValueError as e:  # stored by an older fairpod, which matched with Python's re
                compiled.append(None)
                cp.event(EVENT, f"job {job.name}: log rule {r.name!r} is not matched: {e}", job, rule=r.name)
        w = _Watch(job_key(job), job.nodes, run.attempt, float(job.started_at or 0), rules, compiled)
        if before is not None and before.attempt == run.attempt:  # a relaunch of the same attempt appends to
            w.offsets = dict(before.offsets)  # its logs: read on from there
        return w

    def _act(self, cp: CoreState) -> None:
        """Act on the lines the reader found."""
        with self.mu:
            found = [(jid, w, w.hits) for jid, w in self.reading.items() if w.hits]
            for _, w, _ in found:
                w.hits = []
        for jid, w, hits in found:
            run = cp.runs.get(jid)
            if run is None or run.stopping is not None or run.attempt != w.attempt or self.watches.get(jid) is not w:
                continue
            job = cp.store.get_job(jid)
            if job is None or job.state != JobState.RUNNING:
                continue
            for i, rank, gen, what in hits:
                rule = w.rules[i]
                once = (rule.name, rank, gen)
                if once in w.fired:  # once per replica (a replica restarted in place: once again)
                    continue
                w.fired.add(once)
                if _fire(cp, job, run, rule, rank, what):
                    break

    @staticmethod
    def _timers(cp: CoreState, job: Job, run: Run, w: _Watch, now: float) -> None:
        """The start and stall rules: no line matched within S s of the start, or for S s (once per episode: a
        matching line after it fired ends the episode)."""
        start = float(job.started_at or now)
        for rule in w.rules:
            if rule.kind not in ("within", "every"):
                continue
            seen = w.last.get(rule.name)  # written by the reader: one read of a dict's item
            if seen is not None and seen > w.fired_at.get(rule.name, seen):
                w.fired.discard((rule.name, None, 0))
                del w.fired_at[rule.name]
            if rule.kind == "within":
                late = seen is None and now - start >= float(rule.within_seconds or 0)
                signal = f"no line matched in the {now - start:.0f} s since the start"
            else:
                since = seen if seen is not None else start
                late = now - since >= float(rule.every_seconds or 0)
                signal = f"no line matched for {now - since:.0f} s"
            if late and (rule.name, None, 0) not in w.fired:
                w.fired.add((rule.name, None, 0))
                w.fired_at[rule.name] = now
                if _fire(cp, job, run, rule, None, signal):
                    return

    # -- the reader ------------------------------------------------------------------------------------------
    def _start(self, cp: CoreState) -> None:
        log_path, clock, wake = cp.executor.log_path, cp.clock, cp.wake

        def loop() -> None:
            while not self._closed.wait(self.every):
                with self.mu:
                    watches = list(self.reading.values())
                found = False
                for w in watches:
                    found |= self.read(w, log_path, clock())
                self.looks += 1
                if found:
                    wake.set()

        self._thread = threading.Thread(target=loop, name="fairpod-logrules", daemon=True)
        self._thread.start()

    def read(self, w: _Watch, log_path: Callable[[str, int, int], Path | None], now: float) -> bool:
        """One look at each replica of ``w``: True when a line rule matched a line not told before."""
        found = False
        for rank in range(w.nodes):
            path = log_path(w.key, rank, w.attempt)
            if path is None:
                continue
            # offsets in the output: a log over its cap is written again (fairpod.executors.logs)
            data, w.offsets[rank] = read_output(path, w.offsets.get(rank, 0), READ_MAX)
            if not data:
                continue
            text = w.partial.pop(rank, b"") + data
            cut = text.rfind(b"\n") + 1
            if len(text) > cut:
                w.partial[rank] = text[cut:cut + LINE_MAX]  # a longer line is matched on its first LINE_MAX bytes
            if cut:
                found |= self._match(w, rank, text[:cut], now)
        return found

    def _match(self, w: _Watch, rank: int, chunk: bytes, now: float) -> bool:
        lines = chunk[:-1].split(b"\n")
        if max(map(len, lines)) > LINE_MAX:
            lines = [line[:LINE_MAX] for line in lines]
            chunk = b"\n".join(lines) + b"\n"
        gen, found = w.gens.get(rank, 0), False
        text: str | None = None
        for i, (rule, rx) in enumerate(zip(w.rules, w.compiled, strict=True)):
            if rx is None or (rule.kind in ("match", "metric") and (i, rank, gen) in w.reported):
                continue
            if rule.kind == "metric":
                text = chunk[:-1].decode("utf-8", "replace") if text is None else text
                what = _readings(w, i, rule, rx, rank, gen, text)
            else:
                line = _first_match(rx, rule.pattern, chunk, lines)
                what = None if line is None else f"replica {rank} printed {line.strip()[:200]!r}"
                if line is not None and rule.kind != "match":
                    w.last[rule.name] = now
                    continue
            if what is not None:
                w.reported.add((i, rank, gen))
                with self.mu:
                    w.hits.append((i, rank, gen, what))
                found = True
        return found


def _readings(w: _Watch, i: int, rule: LogRule, rx: Any, rank: int, gen: int, text: str) -> str | None:
    """A metric rule over new lines of a replica: each capture that is a number is a reading; the rule fires (the
    description returned) at ``metric_points`` readings in a row that cross the threshold. The row is per
    replica and starts again when the replica restarts (its ``gen``) and with each attempt (a new watch)."""
    at, count, values = w.metric.get((i, rank), (gen, 0, []))
    if at != gen:
        count, values = 0, []
    crosses, threshold = CROSSES[rule.metric_op or ">"], float(rule.metric_threshold or 0)
    found = (m for line in text.split("\n") for m in rx.finditer(line)) if per_line(rule.pattern) else \
        rx.finditer(text)
    for m in found:
        try:
            v = float(m.group(1))
        except (TypeError, ValueError):  # not a number: no reading
            continue
        if v != v:  # nan
            continue
        if crosses(v, threshold):
            count, values = count + 1, [*values[-2:], m.group(1)]
        else:
            count, values = 0, []
        if count >= rule.metric_points:
            w.metric[(i, rank)] = (gen, count, values)
            end = text.find("\n", m.end())
            line = text[text.rfind("\n", 0, m.start()) + 1 : end if end >= 0 else len(text)]
            return (f"replica {rank} read {count} in a row {rule.metric_op} {threshold:g} (last {', '.join(values)}), "
                    f"the last in {line.strip()[:200]!r}")
    w.metric[(i, rank)] = (gen, count, values)
    return None


def _first_match(rx: Any, pattern: str, chunk: bytes, lines: list[bytes]) -> str | None:
    """The first line of ``chunk`` (whole lines, each at most LINE_MAX bytes) that ``rx`` matches: one search of
    the whole chunk (``rx`` never matches across a newline), or line by line for a pattern with ``\\A``/``\\z``."""
    if per_line(pattern):
        for line in lines:
            if rx.search(line.decode("utf-8", "replace")):
                return line.decode("utf-8", "replace")
        return None
    text = chunk[:-1].decode("utf-8", "replace")  # without its last newline: no empty line after it
    m = rx.search(text)
    if m is None:
        return None
    end = text.find("\n", m.end())
    return text[text.rfind("\n", 0, m.start()) + 1 : end if end >= 0 else len(text)]


def _gens(run: Run) -> dict[int, int]:
    """Each rank's restarts in place so far in this attempt."""
    out: dict[int, int] = {}
    for r, _ in run.restarts:
        out[int(r)] = out.get(int(r), 0) + 1
    return out


def _fire(cp: CoreState, job: Job, run: Run, rule: LogRule, rank: int | None, what: str) -> bool:
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
    stop.begin_stop(cp, job, run, kind, reason)
    return True

