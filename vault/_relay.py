"""Chunks of a remote vault read through memory (``Location.remote``: every request is a
network round trip).

Each chunk object is fetched once, with one GET through the location's kvstore. Its stored
checksum (the object's last four bytes, ``vault/_tags.py``) is compared with the tag recorded
for its place, and those same bytes are decoded by TensorStore from an in-memory store that
holds them. A chunk that is missing, or is not the chunk written at its place, raises
:class:`VaultCorruptError` before any of its data is handed over.

Reading the arrays through TensorStore's s3 kvstore and checking places with a suffix-ranged
GET per chunk cost two requests per chunk: reading the benchmark's vector vault (51 MB,
``tools/bench_s3.py``) took 399 GETs against 204 now (raw TensorStore: 199), and ran at
0.49-0.59 of raw TensorStore's speed on the same server. The price of one GET per chunk is two
copies of the encoded bytes in memory (out of the response, into the in-memory store).
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorstore as ts

from vault import _tags

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


def column_keys(snap: Any, key: str, b: int, k: int) -> list[str]:
    """The chunk keys of array ``key`` at row block ``b``, time chunk ``k``: one, unless the
    leaf's chunks cut its item axes (``vault._tags.Grid.chunk`` is the first of them)."""
    grid = snap.grids[key]
    if grid.row_block is None:
        return [grid.chunk(b, k)]
    leaf = snap.manifest.leaf(key.split("/", 1)[1])
    counts = [-(-size // step) for size, step in zip(leaf.shape, leaf.chunk[2:], strict=True)]
    head = f"{key}/c/{b}/{k}"
    return [head + "".join(f"/{i}" for i in at) for at in itertools.product(*map(range, counts))]


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
    return _Read(snap, key, dest, view, rows, t0, t1).future


RUN_BYTES = 1 << 20  # raw bytes of the chunk columns decoded together


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
    ) -> None:
        self.snap, self.key, self.dest, self.t0 = snap, key, dest, t0
        self.grid = grid = snap.grids[key]
        self.blocks = grid.blocks_of(rows)
        k0, k1 = t0 // grid.step, -(-t1 // grid.step)
        self.complete = snap.length // grid.step
        self.checked = _tags.enabled(snap.manifest) and k0 < self.complete
        self.tag_keys, self.tag_gets = (
            tag_reads(snap, grid, self.complete) if self.checked else ([], [])
        )
        self.prefix = f"read-{next(_serial)}/"
        self.array = memory_array(memory_metadata(snap, key, view), self.prefix)
        self.view = view
        self.origin = view.domain[1].inclusive_min  # the view's index of timestep t0
        column = max(1, dest.nbytes // max(1, t1 - t0)) * grid.step
        per = max(1, RUN_BYTES // column)
        runs = [range(k, min(k1, k + per)) for k in range(k0, k1, per)]
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
        for run in runs:
            chunks = [
                (b, k, chunk)
                for k in run
                for b in self.blocks
                for chunk in column_keys(snap, key, b, k)
            ]
            with snap.location.failures("read the vault"):
                gets = [kv.read(chunk) for _, _, chunk in chunks]
            self._when_all([*self.tag_gets, *gets], lambda c=chunks, g=gets: self._arrived(c, g))

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

    def _arrived(self, chunks: list[tuple[int, int, str]], gets: list[Any]) -> None:
        """A run's chunks are in: check them, put them in memory, decode them."""
        grid, snap = self.grid, self.snap
        try:
            tags = None
            if self.checked:
                tags = tag_values(snap, grid, self.complete, self.tag_keys, self.tag_gets)
            _, mem = memory()
            skip = len(self.key) + 1
            wrong: list[str] = []
            for (b, k, chunk), get in zip(chunks, gets, strict=True):
                got = get.result()
                raw = bytes(got.value) if got.state == "value" else None
                tagged = chunk == grid.chunk(b, k)  # the chunk a tag or edge binds
                if raw is None:
                    wrong.append(_tags.missing(grid, b, k, chunk))
                    continue
                if tags is not None and tagged and k < self.complete:
                    problem = _tags.place_problem(grid, b, k, raw, int(tags[b, k]))
                    if problem is not None:
                        wrong.append(problem)
                        continue
                if tagged and k == self.complete:
                    with self.guard:
                        self.edge[b] = raw[-4:]
                mem.write(self.prefix + chunk[skip:], raw)
            if wrong:
                raise _tags.place_error(snap, self.key, wrong)
            if tags is not None:  # checked for the snapshot: later reads go straight
                placed = {(b, k) for b, k, _ in chunks if k < self.complete}
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
        forget(self.prefix)
        if self.errors:
            self.promise.set_exception(self.errors[0])
            return
        if len(self.edge) == self.grid.row_blocks:
            _tags.note_edge_tails(self.snap, self.key, self.edge)
        self.promise.set_result(None)


def tag_reads(snap: Any, grid: Any, complete: int) -> tuple[list[str], list[Any]]:
    """The keys and GETs of the tag chunks holding the tags of ``grid``'s first ``complete``
    time chunks: sent once per snapshot (reads of the same array share them), ahead of the
    data requests; none where the tags are known already."""
    known = snap.cache.get(("tag values", grid.key))
    if known is not None and known.shape[1] >= complete:
        return [], []
    sent = snap.cache.get(("tag reads", grid.key))
    if sent is None or sent[0] < complete:
        keys = _tags.tag_chunk_keys(grid, complete)
        kv = snap.location.kvstore()
        with snap.location.failures("read the vault"):
            sent = (complete, keys, [kv.read(key) for key in keys])
        snap.cache[("tag reads", grid.key)] = sent
    return sent[1], sent[2]


def tag_values(snap: Any, grid: Any, complete: int, keys: list[str], gets: list[Any]) -> np.ndarray:
    """The tags of ``grid``'s first ``complete`` time chunks: known, or decoded from
    :func:`tag_reads` (``gets``, done) and kept for the snapshot."""
    if not gets:
        return _tags.stored_tags(snap, grid, complete)
    values = []
    for key, get in zip(keys, gets, strict=True):
        got = get.result()
        raw = bytes(got.value) if got.state == "value" else None
        values.append(_tags.decode_tag_chunk(snap, grid, key, raw))
    tags = np.concatenate(values, axis=1)[:, :complete]
    snap.cache[("tag values", grid.key)] = tags
    return tags
