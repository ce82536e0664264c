"""The figure of ``vault plot`` (matplotlib's Agg canvas, no pyplot, imported lazily).

Top: histograms of complete episodes' returns and lengths. Bottom: reward over time, averaged
over bins of time so that at most ``MAX_POINTS`` points are drawn (the rewards are streamed a
block at a time). Up to ``max_rows`` rows, each row is its own line (with their mean when
there are several); more rows would pile up into an unreadable tangle, so they are drawn as
the mean over rows with a band (the middle half of the rows and their full range) above a heat
map of every row over time. A dataset of shards is drawn alike, each shard standing for a row
(the mean of its rows, on one time axis: a shorter shard's line ends where its data does).
A vault's seams (timesteps lost, or its rows restarted) are dotted vertical lines across the
reward panels, so that a jump there is not read as the agent's.
"""

from __future__ import annotations

import itertools
import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vault.cli._common import ProgressFn, fail

if TYPE_CHECKING:
    from vault import Dataset, EpisodeTable, Vault

MAX_POINTS = 300
HEAT_BINS = 120  # time bins of the many-rows panels: each bin averages enough steps to read
BLOCK_BYTES = 64 << 20
TITLE_CHARS = 120  # a line of the figure's title (12 pt on 12 inches)
NAME_CHARS = 40  # a leaf's name in a panel's title
LABEL_CHARS = 24  # a shard's name in a legend or on the heat map's axis
LEGEND_LINES = 10  # more rows (or shards) than this: the mean alone has a legend entry
NAMED_SHARDS = 16  # the heat map names its shards up to this many (12 px a name)
SEAM_COLOUR = "tab:red"


def shortened(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters in its middle (``…``), so that both ends of a
    path or a name stay readable."""
    if len(text) <= limit:
        return text
    keep = limit - 1
    return f"{text[: keep - keep // 2]}…{text[len(text) - keep // 2 :]}"


def panel_kind(rows: int, max_rows: int) -> str:
    """``"lines"`` (one per row) or ``"heat map"`` (more than ``max_rows`` rows)."""
    return "lines" if rows <= max_rows else "heat map"


def reward_leaf(source: Vault | Dataset, wanted: str | None) -> str | None:
    """The reward leaf: ``wanted``, the episode reward leaf of the vault (or dataset), or a
    leaf ``reward``."""
    names = source.leaf_names
    if wanted is not None:
        if wanted not in names:
            fail(f"{source.location}: no leaf {wanted!r}; the vault has {names}")
        return wanted
    episodes = source.manifest.episodes
    if episodes is not None and episodes.reward:
        return str(episodes.reward)
    return "reward" if "reward" in names else None


def shards_curve(dataset: Dataset, leaf: str, progress: ProgressFn | None = None) -> dict[str, Any]:
    """:func:`reward_curve` of every shard on one time axis (bins of the same width), each
    shard one "row" of the result: the mean over its rows (NaN past its committed length)."""
    longest = max(dataset.committed_lengths.values(), default=0)
    width = max(1, math.ceil(longest / MAX_POINTS))
    bins = math.ceil(longest / width)
    rows = np.full((len(dataset.shards), bins), np.nan)
    counts = np.minimum(width, longest - np.arange(bins) * width)
    total = dataset.timesteps
    done = 0
    for i, (_, vault) in enumerate(dataset.vaults()):
        base = done

        def step(done_here: int, _total: int, base: int = base) -> None:
            if progress is not None:
                progress(base + done_here, total)

        curve = reward_curve(vault, leaf, progress=step, width=width, unit_bytes=False)
        n = curve["rows"].shape[1]
        if vault.rows and n:
            rows[i, :n] = curve["rows"].mean(axis=0)
        done += vault.rows * vault.committed_length
    t = np.arange(bins) * width + (counts - 1) / 2
    return {"t": t, "rows": rows, "width": width, "counts": counts}


def reward_curve(
    vault: Vault,
    leaf: str,
    progress: ProgressFn | None = None,
    *,
    width: int | None = None,
    unit_bytes: bool = True,
) -> dict[str, Any]:
    """Per-row mean reward over bins of ``width`` timesteps (default: at most
    ``MAX_POINTS`` bins): ``{"t": bin centres, "rows": [rows, bins], "width": width,
    "counts": timesteps per bin, "seams": the vault's seams as (at, lost) pairs}``.
    Multi-dimensional reward leaves are summed per step. ``progress`` gets bytes read (or,
    without ``unit_bytes``, timesteps of all rows)."""
    from vault import time_blocks

    meta = vault.manifest.leaf(leaf)
    length, rows = vault.committed_length, vault.rows
    width = max(1, math.ceil(length / MAX_POINTS)) if width is None else width
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
            unit = step if unit_bytes else rows
            progress(unit * t1, unit * length)
    counts = np.minimum(width, length - np.arange(bins) * width)
    return {
        "t": np.arange(bins) * width + (counts - 1) / 2,
        "rows": sums / counts,
        "width": width,
        "counts": counts,
        "seams": [(seam.at, seam.lost) for seam in vault.seams if 0 < seam.at < length],
    }


def coarser(curve: dict[str, Any], bins: int) -> dict[str, Any]:
    """``curve`` with neighbouring bins merged (weighted by their timesteps) into at most
    ``bins`` bins; NaN bins (past a shard's end) are left out of a merge, and a merge of
    only NaN bins is NaN."""
    n = curve["rows"].shape[1]
    k = max(1, math.ceil(n / bins))
    if k == 1:
        return curve
    counts = curve["counts"]
    groups = np.arange(n) // k
    merged = np.bincount(groups, weights=counts)
    out = []
    for r in curve["rows"]:
        known = np.isfinite(r)
        total = np.bincount(groups, weights=np.where(known, r, 0.0) * counts)
        weight = np.bincount(groups, weights=known * counts)
        out.append(np.divide(total, weight, out=np.full_like(total, np.nan), where=weight > 0))
    width = curve["width"] * k
    return {
        "t": np.arange(merged.size) * width + (merged - 1) / 2,
        "rows": np.stack(out, axis=0),
        "width": width,
        "counts": merged,
        "seams": curve.get("seams", []),
    }


def draw(
    title: str,
    table: EpisodeTable | None,
    leaf: str | None,
    curve: dict[str, Any] | None,
    out: Path,
    *,
    max_rows: int = 3,
    labels: list[str] | None = None,
) -> tuple[int, int]:
    """Write the figure to ``out`` (PNG, atomically); return its size in pixels. The curve's
    rows are a vault's rows, or with ``labels`` (their names) a dataset's shards. Every text is
    plain: a ``$`` in a path or a leaf's name is not mathtext; long ones are shortened in
    their middle. NaN rewards (all of them, or a shard's past its end) draw no warning."""
    import matplotlib

    with (
        matplotlib.rc_context({"text.parse_math": False}),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's all-NaN slices: drawn blank
        return _draw(title, table, leaf, curve, out, max_rows=max_rows, labels=labels)


def _draw(
    title: str,
    table: EpisodeTable | None,
    leaf: str | None,
    curve: dict[str, Any] | None,
    out: Path,
    *,
    max_rows: int,
    labels: list[str] | None,
) -> tuple[int, int]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 8), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    heat = curve is not None and panel_kind(curve["rows"].shape[0], max_rows) == "heat map"
    grid = fig.add_gridspec(3 if heat else 2, 2, height_ratios=[1, 0.6, 0.8] if heat else [1, 1.1])
    ax_ret, ax_len = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    complete = None
    if table is not None:
        complete = table[np.asarray(table.complete, bool)]
    _returns(ax_ret, complete, leaf)
    _lengths(ax_len, complete)
    if heat and leaf is not None and curve is not None and curve["rows"].shape[1] > 0:
        ax_mean = fig.add_subplot(grid[1, :])
        wide = coarser(curve, HEAT_BINS)
        _reward_band(ax_mean, leaf, wide, labels)
        _reward_heat(fig, fig.add_subplot(grid[2, :], sharex=ax_mean), wide, labels)
    else:
        _rewards(fig.add_subplot(grid[1, :]), leaf, curve, labels)
    episodes = "no episode index" if complete is None else f"{len(complete)} complete episodes"
    lines = [shortened(line, TITLE_CHARS) for line in f"{title}, {episodes}".splitlines()]
    fig.suptitle("\n".join(lines), fontsize=12)
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


def _whole_counts(ax: Any, x: bool = False) -> None:
    """Ticks at whole numbers on the counts axis (and on the x axis with ``x``)."""
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    if x:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))


def _returns(ax: Any, complete: Any, leaf: str | None) -> None:
    title = "Episode return"
    if complete is None:
        _empty(ax, title, "no episode index in this vault")
        return
    every = np.asarray(complete.returns, np.float64)
    values = every[np.isfinite(every)]
    if values.size == 0:
        why = (
            "no complete episodes"
            if every.size == 0
            else "no return recorded (no reward leaf)"
            if leaf is None
            else "every return is NaN or infinite"
        )
        _empty(ax, title, why)
        return
    ax.hist(values, bins=min(50, max(5, values.size // 4)), color="tab:blue", edgecolor="white")
    ax.axvline(values.mean(), color="black", linestyle="--")
    left_out = every.size - values.size
    counted = (
        f"{values.size} complete episodes"
        if not left_out
        else f"{values.size} of {every.size} complete episodes; {left_out} with a return "
        "that is NaN or infinite"
    )
    # the mean in the title, not in a legend, which would cover the tallest bar of a solved
    # task's returns (or of lengths all alike)
    ax.set_title(f"{title} ({counted})\nmean {values.mean():.3g} (dashed)")
    ax.set_xlabel("return (sum of rewards)")
    ax.set_ylabel("episodes")
    _whole_counts(ax)


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
    ax.axvline(values.mean(), color="black", linestyle="--")
    ax.set_title(f"{title} ({len(values)} complete episodes)\nmean {values.mean():.3g} (dashed)")
    ax.set_xlabel("length (timesteps)")
    ax.set_ylabel("episodes")
    _whole_counts(ax, x=True)


def _per(curve: dict[str, Any]) -> str:
    width = curve["width"]
    return "per timestep" if width == 1 else f"mean over bins of {width} timesteps"


def _rewards(
    ax: Any, leaf: str | None, curve: dict[str, Any] | None, labels: list[str] | None
) -> None:
    """One line per row (a dataset: per shard, the mean of its rows), and their mean when
    there are several."""
    title = "Reward over time"
    if leaf is None or curve is None:
        _empty(ax, title, "no reward leaf (name one with --reward)")
        return
    rows = curve["rows"]
    if rows.shape[1] == 0:
        _empty(ax, title, "no committed timesteps")
        return
    if not np.isfinite(rows).any():
        _empty(ax, f"{title}: leaf '{shortened(leaf, NAME_CHARS)}'", "every reward is NaN")
        return
    named = rows.shape[0] <= LEGEND_LINES  # more: only the mean is in the legend
    t, broken = _broken(curve)
    for r in range(rows.shape[0]):
        name = f"row {r}" if labels is None else f"shard {shortened(labels[r], LABEL_CHARS)}"
        label = name if named else "_nolegend_"
        ax.plot(t, broken[r], linewidth=0.9, alpha=0.75, label=label)
    if rows.shape[0] > 1:
        mean = np.nanmean(broken, axis=0)
        unit = "rows" if labels is None else "shards"
        ax.plot(t, mean, color="black", linewidth=2, label=f"mean of {unit}")
    each = "" if labels is None else ", each shard the mean of its rows"
    ax.set_title(f"{title}: leaf '{shortened(leaf, NAME_CHARS)}', {_per(curve)}{each}")
    _seams(ax, curve, label=True)
    ax.set_xlabel("time (timestep)")
    ax.set_ylabel("reward")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")


def _reward_band(ax: Any, leaf: str, curve: dict[str, Any], labels: list[str] | None) -> None:
    """The mean over rows, the middle half of the rows (25th to 75th percentile) and their
    full range, per bin of time (a dataset: over its shards, where they have data)."""
    rows, t = curve["rows"], curve["t"]
    name = shortened(leaf, NAME_CHARS)
    if not np.isfinite(rows).any():
        _empty(ax, f"Reward over time: leaf '{name}'", "every reward is NaN")
        return
    t, broken = _broken(curve)
    low, q1, q3, high = np.nanpercentile(broken, [0, 25, 75, 100], axis=0)
    ax.fill_between(t, low, high, color="tab:blue", alpha=0.12, linewidth=0, label="min-max")
    ax.fill_between(t, q1, q3, color="tab:blue", alpha=0.35, linewidth=0, label="middle half")
    ax.plot(t, np.nanmean(broken, axis=0), color="black", linewidth=1.5, label="mean")
    unit = "rows" if labels is None else "shards (each the mean of its rows)"
    ax.set_title(f"Reward over time: leaf '{name}', {_per(curve)}, across {rows.shape[0]} {unit}")
    ax.set_ylabel("reward")
    ax.grid(alpha=0.3)
    _seams(ax, curve, label=True)
    ax.legend(loc="best", fontsize="small", ncols=3, framealpha=0.8)
    ax.tick_params(labelbottom=False)
    ax.margins(x=0)


def _reward_heat(fig: Any, ax: Any, curve: dict[str, Any], labels: list[str] | None) -> None:
    """Every row (or shard) over time as a heat map (top to bottom, colour = mean reward;
    blank past a shard's committed length)."""
    rows, t, width = curve["rows"], curve["t"], curve["width"]
    left, right = t[0] - (width - 1) / 2 - 0.5, t[-1] + (width - 1) / 2 + 0.5
    image = ax.imshow(
        rows,
        aspect="auto",
        interpolation="nearest",
        cmap="viridis",
        extent=(left, right, rows.shape[0] - 0.5, -0.5),
    )
    _seams(ax, curve, label=False)
    ax.set_xlabel("time (timestep)")
    ax.set_ylabel("row" if labels is None else "shard")
    if labels is not None and len(labels) <= NAMED_SHARDS:  # few shards: each named
        names = [shortened(label, LABEL_CHARS) for label in labels]
        ax.set_yticks(range(len(labels)), names, fontsize="small")
    fig.colorbar(image, ax=ax, label="mean reward", pad=0.005, aspect=10)


def seam_label(seams: list[tuple[int, int]]) -> str:
    """The legend's entry for a vault's seams: how many, and what they were."""
    lost = sum(1 for _, n in seams if n > 0)
    kinds = (
        "timesteps lost"
        if lost == len(seams)
        else "rows restarted"
        if not lost
        else "timesteps lost or rows restarted"
    )
    return f"seam ({kinds})" if len(seams) == 1 else f"{len(seams)} seams ({kinds})"


def _broken(curve: dict[str, Any]) -> tuple[Any, Any]:
    """The curve's ``t`` and ``rows`` with a NaN point at each seam, so that no line joins
    the timesteps on its two sides."""
    t, rows = curve["t"], curve["rows"]
    cuts: dict[int, float] = {}  # where in t -> the seam's x (one point between two bins)
    for at, _ in curve.get("seams", []):
        cuts.setdefault(int(np.searchsorted(t, at - 0.5)), at - 0.5)
    if not cuts:
        return t, rows
    where = sorted(cuts)
    x = [cuts[i] for i in where]
    return np.insert(t, where, x), np.insert(rows, where, np.nan, axis=1)


def _seams(ax: Any, curve: dict[str, Any], *, label: bool) -> None:
    """A dotted vertical line where each seam is (between timesteps ``at - 1`` and ``at``);
    one legend entry for them all."""
    seams = curve.get("seams", [])
    if not seams:
        return
    ax.vlines(
        [at - 0.5 for at, _ in seams],
        0,
        1,
        transform=ax.get_xaxis_transform(),  # x in timesteps, y across the whole panel
        colors=SEAM_COLOUR,
        linestyles=":",
        linewidth=1.2,
        label=seam_label(seams) if label else "_nolegend_",
    )
