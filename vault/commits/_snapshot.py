"""What is committed, frozen: the manifest, one commit record and array handles that reach it.

Readers, streams, episodes, stats and verify work on a :class:`Snapshot`, so a read that spans
many calls is consistent by construction: a later commit makes a new snapshot
(:meth:`Snapshot.refreshed`), never changes this one. Committed data is never rewritten in
place, so a snapshot's data stays valid after any number of later appends.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from typing import Any

from vault._errors import VaultCorruptError, VaultError, VaultNotFoundError, VaultReadError
from vault.commits._gate import gate_arrays
from vault.format._records import (
    BOUNDS,
    COMMIT_KEY,
    EXPERIENCE,
    MANIFEST_KEY,
    RETURNS,
    ZARR_JSON,
    CommitRecord,
    Manifest,
    leaf_key,
    read_commit_bytes,
    read_manifest_bytes,
)
from vault.format._tags import Grid, grids
from vault.storage._arrays import expected_metadata, open_array
from vault.storage._location import (
    INTERRUPTED_DERIVE,
    Location,
    dataset_above,
)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A committed state of a vault: what every read of one commit works on (immutable).

    ``Vault.snapshot`` is the one a vault reads now; ``Vault.refresh`` moves on to a newer one.

    Attributes:
        location: the vault's location.
        manifest: its manifest.
        commit: the commit record this snapshot reads.
        arrays: the leaves' TensorStore handles, in leaf order.
        index: the episode index's (bounds, returns) handles, or empty.
        writable: whether the handles may write (a writer's snapshot).
        cache: what reads of this vault have checked already, and handles they opened
            (shared by the snapshots of later commits: complete chunks never change).
    """

    location: Location
    manifest: Manifest
    commit: CommitRecord
    arrays: tuple[Any, ...]
    index: tuple[Any, ...]
    writable: bool = False
    cache: dict[Any, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @functools.cached_property
    def grids(self) -> dict[str, Grid]:
        """How each array (by key) is cut into chunks."""
        return grids(self.manifest)

    @property
    def length(self) -> int:
        """Committed timesteps per row."""
        return self.commit.committed_length

    @property
    def rows(self) -> int:
        """Rows of the vault."""
        return self.manifest.rows

    @property
    def names(self) -> list[str]:
        """Every leaf's path, in leaf order."""
        return self.manifest.leaf_names

    @property
    def where(self) -> str:
        """The location as shown in messages."""
        return str(self.location)

    @property
    def episode_count(self) -> int:
        """Complete episodes in the committed index (0 without an index)."""
        return 0 if self.commit.episodes is None else self.commit.episodes.count

    def array(self, name: str) -> Any:
        """Returns the TensorStore handle of a leaf.

        Args:
            name: the leaf's path.

        Raises:
            VaultReadError: no leaf of that path (the message lists the leaves).
        """
        try:
            return self.arrays[self.names.index(name)]
        except ValueError:
            raise VaultReadError(
                f"{self.where}: no leaf {name!r}; leaves: {list(self.names)}"
            ) from None

    def refreshed(self) -> Snapshot:
        """Returns the snapshot of the commit record as it is now.

        Arrays are reopened where another process grew them; ``self`` when nothing changed.

        Raises:
            VaultReadError: the vault at this location was replaced (deleted and made again)
                since this snapshot's commit.
        """
        try:
            commit = load_commit(self.location, self.manifest)
        except VaultCorruptError:
            if self._manifest_changed():  # another vault's record, not a corrupt one
                raise self._replaced() from None
            raise
        if commit == self.commit:
            return self
        if went_back(self.commit, commit):
            raise self._replaced()
        return at_commit(self, commit)

    def _manifest_changed(self) -> bool:
        try:
            return load_manifest(self.location) != self.manifest
        except VaultError:
            return False  # (no manifest to compare: the first error says what is wrong)

    def _replaced(self) -> VaultReadError:
        return VaultReadError(
            f"{self.location}: the vault at this location was replaced (deleted and made "
            f"again) since its commit {self.commit.seq} ({self.length} timesteps) was read; "
            "open it again to read the new one"
        )


def went_back(before: CommitRecord, now: CommitRecord) -> bool:
    """Whether ``now``, the commit record found where ``before`` was read, cannot be a later
    commit of the same vault: commit numbers only grow, and a commit keeps its id (a fence
    rewrites the record of the same commit, its id kept)."""
    if now.seq != before.seq:
        return now.seq < before.seq
    return now.uid != before.uid


def reopen(snap: Snapshot) -> Snapshot:
    """``snap`` with the commit record as stored now, every array opened afresh.

    After a failed append whose resize ran, the stored arrays are longer than these
    handles know, and a handle's next resize would be refused as a shrink. The checks'
    cache is kept (committed chunks never change).
    """
    fresh = load_snapshot(snap.location, snap.writable, manifest=snap.manifest)
    return dataclasses.replace(fresh, cache=snap.cache)


def at_commit(snap: Snapshot, commit: CommitRecord) -> Snapshot:
    """``snap``'s vault at another commit.

    Arrays shorter than it (grown by another process since they were opened) are
    reopened to see their new shape.

    Args:
        commit: the commit record to read.

    Raises:
        VaultCorruptError: arrays shorter than the commit says.
    """
    arrays = list(snap.arrays)
    stale = [i for i, a in enumerate(arrays) if not _reaches(a, commit.committed_length)]
    futures = [(i, _open_leaf(snap.location, snap.manifest, i, snap.writable)) for i in stale]
    for i, future in futures:
        arrays[i] = _opened(snap.location, leaf_key(snap.names[i]), future)
    index = snap.index
    count = 0 if commit.episodes is None else commit.episodes.count
    if any(arr.shape[0] < count for arr in index):  # (each: one may have grown alone)
        index = _open_index(snap.location, snap.manifest, snap.writable)
    _check_shapes(snap.location, snap.manifest, commit, arrays, index)
    return dataclasses.replace(snap, commit=commit, arrays=tuple(arrays), index=index)


def _reaches(array: Any, length: int) -> bool:
    """Whether ``array`` (a handle opened earlier) can still read ``[:, :length]``: its own
    shape reaches it, and so does the shape its process last saw. Handles of one location
    share TensorStore's cached metadata, so after another open in this process saw a writer
    trim the arrays (at ``close``), an old handle's reads fail until it is reopened, even
    where the arrays have grown again since."""
    if array.shape[1] < length:
        return False
    try:
        return bool(array.resolve().result().shape[1] >= length)
    except ValueError:  # the shared metadata disagrees with the handle's bounds
        return False


def load_manifest(location: Location) -> Manifest:
    raw = location.read(MANIFEST_KEY)
    if raw is None:
        raise no_vault(location)
    manifest = read_manifest_bytes(raw, str(location))
    made_by = manifest.user_metadata.get("derived_from")
    if isinstance(made_by, dict) and "shard" in made_by and dataset_above(location) is None:
        # on an object store a dataset derive publishes its shards, then the root: killed
        # between them, a shard is whole but its dataset is not (the next derive removes it)
        raise VaultNotFoundError(f"{location}: {INTERRUPTED_DERIVE}")
    return manifest


def no_vault(location: Location, more: str = "") -> VaultNotFoundError:
    """The error for a location with no vault's ``zarr.json`` (``more``: what else is absent).

    On an object store a missing key does not tell a missing bucket from an empty prefix, so
    one listing of that key is made first: a missing bucket is then named as such (a
    ``VaultNotFoundError`` that says to create it). A prefix may hold vaults under it: the
    message says how to list them."""
    if location.remote:
        import tensorstore as ts

        with location.failures("read the vault"):
            here = ts.KvStore.KeyRange(MANIFEST_KEY, f"{MANIFEST_KEY}\0")
            location.kvstore().list(here).result()
        more += f"; `vault ls {location}` lists the vaults under it, if any"
    return VaultNotFoundError(f"no vault at {location} (no {MANIFEST_KEY}){more}")


def load_commit(location: Location, manifest: Manifest) -> CommitRecord:
    return read_commit_bytes(location.read(COMMIT_KEY), str(location), manifest)


def load_snapshot(
    location: Location,
    writable: bool,
    manifest: Manifest | None = None,
    commit: CommitRecord | None = None,
) -> Snapshot:
    """Open the vault at ``location``: its manifest, commit record and arrays (each array's
    metadata checked against the manifest). ``manifest`` and ``commit``: records already read
    (and checked) by the caller."""
    if manifest is None:
        manifest = load_manifest(location)
    keys = [leaf_key(n) for n in manifest.leaf_names]
    gate_arrays(location, keys + ([BOUNDS, RETURNS] if manifest.episodes is not None else []))
    futures = [_open_leaf(location, manifest, i, writable) for i in range(len(manifest.leaves))]
    index = _open_index(location, manifest, writable) if manifest.episodes is not None else ()
    arrays = tuple(
        _opened(location, leaf_key(n), f) for n, f in zip(manifest.leaf_names, futures, strict=True)
    )
    if commit is None:
        commit = load_commit(location, manifest)
    return at_commit(Snapshot(location, manifest, commit, arrays, index, writable), commit)


def _open_leaf(location: Location, manifest: Manifest, i: int, writable: bool) -> Any:
    leaf = manifest.leaves[i]
    return open_array(
        location,
        leaf_key(leaf.name),
        writable,
        expect=expected_metadata(leaf, manifest.dimension_names),
        strict=manifest.fill_chunks_stored,
    )


def _open_index(location: Location, manifest: Manifest, writable: bool) -> tuple[Any, ...]:
    from vault.format._episodes import index_expect

    futures = []
    for key, kind in ((BOUNDS, "bounds"), (RETURNS, "returns")):
        expect = index_expect(kind, manifest.dimension_names)
        futures.append(open_array(location, key, writable, expect, manifest.fill_chunks_stored))
    return tuple(
        _opened(location, key, f) for key, f in zip((BOUNDS, RETURNS), futures, strict=True)
    )


def _opened(location: Location, key: str, future: Any) -> Any:
    """The opened array, or VaultCorruptError naming it (a missing, unparsable or edited
    ``zarr.json``)."""
    try:
        return future.result()
    except ValueError as err:
        text = str(err)
        if text.startswith(("PERMISSION_DENIED", "UNAVAILABLE", "DEADLINE_EXCEEDED")):
            raise
        typed = location.typed_failure(err, f"open array {key}")
        if typed is not None:  # the storage failed (e.g. a server that does not answer)
            raise typed from err
        reason = text.split(" [", 1)[0]
        raise VaultCorruptError(
            f"{location}: array {key}: its metadata ({key}/{ZARR_JSON}) is missing, damaged or "
            f"differs from the manifest ({reason}). Run `vault verify {location}`; restore "
            "the vault from a copy."
        ) from None


def _check_shapes(
    location: Location,
    manifest: Manifest,
    commit: CommitRecord,
    arrays: Sequence[Any],
    index: Sequence[Any],
) -> None:
    """Every array holds the committed data: rows and item shape as the manifest says, time
    (episodes) at least as long as committed."""
    problems = []
    for leaf, arr in zip(manifest.leaves, arrays, strict=True):
        want = (manifest.rows, commit.committed_length, *leaf.shape)
        shape = tuple(int(d) for d in arr.shape)
        if len(shape) != len(want) or shape[0] != want[0] or shape[2:] != want[2:]:
            expected = ", ".join(map(str, (manifest.rows, "T", *leaf.shape)))
            problems.append(f"{leaf_key(leaf.name)} has shape {list(shape)}, expected [{expected}]")
        elif shape[1] < want[1]:
            problems.append(
                f"{leaf_key(leaf.name)} holds {shape[1]} timesteps, fewer than the "
                f"{want[1]} committed"
            )
    count = 0 if commit.episodes is None else commit.episodes.count
    for key, arr in zip((BOUNDS, RETURNS), index, strict=False):
        if int(arr.shape[0]) < count:
            problems.append(f"{key} holds {arr.shape[0]} episodes, fewer than the {count} indexed")
        if key == BOUNDS and tuple(arr.shape[1:]) != (4,):
            problems.append(f"{key} has shape {list(arr.shape)}, expected [N, 4]")
    if problems:
        raise VaultCorruptError(
            f"{location}: arrays disagree with the manifest or the commit record: "
            + "; ".join(problems)
            + f". Run `vault verify {location}`; restore the vault from a copy."
        )


_BAD_DATA = ("DATA_LOSS", "FAILED_PRECONDITION", "NOT_FOUND")  # a chunk's bytes are wrong


def storage_failure(location: Location, err: BaseException) -> VaultError | None:
    """A failed chunk read ``err`` as ``location``'s typed error when the storage caused it
    (no permission to read the file, a full disk, a dead server), naming the file and the
    remedy; None when the chunk's data is at fault (or the cause is unknown)."""
    if str(err).startswith(_BAD_DATA):
        return None
    return location.typed_failure(err, "read the vault")


def result(snap: Snapshot, future: Any, name: str, group: str = EXPERIENCE) -> Any:
    """A read's value; a chunk that fails its checksum or decoding, or is missing inside the
    committed range (a vault whose writer stores every chunk), is VaultCorruptError; one the
    storage would not give (no permission to read its file, a dead server) is the location's
    typed error naming it (:class:`VaultAccessError`, ...)."""
    try:
        return future.result()
    except ValueError as err:
        typed = storage_failure(snap.location, err)
        if typed is not None:
            raise typed from err
        text = str(err)
        if not text.startswith(_BAD_DATA):
            raise
        found = re.search(r"/c/([0-9/]+)\"", text)
        chunk = f"chunk {found.group(1).replace('/', '.')}" if found else "a chunk"
        raise VaultCorruptError(
            f"{snap.where}: array {group}/{name}, {chunk} is corrupt ({text}). "
            "Its data cannot be trusted; restore the vault from a copy."
        ) from None
