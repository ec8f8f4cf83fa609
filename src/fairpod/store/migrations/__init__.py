"""Alembic migrations of the store's schema (``versions/``: one file per change, oldest first).

The store runs them itself at start-up (``fairpod.store.schema.migrate``); no ``alembic.ini`` is needed.
A developer who changes ``fairpod.store.tables`` adds a revision here; ``tests/store/test_migrations.py``
fails until the migrated schema equals the tables.
"""
