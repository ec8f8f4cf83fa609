"""The CLI's HTTP client: reads the server URL and token from the config ``fairpod up`` wrote
(``$FAIRPOD_CONFIG``, default ``~/.config/fairpod/config.json``), or from ``FAIRPOD_URL``/``FAIRPOD_TOKEN``."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from fairpod.cli.errors import CliError


def load_config() -> tuple[str, str]:
    path = Path(os.environ.get("FAIRPOD_CONFIG") or Path.home() / ".config/fairpod/config.json")
    cfg: dict[str, Any] = {}
    if path.exists():
        try:
            cfg = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise CliError(f"cannot read the CLI config {path}: {e}") from None
    url = os.environ.get("FAIRPOD_URL") or cfg.get("url") or "http://127.0.0.1:8470"
    token = os.environ.get("FAIRPOD_TOKEN") or cfg.get("token") or ""
    return url.rstrip("/"), token


SUBMIT_RETRIES = (0.25, 0.5, 1.0, 2.0, 4.0)  # seconds between tries of a submit (7.75 s in all)


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30.0) -> None:
        cfg_url, cfg_token = load_config()
        self.url = (url or cfg_url).rstrip("/")
        self.http = httpx.Client(base_url=self.url, timeout=timeout,
                                 headers={"Authorization": f"Bearer {token or cfg_token}"})

    def _error(self, r: httpx.Response) -> CliError:
        try:
            body = r.json()
            msg = body.get("detail") or body.get("title") or r.text
        except ValueError:
            msg = r.text or r.reason_phrase
        return CliError(f"{msg} (HTTP {r.status_code})")

    def request(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = self.http.request(method, "/api/v1" + path, **kw)
        except httpx.ConnectError:
            raise CliError(f"cannot reach the fairpod server at {self.url}: is it running? (fairpod up)") from None
        except httpx.HTTPError as e:
            raise CliError(f"request to {self.url} failed: {e}") from None
        if r.status_code >= 400:
            raise self._error(r)
        return r.json()

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Any = None, **params: Any) -> Any:
        return self.request("POST", path, json=body, params={k: v for k, v in params.items() if v is not None})

    def submit(self, body: dict[str, Any], retries: tuple[float, ...] = SUBMIT_RETRIES) -> Any:
        """POST a job with one Idempotency-Key for this invocation, retried (same key) while the server cannot
        be reached or the connection broke: a submit the server committed before it went away returns that
        job, never a second one."""
        key = uuid.uuid4().hex
        for pause in (*retries, None):
            try:
                r = self.http.post("/api/v1/jobs", json=body, headers={"Idempotency-Key": key})
            except (httpx.TransportError, httpx.TimeoutException) as e:
                if pause is None:
                    raise CliError(f"cannot reach the fairpod server at {self.url} to submit: {e or type(e).__name__}"
                                   " (is it running? fairpod up)") from None
                time.sleep(pause)
                continue
            if r.status_code >= 400:
                raise self._error(r)
            return r.json()
        raise AssertionError("unreachable")

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, json=body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def stream(self, path: str, **params: Any) -> Iterator[bytes]:
        try:
            with self.http.stream("GET", "/api/v1" + path, params=params, timeout=None) as r:
                if r.status_code >= 400:
                    r.read()
                    raise self._error(r)
                yield from r.iter_bytes()
        except httpx.ConnectError:
            raise CliError(f"cannot reach the fairpod server at {self.url}: is it running? (fairpod up)") from None
