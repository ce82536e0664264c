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
    """A pack of batches (or stacks) being filled: ``[capacity, seq, ...]`` per leaf (it may
    take sequences from several groups)."""

    def __init__(self, arrays: list[np.ndarray], size: int) -> None:
        self.arrays = arrays
        self.row = np.empty(size, np.int64)
        self.start = np.empty(size, np.int64)
        self.source = np.empty(size, np.int64)
        self.fill = 0

    @classmethod
    def allocate(
        cls, offsets: list[int], shapes: list[tuple[int, ...]], dtypes: list[np.dtype]
    ) -> PartialBatch:
        """Empty output arrays, carved 64-byte aligned out of one allocation (JAX adopts
        aligned buffers without a copy); ``offsets`` from :func:`batch_layout`."""
        raw = np.empty(offsets[-1] + 64, np.uint8)
        first = (-raw.ctypes.data) % 64
        arrays = [
            np.ndarray(shape, dt, raw, first + o)
            for o, shape, dt in zip(offsets, shapes, dtypes, strict=False)
        ]
        return cls(arrays, shapes[0][0])

    def take(self, flat: list[np.ndarray], base: np.ndarray, steps: np.ndarray) -> None:
        """Copy the sequences of ``steps.size`` timesteps starting at ``base`` (of a group's
        buffers ``flat``, seen as ``[rows * width, ...]``) into the next free places; the
        caller records their metadata and advances ``fill``."""
        idx = base[:, None] + steps if steps.size > 1 else base[:, None]
        lo, hi = self.fill, self.fill + base.size
        for out, leaf in zip(self.arrays, flat, strict=True):
            np.take(leaf, idx, axis=0, out=out[lo:hi], mode="clip")


def batch_layout(shapes: list[tuple[int, ...]], dtypes: list[np.dtype]) -> list[int]:
    """Offsets of a batch's leaves in one buffer (each 64-byte aligned), then the total."""
    sizes = [
        -(-math.prod(shape) * dt.itemsize // 64) * 64
        for shape, dt in zip(shapes, dtypes, strict=False)
    ]
    return [0, *itertools.accumulate(sizes)]
