"""Submit: a job (or a job array) checked against the cluster and queued; submits that wait for the lock
together are written in one transaction (group commit, :mod:`fairpod.server.core.submits`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio.to_thread

from fairpod.executors.base import Executor, Traits
from fairpod.governance import Snapshot, Workload, feasible
from fairpod.governance.kinds import kind_fields
from fairpod.model.jobs import JobSpec, ResolvedJob, resolve_job
from fairpod.model.resources import Res
from fairpod.model.spec import ClusterSpec
from fairpod.paths import runs_dir
from fairpod.sandbox import hostpaths
from fairpod.server import arrays
from fairpod.server.core.submits import Submit
from fairpod.server.core.transitions import array_holds, resize, serving
from fairpod.server.errors import BeyondQuota, InvalidJob, JobExists, NeverFits
from fairpod.store import AlreadyExists
from fairpod.store.notify import SUBMITS
from fairpod.store.records import Job
from fairpod.store.submitted import submitted_row

if TYPE_CHECKING:
    from fairpod.server.core.state import CoreState

T = TypeVar("T")


def submit(cp: CoreState, spec: JobSpec, actor: str, key: str | None = None) -> Job:
    """Queue a job. With an idempotency ``key`` a repeated submit by the same ``actor`` returns the job the
    first one created (whatever its state now) instead of a second job. Submits that wait for the lock
    together are written in one transaction (:mod:`fairpod.server.core.submits`)."""
    return submit_keyed(cp, spec, actor, key)[0]


def submit_keyed(cp: CoreState, spec: JobSpec, actor: str, key: str | None = None) -> tuple[Job, bool]:
    """:func:`submit`, and whether this request created the job (False: an earlier submit with the same key
    did, committed before this one's group or earlier in it)."""
    spec = spec.model_copy(update={"user": actor})  # who submitted it: the caller, whatever was sent
    req = Submit(spec, actor, key, cp.spec, check(cp, spec))  # validated before the lock: it only reads
    cp.submits.add(req)
    cp.gate.yield_to_turn()
    with cp._change():
        if not req.done:  # not written yet by a submit ahead of it: this one writes the group
            _commit_submits(cp)
    if req.error is not None:
        raise req.error
    assert req.job is not None
    if req.created:
        cp.wake.set()
    return req.job, req.created


async def submit_answered(cp: CoreState, spec: JobSpec, actor: str, key: str | None,
                          answer: Callable[[Job], T]) -> tuple[Job, bool, T]:
    """:func:`submit_keyed` and ``answer(job)`` (the route's view) in a thread of the API's pool, where the
    submit waits for the control plane's lock; an API worker's submits have a writer thread of their own instead
    (:mod:`fairpod.server.core.submit_writer`)."""
    def run() -> tuple[Job, bool, T]:
        job, created = submit_keyed(cp, spec, actor, key)
        return job, created, answer(job)

    return await anyio.to_thread.run_sync(run)


def _commit_submits(cp: CoreState) -> None:
    """Write every queued submit in one transaction, then put the new jobs in the engine's queue (the lock
    is held)."""
    commit_group(cp.submits.take(), lambda group: _write_submits(cp, group))


def commit_group(group: list[Submit], write: Callable[[list[Submit]], None]) -> None:
    """``write`` the group in one transaction, each submit answered (its job or its own error). A name already
    taken fails only its own submit: the group is then written one by one. Any other failed write answers every
    submit not answered yet with that error, and is raised. The core's group commit and an API worker's
    (:class:`fairpod.server.core.worker.WorkerCore`) both answer through this one function."""
    try:
        try:
            write(group)
        except AlreadyExists:
            if len(group) == 1:
                raise
            for one in group:
                try:
                    write([one])
                except AlreadyExists as e:
                    one.error, one.done = JobExists(str(e)), True
    except AlreadyExists as e:
        group[0].error, group[0].done = JobExists(str(e)), True
    except BaseException as e:  # the store refused the write: every submit not answered yet fails with it
        for one in group:
            if not one.done:
                one.error, one.done = e, True
        raise


def _write_submits(cp: CoreState, group: list[Submit]) -> None:
    """:func:`write_submits`, then the engine's queue learns of the new jobs (only once they are committed)."""
    answers = write_submits(cp, group)
    cp.submits.commits += 1
    cp.submits.written += len(group)
    for r, job, err, created in answers:
        if created and job is not None:
            cp.snap.add_pending(cp.workload(job))
        r.job, r.error, r.created, r.done = job, err, created, True


Answer = tuple[Submit, Job | None, BaseException | None, bool]  # the submit, its job, its error, a new job?


def write_submits(cp: Checking, group: list[Submit], *, notify: bool = False,
                  fresh: Callable[[Any], None] | None = None) -> list[Answer]:
    """One transaction: each submit's job, its event and its audit entry (or the job an earlier submit with
    the same idempotency key created). The store only: the core's submits and an API worker's
    (:mod:`fairpod.server.core.worker`) write through this one function. ``notify`` (a process other than the
    core): a job created notifies the core in the same transaction, delivered on its commit (PostgreSQL
    ``NOTIFY``, :mod:`fairpod.store.notify`; nothing on SQLite). ``fresh`` (an API worker) is called first in the
    transaction with it: the stored spec read again there if its version changed, each submit then checked again
    against it.

    The jobs' rows are built before the transaction (``store.submitted``), and the group's jobs, events and audit
    entries are written with one statement each, whatever the group's size: in SQLite's one write lock only the
    statements (benchmarks/README.md, "The CPU of a worker's submit, second pass")."""
    rows = {id(r): submitted_row(r.spec, r.checked, "queued") for r in group if isinstance(r.checked, ResolvedJob)}
    out: list[tuple[Job | None, BaseException | None, bool] | None] = [None] * len(group)
    with cp.store.tx() as t:
        if fresh is not None:
            fresh(t)
        # several processes write submits (API workers, `fairpod api`): the same key or name waits for the other
        t.serialize([f"key:{r.actor}:{r.key}" for r in group if r.key is not None]
                    + [f"name:{r.spec.team}:{r.spec.name}" for r in group])
        new: list[int] = []  # the group's submits that create a job, in order
        keyed: dict[tuple[str, str], int] = {}  # (actor, key) -> the submit of this group that creates its job
        used = t.submitted_with_keys([(r.actor, r.key) for r in group if r.key is not None])  # one lookup for all
        earlier_jobs = t.get_jobs(used.values()) if used else {}
        for i, r in enumerate(group):
            if r.key is not None:
                if (r.actor, r.key) in keyed:  # an earlier submit of this group with the key: its job, once written
                    continue
                if (earlier := earlier_jobs.get(used.get((r.actor, r.key), -1))) is not None:
                    out[i] = (earlier, None, False)
                    continue
            checked = r.checked if cp.spec is r.cluster else check(cp, r.spec)  # the spec changed
            if isinstance(checked, (InvalidJob, NeverFits)):
                out[i] = (None, checked, False)
                continue
            if checked is not r.checked or id(r) not in rows:
                rows[id(r)] = submitted_row(r.spec, checked, "queued")
            new.append(i)
            if r.key is not None:
                keyed[(r.actor, r.key)] = i
        jobs = t.insert_submitted([rows[id(group[i])] for i in new], [group[i].spec for i in new])
        for i, job in zip(new, jobs, strict=True):
            out[i] = (job, None, True)
        for i, r in enumerate(group):
            if out[i] is None and r.key is not None:  # a key repeated in the group: the job its first submit made
                out[i] = (jobs[new.index(keyed[(r.actor, r.key)])], None, False)
        t.append_events([{"kind": "JobSubmitted", "message": f"job {j.name} submitted by {group[i].actor}",
                          "job_id": j.id, "team": j.team, "data": {"actor": group[i].actor}}
                         for i, j in zip(new, jobs, strict=True)])
        t.append_audits([{"actor": group[i].actor, "action": "job.submit", "target": f"{j.team}/{j.name}",
                          "detail": {"id": j.id}} for i, j in zip(new, jobs, strict=True)])
        t.remember_submits([(group[i].actor, group[i].key, j.id) for i, j in zip(new, jobs, strict=True)
                            if group[i].key is not None])
        if notify and jobs:
            t.notify(SUBMITS)
    return [(r, *a) for r, a in zip(group, out, strict=True) if a is not None]


class Checking(Protocol):
    """What checking and writing a submit reads: the core's state, or an API worker's view of the cluster
    (:class:`fairpod.server.core.worker.WorkerCore`: the stored spec, its nodes, the core's executor's
    :class:`~fairpod.executors.base.Traits`)."""

    store: Any
    spec: ClusterSpec
    snap: Snapshot
    home: Path

    @property
    def executor(self) -> Executor | Traits: ...  # read only: the core's executor, or a worker's Traits of it

    def checkpoint_root(self) -> Path: ...


def check(cp: Checking, spec: JobSpec) -> ResolvedJob | InvalidJob | NeverFits:
    """:meth:`_admissible`, its error returned rather than raised."""
    try:
        return _admissible(cp, spec)
    except (InvalidJob, NeverFits) as e:
        return e


def _admissible(cp: Checking, spec: JobSpec) -> ResolvedJob:
    """The job checked against the cluster: InvalidJob or NeverFits with the reason, else its resolution."""
    try:
        resolved = resolve_job(spec, cp.spec)
    except ValueError as e:
        raise InvalidJob(str(e)) from None
    if spec.command == [] and not spec.image and not (spec.ray and spec.service is not None):  # an image: its
        # own entrypoint; a Ray service: a standing Ray cluster (fairpod.executors.raycluster)
        raise InvalidJob("the job has no command: give one after --")
    _host_paths(cp, spec)
    resize.check(cp.executor, spec)
    serving.check(cp.executor, spec)
    # a job naming several instance types (fallbacks) never fits only when none of them ever can
    types = [resolved, *(resolved.model_copy(update={"instance_type": it, "per_replica": per})
                         for it, per in resolved.fallbacks)]  # its instance type, then each fallback
    nevers = [_never_fits(cp, r, spec) for r in types]
    if all(nevers):
        overs = [_beyond_quota(cp, r, spec) for r in types]
        if any(overs):  # a service's minimum that no type's quota can ever hold: 422, in the field's words
            raise BeyondQuota("; ".join(f"min_nodes {spec.nodes} {o}" if o else n or ""
                                        for o, n in zip(overs, nevers, strict=True) if o or n)
                              + "; a service's minimum replicas run only within its team's quota, never on "
                              "borrowed capacity, so it could never run")
        raise NeverFits("; ".join(n for n in nevers if n))
    return resolved


def _host_paths(cp: Checking, spec: JobSpec) -> None:
    """InvalidJob when a host path the job names (its mounts, its workdir) breaks the rules of
    fairpod.sandbox.hostpaths on this host (the supervisor checks again on the replica's node)."""
    if not spec.mounts and not spec.workdir:  # nothing to check (most jobs): fairpod's own paths not even listed
        return
    protected = [str(cp.home), *hostpaths.protected_dirs(runs_dir(cp.home), cp.checkpoint_root())]
    allow = cp.spec.cluster.mounts.allow
    try:
        for m in (m for m in spec.mounts if not hostpaths.own_shm(m)):
            hostpaths.check(m.split(":")[0], what=f"mount {m}", allow=allow, protected=protected, bound=True)
        if spec.workdir:
            hostpaths.check(spec.workdir, what=f"workdir {spec.workdir}", allow=allow, protected=protected,
                            bound=bool(spec.image))
    except hostpaths.HostPathError as e:
        raise InvalidJob(str(e)) from None


def submit_array(cp: CoreState, spec: JobSpec, text: str, actor: str,
                 key: str | None = None) -> tuple[list[Job], bool]:
    """Queue every task of the job array ``text`` (``0-9%2``, ``1,3,5``) in one transaction; with a
    throttle the tasks beyond it are held (:mod:`fairpod.server.core.transitions.array_holds`). An idempotency ``key`` repeated
    by the same ``actor`` returns what the first request created (its tasks; the one job when the key was used
    for a job), decided under the lock, so two requests with one key make one array; and whether this request
    created them."""
    indices, limit = array_holds.plan(spec, text)
    with cp._change():
        if key is not None and (jid := cp.store.submitted_with(actor, key)) is not None:
            first = cp.store.get_job(jid)
            if first is not None:
                return arrays.same_array(cp.store, first) or [first], False
        spec = spec.model_copy(update={"user": actor})  # who submitted it: the caller, whatever was sent
        resolved = _admissible(cp, spec)
        try:
            with cp.store.tx() as t:
                tasks = array_holds.insert_tasks(t, spec, resolved, text, indices, limit, actor)
                if key is not None:
                    t.remember_submit(actor, key, tasks[0].id)
        except AlreadyExists as e:
            raise JobExists(str(e)) from None
        array_holds.admit_tasks(cp, tasks, limit)
    cp.wake.set()
    return tasks, True


def _workload(cp: Checking, resolved: ResolvedJob, spec: JobSpec) -> Workload:
    """The engine's view of a job being submitted (its minimum gang, on one of its types)."""
    f = kind_fields(spec.kind, spec.nodes, spec.max_nodes)
    return Workload("", spec.team, resolved.instance_type, spec.nodes, Res(*resolved.per_replica),
                    quota_bound=f["quota_bound"])


def _beyond_quota(cp: Checking, resolved: ResolvedJob, spec: JobSpec) -> str | None:
    """:func:`fairpod.governance.feasible.beyond_quota`: a service's minimum beyond its team's whole quota."""
    return feasible.beyond_quota(cp.snap, _workload(cp, resolved, spec))


def _never_fits(cp: Checking, resolved: ResolvedJob, spec: JobSpec) -> str | None:
    """:func:`fairpod.governance.feasible.never_fits` on the live cluster (nodes may still join)."""
    itype = resolved.instance_type
    w = _workload(cp, resolved, spec)
    quota_types = set() if cp.snap.by_type.get(itype) else {
        q for t in cp.spec.teams for q in cp.spec.team_quota(t)}
    declared = sum(g.count for g in cp.spec.cluster.instance_groups if g.node_type == itype)
    return feasible.never_fits(cp.snap, w, declared=declared, quota_types=quota_types)
