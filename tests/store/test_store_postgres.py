"""The backend-neutral store tests, run again against PostgreSQL when one can be had; skipped otherwise.

Set FAIRPOD_TEST_PG_URL (e.g. postgresql+psycopg://user:pw@host/db, a database the tests may wipe), or
have psycopg installed and PostgreSQL's initdb/pg_ctl on PATH (or under /usr/lib/postgresql/*/bin):
then a throw-away server is started on a Unix socket for this module.
"""

from __future__ import annotations

import glob
import inspect
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator

import pytest

from fairpod.model.spec import ClusterSpec
from fairpod.store import Store
from fairpod.store.tables import Base

from . import test_store_auth, test_store_jobs, test_store_tables, test_store_tx

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
    test_store_auth.test_issue_verify_revoke,
    test_store_tx.test_failure_half_way_leaves_nothing,
    test_store_tx.test_store_error_inside_tx_rolls_back_earlier_writes,
    test_store_tx.test_tx_commits_and_sees_its_own_writes,
    test_store_tx.test_read_only_tx,
    test_store_tx.test_threads_write_and_stream_concurrently,
]


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    cands = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return cands[-1] if cands else None


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    url = os.environ.get("FAIRPOD_TEST_PG_URL")
    if url:
        yield url
        return
    pytest.importorskip("psycopg")
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl)")
    prefix: list[str] = []
    if os.geteuid() == 0:  # postgres refuses to run as root
        runuser = shutil.which("runuser")
        if not runuser or subprocess.run(["id", "postgres"], capture_output=True).returncode != 0:
            pytest.skip("running as root without a postgres user to run the server as")
        prefix = [runuser, "-u", "postgres", "--"]
    d = tempfile.mkdtemp(prefix="fairpod-pg-")
    if prefix:
        shutil.chown(d, "postgres")
    data = os.path.join(d, "data")
    try:
        subprocess.run([*prefix, initdb, "-A", "trust", "-U", "fairpod", "-D", data], check=True,
                       capture_output=True, timeout=120)  # fmt: skip
        opts = f"-k {d} -c listen_addresses='' -p 54329 -c fsync=off"
        subprocess.run([*prefix, pg_ctl, "-D", data, "-o", opts, "-l", os.path.join(d, "log"), "-w", "start"],
                       check=True, capture_output=True, timeout=60)  # fmt: skip
    except (subprocess.SubprocessError, OSError) as e:
        shutil.rmtree(d, ignore_errors=True)
        pytest.skip(f"could not start a PostgreSQL server: {e}")
    try:
        yield f"postgresql+psycopg://fairpod@/postgres?host={d}&port=54329"
    finally:
        subprocess.run(
            [*prefix, pg_ctl, "-D", data, "-m", "immediate", "stop"], capture_output=True, timeout=60
        )
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    s = Store(pg_url)
    Base.metadata.drop_all(s.engine)
    s.create_all()
    s.create_all()
    yield s
    s.close()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_on_postgresql(pg_store: Store, cluster: ClusterSpec, case: Callable[..., None]):
    assert pg_store.dialect == "postgresql"
    args = {"store": pg_store, "cluster": cluster}
    case(**{name: args[name] for name in inspect.signature(case).parameters})
