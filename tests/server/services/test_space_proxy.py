"""A space's proxy (fairpod.server.services.space_proxy) in-process, in front of a real HTTP server standing for the IDE
that records every request it gets: what a hostile caller sends never reaches the IDE, and the IDE's secret does."""

from __future__ import annotations

import hashlib
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fairpod.server.services.space_proxy import Backend, SpaceProxy, Verdict

SECRET = "ide-secret-of-this-run"


class Ide:
    """A stand-in for the IDE: answers 200 with a Set-Cookie that names a fairpod cookie, records the heads."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []  # path, headers (a header sent twice: joined by " | ")
        ide = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                heads: dict[str, str] = {}
                for k, v in self.headers.items():
                    heads[k.lower()] = f"{heads[k.lower()]} | {v}" if k.lower() in heads else v
                ide.seen.append((self.path, heads))
                body = b"ide"
                self.send_response(200)
                self.send_header("Set-Cookie", "fairpod-space=planted; Path=/")
                self.send_header("Set-Cookie", "_xsrf=ok; Path=/")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET

            def log_message(self, *a: object) -> None:
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()


@pytest.fixture
def proxy() -> Iterator[tuple[SpaceProxy, Ide, list[str]]]:
    ide = Ide()
    codes = {"good-code": "alice"}

    def decide(user: str | None, token: str | None) -> Verdict:
        who = user or {"tok-alice": "alice", "tok-bob": "bob", "tok-admin": "admin"}.get(token or "")
        if who != "alice":  # OwnerOnly: alice's; bob is her teammate, admin the cluster's admin
            return Verdict(status=403, page="<p>not yours</p>")
        return Verdict(backend=Backend("127.0.0.1", ide.srv.server_address[1], SECRET, "jupyter"))

    p = SpaceProxy("smith", "nb", decide, lambda c: codes.pop(c, None))
    yield p, ide, list(codes)
    p.close()
    ide.srv.shutdown()


def raw(p: SpaceProxy, data: bytes) -> bytes:
    with socket.create_connection((p.host, p.port), timeout=10) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def get(p: SpaceProxy, path: str = "/spaces/smith/nb/lab", headers: str = "") -> bytes:
    return raw(p, f"GET {path} HTTP/1.1\r\nHost: {p.host}:{p.port}\r\n{headers}\r\n".encode())


def test_who_may_come_in(proxy):
    p, ide, _ = proxy
    assert get(p).startswith(b"HTTP/1.1 401") and b"fairpod space open nb" in get(p)
    for tok in ("tok-bob", "tok-admin", "made-up"):  # her teammate, the admin, a guess
        assert get(p, headers=f"Authorization: Bearer {tok}\r\n").startswith(b"HTTP/1.1 403")
    assert get(p, "/spaces/smith/other/", "Authorization: Bearer tok-alice\r\n").startswith(b"HTTP/1.1 404")
    assert ide.seen == []
    assert get(p, headers="Authorization: Bearer tok-alice\r\n").startswith(b"HTTP/1.1 200")


def test_what_reaches_the_ide(proxy):
    p, ide, _ = proxy
    out = get(p, headers="Authorization: Bearer tok-alice\r\nCookie: fairpod-space=abc; _xsrf=1; fairpodx=2\r\n"
              "X-Forwarded-For: 10.0.0.1\r\nForwarded: for=evil\r\n")
    assert out.startswith(b"HTTP/1.1 200") and out.endswith(b"ide")
    assert b"fairpod-space=planted" not in out and b"_xsrf=ok" in out  # the IDE cannot plant fairpod's cookie
    path, h = ide.seen[-1]
    assert path == "/spaces/smith/nb/lab"
    assert h["authorization"] == f"token {SECRET}"  # its own secret, never the caller's fairpod token
    assert "tok-alice" not in str(h) and h["cookie"] == "_xsrf=1" and h["connection"] == "close"
    assert "x-forwarded-for" not in h and "forwarded" not in h



def test_what_reaches_code_server():
    """code-server gets its session cookie (the SHA-256 of this run's secret, what its HASHED_PASSWORD is:
    fairpod.sdk.space) in place of any the caller sent, the path without the space's prefix, and no
    Authorization at all."""
    ide = Ide()
    backend = Backend("127.0.0.1", ide.srv.server_address[1], SECRET, "code-server")
    p = SpaceProxy("smith", "ed", lambda user, token: Verdict(backend=backend) if token == "tok-alice" else
                   Verdict(status=403, page="no"), lambda c: None)
    try:
        out = get(p, "/spaces/smith/ed/stable/x.js", "Authorization: Bearer tok-alice\r\n"
                  "Cookie: code-server-session=planted; fairpod-space=abc; key=1\r\n")
        assert out.startswith(b"HTTP/1.1 200")
        path, h = ide.seen[-1]
        assert path == "/stable/x.js" and "authorization" not in h
        assert h["cookie"] == f"key=1; code-server-session={hashlib.sha256(SECRET.encode()).hexdigest()}"
        assert get(p, "/spaces/smith/ed/", "Authorization: Bearer tok-bob\r\n").startswith(b"HTTP/1.1 403")
        assert len(ide.seen) == 1
    finally:
        p.close()
        ide.srv.shutdown()

def test_a_second_request_on_the_connection_is_not_passed_unchecked(proxy):
    p, ide, _ = proxy
    smuggled = b"GET /spaces/smith/nb/second HTTP/1.1\r\nHost: x\r\nCookie: fairpod-space=stolen\r\n\r\n"
    out = raw(p, b"POST /spaces/smith/nb/api HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-alice\r\n"
                 b"Content-Length: 4\r\n\r\nbody" + smuggled)
    assert out.startswith(b"HTTP/1.1 200")
    assert [s for s, _ in ide.seen] == ["/spaces/smith/nb/api"]  # only the checked one
    chunked = raw(p, b"POST /spaces/smith/nb/api HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-alice\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\n")
    assert chunked.startswith(b"HTTP/1.1 411") and len(ide.seen) == 1


def test_another_origin_of_the_host_cannot_drive_it(proxy):
    p, ide, _ = proxy
    # another space's page (another port of this host: same-site) posting with the victim's session cookie
    for extra in ("Sec-Fetch-Site: same-site\r\nSec-Fetch-Mode: cors\r\n", "Origin: http://127.0.0.1:1\r\n"):
        assert get(p, headers="Authorization: Bearer tok-alice\r\n" + extra).startswith(b"HTTP/1.1 403")
    assert ide.seen == []
    for bad in (b"GET http://evil/ HTTP/1.1\r\n\r\n", b"GET /spaces/smith/nb/ HTTP/1.1\r\nBad Header\r\n\r\n",
                b"x" * 70_000):
        assert raw(p, bad).startswith(b"HTTP/1.1 400")


def test_a_one_time_link_gives_a_session_cookie_once(proxy):
    p, ide, (code,) = proxy
    out = get(p, f"/spaces/smith/nb/_fairpod/signin?code={code}").decode()
    assert out.startswith("HTTP/1.1 303") and "Location: /spaces/smith/nb/" in out
    cookie = next(ln for ln in out.split("\r\n") if ln.startswith("Set-Cookie:"))
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/spaces/smith/nb/" in cookie
    sid = cookie.split("=", 1)[1].split(";")[0]
    assert get(p, headers=f"Cookie: fairpod-space={sid}\r\n").startswith(b"HTTP/1.1 200")
    assert "fairpod" not in ide.seen[-1][1].get("cookie", "")
    assert get(p, f"/spaces/smith/nb/_fairpod/signin?code={code}").startswith(b"HTTP/1.1 401")  # spent
    assert get(p, headers="Cookie: fairpod-space=forged\r\n").startswith(b"HTTP/1.1 401")
