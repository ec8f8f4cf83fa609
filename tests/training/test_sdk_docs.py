"""The worked examples of docs/sdk.md run as written: interrupted by SIGTERM (as fairpod preempts), started
again, and finishing from the step they saved."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed: the examples of docs/sdk.md need it")

DOCS = Path(__file__).resolve().parents[2] / "docs" / "sdk.md"
TORCHRUN = Path(sys.executable).parent / "torchrun"


def example(name: str) -> str:
    text = DOCS.read_text()
    m = re.search(rf"<!-- example: {name} -->\n```python\n(.*?)```", text, re.S)
    assert m, f"no example {name} in {DOCS}"
    return m.group(1)


def run_until(cmd: list[str], env: dict[str, str], pattern: str, timeout: float = 90) -> str:
    """Start ``cmd`` in its own session; once ``pattern`` is printed send SIGTERM to all of it, as fairpod
    does; return the whole output."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    assert p.stdout is not None
    out = b""
    deadline = time.monotonic() + timeout
    sent = False
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([p.stdout], [], [], 0.05)
            if r:
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    break
                out += chunk
            if not sent and re.search(pattern.encode(), out):
                os.killpg(p.pid, signal.SIGTERM)
                sent = True
        p.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
    assert sent, f"never saw {pattern!r}:\n{out.decode(errors='replace')[-3000:]}"
    return out.decode(errors="replace")


def clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRPOD_")}
    env["FAIRPOD_CHECKPOINT_DIR"] = str(tmp_path / "ckpt")
    env["OMP_NUM_THREADS"] = "1"  # a shared 2-core test machine: one thread per process is fastest
    return env


def test_torch_save_example(tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text(example("torch-save"))
    env = clean_env(tmp_path)
    out = run_until([sys.executable, str(script)], env, r"starting at step 0")
    stopped = int(re.search(r"preempted: saved step (\d+)", out).group(1))
    assert 0 < stopped < 3000
    out2 = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120).stdout
    assert f"starting at step {stopped}" in out2 and "done at step 3000" in out2


def test_dcp_example(tmp_path: Path):
    script = tmp_path / "train_dcp.py"
    script.write_text(example("dcp"))
    env = clean_env(tmp_path)
    cmd = [str(TORCHRUN), "--standalone", "--nproc_per_node", "2", str(script)]
    out = run_until(cmd, env, r"rank 1 starting at step 0", timeout=120)
    saved = sorted({int(s) for s in re.findall(r"rank \d preempted: saved step (\d+)", out)})
    assert len(saved) == 1 and 0 < saved[0] < 1000, out[-3000:]  # both ranks stopped at the same step
    assert (tmp_path / "ckpt" / "latest").read_text() == f"step-{saved[0]}"
    out2 = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120).stdout
    assert f"rank 0 starting at step {saved[0]}" in out2 and f"rank 1 starting at step {saved[0]}" in out2
    assert "rank 0 done at step 1000" in out2 and "rank 1 done at step 1000" in out2
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["latest", "step-1000"]  # old ones removed
