"""Serving the dashboard's files: ``/`` (the page), ``/static/<file>`` (our CSS and JS) and
``/static/plotly.min.js`` (from the installed ``plotly`` package; nothing third-party is copied here).

The files hold no data (the page asks the API for everything with the user's token), so they need no
token. Each is read once, kept in memory, and sent gzip-compressed to browsers that accept it.
"""

from __future__ import annotations

import gzip
import hashlib
from functools import lru_cache
from importlib import resources
from pathlib import Path

from fastapi import FastAPI, Request, Response

from fairpod.server.errors import Problem

OWN = {"app.js": "text/javascript", "app.css": "text/css", "index.html": "text/html"}
PLOTLY = "plotly.min.js"


def _plotly_path() -> Path:
    try:
        import plotly
    except ImportError:  # pragma: no cover - plotly is a dependency
        raise Problem(500, "charting library missing", "the 'plotly' package is not installed; "
                      "reinstall fairpod (pip install fairpod) to get its dependencies") from None
    path = Path(plotly.__file__).parent / "package_data" / PLOTLY
    if not path.exists():
        raise Problem(500, "charting library missing", f"{path} is missing; reinstall the 'plotly' package")
    return path


@lru_cache(maxsize=8)
def load(name: str) -> tuple[bytes, bytes, str]:
    """(raw, gzipped, etag) of one served file."""
    if name == PLOTLY:
        raw = _plotly_path().read_bytes()
    else:
        raw = resources.files("fairpod.dashboard").joinpath("static", name).read_bytes()
    return raw, gzip.compress(raw, 6), hashlib.sha256(raw).hexdigest()[:20]


def _send(request: Request, name: str, media_type: str, max_age: int) -> Response:
    raw, packed, etag = load(name)
    headers = {"ETag": f'"{etag}"', "Cache-Control": f"public, max-age={max_age}" if max_age else "no-cache",
               "Vary": "Accept-Encoding", "X-Content-Type-Options": "nosniff"}
    if request.headers.get("if-none-match") == f'"{etag}"':
        return Response(status_code=304, headers=headers)
    if "gzip" in request.headers.get("accept-encoding", ""):
        return Response(packed, media_type=media_type, headers={**headers, "Content-Encoding": "gzip"})
    return Response(raw, media_type=media_type, headers=headers)


def add_routes(app: FastAPI) -> None:
    @app.get("/", include_in_schema=False)
    def index(request: Request) -> Response:
        return _send(request, "index.html", "text/html; charset=utf-8", 0)

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str, request: Request) -> Response:
        if name == PLOTLY:
            return _send(request, name, "text/javascript; charset=utf-8", 86400)
        if name not in OWN or name == "index.html":
            raise Problem(404, "not found", f"no file {name!r} here")
        return _send(request, name, OWN[name] + "; charset=utf-8", 0)
