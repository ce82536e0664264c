"""``vault slice``, ``vault subsample`` and ``vault combine``: new vaults from old ones.

The library builds the destination under a hidden temporary name and renames it at the end,
so a destination is complete or absent; the sources are only read.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any

import typer

from vault.cli._common import (
    JsonOpt,
    emit_json,
    fail,
    open_vault,
    parse_rows,
    parse_span,
    progress_bar,
    spinner,
    stdout,
)
from vault.cli._episodes import require_episodes

OutOpt = Annotated[
    Path, typer.Option("--out", "-o", help="The new vault (must not exist).", show_default=False)
]
SourceArg = Annotated[
    str, typer.Argument(metavar="SOURCE", help="Source vault.", show_default=False)
]


def _run(description: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call a derive function, with a progress bar if it reports progress, else a spinner."""
    if "progress" in inspect.signature(fn).parameters:
        with progress_bar(description) as progress:
            return fn(*args, progress=progress, **kwargs)
    with spinner(description):
        return fn(*args, **kwargs)


def _check_out(out: Path) -> None:
    if out.exists():
        fail(f"{out} already exists; choose a new destination (nothing is ever overwritten)")


def _report(vault: Any, json_out: bool, **extra: Any) -> None:
    episodes = len(vault.episodes()) if getattr(vault, "has_episodes", False) else None
    doc = {
        "path": vault.location,
        "rows": vault.rows,
        "committed": vault.committed_length,
        "episodes": episodes,
        **extra,
    }
    if json_out:
        emit_json(doc)
        return
    eps = "" if episodes is None else f", {episodes} episodes"
    stdout().print(
        f"wrote {doc['path']}: {doc['rows']} rows x {doc['committed']} timesteps{eps}",
        highlight=False,
    )


def slice_(
    source: SourceArg,
    out: OutOpt,
    rows: Annotated[
        str | None, typer.Option("--rows", "-r", help="Rows: '0,2' or '0:4'; default: all.")
    ] = None,
    time: Annotated[
        str | None, typer.Option("--time", "-t", help="Time range 'a:b' (negative: from the end).")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Write a new vault holding a row / time range of SOURCE."""
    import vault as lib

    _check_out(out)
    src = open_vault(source)
    picked = parse_rows(rows, src.rows)
    lo, hi = parse_span(time, src.committed_length, "--time")
    if hi == lo:
        fail(f"--time {time!r} selects no timesteps")
    made = _run("slicing", lib.derive_slice, src, str(out), rows=picked, start=lo, stop=hi)
    _report(made, json_out, source=src.location, time=[lo, hi], rows_selected=picked)


def subsample(
    source: SourceArg,
    out: OutOpt,
    min_return: Annotated[float | None, typer.Option(help="Keep returns >= this.")] = None,
    max_return: Annotated[float | None, typer.Option(help="Keep returns <= this.")] = None,
    min_length: Annotated[int | None, typer.Option(help="Keep lengths >= this.")] = None,
    max_length: Annotated[int | None, typer.Option(help="Keep lengths <= this.")] = None,
    top_k: Annotated[int | None, typer.Option(help="Keep the K highest returns.", min=1)] = None,
    transitions: Annotated[
        int | None,
        typer.Option(help="Pick episodes uniformly until they hold N transitions.", min=1),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the uniform choice.")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Write a new vault (one row) from the complete episodes of SOURCE that pass the filters."""
    import vault as lib

    _check_out(out)
    src = open_vault(source)
    require_episodes(src)
    table = src.episodes().select(
        min_return=min_return,
        max_return=max_return,
        min_length=min_length,
        max_length=max_length,
        top_k=top_k,
        transitions=transitions,
        seed=seed,
    )
    if len(table) == 0:
        fail(f"{src.location}: no complete episode passes the filters; nothing written")
    made = _run("copying episodes", lib.derive_episodes, src, str(out), table)
    _report(made, json_out, source=src.location, selected=len(table))


def combine(
    sources: Annotated[
        list[str],
        typer.Argument(metavar="SOURCES", help="Vaults of the same structure and rows, in order."),
    ],
    out: OutOpt,
    json_out: JsonOpt = False,
) -> None:
    """Write a new vault: SOURCES concatenated in time (lengths may differ)."""
    import vault as lib

    _check_out(out)
    if len(sources) < 2:
        fail("combine needs at least two source vaults")
    opened = [open_vault(s) for s in sources]
    made = _run("combining", lib.combine, opened, str(out))
    _report(made, json_out, sources=[v.location for v in opened])
