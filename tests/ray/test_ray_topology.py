"""Topology from Ray node labels: a real Ray cluster, nodes started with ``--labels rack=…``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..server.conftest import wait_for
from .cluster import RayTestCluster
from .conftest import RayServer, seed_spec_data


def test_ray_node_labels_place_a_required_rack_job(ray_cluster: RayTestCluster, ray_driver: Any, tmp_path: Path):
    from .conftest import all_gpus_free, assert_clean, remove_agents

    all_gpus_free(ray_driver)
    data = seed_spec_data()
    data["cluster"]["topology_levels"] = ["rack"]
    server = RayServer(tmp_path, ray_cluster, data)
    server.start()
    try:
        ray_cluster.add_nodes([("k1", "ml.g5.12xlarge", 4, False, 1), ("k2", "ml.g5.12xlarge", 4, False, 1)],
                              labels={"rack": "ra"})
        try:
            nodes = wait_for(lambda: {"k1", "k2"} <= set(n := server.nodes()) and n, 15, "k1 and k2 to join",
                             lambda: ray_cluster.cpu("k1") + ray_cluster.cpu("k2"))  # their agents starting
            assert nodes["k1"]["topology"] == {"rack": "ra"} and nodes["k2"]["topology"] == {"rack": "ra"}
            assert nodes["w1"]["topology"] == {"rack": "w1"}  # no rack label: a rack of its own
            server.submit(name="pair", team="john", nodes=2, required_topology="rack", command=["sleep", "60"],
                          termination_grace_seconds=1)
            job = server.wait_state("pair", "Running", 30)
            assert sorted(job["placement"]) == ["k1", "k2"]
            assert job["topology"]["placed"] == {"rack": ["ra"]}
            server.cancel_all()
        finally:
            for name in ("k1", "k2"):
                if name in ray_cluster.nodes:
                    ray_cluster.stop_node(name)
        assert_clean(ray_driver, server.namespace)
    finally:
        server.kill()
        remove_agents(ray_driver, server.namespace, server.node_dir)
