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
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from vault._errors import VaultCorruptError
from vault.commits._pins import commit_id
from vault.commits._snapshot import load_snapshot, went_back
from vault.format._episodes import INDEX_CHUNK, EpisodeTable, open_table
from vault.format._records import (
    BOUNDS,
    COMMIT_KEY,
    MANIFEST_KEY,
    RETURNS,
    SHARDS,
    CommitRecord,
    Manifest,
    read_commit_bytes,
    read_manifest_bytes,
)
from vault.format._tags import Grid, PlaceView, check_chunks, check_edge, grids
from vault.storage._location import Location

if TYPE_CHECKING:
    from vault.dataset._catalog import Catalog, Entry
    from vault.facade._vault import Vault

INDEX = "index"  # Shard.cache key of the index columns read (bounds, returns)
OPEN_TABLE = "table with open episodes"  # Shard.cache key
_GRIDS: dict[int, tuple[Manifest, dict[str, Grid]]] = {}  # by id(manifest), the manifest kept


@dataclasses.dataclass
class Shard:
    """One shard as the dataset last saw it: its manifest and commit record (and their raw
    bytes, to see cheaply whether it moved and for the catalog), and its :class:`Vault` once
    its data has been read. A shard taken from the dataset's catalog (``known``) parses its
    commit record only when it is needed: the catalog entry was made from these very bytes."""

    name: str
    folder: Location  # the dataset's shards/ folder (``where`` is made from it when needed)
    manifest: Manifest
    raw_manifest: bytes
    raw_commit: bytes
    parsed: CommitRecord | None = None
    known: Entry | None = None  # the catalog's entry for raw_commit
    vault: Vault | None = None
    cache: dict[Any, Any] = dataclasses.field(default_factory=dict)  # place checks done

    @functools.cached_property
    def where(self) -> Location:
        return self.folder.child(self.name)

    def __str__(self) -> str:
        """The shard's location (what a message about it names: made only for one)."""
        return str(self.where)

    def follow(self) -> None:
        """Take the commit of the shard's vault where its user refreshed it
        (``Dataset.vault(name).refresh()``), so that the dataset reports, reads and tags one
        commit of the shard."""
        if self.vault is not None and self.vault.snapshot.commit is not self.parsed:
            now = self.vault.snapshot.commit
            if now != self.parsed:  # (its bytes are not known: not cataloged until re-read)
                self.parsed, self.raw_commit, self.known, self.cache = now, b"", None, {}

    @property
    def commit(self) -> CommitRecord:
        self.follow()
        if self.parsed is None:
            self.parsed = read_commit_bytes(self.raw_commit, self, self.manifest)
        return self.parsed

    @property
    def rows(self) -> int:
        return self.manifest.rows

    @property
    def length(self) -> int:
        self.follow()
        if self.parsed is None and self.known is not None:
            return self.known.length
        return self.commit.committed_length

    @property
    def commit_id(self) -> str:
        self.follow()
        if self.parsed is None and self.known is not None:
            return self.known.commit_id
        return commit_id(self.commit)

    @property
    def indexed_episodes(self) -> int:
        """Episodes in the shard's index (-1: it keeps none)."""
        self.follow()
        if self.parsed is None and self.known is not None:
            return self.known.episodes
        state = self.commit.episodes
        return -1 if self.manifest.episodes is None else 0 if state is None else state.count

    def index_columns(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The committed episodes' bounds and returns as read from the index (None: not read
        yet)."""
        columns = self.cache.get(INDEX)
        if columns is None and self.known is not None and self.known.bounds is not None:
            assert self.known.returns is not None
            columns = self.cache[INDEX] = (self.known.bounds, self.known.returns)
        return columns

    @property
    def grids(self) -> dict[str, Grid]:
        """The manifest's chunk grids (shared by the shards of one manifest: frozen)."""
        held = _GRIDS.get(id(self.manifest))
        if held is None or held[0] is not self.manifest:
            if len(_GRIDS) >= 64:
                _GRIDS.clear()
            held = _GRIDS[id(self.manifest)] = (self.manifest, grids(self.manifest))
        return held[1]

    def opened(self) -> Vault:
        """The shard as a read-only :class:`Vault` at this record's commit (arrays opened now,
        once)."""
        if self.vault is None:
            from vault.facade._vault import vault_of_snapshot

            snap = load_snapshot(self.where, False, manifest=self.manifest, commit=self.commit)
            self.vault = vault_of_snapshot(snap)
        return self.vault


class ManifestCache:
    """Parsed shard manifests by their bytes, each checked against the dataset's template
    once (``check`` raises for a shard that does not match)."""

    def __init__(self, check: Callable[[str, Manifest], None]) -> None:
        self._check = check
        self._parsed: dict[bytes, Manifest] = {}

    def manifest(self, name: str, folder: Location, raw: bytes) -> Manifest:
        manifest = self._parsed.get(raw)
        if manifest is None:
            manifest = read_manifest_bytes(raw, str(folder.child(name)))
            self._check(name, manifest)
            if len(self._parsed) < 4096:
                self._parsed[raw] = manifest
        return manifest


def load(
    root: Location,
    names: Sequence[str],
    known: dict[str, Shard],
    manifests: ManifestCache,
    catalog: Catalog | None = None,
) -> dict[str, Shard]:
    """Every shard of ``names`` as it is now: the commit records of every shard and the
    manifests of new ones read in one batch (a shard the ``catalog`` has at exactly its current
    commit record is taken from it; one it has at another needs a second batch for its
    manifest). A shard without a manifest yet (being created) is left out."""
    listed = {} if catalog is None else catalog.entries
    folder = root.child(SHARDS)
    keys: list[str] = []
    for name in names:
        if name not in known and name not in listed:
            keys.append(f"{SHARDS}/{name}/{MANIFEST_KEY}")
        keys.append(f"{SHARDS}/{name}/{COMMIT_KEY}")
    values = iter(root.read_many(keys))
    out: dict[str, Shard] = {}
    later: list[tuple[str, bytes | None]] = []  # cataloged at another commit
    for name in names:
        old = known.get(name)
        fresh = old is None and name not in listed
        raw_manifest = next(values) if fresh else None
        raw_commit = next(values)
        if old is not None:
            moved = _moved(old, raw_commit)
            if moved is None:  # replaced by another shard of that name: read it afresh
                later.append((name, raw_commit))
            else:
                out[name] = moved
        elif not fresh:
            assert catalog is not None
            entry = catalog.hit(name, raw_commit)
            if entry is None:
                later.append((name, raw_commit))
            else:
                manifest = manifests.manifest(name, folder, entry.manifest)
                assert raw_commit is not None
                out[name] = Shard(name, folder, manifest, entry.manifest, raw_commit, known=entry)
        elif raw_manifest is not None:  # None: being created, shown once its manifest is there
            out[name] = _fresh(folder, name, raw_manifest, raw_commit, manifests)
    if later:
        raws = root.read_many([f"{SHARDS}/{name}/{MANIFEST_KEY}" for name, _ in later])
        for (name, raw_commit), raw_manifest in zip(later, raws, strict=True):
            if raw_manifest is not None:
                out[name] = _fresh(folder, name, raw_manifest, raw_commit, manifests)
        out = {name: out[name] for name in names if name in out}
    return out


def _fresh(
    folder: Location, name: str, raw_manifest: bytes, raw_commit: bytes | None, cache: ManifestCache
) -> Shard:
    manifest = cache.manifest(name, folder, raw_manifest)
    shard = Shard(name, folder, manifest, raw_manifest, raw_commit or b"")
    shard.parsed = read_commit_bytes(raw_commit, shard, manifest)
    return shard


def _moved(shard: Shard, raw_commit: bytes | None) -> Shard | None:
    """``shard`` at the commit record ``raw_commit`` (itself when that has not changed); None
    when the record is not a later commit of this shard (deleted and made again: its manifest
    must be read again, and a corrupt record is reported then)."""
    if raw_commit == shard.raw_commit:
        return shard
    try:
        commit = read_commit_bytes(raw_commit, shard, shard.manifest)
    except VaultCorruptError:
        return None
    if went_back(shard.commit, commit):
        return None
    if shard.vault is not None:
        shard.vault.refresh()
        if shard.vault.snapshot.commit != commit:  # it moved again meanwhile
            commit, raw_commit = shard.vault.snapshot.commit, None  # bytes unknown: not cataloged
    return dataclasses.replace(
        shard, parsed=commit, raw_commit=raw_commit or b"", known=None, cache={}
    )


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
    of every shard whose index was not read yet (nor taken from the catalog) are read in one
    batch; a shard keeps its index columns until its commit moves (committed episodes never
    change), so a reader that refreshes reads only what moved."""
    _read_indexes(root, [s for s in shards if s.indexed_episodes > 0 and not s.index_columns()])
    if not include_open:
        return _closed_table(shards)
    if not shards:
        return dataclasses.replace(EpisodeTable.empty(), shard=np.zeros(0, str))
    return EpisodeTable.concat([_with_open(s) for s in shards])


def _read_indexes(root: Location, shards: Sequence[Shard]) -> None:
    """Read, check and keep the index columns of ``shards``, their chunks in one batch."""
    wanted: list[tuple[Shard, str]] = []
    for shard in shards:
        for key in (BOUNDS, RETURNS):
            for j in range(-(-shard.indexed_episodes // INDEX_CHUNK)):
                wanted.append((shard, shard.grids[key].chunk(0, j)))
    raws = root.read_many([f"{SHARDS}/{s.name}/{chunk}" for s, chunk in wanted])
    fetched: dict[str, dict[str, bytes | None]] = {}
    for (shard, chunk), raw in zip(wanted, raws, strict=True):
        fetched.setdefault(shard.name, {})[chunk] = raw
    buffers = (np.empty((INDEX_CHUNK, 4), "<i8"), np.empty(INDEX_CHUNK, "<f8"))
    for shard in shards:
        _read_index(shard, fetched.get(shard.name, {}), buffers)


def _closed_table(shards: Sequence[Shard]) -> EpisodeTable:
    """The indexed episodes of every shard (each one's index columns read) as one table."""
    names, counts, bounds, returns = [], [], [], []
    for shard in shards:
        columns = shard.index_columns() if shard.indexed_episodes > 0 else None
        if columns is not None:
            names.append(shard.name)
            counts.append(len(columns[0]))
            bounds.append(columns[0])
            returns.append(columns[1])
    if not names:
        return dataclasses.replace(EpisodeTable.empty(), shard=np.zeros(0, str))
    cfg = shards[0].manifest.episodes
    assert cfg is not None
    table = EpisodeTable.from_bounds(
        np.concatenate(bounds), np.concatenate(returns), cfg.reward is not None
    )
    return dataclasses.replace(table, shard=np.repeat(np.array(names), counts))


def _with_open(shard: Shard) -> EpisodeTable:
    """The shard's indexed episodes, then its open ones (kept until its commit moves)."""
    table = shard.cache.get(OPEN_TABLE)
    if table is None:
        cfg = shard.manifest.episodes
        assert cfg is not None
        has_reward = cfg.reward is not None
        parts = []
        columns = shard.index_columns() if shard.indexed_episodes > 0 else None
        if columns is not None:
            parts.append(EpisodeTable.from_bounds(columns[0], columns[1], has_reward))
        state = shard.commit.episodes
        if state is not None:
            parts.append(open_table(state.open, shard.length, has_reward))
        table = EpisodeTable.concat(parts) if parts else EpisodeTable.empty()
        table = shard.cache[OPEN_TABLE] = dataclasses.replace(
            table, shard=np.full(len(table), shard.name)
        )
    return table


def _read_index(
    shard: Shard, chunks: dict[str, bytes | None], buffers: tuple[np.ndarray, ...]
) -> None:
    """The bounds and returns of the shard's indexed episodes from its index chunks
    (``chunks``, read), checked as the shard's own read checks them; kept in its cache."""
    count = shard.indexed_episodes
    where = str(shard.where)
    present = {k: v for k, v in chunks.items() if v is not None}
    view = PlaceView(
        _Fetched(shard.where, present), shard.manifest, shard.grids, shard.cache, where,
        shard.commit,
    )  # fmt: skip
    columns = []
    for key, buffer in ((BOUNDS, buffers[0]), (RETURNS, buffers[1])):
        parts = []
        for j, chunk in enumerate([k for k in chunks if k.startswith(f"{key}/")]):
            held = min(INDEX_CHUNK, count - j * INDEX_CHUNK)  # chunks are in order
            parts.append(_decode(where, chunk, chunks[chunk], buffer)[:held].copy())
        values = parts[0] if len(parts) == 1 else np.concatenate(parts)
        check_chunks(view, key, count, None, 0, count)
        start = count // INDEX_CHUNK * INDEX_CHUNK
        check_edge(view, key, None, values[None, start:count])
        columns.append(values)
    shard.cache[INDEX] = (columns[0], columns[1])


def _decode(where: str, chunk: str, raw: bytes | None, out: np.ndarray) -> np.ndarray:
    """An index chunk as written by ``vault.format._episodes.index_metadata``'s codecs
    (little-endian bytes, zstd, crc32c), decoded into ``out`` (reused: decoding into fresh memory
    costs more in page faults than the decoding) by the relay's decoder
    (``vault/storage/_relay_decode.py``): its crc32c checked, and it must hold exactly one chunk."""
    from vault.storage._relay_decode import ChunkCodec, decode

    if raw is None:
        raise VaultCorruptError(
            f"{where}: episode index chunk {chunk} is missing. Run `vault verify {where}`; "
            "restore the vault from a copy."
        )
    got = decode(ChunkCodec("zstd", out.dtype, out.shape), raw, into=out)
    if isinstance(got, str):
        raise VaultCorruptError(
            f"{where}: episode index chunk {chunk} is corrupt ({got}). Run `vault verify "
            f"{where}`; restore the vault from a copy."
        )
    return got


def audit_catalog(shards: Sequence[Shard]) -> tuple[int, list[str]]:
    """How many of ``shards`` were taken from the catalog, and how each of those disagrees
    with the shard itself (its commit record parsed now; its index read through the shard's
    own vault)."""
    from vault.dataset._catalog import commit_hash
    from vault.facade._vault import Vault

    used, problems = 0, []
    for shard in shards:
        entry = shard.known
        if entry is None or entry.commit != commit_hash(shard.raw_commit):
            continue
        used += 1
        where = shard.where
        record = read_commit_bytes(shard.raw_commit, str(where), shard.manifest)
        state = record.episodes
        count = -1 if shard.manifest.episodes is None else 0 if state is None else state.count
        facts = (record.committed_length, commit_id(record), count)
        if facts != (entry.length, entry.commit_id, entry.episodes):
            problems.append(
                f"shard {shard.name!r}: the catalog says committed length, commit and episodes "
                f"{(entry.length, entry.commit_id, entry.episodes)}, its commit record {facts}"
            )
            continue
        if entry.bounds is None or entry.returns is None:
            continue
        own = Vault.open(where).episodes()
        has_reward = shard.manifest.episodes is not None and shard.manifest.episodes.reward
        kept = EpisodeTable.from_bounds(entry.bounds, entry.returns, bool(has_reward))
        same = len(own) == len(kept) and all(
            np.array_equal(getattr(own, f), getattr(kept, f), equal_nan=f == "returns")
            for f in ("row", "start", "length", "returns", "truncated", "start_known")
        )
        if not same:
            problems.append(
                f"shard {shard.name!r}: the catalog's episodes differ from the shard's index"
            )
    return used, problems


def catalog_closed_shard(root: Location, name: str, root_key: str) -> None:
    """After the writer of shard ``name`` closed: its records and index read and checked as
    a reader reads them, then its entry merged into the dataset's catalog. Never raises: a
    writer's close does not fail for a cache."""
    from vault.dataset._catalog import TABLE_ROWS, merge

    try:
        shard = load(root, [name], {}, ManifestCache(lambda _name, _manifest: None)).get(name)
        if shard is None:
            return
        if 0 < shard.indexed_episodes <= TABLE_ROWS:  # a bigger index is not kept there
            _read_indexes(root, [shard])
        merge(root, shard, root_key)
    except Exception as err:  # best-effort, as the catalog always is
        logging.getLogger("vault.catalog").info("%s: shard %s not cataloged (%s)", root, name, err)
