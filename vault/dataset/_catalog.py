"""A dataset's catalog: one object at the root (``catalog``) that lets a reader open a dataset
of many shards with one read for the lot, instead of parsing every shard's records.

A fresh reader of a dataset of N shards must otherwise read, parse and check N manifests, N
commit records and, for the episode table, 2N index chunks: Python work of about 200 us per
shard (``tools/bench_dataset.py``). The catalog holds, for every shard a reader has seen: the
SHA-256 of its commit record's bytes, what the reader learned from that record (committed
length, commit id, indexed episodes), its manifest (shards share their template's bytes, kept
once) and its closed episodes' bounds and returns as read from its index. A reader still reads
every shard's commit record (that is how it sees new commits), but a shard whose record has
the hash the catalog names is taken from the catalog: its record is parsed only when its data
is read, and its index is not read at all.

It is a cache, never a source of truth, and nothing trusts it blindly:

* an entry is used only for the exact commit record it was made from (equal hash): a shard
  that committed since is read as if there were no catalog;
* the object carries its own crc32c and length; a damaged, truncated or foreign catalog (or
  one of another dataset: it names the root's ``zarr.json`` hash) is ignored and rewritten;
* entries are made only from records and index chunks that passed every check of a normal
  read, and a shard's manifest from the catalog is checked against the template like a read
  one.

Who writes it:

* the writer of a shard, when it closes (:func:`merge`): its own entry, read back and checked
  as a reader would, put in with a conditional write (the store enforces it; retried with
  random pauses when another got in first), so that the first reader of a finished dataset
  finds every shard there. Writers never wait for each other otherwise, and a writer that
  cannot update it (it gave up, it crashed) only leaves its shard to be read the long way;
* any reader of at least ``CATALOG_MIN_SHARDS`` shards (``vault.dataset._dataset``), after
  :meth:`vault.Dataset.open` or its first episode table, when it finds at least a quarter of
  the shards missing from the catalog or changed: the whole object replaced.

Writing is best-effort: a store one may not write (a read-only bucket) keeps no catalog, and
the dataset reads as without one. Whatever the interleaving, every entry is one that was true
of its commit record, so any result is a valid catalog.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from vault.storage._location import ABSENT

if TYPE_CHECKING:
    from vault.storage._location import Location

CATALOG_KEY = "catalog"
_MAGIC = b"RLVCAT01"
_HEAD = struct.Struct("<8sQ")  # magic, header length
_FORMAT = 1
_log = logging.getLogger("vault.catalog")


def commit_hash(raw: bytes) -> str:
    """The key of a commit record in the catalog: its bytes' SHA-256 (hex, 32 digits)."""
    return hashlib.sha256(raw).hexdigest()[:32]


class Shard(Protocol):
    """What the catalog needs of a shard (``vault.dataset._shards.Shard``)."""

    name: str
    raw_manifest: bytes
    raw_commit: bytes
    known: Entry | None

    @property
    def length(self) -> int: ...

    @property
    def commit_id(self) -> str: ...

    @property
    def indexed_episodes(self) -> int: ...

    def index_columns(self) -> tuple[np.ndarray, np.ndarray] | None: ...


@dataclasses.dataclass(frozen=True)
class Entry:
    """What a reader learned of one shard at one commit record (``commit`` is its hash)."""

    name: str
    manifest: bytes
    commit: str
    length: int
    commit_id: str
    episodes: int  # indexed (closed) episodes; -1: no episode index
    bounds: np.ndarray | None = None  # (episodes, 4) int64, when the table was read
    returns: np.ndarray | None = None  # (episodes,) float64


@dataclasses.dataclass
class Catalog:
    """A parsed catalog: its entries by shard name."""

    entries: dict[str, Entry]

    def hit(self, name: str, raw_commit: bytes | None) -> Entry | None:
        """The entry of shard ``name`` when it was made from exactly ``raw_commit``."""
        entry = self.entries.get(name)
        if entry is None or raw_commit is None or entry.commit != commit_hash(raw_commit):
            return None
        return entry


def parse(raw: bytes | None, root: Location, root_key: str) -> Catalog | None:
    """The catalog read from ``root`` (``raw``, its bytes; None: none there), or None when it
    is damaged or another dataset's."""
    if raw is None:
        return None
    try:
        return decode(raw, root_key)
    except Exception as err:  # any damage: a cache is ignored, never trusted
        _log.info("%s: ignoring a damaged catalog (%s); it will be rewritten", root, err)
        return None


def decode(raw: bytes, root_key: str) -> Catalog:
    """A catalog from its bytes; ValueError (or another lookup error) when they are not one
    made for the dataset ``root_key``, whole and undamaged."""
    import google_crc32c

    if len(raw) < _HEAD.size + 4:
        raise ValueError("too short")
    body, trailer = raw[:-4], raw[-4:]
    if google_crc32c.value(body) != int.from_bytes(trailer, "little"):
        raise ValueError("its crc32c does not match")
    magic, size = _HEAD.unpack_from(body)
    if magic != _MAGIC:
        raise ValueError("not a catalog")
    header = json.loads(body[_HEAD.size : _HEAD.size + size])
    if header["format"] != _FORMAT or header["dataset"] != root_key:
        raise ValueError("made for another dataset or format")
    total = sum(max(0, row[5]) for row in header["shards"] if row[6])
    at = _HEAD.size + size
    if len(body) != at + total * 40:
        raise ValueError("its length does not match its header")
    bounds = np.frombuffer(body, "<i8", total * 4, at).reshape(total, 4)
    returns = np.frombuffer(body, "<f8", total, at + total * 32)
    manifests = [m.encode() for m in header["manifests"]]
    entries: dict[str, Entry] = {}
    row0 = 0
    for name, manifest, commit, length, cid, count, tabled in header["shards"]:
        table: tuple[np.ndarray | None, np.ndarray | None] = (None, None)
        if tabled:
            table = (bounds[row0 : row0 + count], returns[row0 : row0 + count])
            row0 += count
        entries[name] = Entry(name, manifests[manifest], commit, length, cid, count, *table)
    return Catalog(entries)


def encode(entries: Sequence[Entry], root_key: str) -> bytes:
    """The bytes of a catalog of ``entries`` for the dataset ``root_key``."""
    import google_crc32c

    manifests: dict[bytes, int] = {}
    rows = []
    tables = []
    for e in entries:
        index = manifests.setdefault(e.manifest, len(manifests))
        tabled = e.bounds is not None and e.returns is not None
        rows.append([e.name, index, e.commit, e.length, e.commit_id, e.episodes, tabled])
        if tabled:
            tables.append((e.bounds, e.returns))
    header = json.dumps(
        {
            "format": _FORMAT,
            "dataset": root_key,
            "manifests": [m.decode() for m in manifests],
            "shards": rows,
        },
        separators=(",", ":"),
    ).encode()
    parts = [_HEAD.pack(_MAGIC, len(header)), header]
    parts += [np.ascontiguousarray(b, "<i8").tobytes() for b, _ in tables]
    parts += [np.ascontiguousarray(r, "<f8").tobytes() for _, r in tables]
    body = b"".join(parts)
    return body + google_crc32c.value(body).to_bytes(4, "little")


TABLE_ROWS = 8192  # a shard with more indexed episodes keeps no table here (one index chunk)
TABLE_ROWS_TOTAL = 1 << 18  # episodes with tables in one catalog (10 MiB of columns)


def entry_of(shard: Shard, table: bool = True) -> Entry | None:
    """What the catalog keeps of ``shard`` (None: nothing known worth keeping); its index
    columns only with ``table`` and when it has at most ``TABLE_ROWS`` episodes."""
    if not shard.raw_commit:
        return None  # pinned at a tag: not the shard's current record
    index = shard.index_columns() if table else None
    if index is not None and len(index[0]) > TABLE_ROWS:
        index = None  # reading its index costs its size, not a round trip: nothing to spare
    return Entry(
        shard.name,
        shard.raw_manifest,
        commit_hash(shard.raw_commit),
        shard.length,
        shard.commit_id,
        shard.indexed_episodes,
        *(index if index is not None else (None, None)),
    )


def worth_writing(old: Catalog | None, shards: Sequence[Shard]) -> list[Entry] | None:
    """The entries of a new catalog when writing one would spare later readers enough work
    (a quarter of the shards, at least one, missing from ``old``, changed since, or now with a
    table where ``old`` has none); None otherwise. Tables are kept for shards of at most
    ``TABLE_ROWS`` episodes, ``TABLE_ROWS_TOTAL`` in all (so that reading the catalog never
    costs more than it spares). Each shard's ``known`` entry becomes the new one when it is
    written (see :func:`adopt`)."""
    gained = 0
    held = sum(len(s.known.bounds) for s in shards if s.known and s.known.bounds is not None)
    room = TABLE_ROWS_TOTAL - held  # tables that a new catalog could add
    for shard in shards:
        known = shard.known
        if known is None:
            gained += shard.raw_commit != b""  # one pinned at a tag is not kept
        elif known.bounds is None:
            index = shard.index_columns()
            if index is not None and len(index[0]) <= min(TABLE_ROWS, room):
                gained += 1
                room -= len(index[0])
    if not gained or (old is not None and gained < max(1, len(shards) // 4)):
        return None
    entries = []
    room = TABLE_ROWS_TOTAL
    for shard in shards:
        entry = entry_of(shard, table=room > 0)
        if entry is not None and entry.bounds is not None:
            if len(entry.bounds) > room:
                entry = dataclasses.replace(entry, bounds=None, returns=None)
            room -= len(entry.bounds) if entry.bounds is not None else 0
        if entry is not None:
            entries.append(entry)
    return entries


def adopt(shards: Sequence[Shard], entries: Sequence[Entry]) -> Catalog:
    """The catalog of ``entries``, just written: each shard's ``known`` entry becomes its own
    (so the next check counts only what changes after this)."""
    catalog = Catalog({e.name: e for e in entries})
    for shard in shards:
        entry = catalog.entries.get(shard.name)
        if entry is not None:
            shard.known = entry
    return catalog


def write(root: Location, entries: Sequence[Entry], root_key: str) -> bool:
    """Replace the catalog (best-effort: False, logged, when the store refuses the write)."""
    data = encode(entries, root_key)
    try:
        with root.failures("write the dataset's catalog"):
            # a killed writer's temporary file would be reused with its longer old tail
            root.drop_stale_temp(CATALOG_KEY)
            root.kvstore().write(CATALOG_KEY, data).result()
    except Exception as err:  # best-effort: a cache that cannot be written is no error
        _log.info("%s: catalog not written (%s)", root, err)
        return False
    return True


MERGE_TRIES = 8


def merge(root: Location, shard: Shard, root_key: str) -> bool:
    """Put ``shard``'s entry into the catalog at ``root``, keeping every other entry: read,
    change, write back on condition that nobody wrote it meanwhile (the store enforces it),
    retried a few times with random pauses. What the writer of a shard does when it closes,
    so that the first reader of a finished dataset finds every shard there. Best-effort:
    False when it could not (logged)."""
    import random
    import time

    entry = entry_of(shard)
    if entry is None:
        return False
    kv = root.kvstore()
    for attempt in range(MERGE_TRIES):
        try:
            with root.failures("update the dataset's catalog"):
                root.drop_stale_temp(CATALOG_KEY)  # as in :func:`write`
                got = kv.read(CATALOG_KEY).result()
                raw = bytes(got.value) if got.state == "value" else None
                old = parse(raw, root, root_key)
                entries = {} if old is None else dict(old.entries)
                entries[shard.name] = entry
                held = sum(len(e.bounds) for e in entries.values() if e.bounds is not None)
                if held > TABLE_ROWS_TOTAL:
                    entries[shard.name] = dataclasses.replace(entry, bounds=None, returns=None)
                since = got.stamp.generation if raw is not None else ABSENT
                data = encode(list(entries.values()), root_key)
                if kv.write(CATALOG_KEY, data, if_equal=since).result().generation:
                    return True
        except Exception as err:  # best-effort: a cache that cannot be written is no error
            _log.info("%s: catalog not updated (%s)", root, err)
            return False
        time.sleep(random.uniform(0.005, 0.02) * 2**attempt)  # another wrote it: again
    _log.info("%s: catalog not updated (%d tries, others kept writing it)", root, MERGE_TRIES)
    return False
