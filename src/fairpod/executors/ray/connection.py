"""Connecting to a Ray cluster as a driver, and checking that its Ray is one fairpod can use."""

from __future__ import annotations

import inspect
import ipaddress
import logging
import os
import re
import socket
from typing import Any

from fairpod.executors.base import ExecutorError

log = logging.getLogger("fairpod.executors.ray")

# Placement groups whose bundles are bound to nodes by label (bundle_label_selector on ray.io/node-id) and
# honoured by the scheduler: Ray 2.50. Keep in step with the ``ray`` extra in pyproject.toml.
MIN_RAY_VERSION = (2, 50)


def parse_version(text: str) -> tuple[int, ...]:
    """``"2.50.1"`` -> ``(2, 50, 1)``; pre-release and local parts are ignored (``"3.0.0.dev0"`` -> (3, 0, 0))."""
    parts: list[int] = []
    for piece in text.split("+")[0].split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
        if digits.end() < len(piece):  # "3rc1": a pre-release of 3
            break
    return tuple(parts)


def check_version(ray: Any) -> None:
    """Raise :class:`ExecutorError` (one line) if ``ray`` is older than :data:`MIN_RAY_VERSION` or lacks what
    fairpod calls."""
    need = ".".join(map(str, MIN_RAY_VERSION))
    version = str(getattr(ray, "__version__", "") or "")
    have = parse_version(version)
    if not have or have < MIN_RAY_VERSION or (
        "bundle_label_selector" not in inspect.signature(ray.util.placement_group).parameters
    ):
        raise ExecutorError(f"Ray {version or '(unknown version)'} is too old for fairpod: it needs Ray >= {need} "
                            f"(pip install -U 'ray>={need}' or 'fairpod[ray]')")

def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) -> (host, port); ValueError with a message for the user."""
    host, sep, port = address.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"invalid Ray address {address!r}: give auto or HOST:PORT (the head's GCS port, e.g. 6379)")
    return host, int(port)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ExecutorError("the Ray executor needs Ray on this machine: pip install 'fairpod[ray]'") from None
    return ray


def resolve_address(address: str | None) -> str:
    """The ``HOST:PORT`` of the Ray cluster: ``address``, or for ``auto``/None ``$RAY_ADDRESS`` or the
    cluster that ``ray start`` recorded on this machine."""
    if address and address != "auto":
        parse_address(address)
        return address.strip()
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if env and env != "auto":
        if env.startswith("ray://") or env.startswith("http"):
            raise ExecutorError(f"RAY_ADDRESS={env} is not a GCS address; fairpod needs HOST:PORT of the Ray head")
        return env
    _import_ray()
    from ray._private import services

    try:
        found = services.find_bootstrap_address(None)
    except Exception:  # noqa: BLE001 - any failure means: nothing recorded
        found = None
    if not found:
        raise ExecutorError("no Ray cluster found on this machine for --ray-address auto (RAY_ADDRESS is unset "
                            "and 'ray start' has recorded none); start one or give --ray-address HOST:PORT")
    return str(found)


def check_reachable(address: str | None, timeout: float = 5.0) -> str:
    """Raise :class:`ExecutorError` (one line) unless the Ray head at ``address`` accepts connections;
    returns the resolved ``HOST:PORT``."""
    try:
        resolved = resolve_address(address)
        host, port = parse_address(resolved)
    except ValueError as e:
        raise ExecutorError(str(e)) from None
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as e:
        why = e.strerror or str(e) or type(e).__name__
        raise ExecutorError(f"cannot reach the Ray cluster at {host}:{port}: {why} "
                            "(is 'ray start --head' running there, and is that its GCS port?)") from None
    return resolved


def connect(address: str | None, namespace: str = "fairpod", timeout: float = 10.0) -> str:
    """Connect this process to the Ray cluster at ``address`` (``auto``/None: see :func:`resolve_address`)
    as a driver; returns the ``HOST:PORT`` used. Raises :class:`ExecutorError` with one line for the user.

    A loopback address is kept on loopback when the cluster's nodes advertise a loopback address (a cluster
    started on one machine with ``--node-ip-address 127.0.0.1``): Ray would otherwise replace it with this
    machine's external address.
    """
    resolved = check_reachable(address, timeout=min(timeout, 5.0))
    ray = _import_ray()
    check_version(ray)
    host, port = parse_address(resolved)
    if ray.is_initialized():  # this process is a driver already: of this cluster, or it cannot use it
        current = str(ray.get_runtime_context().gcs_address or "")
        same = current.rsplit(":", 1)[-1] == str(port) and (
            current.rsplit(":", 1)[0] == host or (_is_loopback(host) and _is_loopback(current.rsplit(":", 1)[0])))
        if not same:
            raise ExecutorError(f"this process is connected to the Ray cluster at {current}, not {host}:{port}")
        return resolved
    extra: dict[str, Any] = {}
    if _is_loopback(host):
        node_ip = _keep_loopback(ray, host, port, timeout)
        if node_ip is not None:
            extra["_node_ip_address"] = node_ip
    try:
        ray.init(address=f"{host}:{port}", namespace=namespace, log_to_driver=False,
                 logging_level=logging.WARNING, configure_logging=False, **extra)
    except Exception as e:  # noqa: BLE001 - Ray raises many kinds; the user gets one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ExecutorError(f"cannot connect to the Ray cluster at {host}:{port}: {first}") from None
    return resolved


def _keep_loopback(ray: Any, host: str, port: int, timeout: float) -> str | None:
    """For a cluster whose nodes live on this machine's loopback addresses (127.0.0.2, 127.0.0.3, ... as if
    each were a host): the node address this driver attaches to (the head's, ``host``), else None."""
    from ray._private import ray_constants
    from ray._raylet import GcsClient  # type: ignore[attr-defined]  # compiled; its stub omits it

    try:
        nodes = GcsClient(address=f"{host}:{port}").get_all_node_info(timeout=max(1, int(timeout)))
    except Exception as e:  # noqa: BLE001
        raise ExecutorError(f"cannot read the node table of the Ray cluster at {host}:{port}: {e}") from None
    addresses = {str(info.node_manager_address) for info in nodes.values() if info.state == 0}
    if not any(_is_loopback(a) for a in addresses):
        return None
    if hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):
        # the nodes live on this machine's loopback: resolve "this node's address" to loopback as well
        ray_constants.ENABLE_RAY_CLUSTER = False
    if host in addresses:
        return host
    return None if "127.0.0.1" in addresses else sorted(a for a in addresses if _is_loopback(a))[0]


# -- the node table --------------------------------------------------------------------------------------

