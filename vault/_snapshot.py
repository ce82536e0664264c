"""What is committed, frozen: the manifest, one commit record and array handles that reach it.

Readers, streams, episodes, stats and verify work on a :class:`Snapshot`, so a read that spans
many calls is consistent by construction: a later commit makes a new snapshot
(:meth:`Snapshot.refreshed`), never changes this one. Committed data is never rewritten in
place, so a snapshot's data stays valid after any number of later appends.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from vault._arrays import open_array
from vault._format import (
    BOUNDS,
    COMMIT_KEY,
    MANIFEST_KEY,
    RETURNS,
    CommitRecord,
    Manifest,
    leaf_key,
    read_commit_bytes,
    read_manifest_bytes,
)
from vault._location import Location


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A committed state of a vault. ``arrays`` are the leaves' TensorStore handles (leaf
    order), ``index`` the episode index's (bounds, returns) or empty."""

    location: Location
    manifest: Manifest
    commit: CommitRecord
    arrays: tuple[Any, ...]
    index: tuple[Any, ...]
    writable: bool = False

    @property
    def length(self) -> int:
        """Committed timesteps per row."""
        return self.commit.committed_length

    @property
    def rows(self) -> int:
        return self.manifest.rows

    @property
    def names(self) -> list[str]:
        return self.manifest.leaf_names

    @property
    def where(self) -> str:
        return str(self.location)

    @property
    def episode_count(self) -> int:
        return 0 if self.commit.episodes is None else self.commit.episodes.count

    def array(self, name: str) -> Any:
        return self.arrays[self.names.index(name)]

    def refreshed(self) -> Snapshot:
        """The snapshot of the commit record as it is now (arrays reopened where another
        process grew them)."""
        commit = load_commit(self.location, self.manifest)
        return self if commit == self.commit else self.with_commit(commit)

    def with_commit(self, commit: CommitRecord) -> Snapshot:
        """This vault at ``commit``: arrays shorter than it (grown by another process since
        they were opened) are reopened to see their new shape."""
        arrays = list(self.arrays)
        stale = [i for i, a in enumerate(arrays) if a.shape[1] < commit.committed_length]
        futures = [
            (i, open_array(self.location, leaf_key(self.names[i]), self.writable)) for i in stale
        ]
        for i, future in futures:
            arrays[i] = future.result()
        index = self.index
        count = 0 if commit.episodes is None else commit.episodes.count
        if index and index[0].shape[0] < count:
            index = _open_index(self.location, self.writable)
        return dataclasses.replace(self, commit=commit, arrays=tuple(arrays), index=index)


def load_manifest(location: Location) -> Manifest:
    return read_manifest_bytes(location.read(MANIFEST_KEY), str(location))


def load_commit(location: Location, manifest: Manifest) -> CommitRecord:
    return read_commit_bytes(location.read(COMMIT_KEY), str(location), manifest)


def load_snapshot(location: Location, writable: bool, manifest: Manifest | None = None) -> Snapshot:
    """Open the vault at ``location``: its manifest, commit record and arrays."""
    if manifest is None:
        manifest = load_manifest(location)
    futures = [open_array(location, leaf_key(n), writable) for n in manifest.leaf_names]
    index = _open_index(location, writable) if manifest.episodes is not None else ()
    arrays = tuple(f.result() for f in futures)
    commit = load_commit(location, manifest)
    return Snapshot(location, manifest, commit, arrays, index, writable).with_commit(commit)


def _open_index(location: Location, writable: bool) -> tuple[Any, ...]:
    futures = [open_array(location, key, writable) for key in (BOUNDS, RETURNS)]
    return tuple(f.result() for f in futures)
