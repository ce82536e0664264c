"""``vault episodes`` and ``vault plot``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from vault.cli import _dataset_cmds
from vault.cli._common import (
    JsonOpt,
    PathArg,
    ShardOpt,
    check_vault_path,
    count,
    emit_json,
    fail,
    local_out,
    open_source,
    open_vault,
    progress_bar,
    shards_text,
    stdout,
)
from vault.cli._episode_table import render_episode_table
from vault.cli._facts import episode_counts
from vault.cli._tag import AtOpt

if TYPE_CHECKING:
    from vault import Vault

SORT_KEYS = ("return", "length", "row", "start")


def require_episodes(vault: Vault) -> None:
    if not vault.has_episodes:
        fail(
            f"{vault.location} keeps no episode index (create the vault with done_leaf=... "
            "so that the writer records episodes)"
        )


def episodes(
    path: PathArg,
    sort: Annotated[
        str | None,
        typer.Option("--sort", "-s", help="Sort by return, length, row or start."),
    ] = None,
    ascending: Annotated[
        bool, typer.Option("--ascending", help="Sort smallest first (default: largest first).")
    ] = False,
    head: Annotated[
        int, typer.Option("--head", "-n", help="Show the first N episodes; 0 shows all.", min=0)
    ] = 20,
    include_open: Annotated[
        bool, typer.Option("--open", help="Include each row's unfinished last episode.")
    ] = False,
    at: AtOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The episode table: row, start, length, return, truncated, complete; --at: an older
    commit's (a dataset's: a tag's)."""
    if sort is not None and sort not in SORT_KEYS:
        fail(f"--sort must be one of {', '.join(SORT_KEYS)}, got {sort!r}")
    from vault import is_dataset

    check_vault_path(path)
    if is_dataset(path):
        _dataset_cmds.episodes(path, sort, ascending, head, include_open, json_out, at)
        return
    vault = open_vault(path, at)
    require_episodes(vault)
    table = vault.episodes(include_open=include_open)
    total = len(table)
    if sort is not None:
        table = table.sort(by=sort, descending=not ascending)
    shown = table if head == 0 else table[: min(head, total)]
    records = shown.to_records()
    counts = episode_counts(vault)
    if json_out:
        emit_json({"path": vault.location, **counts, "records": records})
        return
    render_episode_table(path, records, total, counts)


def plot(
    path: PathArg,
    out_text: Annotated[
        str, typer.Option("--out", "-o", help="PNG file to write.", show_default=False)
    ],
    reward: Annotated[
        str | None,
        typer.Option("--reward", help="Reward leaf (default: the vault's, or 'reward')."),
    ] = None,
    max_rows: Annotated[
        int,
        typer.Option(
            "--max-rows",
            help="Up to this many rows (a dataset: shards), each is its own line; more are "
            "drawn as a heat map (rows x time) under their mean with a band.",
            min=1,
        ),
    ] = 3,
    shard: ShardOpt = None,
    at: AtOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out if it exists.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """One figure: return histogram, episode-length histogram and reward over time. For a
    dataset's root: the episodes of every shard, and one reward line per shard (the mean of
    its rows; more shards than --max-rows: a heat map of shards over time). --at draws an
    older commit (a dataset: a tag)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        fail("vault plot needs matplotlib: pip install 'rlvault[plot]'")
    from vault import Dataset
    from vault.cli import _plot

    out = local_out(out_text)
    if out.suffix.lower() != ".png":
        fail(f"--out must name a .png file, got {out}; e.g. --out {out.with_suffix('.png')}")
    if out.exists() and not force:
        fail(f"{out} already exists; pass --force to overwrite it, or choose another --out")
    source = open_source(path, shard, at)
    pinned = "" if at is None else f" at {at}"
    table = source.episodes() if source.has_episodes else None
    leaf = _plot.reward_leaf(source, reward)
    if isinstance(source, Dataset):
        with progress_bar("reading rewards") as progress:
            curve = _plot.shards_curve(source, leaf, progress=progress) if leaf else None
        title = (
            f"{source.location}{pinned}\ndataset of {shards_text(len(source.shards))}, "
            f"{count(source.timesteps, 'timestep')}"
        )
        size = _plot.draw(title, table, leaf, curve, out, max_rows=max_rows, labels=source.shards)
        shards = source.describe()["shards"]
        rows, lines = sum(s["rows"] for s in shards), len(shards)
        extra: dict[str, Any] = {"kind": "dataset", "shards": shards}
    else:
        with progress_bar("reading rewards", bytes_unit=True) as progress:
            curve = _plot.reward_curve(source, leaf, progress=progress) if leaf else None
        title = (
            f"{source.location}{pinned}\n{count(source.rows, 'row')} x "
            f"{count(source.committed_length, 'timestep')}"
        )
        size = _plot.draw(title, table, leaf, curve, out, max_rows=max_rows)
        rows = lines = source.rows
        extra = {"seams_marked": len(curve["seams"]) if curve else 0}
        if shard is not None:
            extra["shard"] = shard
    doc = {
        "path": source.location,
        "out": str(out),
        "width": size[0],
        "height": size[1],
        "reward_leaf": leaf,
        "rows_drawn": rows if leaf else 0,
        "reward_panel": _plot.panel_kind(lines, max_rows) if leaf else None,
        **extra,
    }
    if json_out:
        emit_json(doc)
    else:
        stdout().print(f"wrote {out} ({size[0]}x{size[1]} px)", markup=False)
