"""Shared inputs for the simulator tests: the seed example and small traces written to tmp_path."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEED_SPEC = ROOT / "examples" / "seed" / "spec.yaml"
SEED_TRACE = ROOT / "examples" / "seed" / "trace.csv"
ITP_SPEC = ROOT / "examples" / "itp" / "spec.yaml"
ITP_DIR = Path(__file__).resolve().parents[3] / "shared" / "traces" / "itp"  # shared/ beside the checkout

HEADER = "submit_time,team,duration,accelerators,nodes,name,checkpoint_interval,min_runtime,priority"


def write_trace(tmp: Path, rows: list[str], header: str = HEADER, name: str = "trace.csv") -> Path:
    p = tmp / name
    p.write_text(header + "\n" + "".join(r + "\n" for r in rows))
    return p


def seed_rows(*, smith_ckpt: str = "60", john_b_at: int = 120, smith_min_runtime: str = "") -> list[str]:
    """The seed trace, with knobs: smith's checkpoint interval and min_runtime, john's second submit time."""
    return [
        "0,john,600,8,2,john-train-a,60,,",
        f"60,smith,600,8,2,smith-train,{smith_ckpt},{smith_min_runtime},",
        f"{john_b_at},john,600,4,1,john-train-b,60,,",
    ]
