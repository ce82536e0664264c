"""Streaming per-leaf statistics of a vault: bounded memory, chunk-aligned blocks.

Each leaf is read in blocks of whole time-chunks (all rows) of at most ``block_bytes``, and
each block is reduced in slices of ``SLICE_ELEMENTS`` values converted to float64, so memory
stays at about one block plus a few MiB whatever the vault's size. Mean and standard
deviation are combined across slices with Chan et al.'s pairwise update (numerically stable).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from vault._args import callable_arg, int_arg, kind
from vault._errors import VaultArgumentError, VaultReadError
from vault.facade._vault import Vault
from vault.format._episodes import EpisodeTable
from vault.read import _read

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` in bytes of raw (decoded) data."""

BLOCK_BYTES = 64 << 20
SLICE_ELEMENTS = 1 << 20


@dataclasses.dataclass(frozen=True)
class LeafStats:
    """Statistics of one leaf over every committed timestep of every row.

    Booleans count as 0/1.

    Attributes:
        name: the leaf's path.
        dtype: its dtype's name.
        shape: its item shape (per row and timestep).
        count: values counted (timesteps x rows x item elements).
        finite: finite values among them.
        nan: NaN values.
        inf: infinite values (both signs).
        min: the least finite value (None when there is none).
        max: the greatest finite value (None when there is none).
        mean: the mean of the finite values (None when there is none).
        std: their standard deviation (None when there is none).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    count: int
    finite: int
    nan: int
    inf: int
    min: float | int | None
    max: float | int | None
    mean: float | None
    std: float | None

    def to_dict(self) -> dict[str, Any]:
        """The statistics as a JSON-ready dict (``shape`` a list), as ``vault stats --json``.

        Returns:
            Field name -> value.
        """
        out = dataclasses.asdict(self)
        out["shape"] = list(self.shape)
        return out


class _Accumulator:
    """Running count / min / max / mean / M2 / NaN / Inf of the values fed to it."""

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype
        self.floating = np.issubdtype(dtype, np.floating)
        self.count = self.finite = self.nan = self.inf = 0
        self.low: Any = None
        self.high: Any = None
        self.mean = 0.0
        self.m2 = 0.0

    def update(self, block: np.ndarray) -> None:
        flat = block.reshape(-1)
        self.count += flat.size
        for i in range(0, flat.size, SLICE_ELEMENTS):
            self._update_slice(flat[i : i + SLICE_ELEMENTS])

    def _update_slice(self, part: np.ndarray) -> None:
        if self.floating:
            nan = np.isnan(part)
            inf = np.isinf(part)
            self.nan += int(nan.sum())
            self.inf += int(inf.sum())
            if self.nan or self.inf:
                part = part[~(nan | inf)]
        if part.size == 0:
            return
        if part.dtype == np.bool_:
            part = part.view(np.uint8)
        low, high = part.min(), part.max()
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)
        values = part.astype(np.float64)
        n_b = values.size
        mean_b = float(values.mean())
        m2_b = float(np.square(values - mean_b).sum())
        n_a = self.finite
        total = n_a + n_b
        delta = mean_b - self.mean
        self.mean += delta * n_b / total
        self.m2 += m2_b + delta * delta * n_a * n_b / total
        self.finite = total

    def result(self, name: str, shape: tuple[int, ...]) -> LeafStats:
        def plain(x: Any) -> float | int | None:
            return None if x is None else x.item()

        has = self.finite > 0
        return LeafStats(
            name=name,
            dtype=self.dtype.name,
            shape=shape,
            count=self.count,
            finite=self.finite,
            nan=self.nan,
            inf=self.inf,
            min=plain(self.low),
            max=plain(self.high),
            mean=self.mean if has else None,
            std=math.sqrt(self.m2 / self.finite) if has else None,
        )


MAX_BLOCKS = 1 << 24  # the block edges time_blocks lists (128 MiB of Python ints)


def time_blocks(length: int, chunk_time: int, step_bytes: int, block_bytes: int) -> list[int]:
    """Block edges along time for reading a leaf in bounded memory.

    Args:
        length: timesteps to cover.
        chunk_time: timesteps per stored chunk.
        step_bytes: bytes of one timestep of every row.
        block_bytes: the memory one block may take.

    Returns:
        The edges ``[0, b, 2b, ..., length]``, where ``b`` is a whole number of time chunks
        (at least one) whose data fits in ``block_bytes``.

    Raises:
        VaultArgumentError: an argument that is not an integer, or out of range.

    Examples:
        >>> import vault
        >>> vault.time_blocks(10, chunk_time=4, step_bytes=100, block_bytes=900)
        [0, 8, 10]
    """
    length = int_arg("length", length, 0)
    chunk_time = int_arg("chunk_time", chunk_time, 1)
    step_bytes = int_arg("step_bytes", step_bytes, 0)
    block_bytes = int_arg("block_bytes", block_bytes, 1)
    per_block = _per_block(chunk_time, step_bytes, block_bytes)
    if length // per_block > MAX_BLOCKS:
        raise VaultArgumentError(
            f"length={length} makes {length // per_block} blocks of {per_block} timesteps, "
            f"more than {MAX_BLOCKS}: give a larger block_bytes (or a smaller length)"
        )
    edges = [*range(0, length, per_block), length]
    return edges if length else [0]


def _per_block(chunk_time: int, step_bytes: int, block_bytes: int) -> int:
    return max(1, block_bytes // max(1, step_bytes) // chunk_time) * chunk_time


def leaf_stats(
    vault: Any,
    *,
    leaves: Sequence[str] | None = None,
    block_bytes: int = BLOCK_BYTES,
    progress: Progress | None = None,
) -> list[LeafStats]:
    """Statistics of every leaf over the committed timesteps, streamed chunk by chunk.

    Args:
        vault: an open :class:`Vault` (its current snapshot is read) or a
            :class:`~vault.Dataset` (every shard's).
        leaves: leaf paths (default: every leaf).
        block_bytes: the memory a block of data may take (raised to one time-chunk of all
            rows when a chunk is larger).
        progress: called as ``progress(bytes read, total)``.

    Returns:
        One :class:`LeafStats` per leaf, in leaf order.

    Raises:
        VaultArgumentError: ``vault`` is not an open Vault or Dataset.
        VaultReadError: leaves that the vault does not have.

    Examples:
        >>> import numpy as np
        >>> from vault import Vault, leaf_stats
        >>> with Vault.create("runs/doc", {"x": np.float32(0)}, rows=2) as v:
        ...     v.append({"x": np.arange(8, dtype=np.float32).reshape(2, 4)})
        4
        >>> stats = leaf_stats(Vault.open("runs/doc"))[0]
        >>> stats.count, stats.min, stats.max, stats.mean
        (8, 0.0, 7.0, 3.5)
    """
    if isinstance(vault, Vault):
        snaps = [vault.snapshot]
    elif isinstance(getattr(vault, "snapshots", None), list) and hasattr(vault, "template"):
        snaps = list(vault.snapshots)  # a Dataset
    else:
        raise VaultArgumentError(
            f"leaf_stats takes an open Vault or Dataset, got {kind(vault)}: pass Vault.open(path)"
        )
    block_bytes = int_arg("block_bytes", block_bytes, 1, VaultReadError)
    callable_arg("progress", progress)
    manifest = vault.snapshot.manifest if isinstance(vault, Vault) else vault.template
    meta = {leaf.name: leaf for leaf in manifest.leaves}
    wanted = _read.leaf_selection(snaps[0], leaves) if snaps else manifest.leaf_names
    total = sum(s.rows * meta[n].step_bytes * s.length for s in snaps for n in wanted)
    done = 0
    if progress is not None:
        progress(done, total)
    out = []
    for name in wanted:
        leaf = meta[name]
        acc = _Accumulator(np.dtype(leaf.dtype))
        for snap in snaps:
            step = snap.rows * leaf.step_bytes
            per_block = _per_block(leaf.chunk_time, step, block_bytes)
            for t0 in range(0, snap.length, per_block):  # never listed: a length may be forged
                t1 = min(t0 + per_block, snap.length)
                block = _read.read_numpy(snap, None, t0, t1, [name])[name]
                acc.update(block)
                done += step * (t1 - t0)
                if progress is not None:
                    progress(done, total)
        out.append(acc.result(name, leaf.shape))
    return out


def episode_stats(table: Any) -> dict[str, Any]:
    """Return and length statistics of the complete episodes of an :class:`EpisodeTable`.

    Args:
        table: an episode table, e.g. ``vault.episodes(include_open=True)``.

    Returns:
        ``{"episodes", "complete", "open", "truncated"}`` counts, and ``"return"`` and
        ``"length"``: ``{"min", "max", "mean", "std"}`` over the complete episodes (None when
        there are none; non-finite returns left out).

    Raises:
        VaultArgumentError: ``table`` is not an :class:`EpisodeTable`.
    """
    if not isinstance(table, EpisodeTable):
        raise VaultArgumentError(
            f"episode_stats takes an EpisodeTable (from vault.episodes()), got {kind(table)}"
        )
    complete = np.asarray(table.complete, bool)
    returns = np.asarray(table.returns, np.float64)[complete]
    lengths = np.asarray(table.length, np.int64)[complete]
    out: dict[str, Any] = {
        "episodes": len(complete),
        "complete": int(complete.sum()),
        "open": int((~complete).sum()),
        "truncated": int(np.asarray(table.truncated, bool)[complete].sum()),
    }
    for key, values in (("return", returns), ("length", lengths)):
        finite = values[np.isfinite(values)] if values.dtype.kind == "f" else values
        if finite.size:
            out[key] = {
                "min": finite.min().item(),
                "max": finite.max().item(),
                "mean": float(finite.mean()),
                "std": float(finite.std()),
            }
        else:
            out[key] = None
    return out
