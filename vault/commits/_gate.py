"""Chunk files checked before TensorStore reads them: what makes a vault made by someone else
safe to read on a file system (``docs/safety.md``).

TensorStore's file store follows symbolic links, opens FIFOs (and waits for a writer for ever)
and reads a file whole; its blosc decoder allocates whatever size a frame declares (up to
2 GiB, from a file of a few kilobytes). So before a read reaches a chunk, the location
(:meth:`~vault.storage._location.Location.check_files`) checks that its file is a regular file
inside the vault, no larger than any encoding of a chunk can be, and, for a blosc leaf, that
its frame declares the chunk's size; a chunk absent inside the committed range of a vault
whose writer stores every chunk is reported here too, before anything is allocated for it.
Each chunk is checked once per snapshot (the checks of later snapshots of the same vault are
shared: a complete chunk never changes). Stores of plain objects (S3, memory) have nothing to
check: the S3 relay decodes chunks itself, within the chunk's size.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from vault._errors import VaultCorruptError
from vault.format._episodes import INDEX_CHUNK
from vault.format._limits import indices, max_encoded_bytes
from vault.format._records import BOUNDS, RETURNS, ZARR_JSON, leaf_key

BATCH = 256  # chunk files checked together (a claimed length is never enumerated whole)


def gate_arrays(snap_location: Any, keys: Sequence[str]) -> None:
    """Check the ``zarr.json`` of arrays ``keys`` before TensorStore opens them."""
    from vault.format._limits import MAX_RECORD_BYTES

    if snap_location.gates_files:
        snap_location.check_files([f"{key}/{ZARR_JSON}" for key in keys], MAX_RECORD_BYTES)


def gate(snap: Any, key: str, rows: Sequence[int] | None, lo: int, hi: int) -> None:
    """Check the chunk files of array ``key`` that hold ``[rows, lo:hi]`` (``rows``: None
    for every row; the episode index's arrays have no rows and ``[lo, hi)`` are episodes)."""
    location = snap.location
    if not location.gates_files or hi <= lo:
        return
    grid = snap.grids[key]
    max_bytes, blosc = _limits(snap, key)
    seen: set[str] = snap.cache.setdefault(("gated", key), set())
    keys = _keys(snap, key, rows, lo // grid.step, -(-hi // grid.step))
    todo = (k for k in keys if k not in seen)
    strict = snap.manifest.fill_chunks_stored
    while batch := list(itertools.islice(todo, BATCH)):
        absent = location.check_files(batch, max_bytes, blosc)
        if absent and strict:
            raise VaultCorruptError(
                f"{snap.where}: array {key}: chunk {absent[0]} is missing inside the "
                f"committed range ({len(absent)} of the {len(batch)} chunks checked with it "
                "are). Its data cannot be trusted; restore the vault from a copy."
            )
        seen.update(k for k in batch if k not in absent)


def _limits(snap: Any, key: str) -> tuple[int, int | None]:
    """The largest file a chunk of array ``key`` can be, and the decoded size its blosc frames
    declare (None: not blosc)."""
    cached = snap.cache.get(("gate limits", key))
    if cached is None:
        if key in (BOUNDS, RETURNS):
            decoded = INDEX_CHUNK * (4 if key == BOUNDS else 1) * 8
            cached = (max_encoded_bytes(decoded), None)
        else:
            leaf = snap.manifest.leaf(key.split("/", 1)[1])
            decoded = math.prod(leaf.chunk) * np.dtype(leaf.dtype).itemsize
            blosc = any(codec.get("name") == "blosc" for codec in leaf.codecs)
            cached = (max_encoded_bytes(decoded), decoded if blosc else None)
        snap.cache[("gate limits", key)] = cached
    return cached


def _keys(snap: Any, key: str, rows: Sequence[int] | None, k0: int, k1: int) -> Iterator[str]:
    """The chunk keys of time (episode) chunks ``[k0, k1)`` of the row blocks holding
    ``rows``, in time order: lazily, so a lying length costs only what is checked."""
    grid = snap.grids[key]
    if grid.row_block is None:
        suffix = "/0" * len(grid.items)
        return (f"{key}/c/{k}{suffix}" for k in range(k0, k1))
    leaf = snap.manifest.leaf(key[len(leaf_key("")) :])
    counts = [-(-n // c) for n, c in zip(leaf.shape, leaf.chunk[2:], strict=True)]
    blocks = grid.blocks_of(rows)
    return (
        f"{key}/c/{b}/{k}" + "".join(f"/{i}" for i in at)
        for k in range(k0, k1)
        for b in blocks
        for at in indices(counts)
    )
