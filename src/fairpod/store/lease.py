"""The control plane's lease, for standby control planes on one PostgreSQL database (``fairpod up --ha``).

One row, ``ha_lease`` (id 1), names the leader, its **epoch** (a number that grows by one at every change of
leader) and until when its lease holds, in the database's own clock (``clock_timestamp()``: the nodes' clocks
never enter). ``ha_members`` has a row per control plane that took part (its address, role, last heartbeat,
how many of its writes the fence refused), for ``fairpod status``.

:func:`acquire` is the one election step: it takes the row ``FOR UPDATE`` and renews the caller's lease, takes
the lease over when it has expired (epoch + 1), or answers who holds it. :func:`check_fence` runs at the start
of every write transaction of a leader: it reads the row ``FOR SHARE`` and raises :class:`Fenced` unless the
caller still holds its epoch. The share lock means a takeover (an UPDATE of the row) waits for the leader's
write transactions that already passed the check, and every later one sees the new epoch: a write of the old
leader commits either before the takeover (and the new leader reads it when it rebuilds) or never.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, Float, Integer, String, text
from sqlalchemy.orm import Mapped, Session, mapped_column

from fairpod.store.records import StoreError
from fairpod.store.tables import Base

NOW = "EXTRACT(EPOCH FROM clock_timestamp())"


class Fenced(StoreError):
    """A write of a control plane whose lease a newer leader holds (or that lost its lease): refused."""


class LeaseRow(Base):
    __tablename__ = "ha_lease"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    holder: Mapped[str] = mapped_column(String(200))
    url: Mapped[str] = mapped_column(String(400))
    epoch: Mapped[int] = mapped_column(Integer)
    since: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)


class MemberRow(Base):
    __tablename__ = "ha_members"
    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    url: Mapped[str] = mapped_column(String(400))
    pid: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(20))
    started_at: Mapped[float] = mapped_column(Float)
    seen_at: Mapped[float] = mapped_column(Float)
    fenced: Mapped[int] = mapped_column(Integer, default=0)


@dataclass(frozen=True)
class Lease:
    holder: str
    url: str
    epoch: int
    since: float
    expires_at: float
    now: float  # the database's clock when this was read

    @property
    def expired(self) -> bool:
        return self.expires_at <= self.now


@dataclass(frozen=True)
class Member:
    node: str
    url: str
    pid: int
    role: str
    started_at: float
    seen_at: float
    fenced: int


def _lease(conn: Connection | Session, lock: str = "") -> Lease | None:
    row = conn.execute(text(f"SELECT holder, url, epoch, since, expires_at, {NOW} FROM ha_lease WHERE id = 1 {lock}"))
    r = row.first()
    return None if r is None else Lease(str(r[0]), str(r[1]), int(r[2]), float(r[3]), float(r[4]), float(r[5]))


def acquire(conn: Connection, node: str, url: str, epoch: int | None, duration: float,
            lock_timeout_ms: int = 2000) -> Lease:
    """One election step in ``conn``'s open transaction (the caller commits): renew ``node``'s lease when it holds
    ``epoch``, take it when it is free or expired, else leave it. Returns the lease as it now stands."""
    conn.execute(text(f"SET LOCAL lock_timeout = {int(lock_timeout_ms)}"))
    cur = _lease(conn, "FOR UPDATE")
    args = {"node": node, "url": url, "d": float(duration)}
    if cur is None:
        conn.execute(text(f"INSERT INTO ha_lease (id, holder, url, epoch, since, expires_at) VALUES "
                          f"(1, :node, :url, 1, {NOW}, {NOW} + :d) ON CONFLICT (id) DO NOTHING"), args)
    elif cur.holder == node and cur.epoch == epoch:
        conn.execute(text(f"UPDATE ha_lease SET expires_at = {NOW} + :d, url = :url WHERE id = 1"), args)
    elif cur.expired:
        conn.execute(text(f"UPDATE ha_lease SET holder = :node, url = :url, epoch = epoch + 1, since = {NOW}, "
                          f"expires_at = {NOW} + :d WHERE id = 1"), args)
    got = _lease(conn)
    if got is None:
        raise StoreError("the lease row vanished")
    return got


def release(conn: Connection, node: str, epoch: int) -> None:
    """Give the lease up at once (a clean ``fairpod down`` of the leader): a standby takes it at its next try."""
    conn.execute(text(f"UPDATE ha_lease SET expires_at = {NOW} WHERE id = 1 AND holder = :n AND epoch = :e"),
                 {"n": node, "e": epoch})


def check_fence(session: Session, node: str, epoch: int) -> None:
    """Raise :class:`Fenced` unless ``node`` holds the lease at ``epoch`` (see the module's doc)."""
    cur = _lease(session, "FOR SHARE")
    if cur is None or cur.holder != node or cur.epoch != epoch:
        now = f"{cur.holder} holds epoch {cur.epoch}" if cur is not None else "nobody holds the lease"
        raise Fenced(f"write refused: this control plane ({node}) led at epoch {epoch}; {now}")


def current(conn: Connection) -> Lease | None:
    return _lease(conn)


def heartbeat(conn: Connection, node: str, url: str, pid: int, role: str, started_at: float, fenced: int) -> None:
    """Record that ``node`` is alive in ``role`` (``leader`` or ``standby``); ``fenced``: how many more of its
    writes and actions were refused since its last heartbeat (the row keeps the sum across restarts)."""
    conn.execute(text(
        f"INSERT INTO ha_members (node, url, pid, role, started_at, seen_at, fenced) "
        f"VALUES (:node, :url, :pid, :role, :started, {NOW}, :fenced) ON CONFLICT (node) DO UPDATE SET "
        f"url = :url, pid = :pid, role = :role, started_at = :started, seen_at = {NOW}, "
        f"fenced = ha_members.fenced + :fenced"),
        {"node": node, "url": url, "pid": pid, "role": role, "started": started_at, "fenced": fenced})


def members(conn: Connection) -> tuple[list[Member], float]:
    """Every control plane that took part, and the database's clock now."""
    rows = conn.execute(text("SELECT node, url, pid, role, started_at, seen_at, fenced FROM ha_members "
                             "ORDER BY node")).all()
    now = float(conn.execute(text(f"SELECT {NOW}")).scalar_one())
    return [Member(str(r[0]), str(r[1]), int(r[2]), str(r[3]), float(r[4]), float(r[5]), int(r[6] or 0))
            for r in rows], now
