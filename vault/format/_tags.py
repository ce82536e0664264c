"""Checksums bound to a chunk's place.

Every chunk carries a crc32c (its last four bytes), which proves its bytes intact but not that
they are the chunk written *there*: a chunk moved or copied over another chunk of the same
array decodes and passes its checksum. Two records bind data to places (from format 3):

* **tags**, for complete chunks (every timestep committed; never rewritten again): when an
  append completes a chunk, the writer records the chunk's stored crc32c in the tag array
  ``tags/<array>`` (uint32 ``[row blocks, time chunks x bound item chunks]``). A read compares
  each complete chunk it touches with its tag (four bytes read per chunk, once per snapshot).
* **edges**, for the partly filled chunk at the committed end (the next append rewrites it,
  so no stored checksum of it can stay valid across a crash): the commit record keeps, per
  row, the crc32 of the decoded bytes of its committed timesteps in that chunk. A read that
  reaches the edge checks what it decoded (once per snapshot).

From format 5 (``PENDING_TAGS_SINCE``) the commit record keeps the tags of each array's latest
complete chunks (``CommitRecord.tags``: from a time chunk ``p`` to the complete end), and the
writer writes them to the tag array only once more than ``PENDING_MAX`` are held
(:func:`place_tags`); a reader takes the tags before ``p`` from the tag array and the rest from
the record (:func:`by_place`). An append then rewrites no tag chunk as a rule: on an object
store one request fewer per array, on a disk one read-modify-write and ``fsync`` fewer.

The tag array's own chunks have a crc32c; one moved to another place disagrees with the data
chunks' checksums. The episode index (``episodes/bounds``, ``episodes/returns``) is covered
the same way, with the episode axis as its time axis.

A *place* is a (row block, time chunk). A leaf whose chunks cut its item axes (a user's
``chunk=``) has several chunks per place, one per item chunk ``i`` (the flat index of its
item-chunk indices, in C order). From format 4 (``ITEM_PLACES_SINCE``) every one of them is
bound: the tag of item chunk ``i`` of time chunk ``k`` is at ``[b, k * n + i]`` (``n`` item
chunks per place), an edge's tails list ``n`` per row block, and the fingerprint covers them
all; with one item chunk per place that is format 3's layout. In format 3 only item chunk 0 was
bound (``Grid.bound`` is 1): the others are protected by their own crc32c alone, and an edge's
tails (item chunk 0 only) are not trusted, its committed part always checked by its crc.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import tensorstore as ts

from vault._errors import VaultCorruptError
from vault.format._limits import MAX_RECORD_BYTES
from vault.format._records import (
    BOUNDS,
    CHUNK_KEYS,
    PENDING_TAGS,
    PENDING_TAGS_SINCE,
    RETURNS,
    TAGS,
    CommitRecord,
    Edge,
    LeafSpec,
    Manifest,
    PendingTags,
    leaf_key,
)

TAG_CHUNK = 1024  # tags per chunk of a tag array (time chunks x bound item chunks)
TAG_READ_BATCH = 64  # tag chunks read together
PLACES_SINCE = 3  # the format version that keeps tags and edges
ITEM_PLACES_SINCE = 4  # the format version that binds every item chunk of a place
PENDING_MAX = 256
"""Place tags of one array kept in the commit record (format 5) before the writer writes them
to the tag array: a tag chunk is then written once per several appends, not by every append
that completes a chunk (an object store's append sends one request fewer per such array)."""


def version_for(leaves: Sequence[LeafSpec]) -> int:
    """The format version a new vault of ``leaves`` is written in: the newest
    (``PENDING_TAGS_SINCE``: the latest tags kept in the commit record). ``leaves`` stays
    in the signature for the versions that depend on them (format 4 was needed only where a
    leaf's chunks cut its item axes)."""
    del leaves
    return PENDING_TAGS_SINCE


@dataclasses.dataclass(frozen=True)
class Grid:
    """How an array is cut into chunks along its rows, its time (or episode) axis and its item
    axes, and how many of the chunks at each place are bound to it."""

    key: str  # the array's key (``experience/obs``, ``episodes/bounds``)
    rows: int  # data rows (1 for the episode index, which has no row axis)
    row_block: int | None  # rows per chunk; None: no row axis
    step: int  # chunk length along time
    items: tuple[int, ...]  # chunks along each item axis (1 each: a chunk holds whole items)
    bound: int = 1  # item chunks per place bound to it: all from format 4, the first before

    @property
    def row_blocks(self) -> int:
        return 1 if self.row_block is None else -(-self.rows // self.row_block)

    @property
    def partial(self) -> bool:
        """Whether only some of the chunks at a place are bound to it (format 3 or older, a
        leaf whose chunks cut its item axes)."""
        return self.bound < math.prod(self.items)

    def chunk(self, block: int, k: int, i: int = 0) -> str:
        """The key of item chunk ``i`` (flat index, C order) of the place ``(block, k)``."""
        at = []
        for n in reversed(self.items):
            i, inner = divmod(i, n)
            at.append(inner)
        parts = ([block] if self.row_block is not None else []) + [k] + at[::-1]
        return f"{self.key}/c/" + "/".join(map(str, parts))

    def item_index(self, at: Sequence[int]) -> int:
        """The flat index (C order) of the item-chunk indices ``at``."""
        i = 0
        for a, n in zip(at, self.items, strict=True):
            i = i * n + int(a)
        return i

    def bound_chunks(self, block: int, k: int) -> list[str]:
        """The keys of the chunks bound to the place ``(block, k)``, in item order."""
        return [self.chunk(block, k, i) for i in range(self.bound)]

    def blocks_of(self, rows: Iterable[int] | None) -> list[int]:
        if rows is None or self.row_block is None:
            return list(range(self.row_blocks))
        return sorted({int(r) // self.row_block for r in rows})


def enabled(manifest: Manifest) -> bool:
    return manifest.format_version >= PLACES_SINCE


def keeps_pending(manifest: Manifest) -> bool:
    """Whether the commit record keeps the latest place tags (format 5, :func:`place_tags`)."""
    return manifest.format_version >= PENDING_TAGS_SINCE


def grids(manifest: Manifest) -> dict[str, Grid]:
    from vault.format._episodes import INDEX_CHUNK

    every = manifest.format_version >= ITEM_PLACES_SINCE
    out = {}
    for leaf in manifest.leaves:
        items = leaf.item_chunks
        key = leaf_key(leaf.name)
        bound = math.prod(items) if every else 1
        out[key] = Grid(key, manifest.rows, leaf.chunk[0], leaf.chunk[1], items, bound)
    if manifest.episodes is not None:
        out[BOUNDS] = Grid(BOUNDS, 1, None, INDEX_CHUNK, (1,))
        out[RETURNS] = Grid(RETURNS, 1, None, INDEX_CHUNK, ())
    return out


def tag_metadata(grid: Grid) -> dict[str, Any]:
    return {
        "shape": [grid.row_blocks, 0],
        "data_type": "uint32",
        "chunk_grid": {
            "name": "regular",
            "configuration": {"chunk_shape": [grid.row_blocks, TAG_CHUNK]},
        },
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "fill_value": 0,
        "dimension_names": ["row_block", "time_chunk"],
    }


def _tag_spec(location: Any, grid: Grid) -> dict[str, Any]:
    """How a tag array is opened: its metadata must say what :func:`tag_metadata` does (a
    tag array that departs is refused, as a leaf's array is), its shape aside."""
    meta = tag_metadata(grid)
    expect = {k: meta[k] for k in ("data_type", "chunk_grid", "codecs", "fill_value")}
    return {
        "driver": "zarr3",
        "kvstore": location.child_spec(f"{TAGS}/{grid.key}"),
        "fill_missing_data_reads": False,
        "store_data_equal_to_fill_value": True,
        "metadata": {**expect, "chunk_key_encoding": CHUNK_KEYS},
    }


def tag_array(snap: Any, grid: Grid, at_least: int, create: bool = False) -> Any:
    """The tag array of ``grid`` (cached on the snapshot), at least ``at_least`` chunks long."""
    cache = snap.cache
    handle = cache.get(("tags", grid.key))
    if handle is None or handle.shape[1] < at_least:
        if snap.location.gates_files:  # what TensorStore reads to open it: a plain file
            snap.location.check_files([f"{TAGS}/{grid.key}/zarr.json"], MAX_RECORD_BYTES)
        spec = _tag_spec(snap.location, grid)
        context = snap.location.context()
        try:
            try:
                handle = ts.open(spec, open=True, context=context).result()
            except ValueError as err:
                if not (create and str(err).startswith("NOT_FOUND")):
                    raise
                spec["metadata"] = tag_metadata(grid)
                handle = ts.open(spec, create=True, context=context).result()
        except ValueError as err:
            raise VaultCorruptError(
                f"{snap.where}: the checksum array {TAGS}/{grid.key} cannot be opened ({err}). "
                "Restore the vault from a copy."
            ) from None
        cache[("tags", grid.key)] = handle
    return handle


# ------------------------------------------------------------------------------- writing
def tag_keys(grid: Grid, k0: int, k1: int) -> list[str]:
    """The keys of the chunks bound to time chunks ``[k0, k1)`` of every row block, in the
    order of their tags (row block, then time chunk, then item chunk)."""
    return [
        chunk
        for b in range(grid.row_blocks)
        for k in range(k0, k1)
        for chunk in grid.bound_chunks(b, k)
    ]


def write_tags(snap: Any, grid: Grid, k0: int, values: np.ndarray | None) -> Any | None:
    """Start writing the tags ``values`` (``[row blocks, n * bound]``: :func:`tag_values_of`) of
    time chunks ``[k0, k0 + n)`` of every row block to the tag array; the write's future, or
    None when there is nothing to write."""
    if values is None or values.shape[1] == 0:
        return None
    e0, e1 = k0 * grid.bound, k0 * grid.bound + values.shape[1]  # where the tags go
    handle = tag_array(snap, grid, 0, create=True)
    if handle.shape[1] < e1:
        target = -(-max(e1, handle.shape[1] * 5 // 4) // TAG_CHUNK) * TAG_CHUNK
        handle = handle.resize(
            exclusive_max=[None, target], expand_only=True, resize_metadata_only=True
        ).result()
        snap.cache[("tags", grid.key)] = handle
    return handle[:, e0:e1].write(values)


def pending(snap: Any, key: str) -> PendingTags | None:
    """The place tags of array ``key`` that the snapshot's commit record keeps (format 5)."""
    return (snap.commit.tags or {}).get(key)


def place_tags(
    snap: Any, grid: Grid, k0: int, values: np.ndarray | None
) -> tuple[int, np.ndarray | None, PendingTags | None]:
    """Where the tags ``values`` (:func:`tag_values_of`) of the time chunks an append completed
    from ``k0`` on go: ``(k, to_write, kept)``, the tags of time chunks from ``k`` to write to
    the tag array now (None: none), and those the new commit record keeps instead (None:
    none). Before format 5 every tag is written at once; from format 5 they join the commit
    record's pending tags, all written together once more than :data:`PENDING_MAX` are held."""
    if not keeps_pending(snap.manifest):
        return k0, values, None
    held = pending(snap, grid.key)
    start = k0 if held is None else held.start
    known = np.asarray(() if held is None else held.values, "<u4").reshape(grid.row_blocks, -1)
    if start + known.shape[1] // grid.bound != k0:
        raise VaultCorruptError(
            f"{snap.where}: array {grid.key}: the commit record's pending tags end at time chunk "
            f"{start + known.shape[1] // grid.bound}, not at the append's first, {k0}. Run "
            f"`vault verify {snap.where}`."
        )
    both = known if values is None else np.concatenate([known, values.astype("<u4")], axis=1)
    if both.size == 0:
        return start, None, None
    if both.size > PENDING_MAX:
        return start, both, None
    return start, None, PendingTags(start, tuple(int(x) for x in both.ravel()))


def tag_values_of(
    snap: Any, grid: Grid, k0: int, k1: int, tails: Sequence[bytes | None]
) -> np.ndarray:
    """The tags ``[row blocks, (k1 - k0) * bound]`` of chunks ``[k0, k1)`` from their stored
    checksums ``tails`` (for :func:`tag_keys`)."""
    keys = tag_keys(grid, k0, k1)
    missing = [key for key, tail in zip(keys, tails, strict=True) if tail is None or len(tail) < 4]
    if missing:
        raise VaultCorruptError(f"{snap.where}: chunks just written are missing: {missing[:4]}")
    return np.frombuffer(b"".join(t for t in tails if t), "<u4").reshape(grid.row_blocks, -1)


def _tails(tails: Sequence[bytes | None]) -> list[int | None]:
    return [None if t is None or len(t) < 4 else int(np.frombuffer(t, "<u4")[0]) for t in tails]


def edge_keys(grid: Grid, edge: Edge) -> list[str]:
    """The keys of the chunks bound to the partly filled place ``edge`` is in (by row block,
    then item chunk): the order of the edge's tails."""
    k = edge.start // grid.step
    return [chunk for b in range(grid.row_blocks) for chunk in grid.bound_chunks(b, k)]


def with_tails(edge: Edge, tails: Sequence[bytes | None]) -> Edge:
    """``edge`` with the stored checksums of its chunks (just written; ``tails`` read for
    :func:`edge_keys`)."""
    values = _tails(tails)
    if any(t is None for t in values):
        return edge  # not readable now: readers check the committed part instead
    return dataclasses.replace(edge, tails=tuple(int(t) for t in values if t is not None))


def edge_after(
    grid: Grid, prior: Edge | None, begin: int, end: int, part: np.ndarray, read_prefix: Any
) -> Edge | None:
    """The edge record after appending ``part`` (``[rows, end - begin, ...]``) at ``begin``.

    ``prior`` is the edge before (at ``begin``); ``read_prefix(e0)`` reads ``[rows, e0:begin]``
    when it does not fit (an older record)."""
    e0 = end // grid.step * grid.step
    if e0 == end:
        return None
    if e0 >= begin:
        data, crcs = part[:, e0 - begin :], [0] * grid.rows
    elif prior is not None and prior.start == e0:
        data, crcs = part, list(prior.crc)
    else:
        data = np.concatenate([read_prefix(e0), part], axis=1)
        crcs = [0] * grid.rows
    return Edge(e0, tuple(row_crc(data[r], c) for r, c in enumerate(crcs)))


def row_crc(row: np.ndarray, start: int = 0) -> int:
    return zlib.crc32(np.ascontiguousarray(row).data, start)


# ------------------------------------------------------------------------------- reading
def check_chunks(
    snap: Any, key: str, length: int, rows: Sequence[int] | None, lo: int, hi: int
) -> None:
    """The complete chunks of array ``key`` holding ``[rows, lo:hi]`` are the ones written
    there (``length``: the committed length of that array). Each is checked once per
    snapshot."""
    if not enabled(snap.manifest) or hi <= lo:
        return
    grid = snap.grids[key]
    complete = length // grid.step
    ks = range(lo // grid.step, min(-(-hi // grid.step), complete))
    if not ks:
        return
    seen: set[tuple[int, int]] = snap.cache.setdefault(("seen", key), set())
    todo = [(b, k) for b in grid.blocks_of(rows) for k in ks if (b, k) not in seen]
    if not todo:
        return
    tags = stored_tags(snap, grid, complete)
    chunks = [(b, k, i) for b, k in todo for i in range(grid.bound)]
    tails = snap.location.read_tails([grid.chunk(b, k, i) for b, k, i in chunks])
    wrong = [
        problem
        for (b, k, i), tail in zip(chunks, tails, strict=True)
        if (problem := place_problem(grid, b, k, tail, int(tags[b, k, i]), i)) is not None
    ]
    if wrong:
        raise place_error(snap, key, wrong)
    seen.update(todo)


def stored_tags(snap: Any, grid: Grid, complete: int) -> np.ndarray:
    """The tags of the first ``complete`` time chunks of ``grid``'s array, ``[row blocks,
    complete, bound]`` (read once per snapshot, :func:`read_tags`)."""
    tags = snap.cache.get(("tag values", grid.key))
    if tags is None or tags.shape[1] < complete:
        tags = read_tags(snap, grid, complete)
        snap.cache[("tag values", grid.key)] = tags
    return tags


def place_problem(
    grid: Grid, b: int, k: int, tail: bytes | None, tag: int, i: int = 0
) -> str | None:
    """What is wrong with complete chunk ``(b, k)`` (item chunk ``i``) whose stored checksum
    is ``tail`` (None: the chunk is absent) where ``tag`` was recorded; None when it is the
    chunk written there."""
    if tail is None:
        return missing(grid, b, k, grid.chunk(b, k, i))
    if len(tail) < 4 or int.from_bytes(tail[-4:], "little") != tag:
        return f"{grid.chunk(b, k, i)}{_span(grid, k)} is not the chunk written there"
    return None


def missing(grid: Grid, b: int, k: int, chunk: str | None = None) -> str:
    """The problem of a missing chunk (``chunk``: its key, by default ``grid.chunk(b, k)``)."""
    return f"{chunk or grid.chunk(b, k)}{_span(grid, k)} is missing"


def _span(grid: Grid, k: int) -> str:
    unit = "episodes" if grid.row_block is None else "timesteps"
    return f" ({unit} {k * grid.step}-{(k + 1) * grid.step - 1})"


def place_error(snap: Any, key: str, wrong: Sequence[str]) -> VaultCorruptError:
    """The error for the problems ``wrong`` (:func:`place_problem`) of array ``key``."""
    gone = all(w.endswith(" is missing") for w in wrong)
    why = (
        "the commit record says it holds committed data (deleted or lost)"
        if gone
        else "its checksum differs from the one recorded for that place (moved, overwritten "
        "or lost)"
    )
    return VaultCorruptError(
        f"{snap.where}: array {key}: "
        + "; ".join(wrong[:4])
        + (f" (and {len(wrong) - 4} more)" if len(wrong) > 4 else "")
        + f": {why}. Its data cannot be trusted; restore the vault from a copy."
    )


def read_tags(snap: Any, grid: Grid, complete: int) -> np.ndarray:
    """The tags of time chunks ``[0, complete)``, ``[row blocks, complete, bound]``: those in
    the tag array (:func:`in_array`) and those the commit record keeps.

    Read as the tag array's chunk files and decoded here (:func:`decode_tag_chunk`): for a
    small read, opening the array through TensorStore would cost more than the check."""
    chunks = tag_chunk_keys(grid, in_array(snap, grid, complete))
    values: list[np.ndarray] = []
    for j0 in range(0, len(chunks), TAG_READ_BATCH):  # a missing one ends it: nothing past it
        batch = [f"{TAGS}/{grid.key}/c/0/{j}" for j in chunks[j0 : j0 + TAG_READ_BATCH]]
        raws = snap.location.read_many(batch)
        values += [decode_tag_chunk(snap, grid, k, raw) for k, raw in zip(batch, raws, strict=True)]
    return by_place(snap, grid, values, complete)


def in_array(snap: Any, grid: Grid, complete: int) -> int:
    """How many of the first ``complete`` time chunks of ``grid``'s array have their tags in
    its tag array; the commit record keeps the rest (format 5, :func:`pending`)."""
    held = pending(snap, grid.key)
    return complete if held is None else min(held.start, complete)


def by_place(snap: Any, grid: Grid, values: Sequence[np.ndarray], complete: int) -> np.ndarray:
    """The decoded tag chunks ``values`` (:func:`tag_chunk_keys` of :func:`in_array`, in order)
    and the commit record's pending tags as the tags of the first ``complete`` time chunks,
    ``[row blocks, complete, bound]``."""
    n = in_array(snap, grid, complete) * grid.bound
    parts = [np.concatenate(values, axis=1)[:, :n]] if values else []
    held = pending(snap, grid.key)
    if held is not None and complete > held.start:
        kept = np.asarray(held.values, "<u4").reshape(grid.row_blocks, -1)
        parts.append(kept[:, : (complete - held.start) * grid.bound])
    flat = np.concatenate(parts, axis=1) if parts else np.zeros((grid.row_blocks, 0), "<u4")
    if flat.shape[1] != complete * grid.bound:
        raise VaultCorruptError(
            f"{snap.where}: array {grid.key}: {flat.shape[1]} place tags are recorded for the "
            f"{complete * grid.bound} complete chunks of each row block. Run `vault verify "
            f"{snap.where}`."
        )
    return flat.reshape(grid.row_blocks, complete, grid.bound)


def tag_chunk_keys(grid: Grid, complete: int) -> range:
    """The indices ``j`` of the tag array's chunks (keys ``tags/<array>/c/0/<j>``) that hold
    the tags of time chunks ``[0, complete)``: a range, so a claimed length costs nothing."""
    return range(-(-complete * grid.bound // TAG_CHUNK))


def encode_tag_chunk(values: np.ndarray) -> bytes:
    """A stored tag chunk holding ``values`` ``[row blocks, TAG_CHUNK]`` (the inverse of
    :func:`decode_tag_chunk`)."""
    import google_crc32c

    body = np.ascontiguousarray(values, "<u4").tobytes()
    return body + google_crc32c.value(body).to_bytes(4, "little")


def decode_tag_chunk(snap: Any, grid: Grid, key: str, raw: bytes | None) -> np.ndarray:
    """The tags ``[row blocks, TAG_CHUNK]`` in the stored tag chunk ``raw`` (at ``key``; None:
    absent): its codecs are ``bytes`` little endian then ``crc32c``, fixed by
    :func:`tag_metadata`; its crc32c is checked."""
    import google_crc32c

    if raw is None or len(raw) != grid.row_blocks * TAG_CHUNK * 4 + 4:
        what = "missing" if raw is None else f"{len(raw)} bytes long"
        raise VaultCorruptError(
            f"{snap.where}: checksum chunk {key} is {what}. Restore the vault from a copy."
        )
    body, trailer = raw[:-4], raw[-4:]
    if google_crc32c.value(body) != int.from_bytes(trailer, "little"):
        raise VaultCorruptError(
            f"{snap.where}: checksum chunk {key} is corrupt (its crc32c does not match). "
            "Restore the vault from a copy."
        )
    return np.frombuffer(body, "<u4").reshape(grid.row_blocks, TAG_CHUNK)


def check_edge(snap: Any, key: str, read: Any, data: np.ndarray | None = None) -> None:
    """The committed timesteps of the partly filled chunk at the end of array ``key`` are
    the ones the commit recorded. ``data``: those timesteps ``[rows, n, ...]`` already
    decoded (else ``read(e0, end)`` reads them). Checked once per snapshot."""
    commit: CommitRecord = snap.commit
    edge = (commit.edges or {}).get(key)
    if edge is None or not enabled(snap.manifest):
        return
    done = ("edge", key, edge)
    if done in snap.cache:
        return
    grid = snap.grids[key]
    if (  # the chunks as stored at the commit: four bytes each to compare
        edge.tails
        and not grid.partial
        and _tails(snap.location.read_tails(edge_keys(grid, edge))) == list(edge.tails)
    ):
        snap.cache[done] = True
        return
        # rewritten since (a writer appending, or one that died mid-append): what counts is
        # the committed part, checked below against its per-row checksums
    region = read(edge.start) if data is None else data
    got = [row_crc(region[r]) for r in range(region.shape[0])]
    bad = [r for r, (a, b) in enumerate(zip(got, edge.crc, strict=False)) if a != b]
    if bad or len(got) != len(edge.crc):
        raise VaultCorruptError(
            f"{snap.where}: array {key}: the committed timesteps from {edge.start} (the last, "
            f"partly filled chunk) of rows {bad[:8]} are not the data written there: their "
            "checksums differ from the ones the commit recorded (moved, overwritten or lost "
            "data). Restore the vault from a copy."
        )
    snap.cache[done] = True


def edge_checked(snap: Any, key: str) -> bool:
    """Whether the partly filled chunk at the committed end of array ``key`` needs no more
    checking for this snapshot (none is recorded, or it was checked)."""
    edge = (snap.commit.edges or {}).get(key)
    return edge is None or not enabled(snap.manifest) or ("edge", key, edge) in snap.cache


def note_edge_tails(snap: Any, key: str, tails: dict[int, bytes]) -> None:
    """Count the committed end's partly filled chunk of array ``key`` as checked when
    ``tails`` (the stored checksums of the chunks bound to that place, by their position in
    :func:`edge_keys`, from the very bytes a read is decoding) are those the commit
    recorded."""
    edge = (snap.commit.edges or {}).get(key)
    if edge is None or not edge.tails or not enabled(snap.manifest) or snap.grids[key].partial:
        return
    if len(tails) == len(edge.tails) and all(
        len(tails.get(at, b"")) >= 4 and int.from_bytes(tails[at][-4:], "little") == tag
        for at, tag in enumerate(edge.tails)
    ):
        snap.cache[("edge", key, edge)] = True


# -------------------------------------------------------------------------------- verify
@dataclasses.dataclass
class PlaceView:
    """What the checks above need of a snapshot, built from records already checked (by
    ``verify``; by a dataset reading its shards' episode indexes)."""

    location: Any
    manifest: Manifest
    grids: dict[str, Grid]
    cache: dict[Any, Any]
    where: str
    commit: CommitRecord


def verify_places(
    location: Any,
    manifest: Manifest,
    record: dict[str, Any],
    arrays: Sequence[tuple[str, Any, int]],
) -> list[tuple[str, str]]:
    """Check every complete chunk and every edge of ``arrays`` (key, open handle, committed
    length along time); (array key, message) for each array that fails."""
    if not enabled(manifest):
        return []
    edges = record.get("edges", {})
    kept = record.get(PENDING_TAGS, {}) if manifest.format_version >= PENDING_TAGS_SINCE else None
    view = PlaceView(
        location=location,
        manifest=manifest,
        grids=grids(manifest),
        cache={},
        where=str(location),
        commit=CommitRecord(
            int(record["committed_length"]),
            edges={k: Edge.from_json(e) for k, e in edges.items() if isinstance(e, dict)},
            tags=None
            if not isinstance(kept, dict)
            else {k: PendingTags.from_json(t) for k, t in kept.items() if isinstance(t, dict)},
        ),
    )
    found = []
    for key, handle, length in arrays:
        if key not in view.grids:
            continue
        rows_axis = view.grids[key].row_block is not None

        def read(e0: int, handle: Any = handle, end: int = length, rows: bool = rows_axis) -> Any:
            region = handle[:, e0:end] if rows else handle[e0:end][None]
            return np.asarray(region.read().result())

        try:
            check_chunks(view, key, length, None, 0, length)
            check_edge(view, key, read)
        except (VaultCorruptError, ValueError) as err:
            found.append((key, str(err)))
    return found
