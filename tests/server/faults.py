"""Store writes that fail, injected where the database is written (tests only): an SQLAlchemy hook on the store's
engine raises before an INSERT, UPDATE or DELETE reaches the database, so every layer above it (the batching
store, the control plane, the routes) meets the failure as it would meet a full disk."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

WRITES = ("insert", "update", "delete")


def fail_writes(engine: Engine, when: Callable[[], bool] = lambda: True,
                error: BaseException | type[BaseException] | None = None) -> Callable[[], None]:
    """Every later write through ``engine`` raises ``error`` (default: SQLite's "database or disk is full") while
    ``when()`` holds. Returns the function that ends it."""

    def hook(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
        if statement.lstrip().split(None, 1)[0].lower() in WRITES and when():
            raise error if error is not None else sqlite3.OperationalError("database or disk is full")

    event.listen(engine, "before_cursor_execute", hook)
    return lambda: event.remove(engine, "before_cursor_execute", hook) if event.contains(
        engine, "before_cursor_execute", hook) else None
