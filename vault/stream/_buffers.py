"""The stream's host buffers: a group of blocks read side by side, a batch being filled, and
the layout of a batch's leaves in one buffer (``vault/stream/_stream.py``'s producer)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from vault.commits._snapshot import Snapshot


class BlockGroup:
    """Blocks read side by side into one buffer per leaf ``[slots * block_rows, seg, ...]``:
    slot ``j`` holds rows ``[j * block_rows, ...)``; in each row, ``head`` timesteps before the
    block, then the block's timesteps. ``parts``: the blocks of which only the sequences
    ``[begin, end)`` of their canonical order are this process's."""

    def __init__(
        self,
        epoch: int,
        index: int,
        blocks: list[int],
        parts: dict[int, tuple[int, int]],
        last: bool,
        buffers: list[np.ndarray],
    ) -> None:
        self.epoch = epoch
        self.index = index  # position in the epoch's schedule
        self.blocks = blocks
        self.parts = parts
        self.last = last  # the epoch's last group
        self.buffers = buffers
        self.futures: list[tuple[Snapshot, str, Any]] = []
        self.carries: list[tuple[int, int]] = []  # (slot, block whose tail is its head)


class PartialBatch:
    """A batch being filled (it may take sequences from several groups)."""

    def __init__(self, arrays: list[np.ndarray], size: int) -> None:
        self.arrays = arrays
        self.row = np.empty(size, np.int64)
        self.start = np.empty(size, np.int64)
        self.source = np.empty(size, np.int64)
        self.fill = 0


def batch_layout(shapes: list[tuple[int, ...]], dtypes: list[np.dtype]) -> list[int]:
    """Offsets of a batch's leaves in one buffer (each 64-byte aligned), then the total."""
    sizes = [
        -(-math.prod(shape) * dt.itemsize // 64) * 64
        for shape, dt in zip(shapes, dtypes, strict=False)
    ]
    return [0, *itertools.accumulate(sizes)]
