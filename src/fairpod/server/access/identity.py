"""Who is calling, from the machine (``cluster.identity: unix``; docs/identity.md).

- **On the control plane's host**: a Unix socket (:func:`socket_path`, mode 0666). The kernel says which uid
  connected (``SO_PEERCRED``, taken at ``connect``: a process cannot claim another uid, nor pass the connection
  on as someone else's); the HTTP protocol of that socket puts it in the request's scope under :data:`PEER_KEY`,
  which no header can set. TCP connections never carry it.
- **From another host**: a MUNGE credential (``Authorization: Munge <credential>``), the scheme Slurm uses: the
  host's ``munged`` encodes the caller's uid with the key shared by the cluster, this host's ``munged`` decodes it
  (``unmunge``), refuses a credential decoded before (a replay) or out of its time to live. The payload is the
  request's method and path, so a credential seen on the wire cannot be used for another request.

The fairpod user is the Unix account of that uid (:func:`fairpod.server.access.auth.unix_principal` gives its role and
teams).
"""

from __future__ import annotations

import os
import pwd
import re
import socket
import struct
import subprocess
from pathlib import Path
from typing import Any

SOCKET_ENV = "FAIRPOD_SOCKET"  # where the socket is (default /run/fairpod/api-<port>.sock)
MUNGE_SOCKET_ENV = "FAIRPOD_MUNGE_SOCKET"  # the munged to ask (default munge's own, /run/munge/munge.socket.2)
PEER_KEY = "fairpod.peer"  # (pid, uid, gid) of the process at the other end of the Unix socket
MUNGE_TIMEOUT = 10.0


def socket_path(port: int) -> Path:
    explicit = os.environ.get(SOCKET_ENV)
    return Path(explicit) if explicit else Path("/run/fairpod") / f"api-{port}.sock"


def listen_unix(path: Path) -> socket.socket:
    """The API's Unix socket at ``path``, which every local user may connect to (who they are is the kernel's
    answer, not theirs). A stale socket left by a killed server is replaced; anything else there is refused."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    if path.is_socket():
        probe = socket.socket(socket.AF_UNIX)
        try:
            probe.connect(str(path))
            raise SystemExit(f"fairpod: error: another server listens on {path} (set {SOCKET_ENV} for this one)")
        except OSError:
            path.unlink()
        finally:
            probe.close()
    elif path.exists():
        raise SystemExit(f"fairpod: error: {path} exists and is not a socket")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    os.chmod(path, 0o666)
    return s


def other_users(spec: Any) -> bool:
    """Do the replicas of this cluster run as users other than fairpod's (a ``run_as``, or their submitters under
    identity unix)? They must then traverse fairpod's home to their checkpoints (``daemon.secure_home``)."""
    return bool(spec.cluster.run_as or any(t.run_as for t in spec.teams) or spec.cluster.identity == "unix")


def serve_unix(spec: Any, port: int) -> tuple[list[socket.socket], Any, Path | None]:
    """What ``fairpod up`` adds under ``cluster.identity: unix``: ([the Unix socket], the HTTP protocol that
    knows its peers, its path); ([], uvicorn's default, None) otherwise."""
    if spec.cluster.identity != "unix":
        return [], "auto", None
    path = socket_path(port)
    return [listen_unix(path)], peer_protocol(), path


def remove(path: Path | None) -> None:
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass


def peer_of(sock: Any) -> tuple[int, int, int] | None:
    """(pid, uid, gid) of the process that connected a Unix socket; None for any other socket."""
    if sock is None or getattr(sock, "family", None) != socket.AF_UNIX:
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


def peer_protocol() -> type:
    """uvicorn's HTTP protocol, with each connection's peer credentials in its requests' scope (Unix sockets)."""
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    try:
        base = import_from_string(HTTP_PROTOCOLS["httptools"])
    except Exception:  # noqa: BLE001 - httptools is optional in uvicorn; h11 always is there
        base = import_from_string(HTTP_PROTOCOLS["h11"])

    class PeerProtocol(base):  # type: ignore[misc, valid-type]
        app: Any  # the ASGI app, which uvicorn's protocol sets
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            peer = peer_of(transport.get_extra_info("socket"))
            if peer is not None:
                app = self.app

                async def with_peer(scope: Any, receive: Any, send: Any) -> None:
                    scope[PEER_KEY] = peer
                    await app(scope, receive, send)

                self.app = with_peer

    return PeerProtocol


class MungeError(Exception):
    """A MUNGE credential that does not prove who sent it; the message says why."""


_META = re.compile(r"^([A-Z_]+):\s+(.*)$")


def unmunge(credential: str, payload: str) -> int:
    """The uid a MUNGE credential was made for, checked by this host's munged (key, time to live, replay) and
    against the request it came with (``payload``); raises :class:`MungeError`."""
    cmd = ["unmunge"]
    if os.environ.get(MUNGE_SOCKET_ENV):
        cmd += ["--socket", os.environ[MUNGE_SOCKET_ENV]]
    try:
        r = subprocess.run(cmd, input=credential.strip().encode()[:65536], capture_output=True,
                           timeout=MUNGE_TIMEOUT, check=False)
    except FileNotFoundError:
        raise MungeError("this host cannot check MUNGE credentials: unmunge is not installed (Debian: munge)"
                         ) from None
    except subprocess.TimeoutExpired:
        raise MungeError("munged did not answer in time") from None
    head, _, body = r.stdout.decode(errors="replace").partition("\n\n")
    meta = {m.group(1): m.group(2).strip() for line in head.splitlines() if (m := _META.match(line))}
    status = meta.get("STATUS", "")
    if r.returncode != 0 or not status.startswith("Success"):
        why = status or (r.stderr.decode(errors="replace").strip().splitlines() or ["no answer"])[-1]
        raise MungeError(f"the MUNGE credential was refused: {why}")
    if body != payload:
        raise MungeError("the MUNGE credential was made for another request")
    m = re.search(r"\((\d+)\)\s*$", meta.get("UID", ""))
    if m is None:
        raise MungeError("the MUNGE credential names no uid")
    return int(m.group(1))


def job_user(spec: Any, job: Any) -> str | None:
    """Under ``cluster.identity: unix``, the Unix account a job's replicas run as: its submitter's (a ClusterSpec
    and a JobSpec), unless that is root or no account of this host (then the team's ``run_as`` or user)."""
    if spec.cluster.identity != "unix" or not job.user:
        return None
    try:
        pw = pwd.getpwnam(job.user)
    except KeyError:
        return None
    return pw.pw_name if pw.pw_uid != 0 else None


def job_umask(spec: Any, job: Any) -> int | None:
    """The submitter's umask for the files of a job run as the submitter; None otherwise (fairpod's 077)."""
    if job_user(spec, job) is None:
        return None
    return int(job.umask, 8) if job.umask else 0o022
