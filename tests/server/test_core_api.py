"""ControlPlane names the Core protocol among its bases, and implements every method Core lists (none is left
to the protocol's empty body)."""

from __future__ import annotations

from fairpod.server.control import ControlPlane
from fairpod.server.core_api import Core


def test_the_control_plane_implements_core_explicitly() -> None:
    assert Core in ControlPlane.__mro__
    methods = [n for n, v in vars(Core).items() if callable(v) and not n.startswith("__")]
    assert "set_labels" in methods and "check_failed" in methods
    left = [n for n in methods if next(c for c in ControlPlane.__mro__ if n in vars(c)) is Core]
    assert left == []
