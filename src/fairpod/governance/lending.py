"""Lending limits and absolute borrow limits per instance type (engine rule 2a).

- **Lending limit** L (as Kueue's ``lendingLimit``): a lending team lends at most L of its idle quota; it keeps
  quota - L for its own use alone. What it lends now is min(L, max(0, quota - used)) per resource, so its idle
  quota below quota - L is never lent, and a team whose usage runs into that part lends what is left of its
  quota (the same as Kueue: usage counts first against the part kept back).
- **Absolute borrow limit** A (as HyperPod's ``AbsoluteBorrowLimits``): a borrowing team uses at most
  quota + A, besides the percent limit (quota x (1 + borrow_limit/100)); the lower of the two holds.

No limit given means no limit of that kind. Functions take plain vectors so that the snapshot's bookkeeping
and the quota rules share them.
"""

from __future__ import annotations

from collections.abc import Sequence

Vec3 = Sequence[int]


def lend_quota(quota: Vec3, limit: Vec3 | None) -> tuple[int, int, int]:
    """The part of a lending team's quota others may ever borrow: min(quota, lending limit)."""
    if limit is None:
        return quota[0], quota[1], quota[2]
    return min(quota[0], limit[0]), min(quota[1], limit[1]), min(quota[2], limit[2])


def idle_lendable(quota: Vec3, used: Vec3, limit: Vec3 | None) -> tuple[int, int, int]:
    """What a lending team lends now: its idle quota, at most its lending limit."""
    i0, i1, i2 = max(0, quota[0] - used[0]), max(0, quota[1] - used[1]), max(0, quota[2] - used[2])
    if limit is None:
        return i0, i1, i2
    return min(i0, limit[0]), min(i1, limit[1]), min(i2, limit[2])


def cap_with_absolute(cap: list[int], quota: Vec3, absolute: Vec3 | None) -> list[int]:
    """A borrow cap lowered to quota + the absolute borrow limit, if one is given."""
    if absolute is None:
        return cap
    return [min(cap[d], quota[d] + absolute[d]) for d in range(3)]
