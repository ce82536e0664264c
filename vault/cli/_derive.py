"""``vault slice``, ``vault subsample`` and ``vault combine``: new vaults from old ones (and a
new dataset from a dataset: ``vault slice DATASET``).

The library builds the destination under a hidden temporary name and renames it at the end,
so a destination is complete or absent; the sources are only read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from vault.cli._common import (
    JsonOpt,
    ShardOpt,
    check_vault_path,
    count,
    emit_json,
    fail,
    in_shard,
    local_path,
    open_source,
    open_vault,
    parse_rows,
    parse_span,
    progress_bar,
    shards_text,
    stdout,
)
from vault.cli._episodes import require_episodes
from vault.cli._facts import episode_counts

if TYPE_CHECKING:
    from vault import Dataset, Vault

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
        "kind": "vault",
        "rows": vault.rows,
        "committed": vault.committed_length,
        **episode_counts(vault),
        **extra,
    }
    if json_out:
        emit_json(doc)
        return
    eps = "" if doc["episodes"] is None else f", {count(doc['episodes'], 'complete episode')}"
    stdout().print(
        f"wrote {out}: {count(doc['rows'], 'row')} x {count(doc['committed'], 'timestep')}{eps}",
        highlight=False,
        markup=False,
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
    shard: ShardOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Write a new vault holding a row / time range of SOURCE. Of a dataset's root: a new
    dataset of every shard sliced alike (--rows and --time apply to each shard); with
    --shard NAME, a vault of that shard's slice."""
    import vault as lib

    _check_out(out)
    src = open_source(source, shard)
    if isinstance(src, lib.Dataset):
        _slice_dataset(src, out, rows, time, json_out)
        return
    picked = parse_rows(rows, src.rows)
    lo, hi = parse_span(time, src.committed_length, "--time")
    if hi == lo:
        fail(
            f"{src.location} has no committed timesteps; nothing to slice"
            if time is None
            else f"--time {time!r} selects no timesteps"
        )
    with progress_bar("slicing") as progress:
        made = lib.derive_slice(src, out, rows=picked, start=lo, stop=hi, progress=progress)
    extra = {} if shard is None else {"shard": shard}
    _report(made, out, json_out, source=src.location, time=[lo, hi], rows_selected=picked, **extra)


def _slice_dataset(
    src: Dataset, out: str, rows: str | None, time: str | None, json_out: bool
) -> None:
    import vault as lib

    if not src.shards:
        fail(f"{src.location}: the dataset has no shards yet; nothing to slice")
    spans, chosen = {}, {}
    for name, member in src.vaults():
        with in_shard(name):
            chosen[name] = parse_rows(rows, member.rows)
            spans[name] = parse_span(time, member.committed_length, "--time")
    picked = next(iter(chosen.values()))
    if any(p != picked for p in chosen.values()):
        fail(
            f"--rows {rows!r} picks different rows in shards of different sizes (negative "
            "indices count from each shard's end); give row indices from the start"
        )
    if all(hi == lo for lo, hi in spans.values()):
        fail(
            f"{src.location}: no shard has committed timesteps; nothing to slice"
            if time is None
            else f"--time {time!r} selects no timesteps of any shard"
        )
    with progress_bar("slicing") as progress:
        made = lib.derive_slice(src, out, rows=picked, spans=spans, progress=progress)
    _report_dataset(made, out, json_out, source=src.location, rows_selected=picked)


def _report_dataset(dataset: Dataset, out: str, json_out: bool, **extra: Any) -> None:
    """What was written (a new dataset): JSON, or one line naming it as typed."""
    doc = {
        "path": dataset.location,
        "kind": "dataset",
        "shards": dataset.describe()["shards"],
        "timesteps": dataset.timesteps,
        **episode_counts(dataset),
        **extra,
    }
    if json_out:
        emit_json(doc)
        return
    eps = "" if doc["episodes"] is None else f", {count(doc['episodes'], 'complete episode')}"
    stdout().print(
        f"wrote {out}: dataset of {shards_text(len(doc['shards']))}, "
        f"{count(doc['timesteps'], 'timestep')}{eps}",
        highlight=False,
        markup=False,
    )


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
    src: Any = (
        lib.Dataset.open(source, write_catalog=False)
        if lib.is_dataset(source)
        else open_vault(source)
    )
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
        typer.Argument(
            metavar="SOURCES",
            help="Vaults of the same structure and rows, in order (a dataset's root: its "
            "shards, in shard order).",
        ),
    ],
    out: OutOpt,
    json_out: JsonOpt = False,
) -> None:
    """Write a new vault: SOURCES concatenated in time (lengths may differ). A dataset's root
    stands for its shards in order: `vault combine DATASET --out V` makes one vault of every
    shard's data (the shards must have the same rows)."""
    import vault as lib

    _check_out(out)
    opened: list[Vault] = []
    datasets = []
    for path in sources:
        check_vault_path(path)
        if not lib.is_dataset(path):
            opened.append(open_vault(path))
            continue
        dataset = lib.Dataset.open(path, write_catalog=False)
        if not dataset.shards:
            fail(f"{path}: the dataset has no shards yet; nothing to combine")
        datasets.append(path)
        opened.extend(vault for _, vault in dataset.vaults())
    if len(sources) < 2 and not datasets:
        fail("combine needs at least two source vaults (or a dataset's root)")
    rows = sorted({v.rows for v in opened})
    if datasets and len(rows) > 1:
        fail(
            f"combine concatenates vaults of the same rows in time, but these have {rows} "
            "rows; combine the shards of equal rows (DATASET/shards/NAME), or gather every "
            f"complete episode into one row with `vault subsample {datasets[0]} --out VAULT`"
        )
    with progress_bar("combining") as progress:
        made = lib.combine(opened, out, progress=progress)
    _report(made, out, json_out, sources=[v.location for v in opened])
