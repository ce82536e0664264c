"""Facts about vaults at a location without opening them for reading data: which vaults are
under a prefix, who holds a vault's writer lock, how much storage a vault uses."""

from __future__ import annotations

import dataclasses
from typing import Any

from vault._args import bool_arg, str_arg
from vault._errors import (
    VaultLocationError,
    VaultNotFoundError,
    VaultReadError,
)
from vault.commits._snapshot import no_vault
from vault.format._records import MANIFEST_KEY, leaf_key, read_manifest_bytes
from vault.storage._kinds import LocationLike, parse_location
from vault.storage._location import LockHolder, vault_kind


@dataclasses.dataclass(frozen=True)
class FoundVault:
    """A vault (or a dataset's root) found under a prefix by :func:`find_vaults`.

    Attributes:
        location: its location, as a path or URL.
        problem: why it looks broken (its manifest cannot be read), or None: sound.
        kind: ``"vault"``, or ``"dataset"`` for a dataset's root (with ``datasets=True``).
    """

    location: str
    problem: str | None = None
    kind: str = "vault"


def find_vaults(prefix: LocationLike, *, datasets: bool = False) -> list[FoundVault]:
    """Every vault under a folder or prefix, as ``vault ls`` lists them.

    Vaults are not searched inside; hidden folders are skipped on a file system. Something
    with the layout of a vault whose manifest cannot be read is listed with its problem.

    Args:
        prefix: a folder, or a location (``s3://bucket/prefix``).
        datasets: list the roots of datasets too (kind ``"dataset"``, even one with no shard
            yet); their shards are listed as vaults either way.

    Returns:
        What was found, sorted by location.

    Raises:
        VaultLocationError: a location that cannot list its keys.
        VaultArgumentError: ``datasets`` not True or False.
    """
    datasets = bool_arg("datasets", datasets)
    return [
        FoundVault(str(loc), why, kind)
        for loc, kind, why in parse_location(prefix, argument="prefix").find_roots()
        if datasets or kind == "vault"
    ]


def lock_holder(location: LocationLike) -> LockHolder | None:
    """Who holds the writer lock of the vault at ``location``.

    Args:
        location: the vault's path or URL.

    Returns:
        The holder (process, host, since when), or None when nobody holds it (or no vault
        is there) or the location cannot tell.
    """
    return parse_location(location).lock_holder()


def disk_usage(location: LocationLike | Any, leaf: str | None = None) -> int | None:
    """Bytes the vault at ``location`` stores.

    Args:
        location: the vault's (or a dataset's) path or URL, or an open :class:`Vault`.
        leaf: one leaf's path, to count only its arrays (a vault's).

    Returns:
        The bytes, or None where the location cannot tell cheaply.

    Raises:
        VaultNotFoundError: no vault or dataset there (or, with ``leaf``, no vault).
        VaultReadError: ``leaf`` is not one of the vault's leaves.
    """
    opened: Any = location  # an open Vault: its manifest is not read again
    manifest = getattr(opened, "manifest", None)
    where = parse_location(location if manifest is None else opened.location)
    if manifest is None:
        raw = where.read(MANIFEST_KEY)
        if raw is None:
            raise VaultNotFoundError(f"no vault or dataset at {where} (no {MANIFEST_KEY})")
    if str_arg("leaf", leaf, optional=True) is not None:
        names = (manifest or read_manifest_bytes(raw, str(where))).leaf_names
        if leaf not in names:
            raise VaultReadError(f"{where}: no leaf {leaf!r}; the leaves are {names}")
    return where.disk_usage("" if leaf is None else leaf_key(leaf))


def break_lock(location: LocationLike) -> bool:
    """Break the writer lock of the vault at ``location``, whoever holds it.

    For a lease on an object store whose holder died or hangs. A writer that still runs can
    no longer commit (its next commit raises ``VaultLockedError``).

    Args:
        location: the vault's URL.

    Returns:
        Whether there was a lock to break.

    Raises:
        VaultNotFoundError: neither a vault nor a lock at ``location`` (a create that was
            interrupted leaves a lock and no vault: that lock is broken).
        VaultLocationError: a local file system: there is nothing to break (the kernel
            releases a dead writer's ``flock``); or a dataset's root, whose shards each have
            their own lock (break the one of ``<root>/shards/NAME``).
    """
    where = parse_location(location)
    root = where.read(MANIFEST_KEY)
    if vault_kind(lambda _key: root, False) == "dataset":  # a damaged record is no dataset
        raise VaultLocationError(
            f"{where} is a dataset of shards, each with its own writer lock: break the lock "
            f"of the shard whose writer died, {str(where).rstrip('/')}/shards/NAME"
        )
    had = where.break_lock()
    if not had and root is None:
        raise no_vault(where, ", and no lock")
    return had
