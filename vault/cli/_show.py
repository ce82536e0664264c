"""``vault show``: values of a selection, summarised like numpy prints large arrays.

A leaf larger than numpy's print threshold is not read whole: only the rows and timesteps
that numpy's summary shows (``edgeitems`` from each end, plus one in-between element that the
summary replaces by ``...``) are read, so showing a terabyte vault reads a few timesteps.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vault.cli._common import (
    PathArg,
    ShardOpt,
    emit_json,
    fail,
    in_shard,
    leaf_names,
    open_source,
    parse_rows,
    parse_span,
    shards_text,
    stdout,
)
from vault.cli._tag import AtOpt

if TYPE_CHECKING:
    import numpy as np

    from vault import Vault

EDGE = 3  # numpy's default edgeitems
THRESHOLD = 1000  # numpy's default print threshold
JSON_LIMIT_BYTES = 64 << 20


def _edges(n: int) -> list[tuple[int, int]]:
    """Index ranges of ``range(n)`` that a numpy summary of an axis of length ``n`` needs."""
    if n <= 2 * EDGE:
        return [(0, n)]
    return [(0, EDGE + 1), (n - EDGE, n)]


def summarised(vault: Vault, name: str, rows: list[int], lo: int, hi: int) -> tuple[Any, bool]:
    """The selection of leaf ``name``, or (when it is larger than numpy's threshold) a
    stand-in whose numpy summary prints exactly like the full selection's."""
    import numpy as np

    full = len(rows) * (hi - lo) * math.prod(vault.manifest.leaf(name).shape)
    if full <= THRESHOLD:
        return vault.read_numpy(rows=rows, start=lo, stop=hi, leaves=[name])[name], False
    picked_rows = [rows[i] for a, b in _edges(len(rows)) for i in range(a, b)]
    parts = [
        vault.read_numpy(rows=picked_rows, start=lo + a, stop=lo + b, leaves=[name])[name]
        for a, b in _edges(hi - lo)
    ]
    return np.concatenate(parts, axis=1), True


def show(
    path: PathArg,
    leaf: Annotated[
        list[str] | None,
        typer.Option("--leaf", "-l", help="Leaf path to show (repeatable); default: all."),
    ] = None,
    rows: Annotated[
        str | None, typer.Option("--rows", "-r", help="Rows: '0,2' or '0:4'; default: all.")
    ] = None,
    time: Annotated[
        str | None,
        typer.Option("--time", "-t", help="Time range 'a:b' (negative: from the end)."),
    ] = None,
    shard: ShardOpt = None,
    at: AtOpt = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the selected values as JSON (no summary).")
    ] = False,
) -> None:
    """Show the values of leaves, summarised like numpy for large ones. For a dataset's root,
    every shard's selection under its name (--rows and --time apply to each shard); --at
    shows an older commit (a dataset's: a tag)."""
    from vault import Dataset

    dataset = open_source(path, shard, at)
    if isinstance(dataset, Dataset):
        names = leaf_names(dataset.location, dataset.leaf_names, leaf)
        picks = []
        for name, member in dataset.vaults():
            with in_shard(name):
                picks.append((name, member, *selection(member, rows, time)))
        if json_out:
            docs = [{"shard": name, **_show_doc(*pick)} for name, *pick in _named(picks, names)]
            _check_size(sum(_selected_bytes(*pick) for _, *pick in _named(picks, names)))
            emit_json({"path": dataset.location, "kind": "dataset", "shards": docs})
            return
        console = stdout()
        console.print(
            f"[bold]{escape(dataset.location)}[/bold]: dataset of {shards_text(len(picks))}",
            highlight=False,
        )
        for name, member, picked, lo, hi in picks:
            where = _where_text(member, picked, lo, hi)
            console.print(f"[bold]shard {escape(name)}[/bold]: {where}")
            _print_leaves(console, member, names, picked, lo, hi)
        return
    vault = dataset
    names = leaf_names(vault.location, vault.leaf_names, leaf)
    picked, lo, hi = selection(vault, rows, time)
    if json_out:
        _check_size(_selected_bytes(vault, names, picked, lo, hi))
        extra = {} if shard is None else {"shard": shard}
        emit_json({**_show_doc(vault, names, picked, lo, hi), **extra})
        return
    console = stdout()
    named = "" if shard is None else f" (shard {escape(shard)})"
    console.print(
        f"[bold]{escape(vault.location)}[/bold]{named}: {_where_text(vault, picked, lo, hi)}"
    )
    _print_leaves(console, vault, names, picked, lo, hi)


def selection(vault: Vault, rows: str | None, time: str | None) -> tuple[list[int], int, int]:
    """``--rows`` and ``--time`` of ``vault``: (rows, start, stop)."""
    picked = parse_rows(rows, vault.rows) or list(range(vault.rows))
    lo, hi = parse_span(time, vault.committed_length, "--time")
    return picked, lo, hi


def _named(picks: list[Any], names: list[str]) -> list[Any]:
    return [(name, member, names, picked, lo, hi) for name, member, picked, lo, hi in picks]


def _where_text(vault: Vault, picked: list[int], lo: int, hi: int) -> str:
    return f"rows {_rows_text(picked)}, time [{lo}, {hi}) of {vault.committed_length} committed"


def _print_leaves(
    console: Any, vault: Vault, names: list[str], picked: list[int], lo: int, hi: int
) -> None:
    import numpy as np

    for name in names:
        spec = vault.manifest.leaf(name)
        shape = [len(picked), hi - lo, *spec.shape]
        value, partial = summarised(vault, name, picked, lo, hi)
        text = np.array2string(
            value,
            threshold=0 if partial else THRESHOLD,
            edgeitems=EDGE,
            max_line_width=max(40, console.width if console.is_terminal else 120),
            separator=" ",
        )
        console.print(f"[cyan]{escape(name)}[/cyan]  {spec.dtype} {shape}", highlight=False)
        console.print(text, markup=False, highlight=False, soft_wrap=True)


def _rows_text(rows: list[int]) -> str:
    if rows == list(range(rows[0], rows[-1] + 1)):
        return f"{rows[0]}..{rows[-1]}" if len(rows) > 1 else str(rows[0])
    return ",".join(map(str, rows))


def _selected_bytes(vault: Vault, names: list[str], rows: list[int], lo: int, hi: int) -> int:
    return sum(len(rows) * (hi - lo) * vault.manifest.leaf(n).step_bytes for n in names)


def _check_size(size: int) -> None:
    if size > JSON_LIMIT_BYTES:
        fail(
            f"the selection is {size} bytes; --json prints every value, so narrow it with "
            f"--leaf, --rows, --time or --shard (at most {JSON_LIMIT_BYTES} bytes)"
        )


def _show_doc(vault: Vault, names: list[str], rows: list[int], lo: int, hi: int) -> dict[str, Any]:
    data = vault.read_numpy(rows=rows, start=lo, stop=hi, leaves=names)
    return {
        "path": vault.location,
        "rows_selected": rows,
        "time": [lo, hi],
        "leaves": [
            {
                "name": n,
                "dtype": vault.manifest.leaf(n).dtype,
                "shape": list(data[n].shape),
                "values": _named_non_finite(data[n]),
            }
            for n in names
        ],
    }


_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _named_non_finite(values: np.ndarray) -> Any:
    """``values`` for ``show --json``: floats that are NaN or infinite as the strings
    ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (JSON has no such numbers, and a ``null``
    would not tell them apart)."""
    import numpy as np

    if values.dtype.kind != "f" or np.isfinite(values).all():
        return values

    def walk(v: Any) -> Any:
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v if math.isfinite(v) else _NON_FINITE[str(v)]

    return walk(values.tolist())


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)
