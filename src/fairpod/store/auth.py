"""Users, API tokens and the audit log.

A token is ``fp_`` + ``secrets.token_urlsafe(32)``; only its SHA-256 hex digest is stored, so a copy of
the database gives no usable token. ``verify_token`` records ``last_used_at`` at most once a minute per
token, so authenticating a request is normally a read only; a token verified in the last
``VERIFIED_FOR_S`` seconds is not read again (every change of users or tokens through this store forgets what was
verified at once, so a revoke through the API takes effect on the next request; a change made to the database
by another process takes effect within ``VERIFIED_FOR_S``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, insert, select, update

from fairpod.model.users import Role
from fairpod.store import fields as f
from fairpod.store.db import Ops
from fairpod.store.events import serialize_appends
from fairpod.store.records import AlreadyExists, AuditEntry, NotFound, TokenInfo, User
from fairpod.store.tables import AuditRow, TokenRow, UserRow, table

TOKEN_PREFIX = "fp_"
TOUCH_INTERVAL_S = 60.0
VERIFIED_FOR_S = 5.0
AUDIT_LOCK_KEY = 0x66_70_61_75  # "fpau"
_INSERT_AUDIT = insert(table(AuditRow))

USER_FIELDS: dict[str, f.Conv] = {"role": f.enum(Role), "teams": f.str_list}


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _user_name(name: Any) -> str:
    if not isinstance(name, str) or not name or len(name) > 64:
        raise ValueError("user.name: must be a non-empty string of at most 64 characters")
    return name


def to_user(r: UserRow) -> User:
    return User(r.name, Role(r.role), list(r.teams or []), r.created_at)


def to_token(r: TokenRow) -> TokenInfo:
    return TokenInfo(r.id, r.user, r.created_at, r.revoked_at, r.last_used_at, r.description)


def to_audit(r: AuditRow) -> AuditEntry:
    return AuditEntry(r.id, r.ts, r.actor, r.action, r.target, dict(r.detail or {}))


class AuthOps(Ops):
    # token digest -> (monotonic time verified, user, token id, last_used_at): requests need no read while fresh
    _verified: dict[str, tuple[float, User, int, float | None]]

    def _forget_verified(self) -> None:
        self._verified = {}

    # -- users ---------------------------------------------------------------------------------------
    def create_user(
        self,
        name: str,
        role: Role | str = Role.MEMBER,
        teams: Iterable[str] = (),
        *,
        now: float | None = None,
    ) -> User:
        """Add a user; raises ``AlreadyExists`` if the name is taken."""
        _user_name(name)
        vals = f.check("user", USER_FIELDS, {"role": role, "teams": list(teams)})
        with self._session(True) as s:
            if s.get(UserRow, name) is not None:
                raise AlreadyExists(f"user {name!r} exists already")
            row = UserRow(name=name, created_at=self._now(now), **vals)
            s.add(row)
            s.flush()
            return to_user(row)

    def get_user(self, name: str) -> User | None:
        with self._session(False) as s:
            row = s.get(UserRow, name)
            return None if row is None else to_user(row)

    def list_users(self) -> list[User]:
        with self._session(False) as s:
            return [to_user(r) for r in s.scalars(select(UserRow).order_by(UserRow.name))]

    def update_user(self, name: str, changes: Mapping[str, Any]) -> User:
        """Change ``role`` and/or ``teams``; raises ``NotFound`` or ValueError (nothing changed)."""
        vals = f.check("user", USER_FIELDS, changes)
        self._forget_verified()
        with self._session(True) as s:
            row = s.get(UserRow, name, with_for_update=True)
            if row is None:
                raise NotFound(f"user {name!r} does not exist")
            for k, v in vals.items():
                setattr(row, k, v)
            s.flush()
            return to_user(row)

    def delete_user(self, name: str) -> bool:
        """Delete a user and all their tokens; False if there was no such user."""
        self._forget_verified()
        with self._session(True) as s:
            row = s.get(UserRow, name)
            if row is None:
                return False
            s.execute(delete(TokenRow).where(TokenRow.user == name))
            s.delete(row)
            return True

    # -- tokens --------------------------------------------------------------------------------------
    def issue_token(self, user: str, description: str = "", *, now: float | None = None) -> str:
        """Create a token for ``user`` and return it in plain text: the only time it can be seen."""
        f.check("token", {"description": f.text}, {"description": description})
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self._session(True) as s:
            if s.get(UserRow, user) is None:
                raise NotFound(f"user {user!r} does not exist")
            s.add(
                TokenRow(
                    user=user,
                    token_hash=hash_token(token),
                    created_at=self._now(now),
                    revoked_at=None,
                    last_used_at=None,
                    description=description,
                )
            )
            s.flush()
        return token

    def verify_token(self, token: str, *, now: float | None = None) -> User | None:
        """The user a valid, unrevoked token belongs to; None for any other string."""
        if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX) or len(token) > 256:
            return None
        digest = hash_token(token)
        seen = getattr(self, "_verified", None)
        if seen is None:
            seen = self._verified = {}
        mono = time.monotonic()
        hit = seen.get(digest)
        if hit is not None and mono - hit[0] < VERIFIED_FOR_S:
            _, user, token_id, last = hit
        else:
            with self._session(False) as s:
                row = s.scalars(select(TokenRow).where(TokenRow.token_hash == digest)).first()
                if row is None or not hmac.compare_digest(row.token_hash, digest) or row.revoked_at is not None:
                    seen.pop(digest, None)
                    return None
                urow = s.get(UserRow, row.user)
                if urow is None:
                    return None
                user, token_id, last = to_user(urow), row.id, row.last_used_at
            if len(seen) >= 10_000:
                seen.clear()
            seen[digest] = (mono, user, token_id, last)
        ts = self._now(now)
        if last is None or ts - last >= TOUCH_INTERVAL_S:
            with self._session(True) as s:
                s.execute(update(TokenRow).where(TokenRow.id == token_id).values(last_used_at=ts))
            seen[digest] = (seen.get(digest, (mono,))[0], user, token_id, ts)
        return user

    def verified_token(self, token: str, *, now: float | None = None) -> User | None:
        """What :meth:`verify_token` answers for ``token`` when this store verified it within ``VERIFIED_FOR_S``
        and its last use needs no writing now, without the database (nothing here blocks: an event loop may ask);
        None when only :meth:`verify_token` can tell (not verified here lately, due its touch, or not a token)."""
        if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX) or len(token) > 256:
            return None
        hit = (getattr(self, "_verified", None) or {}).get(hash_token(token))
        if hit is None or time.monotonic() - hit[0] >= VERIFIED_FOR_S:
            return None
        _, user, _, last = hit
        return None if last is None or self._now(now) - last >= TOUCH_INTERVAL_S else user

    def revoke_token(self, token: int | str, *, now: float | None = None) -> bool:
        """Revoke a token given by id or in plain text; False if unknown or already revoked."""
        if isinstance(token, bool) or not isinstance(token, int | str):
            raise TypeError("revoke_token wants a token id or the plain token")
        self._forget_verified()
        cond = TokenRow.id == token if isinstance(token, int) else TokenRow.token_hash == hash_token(token)
        with self._session(True) as s:
            res = s.execute(
                update(TokenRow).where(cond, TokenRow.revoked_at.is_(None)).values(revoked_at=self._now(now))
            )
            return bool(res.rowcount)  # type: ignore[attr-defined]

    def revoke_user_tokens(self, user: str, *, now: float | None = None) -> int:
        """Revoke every live token of ``user``; returns how many."""
        self._forget_verified()
        with self._session(True) as s:
            res = s.execute(
                update(TokenRow).where(TokenRow.user == user, TokenRow.revoked_at.is_(None))
                .values(revoked_at=self._now(now))
            )  # fmt: skip
            return int(res.rowcount)  # type: ignore[attr-defined]

    def list_tokens(self, user: str | None = None, *, include_revoked: bool = True) -> list[TokenInfo]:
        q = select(TokenRow).order_by(TokenRow.id)
        if user is not None:
            q = q.where(TokenRow.user == user)
        if not include_revoked:
            q = q.where(TokenRow.revoked_at.is_(None))
        with self._session(False) as s:
            return [to_token(r) for r in s.scalars(q)]

    # -- audit ---------------------------------------------------------------------------------------
    def append_audit(
        self,
        actor: str,
        action: str,
        target: str = "",
        detail: Mapping[str, Any] | None = None,
        *,
        ts: float | None = None,
    ) -> AuditEntry:
        """Record who did what to what (e.g. actor alice, action job.cancel, target team-a/train)."""
        vals = f.check(
            "audit",
            {"actor": f.text, "action": f.text, "target": f.text, "detail": f.json_of(dict)},
            {"actor": actor, "action": action, "target": target, "detail": dict(detail or {})},
        )
        vals["ts"] = self._now(ts)
        with self._session(True) as s:
            serialize_appends(s, AUDIT_LOCK_KEY)
            res = s.connection().execute(_INSERT_AUDIT, vals)  # Core: every submit writes one
            key = res.inserted_primary_key[0]  # type: ignore[index]  # a one-row insert has its key
            return AuditEntry(key, vals["ts"], vals["actor"], vals["action"], vals["target"], dict(vals["detail"]))

    def list_audit(
        self,
        *,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
        since_id: int | None = None,
        limit: int | None = 1000,
        descending: bool = False,
    ) -> list[AuditEntry]:
        """Audit entries matching every filter with id > ``since_id``, oldest first (or newest first)."""
        q = select(AuditRow)
        if actor is not None:
            q = q.where(AuditRow.actor == actor)
        if action is not None:
            q = q.where(AuditRow.action == action)
        if target is not None:
            q = q.where(AuditRow.target == target)
        if since_id is not None:
            q = q.where(AuditRow.id > since_id)
        q = q.order_by(AuditRow.id.desc() if descending else AuditRow.id)
        if limit is not None:
            q = q.limit(limit)
        with self._session(False) as s:
            return [to_audit(r) for r in s.scalars(q)]
