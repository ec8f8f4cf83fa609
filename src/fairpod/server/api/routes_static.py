"""The dashboard's files over HTTP: ``/`` (the page), ``/static/<file>`` (our CSS and JS) and
``/static/plotly.min.js`` (``fairpod.dashboard.assets`` reads them). They hold no data, so they need no token;
each is sent gzip-compressed to browsers that accept it, with an ETag."""

from __future__ import annotations

from fastapi import FastAPI, Request, Response

from fairpod.dashboard.assets import OWN, PLOTLY, MissingAsset, load
from fairpod.server.errors import Problem


def _send(request: Request, name: str, media_type: str, max_age: int) -> Response:
    try:
        raw, packed, etag = load(name)
    except MissingAsset as e:
        raise Problem(500, "charting library missing", str(e)) from None
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
