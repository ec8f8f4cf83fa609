"""A RayService's ``serveConfigV2``: Ray Serve's multi-application config (``serve deploy``'s file), read and
checked at ``fairpod apply`` so that what cannot run is refused then, by its field, rather than found by an
unready service (fairpod.formats.kube.rayservice; deployed by fairpod.executors.rayserve).

- **applications**: each with ``import_path``, its ``name`` and ``route_prefix``, ``args``, ``deployments`` (their
  ``num_replicas``, ``ray_actor_options``, ``autoscaling_config``, ``user_config``, ... passed to Serve as written)
  and ``runtime_env``: ``env_vars``, ``pip``, ``conda``, ``uv`` passed to Ray (packages come from the package
  index, which the nodes must reach); a local ``working_dir`` or ``py_modules`` entry (relative to where ``fairpod
  apply`` runs) is uploaded to the cluster by fairpod's Serve driver, as ``serve run`` does; a URL there
  (KubeRay's samples name GitHub zip archives) is refused: fairpod fetches no code from the network for a service
  (its nodes may not reach it, and a failed download would only show as a service that never gets ready).
- **http_options**: ``host`` and ``port`` are fairpod's (Serve's HTTP proxy on the head's service port, on
  loopback, behind the service's address); ``root_path``, ``request_timeout_s``, ``keep_alive_timeout_s`` kept.
- **proxy_location**: fairpod runs Serve's HTTP proxy on the head only (the service's one endpoint);
  ``Disabled`` is refused (nothing would answer). **grpc_options** with servicer functions are refused: the
  service's address carries HTTP only. ``logging_config`` and ``target_capacity`` are passed to Serve.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

TOP = {"applications", "http_options", "grpc_options", "proxy_location", "logging_config", "target_capacity"}
APP = {"name", "route_prefix", "import_path", "runtime_env", "deployments", "args", "logging_config",
       "external_scaler_enabled"}
HTTP_KEPT = ("root_path", "request_timeout_s", "keep_alive_timeout_s")
AT = "spec.serveConfigV2"


def _local(value: Any, where: str, cwd: str, refused: list[str], dirs: list[str]) -> str | None:
    """A working_dir or py_modules entry: a local directory made absolute (kept in ``dirs``), or refused."""
    text = str(value)
    if "://" in text:
        refused.append(f"{where} {text}: a URL: fairpod fetches no code from the network for a Serve application; "
                       "download and unpack it, and give its local directory (relative to where you run fairpod "
                       "apply)")
        return None
    path = Path(cwd, text).resolve()
    if not path.is_dir():
        refused.append(f"{where} {text}: no such directory here ({path})")
        return None
    dirs.append(str(path))
    return str(path)


def _runtime_env(renv: Any, where: str, cwd: str, refused: list[str], dirs: list[str]) -> dict[str, Any] | None:
    if renv is None:
        return None
    if not isinstance(renv, dict):
        refused.append(f"{where}: a mapping of runtime environment fields (working_dir, pip, env_vars, ...)")
        return None
    out = dict(renv)
    if "working_dir" in out:
        out["working_dir"] = _local(out["working_dir"], f"{where}.working_dir", cwd, refused, dirs)
    if "py_modules" in out:
        mods = out["py_modules"] if isinstance(out["py_modules"], list) else [out["py_modules"]]
        out["py_modules"] = [_local(m, f"{where}.py_modules[{i}]", cwd, refused, dirs) for i, m in enumerate(mods)]
    ev = out.get("env_vars")
    if ev is not None and (not isinstance(ev, dict) or not all(isinstance(k, str) for k in ev)):
        refused.append(f"{where}.env_vars: a mapping of names to values")
    elif ev:
        out["env_vars"] = {k: "" if v is None else str(v) for k, v in ev.items()}
    return out


def _deployments(deps: Any, where: str, refused: list[str]) -> None:
    if deps is None:
        return
    if not isinstance(deps, list) or not all(isinstance(d, dict) for d in deps):
        refused.append(f"{where}: a list of deployments, each a mapping with its name")
        return
    for i, d in enumerate(deps):
        at = f"{where}[{d.get('name', i)}]"
        if not isinstance(d.get("name"), str) or not d["name"]:
            refused.append(f"{where}[{i}].name: each deployment names the one of the application it configures")
        n = d.get("num_replicas")
        if n is not None and n != "auto" and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            refused.append(f"{at}.num_replicas: {n!r} is not a whole number or 'auto'")
        if isinstance(n, int) and not isinstance(n, bool) and d.get("autoscaling_config"):
            refused.append(f"{at}: num_replicas {n} with autoscaling_config (Serve refuses both; give "
                           "num_replicas: auto or leave it out)")
        opts = d.get("ray_actor_options")
        if opts is not None and not isinstance(opts, dict):
            refused.append(f"{at}.ray_actor_options: a mapping (num_cpus, num_gpus, memory, resources, ...)")


def read(text: Any, cwd: str, refused: list[str], notes: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The Serve config to deploy and the local directories its applications use (refusals appended)."""
    if not isinstance(text, str) or not text.strip():
        refused.append(f"{AT}: the Serve applications to deploy are missing (a YAML string, Serve's config file)")
        return {}, []
    try:
        cfg = yaml.safe_load(text)
    except yaml.YAMLError as e:
        refused.append(f"{AT}: not YAML: {str(e).splitlines()[0]}")
        return {}, []
    if not isinstance(cfg, dict):
        refused.append(f"{AT}: a mapping with applications (Ray Serve's config file)")
        return {}, []
    for key in sorted(set(cfg) - TOP):
        refused.append(f"{AT} {key}: not a field of Ray Serve's config")
    apps, dirs = cfg.get("applications"), []
    if not isinstance(apps, list) or not apps or not all(isinstance(a, dict) for a in apps):
        refused.append(f"{AT} applications: a list of one or more applications, each with its import_path")
        apps = []
    names = [str(a.get("name", "default")) for a in apps]
    if len(set(names)) < len(names):
        refused.append(f"{AT} applications: the names {names} are not each different")
    out_apps = []
    for i, a in enumerate(apps):
        at = f"{AT} applications[{a.get('name', i)}]"
        for key in sorted(set(a) - APP):
            refused.append(f"{at}.{key}: not a field of a Serve application")
        if not isinstance(a.get("import_path"), str) or not a["import_path"].strip():
            refused.append(f"{at}.import_path: the module and attribute of the application (module:app) is missing")
        rp = a.get("route_prefix")
        if rp is not None and (not isinstance(rp, str) or not rp.startswith("/")):
            refused.append(f"{at}.route_prefix: {rp!r} does not begin with /")
        _deployments(a.get("deployments"), f"{at}.deployments", refused)
        app = dict(a)
        renv = _runtime_env(a.get("runtime_env"), f"{at}.runtime_env", cwd, refused, dirs)
        if renv is not None:
            app["runtime_env"] = renv
            if any(renv.get(k) for k in ("pip", "conda", "uv")):
                notes.append(f"{at}.runtime_env: Ray installs its packages on the nodes from the package index, "
                             "which they must reach")
        out_apps.append(app)
    http = cfg.get("http_options") or {}
    if not isinstance(http, dict):
        refused.append(f"{AT} http_options: a mapping")
        http = {}
    if http.get("host") is not None or http.get("port") is not None:
        notes.append(f"{AT} http_options host/port ({http.get('host', '-')}:{http.get('port', '-')}) not used: "
                     "Serve's HTTP proxy listens on the head's service port, on loopback, behind the service's "
                     "address (fairpod get-service)")
    loc = cfg.get("proxy_location")
    if loc == "Disabled":
        refused.append(f"{AT} proxy_location Disabled: the service's address is Serve's HTTP proxy")
    elif loc not in (None, "HeadOnly"):
        notes.append(f"{AT} proxy_location {loc}: Serve's HTTP proxy runs on the head only, the service's one "
                     "endpoint")
    grpc = cfg.get("grpc_options")
    if isinstance(grpc, dict) and grpc.get("grpc_servicer_functions"):
        refused.append(f"{AT} grpc_options.grpc_servicer_functions: the service's address carries HTTP only; "
                       "serve the applications over HTTP")
    out: dict[str, Any] = {"applications": out_apps,
                           "http_options": {k: http[k] for k in HTTP_KEPT if http.get(k) is not None}}
    out.update({k: cfg[k] for k in ("logging_config", "target_capacity") if cfg.get(k) is not None})
    return out, dirs


def workdir(dirs: list[str]) -> str | None:
    """One directory holding every local directory the applications use (bound into an image at its path)."""
    return os.path.commonpath(dirs) if dirs else None
