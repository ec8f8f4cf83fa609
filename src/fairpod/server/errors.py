"""Errors of the control plane.

The core (``fairpod.server.core`` and its parts) raises *domain* errors: what went wrong, in words a person
can act on, with no notion of HTTP. Only the API layer (``fairpod.server.api.app`` and the routes) turns them into
HTTP problem documents (:data:`HTTP_STATUS`, with the store's NotFound / AlreadyExists / Conflict); the routes' own request errors are :class:`Problem`.
"""

from __future__ import annotations

from fairpod.store.records import AlreadyExists, Conflict, NotFound


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


class BeyondQuota(NeverFits):
    """A service whose minimum replicas are more than its team's whole quota: it never borrows, so it never runs."""

    title = "service minimum beyond quota"


class JobExists(DomainError):
    """A job of that name is already active in the team."""

    title = "job exists"


class WrongState(DomainError):
    """The object is not in a state that allows the request (a finished job, a team with jobs, a busy node)."""

    title = "conflict"


# The one table of the errors the API answers with a problem document: status, and the title when the error
# has none of its own (a store error). Most specific first; any other DomainError is a 409 with its own title.
HTTP_STATUS: dict[type[Exception], tuple[int, str | None]] = {
    InvalidJob: (400, None),
    BeyondQuota: (422, None),
    NeverFits: (400, None),
    JobExists: (409, None),
    WrongState: (409, None),
    NotFound: (404, "not found"),
    AlreadyExists: (409, "already exists"),
    Conflict: (409, "conflict"),
    DomainError: (409, None),
}


def http_problem(e: Exception) -> tuple[int, str, str]:
    """(status, title, detail) of an error of :data:`HTTP_STATUS` (LookupError for any other)."""
    for cls, (status, title) in HTTP_STATUS.items():
        if isinstance(e, cls):
            if isinstance(e, DomainError):
                return status, e.title, e.detail
            return status, title or "refused", str(e)
    raise LookupError(f"no HTTP status for {type(e).__name__}")


class Problem(Exception):
    """An error for the API caller, raised by routes: HTTP status and a message a person can act on."""

    def __init__(self, status: int, title: str, detail: str):
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
