"""Facts about a vault for ``ls`` and ``info``: sizes, writer, episodes, codecs.

Everything comes from the public ``vault`` API: the typed manifest, ``vault.disk_usage``
(``None`` where the location cannot tell) and ``Vault.lock_holder``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vault import Dataset, LockHolder, Manifest, Vault


def raw_bytes(manifest: Manifest, committed: int) -> int:
    """Uncompressed bytes of the committed data: committed x rows x bytes per timestep."""
    return committed * manifest.rows * manifest.step_bytes


def writer(vault: Vault) -> dict[str, Any]:
    """Whether a writer holds the vault: ``{"held": bool, "holder": {pid, host, since} |
    None}``; ``held`` is ``None`` where the location cannot tell (it has no exclusive lock).
    ``holder`` is ``None`` when the holder did not record itself."""
    from vault import parse_location

    if not parse_location(vault.location).capabilities.exclusive_lock:
        return {"held": None, "holder": None}
    holder = vault.lock_holder()
    if holder is None:
        return {"held": False, "holder": None}
    return {"held": True, "holder": holder_doc(holder)}


def holder_doc(holder: LockHolder) -> dict[str, Any] | None:
    """The holder as JSON (``pid``, ``host``, ``since``, ``thread``), None if it recorded none."""
    doc = dataclasses.asdict(holder)
    return doc if any(v is not None for v in doc.values()) else None


def describe_holder(state: dict[str, Any]) -> str:
    if state["held"] is None:
        return "-"
    if not state["held"]:
        return "no"
    holder = state.get("holder") or {}
    if not holder:
        return "yes"
    return f"yes: pid {holder.get('pid')} on {holder.get('host')} since {holder.get('since')}"


def episode_counts(vault: Vault | Dataset) -> dict[str, int | None]:
    """``{"episodes": complete, "open_episodes": each row's unfinished last one}`` from the
    episode index of a vault or of every shard of a dataset (both ``None`` when it keeps
    none). Every command reports episodes with these two keys."""
    if not vault.has_episodes:
        return {"episodes": None, "open_episodes": None}
    table = vault.episodes(include_open=True)
    complete = int(table.complete.sum())
    return {"episodes": complete, "open_episodes": len(table) - complete}


def summary(vault: Vault) -> dict[str, Any]:
    """The one-line facts of a vault (``ls``; the head of ``info``). A vault opened at an
    older commit (``info --at``) has that commit's raw size, the whole vault's disk size (what
    the commit's data take on disk alone is not known), and no ratio of the two."""
    from vault import disk_usage

    manifest = vault.manifest
    committed = vault.committed_length
    raw = raw_bytes(manifest, committed)
    disk = disk_usage(vault.location)
    ratio = raw / disk if disk and not vault.pinned else None
    return {
        "path": vault.location,
        "kind": "vault",
        "rows": vault.rows,
        "committed": committed,
        **episode_counts(vault),
        "raw_bytes": raw,
        "disk_bytes": disk,
        "ratio": ratio,
        "format_version": manifest.format_version,
        "created": manifest.created,
        "rlvault_version": manifest.rlvault_version,
        "leaf_count": len(manifest.leaves),
    }


def dataset_summary(dataset: Dataset) -> dict[str, Any]:
    """The one-line facts of a dataset of shards (``ls``): its shards (name, rows, committed,
    commit), total timesteps, episodes and sizes of every shard, and its template's format."""
    from vault import disk_usage

    template = dataset.template
    raw = sum(raw_bytes(v.manifest, v.committed_length) for _, v in dataset.vaults())
    disk = disk_usage(dataset.location)
    return {
        "path": dataset.location,
        "kind": "dataset",
        "shards": dataset.describe()["shards"],
        "timesteps": dataset.timesteps,
        **episode_counts(dataset),
        "raw_bytes": raw,
        "disk_bytes": disk,
        "ratio": raw / disk if disk else None,
        "format_version": template.format_version,
        "created": template.created,
        "rlvault_version": template.rlvault_version,
        "leaf_count": len(template.leaves),
    }
