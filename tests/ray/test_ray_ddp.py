"""A 2-node PyTorch job (gloo) on the Ray test cluster: its ranks rendezvous at MASTER_ADDR (the rank-0 node's
own address) and all-reduce over sockets bound to their own nodes' addresses (``FAIRPOD_NODE_ADDRESS``), none
of them 127.0.0.1."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from .conftest import WORKERS, RayServer

pytest.importorskip("torch", reason="torch is not installed: no gloo job")

GLOO = r'''
import datetime, json, os, subprocess
import torch, torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
me = os.environ["FAIRPOD_NODE_ADDRESS"]
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, rank == 0,
                      timeout=datetime.timedelta(seconds=60))
opts = dist.ProcessGroupGloo._Options()
opts._devices = [dist.ProcessGroupGloo.create_device(hostname=me)]  # gloo's sockets on this node's address
opts._timeout = datetime.timedelta(seconds=60)
pg = dist.ProcessGroupGloo(store, rank, world, opts)
t = torch.tensor([float(rank + 1)])
pg.allreduce([t]).wait()
ss = subprocess.run(["ss", "-tnpH"], capture_output=True, text=True).stdout
conns = [ln.split()[3:5] for ln in ss.splitlines() if f"pid={os.getpid()}," in ln]
print("result " + json.dumps({"sum": t.item(), "me": me, "master": os.environ["MASTER_ADDR"],
                              "port": os.environ["MASTER_PORT"], "conns": conns}),
      flush=True)
pg.barrier().wait()
'''


def test_a_two_node_gloo_job_meets_across_the_node_addresses(ray_server: RayServer, tmp_path: Path):
    script = tmp_path / "gloo.py"
    script.write_text(GLOO)
    ray_server.submit(name="gloo", team="john", nodes=2, command=[sys.executable, str(script)])
    done = ray_server.wait_state("gloo", "Succeeded", 120)
    a, b = done["placement"]
    ips = ray_server.cluster.ips
    assert a != b and {a, b} <= set(WORKERS)
    out = [ray_server.cli("get-logs", "gloo", "--replica", str(r)).stdout for r in (0, 1)]
    res = [json.loads(next(ln for ln in o.splitlines() if ln.startswith("result "))[7:]) for o in out]
    def split(end: str) -> tuple[str, str]:
        host, port = end.rsplit(":", 1)
        return host.strip("[]").removeprefix("::ffff:"), port

    for rank, node in ((0, a), (1, b)):
        assert res[rank]["sum"] == 3.0  # 1 + 2: the all-reduce went through
        assert res[rank]["me"] == ips[node] and res[rank]["master"] == ips[a]
        for local, peer in res[rank]["conns"]:
            ends = {split(local)[0], split(peer)[0]}
            # nothing listens on or connects to 127.0.0.1: a server end is always a node's own address (the
            # kernel may still pick 127.0.0.1 as the *source* of a connection between two loopback addresses)
            assert ends - {"127.0.0.1"} and ends - {"127.0.0.1"} <= {ips[a], ips[b]}, res[rank]["conns"]
    # gloo: rank 0 listens on its node's address (not the store's port), and rank 1 is connected to it there
    port = res[0]["port"]
    gloo0 = {split(loc) for loc, _ in res[0]["conns"] if split(loc)[1] != port and split(loc)[0] == ips[a]}
    assert gloo0, res[0]["conns"]
    assert any(split(peer) in gloo0 for _, peer in res[1]["conns"]), (res[0]["conns"], res[1]["conns"])
