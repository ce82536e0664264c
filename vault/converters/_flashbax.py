"""Flashbax (and og-marl) vaults -> vault, read straight from their files (no flashbax import).

A Flashbax vault (``flashbax.vault.Vault``, format 1.x) is a directory ``<rel_dir>/<name>/<uid>``
holding ``metadata.json`` and one OCDBT key-value store (``manifest.ocdbt``, ``d/...``). The
metadata file records the structure of the buffer's experience at creation, twice, as nested
JSON objects whose leaves are the shape (a string such as ``"(16, 1000, 84, 84, 3)"``, the
buffer's ``[rows, time, ...]``) and the dtype name of each leaf; named tuples were stored as
objects of their fields, tuples as lists. Every other key of the file is user metadata. Inside
the OCDBT store each leaf is a Zarr v2 array named by its key path with a dot after every key
(``agent_0.obs.``; a list element adds only the dot) of shape ``[rows, 10**13, ...]`` (a
fake-infinite time axis), and ``vault_index`` (int32 ``[1]``) says how many timesteps are
written. Chunks are Zarr v2 compressors (gzip 5 by default, or whatever the writer chose),
which TensorStore decodes.

The imported vault has the same rows and nested-dict structure (named tuples come back as
dicts of their fields, as Flashbax itself reads them without a structure), every leaf's first
``vault_index`` timesteps, and the Flashbax user metadata (NaN and infinities as strings);
``imported_from`` records the source and its format version (a user metadata key of that
name, say from an earlier conversion, is kept inside it as ``earlier``). Name the episode leaves
(``done``, ``truncated``, ``reward``, as vault leaf paths such as ``terminals/agent_0``) to get
an episode index.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from vault._args import path_arg
from vault._errors import (
    VaultCorruptError,
    VaultNotFoundError,
    VaultVersionError,
)
from vault.converters._sink import (
    BLOCK_BYTES,
    Progress,
    check_common,
    listing,
    new_vault,
    plain_json,
    pump,
    time_blocks,
)
from vault.facade._vault import Vault
from vault.storage._kinds import LocationLike

METADATA_FILE = "metadata.json"
OCDBT_MANIFEST = "manifest.ocdbt"
INDEX_ARRAY = "vault_index"
MAJOR_VERSION = 1
RESERVED = ("version", "structure_shape", "structure_dtype")
_SHAPE = re.compile(r"\(\s*(\d+\s*(,\s*\d+\s*)*,?)?\s*\)")


@dataclasses.dataclass(frozen=True)
class FlashbaxLeaf:
    """One leaf of a Flashbax vault: its vault leaf path, the name of its array in the OCDBT
    store, its keys, and its shape (the buffer's ``[rows, time, ...]``) and dtype."""

    path: str
    store_name: str
    keys: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: str


@dataclasses.dataclass(frozen=True)
class FlashbaxMetadata:
    """``metadata.json`` of a Flashbax vault, validated."""

    version: float
    leaves: tuple[FlashbaxLeaf, ...]
    rows: int
    user: dict[str, Any]

    @classmethod
    def from_json(cls, doc: Any, where: str) -> FlashbaxMetadata:
        if not isinstance(doc, dict):
            raise VaultCorruptError(
                f"{where}: expected a JSON object, got {type(doc).__name__}; is this a Flashbax "
                "vault's metadata.json?"
            )
        missing = [k for k in RESERVED if k not in doc]
        if missing:
            raise VaultCorruptError(
                f"{where}: expected the keys {list(RESERVED)}, got {sorted(doc)} (missing "
                f"{missing}); is this a Flashbax vault?"
            )
        version = doc["version"]
        if isinstance(version, bool) or not isinstance(version, (int, float)):
            raise VaultCorruptError(f"{where}: version: expected a number, got {version!r}")
        if int(version // 1) != MAJOR_VERSION:
            raise VaultVersionError(
                f"{where}: Flashbax vault format {version}; this importer reads format "
                f"{MAJOR_VERSION}.x (Flashbax 0.1.x)"
            )
        problems: list[str] = []
        leaves = list(_leaves(doc["structure_shape"], doc["structure_dtype"], (), problems))
        if not leaves and not problems:
            problems.append("structure_shape: no leaves")
        for leaf in leaves:
            if len(leaf.shape) < 2:
                problems.append(
                    f"{leaf.path}: expected a shape [rows, time, ...], got {list(leaf.shape)}"
                )
        rows = {leaf.shape[0] for leaf in leaves if len(leaf.shape) >= 2}
        if len(rows) > 1:
            problems.append(
                "rows: expected every leaf to have the same first dimension, got "
                + ", ".join(f"{leaf.path}: {leaf.shape[0]}" for leaf in leaves)
            )
        names: dict[str, str] = {}
        for leaf in leaves:
            if leaf.store_name in names:
                problems.append(
                    f"{leaf.path} and {names[leaf.store_name]}: Flashbax stored both in the one "
                    f"array {leaf.store_name!r} (it names list elements by a dot only), so "
                    "their data cannot be told apart"
                )
            names[leaf.store_name] = leaf.path
        if problems:
            raise VaultCorruptError(
                listing(f"{where}: a structure that cannot be imported", problems)
            )
        user = {k: v for k, v in doc.items() if k not in RESERVED}
        return cls(float(version), tuple(leaves), rows.pop(), user)


def _leaves(
    shapes: Any, dtypes: Any, keys: tuple[str, ...], problems: list[str]
) -> Iterator[FlashbaxLeaf]:
    """The leaves of the two structure trees, in key order (JAX's order for dicts)."""
    path = "/".join(keys) or "<root>"
    if isinstance(shapes, dict):
        if not isinstance(dtypes, dict) or sorted(dtypes) != sorted(shapes):
            problems.append(
                f"structure_dtype/{path}: expected the keys {sorted(shapes)}, got "
                f"{sorted(dtypes) if isinstance(dtypes, dict) else type(dtypes).__name__}"
            )
            return
        for key in sorted(shapes):
            yield from _leaves(shapes[key], dtypes[key], (*keys, str(key)), problems)
        return
    if isinstance(shapes, list):
        if not isinstance(dtypes, list) or len(dtypes) != len(shapes):
            problems.append(f"structure_dtype/{path}: expected a list of {len(shapes)}")
            return
        for i, (s, d) in enumerate(zip(shapes, dtypes, strict=True)):
            yield from _leaves(s, d, (*keys, f"\x00{i}"), problems)
        return
    shown = path.replace("\x00", "")
    if not isinstance(shapes, str) or not _SHAPE.fullmatch(shapes):
        problems.append(
            f"structure_shape/{shown}: expected a shape like '(16, 1000, 3)', got {shapes!r}"
        )
        return
    try:
        dtype = np.dtype(str(dtypes)).name
    except TypeError:
        problems.append(f"structure_dtype/{shown}: expected a dtype name, got {dtypes!r}")
        return
    shape = tuple(int(x) for x in shapes.strip("() ").split(",") if x.strip())
    store = "".join("." if k.startswith("\x00") else f"{k}." for k in keys)
    clean = tuple(k.lstrip("\x00") for k in keys)
    yield FlashbaxLeaf("/".join(clean), store, clean, shape, dtype)


def read_metadata(source: str | os.PathLike[str]) -> FlashbaxMetadata:
    """The validated ``metadata.json`` of the Flashbax vault at ``source``."""
    root = _root(source)
    where = str(root / METADATA_FILE)
    try:
        doc = json.loads((root / METADATA_FILE).read_text())
    except ValueError as err:
        raise VaultCorruptError(f"{where}: not JSON ({err})") from None
    return FlashbaxMetadata.from_json(doc, where)


def import_flashbax(
    source: str | os.PathLike[str],
    dest: LocationLike,
    *,
    done: str | None = None,
    truncated: str | None = None,
    reward: str | None = None,
    codec: str | None = "auto",
    block_bytes: int = BLOCK_BYTES,
    progress: Progress | None = None,
) -> Vault:
    """Import a Flashbax (or og-marl) vault as a new vault.

    Nothing is left at ``dest`` if the import fails or is interrupted.

    Args:
        source: the Flashbax vault's directory, the one with ``metadata.json``
            (``<rel_dir>/<vault_name>/<vault_uid>``).
        dest: the new vault's location; it must not exist.
        done: the leaf path of episode-end flags (``"done"``, ``"terminals/agent_0"``);
            turns on the episode index.
        truncated: the leaf path of truncation flags (with ``done``).
        reward: the leaf path of rewards (with ``done``).
        codec: the new vault's codec, as in :meth:`vault.Vault.create`.
        block_bytes: the raw bytes read at a time (memory stays about two blocks).
        progress: called as ``progress(bytes imported, total bytes)`` after every block.

    Returns:
        The new vault, opened read-only.

    Raises:
        VaultNotFoundError: no Flashbax vault at ``source``.
        VaultCorruptError: its metadata or arrays cannot be read.
        VaultExistsError: something is at ``dest`` already.
        VaultDependencyError: a missing optional dependency.
    """
    block_bytes = check_common(block_bytes, progress)
    root = _root(source)
    meta = read_metadata(root)
    store = _Store(root, meta)
    length = store.length()
    example = _example(meta)
    metadata = plain_json(dict(meta.user))  # Flashbax writes NaN and infinities too
    origin = {
        "format": "flashbax",
        "source": str(root),
        "version": meta.version,
        "vault_index": length,
    }
    if "imported_from" in metadata:  # the user's record of an earlier conversion: kept in ours
        origin["earlier"] = metadata["imported_from"]
    metadata["imported_from"] = origin
    roles = {"done": done, "truncated": truncated, "reward": reward}
    step = sum(meta.rows * _item_bytes(leaf) for leaf in meta.leaves)
    with new_vault(
        dest, example, rows=meta.rows, codec=codec, metadata=metadata, episodes=roles
    ) as out:
        pump(out, *time_blocks(store.read, length, step, block_bytes), progress)
    return Vault.open(dest)


# ---------------------------------------------------------------------------------- helpers
def _root(source: str | os.PathLike[str]) -> Path:
    root = Path(path_arg("source", source, "a Flashbax vault folder")).expanduser().absolute()
    if not (root / METADATA_FILE).is_file() or not (root / OCDBT_MANIFEST).is_file():
        inside = (
            sorted(
                p.parent.name
                for p in root.glob(f"*/{METADATA_FILE}")
                if (p.parent / OCDBT_MANIFEST).is_file()
            )
            if root.is_dir()
            else []
        )
        hint = (
            f"; it holds the Flashbax vaults {inside}: give one of them ({root}/{inside[0]})"
            if inside
            else "; give the directory <rel_dir>/<vault_name>/<vault_uid>"
        )
        raise VaultNotFoundError(
            f"{root}: expected a Flashbax vault ({METADATA_FILE} and {OCDBT_MANIFEST}), got "
            f"{'a directory without them' if root.is_dir() else 'no such directory'}{hint}"
        )
    return root


def _item_bytes(leaf: FlashbaxLeaf) -> int:
    return math.prod(leaf.shape[2:]) * np.dtype(leaf.dtype).itemsize


def _example(meta: FlashbaxMetadata) -> dict[str, Any]:
    """One timestep of the structure (nested dicts; list elements keyed by their index)."""
    tree: dict[str, Any] = {}
    for leaf in meta.leaves:
        node = tree
        for key in leaf.keys[:-1]:
            node = node.setdefault(key, {})
        node[leaf.keys[-1]] = np.zeros(leaf.shape[2:], np.dtype(leaf.dtype))
    return tree


class _Store:
    """The OCDBT store of a Flashbax vault, opened read-only through TensorStore."""

    def __init__(self, root: Path, meta: FlashbaxMetadata) -> None:
        import tensorstore as ts

        self.root, self.meta = root, meta
        # opened (and checked) once to learn the chunk sizes, then again sharing a cache of
        # about one chunk per leaf: a partial read of a chunk decodes it whole, so a chunk
        # that a block boundary cuts is then decoded once, not once per block
        self.context = ts.Context()
        chunk_bytes = sum(
            math.prod(a.chunk_layout.read_chunk.shape) * a.dtype.numpy_dtype.itemsize
            for a in [self._open(leaf) for leaf in meta.leaves]
        )
        self.context = ts.Context({"cache_pool": {"total_bytes_limit": int(chunk_bytes * 1.25)}})
        self.arrays = [self._open(leaf) for leaf in meta.leaves]

    def _spec(self, name: str) -> dict[str, Any]:
        return {
            "driver": "zarr",
            # a kvstore spec, not a file:// URL: a URL would read '#', '?' and '%XX' in the
            # folder's name as URL syntax (a '%41' folder opened as 'A')
            "kvstore": {
                "driver": "ocdbt",
                "base": {"driver": "file", "path": f"{self.root}/"},
                "path": name,
            },
            "recheck_cached_data": False,
        }

    def _open(self, leaf: FlashbaxLeaf) -> Any:
        import tensorstore as ts

        where = f"{self.root}: leaf {leaf.path} (array {leaf.store_name!r})"
        try:
            array = ts.open(
                self._spec(leaf.store_name), open=True, read=True, context=self.context
            ).result()
        except ValueError as err:
            raise VaultCorruptError(
                f"{where}: expected a Zarr array, got none ({_first_line(err)})"
            ) from None
        want = (leaf.shape[0], *leaf.shape[2:])
        got = (array.shape[0], *array.shape[2:]) if array.ndim >= 2 else tuple(array.shape)
        dtype = array.dtype.numpy_dtype.name
        if array.ndim != len(leaf.shape) or got != want or dtype != leaf.dtype:
            raise VaultCorruptError(
                f"{where}: expected [{want[0]}, T, {', '.join(map(str, want[1:]))}] "
                f"{leaf.dtype} as metadata.json says, got {list(array.shape)} {dtype}"
            )
        return array

    def length(self) -> int:
        """The vault index (timesteps written), checked against every leaf's time axis."""
        import tensorstore as ts

        try:
            index = ts.open(
                self._spec(INDEX_ARRAY), open=True, read=True, context=self.context
            ).result()
            value = int(np.asarray(index.read().result()).reshape(-1)[0])
        except (ValueError, IndexError) as err:
            raise VaultCorruptError(
                f"{self.root}: {INDEX_ARRAY}: expected an int32 [1] array, got none or an "
                f"unreadable one ({_first_line(err)})"
            ) from None
        short = [
            f"{leaf.path}: expected a time axis of at least {value}, got {a.shape[1]}"
            for leaf, a in zip(self.meta.leaves, self.arrays, strict=True)
            if a.shape[1] < value
        ]
        if value < 0 or short:
            raise VaultCorruptError(
                listing(f"{self.root}: {INDEX_ARRAY} = {value} does not fit the arrays", short)
            )
        return value

    def read(self, t0: int, t1: int) -> dict[str, Any]:
        futures = [a[:, t0:t1].read() for a in self.arrays]
        tree: dict[str, Any] = {}
        for leaf, future in zip(self.meta.leaves, futures, strict=True):
            try:
                data = future.result()
            except ValueError as err:
                raise VaultCorruptError(
                    f"{self.root}: leaf {leaf.path}: cannot read timesteps [{t0}, {t1}) "
                    f"({_first_line(err)})"
                ) from None
            node = tree
            for key in leaf.keys[:-1]:
                node = node.setdefault(key, {})
            node[leaf.keys[-1]] = data
        return tree


def _first_line(err: BaseException) -> str:
    return str(err).split(" [")[0].splitlines()[0] if str(err) else type(err).__name__
