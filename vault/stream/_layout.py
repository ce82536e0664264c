"""Where a stream's sequences come from: its sources, their blocks, each block's valid starts,
the reading order of an epoch and, with several processes, each process's share of it.

**Sources.** A stream reads one snapshot or several of one structure (the shards of a
dataset); ``source`` ``s`` is the ``s``-th of them. Every source is cut into *blocks* of the
same shape: a group of ``block_rows`` of its rows x a range of ``block`` timesteps. Blocks are
numbered source by source, row group by row group, in time order; a block never spans two
sources or two row groups. A source shorter than a sequence has no blocks.

**Valid starts.** The block of time range ``[lo, hi)`` owns the starts ``t`` in
``[lo - (L - 1), hi - (L - 1))`` (``L``: the sequence length) of its rows with ``t % stride ==
0`` whose window does not straddle a seam of its source, and with ``episode_aware`` holds no
episode end before its last step. In a block they are ordered time-major (every row at ``t``,
then ``t + 1``): the block's *canonical order*.

**The epoch's order.** Without ``shuffle``: block by block in number order, ``interleave``
consecutive blocks read side by side. With ``shuffle``: runs of ``run_blocks`` consecutive
blocks of one row group, permuted per epoch by ``numpy.random.default_rng([seed, epoch])``,
read ``interleave`` runs side by side.

**Shares.** With ``process_count`` ``P > 1`` the epoch's blocks, in the epoch's order (each
in canonical order), hold ``N`` valid sequences; process ``p`` takes the sequences ``[p * q,
(p + 1) * q)`` of that order, ``q = N // P``: whole blocks, and at either end of its share the
first or last sequences of a block that the neighbouring process reads too. The last ``N -
P * q`` (fewer than ``P``) sequences of each epoch are dropped. So the shares are disjoint,
together they are the epoch less those few, every process yields the same number of
sequences, and a process reads its share's blocks and nothing else. ``N`` and every block's
count come from the metadata (lengths, stride, seams); with ``episode_aware`` every process
also reads the done/truncated leaves once, when the stream is made.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from vault._errors import VaultReadError
from vault.commits._gate import gate
from vault.commits._snapshot import Snapshot
from vault.format._records import leaf_key
from vault.read import _read
from vault.stream._args import check_memory, int_arg, selection

DEFAULT_BLOCK_BYTES = 32 << 20  # raw bytes of one block (of the leaves read)
HEAD_OVERHEAD = 1 / 8  # default run length keeps the extra head decoding below this share
COUNT_SLAB_BYTES = 64 << 20  # episode ends read at once to count the valid starts
SCHEDULE_BYTES_PER_BLOCK = 160  # an epoch's schedule: a list entry per block (measured ~150)

Group = list[int]
"""Blocks read side by side (global block numbers)."""


class Source(NamedTuple):
    snap: Snapshot
    row_ids: np.ndarray  # the vault rows it streams
    length: int  # committed timesteps per row
    seams: np.ndarray  # times ``a``: ``a - 1`` and ``a`` are not consecutive
    first: int  # the number of its block 0
    n_time: int  # time blocks per row group (0: shorter than a sequence)
    n_row_groups: int

    @property
    def n_blocks(self) -> int:
        return self.n_time * self.n_row_groups


class Block(NamedTuple):
    source: int
    first_row: int  # its rows are ``row_ids[first_row : first_row + rows]`` of its source
    rows: int
    lo: int  # its time range
    hi: int


class Epoch(NamedTuple):
    """One epoch of one process: its groups in reading order, and the blocks of which it takes
    only a part, ``(begin, end)`` in canonical order."""

    groups: list[Group]
    parts: dict[int, tuple[int, int]]


class Layout:
    """The blocks of a stream and their schedule (see the module docstring)."""

    def __init__(
        self,
        snaps: list[Snapshot],
        seq: int,
        *,
        rows: Sequence[int] | slice | None,
        leaves: Sequence[str] | None,
        end_leaves: list[str],
        stride: int,
        block_timesteps: int | None,
        block_rows: int | None,
        run_blocks: int | None,
        interleave: int,
        shuffle: bool,
        seed: int,
        process: tuple[int, int] = (0, 1),
    ) -> None:
        self.seq, self.head, self.stride = seq, seq - 1, stride
        self.interleave, self.shuffle, self.seed = interleave, shuffle, seed
        self.process_index, self.process_count = process
        selected = [selection(snap, rows, leaves) for snap in snaps]
        self.names = selected[0][1]
        self.end_leaves = list(end_leaves)
        self.read_names = self.names + [n for n in self.end_leaves if n not in self.names]
        self.max_length = max(snap.length for snap in snaps)
        if self.max_length < seq:
            shown = snaps[0].where if len(snaps) == 1 else f"each of the {len(snaps)} sources"
            have = "the vault has" if len(snaps) == 1 else "the longest has"
            raise VaultReadError(
                f"{shown}: sequences of {seq} timesteps need at least {seq} committed "
                f"timesteps per row; {have} {self.max_length}"
            )
        specs = [snaps[0].manifest.leaf(n) for n in self.read_names]
        self.items = [spec.shape for spec in specs]
        self.dtypes = [np.dtype(spec.dtype) for spec in specs]
        self.chunks = [spec.chunk for spec in specs]
        self.row_bytes = [
            math.prod(item) * dt.itemsize for item, dt in zip(self.items, self.dtypes, strict=True)
        ]
        self.step_bytes = sum(self.row_bytes)  # one row, one timestep, every leaf read
        self.max_rows = max(ids.size for ids, _ in selected)
        self._choose_blocks(block_timesteps, block_rows, run_blocks)
        self.sources: list[Source] = []
        first = 0
        for snap, (ids, _) in zip(snaps, selected, strict=True):
            n_time = -(-snap.length // self.block) if snap.length >= seq else 0
            seams = [seam.at for seam in snap.commit.seams if 0 < seam.at < snap.length]
            source = Source(
                snap, ids, snap.length, np.array(seams, np.int64), first, n_time,
                -(-ids.size // self.block_rows),
            )  # fmt: skip
            self.sources.append(source)
            first += source.n_blocks
        self.n_blocks = first
        # the schedule lists every block of an epoch (runs of block indices): before making
        # one for the committed length a record claims, the claim's end must be stored and
        # the schedule must fit in memory (a forged length is refused, not planned)
        check_memory(
            f"a stream over {self.n_blocks} blocks",
            self.n_blocks * SCHEDULE_BYTES_PER_BLOCK,
            "read a part of the vault (rows=, leaves=) or larger blocks",
        )
        for snap, (ids, _) in zip(snaps, selected, strict=True):
            if snap.length >= seq:
                for name in self.read_names:
                    gate(snap, leaf_key(name), ids.tolist(), snap.length - 1, snap.length)
        self._firsts = np.array([s.first for s in self.sources], np.int64)
        self.counts: np.ndarray | None = None  # valid starts per block (with several processes)
        if self.process_count > 1:
            self.counts = self._count_all()

    def _choose_blocks(
        self, block_timesteps: int | None, block_rows: int | None, run_blocks: int | None
    ) -> None:
        """Block shape (rows x timesteps) and the shuffled runs' length."""
        n_rows = self.max_rows
        heaviest = int(np.argmax(self.row_bytes))
        chunk_time = [int(c[1]) for c in self.chunks]
        if block_timesteps is None:
            # About DEFAULT_BLOCK_BYTES, a whole number of the heaviest leaf's time chunks (of
            # every leaf's, when that costs at most twice the target).
            total = max(1, n_rows * self.step_bytes)
            align = chunk_time[heaviest]
            if math.lcm(*chunk_time) * total <= 2 * DEFAULT_BLOCK_BYTES:
                align = math.lcm(*chunk_time)
            steps = max(1, round(DEFAULT_BLOCK_BYTES / total / align)) * align
            self.block = -(-max(steps, self.seq) // align) * align
        else:
            self.block = int_arg("block_timesteps", block_timesteps, 1)
            if self.block < self.seq:
                raise VaultReadError(
                    f"block_timesteps ({self.block}) must be >= sequence_length ({self.seq})"
                )
        if block_rows is None:
            per_row = max(1, self.block * self.step_bytes)
            block_rows = n_rows
            if n_rows * per_row > 2 * DEFAULT_BLOCK_BYTES:  # many rows: split them
                block_rows = max(1, DEFAULT_BLOCK_BYTES // per_row)
                chunk_rows = int(self.chunks[heaviest][0])
                if block_rows >= chunk_rows:
                    block_rows -= block_rows % chunk_rows  # whole chunks of the heaviest leaf
        self.block_rows = min(int_arg("block_rows", block_rows, 1), n_rows)
        self.seg = self.head + min(self.block, self.max_length)
        if run_blocks is None:
            dominant = chunk_time[heaviest]
            wasted = -(-self.head // dominant) * dominant if self.head else 0
            run_blocks = max(1, math.ceil(wasted / (HEAD_OVERHEAD * self.block)))
        self.run_blocks = int_arg("run_blocks", run_blocks, 1)

    # ------------------------------------------------------------------------------ blocks
    def block_of(self, b: int) -> Block:
        s = int(np.searchsorted(self._firsts, b, side="right")) - 1
        source = self.sources[s]
        group, time = divmod(b - source.first, source.n_time)
        first_row = group * self.block_rows
        lo = time * self.block
        return Block(
            s, first_row, min(self.block_rows, source.row_ids.size - first_row), lo,
            min(lo + self.block, source.length),
        )  # fmt: skip

    def starts(self, b: int, free: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        """Block ``b``'s candidate start times ``t`` and which are valid per row (``[rows,
        t.size]``; None: all of them); ``free`` (episode ends, from :func:`end_free`) too."""
        block = self.block_of(b)
        t = np.arange(max(0, block.lo - self.head), block.hi - self.head, dtype=np.int64)
        keep = None
        if self.stride > 1:
            keep = t % self.stride == 0
        for a in self.sources[block.source].seams:  # a window must not contain a-1 | a
            apart = (t + self.head < a) | (t >= a)
            keep = apart if keep is None else keep & apart
        mask = None if keep is None else np.broadcast_to(keep, (block.rows, t.size))
        if free is not None:
            mask = free if mask is None else mask & free
        return t, mask

    def end_window(self, b: int) -> tuple[int, int]:
        """The times ``[lo, hi)`` whose episode ends decide block ``b``'s valid starts."""
        block = self.block_of(b)
        return max(0, block.lo - self.head), block.hi - 1

    # ------------------------------------------------------------------------------ counts
    def _count_all(self) -> np.ndarray:
        """Valid starts per block: from the metadata, with ``episode_aware`` from the episode
        ends too (read a slab of a row group's time blocks at a time)."""
        counts = np.zeros(self.n_blocks, np.int64)
        if not (self.end_leaves and self.head):
            for b in range(self.n_blocks):
                t, mask = self.starts(b, None)
                counts[b] = self.block_of(b).rows * t.size if mask is None else mask.sum()
            return counts
        end_bytes = sum(self.row_bytes[self.read_names.index(n)] for n in self.end_leaves)
        for source in self.sources:
            per_block = max(1, self.block_rows * self.block * end_bytes)
            slab = max(1, COUNT_SLAB_BYTES // per_block)
            for group in range(source.n_row_groups):
                first = source.first + group * source.n_time
                for k in range(0, source.n_time, slab):
                    numbers = range(first + k, first + min(k + slab, source.n_time))
                    lo, hi = self.end_window(numbers[0])[0], self.end_window(numbers[-1])[1]
                    block = self.block_of(numbers[0])
                    rows = source.row_ids[block.first_row : block.first_row + block.rows]
                    read = _read.read_numpy(source.snap, rows.tolist(), lo, hi, self.end_leaves)
                    flags = end_flags([read[n] for n in self.end_leaves])
                    for b in numbers:
                        b_lo, b_hi = self.end_window(b)
                        free = end_free(flags[:, b_lo - lo : b_hi - lo], self.head)
                        valid = self.starts(b, free)[1]
                        counts[b] = free.sum() if valid is None else valid.sum()
        return counts

    # ------------------------------------------------------------------------------ schedule
    def epoch(self, epoch: int) -> Epoch:
        """This process's groups of blocks of ``epoch``, in reading order."""
        k, p = self.interleave, self.process_count
        if not self.shuffle:  # block by block
            runs = [list(range(self.n_blocks))] if self.n_blocks else []
        else:
            runs = []
            for s in self.sources:
                for g in range(s.n_row_groups):
                    base = s.first + g * s.n_time
                    for t in range(0, s.n_time, self.run_blocks):
                        runs.append(
                            list(range(base + t, base + min(t + self.run_blocks, s.n_time)))
                        )
            order = np.random.default_rng([self.seed, epoch]).permutation(len(runs))
            runs = [runs[int(i)] for i in order]
        parts: dict[int, tuple[int, int]] = {}
        if p > 1 and self.counts is not None:
            runs, parts = self._share(runs, self.counts)
        if not self.shuffle:
            order_ = [b for run in runs for b in run]
            return Epoch([order_[i : i + k] for i in range(0, len(order_), k)], parts)
        pending = collections.deque(runs)
        lanes: list[collections.deque[int]] = []
        groups: list[Group] = []
        while True:
            lanes = [lane for lane in lanes if lane]
            while len(lanes) < k and pending:
                lanes.append(collections.deque(pending.popleft()))
            if not lanes:
                return Epoch(groups, parts)
            groups.append([lane.popleft() for lane in lanes])

    def _share(
        self, runs: list[list[int]], counts_of: np.ndarray
    ) -> tuple[list[list[int]], dict[int, tuple[int, int]]]:
        """This process's part of the epoch's ``runs``: the sequences ``[p * q, (p + 1) *
        q)`` of their order (see the module docstring), as runs, and the blocks of which it
        takes a part only."""
        order = np.array([b for run in runs for b in run], np.int64)
        run_of = np.repeat(np.arange(len(runs)), [len(run) for run in runs])
        counts = counts_of[order]
        ends = np.cumsum(counts)
        begins = ends - counts
        q = int(ends[-1]) // self.process_count if ends.size else 0
        lo, hi = self.process_index * q, (self.process_index + 1) * q
        mine: list[list[int]] = []
        parts: dict[int, tuple[int, int]] = {}
        last_run = -1
        for i in np.flatnonzero((begins < hi) & (ends > lo)):
            b, a, e = int(order[i]), max(lo, int(begins[i])), min(hi, int(ends[i]))
            if (a, e) != (int(begins[i]), int(ends[i])):
                parts[b] = (a - int(begins[i]), e - int(begins[i]))
            if run_of[i] != last_run:
                mine.append([])
                last_run = int(run_of[i])
            mine[-1].append(b)
        return mine, parts


def end_flags(arrays: list[np.ndarray]) -> np.ndarray:
    """``[rows, time]``: an episode ends there (any element of any of the ``arrays``, each
    ``[rows, time, ...]``, is set)."""
    flags = np.zeros(arrays[0].shape[:2], bool)
    for part in arrays:
        flags |= part.reshape(part.shape[0], part.shape[1], -1).any(axis=2)
    return flags


def end_free(flags: np.ndarray, head: int) -> np.ndarray:
    """``[rows, n]`` from ``flags`` ``[rows, n + head - 1]`` (the episode ends from a block's
    first candidate start): no end in the first ``head`` steps of the window at each start."""
    count = flags.shape[1] - head + 1
    csum = np.zeros((flags.shape[0], flags.shape[1] + 1), np.int64)
    np.cumsum(flags, axis=1, out=csum[:, 1:])
    return np.asarray(csum[:, head : head + count] == csum[:, :count])


def check_stream_memory(
    lay: Layout,
    global_batch: int,
    prefetch: int,
    epochs: int | None,
    items_bytes: int,
    stack: int | None = None,
) -> None:
    """Refuse, before anything is allocated, a stream that would hold more than the
    machine's memory: the groups of blocks read ahead plus the items cut ahead
    (``items_bytes``)."""
    group_bytes = min(lay.interleave, max(1, lay.n_blocks)) * lay.block_rows * lay.seg
    ahead = prefetch
    if epochs is not None:  # never more groups than the epochs have
        ahead = min(ahead, epochs * lay.n_blocks)
    stacked = "" if stack is None else f", stack={stack}"
    check_memory(
        f"as_dataset(sample_batch_size={global_batch}, sequence_length={lay.seq}, "
        f"prefetch={prefetch}, interleave={lay.interleave}{stacked})",
        (1 + ahead) * group_bytes * lay.step_bytes + items_bytes,
        "lower sample_batch_size, "
        + ("stack, " if stack is not None else "")
        + "prefetch, interleave or block_timesteps",
    )
