"""The Vault: a persistent, append-only store of buffer states in Zarr v3 via TensorStore.

The error types load at once; ``Vault``, ``EpisodeTable`` and the derive functions load on
first use (they bring numpy and TensorStore), so ``import vault`` and the ``vault`` command's
``--help`` stay fast.
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
from vault._faults import FAULT_POINTS, FaultHook, set_fault_hook

if TYPE_CHECKING:
    from vault._dataset import Dataset, is_dataset
    from vault._derive import combine, derive_episodes, derive_slice
    from vault._episodes import EpisodeTable
    from vault._format import CommitRecord, EpisodeLeaves, LeafSpec, Manifest, Seam
    from vault._grain import VaultWindows, grain_source
    from vault._inspect import FoundVault, break_lock, disk_usage, find_vaults, lock_holder
    from vault._location import Capabilities, Location, LockHolder, storage_error
    from vault._locations import parse_location
    from vault._snapshot import Snapshot
    from vault._stats import LeafStats, episode_stats, leaf_stats, time_blocks
    from vault._stream import DatasetStream, StreamBatch
    from vault._stream_resume import resume_stream
    from vault._vault import Vault
    from vault._verify import Problem, VerifyReport, verify
    from vault._windows import WindowStream
    from vault._xarray import to_xarray

_LAZY = {
    "Vault": "vault._vault",
    "Dataset": "vault._dataset",
    "is_dataset": "vault._dataset",
    "EpisodeTable": "vault._episodes",
    "DatasetStream": "vault._stream",
    "StreamBatch": "vault._stream",
    "resume_stream": "vault._stream_resume",
    "WindowStream": "vault._windows",
    "VaultWindows": "vault._grain",
    "grain_source": "vault._grain",
    "combine": "vault._derive",
    "derive_episodes": "vault._derive",
    "derive_slice": "vault._derive",
    "verify": "vault._verify",
    "VerifyReport": "vault._verify",
    "Problem": "vault._verify",
    "Snapshot": "vault._snapshot",
    "Manifest": "vault._format",
    "LeafSpec": "vault._format",
    "CommitRecord": "vault._format",
    "EpisodeLeaves": "vault._format",
    "Seam": "vault._format",
    "Location": "vault._location",
    "Capabilities": "vault._location",
    "LockHolder": "vault._location",
    "storage_error": "vault._location",
    "parse_location": "vault._locations",
    "FoundVault": "vault._inspect",
    "find_vaults": "vault._inspect",
    "lock_holder": "vault._inspect",
    "break_lock": "vault._inspect",
    "disk_usage": "vault._inspect",
    "LeafStats": "vault._stats",
    "leaf_stats": "vault._stats",
    "episode_stats": "vault._stats",
    "time_blocks": "vault._stats",
    "to_xarray": "vault._xarray",
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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'vault' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
