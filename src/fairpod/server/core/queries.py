"""Read-only queries of the store: what the routes, the views and the keepers read, as typed functions.

The control plane's store is the core's (:mod:`fairpod.server.core`): only its transitions write it. Every other
module reads it through :class:`Queries` (``cp.queries``), which has no method that writes. None of them takes
the core's lock: each reads the committed state in a transaction of its own (SQLite's WAL lets readers run beside
the writer), except on the reconcile loop's own thread during its turn, where it also sees the turn's job writes
not flushed yet (:class:`fairpod.server.core.batch.BatchingStore`). That is the door for a control plane whose API
reads without the core: nothing here needs the core's memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from fairpod.model.jobs import JobState
from fairpod.server.accounting.rollups import integrals
from fairpod.server.accounting.usage_math import Integrals
from fairpod.server.arrays import same_array
from fairpod.server.core import task_index
from fairpod.server.core.task_index import RecentRow, TaskRow
from fairpod.store.records import Event, Job, Node, SpecVersion, User

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

    from fairpod.server.core.batch import BatchingStore
    from fairpod.store.core import Tx
    from fairpod.store.records import AuditEntry


class Queries:
    """The store, read only (see the module's doc). Filters are the store's own keyword arguments."""

    def __init__(self, store: BatchingStore) -> None:
        self._store = store

    # -- jobs ----------------------------------------------------------------------------------------------
    def get_job(self, job_id: int) -> Job | None:
        return self._store.get_job(job_id)

    def get_jobs(self, job_ids: Iterable[int]) -> dict[int, Job]:
        return self._store.get_jobs(job_ids)

    def list_jobs(self, **filters: Any) -> list[Job]:
        return self._store.list_jobs(**filters)

    def count_jobs(self, **filters: Any) -> int:
        return self._store.count_jobs(**filters)

    def jobs_named(self, teams: Iterable[str], name: str) -> list[Job]:
        return self._store.jobs_named(teams, name)

    def get_job_by_name(self, team: str, name: str) -> Job | None:
        """The team's unfinished job of that name, else its most recently submitted one, else None."""
        return self._store.get_job_by_name(team, name)

    def unfinished_teams(self) -> set[str]:
        return self._store.unfinished_teams()

    def array_firsts_named(self, teams: Iterable[str], prefix: str) -> list[Job]:
        return self._store.array_firsts_named(teams, prefix)

    def same_array(self, first: Job) -> list[Job] | None:
        """Every task of the array whose first task is ``first`` (None if ``first`` is no array task)."""
        return same_array(self._store, first)

    def jobs_between(self, since: float, until: float, teams: Iterable[str] | None = None) -> list[Job]:
        return self._store.jobs_between(since, until, teams)

    def job_lifecycle_events(self, job_ids: Iterable[int], kinds: Iterable[str]) -> list[Event]:
        return self._store.job_lifecycle_events(job_ids, kinds)

    @contextmanager
    def read(self) -> Iterator[Tx]:
        """One read-only transaction: several reads from one snapshot of the database (a page and its count)."""
        with self._store.tx(write=False) as t:
            yield t

    # -- the dashboard's pages (fairpod.server.core.task_index) ---------------------------------------------------
    def unfinished_rows(self, teams: list[str] | None, placement: bool) -> list[TaskRow]:
        return task_index.unfinished_rows(self._store.store, teams, placement)

    def unfinished_counts(self, teams: list[str] | None) -> task_index.Unfinished:
        return task_index.unfinished_counts(self._store.store, teams)

    @staticmethod
    def page_runs(counts: task_index.Unfinished, states: tuple[JobState, ...], offset: int,
                  limit: int) -> task_index.PageRuns:
        return task_index.page_runs(counts, states, offset, limit)

    def unfinished_page(self, page: task_index.PageRuns, positions: dict[int, int]) -> list[int]:
        return task_index.unfinished_page(self._store.store, page, positions)

    def window_figures(self, since: float, until: float, teams: list[str] | None, states: list[JobState] | None,
                       ended: int) -> task_index.WindowFigures:
        return task_index.window_figures(self._store.store, since, until, teams, states, ended)

    @staticmethod
    def window_figures_of(rows: list[RecentRow], since: float, states: list[JobState] | None,
                          ended: int) -> task_index.WindowFigures:
        return task_index.window_figures_of(rows, since, states, ended)

    def recent_rows(self, since: float, until: float, teams: list[str] | None,
                    placement: bool) -> list[RecentRow]:
        return task_index.recent_rows(self._store.store, since, until, teams, placement)

    def node_page(self, limit: int, offset: int, problems_first: bool) -> task_index.NodePage:
        return task_index.node_page(self._store.store, limit, offset, problems_first)

    # -- events, audit, users -------------------------------------------------------------------------------
    def list_events(self, **filters: Any) -> list[Event]:
        return self._store.list_events(**filters)

    def list_audit(self, **filters: Any) -> list[AuditEntry]:
        return self._store.list_audit(**filters)

    def list_users(self) -> list[User]:
        return self._store.list_users()

    def get_user(self, name: str) -> User | None:
        return self._store.get_user(name)

    def verify_token(self, token: str) -> User | None:
        """The user of a live API token (remembered for a moment: every request checks one)."""
        return self._store.verify_token(token)

    def verified_token(self, token: str) -> User | None:
        """The user of a token verified a moment ago, without the database; None: ask :meth:`verify_token`."""
        return self._store.verified_token(token)

    # -- nodes, the spec, meta --------------------------------------------------------------------------------
    def get_node(self, name: str) -> Node | None:
        return self._store.get_node(name)

    def list_nodes(self, **filters: Any) -> list[Node]:
        return self._store.list_nodes(**filters)

    def node_groups(self) -> dict[str, str]:
        return self._store.node_groups()

    def spec_version(self) -> int:
        return self._store.spec_version()

    def spec_history(self, limit: int = 100) -> list[SpecVersion]:
        return self._store.spec_history(limit)

    def spec_at(self, version: int) -> SpecVersion:
        return self._store.spec_at(version)

    def get_meta(self, key: str) -> str | None:
        return self._store.get_meta(key)

    # -- usage ----------------------------------------------------------------------------------------------
    def integrals(self, edges: Sequence[float], until: float, kind: str | None = None) -> Integrals:
        """Usage integrated between ``edges`` (:func:`fairpod.server.accounting.rollups.integrals`)."""
        return integrals(self._store.store, edges, until, kind)

    def usage_span(self) -> tuple[float | None, float | None]:
        return self._store.usage_span()

    def first_rollup(self, res: int | None = None) -> float | None:
        return self._store.first_rollup(res)

    # -- the database itself ------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return str(self._store.url)

    @property
    def engine(self) -> Engine:
        """For counting reads in SQL (``/metrics``, the watchdog's look at stored specs); nothing writes with it."""
        return self._store.engine

    def ping(self) -> None:
        """Raises what the driver raises when the database cannot be reached (``fairpod.server.keepers.outage``)."""
        self._store.ping()

    def connect(self) -> Connection:
        """A connection for reads in SQL (see :attr:`engine`)."""
        return self._store.engine.connect()
