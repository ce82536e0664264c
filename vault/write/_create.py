"""Creating a vault: planning its manifest from an example is pure; materialising it is I/O.

:func:`plan_manifest` checks an example (a buffer state, or one timestep with ``rows``) and
the options, and returns the :class:`~vault.format._records.Manifest`; :func:`materialise` creates
the arrays and groups, then the commit record, then the manifest (last: until it exists there
is no vault at the location).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vault._args import human_bytes, index_arg, int_arg, kind, str_arg
from vault._errors import (
    VaultArgumentError,
    VaultExistsError,
    VaultMetadataError,
    VaultStructureError,
)
from vault.commits._snapshot import load_snapshot
from vault.format import _structure
from vault.format._episodes import index_metadata
from vault.format._limits import MAX_CHUNK_BYTES, MAX_RECORD_BYTES
from vault.format._records import (
    BOUNDS,
    COMMIT_ATTR,
    COMMIT_KEY,
    EPISODES,
    EXPERIENCE,
    HISTORY,
    LOCK_DIR,
    MANIFEST_ATTR,
    MANIFEST_KEY,
    RETURNS,
    TAGS,
    TRASH_DIR,
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
from vault.format._tags import version_for
from vault.storage._arrays import (
    CODECS,
    array_metadata,
    auto_codec,
    choose_chunk,
    codec_chain,
    create_array,
    dimension_names,
)
from vault.storage._location import NO_MANIFEST, Location, vault_kind
from vault.write._faults import run_point
from vault.write._plan import BufferView
from vault.write._writer import Writer

MAX_ROWS = 1 << 24  # rows are parallel environments; the commit record keeps a few per row
MAX_METADATA_DEPTH = 64
MAX_METADATA_BYTES = MAX_RECORD_BYTES // 2  # the manifest holds it: readers refuse larger
LEVELS = {"zstd": (-131072, 22), "gzip": (0, 9), "blosc": (0, 9), "lz4": (0, 9)}


def is_state(value: Any) -> bool:
    """Whether ``value`` is a buffer state: ours or the reference's (a Flashbax state object,
    or the dict orbax restores from a checkpoint of one, as ``Vault.write`` takes it)."""
    if hasattr(value, "experience"):
        return True
    if not isinstance(value, Mapping) or "experience" not in value:
        return False
    from buffers._flashbax_state import reference_kind

    return reference_kind(value) is not None


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
    """The manifest of a new vault shaped like ``structure_or_state`` (no I/O). Every
    argument is checked here, before anything is created."""
    user = check_metadata(metadata)
    level = check_codec(codec, level)
    if is_state(structure_or_state):
        view = BufferView(structure_or_state)
        example, n_rows, skip = view.experience, view.rows, view.stack + 2
        if n_rows < 1:
            raise VaultStructureError(
                f"the buffer state has {n_rows} rows (its leaves' leading axes); a vault holds "
                "at least one"
            )
        if rows is not None and check_rows(rows) != n_rows:
            raise VaultArgumentError(
                f"rows={rows!r}, but the buffer state has {n_rows} rows: with a state the rows "
                "are taken from it; leave rows out (or give one timestep and rows)"
            )
    else:
        if rows is None:
            raise VaultStructureError("give `rows` when creating from a single timestep")
        example, n_rows, skip = structure_or_state, check_rows(rows), 0
    node = _structure.describe(example)
    if node["kind"] == "leaf":
        raise VaultStructureError(
            f"the experience is a bare {type(example).__name__}, not a container of leaves: a "
            "vault stores a dict, tuple, list, NamedTuple or dataclass of arrays; wrap it, "
            "e.g. {'obs': x}"
        )
    names = _structure.leaf_names(node)
    if not names:
        raise VaultStructureError(
            f"the experience has no array leaves (its structure is {_short(node)}): give at "
            "least one array, e.g. {'obs': x}"
        )
    values = _structure.leaves(example, node)
    episode_leaves = _episode_leaves(episodes, names, values, skip)
    unsupported = [
        f"experience/{name}: dtype {np.dtype(value.dtype).name} is not supported (bool, "
        "integer and float16/32/64 leaves are"
        + ("; cast it to float32 to store it)" if np.dtype(value.dtype).kind == "V" else ")")
        for name, value in zip(names, values, strict=True)
        if np.dtype(getattr(value, "dtype", np.asarray(value).dtype)).kind not in "biuf"
    ]
    if unsupported:
        raise VaultStructureError("leaves of unsupported dtypes", unsupported)
    arrays = [value if hasattr(value, "dtype") else np.asarray(value) for value in values]
    shape_problems = _structure.name_problems(names) + _shape_problems(names, arrays, skip)
    if shape_problems:
        raise VaultStructureError("leaves that cannot be stored", shape_problems)
    chunks = _chunks(chunk, names, arrays, n_rows, skip)
    leaves = []
    for name, arr, chunk_shape in zip(names, arrays, chunks, strict=True):
        item_shape = tuple(int(d) for d in arr.shape[skip:])
        dtype = np.dtype(arr.dtype)
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
        format_version=version_for(leaves),
    )


def check_rows(rows: Any) -> int:
    """``rows`` of ``Vault.create``: an int in ``[1, MAX_ROWS]``."""
    count = int_arg("rows", rows, 1)
    if count > MAX_ROWS:
        raise VaultArgumentError(
            f"rows must be at most {MAX_ROWS} (rows are parallel environments, and the commit "
            f"record keeps each one's open episode), got {rows!r}"
        )
    return count


def check_codec(codec: Any, level: Any) -> int | None:
    """``codec`` is ``"auto"``, None or a codec name; ``level`` is None or an int in the
    codec's range (and only with a codec that takes it). Returns the level as a Python int
    (a numpy integer would not go into the JSON metadata)."""
    named = isinstance(codec, str) and (codec == "auto" or codec in CODECS)
    if codec is not None and not named:
        raise VaultArgumentError(
            f"codec must be 'auto', None or one of {sorted(CODECS)}, got {codec!r}"
        )
    if level is None:
        return None
    if codec in ("auto", None):
        raise VaultArgumentError(
            f"level={level!r} needs an explicit codec (with codec={codec!r} "
            + ("the codec and its level are chosen per leaf" if codec else "nothing is compressed")
            + f"): give codec= one of {sorted(CODECS)}, or leave level out"
        )
    low, high = LEVELS[codec]
    value = int_arg("level", level, low)
    if value > high:
        raise VaultArgumentError(
            f"level must be in [{low}, {high}] for codec {codec!r}, got {level!r}"
        )
    return value


def _shape_problems(names: list[str], arrays: list[Any], skip: int) -> list[str]:
    """Leaves without the state's leading ``[rows, time]`` axes, or with an empty axis."""
    out = []
    lead = tuple(arrays[0].shape[:skip])
    for name, arr in zip(names, arrays, strict=True):
        shape = tuple(int(d) for d in arr.shape)
        if skip and (len(shape) < skip or shape[:skip] != lead):
            out.append(
                f"experience/{name}: leading axes {list(shape[:skip])} differ from the first "
                f"leaf's {list(lead)} (every leaf of a state is [rows, time, ...])"
            )
        elif 0 in shape[skip:]:
            out.append(
                f"experience/{name}: shape {list(shape[skip:])} has an empty axis, so a "
                "timestep would hold no value: drop the leaf or give it a non-empty shape"
            )
    return out


def _chunks(
    chunk: Any, names: list[str], arrays: list[Any], rows: int, skip: int
) -> list[tuple[int, ...]]:
    """Each leaf's chunk shape ``[rows, time, *item]``: ``chunk[name]`` when given, else the
    default; every one checked (ints >= 1, the leaf's rank, at most ``MAX_CHUNK_BYTES``)."""
    if chunk is not None and not isinstance(chunk, dict):
        raise VaultArgumentError(
            f"chunk must be a dict {{leaf path: [rows, time, *item shape]}}, got {kind(chunk)}"
        )
    given = dict(chunk or {})
    unknown = sorted(map(str, set(given) - set(names)))
    if unknown:
        raise VaultStructureError(f"`chunk` names unknown leaves {unknown}; leaves: {names}")
    out, problems = [], []
    for name, arr in zip(names, arrays, strict=True):
        item = tuple(int(d) for d in arr.shape[skip:])
        dtype = np.dtype(arr.dtype)
        rank = len(item) + 2
        wanted = given.get(name)
        shape = (
            tuple(choose_chunk(rows, item, dtype)) if wanted is None else _chunk_shape(wanted, rank)
        )
        if shape is None:
            problems.append(
                f"chunk[{name!r}]: expected {rank} ints >= 1 ([rows, time"
                + "".join(f", {d}" for d in item)
                + f"] for experience/{name}), got {wanted!r}"
            )
            continue
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > MAX_CHUNK_BYTES:
            origin = f"chunk[{name!r}]" if name in given else "the default chunk"
            problems.append(
                f"experience/{name}: {origin} {list(shape)} is {human_bytes(nbytes)}, over "
                f"{human_bytes(MAX_CHUNK_BYTES)} (a chunk is encoded and decoded whole): give "
                "chunk={" + f"{name!r}: [...]" + "} with fewer rows, timesteps or item values"
            )
        out.append(shape)
    if problems:
        raise VaultArgumentError(
            "bad chunk shapes; nothing was created" + "".join(f"\n  - {p}" for p in problems)
        )
    return out


def _chunk_shape(wanted: Any, rank: int) -> tuple[int, ...] | None:
    """``wanted`` as a chunk shape of ``rank`` ints >= 1, or None."""
    if isinstance(wanted, (str, bytes)) or not hasattr(wanted, "__len__") or len(wanted) != rank:
        return None
    try:
        shape = tuple(index_arg("chunk", d) for d in wanted)
    except VaultArgumentError:
        return None
    return shape if all(d >= 1 for d in shape) else None


def _short(node: dict[str, Any]) -> str:
    text = json.dumps(node)
    return text if len(text) <= 80 else text[:77] + "..."


def create_vault(location: Location, manifest: Manifest, publish: bool = True) -> Writer:
    """Create the vault of ``manifest`` at ``location`` and return its writer (holding the
    lock). ``publish`` false: the manifest is left out until :func:`publish_manifest` (a
    vault built in staging, which is no vault until then)."""
    if (kind := vault_kind(location.read, True)) == "dataset":
        raise VaultExistsError(
            f"a dataset of shards already exists at {location}: add a shard to it with "
            "Dataset.open(path).shard(name) (or Dataset.create(path, ..., exist_ok=True)); to "
            "start afresh, choose a new path or delete the old one first"
        )
    if kind != NO_MANIFEST:
        raise VaultExistsError(
            f"a Zarr node already exists at {location}: to add to a vault there, open it with "
            "Vault.open(path, mode='a'); to start afresh, choose a new path or delete the old "
            "one first"
        )
    # a creation stopped half-way is taken over, once the writer lock shows its creator gone
    empty = location.is_empty()
    interrupted = not empty and interrupted_create(location)
    if not interrupted and not empty:
        if location.abandoned_build():
            raise VaultExistsError(
                f"{location} holds an unfinished copy (a derive or import that was "
                "interrupted): run it again to replace it, or delete what is there"
            )
        if location.read(MANIFEST_KEY) is not None:  # another process's create finished
            raise VaultExistsError(
                f"a vault was created at {location} meanwhile (by another writer): to add to "
                "it, open it with Vault.open(path, mode='a')"
            )
        raise VaultExistsError(
            f"{location} is not empty and holds no vault ({_contents(location)}): "
            "create the vault in a new or empty directory, or move what is there away"
        )
    location.prepare()
    lock = location.writer_lock()  # a creator still at work holds it: VaultLockedError
    if interrupted and not interrupted_create(location):  # created meanwhile: not ours
        lock.release()
        raise VaultExistsError(f"a Zarr node already exists at {location}: created meanwhile")
    try:
        if interrupted:
            _remove_creation(location)
        location.recover()
        with location.failures("create the vault", "free space there and try again"):
            materialise(location, manifest, publish)
        return Writer(load_snapshot(location, writable=True, manifest=manifest), lock)
    except BaseException:
        # the location was empty: what the failed create made goes (lock files included)
        with contextlib.suppress(Exception):
            location.clear()
        lock.release()
        raise


CREATION_NAMES = frozenset(
    {LOCK_DIR, EXPERIENCE, EPISODES, COMMIT_KEY.partition("/")[0], HISTORY, TAGS, TRASH_DIR}
)
"""The top-level names a ``Vault.create`` makes before its manifest."""


def interrupted_create(location: Location) -> bool:
    """Whether ``location`` holds only what a ``Vault.create`` stopped half-way leaves (its
    process killed before the manifest, written last, was published): no manifest, nothing
    but a vault's own top-level names, and no commit record beyond an empty vault's. Such a
    location holds no data, and a new create may take it over (with the writer lock, so never
    while its creator still runs)."""
    if location.read(MANIFEST_KEY) is not None:
        return False
    try:
        top = location.top_names()  # a folder left empty (a lock's, made first) counts
    except (OSError, ValueError):  # a file where the vault's directory would be
        return False
    if not top or not top <= CREATION_NAMES:
        return False
    raw = location.read(COMMIT_KEY)
    if raw is None:
        return True
    try:
        record = json.loads(raw)["attributes"][COMMIT_ATTR]
    except (ValueError, KeyError, TypeError):
        return False  # not a commit record this writer made: leave it to the user
    return isinstance(record, dict) and record.get("committed_length") == 0


def _remove_creation(location: Location) -> None:
    """Remove what an interrupted create left, but the writer lock (held now)."""
    import tensorstore as ts

    kv = location.kvstore()
    with location.failures("remove an interrupted creation", "free space there and try again"):
        for name in sorted(CREATION_NAMES - {LOCK_DIR}):
            kv.delete_range(ts.KvStore.KeyRange(f"{name}/", f"{name}0")).result()


def initial_commit(manifest: Manifest) -> CommitRecord:
    """The commit record of an empty vault."""
    episodes = None
    if manifest.episodes is not None:
        episodes = EpisodeState(0, OpenEpisodes.fresh(manifest.rows))
    return CommitRecord(committed_length=0, episodes=episodes, uid=uuid.uuid4().hex[:12])


def materialise(location: Location, manifest: Manifest, publish: bool = True) -> CommitRecord:
    """Create the vault's arrays and groups, its empty commit record, then (``publish``) its
    manifest."""
    kv = location.kvstore()
    if location.read(MANIFEST_KEY) is not None:  # created by the lock's previous holder
        raise VaultExistsError(f"a Zarr node already exists at {location}")
    futures = []
    for leaf in manifest.leaves:
        dims = dimension_names(leaf.name, len(leaf.shape))
        meta = array_metadata(
            manifest.rows, leaf.shape, np.dtype(leaf.dtype), list(leaf.chunk), list(leaf.codecs),
            dims,
        )  # fmt: skip
        futures.append(create_array(location, leaf_key(leaf.name), meta))
    if manifest.episodes is not None:
        futures.append(create_array(location, BOUNDS, index_metadata("bounds")))
        futures.append(create_array(location, RETURNS, index_metadata("returns")))
        kv.write(f"{EPISODES}/{ZARR_JSON}", group_json()).result()
    failed = None
    for future in futures:  # every create settles before a failure is raised
        try:
            future.result()
        except Exception as err:
            failed = failed or err
    if failed is not None:
        raise failed
    for group in group_paths(manifest.leaf_names):
        kv.write(f"{EXPERIENCE}/{group}/{ZARR_JSON}", group_json()).result()
    kv.write(f"{EXPERIENCE}/{ZARR_JSON}", group_json()).result()
    kv.write(
        f"{HISTORY}/{ZARR_JSON}", group_json()
    ).result()  # pins' records (vault/commits/_pins.py)
    commit = initial_commit(manifest)
    kv.write(COMMIT_KEY, commit.to_bytes()).result()
    if publish:
        run_point("create", {}, lambda: publish_manifest(location, manifest))
    return commit


def publish_manifest(location: Location, manifest: Manifest) -> None:
    """Write the manifest (the root ``zarr.json``): from then on the location is a vault."""
    with location.failures("create the vault"):
        kv = location.kvstore()
        kv.write(MANIFEST_KEY, group_json({MANIFEST_ATTR: manifest.to_json()})).result()


def group_paths(names: list[str]) -> list[str]:
    """Every group between the ``experience`` group and the leaves."""
    groups: set[str] = set()
    for name in names:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            groups.add("/".join(parts[:i]))
    return sorted(groups)


def check_metadata(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """A JSON copy of the user metadata. Everything that JSON would change or refuse is
    refused, each naming its key path: a non-string key (``{1: 'one'}`` would come back as
    ``{'1': 'one'}``), a tuple (a list), NaN or an infinity (not JSON), numpy scalars and
    other objects."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise VaultMetadataError(f"metadata must be a dict, got {type(metadata).__name__}")
    problems: list[str] = []
    _metadata_problems(metadata, "metadata", 0, problems)
    if not problems:
        size = len(json.dumps(metadata, allow_nan=False))
        if size > MAX_METADATA_BYTES:
            problems.append(
                f"metadata: {size} bytes of JSON; at most {MAX_METADATA_BYTES} are kept in the "
                "manifest (store larger things as files beside the vault)"
            )
    if problems:
        raise VaultMetadataError(
            "metadata must be JSON that comes back as given (dicts with string keys, lists, "
            f"strings, finite numbers, booleans, None), at most {MAX_METADATA_DEPTH} levels "
            f"deep and {MAX_METADATA_BYTES} bytes" + "".join(f"\n  - {p}" for p in problems[:20])
        )
    return json.loads(json.dumps(metadata, allow_nan=False))


def _metadata_problems(value: Any, path: str, depth: int, out: list[str]) -> None:
    if len(out) >= 20:
        return
    if depth > MAX_METADATA_DEPTH:
        out.append(
            f"{path}: nested more than {MAX_METADATA_DEPTH} levels deep (or it contains itself)"
        )
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                _metadata_problems(item, f"{path}[{key!r}]", depth + 1, out)
            else:
                out.append(
                    f"{path}: key {kind(key)} is not a string (JSON would turn it into "
                    f"{str(key)!r}): use a string key"
                )
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _metadata_problems(item, f"{path}[{i}]", depth + 1, out)
    elif isinstance(value, tuple):
        out.append(f"{path}: a tuple would come back as a list: give a list")
    elif value is None or isinstance(value, (bool, str, int)):
        return
    elif isinstance(value, float):
        if not math.isfinite(value):
            out.append(f"{path}: {value!r} is not a JSON number: use None or a string")
    else:
        out.append(
            f"{path}: {kind(value)} is not JSON"
            + (": convert it with .item() or .tolist()" if isinstance(value, np.generic) else "")
        )


def _episode_leaves(
    episodes: dict[str, str | None], names: list[str], values: list[Any], skip: int
) -> EpisodeLeaves | None:
    """The episode leaves, or None; every named leaf must be a scalar leaf."""
    for role, name in episodes.items():
        str_arg(f"{role}_leaf", name, optional=True)
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


def _contents(location: Location, count: int = 5) -> str:
    """What is at ``location`` (its first top-level names), for a message."""
    try:
        top = sorted(location.top_names())
    except (OSError, ValueError):  # a file where the vault's directory would be
        return "it is a file, not a directory"
    shown = ", ".join(top[:count])
    return "it has " + shown + (f" and {len(top) - count} more" if len(top) > count else "")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rlvault")
    except PackageNotFoundError:
        return "unknown"
