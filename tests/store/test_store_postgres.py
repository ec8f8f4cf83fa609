"""The backend-neutral store tests, run again against PostgreSQL when one can be had; skipped otherwise.

Set FAIRPOD_TEST_PG_URL (e.g. postgresql+psycopg://user:pw@host/db, a database the tests may wipe), or
have psycopg installed and PostgreSQL's initdb/pg_ctl on PATH (or under /usr/lib/postgresql/*/bin):
then a throw-away server is started on a Unix socket for this module.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator

import pytest

from fairpod.model.spec import ClusterSpec
from fairpod.store import Store

from . import (
    test_engine_jobs,
    test_lookups,
    test_store_auth,
    test_store_jobs,
    test_store_tables,
    test_store_tx,
    test_submitted,
)
from .conftest import wipe

CASES: list[Callable[..., None]] = [
    test_store_tables.test_spec_round_trip_and_versions,
    test_store_tables.test_meta,
    test_store_tables.test_nodes_crud,
    test_store_tables.test_events_append_and_filters,
    test_store_tables.test_users_crud,
    test_store_tables.test_audit,
    test_store_jobs.test_insert_and_get_round_trip,
    test_store_jobs.test_update_every_field_kind,
    test_store_jobs.test_update_rejects_bad_input_and_changes_nothing,
    test_store_jobs.test_expect_state_is_compare_and_set,
    test_store_jobs.test_name_unique_among_unfinished_jobs,
    test_store_jobs.test_list_filters_and_order,
    test_engine_jobs.test_the_light_read_is_the_whole_read_field_for_field,
    test_lookups.test_jobs_named_is_the_per_team_lookup_for_every_team_at_once,
    test_lookups.test_an_arrays_tasks_and_first_tasks_by_name_prefix,
    test_lookups.test_unfinished_teams,
    test_store_auth.test_issue_verify_revoke,
    test_store_tx.test_failure_half_way_leaves_nothing,
    test_store_tx.test_store_error_inside_tx_rolls_back_earlier_writes,
    test_store_tx.test_tx_commits_and_sees_its_own_writes,
    test_store_tx.test_read_only_tx,
    test_store_tx.test_threads_write_and_stream_concurrently,
    test_submitted.test_a_groups_keys_are_looked_up_and_recorded_together,
]


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    s = Store(pg_url)
    wipe(s.engine)
    s.create_all()
    s.create_all()
    yield s
    s.close()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_on_postgresql(pg_store: Store, cluster: ClusterSpec, case: Callable[..., None]):
    assert pg_store.dialect == "postgresql"
    args = {"store": pg_store, "cluster": cluster}
    case(**{name: args[name] for name in inspect.signature(case).parameters})
