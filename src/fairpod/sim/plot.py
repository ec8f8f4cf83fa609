"""The usage plot: accelerators in use per team over time, stacked, against capacity and each team's quota."""

from __future__ import annotations

from pathlib import Path

from fairpod.sim.jobs import SimResult


def plot_usage(res: SimResult, path: str | Path) -> None:
    """Write a PNG (or any format matplotlib knows by the suffix) of ``res.timeline`` to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    span = res.makespan
    unit, scale = ("h", 3600.0) if span > 3 * 3600 else ("s", 1.0)
    ts = [res.start] + [t for t, _, _ in res.timeline] + [res.end]
    zero = tuple(0 for _ in res.teams)
    rows = [zero] + [a for _, a, _ in res.timeline] + [zero]
    xs = [(t - res.start) / scale for t in ts]
    fig, ax = plt.subplots(figsize=(11, 5.5))
    colors = plt.get_cmap("tab20" if len(res.teams) > 10 else "tab10").colors  # type: ignore[attr-defined]
    ys = [[r[i] for r in rows] for i in range(len(res.teams))]
    ax.stackplot(xs, ys, labels=res.teams, step="post", colors=colors[: len(res.teams)] or None, alpha=0.85)
    end = xs[-1] if xs[-1] > 0 else 1.0
    ax.axhline(res.capacity, color="black", linewidth=1.5, label=f"capacity ({res.capacity})")
    for i, name in enumerate(res.teams):
        if res.quota[name]:
            ax.axhline(res.quota[name], color=colors[i % len(colors)], linestyle="--", linewidth=1)
    ax.set_xlim(0, end)
    ax.set_ylim(0, res.capacity * 1.08 or 1)
    ax.set_xlabel(f"time since first submission ({unit})")
    ax.set_ylabel("accelerators in use")
    ax.set_title("Accelerators in use per team (stacked); dashed: each team's quota")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
