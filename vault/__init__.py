"""The Vault: a persistent, append-only store of buffer states in Zarr v3 via TensorStore."""

from vault._derive import combine, derive_episodes, derive_slice
from vault._episodes import EpisodeTable
from vault._errors import (
    UnsavedDataLostError,
    VaultCorruptError,
    VaultError,
    VaultExistsError,
    VaultLockedError,
    VaultMetadataError,
    VaultModeError,
    VaultNotFoundError,
    VaultReadError,
    VaultStructureError,
)
from vault._vault import Vault

__all__ = [
    "EpisodeTable",
    "UnsavedDataLostError",
    "Vault",
    "VaultCorruptError",
    "VaultError",
    "VaultExistsError",
    "VaultLockedError",
    "VaultMetadataError",
    "VaultModeError",
    "VaultNotFoundError",
    "VaultReadError",
    "VaultStructureError",
    "combine",
    "derive_episodes",
    "derive_slice",
]
