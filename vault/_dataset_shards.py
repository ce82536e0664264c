"""A dataset's shards as records, loaded in batches: what :class:`vault.Dataset` knows of each
shard without opening its arrays.

Opening a shard as a :class:`Vault` opens every array through TensorStore (about a millisecond
per shard, most of it Python); a dataset of many small shards would pay that for each one on
open. Here a dataset reads every shard's manifest and commit record in one batch of concurrent
reads (parsing each distinct manifest once: shards written from one template share its bytes),
opens a shard's arrays only when its data is read, and reads the episode index of every shard
in one more batch, decoded here and checked as a shard's own read checks it (its crc32c, the
place checks of complete chunks, the committed part of the last chunk).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from vault._episodes import INDEX_CHUNK, EpisodeTable, open_table
from vault._errors import VaultCorruptError
from vault._format import (
    BOUNDS,
    COMMIT_KEY,
    MANIFEST_KEY,
    RETURNS,
    CommitRecord,
    Manifest,
    read_commit_bytes,
    read_manifest_bytes,
)
from vault._location import Location
from vault._pins import commit_id
from vault._snapshot import load_snapshot
from vault._tags import Grid, PlaceView, check_chunks, check_edge, grids

if TYPE_CHECKING:
    from vault._vault import Vault

SHARDS = "shards"


@dataclasses.dataclass
class Shard:
    """One shard as the dataset last saw it: its manifest and commit record (its raw bytes, to
    see cheaply whether it moved), and its :class:`Vault` once its data has been read."""

    name: str
    where: Location
    manifest: Manifest
    commit: CommitRecord
    raw_commit: bytes
    vault: Vault | None = None
    cache: dict[Any, Any] = dataclasses.field(default_factory=dict)  # place checks done

    @property
    def rows(self) -> int:
        return self.manifest.rows

    @property
    def length(self) -> int:
        return self.commit.committed_length

    @property
    def commit_id(self) -> str:
        return commit_id(self.commit)

    @functools.cached_property
    def grids(self) -> dict[str, Grid]:
        return grids(self.manifest)

    def opened(self) -> Vault:
        """The shard as a read-only :class:`Vault` at this record's commit (arrays opened now,
        once)."""
        if self.vault is None:
            from vault._vault import vault_of_snapshot

            snap = load_snapshot(self.where, False, manifest=self.manifest, commit=self.commit)
            self.vault = vault_of_snapshot(snap)
        return self.vault


class ManifestCache:
    """Parsed shard manifests by their bytes, each checked against the dataset's template
    once (``check`` raises for a shard that does not match)."""

    def __init__(self, check: Callable[[str, Manifest], None]) -> None:
        self._check = check
        self._parsed: dict[bytes, Manifest] = {}

    def manifest(self, name: str, where: Location, raw: bytes) -> Manifest:
        manifest = self._parsed.get(raw)
        if manifest is None:
            manifest = read_manifest_bytes(raw, str(where))
            self._check(name, manifest)
            if len(self._parsed) < 4096:
                self._parsed[raw] = manifest
        return manifest


def load(
    root: Location, names: Sequence[str], known: dict[str, Shard], manifests: ManifestCache
) -> dict[str, Shard]:
    """Every shard of ``names`` as it is now: the commit records of ``known`` shards and the
    manifests and commit records of new ones read in one batch. A shard without a manifest
    yet (being created) is left out."""
    keys: list[str] = []
    for name in names:
        if name not in known:
            keys.append(f"{SHARDS}/{name}/{MANIFEST_KEY}")
        keys.append(f"{SHARDS}/{name}/{COMMIT_KEY}")
    values = iter(root.read_many(keys))
    out: dict[str, Shard] = {}
    for name in names:
        old = known.get(name)
        raw_manifest = next(values) if old is None else None
        raw_commit = next(values)
        if old is None and raw_manifest is None:
            continue  # being created: shown once its manifest is there
        if old is not None:
            out[name] = _moved(old, raw_commit)
            continue
        where = root.child(f"{SHARDS}/{name}")
        assert raw_manifest is not None
        manifest = manifests.manifest(name, where, raw_manifest)
        commit = read_commit_bytes(raw_commit, str(where), manifest)
        out[name] = Shard(name, where, manifest, commit, raw_commit or b"")
    return out


def _moved(shard: Shard, raw_commit: bytes | None) -> Shard:
    """``shard`` at the commit record ``raw_commit`` (itself when that has not changed)."""
    if raw_commit == shard.raw_commit:
        return shard
    commit = read_commit_bytes(raw_commit, str(shard.where), shard.manifest)
    if shard.vault is not None:
        shard.vault.refresh()
        commit = shard.vault.snapshot.commit
    return dataclasses.replace(shard, commit=commit, raw_commit=raw_commit or b"", cache={})


# ------------------------------------------------------------------------------- episodes
class _Fetched:
    """A location whose chunk tails come from chunks already read (the rest from ``inner``)."""

    def __init__(self, inner: Location, values: dict[str, bytes]) -> None:
        self.inner, self.values = inner, values

    def read_tails(self, keys: list[str], size: int = 4) -> list[bytes | None]:
        missing = [k for k in keys if k not in self.values]
        fetched = dict(zip(missing, self.inner.read_tails(missing, size), strict=True))
        return [self.values[k][-size:] if k in self.values else fetched[k] for k in keys]

    def read_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return self.inner.read_many(keys)

    def __str__(self) -> str:
        return str(self.inner)


def episodes(root: Location, shards: Sequence[Shard], include_open: bool) -> EpisodeTable:
    """Every shard's episode table, shard by shard, with a ``shard`` column. The index chunks
    of every shard are read in one batch; a shard's table is kept until its commit moves (its
    committed episodes never change), so a reader that refreshes reads only what moved."""
    todo = [s for s in shards if ("table", include_open) not in s.cache]
    wanted: list[tuple[Shard, str]] = []
    for shard in todo:
        count = shard.commit.episodes.count if shard.commit.episodes is not None else 0
        for key in (BOUNDS, RETURNS):
            for j in range(-(-count // INDEX_CHUNK)):
                wanted.append((shard, shard.grids[key].chunk(0, j)))
    raws = root.read_many([f"{SHARDS}/{s.name}/{chunk}" for s, chunk in wanted])
    fetched: dict[str, dict[str, bytes | None]] = {}
    for (shard, chunk), raw in zip(wanted, raws, strict=True):
        fetched.setdefault(shard.name, {})[chunk] = raw
    buffers = (np.empty((INDEX_CHUNK, 4), "<i8"), np.empty(INDEX_CHUNK, "<f8"))
    for shard in todo:
        table = _table(shard, fetched.get(shard.name, {}), include_open, buffers)
        table = dataclasses.replace(table, shard=np.full(len(table), shard.name))
        shard.cache[("table", include_open)] = table
    if not shards:
        return dataclasses.replace(EpisodeTable.empty(), shard=np.zeros(0, str))
    return EpisodeTable.concat([s.cache[("table", include_open)] for s in shards])


def _table(
    shard: Shard,
    chunks: dict[str, bytes | None],
    include_open: bool,
    buffers: tuple[np.ndarray, np.ndarray],
) -> EpisodeTable:
    cfg = shard.manifest.episodes
    assert cfg is not None
    state = shard.commit.episodes
    count = 0 if state is None else state.count
    has_reward = cfg.reward is not None
    table = None
    if count:
        where = str(shard.where)
        present = {k: v for k, v in chunks.items() if v is not None}
        view = PlaceView(
            _Fetched(shard.where, present), shard.manifest, shard.grids, shard.cache, where,
            shard.commit,
        )  # fmt: skip
        columns = {}
        for key, buffer in ((BOUNDS, buffers[0]), (RETURNS, buffers[1])):
            parts = []
            for j, chunk in enumerate([k for k in chunks if k.startswith(f"{key}/")]):
                held = min(INDEX_CHUNK, count - j * INDEX_CHUNK)  # chunks are in order
                parts.append(_decode(where, chunk, chunks[chunk], buffer)[:held].copy())
            values = parts[0] if len(parts) == 1 else np.concatenate(parts)
            check_chunks(view, key, count, None, 0, count)
            start = count // INDEX_CHUNK * INDEX_CHUNK
            check_edge(view, key, None, values[None, start:count])
            columns[key] = values
        table = EpisodeTable.from_bounds(columns[BOUNDS], columns[RETURNS], has_reward)
    if include_open and state is not None:
        opened = open_table(state.open, shard.length, has_reward)
        table = opened if table is None else EpisodeTable.concat([table, opened])
    return EpisodeTable.empty() if table is None else table


def _decode(where: str, chunk: str, raw: bytes | None, out: np.ndarray) -> np.ndarray:
    """An index chunk as written by ``vault._episodes.index_metadata``'s codecs (little-endian
    bytes, zstd, crc32c), its crc32c checked, decoded into ``out`` (reused: decoding into
    fresh memory costs more in page faults than the decoding). A frame that holds less than a
    chunk leaves zeros, which the place checks then refuse."""
    import google_crc32c
    from numcodecs import Zstd

    if raw is None or len(raw) < 4:
        raise VaultCorruptError(
            f"{where}: episode index chunk {chunk} is missing. Run `vault verify {where}`; "
            "restore the vault from a copy."
        )
    body, trailer = raw[:-4], raw[-4:]
    problem = None
    if google_crc32c.value(body) != int.from_bytes(trailer, "little"):
        problem = "its crc32c does not match"
    else:
        out.fill(0)
        try:
            Zstd().decode(body, out=out)
        except Exception as err:  # a damaged or oversized frame (RuntimeError, ValueError)
            problem = f"it does not decode to one chunk ({err})"
    if problem is not None:
        raise VaultCorruptError(
            f"{where}: episode index chunk {chunk} is corrupt ({problem}). Run `vault verify "
            f"{where}`; restore the vault from a copy."
        )
    return out
