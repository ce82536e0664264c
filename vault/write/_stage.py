"""Appends staged in whole chunks, in arrays the writer reuses.

An append that starts or ends inside a time chunk would make TensorStore read back the stored
chunk, decode it, merge the new timesteps into it and copy the result before encoding. The
writer instead copies each append once into a staging array that covers whole chunks
(:class:`Staged`): the timesteps already stored in the partly filled chunk at the start (which
the writer keeps from its previous append: the tip's tail), the new timesteps, and fill values
to the next chunk boundary. TensorStore then overwrites every chunk it touches and encodes
straight from the staging array (which nothing modifies while it is referenced), so the
background write neither reads, decodes, merges nor copies.

Staging arrays come from a :class:`StagingPool`: a fresh array of an append's size costs about
as much in page faults as the copy into it, so the arrays of a finished append are used again
by the next one of the same shape.

The writer keeps, per leaf, the timesteps of the partly filled chunk at its tip (at most one
chunk per row block: about 21 MB for 16 rows of Atari frames in 1.35 MB chunks) and one set of
staging arrays between appends.

Measured on the recording loop's appends (16 rows x 250 Atari-like frames, 84 MB, through
``Vault.append``; CPU seconds of the whole process per append, medians of 8 appends, three runs
alternating with the code before, load 21-40): 0.201 / 0.196 / 0.192 against 0.261 / 0.276 /
0.327 (``docs/performance.md``, "CPU: the training loop").
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable, Sequence

import numpy as np

Tails = tuple[np.ndarray | None, ...]
Empty = Callable[[tuple[int, ...], np.dtype], np.ndarray]


class PendingTails:
    """The tails after an append that the background thread stages (a write of a buffer on
    an accelerator, ``vault/write/_device.py``): known once that append is staged. Appends
    are staged in the order they were issued, so the next one's staging finds them set;
    :meth:`get` waits where it does not (a blocking write flushes the queue first)."""

    def __init__(self) -> None:
        self._value: Tails | None = None
        self._set = threading.Event()

    def set(self, value: Tails | None) -> None:
        """The tails after the append (None: not known, as when its staging failed)."""
        self._value = value
        self._set.set()

    def get(self) -> Tails | None:
        """The tails, once set."""
        self._set.wait()
        return self._value

    @property
    def known(self) -> bool:
        """Whether the append has been staged (or has failed)."""
        return self._set.is_set()


def known_tails(tails: Tails | PendingTails | None) -> Tails | None:
    """``tails``, waiting for them where the background thread has yet to stage them."""
    return tails.get() if isinstance(tails, PendingTails) else tails


@dataclasses.dataclass(frozen=True)
class Staged:
    """One leaf's append as written to storage: whole time chunks from ``begin`` (a multiple
    of the leaf's chunk time, or the append's start where the chunk there is not known),
    read-only. The fill values past the append's end are what a partly written chunk holds
    anyway, and no reader looks past the committed length."""

    begin: int
    data: np.ndarray


def stage(
    length: int,
    tails: Tails | PendingTails | None,
    pieces: Sequence[Sequence[np.ndarray]],
    chunks: Sequence[int],
    empty: Empty = np.empty,
) -> tuple[tuple[np.ndarray, ...], tuple[Staged, ...], Tails]:
    """Stage an append at ``length`` (``tails``: per leaf, the timesteps already stored in the
    partly filled chunk there, or None where not known): per leaf, ``pieces`` (arrays
    ``[rows, k, ...]`` in time order, together the new timesteps) are copied once, after the
    tail, and padded with zeros (the fill value of every leaf) to a whole chunk of the leaf's
    chunk time (``chunks``), into an array from ``empty(shape, dtype)``.

    Returns the parts (views of the new timesteps), the staged arrays and the tails after
    the append (per leaf; None where the chunk at the start was not known and the append
    ends inside it)."""
    tails = known_tails(tails)
    parts, staged, after = [], [], []
    for i, (leaf_pieces, step) in enumerate(zip(pieces, chunks, strict=True)):
        first = leaf_pieces[0]
        n = sum(int(p.shape[1]) for p in leaf_pieces)
        tail = None if tails is None else tails[i]
        pre = length % step
        if pre and (tail is None or tail.shape[1] != pre):
            tail, pre = None, 0  # not known: TensorStore merges into the stored chunk
        begin, end = length - pre, length + n
        shape = (int(first.shape[0]), -(-end // step) * step - begin, *first.shape[2:])
        out = empty(shape, np.dtype(first.dtype))
        if pre:
            out[:, :pre] = tail
        at = pre
        for piece in leaf_pieces:
            out[:, at : at + piece.shape[1]] = piece
            at += int(piece.shape[1])
        out[:, at:] = 0
        out.flags.writeable = False
        parts.append(out[:, pre:at])
        staged.append(Staged(begin, out))
        cut = end // step * step
        after.append(np.array(out[:, cut - begin : at]) if cut >= begin else None)
    return tuple(parts), tuple(staged), tuple(after)


class StagingPool:
    """Staging arrays for a writer's appends, reused (see the module docstring).

    :meth:`empty` hands out a view of a kept array that nothing else references (TensorStore
    holds a reference to a staging array while it writes from it), else of a new one sized
    for appends of up to a quarter more timesteps. :meth:`release` keeps the arrays of a
    finished append, one per shape and dtype of rows and items (the latest)."""

    def __init__(self) -> None:
        self._free: dict[tuple[object, ...], np.ndarray] = {}
        self._lock = threading.Lock()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        key = (shape[0], shape[2:], np.dtype(dtype).str)
        with self._lock:
            base = self._free.pop(key, None)
        # references: the local name and getrefcount's argument; any other is a user of it
        if base is None or base.shape[1] < shape[1] or sys.getrefcount(base) > 2:
            base = np.empty((shape[0], shape[1] + shape[1] // 4, *shape[2:]), dtype)
        return base[:, : shape[1]]

    def release(self, staged: Sequence[Staged]) -> None:
        """Keep the staging arrays of an append that has finished (written or failed)."""
        with self._lock:
            for s in staged:
                base = s.data.base if isinstance(s.data.base, np.ndarray) else None
                if base is not None:
                    self._free[(base.shape[0], base.shape[2:], base.dtype.str)] = base

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
