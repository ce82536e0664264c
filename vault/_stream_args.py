"""Argument checks shared by the streams: ints, flags, row and leaf selections, episode ends,
and the memory a stream would hold."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vault import _args
from vault._errors import VaultReadError
from vault._read import leaf_selection, row_selection
from vault._snapshot import Snapshot


def int_arg(name: str, value: Any, minimum: int) -> int:
    """An int ``>= minimum`` (VaultArgumentError for another type, VaultReadError when
    smaller)."""
    return _args.int_arg(name, value, minimum, VaultReadError)


def bool_arg(name: str, value: Any) -> bool:
    return _args.bool_arg(name, value)


def selection(
    snap: Snapshot, rows: Sequence[int] | slice | None, leaves: Sequence[str] | None
) -> tuple[np.ndarray, list[str]]:
    """The vault row ids that ``rows`` picks, and the leaf names (each at most once)."""
    row_ids = np.arange(snap.rows, dtype=np.int64)[row_selection(snap, rows)]
    if row_ids.size == 0:
        raise VaultReadError(f"{snap.where}: the row selection {rows!r} is empty")
    if np.unique(row_ids).size != row_ids.size:
        raise VaultReadError(f"{snap.where}: rows {row_ids.tolist()} name a row twice")
    return row_ids, leaf_selection(snap, leaves)


def check_memory(what: str, nbytes: int, fix: str) -> None:
    """Refuse a stream that would hold more than the machine's memory (VaultReadError)."""
    _args.check_memory(what, nbytes, fix, VaultReadError)


def episode_end_leaves(snap: Snapshot) -> list[str]:
    """The done/truncated leaves of a vault with an episode index (else VaultReadError)."""
    cfg = snap.manifest.episodes
    if cfg is None:
        raise VaultReadError(
            f"{snap.where}: episode_aware=True needs a vault that knows its episode ends, "
            "created with Vault.create(..., done_leaf=...); this one has no episode index. "
            "Use episode_aware=False, or derive a vault with the episode leaves named."
        )
    return [n for n in (cfg.done, cfg.truncated) if n]
