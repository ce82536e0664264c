"""What a derive checks before it writes anything: its destination (never inside or over a
source, never a shard's place in a dataset; built whole or not at all, a storage failure
named as the destination's), and the episodes and time spans it is given (each one of its
source's)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from vault._errors import (
    VaultAccessError,
    VaultArgumentError,
    VaultError,
    VaultLocationError,
    VaultNotFoundError,
    VaultReadError,
)
from vault.commits._snapshot import Snapshot
from vault.dataset._dataset import Dataset
from vault.format._episodes import EpisodeTable
from vault.read import _read
from vault.storage._failures import failed_os_call, os_failure, reason_of, remedy_of, storage_error
from vault.storage._kinds import LocationLike, parse_location
from vault.storage._location import Location, dataset_above


def outside_dataset(dataset: Dataset, target: Location) -> Location:
    """``target``, refused where it lies inside the source dataset's root."""
    root = parse_location(dataset.location)
    if root.contains(target):
        raise VaultLocationError(
            f"{target}: the destination is inside the source dataset {root}; choose a "
            "destination outside it (nothing was written)"
        )
    return target


def span_of(dataset: Dataset, snap: Snapshot, name: str, span: Any) -> tuple[int, int]:
    """Shard ``name``'s ``(start, stop)`` of ``spans``: a pair that selects timesteps."""
    if isinstance(span, (str, bytes)) or not isinstance(span, Sequence) or len(span) != 2:
        raise VaultArgumentError(
            f"spans[{name!r}] must be a (start, stop) pair of the shard's timesteps, got {span!r}"
        )
    lo, hi = _read.time_range(snap, *span)
    if hi <= lo:
        raise VaultReadError(
            f"{dataset.location}: spans[{name!r}] = {tuple(span)!r} selects no timestep of "
            f"shard {name!r} ({snap.length} timesteps); leave the shard out of spans instead"
        )
    return lo, hi


def of_this_vault(src: Snapshot, episodes: EpisodeTable) -> EpisodeTable:
    """``episodes``, each checked to be a complete episode of ``src``'s index (the same row,
    start and length): a table of another vault, or of another shard of a dataset, would copy
    other timesteps than it names."""
    _read.of_this_shard(src, episodes)  # a dataset's table: only this shard's episodes
    index = _read.episode_table(src, False)
    known = set(zip(index.row.tolist(), index.start.tolist(), index.length.tolist(), strict=True))
    asked = zip(
        episodes.row.tolist(), episodes.start.tolist(), episodes.length.tolist(), strict=True
    )
    strange = [e for e in asked if e not in known]
    if strange:
        shards = sorted(set(episodes.shard.tolist())) if episodes.shard is not None else []
        whose = f" (the table's shard column names {shards})" if shards else ""
        shown = ", ".join(f"row {r} [{t}, {t + n})" for r, t, n in strange[:3])
        raise VaultReadError(
            f"{len(strange)} of the {len(episodes)} episodes given are not episodes of "
            f"{src.where}{whose}: {shown}; take them from this vault's episodes()"
        )
    return episodes


def in_order(src: Snapshot, episodes: EpisodeTable) -> EpisodeTable:
    """``episodes`` by start time, then row (``np.lexsort`` sorts by its last key first),
    checked to lie inside ``src``'s committed data."""
    table = episodes[np.lexsort((episodes.row, episodes.start))]
    outside = (
        (table.row < 0)
        | (table.row >= src.rows)
        | (table.start < 0)
        | (table.length < 1)
        | (table.start + table.length > src.length)
    )
    if outside.any():
        bad = table[np.flatnonzero(outside)[:3]]
        shown = ", ".join(
            f"row {r} [{t}, {t + n})"
            for r, t, n in zip(
                bad.row.tolist(), bad.start.tolist(), bad.length.tolist(), strict=True
            )
        )
        raise VaultReadError(
            f"{int(outside.sum())} episode(s) lie outside the committed data of {src.where} "
            f"({src.rows} rows x {src.length} timesteps): {shown}"
        )
    return table


def destination(dest: LocationLike, sources: Sequence[Snapshot]) -> Location:
    """The destination's location, refused (before anything is written) where it lies inside
    a source (the copy would be written into what it copies), holds a source (a build there
    would clear it first), or is a shard's place in a dataset (a derived vault there would be
    a shard no writer of the dataset made, and one of another shape would keep the dataset
    from opening)."""
    target = parse_location(dest, argument="dest")
    for src in sources:
        if src.location.contains(target):
            raise VaultLocationError(
                f"{target}: the destination is inside the source vault {src.where}; choose a "
                "destination outside every source (nothing was written)"
            )
        if target.contains(src.location):
            raise VaultLocationError(
                f"{target}: the destination holds the source vault {src.where}; choose a "
                "destination outside every source (nothing was written)"
            )
    refuse_shard_place(target)
    return target


def refuse_shard_place(target: Location) -> None:
    """Refuse a new vault's ``target`` that is a shard's place in a dataset: a vault made there
    (derived or imported) would be a shard no writer of the dataset made, and one of another
    shape would keep the dataset from opening."""
    root = dataset_above(target)
    if root is not None:
        raise VaultLocationError(
            f"{target}: the destination is a shard's place in the dataset {root}; a derived "
            "or imported vault is written outside a dataset (its shards are made by "
            "Dataset.shard), so choose another destination (nothing was written)"
        )


@contextlib.contextmanager
def building(target: Location) -> Iterator[Location]:
    """``target.staging()``, where a storage failure while the new vault is built is an error
    naming ``target`` (the staged copy is removed: nothing is left there)."""
    staged: list[Location] = []
    try:
        with target.staging() as tmp:
            staged.append(tmp)
            yield tmp
    except (OSError, ValueError, VaultError) as err:
        typed = write_failure(err, target, staged[0] if staged else target)
        if typed is None:
            raise
        raise typed from err


def write_failure(err: BaseException, target: Location, tmp: Location) -> VaultError | None:
    """``err`` as a typed error if a storage failure caused it (a write under ``tmp`` or
    ``target``: named as the destination's; a read elsewhere, of a source: named as such)."""
    cause = err.__cause__ if isinstance(err, VaultError) else err
    if cause is not None and target.remote:  # an object store's refusal as it words it
        typed = target.typed_failure(cause, "write the new vault")
        if isinstance(typed, (VaultAccessError, VaultNotFoundError)):
            return typed
    found = None if cause is None else failed_os_call(cause)
    if cause is None or found is None:
        return None
    code, path = found
    staged, final = str(tmp).rstrip("/"), str(target).rstrip("/")
    if path is not None and (path == staged or path.startswith(f"{staged}/")):
        path = final + path[len(staged) :]
    elif path is not None and not (path == final or path.startswith(f"{final}/")):
        return storage_error(cause, None, None)  # not the destination's (a source's read)
    place = f" at {path}" if path and path != final else ""
    return os_failure(
        code,
        f"{final}: cannot write the new vault: {reason_of(code)}{place}; nothing was left at "
        f"{final}; {remedy_of(code)}",
    )
