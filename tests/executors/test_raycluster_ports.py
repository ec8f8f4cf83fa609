"""The ports a Ray job's node asks ``ray start`` for (fairpod.executors.raycluster): all different, free on every
address, chosen again for each try. Ray refuses to start when two of its components are given one port ("Ray
component node_manager is trying to use a port number ... that is used by other components"), which ports chosen
one at a time, each released before the next was chosen, once gave it."""

from __future__ import annotations

import socket

from fairpod.executors import raycluster


def test_a_nodes_ports_are_all_different_and_free_on_every_address():
    for head in (True, False):
        for _ in range(50):
            flags, metrics = raycluster._ports(head)
            names, ports = flags[0::2], [int(p) for p in flags[1::2]]
            assert names == list(raycluster.PORT_FLAGS if head else raycluster.PORT_FLAGS[:-raycluster.HEAD_ONLY])
            assert ("--ray-client-server-port" in names) == head  # not 10001: one per head, as every port
            assert len(set(ports + [int(metrics)])) == len(ports) + 1
            for port in ports:  # nothing holds them: ray start may bind each on every address
                with socket.socket() as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(("", port))


def test_free_ports_skips_a_port_held_on_another_loopback_address():
    """A port bound on 127.0.0.5 only (a node of another cluster on this machine) is not free for a node that
    binds on every address."""
    held = []
    try:
        for _ in range(500):  # of the ~28,000 ephemeral ports: a pick that ignores them hits one in 400 picks
            s = socket.socket()
            s.bind(("127.0.0.5", 0))
            held.append(s)
        taken = {s.getsockname()[1] for s in held}
        for _ in range(50):
            assert not taken & set(raycluster._free_ports(8))
    finally:
        for s in held:
            s.close()
