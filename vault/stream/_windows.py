"""Windows of one vault, or of several of one structure, as trajectory-buffer states, read
ahead in the background."""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import numpy as np

from vault._args import once
from vault._errors import VaultReadError, VaultStructureError
from vault.commits._snapshot import Snapshot
from vault.read import _read
from vault.stream._args import bool_arg, check_memory, int_arg, selection, sources_arg
from vault.stream._prefetch import Stream


class WindowStream(Stream[Any]):
    """The iterator :meth:`Vault.iter_windows` returns.

    Its items are ``buffers.TrajectoryBufferState`` s; :meth:`ranges` and :meth:`windows`
    tell which window is which.
    """

    def __init__(
        self,
        items: Generator[Any, None, None],
        depth: int,
        windows: Callable[[int], list[tuple[int, int, int]]],
    ) -> None:
        super().__init__(items, depth, name="rlvault-windows")
        self._windows = windows

    def windows(self, epoch: int = 0) -> list[tuple[int, int, int]]:
        """Returns ``(source, start, stop)`` of an epoch's windows, in yield order.

        ``source`` is an index into the stream's snapshots (0 for a single vault).

        Args:
            epoch: the epoch, from 0.
        """
        return self._windows(int_arg("epoch", epoch, 0))

    def ranges(self, epoch: int = 0) -> list[tuple[int, int]]:
        """Returns the ``(start, stop)`` time ranges of an epoch's windows, in yield order.

        Args:
            epoch: the epoch, from 0.
        """
        return [(lo, hi) for _, lo, hi in self.windows(epoch)]


def iter_windows(
    snaps: Snapshot | Sequence[Snapshot],
    window: int,
    *,
    shuffle: bool = False,
    seed: int = 0,
    prefetch: int = 1,
    capacity: int | None = None,
    rows: Sequence[int] | slice | None = None,
    leaves: Sequence[str] | None = None,
    epochs: int | None = 1,
    drop_remainder: bool = False,
) -> WindowStream:
    """Successive windows ``[t0, t0 + window)`` of the committed data as trajectory-buffer
    states (``TrajectoryBufferState``, what :meth:`Vault.read` gives), the next ``prefetch``
    read in the background.

    ``snaps``: one snapshot, or several of one structure (the same leaves and containers, and
    as many rows selected in each; else :class:`VaultStructureError`). Each epoch visits every
    committed timestep (as of this call) of every source exactly once: windows ``[0, w), [w,
    2w), ...`` of source 0, then of source 1, ..., the last one of each source shorter unless
    ``drop_remainder``; with ``shuffle`` all of them in a seeded random order, new each
    epoch. Every state has a time axis of ``capacity``
    (default ``window``, so a jitted ``sample`` never retraces); a shorter last window is a
    state that is not full (``current_index`` = its length). Sequences never span two windows;
    a window shorter than the buffer's sequence length cannot be sampled (``can_sample`` is
    false). ``WindowStream.windows(epoch)`` lists the windows (source, start, stop) in yield
    order.

    Memory: ``prefetch + 1`` windows (the consumer's and those read ahead); more than the
    machine's memory is refused (:class:`VaultReadError`) before anything is allocated.
    """
    window = int_arg("window", window, 1)
    prefetch = int_arg("prefetch", prefetch, 0)
    seed = int_arg("seed", seed, 0)
    if epochs is not None:
        epochs = int_arg("epochs", epochs, 0)
    cap = window if capacity is None else int_arg("capacity", capacity, 1)
    if cap < window:
        raise VaultReadError(
            f"capacity ({cap}) must be >= window ({window}): a smaller state would drop the "
            "start of each window"
        )
    shuffle = bool_arg("shuffle", shuffle)
    drop_remainder = bool_arg("drop_remainder", drop_remainder)
    sources = sources_arg(snaps)
    rows, leaves = once(rows), once(leaves)  # read for every window: an iterator only once
    picked = [selection(snap, rows, leaves) for snap in sources]  # fail now, not later
    row_ids, names = picked[0]
    uneven = [
        f"source {i} ({snap.where}): {ids.size} rows"
        for i, ((ids, _), snap) in enumerate(zip(picked, sources, strict=True))
        if ids.size != row_ids.size
    ]
    if uneven:
        raise VaultStructureError(
            f"windows of several sources are states of one shape: every source needs "
            f"{row_ids.size} rows selected (as source 0, {sources[0].where})",
            uneven,
        )
    bounds = []
    for s, snap in enumerate(sources):
        length = snap.length
        own = [(s, t, min(t + window, length)) for t in range(0, length, window)]
        if drop_remainder and own and own[-1][2] - own[-1][1] < window:
            own.pop()
        bounds += own
    if not bounds:
        lengths = [snap.length for snap in sources]
        shown = sources[0].where if len(sources) == 1 else f"{len(sources)} sources"
        committed = lengths[0] if len(sources) == 1 else lengths
        raise VaultReadError(f"{shown}: no window of {window} timesteps: {committed} committed")
    held = prefetch + 1 if epochs is None else min(prefetch, epochs * len(bounds)) + 1
    step_bytes = sum(sources[0].manifest.leaf(n).step_bytes for n in names)
    check_memory(
        f"iter_windows(window={window}, capacity={cap}, prefetch={prefetch})",
        held * len(row_ids) * cap * step_bytes,
        "give a smaller window, capacity or prefetch",
    )

    def order(epoch: int) -> list[tuple[int, int, int]]:
        if not shuffle:
            return list(bounds)
        permuted = np.random.default_rng([seed, epoch]).permutation(len(bounds))
        return [bounds[int(i)] for i in permuted]

    def produce() -> Generator[Any, None, None]:
        epoch = 0
        while epochs is None or epoch < epochs:
            for s, lo, hi in order(epoch):
                yield _read.read_state(sources[s], rows, lo, hi, leaves, cap)
            epoch += 1

    return WindowStream(produce(), prefetch, order)
