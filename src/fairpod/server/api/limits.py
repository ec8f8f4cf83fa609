"""Bounds of what the API accepts, and the error responses it declares (RFC 9457 problem documents).

Every number that reaches the store fits a signed 64-bit integer; every list the API returns is bounded; a
request body is at most MAX_BODY bytes. Checked before anything is written.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import FastAPI, Query
from pydantic import BeforeValidator
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_ID = 2**63 - 1
MAX_BODY = 1024 * 1024  # bytes of a request body (a cluster spec with thousands of teams fits)
MAX_PAGE = 10_000  # events, audit records, health checks per request

MAX_EXACT = 2**53 - 1  # the largest integer every JSON parser reads exactly


def _whole(value: Any) -> Any:
    """A JSON number without a fraction (``3`` or ``3.0``: one number, an ``integer`` to JSON Schema) as an int;
    anything else goes on to a strict int check, which refuses booleans, strings and ``3.5``."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# after Field(strict=True, ...) in Annotated (before it, pydantic writes the Field's bounds into the JSON schema
# as they are: ge/le, not minimum/maximum): an integer as JSON Schema means it, never a boolean or a string
Whole = BeforeValidator(_whole)

SinceId = Annotated[int | None, Query(ge=0, le=MAX_ID)]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE)]

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["title", "status", "detail"],
    "properties": {"type": {"type": "string"}, "title": {"type": "string"}, "status": {"type": "integer"},
                   "detail": {"type": "string"}},
}
_PROBLEM = {"content": {"application/problem+json": {"schema": PROBLEM_SCHEMA}}}
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"description": "malformed request", **_PROBLEM},
    401: {"description": "not authenticated", **_PROBLEM},
    403: {"description": "forbidden", **_PROBLEM},
    404: {"description": "not found", **_PROBLEM},
    409: {"description": "conflict", **_PROBLEM},
    413: {"description": "request body too large", **_PROBLEM},
    422: {"description": "invalid request", **_PROBLEM},
}


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the API documents for ``path`` (for the ``Allow`` header of a 405): those of the most
    specific path templates that match it (``/nodes/{name}/health`` before ``/nodes/{name}/{action}``)."""
    table: list[tuple[int, re.Pattern[str], list[str]]] | None = getattr(app.state, "allow_table", None)
    if table is None:
        table = []
        for template, ops in app.openapi().get("paths", {}).items():
            rx = re.sub(r"\\\{[^}:]+:path\\\}", ".+", re.escape(template))
            rx = re.sub(r"\\\{[^}]+\\\}", "[^/]+", rx)
            literal = sum(1 for part in template.split("/") if part and not part.startswith("{"))
            table.append((literal, re.compile(rx), [m.upper() for m in ops if m != "parameters"]))
        app.state.allow_table = table
    found = [(literal, methods) for literal, rx, methods in table if rx.fullmatch(path)]
    best = max((literal for literal, _ in found), default=0)
    return sorted({m for literal, methods in found if literal == best for m in methods})


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes is answered 413 before the route reads it."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _too_large(send, self.limit)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise TooLarge(self.limit)
            return msg

        try:
            await self.app(scope, counted, send)
        except TooLarge:
            await _too_large(send, self.limit)


class TooLarge(HTTPException):
    """A body that grew past the limit while a route read it (sent in chunks, without a Content-Length). An
    HTTPException, so that FastAPI's body reading lets it through (it answers any other error there with its own
    400, "There was an error parsing the body") to the app's handler (``app.add_problem_handlers``): the same 413
    as one declared too large."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, too_large_detail(limit))


TOO_LARGE = "request body too large"


def too_large_detail(limit: int) -> str:
    return f"the request body is over {limit} bytes"


async def _too_large(send: Send, limit: int) -> None:
    import json

    body = json.dumps({"type": "about:blank", "title": TOO_LARGE, "status": 413,
                       "detail": too_large_detail(limit)}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/problem+json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
