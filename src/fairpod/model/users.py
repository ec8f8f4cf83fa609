"""Users: the role a user has (admin: everything; member: its teams' jobs; viewer: read only)."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"
