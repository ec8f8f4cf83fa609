"""Errors of the control plane.

The core (``fairpod.server.control`` and its parts) raises *domain* errors: what went wrong, in words a person
can act on, with no notion of HTTP. Only the API layer (``fairpod.server.app`` and the routes) turns them into
HTTP problem documents (:data:`HTTP_STATUS`); the routes' own request errors are :class:`Problem`.
"""

from __future__ import annotations


class DomainError(Exception):
    """A request the control plane refuses; ``title`` names the kind, ``detail`` says why."""

    title = "refused"

    def __init__(self, detail: str, title: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        if title is not None:
            self.title = title


class InvalidJob(DomainError):
    """The job spec does not fit the cluster spec (unknown team, priority class, instance type, no command)."""

    title = "invalid job"


class NeverFits(DomainError):
    """The job can never run on this cluster, however long it waits."""

    title = "job can never run"


class JobExists(DomainError):
    """A job of that name is already active in the team."""

    title = "job exists"


class WrongState(DomainError):
    """The object is not in a state that allows the request (a finished job, a team with jobs, a busy node)."""

    title = "conflict"


HTTP_STATUS: dict[type[DomainError], int] = {InvalidJob: 400, NeverFits: 400, JobExists: 409, WrongState: 409}


def http_status(e: DomainError) -> int:
    return next((s for cls, s in HTTP_STATUS.items() if isinstance(e, cls)), 409)


class Problem(Exception):
    """An error for the API caller, raised by routes: HTTP status and a message a person can act on."""

    def __init__(self, status: int, title: str, detail: str):
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
