"""The reference-compatible constructor: ``Vault(vault_name, experience_structure, rel_dir,
vault_uid, compression, metadata)`` opens the vault at ``rel_dir/vault_name/vault_uid`` if it
exists (the latest uid when none is given), else creates it there."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Mapping
from typing import Any

from vault._args import kind
from vault._errors import VaultArgumentError, VaultNotFoundError, VaultStructureError
from vault.format._records import MANIFEST_KEY
from vault.storage._kinds import check_name, parse_location
from vault.storage._location import Location
from vault.write._create import is_state


@dataclasses.dataclass(frozen=True)
class ReferenceTarget:
    """What the reference-style constructor does: open ``location`` (``create`` false: for
    appending, the lock taken at the first write, as the reference), or create a vault there
    shaped like ``structure`` (``rows`` given for a single timestep) with ``codec``/``level``."""

    location: Location
    create: bool
    structure: Any = None
    rows: int | None = None
    codec: str | None = "auto"
    level: int | None = None


def reference_target(
    vault_name: str,
    experience_structure: Any,
    rel_dir: str | Location,
    vault_uid: str | None,
    compression: dict[str, Any] | None,
) -> ReferenceTarget:
    """Where ``Vault(vault_name, experience_structure, rel_dir, vault_uid, compression)``
    goes, and whether it creates."""
    for argument, name in (("vault_name", vault_name), ("vault_uid", vault_uid)):
        if name is None and argument == "vault_uid":
            continue
        parts = name.split("/") if isinstance(name, str) else []
        if not isinstance(name, str) or any(part in ("", ".", "..") for part in parts):
            raise VaultArgumentError(
                f"{argument} must name a folder under rel_dir (folders joined by '/', none "
                f"empty, '.' or '..'), got {kind(name)}"
            )
        check_name(argument, name)
    base = parse_location(rel_dir, argument="rel_dir").child(vault_name)
    if vault_uid is None and experience_structure is None:
        existing = sorted(str(loc) for loc, broken in base.find_vaults() if broken is None)
        vault_uid = existing[-1].rstrip("/").rsplit("/", 1)[-1] if existing else None
    if vault_uid is None:
        vault_uid = _dt.datetime.now().strftime("%Y%m%d%H%M%S")
    location = base.child(vault_uid)
    if location.read(MANIFEST_KEY) is not None:
        return ReferenceTarget(location, create=False)
    if experience_structure is None:
        raise VaultNotFoundError(
            f"no vault at {location}: give `experience_structure` (a buffer state) to create one"
        )
    codec, level = compat_compression(compression)
    rows = None
    if not is_state(experience_structure):
        # The reference passes ``state.experience``: leaves ``[B, T, ...]``.
        experience_structure, rows = timestep_of(experience_structure)
    return ReferenceTarget(location, True, experience_structure, rows, codec, level)


def timestep_of(experience: Any) -> tuple[Any, int]:
    """One timestep (``x[0, 0]`` of every leaf) and the row count of a ``[B, T, ...]`` tree."""
    import jax

    from vault.format._structure import describe
    from vault.write._plan import first_leaf

    describe(experience)  # a leaf that cannot be stored: VaultStructureError naming it
    first = first_leaf(experience)
    if len(first.shape) < 2:
        raise VaultStructureError(
            f"experience_structure leaves must be [rows, time, ...], got shape {first.shape}"
        )
    return jax.tree.map(lambda x: x[0, 0], experience), int(first.shape[0])


def compat_compression(compression: dict[str, Any] | None) -> tuple[str | None, int | None]:
    """The reference's ``compression`` dict as (codec, level)."""
    if compression is None:
        return "auto", None
    if not isinstance(compression, Mapping):
        raise VaultArgumentError(
            "compression must be a dict such as the reference's ({'id': 'blosc', 'cname': "
            f"'zstd', 'clevel': 3}}), or None, got {type(compression).__name__} "
            f"{compression!r}"
        )
    level = compression.get("clevel", compression.get("level"))  # 0 is a level
    if compression.get("id") == "blosc":
        cname = compression.get("cname", "zstd")
        blosc = {"zstd": "blosc", "lz4": "lz4"}  # with byte shuffle, as rlvault stores blosc
        if cname not in blosc:
            raise VaultArgumentError(
                f"compression: blosc with cname {cname!r} is not one rlvault writes; use cname "
                "'zstd' or 'lz4' (byte shuffle), or another id ('zstd', 'gzip')"
            )
        return blosc[cname], level
    return compression.get("cname") or compression.get("id") or "zstd", level
