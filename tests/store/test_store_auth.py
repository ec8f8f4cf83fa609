"""Tokens: issue, verify, revoke; only the hash is stored."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest

from fairpod.model.users import Role
from fairpod.store import TOKEN_PREFIX, NotFound, Store


def _raw(tmp_path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(tmp_path / "fairpod.db")
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_issue_verify_revoke(store: Store):
    store.create_user("alice", Role.ADMIN, ["john"])
    t1 = store.issue_token("alice", "laptop", now=1.0)
    t2 = store.issue_token("alice", "ci")
    assert t1.startswith(TOKEN_PREFIX) and len(t1) > 40 and t1 != t2
    user = store.verify_token(t1, now=100.0)
    assert user is not None and (user.name, user.role, user.teams) == ("alice", Role.ADMIN, ["john"])
    assert store.verify_token(t1 + "x") is None
    assert store.verify_token("fp_nope") is None
    assert store.verify_token("") is None
    assert store.verify_token(None) is None  # type: ignore[arg-type]

    infos = store.list_tokens("alice")
    assert [(i.description, i.created_at, i.revoked_at) for i in infos] == [
        ("laptop", 1.0, None),
        ("ci", infos[1].created_at, None),
    ]
    assert infos[0].last_used_at == 100.0
    store.verify_token(t1, now=120.0)  # within the touch interval: not written
    assert store.list_tokens("alice")[0].last_used_at == 100.0
    store.verify_token(t1, now=200.0)
    assert store.list_tokens("alice")[0].last_used_at == 200.0

    assert store.revoke_token(t1, now=300.0)
    assert not store.revoke_token(t1)
    assert store.verify_token(t1) is None
    assert store.verify_token(t2) is not None
    assert store.revoke_token(infos[1].id)
    assert store.verify_token(t2) is None
    assert store.list_tokens("alice", include_revoked=False) == []
    assert store.list_tokens()[0].revoked_at == 300.0
    with pytest.raises(NotFound):
        store.issue_token("nobody")


def test_only_the_hash_is_stored(store: Store, tmp_path: Path):
    store.create_user("bob")
    token = store.issue_token("bob")
    rows = _raw(tmp_path, "SELECT * FROM tokens")
    assert len(rows) == 1
    assert hashlib.sha256(token.encode()).hexdigest() in rows[0]
    secret = token[len(TOKEN_PREFIX) :]
    con = sqlite3.connect(tmp_path / "fairpod.db")
    dump = "\n".join(con.iterdump())
    con.close()
    assert secret not in dump and secret[:12] not in dump


def test_revoke_user_tokens_and_delete_user(store: Store, tmp_path: Path):
    store.create_user("carol")
    a, b = store.issue_token("carol"), store.issue_token("carol")
    assert store.revoke_user_tokens("carol") == 2
    assert store.verify_token(a) is None and store.verify_token(b) is None
    c = store.issue_token("carol")
    assert store.verify_token(c) is not None
    assert store.delete_user("carol")
    assert store.verify_token(c) is None
    assert _raw(tmp_path, "SELECT count(*) FROM tokens") == [(0,)]


def test_a_verified_token_is_remembered_briefly_and_forgotten_on_any_change(store: Store, db_url: str,
                                                                            monkeypatch: pytest.MonkeyPatch):
    import time

    import fairpod.store.auth as auth

    store.create_user("bob", Role.MEMBER, ["john"])
    tok = store.issue_token("bob")
    assert store.verify_token(tok) is not None
    # a revoke through this store takes effect on the very next request
    assert store.revoke_token(tok) is True
    assert store.verify_token(tok) is None
    # team changes are seen at once too
    tok2 = store.issue_token("bob")
    assert store.verify_token(tok2).teams == ["john"]
    store.update_user("bob", {"teams": ["smith"]})
    assert store.verify_token(tok2).teams == ["smith"]
    # a change through another connection to the database (another process) is seen within VERIFIED_FOR_S
    monkeypatch.setattr(auth, "VERIFIED_FOR_S", 0.3)
    assert store.verify_token(tok2) is not None
    other = Store(db_url)
    try:
        assert other.revoke_token(tok2) is True
    finally:
        other.close()
    time.sleep(0.4)
    assert store.verify_token(tok2) is None


def test_verified_token_answers_from_memory_only_what_verify_token_would(store: Store,
                                                                         monkeypatch: pytest.MonkeyPatch):
    """``verified_token`` (what an event loop may ask, server.access.auth.principal) never reads the database: a
    token is known to it only after ``verify_token`` checked it, and not once it is revoked, its user changed,
    its ``VERIFIED_FOR_S`` past or its touch due."""
    import fairpod.store.auth as auth

    store.create_user("bob", Role.MEMBER, ["john"])
    tok = store.issue_token("bob")
    assert store.verified_token(tok) is None  # never verified here: only verify_token can tell
    t0 = time.time()
    assert store.verify_token(tok, now=t0) is not None
    bob = store.verified_token(tok, now=t0 + 1)
    assert bob is not None and bob.name == "bob" and bob.teams == ["john"]
    assert store.verified_token(tok, now=t0 + auth.TOUCH_INTERVAL_S) is None  # its last use is due a write
    assert store.verified_token(tok + "x") is None and store.verified_token("not a token") is None
    store.update_user("bob", {"teams": ["smith"]})
    assert store.verified_token(tok) is None  # forgotten on the change
    assert store.verify_token(tok).teams == ["smith"]
    assert store.verified_token(tok).teams == ["smith"]
    monkeypatch.setattr(auth, "VERIFIED_FOR_S", 0.0)
    assert store.verified_token(tok) is None  # remembered no longer than verify_token remembers it
    monkeypatch.undo()
    assert store.revoke_token(tok) is True
    assert store.verified_token(tok) is None
