"""TensorStore plumbing: array specs (codecs, chunks), JSON files, the atomic commit record."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import tensorstore as ts

from vault._errors import VaultCorruptError, VaultNotFoundError
from vault._location import child_spec, display
from vault._schema import FORMAT_VERSION, manifest_problems

MANIFEST_KEY = "zarr.json"  # the root group's metadata; the manifest lives in its attributes
COMMIT_KEY = "commit/zarr.json"  # an empty Zarr group whose attributes hold the record
EXPERIENCE = "experience"
TARGET_CHUNK_BYTES = 2 << 20  # large items (frames): one row x whole frames x N timesteps
SMALL_ITEM_CHUNK_BYTES = 256 << 10  # small items: all rows; small so appends rewrite little
MAX_TIME_CHUNK = 1 << 14

CODECS = {
    "zstd": lambda level: {"name": "zstd", "configuration": {"level": level, "checksum": False}},
    "gzip": lambda level: {"name": "gzip", "configuration": {"level": level}},
    "lz4": lambda level: {
        "name": "blosc",
        "configuration": {"cname": "lz4", "clevel": level, "shuffle": "shuffle", "blocksize": 0},
    },
    "blosc": lambda level: {
        "name": "blosc",
        "configuration": {"cname": "zstd", "clevel": level, "shuffle": "shuffle", "blocksize": 0},
    },
}


def auto_codec(dtype: np.dtype) -> tuple[str, int]:
    """The default compressor for a leaf, chosen from ``tools/bench_vault.py`` measurements.

    One-byte data (frames, flags): zstd level 3 (about 14x on Atari-like frames at 1.7 GB/s
    of raw experience on 2 cores). Wider numbers: blosc (zstd level 1) with byte shuffle, which
    on float32 random walks compressed 1.19x vs zstd-3's 1.08x, wrote 1.6 vs 1.0 GB/s and read
    3.6 vs 1.9 GB/s.
    """
    return ("zstd", 3) if np.dtype(dtype).itemsize == 1 else ("blosc", 1)


def codec_chain(codec: str | None, level: int | None) -> list[dict[str, Any]]:
    """``bytes`` -> optional compressor -> ``crc32c`` (every chunk carries a checksum)."""
    chain: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if codec is not None:
        if codec not in CODECS:
            raise ValueError(f"unknown codec {codec!r}; choose one of {sorted(CODECS)} or None")
        chain.append(CODECS[codec](3 if level is None else level))
    chain.append({"name": "crc32c"})
    return chain


def leaf_step_bytes(leaf: dict[str, Any]) -> int:
    """Bytes of one timestep of one row of a manifest leaf (``{"shape", "dtype", ...}``)."""
    return math.prod(leaf["shape"]) * np.dtype(leaf["dtype"]).itemsize


def choose_chunk(rows: int, item_shape: tuple[int, ...], dtype: np.dtype) -> list[int]:
    """Whole frames x a block of timesteps (a power of two).

    Large items (>= 4 KiB per timestep, e.g. images) get one row per chunk of about
    ``TARGET_CHUNK_BYTES``; small items keep every row in one chunk of about
    ``SMALL_ITEM_CHUNK_BYTES``, so that a small append re-encodes little.
    """
    step_bytes = max(1, math.prod(item_shape) * dtype.itemsize)
    large = step_bytes >= 4096
    chunk_rows = 1 if large else rows
    target = TARGET_CHUNK_BYTES if large else SMALL_ITEM_CHUNK_BYTES
    steps = max(1, target // (chunk_rows * step_bytes))
    steps = min(1 << (steps.bit_length() - 1), MAX_TIME_CHUNK)
    return [chunk_rows, steps, *item_shape]


def array_metadata(
    rows: int, item_shape: tuple[int, ...], dtype: np.dtype, chunk: list[int], codecs: list[Any]
) -> dict[str, Any]:
    return {
        "shape": [rows, 0, *item_shape],
        "data_type": np.dtype(dtype).name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}},
        "codecs": codecs,
        "fill_value": False if np.dtype(dtype) == np.bool_ else 0,
        "dimension_names": ["row", "time", *[f"dim_{i}" for i in range(len(item_shape))]],
    }


def create_array(root: dict[str, Any], name: str, metadata: dict[str, Any], ctx: ts.Context) -> Any:
    spec = {
        "driver": "zarr3",
        "kvstore": child_spec(root, name),
        "metadata": metadata,
        # every chunk is written, even one equal to the fill value (an all-False `done`
        # chunk), so that a chunk file missing inside the committed range means a lost chunk
        "store_data_equal_to_fill_value": True,
    }
    return ts.open(spec, create=True, context=ctx)


def open_array(root: dict[str, Any], name: str, ctx: ts.Context, read_only: bool) -> Any:
    spec: dict[str, Any] = {"driver": "zarr3", "kvstore": child_spec(root, name)}
    if not read_only:
        spec["store_data_equal_to_fill_value"] = True
    return ts.open(spec, context=ctx, read=True, write=not read_only)


def group_json(attributes: dict[str, Any] | None = None) -> bytes:
    doc: dict[str, Any] = {"zarr_format": 3, "node_type": "group"}
    if attributes:
        doc["attributes"] = attributes
    return json.dumps(doc, indent=1, sort_keys=True).encode()


def read_json(kv: Any, key: str, root: dict[str, Any]) -> dict[str, Any] | None:
    value = kv.read(key).result()
    if value.state != "value":
        return None
    try:
        doc = json.loads(bytes(value.value))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise VaultCorruptError(f"{display(root)}/{key} is not valid JSON: {err}") from None
    if not isinstance(doc, dict):
        raise VaultCorruptError(f"{display(root)}/{key}: expected a JSON object")
    return doc


def write_commit(kv: Any, doc: dict[str, Any]) -> None:
    """Replace the commit record atomically (the file kvstore writes a temp file, fsyncs and
    renames; object stores replace an object in one PUT)."""
    kv.write(COMMIT_KEY, group_json({"rlvault_commit": doc})).result()


def read_commit(kv: Any, root: dict[str, Any]) -> dict[str, Any] | None:
    group = read_json(kv, COMMIT_KEY, root)
    if group is None:
        return None
    doc = group.get("attributes", {}).get("rlvault_commit")
    if not isinstance(doc, dict):
        raise VaultCorruptError(f"{display(root)}/{COMMIT_KEY}: no 'rlvault_commit' attributes")
    return doc


def load_manifest(kv: Any, root: dict[str, Any]) -> dict[str, Any]:
    group = read_json(kv, MANIFEST_KEY, root)
    if group is None:
        raise VaultNotFoundError(f"no vault at {display(root)} (no {MANIFEST_KEY})")
    manifest = group.get("attributes", {}).get("rlvault")
    if not isinstance(manifest, dict):
        raise VaultNotFoundError(
            f"{display(root)} is a Zarr node but not an rlvault vault (no 'rlvault' attributes)"
        )
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise VaultCorruptError(
            f"{display(root)}: manifest format_version {version!r} is not supported by this "
            f"rlvault (reads versions <= {FORMAT_VERSION}); upgrade rlvault"
        )
    problems = manifest_problems(manifest)
    if problems:
        raise VaultCorruptError(
            f"{display(root)}: the manifest ({MANIFEST_KEY}) is malformed: "
            + "; ".join(problems)
            + f". Run `vault verify {display(root)}` for a full report; restore the vault "
            "from a copy."
        )
    return manifest
