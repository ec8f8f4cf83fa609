"""The contended ITP cluster: the ITP traces' teams on fewer nodes than their peaks, built from the traces.

``contended_spec(trace_dir)``: ``nodes`` x ml.p4d.24xlarge (128 by default, 1,024 GPUs); every team (one per
``*.csv`` file) gets ``base`` nodes (8) of quota plus a share of the remaining nodes in proportion to its
GPU-hours (largest remainder, ties by name), LendAndBorrow with a 100 % borrow limit that binds only while
another team waits (``borrow_limit_applies: WhileOthersWait``; ``Always`` on request), equal fair-share weights
(``weights="quota"``: each team's weight is its quota in nodes, the spec of ``examples/itp/contended-weighted.yaml``),
FairShare for idle capacity. The spec is derived from the files, so the benchmark and the docs
replay the same cluster without a second copy of the traces' figures.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from fairpod.model.spec import ClusterSpec, parse_spec

P4D = "ml.p4d.24xlarge"


def gpu_hours(path: Path) -> float:
    """GPU-hours of one ITP trace file (duration x num_gpu)."""
    total = 0.0
    with path.open(newline="", encoding="utf-8-sig") as f:
        for row in csv.DictReader(f):
            total += float(row["duration"]) * float(row["num_gpu"])
    return total / 3600


def contended_doc(trace_dir: Path, *, nodes: int = 128, base: int = 8, borrow_limit: int = 100,
                  borrow_limit_applies: str = "WhileOthersWait", weights: str = "equal") -> dict[str, Any]:
    """The spec as a plain document (for ``yaml.safe_dump``). ``weights``: ``equal`` (50 each) or ``quota`` (a team's
    fair-share weight is its quota in nodes)."""
    if weights not in ("equal", "quota"):
        raise ValueError(f"weights must be equal or quota, not {weights!r}")
    files = sorted(Path(trace_dir).glob("*.csv"))
    if not files:
        raise ValueError(f"{trace_dir}: no *.csv trace files")
    hours = {f.stem: gpu_hours(f) for f in files}
    rest = nodes - base * len(files)
    if rest < 0:
        raise ValueError(f"{nodes} nodes cannot give {len(files)} teams {base} nodes each")
    total = sum(hours.values()) or 1.0
    exact = {t: rest * h / total for t, h in hours.items()}
    extra = {t: int(x) for t, x in exact.items()}
    for t in sorted(exact, key=lambda t: (-(exact[t] - extra[t]), t))[: rest - sum(extra.values())]:
        extra[t] += 1
    return {
        "cluster": {"name": "itp-contended" + ("-weighted" if weights == "quota" else ""),
                    "instance_groups": [{"name": "p4d", "instance_type": P4D, "count": nodes}]},
        "policy": {"task_prioritization": "FirstComeFirstServe", "idle_compute_allocation": "FairShare",
                   "idle_resource_sharing": "Disabled", "borrow_limit_applies": borrow_limit_applies},
        "teams": [
            {"name": t, "fair_share_weight": base + extra[t] if weights == "quota" else 50,
             "sharing": {"strategy": "LendAndBorrow", "borrow_limit": borrow_limit},
             "quota": [{"instance_type": P4D, "count": base + extra[t]}]}
            for t in sorted(hours)
        ],
    }


def contended_spec(trace_dir: Path, **kw: Any) -> ClusterSpec:
    return parse_spec(contended_doc(trace_dir, **kw))
