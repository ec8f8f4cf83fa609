from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fairpod.model.spec import ClusterSpec, seed_spec
from fairpod.store import Store


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
