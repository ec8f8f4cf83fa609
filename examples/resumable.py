"""A tiny job that checkpoints on SIGTERM and resumes from its checkpoint: try it with preemption.

    fairpod start-job --name demo --team smith --node-count 2 -- python examples/resumable.py
"""

import os
import pathlib
import signal
import sys
import time

ckpt = pathlib.Path(os.environ.get("FAIRPOD_CHECKPOINT_DIR", ".")) / f"step-rank{os.environ.get('RANK', '0')}"
step = int(ckpt.read_text()) if ckpt.exists() else 0
print(f"rank {os.environ.get('RANK')} of {os.environ.get('WORLD_SIZE')}: starting at step {step}", flush=True)
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
while step < int(sys.argv[1] if len(sys.argv) > 1 else 3000):
    if stopping:
        ckpt.write_text(str(step))
        print(f"SIGTERM: checkpoint at step {step}, exiting", flush=True)
        sys.exit(0)
    step += 1
    if step % 100 == 0:
        ckpt.write_text(str(step))
        print(f"step {step}", flush=True)
    time.sleep(0.1)
print(f"done at step {step}", flush=True)
