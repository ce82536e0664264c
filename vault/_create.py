"""Creating a vault: planning its manifest from an example is pure; materialising it is I/O.

:func:`plan_manifest` checks an example (a buffer state, or one timestep with ``rows``) and
the options, and returns the :class:`~vault._format.Manifest`; :func:`materialise` creates
the arrays and groups, then the commit record, then the manifest (last: until it exists there
is no vault at the location).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from vault import _structure
from vault._arrays import array_metadata, auto_codec, choose_chunk, codec_chain, create_array
from vault._episodes import index_metadata
from vault._errors import VaultExistsError, VaultMetadataError, VaultStructureError
from vault._format import (
    BOUNDS,
    COMMIT_KEY,
    EPISODES,
    EXPERIENCE,
    MANIFEST_ATTR,
    MANIFEST_KEY,
    RETURNS,
    ZARR_JSON,
    CommitRecord,
    EpisodeLeaves,
    EpisodeState,
    LeafSpec,
    Manifest,
    OpenEpisodes,
    group_json,
    leaf_key,
)
from vault._location import Location
from vault._plan import BufferView
from vault._snapshot import load_snapshot
from vault._writer import Writer


def plan_manifest(
    structure_or_state: Any,
    *,
    rows: int | None,
    codec: str | None,
    level: int | None,
    chunk: dict[str, Sequence[int]] | None,
    metadata: dict[str, Any] | None,
    episodes: dict[str, str | None],
) -> Manifest:
    """The manifest of a new vault shaped like ``structure_or_state`` (no I/O)."""
    user = check_metadata(metadata)
    if hasattr(structure_or_state, "experience"):
        view = BufferView(structure_or_state)
        example, n_rows, skip = view.experience, view.rows, view.stack + 2
    else:
        if rows is None:
            raise VaultStructureError("give `rows` when creating from a single timestep")
        example, n_rows, skip = structure_or_state, int(rows), 0
    node = _structure.describe(example)
    names = _structure.leaf_names(node)
    values = _structure.leaves(example, node)
    if codec != "auto":
        codec_chain(codec, level)  # validate the name before anything is created
    episode_leaves = _episode_leaves(episodes, names, values, skip)
    unsupported = [
        f"experience/{name}: dtype {np.dtype(value.dtype).name} is not supported (bool, "
        "integer and floating-point leaves are)"
        for name, value in zip(names, values, strict=True)
        if np.dtype(getattr(value, "dtype", np.asarray(value).dtype)).kind not in "biuf"
    ]
    if unsupported:
        raise VaultStructureError("leaves of unsupported dtypes", unsupported)
    chunk = dict(chunk or {})
    unknown = sorted(set(chunk) - set(names))
    if unknown:
        raise VaultStructureError(f"`chunk` names unknown leaves {unknown}; leaves: {names}")
    leaves = []
    for name, value in zip(names, values, strict=True):
        arr = value if hasattr(value, "dtype") else np.asarray(value)
        item_shape = tuple(int(d) for d in arr.shape[skip:])
        dtype = np.dtype(arr.dtype)
        chunk_shape = tuple(chunk.get(name) or choose_chunk(n_rows, item_shape, dtype))
        chosen = auto_codec(dtype) if codec == "auto" else (codec, level)
        codecs = tuple(codec_chain(*chosen))
        leaves.append(LeafSpec(name, item_shape, dtype.name, chunk_shape, codecs))
    return Manifest(
        rows=n_rows,
        structure=node,
        leaves=tuple(leaves),
        created=_dt.datetime.now(_dt.UTC).isoformat(),
        rlvault_version=_version(),
        user_metadata=user,
        episodes=episode_leaves,
    )


def create_vault(location: Location, manifest: Manifest) -> Writer:
    """Create the vault of ``manifest`` at ``location`` and return its writer (holding the
    lock)."""
    if location.read(MANIFEST_KEY) is not None:
        raise VaultExistsError(f"a Zarr node already exists at {location}")
    location.prepare()
    lock = location.writer_lock()
    try:
        location.recover()
        materialise(location, manifest)
        return Writer(load_snapshot(location, writable=True, manifest=manifest), lock)
    except BaseException:
        lock.release()
        raise


def initial_commit(manifest: Manifest) -> CommitRecord:
    """The commit record of an empty vault."""
    episodes = None
    if manifest.episodes is not None:
        episodes = EpisodeState(0, OpenEpisodes.fresh(manifest.rows))
    return CommitRecord(committed_length=0, episodes=episodes)


def materialise(location: Location, manifest: Manifest) -> CommitRecord:
    """Create the vault's arrays and groups, its empty commit record, then its manifest."""
    kv = location.kvstore()
    if location.read(MANIFEST_KEY) is not None:  # created by the lock's previous holder
        raise VaultExistsError(f"a Zarr node already exists at {location}")
    futures = []
    for leaf in manifest.leaves:
        meta = array_metadata(
            manifest.rows, leaf.shape, np.dtype(leaf.dtype), list(leaf.chunk), list(leaf.codecs)
        )
        futures.append(create_array(location, leaf_key(leaf.name), meta))
    if manifest.episodes is not None:
        futures.append(create_array(location, BOUNDS, index_metadata("bounds")))
        futures.append(create_array(location, RETURNS, index_metadata("returns")))
        kv.write(f"{EPISODES}/{ZARR_JSON}", group_json()).result()
    for future in futures:
        future.result()
    for group in group_paths(manifest.leaf_names):
        kv.write(f"{EXPERIENCE}/{group}/{ZARR_JSON}", group_json()).result()
    kv.write(f"{EXPERIENCE}/{ZARR_JSON}", group_json()).result()
    commit = initial_commit(manifest)
    kv.write(COMMIT_KEY, commit.to_bytes()).result()
    kv.write(MANIFEST_KEY, group_json({MANIFEST_ATTR: manifest.to_json()})).result()
    return commit


def group_paths(names: list[str]) -> list[str]:
    """Every group between the ``experience`` group and the leaves."""
    groups: set[str] = set()
    for name in names:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            groups.add("/".join(parts[:i]))
    return sorted(groups)


def check_metadata(metadata: dict[str, Any] | None) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise VaultMetadataError(f"metadata must be a dict, got {type(metadata).__name__}")
    try:
        return json.loads(json.dumps(metadata))
    except (TypeError, ValueError) as err:
        raise VaultMetadataError(f"metadata must be JSON-serialisable: {err}") from None


def _episode_leaves(
    episodes: dict[str, str | None], names: list[str], values: list[Any], skip: int
) -> EpisodeLeaves | None:
    """The episode leaves, or None; every named leaf must be a scalar leaf."""
    done = episodes.get("done")
    if done is None:
        extra = [k for k, v in episodes.items() if v is not None]
        if extra:
            raise VaultStructureError(f"{extra} given without done_leaf: give done_leaf too")
        return None
    problems = []
    for role, name in episodes.items():
        if name is None:
            continue
        if name not in names:
            problems.append(f"{role}_leaf {name!r}: no such leaf; leaves: {names}")
            continue
        shape = tuple(values[names.index(name)].shape[skip:])
        if shape:
            problems.append(f"{role}_leaf {name!r}: expected one value per timestep, got {shape}")
    if problems:
        raise VaultStructureError("bad episode leaves", problems)
    return EpisodeLeaves(done, episodes.get("truncated"), episodes.get("reward"))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rlvault")
    except PackageNotFoundError:
        return "unknown"
