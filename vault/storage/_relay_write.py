"""Appends to a remote vault (``Location.remote``: every request a network round trip)
written through memory: the writer's side of ``vault/storage/_relay.py``.

* **Chunks** are encoded by TensorStore into an in-memory twin of each array and PUT by this
  writer, so their stored checksums are known without reading them back for the place tags
  (``vault/format/_tags.py``), and the partly filled chunk at the end of each array stays in memory
  from one append to the next (written straight to the object store, TensorStore would GET it
  back to re-encode it). Runs of about ``RUN_BYTES`` are PUT as soon as they are encoded.
* **Tags**: the last chunk of each tag array is kept here and PUT whole (no read-modify-write).
* **Array metadata** (``zarr.json``) is written by this writer, as records of the lease
  (``S3Lease``): the first append (or trim) *claims* every array's metadata (read, rewritten with
  this writer's nonce, conditional on the generation read), and every later rewrite (growing,
  trimming) is conditional on the generation this writer last wrote. So a writer that lost its
  lease can never shrink or grow the arrays of the writer that took it over: a metadata write
  it still had in flight fails against the new holder's claim, and the nonce keeps an old
  generation from coming back (an S3 generation is a content hash).

The lease check before an append (one GET) stays: it keeps a writer that lost its lease from
overwriting the new holder's chunks; it goes out while the chunks are encoded, and nothing is
written before it returns.

Measured on the benchmark's vector vault (``tools/bench_s3.py``, 12 appends of 1,000
timesteps, SeaweedFS on loopback): written straight through TensorStore, with the stored
checksums read back by ranged GETs and the tag arrays read-modify-written, an append took
about 28 GETs and 25 PUTs and wrote at 0.65 of raw TensorStore; through memory it takes the
lease GET (plus what the first append fetches) and about 26 PUTs (raw TensorStore: 20, its
chunks only). What remains above raw TensorStore, profiled: the main thread waits for the
chunk PUTs most of the time (about 60 %), then for the commit record's conditional PUT
(about 6 %, after everything else by design) and the lease check (about 4 %); in CPU, an
append costs about a fifth more than raw TensorStore's writes (256 vs 215 ms for the 12),
mostly the two copies of each encoded chunk that TensorStore's Python API imposes (out of the
in-memory store as ``bytes``, into the PUT) and the requests raw TensorStore does not send
(checksum chunks, the episode index, the history and commit records).
"""

from __future__ import annotations

import json
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import tensorstore as ts

from vault._errors import VaultCorruptError
from vault.format import _tags
from vault.format._records import BOUNDS, RETURNS, TAGS, ZARR_JSON, leaf_key
from vault.storage import _relay
from vault.storage._location import WriterLock

RUN_BYTES = 1 << 20  # raw bytes encoded and PUT together
WRITER_ATTR = "rlvault_writer"  # the array metadata's attribute holding the writer's nonce


class LeaseLock(WriterLock, Protocol):
    """What the relay needs of the writer lock: fenced records (``S3Lease``)."""

    def start_fence_all(
        self,
        rewrites: Mapping[str, Callable[[bytes | None], bytes]],
        doing: str = ...,
        reads: Mapping[str, Any] | None = ...,
    ) -> tuple[dict[str, bytes], Callable[[], dict[str, bytes]]]: ...

    def replace_all(self, values: Mapping[str, bytes], doing: str = ...) -> None: ...

    def start_replace_all(
        self, values: Mapping[str, bytes], doing: str = ...
    ) -> Callable[[], None]: ...

    def read_all(self, keys: list[str], doing: str = ...) -> dict[str, bytes | None]: ...

    def start_check(self) -> Callable[[], None]: ...


def array_keys(snap: Any) -> list[str]:
    """The keys of every array of the vault: leaves, then the episode index."""
    keys = [leaf_key(name) for name in snap.names]
    return keys + ([BOUNDS, RETURNS] if snap.index else [])


def meta_key(key: str) -> str:
    return f"{key}/{ZARR_JSON}"


def grown(need: int, size: int, step: int) -> int:
    """The time length to grow an array of ``size`` to for ``need``: twice ``need`` and at
    least four times ``size`` (on disk ``vault.write._commit.grow`` grows by a quarter), in
    whole chunks. Each growth is a fenced PUT of the array's metadata, and its handle reopened
    after it; growing fourfold makes them O(log n) over a writer's appends, and a writer that
    appends steady blocks grows once every few doublings of its length (the overshoot is
    trimmed at close, and readers read up to the committed length only)."""
    return -(-max(2 * need, 4 * size) // step) * step


class WriteRelay:
    """The in-memory side of one writer of a remote vault (see the module docstring)."""

    def __init__(self) -> None:
        self.prefix = f"write-{next(_relay._serial)}/"
        self.nonce = uuid.uuid4().hex[:12]
        self.docs: dict[str, dict[str, Any]] | None = None  # metadata as last written
        self._stale: set[str] = set()  # arrays whose handle predates their metadata
        self._twins: dict[str, Any] = {}
        self._resident: set[str] = set()  # chunk keys whose current bytes are in memory
        self._tag_chunks: dict[str, tuple[int, np.ndarray]] = {}
        self._tag_lengths: dict[str, int] = {}
        self._loaded = False
        self._staged: list[tuple[Any, Any, list[tuple[str, int]], int]] = []
        self._tails: dict[str, bytes] = {}
        self._puts: list[Any] = []
        self._claims: dict[str, Any] = {}  # the claim's reads, sent by :meth:`prepare`
        weakref.finalize(self, _relay.forget, self.prefix)  # a writer dropped unclosed

    # ----------------------------------------------------------------------- lifecycle
    def reset(self) -> None:
        """Forget everything kept (after a failed append: what is stored is uncertain)."""
        _relay.forget(self.prefix)
        self.docs = None
        self._resident.clear()
        self._tag_chunks.clear()
        self._tag_lengths.clear()
        self._loaded = False
        self._staged.clear()
        self._tails.clear()
        self._puts.clear()
        self._claims.clear()

    def close(self) -> None:
        self.reset()

    # ----------------------------------------------------------------------- loading
    def prepare(self, snap: Any, begins: Mapping[str, int]) -> None:
        """Before the first append: fetch the partly filled chunk at each array's end
        (``begins``: where the append starts), the last chunk of each tag array and each tag
        array's metadata, all together."""
        if self._loaded:
            return
        kv = snap.location.kvstore()
        if self.docs is None:  # the claim's reads (:meth:`grow`), sent with these
            self._claims = {meta_key(key): kv.read(meta_key(key)) for key in array_keys(snap)}
        edges: list[tuple[str, Any]] = []
        tags: list[tuple[str, int, Any, Any]] = []
        with snap.location.failures("read the vault"):
            for key, begin in begins.items():
                grid = snap.grids[key]
                k = begin // grid.step
                if begin % grid.step:
                    for b in range(grid.row_blocks):
                        for chunk in _relay.column_keys(snap, key, b, k):
                            if chunk not in self._resident:
                                edges.append((chunk, kv.read(chunk)))
                if _tags.enabled(snap.manifest):
                    held = _tags.pending(snap, key)  # its tags go out with the next ones
                    e = (k if held is None else held.start) * grid.bound  # the next tag's place
                    j = e // _tags.TAG_CHUNK
                    tag_chunk = kv.read(f"{TAGS}/{key}/c/0/{j}") if e % _tags.TAG_CHUNK else None
                    tags.append((key, j, tag_chunk, kv.read(meta_key(f"{TAGS}/{key}"))))
            _, mem = _relay.memory()
            for chunk, future in edges:
                got = future.result()
                if got.state != "value":
                    raise VaultCorruptError(
                        f"{snap.where}: {chunk}, the partly filled chunk at the committed end, "
                        "is missing. Restore the vault from a copy."
                    )
                mem.write(self.prefix + chunk, bytes(got.value))
                self._resident.add(chunk)
            for key, j, tag_chunk, tag_meta in tags:
                grid = snap.grids[key]
                if tag_chunk is None:
                    values = np.zeros((grid.row_blocks, _tags.TAG_CHUNK), np.uint32)
                else:
                    got = tag_chunk.result()
                    raw = bytes(got.value) if got.state == "value" else None
                    key_j = f"{TAGS}/{key}/c/0/{j}"
                    values = _tags.decode_tag_chunk(snap, grid, key_j, raw).copy()
                self._tag_chunks[key] = (j, values)
                meta = tag_meta.result()
                if meta.state == "value":
                    doc = _parse(snap, f"{TAGS}/{key}", bytes(meta.value))
                    self._tag_lengths[key] = int(doc["shape"][1])
                else:
                    self._tag_lengths[key] = 0
        self._loaded = True

    # ----------------------------------------------------------------------- chunks
    def _twin(self, snap: Any, key: str) -> Any:
        twin = self._twins.get(key)
        if twin is None:
            view = _array_of(snap, key)
            context, _ = _relay.memory()
            spec = {
                "driver": "zarr3",
                "kvstore": {"driver": "memory", "path": f"{self.prefix}{key}/"},
                "metadata": _relay.memory_metadata(snap, key, view),
                "store_data_equal_to_fill_value": True,
            }
            twin = ts.open(spec, open=True, assume_metadata=True, context=context).result()
            self._twins[key] = twin
        return twin

    def stage(self, snap: Any, key: str, begin: int, values: np.ndarray) -> None:
        """Encode ``values`` (``[rows, n, ...]``, or ``[n, ...]`` for the episode index) into
        array ``key`` at ``begin``, in runs cut on the chunk grid."""
        grid = snap.grids[key]
        rows = grid.row_block is not None
        n = int(values.shape[1 if rows else 0])
        if n == 0:
            return
        twin = self._twin(snap, key)
        end = begin + n
        column = max(1, values.nbytes // n) * grid.step
        span = max(1, RUN_BYTES // column) * grid.step
        a = begin
        while a < end:
            z = min(end, (a // span + 1) * span)
            part = values[:, a - begin : z - begin] if rows else values[a - begin : z - begin]
            future = (twin[:, a:z] if rows else twin[a:z]).write(part)
            chunks = [
                (chunk, k)
                for k in range(a // grid.step, -(-z // grid.step))
                for b in range(grid.row_blocks)
                for chunk in _relay.column_keys(snap, key, b, k)
            ]
            self._staged.append((grid, future, chunks, end))
            a = z

    def upload(self, snap: Any) -> None:
        """PUT the chunks staged, run by run as they are encoded; their stored checksums
        become known (:meth:`tails_of`)."""
        kv = snap.location.kvstore()
        _, mem = _relay.memory()
        with snap.location.failures("write the vault"):
            for grid, future, chunks, end in self._staged:
                future.result()
                reads = [mem.read(self.prefix + chunk) for chunk, _ in chunks]
                for (chunk, k), read in zip(chunks, reads, strict=True):
                    raw = bytes(read.result().value)
                    self._puts.append(kv.write(chunk, raw))
                    self._tails[chunk] = raw[-4:]
                    if (k + 1) * grid.step <= end:  # complete: never rewritten
                        place = self.prefix + chunk
                        mem.delete_range(ts.KvStore.KeyRange(place, f"{place}\0"))
                        self._resident.discard(chunk)
                    else:
                        self._resident.add(chunk)
        self._staged.clear()

    def tails_of(self, keys: list[str]) -> list[bytes | None]:
        """The stored checksums of chunks uploaded by this append."""
        return [self._tails.get(key) for key in keys]

    # ----------------------------------------------------------------------- tags
    def write_tags(self, snap: Any, grid: Any, k0: int, values: np.ndarray | None) -> None:
        """The tags ``values`` of time chunks from ``k0`` (as ``vault.format._tags.write_tags``):
        whole tag chunks PUT from memory, and the tag array's metadata where it must grow. The
        PUTs go out with the append's chunks (:meth:`wait` waits for them)."""
        if values is None or values.shape[1] == 0:
            return
        e0 = k0 * grid.bound  # where the tags go
        e1 = e0 + values.shape[1]
        kv = snap.location.kvstore()
        size = _tags.TAG_CHUNK
        futures = []
        with snap.location.failures("write the vault"):
            for j in range(e0 // size, (e1 - 1) // size + 1):
                held = self._tag_chunks.get(grid.key)
                chunk = held[1] if held is not None and held[0] == j else None
                if chunk is None:  # a tag chunk not begun yet
                    chunk = np.zeros((grid.row_blocks, size), np.uint32)
                lo, hi = max(e0, j * size), min(e1, (j + 1) * size)
                chunk[:, lo - j * size : hi - j * size] = values[:, lo - e0 : hi - e0]
                encoded = _tags.encode_tag_chunk(chunk)
                futures.append(kv.write(f"{TAGS}/{grid.key}/c/0/{j}", encoded))
                self._tag_chunks[grid.key] = (j, chunk)
            length = self._tag_lengths.get(grid.key, 0)
            if e1 > length:
                target = grown(e1, length, size)
                doc = {
                    **_tags.tag_metadata(grid),
                    "shape": [grid.row_blocks, target],
                    "zarr_format": 3,
                    "node_type": "array",
                    "chunk_key_encoding": {"name": "default"},
                }
                futures.append(kv.write(meta_key(f"{TAGS}/{grid.key}"), dump(doc)))
                self._tag_lengths[grid.key] = target
        self._puts += futures
        return

    def wait(self) -> None:
        """Wait for every PUT of this append."""
        puts, self._puts = self._puts, []
        for future in puts:
            future.result()
        self._tails.clear()

    # ----------------------------------------------------------------------- metadata
    def needs_growth(self, snap: Any, wants: Mapping[str, int]) -> bool:
        """Whether an array is shorter than ``wants`` says (as far as known)."""
        if self.docs is None:
            return any(
                _length(snap, key, _array_of(snap, key).shape) < n for key, n in wants.items()
            )
        return any(_length(snap, key, self.docs[key]["shape"]) < n for key, n in wants.items())

    def grow(self, snap: Any, lock: LeaseLock, wants: Mapping[str, int]) -> Callable[[], None]:
        """Make every array at least as long as ``wants`` says (its time or episode length):
        the first time, claim every array's metadata (with this writer's nonce, grown where
        needed); later, rewrite those that must grow, conditional on this writer's last
        write. Returns what waits for the writes (they go out with the append's chunks)."""
        if self.docs is None:
            keys = array_keys(snap)

            def claim(key: str) -> Callable[[bytes | None], bytes]:
                def rewrite(raw: bytes | None) -> bytes:
                    doc = _parse(snap, key, raw)
                    return dump(self._resized(snap, key, doc, wants.get(key, 0)))

                return rewrite

            claims, self._claims = self._claims, {}
            rewrites = {meta_key(key): claim(key) for key in keys}
            sent, fenced = lock.start_fence_all(rewrites, reads=claims)
            self.docs = {key: json.loads(sent[meta_key(key)]) for key in keys}
            self._stale.update(keys)

            def claimed() -> None:  # a key rewritten again (replaced meanwhile): reopened later
                written = fenced()
                for key in keys:
                    if written[meta_key(key)] != sent[meta_key(key)]:
                        assert self.docs is not None
                        self.docs[key] = json.loads(written[meta_key(key)])
                        self._stale.add(key)

            return claimed
        changed = {
            key: self._resized(snap, key, self.docs[key], n)
            for key, n in wants.items()
            if _length(snap, key, self.docs[key]["shape"]) < n
        }
        if not changed:
            return lambda: None
        finish = lock.start_replace_all({meta_key(key): dump(doc) for key, doc in changed.items()})
        self.docs.update(changed)
        self._stale.update(changed)
        return finish

    def _resized(self, snap: Any, key: str, doc: dict[str, Any], need: int) -> dict[str, Any]:
        """``doc`` long enough for ``need``, carrying this writer's nonce."""
        grid = snap.grids[key]
        axis = 1 if grid.row_block is not None else 0
        shape = list(doc["shape"])
        if shape[axis] < need:
            shape[axis] = grown(need, shape[axis], grid.step)
        attributes = {**doc.get("attributes", {}), WRITER_ATTR: self.nonce}
        return {**doc, "shape": shape, "attributes": attributes}

    def trimmed(self, snap: Any, current: Mapping[str, bytes | None]) -> dict[str, dict[str, Any]]:
        """The metadata ``current`` (read at close, by array key) cut to the committed length
        where it runs past it."""
        out = {}
        for key, raw in current.items():
            doc = _parse(snap, key, raw)
            grid = snap.grids[key]
            axis = 1 if grid.row_block is not None else 0
            size = snap.length if axis else snap.episode_count
            if doc["shape"][axis] > size:
                shape = list(doc["shape"])
                shape[axis] = size
                attributes = {**doc.get("attributes", {}), WRITER_ATTR: self.nonce}
                out[key] = {**doc, "shape": shape, "attributes": attributes}
        return out

    def handles(
        self, snap: Any, written: Mapping[str, dict[str, Any]] | None = None
    ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """The snapshot's array handles (leaves, index), reopened from the metadata this
        writer wrote where it changed (``written``: metadata just written apart from
        :meth:`grow`, by the trim); nothing is read to open them."""
        arrays, index = list(snap.arrays), list(snap.index)
        docs = {**(self.docs or {}), **(written or {})}
        if self.docs is not None:
            self.docs.update(written or {})
        for key in sorted(self._stale | set(written or {})):
            if key not in docs:
                continue
            spec: dict[str, Any] = {
                "driver": "zarr3",
                "kvstore": snap.location.child_spec(key),
                "metadata": docs[key],
                "store_data_equal_to_fill_value": True,
            }
            if snap.manifest.fill_chunks_stored:
                spec["fill_missing_data_reads"] = False
            handle = ts.open(
                spec, open=True, assume_metadata=True, context=snap.location.context()
            ).result()
            if key == BOUNDS:
                index[0] = handle
            elif key == RETURNS:
                index[1] = handle
            else:
                arrays[snap.names.index(key.split("/", 1)[1])] = handle
        self._stale.clear()
        return tuple(arrays), tuple(index)


def _array_of(snap: Any, key: str) -> Any:
    if key == BOUNDS:
        return snap.index[0]
    if key == RETURNS:
        return snap.index[1]
    return snap.arrays[snap.names.index(key.split("/", 1)[1])]


def _length(snap: Any, key: str, shape: Sequence[int]) -> int:
    return int(shape[1 if snap.grids[key].row_block is not None else 0])


def _parse(snap: Any, key: str, raw: bytes | None) -> dict[str, Any]:
    """Array metadata ``raw`` (of array ``key``), checked to be a Zarr v3 array's."""
    try:
        doc = json.loads(raw) if raw is not None else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("shape"), list):
        what = "missing" if raw is None else "not a Zarr array's metadata"
        raise VaultCorruptError(
            f"{snap.where}: array {key}: its metadata ({meta_key(key)}) is {what}. Run "
            f"`vault verify {snap.where}`; restore the vault from a copy."
        )
    return doc


def dump(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
