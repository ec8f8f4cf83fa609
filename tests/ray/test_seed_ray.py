"""The seed scenario on a Ray cluster through a real fairpod server: smith borrows john's idle Ray node, john
reclaims it (SIGTERM, checkpoint, requeue), smith resumes from its checkpoint once john's job is done."""

from __future__ import annotations

import sys
from pathlib import Path

from ..server.conftest import wait_for
from .conftest import WORKERS, RayServer, free_gpus
from .programs import TRAINER


def test_seed_scenario_across_ray_nodes(ray_server: RayServer, ray_driver, tmp_path: Path):
    # the four Ray nodes joined fairpod as nodes of the cluster
    nodes = wait_for(lambda: (n := ray_server.nodes()) and set(n) == set(WORKERS) and n, 20, "the Ray nodes")
    assert all(n["instance_group"] == "ray" for n in nodes.values()), nodes
    # each is schedulable with its 4 GPUs once its first check has passed (on a loaded machine, after it joined)
    ok = lambda n: n["schedulable"] and n["accelerators"] == 4  # noqa: E731
    try:
        wait_for(lambda: all(ok(n) for n in ray_server.nodes().values()), 60, "the Ray nodes to be schedulable")
    except AssertionError as e:
        bad = [(k, n["health_status"], n["fault_reason"], n["accelerators"])
               for k, n in ray_server.nodes().items() if not ok(n)]
        raise AssertionError(f"{e}: {bad}") from None
    trainer = tmp_path / "trainer.py"
    trainer.write_text(TRAINER)
    ray_server.submit(name="john-train", team="john", nodes=2, command=["sleep", "60"])
    ray_server.wait_state("john-train", "Running")
    cluster = ray_server.api("GET", "/cluster").json()
    assert cluster["capacity"]["ml.g5.12xlarge"]["utilization"] == 0.5
    ray_server.submit(name="smith-train", team="smith", nodes=2, termination_grace_seconds=10,
                      command=[sys.executable, str(trainer), "400"])
    smith = ray_server.wait_state("smith-train", "Running")
    assert smith["borrowed_from"] == {"john": 4}
    for r in ("0", "1"):  # both replicas have their SIGTERM handler in place (they print after installing it)
        wait_for(lambda r=r: "start step=0" in ray_server.cli("get-logs", "smith-train", "--replica", r).stdout, 30,
                 f"smith's trainer, replica {r}")
    cluster = ray_server.api("GET", "/cluster").json()
    assert cluster["capacity"]["ml.g5.12xlarge"]["utilization"] == 1.0
    rows = {t["team"]: t for t in cluster["teams"]}
    assert rows["smith"]["borrowed"] == 4 and rows["smith"]["borrowed_from"] == {"john": 4}
    assert rows["john"]["lent"] == 4
    assert free_gpus(ray_driver) == 0  # Ray agrees: every GPU of the four nodes is held by a replica
    placed = set(ray_server.job("john-train")["placement"]) | set(smith["placement"])
    assert placed == set(WORKERS)

    ray_server.submit(name="john-eval", team="john", nodes=1, command=["sleep", "2"])
    # smith's job is reclaimed: SIGTERM, it checkpoints and exits, goes back to its queue
    j = wait_for(lambda: (x := ray_server.job("smith-train"))["preemptions"] == 1 and x, 30, "the reclaim")
    why = [e["message"] for e in j["events"] if e["kind"] == "JobPreempted"]
    assert len(why) == 1 and "reclaimed by team john" in why[0], why
    ray_server.wait_state("john-eval", "Running", 30)
    logs = wait_for(lambda: (o := ray_server.cli("get-logs", "smith-train").stdout) and "checkpointed" in o and o,
                    30, "smith's checkpoint")
    ckpt_step = int(logs.split("checkpointed step=")[1].split()[0])
    assert ckpt_step > 0
    # the checkpoint line is written before the replica exits; the requeue follows its exit
    wait_for(lambda: {"JobPreempted", "JobRequeued"} <= {e["kind"] for e in ray_server.job("smith-train")["events"]},
             30, "smith's job to be requeued")
    # john-eval ends after 2 s; smith borrows again and resumes from its checkpoint
    ray_server.wait_state("john-eval", "Succeeded", 30)
    done = ray_server.wait_state("smith-train", "Succeeded", 60)
    assert done["restarts"] == 0 and done["preemptions"] == 1
    out = ray_server.cli("get-logs", "smith-train", "--replica", "1").stdout
    assert "start step=0" in out and "checkpointed step=" in out
    resumed = out.split("checkpointed step=")[1]
    assert "start step=" in resumed and "start step=0 " not in resumed
    assert "done step=400" in out
