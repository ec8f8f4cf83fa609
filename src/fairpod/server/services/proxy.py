"""A service's stable address: a small round-robin HTTP proxy on the control plane's host.

One proxy per service (``server.services``), on its own port, forwards each request to the next ready replica of
the service's endpoint list as it is at that moment (a drained replica is no longer in it). A replica that refuses
the connection (it died between two readiness probes) is skipped and the request goes to the next one, so the
client sees an error only when no replica can take it (503). Request and answer bodies are passed whole (no
streaming); hop-by-hop headers are dropped.
"""

from __future__ import annotations

import http.client
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger("fairpod.proxy")

HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
       "transfer-encoding", "upgrade", "host", "content-length"}
TIMEOUT = 60.0  # seconds a replica may take to answer


class Proxy:
    """Listens on ``host:port`` (0: a free port) and sends requests to ``pick(tried)``: the next endpoint
    (host, port) not in ``tried``, or None when none is left."""

    def __init__(self, name: str, pick: Callable[[set[tuple[str, int]]], tuple[str, int] | None],
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self.name = name
        self.pick = pick
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: object) -> None:
                log.debug("%s: " + fmt, proxy.name, *args)

            def _forward(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size) if size > 0 else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                tried: set[tuple[str, int]] = set()
                while (to := proxy.pick(tried)) is not None:
                    tried.add(to)
                    conn = http.client.HTTPConnection(to[0], to[1], timeout=TIMEOUT)
                    try:
                        conn.connect()
                    except OSError:
                        conn.close()
                        continue  # not listening (any more): the request was not sent, the next replica takes it
                    try:
                        conn.request(self.command, self.path, body=body, headers=headers)
                        resp = conn.getresponse()
                        data = resp.read()
                    except (OSError, http.client.HTTPException) as e:
                        conn.close()
                        self._answer(502, f"service {proxy.name}: replica {to[0]}:{to[1]} failed: {e}\n".encode())
                        return
                    conn.close()
                    self.send_response(resp.status, resp.reason)
                    for k, v in resp.getheaders():
                        if k.lower() not in HOP:
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                    return
                self._answer(503, f"service {proxy.name}: no ready replica\n".encode())

            def _answer(self, status: int, text: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _forward

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.host, self.port = host, int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, name=f"proxy-{name}", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)
