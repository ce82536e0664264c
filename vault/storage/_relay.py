"""Chunks of a remote vault read through memory (``Location.remote``: every request is a
network round trip).

Each chunk object is fetched once, with one GET through the location's kvstore. Its stored
checksum (the object's last four bytes, ``vault/format/_tags.py``) is compared with the tag recorded
for its place, and those same bytes are decoded. A chunk that is missing, is not the chunk
written at its place, or whose bytes are damaged raises :class:`VaultCorruptError` before any
of its data is handed over.

Decoding: a leaf whose codec chain is the one ``vault.storage._arrays.codec_chain`` writes
(``bytes``, at most one of zstd, gzip or blosc, ``crc32c``) is decoded here
(``vault/storage/_relay_decode.py``): the chunk's crc32c checked over the response's bytes, its
body decompressed into a buffer the thread reuses and copied into the destination with numpy, or
decompressed straight into the destination where the chunk's region of it is one contiguous block
(a chunk of one row and whole items: frames). Each chunk is handled as it arrives, on the thread
that received it. Any other chain is decoded by TensorStore from an in-memory zarr3 twin of the
array that holds the fetched bytes (two more copies of the encoded bytes, and a TensorStore open per
read); ``DIRECT = False`` forces that path (the tests compare both).

Reading the arrays through TensorStore's s3 kvstore and checking places with a suffix-ranged
GET per chunk cost two requests per chunk: reading the benchmark's vector vault (51 MB,
``tools/bench_s3.py``) took 399 GETs against 204 now (raw TensorStore: 199). Decoded through
the in-memory twin, that read took 23 % more CPU than raw TensorStore reading the same chunks
(168 vs 137 ms) and ran at 0.81 of its speed; decoded here, 4 % more (142 ms) at 0.95 of its
speed (medians of 30 rounds in one process, the three reads taking turns, load average 2).
The image vault (zstd frames, decoded straight into place) reads at 1.30 of raw TensorStore
(through the twin: 1.05). The first read in a process also imports numcodecs (about 0.1 s).
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorstore as ts

from vault._errors import VaultCorruptError
from vault.format import _tags
from vault.storage import _relay_decode

HUGE = 1 << 53  # the time axis of in-memory arrays: any chunk index fits

_serial = itertools.count()


@functools.cache
def memory() -> tuple[Any, Any]:
    """This process's in-memory store: its context and its root kvstore."""
    context = ts.Context()
    return context, ts.KvStore.open({"driver": "memory"}, context=context).result()


def memory_metadata(snap: Any, key: str, view: Any) -> dict[str, Any]:
    """The metadata of array ``key`` (read from ``view``, a view of it) with a time (episode)
    axis long enough for any chunk: what an in-memory twin of the array is opened with."""
    cached = snap.cache.get(("memory metadata", key))
    if cached is None:
        meta = dict(view.spec().to_json()["metadata"])
        shape = list(meta["shape"])
        shape[1 if snap.grids[key].row_block is not None else 0] = HUGE
        cached = {**meta, "shape": shape}
        snap.cache[("memory metadata", key)] = cached
    return cached


def memory_array(meta: dict[str, Any], prefix: str) -> Any:
    """An array with metadata ``meta`` over the in-memory store's keys under ``prefix``
    (nothing is read or written to open it)."""
    context, _ = memory()
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "memory", "path": prefix},
        "metadata": meta,
        "fill_missing_data_reads": False,
    }
    return ts.open(spec, open=True, assume_metadata=True, context=context).result()


Chunk = tuple[int, int, str, tuple[int, ...]]  # row block, time chunk, key, item chunk indices


def column_chunks(snap: Any, key: str) -> list[tuple[str, tuple[int, ...]]]:
    """The chunks of array ``key`` at one row block and time chunk: for each, its key's
    suffix after the time index and its chunk indices along the item axes (one chunk, unless
    the leaf's chunks cut its item axes), in the order of their flat item index
    (``vault.format._tags.Grid.chunk``). Cached on the snapshot."""
    cached = snap.cache.get(("column chunks", key))
    if cached is None:
        counts = snap.grids[key].items
        cached = [
            ("".join(f"/{i}" for i in at), at) for at in itertools.product(*map(range, counts))
        ]
        snap.cache[("column chunks", key)] = cached
    return cached


def chunk_key(grid: Any, b: int, k: int, suffix: str) -> str:
    """The key of the chunk at row block ``b``, time chunk ``k`` (``suffix``: from
    :func:`column_chunks`)."""
    return (
        f"{grid.key}/c/{b}/{k}{suffix}"
        if grid.row_block is not None
        else f"{grid.key}/c/{k}{suffix}"
    )


def column_keys(snap: Any, key: str, b: int, k: int) -> list[str]:
    """The chunk keys of array ``key`` at row block ``b``, time chunk ``k``
    (:func:`column_chunks`)."""
    grid = snap.grids[key]
    return [chunk_key(grid, b, k, suffix) for suffix, _ in column_chunks(snap, key)]


def row_maps(
    grid: Any, rows: Sequence[int] | None, blocks: list[int]
) -> dict[int, tuple[Any, Any]]:
    """For each row block of ``blocks``: which rows of a read's destination (``rows``: the
    array rows it holds, in order; None for every row) come from which rows of the block's
    chunks, as a pair of indices (slices where they are runs)."""
    step = grid.row_block or 1
    if rows is None:
        return {
            b: (
                slice(b * step, min(grid.rows, (b + 1) * step)),
                slice(0, min(grid.rows, (b + 1) * step) - b * step),
            )
            for b in blocks
        }
    picked = np.asarray(rows, np.int64)
    of_block = picked // step
    out = {}
    for b in blocks:
        where = np.flatnonzero(of_block == b)
        inner = picked[where] - b * step
        out[b] = (_as_slice(where), _as_slice(inner))
    return out


def _as_slice(index: np.ndarray) -> Any:
    """``index`` (1-D ints) as a slice when it is an increasing run, else unchanged."""
    if (
        index.size
        and int(index[-1]) - int(index[0]) == index.size - 1
        and (index.size == 1 or bool(np.all(np.diff(index) == 1)))
    ):
        return slice(int(index[0]), int(index[-1]) + 1)
    return index


def forget(prefix: str) -> None:
    """Drop every in-memory key under ``prefix`` (which ends with ``/``)."""
    _, kv = memory()
    kv.delete_range(ts.KvStore.KeyRange(prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)))


def read_into(
    snap: Any, key: str, dest: np.ndarray, view: Any, rows: Sequence[int] | None, t0: int, t1: int
) -> Any:
    """Start reading ``view`` (of array ``key``: timesteps ``[t0, t1)`` of ``rows``, None for
    every row, all committed; its time axis is axis 1) into ``dest``; a future that fails with
    :class:`VaultCorruptError` when one of its chunks is missing or is not the one written
    there (see the module docstring). Runs of about ``RUN_BYTES`` are decoded as soon as their
    chunks are in, while the rest are still on their way. Once every complete chunk in the
    range has been checked for the snapshot (as on a local disk, once per snapshot),
    TensorStore reads the view straight from the store."""
    grid = snap.grids[key]
    complete = snap.length // grid.step
    seen = snap.cache.get(("seen", key), ())
    checked = all(
        (b, k) in seen
        for b in grid.blocks_of(rows)
        for k in range(t0 // grid.step, min(complete, -(-t1 // grid.step)))
    )
    if checked and (t1 <= complete * grid.step or _tags.edge_checked(snap, key)):
        return ts.array(dest).write(view)
    return _Read(snap, key, dest, view, rows, t0, t1, leaf_codec(snap, key)).future


def leaf_codec(snap: Any, key: str) -> _relay_decode.ChunkCodec | None:
    """How this module decodes the chunks of array ``key`` itself (None: TensorStore does,
    from memory); cached on the snapshot."""
    cache_key = ("chunk codec", key)
    if cache_key not in snap.cache:
        grid = snap.grids[key]
        codec = None
        if grid.row_block is not None and DIRECT:
            leaf = snap.manifest.leaf(key.split("/", 1)[1])
            codec = _relay_decode.chunk_codec(leaf.dtype, tuple(leaf.chunk), leaf.codecs)
        snap.cache[cache_key] = codec
    return snap.cache[cache_key]


RUN_BYTES = 1 << 20  # raw bytes of the chunk columns decoded together (by TensorStore)
DIRECT = True  # decode known codec chains here (False: always through TensorStore)


class _Read:
    """One :func:`read_into`: its requests, checks and decodes (completed on TensorStore's
    threads, by callbacks)."""

    def __init__(
        self,
        snap: Any,
        key: str,
        dest: np.ndarray,
        view: Any,
        rows: Sequence[int] | None,
        t0: int,
        t1: int,
        codec: _relay_decode.ChunkCodec | None = None,
    ) -> None:
        self.snap, self.key, self.dest, self.t0, self.t1 = snap, key, dest, t0, t1
        self.codec = codec
        self.grid = grid = snap.grids[key]
        self.blocks = grid.blocks_of(rows)
        k0, k1 = t0 // grid.step, -(-t1 // grid.step)
        self.complete = snap.length // grid.step
        self.checked = _tags.enabled(snap.manifest) and k0 < self.complete
        self.tag_keys, self.tag_gets = (
            tag_reads(snap, grid, self.complete) if self.checked else ([], [])
        )
        self.view = view
        if codec is None:
            self.prefix = f"read-{next(_serial)}/"
            self.array = memory_array(memory_metadata(snap, key, view), self.prefix)
            self.origin = view.domain[1].inclusive_min  # the view's index of timestep t0
        else:
            self.row_maps = row_maps(grid, rows, self.blocks)
        columns = column_chunks(snap, key)
        if codec is None:  # runs of whole time chunks, decoded together by TensorStore
            column = max(1, dest.nbytes // max(1, t1 - t0)) * grid.step
            per = max(1, RUN_BYTES // column)
            spans = [range(k, min(k1, k + per)) for k in range(k0, k1, per)]
            runs = [
                [
                    (b, k, chunk_key(grid, b, k, suffix), at)
                    for k in span
                    for b in self.blocks
                    for suffix, at in columns
                ]
                for span in spans
            ]
        else:  # each chunk decoded here as soon as it is in, on the thread that got it
            runs = [
                [(b, k, chunk_key(grid, b, k, suffix), at)]
                for k in range(k0, k1)
                for b in self.blocks
                for suffix, at in columns
            ]
        self.guard = threading.Lock()
        self.left = len(runs)
        self.errors: list[BaseException] = []
        self.edge: dict[int, bytes] = {}
        self.promise: Any
        self.future: Any
        self.promise, self.future = ts.Promise.new()
        if not runs:
            self.promise.set_result(None)
        kv = snap.location.kvstore()
        arrived = self._arrived if codec is None else self._arrived_direct
        for chunks in runs:
            with snap.location.failures("read the vault"):
                gets = [kv.read(chunk[2]) for chunk in chunks]
            self._when_all([*self.tag_gets, *gets], lambda c=chunks, g=gets: arrived(c, g))

    @staticmethod
    def _when_all(futures: list[Any], then: Any) -> None:
        left = [len(futures)]
        guard = threading.Lock()

        def one(_: Any) -> None:
            with guard:
                left[0] -= 1
                if left[0]:
                    return
            then()

        for future in futures:
            future.add_done_callback(one)

    def _arrived(self, chunks: list[Chunk], gets: list[Any]) -> None:
        """A run's chunks are in: check them, put them in memory, decode them."""
        grid, snap = self.grid, self.snap
        try:
            tags = None
            if self.checked:
                tags = tag_values(snap, grid, self.complete, self.tag_keys, self.tag_gets)
            _, mem = memory()
            skip = len(self.key) + 1
            wrong: list[str] = []
            for (b, k, chunk, at), get in zip(chunks, gets, strict=True):
                got = get.result()
                raw = bytes(got.value) if got.state == "value" else None
                if not self._placed(b, k, chunk, at, raw, tags, wrong):
                    continue
                mem.write(self.prefix + chunk[skip:], raw)
            if wrong:
                raise _tags.place_error(snap, self.key, wrong)
            if tags is not None:  # checked for the snapshot: later reads go straight
                placed = {(b, k) for b, k, _, _ in chunks if k < self.complete}
                snap.cache.setdefault(("seen", self.key), set()).update(placed)
            a = max(self.t0, chunks[0][1] * grid.step) - self.t0
            z = min(self.dest.shape[1], (chunks[-1][1] + 1) * grid.step - self.t0)
            part = self.view[:, self.origin + a : self.origin + z]
            source = self.array[part.spec(minimal_spec=True).transform]
            ts.array(self.dest[:, a:z]).write(source).add_done_callback(self._decoded)
        except BaseException as err:
            if isinstance(err, Exception):
                err = snap.location.typed_failure(err, "read the vault") or err
            self._finished(err)

    def _placed(
        self,
        b: int,
        k: int,
        chunk: str,
        at: tuple[int, ...],
        raw: Any,
        tags: np.ndarray | None,
        wrong: list[str],
    ) -> bool:
        """Whether the fetched chunk ``raw`` (item-chunk indices ``at``) may be decoded: it is
        there and, when its tag is known (``tags``) and it is bound to its place, it is the
        chunk written there; otherwise why not is added to ``wrong``. Keeps the stored
        checksums of the edge's bound chunks."""
        if raw is None:
            wrong.append(_tags.missing(self.grid, b, k, chunk))
            return False
        i = self.grid.item_index(at)
        if i >= self.grid.bound:  # format 3: its own crc32c only
            return True
        if tags is not None and k < self.complete:
            problem = _tags.place_problem(self.grid, b, k, raw, int(tags[b, k, i]), i)
            if problem is not None:
                wrong.append(problem)
                return False
        if k == self.complete:
            with self.guard:
                self.edge[b * self.grid.bound + i] = raw[-4:]
        return True

    def _arrived_direct(self, chunks: list[Chunk], gets: list[Any]) -> None:
        """A run's chunks are in: check them and decode them into the destination here."""
        grid, snap, codec = self.grid, self.snap, self.codec
        assert codec is not None
        try:
            tags = None
            if self.checked:
                tags = tag_values(snap, grid, self.complete, self.tag_keys, self.tag_gets)
            wrong: list[str] = []
            broken: list[str] = []
            for (b, k, chunk, at), get in zip(chunks, gets, strict=True):
                got = get.result()
                raw = got.value if got.state == "value" else None
                if not self._placed(b, k, chunk, at, raw, tags, wrong):
                    continue
                assert raw is not None  # _placed: it is there
                problem = self._place(codec, b, k, at, raw)
                if problem is not None:
                    where = chunk.split("/c/", 1)[1].replace("/", ".")
                    broken.append(f"chunk {where} is corrupt ({problem})")
            if wrong:
                raise _tags.place_error(snap, self.key, wrong)
            if broken:
                raise VaultCorruptError(
                    f"{snap.where}: array {self.key}: "
                    + "; ".join(broken[:4])
                    + (f" (and {len(broken) - 4} more)" if len(broken) > 4 else "")
                    + ". Its data cannot be trusted; restore the vault from a copy."
                )
            if tags is not None:  # checked for the snapshot: later reads go straight
                placed = {(b, k) for b, k, _, _ in chunks if k < self.complete}
                with self.guard:
                    snap.cache.setdefault(("seen", self.key), set()).update(placed)
            self._finished(None)
        except BaseException as err:
            if isinstance(err, Exception):
                err = snap.location.typed_failure(err, "read the vault") or err
            self._finished(err)

    def _place(
        self, codec: _relay_decode.ChunkCodec, b: int, k: int, at: tuple[int, ...], raw: bytes
    ) -> str | None:
        """Decode chunk ``(b, k, at)`` (stored as ``raw``) into its part of the destination;
        what is wrong with it, or None."""
        step = self.grid.step
        a, z = max(self.t0, k * step), min(self.t1, (k + 1) * step)
        dest_rows, chunk_rows = self.row_maps[b]
        inner = codec.shape[2:]
        items = self.dest.shape[2:]
        dest_items = tuple(
            slice(i * c, min(n, (i + 1) * c)) for i, c, n in zip(at, inner, items, strict=True)
        )
        chunk_items = tuple(slice(0, s.stop - s.start) for s in dest_items)
        times = slice(a - self.t0, z - self.t0)
        whole = (
            isinstance(dest_rows, slice)
            and isinstance(chunk_rows, slice)
            and chunk_rows == slice(0, codec.shape[0])
            and (a, z) == (k * step, (k + 1) * step)
            and all(s.stop - s.start == c for s, c in zip(dest_items, inner, strict=True))
        )
        if whole:
            region = self.dest[(dest_rows, times, *dest_items)]
            if region.flags.c_contiguous:  # decoded straight into place
                done = _relay_decode.decode(codec, raw, region)
                return done if isinstance(done, str) else None
        decoded = _relay_decode.decode(codec, raw)
        if isinstance(decoded, str):
            return decoded
        source = decoded[(chunk_rows, slice(a - k * step, z - k * step), *chunk_items)]
        self.dest[(dest_rows, times, *dest_items)] = source
        return None

    def _decoded(self, done: Any) -> None:
        try:
            done.result()
        except BaseException as err:
            self._finished(err)
        else:
            self._finished(None)

    def _finished(self, err: BaseException | None) -> None:
        """One run is over (``err``: how it failed); the read is over after the last."""
        with self.guard:
            if err is not None:
                self.errors.append(err)
            self.left -= 1
            if self.left:
                return
        if self.codec is None:
            forget(self.prefix)
        if self.errors:
            self.promise.set_exception(self.errors[0])
            return
        if len(self.edge) == self.grid.row_blocks * self.grid.bound:
            _tags.note_edge_tails(self.snap, self.key, self.edge)
        self.promise.set_result(None)


def tag_reads(snap: Any, grid: Any, complete: int) -> tuple[list[str], list[Any]]:
    """The keys and GETs of the tag chunks holding the tags of ``grid``'s first ``complete``
    time chunks (but those the commit record keeps): sent once per snapshot (reads of the same
    array share them), ahead of the data requests; none where the tags are known already."""
    known = snap.cache.get(("tag values", grid.key))
    if known is not None and known.shape[1] >= complete:
        return [], []
    sent = snap.cache.get(("tag reads", grid.key))
    if sent is None or sent[0] < complete:
        chunks = _tags.tag_chunk_keys(grid, _tags.in_array(snap, grid, complete))
        if len(chunks) > _tags.TAG_READ_BATCH:
            # many (or a claimed length): read in batches that stop at a missing one
            return [], []
        keys = [f"{_tags.TAGS}/{grid.key}/c/0/{j}" for j in chunks]
        kv = snap.location.kvstore()
        with snap.location.failures("read the vault"):
            sent = (complete, keys, [kv.read(key) for key in keys])
        snap.cache[("tag reads", grid.key)] = sent
    return sent[1], sent[2]


def tag_values(snap: Any, grid: Any, complete: int, keys: list[str], gets: list[Any]) -> np.ndarray:
    """The tags of ``grid``'s first ``complete`` time chunks: known, or decoded from
    :func:`tag_reads` (``gets``, done) and kept for the snapshot."""
    known = snap.cache.get(("tag values", grid.key))
    if known is not None and known.shape[1] >= complete:
        return known
    if not gets:
        return _tags.stored_tags(snap, grid, complete)
    values = []
    for key, get in zip(keys, gets, strict=True):
        got = get.result()
        raw = bytes(got.value) if got.state == "value" else None
        values.append(_tags.decode_tag_chunk(snap, grid, key, raw))
    tags = _tags.by_place(snap, grid, values, complete)
    snap.cache[("tag values", grid.key)] = tags
    return tags
