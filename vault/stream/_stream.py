"""Streaming reads for vaults larger than memory: batches of sequences.

:func:`as_dataset` streams one snapshot, or several of one structure (the shards of a
dataset), cut into *blocks*: a group of rows x a range of timesteps made of whole time chunks,
so a block costs what its bytes cost to decode (``vault/stream/_layout.py`` says which blocks
exist, which starts each owns, the reading order of an epoch and each process's share of
it). It reads blocks ahead of the consumer with TensorStore's asynchronous reads (decoding
runs on TensorStore's threads, outside the GIL) and cuts batches of sequences out of the
resident blocks on one background thread, which hands them over through a bounded queue.
Memory is about ``(1 + prefetch) x interleave`` blocks plus a few batches, whatever the size
of the data.

Which sequences an epoch yields: every start ``(source, row, t)`` with ``t % stride == 0``
whose window ``[t, t + sequence_length)`` lies inside the source's committed data, does not
straddle a seam (:attr:`Vault.seams`: the data on either side is not consecutive) and, with
``episode_aware=True``, holds no episode end (done or truncated) before its last step. Each
such start is yielded exactly once per epoch (with several processes: by exactly one of them,
less fewer than ``process_count`` dropped, see ``vault/stream/_layout.py``). A block needs
the ``L - 1`` timesteps before it (its *head*, ``L`` the sequence length): they are copied
from the block before it when that one was read just before (always without shuffling), else
read from disk.

Shuffling (``shuffle=True``) permutes, per epoch, the order of *runs* of ``run_blocks``
consecutive blocks; ``interleave`` runs are read side by side and each batch is drawn from one
block of each, in random order. Only the first block of a run reads its head from disk, so a
run of several blocks keeps that extra decoding small. Everything random comes from
``numpy.random.default_rng([seed, epoch, ...])`` on the one producer thread, so the batches and
their order depend only on the arguments, never on thread timing.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Generator, Sequence
from typing import Any

import numpy as np

from vault import _args
from vault._args import once
from vault._errors import VaultArgumentError, VaultReadError
from vault.commits._snapshot import Snapshot
from vault.format import _structure
from vault.read import _read
from vault.read._read import check_narrowing
from vault.stream._args import bool_arg, end_leaves_of, int_arg, resume_arg, sources_arg
from vault.stream._batch import StreamBatch
from vault.stream._buffers import BlockGroup, PartialBatch, batch_layout
from vault.stream._device_cut import DeviceGroup, on_accelerator, rebuilder, to_device, wide_windows
from vault.stream._hosts import check_sharding, local_batch_size, process_arg, to_global
from vault.stream._layout import Layout, check_stream_memory, end_flags, end_free
from vault.stream._prefetch import Stream
from vault.stream._state import state_of

BATCH_QUEUE_BYTES = 4 << 20  # batches cut ahead of the consumer: 2 to 16, about this much
PACK_BYTES = 2 << 20  # small batches are cut and handed over in packs (one gather per leaf)
MAX_PACK = 64  # of at most this many batches


# ------------------------------------------------------------------------------- as_dataset
class _Plan:
    """The producer of :func:`as_dataset`: it follows the layout's schedule, reads the blocks
    and cuts this process's batches (``batch`` sequences each; ``global_batch`` over every
    process) out of them."""

    def __init__(
        self,
        layout: Layout,
        batch: int,
        global_batch: int,
        *,
        prefetch: int,
        structured: bool,
        epochs: int | None,
        drop_remainder: bool,
        device_put: bool,
        sharding: Any = None,
        resume_at: tuple[int, int] = (0, 0),
        cut_on_device: bool = False,
        stack: int | None = None,
    ) -> None:
        self.layout = lay = layout
        self.cut_on_device = cut_on_device
        self.stack = stack  # batches per item, stacked on a new leading axis (None: one)
        self.first_epoch, self.skip = resume_at  # a checkpointed position: (epoch, batches)
        self.batch, self.global_batch, self.seq, self.head = batch, global_batch, lay.seq, lay.head
        self.shuffle, self.seed, self.prefetch = lay.shuffle, lay.seed, prefetch
        self.epochs, self.drop_remainder, self.device_put = epochs, drop_remainder, device_put
        self.sharding = sharding
        self.names, self.read_names, self.end_leaves = lay.names, lay.read_names, lay.end_leaves
        self.structured = structured
        self._rebuild: Callable[[list[Any]], Any] | None = None  # set by the first batch
        self.out_count = len(self.names)
        self.items, self.dtypes = lay.items, lay.dtypes
        # a 64-bit integer leaf: JAX batches are checked for values beyond 32 bits
        self.wide = any(np.dtype(d).kind in "iu" and np.dtype(d).itemsize == 8 for d in lay.dtypes)
        self.structure = lay.sources[0].snap.manifest.structure
        # an item: a batch, or a stack of ``stack`` batches (``unit`` sequences)
        self.unit = batch * (stack or 1)
        unit_bytes = self.unit * lay.seq * sum(lay.row_bytes[: self.out_count])
        # small items are cut ``pack`` at a time (one gather per leaf) and handed over together;
        # on the device, where the host cuts only the items that span two groups, one by one
        self.pack = max(1, min(MAX_PACK, PACK_BYTES // max(1, unit_bytes)))
        self.capacity = self.unit if cut_on_device else self.pack * self.unit
        self.batch_shapes = [
            (self.capacity, lay.seq, *item) for item in self.items[: self.out_count]
        ]
        self.batch_layout = batch_layout(self.batch_shapes, self.dtypes)
        self.queue_depth = max(2, min(16, BATCH_QUEUE_BYTES // max(1, self.batch_layout[-1])))
        check_stream_memory(
            lay, global_batch, prefetch, epochs, (self.queue_depth + 1) * self.batch_layout[-1],
            stack,
        )  # fmt: skip
        self._steps = np.arange(lay.seq, dtype=np.int64)
        self._tails: dict[int, list[np.ndarray]] = {}
        self._issued_blocks: list[int] = []
        self._skip = self.skip  # batches still to pass over (a resumed stream)
        self._epoch_items = 0  # items cut in the current epoch

    def _groups(
        self,
    ) -> Generator[tuple[int, int, list[int], dict[int, tuple[int, int]], bool], None, None]:
        epoch = self.first_epoch
        while self.epochs is None or epoch < self.epochs:
            groups, parts = self.layout.epoch(epoch)
            if not groups:
                raise self._no_batch()
            for i, blocks in enumerate(groups):
                yield epoch, i, blocks, parts, i == len(groups) - 1
            epoch += 1

    def _no_batch(self) -> VaultReadError:
        sources = self.layout.sources
        where = sources[0].snap.where if len(sources) == 1 else f"{len(sources)} sources"
        share = " (this process's share)" if self.layout.process_count > 1 else ""
        return VaultReadError(
            f"{where}: an epoch{share} yields no batch of {self.batch} (too few valid "
            f"sequences of {self.seq} timesteps); "
            + (
                "repeating forever would never yield one"
                if self.epochs is None
                else "use a smaller batch, or drop_remainder=False for the incomplete one"
                if self.batch > 1 and self.drop_remainder
                else "no sequence of them lies between two seams"
                f"{' or episode ends' if self.end_leaves else ''}: use shorter sequences"
            )
        )

    # ------------------------------------------------------------------------- reading
    def _read_into(self, group: BlockGroup, j: int, block: int, col: int, lo: int, hi: int) -> None:
        """Read timesteps ``[lo, hi)`` of the block's rows into slot ``j`` from column ``col``."""
        info = self.layout.block_of(block)
        snap = self.layout.sources[info.source].snap
        ids = self.layout.sources[info.source].row_ids[info.first_row : info.first_row + info.rows]
        count = info.rows
        contiguous = ids[-1] - ids[0] == count - 1 and bool(np.all(np.diff(ids) == 1))
        rows: Any = slice(int(ids[0]), int(ids[-1]) + 1) if contiguous else ids.tolist()
        names, views = _read.views(snap, rows, lo, hi, self.read_names)
        r0 = j * self.layout.block_rows
        for buf, view, name in zip(group.buffers, views, names, strict=True):
            dest = buf[r0 : r0 + count, col : col + hi - lo]
            future = _read.read_into(snap, name, dest, view, rows, lo, hi)
            group.futures.append((snap, name, future))

    def _issue(
        self,
        epoch: int,
        index: int,
        blocks: list[int],
        parts: dict[int, tuple[int, int]],
        last: bool,
    ) -> BlockGroup:
        lay = self.layout
        buffers = [
            _read.aligned_empty((len(blocks) * lay.block_rows, lay.seg, *item), dt)
            for item, dt in zip(self.items, self.dtypes, strict=True)
        ]
        mine = {b: parts[b] for b in blocks if b in parts}
        group = BlockGroup(epoch, index, blocks, mine, last, buffers)
        previous = set(self._issued_blocks)
        for j, b in enumerate(blocks):
            info = lay.block_of(b)
            self._read_into(group, j, b, self.head, info.lo, info.hi)
            if info.lo == 0 or self.head == 0:
                continue
            if b - 1 in blocks or b - 1 in previous:
                group.carries.append((j, b - 1))  # copied once the reads are done
            else:
                self._read_into(group, j, b, 0, info.lo - self.head, info.lo)
        self._issued_blocks = list(blocks)
        return group

    def _complete(self, group: BlockGroup) -> None:
        """Wait for the group's reads; fill the heads carried over; keep the new tails."""
        for snap, name, fut in group.futures:
            _read.result(snap, fut, name)
        group.futures.clear()
        lay = self.layout
        h, rb = self.head, lay.block_rows
        tails = {}
        for j, b in enumerate(group.blocks):
            info = lay.block_of(b)
            if h and info.hi < lay.sources[info.source].length:  # a full block: its tail is a head
                end = h + lay.block
                tails[b] = [
                    buf[j * rb : j * rb + info.rows, end - h : end] for buf in group.buffers
                ]
        for j, prev in group.carries:
            source = tails.get(prev) or self._tails[prev]
            for buf, part in zip(group.buffers, source, strict=True):
                buf[j * rb : j * rb + part.shape[0], :h] = part
        # Copies: the next group may need them after this group's buffers are released.
        self._tails = {b: [np.array(p) for p in parts] for b, parts in tails.items()}

    def _cancel(self, groups: collections.deque[BlockGroup]) -> None:
        for group in groups:
            for _, _, fut in group.futures:
                fut.cancel()
        groups.clear()

    # ------------------------------------------------------------------------- sequences
    def _starts(self, group: BlockGroup) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Where each of the group's sequences starts: flat indices into its buffers (seen as
        ``[slots * block_rows * seg]``), with its source, vault row and start time; slot by
        slot in canonical order (every row at ``t``, then ``t + 1``), or permuted with
        ``shuffle``."""
        lay = self.layout
        h, seg, rb = self.head, lay.seg, lay.block_rows
        bases, sources, rows, times = [], [], [], []
        for j, b in enumerate(group.blocks):
            info = lay.block_of(b)
            free = None
            if self.end_leaves and h:
                w_lo, w_hi = lay.end_window(b)
                c0 = h + w_lo - info.lo
                names = self.read_names
                ends = [
                    group.buffers[names.index(n)][j * rb : j * rb + info.rows]
                    for n in self.end_leaves
                ]
                free = end_free(end_flags([e[:, c0 : c0 + w_hi - w_lo] for e in ends]), h)
            t, mask = lay.starts(b, free)
            col = h + (t - info.lo)  # column of each start in the slot's rows
            row_off = (j * rb + np.arange(info.rows, dtype=np.int64)) * seg
            row_id = lay.sources[info.source].row_ids[info.first_row : info.first_row + info.rows]
            if mask is None:
                base = (col[:, None] + row_off[None, :]).ravel()
                row = np.tile(row_id, t.size)
                time = np.repeat(t, info.rows)
            else:
                q, r = np.nonzero(mask.T)
                base, row, time = row_off[r] + col[q], row_id[r], t[q]
            if b in group.parts:  # another process takes the rest of this block
                begin, end = group.parts[b]
                base, row, time = base[begin:end], row[begin:end], time[begin:end]
            bases.append(base)
            rows.append(row)
            times.append(time)
            sources.append(np.full(base.size, info.source, np.int64))
        base, source, row, start = (
            x[0] if len(x) == 1 else np.concatenate(x) for x in (bases, sources, rows, times)
        )
        if self.shuffle:
            rng = np.random.default_rng([self.seed, group.epoch, group.index, 1])
            order = rng.permutation(base.size)
            base, source, row, start = base[order], source[order], row[order], start[order]
        return base, source, row, start

    def _check_narrowing(self, arrays: list[np.ndarray]) -> None:
        """JAX without 64-bit types stores a 64-bit integer leaf as 32 bits: values beyond
        would wrap silently, so such a batch is refused (``read.check_narrowing``)."""
        if self.wide and not _jax_x64():
            where = self.layout.sources[0].snap.where
            check_narrowing(where, self.names, arrays[: len(self.names)])

    def _finish(self, pending: PartialBatch, epoch: int, last: bool) -> list[StreamBatch]:
        """The pack's items: its whole ones, and at the end of an epoch (``last``) a short
        stack of the whole batches left, then the incomplete rest unless ``drop_remainder``."""
        b, unit, fill = self.batch, self.unit, pending.fill
        if self.device_put or self.cut_on_device or self.sharding is not None:
            self._check_narrowing([a[:fill] for a in pending.arrays])
        whole = fill // b * b if last else fill // unit * unit
        n = fill if last and not self.drop_remainder else whole
        out, i = [], 0
        while i < n:
            size = min(unit, whole - i) if i < whole else n - i
            part = slice(i, i + size)
            leaves: list[Any] = [a[part] for a in pending.arrays]
            meta = [pending.row[part], pending.start[part], pending.source[part]]
            if self.stack is not None:  # views: the pack was cut straight into its stacks
                k = max(1, size // b)
                leaves = [a.reshape(k, size // k, *a.shape[1:]) for a in leaves]
                meta = [m.reshape(k, size // k) for m in meta]
            if self.sharding is not None:
                leaves = to_global(self.sharding, self.global_batch, leaves)
            elif self.device_put or self.cut_on_device:
                leaves = to_device(leaves)
            item = self._emit(leaves, meta[0], meta[1], epoch, meta[2])
            if item is not None:
                out.append(item)
            i += size
        return out

    def _emit(
        self, leaves: list[Any], row: np.ndarray, start: np.ndarray, epoch: int, source: np.ndarray
    ) -> StreamBatch | None:
        """An item of the leaves (in the stream's structure, or a dict of its leaf paths); None
        while a resumed stream passes over the batches before its position."""
        self._epoch_items += 1
        if self._skip:
            count = row.shape[0] if self.stack is not None else 1
            if self._skip >= count:
                self._skip -= count
                leaves.clear()
                return None
            skip, self._skip = self._skip, 0  # resumed inside a stack: the rest of it
            leaves = [x[skip:] for x in leaves]
            row, start, source = row[skip:], start[skip:], source[skip:]
        if not self.structured:
            experience: Any = dict(zip(self.names, leaves, strict=True))
        elif self._rebuild is not None:
            experience = self._rebuild(leaves)
        else:
            experience = _structure.build(self.structure, leaves)
            self._rebuild = rebuilder(experience, leaves)
        leaves.clear()
        return StreamBatch(experience, row, start, epoch, source)

    def _host_cut(
        self,
        pending: PartialBatch | None,
        flat: list[np.ndarray],
        base: np.ndarray,
        where: tuple[np.ndarray, np.ndarray, np.ndarray],
        epoch: int,
        pos: int,
        stop: int,
    ) -> Generator[list[StreamBatch], None, PartialBatch | None]:
        """Copy the sequences ``[pos, stop)`` into items on the host, yielding each full
        pack; return the pack begun and not yet full."""
        row, start, source = where
        while pos < stop:
            if pending is None:
                out_dtypes = self.dtypes[: self.out_count]
                pending = PartialBatch.allocate(self.batch_layout, self.batch_shapes, out_dtypes)
            take = min(self.capacity - pending.fill, stop - pos)
            pending.take(flat, base[pos : pos + take], self._steps)
            fill = slice(pending.fill, pending.fill + take)
            pending.row[fill] = row[pos : pos + take]
            pending.start[fill] = start[pos : pos + take]
            pending.source[fill] = source[pos : pos + take]
            pending.fill += take
            pos += take
            if pending.fill == self.capacity:
                items, pending = self._finish(pending, epoch, False), None
                if items:
                    yield items
        return pending

    def _device_cut(
        self,
        flat: list[np.ndarray],
        base: np.ndarray,
        where: tuple[np.ndarray, np.ndarray, np.ndarray],
        epoch: int,
        pos: int,
        stop: int,
    ) -> Generator[list[StreamBatch], None, None]:
        """The whole items of the sequences ``[pos, stop)``, cut on the device a pack at a
        time, a stack by one gather (``vault/stream/_device_cut.py``)."""
        if stop == pos:
            return
        shape = (self.batch,) if self.stack is None else (self.stack, self.batch)
        group, unit = DeviceGroup(flat, base[pos:stop], shape, self.pack), self.unit
        for pack in group.items(self.seq):
            out = []
            for leaves in pack:
                meta = [x[pos : pos + unit].reshape(shape) for x in where]
                item = self._emit(leaves, meta[0], meta[1], epoch, meta[2])
                if item is not None:
                    out.append(item)
                pos += unit
            if out:
                yield out

    # ------------------------------------------------------------------------- producer
    def batches(self) -> Generator[list[StreamBatch], None, None]:
        """The items (batches, or stacks of them) a pack at a time (non-empty lists), less the
        ``skip`` first batches (a resumed stream: cut again, never handed over; resumed inside
        a stack, the rest of that stack comes first)."""
        self._skip = self.skip
        return self._produce()

    def _produce(self) -> Generator[list[StreamBatch], None, None]:
        """The producer: yields the items a pack at a time (non-empty lists)."""
        groups = self._groups()
        inflight: collections.deque[BlockGroup] = collections.deque()

        def issue_next() -> bool:
            nxt = next(groups, None)
            if nxt is None:
                return False
            inflight.append(self._issue(*nxt))
            return True

        pending: PartialBatch | None = None
        self._epoch_items = 0
        try:
            while inflight or issue_next():
                group = inflight.popleft()
                while len(inflight) < self.prefetch and issue_next():
                    pass  # the next groups decode while this one is cut into batches
                try:
                    self._complete(group)
                except Exception:
                    if pending is not None:  # hand over the whole items cut before it
                        early, pending = self._finish(pending, group.epoch, False), None
                        if early:
                            yield early
                    raise
                base, source, row, start = self._starts(group)
                flat = [buf.reshape(-1, *buf.shape[2:]) for buf in group.buffers[: self.out_count]]
                where, epoch, pos, n = (row, start, source), group.epoch, 0, base.size
                if self.cut_on_device:  # the host tops up an item begun before; then the device
                    pos = 0 if pending is None else min(self.unit - pending.fill, n)
                    pending = yield from self._host_cut(pending, flat, base, where, epoch, 0, pos)
                    whole = pos + (n - pos) // self.unit * self.unit
                    if self.wide and not _jax_x64():  # what the device cuts, checked first
                        self._check_narrowing(wide_windows(flat, base[pos:whole], self.seq))
                    yield from self._device_cut(flat, base, where, epoch, pos, whole)
                    pos = whole
                pending = yield from self._host_cut(pending, flat, base, where, epoch, pos, n)
                del group.buffers[:], flat[:]  # release the block before the next is read
                if group.last:
                    if pending is not None:
                        items = self._finish(pending, epoch, True)
                        if items:
                            yield items
                    pending = None
                    if self._skip:  # a resume_at past this epoch's end: no state holds one
                        raise VaultArgumentError(
                            f"resume_at=({epoch}, {self.skip}) is past the end of epoch "
                            f"{epoch}, which has {self.skip - self._skip} batches"
                        )
                    if self._epoch_items == 0:
                        raise self._no_batch()
                    self._epoch_items = 0
        finally:
            self._cancel(inflight)


class DatasetStream(Stream[StreamBatch]):
    """The iterator :meth:`Vault.as_dataset` returns, with the layout it chose (ints).

    Its items are :class:`StreamBatch` items: one batch each, or with ``stack=S`` a stack of
    ``S`` consecutive batches of one epoch on a new leading axis (leaves ``[S, batch,
    sequence_length, ...]``, ``row``/``start``/``source`` ``[S, batch]``), for a
    ``jax.lax.scan`` over them in one jitted call: exactly the unstacked stream's batches, in
    its order. An epoch's last stack is shorter when its batch count is not a multiple of
    ``S`` (a jitted scan compiles once more for it); without ``drop_remainder`` the
    incomplete last batch follows alone (``[1, rest, ...]``). :meth:`state` counts batches,
    whatever the stack.

    Attributes:
        block_timesteps: timesteps of one block.
        block_rows: rows of one block.
        block_bytes: raw bytes of one block of the selected leaves.
        run_blocks: consecutive blocks read in a row.
        interleave: blocks resident together.
        prefetch: groups of blocks read ahead.
        length: the committed timesteps per row it streams, summed over its sources.
        sources: how many sources it reads.
        process_index: this process.
        process_count: the processes that share each epoch.
        local_batch_size: the sequences of each batch this process reads
            (``sample_batch_size / process_count``).
    """

    def __init__(self, plan: _Plan, args: dict[str, Any] | None = None) -> None:
        super().__init__(plan.batches(), plan.queue_depth if plan.prefetch else 0, packed=True)
        lay = plan.layout
        self._args = args or {}  # how it was made, for state()
        self._pins = [(s.snap.where, s.snap.commit) for s in lay.sources]
        self._position = plan.first_epoch, plan.skip  # of the next batch handed over
        self._stacked = plan.stack is not None
        self.block_timesteps = lay.block
        self.block_rows = lay.block_rows
        self.block_bytes = lay.block * lay.block_rows * lay.step_bytes
        self.run_blocks = lay.run_blocks
        self.interleave = lay.interleave
        self.prefetch = plan.prefetch
        self.length = sum(s.length for s in lay.sources)
        self.sources = len(lay.sources)
        self.process_index, self.process_count = lay.process_index, lay.process_count
        self.local_batch_size = plan.batch

    def __next__(self) -> StreamBatch:
        batch, (epoch, count) = super().__next__(), self._position
        n = batch.row.shape[0] if self._stacked else 1  # the batches it holds
        self._position = (batch.epoch, count + n if batch.epoch == epoch else n)
        return batch

    def state(self) -> dict[str, Any]:
        """The stream's position, to checkpoint and resume with :func:`vault.resume_stream`.

        Every process of a multi-process stream is at the same position after the same
        number of batches, so one state (any process's) resumes them all.

        Returns:
            A small JSON-serialisable dict of every source's location and pinned commit,
            the arguments, the epoch and batch.
        """
        return state_of(self._pins, self._args, self._position)


def as_dataset(
    snaps: Snapshot | Sequence[Snapshot],
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
    sharding: Any = None,
    process_index: int | None = None,
    process_count: int | None = None,
    resume_at: tuple[int, int] = (0, 0),
    cut_on_device: bool = False,
    stack: int | None = None,
) -> DatasetStream:
    """Batches of sequences streamed from disk, for data larger than memory.

    ``snaps``: one snapshot, or several of one structure (the same leaves, shapes, dtypes and
    containers; else :class:`VaultStructureError`), read as one dataset. Yields
    :class:`StreamBatch` items: ``experience`` has leaves ``[sample_batch_size,
    sequence_length, ...]`` (JAX or numpy arrays: see ``device_put`` and ``sharding``), plus
    the ``source``, ``row`` and ``start`` of every sequence. An epoch yields every valid start
    of every source exactly once (see the module docstring: inside the committed length as of
    this call, ``t % stride == 0``, not across a seam, and with ``episode_aware`` no episode
    end before a window's last step); with ``drop_remainder`` the last incomplete batch of
    each epoch is dropped, else yielded smaller. ``epochs=None`` repeats forever, reshuffling
    each epoch.

    Args:
        shuffle: permute, per epoch, the order of runs of blocks and the order of sequences
            inside the resident blocks (without: source by source, block by block in time
            order, and inside a block all its rows at ``t``, then ``t + 1``).
        seed: the same seed gives the same batches in the same order.
        prefetch: groups of blocks read ahead while the current one is cut into batches
            (0: read on demand, no background thread).
        episode_aware: needs vaults with an episode index (``done_leaf`` given at creation),
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
        rows, leaves: as :meth:`Vault.read_numpy` (``rows`` applies to every source;
            ``leaves`` gives a dict ``{path: array}``).
        device_put: ``True``: the leaves are JAX arrays, put on the default device by the
            background thread (on a GPU or TPU the transfer overlaps training). ``False``:
            numpy arrays, which JAX functions take as they are. ``None``
            (default): ``True`` when JAX's default backend is an accelerator, ``False`` on
            CPU, where a JAX array made ahead buys no overlap and costs about 4 us per leaf
            (the streaming benchmark, docs: Benchmarks). Ignored with a ``sharding``.
        sharding: a ``jax.sharding.Sharding`` of the global batch that splits its first axis
            evenly over the processes' devices (e.g. ``NamedSharding(Mesh(jax.devices(),
            ("data",)), PartitionSpec("data"))``), applied to every leaf: the leaves are then
            global ``jax.Array`` s of ``sample_batch_size`` sequences built with
            ``jax.make_array_from_process_local_data`` from this process's part, which a
            ``jit`` over the mesh takes directly. Needs ``drop_remainder=True`` (one shape).
        cut_on_device: put each group of blocks on JAX's default device once and cut the
            batches there with a jitted gather, a pack per call (the same batches in the same
            order; a batch spanning two groups is cut on the host). On a GPU the host's
            per-batch copy and transfer then no longer bound the stream; the device holds a
            group of blocks (``interleave * block_bytes``) while it is cut. The leaves are
            JAX arrays. Not with a ``sharding``.
        process_index, process_count: this process and how many share each epoch (default:
            ``jax.process_index()`` and ``jax.process_count()`` when ``jax.distributed`` is
            initialised, else 0 and 1). ``sample_batch_size`` is the global batch: each
            process reads only its share of the epoch's blocks and yields batches of
            ``sample_batch_size / process_count`` sequences; the shares are disjoint, together
            they are the epoch less fewer than ``process_count`` sequences (the last of the
            epoch's order), and every process yields the same number of batches per epoch
            (see ``vault/stream/_layout.py``). With ``episode_aware``, every process reads
            the done/truncated leaves once when the stream is made, to count the shares.
        resume_at: ``(epoch, batch)`` to start from (set by :func:`vault.resume_stream` from
            :meth:`DatasetStream.state`; the batches before it are cut again, not yielded).
        stack: hand over ``stack`` consecutive batches per item, stacked on a new leading
            axis, for a ``jax.lax.scan`` over them in one jitted call (one dispatch per stack
            instead of one per batch): every leaf ``[stack, sample_batch_size,
            sequence_length, ...]``, ``row``/``start``/``source`` ``[stack, batch]``. Exactly
            the unstacked stream's batches in its order; stack ``k`` of an epoch holds its
            batches ``[k * stack, (k + 1) * stack)``, so the epoch's last stack is shorter
            when its batch count is not a multiple of ``stack`` (a jitted scan compiles once
            more for it), and without ``drop_remainder`` the incomplete last batch follows
            alone, ``[1, rest, ...]``. Never across epochs. With ``cut_on_device`` a stack is
            one gather on the device (a stack spanning two groups is cut on the host); on
            the host it is cut straight into one array per leaf. A stream resumed inside a
            stack first yields the rest of it. Not with a ``sharding``. Default ``None``:
            one batch per item.

    Memory: about ``(1 + prefetch) * interleave`` blocks (``DatasetStream.block_bytes`` is
    one), TensorStore's buffers for the chunks being decoded, and 2 to 16 batches or stacks
    (about 4 MiB, at least 2) cut ahead of the consumer; a stream that would hold more than
    the machine's memory is refused (:class:`VaultReadError`) before anything is allocated.
    Every argument is checked at the call (a wrong type is :class:`VaultArgumentError`, flags
    must be bools). The returned :class:`DatasetStream` is an iterator and a context manager;
    ``close()`` (or leaving the ``with`` block, or dropping it) stops its thread. Errors met
    while reading (for example :class:`VaultCorruptError`) are raised by ``next()``.
    """
    rows, leaves = once(rows), once(leaves)  # read per source, and saved: an iterator once
    args = dict(locals())
    for name in ("snaps", "resume_at", "sharding", "process_index"):
        del args[name]  # a state resumes every process, each with its own sharding
    sources = sources_arg(snaps)
    batch = int_arg("sample_batch_size", sample_batch_size, 1)
    seq = int_arg("sequence_length", sequence_length, 1)
    if epochs is not None:
        epochs = int_arg("epochs", epochs, 0)
    resume_at = resume_arg(resume_at)
    process = process_arg(process_index, process_count)
    args["process_count"] = process[1]
    local = local_batch_size(batch, process[1])
    drop_remainder = bool_arg("drop_remainder", drop_remainder)
    if stack is not None:
        args["stack"] = stack = _args.int_arg("stack", stack, 1)
        if sharding is not None:
            raise VaultArgumentError(
                f"stack={stack} hands over this process's batches stacked on a new leading "
                "axis; sharding= builds global batches along the first axis: give one or the "
                "other (to shard stacks, build them from the stacked leaves with "
                "jax.make_array_from_process_local_data and a sharding of [stack, batch, ...])"
            )
    if bool_arg("cut_on_device", cut_on_device) and sharding is not None:
        raise VaultArgumentError(
            "cut_on_device=True cuts batches on JAX's default device; with a sharding= the "
            "batches are assembled across devices: give one or the other"
        )
    if sharding is not None and not drop_remainder:
        raise VaultArgumentError(
            "a sharded stream yields global batches of one shape: give drop_remainder=True "
            "(the default) with sharding="
        )
    layout = Layout(
        sources,
        seq,
        rows=rows,
        leaves=leaves,
        end_leaves=end_leaves_of(sources) if bool_arg("episode_aware", episode_aware) else [],
        stride=int_arg("stride", stride, 1),
        block_timesteps=block_timesteps,
        block_rows=block_rows,
        run_blocks=run_blocks,
        interleave=int_arg("interleave", interleave, 1),
        shuffle=bool_arg("shuffle", shuffle),
        seed=int_arg("seed", seed, 0),
        process=process,
    )
    if sharding is not None:
        shapes = [(batch, seq, *item) for item in layout.items[: len(layout.names)]]
        check_sharding(sharding, batch, process[1], shapes)
    plan = _Plan(
        layout,
        local,
        batch,
        prefetch=int_arg("prefetch", prefetch, 0),
        structured=leaves is None,
        epochs=epochs,
        drop_remainder=drop_remainder,
        device_put=on_accelerator() if device_put is None else bool_arg("device_put", device_put),
        sharding=sharding,
        resume_at=resume_at,
        cut_on_device=cut_on_device,
        stack=stack,
    )
    return DatasetStream(plan, args)


def _jax_x64() -> bool:
    import jax

    return bool(jax.config.read("jax_enable_x64"))
