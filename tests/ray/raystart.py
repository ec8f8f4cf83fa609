"""``ray start`` that keeps a loopback ``--node-ip-address`` (127.0.0.2, ...): for tests that run a multi-node Ray cluster on one
machine, on loopback only. (Ray's CLI replaces a loopback node address with the machine's external one, so
that other machines can reach it; a test cluster must not be reachable from anywhere else.)

Usage: ``python tests/ray/raystart.py start --block --node-ip-address 127.0.0.1 ...`` (the ``ray`` CLI's
arguments).
"""

from __future__ import annotations

import sys

import ray._private.services as services

from fairpod.executors.raycluster import raylet_told_agent_port


def _keep(host: str) -> str:
    return host


if __name__ == "__main__":
    services.resolve_ip_for_localhost = _keep
    raylet_told_agent_port(services)  # as fairpod's own Ray nodes (no 15 s wait for the agent's port file)
    from ray.scripts.scripts import main

    sys.argv = ["ray", *sys.argv[1:]]
    main()
