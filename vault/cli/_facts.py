"""Facts about a vault on disk for ``ls`` and ``info``: sizes, writer, episodes, codecs."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vault import Vault


def disk_bytes(path: str | Path) -> int:
    """Sum of the sizes of every file under ``path`` (links are not followed)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def step_bytes(leaf: dict[str, Any]) -> int:
    """Bytes of one timestep of one row of a manifest leaf."""
    from vault._store import leaf_step_bytes

    return leaf_step_bytes(leaf)


def raw_bytes(manifest: dict[str, Any], committed: int) -> int:
    """Uncompressed bytes of the committed data: committed x rows x bytes per timestep."""
    rows = int(manifest["rows"])
    return committed * rows * sum(step_bytes(leaf) for leaf in manifest["leaves"])


def writer(path: str | Path) -> dict[str, Any]:
    """Whether a writer holds the vault: ``{"held": bool, "holder": {...} | None}``.

    The writer keeps an exclusive ``flock`` on ``lock/``; a non-blocking shared ``flock`` on a
    separate open file description fails while it is held (the attempt, when it succeeds, is
    dropped at once). The holder (pid, host, since) is read from ``lock/zarr.json``.
    """
    lock_dir = Path(path) / "lock"
    try:
        fd = os.open(lock_dir, os.O_RDONLY)
    except OSError:
        return {"held": False, "holder": None}
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        held = True
    else:
        held = False
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    holder = None
    if held:
        try:
            doc = json.loads((lock_dir / "zarr.json").read_text())
            holder = doc.get("attributes", {}).get("writer")
        except (OSError, ValueError, AttributeError):
            holder = None
    return {"held": held, "holder": holder}


def describe_holder(state: dict[str, Any]) -> str:
    if not state["held"]:
        return "no"
    holder = state.get("holder") or {}
    if not holder:
        return "yes"
    return f"yes: pid {holder.get('pid')} on {holder.get('host')} since {holder.get('since')}"


def episode_count(vault: Vault) -> int | None:
    """Complete episodes in the index, or ``None`` when the vault keeps no episode index."""
    if not getattr(vault, "has_episodes", False):
        return None
    return len(vault.episodes())


def summary(vault: Vault) -> dict[str, Any]:
    """The one-line facts of a vault (``ls``; the head of ``info``)."""
    manifest = vault.manifest
    committed = vault.committed_length
    raw = raw_bytes(manifest, committed)
    disk = disk_bytes(vault.location)
    return {
        "path": vault.location,
        "rows": vault.rows,
        "committed": committed,
        "episodes": episode_count(vault),
        "raw_bytes": raw,
        "disk_bytes": disk,
        "ratio": raw / disk if disk else None,
        "format_version": manifest.get("format_version"),
        "created": manifest.get("created"),
        "rlvault_version": manifest.get("rlvault_version"),
        "leaves": len(manifest["leaves"]),
    }


def codec_text(codecs: list[dict[str, Any]]) -> str:
    """``blosc(zstd-1, shuffle) + crc32c`` from a Zarr v3 codec chain (``bytes`` omitted)."""
    parts = []
    for codec in codecs:
        name = codec.get("name")
        conf = codec.get("configuration", {}) or {}
        if name == "bytes":
            continue
        if name == "blosc":
            parts.append(f"blosc({conf.get('cname')}-{conf.get('clevel')}, {conf.get('shuffle')})")
        elif "level" in conf:
            parts.append(f"{name}-{conf['level']}")
        else:
            parts.append(str(name))
    return " + ".join(parts) or "none"


def find_vaults(root: str | Path) -> list[tuple[Path, str | None]]:
    """Every vault under ``root`` (recursively, hidden folders skipped), sorted by path, with
    ``None`` or a reason it looks broken (a folder that has the layout of a vault but whose
    manifest cannot be read). Vaults are not searched inside."""
    found: list[tuple[Path, str | None]] = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        here = Path(dirpath)
        kind = _vault_kind(here, "zarr.json" in files, set(dirs))
        if kind is not None:
            found.append((here, None if kind == "ok" else kind))
            dirs[:] = []
    return sorted(found)


def _vault_kind(path: Path, has_json: bool, dirs: set[str]) -> str | None:
    looks_like = {"commit", "experience"} <= dirs
    if not has_json:
        return "no zarr.json (not a vault any more)" if looks_like else None
    try:
        doc = json.loads((path / "zarr.json").read_bytes())
    except (OSError, ValueError) as err:
        return f"corrupt manifest: {err}" if looks_like else None
    attrs = doc.get("attributes") if isinstance(doc, dict) else None
    if isinstance(attrs, dict) and "rlvault" in attrs:
        return "ok"
    return "zarr.json has no 'rlvault' attributes" if looks_like else None
