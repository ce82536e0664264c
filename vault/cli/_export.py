"""``vault export``: a selection of a vault as ``.npz`` or as a folder of ``.npy`` files.

Leaves are copied a block of time-chunks at a time into ``.npy`` files on disk (memory
stays bounded); ``npz`` then zips those files. The result is built under a hidden temporary
name next to the destination and renamed at the end: it is complete or absent.

* ``npz``: one array per leaf path (``obs``, ``info/r``) plus ``__manifest__``, a 0-d string
  array with the vault's manifest and the selection (rows, time, the seams inside it) as
  JSON (``np.load`` without pickle).
* ``npy``: a folder with ``<leaf path>.npy`` (memory-mappable with ``np.load(mmap_mode="r")``)
  and ``manifest.json``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vault.cli._common import (
    JsonOpt,
    PathArg,
    ProgressFn,
    count,
    emit_json,
    fail,
    in_shard,
    leaf_names,
    open_source,
    parse_rows,
    parse_span,
    progress_bar,
    shards_text,
)
from vault.cli._common import stdout as console

if TYPE_CHECKING:
    from vault import Vault

FORMATS = ("npz", "npy")
MANIFEST_NAME = "__manifest__"
# the selection options, shared with `vault export --format minari` (cli/_convert.py)
LeafOpt = Annotated[
    list[str] | None,
    typer.Option("--leaf", "-l", help="Leaf path (repeatable); default: every leaf."),
]
RowsOpt = Annotated[
    str | None, typer.Option("--rows", "-r", help="Rows: '0,2' or '0:4'; default: all.")
]
TimeOpt = Annotated[
    str | None, typer.Option("--time", "-t", help="Time range 'a:b' (negative: from the end).")
]
CompressOpt = Annotated[bool, typer.Option(help="Deflate the npz members.")]
BLOCK_BYTES = 64 << 20


def export(
    path: PathArg,
    out: Annotated[Path, typer.Option("--out", "-o", help="File (npz) or folder (npy) to write.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="npz or npy.")] = "npz",
    leaf: LeafOpt = None,
    rows: RowsOpt = None,
    time: TimeOpt = None,
    compress: CompressOpt = False,
    json_out: JsonOpt = False,
    shard: str | None = None,
) -> None:
    """Export a selection of a vault to numpy files (one array per leaf, rows x time x ...);
    of a dataset, every shard's selection (``shards/<name>/<leaf>``)."""
    from vault import Dataset

    if fmt not in FORMATS:
        fail(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if out.exists():
        fail(f"{out} already exists; choose a new destination (nothing is ever overwritten)")
    source = open_source(path, shard)
    names = leaf_names(source.location, source.leaf_names, leaf)
    parts: list[tuple[str, Vault, list[int] | None, int, int]] = []
    for name, member in source.vaults() if isinstance(source, Dataset) else [("", source)]:
        with in_shard(name) if name else contextlib.nullcontext():
            picked = parse_rows(rows, member.rows)
            lo, hi = parse_span(time, member.committed_length, "--time")
        parts.append((name, member, picked, lo, hi))
    if fmt == "npy":
        _check_files(names)
    selected = [
        {
            "rows": list(range(v.rows)) if p is None else p,
            "time": [lo, hi],
            # where data were lost or rows restarted inside the selection (Vault.gaps)
            "seams": [s for s in v.gaps if lo <= s["at"] < hi],
        }
        for _, v, p, lo, hi in parts
    ]
    header: dict[str, Any] = {"source": source.location, "leaves": names}
    if isinstance(source, Dataset):
        header["kind"] = "dataset"
        header["shards"] = [
            {"shard": n, **sel} for (n, *_), sel in zip(parts, selected, strict=True)
        ]
    else:
        header.update(selected[0])
    header["manifest"] = source.manifest.to_json()
    out.parent.mkdir(parents=True, exist_ok=True)
    with _staged(out) as tmp, progress_bar("exporting", bytes_unit=True) as progress:
        folder = tmp if fmt == "npy" else tmp.with_name(tmp.name + ".d")
        try:
            files = _write_parts(parts, names, folder, progress, by_index=fmt == "npz")
            if fmt == "npy":
                (folder / "manifest.json").write_text(json.dumps(header, indent=1))
            else:
                _zip(files, header, tmp, compress)
        finally:
            if fmt == "npz":
                shutil.rmtree(folder, ignore_errors=True)
    doc: dict[str, Any] = {"path": source.location, "out": str(out), "format": fmt}
    doc["leaf_names"] = names
    doc["bytes"] = sum(f.stat().st_size for f in _files(out))
    if isinstance(source, Dataset):
        doc["kind"] = "dataset"
        doc["shards"] = [
            {"shard": n, "rows_selected": p, "time": [lo, hi]} for n, _, p, lo, hi in parts
        ]
    elif shard is not None:
        doc["shard"] = shard
    if json_out:
        emit_json(doc)
        return
    shards = f", {shards_text(len(parts))}" if isinstance(source, Dataset) else ""
    leaves, size = count(len(names), "leaf", "leaves"), count(doc["bytes"], "byte")
    console().print(f"wrote {out} ({fmt}, {leaves}{shards}, {size})", markup=False)


def _write_parts(
    parts: list[tuple[str, Vault, list[int] | None, int, int]],
    names: list[str],
    folder: Path,
    progress: ProgressFn,
    by_index: bool = False,
) -> dict[str, Path]:
    """Each part's leaves as ``.npy`` files: a vault's under ``folder``, a shard's under
    ``folder/shards/<name>``; returns member name -> file. One progress over all parts.
    ``by_index``: files named by leaf number (staging for npz members, whose names may
    collide as files: ``a`` and ``a.npy/b``)."""
    sizes = [
        (hi - lo)
        * (v.rows if p is None else len(p))
        * sum(v.manifest.leaf(n).step_bytes for n in names)
        for _, v, p, lo, hi in parts
    ]
    total, files = sum(sizes), {}
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    for k, ((name, vault, picked, lo, hi), before) in enumerate(zip(parts, starts, strict=True)):

        def step(done: int, _total: int, before: int = before) -> None:
            progress(before + done, total)

        prefix = f"shards/{name}/" if name else ""
        where = folder / (str(k) if by_index else prefix)
        written = _write_npy(vault, names, picked, lo, hi, where, step, by_index)
        files.update({f"{prefix}{leaf}": target for leaf, target in written.items()})
    return files


def _files(out: Path) -> list[Path]:
    return [out] if out.is_file() else [p for p in out.rglob("*") if p.is_file()]


@contextlib.contextmanager
def _staged(out: Path) -> Iterator[Path]:
    """A hidden temporary path next to ``out``, renamed to ``out`` on success and removed
    on any failure or interruption."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, out)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def _write_npy(
    vault: Vault,
    names: list[str],
    rows: list[int] | None,
    lo: int,
    hi: int,
    folder: Path,
    progress: ProgressFn,
    by_index: bool = False,
) -> dict[str, Path]:
    import numpy as np

    from vault import time_blocks

    meta = {n: vault.manifest.leaf(n) for n in names}
    n_rows = vault.rows if rows is None else len(rows)
    step = {n: n_rows * meta[n].step_bytes for n in names}
    total = sum(step[n] for n in names) * (hi - lo)
    done = 0
    progress(done, total)
    files = {}
    for i, name in enumerate(names):
        target = folder / (f"{i}.npy" if by_index else f"{name}.npy")
        target.parent.mkdir(parents=True, exist_ok=True)
        shape = (n_rows, hi - lo, *meta[name].shape)
        dtype = np.dtype(meta[name].dtype)
        files[name] = target
        if math.prod(shape) == 0:
            np.save(target, np.empty(shape, dtype))
            continue
        array = np.lib.format.open_memmap(target, mode="w+", dtype=dtype, shape=shape)
        edges = time_blocks(hi - lo, meta[name].chunk_time, step[name], BLOCK_BYTES)
        for t0, t1 in itertools.pairwise(edges):
            block = vault.read_numpy(rows=rows, start=lo + t0, stop=lo + t1, leaves=[name])
            array[:, t0:t1] = block[name]
            done += step[name] * (t1 - t0)
            progress(done, total)
        array.flush()
        del array
    return files


def _check_files(names: list[str]) -> None:
    """Refuse leaves whose ``.npy`` files would collide in a folder: ``a`` and ``a.npy/b``
    (``a.npy`` a file and a folder), before anything is written."""
    files = {f"{n}.npy" for n in names}
    clash = sorted(n for n in names if any(p in files for p in _parents(n)))
    if clash:
        fail(
            "--format npy writes one file per leaf path, and these leaves would need a folder "
            f"where another leaf's file is: {clash}; export them as npz (its members hold "
            "any leaf path)"
        )


def _parents(name: str) -> list[str]:
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _zip(files: dict[str, Path], header: dict[str, Any], target: Path, compress: bool) -> None:
    import io

    import numpy as np

    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(target, "w", compression=method, allowZip64=True) as zf:
        for name, path in files.items():
            zf.write(path, arcname=f"{name}.npy")
        buf = io.BytesIO()
        np.save(buf, np.array(json.dumps(header)), allow_pickle=False)
        zf.writestr(f"{MANIFEST_NAME}.npy", buf.getvalue())
