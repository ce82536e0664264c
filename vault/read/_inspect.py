"""Facts about vaults at a location without opening them for reading data: which vaults are
under a prefix, who holds a vault's writer lock, how much storage a vault uses."""

from __future__ import annotations

import dataclasses

from vault.format._records import leaf_key
from vault.storage._kinds import LocationLike, parse_location
from vault.storage._location import LockHolder


@dataclasses.dataclass(frozen=True)
class FoundVault:
    """A vault (or, with ``find_vaults(..., datasets=True)``, a dataset's root: ``kind``
    ``"dataset"``) found under a prefix: its location, and why it looks broken (None: sound)."""

    location: str
    problem: str | None = None
    kind: str = "vault"


def find_vaults(prefix: LocationLike, *, datasets: bool = False) -> list[FoundVault]:
    """Every vault under ``prefix`` (vaults are not searched inside; hidden folders are
    skipped on a file system), sorted by location. Something with the layout of a vault whose
    manifest cannot be read is listed with its problem. ``datasets``: list the roots of
    datasets too (kind ``"dataset"``, even one with no shard yet); their shards are listed
    as vaults either way."""
    return [
        FoundVault(str(loc), why, kind)
        for loc, kind, why in parse_location(prefix, argument="prefix").find_roots()
        if datasets or kind == "vault"
    ]


def lock_holder(location: LocationLike) -> LockHolder | None:
    """Who holds the writer lock of the vault at ``location`` (None: nobody, or the location
    cannot tell)."""
    return parse_location(location).lock_holder()


def disk_usage(location: LocationLike, leaf: str | None = None) -> int | None:
    """Bytes the vault at ``location`` stores (of one leaf with ``leaf``); None where the
    location cannot tell cheaply."""
    where = parse_location(location)
    return where.disk_usage("" if leaf is None else leaf_key(leaf))


def break_lock(location: LocationLike) -> bool:
    """Break the writer lock of the vault at ``location`` whoever holds it (a lease on an
    object store, whose holder died or hangs); whether there was one. A writer that still runs
    can no longer commit (its next commit raises ``VaultLockedError``). On a local file system
    there is nothing to break (the kernel releases a dead writer's ``flock``):
    ``VaultLocationError``."""
    return parse_location(location).break_lock()
