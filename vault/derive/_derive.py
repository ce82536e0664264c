"""New vaults from old ones: a row/time slice, selected episodes, several vaults combined.

Sources are only read. A destination is complete or absent where its location can stage
(``Location.staging``: on a local file system it is built under a hidden temporary name next
to it, ``.NAME.partial-XXXX``, and renamed into place at the end; an error or Ctrl-C removes
the temporary directory). Data is copied in blocks of
whole timesteps (about ``BLOCK_BYTES`` at a time), so memory stays bounded whatever the size.

A destination inside a source is refused before anything is written. A storage failure while
writing (a full disk, a read-only file system) is a typed error naming the destination (see
``vault.storage._failures.os_failure``); nothing is left there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np

from vault._args import callable_arg
from vault._errors import (
    VaultArgumentError,
    VaultReadError,
    VaultStructureError,
)
from vault.commits._snapshot import Snapshot
from vault.dataset._dataset import SHARDS, Dataset, root_json, shard_manifest
from vault.derive._checks import (
    building,
    destination,
    in_order,
    of_this_vault,
    outside_dataset,
    span_of,
)
from vault.facade._vault import Vault
from vault.format import _structure
from vault.format._episodes import EpisodeTable
from vault.format._records import MANIFEST_KEY, Manifest
from vault.read import _read
from vault.storage._kinds import LocationLike, parse_location
from vault.storage._location import (
    Location,
)
from vault.write._create import check_codec, create_vault, plan_manifest, publish_manifest
from vault.write._writer import Writer

BLOCK_BYTES = 64 << 20
Progress = Callable[[int, int], None]  # (timesteps copied, total)
Source = LocationLike | Vault


Spans = Mapping[str, tuple[int, int]]


@overload
def derive_slice(
    source: Dataset,
    dest: LocationLike,
    *,
    rows: Sequence[int] | None = None,
    start: int | None = None,
    stop: int | None = None,
    spans: Spans | None = None,
    codec: str | None = "auto",
    progress: Progress | None = None,
) -> Dataset: ...


@overload
def derive_slice(
    source: Source,
    dest: LocationLike,
    *,
    rows: Sequence[int] | None = None,
    start: int | None = None,
    stop: int | None = None,
    spans: None = None,
    codec: str | None = "auto",
    progress: Progress | None = None,
) -> Vault: ...


def derive_slice(
    source: Source | Dataset,
    dest: LocationLike,
    *,
    rows: Sequence[int] | None = None,
    start: int | None = None,
    stop: int | None = None,
    spans: Spans | None = None,
    codec: str | None = "auto",
    progress: Progress | None = None,
) -> Vault | Dataset:
    """A new vault holding ``rows`` x ``[start, stop)`` of ``source`` (opened read-only).

    The episode index is rebuilt: an episode already running at ``start`` is marked as of
    unknown start, one still running at ``stop`` stays open; seams are kept. The destination
    is complete or absent (built under a hidden name where the location can stage it).

    Args:
        source: a vault, its location, or a :class:`~vault.Dataset` of shards: the result is
            then a new dataset (same structure) of every shard sliced alike, under the same
            shard names.
        dest: the new vault's (or dataset's) location; it must not exist.
        rows: row indices (default: every row).
        start: first timestep (default 0).
        stop: timestep after the last (default: the committed length).
        spans: for a dataset, ``{shard: (start, stop)}`` instead of ``start``/``stop``: only
            the named shards, each with its own time range.
        codec: the new vault's codec, as in :meth:`Vault.create` (a dataset's shards keep its
            template's chunks and codecs with ``"auto"``).
        progress: called as ``progress(timesteps copied, total)``.

    Returns:
        The new vault, open read-only (a :class:`~vault.Dataset` for a dataset source).

    Raises:
        VaultArgumentError: ``spans`` that is not a mapping of shard names to
            ``(start, stop)`` pairs, or given with ``start``/``stop``.
        VaultReadError: rows or a time range (a span too) that select nothing or lie outside
            the data.
        VaultExistsError: something is at ``dest`` already.
        VaultLocationError: ``dest`` lies inside a source or holds one, or is a shard's place
            in a dataset (``ROOT/shards/NAME``).

    Examples:
        >>> import numpy as np
        >>> from vault import Vault, derive_slice
        >>> with Vault.create("runs/doc", {"x": np.float32(0)}, rows=3) as v:
        ...     v.append({"x": np.zeros((3, 10), np.float32)})
        10
        >>> part = derive_slice("runs/doc", "runs/doc-part", rows=[0, 2], start=6)
        >>> part.rows, part.committed_length
        (2, 4)
    """
    callable_arg("progress", progress)
    check_codec(codec, None)  # before anything is made, its folder included
    if isinstance(source, Dataset):
        return _dataset_slice(source, dest, rows, start, stop, spans, codec, progress)
    if spans is not None:
        raise VaultArgumentError("spans= picks time ranges of a dataset's shards; give a Dataset")
    with _opened(source) as src:
        # validated (no floats, bools, strings; in range) before anything is converted
        picked = np.arange(src.rows)[_read.row_selection(src, rows)].reshape(-1).tolist()
        if not picked:
            raise VaultReadError("rows selects no row")
        lo, hi = _read.time_range(src, start, stop)
        target = destination(dest, [src])
        if hi <= lo:
            raise VaultReadError(
                f"{src.where}: the time range [{lo}, {hi}) selects no timestep (the vault has "
                f"{src.length}); a derived vault holds at least one"
            )
        with (
            building(target) as tmp,
            _new_vault(src, tmp, len(picked), codec, _slice_op(lo, hi, picked)) as out,
        ):
            known = _starts_known(src, picked, lo)
            _copy(src, out, picked, lo, hi, known, progress, 0, hi - lo)
    return Vault.open(target)


def _slice_op(lo: int, hi: int, rows: list[int]) -> dict[str, Any]:
    """The ``derived_from`` record of a slice: its time range and the source's rows, in the
    new vault's order (docs/format.md, section 4.1.1)."""
    return {"op": "slice", "start": lo, "stop": hi, "rows": rows}


def _dataset_slice(
    dataset: Dataset,
    dest: LocationLike,
    rows: Sequence[int] | None,
    start: int | None,
    stop: int | None,
    spans: Spans | None,
    codec: str | None,
    progress: Progress | None,
) -> Dataset:
    snaps = dict(zip(dataset.shards, dataset.snapshots, strict=True))
    if spans is None:
        ranges = {}
        for name, snap in snaps.items():
            try:
                ranges[name] = _read.time_range(snap, start, stop)
            except VaultReadError as err:  # name the shard: they differ in length
                raise VaultReadError(
                    f"{dataset.location}: shard {name!r} ({snap.length} timesteps): {err}; "
                    "give spans={shard: (start, stop)} for shards of different lengths"
                ) from None
    else:
        if start is not None or stop is not None:
            raise VaultArgumentError("give start/stop (every shard) or spans, not both")
        if not isinstance(spans, Mapping):
            raise VaultArgumentError(
                f"spans must be a mapping of shard name to (start, stop), got "
                f"{type(spans).__name__}"
            )
        unknown = sorted(set(spans) - set(snaps))
        if unknown:
            raise VaultArgumentError(
                f"{dataset.location}: no shards {unknown}; the dataset has {dataset.shards}"
            )
        ranges = {name: span_of(dataset, snaps[name], name, spans[name]) for name in spans}
    if not ranges:
        raise VaultReadError(f"{dataset.location}: no shard to slice")
    picked = {}
    for name in ranges:
        src = snaps[name]
        picked[name] = np.arange(src.rows)[_read.row_selection(src, rows)].reshape(-1).tolist()
        if not picked[name]:
            raise VaultReadError(f"rows selects no row of shard {name!r}")
    target = outside_dataset(dataset, destination(dest, list(snaps.values())))
    total, copied = sum(hi - lo for lo, hi in ranges.values()), 0
    with building(target) as tmp:
        held: list[tuple[Location, Manifest]] = []
        for name in sorted(ranges):
            src, (lo, hi), chosen = snaps[name], ranges[name], picked[name]
            op = {**_slice_op(lo, hi, chosen), "shard": name}
            where = tmp.child(f"{SHARDS}/{name}")
            like = dataset.template if codec == "auto" else None  # a shard's leaves
            with _new_vault(src, where, len(chosen), codec, op, held, like) as out:
                known = _starts_known(src, chosen, lo)
                copied = _copy(src, out, chosen, lo, hi, known, progress, copied, total)
        for where, manifest in held:
            publish_manifest(where, manifest)
        with tmp.failures("write the dataset's root"):  # last: only now is it a dataset
            tmp.kvstore().write(MANIFEST_KEY, root_json(dataset.template)).result()
    return Dataset.open(target)


def derive_episodes(
    source: Source | Dataset,
    dest: LocationLike,
    episodes: EpisodeTable,
    *,
    codec: str | None = "auto",
    progress: Progress | None = None,
) -> Vault:
    """A one-row vault of the given complete episodes of ``source``, back to back.

    In order of their start time (then of their row), with the episode index rebuilt (the same
    episodes; one whose beginning was lost in the source, after a seam, keeps its start
    unknown).

    Args:
        source: a vault with an episode index, its location, or a :class:`~vault.Dataset` of
            shards (with ``episodes`` from its :meth:`~vault.Dataset.episodes`, whose
            ``shard`` column says where each is: the new vault holds them shard by shard, in
            the dataset's shard order).
        dest: the new vault's location; it must not exist.
        episodes: complete episodes of ``source``, e.g. ``source.episodes().select(...)``.
        codec: the new vault's codec, as in :meth:`Vault.create`.
        progress: called as ``progress(timesteps copied, total)``.

    Returns:
        The new vault, open read-only.

    Raises:
        VaultArgumentError: ``episodes`` is not an :class:`~vault.EpisodeTable`, or it is
            empty (a selection that no episode passed: nothing is written).
        VaultReadError: an open episode, one outside the data or not in the source's episode
            index (a table of another vault or shard), or a source without an episode index.
        VaultExistsError: something is at ``dest`` already.
        VaultLocationError: ``dest`` lies inside a source or holds one, or is a shard's place
            in a dataset.
    """
    callable_arg("progress", progress)
    check_codec(codec, None)  # before anything is made, its folder included
    if not isinstance(episodes, EpisodeTable):
        raise VaultArgumentError(f"episodes must be an EpisodeTable, got {type(episodes).__name__}")
    if len(episodes) == 0:
        raise VaultArgumentError(
            "derive_episodes was given no episode (a selection that none passed?); nothing "
            f"was written at {dest!s}"
        )
    if not episodes.complete.all():
        raise VaultReadError("derive_episodes takes complete episodes (an open one was given)")
    if isinstance(source, Dataset):
        return _dataset_episodes(source, dest, episodes, codec, progress)
    with _opened(source) as src:
        if src.manifest.episodes is None:
            raise VaultReadError(f"{src.where} has no episode index")
        table = of_this_vault(src, in_order(src, episodes))
        target = destination(dest, [src])
        op = {"op": "episodes", "count": len(table)}
        with building(target) as tmp, _new_vault(src, tmp, 1, codec, op) as out:
            _copy_episodes(src, table, out, True, (0, table.transitions), progress)
    return Vault.open(target)


def _dataset_episodes(
    dataset: Dataset,
    dest: LocationLike,
    episodes: EpisodeTable,
    codec: str | None,
    progress: Progress | None,
) -> Vault:
    if episodes.shard is None:
        raise VaultArgumentError(
            "episodes of a dataset need their shard column: take them from dataset.episodes()"
        )
    if not dataset.has_episodes:
        raise VaultReadError(f"{dataset.location} has no episode index")
    snaps = dict(zip(dataset.shards, dataset.snapshots, strict=True))
    unknown = sorted(set(episodes.shard.tolist()) - set(snaps))
    if unknown or not snaps:
        raise VaultArgumentError(
            f"{dataset.location}: no shard {unknown[0] if unknown else ''!r}; the dataset has "
            f"{dataset.shards}"
        )
    parts = [
        (
            snaps[name],
            of_this_vault(snaps[name], in_order(snaps[name], episodes[episodes.shard == name])),
        )
        for name in dataset.shards
        if (episodes.shard == name).any()
    ]
    target = outside_dataset(dataset, destination(dest, list(snaps.values())))
    op = {"op": "episodes", "count": len(episodes), "shards": len(parts)}
    first = next(iter(snaps.values()))
    done = (0, episodes.transitions)
    with building(target) as tmp, _new_vault(first, tmp, 1, codec, op) as out:
        for k, (src, table) in enumerate(parts):
            done = _copy_episodes(src, table, out, k == 0, done, progress)
    return Vault.open(target)


def _copy_episodes(
    src: Snapshot,
    table: EpisodeTable,
    out: Writer,
    first: bool,
    done: tuple[int, int],
    progress: Progress | None,
) -> tuple[int, int]:
    """Append ``table``'s episodes of ``src`` to ``out`` (``first``: the new vault's first
    append); ``done``: (timesteps copied, total) before and after, for ``progress``."""
    copied, total = done
    step = src.manifest.step_bytes * src.rows
    known = np.asarray(table.start_known, bool)
    i = 0
    while i < len(table):
        # one read of [first start, furthest end) serves every episode inside it; an episode
        # whose start was lost (after a seam) begins an append of its own, which says so
        lo = int(table.start[i])
        j, hi = i, lo
        while j < len(table):
            end = int(table.start[j] + table.length[j])
            if j > i and ((max(hi, end) - lo) * step > BLOCK_BYTES or not known[j]):
                break
            hi = max(hi, end)
            j += 1
        block = _leaves(src, None, lo, hi)
        joined = [
            np.concatenate(
                [
                    x[r : r + 1, s - lo : s - lo + n]
                    for r, s, n in zip(
                        table.row[i:j], table.start[i:j], table.length[i:j], strict=True
                    )
                ],
                axis=1,
            )
            for x in block
        ]
        # restart: True starts the row's episode afresh (the new vault's first append), False
        # starts it with its beginning unknown (as in the source); None continues
        restart = np.full(1, bool(known[i])) if (first and i == 0) or not known[i] else None
        out.append(_tree(src, joined), restart)
        copied += sum(int(table.length[k]) for k in range(i, j))
        if progress:
            progress(copied, total)
        i = j
    return copied, total


def combine(
    sources: Sequence[Source],
    dest: LocationLike,
    *,
    codec: str | None = "auto",
    progress: Progress | None = None,
) -> Vault:
    """One vault of several with the same structure and rows, concatenated along time.

    Each source may have its own length. Each joint is a seam: the open episodes at the end
    of a source are dropped from the index and the next source's rows start afresh.

    Args:
        sources: vaults or their locations, in order.
        dest: the new vault's location; it must not exist.
        codec: the new vault's codec, as in :meth:`Vault.create`.
        progress: called as ``progress(timesteps copied, total)``.

    Returns:
        The new vault, open read-only.

    Raises:
        VaultArgumentError: ``sources`` is not a list.
        VaultReadError: no source.
        VaultStructureError: sources that differ in structure or rows (every difference
            listed).
        VaultExistsError: something is at ``dest`` already.
    """
    if isinstance(sources, (str, bytes, os.PathLike, Vault, dict)) or not isinstance(
        sources, Sequence
    ):
        raise VaultArgumentError(
            f"sources must be a list of vaults or locations, got {type(sources).__name__} "
            "(wrap a single source in a list: combine([a, b], dest))"
        )
    callable_arg("progress", progress)
    check_codec(codec, None)  # before anything is made, its folder included
    if not sources:
        raise VaultReadError("combine needs at least one source")
    with contextlib.ExitStack() as stack:
        srcs = [stack.enter_context(_opened(s)) for s in sources]
        first = srcs[0]
        problems = [f"{s.where}: {why}" for s in srcs[1:] for why in _incompatible(first, s)]
        if problems:
            raise VaultStructureError("the vaults to combine differ", problems)
        total = sum(s.length for s in srcs)
        target = destination(dest, srcs)
        # every source in order, each with its own chain (the first's is nested as usual)
        chains = [(s.where, s.manifest.user_metadata.get("derived_from")) for s in srcs]
        op = {
            "op": "combine",
            "count": len(srcs),
            "sources": [
                {"source": where, **({"derived_from": d} if d is not None else {})}
                for where, d in chains
            ],
        }
        with building(target) as tmp, _new_vault(first, tmp, first.rows, codec, op) as out:
            copied = 0
            for src in srcs:
                known = _starts_known(src, list(range(src.rows)), 0)
                copied = _copy(src, out, None, 0, src.length, known, progress, copied, total)
    return Vault.open(target)


# ---------------------------------------------------------------------------------- helpers
def _copy(
    src: Snapshot,
    out: Writer,
    rows: list[int] | None,
    lo: int,
    hi: int,
    known: np.ndarray,
    progress: Progress | None,
    done: int,
    total: int,
) -> int:
    """Append ``rows`` x ``[lo, hi)`` of ``src`` to ``out`` block by block, cut at the
    source's seams (kept); rows start new episodes at ``lo`` (``known``: whose start is
    known)."""
    restart: np.ndarray | None = known
    n_rows = src.rows if rows is None else len(rows)
    picked = list(range(src.rows)) if rows is None else rows
    for seg_lo, seg_hi, lost in _segments(src, lo, hi):
        if seg_lo > lo and not lost:  # a restart seam of the source
            restart = _starts_known(src, picked, seg_lo)
        for t0, t1 in _blocks(src, seg_lo, seg_hi, n_rows):
            out.append(_tree(src, _leaves(src, rows, t0, t1)), restart, lost)
            restart, lost = None, 0
            done += t1 - t0
            if progress:
                progress(done, total)
    return done


@contextlib.contextmanager
def _opened(source: Source) -> Iterator[Snapshot]:
    """The snapshot of ``source`` (an open Vault's current one, or a location opened
    read-only)."""
    if isinstance(source, Vault):
        yield source.snapshot
        return
    src = Vault.open(parse_location(source, argument="source"))
    try:
        yield src.snapshot
    finally:
        src.close()


@contextlib.contextmanager
def _new_vault(
    src: Snapshot,
    location: Location,
    rows: int,
    codec: str | None,
    op: dict[str, Any],
    held: list[tuple[Location, Manifest]] | None = None,
    like: Manifest | None = None,
) -> Iterator[Writer]:
    """The writer of a new vault at ``location`` shaped like ``src``; closed (its lock
    released) when the block ends, however it ends, and then published: its manifest
    written, or, given ``held``, added there for the caller to publish later (the shards of
    a dataset, each published only once all are copied: where a build cannot be staged and
    renamed, a killed build must leave no shard that reads as a vault)."""
    out = _create_like(src, location, rows, codec, op, like)
    try:
        yield out
    except BaseException:
        with contextlib.suppress(Exception):
            out.close()
        raise
    out.close()
    if held is None:
        publish_manifest(location, out.snapshot.manifest)  # last: only now is it a vault
    else:
        held.append((location, out.snapshot.manifest))


def _create_like(
    src: Snapshot,
    location: Location,
    rows: int,
    codec: str | None,
    op: dict[str, Any],
    like: Manifest | None = None,
) -> Writer:
    """A new vault shaped like ``src`` with ``rows`` rows, its metadata's ``derived_from``
    saying ``op``; given ``like`` (a dataset's template), its leaves' chunks and codecs are
    the template's, as a shard's of that dataset are (format section 5.2)."""
    manifest = src.manifest
    example = _tree(src, [np.zeros(leaf.shape, np.dtype(leaf.dtype)) for leaf in manifest.leaves])
    leaves = manifest.episodes
    metadata = dict(manifest.user_metadata)
    # where this vault comes from; a source derived itself keeps its own record inside
    before = metadata.get("derived_from")
    metadata["derived_from"] = {
        "source": src.where,
        **op,
        **({"derived_from": before} if before is not None else {}),
    }
    planned = plan_manifest(
        example,
        rows=rows,
        codec=codec,
        level=None,
        chunk=None,
        metadata=metadata,
        episodes=leaves.as_dict() if leaves is not None else {},
    )
    if like is not None:
        planned = dataclasses.replace(planned, leaves=shard_manifest(like, rows).leaves)
    return create_vault(location, planned, publish=False)


def _blocks(src: Snapshot, lo: int, hi: int, rows: int) -> Iterator[tuple[int, int]]:
    per = max(1, BLOCK_BYTES // max(1, src.manifest.step_bytes * rows))
    for t0 in range(lo, hi, per):
        yield t0, min(hi, t0 + per)


def _segments(src: Snapshot, lo: int, hi: int) -> Iterator[tuple[int, int, int]]:
    """``[lo, hi)`` cut at the source's seams: (start, stop, timesteps lost before)."""
    cuts = sorted((seam.at, seam.lost) for seam in src.commit.seams if lo < seam.at < hi)
    edges = [lo, *(at for at, _ in cuts), hi]
    losts = [0, *(lost for _, lost in cuts)]
    for (a, b), lost in zip(itertools.pairwise(edges), losts, strict=True):
        if b > a:
            yield a, b, lost


def _starts_known(src: Snapshot, rows: list[int], at: int) -> np.ndarray:
    """Per row: does an episode start exactly at ``at`` (a known episode start)? At the start
    and at the source's seams the index says; elsewhere the flags of the timestep before."""
    cfg = src.manifest.episodes
    if cfg is None:
        return np.ones(len(rows), bool)
    if at == 0 or any(seam.at == at for seam in src.commit.seams):
        table = _read.episode_table(src, include_open=True)
        here = table.start == at
        first = dict(zip(table.row[here].tolist(), table.start_known[here].tolist(), strict=True))
        return np.array([first.get(r, True) for r in rows], bool)
    names = [n for n in (cfg.done, cfg.truncated) if n]
    flags = _read.read_numpy(src, rows, at - 1, at, names)
    ended = np.zeros(len(rows), bool)
    for name in names:
        ended |= np.asarray(flags[name][:, 0]).astype(bool)
    return ended


def _leaves(src: Snapshot, rows: list[int] | None, start: int, stop: int) -> list[np.ndarray]:
    """Every leaf of ``rows`` x ``[start, stop)``, in the vault's leaf order."""
    flat = _read.read_numpy(src, rows, start, stop, src.names)
    return [flat[name] for name in src.names]


def _tree(src: Snapshot, arrays: list[np.ndarray]) -> Any:
    """``arrays`` (in ``src``'s leaf order) as a tree of ``src``'s containers, whether or not
    this process has imported their classes."""
    return _structure.Stored(src.manifest.structure, arrays)


def _incompatible(a: Snapshot, b: Snapshot) -> list[str]:
    why = []
    if a.manifest.structure != b.manifest.structure:
        why.append("its structure differs from the first vault's")
    else:
        for x, y in zip(a.manifest.leaves, b.manifest.leaves, strict=True):
            if x.shape != y.shape or x.dtype != y.dtype:
                why.append(
                    f"experience/{x.name}: expected {list(x.shape)} {x.dtype}, "
                    f"got {list(y.shape)} {y.dtype}"
                )
    if a.rows != b.rows:
        why.append(f"rows: expected {a.rows}, got {b.rows}")
    if a.manifest.episodes != b.manifest.episodes:
        why.append(f"episode leaves: expected {_roles(a)}, got {_roles(b)}")
    return why


def _roles(snap: Snapshot) -> dict[str, str | None]:
    cfg = snap.manifest.episodes
    return cfg.as_dict() if cfg is not None else {"done": None, "truncated": None, "reward": None}
