"""Ports for the servers and clusters the tests start.

A port the kernel hands out for ``bind(0)`` comes from its ephemeral range, the same range every outgoing
connection and every other ``bind(0)`` on the machine draws from: between the moment a test closes its probe and
the moment its server binds, another test's client or Ray process may take it ("Address already in use", seen in
CI). So a test port is drawn at random *below* the ephemeral range (and above Ray's worker ports, 10002–19999),
where nothing is handed out unasked, and kept only if it is free on every address now. Two tests drawing the same
port is then a 1-in-thousands chance that the server fixture answers by drawing again
(``tests/server/conftest.py``: ``Server.start``)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RNG = random.Random()  # seeded from the OS: every xdist worker draws its own sequence
LOWEST = 20000  # above Ray's default worker ports (10002-19999)


def _ephemeral() -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port free on every address of this machine now, outside the kernel's ephemeral range."""
    lo, hi = _ephemeral()
    ranges = [(a, b) for a, b in ((LOWEST, lo - 1), (hi + 1, 65535)) if b - a >= 1000]
    for _ in range(200):
        if not ranges:
            break
        a, b = _RNG.choice(ranges)
        port = _RNG.randint(a, b)
        if _free(port):
            return port
    with socket.socket() as s:  # no room outside the ephemeral range on this machine: the kernel's choice
        s.bind(("", 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """``n`` different ports, each as :func:`free_port` gives one: for one process that binds them all (a Ray node's
    components; Ray refuses to start when two of them are given one port, which independent draws once did)."""
    out: list[int] = []
    for _ in range(50 * n):
        if len(out) == n:
            break
        port = free_port()
        if port not in out:
            out.append(port)
    assert len(out) == n, f"no {n} different free ports"
    return out
