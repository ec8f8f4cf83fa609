from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from fairpod.model.spec import ClusterSpec, seed_spec
from fairpod.store import Store
from fairpod.store.tables import Base

from .. import reaper


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'fairpod.db'}"


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url)
    s.create_all()
    yield s
    s.close()


@pytest.fixture
def cluster() -> ClusterSpec:
    return seed_spec()


def wipe(engine: Engine) -> None:
    """Drop every fairpod table and the schema revision (a database as new)."""
    Base.metadata.drop_all(engine)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    cands = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return cands[-1] if cands else None


class PrivatePostgres:
    """A PostgreSQL server of its own in a temporary directory (a Unix socket only), which a test may stop and
    start again (a database outage)."""

    def __init__(self, d: str, prefix: list[str], pg_ctl: str) -> None:
        self.dir, self.prefix, self.pg_ctl = d, prefix, pg_ctl
        self.data = os.path.join(d, "data")
        self.url = f"postgresql+psycopg://fairpod@/postgres?host={d}&port=54329"

    def start(self) -> None:
        reaper.pidfile(Path(self.data) / "postmaster.pid")
        opts = f"-k {self.dir} -c listen_addresses='' -p 54329 -c fsync=off"
        subprocess.run([*self.prefix, self.pg_ctl, "-D", self.data, "-o", opts, "-l", os.path.join(self.dir, "log"),
                        "-w", "start"], check=True, capture_output=True, timeout=60)  # fmt: skip

    def stop(self) -> None:
        subprocess.run([*self.prefix, self.pg_ctl, "-D", self.data, "-m", "immediate", "stop"], capture_output=True,
                       timeout=60)  # fmt: skip


@contextmanager
def postgres_server() -> Iterator[PrivatePostgres]:
    """A :class:`PrivatePostgres`, started; pytest.skip (or, outside pytest, Skipped) when the binaries or a user
    to run it as are missing."""
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
    pg = PrivatePostgres(d, prefix, pg_ctl)
    try:
        subprocess.run([*prefix, initdb, "-A", "trust", "-U", "fairpod", "-D", pg.data], check=True,
                       capture_output=True, timeout=120)  # fmt: skip
        pg.start()
    except (subprocess.SubprocessError, OSError) as e:
        shutil.rmtree(d, ignore_errors=True)
        pytest.skip(f"could not start a PostgreSQL server: {e}")
    try:
        yield pg
    finally:
        pg.stop()
        shutil.rmtree(d, ignore_errors=True)


@contextmanager
def private_postgres() -> Iterator[str]:
    """The URL of a :func:`postgres_server`."""
    with postgres_server() as pg:
        yield pg.url


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    url = os.environ.get("FAIRPOD_TEST_PG_URL")
    if url:
        yield url
        return
    with private_postgres() as got:
        yield got
