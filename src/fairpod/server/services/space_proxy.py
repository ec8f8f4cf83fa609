"""A space's address: an authenticating proxy on the control plane's host, one port (one browser origin) per space.

Each space (``fairpod.model.spaces``) gets this proxy instead of a service's round-robin one (``server.services``
opens it); its URL is ``http://HOST:PORT/spaces/TEAM/NAME/``. A port of its own makes each space its own origin:
an IDE runs the user's code and pages, and one space's pages must not script another space, the dashboard (whose
token sits in the origin's storage) or the API.

Every request is checked before a byte reaches the IDE:

- **Who**: a session cookie the proxy set when a one-time sign-in link (``fairpod space open``) was opened, or
  ``Authorization: Bearer <fairpod token>`` (``fairpod space port-forward``). OwnerOnly: the user who created the
  space, nobody else (an admin stops or deletes it, but never works in it as its user); Public: the members of
  its team.
- **From where**: a request another site or another origin of this host sends (``Sec-Fetch-Site`` same-site or
  cross-site, or an ``Origin`` that is not this proxy's) is refused, except a plain navigation (a link).
- **What goes on**: the caller's ``Authorization``, every ``fairpod*`` cookie and any ``Forwarded``/``X-Forwarded``
  header are dropped; the IDE's own secret of this run (``fairpod.sdk.space``) is added: JupyterLab's token as its
  ``Authorization``, code-server's session cookie (the secret's SHA-256, which code-server compares with its
  ``HASHED_PASSWORD``) in place of any the browser sent, so neither IDE asks for a password. Each connection carries one
  request (``Connection: close``) whose body is passed by its ``Content-Length`` (a chunked request body is
  refused), so no second request reaches the IDE unchecked; a WebSocket upgrade (a notebook's kernel) is spliced
  both ways once the IDE accepted it. A ``Set-Cookie`` of the IDE that names a ``fairpod*`` cookie is dropped.

While the space is not running (waiting, preempted, starting again) the proxy answers with a notice page that says
why (a reclaim names the team and job) and that the space's files are kept; the page reloads itself and opens the
IDE again once it serves.
"""

from __future__ import annotations

import html
import logging
import re
import secrets
import selectors
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from hashlib import sha256

log = logging.getLogger("fairpod.spaces")

HEAD_MAX = 64 * 1024  # bytes of a request's or an answer's head
HEAD_SECONDS = 30.0  # a client has this long to send its request's head
IDLE_SECONDS = 3600.0  # a spliced connection (a kernel's WebSocket) with no byte either way this long is closed
MAX_CONNECTIONS = 256
SESSION_SECONDS = 12 * 3600
COOKIE = "fairpod-space"
DROP = {"authorization", "proxy-authorization", "forwarded", "x-forwarded-for", "x-forwarded-host",
        "x-forwarded-proto", "x-forwarded-port", "x-real-ip", "connection", "keep-alive", "te", "trailer",
        "proxy-connection"}
CODE_SERVER_COOKIE = "code-server-session"  # code-server's CookieKeys.Session
TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


@dataclass(frozen=True)
class Backend:
    """Where the space's IDE listens now and the secret it wants (``fairpod.sdk.space``)."""

    host: str
    port: int
    secret: str
    ide: str


@dataclass(frozen=True)
class Verdict:
    """What the proxy does with a request: ``backend`` to forward to, else ``status`` and a page to answer."""

    backend: Backend | None = None
    status: int = 200
    page: str = ""
    retry: bool = False  # the page reloads itself (the space is not running now)


class Sessions:
    """Browser sessions of one space, in memory (a restarted control plane forgets them: sign in again)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users: dict[str, tuple[str, float]] = {}  # sha256(session) -> (user, expiry)

    def new(self, user: str, now: float) -> str:
        sid = secrets.token_urlsafe(32)
        with self.lock:
            self.users = {k: v for k, v in self.users.items() if v[1] > now}
            self.users[sha256(sid.encode()).hexdigest()] = (user, now + SESSION_SECONDS)
        return sid

    def user(self, sid: str, now: float) -> str | None:
        with self.lock:
            hit = self.users.get(sha256(sid.encode()).hexdigest())
        return hit[0] if hit is not None and hit[1] > now else None


class Request:
    """A request's head as read from the client: method, target, version and headers (names lower-case)."""

    def __init__(self, method: str, target: str, version: str, headers: list[tuple[str, str]]) -> None:
        self.method, self.target, self.version, self.headers = method, target, version, headers

    def get(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name), None)

    def cookies(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for k, v in self.headers:
            if k == "cookie":
                for part in v.split(";"):
                    n, _, val = part.strip().partition("=")
                    out.setdefault(n, val)
        return out

    @property
    def upgrade(self) -> bool:
        return (self.get("upgrade") or "").lower() == "websocket"


class BadRequest(Exception):
    pass


def read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """(head, what followed it) from ``sock``; BadRequest past HEAD_MAX, EOFError when the peer closed first."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > HEAD_MAX:
            raise BadRequest("request head too large")
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def parse(head: bytes) -> Request:
    try:
        lines = head.decode("latin-1").split("\r\n")
    except UnicodeDecodeError:
        raise BadRequest("not HTTP") from None
    parts = lines[0].split(" ")
    if len(parts) != 3 or not TOKEN.match(parts[0]) or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        raise BadRequest("bad request line")
    if not parts[1].startswith("/") or any(c <= " " or c == "\x7f" for c in parts[1]):
        raise BadRequest("bad request target")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not TOKEN.match(name) or any(c in value for c in "\r\n\0"):
            raise BadRequest(f"bad header line {line[:40]!r}")
        headers.append((name.lower(), value.strip()))
    return Request(parts[0], parts[1], parts[2], headers)


def page(title: str, body: str, retry: bool = False) -> str:
    refresh = '<meta http-equiv="refresh" content="2">' if retry else ""
    return (f"<!doctype html><html><head><meta charset=utf-8>{refresh}<title>{html.escape(title)}</title></head>"
            f"<body style='font-family:sans-serif;max-width:48em;margin:3em auto'><h1 id=title>"
            f"{html.escape(title)}</h1><div id=notice>{body}</div></body></html>")


class SpaceProxy:
    """The proxy of one space (``team``/``name``) on ``host:port`` (0: a free one). ``decide(user, bearer)``
    says where a request of ``user`` (signed in by a session; or None and the bearer token it sent) goes."""

    def __init__(self, team: str, name: str, decide: Callable[[str | None, str | None], Verdict],
                 redeem: Callable[[str], str | None], host: str = "127.0.0.1", port: int = 0,
                 sessions: Sessions | None = None) -> None:
        self.team, self.name = team, name
        self.prefix = f"/spaces/{team}/{name}/"
        self.decide, self.redeem = decide, redeem
        self.sessions = sessions if sessions is not None else Sessions()
        self.last_request = time.monotonic()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                if not proxy._slots.acquire(blocking=False):
                    self.request.sendall(_answer(503, "text/plain", "too many connections\n"))
                    return
                try:
                    proxy.serve(self.request)
                except (OSError, EOFError):
                    pass
                finally:
                    proxy._slots.release()

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server((host, port), Handler)
        self.host, self.port = host, int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, name=f"space-{team}-{name}", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"http://{self.host}:{self.port}{self.prefix}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    # -- one connection: one request ---------------------------------------------------------------------------

    def serve(self, client: socket.socket) -> None:
        client.settimeout(HEAD_SECONDS)
        try:
            head, rest = read_head(client)
            req = parse(head)
        except BadRequest as e:
            client.sendall(_answer(400, "text/plain", f"{e}\n"))
            return
        except (TimeoutError, EOFError):
            return
        client.settimeout(None)
        out = self.check(req)
        if isinstance(out, bytes):
            client.sendall(out)
            return
        backend, user = out
        self.last_request = time.monotonic()
        self.forward(client, req, rest, backend)
        log.debug("space %s/%s: %s %s by %s", self.team, self.name, req.method, req.target.split("?")[0], user)

    def check(self, req: Request) -> bytes | tuple[Backend, str]:
        """The answer to send (bytes) or where the request goes and for whom."""
        path, _, query = req.target.partition("?")
        if path == self.prefix.rstrip("/"):
            return _answer(302, "text/plain", "", [("Location", self.prefix)])
        if not path.startswith(self.prefix):
            return _answer(404, "text/plain", f"this address serves only the space {self.prefix}\n")
        site = (req.get("sec-fetch-site") or "").lower()
        navigate = req.method in ("GET", "HEAD") and (req.get("sec-fetch-mode") or "") == "navigate"
        origin = req.get("origin")
        if (site in ("same-site", "cross-site") and not navigate) or (
                origin is not None and origin != f"http://{req.get('host')}" and not navigate):
            return _answer(403, "text/plain", "refused: a request from another site or origin\n")
        now = time.time()
        if path == self.prefix + "_fairpod/signin":
            code = dict(p.partition("=")[::2] for p in query.split("&")).get("code", "")
            user = self.redeem(code) if code else None
            if user is None:
                return _answer(401, "text/html", page(
                    "Sign-in link used or expired",
                    f"<p>Run <code>fairpod space open {html.escape(self.name)}</code> for a new one.</p>"))
            new = self.sessions.new(user, now)
            cookie = f"{COOKIE}={new}; Path={self.prefix}; HttpOnly; SameSite=Strict; Max-Age={SESSION_SECONDS}"
            return _answer(303, "text/plain", "", [("Set-Cookie", cookie), ("Location", self.prefix)])
        sid = req.cookies().get(COOKIE)
        user = self.sessions.user(sid, now) if sid else None
        scheme, _, bearer = (req.get("authorization") or "").partition(" ")
        token = bearer.strip() if scheme.lower() == "bearer" and user is None else None
        if user is None and not token:
            return _answer(401, "text/html", page(
                "Sign in to this space", f"<p>Run <code>fairpod space open {html.escape(self.name)}</code>: it "
                "prints a one-time link that signs this browser in.</p>"))
        v = self.decide(user, token)
        if v.backend is None:
            return _answer(v.status, "text/html", page(_TITLES.get(v.status, "Space"), v.page, v.retry),
                           [("Retry-After", "2")] if v.retry else [])
        return v.backend, user or "(token)"

    def forward(self, client: socket.socket, req: Request, rest: bytes, b: Backend) -> None:
        size = req.get("content-length")
        if req.get("transfer-encoding") is not None or (size is not None and not size.isdigit()):
            client.sendall(_answer(411, "text/plain", "send the request body with a Content-Length\n"))
            return
        body_left = int(size or 0)
        target = req.target
        if b.ide == "code-server":  # it serves from / and works behind a proxy that strips the prefix
            target = "/" + target[len(self.prefix):]
        lines = [f"{req.method} {target} {req.version}"]
        cookies: list[str] = []
        for k, v in req.headers:
            if k in DROP or (k == "upgrade" and not req.upgrade):
                continue
            if k == "cookie":  # fairpod's own and the IDE's session cookie are never the browser's to send
                cookies += [c.strip() for c in v.split(";") if c.strip() and not c.strip().lower().startswith(
                    ("fairpod", CODE_SERVER_COOKIE))]
                continue
            lines.append(f"{k}: {v}")
        if b.ide == "jupyter":
            lines.append(f"authorization: token {b.secret}")
        else:  # code-server: its session cookie, the hash of this run's secret (fairpod.sdk.space.code_server)
            cookies.append(f"{CODE_SERVER_COOKIE}={sha256(b.secret.encode()).hexdigest()}")
        if cookies:
            lines.append("cookie: " + "; ".join(cookies))
        lines.append("connection: upgrade" if req.upgrade else "connection: close")
        try:
            up = socket.create_connection((b.host, b.port), timeout=10)
        except OSError:
            client.sendall(_answer(503, "text/html", page("Space starting", "<p>The IDE does not answer yet.</p>",
                                                         True)))
            return
        with up:
            up.settimeout(None)
            up.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            first, body_left = rest[:body_left], body_left - len(rest[:body_left])
            if first:
                up.sendall(first)
            if not req.upgrade and body_left > 0:
                _copy(client, up, body_left)
            try:
                head, after = read_head(up)
            except (BadRequest, EOFError):
                client.sendall(_answer(502, "text/plain", "the IDE's answer was not HTTP\n"))
                return
            kept = [ln for ln in head.split(b"\r\n")
                    if not re.match(rb"(?i)^set-cookie:\s*fairpod", ln)]
            client.sendall(b"\r\n".join(kept) + b"\r\n\r\n" + after)
            if req.upgrade and head.split(b" ", 2)[1:2] == [b"101"]:
                _splice(client, up)
            else:
                _drain(up, client)


_TITLES = {403: "Not your space", 404: "No such space", 503: "Space not running"}


def _answer(status: int, ctype: str, text: str, extra: list[tuple[str, str]] | None = None) -> bytes:
    body = text.encode()
    reason = {200: "OK", 302: "Found", 303: "See Other", 400: "Bad Request", 401: "Unauthorized",
              403: "Forbidden", 404: "Not Found", 411: "Length Required", 502: "Bad Gateway",
              503: "Service Unavailable"}.get(status, "")
    head = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {ctype}; charset=utf-8", f"Content-Length: {len(body)}",
            "Cache-Control: no-store", "Connection: close", *(f"{k}: {v}" for k, v in extra or [])]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def _copy(src: socket.socket, dst: socket.socket, n: int) -> None:
    while n > 0:
        chunk = src.recv(min(n, 65536))
        if not chunk:
            return
        dst.sendall(chunk)
        n -= len(chunk)


def _drain(src: socket.socket, dst: socket.socket) -> None:
    """The rest of the IDE's answer, until it closes (it was asked to: ``Connection: close``)."""
    src.settimeout(IDLE_SECONDS)
    while chunk := src.recv(65536):
        dst.sendall(chunk)


def _splice(a: socket.socket, b: socket.socket) -> None:
    """Bytes both ways (a WebSocket) until either side closes or nothing moves for IDLE_SECONDS."""
    sel = selectors.DefaultSelector()
    sel.register(a, selectors.EVENT_READ, b)
    sel.register(b, selectors.EVENT_READ, a)
    try:
        while True:
            ready = sel.select(IDLE_SECONDS)
            if not ready:
                return
            for key, _ in ready:
                chunk = key.fileobj.recv(65536)  # type: ignore[union-attr]
                if not chunk:
                    return
                key.data.sendall(chunk)
    finally:
        sel.close()


__all__ = ["Backend", "SpaceProxy", "Verdict"]
