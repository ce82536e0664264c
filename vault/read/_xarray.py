"""A vault's committed data as a lazily loaded, dask-backed ``xarray.Dataset`` (a dataset of
shards: an ``xarray.DataTree`` of them).

One variable per leaf (its path with ``/`` written ``.``: ``obs/rgb`` -> ``obs.rgb``), dims
``row``, ``time`` and the leaf's item axes ``<name>_0``, ``<name>_1``, ... (the names every new
vault's arrays carry: ``vault.storage._arrays.dimension_names``), exactly the snapshot's committed
length along ``time``. Each dask block is a row block of the stored chunks and a whole number of
their time-chunks (about ``BLOCK_BYTES``), whole items, and is read by
``vault.read._read.read_numpy``, so every value passes the vault's own checks
(strict reads: a missing chunk is an error, never fill values; each complete chunk compared
with the checksum recorded for its place; the partly filled last chunk with the commit's edge
record). The episode index, when the vault keeps one, rides along as ``episode_*`` variables
on an ``episode`` dimension (read at once: about 40 bytes per episode).

The dask graph pickles (for process-based or distributed schedulers) as the location's
kvstore spec and the commit id: a worker process reopens the vault pinned to that commit.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from vault._args import bool_arg, kind, once
from vault._errors import VaultArgumentError, VaultDependencyError
from vault.commits._pins import at_pin, commit_id
from vault.commits._snapshot import Snapshot, load_snapshot
from vault.read import _read
from vault.storage._arrays import dimension_names, variable_name

EXTRA = "xarray"
BLOCK_BYTES = 4 << 20  # a dask block: whole stored chunks along time, about this many bytes
EPISODE_DIM = "episode"
EPISODE_FIELDS = {  # variable -> EpisodeTable column
    "episode_row": "row",
    "episode_start": "start",
    "episode_length": "length",
    "episode_return": "returns",
    "episode_truncated": "truncated",
    "episode_start_known": "start_known",
}


def to_xarray(source: Any, *, leaves: Sequence[str] | None = None, episodes: bool = True) -> Any:
    """The committed data of ``source`` as lazily loaded, dask-backed xarray.

    Nothing of the experience is read until a value is computed. ``attrs`` name the
    ``location``, the ``commit_id`` read and the ``committed_length``.

    Args:
        source: a :class:`~vault.Vault` (read at its current commit) or a
            :class:`~vault.Snapshot`; or a :class:`~vault.Dataset` of shards.
        leaves: leaf paths to include (default: every leaf).
        episodes: add the complete episodes of the index (``vault.episodes()``) as variables
            ``episode_row``, ``episode_start``, ``episode_length``, ``episode_return`` (NaN
            without a reward leaf), ``episode_truncated`` and ``episode_start_known`` on
            dimension ``episode`` (a vault without an index adds none).

    Returns:
        For a vault, an ``xarray.Dataset`` with one variable per leaf (its path with ``/``
        written ``.``; ``attrs["leaf"]`` keeps the path), dims ``row``, ``time`` and the
        leaf's item axes ``<name>_0``, ... . For a dataset of shards, an ``xarray.DataTree``
        with one such Dataset per shard at ``shards/<name>`` (shards differ in rows and
        length, so they are not concatenated).

    Raises:
        VaultDependencyError: xarray or dask is missing (``pip install "rlvault[xarray]"``).
        VaultReadError: leaves that the vault does not have.
        VaultArgumentError: a leaf whose variable would have the name of a dimension
            (``row``, ``time``, ``episode`` or another leaf's item axis) or of an episode
            variable: leave it out with ``leaves=`` (or pass ``episodes=False``).

    Examples:
        >>> import numpy as np
        >>> from vault import Vault, to_xarray
        >>> with Vault.create("runs/doc", {"obs": np.zeros(3, np.float32)}, rows=2) as v:
        ...     v.append({"obs": np.ones((2, 5, 3), np.float32)})
        5
        >>> data = to_xarray(Vault.open("runs/doc"))
        >>> dict(data["obs"].sizes), float(data["obs"].sum())
        ({'row': 2, 'time': 5, 'obs_0': 3}, 30.0)
    """
    with_episodes = bool_arg("episodes", episodes)
    leaves = once(leaves)  # read for every shard: an iterator only once
    shards = getattr(source, "snapshots", None)
    if isinstance(shards, list) and hasattr(source, "template"):  # a Dataset of shards
        names = list(source.shards)
        _read.leaves_of(source.template.leaf_names, str(source.location), leaves)
        xr, _ = _require()
        nodes = {
            f"shards/{name}": _dataset(snap, leaves, with_episodes)
            for name, snap in zip(names, shards, strict=True)
        }
        root = xr.Dataset(attrs={"location": str(source.location), "shards": names})
        return xr.DataTree.from_dict({"/": root, **nodes})
    snap = getattr(source, "snapshot", source)
    if not isinstance(snap, Snapshot):
        raise VaultArgumentError(
            f"to_xarray takes an open Vault, Dataset or Snapshot, got {kind(source)}: pass "
            "Vault.open(path)"
        )
    return _dataset(snap, leaves, with_episodes)


def _dataset(snap: Snapshot, leaves: Sequence[str] | None, with_episodes: bool) -> Any:
    """One snapshot as an ``xarray.Dataset`` (see :func:`to_xarray`)."""
    wanted = _read.leaf_selection(snap, leaves)
    xr, da = _require()
    cid = commit_id(snap.commit)
    variables: dict[str, Any] = {}
    for name in wanted:
        source_array = LeafArray(snap, name)
        leaf = snap.manifest.leaf(name)
        per_chunk = leaf.chunk[0] * leaf.chunk[1] * leaf.step_bytes  # whole items
        steps = leaf.chunk[1] * max(1, BLOCK_BYTES // max(1, per_chunk))
        chunks = (leaf.chunk[0], steps, *leaf.shape)
        data = da.from_array(
            source_array,
            chunks=chunks,
            name=f"rlvault-{variable_name(name)}-{_token(snap, cid, name)}",
            lock=False,
            asarray=False,
            fancy=False,
            meta=np.empty((0,) * source_array.ndim, source_array.dtype),
        )
        dims = dimension_names(name, len(leaf.shape))
        variables[variable_name(name)] = (dims, data, {"leaf": name})
    dims_used = {dim for dims, _, _ in variables.values() for dim in dims}
    if with_episodes and snap.manifest.episodes is not None:
        dims_used.add(EPISODE_DIM)
    clash = sorted(set(variables) & dims_used)
    if clash:
        raise VaultArgumentError(
            f"{snap.where}: leaves {[variables[v][2]['leaf'] for v in clash]} have the names "
            f"of dimensions {clash}, which xarray would turn into coordinates: leave them out "
            "with leaves=[...] (and read them with read_numpy)"
        )
    if with_episodes and snap.manifest.episodes is not None:
        taken = sorted(set(variables) & set(EPISODE_FIELDS))
        if taken:
            raise VaultArgumentError(
                f"{snap.where}: leaves {taken} have the names of the episode variables: pass "
                "episodes=False (and read the episode table with vault.episodes())"
            )
        table = _read.episode_table(snap)
        for var, column in EPISODE_FIELDS.items():
            variables[var] = ((EPISODE_DIM,), getattr(table, column))
    attrs = {"location": snap.where, "commit_id": cid, "committed_length": snap.length}
    return xr.Dataset(variables, attrs=attrs)


def _require() -> tuple[Any, Any]:
    """``(xarray, dask.array)``, or :class:`VaultDependencyError` naming the extra."""
    try:
        import dask.array as da
        import xarray as xr
    except ImportError as err:  # not installed, or blocked (None in sys.modules)
        missing = err.name or "xarray or dask"
        raise VaultDependencyError(
            f"to_xarray needs {missing!r}, which is not installed: "
            f'pip install "rlvault[{EXTRA}]" (xarray and dask[array])'
        ) from None
    return xr, da


def _token(snap: Snapshot, cid: str, name: str) -> str:
    """A name for the leaf's dask array: the same commit of the same vault gets the same
    name (its data never changes), any other commit another."""
    import hashlib

    text = json.dumps([snap.location.spec, cid, snap.length, name], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class LeafArray:
    """One leaf of a snapshot as an array (``shape``, ``dtype``, ``__getitem__``) whose reads
    go through :func:`vault.read._read.read_numpy`: what ``dask.array.from_array`` reads from."""

    def __init__(self, snap: Snapshot, name: str) -> None:
        leaf = snap.manifest.leaf(name)
        self.snap, self.name = snap, name
        self.shape = (snap.rows, snap.length, *leaf.shape)
        self.dtype = np.dtype(leaf.dtype)
        self.ndim = len(self.shape)

    def __getitem__(self, key: Any) -> np.ndarray:
        key = key if isinstance(key, tuple) else (key,)
        key = key + (slice(None),) * (self.ndim - len(key))
        rows, time, rest = key[0], key[1], key[2:]
        if _plain(rows) and _plain(time):  # a block: read just its rows and time range
            r0, r1, _ = rows.indices(self.shape[0])
            lo, hi, _ = time.indices(self.shape[1])
            picked = slice(r0, max(r0, r1))
            block = _read.read_numpy(self.snap, picked, lo, max(lo, hi), [self.name])
            return block[self.name][(slice(None), slice(None), *rest)]
        whole = _read.read_numpy(self.snap, None, 0, self.shape[1], [self.name])
        return whole[self.name][key]

    def __reduce__(self) -> tuple[Any, ...]:
        commit = self.snap.commit
        pin: int | str = commit_id(commit) if commit.uid else commit.seq
        return (reopen, (self.snap.location.spec, pin, self.name))

    def __repr__(self) -> str:
        return f"LeafArray({self.snap.where!r}, {self.name!r}, shape={list(self.shape)})"


def _plain(index: Any) -> bool:
    return isinstance(index, slice) and index.step in (None, 1)


_OPENED: dict[tuple[str, str], Snapshot] = {}  # per process, the latest MAX_OPENED
MAX_OPENED = 16
_OPENED_LOCK = threading.Lock()


def reopen(spec: dict[str, Any], pin: int | str, name: str) -> LeafArray:
    """A :class:`LeafArray` unpickled in another process: the vault at ``spec`` pinned to
    commit ``pin`` (opened once per process)."""
    from vault.storage._kinds import parse_location

    key = (json.dumps(spec, sort_keys=True, default=str), str(pin))
    with _OPENED_LOCK:
        snap = _OPENED.get(key)
        if snap is None:
            snap = at_pin(load_snapshot(parse_location(spec), writable=False), pin)
            while len(_OPENED) >= MAX_OPENED:
                _OPENED.pop(next(iter(_OPENED)))
            _OPENED[key] = snap
    return LeafArray(snap, name)
