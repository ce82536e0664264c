"""The Vault: a persistent, append-only store of buffer states in Zarr v3 via TensorStore.

The error types load at once; ``Vault``, ``EpisodeTable`` and the derive functions load on
first use (they bring numpy and TensorStore), so ``import vault`` and the ``vault`` command's
``--help`` stay fast. ``vault.__version__`` is the installed rlvault's version (the one in
pyproject.toml, as ``buffers.__version__`` and ``vault --version`` show it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from vault._errors import (
    UnsavedDataLostError,
    VaultAccessError,
    VaultArgumentError,
    VaultCorruptError,
    VaultDependencyError,
    VaultError,
    VaultExistsError,
    VaultLocationError,
    VaultLockedError,
    VaultMetadataError,
    VaultModeError,
    VaultNotFoundError,
    VaultPinError,
    VaultReadError,
    VaultStorageError,
    VaultStructureError,
    VaultVersionError,
)
from vault.write._faults import FAULT_POINTS, FaultHook, set_fault_hook

if TYPE_CHECKING:
    __version__: str
    from vault.commits._snapshot import Snapshot
    from vault.dataset._dataset import Dataset, is_dataset
    from vault.derive._derive import combine, derive_episodes, derive_slice
    from vault.facade._stats import LeafStats, episode_stats, leaf_stats, time_blocks
    from vault.facade._vault import Vault
    from vault.format._episodes import EpisodeTable
    from vault.format._records import CommitRecord, EpisodeLeaves, LeafSpec, Manifest, Seam
    from vault.read._inspect import FoundVault, break_lock, disk_usage, find_vaults, lock_holder
    from vault.read._verify import Problem, VerifyReport, verify
    from vault.read._xarray import to_xarray
    from vault.storage._failures import storage_error
    from vault.storage._kinds import parse_location
    from vault.storage._location import Capabilities, Location, LockHolder
    from vault.stream._grain import VaultWindows, grain_source
    from vault.stream._resume import resume_stream
    from vault.stream._stream import DatasetStream, StreamBatch
    from vault.stream._windows import WindowStream

_LAZY = {
    "Vault": "vault.facade._vault",
    "Dataset": "vault.dataset._dataset",
    "is_dataset": "vault.dataset._dataset",
    "EpisodeTable": "vault.format._episodes",
    "DatasetStream": "vault.stream._stream",
    "StreamBatch": "vault.stream._stream",
    "resume_stream": "vault.stream._resume",
    "WindowStream": "vault.stream._windows",
    "VaultWindows": "vault.stream._grain",
    "grain_source": "vault.stream._grain",
    "combine": "vault.derive._derive",
    "derive_episodes": "vault.derive._derive",
    "derive_slice": "vault.derive._derive",
    "verify": "vault.read._verify",
    "VerifyReport": "vault.read._verify",
    "Problem": "vault.read._verify",
    "Snapshot": "vault.commits._snapshot",
    "Manifest": "vault.format._records",
    "LeafSpec": "vault.format._records",
    "CommitRecord": "vault.format._records",
    "EpisodeLeaves": "vault.format._records",
    "Seam": "vault.format._records",
    "Location": "vault.storage._location",
    "Capabilities": "vault.storage._location",
    "LockHolder": "vault.storage._location",
    "storage_error": "vault.storage._failures",
    "parse_location": "vault.storage._kinds",
    "FoundVault": "vault.read._inspect",
    "find_vaults": "vault.read._inspect",
    "lock_holder": "vault.read._inspect",
    "break_lock": "vault.read._inspect",
    "disk_usage": "vault.read._inspect",
    "LeafStats": "vault.facade._stats",
    "leaf_stats": "vault.facade._stats",
    "episode_stats": "vault.facade._stats",
    "time_blocks": "vault.facade._stats",
    "to_xarray": "vault.read._xarray",
}

__all__ = [
    "FAULT_POINTS",
    "Capabilities",
    "CommitRecord",
    "Dataset",
    "DatasetStream",
    "EpisodeLeaves",
    "EpisodeTable",
    "FaultHook",
    "FoundVault",
    "LeafSpec",
    "LeafStats",
    "Location",
    "LockHolder",
    "Manifest",
    "Problem",
    "Seam",
    "Snapshot",
    "StreamBatch",
    "UnsavedDataLostError",
    "Vault",
    "VaultAccessError",
    "VaultArgumentError",
    "VaultCorruptError",
    "VaultDependencyError",
    "VaultError",
    "VaultExistsError",
    "VaultLocationError",
    "VaultLockedError",
    "VaultMetadataError",
    "VaultModeError",
    "VaultNotFoundError",
    "VaultPinError",
    "VaultReadError",
    "VaultStorageError",
    "VaultStructureError",
    "VaultVersionError",
    "VaultWindows",
    "VerifyReport",
    "WindowStream",
    "break_lock",
    "combine",
    "derive_episodes",
    "derive_slice",
    "disk_usage",
    "episode_stats",
    "find_vaults",
    "grain_source",
    "is_dataset",
    "leaf_stats",
    "lock_holder",
    "parse_location",
    "resume_stream",
    "set_fault_hook",
    "storage_error",
    "time_blocks",
    "to_xarray",
    "verify",
]


def _installed_version() -> str:
    """The version of the installed distribution (pyproject.toml's, the one version source).

    ``"0+unknown"`` when rlvault is imported from a source tree that was never installed.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rlvault")
    except PackageNotFoundError:
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        globals()[name] = _installed_version()
        return globals()[name]
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'vault' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
