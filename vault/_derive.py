"""New vaults from old ones: a row/time slice, selected episodes, several vaults combined.

Sources are only read. A destination is complete or absent: on a local file system it is
built under a hidden temporary name next to it (``.NAME.partial-XXXX``) and renamed into place
at the end; an error or Ctrl-C removes the temporary directory. Data is copied in blocks of
whole timesteps (about ``BLOCK_BYTES`` at a time), so memory stays bounded whatever the size.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vault import _structure
from vault._episodes import EpisodeTable
from vault._errors import VaultExistsError, VaultReadError, VaultStructureError
from vault._location import kvstore_spec
from vault._store import MANIFEST_KEY, leaf_step_bytes
from vault._vault import Vault

BLOCK_BYTES = 64 << 20
Progress = Callable[[int, int], None]  # (timesteps copied, total)


def derive_slice(
    source: str | Vault,
    dest: str,
    *,
    rows: Sequence[int] | None = None,
    start: int | None = None,
    stop: int | None = None,
    codec: str | None = "auto",
    progress: Progress | None = None,
) -> Vault:
    """A new vault holding ``rows`` x ``[start, stop)`` of ``source`` (opened read-only).

    The episode index is rebuilt: an episode already running at ``start`` is marked as of
    unknown start, one still running at ``stop`` stays open; recorded gaps are kept.
    """
    with _opened(source) as src:
        picked = list(range(src.rows)) if rows is None else [int(r) for r in rows]
        src._row_selection(picked)  # validates
        if not picked:
            raise VaultReadError("rows selects no row")
        lo, hi = src._time_range(start, stop, None, None)
        with _destination(dest) as tmp:
            out = _create_like(src, tmp, len(picked), codec, {"op": "slice", "start": lo})
            known = _starts_known(src, picked, lo)
            _copy(src, out, picked, lo, hi, known, progress, 0, hi - lo)
            out.close()
    return Vault.open(dest)


def derive_episodes(
    source: str | Vault,
    dest: str,
    episodes: EpisodeTable,
    *,
    codec: str | None = "auto",
    progress: Progress | None = None,
) -> Vault:
    """A one-row vault of the given complete episodes of ``source``, back to back in order of
    their start time (row, then start), with its episode index rebuilt (same episodes)."""
    if not isinstance(episodes, EpisodeTable):
        raise TypeError(f"episodes must be an EpisodeTable, got {type(episodes).__name__}")
    if not episodes.complete.all():
        raise VaultReadError("derive_episodes takes complete episodes (an open one was given)")
    with _opened(source) as src:
        if not src.has_episodes:
            raise VaultReadError(f"{src.location} has no episode index")
        order = np.lexsort((episodes.row, episodes.start))
        table = episodes[order]
        if len(table) and int((table.start + table.length).max()) > src.committed_length:
            raise VaultReadError("an episode lies beyond the committed data of the source")
        with _destination(dest) as tmp:
            out = _create_like(src, tmp, 1, codec, {"op": "episodes", "count": len(table)})
            total, copied, i = table.transitions, 0, 0
            step = _step_bytes(src) * src.rows
            while i < len(table):
                # one read of [first start, furthest end) serves every episode inside it
                lo = int(table.start[i])
                j, hi = i, lo
                while j < len(table):
                    end = int(table.start[j] + table.length[j])
                    if j > i and (max(hi, end) - lo) * step > BLOCK_BYTES:
                        break
                    hi = max(hi, end)
                    j += 1
                block = _read(src, None, lo, hi)
                joined = [
                    np.concatenate(
                        [
                            x[r : r + 1, s - lo : s - lo + n]
                            for r, s, n in zip(
                                table.row[i:j], table.start[i:j], table.length[i:j], strict=True
                            )
                        ],
                        axis=1,
                    )
                    for x in block
                ]
                out._append_arrays(_tree(src, joined), np.ones(1, bool) if i == 0 else None)
                copied += sum(int(table.length[k]) for k in range(i, j))
                if progress:
                    progress(copied, total)
                i = j
            out.close()
    return Vault.open(dest)


def combine(
    sources: Sequence[str | Vault],
    dest: str,
    *,
    codec: str | None = "auto",
    progress: Progress | None = None,
) -> Vault:
    """One vault of several with the same structure and rows, concatenated along time (each
    may have its own length). Episodes never run across a seam: the open episodes at the end
    of a source are dropped from the index and the next source's rows start afresh."""
    if not sources:
        raise VaultReadError("combine needs at least one source")
    with contextlib.ExitStack() as stack:
        srcs = [stack.enter_context(_opened(s)) for s in sources]
        first = srcs[0]
        problems = [f"{s.location}: {why}" for s in srcs[1:] for why in _incompatible(first, s)]
        if problems:
            raise VaultStructureError("the vaults to combine differ", problems)
        total = sum(s.committed_length for s in srcs)
        with _destination(dest) as tmp:
            out = _create_like(first, tmp, first.rows, codec, {"op": "combine", "count": len(srcs)})
            copied = 0
            for src in srcs:
                known = _starts_known(src, list(range(src.rows)), 0)
                end = src.committed_length
                copied = _copy(src, out, None, 0, end, known, progress, copied, total)
            out.close()
    return Vault.open(dest)


# ---------------------------------------------------------------------------------- helpers
def _copy(
    src: Vault,
    out: Vault,
    rows: list[int] | None,
    lo: int,
    hi: int,
    known: np.ndarray,
    progress: Progress | None,
    done: int,
    total: int,
) -> int:
    """Append ``rows`` x ``[lo, hi)`` of ``src`` to ``out`` block by block, cut at the
    source's seams (gaps and restarts, kept); rows start new episodes at ``lo`` (``known``:
    whose start is known)."""
    restart: np.ndarray | None = known
    n_rows = src.rows if rows is None else len(rows)
    picked = list(range(src.rows)) if rows is None else rows
    for seg_lo, seg_hi, lost in _segments(src, lo, hi):
        if seg_lo > lo and not lost:  # a restart seam of the source
            restart = _starts_known(src, picked, seg_lo)
        for t0, t1 in _blocks(src, seg_lo, seg_hi, n_rows):
            out._append_arrays(_tree(src, _read(src, rows, t0, t1)), restart, lost)
            restart, lost = None, 0
            done += t1 - t0
            if progress:
                progress(done, total)
    return done


@contextlib.contextmanager
def _opened(source: str | Vault) -> Iterator[Vault]:
    if isinstance(source, Vault):
        yield source
        return
    src = Vault.open(os.fspath(source))
    try:
        yield src
    finally:
        src.close()


@contextlib.contextmanager
def _destination(dest: str) -> Iterator[str]:
    """Where to build ``dest``: a hidden sibling renamed into place on success."""
    root = kvstore_spec(dest)
    if root["driver"] != "file":
        yield os.fspath(dest)
        return
    final = Path(root["path"])
    if (final / MANIFEST_KEY).exists() or (final.exists() and any(final.iterdir())):
        raise VaultExistsError(f"{final} already exists; choose a new destination")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.partial-{uuid.uuid4().hex[:8]}"
    try:
        yield str(tmp)
        if final.exists() and any(final.iterdir()):
            raise VaultExistsError(f"{final} appeared while it was being built; left as is")
        os.replace(tmp, final)  # a directory onto an absent or empty one: atomic
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _create_like(
    src: Vault, location: str, rows: int, codec: str | None, op: dict[str, Any]
) -> Vault:
    manifest = src.manifest
    example = _structure.build(
        manifest["structure"],
        [np.zeros(leaf["shape"], np.dtype(leaf["dtype"])) for leaf in manifest["leaves"]],
    )
    leaves = src.episode_leaves
    metadata = dict(src.metadata)
    metadata.setdefault("derived_from", {"source": src.location, **op})
    return Vault.create(
        location,
        example,
        rows=rows,
        codec=codec,
        metadata=metadata,
        done_leaf=leaves["done"],
        truncated_leaf=leaves["truncated"],
        reward_leaf=leaves["reward"],
    )


def _step_bytes(src: Vault) -> int:
    """Bytes of one timestep of one row, every leaf."""
    return sum(leaf_step_bytes(leaf) for leaf in src.manifest["leaves"])


def _blocks(src: Vault, lo: int, hi: int, rows: int) -> Iterator[tuple[int, int]]:
    per = max(1, BLOCK_BYTES // max(1, _step_bytes(src) * rows))
    for t0 in range(lo, hi, per):
        yield t0, min(hi, t0 + per)


def _segments(src: Vault, lo: int, hi: int) -> Iterator[tuple[int, int, int]]:
    """``[lo, hi)`` cut at the source's seams: (start, stop, timesteps lost before)."""
    cuts = sorted((int(g["at"]), int(g["lost"])) for g in src.gaps if lo < int(g["at"]) < hi)
    edges = [lo, *(at for at, _ in cuts), hi]
    losts = [0, *(lost for _, lost in cuts)]
    for (a, b), lost in zip(itertools.pairwise(edges), losts, strict=True):
        if b > a:
            yield a, b, lost


def _starts_known(src: Vault, rows: list[int], at: int) -> np.ndarray:
    """Per row: does an episode start exactly at ``at`` (a known episode start)? At the start
    and at the source's seams the index says; elsewhere the flags of the timestep before."""
    if not src.has_episodes:
        return np.ones(len(rows), bool)
    if at == 0 or any(int(g["at"]) == at for g in src.gaps):
        table = src.episodes(include_open=True)
        here = table.start == at
        first = dict(zip(table.row[here].tolist(), table.start_known[here].tolist(), strict=True))
        return np.array([first.get(r, True) for r in rows], bool)
    names = [n for n in (src.episode_leaves["done"], src.episode_leaves["truncated"]) if n]
    flags = src.read_numpy(rows=rows, start=at - 1, stop=at, leaves=names)
    ended = np.zeros(len(rows), bool)
    for name in names:
        ended |= np.asarray(flags[name][:, 0]).astype(bool)
    return ended


def _read(src: Vault, rows: list[int] | None, start: int, stop: int) -> list[np.ndarray]:
    """Every leaf of ``rows`` x ``[start, stop)``, in the vault's leaf order."""
    flat = src.read_numpy(rows=rows, start=start, stop=stop, leaves=src.leaf_names)
    return [flat[name] for name in src.leaf_names]


def _tree(src: Vault, arrays: list[np.ndarray]) -> Any:
    return _structure.build(src.manifest["structure"], arrays)


def _incompatible(a: Vault, b: Vault) -> list[str]:
    why = []
    if a.manifest["structure"] != b.manifest["structure"]:
        why.append("its structure differs from the first vault's")
    else:
        for x, y in zip(a.manifest["leaves"], b.manifest["leaves"], strict=True):
            if x["shape"] != y["shape"] or x["dtype"] != y["dtype"]:
                why.append(
                    f"experience/{x['name']}: expected {x['shape']} {x['dtype']}, "
                    f"got {y['shape']} {y['dtype']}"
                )
    if a.rows != b.rows:
        why.append(f"rows: expected {a.rows}, got {b.rows}")
    if a.episode_leaves != b.episode_leaves:
        why.append(f"episode leaves: expected {a.episode_leaves}, got {b.episode_leaves}")
    return why
