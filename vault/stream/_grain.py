"""A Grain data source over vaults: records are sequence windows.

:func:`grain_source` gives a random-access source (``__len__``, ``__getitem__``, the protocol
of ``grain.sources.RandomAccessDataSource``) whose record ``i`` is one window of
``sequence_length`` timesteps of one row of one source, as the vault's structure of numpy
arrays ``[sequence_length, ...]``. The records are the valid starts of the streams
(``vault/stream/_layout.py``: ``t % stride == 0``, no window across a seam, with
``episode_aware`` no episode end before its last step), numbered source by source, row by row,
in time order. It needs no Grain to exist: Grain's samplers, ``MapDataset`` and
``DataLoader`` take it as it is (``pip install grain``: no extra of rlvault brings it, see the
Grain benchmark (docs: Benchmarks)).

A record costs a read of the chunks it touches; decoded chunks are kept in a
least-recently-used cache of ``cache_bytes`` (shared by Grain's reading threads), so records
read in index order, or several from one chunk, decode each chunk once. Random access over a
vault larger than the cache decodes about one chunk per record: see the Grain
benchmark for what that costs against :meth:`Vault.as_dataset`.

The source pickles as its sources' locations and pinned commit ids (and ``storage``), so
Grain's worker processes reopen exactly the same data.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vault._args import int_arg, kind, once
from vault._errors import VaultArgumentError, VaultReadError
from vault.commits._pins import commit_id
from vault.commits._snapshot import Snapshot
from vault.format import _structure
from vault.read import _read
from vault.stream._args import bool_arg, end_leaves_of, selection, sources_arg
from vault.stream._layout import end_flags, end_free
from vault.stream._state import open_pinned

DEFAULT_CACHE_BYTES = 256 << 20


class VaultWindows:
    """A Grain random-access data source over vaults, made by :func:`grain_source`."""

    def __init__(
        self,
        snaps: list[Snapshot],
        sequence_length: int,
        *,
        stride: int,
        rows: Sequence[int] | slice | None,
        leaves: Sequence[str] | None,
        episode_aware: bool,
        cache_bytes: int,
        storage: dict[str, Any] | None,
    ) -> None:
        rows, leaves = once(rows), once(leaves)  # checked, kept and pickled: read it once
        self._options = {
            "sequence_length": sequence_length, "stride": stride, "rows": rows,
            "leaves": None if leaves is None else list(leaves), "episode_aware": episode_aware,
            "cache_bytes": cache_bytes, "storage": storage,
        }  # fmt: skip
        self._snaps = snaps
        self._seq = sequence_length
        picked = [selection(snap, rows, leaves) for snap in snaps]
        self._names = picked[0][1]
        self._structured = leaves is None
        ends = end_leaves_of(snaps) if episode_aware else []
        # one entry per (source, row) with records: where its records start, its times
        self._pairs: list[tuple[int, int, np.ndarray]] = []
        for s, (snap, (row_ids, _)) in enumerate(zip(snaps, picked, strict=True)):
            times = _valid_times(snap, sequence_length, stride)
            free = _episode_free(snap, row_ids, sequence_length, ends) if ends else None
            for i, row in enumerate(row_ids.tolist()):
                mine = times if free is None else times[free[i, times]]
                if mine.size:
                    self._pairs.append((s, row, mine))
        sizes = np.array([t.size for _, _, t in self._pairs], np.int64)
        self._ends = np.cumsum(sizes)
        self._len = int(self._ends[-1]) if sizes.size else 0
        first = snaps[0].manifest
        specs = [first.leaf(n) for n in self._names]
        heaviest = max(specs, key=lambda spec: spec.step_bytes)
        self._chunk_rows = int(heaviest.chunk[0])
        self._span = int(heaviest.chunk[1])  # timesteps of one cached block: one time chunk
        self._cache: collections.OrderedDict[tuple[int, int, int], list[np.ndarray]] = (
            collections.OrderedDict()
        )
        self._cached_bytes = 0
        self._cache_bytes = cache_bytes
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._len

    def where(self, index: int) -> tuple[int, int, int]:
        """Returns ``(source, row, start)`` of a record.

        Args:
            index: the record, in ``[0, len(self))``.

        Raises:
            IndexError: an index outside ``[0, len(self))``.
        """
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise VaultArgumentError(f"a record index is an int, got {kind(index)}")
        i = int(index)
        if not 0 <= i < self._len:
            raise IndexError(f"record {i} out of range [0, {self._len})")
        j = int(np.searchsorted(self._ends, i, side="right"))
        source, row, times = self._pairs[j]
        before = int(self._ends[j]) - times.size
        return source, row, int(times[i - before])

    def __getitem__(self, index: int) -> Any:
        source, row, start = self.where(index)
        stop = start + self._seq
        parts: list[list[np.ndarray]] = []
        for k in range(start // self._span, (stop - 1) // self._span + 1):
            block = self._block(source, row // self._chunk_rows, k)
            lo, r = k * self._span, row % self._chunk_rows
            parts.append(
                [x[r, max(start, lo) - lo : min(stop, lo + self._span) - lo] for x in block]
            )
        out = [p[0] if len(parts) == 1 else np.concatenate(p) for p in zip(*parts, strict=True)]
        if len(parts) == 1:
            out = [np.array(x) for x in out]  # not a view that keeps the whole block alive
        if not self._structured:
            return dict(zip(self._names, out, strict=True))
        return _structure.build(self._snaps[source].manifest.structure, out)

    def _block(self, source: int, group: int, k: int) -> list[np.ndarray]:
        """Rows ``[group * chunk_rows, ...)`` x timesteps ``[k * span, ...)`` of every leaf,
        from the cache or read (and cached)."""
        key = (source, group, k)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        snap = self._snaps[source]
        r0 = group * self._chunk_rows
        rows = slice(r0, min(r0 + self._chunk_rows, snap.rows))
        lo = k * self._span
        read = _read.read_numpy(snap, rows, lo, min(lo + self._span, snap.length), self._names)
        block = [read[n] for n in self._names]
        size = sum(x.nbytes for x in block)
        with self._lock:
            if key not in self._cache:
                self._cache[key] = block
                self._cached_bytes += size
            while self._cached_bytes > self._cache_bytes and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._cached_bytes -= sum(x.nbytes for x in old)
        return block

    def __repr__(self) -> str:
        shown = ", ".join(f"{s.where}@{commit_id(s.commit)}" for s in self._snaps)
        return (
            f"VaultWindows([{shown}], sequence_length={self._seq}, "
            f"stride={self._options['stride']}, records={self._len})"
        )

    def __getstate__(self) -> dict[str, Any]:
        pins = [(s.where, commit_id(s.commit)) for s in self._snaps]
        return {"pins": pins, "options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        options = dict(state["options"])
        storage = options.pop("storage")
        snaps = open_pinned([(w, pin) for w, pin in state["pins"]], storage)
        seq = options.pop("sequence_length")
        self.__dict__.update(VaultWindows(snaps, seq, storage=storage, **options).__dict__)

    @property
    def snapshots(self) -> list[Snapshot]:
        """The sources, at the commits the records come from."""
        return list(self._snaps)


def _valid_times(snap: Snapshot, seq: int, stride: int) -> np.ndarray:
    """The starts of one row of ``snap`` whose window fits and crosses no seam."""
    times = np.arange(0, max(0, snap.length - seq + 1), stride, dtype=np.int64)
    for seam in snap.commit.seams:
        a = seam.at
        if 0 < a < snap.length:
            times = times[(times + seq - 1 < a) | (times >= a)]
    return times


def _episode_free(snap: Snapshot, row_ids: np.ndarray, seq: int, ends: list[str]) -> np.ndarray:
    """``[rows, length]``: no episode end in the first ``seq - 1`` steps of the window at each
    start (rows ``row_ids``; reads the end leaves)."""
    free = np.zeros((row_ids.size, snap.length), bool)
    if seq == 1 or snap.length < seq:
        free[:] = True
        return free
    read = _read.read_numpy(snap, row_ids.tolist(), 0, snap.length - 1, ends)
    fits = snap.length - seq + 1
    free[:, :fits] = end_free(end_flags([read[n] for n in ends])[:, : fits + seq - 2], seq - 1)
    return free


def grain_source(
    vaults: Any,
    sequence_length: int,
    *,
    stride: int = 1,
    rows: Sequence[int] | slice | None = None,
    leaves: Sequence[str] | None = None,
    episode_aware: bool = False,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    storage: dict[str, Any] | None = None,
) -> VaultWindows:
    """A Grain random-access data source of sequence windows over vaults.

    Record ``i`` is one window of ``sequence_length`` timesteps, as the vault's structure of
    numpy arrays ``[sequence_length, ...]`` (a dict ``{path: array}`` with ``leaves``);
    ``len()`` is the number of valid starts (as :meth:`Vault.as_dataset` yields per epoch:
    ``stride``, seams, ``episode_aware``), numbered source by source, row by row, in time
    order; ``source.where(i)`` says ``(source, row, start)``; an index outside ``[0, len)``
    is ``IndexError`` (the sequence protocol).

    Args:
        vaults: a :class:`Vault`, a :class:`Snapshot`, a sequence of them of one structure,
            or a dataset of shards; each read at the commit it shows now.
        sequence_length: timesteps per record.
        stride: only starts ``t`` with ``t % stride == 0``.
        rows: row indices or a slice, in every source (default: every row).
        leaves: leaf paths (default: every leaf).
        episode_aware: no window across an episode end (reads the done/truncated leaves of
            the selected rows once, here).
        cache_bytes: decoded chunks kept for later records (least recently used first out).
        storage: the settings the vaults were opened with, for Grain's worker processes,
            which reopen the same commits (a pickled source holds locations and commit ids).

    Returns:
        The data source, for ``grain.MapDataset.source(...)`` or a ``grain.DataLoader``.

    Raises:
        VaultReadError: no window of ``sequence_length`` in the sources, or an argument out
            of range.
        VaultStructureError: sources of different structures.
    """
    if hasattr(vaults, "snapshots"):  # a dataset of shards: every shard
        listed = list(vaults.snapshots)
        if not listed:
            raise VaultReadError(
                f"{vaults.location}: no window of {sequence_length!r} timesteps: the dataset "
                "has no shard yet"
            )
    else:
        listed = list(vaults) if isinstance(vaults, (list, tuple)) else [vaults]
    # a Vault gives the snapshot it reads now; anything else is checked by sources_arg
    snaps = [v if isinstance(v, Snapshot) else getattr(v, "snapshot", v) for v in listed]
    try:
        checked = sources_arg(snaps)
    except VaultArgumentError as err:
        raise VaultArgumentError(
            f"vaults must be a Vault, a Snapshot, a sequence of them (of one structure) or a "
            f"Dataset; open a location first (Vault.open(path)): {err}"
        ) from None
    leaves = once(leaves)  # an iterator is read once, here: checked, then handed on
    if leaves is not None:
        _read.leaves_of(checked[0].names, checked[0].where, leaves)
    if storage is not None and not isinstance(storage, Mapping):
        raise VaultArgumentError(
            f"storage must be a mapping of settings (as Vault.open takes) or None, got "
            f"{kind(storage)}"
        )
    seq = int_arg("sequence_length", sequence_length, 1, VaultReadError)
    source = VaultWindows(
        checked,
        seq,
        stride=int_arg("stride", stride, 1, VaultReadError),
        rows=rows,
        leaves=leaves,
        episode_aware=bool_arg("episode_aware", episode_aware),
        cache_bytes=int_arg("cache_bytes", cache_bytes, 0, VaultReadError),
        storage=storage,
    )
    if not len(source):
        raise VaultReadError(
            f"no window of {seq} timesteps in {', '.join(s.where for s in source.snapshots)}"
        )
    return source
