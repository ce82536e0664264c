"""``vault import FORMAT SRC --out DEST`` and ``vault export SRC --format FORMAT --out DEST``.

Both call the converters of :mod:`vault.converters` (their optional dependencies are imported
only when the command runs); a progress bar in bytes of raw data is shown on a terminal. The
destination is built under a hidden name and renamed at the end: an interrupted command
(Ctrl-C, exit 130) leaves nothing. ``vault export`` writes its numpy formats (``npz``, ``npy``:
``vault.cli._export``) itself and the others through the converters.

The formats each command takes come from one registry, :mod:`vault.converters`
(``IMPORT_FORMATS``, ``EXPORT_FORMATS``) with the numpy formats before them: its help, its
checks and its error messages list them from there.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Annotated, Any

import typer

from vault import converters
from vault.cli import _export
from vault.cli._common import (
    JsonOpt,
    PathArg,
    ShardOpt,
    count,
    emit_json,
    fail,
    local_out,
    local_path,
    open_source,
    progress_bar,
    say_error,
    stdout,
)
from vault.cli._export import CompressOpt, LeafOpt, RowsOpt, TimeOpt

IMPORT_FORMATS = converters.IMPORT_FORMATS
EXPORT_FORMATS = (*_export.FORMATS, *converters.EXPORT_FORMATS)


def _either(names: tuple[str, ...]) -> str:
    """``"a, b or c"``."""
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]


def import_(
    fmt: Annotated[
        str,
        typer.Argument(metavar="FORMAT", help=f"{_either(IMPORT_FORMATS)}.", show_default=False),
    ],
    source: Annotated[
        str,
        typer.Argument(
            metavar="SRC",
            help="flashbax: the vault directory <rel_dir>/<name>/<uid>; minari: a dataset id "
            "or dataset directory; d4rl: an HDF5 file; ogbench: a dataset .npz file (its "
            "-val.npz beside it goes to OUT-val); rlds: a TFDS dataset directory (path or "
            "URL).",
            show_default=False,
        ),
    ],
    out: Annotated[
        str, typer.Option("--out", "-o", help="The new vault, a path or URL (must not exist).")
    ],
    done: Annotated[
        str | None, typer.Option(help="flashbax: done leaf path (turns on the episode index).")
    ] = None,
    truncated: Annotated[str | None, typer.Option(help="flashbax: truncation leaf path.")] = None,
    reward: Annotated[str | None, typer.Option(help="flashbax: reward leaf path.")] = None,
    no_val: Annotated[
        bool, typer.Option("--no-val", help="ogbench: leave the -val.npz file out.")
    ] = False,
    split: Annotated[str, typer.Option(help="rlds: the split to import.")] = "train",
    shards: Annotated[
        bool,
        typer.Option(
            "--shards",
            help="rlds: OUT is a dataset with one shard per file (run again to resume).",
        ),
    ] = False,
    jpeg: Annotated[
        str, typer.Option(help="rlds: JPEG pixels of 'tensorflow' or 'tfds-numpy'.")
    ] = "tensorflow",
    json_out: JsonOpt = False,
) -> None:
    """Import a Flashbax/og-marl vault, a Minari dataset, a D4RL-style HDF5 file, an OGBench
    dataset file or an RLDS dataset as a vault."""
    if fmt not in IMPORT_FORMATS:
        fail(f"FORMAT must be one of {', '.join(IMPORT_FORMATS)}, got {fmt!r}")
    roles = {"done": done, "truncated": truncated, "reward": reward}
    if fmt != "flashbax" and any(roles.values()):
        fail(
            f"--done/--truncated/--reward are for flashbax vaults; a {fmt} import names its "
            "episode leaves itself"
        )
    if fmt != "ogbench" and no_val:
        fail("--no-val is for ogbench files")
    if fmt != "rlds" and (split != "train" or shards or jpeg != "tensorflow"):
        fail("--split/--shards/--jpeg are for rlds datasets")
    folder = local_path(out)
    if folder is not None and folder.exists() and not shards:
        fail(f"{out} already exists; choose a new destination (nothing is ever overwritten)")
    by_format: dict[str, dict[str, Any]] = {
        "flashbax": roles,
        "ogbench": {"val_dest": not no_val},
        "rlds": {"split": split, "shards": shards, "jpeg": jpeg},
    }
    options = by_format.get(fmt, {})
    with progress_bar(f"importing {fmt}", bytes_unit=True) as progress:
        made = converters.import_dataset(fmt, source, out, progress=progress, **options)
    doc = {"path": made.location, "format": fmt, "source": source, **_summary(made)}
    origin = made.metadata.get("imported_from", {}) if fmt == "ogbench" else {}
    validation = origin.get("validation")
    if validation is not None:
        from vault import Vault

        val = Vault.open(validation)
        doc["validation"] = {"path": val.location, **_summary(val)}
    if json_out:
        emit_json(doc)
        return
    stdout().print(f"wrote {_line(doc)} (from {fmt} {source})", highlight=False, markup=False)
    if validation is not None:
        stdout().print(
            f"wrote {_line(doc['validation'])} (its validation file)", highlight=False, markup=False
        )


def _summary(made: Any) -> dict[str, Any]:
    from vault import Dataset

    if isinstance(made, Dataset):
        return {"kind": "dataset", "shards": made.describe()["shards"],
                "timesteps": made.timesteps, "leaf_names": made.leaf_names,
                "episodes": len(made.episodes())}  # fmt: skip
    return {
        "kind": "vault",
        "rows": made.rows,
        "committed": made.committed_length,
        "leaf_names": made.leaf_names,
        "episodes": len(made.episodes()) if made.has_episodes else None,
    }


def _line(doc: dict[str, Any]) -> str:
    eps = "" if doc["episodes"] is None else f", {count(doc['episodes'], 'episode')}"
    leaves = count(len(doc["leaf_names"]), "leaf", "leaves")
    if doc.get("kind") == "dataset":
        shards = count(len(doc["shards"]), "shard")
        return (
            f"dataset {doc['path']}: {shards}, {count(doc['timesteps'], 'timestep')}, {leaves}{eps}"
        )
    return (
        f"{doc['path']}: {count(doc['rows'], 'row')} x "
        f"{count(doc['committed'], 'timestep')}, {leaves}{eps}"
    )


def export(
    path: PathArg,
    out: Annotated[
        str,
        typer.Option(
            "--out", "-o", help="npz file / npy folder, or the Minari dataset id (minari)."
        ),
    ],
    fmt: Annotated[
        str, typer.Option("--format", "-f", help=f"{_either(EXPORT_FORMATS)}.")
    ] = _export.FORMATS[0],
    leaf: LeafOpt = None,
    rows: RowsOpt = None,
    time: TimeOpt = None,
    compress: CompressOpt = False,
    minari_root: Annotated[
        Path | None,
        typer.Option(help="minari: datasets directory (default: MINARI_DATASETS_PATH)."),
    ] = None,
    data_format: Annotated[str, typer.Option(help="minari: hdf5 or arrow.")] = "hdf5",
    shard: ShardOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Export a selection of a vault to numpy files, or its episodes as a Minari dataset.
    A dataset's root exports every shard's selection (npz members and npy files
    `shards/<name>/<leaf>`), or with --shard one shard as a vault."""
    if fmt not in EXPORT_FORMATS:
        fail(f"--format must be one of {', '.join(EXPORT_FORMATS)}, got {fmt!r}")
    if fmt in _export.FORMATS:
        if minari_root is not None or data_format != "hdf5":
            fail("--minari-root and --data-format are for --format minari")
        _export.export(path, local_out(out), fmt, leaf, rows, time, compress, json_out, shard)
        return
    if leaf or rows is not None or time is not None or compress:
        fail(
            "--format minari exports every complete episode: --leaf/--rows/--time/--compress "
            "do not apply"
        )
    from vault import Dataset
    from vault.converters import export_dataset

    source = open_source(path, shard)
    if isinstance(source, Dataset):
        fail(
            f"{path} is a dataset of shards; --format minari exports one vault's episodes: "
            f"pass --shard NAME, or first gather every shard's episodes into one vault with "
            f"`vault subsample {path} --out VAULT` and export that"
        )
    with (
        warnings.catch_warnings(record=True) as said,
        progress_bar("exporting minari", bytes_unit=True) as progress,
    ):
        warnings.simplefilter("always", UserWarning)
        made = export_dataset(
            "minari",
            source.location,
            out,
            root=minari_root,
            data_format=data_format,
            progress=progress,
        )
    notes = [str(w.message) for w in said if issubclass(w.category, UserWarning)]
    for note in notes:  # what the export could not carry: one line each, on stderr
        say_error(f"warning: {note}")
    doc: dict[str, Any] = {
        "path": source.location,
        "format": "minari",
        "dataset_id": out,
        "out": str(made),
    }
    if notes:
        doc["warnings"] = notes
    if shard is not None:
        doc["shard"] = shard
    if json_out:
        emit_json(doc)
    else:
        stdout().print(
            f"wrote Minari dataset {out} at {made} ({data_format})", highlight=False, markup=False
        )
