"""Ray Serve on a standing Ray cluster (a KubeRay RayService): fairpod's Serve driver, started by the head's
launcher (``fairpod.executors.raycluster``, rank 0 of a Ray service with ``$FAIRPOD_RAY_SERVE``) once the head is up,
run by the replica's Python (in a container image: the image's, this file bound in beside the launcher).

It does what ``serve run CONFIG`` does, on this cluster: connects as a Ray driver (``RAY_ADDRESS``), uploads each
application's local ``working_dir`` and ``py_modules`` to the cluster (Serve's config takes only URIs there),
starts Serve with its HTTP proxy on the head only, on ``127.0.0.1:$PORT`` (the head's service port, which the
service's address forwards to), and deploys the applications (``serveConfigV2``, checked at apply by
fairpod.formats.kube.serve_config). Then, once a second, it asks Serve for the applications' status: while every
one is RUNNING it keeps the file :data:`READY` (the service's readiness command tests it, in this replica's
private /tmp), and each change of status is written to the replica's log with Serve's message (an import error,
a deployment that cannot be placed, ...). It runs until its SIGTERM (the replica's stop); should it exit, the
head's launcher exits and the replica starts again.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SERVE = "FAIRPOD_RAY_SERVE"  # the Serve config, JSON (fairpod.formats.kube.rayservice.SERVE)
READY = "/tmp/fairpod-serve-ready-{port}"  # kept while every application is RUNNING (rayservice.READY tests it)
POLL = 1.0  # seconds between two status reads


def _say(msg: str) -> None:
    print(f"fairpod serve: {msg}", file=sys.stderr, flush=True)


def config_of(env: dict[str, str]) -> dict[str, Any]:
    """The config to deploy: the manifest's, with Serve's HTTP proxy on the head only, on 127.0.0.1:$PORT."""
    try:
        cfg = json.loads(env[SERVE])
        port = int(env["PORT"])
    except (KeyError, ValueError) as e:
        raise SystemExit(f"fairpod serve: ${SERVE} (JSON) and PORT are needed: {e}") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("applications"), list):
        raise SystemExit(f"fairpod serve: ${SERVE} is not a Serve config with applications")
    cfg["http_options"] = {**(cfg.get("http_options") or {}), "host": "127.0.0.1", "port": port}
    cfg["proxy_location"] = "HeadOnly"
    return cfg


def upload(cfg: dict[str, Any], log: logging.Logger) -> None:
    """Each application's local working_dir and py_modules uploaded to the cluster, replaced by their URIs."""
    from ray._private.runtime_env.py_modules import upload_py_modules_if_needed
    from ray._private.runtime_env.working_dir import upload_working_dir_if_needed

    scratch = tempfile.mkdtemp(prefix="fpserve-")
    for app in cfg["applications"]:
        renv = app.get("runtime_env")
        if not renv:
            continue
        for fn in (upload_working_dir_if_needed, upload_py_modules_if_needed):
            try:
                renv = fn(renv, include_gitignore=True, scratch_dir=scratch, logger=log)
            except TypeError:  # an older Ray (an image's) without include_gitignore
                renv = fn(renv, scratch_dir=scratch, logger=log)
        app["runtime_env"] = renv


START_TRIES = 5  # serve_start calls while Serve's HTTP proxy is not up in time (see deploy)


def deploy(cfg: dict[str, Any]) -> None:
    """Start Serve (its controller and HTTP proxy) and deploy the applications. Serve gives a starting proxy 5 s to
    say it is ready (``RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S``) and kills one that did not: on a loaded node, where
    the proxy's Python takes longer to start, ``serve_start`` then failed with the proxy's ``ActorDiedError``
    (``TimeoutError`` after 60 s), although Serve's controller goes on and starts the proxy again, each time with
    5 s more. Up to :data:`START_TRIES` times the call is made again: it finds the controller up and connects."""
    from ray.exceptions import RayActorError
    from ray.serve._private.api import serve_start
    from ray.serve.schema import ServeDeploySchema

    schema = ServeDeploySchema.model_validate(cfg) if hasattr(ServeDeploySchema, "model_validate") \
        else ServeDeploySchema.parse_obj(cfg)
    http = schema.http_options.model_dump() if hasattr(schema.http_options, "model_dump") \
        else schema.http_options.dict()
    for attempt in range(1, START_TRIES + 1):
        try:
            client = serve_start(http_options=http, proxy_location=schema.proxy_location)
            break
        except (RayActorError, TimeoutError) as e:
            if attempt == START_TRIES:
                raise
            _say(f"Serve's HTTP proxy was not up in time ({type(e).__name__}); Serve starts it again, and this "
                 f"driver connects again ({attempt} of {START_TRIES - 1})")
    client.deploy_apps(schema, _blocking=False)


def statuses() -> dict[str, tuple[str, str]]:
    """Each application's status and message, as Serve reports them now."""
    from ray import serve

    return {name: (str(getattr(a.status, "value", a.status)), str(a.message or ""))
            for name, a in serve.status().applications.items()}


def watch(names: list[str], ready: Path) -> None:
    """Keep ``ready`` while every one of ``names`` is RUNNING; say each change (bounded only by the replica's
    life: its SIGTERM ends it)."""
    last = None
    while True:
        try:
            now = statuses()
        except Exception as e:  # noqa: BLE001 - the controller restarting, the head going: not ready, ask again
            now = {n: ("UNKNOWN", f"{type(e).__name__}: {e}"[:300]) for n in names}
        ok = all(now.get(n, ("", ""))[0] == "RUNNING" for n in names)
        if ok:
            ready.touch()
        else:
            ready.unlink(missing_ok=True)
        text = "; ".join(f"{n} {now.get(n, ('NOT_STARTED', ''))[0]}" + (f" ({m})" if (m := now.get(n, ('', ''))[1])
                                                                         and now[n][0] != "RUNNING" else "")
                         for n in names)
        if text != last:
            _say(("ready: " if ok else "not ready: ") + text)
            last = text
        time.sleep(POLL)


def main() -> int:
    cfg = config_of(dict(os.environ))
    ready = Path(READY.format(port=cfg["http_options"]["port"]))
    ready.unlink(missing_ok=True)
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))  # the finally below runs
    import ray

    ray.init(address=os.environ.get("RAY_ADDRESS"), namespace="serve", logging_level="ERROR", log_to_driver=False)
    log = logging.getLogger("fairpod.serve")
    upload(cfg, log)
    deploy(cfg)
    names = [str(a.get("name", "default")) for a in cfg["applications"]]
    _say(f"deployed {', '.join(names)}; Serve's HTTP proxy on 127.0.0.1:{cfg['http_options']['port']}")
    try:
        watch(names, ready)
    finally:
        ready.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))  # fairpod/executors (with fairpod's own ray package) off the
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # path: `import ray` is Ray's
    sys.exit(main())
