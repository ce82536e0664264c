"""Windows of a vault as trajectory-buffer states, read ahead in the background."""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import numpy as np

from vault import _read
from vault._errors import VaultReadError
from vault._prefetch import Stream
from vault._snapshot import Snapshot
from vault._stream_args import bool_arg, check_memory, int_arg, selection


class WindowStream(Stream[Any]):
    """The iterator :func:`iter_windows` returns; :meth:`ranges` tells which window is which."""

    def __init__(
        self,
        items: Generator[Any, None, None],
        depth: int,
        ranges: Callable[[int], list[tuple[int, int]]],
    ) -> None:
        super().__init__(items, depth, name="rlvault-windows")
        self._ranges = ranges

    def ranges(self, epoch: int = 0) -> list[tuple[int, int]]:
        """The ``(start, stop)`` time ranges of epoch ``epoch``'s windows, in yield order."""
        return self._ranges(int_arg("epoch", epoch, 0))


def iter_windows(
    snap: Snapshot,
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

    Each epoch visits every committed timestep (as of this call) exactly once: windows
    ``[0, w), [w, 2w), ...``, the last one shorter unless ``drop_remainder``; with ``shuffle``
    in a seeded random order, new each epoch. Every state has a time axis of ``capacity``
    (default ``window``, so a jitted ``sample`` never retraces); a shorter last window is a
    state that is not full (``current_index`` = its length). Sequences never span two windows;
    a window shorter than the buffer's sequence length cannot be sampled (``can_sample`` is
    false). ``WindowStream.ranges(epoch)`` lists the windows in yield order.

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
    row_ids, names = selection(snap, rows, leaves)  # fail now, not in the background
    length = snap.length
    bounds = [(t, min(t + window, length)) for t in range(0, length, window)]
    if drop_remainder and bounds and bounds[-1][1] - bounds[-1][0] < window:
        bounds.pop()
    if not bounds:
        raise VaultReadError(f"{snap.where}: no window of {window} timesteps: {length} committed")
    held = prefetch + 1 if epochs is None else min(prefetch, epochs * len(bounds)) + 1
    step_bytes = sum(snap.manifest.leaf(n).step_bytes for n in names)
    check_memory(
        f"iter_windows(window={window}, capacity={cap}, prefetch={prefetch})",
        held * len(row_ids) * cap * step_bytes,
        "give a smaller window, capacity or prefetch",
    )

    def ranges(epoch: int) -> list[tuple[int, int]]:
        if not shuffle:
            return list(bounds)
        order = np.random.default_rng([seed, epoch]).permutation(len(bounds))
        return [bounds[int(i)] for i in order]

    def produce() -> Generator[Any, None, None]:
        epoch = 0
        while epochs is None or epoch < epochs:
            for lo, hi in ranges(epoch):
                yield _read.read_state(snap, rows, lo, hi, leaves, cap)
            epoch += 1

    return WindowStream(produce(), prefetch, ranges)
