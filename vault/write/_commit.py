"""The commit protocol (shared/DESIGN.md, Vault invariant 2): grow, data, episode index,
commit record, in that order.

Data chunks of every leaf and the episode-index entries are written and awaited first; then
the commit record is replaced atomically by the writer lock's holder (the file kvstore writes
a temp file, fsyncs and renames; an object store replaces an object in one PUT, conditional on
the version this writer last wrote: see ``WriterLock``). Readers never look past the committed
length, so after a crash the vault shows exactly the last committed prefix and the next append
overwrites any partial tail. Each step runs as a named fault point (``vault/write/_faults.py``).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import itertools
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from vault._errors import VaultCorruptError, VaultLockedError
from vault.commits._pins import history_key
from vault.commits._snapshot import Snapshot, at_commit, load_commit
from vault.format import _tags
from vault.format._episodes import FLAG_START_UNKNOWN, INDEX_CHUNK, advance
from vault.format._records import (
    BOUNDS,
    COMMIT_KEY,
    EXPERIENCE,
    HISTORY,
    RETURNS,
    ZARR_JSON,
    CommitRecord,
    Edge,
    EpisodeLeaves,
    EpisodeState,
    OpenEpisodes,
    PendingTags,
    group_json,
    leaf_key,
    read_commit_bytes,
)
from vault.storage._location import WriterLock
from vault.storage._reclaim import Reclaimer
from vault.storage._relay_write import LeaseLock, WriteRelay, array_keys, dump, meta_key
from vault.write._faults import run_point
from vault.write._plan import AppendJob


def apply(
    snap: Snapshot,
    job: AppendJob,
    lock: WriterLock,
    reclaimer: Reclaimer | None = None,
    relay: WriteRelay | None = None,
    lanes: int | None = None,
) -> Snapshot:
    """Append ``job`` to the vault at ``snap`` (its writer's latest commit) as the holder of
    ``lock``; returns the snapshot of the new commit. ``reclaimer``: where old versions of
    replaced files go; ``relay``: the writer's in-memory side on a remote location
    (``vault/storage/_relay_write.py``); ``lanes``: at most this many chunks of a local
    location's data are written (encoded) at once (None: all of them, see
    :func:`write_parts`)."""
    info = {"begin": job.begin, "end": job.end}
    return run_point("append", info, lambda: _apply(snap, job, lock, reclaimer, relay, lanes))


def fence(snap: Snapshot, lock: WriterLock) -> Snapshot:
    """Where the lock needs it (an object store's lease), rewrite the commit record with a
    new token on the version just read, so that a writer that held the lock before can never
    commit again; returns the snapshot of the record as fenced."""
    if not lock.fences:
        return snap
    token = uuid.uuid4().hex

    def rewrite(raw: bytes | None) -> bytes:
        current = read_commit_bytes(raw, snap.where, snap.manifest)
        return dataclasses.replace(current, fence=token).to_bytes()

    raw = run_point("fence", {}, lambda: lock.fence(COMMIT_KEY, rewrite))
    return at_commit(snap, read_commit_bytes(raw, snap.where, snap.manifest))


def mark_groups(snap: Snapshot) -> None:
    """Make ``history/`` an empty Zarr group where it is not one yet (vaults made before
    pins): zarr-python lists every folder of the hierarchy as a node."""
    key = f"{HISTORY}/{ZARR_JSON}"
    if snap.location.read(key) is None:
        with snap.location.failures("write the vault"):
            snap.location.kvstore().write(key, group_json()).result()


def _apply(
    snap: Snapshot,
    job: AppendJob,
    lock: WriterLock,
    reclaimer: Reclaimer | None,
    relay: WriteRelay | None,
    lanes: int | None,
) -> Snapshot:
    if relay is not None:
        try:
            return _append_remote(snap, job, cast(LeaseLock, lock), relay)
        except BaseException:
            relay.reset()  # what is stored past the commit is uncertain now
            raise
    lock.check()  # a writer that lost its lock writes nothing
    held: list[tuple[Path, int]] = []
    with reclaimer.appending() if reclaimer is not None else contextlib.nullcontext():
        try:
            return _append(snap, job, lock, reclaimer, held, lanes)
        finally:
            if reclaimer is not None:
                reclaimer.release(held)


def _append(
    snap: Snapshot,
    job: AppendJob,
    lock: WriterLock,
    rec: Reclaimer | None,
    held: list[tuple[Path, int]],
    lanes: int | None,
) -> Snapshot:
    futures = []
    arrays = snap.arrays
    if job.parts:
        if rec is not None:
            held += rec.hold(replaced_by_append(snap, job.begin, job.end))
        arrays = grow(snap, job.end)
        chunks = [leaf.chunk for leaf in snap.manifest.leaves]
        futures = write_parts(arrays, job, chunks, lanes)
    index = snap.index
    episodes = snap.commit.episodes
    cfg = snap.manifest.episodes
    added: list[tuple[str, int, np.ndarray]] = []
    if cfg is not None and episodes is not None:
        before = episodes.count
        index, episodes, written, entries = _index_entries(snap, cfg, job, episodes, rec, held)
        futures += written
        added = [
            (key, before, values) for key, values in zip((BOUNDS, RETURNS), entries, strict=False)
        ]
    # the record this commit replaces, kept under its number for readers pinned to it
    kv = snap.location.kvstore()
    futures.append(kv.write(history_key(snap.commit.seq), snap.commit.to_bytes()))
    for future in futures:
        future.result()
    places = None
    if _tags.enabled(snap.manifest):
        grown = dataclasses.replace(snap, arrays=arrays, index=index)
        places = _bind_places(grown, job, added)
    if rec is not None:
        held += rec.hold([COMMIT_KEY])
    commit = _commit(job, lock, _record_after(snap, job, episodes, places))
    return dataclasses.replace(snap, commit=commit, arrays=arrays, index=index)


def write_parts(
    arrays: tuple[Any, ...],
    job: AppendJob,
    chunks: Sequence[Sequence[int]] = (),
    lanes: int | None = None,
) -> list[Any]:
    """Start writing the job's data to ``arrays`` (grown to hold it); the write futures.

    Staged data (``vault.write._plan.Staged``) is written in whole chunks, clipped to an
    array's shape (which ``grow`` leaves at a chunk boundary, so only an array shaped
    otherwise, by an older writer, clips), and TensorStore may encode straight from it.

    ``lanes`` (with ``chunks``, each leaf's chunk shape): staged data is written
    chunk by chunk, at most ``lanes`` chunks at once (this waits for the oldest before it
    starts another). A write queued in the background runs so, one lane fewer than the
    machine's cores: TensorStore encodes every chunk of one write at once, on as many threads
    as there are cores, and a training step running beside it then waits for the core it
    lost (docs/performance.md, "Recording")."""
    if not job.staged:
        return [
            arr[:, job.begin : job.end].write(part)
            for arr, part in zip(arrays, job.parts, strict=True)
        ]
    pieces: list[tuple[Any, slice, slice, np.ndarray]] = []
    for i, (arr, staged) in enumerate(zip(arrays, job.staged, strict=True)):
        stop = min(staged.begin + int(staged.data.shape[1]), int(arr.shape[1]))
        data = staged.data[:, : stop - staged.begin]
        if lanes is None:
            pieces.append((arr, slice(None), slice(staged.begin, stop), data))
            continue
        rows, step = (int(n) for n in chunks[i][:2])
        count = int(data.shape[0])
        for r in range(0, count, rows):
            r1 = min(count, r + rows)  # the last row block may hold fewer rows
            t = staged.begin
            while t < stop:
                cut = min(stop, (t // step + 1) * step)
                part = data[r:r1, t - staged.begin : cut - staged.begin]
                pieces.append((arr, slice(r, r1), slice(t, cut), part))
                t = cut
    futures: list[Any] = []
    waiting: collections.deque[Any] = collections.deque()
    for arr, rows_at, times, part in pieces:
        if lanes is not None and len(waiting) >= lanes:
            waiting.popleft().result()
        future = arr[rows_at, times].write(part, can_reference_source_data_indefinitely=True)
        futures.append(future)
        waiting.append(future)
    return futures


def _record_after(
    snap: Snapshot,
    job: AppendJob,
    episodes: EpisodeState | None,
    places: tuple[dict[str, Edge], dict[str, PendingTags] | None] | None,
) -> CommitRecord:
    """The commit record after ``job``; ``places``: its edges and the place tags it keeps
    (:func:`_bind_places`)."""
    edges, pending = (None, None) if places is None else places
    return CommitRecord(
        committed_length=job.end,
        source_counter=job.source_counter,
        seq=snap.commit.seq + 1,
        seams=job.seams,
        episodes=episodes,
        edges=edges,
        fence=snap.commit.fence,
        uid=uuid.uuid4().hex[:12],
        tags=pending,
    )


def _commit(job: AppendJob, lock: WriterLock, commit: CommitRecord) -> CommitRecord:
    """Replace the commit record with ``commit``, the one after ``job`` (the last step of an
    append)."""
    run_point("commit", {"length": job.end}, lambda: lock.replace(COMMIT_KEY, commit.to_bytes()))
    return commit


def _append_remote(snap: Snapshot, job: AppendJob, lock: LeaseLock, relay: WriteRelay) -> Snapshot:
    """:func:`_append` on a remote location, through the writer's relay: chunks encoded in
    memory and PUT with their checksums known, tags written whole, array metadata fenced
    (``vault/storage/_relay_write.py``). The same steps and fault points, in the same order. The
    lease check's GET goes out first, and nothing is written before it returns."""
    checked = lock.start_check()  # a writer that lost its lock writes nothing
    cfg, episodes = snap.manifest.episodes, snap.commit.episodes
    count = 0 if episodes is None else episodes.count
    begins = {leaf_key(name): job.begin for name in snap.names}
    if snap.index:
        begins.update({BOUNDS: count, RETURNS: count})
    relay.prepare(snap, begins)
    for name, part in zip(snap.names, job.parts, strict=bool(job.parts)):
        relay.stage(snap, leaf_key(name), job.begin, part)
    added: list[tuple[str, int, np.ndarray]] = []
    if cfg is not None and episodes is not None:

        def stage(at: int, bounds: np.ndarray, returns: np.ndarray) -> None:
            relay.stage(snap, BOUNDS, at, np.asarray(bounds))
            relay.stage(snap, RETURNS, at, np.asarray(returns))

        _, episodes, _, entries = _index_entries(snap, cfg, job, episodes, None, [], stage)
        added = [(k, count, values) for k, values in zip((BOUNDS, RETURNS), entries, strict=False)]
    wants = dict.fromkeys(begins, job.end)
    if snap.index:
        indexed = 0 if episodes is None else episodes.count
        wants.update({BOUNDS: indexed, RETURNS: indexed})
    checked()
    history = snap.location.kvstore().write(history_key(snap.commit.seq), snap.commit.to_bytes())
    if relay.needs_growth(snap, wants):
        shapes = {name: int(a.shape[1]) for name, a in zip(snap.names, snap.arrays, strict=True)}
        info = {"length": job.end, "shapes": shapes}
        grown_meta = run_point("resize", info, lambda: relay.grow(snap, lock, wants))
    else:
        grown_meta = relay.grow(snap, lock, wants)  # the first append claims them all
    relay.upload(snap)
    arrays, index = relay.handles(snap)
    grown = dataclasses.replace(snap, arrays=arrays, index=index)
    places = None
    if _tags.enabled(snap.manifest):
        places = _bind_places(grown, job, added, relay.tails_of, relay.write_tags)
    record = _record_after(snap, job, episodes, places)
    record.to_bytes()  # encoded while the chunks are in flight: the commit goes out at once
    with snap.location.failures("write the vault"):
        relay.wait()
        grown_meta()
        history.result()
    return dataclasses.replace(grown, commit=_commit(job, lock, record))


def _bind_places(
    snap: Snapshot,
    job: AppendJob,
    added: list[tuple[str, int, np.ndarray]],
    tails_of: Callable[[list[str]], list[bytes | None]] | None = None,
    write_tags: Callable[..., Any] = _tags.write_tags,
) -> tuple[dict[str, Edge], dict[str, PendingTags] | None]:
    """Tag the chunks this append completed and record the new edges (``vault/format/_tags.py``):
    the stored checksums of every array are read in one batch (``tails_of``: known instead)
    and the tags either kept for the commit record (format 5, until enough are held) or
    written to the tag arrays together (by ``write_tags``). Returns the new record's edges
    and pending tags (None before format 5)."""
    edges = dict(snap.commit.edges or {})
    pending = dict(snap.commit.tags or {}) if _tags.keeps_pending(snap.manifest) else None
    appends = [
        (leaf_key(name), job.begin, part)
        for name, part in zip(snap.names, job.parts, strict=bool(job.parts))
    ]
    appends += [(key, begin, values[None]) for key, begin, values in added if len(values)]
    plans = []
    keys: list[str] = []
    for key, begin, part in appends:
        grid = snap.grids[key]
        end = begin + int(part.shape[1])
        array = _array_of(snap, key)

        def read_prefix(e0: int, array: Any = array, begin: int = begin, key: str = key) -> Any:
            region = array[:, e0:begin] if key.startswith(EXPERIENCE) else array[e0:begin][None]
            return np.asarray(region.read().result())

        k0, k1 = begin // grid.step, end // grid.step
        edge = _tags.edge_after(grid, edges.get(key), begin, end, part, read_prefix)
        tagged = _tags.tag_keys(grid, k0, k1)
        bound = [] if edge is None else _tags.edge_keys(grid, edge)
        plans.append((key, grid, k0, k1, edge, len(tagged), len(bound)))
        keys += tagged + bound
    tails = snap.location.read_tails(keys) if tails_of is None else tails_of(keys)
    futures = []
    at = 0
    for key, grid, k0, k1, edge, n_tagged, n_bound in plans:
        values = None
        if k1 > k0:
            values = _tags.tag_values_of(snap, grid, k0, k1, tails[at : at + n_tagged])
        start, to_write, kept = _tags.place_tags(snap, grid, k0, values)
        if to_write is not None and kept is None and _tags.keeps_pending(snap.manifest):
            info = {"key": key, "from": start, "count": int(to_write.size)}
            run_point(
                "tags", info, functools.partial(_written, write_tags, snap, grid, start, to_write)
            )
        else:
            futures.append(write_tags(snap, grid, start, to_write))
        if pending is not None:
            if kept is None:
                pending.pop(key, None)
            else:
                pending[key] = kept
        at += n_tagged
        if edge is None:
            edges.pop(key, None)
        else:
            edges[key] = _tags.with_tails(edge, tails[at : at + n_bound])
        at += n_bound
    for future in futures:
        if future is not None:
            future.result()
    return edges, pending


def _written(write_tags: Callable[..., Any], *args: Any) -> None:
    """``write_tags(*args)``, waited for where it returns a future (a local file system)."""
    future = write_tags(*args)
    if future is not None:
        future.result()


def _array_of(snap: Snapshot, key: str) -> Any:
    if key == BOUNDS:
        return snap.index[0]
    if key == RETURNS:
        return snap.index[1]
    return snap.arrays[snap.names.index(key[len(EXPERIENCE) + 1 :])]


def _index_entries(
    snap: Snapshot,
    cfg: EpisodeLeaves,
    job: AppendJob,
    episodes: EpisodeState,
    rec: Reclaimer | None,
    held: list[tuple[Path, int]],
    stage: Callable[[int, np.ndarray, np.ndarray], None] | None = None,
) -> tuple[tuple[Any, ...], EpisodeState, list[Any], tuple[np.ndarray, ...]]:
    """The episodes that end in the job's data: (index handles, new state, write futures,
    the new (bounds, returns) entries). ``stage(count, bounds, returns)``: writes the entries
    instead (a remote location's relay; the handles stay)."""
    rows = snap.rows
    open_eps = episodes.open
    if job.lost_before:
        open_eps = OpenEpisodes.fresh(rows, job.begin, FLAG_START_UNKNOWN)
    elif job.restart is not None:
        flags = np.where(job.restart, 0, FLAG_START_UNKNOWN).tolist()
        open_eps = OpenEpisodes.fresh(rows, job.begin, flags)
    count = episodes.count
    index = snap.index
    futures: list[Any] = []
    entries: tuple[np.ndarray, ...] = ()
    if job.parts:
        names = snap.names

        def part(name: str | None) -> np.ndarray | None:
            return None if name is None else job.parts[names.index(name)]

        done = part(cfg.done)
        if done is None:
            raise VaultCorruptError(f"{snap.where}: episode config lacks 'done'")
        bounds, returns, open_eps = advance(
            open_eps, job.begin, done, part(cfg.truncated), part(cfg.reward)
        )
        new_count = count + len(bounds)
        if len(bounds):
            if rec is not None:
                held += rec.hold(replaced_in_index(snap, count, new_count))

            def write() -> tuple[Any, ...]:
                if stage is not None:
                    stage(count, bounds, returns)
                    return index
                grown = grow_index(snap, new_count)
                futures.append(grown[0][count:new_count].write(bounds))
                futures.append(grown[1][count:new_count].write(returns))
                return grown

            index = run_point("index", {"count": count, "new_count": new_count}, write)
            count = new_count
            entries = (np.asarray(bounds), np.asarray(returns))
    return index, EpisodeState(count, open_eps), futures, entries


def grow(snap: Snapshot, length: int) -> tuple[Any, ...]:
    """Every array at least ``length`` long, growing a whole time-chunk at a time.

    Resizing rewrites (and fsyncs) each array's metadata, so arrays grow by at least a quarter
    (rounded up to whole chunks) rather than on every append; the Zarr shape may therefore run
    past the committed length (that tail holds the fill value). The commit record is the truth.
    """
    arrays = list(snap.arrays)
    if all(arr.shape[1] >= length for arr in arrays):
        return snap.arrays

    def resize() -> tuple[Any, ...]:
        wanted: list[tuple[int, str, Any, int]] = []
        for i, (arr, leaf) in enumerate(zip(arrays, snap.manifest.leaves, strict=True)):
            if arr.shape[1] < length:
                step = leaf.chunk_time
                wanted_length = max(length, arr.shape[1] + arr.shape[1] // 4)  # grow >= 25 %
                wanted.append((i, leaf_key(leaf.name), arr, -(-wanted_length // step) * step))
        grown = _grow_each([(key, arr, 1, target) for _, key, arr, target in wanted])
        for (i, *_), handle in zip(wanted, grown, strict=True):
            arrays[i] = handle
        return tuple(arrays)

    shapes = {name: int(a.shape[1]) for name, a in zip(snap.names, arrays, strict=True)}
    return run_point("resize", {"length": length, "shapes": shapes}, resize)


def trim(snap: Snapshot, lock: WriterLock, relay: WriteRelay | None = None) -> Snapshot:
    """Cut every array's shape down to exactly what is committed (metadata only: no chunk is
    touched), so that a vault at rest shows plain Zarr readers only committed data; the next
    writer grows them again (:func:`grow`). Done by the lock's holder as it closes, and only
    while the commit record is still ``snap``'s (a writer that lost its lock trims nothing).
    Each array stays at least as long as committed at every instant, so a crash part-way
    leaves some arrays longer than committed, as a crash during an append does."""
    if relay is not None:
        return _trim_remote(snap, cast(LeaseLock, lock), relay)
    length, count = snap.length, snap.episode_count
    long = [i for i, arr in enumerate(snap.arrays) if arr.shape[1] > length]
    long_index = [i for i, arr in enumerate(snap.index) if arr.shape[0] > count]
    if not long and not long_index:
        return snap
    try:
        lock.check()
    except VaultLockedError:
        return snap  # the shapes are the lock's new holder's to change
    now = load_commit(snap.location, snap.manifest)
    if (now.seq, now.uid, now.committed_length) != (snap.commit.seq, snap.commit.uid, length):
        return snap

    def cut() -> Snapshot:
        arrays, index = list(snap.arrays), list(snap.index)
        futures = [(arrays, i, _shrunk(arrays[i], 1, length)) for i in long]
        futures += [(index, i, _shrunk(index[i], 0, count)) for i in long_index]
        for handles, i, future in futures:
            handles[i] = future.result()
        return dataclasses.replace(snap, arrays=tuple(arrays), index=tuple(index))

    return run_point("trim", {"length": length, "episodes": count}, cut)


def _trim_remote(snap: Snapshot, lock: LeaseLock, relay: WriteRelay) -> Snapshot:
    """:func:`trim` on a remote location. Each array's metadata is read first; then the lease
    and the commit record (its fence token included) are checked; then the metadata is
    rewritten conditional on the generation read. A writer that took the lock over meanwhile
    keeps its shapes: before it relies on them (its first append) it claims every array's
    metadata (``vault/storage/_relay_write.py``), and from then on these writes fail."""
    keys = array_keys(snap)
    try:
        read = lock.read_all([meta_key(key) for key in keys], "close the vault")
        cut = relay.trimmed(snap, {key: read[meta_key(key)] for key in keys})
        if not cut:
            return snap
        lock.check()
    except VaultLockedError:
        return snap  # the shapes are the lock's new holder's to change
    if load_commit(snap.location, snap.manifest) != snap.commit:
        return snap

    def cut_shapes() -> Snapshot:
        try:
            lock.replace_all({meta_key(key): dump(doc) for key, doc in cut.items()})
        except VaultLockedError:
            return snap  # another writer holds these arrays now
        arrays, index = relay.handles(snap, cut)
        return dataclasses.replace(snap, arrays=arrays, index=index)

    return run_point("trim", {"length": snap.length, "episodes": snap.episode_count}, cut_shapes)


def _shrunk(arr: Any, axis: int, size: int) -> Any:
    """A future of ``arr`` cut to ``size`` along ``axis`` (its metadata only)."""
    bounds: list[int | None] = [None] * arr.rank
    bounds[axis] = size
    return arr.resize(exclusive_max=bounds, shrink_only=True, resize_metadata_only=True)


def grow_index(snap: Snapshot, count: int) -> tuple[Any, ...]:
    """The episode-index arrays holding at least ``count`` episodes (25 % headroom).

    Each array is measured on its own: an append that failed part-way (a full disk) may have
    grown one and not the other."""
    index = list(snap.index)
    short = [i for i, arr in enumerate(index) if arr.shape[0] < count]
    jobs = []
    for i in short:
        wanted = max(count, index[i].shape[0] * 5 // 4)
        jobs.append(((BOUNDS, RETURNS)[i], index[i], 0, -(-wanted // INDEX_CHUNK) * INDEX_CHUNK))
    for i, handle in zip(short, _grow_each(jobs), strict=True):
        index[i] = handle
    return tuple(index)


def _grow_each(jobs: list[tuple[str, Any, int, int]]) -> list[Any]:
    """Grow arrays ``(key, handle, axis, size)`` along ``axis`` to ``size`` (metadata only),
    in parallel, each started as fault point ``"grow"``; their new handles. Whether one
    fails to start or to finish, every one started is awaited before the first failure is
    raised, so that what is stored is settled when the append reports it."""
    started: list[Any] = []
    failure: BaseException | None = None
    try:
        for key, arr, axis, size in jobs:
            bounds: list[int | None] = [None] * arr.rank
            bounds[axis] = size

            def start(arr: Any = arr, bounds: list[int | None] = bounds) -> Any:
                return arr.resize(exclusive_max=bounds, expand_only=True, resize_metadata_only=True)

            started.append(run_point("grow", {"key": key, "size": size}, start))
    except BaseException as err:
        failure = err
    grown = []
    for future in started:
        try:
            grown.append(future.result())
        except BaseException as err:
            failure = failure or err
    if failure is not None:
        raise failure
    return grown


def replaced_by_append(snap: Snapshot, begin: int, end: int) -> Iterator[str]:
    """Keys that appending ``[begin, end)`` replaces: the partly filled time-chunk at ``begin``
    of every leaf (all its row blocks), and the metadata of arrays that grow."""
    for leaf, arr in zip(snap.manifest.leaves, snap.arrays, strict=True):
        folder = leaf_key(leaf.name)
        if arr.shape[1] < end:
            yield f"{folder}/{ZARR_JSON}"
        chunk_rows, chunk_time = leaf.chunk[0], leaf.chunk[1]
        if begin % chunk_time:
            items = [range(-(-n // c)) for n, c in zip(leaf.shape, leaf.chunk[2:], strict=True)]
            for r in range(-(-snap.rows // chunk_rows)):
                key = f"{folder}/c/{r}/{begin // chunk_time}"
                for at in itertools.product(*items):  # every item chunk of the place
                    yield "/".join([key, *map(str, at)])


def replaced_in_index(snap: Snapshot, count: int, new_count: int) -> Iterator[str]:
    """Keys that adding episodes ``[count, new_count)`` replaces."""
    for key, item, arr in zip((BOUNDS, RETURNS), ("/0", ""), snap.index, strict=True):
        if arr.shape[0] < new_count:
            yield f"{key}/{ZARR_JSON}"
        if count % INDEX_CHUNK:
            yield f"{key}/c/{count // INDEX_CHUNK}{item}"
