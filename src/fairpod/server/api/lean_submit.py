"""An API worker's lean door for submits: ``POST /api/v1/jobs`` answered without FastAPI's machinery.

A worker spends most of its CPU on submits, and of a submit's CPU a large part was FastAPI's around the route (the
request object, the dependencies solved, the body read and validated as a parameter, the exception middleware):
benchmarks/README.md, "A lean door for a worker's submits". This ASGI wrapper answers the submit that is valid as
it comes: a bearer token this process verified a moment ago (``auth.remembered_bearer``), an ``Idempotency-Key``
that is valid or absent, a JSON body within ``MAX_BODY`` that parses into a :class:`~fairpod.model.jobs.JobSpec`
exactly as FastAPI parses it (``json.loads``, then the model's validation in Python mode). It then answers with the
route's own code (:func:`fairpod.server.api.routes_jobs.submitted`), whose errors (a team not the caller's, a job
the cluster cannot hold, a name taken) are rendered by the same functions as the app's exception handlers.

Every other request, and any submit this door would have to judge otherwise (another credential, a token not
verified here lately, a body that is not a valid job, not JSON, too large, a header repeated or invalid), goes to
the FastAPI app with its body replayed as it came: every refusal is FastAPI's own, word for word."""

from __future__ import annotations

import json
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fairpod.model.jobs import JobSpec
from fairpod.server.access.auth import Principal, remembered_bearer
from fairpod.server.api.app import problem
from fairpod.server.api.limits import MAX_BODY
from fairpod.server.api.routes_jobs import KEY_MAX, KEY_PATTERN, submitted
from fairpod.server.core.api import Core
from fairpod.server.errors import HTTP_STATUS, Problem, http_problem

PATH = "/api/v1/jobs"
_KEY = re.compile(KEY_PATTERN)
# the one media type this door reads as JSON (FastAPI reads +json types too, and, where its content type is not
# strict, a body without one: those are its own to answer)
_JSON = "application/json"


class LeanSubmit:
    """The ASGI wrapper (module docstring): ``POST /api/v1/jobs`` as above, everything else to ``app``."""

    def __init__(self, app: ASGIApp, cp: Core, limit: int = MAX_BODY) -> None:
        self.app, self.cp, self.limit = app, cp, limit
        self.answered = 0  # submits this door answered itself (a test's window on it)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH or scope["query_string"]:
            return await self.app(scope, receive, send)
        head = _headers(scope)
        if head is None:
            return await self.app(scope, receive, send)
        taken: list[Message] = []
        body = await self._body(receive, taken, head.get(b"content-length"))
        asked = None if body is None else self._asked(head, body)
        if asked is None:
            return await self.app(scope, _replay(taken, receive), send)
        spec, p, key = asked
        try:
            resp = await submitted(self.cp, spec, p, key)
        except Problem as e:
            resp = problem(e.status, e.title, e.detail)
        except tuple(HTTP_STATUS) as e:  # the store's and the domain's errors: the app's one table
            resp = problem(*http_problem(e))
        self.answered += 1
        await resp(scope, receive, send)

    async def _body(self, receive: Receive, taken: list[Message], declared: bytes | None) -> bytes | None:
        """The whole body, or None (what was read is in ``taken``) for the app to answer: over the limit,
        declared so, or the client gone."""
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            return None
        parts: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            taken.append(msg)
            if msg["type"] != "http.request":
                return None
            part = msg.get("body", b"")
            size += len(part)
            if size > self.limit:
                return None
            parts.append(part)
            if not msg.get("more_body", False):
                return b"".join(parts)

    def _asked(self, head: dict[bytes, bytes], body: bytes) -> tuple[JobSpec, Principal, str | None] | None:
        """(the job, its caller, its key) when FastAPI would take all three as they are; None otherwise."""
        kind = head.get(b"content-type", b"").decode("latin-1").partition(";")[0].strip().lower()
        if kind != _JSON or not body:
            return None
        key = head.get(b"idempotency-key")
        idem = None if key is None else key.decode("latin-1")
        if idem is not None and (len(idem) > KEY_MAX or not _KEY.fullmatch(idem)):
            return None
        p = remembered_bearer(self.cp.queries, head.get(b"authorization", b"").decode("latin-1"), self.cp.spec)
        if p is None:
            return None
        try:
            spec = JobSpec.model_validate(json.loads(body), from_attributes=True)  # as FastAPI validates
        except Exception:  # noqa: BLE001  # not JSON, not a job, nested past the parser's depth: FastAPI says which
            return None
        return spec, p, idem


def _headers(scope: Scope) -> dict[bytes, bytes] | None:
    """The request's headers this door reads, by lowercase name; None when one of them is repeated (which
    value counts is then FastAPI's to say)."""
    out: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        low = name.lower()
        if low in (b"content-length", b"content-type", b"idempotency-key", b"authorization"):
            if low in out:
                return None
            out[low] = value
    return out


def _replay(taken: list[Message], receive: Receive) -> Receive:
    """A receive that gives back what this door read, then the rest from the client."""
    queue = list(taken)

    async def again() -> Message:
        return queue.pop(0) if queue else await receive()

    return again


__all__ = ["PATH", "LeanSubmit"]
