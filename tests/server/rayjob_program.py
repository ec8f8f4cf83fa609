"""The Ray program of the live Ray-job tests (tests/server/core/test_rayjobs_live.py on the local executor,
tests/ray/test_ray_rayjobs.py on the Ray executor), and how to read what it reports.

``python PROGRAM OUT``: runs as a fairpod Ray job's entrypoint (``RAY_ADDRESS`` set). It runs one 1-GPU task on
each of the job's two Ray nodes (a STRICT_SPREAD placement group: it waits for a worker that joins again), notes ``start`` (its step from the checkpoint, ``ray.nodes()``, where each task
ran and the GPU ids Ray gave it), then counts steps into ``FAIRPOD_CHECKPOINT_DIR/step``: on SIGTERM it notes
``term`` (with the Ray nodes still alive then) and exits 0; resumed (a checkpoint exists), it notes ``done`` 3 steps
later. Notes are JSON lines appended to ``OUT``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PROGRAM = '''
import json, os, signal, sys, time
import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
out, ckpt = sys.argv[1], os.path.join(os.environ["FAIRPOD_CHECKPOINT_DIR"], "step")
def note(**kw):
    with open(out, "a") as f:
        f.write(json.dumps(kw) + "\\n")
stop = []
first = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
ray.init(log_to_driver=False)
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))  # after ray.init, which sets a handler of its own
@ray.remote(num_gpus=1)
def where():
    time.sleep(1)
    ctx = ray.get_runtime_context()
    return ctx.get_node_id(), ray.util.get_node_ip_address(), [str(g) for g in ray.get_gpu_ids()]
# one task on each Ray node, as Ray's docs place them: a STRICT_SPREAD placement group (it waits for both nodes)
pg = placement_group([{"GPU": 1, "CPU": 1}] * 2, strategy="STRICT_SPREAD")
ray.get(pg.ready(), timeout=600)
got = ray.get([where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i))
               .remote() for i in range(2)])
deadline = time.monotonic() + 120  # a node that died (its worker joined again) is ALIVE until the health checks miss it
while len(alive := [n for n in ray.nodes() if n["Alive"]]) > 2 and time.monotonic() < deadline:
    time.sleep(1)
note(event="start", step=first, address=os.environ["RAY_ADDRESS"], nodes=len(alive),
     task_nodes=len({n for n, _, _ in got}), gpu_ids=[g for _, _, g in got],
     tasks=sorted([ip, g] for _, ip, g in got),
     node_addresses=sorted(n["NodeManagerAddress"] for n in alive),
     node_gpus=sorted(n["Resources"].get("GPU", 0) for n in alive),
     node_cpus=sorted(n["Resources"].get("CPU", 0) for n in alive))
step = first
while not stop and (first == 0 or step < first + 3):
    time.sleep(0.2)
    step += 1
    with open(ckpt, "w") as f:
        f.write(str(step))
if stop:
    note(event="term", step=step, nodes=len([n for n in ray.nodes() if n["Alive"]]))
    sys.exit(0)
note(event="done", step=step)
'''


def notes(out: Path, event: str) -> list[dict[str, Any]]:
    """The program's notes of kind ``event`` so far, oldest first."""
    return [d for ln in out.read_text().splitlines() if (d := json.loads(ln))["event"] == event] \
        if out.exists() else []
