"""A tiny job that checkpoints (and tells fairpod so) and resumes from its checkpoint: try it with preemption.

    fairpod start-job --name demo --team smith --node-count 2 -- python examples/resumable.py

It uses fairpod's SDK (docs/sdk.md): its checkpoint directory, whether a run came before, the preemption flag
that fairpod's SIGTERM sets, and report_progress, so that `fairpod get-job demo` shows the last checkpoint.
"""

import os
import sys
import time
from pathlib import Path

try:
    from fairpod import sdk
except ImportError:  # a Python without fairpod installed: the SDK of this checkout (standard library only)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from fairpod import sdk

sdk.install_preemption_handler()  # SIGTERM sets a flag instead of killing us: we save and exit
ckpt = sdk.checkpoint_dir() / f"step-rank{sdk.rank()}"
step = int(ckpt.read_text()) if ckpt.exists() else 0
print(f"rank {sdk.rank()} of {os.environ.get('WORLD_SIZE')}: starting at step {step}"
      + (" (resuming)" if sdk.is_resuming() else ""), flush=True)


def save(step: int) -> None:
    with sdk.atomic_path(ckpt) as tmp:
        tmp.write_text(str(step))
    sdk.report_progress(step=step, checkpoint=ckpt)


while step < int(sys.argv[1] if len(sys.argv) > 1 else 3000):
    if sdk.preemption_requested():
        save(step)
        print(f"SIGTERM: checkpoint at step {step}, exiting", flush=True)
        sys.exit(0)
    step += 1
    if step % 100 == 0:
        save(step)
        print(f"step {step}", flush=True)
    time.sleep(0.1)
save(step)
print(f"done at step {step}", flush=True)
