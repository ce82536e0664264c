"""Streaming reads for vaults larger than memory: batches of sequences, and sub-buffer windows.

:func:`as_dataset` cuts the data into *blocks*: a group of rows (all of them unless that makes
a block too big) x a range of timesteps made of whole time chunks, so a block costs what its
bytes cost to decode. It reads blocks ahead of the consumer with TensorStore's asynchronous
reads (decoding runs on TensorStore's threads, outside the GIL) and cuts batches of sequences
out of the resident blocks on one background thread, which hands them over through a bounded
queue. Memory is about ``(1 + prefetch) x interleave`` blocks plus a few batches, whatever the
size of the vault.

Which sequences an epoch yields: every start ``(row, t)`` with ``t % stride == 0`` whose window
``[t, t + sequence_length)`` lies inside the committed data, does not straddle a recorded gap
(:attr:`Vault.gaps`: the data on either side is not consecutive) and, with
``episode_aware=True``, holds no episode end (done or truncated) before its last step. Each
such start is yielded exactly once per epoch. The block of time range ``[b*B, (b+1)*B)`` owns
the starts in ``[b*B - (L-1), (b+1)*B - (L-1))`` of its rows (``L`` is the sequence length), so
it needs the ``L - 1`` timesteps before it (its *head*): they are copied from the block before
it when that one was read just before (always without shuffling), else read from disk.

Shuffling (``shuffle=True``) permutes, per epoch, the order of *runs* of ``run_blocks``
consecutive blocks; ``interleave`` runs are read side by side and each batch is drawn from one
block of each, in random order. Only the first block of a run reads its head from disk, so a
run of several blocks keeps that extra decoding small. Everything random comes from
``numpy.random.default_rng([seed, epoch, ...])`` on the one producer thread, so the batches and
their order depend only on the arguments, never on thread timing.

:func:`iter_windows` yields successive (or shuffled) windows of ``window`` timesteps as
trajectory-buffer states, reading the next ones in the background.
"""

from __future__ import annotations

import collections
import functools
import itertools
import math
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, NamedTuple, TypeVar

import numpy as np
import tensorstore as ts

from vault import _read, _structure
from vault._errors import VaultReadError
from vault._prefetch import Stream
from vault._snapshot import Snapshot
from vault._stream_args import bool_arg, check_memory, episode_end_leaves, int_arg, selection

T = TypeVar("T")

DEFAULT_BLOCK_BYTES = 32 << 20  # raw bytes of one block (of the leaves read)
BATCH_QUEUE_BYTES = 4 << 20  # batches cut ahead of the consumer: 2 to 16, about this much
HEAD_OVERHEAD = 1 / 8  # default run length keeps the extra head decoding below this share
ZERO_COPY_BYTES = 256 << 10  # batch leaves this large are handed to JAX without a copy
PACK_BYTES = 2 << 20  # small batches are cut and handed over in packs (one gather per leaf)
MAX_PACK = 64  # of at most this many batches
_POLL_S = 0.05


@functools.cache
def _identity() -> Callable[[Any], Any]:
    import jax

    return jax.jit(lambda xs: xs)


class StreamBatch(NamedTuple):
    """One batch from :func:`as_dataset`.

    ``experience``: the vault's structure (or ``{path: array}`` when ``leaves`` was given) with
    leaves ``[batch, sequence_length, ...]``. ``row`` and ``start`` (int64 numpy, ``[batch]``)
    say where each sequence comes from: ``vault.read_numpy(rows=[row[i]], start=start[i],
    stop=start[i] + sequence_length)``. ``epoch`` counts from 0.
    """

    experience: Any
    row: np.ndarray
    start: np.ndarray
    epoch: int


# ------------------------------------------------------------------------------- as_dataset
class _BlockGroup:
    """Blocks read side by side into one buffer per leaf ``[slots * block_rows, seg, ...]``:
    slot ``j`` holds rows ``[j * block_rows, ...)``; in each row, ``head`` timesteps before the
    block, then the block's timesteps."""

    def __init__(
        self, epoch: int, index: int, blocks: list[int], last: bool, buffers: list[np.ndarray]
    ) -> None:
        self.epoch = epoch
        self.index = index  # position in the epoch's schedule
        self.blocks = blocks
        self.last = last  # the epoch's last group
        self.buffers = buffers
        self.futures: list[tuple[str, Any]] = []
        self.carries: list[tuple[int, int]] = []  # (slot, block whose tail is its head)


class _PartialBatch:
    """A batch being filled (it may take sequences from several groups)."""

    def __init__(self, arrays: list[np.ndarray], size: int) -> None:
        self.arrays = arrays
        self.row = np.empty(size, np.int64)
        self.start = np.empty(size, np.int64)
        self.fill = 0


def batch_layout(shapes: list[tuple[int, ...]], dtypes: list[np.dtype]) -> list[int]:
    """Offsets of a batch's leaves in one buffer (each 64-byte aligned), then the total."""
    sizes = [
        -(-math.prod(shape) * dt.itemsize // 64) * 64
        for shape, dt in zip(shapes, dtypes, strict=False)
    ]
    return [0, *itertools.accumulate(sizes)]


def check_stream_memory(plan: _Plan) -> None:
    """Refuse, before anything is allocated, a stream that would hold more than the
    machine's memory: the groups of blocks read ahead plus the batches cut ahead."""
    group_bytes = min(plan.interleave, plan.n_blocks) * plan.block_rows * plan.seg
    ahead = plan.prefetch
    if plan.epochs is not None:  # never more groups than the epochs have
        ahead = min(ahead, plan.epochs * plan.n_blocks)
    held = (1 + ahead) * group_bytes * plan.step_bytes
    held += (plan.queue_depth + 1) * plan.batch_layout[-1]
    check_memory(
        f"as_dataset(sample_batch_size={plan.batch}, sequence_length={plan.seq}, "
        f"prefetch={plan.prefetch}, interleave={plan.interleave})",
        held,
        "lower sample_batch_size, prefetch, interleave or block_timesteps",
    )


class _Plan:
    """Everything :func:`as_dataset` decided, and the producer generator that follows it.

    A block is a group of rows (``block_rows`` of them) x a range of ``block`` timesteps;
    block ``id`` covers row group ``id // n_time`` and time block ``id % n_time``.
    """

    def __init__(
        self,
        snap: Snapshot,
        batch: int,
        seq: int,
        *,
        shuffle: bool,
        seed: int,
        prefetch: int,
        end_leaves: list[str],
        stride: int,
        block_timesteps: int | None,
        block_rows: int | None,
        interleave: int,
        run_blocks: int | None,
        rows: Sequence[int] | slice | None,
        leaves: Sequence[str] | None,
        epochs: int | None,
        drop_remainder: bool,
        device_put: bool,
        resume_at: tuple[int, int] = (0, 0),
    ) -> None:
        self.snap = snap
        self.first_epoch, self.skip = resume_at  # a checkpointed position: (epoch, batches)
        self.batch, self.seq, self.head = batch, seq, seq - 1
        self.shuffle, self.seed, self.prefetch = shuffle, seed, prefetch
        self.stride, self.interleave = stride, interleave
        self.epochs, self.drop_remainder, self.device_put = epochs, drop_remainder, device_put
        self.row_ids, self.names = selection(snap, rows, leaves)
        self.structured = leaves is None
        self._rebuild: Callable[[list[Any]], Any] | None = None  # set by the first batch
        self.end_leaves = list(end_leaves)
        self.read_names = self.names + [n for n in self.end_leaves if n not in self.names]
        self.out_count = len(self.names)
        self.length = snap.length
        if self.length < seq:
            raise VaultReadError(
                f"{snap.where}: sequences of {seq} timesteps need at least {seq} committed "
                f"timesteps per row; the vault has {self.length}"
            )
        specs = [snap.manifest.leaf(n) for n in self.read_names]
        self.items = [spec.shape for spec in specs]
        self.dtypes = [np.dtype(spec.dtype) for spec in specs]
        self.chunks = [spec.chunk for spec in specs]
        self.row_bytes = [
            math.prod(item) * dt.itemsize for item, dt in zip(self.items, self.dtypes, strict=True)
        ]
        self.step_bytes = sum(self.row_bytes)  # one row, one timestep, every leaf read
        self._choose_blocks(block_timesteps, block_rows, run_blocks)
        self.gap_at = np.array(
            [seam.at for seam in snap.commit.seams if 0 < seam.at < self.length], np.int64
        )
        self.structure = snap.manifest.structure
        batch_bytes = batch * seq * sum(self.row_bytes[: self.out_count])
        # small batches are cut ``pack`` at a time (one gather per leaf) and handed over together
        self.pack = max(1, min(MAX_PACK, PACK_BYTES // max(1, batch_bytes)))
        self.capacity = self.pack * batch
        self.batch_shapes = [(self.capacity, seq, *item) for item in self.items[: self.out_count]]
        self.batch_layout = batch_layout(self.batch_shapes, self.dtypes)
        self.queue_depth = max(2, min(16, BATCH_QUEUE_BYTES // max(1, self.batch_layout[-1])))
        check_stream_memory(self)
        self._steps = np.arange(seq, dtype=np.int64)
        self._tails: dict[int, list[np.ndarray]] = {}
        self._issued_blocks: list[int] = []

    def _choose_blocks(
        self, block_timesteps: int | None, block_rows: int | None, run_blocks: int | None
    ) -> None:
        """Block shape (rows x timesteps), counts, and the shuffled runs' length."""
        n_rows = len(self.row_ids)
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
        self.n_time = -(-self.length // self.block)
        self.n_row_groups = -(-n_rows // self.block_rows)
        self.n_blocks = self.n_time * self.n_row_groups
        self.seg = self.head + min(self.block, self.length)
        if run_blocks is None:
            dominant = chunk_time[heaviest]
            wasted = -(-self.head // dominant) * dominant if self.head else 0
            run_blocks = max(1, math.ceil(wasted / (HEAD_OVERHEAD * self.block)))
        self.run_blocks = int_arg("run_blocks", run_blocks, 1)

    # ------------------------------------------------------------------------- schedule
    def _schedule(self, epoch: int) -> list[list[int]]:
        """The groups of blocks of one epoch, in reading order."""
        k, nt = self.interleave, self.n_time
        if not self.shuffle:  # row group by row group, each in time order
            return [list(range(i, min(i + k, self.n_blocks))) for i in range(0, self.n_blocks, k)]
        run = self.run_blocks
        runs = [
            list(range(g * nt + s, g * nt + min(s + run, nt)))
            for g in range(self.n_row_groups)
            for s in range(0, nt, run)
        ]
        order = np.random.default_rng([self.seed, epoch]).permutation(len(runs))
        pending = collections.deque(runs[int(i)] for i in order)
        lanes: list[collections.deque[int]] = []
        groups: list[list[int]] = []
        while True:
            lanes = [lane for lane in lanes if lane]
            while len(lanes) < k and pending:
                lanes.append(collections.deque(pending.popleft()))
            if not lanes:
                return groups
            groups.append([lane.popleft() for lane in lanes])

    def _groups(self) -> Iterator[tuple[int, int, list[int], bool]]:
        epoch = self.first_epoch
        while self.epochs is None or epoch < self.epochs:
            groups = self._schedule(epoch)
            for i, blocks in enumerate(groups):
                yield epoch, i, blocks, i == len(groups) - 1
            epoch += 1

    # ------------------------------------------------------------------------- reading
    def _rows_of(self, block: int) -> tuple[int, int]:
        """The block's rows: ``row_ids[first : first + count]``."""
        first = block // self.n_time * self.block_rows
        return first, min(self.block_rows, len(self.row_ids) - first)

    def _times_of(self, block: int) -> tuple[int, int]:
        lo = block % self.n_time * self.block
        return lo, min(lo + self.block, self.length)

    def _read_into(
        self, group: _BlockGroup, j: int, block: int, col: int, lo: int, hi: int
    ) -> None:
        """Read timesteps ``[lo, hi)`` of the block's rows into slot ``j`` from column ``col``."""
        first, count = self._rows_of(block)
        ids = self.row_ids[first : first + count]
        contiguous = ids[-1] - ids[0] == count - 1 and bool(np.all(np.diff(ids) == 1))
        rows: Any = slice(int(ids[0]), int(ids[-1]) + 1) if contiguous else ids.tolist()
        names, views = _read.views(self.snap, rows, lo, hi, self.read_names)
        r0 = j * self.block_rows
        for buf, view, name in zip(group.buffers, views, names, strict=True):
            fut = ts.array(buf[r0 : r0 + count, col : col + hi - lo]).write(view)
            group.futures.append((name, fut))

    def _issue(self, epoch: int, index: int, blocks: list[int], last: bool) -> _BlockGroup:
        buffers = [
            _read.aligned_empty((len(blocks) * self.block_rows, self.seg, *item), dt)
            for item, dt in zip(self.items, self.dtypes, strict=True)
        ]
        group = _BlockGroup(epoch, index, blocks, last, buffers)
        previous = set(self._issued_blocks)
        for j, b in enumerate(blocks):
            lo, hi = self._times_of(b)
            self._read_into(group, j, b, self.head, lo, hi)
            if lo == 0 or self.head == 0:
                continue
            if b - 1 in blocks or b - 1 in previous:
                group.carries.append((j, b - 1))  # copied once the reads are done
            else:
                self._read_into(group, j, b, 0, lo - self.head, lo)
        self._issued_blocks = list(blocks)
        return group

    def _complete(self, group: _BlockGroup) -> None:
        """Wait for the group's reads; fill the heads carried over; keep the new tails."""
        for name, fut in group.futures:
            _read.result(self.snap, fut, name)
        group.futures.clear()
        h, rb = self.head, self.block_rows
        tails = {}
        for j, b in enumerate(group.blocks):
            if h and self._times_of(b)[1] < self.length:  # a full block: its tail is a head
                count = self._rows_of(b)[1]
                end = h + self.block
                tails[b] = [buf[j * rb : j * rb + count, end - h : end] for buf in group.buffers]
        for j, prev in group.carries:
            source = tails.get(prev) or self._tails[prev]
            for buf, part in zip(group.buffers, source, strict=True):
                buf[j * rb : j * rb + part.shape[0], :h] = part
        # Copies: the next group may need them after this group's buffers are released.
        self._tails = {b: [np.array(p) for p in parts] for b, parts in tails.items()}

    def _cancel(self, groups: collections.deque[_BlockGroup]) -> None:
        for group in groups:
            for _, fut in group.futures:
                fut.cancel()
        groups.clear()

    # ------------------------------------------------------------------------- sequences
    def _starts(self, group: _BlockGroup) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where each valid sequence of the group starts: flat indices into its buffers (seen
        as ``[slots * block_rows * seg]``), with its vault row and start time; slot by slot
        in time order (every row at ``t``, then ``t + 1``), or permuted with ``shuffle``."""
        h, seg, rb = self.head, self.seg, self.block_rows
        bases, rows, times = [], [], []
        for j, b in enumerate(group.blocks):
            lo, hi = self._times_of(b)
            s_lo = max(0, lo - h)
            t = np.arange(s_lo, hi - h, dtype=np.int64)
            col = h + (t - lo)  # column of each start in the slot's rows
            first, count = self._rows_of(b)
            row_off = (j * rb + np.arange(count, dtype=np.int64)) * seg
            row_id = self.row_ids[first : first + count]
            keep = None
            if self.stride > 1:
                keep = t % self.stride == 0
            for a in self.gap_at:  # a window [t, t + seq) must not contain the seam a-1 | a
                apart = (t + h < a) | (t >= a)
                keep = apart if keep is None else keep & apart
            mask = None if keep is None else np.broadcast_to(keep, (row_off.size, t.size))
            if self.end_leaves and h:
                free = self._end_free(group, j, b, int(col[0]), t.size)
                mask = free if mask is None else mask & free
            if mask is None:
                bases.append((col[:, None] + row_off[None, :]).ravel())
                rows.append(np.tile(row_id, t.size))
                times.append(np.repeat(t, count))
            else:
                q, r = np.nonzero(mask.T)
                bases.append(row_off[r] + col[q])
                rows.append(row_id[r])
                times.append(t[q])
        base, row, start = (
            x[0] if len(x) == 1 else np.concatenate(x) for x in (bases, rows, times)
        )
        if self.shuffle:
            rng = np.random.default_rng([self.seed, group.epoch, group.index, 1])
            order = rng.permutation(base.size)
            base, row, start = base[order], row[order], start[order]
        return base, row, start

    def _end_free(
        self, group: _BlockGroup, j: int, block: int, first: int, count: int
    ) -> np.ndarray:
        """``[rows, count]``: no episode end in the first ``seq - 1`` steps of the windows that
        start at columns ``first, first + 1, ...`` of slot ``j``."""
        h, r0 = self.head, j * self.block_rows
        n_rows = self._rows_of(block)[1]
        flags = np.zeros((n_rows, count + h - 1), bool)
        for name in self.end_leaves:
            buf = group.buffers[self.read_names.index(name)]
            part = buf[r0 : r0 + n_rows, first : first + count + h - 1]
            flags |= part.reshape(part.shape[0], part.shape[1], -1).any(axis=2)
        csum = np.zeros((flags.shape[0], flags.shape[1] + 1), np.int64)
        np.cumsum(flags, axis=1, out=csum[:, 1:])
        return np.asarray(csum[:, h : h + count] == csum[:, :count])

    def _new_batch(self) -> _PartialBatch:
        """Output arrays of one pack of batches, carved 64-byte aligned out of one allocation
        (JAX adopts aligned buffers without a copy)."""
        raw = np.empty(self.batch_layout[-1] + 64, np.uint8)
        first = (-raw.ctypes.data) % 64
        arrays = [
            np.ndarray(shape, dt, raw, first + o)
            for o, shape, dt in zip(
                self.batch_layout, self.batch_shapes, self.dtypes[: self.out_count], strict=False
            )
        ]
        return _PartialBatch(arrays, self.capacity)

    def _fill(self, pending: _PartialBatch, flat: list[np.ndarray], base: np.ndarray) -> None:
        """Copy the sequences starting at ``base`` (of the group's buffers ``flat``, seen as
        ``[rows * width, ...]``) into the pending batch."""
        idx = base[:, None] + self._steps if self.seq > 1 else base[:, None]
        lo, hi = pending.fill, pending.fill + base.size
        for out, leaf in zip(pending.arrays, flat, strict=True):
            np.take(leaf, idx, axis=0, out=out[lo:hi], mode="clip")

    def _finish(self, pending: _PartialBatch, epoch: int, last: bool) -> list[StreamBatch]:
        """The pack's batches: its full ones, and at the end of an epoch (``last``) the
        incomplete rest unless ``drop_remainder``."""
        b = self.batch
        n = pending.fill if last and not self.drop_remainder else pending.fill // b * b
        if n == 0:
            return []
        arrays: list[Any] = [a[:n] for a in pending.arrays]
        rows, starts = pending.row[:n], pending.start[:n]
        out = []
        for i in range(0, n, b):
            leaves = [a[i : i + b] for a in arrays]
            if self.device_put:
                leaves = self._to_device(leaves)
            if not self.structured:
                experience: Any = dict(zip(self.names, leaves, strict=True))
            elif self._rebuild is not None:
                experience = self._rebuild(leaves)
            else:
                experience = _structure.build(self.structure, leaves)
                self._rebuild = _rebuilder(experience, leaves)
            leaves.clear()
            out.append(StreamBatch(experience, rows[i : i + b], starts[i : i + b], epoch))
        arrays.clear()
        return out

    def _to_device(self, arrays: list[np.ndarray]) -> list[Any]:
        """JAX arrays of a batch. ``jax.device_put`` adopts a large leaf without a copy on CPU
        but costs about 15 us per leaf; small leaves go through one jitted identity instead
        (JAX's C++ dispatch: one call for all of them, at the price of copying them)."""
        import jax

        out: list[Any] = list(arrays)
        small = [i for i, a in enumerate(arrays) if a.nbytes < ZERO_COPY_BYTES]
        large = [i for i, a in enumerate(arrays) if a.nbytes >= ZERO_COPY_BYTES]
        if large:
            moved = jax.device_put([arrays[i] for i in large])
            for i, x in zip(large, moved, strict=True):
                out[i] = x
        if small:
            for i, x in zip(small, _identity()([arrays[i] for i in small]), strict=True):
                out[i] = x
        return out

    # ------------------------------------------------------------------------- producer
    def batches(self) -> Generator[list[StreamBatch], None, None]:
        """The batches a pack at a time (non-empty lists), less the ``skip`` first ones (a
        resumed stream: cut again, never handed over)."""
        skip = self.skip
        for pack in self._produce():
            if skip >= len(pack):
                skip -= len(pack)
                continue
            yield pack[skip:]
            skip = 0

    def _produce(self) -> Generator[list[StreamBatch], None, None]:
        """The producer: yields the batches a pack at a time (non-empty lists)."""
        groups = self._groups()
        inflight: collections.deque[_BlockGroup] = collections.deque()

        def issue_next() -> bool:
            nxt = next(groups, None)
            if nxt is None:
                return False
            inflight.append(self._issue(*nxt))
            return True

        pending: _PartialBatch | None = None
        epoch_batches = 0
        try:
            while inflight or issue_next():
                group = inflight.popleft()
                while len(inflight) < self.prefetch and issue_next():
                    pass  # the next groups decode while this one is cut into batches
                try:
                    self._complete(group)
                except Exception:
                    if pending is not None:  # hand over the whole batches cut before it
                        early, pending = self._finish(pending, group.epoch, False), None
                        if early:
                            yield early
                    raise
                base, row, start = self._starts(group)
                flat = [buf.reshape(-1, *buf.shape[2:]) for buf in group.buffers[: self.out_count]]
                pos = 0
                while pos < base.size:
                    if pending is None:
                        pending = self._new_batch()
                    take = min(self.capacity - pending.fill, base.size - pos)
                    self._fill(pending, flat, base[pos : pos + take])
                    fill = slice(pending.fill, pending.fill + take)
                    pending.row[fill] = row[pos : pos + take]
                    pending.start[fill] = start[pos : pos + take]
                    pending.fill += take
                    pos += take
                    if pending.fill == self.capacity:
                        batches, pending = self._finish(pending, group.epoch, False), None
                        epoch_batches += len(batches)
                        yield batches
                del group.buffers[:], flat[:]  # release the block before the next is read
                if group.last:
                    if pending is not None:
                        batches = self._finish(pending, group.epoch, True)
                        if batches:
                            epoch_batches += len(batches)
                            yield batches
                    pending = None
                    if epoch_batches == 0 and self.epochs is None:
                        raise VaultReadError(
                            f"{self.snap.where}: an epoch yields no batch of "
                            f"{self.batch} (too few valid sequences of {self.seq} timesteps); "
                            "repeating forever would never yield one"
                        )
                    epoch_batches = 0
        finally:
            self._cancel(inflight)


class DatasetStream(Stream[StreamBatch]):
    """The iterator :func:`as_dataset` returns, with the layout it chose (ints, for memory
    planning): ``block_timesteps``, ``block_rows``, ``block_bytes`` (raw bytes of one block
    of the selected leaves), ``run_blocks``, ``interleave``, ``prefetch`` and ``length`` (the
    committed timesteps per row it streams)."""

    def __init__(self, plan: _Plan, args: dict[str, Any] | None = None) -> None:
        super().__init__(plan.batches(), plan.queue_depth if plan.prefetch else 0, packed=True)
        self._args = args or {}  # how it was made, for state()
        self._where, self._commit = plan.snap.where, plan.snap.commit
        self._position = plan.first_epoch, plan.skip  # of the next batch handed over
        self.block_timesteps = plan.block
        self.block_rows = plan.block_rows
        self.block_bytes = plan.block * plan.block_rows * plan.step_bytes
        self.run_blocks = plan.run_blocks
        self.interleave = plan.interleave
        self.prefetch = plan.prefetch
        self.length = plan.length

    def __next__(self) -> StreamBatch:
        batch, (epoch, count) = super().__next__(), self._position
        self._position = (batch.epoch, count + 1 if batch.epoch == epoch else 1)
        return batch

    def state(self) -> dict[str, Any]:
        """The position as a small JSON-serialisable dict (vault, pinned commit, arguments,
        epoch and batch): :func:`vault.resume_stream` goes on exactly there, in any process."""
        from vault._stream_state import state_of

        return state_of(self._where, self._commit, self._args, self._position)


def as_dataset(
    snap: Snapshot,
    sample_batch_size: int,
    sequence_length: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    prefetch: int = 2,
    episode_aware: bool = False,
    stride: int = 1,
    block_timesteps: int | None = None,
    block_rows: int | None = None,
    interleave: int = 1,
    run_blocks: int | None = None,
    rows: Sequence[int] | slice | None = None,
    leaves: Sequence[str] | None = None,
    epochs: int | None = 1,
    drop_remainder: bool = True,
    device_put: bool | None = None,
    resume_at: tuple[int, int] = (0, 0),
) -> DatasetStream:
    """Batches of sequences streamed from disk, for vaults larger than memory.

    Yields :class:`StreamBatch` items: ``experience`` has leaves ``[sample_batch_size,
    sequence_length, ...]`` (JAX or numpy arrays: see ``device_put``), plus the ``row`` and
    ``start`` of every sequence. An epoch yields every valid start exactly once (see the
    module docstring: inside the committed length as of this call, ``t % stride == 0``, not
    across a recorded gap, and with ``episode_aware`` no episode end before a window's last
    step); with ``drop_remainder`` the last incomplete batch of each epoch is dropped, else
    yielded smaller. ``epochs=None`` repeats forever, reshuffling each epoch.

    Args:
        shuffle: permute, per epoch, the order of runs of blocks and the order of sequences
            inside the resident blocks (without: block by block in time order, and inside a
            block all its rows at ``t``, then ``t + 1``).
        seed: the same seed gives the same batches in the same order.
        prefetch: groups of blocks read ahead while the current one is cut into batches
            (0: read on demand, no background thread).
        episode_aware: needs a vault with an episode index (``done_leaf`` given at creation),
            else :class:`VaultReadError`.
        stride: only starts ``t`` with ``t % stride == 0`` (``sequence_length``: windows that
            do not overlap).
        block_timesteps, block_rows: the block shape (default: about 32 MiB of the selected
            leaves, a whole number of the largest leaf's time chunks, all selected rows unless
            that is more than twice the target). Without ``shuffle``, row groups come one
            after the other.
        interleave: blocks resident together; each batch is drawn from all of them.
            More decorrelates batches, at ``interleave`` times the memory.
        run_blocks: with ``shuffle``, consecutive blocks read in a row before jumping
            elsewhere (default: enough that re-reading the first block's head costs at most
            1/8 more decoding; 1 when ``sequence_length`` is 1).
        rows, leaves: as :meth:`Vault.read_numpy` (``leaves`` gives a dict ``{path: array}``).
        resume_at: ``(epoch, batch)`` to start from (set by :func:`vault.resume_stream` from
            :meth:`DatasetStream.state`; the batches before it are cut again, not yielded).
        device_put: ``True``: the leaves are JAX arrays, put on the default device by the
            background thread (on a GPU or TPU the transfer overlaps training). ``False``:
            numpy arrays, which JAX functions take as they are. ``None``
            (default): ``True`` when JAX's default backend is an accelerator, ``False`` on
            CPU, where a JAX array made ahead buys no overlap and costs about 4 us per leaf
            (the README's streaming benchmark).

    Memory: about ``(1 + prefetch) * interleave`` blocks (``DatasetStream.block_bytes`` is
    one), TensorStore's buffers for the chunks being decoded, and 2 to 16 batches (about
    4 MiB) cut ahead of the consumer; a stream that would hold more than the machine's memory
    is refused (:class:`VaultReadError`) before anything is allocated. Every argument is
    checked at the call (a wrong type is :class:`VaultArgumentError`, flags must be bools).
    The returned :class:`DatasetStream` is an iterator and a context manager; ``close()`` (or
    leaving the ``with`` block, or dropping it) stops its thread. Errors met while reading
    (for example :class:`VaultCorruptError`) are raised by ``next()``.
    """
    args = dict(locals())
    del args["snap"], args["resume_at"]
    batch = int_arg("sample_batch_size", sample_batch_size, 1)
    seq = int_arg("sequence_length", sequence_length, 1)
    if epochs is not None:
        epochs = int_arg("epochs", epochs, 0)
    plan = _Plan(
        snap,
        batch,
        seq,
        shuffle=bool_arg("shuffle", shuffle),
        seed=int_arg("seed", seed, 0),
        prefetch=int_arg("prefetch", prefetch, 0),
        end_leaves=episode_end_leaves(snap) if bool_arg("episode_aware", episode_aware) else [],
        stride=int_arg("stride", stride, 1),
        block_timesteps=block_timesteps,
        block_rows=block_rows,
        interleave=int_arg("interleave", interleave, 1),
        run_blocks=run_blocks,
        rows=rows,
        leaves=leaves,
        epochs=epochs,
        drop_remainder=bool_arg("drop_remainder", drop_remainder),
        device_put=_on_device() if device_put is None else bool_arg("device_put", device_put),
        resume_at=resume_at,
    )
    return DatasetStream(plan, args)


def _rebuilder(tree: Any, leaves: list[Any]) -> Callable[[list[Any]], Any] | None:
    """Rebuild trees shaped like ``tree`` (just built from ``leaves``) through JAX's tree
    definition, about 3x cheaper per batch than :func:`_structure.build`; None when JAX does
    not see exactly those leaves in it (a class JAX does not know as a pytree)."""
    import jax

    flat, treedef = jax.tree.flatten(tree)
    where = {id(x): k for k, x in enumerate(leaves)}
    order = [where.get(id(x), -1) for x in flat]
    if len(where) != len(leaves) or sorted(order) != list(range(len(leaves))):
        return None
    return lambda values: jax.tree.unflatten(treedef, [values[k] for k in order])


def _on_device() -> bool:
    """Whether JAX's default backend is an accelerator (batches are then put on it)."""
    import jax

    return bool(jax.default_backend() != "cpu")
