"""The CLI's HTTP client, on the standard library only (``fairpod.cli.transport``: no third-party import, not
even ``http.client``, on the path of a command, so a command starts about as fast as the interpreter does).

It reads the server URL and token from the config ``fairpod up`` wrote (``$FAIRPOD_CONFIG``, default
``$XDG_CONFIG_HOME/fairpod/config.json``, else ``~/.config/fairpod/config.json``), or from
``FAIRPOD_URL``/``FAIRPOD_TOKEN``. API errors come back as one line; field names of the API are put in the words of the command's flags by the caller's ``fields`` map."""

from __future__ import annotations

import _socket
import json
import os
import re
import time
from collections.abc import Iterator, Mapping

from fairpod.cli.errors import CliError
from fairpod.cli.transport import Connection, HttpsConnection, split_url, urlencode

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any

DEFAULT_URL = "http://127.0.0.1:8470"
DEFAULT_SOCKET = "/run/fairpod/api-8470.sock"  # fairpod.server.access.identity.socket_path(8470)
LEADER_HEADER = "x-fairpod-leader"  # a standby's 503 names the leader (fairpod.server.ha.ha_app)
SUBMIT_RETRIES = (0.25, 0.5, 1.0, 2.0, 4.0)  # seconds between tries of a submit (7.75 s in all)


def config_path() -> str:
    """``$FAIRPOD_CONFIG``, else ``$XDG_CONFIG_HOME/fairpod/config.json``, else ``~/.config/fairpod/config.json``
    (as :func:`fairpod.paths.config_path`, which the CLI does not import)."""
    explicit = os.environ.get("FAIRPOD_CONFIG")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    root = base if os.path.isabs(base) else os.path.expanduser("~/.config")
    return os.path.join(root, "fairpod", "config.json")


def load_config() -> tuple[str, str]:
    path = config_path()
    cfg: dict[str, Any] = {}
    if os.path.exists(path):
        try:
            with open(path) as f:
                cfg = json.load(f)
        except (OSError, ValueError) as e:
            raise CliError(f"cannot read the CLI config {path}: {e}") from None
        if not isinstance(cfg, dict):
            raise CliError(f"cannot read the CLI config {path}: expected a JSON object")
    home = os.environ.get("FAIRPOD_HOME")
    if home and cfg.get("home") and not os.environ.get("FAIRPOD_URL") \
            and os.path.abspath(home) != os.path.abspath(str(cfg["home"])):
        raise CliError(f"the CLI config {path} is that of the fairpod of {cfg['home']}, not of this FAIRPOD_HOME "
                       f"{home}: set FAIRPOD_CONFIG to this home's config (or FAIRPOD_URL and FAIRPOD_TOKEN)")
    url = os.environ.get("FAIRPOD_URL") or cfg.get("url") or default_url()
    token = os.environ.get("FAIRPOD_TOKEN") or cfg.get("token") or ""
    return str(url).rstrip("/"), str(token)


def default_url() -> str:
    """The server of this host when nothing names one: its Unix socket (``$FAIRPOD_SOCKET``, else that of the
    default port, when it exists: cluster.identity unix, the caller known by its uid), else :data:`DEFAULT_URL`."""
    sock = os.environ.get("FAIRPOD_SOCKET") or DEFAULT_SOCKET
    if os.environ.get("FAIRPOD_SOCKET") or os.path.exists(sock):
        return "unix:" + sock
    return DEFAULT_URL


def munge_credential(payload: str) -> str:
    """A MUNGE credential of this process's uid for one request (``munge``; ``$FAIRPOD_MUNGE_SOCKET``)."""
    import subprocess

    cmd = ["munge", "--string", payload]
    if os.environ.get("FAIRPOD_MUNGE_SOCKET"):
        cmd += ["--socket", os.environ["FAIRPOD_MUNGE_SOCKET"]]
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=10, check=False, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise CliError("a MUNGE credential is needed (FAIRPOD_AUTH=munge, or a standby here whose leader is on "
                       "another host), but munge is not installed (Debian: apt-get install munge)") from None
    except subprocess.TimeoutExpired:
        raise CliError("munge did not answer in 10 s: is munged running?") from None
    if r.returncode != 0:
        why = (r.stderr.decode(errors="replace").strip().splitlines() or [f"exit {r.returncode}"])[-1]
        raise CliError(f"cannot make a MUNGE credential: {why}")
    return r.stdout.decode().strip()


def _params(params: Mapping[str, Any] | None) -> str:
    if not params:
        return ""
    pairs: list[tuple[str, str]] = []
    for k, v in params.items():
        if v is None:
            continue
        for x in v if isinstance(v, list | tuple) else [v]:
            pairs.append((k, str(x).lower() if isinstance(x, bool) else str(x)))
    return "?" + urlencode(pairs) if pairs else ""


_FIELD = r"(?:(?<=^)|(?<=; ))([A-Za-z_][\w.\[\]*]*): "  # compiled when an error needs it


def in_flag_words(detail: str, fields: Mapping[str, str] | None) -> str:
    """``nodes: Input should be …`` → ``--node-count: input should be …`` for the fields a command maps."""
    if not fields:
        return detail

    def sub(m: re.Match[str]) -> str:
        key = m.group(1)
        inner = re.sub(r"^\w+\[[^\]]*\]\.", "", key)  # teams[4].quota[0] -> quota[0]
        plain = re.sub(r"\[[^\]]*\]", "", inner)
        parts = plain.split(".")
        for k in (key, inner, *(".".join(parts[:n]) for n in range(len(parts), 0, -1))):  # the longest mapped
            if k in fields:
                return f"{fields[k]}: "
        return f"{key}: "

    return re.sub(_FIELD, sub, detail)


# the API's name patterns, in words (an error never shows a user a regular expression)
PATTERN_WORDS = {
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$": "lower-case letters, digits and '-', starting and ending with a letter or "
                                        "digit",
    "^[a-z0-9]([-a-z0-9._]*[a-z0-9])?$": "lower-case letters, digits, '-', '.' and '_', starting and ending with "
                                          "a letter or digit",
    "^[A-Za-z0-9][A-Za-z0-9._-]*$": "letters, digits, '.', '_' and '-', starting with a letter or digit",
    "^[a-z_][a-z0-9_-]*[$]?$": "a login name: lower-case letters, digits, '_' and '-', not starting with a digit",
    "^mig-[0-9]+g\\.[0-9]+gb$": "a MIG profile such as mig-1g.10gb",
    "^[\\x21-\\x7e]+$": "printable characters without spaces",
}


def pattern_in_words(detail: str) -> str:
    """``String should match pattern '^[a-z0-9]…$'`` -> ``use lower-case letters, digits and '-', …``."""
    if "should match pattern" not in detail:
        return detail

    def sub(m: re.Match[str]) -> str:
        words = PATTERN_WORDS.get(m.group(1))
        return f"use {words}" if words else "has characters or a form that is not allowed here"

    return re.sub(r"String should match pattern '([^']*)'", sub, detail)


TIMEOUT_ENV = "FAIRPOD_TIMEOUT"


class TimedOut(CliError):
    """No answer within the client's timeout: what was asked may have been done (or be under way)."""


def default_timeout() -> float:
    """How long a request waits for its answer: ``$FAIRPOD_TIMEOUT`` seconds, 30 by default."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return 30.0
    try:
        t = float(raw)
    except ValueError:
        t = -1.0
    if not 0 < t <= 86400:
        raise CliError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds between 0 and 86400")
    return t


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, timeout: float | None = None,
                 fields: Mapping[str, str] | None = None) -> None:
        cfg_url, cfg_token = load_config()
        # several control planes (fairpod up --ha): "http://a:8470,http://b:8470"; the leader is followed
        self.urls = [u.strip().rstrip("/") for u in (url or cfg_url).split(",") if u.strip()] or [DEFAULT_URL]
        self._conn: Connection | HttpsConnection | None = None
        self._tried: set[str] = set()
        self._use(self.urls[0])
        self.timeout = timeout if timeout is not None else default_timeout()
        token = token or cfg_token
        # no token: over the Unix socket the server knows the caller by its uid; elsewhere a MUNGE credential
        self.munge = not token and os.environ.get("FAIRPOD_AUTH", "").lower() == "munge"
        self.headers = {"Accept": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.fields = fields

    # -- the connection -------------------------------------------------------------------------------
    def _use(self, url: str) -> None:
        self.unix: str | None = None
        if url.startswith("unix:"):  # unix:/run/fairpod/api-8470.sock
            self.close()
            self.url, self.https, self.host, self.port, self.prefix = url, False, "localhost", 0, ""
            self.unix = "/" + url[len("unix:"):].lstrip("/")
            return
        try:
            scheme, host, port, prefix = split_url(url)
        except ValueError:
            raise CliError(f"the server URL {url!r} is not an http:// URL (FAIRPOD_URL or {config_path()})"
                           ) from None
        self.close()
        self.url, self.https, self.host, self.port, self.prefix = url, scheme == "https", host, port, prefix

    def _next(self, leader: str | None) -> bool:
        """Go on to the leader a standby named, else to the next address not tried yet; False when none is left.
        Only where nothing was done: the connection was refused, or a standby answered."""
        if leader and leader.rstrip("/") not in self._tried:
            self._use(leader.rstrip("/"))
        else:
            left = [u for u in self.urls if u not in self._tried]
            if not left:
                return False
            self._use(left[0])
        self._tried.add(self.url)
        return True

    def _connection(self, timeout: float | None) -> Connection | HttpsConnection:
        if self._conn is None:
            self._conn = HttpsConnection(self.host, self.port, timeout) if self.https \
                else Connection(self.host, self.port, timeout, self.unix)
        return self._conn

    def unreachable(self, e: BaseException | None = None) -> CliError:
        why = f" ({e.strerror or e})" if isinstance(e, OSError) and (e.strerror or str(e)) else ""
        if len(self.urls) > 1:  # fairpod up --ha: none of the control planes answered
            return CliError(f"cannot reach any fairpod server of {', '.join(self.urls)}{why}: start them with "
                            f"'fairpod up --ha', or point FAIRPOD_URL (or {config_path()}) at the ones that run")
        if self.unix is not None:
            return CliError(f"cannot reach the fairpod server at {self.url}{why}: it listens there under "
                            f"cluster.identity unix; else point FAIRPOD_URL (or {config_path()}) at the one that runs")
        return CliError(f"cannot reach the fairpod server at {self.url}{why}: start it with 'fairpod up --port "
                        f"{self.port}', or point FAIRPOD_URL (or {config_path()}) at the one that runs")

    def _send(self, method: str, path: str, body: bytes | None, headers: Mapping[str, str],
              timeout: float | None) -> Any:
        hdrs = {**self.headers, **headers}
        if self.munge:  # one credential per request, for this request only (munged refuses a replay)
            hdrs["Authorization"] = "Munge " + munge_credential(f"{method} {path.split('?')[0]}")
        if body is not None:
            hdrs["Content-Type"] = "application/json"
        return self._connection(timeout).request(method, path, body, hdrs)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def error(self, status: int, raw: bytes) -> CliError:
        try:
            doc = json.loads(raw)
            msg = str(doc.get("detail") or doc.get("title") or "") if isinstance(doc, dict) else ""
        except ValueError:
            msg = ""
        msg = msg or raw.decode(errors="replace").strip() or f"HTTP status {status}"
        if status == 401 and not (self.unix or self.munge):
            msg += f": the token (FAIRPOD_TOKEN or {config_path()}) is missing, wrong or revoked"
        return CliError(in_flag_words(pattern_in_words(msg.replace("\n", " ")), self.fields), status=status)

    def request(self, method: str, path: str, body: Any = None, params: Mapping[str, Any] | None = None,
                headers: Mapping[str, str] | None = None, raw_path: str | None = None) -> Any:
        """``path`` under /api/v1 (or ``raw_path`` from the server's root); the decoded JSON answer."""
        data = None if body is None else json.dumps(body).encode()
        self._tried = {self.url}
        while True:
            full = self.prefix + (raw_path if raw_path is not None else "/api/v1" + path) + _params(params)
            try:
                r = self._send(method, full, data, headers or {}, self.timeout)
                raw = r.read()
            except (ConnectionRefusedError, FileNotFoundError, _socket.gaierror) as e:
                self.close()
                if self._next(None):
                    continue
                raise self.unreachable(e) from None
            except TimeoutError:  # the request may well be carried out: never say it failed
                self.close()
                raise TimedOut(f"no answer from {self.url} within {self.timeout:g} s ({TIMEOUT_ENV}): the "
                               f"server may still be carrying out {method} {path}") from None
            except (OSError, ValueError) as e:  # TransportError, timeouts, resets; a bad chunk size
                self.close()
                raise CliError(f"request to {self.url} failed: {e or type(e).__name__}") from None
            local = self.unix is not None and "Authorization" not in self.headers
            if r.status == 503 and LEADER_HEADER in r.headers and self._next(r.headers[LEADER_HEADER]):
                # a standby: it did nothing; the leader it names will. From a standby's Unix socket (identity
                # unix), the leader on its host knows the caller by a MUNGE credential (docs/identity.md)
                self.munge = self.munge or local
                continue
            break
        if r.status >= 400:
            raise self.error(r.status, raw)
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise CliError(f"{self.url} answered with something that is not JSON: is it a fairpod server?") from None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None, **params: Any) -> Any:
        return self.request("POST", path, body, params)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def submit(self, body: dict[str, Any], retries: tuple[float, ...] = SUBMIT_RETRIES,
               path: str = "/jobs") -> Any:
        """POST a job with one Idempotency-Key for this invocation, retried (same key) while the server cannot
        be reached or the connection broke: a submit the server committed before it went away returns that
        job, never a second one."""
        key = os.urandom(16).hex()
        mask = os.umask(0o022)
        os.umask(mask)
        job = body["job"] if isinstance(body.get("job"), dict) else None  # an array's {"job": ..., "array": ...}
        if job is not None and "umask" not in job:  # the files of a job run as its submitter (identity unix)
            body = {**body, "job": {**job, "umask": f"{mask:03o}"}}
        elif job is None and "umask" not in body:
            body = {**body, "umask": f"{mask:03o}"}
        for pause in (*retries, None):
            try:
                return self.request("POST", path, body, headers={"Idempotency-Key": key})
            except CliError as e:
                if e.status is not None or pause is None:
                    raise
                self.close()
                time.sleep(pause)
        raise AssertionError("unreachable")

    def stream(self, path: str, **params: Any) -> Iterator[bytes]:
        try:
            r = self._send("GET", self.prefix + "/api/v1" + path + _params(params), None, {}, None)
            if r.status >= 400:
                raise self.error(r.status, r.read())
            yield from r.iter_bytes()
        except (ConnectionRefusedError, FileNotFoundError, _socket.gaierror) as e:
            raise self.unreachable(e) from None
        except (OSError, ValueError) as e:
            raise CliError(f"request to {self.url} failed: {e or type(e).__name__}") from None
