"""An API worker's HTTP app (``fairpod up --api-workers N``, docs/architecture.md "API workers").

A worker answers three routes itself, with the job routes' own code (:mod:`fairpod.server.api.routes_jobs`: the
same authentication, validation and views) over its view of the cluster (``server.core.worker.WorkerCore``): a
submit (``POST /api/v1/jobs``), list-jobs (``GET /api/v1/jobs``) and get-job (``GET /api/v1/jobs/{ref}``).
Every other request goes unchanged (method, path and query, headers with the caller's credentials, body) to the
core process on its private loopback port, and its answer comes back as it comes, streamed (a followed log).
Every answer that passed a worker says which in ``Fairpod-Api-Worker`` (its PID). A submit valid as it comes is
answered before FastAPI's machinery by :mod:`fairpod.server.api.lean_submit`, with the route's own code.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import APIRouter, FastAPI, Request
from fastapi.routing import APIRoute
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fairpod import __version__
from fairpod.server.api import routes_jobs
from fairpod.server.api.app import add_problem_handlers, problem
from fairpod.server.api.lean_submit import LeanSubmit
from fairpod.server.api.limits import PROBLEM_RESPONSES, BodyLimit
from fairpod.server.core.api import Core

SERVED = {("POST", "/api/v1/jobs"), ("GET", "/api/v1/jobs"), ("GET", "/api/v1/jobs/{ref}")}
# headers of one connection (RFC 9110 7.6.1), not of the request: never passed on
HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


class Signed:
    """Adds ``Fairpod-Api-Worker: <pid>`` to every answer (an ASGI wrapper: no per-request task of its own)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.mark = (b"fairpod-api-worker", str(os.getpid()).encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def signed(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                msg["headers"] = [*msg.get("headers", []), self.mark]
            await send(msg)

        await self.app(scope, receive, signed)


def create_worker_app(cp: Core, job_secret: bytes, core_url: str) -> FastAPI:
    client = httpx.AsyncClient(base_url=core_url, timeout=httpx.Timeout(10.0, read=None, write=60.0),
                               limits=httpx.Limits(max_connections=200, max_keepalive_connections=50))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await client.aclose()

    # no documents of its own: /docs and /openapi.json are the core's, forwarded like any other path
    app = FastAPI(title="fairpod", version=__version__, lifespan=lifespan, openapi_url=None, docs_url=None,
                  redoc_url=None)
    app.state.cp = cp
    app.state.job_secret = job_secret
    add_problem_handlers(app)
    app.add_middleware(BodyLimit)
    api = APIRouter(prefix="/api/v1", responses=PROBLEM_RESPONSES)
    routes_jobs.add_routes(api, cp)  # the job routes themselves; of them, this worker serves SERVED
    api.routes[:] = [r for r in api.routes if isinstance(r, APIRoute) and any((m, r.path) in SERVED
                                                                              for m in r.methods or ())]
    app.include_router(api)

    async def forward(request: Request) -> Response:
        url = httpx.URL(path=request.url.path, query=request.url.query.encode("latin-1"))
        headers = [(k, v) for k, v in request.headers.raw if k.decode("latin-1").lower() not in HOP]
        body = request.stream() if request.method not in ("GET", "HEAD") else None
        req = client.build_request(request.method, url, headers=headers, content=body)
        out: Response
        try:
            resp = await client.send(req, stream=True)
        except httpx.HTTPError as e:
            out = problem(502, "core unavailable", f"the control plane's core did not answer ({type(e).__name__}); "
                          "retry shortly")
            out.headers["Retry-After"] = "2"
            return out
        out = StreamingResponse(resp.aiter_raw(), status_code=resp.status_code, background=BackgroundTask(resp.aclose))
        out.raw_headers = [(k, v) for k, v in resp.headers.raw if k.decode("latin-1").lower() not in HOP]
        return out

    app.add_route("/{path:path}", forward, methods=METHODS, include_in_schema=False)
    return Signed(LeanSubmit(app, cp))  # type: ignore[return-value]  # an ASGI app uvicorn serves as it serves FastAPI's


__all__ = ["SERVED", "create_worker_app"]
