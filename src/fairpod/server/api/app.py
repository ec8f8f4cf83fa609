"""The HTTP API (FastAPI) under /api/v1. Errors are JSON problem documents (RFC 9457)."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from fairpod import __version__, governance
from fairpod.model.spec import ClusterSpec
from fairpod.server.access import registries
from fairpod.server.api import (
    api_rules,
    metrics,
    routes_admin,
    routes_backup,
    routes_dashboard,
    routes_explain,
    routes_jobs,
    routes_reports,
    routes_resilience,
    routes_services,
    routes_spec,
    routes_static,
)
from fairpod.server.api.limits import PROBLEM_RESPONSES, TOO_LARGE, BodyLimit, TooLarge, allowed_methods
from fairpod.server.core.api import Core
from fairpod.server.errors import HTTP_STATUS, Problem, http_problem
from fairpod.server.keepers import diskfull, outage
from fairpod.server.services import spaces


def problem(status: int, title: str, detail: str) -> JSONResponse:
    return JSONResponse({"type": "about:blank", "title": title, "status": status, "detail": detail},
                        status_code=status, media_type="application/problem+json")


def _loc(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "request"


API_THREADS = 8  # threads serving the API's (synchronous) routes; FAIRPOD_API_THREADS overrides
SWITCH_INTERVAL_MS = 1.0  # how long a thread may hold the GIL while another waits; FAIRPOD_SWITCH_INTERVAL_MS


def _setting(var: str, default: float, lo: float, hi: float, kind: type[int] | type[float]) -> float:
    """The environment variable ``var`` (``default`` when unset) as ``kind``, from ``lo`` to ``hi``; anything
    else ends the server with one line."""
    raw = os.environ.get(var, "").strip() or str(default)
    try:
        value = kind(raw) if kind is float or raw.isdigit() else None
    except ValueError:
        value = None
    if value is None or not lo <= value <= hi:  # NaN is in no range
        what = "a whole number" if kind is int else "a number"
        raise SystemExit(f"fairpod: error: {var} must be {what} from {lo:g} to {hi:g}, not {raw!r}")
    return value


def api_threads() -> int:
    """How many requests run at once (``FAIRPOD_API_THREADS``, default 8; anyio's own default is 40). Route
    code is Python under one GIL on a few cores: more threads add no throughput, only more threads taking
    the GIL from the reconcile turn, which then collects exits and starts jobs later."""
    return int(_setting("FAIRPOD_API_THREADS", API_THREADS, 1, 1000, int))


def switch_interval() -> float:
    """The interpreter's thread switch interval in seconds (``FAIRPOD_SWITCH_INTERVAL_MS``, default 1 ms;
    Python's own is 5 ms). Under load a request's thread and the reconcile loop give the GIL up at every
    socket and SQLite call; each time they get it back only after whoever took it (a CPU-bound forecast,
    another request) has run its interval out. Shorter intervals cut those waits, which add up per request."""
    return _setting("FAIRPOD_SWITCH_INTERVAL_MS", SWITCH_INTERVAL_MS, 0.1, 100, float) / 1000


def add_problem_handlers(app: FastAPI) -> None:
    """Errors as problem documents: the app's and an API worker's (fairpod.server.api.worker_app) alike."""

    @app.exception_handler(Problem)
    async def _problem(_: Request, e: Problem) -> JSONResponse:
        return problem(e.status, e.title, e.detail)

    async def _known(_: Request, e: Exception) -> JSONResponse:
        return problem(*http_problem(e))

    for known in HTTP_STATUS:  # domain and store errors: one table (server.errors)
        app.add_exception_handler(known, _known)

    @app.exception_handler(TooLarge)
    async def _large(_: Request, e: TooLarge) -> JSONResponse:
        return problem(413, TOO_LARGE, str(e.detail))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        msgs = [f"{_loc(err['loc'])}: {err['msg']}" for err in e.errors()]
        return problem(422, "invalid request", "; ".join(msgs))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException) -> JSONResponse:
        """Starlette's own errors (unknown path, unparsable body, wrong method) as problem documents; a 405
        names in ``Allow`` the methods of every route of that path, not only of the first that matched."""
        resp = problem(e.status_code, HTTPStatus(e.status_code).phrase.lower(), str(e.detail))
        if e.status_code == 405:
            resp.headers["Allow"] = ", ".join(allowed_methods(request.app, request.url.path))
        return resp


def create_app(cp: Core, job_secret: bytes) -> FastAPI:
    threads = api_threads()
    interval = switch_interval()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = threads
        before = sys.getswitchinterval()
        sys.setswitchinterval(interval)
        try:
            yield
        finally:
            sys.setswitchinterval(before)

    app = FastAPI(title="fairpod", version=__version__, lifespan=lifespan,
                  description="Share one accelerator cluster fairly between teams.")
    app.state.cp = cp

    def openapi() -> dict[str, Any]:  # FastAPI's document, with the models of bodies the routes read themselves
        if app.openapi_schema is None:
            app.openapi_schema = api_rules.document(FastAPI.openapi(app), [ClusterSpec])
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.state.job_secret = job_secret  # verifies job tokens (server.access.jobtoken)

    add_problem_handlers(app)
    diskfull.add_handlers(app, cp, problem)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> Any:
        body = {"ok": True, "version": __version__, "cycles": cp.cycles, "pid": os.getpid(),
                "engine": governance.engine_name()}  # native or pure Python (fairpod.native)
        bad = diskfull.health(cp) or outage.health(cp)
        return body if bad is None else JSONResponse({**body, **bad}, status_code=503)

    app.add_middleware(BodyLimit)
    api = APIRouter(prefix="/api/v1", responses=PROBLEM_RESPONSES)
    routes_jobs.add_routes(api, cp)
    routes_resilience.add_routes(api, cp)
    routes_admin.add_routes(api, cp)
    routes_dashboard.add_routes(api, cp)
    routes_reports.add_routes(api, cp)
    routes_explain.add_routes(api, cp)
    routes_backup.add_routes(api, cp)
    routes_spec.add_routes(api, cp)
    routes_services.add_routes(api, cp)
    spaces.add_routes(api, cp)
    registries.add_routes(api, cp)
    app.include_router(api)
    metrics.add_routes(app, cp)
    routes_static.add_routes(app)
    return app
