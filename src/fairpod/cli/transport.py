"""HTTP/1.1 over a plain socket, for the CLI: the few requests a command makes, keep-alive, Content-Length and
chunked bodies, streamed when asked. ``http.client`` would cost more to import (it pulls in ``email`` and
``ssl``) than a command takes to run; https URLs still go through it (imported only then). The socket is the
``_socket`` module's own: ``socket`` would add ``selectors`` and ``array`` to every command's start."""

from __future__ import annotations

import _socket
from collections.abc import Iterator, Mapping

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any

_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
MAX_HEAD = 64 * 1024
_QUICKACK = getattr(_socket, "TCP_QUICKACK", None)  # Linux: no delayed ACK (else 40 ms per answer)


class TransportError(OSError):
    """The connection failed or the answer was not HTTP."""


def quote(text: str, safe: bytes = b"") -> str:
    """Percent-encode ``text`` for a URL (every byte but the unreserved ones and ``safe``)."""
    return "".join(chr(b) if b in _UNRESERVED or b in safe else f"%{b:02X}" for b in text.encode())


def urlencode(pairs: list[tuple[str, str]]) -> str:
    return "&".join(f"{quote(k)}={quote(v)}" for k, v in pairs)


def split_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path prefix) of ``http://host[:port][/prefix]``; ValueError if it is not one."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("http", "https"):
        raise ValueError(url)
    hostport, _, path = rest.partition("/")
    host, port = hostport, 443 if scheme == "https" else 80
    if hostport.startswith("["):  # [::1]:8470
        host, _, tail = hostport[1:].partition("]")
        if tail.startswith(":"):
            port = int(tail[1:])
    elif ":" in hostport:
        host, _, p = hostport.rpartition(":")
        port = int(p)
    if not host:
        raise ValueError(url)
    return scheme, host, port, ("/" + path).rstrip("/")


class Response:
    def __init__(self, conn: Connection, status: int, headers: dict[str, str]) -> None:
        self.conn = conn
        self.status = status
        self.headers = headers
        self._done = False

    def iter_bytes(self) -> Iterator[bytes]:
        """The body, piece by piece as it arrives."""
        if self._done:
            return
        self._done = True
        c = self.conn
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            while True:
                line = c.readline()
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while c.readline() not in (b"", b"\r\n", b"\n"):  # trailers
                        pass
                    return
                yield c.readexact(size)
                c.readline()
        elif "content-length" in self.headers:
            left = int(self.headers["content-length"])
            while left > 0:
                piece = c.readsome(min(left, 65536))
                if not piece:
                    raise TransportError("the server closed the connection in the middle of an answer")
                left -= len(piece)
                yield piece
        else:  # the body ends when the connection does
            c.reusable = False
            while piece := c.readsome(65536):
                yield piece
        if self.headers.get("connection", "").lower() == "close":
            c.reusable = False

    def read(self) -> bytes:
        return b"".join(self.iter_bytes())


def connect(host: str, port: int, timeout: float | None) -> _socket.socket:
    """What ``socket.create_connection`` does: each address of ``host`` in turn, the first that answers."""
    error: OSError | None = None
    name = host.encode() if host.isascii() else host  # a str host costs an import of the idna codec
    for family, kind, proto, _name, addr in _socket.getaddrinfo(name, port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(addr)
            return sock
        except OSError as e:
            sock.close()
            error = e
    raise error if error is not None else OSError(f"no address for {host}")


class Connection:
    """One keep-alive connection to host:port."""

    def __init__(self, host: str, port: int, timeout: float | None, unix: str | None = None) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.unix = unix  # the server's Unix socket (cluster.identity unix: the caller is known by its uid)
        self.sock: _socket.socket | None = None
        self.buf = b""
        self.reusable = True

    def _open(self) -> _socket.socket:
        if self.sock is None:
            if self.unix is not None:
                sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
                try:
                    sock.settimeout(self.timeout)
                    sock.connect(self.unix)
                except OSError:
                    sock.close()
                    raise
                self.sock = sock
            else:
                self.sock = connect(self.host, self.port, self.timeout)
                self.sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            self.buf, self.reusable = b"", True
        return self.sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _fill(self) -> bool:
        assert self.sock is not None
        if _QUICKACK is not None and self.unix is None:  # ack at once: a server that writes head and body apart (Nagle) waits for it
            self.sock.setsockopt(_socket.IPPROTO_TCP, _QUICKACK, 1)
        data = self.sock.recv(65536)
        self.buf += data
        return bool(data)

    def readline(self) -> bytes:
        while b"\n" not in self.buf:
            if len(self.buf) > MAX_HEAD or not self._fill():
                out, self.buf = self.buf, b""
                return out
        line, _, self.buf = self.buf.partition(b"\n")
        return line + b"\n"

    def readexact(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise TransportError("the server closed the connection in the middle of an answer")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def readsome(self, n: int) -> bytes:
        if not self.buf:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def request(self, method: str, target: str, body: bytes | None, headers: Mapping[str, str]) -> Response:
        """Send one request and read the answer's head; the body is read through the Response. A kept-alive
        connection the server had closed is opened again once (nothing was processed on it)."""
        for attempt in (0, 1):
            fresh = self.sock is None
            sock = self._open()
            head = [f"{method} {target} HTTP/1.1", f"Host: {self.host}:{self.port}",
                    *(f"{k}: {v}" for k, v in headers.items())]
            if body is not None:
                head.append(f"Content-Length: {len(body)}")
            data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b"")
            try:
                sock.sendall(data)
                status_line = self.readline()
                if not status_line:
                    raise ConnectionResetError("the server closed the connection")
            except (ConnectionResetError, BrokenPipeError):
                self.close()
                if fresh or attempt:
                    raise
                continue
            parts = status_line.split(None, 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
                self.close()
                raise TransportError(f"not an HTTP answer from {self.host}:{self.port}: {status_line[:80]!r}")
            hdrs: dict[str, str] = {}
            while (line := self.readline()) not in (b"\r\n", b"\n", b""):
                k, _, v = line.decode("latin-1").partition(":")
                hdrs[k.strip().lower()] = v.strip()
            return Response(self, int(parts[1]), hdrs)
        raise AssertionError("unreachable")


class HttpsConnection:
    """The same interface over ``http.client`` (TLS), for https:// server URLs."""

    def __init__(self, host: str, port: int, timeout: float | None) -> None:
        import http.client

        self.conn = http.client.HTTPSConnection(host, port, timeout=timeout)

    def close(self) -> None:
        self.conn.close()

    def request(self, method: str, target: str, body: bytes | None, headers: Mapping[str, str]) -> Any:
        self.conn.request(method, target, body=body, headers=dict(headers))
        r = self.conn.getresponse()
        r.headers_lc = {k.lower(): v for k, v in r.getheaders()}

        class _R:
            status = r.status
            headers = r.headers_lc

            @staticmethod
            def read() -> bytes:
                return r.read()

            @staticmethod
            def iter_bytes() -> Iterator[bytes]:
                while piece := r.read1(65536):
                    yield piece

        return _R()
