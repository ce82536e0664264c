"""``vault show``: values of a selection, summarised like numpy prints large arrays.

A leaf larger than numpy's print threshold is not read whole: only the rows and timesteps
that numpy's summary shows (``edgeitems`` from each end, plus one in-between element that the
summary replaces by ``...``) are read, so showing a terabyte vault reads a few timesteps.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vault.cli._common import PathArg, emit_json, fail, open_vault, parse_rows, parse_span, stdout

if TYPE_CHECKING:
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
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the selected values as JSON (no summary).")
    ] = False,
) -> None:
    """Show the values of leaves, summarised like numpy for large ones."""
    import numpy as np

    vault = open_vault(path)
    names = list(leaf) if leaf else vault.leaf_names
    unknown = [n for n in names if n not in vault.leaf_names]
    if unknown:
        fail(f"{vault.location}: unknown leaves {unknown}; the vault has {vault.leaf_names}")
    picked = parse_rows(rows, vault.rows) or list(range(vault.rows))
    lo, hi = parse_span(time, vault.committed_length, "--time")
    if json_out:
        _show_json(vault, names, picked, lo, hi)
        return
    console = stdout()
    console.print(
        f"[bold]{vault.location}[/bold]: rows {_rows_text(picked)}, time [{lo}, {hi}) "
        f"of {vault.committed_length} committed"
    )
    for name in names:
        spec = vault.manifest.leaf(name)
        shape = [len(picked), hi - lo, *spec.shape]
        value, partial = summarised(vault, name, picked, lo, hi)
        text = np.array2string(
            value,
            threshold=0 if partial else THRESHOLD,
            edgeitems=EDGE,
            max_line_width=max(40, console.width),
            separator=" ",
        )
        console.print(f"[cyan]{name}[/cyan]  {spec.dtype} {shape}", highlight=False)
        console.print(text, markup=False, highlight=False, soft_wrap=True)


def _rows_text(rows: list[int]) -> str:
    if rows == list(range(rows[0], rows[-1] + 1)):
        return f"{rows[0]}..{rows[-1]}" if len(rows) > 1 else str(rows[0])
    return ",".join(map(str, rows))


def _show_json(vault: Vault, names: list[str], rows: list[int], lo: int, hi: int) -> None:
    meta = {n: vault.manifest.leaf(n) for n in names}
    size = sum(len(rows) * (hi - lo) * meta[n].step_bytes for n in names)
    if size > JSON_LIMIT_BYTES:
        fail(
            f"the selection is {size} bytes; --json prints every value, so narrow it with "
            f"--leaf, --rows or --time (at most {JSON_LIMIT_BYTES} bytes)"
        )
    data = vault.read_numpy(rows=rows, start=lo, stop=hi, leaves=names)
    emit_json(
        {
            "path": vault.location,
            "rows_selected": rows,
            "time": [lo, hi],
            "leaves": [
                {
                    "name": n,
                    "dtype": meta[n].dtype,
                    "shape": list(data[n].shape),
                    "values": data[n],
                }
                for n in names
            ],
        }
    )
