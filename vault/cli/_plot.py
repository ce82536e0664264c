"""The figure of ``vault plot`` (matplotlib's Agg canvas, no pyplot, imported lazily).

Top: histograms of complete episodes' returns and lengths. Bottom: reward over time, one line
per row (up to ``max_rows``) and the mean over all rows, each averaged over bins of time so
that at most ``MAX_POINTS`` points are drawn; the rewards are streamed a block at a time.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vault.cli._common import ProgressFn, fail

if TYPE_CHECKING:
    from vault import EpisodeTable, Vault

MAX_POINTS = 600
BLOCK_BYTES = 64 << 20


def reward_leaf(vault: Vault, wanted: str | None) -> str | None:
    """The reward leaf: ``wanted``, the vault's episode reward leaf, or a leaf ``reward``."""
    names = vault.leaf_names
    if wanted is not None:
        if wanted not in names:
            fail(f"{vault.location}: no leaf {wanted!r}; the vault has {names}")
        return wanted
    named = vault.episode_leaves["reward"]
    if named:
        return str(named)
    return "reward" if "reward" in names else None


def reward_curve(vault: Vault, leaf: str, progress: ProgressFn | None = None) -> dict[str, Any]:
    """Per-row mean reward over bins of ``width`` timesteps: ``{"t": bin centres, "rows":
    [rows, bins], "width": width}``. Multi-dimensional reward leaves are summed per step."""
    from vault import time_blocks

    meta = vault.manifest.leaf(leaf)
    length, rows = vault.committed_length, vault.rows
    width = max(1, math.ceil(length / MAX_POINTS))
    bins = math.ceil(length / width)
    sums = np.zeros((rows, bins), np.float64)
    step = rows * meta.step_bytes
    edges = time_blocks(length, meta.chunk_time, step, BLOCK_BYTES)
    for t0, t1 in itertools.pairwise(edges):
        block = vault.read_numpy(start=t0, stop=t1, leaves=[leaf])[leaf]
        block = block.reshape(rows, t1 - t0, -1).sum(axis=2, dtype=np.float64)
        index = np.arange(t0, t1) // width
        first = int(index[0])
        for r in range(rows):
            part = np.bincount(index - first, weights=block[r])
            sums[r, first : first + part.size] += part
        if progress is not None:
            progress(step * t1, step * length)
    counts = np.minimum(width, length - np.arange(bins) * width)
    return {
        "t": np.arange(bins) * width + (counts - 1) / 2,
        "rows": sums / counts,
        "width": width,
    }


def draw(
    vault: Vault,
    table: EpisodeTable | None,
    leaf: str | None,
    curve: dict[str, Any] | None,
    out: Path,
    *,
    max_rows: int = 8,
) -> tuple[int, int]:
    """Write the figure to ``out`` (PNG, atomically); return its size in pixels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 8), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(2, 2, height_ratios=[1, 1.1])
    ax_ret, ax_len = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    ax_rew = fig.add_subplot(grid[1, :])
    complete = None
    if table is not None:
        complete = table[np.asarray(table.complete, bool)]
    _returns(ax_ret, complete)
    _lengths(ax_len, complete)
    _rewards(ax_rew, leaf, curve, max_rows)
    episodes = "no episode index" if complete is None else f"{len(complete)} complete episodes"
    fig.suptitle(
        f"{vault.location}\n{vault.rows} rows x {vault.committed_length} timesteps, {episodes}",
        fontsize=12,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        fig.savefig(tmp, format="png")
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    width, height = fig.canvas.get_width_height()
    return int(width), int(height)


def _empty(ax: Any, title: str, message: str) -> None:
    ax.set_title(title)
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _returns(ax: Any, complete: Any) -> None:
    title = "Episode return"
    if complete is None:
        _empty(ax, title, "no episode index in this vault")
        return
    values = np.asarray(complete.returns, np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        _empty(ax, title, "no complete episodes with a return\n(no reward leaf recorded)")
        return
    ax.hist(values, bins=min(50, max(5, values.size // 4)), color="tab:blue", edgecolor="white")
    ax.axvline(values.mean(), color="black", linestyle="--", label=f"mean {values.mean():.3g}")
    ax.set_title(f"{title} ({values.size} complete episodes)")
    ax.set_xlabel("return (sum of rewards)")
    ax.set_ylabel("episodes")
    ax.legend(loc="upper right")


def _lengths(ax: Any, complete: Any) -> None:
    title = "Episode length"
    if complete is None or len(complete) == 0:
        _empty(
            ax,
            title,
            "no episode index in this vault" if complete is None else "no complete episodes",
        )
        return
    values = np.asarray(complete.length, np.int64)
    low, high = int(values.min()), int(values.max())
    if high - low < 50:  # one bar per length
        bins: Any = np.arange(low - 0.5, high + 1.5)
    else:
        bins = 50
    ax.hist(values, bins=bins, color="tab:orange", edgecolor="white")
    ax.axvline(values.mean(), color="black", linestyle="--", label=f"mean {values.mean():.3g}")
    ax.set_title(f"{title} ({len(values)} complete episodes)")
    ax.set_xlabel("length (timesteps)")
    ax.set_ylabel("episodes")
    ax.legend(loc="upper right")


def _rewards(ax: Any, leaf: str | None, curve: dict[str, Any] | None, max_rows: int) -> None:
    title = "Reward over time"
    if leaf is None or curve is None:
        _empty(ax, title, "no reward leaf (name one with --reward)")
        return
    rows = curve["rows"]
    if rows.shape[1] == 0:
        _empty(ax, title, "no committed timesteps")
        return
    shown = min(max_rows, rows.shape[0])
    for r in range(shown):
        ax.plot(curve["t"], rows[r], linewidth=0.9, alpha=0.75, label=f"row {r}")
    if rows.shape[0] > 1:
        ax.plot(curve["t"], rows.mean(axis=0), color="black", linewidth=2, label="mean of rows")
    width = curve["width"]
    per = "per timestep" if width == 1 else f"mean over bins of {width} timesteps"
    more = "" if shown == rows.shape[0] else f"; {shown} of {rows.shape[0]} rows drawn"
    ax.set_title(f"{title}: leaf '{leaf}', {per}{more}")
    ax.set_xlabel("time (timestep)")
    ax.set_ylabel("reward")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
