"""Finding jobs by name and by job array, in one query whatever the number of teams or jobs.

A name given to ``get-job`` by someone who sees every team is looked up in all of them, and a name that is no plain
job may be a job array's: both were a query per team (two for a team whose job of that name had finished), and the
array's by reading every job of every team. Each is one indexed query here: ``ix_jobs_team_name`` for names and
name prefixes, ``ix_jobs_array_id`` for an array's tasks. Which teams have unfinished jobs (asked before a spec
that drops teams is taken) is one ``DISTINCT`` instead of every unfinished job's record. The jobs submitted
since a ``seq`` (what the core of ``fairpod up --api-workers`` takes in at a turn: jobs its API workers committed) are
one range of ``ix_jobs_team_seq`` per team.

Writers of submits on PostgreSQL (the core and API processes, each with its own connections) take
:meth:`JobLookupOps.serialize` first: what SQLite's one writer gives by itself (a second submit with the same
Idempotency-Key or the same name sees the first's commit) PostgreSQL's READ COMMITTED gives once the two wait for
each other.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import bindparam, func, select, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import Text

from fairpod.store.db import Ops
from fairpod.store.jobs import to_job
from fairpod.store.records import Job
from fairpod.store.tables import FINISHED_STATES, JobRow, table

_JOBS = table(JobRow)
# one transaction-scoped advisory lock per name, taken in the order of their hashes (two writers never wait on
# each other crosswise); held until the transaction ends
_SERIALIZE = text("SELECT count(pg_advisory_xact_lock(h)) FROM (SELECT DISTINCT hashtextextended(n, 0) AS h "
                  "FROM unnest(:names) AS n ORDER BY h) AS locks").bindparams(bindparam("names", type_=ARRAY(Text)))
_NOTIFY = text("SELECT pg_notify(:channel, '')")


class JobLookupOps(Ops):
    def get_job_by_name(self, team: str, name: str) -> Job | None:
        """The team's unfinished job of that name, else its most recently submitted one, else None."""
        found = self.jobs_named([team], name)
        return found[0] if found else None

    def jobs_named(self, teams: Iterable[str], name: str) -> list[Job]:
        """For each of ``teams`` that has a job called ``name``: its unfinished one, else its most recently
        submitted one (``get_job_by_name`` of each), in the order of ``teams``."""
        teams = list(dict.fromkeys(teams))
        if not teams:
            return []
        c = _JOBS.c
        named = (c.team.in_(teams), c.name == name)
        with self._session(False) as s:
            conn = s.connection()
            rows = {r.team: r for r in conn.execute(select(_JOBS).where(*named, c.state.not_in(FINISHED_STATES)))}
            rest = [t for t in teams if t not in rows]
            if rest:
                newest = (select(func.max(c.seq)).where(c.team.in_(rest), c.name == name).group_by(c.team)
                          .scalar_subquery())
                rows.update({r.team: r for r in conn.execute(select(_JOBS).where(c.seq.in_(newest)))})
            return [to_job(rows[t]) for t in teams if t in rows]  # type: ignore[arg-type]

    def array_firsts_named(self, teams: Iterable[str], prefix: str) -> list[Job]:
        """The first tasks of the job arrays of ``teams`` whose task names start with ``prefix`` (an array ``x``
        names its tasks ``x-1``, ``x-2`` ...: give ``"x-"``), oldest first."""
        teams = list(dict.fromkeys(teams))
        if not teams or not prefix:
            return []
        c = _JOBS.c
        # a range of the (team, name) index instead of LIKE, whose wildcards a name may hold
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        q = (select(_JOBS).where(c.team.in_(teams), c.name >= prefix, c.name < upper, c.array_id == c.id)
             .order_by(c.seq))
        with self._session(False) as s:
            return [to_job(r) for r in s.connection().execute(q)]  # type: ignore[arg-type]

    def array_tasks(self, array_id: int) -> list[Job]:
        """Every task of the job array ``array_id`` (its first task's id), in submission order."""
        q = select(_JOBS).where(_JOBS.c.array_id == array_id).order_by(_JOBS.c.seq)
        with self._session(False) as s:
            return [to_job(r) for r in s.connection().execute(q)]  # type: ignore[arg-type]

    def unfinished_teams(self) -> set[str]:
        """The teams that have an unfinished job."""
        c = _JOBS.c
        with self._session(False) as s:
            return set(s.connection().execute(select(c.team).where(c.state.not_in(FINISHED_STATES)).distinct())
                       .scalars())

    def last_seq(self) -> int:
        """The newest job's ``seq`` (0 without jobs): taken from a counter in each insert's transaction, so a job
        committed later has a larger one, on SQLite and PostgreSQL alike (the counter's row orders its writers)."""
        with self._session(False) as s:
            return int(s.connection().execute(select(func.max(_JOBS.c.seq))).scalar() or 0)

    def seqs_after(self, seq: int, teams: Iterable[str], limit: int = 5000) -> list[tuple[int, int, str, int | None]]:
        """(id, seq, state, array id) of the jobs of ``teams`` with a ``seq`` above ``seq``, at most ``limit``,
        oldest first: the narrow columns only (the core asks each turn, and most of what it finds are its own
        submits, known already)."""
        teams = list(dict.fromkeys(teams))
        if not teams:
            return []
        c = _JOBS.c
        q = select(c.id, c.seq, c.state, c.array_id).where(c.team.in_(teams), c.seq > seq).order_by(c.seq).limit(limit)
        with self._session(False) as s:
            return [(r.id, r.seq, r.state, r.array_id) for r in s.connection().execute(q)]

    def serialize(self, names: Iterable[str]) -> None:
        """Wait until no other transaction holds any of ``names`` and hold them until this one ends (call it first
        in a write transaction: a submit's ``key:<user>:<key>`` and ``name:<team>:<name>``). PostgreSQL: an
        advisory lock per name (``pg_advisory_xact_lock``), so the statements after it (READ COMMITTED: each its
        own snapshot) see what the other writer committed: its idempotency key, its unfinished job of that name.
        SQLite: nothing to do, its write transactions are one at a time (``BEGIN IMMEDIATE``)."""
        names = sorted(set(names))
        if not names:
            return
        with self._session(True) as s:
            conn = s.connection()
            if conn.dialect.name == "postgresql":
                conn.execute(_SERIALIZE, {"names": names})

    def notify(self, channel: str) -> None:
        """PostgreSQL: ``pg_notify(channel)`` in this write transaction, delivered to the channel's listeners on its
        commit only (:mod:`fairpod.store.notify`: how a submit committed outside the core wakes it). SQLite:
        nothing (its API workers wake the core over HTTP, :class:`fairpod.server.core.worker.Poke`)."""
        with self._session(True) as s:
            conn = s.connection()
            if conn.dialect.name == "postgresql":
                conn.execute(_NOTIFY, {"channel": channel})
