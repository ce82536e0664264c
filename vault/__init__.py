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

if TYPE_CHECKING:
    from vault._derive import combine, derive_episodes, derive_slice
    from vault._episodes import EpisodeTable
    from vault._stream import DatasetStream, StreamBatch, WindowStream
    from vault._vault import Vault
    from vault._verify import VerifyReport, verify

_LAZY = {
    "Vault": "vault._vault",
    "EpisodeTable": "vault._episodes",
    "DatasetStream": "vault._stream",
    "StreamBatch": "vault._stream",
    "WindowStream": "vault._stream",
    "combine": "vault._derive",
    "derive_episodes": "vault._derive",
    "derive_slice": "vault._derive",
    "verify": "vault._verify",
    "VerifyReport": "vault._verify",
}

__all__ = [
    "DatasetStream",
    "EpisodeTable",
    "StreamBatch",
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
    "VerifyReport",
    "WindowStream",
    "combine",
    "derive_episodes",
    "derive_slice",
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
