"""Users: the role a user has (admin: everything; group-admin: the teams below its groups, their settings and
jobs; member: its teams' jobs; viewer: read only)."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    ADMIN = "admin"
    GROUP_ADMIN = "group-admin"  # its ``teams`` are the groups it administers
    MEMBER = "member"
    VIEWER = "viewer"
