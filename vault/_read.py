"""Reads over a :class:`~vault._snapshot.Snapshot`: time ranges, row selection, fetching into
aligned numpy arrays, decode-error mapping, and results as numpy, buffer states or episodes.

Every function takes the snapshot it reads, so a read never looks past that snapshot's commit.
"""

from __future__ import annotations

import collections
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from vault import _structure
from vault._episodes import EpisodeTable, open_table
from vault._errors import VaultCorruptError, VaultReadError
from vault._format import EXPERIENCE
from vault._snapshot import Snapshot

READ_BLOCK_BYTES = 4 << 20  # raw bytes of one read of one leaf
READ_INFLIGHT_MIN = 8 << 20  # raw bytes of the reads in flight at once: an eighth of the
READ_INFLIGHT_MAX = 64 << 20  # read, within these bounds

Rows = Sequence[int] | slice | None


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype, zero: bool = False) -> np.ndarray:
    """A 64-byte-aligned numpy array: ``jax.device_put`` adopts such a buffer on CPU without a
    copy, so a read handed to JAX costs no second copy of the data."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    raw = (np.zeros if zero else np.empty)(nbytes + 64, np.uint8)
    offset = (-raw.ctypes.data) % 64
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


def time_range(
    snap: Snapshot,
    start: int | None = None,
    stop: int | None = None,
    last: int | None = None,
    percentiles: tuple[float, float] | None = None,
) -> tuple[int, int]:
    """The committed time range ``[lo, hi)`` that exactly one way of choosing names."""
    length = snap.length
    chosen = sum(x is not None for x in (last, percentiles)) + (
        start is not None or stop is not None
    )
    if chosen > 1:
        raise VaultReadError("give at most one of start/stop, last and percentiles")
    if last is not None:
        if not isinstance(last, (int, np.integer)) or last < 0:
            raise VaultReadError(f"last must be a non-negative int, got {last!r}")
        if last > length:
            raise VaultReadError(
                f"{snap.where}: asked for the last {last} timesteps but only {length} are committed"
            )
        return length - int(last), length
    if percentiles is not None:
        try:
            low, high = (float(p) for p in percentiles)
        except (TypeError, ValueError):
            raise VaultReadError(
                f"percentiles must be a pair (a, b), got {percentiles!r}"
            ) from None
        if not 0 <= low <= high <= 100:
            raise VaultReadError(
                f"percentiles must satisfy 0 <= a <= b <= 100, got ({low}, {high})"
            )
        return math.floor(low / 100 * length), math.floor(high / 100 * length)
    lo = 0 if start is None else int(start)
    hi = length if stop is None else int(stop)
    if not 0 <= lo <= hi <= length:
        raise VaultReadError(
            f"{snap.where}: time range [{lo}, {hi}) is outside the committed [0, {length})"
        )
    return lo, hi


def row_selection(snap: Snapshot, rows: Rows) -> Any:
    """``rows`` as a TensorStore index along the row axis (validated)."""
    if rows is None:
        return slice(None)
    if isinstance(rows, slice):
        return rows
    picked = [int(r) for r in rows]
    bad = [r for r in picked if not 0 <= r < snap.rows]
    if bad:
        raise VaultReadError(f"{snap.where}: rows {bad} out of range [0, {snap.rows})")
    return picked


def leaf_selection(snap: Snapshot, leaves: Sequence[str] | None) -> list[str]:
    names = snap.names
    wanted = names if leaves is None else [str(n) for n in leaves]
    unknown = [n for n in wanted if n not in names]
    if unknown:
        raise VaultReadError(f"{snap.where}: unknown leaves {unknown}; the vault has {names}")
    return wanted


def views(
    snap: Snapshot, rows: Rows, lo: int, hi: int, leaves: Sequence[str] | None
) -> tuple[list[str], list[Any]]:
    """Selected leaf names and lazy TensorStore views of ``[rows, lo:hi]`` (origin 0)."""
    row_sel = row_selection(snap, rows)
    wanted = leaf_selection(snap, leaves)
    return wanted, [snap.array(n)[row_sel, lo:hi].translate_to[0] for n in wanted]


def result(snap: Snapshot, future: Any, name: str, group: str = EXPERIENCE) -> Any:
    """A read's value; a chunk that fails its checksum or decoding is VaultCorruptError."""
    try:
        return future.result()
    except ValueError as err:
        text = str(err)
        if not text.startswith(("DATA_LOSS", "FAILED_PRECONDITION")):
            raise
        found = re.search(r"/c/([0-9/]+)\"", text)
        chunk = f"chunk {found.group(1).replace('/', '.')}" if found else "a chunk"
        raise VaultCorruptError(
            f"{snap.where}: array {group}/{name}, {chunk} is corrupt ({text}). "
            "Its data cannot be trusted; restore the vault from a copy."
        ) from None


def fetch(snap: Snapshot, items: list[tuple[Any, str, int, int]]) -> list[np.ndarray]:
    """For each ``(view, name, capacity, offset)`` (``offset``: the array's time index of the
    view's time 0): the view as an aligned numpy array ``[rows, capacity, ...]`` (data first,
    then the fill value).

    TensorStore decodes chunks straight into the arrays (no intermediate copy). The reads go
    out in pieces of whole time-chunks (about ``READ_BLOCK_BYTES``, cut on the chunk grid so
    that no chunk is decoded twice), across leaves, with at least two pieces and at most an
    eighth of the read (8 to 64 MiB) in flight: decoding and disk reads stay parallel while
    the encoded bytes in flight at once stay a small share of the data.
    """
    import tensorstore as ts

    outs: list[np.ndarray] = []
    pieces: list[tuple[np.ndarray, Any, str, int]] = []
    for view, name, capacity, offset in items:
        length = int(view.shape[1])
        shape = (int(view.shape[0]), capacity, *(int(d) for d in view.shape[2:]))
        arr = aligned_empty(shape, np.dtype(view.dtype.numpy_dtype), zero=capacity > length)
        outs.append(arr)
        step_bytes = max(1, arr.nbytes // max(capacity, 1))
        chunk_t = snap.manifest.leaf(name).chunk_time
        block = max(1, READ_BLOCK_BYTES // step_bytes // chunk_t) * chunk_t
        t0 = 0
        while t0 < length:  # piece ends on the chunk grid (absolute time offset + t)
            t1 = min(length, (offset + t0) // block * block + block - offset)
            pieces.append((arr[:, t0:t1], view[:, t0:t1], name, (t1 - t0) * step_bytes))
            t0 = t1
    budget = min(READ_INFLIGHT_MAX, max(READ_INFLIGHT_MIN, sum(p[3] for p in pieces) // 8))
    inflight: collections.deque[tuple[Any, str, int]] = collections.deque()
    in_flight_bytes = 0
    for out, source, name, nbytes in pieces:
        while len(inflight) >= 2 and in_flight_bytes + nbytes > budget:
            future, done_name, done_bytes = inflight.popleft()
            result(snap, future, done_name)
            in_flight_bytes -= done_bytes
        inflight.append((ts.array(out).write(source), name, nbytes))
        in_flight_bytes += nbytes
    for future, name, _ in inflight:
        result(snap, future, name)
    return outs


def read_numpy(snap: Snapshot, rows: Rows, lo: int, hi: int, leaves: Sequence[str] | None) -> Any:
    """``[rows, lo:hi]`` as numpy: the vault's structure, or ``{path: array}`` for ``leaves``."""
    wanted, selected = views(snap, rows, lo, hi, leaves)
    out = fetch(snap, [(v, n, int(v.shape[1]), lo) for v, n in zip(selected, wanted, strict=True)])
    if leaves is not None:
        return dict(zip(wanted, out, strict=True))
    return _structure.build(snap.manifest.structure, out)


def read_state(
    snap: Snapshot,
    rows: Rows,
    lo: int,
    hi: int,
    leaves: Sequence[str] | None,
    capacity: int | None,
) -> Any:
    """``[rows, lo:hi]`` as a trajectory-buffer state of ``capacity`` timesteps (default: the
    read's length); a smaller capacity keeps the most recent timesteps."""
    import jax
    import jax.numpy as jnp

    from buffers import TrajectoryBufferState

    wanted, selected = views(snap, rows, lo, hi, leaves)
    length = hi - lo
    cap = length if capacity is None else int(capacity)
    if cap < 1:
        raise VaultReadError(f"capacity must be >= 1 (and the read non-empty), got {cap}")
    keep = min(cap, length)
    fetched = fetch(
        snap,
        [
            (v[:, length - keep :].translate_to[0], n, cap, lo + length - keep)
            for v, n in zip(selected, wanted, strict=True)
        ],
    )
    out = [jax.device_put(arr) for arr in fetched]
    fetched.clear()
    if leaves is not None:
        experience: Any = dict(zip(wanted, out, strict=True))
    else:
        experience = _structure.build(snap.manifest.structure, out)
    full = cap <= length
    index = 0 if full else length
    # The write counter is given (numpy, no JAX computation): a state built outside jit
    # would otherwise derive it with several small XLA compilations in a fresh process.
    counter = np.array([0, cap if full else length], np.uint32)  # (high, low) words
    return TrajectoryBufferState(
        experience=experience,
        current_index=jnp.asarray(index, jnp.int32),
        is_full=jnp.asarray(full),
        write_counter=jnp.asarray(counter),
    )


def episode_table(snap: Snapshot, include_open: bool = False) -> EpisodeTable:
    """The committed episode index (complete episodes; the open ones with ``include_open``)."""
    cfg = snap.manifest.episodes
    if cfg is None:
        raise VaultReadError(
            f"{snap.where} has no episode index: create the vault with done_leaf=... (and "
            "optionally truncated_leaf=, reward_leaf=) to keep one"
        )
    count = snap.episode_count
    has_reward = cfg.reward is not None
    if count:
        bounds = result(snap, snap.index[0][:count].read(), "bounds", "episodes")
        returns = result(snap, snap.index[1][:count].read(), "returns", "episodes")
        table = EpisodeTable.from_bounds(bounds, returns, has_reward)
    else:
        table = EpisodeTable.empty()
    if include_open and snap.commit.episodes is not None:
        opened = open_table(snap.commit.episodes.open, snap.length, has_reward)
        table = EpisodeTable.concat([table, opened])
    return table
