"""``vault slice``, ``vault subsample`` and ``vault combine``: new vaults from old ones.

The library builds the destination under a hidden temporary name and renames it at the end,
so a destination is complete or absent; the sources are only read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from vault.cli._common import (
    JsonOpt,
    emit_json,
    fail,
    local_path,
    open_vault,
    parse_rows,
    parse_span,
    progress_bar,
    stdout,
)
from vault.cli._episodes import require_episodes
from vault.cli._facts import episode_counts

if TYPE_CHECKING:
    from vault import Vault

OutOpt = Annotated[
    str,
    typer.Option(
        "--out", "-o", help="The new vault, a path or URL (must not exist).", show_default=False
    ),
]
SourceArg = Annotated[
    str, typer.Argument(metavar="SOURCE", help="Source vault.", show_default=False)
]


def _check_out(out: str) -> None:
    """Refuse a local destination that exists (even an empty folder) before reading anything;
    the library refuses any existing vault at the destination when it starts writing."""
    folder = local_path(out)
    if folder is not None and folder.exists():
        fail(f"{out} already exists; choose a new destination (nothing is ever overwritten)")


def _report(vault: Vault, out: str, json_out: bool, **extra: Any) -> None:
    """What was written: JSON with the vault's location, or one line naming it as typed."""
    doc = {
        "path": vault.location,
        "rows": vault.rows,
        "committed": vault.committed_length,
        **episode_counts(vault),
        **extra,
    }
    if json_out:
        emit_json(doc)
        return
    eps = "" if doc["episodes"] is None else f", {doc['episodes']} complete episodes"
    stdout().print(
        f"wrote {out}: {doc['rows']} rows x {doc['committed']} timesteps{eps}",
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
    with progress_bar("slicing") as progress:
        made = lib.derive_slice(src, out, rows=picked, start=lo, stop=hi, progress=progress)
    _report(made, out, json_out, source=src.location, time=[lo, hi], rows_selected=picked)


def subsample(
    source: SourceArg,
    out: OutOpt,
    min_return: Annotated[float | None, typer.Option(help="Keep returns >= this.")] = None,
    max_return: Annotated[float | None, typer.Option(help="Keep returns <= this.")] = None,
    min_length: Annotated[int | None, typer.Option(help="Keep lengths >= this.", min=0)] = None,
    max_length: Annotated[int | None, typer.Option(help="Keep lengths <= this.", min=0)] = None,
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
    src: Any = lib.Dataset.open(source) if lib.is_dataset(source) else open_vault(source)
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
    with progress_bar("copying episodes") as progress:
        made = lib.derive_episodes(src, out, table, progress=progress)
    _report(made, out, json_out, source=src.location, episodes_selected=len(table))


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
    with progress_bar("combining") as progress:
        made = lib.combine(opened, out, progress=progress)
    _report(made, out, json_out, sources=[v.location for v in opened])
