"""fairpod's Serve driver (fairpod.executors.rayserve) when Serve's HTTP proxy is not up in time: Serve kills a proxy
that did not say it was ready within its 5 s and starts it again; the driver's serve_start failed with the killed
proxy's ActorDiedError (a RayService on a loaded machine: its replica exited 1, and its restart was as slow). The
driver now calls serve_start again, which finds the controller up. Serve's start is replaced here by a function
that fails as Serve's did (the whole path, on a real Ray cluster: tests/server/services/test_rayservice_live.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("ray.serve")

from ray.exceptions import ActorDiedError  # noqa: E402

from fairpod.executors import rayserve  # noqa: E402

CONFIG = {"applications": [{"name": "greet_app", "route_prefix": "/greet", "import_path": "greet:app"}]}


def config() -> dict[str, Any]:
    return rayserve.config_of({rayserve.SERVE: json.dumps(CONFIG), "PORT": "8123"})


class Client:
    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls

    def deploy_apps(self, schema: Any, _blocking: bool) -> None:
        self.calls.append(("deploy", [a.name for a in schema.applications]))


def serve_start_failing(times: int, calls: list[Any], error: Exception) -> Any:
    def start(**kwargs: Any) -> Client:
        calls.append(("start", kwargs["http_options"]["port"], str(kwargs["proxy_location"])))
        if sum(c[0] == "start" for c in calls) <= times:
            raise error
        return Client(calls)

    return start


@pytest.mark.parametrize("error", [ActorDiedError(), TimeoutError("HTTP proxies not available after 60s.")])
def test_a_proxy_not_up_in_time_is_waited_for_again(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                                                    error: Exception):
    import ray.serve._private.api as api

    calls: list[Any] = []
    monkeypatch.setattr(api, "serve_start", serve_start_failing(2, calls, error))
    rayserve.deploy(config())
    starts = [c for c in calls if c[0] == "start"]
    assert len(starts) == 3 and all(s[1] == 8123 and "HeadOnly" in s[2] for s in starts)
    assert calls[-1] == ("deploy", ["greet_app"])
    err = capsys.readouterr().err
    assert f"fairpod serve: Serve's HTTP proxy was not up in time ({type(error).__name__})" in err
    assert "(2 of 4)" in err and "(3 of 4)" not in err


def test_a_proxy_that_never_comes_up_ends_the_driver(monkeypatch: pytest.MonkeyPatch):
    import ray.serve._private.api as api

    calls: list[Any] = []
    monkeypatch.setattr(api, "serve_start", serve_start_failing(99, calls, ActorDiedError()))
    with pytest.raises(ActorDiedError):
        rayserve.deploy(config())
    assert len(calls) == rayserve.START_TRIES  # and nothing deployed


def test_any_other_error_of_serves_start_is_not_retried(monkeypatch: pytest.MonkeyPatch):
    import ray.serve._private.api as api

    calls: list[Any] = []
    monkeypatch.setattr(api, "serve_start", serve_start_failing(1, calls, ValueError("bad http_options")))
    with pytest.raises(ValueError, match="bad http_options"):
        rayserve.deploy(config())
    assert len(calls) == 1
