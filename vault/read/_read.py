"""Reads over a :class:`~vault.commits._snapshot.Snapshot`: time ranges, row selection, fetching
into aligned numpy arrays, decode-error mapping, and results as numpy, buffer states or episodes.

Every function takes the snapshot it reads, so a read never looks past that snapshot's commit.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import math
import sys
import threading
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from vault._args import check_memory, index_arg, kind, once
from vault._errors import VaultArgumentError, VaultCorruptError, VaultReadError
from vault.commits._gate import gate
from vault.commits._snapshot import Snapshot, result
from vault.format import _structure, _tags
from vault.format._episodes import EpisodeTable, open_table
from vault.format._records import BOUNDS, EXPERIENCE, RETURNS, SHARDS, leaf_key

READ_BLOCK_BYTES = 4 << 20  # raw bytes of one read of one leaf
READ_INFLIGHT_MIN = 8 << 20  # raw bytes of the reads in flight at once: an eighth of the
READ_INFLIGHT_MAX = 64 << 20  # read, within these bounds
# where every request is a round trip (S3): larger pieces and the most in flight (measured on
# the vector benchmark vault: 8 MiB pieces and 64 MiB in flight read it in 130-137 ms against
# 145-147 ms with the local sizes; raw TensorStore 110-116 ms)
REMOTE_READ_BLOCK_BYTES = 8 << 20

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
    *,
    last_name: str = "last",
) -> tuple[int, int]:
    """The committed time range ``[lo, hi)`` that exactly one way of choosing names.

    ``start``/``stop``/``last`` are ints (numpy integers too; never a bool or a float, which
    would be truncated); ``last_name`` is what the caller calls ``last`` (``timesteps``)."""
    length = snap.length
    chosen = sum(x is not None for x in (last, percentiles)) + (
        start is not None or stop is not None
    )
    if chosen > 1:
        raise VaultReadError("give at most one of start/stop, last and percentiles")
    if last is not None:
        count = index_arg(last_name, last)
        if count < 0:
            raise VaultReadError(f"{last_name} must be a non-negative int, got {last!r}")
        if count > length:
            raise VaultReadError(
                f"{snap.where}: asked for the last {count} timesteps but only {length} are "
                "committed"
            )
        return length - count, length
    if percentiles is not None:
        if isinstance(percentiles, (str, bytes)):
            raise VaultReadError(f"percentiles must be a pair (a, b), got {percentiles!r}")
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
        # exactly (a float's decimal value: 0.29 * 100 is 28.999... in binary)
        cut_low, cut_high = (math.floor(Fraction(repr(p)) * length / 100) for p in (low, high))
        return cut_low, cut_high
    lo = 0 if start is None else index_arg("start", start)
    hi = length if stop is None else index_arg("stop", stop)
    if lo > hi:
        raise VaultReadError(f"start ({lo}) must be <= stop ({hi})")
    if not 0 <= lo <= hi <= length:
        raise VaultReadError(
            f"{snap.where}: time range [{lo}, {hi}) is outside the committed [0, {length})"
        )
    return lo, hi


def row_selection(snap: Snapshot, rows: Rows) -> Any:
    """``rows`` as a TensorStore index along the row axis (validated): None (every row), a
    slice of ints inside ``[0, rows]`` with a non-zero step, or a 1-D sequence of row indices
    in ``[0, rows)`` (ints or an integer array; no bools, floats or strings). O(len(rows))."""
    if rows is None:
        return slice(None)
    if isinstance(rows, slice):
        return _row_slice(snap, rows)
    scalar = getattr(rows, "ndim", None) == 0  # np.argmax(...) and other 0-d arrays
    if (
        isinstance(rows, (str, bytes, set, frozenset, dict))
        or not hasattr(rows, "__iter__")
        or scalar
    ):
        one = scalar or isinstance(rows, (int, np.integer))
        raise VaultArgumentError(
            f"rows must be a list of row indices, a slice or None, got {kind(rows)}"
            + ("; for one row write rows=[i]" if one else "")
        )
    listed = rows if hasattr(rows, "__len__") else list(rows)  # a generator
    if len(listed) == 0:
        return []
    try:
        picked = np.asarray(listed)
    except (TypeError, ValueError):  # ragged nesting
        picked = np.asarray(listed, dtype=object)
    if picked.dtype == np.bool_:
        raise VaultArgumentError(
            f"rows must be row indices, got booleans {_head(picked)}; for a boolean mask "
            "write rows=np.flatnonzero(mask)"
        )
    if picked.ndim != 1 or picked.dtype.kind not in "iu":
        what = f"a {picked.ndim}-D array" if picked.ndim != 1 else f"{picked.dtype} values"
        raise VaultArgumentError(
            f"rows must be a 1-D sequence of int row indices, got {what} {_head(picked)}"
        )
    bad = picked[(picked < 0) | (picked >= snap.rows)]
    if bad.size:
        raise VaultReadError(f"{snap.where}: rows {_head(bad)} out of range [0, {snap.rows})")
    return picked.tolist()


def _row_slice(snap: Snapshot, rows: slice) -> Any:
    """A slice of rows as a TensorStore index: ints, a non-zero step, bounds inside
    ``[0, rows]`` (TensorStore neither wraps negative bounds nor clamps large ones)."""
    start, stop, step = (
        None if value is None else index_arg(f"rows slice {part}", value)
        for part, value in (("start", rows.start), ("stop", rows.stop), ("step", rows.step))
    )
    if step == 0:
        raise VaultReadError(f"rows {rows!r}: the step must not be 0")
    outside = [
        f"{part} {bound}"
        for part, bound in (("start", start), ("stop", stop))
        if bound is not None and not 0 <= bound <= snap.rows
    ]
    if outside:
        raise VaultReadError(
            f"{snap.where}: rows {rows!r} reaches outside the vault's rows [0, {snap.rows}) "
            f"({', '.join(outside)}); negative or larger bounds are not clamped"
        )
    picked = range(snap.rows)[slice(start, stop, step)]
    if picked.step > 0:
        return slice(picked.start, max(picked.start, picked.stop), picked.step)
    return list(picked)


def _head(values: np.ndarray, count: int = 8) -> str:
    """The first ``count`` values of an array, as a list (``...`` when there are more)."""
    shown = values.ravel()[:count].tolist()
    return str(shown)[:-1] + ", ...]" if values.size > count else str(shown)


def leaf_selection(snap: Snapshot, leaves: Sequence[str] | None) -> list[str]:
    """The leaf paths ``leaves`` names (every leaf for None): a non-empty list of known
    paths, each at most once."""
    return leaves_of(snap.names, snap.where, leaves)


def leaves_of(names: list[str], where: str, leaves: Sequence[str] | None) -> list[str]:
    """:func:`leaf_selection` among leaf paths ``names`` of the vault (or dataset) at
    ``where``."""
    if leaves is None:
        return names
    if isinstance(leaves, (str, bytes)):
        text = leaves.decode(errors="replace") if isinstance(leaves, bytes) else leaves
        what = "bytes" if isinstance(leaves, bytes) else "string"
        raise VaultArgumentError(
            f"leaves must be a list of leaf paths, got the {what} {leaves!r}; write "
            f"leaves=[{text!r}]"
        )
    try:
        wanted = list(leaves)
    except TypeError:
        raise VaultArgumentError(
            f"leaves must be a list of leaf paths or None, got {kind(leaves)}"
        ) from None
    not_str = [n for n in wanted if not isinstance(n, str)]
    if not_str:
        raise VaultArgumentError(f"leaves must be leaf paths (strings), got {not_str!r}")
    if not wanted:
        raise VaultReadError(
            f"{where}: leaves=[] selects no leaf; name at least one of {names}, or pass "
            "None for every leaf"
        )
    known = set(names)
    unknown = [n for n in wanted if n not in known]
    if unknown:
        prefix = f"{EXPERIENCE}/"
        escaped = "/".join(_structure.escape(part) for part in unknown[0].split("/"))
        hint = (
            f" (leaf paths do not start with '{prefix}': write {unknown[0][len(prefix) :]!r})"
            if unknown[0].startswith(prefix) and unknown[0][len(prefix) :] in known
            else f" (a leaf path escapes its keys, as Vault.leaf_names lists them: write "
            f"{escaped!r})"
            if escaped in known
            else ""
        )
        raise VaultReadError(f"{where}: unknown leaves {unknown}; the vault has {names}{hint}")
    if len(set(wanted)) != len(wanted):
        raise VaultReadError(f"{where}: leaves {wanted} name a leaf twice")
    return wanted


def check_read_size(selected: list[Any], steps: int, what: str, fix: str) -> None:
    """Refuse a read whose arrays (``steps`` timesteps of the views ``selected``) would not
    fit in the machine's memory, before allocating them. O(number of leaves)."""
    nbytes = sum(
        int(v.shape[0]) * steps * math.prod(v.shape[2:]) * v.dtype.numpy_dtype.itemsize
        for v in selected
    )
    check_memory(what, nbytes, fix, VaultReadError)


def views(
    snap: Snapshot,
    rows: Rows,
    lo: int,
    hi: int,
    leaves: Sequence[str] | None,
    edge_later: bool = False,
) -> tuple[list[str], list[Any]]:
    """Selected leaf names and lazy TensorStore views of ``[rows, lo:hi]`` (origin 0).

    The chunks they reach are checked to be the ones written at their places
    (``vault/format/_tags.py``); ``edge_later``: the caller checks the places itself once it has
    read them (:func:`check_places`, and :func:`check_edges` from what it decoded)."""
    row_sel = row_selection(snap, rows)
    wanted = leaf_selection(snap, leaves)
    if snap.location.gates_files:
        picked = picked_rows(snap, row_sel)
        for name in wanted:
            gate(snap, leaf_key(name), picked, lo, hi)
    if not edge_later:
        if snap.location.remote:  # complete chunks are checked as read_into fetches them
            check_edges(snap, wanted, [], lo, hi)
        else:
            check_places(snap, wanted, row_sel, lo, hi)
    return wanted, [snap.array(n)[row_sel, lo:hi].translate_to[0] for n in wanted]


def read_into(
    snap: Snapshot, name: str, dest: np.ndarray, view: Any, rows: Rows, lo: int, hi: int
) -> Any:
    """Start reading ``view`` (leaf ``name``'s timesteps ``[lo, hi)`` of ``rows``, from
    :func:`views`) into ``dest``; a future. On a remote location each chunk is fetched once
    and its place checked from the bytes decoded (``vault/storage/_relay.py``)."""
    if not snap.location.remote:
        import tensorstore as ts

        return ts.array(dest).write(view)
    from vault.storage import _relay

    picked = picked_rows(snap, row_selection(snap, rows))
    return _relay.read_into(snap, leaf_key(name), dest, view, picked, lo, hi)


def picked_rows(snap: Snapshot, row_sel: Any) -> Sequence[int] | None:
    """The rows a :func:`row_selection` picks (None: every row)."""
    if isinstance(row_sel, slice):
        return None if row_sel == slice(None) else range(*row_sel.indices(snap.rows))
    return np.asarray(row_sel).ravel().tolist()


def check_places(
    snap: Snapshot, names: Sequence[str], row_sel: Any, lo: int, hi: int, edge: bool = True
) -> None:
    """The chunks holding ``[row_sel, lo:hi]`` of leaves ``names`` are the ones written there
    (each checked once per snapshot); with ``edge``, also the partly filled chunk at the
    committed end when the range reaches it (read separately if not yet checked)."""
    if not _tags.enabled(snap.manifest) or hi <= lo:
        return
    picked = picked_rows(snap, row_sel)
    for name in names:
        key = leaf_key(name)
        _tags.check_chunks(snap, key, snap.length, picked, lo, hi)
    if edge:
        check_edges(snap, names, [], lo, hi)


def _edge_region(snap: Snapshot, name: str, e0: int) -> np.ndarray:
    return np.asarray(result(snap, snap.array(name)[:, e0 : snap.length].read(), name))


def check_edges(
    snap: Snapshot,
    names: Sequence[str],
    outs: Sequence[np.ndarray],
    lo: int,
    hi: int,
    rows: Rows = None,
) -> None:
    """Check the committed end's partly filled chunk of each leaf whose range ``[lo, hi)``
    reaches it: from ``outs`` (what the read decoded, time from ``lo``, of ``rows``) where
    they hold it for every row in order, else by reading it (once per snapshot)."""
    if not _tags.enabled(snap.manifest):
        return
    picked = picked_rows(snap, row_selection(snap, rows)) if outs else None
    if picked is not None and list(picked) != list(range(snap.rows)):
        outs = []  # other rows, or these in another order: not comparable with the edge
    for i, name in enumerate(names):
        key = leaf_key(name)
        e0 = snap.length // snap.grids[key].step * snap.grids[key].step
        if hi <= e0:
            continue
        data = None
        if i < len(outs):
            out = outs[i]
            if out.shape[0] == snap.rows and lo <= e0 and hi >= snap.length:
                data = out[:, e0 - lo : snap.length - lo]
        _tags.check_edge(snap, key, lambda e0, n=name: _edge_region(snap, n, e0), data)


def fetch(
    snap: Snapshot,
    items: list[tuple[Any, str, int, int]],
    read: Callable[[np.ndarray, Any, str, int, int], Any] | None = None,
    block_bytes: int = READ_BLOCK_BYTES,
    inflight_min: int = READ_INFLIGHT_MIN,
    last_issued: Callable[[], None] | None = None,
) -> list[np.ndarray]:
    """For each ``(view, name, capacity, offset)`` (``offset``: the array's time index of the
    view's time 0): the view as an aligned numpy array ``[rows, capacity, ...]`` (data first,
    then the fill value).

    TensorStore decodes chunks straight into the arrays (no intermediate copy). The reads go
    out in pieces of whole time-chunks (about ``READ_BLOCK_BYTES``, cut on the chunk grid so
    that no chunk is decoded twice), across leaves, with at least two pieces and at most an
    eighth of the read (8 to 64 MiB) in flight: decoding and disk reads stay parallel while
    the encoded bytes in flight at once stay a small share of the data.

    ``read(out, view, name, t0, t1)``: starts reading a piece (the array's timesteps
    ``[t0, t1)``) into ``out``; a future (default: TensorStore copies the view).
    ``block_bytes``, ``inflight_min``: the piece size and the least in flight.
    ``last_issued()``: called once every piece has been started, while the last ones are
    decoded (a small read: all of it).
    """
    import tensorstore as ts

    outs: list[np.ndarray] = []
    pieces: list[tuple[np.ndarray, Any, str, int, int, int]] = []
    for view, name, capacity, offset in items:
        length = int(view.shape[1])
        shape = (int(view.shape[0]), capacity, *(int(d) for d in view.shape[2:]))
        arr = aligned_empty(shape, np.dtype(view.dtype.numpy_dtype), zero=capacity > length)
        outs.append(arr)
        step_bytes = max(1, arr.nbytes // max(capacity, 1))
        chunk_t = snap.manifest.leaf(name).chunk_time
        block = max(1, block_bytes // step_bytes // chunk_t) * chunk_t
        t0 = 0
        while t0 < length:  # piece ends on the chunk grid (absolute time offset + t)
            t1 = min(length, (offset + t0) // block * block + block - offset)
            piece = (arr[:, t0:t1], view[:, t0:t1], name, offset + t0, offset + t1)
            pieces.append((*piece, (t1 - t0) * step_bytes))
            t0 = t1
    budget = min(READ_INFLIGHT_MAX, max(inflight_min, sum(p[5] for p in pieces) // 8))
    inflight: collections.deque[tuple[Any, str, int]] = collections.deque()
    in_flight_bytes = 0

    for out, source, name, a0, a1, nbytes in pieces:
        while len(inflight) >= 2 and in_flight_bytes + nbytes > budget:
            future, done_name, done_bytes = inflight.popleft()
            result(snap, future, done_name)
            in_flight_bytes -= done_bytes
        started = ts.array(out).write(source) if read is None else read(out, source, name, a0, a1)
        inflight.append((started, name, nbytes))
        in_flight_bytes += nbytes
    if last_issued is not None:
        last_issued()
    for future, name, _ in inflight:
        result(snap, future, name)
    return outs


def fetch_checked(
    snap: Snapshot, items: list[Any], names: Sequence[str], rows: Rows, lo: int, hi: int
) -> list[np.ndarray]:
    """:func:`fetch`, with the place checks of its complete chunks (nothing is returned
    before they pass). Locally they run after the read: the chunk files are in the page cache
    by then, so comparing their stored checksums costs no disk access (run during a cold read,
    they cost it 10 to 30 %). Where every request is a network round trip
    (``Location.remote``) each chunk is fetched once and checked from the bytes decoded
    (``vault/storage/_relay.py``): a ranged GET per chunk for its checksum would double the
    requests."""
    row_sel = row_selection(snap, rows)
    if snap.location.remote:  # one GET per chunk, its place checked from the bytes decoded
        picked = picked_rows(snap, row_sel)

        from vault.storage import _relay

        def relay(out: np.ndarray, view: Any, name: str, t0: int, t1: int) -> Any:
            return _relay.read_into(snap, leaf_key(name), out, view, picked, t0, t1)

        return fetch(snap, items, relay, REMOTE_READ_BLOCK_BYTES, READ_INFLIGHT_MAX)
    out = fetch(snap, items, last_issued=lambda: check_places(snap, names, row_sel, lo, hi, False))
    return out


def read_numpy(snap: Snapshot, rows: Rows, lo: int, hi: int, leaves: Sequence[str] | None) -> Any:
    """``[rows, lo:hi]`` as numpy: the vault's structure, or ``{path: array}`` for ``leaves``."""
    rows, leaves = once(rows), once(leaves)
    wanted, selected = views(snap, rows, lo, hi, leaves, edge_later=True)
    check_read_size(selected, hi - lo, "this read", "read fewer rows or timesteps at a time")
    items = [(v, n, int(v.shape[1]), lo) for v, n in zip(selected, wanted, strict=True)]
    out = fetch_checked(snap, items, wanted, rows, lo, hi)
    check_edges(snap, wanted, out, lo, hi, rows)
    if leaves is not None:
        return dict(zip(wanted, out, strict=True))
    return _structure.build(snap.manifest.structure, out)


def check_narrowing(where: str, names: Sequence[str], arrays: Sequence[np.ndarray]) -> None:
    """JAX without 64-bit types (its default) stores a 64-bit integer leaf as 32 bits: a value
    beyond 32 bits would wrap silently. Refuse such a read (:class:`VaultReadError` naming the
    leaf); values that fit are read as 32-bit integers, as JAX takes any int64 array."""
    for name, arr in zip(names, arrays, strict=True):
        if arr.dtype.kind not in "iu" or arr.dtype.itemsize != 8 or arr.size == 0:
            continue
        narrow = np.iinfo(np.int32 if arr.dtype.kind == "i" else np.uint32)
        low, high = int(arr.min()), int(arr.max())
        if low < narrow.min or high > narrow.max:
            raise VaultReadError(
                f"{where}: leaf {name!r} ({arr.dtype}) holds values up to {high} (from "
                f"{low}), beyond 32 bits, and JAX without 64-bit types would store them "
                "wrapped: read it with read_numpy, or enable them "
                "(jax.config.update('jax_enable_x64', True)) before reading"
            )


def _import_in_background(*modules: str) -> threading.Thread | None:
    """Start importing ``modules`` on a thread (None: all loaded already). In a fresh process
    the first state read pays for importing JAX (about 0.35 s here); meanwhile the read's
    chunks are decoded, by TensorStore's threads, while the main thread waits for them."""
    missing = [m for m in modules if m not in sys.modules]
    if not missing:
        return None

    def load() -> None:
        for name in missing:
            with contextlib.suppress(Exception):  # the import in the caller raises it
                importlib.import_module(name)

    thread = threading.Thread(target=load, name="rlvault-import", daemon=True)
    thread.start()
    return thread


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
    importing = _import_in_background("jax", "buffers")
    rows, leaves = once(rows), once(leaves)
    wanted, selected = views(snap, rows, lo, hi, leaves, edge_later=True)
    length, cap = state_length(snap, lo, hi, capacity)
    check_read_size(selected, cap, f"a state of capacity {cap}", "give a smaller capacity")
    keep = min(cap, length)
    items = [
        (v[:, length - keep :].translate_to[0], n, cap, lo + length - keep)
        for v, n in zip(selected, wanted, strict=True)
    ]
    fetched = fetch_checked(snap, items, wanted, rows, hi - keep, hi)
    check_edges(snap, wanted, [a[:, :keep] for a in fetched], hi - keep, hi, rows)
    if importing is not None:
        importing.join()
    import jax

    from buffers import TrajectoryBufferState

    if not jax.config.read("jax_enable_x64"):
        check_narrowing(snap.where, wanted, fetched)
    full = cap <= length
    # A state that kept only the last ``cap`` timesteps is the ring of a buffer that had
    # every timestep read added: timestep ``t`` of the read at slot ``t % cap``, the next add
    # at ``length % cap`` (an episode cut at its oldest has no known start).
    index = length % cap if full else length
    if index and full:
        fetched = [np.roll(arr, index, axis=1) for arr in fetched]
    out = [jax.device_put(arr) for arr in fetched]
    fetched.clear()
    if leaves is not None:
        experience: Any = dict(zip(wanted, out, strict=True))
    else:
        experience = _structure.build(snap.manifest.structure, out)
    # The write counter is given (numpy, no JAX computation): a state built outside jit
    # would otherwise derive it with several small XLA compilations in a fresh process. It
    # counts every timestep read, and agrees with the position, as the writers check.
    counter = np.array([length >> 32, length & 0xFFFFFFFF], np.uint32)  # (high, low) words
    return TrajectoryBufferState(
        experience=experience,
        # device_put of numpy values: jnp.asarray with a dtype compiles a conversion (three
        # XLA compilations, about 65 ms, in a fresh process)
        current_index=jax.device_put(np.asarray(index, np.int32)),
        is_full=jax.device_put(np.asarray(full)),
        write_counter=jax.device_put(counter),
    )


def state_length(snap: Snapshot, lo: int, hi: int, capacity: Any) -> tuple[int, int]:
    """The timesteps ``[lo, hi)`` select and the time axis of a state of them (``capacity``,
    default: that many); a range of none, or a capacity below 1, is refused."""
    length = hi - lo
    if length < 1:
        raise VaultReadError(
            f"the time range selects no timestep ([{lo}, {hi}) of {snap.length}): give start, "
            "stop or last that select at least one"
        )
    cap = length if capacity is None else index_arg("capacity", capacity)
    if cap < 1:
        raise VaultReadError(f"capacity must be >= 1, got {cap}")
    return length, cap


def one_episode(snap: Snapshot, episode: Any) -> EpisodeTable:
    """The episode at position ``episode`` of the committed table (negative counts from the
    end), or ``episode`` itself when it is a one-row table."""
    if isinstance(episode, EpisodeTable):
        if len(episode) != 1:
            raise VaultReadError(f"read_episode takes one episode, got {len(episode)}")
        return of_this_shard(snap, episode)
    position = index_arg("episode", episode)
    table = episode_table(snap)
    if not -len(table) <= position < len(table):
        raise VaultReadError(
            f"{snap.where}: episode {episode} out of range; {len(table)} complete episodes "
            "are committed"
        )
    return table[position]


def of_this_shard(snap: Snapshot, table: EpisodeTable) -> EpisodeTable:
    """``table``, refused when its ``shard`` column (a dataset's table) names a shard that
    ``snap`` is not: its rows and times would read another shard's timesteps."""
    if table.shard is None:
        return table
    parent, _, name = str(snap.location).rstrip("/").rpartition("/")
    named = sorted(set(table.shard.tolist()))
    if named and (named != [name] or not parent.endswith(f"/{SHARDS}")):
        raise VaultReadError(
            f"the episodes given name shards {named} of a dataset, and {snap.where} is not "
            "the shard they name; read them from that shard (dataset.vault(name)), or take "
            "this shard's own episodes"
        )
    return table


def _check_bounds(snap: Snapshot, bounds: np.ndarray) -> None:
    """Every indexed episode is one the format allows: a row of the vault, at least one
    timestep inside the committed ones, known flags. A record that claims more episodes than
    were indexed reads the index's unwritten entries (zeros): refused, not returned."""
    row, start, length, flags = (bounds[:, i] for i in range(4))
    bad = np.flatnonzero(
        (row < 0)
        | (row >= snap.rows)
        | (start < 0)
        | (length < 1)
        | (start > snap.length - length)
        | ((flags & ~3) != 0)
    )
    if bad.size:
        i = int(bad[0])
        raise VaultCorruptError(
            f"{snap.where}: episodes/bounds entry {i} (row {row[i]}, start {start[i]}, length "
            f"{length[i]}, flags {flags[i]}) is not an episode of this vault ({bad.size} such "
            f"entries of {len(bounds)}): the index or the commit record's episode count is "
            "damaged or forged. Run `vault verify`; restore the vault from a copy."
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
        check_memory(
            f"{snap.where}: the episode index ({count} episodes)",
            count * 40,
            "the commit record's episode count is not credible",
            VaultReadError,
        )
        for key in (BOUNDS, RETURNS):
            gate(snap, key, None, 0, count)
        bounds = result(snap, snap.index[0][:count].read(), "bounds", "episodes")
        returns = result(snap, snap.index[1][:count].read(), "returns", "episodes")
        for key, values in ((BOUNDS, bounds), (RETURNS, returns)):
            _tags.check_chunks(snap, key, count, None, 0, count)
            start = count // snap.grids[key].step * snap.grids[key].step
            _tags.check_edge(snap, key, None, values[None, start:count])
        _check_bounds(snap, bounds)
        table = EpisodeTable.from_bounds(bounds, returns, has_reward)
    else:
        table = EpisodeTable.empty()
    if include_open and snap.commit.episodes is not None:
        opened = open_table(snap.commit.episodes.open, snap.length, has_reward)
        table = EpisodeTable.concat([table, opened])
    return table
