"""Argument checks shared by the streams: ints, flags, the sources (one snapshot or several
of one structure), row and leaf selections, episode ends, and the memory a stream would
hold."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vault import _args
from vault._errors import VaultArgumentError, VaultReadError, VaultStructureError
from vault.commits._snapshot import Snapshot
from vault.read._read import leaf_selection, row_selection


def int_arg(name: str, value: Any, minimum: int) -> int:
    """An int ``>= minimum`` (VaultArgumentError for another type, VaultReadError when
    smaller)."""
    return _args.int_arg(name, value, minimum, VaultReadError)


def bool_arg(name: str, value: Any) -> bool:
    return _args.bool_arg(name, value)


def resume_arg(resume_at: Any) -> tuple[int, int]:
    """``(epoch, batch)``, two ints >= 0: a position a stream's ``state()`` saved."""
    if not isinstance(resume_at, (tuple, list)) or len(resume_at) != 2:
        raise VaultArgumentError(
            f"resume_at must be (epoch, batch), two ints >= 0, got {_args.kind(resume_at)}"
        )
    epoch = int_arg("resume_at's epoch", resume_at[0], 0)
    return epoch, int_arg("resume_at's batch", resume_at[1], 0)


def sources_arg(snaps: Any) -> list[Snapshot]:
    """``snaps`` (one snapshot, or a non-empty sequence of snapshots of one structure) as a
    list: the sources of a stream, in the order their ``source`` index counts."""
    if isinstance(snaps, Snapshot):
        return [snaps]
    if isinstance(snaps, (str, bytes)) or not isinstance(snaps, Sequence):
        raise VaultArgumentError(
            f"a stream's sources are a Snapshot or a sequence of Snapshots, got {_args.kind(snaps)}"
        )
    listed = list(snaps)
    bad = [f"[{i}] {_args.kind(s)}" for i, s in enumerate(listed) if not isinstance(s, Snapshot)]
    if not listed or bad:
        got = ", ".join(bad) if bad else "an empty sequence"
        raise VaultArgumentError(f"a stream's sources must be Snapshots, got {got}")
    check_same_structure(listed)
    return listed


def check_same_structure(snaps: list[Snapshot]) -> None:
    """Every snapshot has the first one's structure: the same containers and leaves (paths,
    per-timestep shapes, dtypes); else VaultStructureError listing every difference."""
    first = snaps[0].manifest
    want = {leaf.name: (leaf.shape, leaf.dtype) for leaf in first.leaves}
    problems: list[str] = []
    for i, snap in enumerate(snaps[1:], 1):
        got = {leaf.name: (leaf.shape, leaf.dtype) for leaf in snap.manifest.leaves}
        where = f"source {i} ({snap.where})"
        before = len(problems)
        for name in sorted(set(want) | set(got)):
            if name not in got:
                problems.append(f"{where}: no leaf {name}")
            elif name not in want:
                problems.append(f"{where}: leaf {name} is not in source 0")
            elif got[name] != want[name]:
                (s0, d0), (s1, d1) = want[name], got[name]
                problems.append(
                    f"{where}: leaf {name} is {list(s1)} {d1}, expected {list(s0)} {d0}"
                )
        if len(problems) == before and snap.manifest.structure != first.structure:
            problems.append(f"{where}: same leaves in other containers than source 0's")
    if problems:
        raise VaultStructureError(
            f"the sources of one stream must have one structure (source 0: {snaps[0].where})",
            problems,
        )


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


def end_leaves_of(snaps: list[Snapshot]) -> list[str]:
    """The done/truncated leaves of snapshots that all have an episode index naming the same
    ones (else VaultReadError / VaultStructureError)."""
    ends = [episode_end_leaves(snap) for snap in snaps]
    problems = [
        f"source {i} ({snap.where}) names {got}, source 0 {ends[0]}"
        for i, (snap, got) in enumerate(zip(snaps, ends, strict=True))
        if got != ends[0]
    ]
    if problems:
        raise VaultStructureError(
            "episode_aware=True over several sources needs the same episode-end leaves in each",
            problems,
        )
    return ends[0]
