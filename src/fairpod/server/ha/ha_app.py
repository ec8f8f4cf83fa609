"""The HTTP face of a control plane under election (``fairpod up --ha``): one ASGI app in front of the
leader's app (:func:`fairpod.server.api.app.create_app`, built when this node wins).

- ``GET /api/v1/ha`` (both roles, no token: it names addresses only): who leads, its epoch, since when, the
  standbys (:meth:`fairpod.server.ha.leader.Elector.status`);
- ``GET /healthz``: the leader's own answer; a standby's says ``"role": "standby"`` and the leader's address;
- ``GET /metrics``: the leader's metrics followed by the election's; a standby answers the election's only;
- the dashboard's pages (GET outside ``/api/``) on a standby: a redirect (307) to the leader;
- everything else on a standby (and on a leader that stepped down): 503 with the leader's address in the
  detail and in the ``X-Fairpod-Leader`` header, which the CLI and the SDK follow.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio

from fairpod import __version__
from fairpod.server.ha.leader import Elector

LEADER_HEADER = "x-fairpod-leader"
Scope = dict[str, Any]


async def _send_json(send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None,
                     media: bytes = b"application/json") -> None:
    raw = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", media), (b"content-length", str(len(raw)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": raw})


class HaApp:
    def __init__(self, elector: Elector) -> None:
        self.elector = elector
        self.inner: Any = None  # the leader's app, once built

    async def _lifespan(self, receive: Any, send: Any) -> None:
        from fairpod.server.api.app import api_threads, switch_interval

        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                anyio.to_thread.current_default_thread_limiter().total_tokens = api_threads()
                sys.setswitchinterval(switch_interval())
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _leader_url(self) -> str | None:
        last = self.elector.last
        return None if last is None or last.holder == self.elector.node else last.url

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = scope.get("path", "")
        if path == "/api/v1/ha":
            try:
                body = await anyio.to_thread.run_sync(self.elector.status)
            except Exception as e:  # the database is out of reach: say so, with what this node knows
                await _send_json(send, 503, {"node": self.elector.node, "role": self.elector.role,
                                             "detail": f"cannot read the lease: {str(e).splitlines()[0]}"})
                return
            await _send_json(send, 200, body)
            return
        leading = self.inner is not None and self.elector.holds()
        if leading and path == "/metrics":
            await self.inner(scope, receive, self._with_metrics(send))
            return
        if leading:
            await self.inner(scope, receive, send)
            return
        if path == "/metrics":
            raw = self.elector.metrics().encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/plain; version=0.0.4"),
                                    (b"content-length", str(len(raw)).encode())]})
            await send({"type": "http.response.body", "body": raw})
            return
        url = self._leader_url()
        if path == "/healthz":
            await _send_json(send, 200, {"ok": True, "version": __version__, "pid": os.getpid(),
                                         "role": self.elector.role, "leader": url})
            return
        if url and scope.get("method") == "GET" and not path.startswith("/api/"):  # the dashboard: to the leader
            query = scope.get("query_string", b"")
            target = (url + path + (f"?{query.decode()}" if query else "")).encode()
            await send({"type": "http.response.start", "status": 307,
                        "headers": [(b"location", target), (b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        where = f"the leader is at {url}" if url else "no leader is known yet; try again in a few seconds"
        await _send_json(send, 503, {"type": "about:blank", "title": "standby", "status": 503,
                                     "detail": f"this fairpod control plane ({self.elector.node}) is a standby; "
                                               f"{where}"},
                         [(LEADER_HEADER.encode(), url.encode())] if url else [(b"retry-after", b"1")],
                         b"application/problem+json")

    def _with_metrics(self, send: Any) -> Any:
        """``send`` with the election's metrics added to a 200 answer of the leader's /metrics."""
        state: dict[str, Any] = {}

        async def wrapped(msg: dict[str, Any]) -> None:
            if msg["type"] == "http.response.start":
                state["start"] = msg
                state["body"] = b""
                return
            state["body"] += msg.get("body", b"")
            if msg.get("more_body"):
                return
            start = state["start"]
            body = state["body"]
            if start["status"] == 200:
                body += self.elector.metrics().encode()
            headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        return wrapped
