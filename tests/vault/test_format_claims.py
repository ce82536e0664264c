"""docs/format.md, claim by claim, against the bytes rlvault leaves on disk.

Every vault here is made with the public API (``vault``) in ``tmp_path``; everything it wrote is
then read back WITHOUT rlvault: ``json``, ``os``, ``hashlib``, ``zlib``, ``google_crc32c``,
``numcodecs`` (to undo a chunk's compressor by hand) and zarr-python. What
``tests/vault/test_format_spec.py`` already covers (every object against its JSON Schema, every
schema strict, ``tools/spec_reader.py`` against rlvault's own reads) is not repeated; this file
checks the concrete values the specification states (names, keys, versions, chunk shapes,
codecs, fill values, dimension names, checksums and how they are computed, the order of an
append's writes, tags, locks, trash, datasets and their catalog), that nothing on disk is left
undocumented, and that a reader written here from the specification alone reads back exactly
the data that was written (at every commit, by number and by tag).

Every test asserts what the specification states now: where the code and the specification
disagreed (or the disk held something the specification did not say), one of them was
corrected, and the test asserts the corrected claim.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fcntl
import hashlib
import importlib.metadata
import json
import math
import os
import re
import socket
import threading
import warnings
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

import vault
from vault import Dataset, Vault

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "docs" / "schemas"
ROWS = 3


# ================================================================ reading without rlvault
def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_bytes())


def files_under(root: Path) -> dict[str, Path]:
    """Every file under ``root``, by its key (path relative to ``root``, with ``/``)."""
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            out[path.relative_to(root).as_posix()] = path
    return out


def crc32c(data: bytes) -> int:
    import google_crc32c

    return google_crc32c.value(data)


def stored_crc32c(path: Path) -> int:
    """A chunk's stored crc32c: its last four bytes, little endian (section 4.2)."""
    return int.from_bytes(Path(path).read_bytes()[-4:], "little")


# ---------------------------------------------------------------- section 6.2: digests
_SHORT = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _string(text: str) -> str:
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in _SHORT:
            out.append(_SHORT[ch])
        elif code < 0x20 or 0x7F <= code <= 0xFFFF:  # outside U+0020 to U+007E: DEL too
            out.append(f"\\u{code:04x}")
        elif code > 0xFFFF:
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            out.append(ch)
    return "".join(out) + '"'


def canonical(value: Any) -> str:
    """The canonical JSON of section 6.2, written from its bullet list (not json.dumps)."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    assert isinstance(value, dict)
    keys = sorted(value)  # by Unicode code point
    return "{" + ",".join(f"{_string(k)}:{canonical(value[k])}" for k in keys) + "}"


def spec_digest(doc: dict[str, Any]) -> str:
    body = {k: v for k, v in doc.items() if k != "digest"}
    return hashlib.sha256(canonical(body).encode()).hexdigest()[:32]


# ------------------------------------------------------- section 4.1.2: structure and names
def spec_escape(key: str) -> str:
    """A dict key's node name, by the five rules of section 4.1.2 read literally."""
    if key == "":
        return "%-"
    out = "".join(
        ch
        if (ch.isascii() and ch.isalnum()) or ch in "_.-~"
        else "".join(f"%{b:02X}" for b in ch.encode())
        for ch in key
    )
    if out.startswith("."):
        out = "%2E" + out[1:]
    elif out.startswith("__"):
        out = "%5F" + out[1:]
    if out.lower() == "zarr.json":
        out = f"%{ord(out[0]):02X}" + out[1:]
    if out.lower().endswith(".__lock"):  # in any case; the ending written in lower case
        out = out[: -len(".__lock")] + "%2E__lock"
    return out


def _is_namedtuple(tree: Any) -> bool:
    return isinstance(tree, tuple) and hasattr(type(tree), "_fields")


def _children(tree: Any) -> list[tuple[str, Any]]:
    if isinstance(tree, dict):
        return [(spec_escape(k), tree[k]) for k in sorted(tree)]
    if _is_namedtuple(tree):
        return [(f, getattr(tree, f)) for f in type(tree)._fields]
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return [(f.name, getattr(tree, f.name)) for f in dataclasses.fields(tree)]
    return [(str(i), c) for i, c in enumerate(tree)]


def spec_leaves(tree: Any, prefix: str = "") -> list[tuple[str, np.ndarray]]:
    """(path, leaf) in leaf order: depth first, left to right (section 4.1.2)."""
    if tree is None:
        return []
    if not isinstance(tree, (dict, tuple, list)) and not dataclasses.is_dataclass(tree):
        return [(prefix, np.asarray(tree))]
    out = []
    for name, child in _children(tree):
        out += spec_leaves(child, f"{prefix}/{name}" if prefix else name)
    return out


def spec_node(tree: Any) -> dict[str, Any]:
    """The ``structure`` node of section 4.1.2's table for ``tree``."""
    if tree is None:
        return {"kind": "none"}
    if isinstance(tree, dict):
        keys = sorted(tree)
        return {"kind": "dict", "keys": keys, "children": [spec_node(tree[k]) for k in keys]}
    if _is_namedtuple(tree) or (dataclasses.is_dataclass(tree) and not isinstance(tree, type)):
        names = [name for name, _ in _children(tree)]
        return {
            "kind": "namedtuple" if _is_namedtuple(tree) else "dataclass",
            "class": f"{type(tree).__module__}:{type(tree).__qualname__}",
            "fields": names,
            "children": [spec_node(c) for _, c in _children(tree)],
        }
    if isinstance(tree, (tuple, list)):
        kind = "tuple" if isinstance(tree, tuple) else "list"
        return {"kind": kind, "children": [spec_node(c) for c in tree]}
    return {"kind": "leaf"}


def dimension_names(path: str, rank: int) -> list[str]:
    """Section 4.2: ``row``, ``time``, then ``<v>_<i>``."""
    v = ".".join(part.replace(".", "%2E") for part in path.split("/"))
    return ["row", "time", *[f"{v}_{i}" for i in range(rank)]]


def array_chain(manifest_chain: list[dict[str, Any]], dtype: str) -> list[dict[str, Any]]:
    """The codec chain an array's zarr.json states: the manifest's, with exactly the two
    differences of section 4.1.3."""
    itemsize = np.dtype(dtype).itemsize
    out = []
    for codec in manifest_chain:
        codec = json.loads(json.dumps(codec))
        if codec["name"] == "bytes" and itemsize == 1:
            codec.pop("configuration", None)
        if codec["name"] == "blosc":
            codec["configuration"]["typesize"] = itemsize
        out.append(codec)
    return out


# ------------------------------------------------------------ sections 4.2 and 4.5: chunks
def item_counts(leaf: dict[str, Any]) -> list[int]:
    return [-(-n // c) for n, c in zip(leaf["shape"], leaf["chunk"][2:], strict=True)]


def chunk_key(key: str, b: int | None, k: int, item: int, counts: list[int]) -> str:
    """Item chunk ``item`` (flat, C order) of place ``(b, k)`` of array ``key``."""
    at = list(np.unravel_index(item, counts)) if counts else []
    parts = ([] if b is None else [b]) + [k] + [int(i) for i in at]
    return f"{key}/c/" + "/".join(map(str, parts))


class Grid(NamedTuple):
    key: str
    rows: int  # rows of data (1 for the index)
    row_block: int | None  # None: the index (no row axis)
    step: int
    counts: list[int]  # item chunks along each item axis ([] for a scalar; [1] for bounds)
    bound: int  # chunks bound to each place (format 4 and later: all of them)

    @property
    def row_blocks(self) -> int:
        return 1 if self.row_block is None else -(-self.rows // self.row_block)

    def chunk(self, b: int, k: int, i: int) -> str:
        return chunk_key(self.key, None if self.row_block is None else b, k, i, self.counts)


def grids(manifest: dict[str, Any]) -> list[Grid]:
    """Every array of the vault, leaves then the index (the fingerprint's order, 6.4)."""
    out = []
    for leaf in manifest["leaves"]:
        counts = item_counts(leaf)
        bound = math.prod(counts) if manifest["format_version"] >= 4 else 1
        key = f"experience/{leaf['name']}"
        out.append(Grid(key, manifest["rows"], leaf["chunk"][0], leaf["chunk"][1], counts, bound))
    if manifest.get("episodes") is not None:
        out.append(Grid("episodes/bounds", 1, None, 8192, [1], 1))
        out.append(Grid("episodes/returns", 1, None, 8192, [], 1))
    return out


def decode_chunk(raw: bytes, codecs: list[dict[str, Any]], dtype: str, shape: list[int]) -> Any:
    """A chunk's bytes undone by hand (section 4.2): its crc32c checked, its compressor
    undone, its values in C order, little endian."""
    body, trailer = raw[:-4], raw[-4:]
    assert crc32c(body) == int.from_bytes(trailer, "little")
    names = [c["name"] for c in codecs]
    assert names[0] == "bytes"
    assert names[-1] == "crc32c"
    for codec in names[1:-1]:
        import numcodecs

        undo = {"zstd": numcodecs.Zstd, "gzip": numcodecs.GZip, "blosc": numcodecs.Blosc}[codec]
        body = bytes(undo().decode(body))
    return np.frombuffer(body, np.dtype(dtype).newbyteorder("<")).reshape(shape)


def le_bytes(values: np.ndarray) -> bytes:
    """Values in C order, little endian, bool as one byte 0 or 1 (section 4.3)."""
    values = np.ascontiguousarray(values)
    return values.astype(values.dtype.newbyteorder("<")).tobytes()


# ----------------------------------------------------------------- section 12: the reader
class SpecRead(NamedTuple):
    manifest: dict[str, Any]
    record: dict[str, Any]
    data: dict[str, np.ndarray]  # leaf path -> [rows, L, *shape]
    episodes: dict[str, np.ndarray] | None  # the episode table with the open episodes


def spec_read(root: Path, at: int | str | None = None) -> SpecRead:
    """A reader written from docs/format.md alone (sections 4, 6, 7): zarr-python, numpy and
    json. It refuses (AssertionError) what a reader must refuse."""
    import zarr

    root = Path(root)
    store = zarr.storage.LocalStore(root, read_only=True)
    # step 1: the manifest
    manifest = read_json(root / "zarr.json")["attributes"]["rlvault"]
    version = manifest["format_version"]
    assert type(version) is int
    assert 1 <= version <= 5
    if version >= 3:
        assert manifest["digest"] == spec_digest(manifest), "the manifest's digest"
    names = [name for name, _ in _walk_structure(manifest["structure"])]
    assert names == [leaf["name"] for leaf in manifest["leaves"]], "leaves != structure"
    # step 2: the record (a pin: section 4.7)
    latest = read_json(root / "commit" / "zarr.json")["attributes"]["rlvault_commit"]
    record = latest
    if at is not None:
        pin = str(at)
        if not re.fullmatch(r"\d+(-[0-9a-f]+)?", pin):
            pin = read_json(root / "refs" / pin)["commit"]
        seq_text, _, uid = pin.partition("-")
        seq = int(seq_text)
        assert seq <= latest.get("seq", 0), "no such commit"
        if seq != latest.get("seq", 0):
            doc = read_json(root / "history" / str(seq))
            record = doc["attributes"]["rlvault_commit"]
            assert record["seq"] == seq, "history holds another commit"
        if uid:
            assert record["uid"] == uid, "another vault's commit"
        assert record["committed_length"] <= latest["committed_length"]
    if version >= 3:
        assert record["digest"] == spec_digest(record), "the record's digest"
    length = record["committed_length"]
    count = record["episodes"]["count"] if manifest.get("episodes") else 0
    # steps 3 and 4: every leaf up to L, its metadata, place tags and edges checked
    places = {g.key: g for g in grids(manifest)}
    data = {}
    for leaf in manifest["leaves"]:
        key = f"experience/{leaf['name']}"
        meta = read_json(root / key / "zarr.json")
        check_leaf_metadata(meta, leaf, manifest, length)
        values = np.asarray(zarr.open_array(store=store, path=key, mode="r")[:, :length])
        if version >= 3:
            check_places(root, places[key], record, length, values, version)
        data[leaf["name"]] = values
    episodes = None
    if manifest.get("episodes"):
        bounds = np.asarray(zarr.open_array(store=store, path="episodes/bounds", mode="r")[:count])
        returns = np.asarray(
            zarr.open_array(store=store, path="episodes/returns", mode="r")[:count]
        )
        if version >= 3:
            check_places(root, places["episodes/bounds"], record, count, bounds[None], version)
            check_places(root, places["episodes/returns"], record, count, returns[None], version)
        episodes = episode_table(bounds.reshape(-1, 4), returns, record, length)
    return SpecRead(manifest, record, data, episodes)


def _walk_structure(node: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    kind = node["kind"]
    if kind == "leaf":
        yield prefix, node
        return
    if kind == "none":
        return
    if kind == "dict":
        labels = [spec_escape(k) for k in node["keys"]]
    elif kind in ("namedtuple", "dataclass"):
        labels = list(node["fields"])
    else:
        labels = [str(i) for i in range(len(node["children"]))]
    for label, child in zip(labels, node["children"], strict=True):
        yield from _walk_structure(child, f"{prefix}/{label}" if prefix else label)


def check_leaf_metadata(
    meta: dict[str, Any], leaf: dict[str, Any], manifest: dict[str, Any], length: int
) -> None:
    """Section 4.2: what a reader MUST check before it reads the array."""
    assert meta["zarr_format"] == 3
    assert meta["node_type"] == "array"
    assert meta["data_type"] == leaf["dtype"]
    grid = {"name": "regular", "configuration": {"chunk_shape": leaf["chunk"]}}
    assert meta["chunk_grid"] == grid
    assert meta["codecs"] == array_chain(leaf["codecs"], leaf["dtype"])
    encoding = meta["chunk_key_encoding"]
    assert encoding["name"] == "default"
    assert encoding.get("configuration", {"separator": "/"}) == {"separator": "/"}
    fill = meta["fill_value"]
    assert fill is False if leaf["dtype"] == "bool" else (fill == 0 and fill is not False)
    if manifest.get("dimension_names"):
        assert meta["dimension_names"] == dimension_names(leaf["name"], len(leaf["shape"]))
    shape = meta["shape"]
    assert shape[0] == manifest["rows"]
    assert shape[2:] == leaf["shape"]
    assert shape[1] >= length


def tags_of(root: Path, grid: Grid, record: dict[str, Any], complete: int) -> np.ndarray:
    """The place tags of time chunks ``[0, complete)``, ``[row blocks, complete * bound]``:
    before ``p`` from the place-tag array, from ``p`` on from the record (section 4.5)."""
    import zarr

    kept = record.get("tags", {}).get(grid.key)
    p = complete if kept is None else kept["from"]
    parts = []
    if p:
        store = zarr.storage.LocalStore(root, read_only=True)
        array = zarr.open_array(store=store, path=f"tags/{grid.key}", mode="r")
        parts.append(np.asarray(array[:, : p * grid.bound]))
    if kept is not None:
        parts.append(np.asarray(kept["tags"], np.uint32).reshape(grid.row_blocks, -1))
    out = np.concatenate(parts, axis=1) if parts else np.zeros((grid.row_blocks, 0), np.uint32)
    assert out.shape == (grid.row_blocks, complete * grid.bound), f"{grid.key}: tags"
    return out


def check_places(
    root: Path, grid: Grid, record: dict[str, Any], n: int, values: np.ndarray, version: int
) -> None:
    """Every complete bound chunk against its tag; the partly filled one against the edge."""
    complete = n // grid.step
    tags = tags_of(root, grid, record, complete)
    for b in range(grid.row_blocks):
        for k in range(complete):
            for i in range(grid.bound):
                tag = int(tags[b, k * grid.bound + i])
                path = root / grid.chunk(b, k, i)
                assert stored_crc32c(path) == tag, f"{grid.chunk(b, k, i)}: not written there"
    edge = record.get("edges", {}).get(grid.key)
    if n % grid.step == 0:
        assert edge is None, f"{grid.key}: an edge where the array ends on a chunk boundary"
        return
    assert edge is not None
    assert edge["from"] == complete * grid.step
    part = values[:, edge["from"] : n]  # the committed values, checked by their crc (4.3)
    assert [zlib.crc32(le_bytes(row)) for row in part] == edge["crc"], f"{grid.key}: edge"


def episode_table(
    bounds: np.ndarray, returns: np.ndarray, record: dict[str, Any], length: int
) -> dict[str, np.ndarray]:
    """Section 4.4: the indexed entries, then one open entry per row that started before L."""
    opened = record["episodes"]["open"]
    rows = [r for r, s in enumerate(opened["start"]) if s < length]
    extra = np.array(
        [[r, opened["start"][r], length - opened["start"][r], opened["flags"][r]] for r in rows],
        np.int64,
    ).reshape(-1, 4)
    table = np.concatenate([bounds, extra])
    return {
        "row": table[:, 0],
        "start": table[:, 1],
        "length": table[:, 2],
        "truncated": (table[:, 3] & 1).astype(bool),
        "start_known": ~(table[:, 3] & 2).astype(bool),
        "complete": np.arange(len(table)) < len(bounds),
        "return": np.concatenate([returns, [opened["return"][r] for r in rows]]),
    }


def spec_fingerprint(root: Path, read: SpecRead) -> str:
    """Section 6.4, from the stored chunks and the reader's decoded values."""
    manifest, record = read.manifest, read.record
    length = record["committed_length"]
    count = record["episodes"]["count"] if manifest.get("episodes") else 0
    head = {
        "rows": manifest["rows"],
        "structure": manifest["structure"],
        "leaves": [
            [x["name"], x["dtype"], x["shape"], x["chunk"], x["codecs"]] for x in manifest["leaves"]
        ],
        "episodes": manifest.get("episodes"),
        "committed_length": length,
        "episode_count": count,
        "seams": [[s["at"], s["lost"]] for s in record["gaps"]],
    }
    h = hashlib.sha256(json.dumps(head, sort_keys=True).encode())
    index = None
    if manifest.get("episodes"):
        import zarr

        store = zarr.storage.LocalStore(root, read_only=True)
        index = {
            key: np.asarray(zarr.open_array(store=store, path=key, mode="r")[:count])
            for key in ("episodes/bounds", "episodes/returns")
        }
    for grid in grids(manifest):
        n = count if grid.row_block is None else length
        h.update(grid.key.encode())
        for k in range(n // grid.step):
            for b in range(grid.row_blocks):
                for i in range(grid.bound):
                    h.update((root / grid.chunk(b, k, i)).read_bytes()[-4:])
        if n % grid.step:
            start = n // grid.step * grid.step
            if grid.row_block is None:
                assert index is not None
                h.update(le_bytes(index[grid.key][start:n]))
            else:
                h.update(le_bytes(read.data[grid.key.removeprefix("experience/")][:, start:n]))
    return "sha256:" + h.hexdigest()


# ============================================================ what the test writes, known
class Pair(NamedTuple):
    left: Any
    right: Any


@dataclasses.dataclass
class Box:
    v: Any


ESCAPED = ["", ".hidden", "__dunder", "zarr.json", "Zarr.JSON", "é ~", "a/b", "x.__lock"]


def main_example() -> dict[str, Any]:
    """One timestep of the main vault: every kind of container, keys that need escaping."""
    return {
        "obs": np.zeros(3, np.float32),
        "done": np.zeros((), bool),
        "cut": np.zeros((), bool),
        "reward": np.zeros((), np.float32),
        "info": {"a.b": np.zeros(2, np.int16), **{k: np.zeros((), np.uint8) for k in ESCAPED}},
        "pair": Pair(np.zeros((2, 2), np.int32), [np.zeros((), np.uint16), None]),
        "box": Box(np.zeros((), np.float16)),
    }


MAIN_CHUNK = {"obs": [2, 4, 2]}  # two row blocks (3 rows), two item chunks, 4 timesteps
MAIN_APPENDS = [(5, True), (6, True), (3, False), (7, True)]  # (timesteps, continues)
MAIN_TAG_AFTER = 2  # "first" names the commit after the second append


def random_steps(rng: np.random.Generator, example: Any, rows: int, n: int) -> Any:
    """``n`` timesteps of every row shaped like ``example``; rewards small integers (their
    sums exact in float32 and float64)."""
    if example is None:
        return None
    if isinstance(example, dict):
        return {k: random_steps(rng, v, rows, n) for k, v in example.items()}
    if _is_namedtuple(example):
        return type(example)(*[random_steps(rng, v, rows, n) for v in example])
    if dataclasses.is_dataclass(example):
        return Box(random_steps(rng, example.v, rows, n))
    if isinstance(example, (list, tuple)):
        return type(example)(random_steps(rng, v, rows, n) for v in example)
    shape = (rows, n, *np.shape(example))
    dtype = np.asarray(example).dtype
    if dtype == np.bool_:
        return rng.random(shape) < 0.3
    return rng.integers(0, 50, shape).astype(dtype)


class EpisodeRef:
    """The episode index by the rules of section 4.4 ("How a writer extends it")."""

    def __init__(self, rows: int) -> None:
        self.start, self.ret, self.flags = [0] * rows, [0.0] * rows, [0] * rows
        self.bounds: list[tuple[int, int, int, int]] = []
        self.returns: list[float] = []

    def append(self, b: int, done: Any, cut: Any, reward: Any, seam: str | None) -> None:
        rows, n = done.shape
        if seam is not None:  # "restart" marks every row as starting an episode; "lost"
            for r in range(rows):
                self.start[r], self.ret[r] = b, 0.0
                self.flags[r] = 0 if seam == "restart" else 2
        for r in range(rows):
            for j in range(n):
                self.ret[r] += 0.0 if reward is None else float(reward[r, j])
                truncated = cut is not None and bool(cut[r, j])
                if bool(done[r, j]) or truncated:
                    flag = self.flags[r] | (1 if truncated and not done[r, j] else 0)
                    self.bounds.append((r, self.start[r], b + j - self.start[r] + 1, flag))
                    self.returns.append(self.ret[r])
                    self.start[r], self.ret[r], self.flags[r] = b + j + 1, 0.0, 0

    def snapshot(self) -> dict[str, Any]:
        return {
            "bounds": np.array(self.bounds, np.int64).reshape(-1, 4),
            "returns": np.array(self.returns, np.float64),
            "open": {"start": list(self.start), "return": list(self.ret), "flags": self.flags[:]},
        }


class Written(NamedTuple):
    root: Path
    data: dict[str, np.ndarray]  # leaf path -> every timestep written, [rows, L, *shape]
    lengths: list[int]  # committed length after each commit (0: the empty vault)
    episodes: list[dict[str, Any]]  # the reference index after each commit
    records: list[bytes]  # commit/zarr.json's bytes after each commit
    seams: list[dict[str, int]]


def write_vault(
    root: Path,
    example: Any,
    rows: int,
    appends: list[tuple[int, bool]],
    seed: int,
    tag_after: dict[int, str] | None = None,
    **create: Any,
) -> Written:
    """A vault made with the public API, and what was written to it."""
    rng = np.random.default_rng(seed)
    v = Vault.create(str(root), example, rows=rows, **create)
    roles = {r: create.get(f"{r}_leaf") for r in ("done", "truncated", "reward")}
    ref = EpisodeRef(rows)
    data: dict[str, list[np.ndarray]] = {p: [] for p, _ in spec_leaves(example)}
    lengths, episodes = [0], [ref.snapshot()]
    records = [(root / "commit" / "zarr.json").read_bytes()]
    seams = []
    for i, (n, continues) in enumerate(appends, start=1):
        block = random_steps(rng, example, rows, n)
        flat = dict(spec_leaves(block))
        v.append(block, continues=continues)
        b = lengths[-1]
        if not continues:
            seams.append({"at": b, "lost": 0})
        if roles["done"] is not None:
            ref.append(
                b, flat[roles["done"]], flat.get(roles["truncated"] or ""),
                flat.get(roles["reward"] or ""), None if continues else "restart",
            )  # fmt: skip
        for p, x in flat.items():
            data[p].append(x)
        lengths.append(b + n)
        episodes.append(ref.snapshot())
        records.append((root / "commit" / "zarr.json").read_bytes())
        if tag_after and i in tag_after:
            v.tag(tag_after[i])
    v.close()
    joined = {p: np.concatenate(xs, axis=1) for p, xs in data.items()}
    return Written(root, joined, lengths, episodes, records, seams)


@pytest.fixture(scope="module")
def main(tmp_path_factory: pytest.TempPathFactory) -> Written:
    """The main vault: episodes (done, truncated, reward), a restart, a tag, every container
    kind, escaped keys, a leaf cut into two row blocks and two item chunks."""
    root = tmp_path_factory.mktemp("claims") / "main"
    return write_vault(
        root, main_example(), ROWS, MAIN_APPENDS, seed=11, tag_after={MAIN_TAG_AFTER: "first"},
        chunk=MAIN_CHUNK, metadata={"env": "CartPole-v1", "n": 1, "x": 1.0},
        done_leaf="done", truncated_leaf="cut", reward_leaf="reward",
    )  # fmt: skip


@pytest.fixture(scope="module")
def flushed(tmp_path_factory: pytest.TempPathFactory) -> Written:
    """One timestep per chunk, two row blocks, two item chunks: 4 place tags per timestep, so
    the first append's 280 go to the place-tag array and the second's stay in the record."""
    root = tmp_path_factory.mktemp("claims") / "flushed"
    example = {"x": np.zeros(2, np.float32)}
    return write_vault(root, example, 2, [(70, True), (5, True)], seed=3, chunk={"x": [1, 1, 1]})


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A dataset of two shards (the second of one row), closed; what each shard holds."""
    root = tmp_path_factory.mktemp("claims") / "dataset"
    rng = np.random.default_rng(5)
    example = {"obs": np.zeros(2, np.float32), "done": np.zeros((), bool)}
    ds = Dataset.create(str(root), example, rows=2, done_leaf="done", metadata={"d": 1})
    written = {}
    for name, rows in (("alpha", None), ("beta", 1)):
        blocks = []
        with ds.shard(name, rows=rows) as w:
            for n in (3, 4):
                block = random_steps(rng, example, rows or 2, n)
                w.append(block)
                blocks.append(block)
        written[name] = {k: np.concatenate([b[k] for b in blocks], axis=1) for k in example}
    return root, written


DERIVED_START = 2


@pytest.fixture(scope="module")
def derived(main: Written, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Rows 0 and 2 of the main vault from timestep 2, made by ``derive_slice``."""
    root = tmp_path_factory.mktemp("claims") / "derived"
    vault.derive_slice(str(main.root), str(root), rows=[0, 2], start=DERIVED_START)
    return root


def walk(written: Written) -> dict[str, Path]:
    return files_under(written.root)


# ================================================================== 3. Layout (and 2, 4.9)
GROUP = {"zarr_format": 3, "node_type": "group"}


def test_a_closed_vault_holds_exactly_the_objects_of_section_3(main: Written) -> None:
    root, files = main.root, walk(main)
    seq = len(main.lengths) - 1
    top = {key.split("/")[0] for key in files}
    # format 5 with at most 256 tags per array: no place-tag array was ever written
    assert top == {"zarr.json", "commit", "experience", "episodes", "history", "refs", "lock",
                   "trash"}  # fmt: skip
    for key in ("experience/zarr.json", "episodes/zarr.json", "history/zarr.json",
                "refs/zarr.json"):  # fmt: skip
        assert read_json(root / key) == GROUP, key  # "{...} and nothing else"
    assert sorted(k for k in files if k.startswith("history/")) == sorted(
        ["history/zarr.json", *[f"history/{n}" for n in range(seq)]]
    )  # the record of every commit before the latest, decimal, no padding
    assert sorted(k for k in files if k.startswith("refs/")) == ["refs/first", "refs/zarr.json"]
    assert sorted(k for k in files if k.startswith("trash/")) == ["trash/zarr.json"]  # freed
    assert sorted(k for k in files if k.startswith("lock/")) == ["lock/zarr.json"]  # no lease
    assert not [k for k in files if k.endswith(".__lock")]
    # one empty group per container between experience/ and a leaf
    paths = [p for p, _ in spec_leaves(main_example())]
    groups = {"/".join(p.split("/")[:i]) for p in paths for i in range(1, p.count("/") + 1)}
    for group in groups:
        assert read_json(root / "experience" / group / "zarr.json") == GROUP, group
    metadata = {k for k in files if k.startswith("experience/") and k.endswith("zarr.json")}
    assert metadata == {"experience/zarr.json"} | {f"experience/{g}/zarr.json" for g in groups} | {
        f"experience/{p}/zarr.json" for p in paths
    }


def chunk_keys_expected(manifest: dict[str, Any], length: int, count: int) -> set[str]:
    """Every chunk key section 4.2 and 4.4 name for the committed range."""
    out = set()
    for grid in grids(manifest):
        n = count if grid.row_block is None else length
        items = math.prod(grid.counts) if grid.counts else 1
        for b in range(grid.row_blocks):
            for k in range(-(-n // grid.step)):
                out |= {grid.chunk(b, k, i) for i in range(items)}
    return out


def test_every_file_on_disk_is_one_the_specification_names(main: Written, flushed: Written) -> None:
    """Section 3's layout, and section 4.2's chunk keys: every file is named by them; with
    ``fill_chunks_stored`` every chunk of the committed range exists, and at rest none past it
    (the arrays are trimmed to L, section 8.4)."""
    for written in (main, flushed):
        root, files = written.root, walk(written)
        manifest = read_json(root / "zarr.json")["attributes"]["rlvault"]
        record = read_json(root / "commit/zarr.json")["attributes"]["rlvault_commit"]
        count = record.get("episodes", {}).get("count", 0)
        chunks = {k for k in files if re.search(r"/c(/\d+)+$", k) and not k.startswith("tags/")}
        assert chunks == chunk_keys_expected(manifest, record["committed_length"], count)
        named = re.compile(
            r"zarr\.json|commit/zarr\.json|history/(zarr\.json|\d+)|refs/zarr\.json"
            r"|refs/[A-Za-z_][A-Za-z0-9._-]{0,99}|lock/zarr\.json|trash/zarr\.json"
            r"|episodes/zarr\.json|episodes/(bounds|returns)/zarr\.json"
            r"|tags/(experience/.+|episodes/bounds|episodes/returns)/(zarr\.json|c/0/\d+)"
            r"|experience/(.+/)?zarr\.json"
        )
        others = [k for k in files if k not in chunks and not named.fullmatch(k)]
        assert not others, others


# ==================================================================== 4.1: the manifest
def test_the_manifest_holds_what_section_4_1_says(main: Written) -> None:
    root_doc = read_json(main.root / "zarr.json")
    assert set(root_doc) == {"zarr_format", "node_type", "attributes"}
    assert set(root_doc["attributes"]) == {"rlvault"}  # one key
    m = root_doc["attributes"]["rlvault"]
    assert m["format_version"] == 5  # "5 for a vault written now"
    assert m["rlvault_version"] == importlib.metadata.version("rlvault")
    created = dt.datetime.fromisoformat(m["created"])
    assert created.utcoffset() == dt.timedelta(0)  # ISO 8601 with offset, UTC
    assert m["rows"] == ROWS
    assert m["user_metadata"] == {"env": "CartPole-v1", "n": 1, "x": 1.0}
    assert type(m["user_metadata"]["x"]) is float  # kept as given
    assert m["fill_chunks_stored"] is True
    assert m["dimension_names"] is True
    assert m["episodes"] == {"done": "done", "truncated": "cut", "reward": "reward"}
    assert m["digest"] == spec_digest(m)
    # the structure by the table of 4.1.2; leaves in leaf order with their paths
    assert m["structure"] == spec_node(main_example())
    expected = spec_leaves(main_example())
    assert [leaf["name"] for leaf in m["leaves"]] == [p for p, _ in expected]
    for leaf, (_path, x) in zip(m["leaves"], expected, strict=True):
        assert leaf["shape"] == list(x.shape)
        assert leaf["dtype"] == x.dtype.name
        assert len(leaf["chunk"]) == len(leaf["shape"]) + 2
    names = {leaf["name"] for leaf in m["leaves"]}
    escaped = ["%-", "%2Ehidden", "%5F_dunder", "%7Aarr.json", "%5Aarr.JSON", "%C3%A9%20~",
               "a%2Fb", "x%2E__lock"]  # fmt: skip
    assert {f"info/{e}" for e in escaped} | {"pair/right/0", "box/v"} <= names
    for name in names:  # each node name is a folder of experience/
        assert (main.root / "experience" / name / "zarr.json").is_file()
        assert all(len(part.encode()) <= 255 for part in name.split("/"))


def test_a_digest_is_the_canonical_json_of_section_6_2(tmp_path: Path) -> None:
    """The bullet list of 6.2 (implemented here, not json.dumps) gives the stored digest, for
    user metadata with every case it names: escapes, non-ASCII, surrogate pairs, floats that
    look like integers, exponents."""
    metadata = {
        "é": 'a"b\\c\b\f\n\r\t\x01\x1f ~ ÿ 😀',
        "floats": [1.0, 0.1, 1e-05, 1e16, -0.0, 123456789.0, 2.5e-300],
        "ints": [1, -1, 0, 2**60],
        "nested": {"b": None, "a": True, "B": False, "": []},
    }
    v = Vault.create(str(tmp_path / "v"), {"x": np.zeros((), np.float32)}, rows=1,
                     metadata=metadata)  # fmt: skip
    v.close()
    m = read_json(tmp_path / "v" / "zarr.json")["attributes"]["rlvault"]
    assert m["user_metadata"] == metadata
    assert canonical(m) == json.dumps(m, sort_keys=True, separators=(",", ":"))
    assert m["digest"] == spec_digest(m)
    flipped = json.loads(json.dumps(m))
    flipped["user_metadata"]["ints"][0] = 1.0  # 1 and 1.0 are different values there
    assert spec_digest(flipped) != m["digest"]


def test_a_digest_over_a_del_character_follows_section_6_2(tmp_path: Path) -> None:
    """6.2: every character outside U+0020 to U+007E is ``\\uXXXX`` (lower-case hex), U+007F
    DEL included, so the canonical JSON is ASCII; the rest of that range is itself."""
    assert _string("a\x7fb~ \x80") == '"a\\u007fb~ \\u0080"'
    metadata = {"del": "a\x7fb", "\x7f": ["\x7f\x7e\x20\x1f"]}
    v = Vault.create(str(tmp_path / "v"), {"x": np.zeros((), np.float32)}, rows=1,
                     metadata=metadata)  # fmt: skip
    v.close()
    m = read_json(tmp_path / "v" / "zarr.json")["attributes"]["rlvault"]
    assert m["user_metadata"] == metadata
    text = canonical({k: v for k, v in m.items() if k != "digest"})
    assert '"a\\u007fb"' in text
    assert '"\\u007f":["\\u007f~ \\u001f"]' in text
    assert text.isascii()
    assert canonical(m) == json.dumps(m, sort_keys=True, separators=(",", ":"))
    assert m["digest"] == spec_digest(m)


DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64"]  # fmt: skip


def test_default_codecs_chunks_and_array_metadata_per_dtype(tmp_path: Path) -> None:
    """4.1.3: every dtype of the list; zstd-3 for one-byte dtypes, blosc (zstd, 1, shuffle)
    for the others; the array's chain with exactly TensorStore's two differences; default
    chunks (power-of-two timesteps, at most 16,384; every row and ~256 KiB for small items,
    1 row and ~2 MiB from 4 KiB per timestep). 4.2: the rest of each array's zarr.json. And
    with ``fill_chunks_stored``, a chunk of fill values (all zeros) is stored."""
    rows = 3
    example = {d: np.zeros((2,) if d == "float64" else (), d) for d in DTYPES}
    example["frame"] = np.zeros((64, 64), np.uint8)  # 4 KiB per timestep
    root = tmp_path / "v"
    v = Vault.create(str(root), example, rows=rows)
    v.append({k: np.zeros((rows, 2, *x.shape), x.dtype) for k, x in example.items()})
    v.close()
    m = read_json(root / "zarr.json")["attributes"]["rlvault"]
    leaves = {leaf["name"]: leaf for leaf in m["leaves"]}
    zstd = {"name": "zstd", "configuration": {"level": 3, "checksum": False}}
    blosc_config = {"cname": "zstd", "clevel": 1, "shuffle": "shuffle", "blocksize": 0}
    blosc = {"name": "blosc", "configuration": blosc_config}
    for name, x in example.items():
        leaf = leaves[name]
        step = x.size * x.dtype.itemsize
        assert leaf["dtype"] == x.dtype.name
        middle = zstd if x.dtype.itemsize == 1 else blosc
        assert leaf["codecs"] == [
            {"name": "bytes", "configuration": {"endian": "little"}}, middle, {"name": "crc32c"},
        ]  # fmt: skip
        chunk_rows, steps = leaf["chunk"][:2]
        assert leaf["chunk"][2:] == list(x.shape)  # whole items
        assert steps & (steps - 1) == 0
        assert steps <= 16384
        if step >= 4096:
            assert chunk_rows == 1
            assert steps * step <= 2 << 20 < 2 * steps * step
        else:
            assert chunk_rows == rows
            size = rows * step * steps
            assert size <= 256 << 10
            assert steps == 16384 or 2 * size > 256 << 10
        meta = read_json(root / "experience" / name / "zarr.json")
        assert meta["codecs"] == array_chain(leaf["codecs"], leaf["dtype"])
        if x.dtype.itemsize == 1:
            assert meta["codecs"][0] == {"name": "bytes"}
        check_leaf_metadata(meta, leaf, m, 2)
        assert meta["shape"] == [rows, 2, *x.shape]  # trimmed to L at close (8.4)
        assert meta["chunk_key_encoding"] == {"name": "default"}
        assert "attributes" not in meta  # local: absent
        assert (root / "experience" / name / "c" / "0" / "0" / ("/".join("0" * x.ndim))).is_file()


def test_explicit_codecs_are_the_entries_of_the_codec_table(tmp_path: Path) -> None:
    """4.1.3's table, with the levels given; ``None``: bytes then crc32c."""
    table = {
        ("zstd", -5): {"name": "zstd", "configuration": {"level": -5, "checksum": False}},
        ("gzip", 7): {"name": "gzip", "configuration": {"level": 7}},
        ("blosc", 9): {"name": "blosc", "configuration": {
            "cname": "zstd", "clevel": 9, "shuffle": "shuffle", "blocksize": 0}},
        ("lz4", 2): {"name": "blosc", "configuration": {
            "cname": "lz4", "clevel": 2, "shuffle": "shuffle", "blocksize": 0}},
        (None, None): None,
    }  # fmt: skip
    example = {"b": np.zeros((), bool), "f": np.zeros(3, np.float32)}
    for (codec, level), entry in table.items():
        root = tmp_path / str(codec)
        rng = np.random.default_rng(1)
        v = Vault.create(str(root), example, rows=2, codec=codec, level=level)
        block = random_steps(rng, example, 2, 5)
        v.append(block)
        v.close()
        m = read_json(root / "zarr.json")["attributes"]["rlvault"]
        for leaf in m["leaves"]:
            chain = [{"name": "bytes", "configuration": {"endian": "little"}}]
            chain += [entry] if entry else []
            assert leaf["codecs"] == [*chain, {"name": "crc32c"}], (codec, leaf["name"])
            meta = read_json(root / "experience" / leaf["name"] / "zarr.json")
            assert meta["codecs"] == array_chain(leaf["codecs"], leaf["dtype"])
            # the chunk's bytes, undone by hand (4.2)
            key = "/".join(["c", "0", "0", *["0"] * len(leaf["shape"])])
            raw = (root / "experience" / leaf["name"] / key).read_bytes()
            values = decode_chunk(raw, leaf["codecs"], leaf["dtype"], leaf["chunk"])
            np.testing.assert_array_equal(values[:, :5], block[leaf["name"]])


def test_the_fill_value_is_false_0_0_or_0_by_dtype(main: Written, tmp_path: Path) -> None:
    """4.2: ``false`` for bool, ``0.0`` (a JSON float: with a ``.0``) for the float dtypes,
    ``0`` (a JSON integer) for the integer dtypes; 4.4: ``0`` for episodes/bounds, ``0.0`` for
    episodes/returns."""
    example = {d: np.zeros((), d) for d in DTYPES}
    Vault.create(str(tmp_path / "v"), example, rows=1).close()
    for d in DTYPES:
        fill = read_json(tmp_path / "v" / "experience" / d / "zarr.json")["fill_value"]
        if d == "bool":
            assert fill is False, (d, fill)
        elif d.startswith("float"):
            assert (type(fill), fill) == (float, 0.0), d
        else:
            assert (type(fill), fill) == (int, 0), d
    bounds = read_json(main.root / "episodes" / "bounds" / "zarr.json")["fill_value"]
    assert (type(bounds), bounds) == (int, 0)
    returns = read_json(main.root / "episodes" / "returns" / "zarr.json")["fill_value"]
    assert (type(returns), returns) == (float, 0.0)


def test_rows_and_dtypes_outside_the_specification_are_refused(tmp_path: Path) -> None:
    """4.1.1: rows 1 to 2^24; 4.1.3: the twelve dtypes only; 4.1.2: node names of at most
    255 bytes. Nothing is written for a refused vault."""
    x = {"x": np.zeros((), np.float32)}
    for rows in (0, 2**24 + 1):
        with pytest.raises(vault.VaultError):
            Vault.create(str(tmp_path / f"rows{rows}"), x, rows=rows)
    with pytest.raises(vault.VaultError):
        Vault.create(str(tmp_path / "c"), {"x": np.zeros((), np.complex64)}, rows=1)
    with pytest.raises(vault.VaultError):  # 128 x 'é' escapes to 768 bytes
        Vault.create(str(tmp_path / "long"), {"é" * 128: np.zeros((), np.uint8)}, rows=1)
    Vault.create(str(tmp_path / "ok"), {"k" * 255: np.zeros((), np.uint8)}, rows=1).close()
    assert (tmp_path / "ok" / "experience" / ("k" * 255) / "zarr.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name != "ok" and any(p.iterdir())]


def test_escape_rule_5_writes_the_lock_ending_in_lower_case_and_refuses_keys_it_merges(
    tmp_path: Path,
) -> None:
    """4.1.2 rule 5: a name ending in ``.__lock`` in any letter case has that ``.`` written
    ``%2E`` and its ending written ``__lock``; keys that so get one node name are refused by
    ``Vault.create`` (``VaultStructureError`` naming both), and nothing is created."""
    v = Vault.create(str(tmp_path / "one"), {"x.__LOCK": np.zeros((), np.uint8)}, rows=1)
    v.close()
    m = read_json(tmp_path / "one" / "zarr.json")["attributes"]["rlvault"]
    assert m["structure"]["keys"] == ["x.__LOCK"]  # the key as given
    assert [leaf["name"] for leaf in m["leaves"]] == [spec_escape("x.__LOCK")] == ["x%2E__lock"]
    assert (tmp_path / "one" / "experience" / "x%2E__lock" / "zarr.json").is_file()
    assert sorted(os.listdir(tmp_path / "one" / "experience")) == ["x%2E__lock", "zarr.json"]
    two = {"a.__lock": np.zeros((), np.uint8), "a.__LOCK": np.zeros((), np.int16)}
    assert spec_escape("a.__lock") == spec_escape("a.__LOCK") == "a%2E__lock"
    with pytest.raises(vault.VaultStructureError, match=r"(?s)(?=.*'a\.__lock')(?=.*'a\.__LOCK')"):
        Vault.create(str(tmp_path / "two"), two, rows=1)
    assert not (tmp_path / "two").exists()


def test_a_vault_with_cut_items_is_written_in_the_current_format(main: Written) -> None:
    """4.1.3: a vault whose chunks cut its item axes (readable from format 4, every item chunk
    bound to its place, 4.5) is written, like every new vault, in format 5."""
    m = read_json(main.root / "zarr.json")["attributes"]["rlvault"]
    obs = next(leaf for leaf in m["leaves"] if leaf["name"] == "obs")
    assert obs["chunk"] == [2, 4, 2]
    assert item_counts(obs) == [2]
    assert m["format_version"] == 5
    # format 5: the record keeps the place tags of every item chunk (bound = n = 2)
    record = read_json(main.root / "commit/zarr.json")["attributes"]["rlvault_commit"]
    kept = record["tags"]["experience/obs"]
    complete = main.lengths[-1] // obs["chunk"][1]
    row_blocks = -(-ROWS // obs["chunk"][0])
    assert len(kept["tags"]) == row_blocks * (complete - kept["from"]) * 2


# =============================================================== 4.2: leaf arrays, chunks
def test_leaf_arrays_and_their_chunks_are_as_section_4_2_says(main: Written) -> None:
    """Each leaf's zarr.json; each chunk's bytes undone by hand (crc32c appended, little
    endian, C order, the whole chunk) hold the values written there."""
    root = main.root
    m = read_json(root / "zarr.json")["attributes"]["rlvault"]
    length = main.lengths[-1]
    for leaf in m["leaves"]:
        key = f"experience/{leaf['name']}"
        meta = read_json(root / key / "zarr.json")
        check_leaf_metadata(meta, leaf, m, length)
        assert meta["shape"] == [ROWS, length, *leaf["shape"]]
        written = main.data[leaf["name"]]
        counts = item_counts(leaf)
        rows_per, steps = leaf["chunk"][:2]
        for b in range(-(-ROWS // rows_per)):
            for k in range(-(-length // steps)):
                for i in range(math.prod(counts)):
                    at = [int(j) for j in np.unravel_index(i, counts)] if counts else []
                    raw = (root / chunk_key(key, b, k, i, counts)).read_bytes()
                    values = decode_chunk(raw, leaf["codecs"], leaf["dtype"], leaf["chunk"])
                    r0, t0 = b * rows_per, k * steps
                    r1, t1 = min(ROWS, r0 + rows_per), min(length, t0 + steps)
                    items = tuple(
                        slice(j * c, min(n, (j + 1) * c))
                        for j, c, n in zip(at, leaf["chunk"][2:], leaf["shape"], strict=True)
                    )
                    want = written[(slice(r0, r1), slice(t0, t1), *items)]
                    got = values[(slice(0, r1 - r0), slice(0, t1 - t0))]
                    got = got[
                        (slice(None), slice(None), *[slice(0, s.stop - s.start) for s in items])
                    ]
                    np.testing.assert_array_equal(got, want, err_msg=f"{key} {b}/{k}/{i}")
                    if r1 - r0 < rows_per:  # past the last row: fill values
                        assert not values[r1 - r0 :].any()


# ============================================================== 4.3: the commit record
def test_the_commit_record_holds_what_section_4_3_says(main: Written) -> None:
    root = main.root
    doc = read_json(root / "commit" / "zarr.json")
    assert set(doc) == {"zarr_format", "node_type", "attributes"}
    assert set(doc["attributes"]) == {"rlvault_commit"}
    record = doc["attributes"]["rlvault_commit"]
    m = read_json(root / "zarr.json")["attributes"]["rlvault"]
    length, seq = main.lengths[-1], len(main.lengths) - 1
    assert record["committed_length"] == length
    assert record["source_counter"] is None  # appends of arrays
    assert record["seq"] == seq
    assert record["gaps"] == main.seams == [{"at": 11, "lost": 0}]
    assert re.fullmatch(r"[0-9a-f]{12}", record["uid"])
    assert "fence" not in record  # object stores only
    assert record["digest"] == spec_digest(record)
    # episodes: the reference index's count and open episodes
    ref = main.episodes[-1]
    assert record["episodes"] == {"count": len(ref["bounds"]), "open": ref["open"]}
    assert all(type(x) is float for x in record["episodes"]["open"]["return"])
    count = record["episodes"]["count"]
    assert 0 < count < 8192
    # edges: every array that ends inside a chunk, and no other
    values = {f"experience/{k}": v for k, v in main.data.items()}
    values["episodes/bounds"] = ref["bounds"][None]
    values["episodes/returns"] = ref["returns"][None]
    expected_edges = {}
    for grid in grids(m):
        n = count if grid.row_block is None else length
        if n % grid.step == 0:
            continue
        start = n // grid.step * grid.step
        crc = [zlib.crc32(le_bytes(row)) for row in values[grid.key][:, start:n]]
        tail = [
            stored_crc32c(root / grid.chunk(b, start // grid.step, i))
            for b in range(grid.row_blocks)
            for i in range(grid.bound)
        ]
        expected_edges[grid.key] = {"from": start, "crc": crc, "tail": tail}
    assert record["edges"] == expected_edges
    assert "experience/obs" in expected_edges
    assert len(expected_edges["experience/obs"]["tail"]) == 4
    # tags (format 5): per array, the tags of its complete chunks, b * m + (k - p) * bound + i
    expected_tags = {}
    for grid in grids(m):
        n = count if grid.row_block is None else length
        complete = n // grid.step
        if complete == 0:
            continue
        kept = record["tags"][grid.key]
        p = kept["from"]
        assert 0 <= p <= complete
        mm = (complete - p) * grid.bound
        flat = [0] * (grid.row_blocks * mm)
        for b in range(grid.row_blocks):
            for k in range(p, complete):
                for i in range(grid.bound):
                    tail = stored_crc32c(root / grid.chunk(b, k, i))
                    flat[b * mm + (k - p) * grid.bound + i] = tail
        expected_tags[grid.key] = {"from": p, "tags": flat}
    assert record["tags"] == expected_tags
    assert list(expected_tags) == ["experience/obs"]  # the only array with complete chunks
    assert not (root / "tags").exists()  # kept in the record: no place-tag array yet


def test_a_write_of_a_buffer_state_records_its_counter_and_its_losses(tmp_path: Path) -> None:
    """4.3: ``source_counter`` is the buffer's write counter; a write that lost timesteps
    (``save_surviving``) leaves a seam ``{"at": L, "lost": n}``; an append of arrays leaves
    ``null``."""
    from buffers.trajectory_buffer import TrajectoryBufferState

    capacity = 8
    ring = np.zeros((2, capacity, 3), np.float32)

    def state(counter: int) -> Any:
        ring[:] = np.arange(capacity, dtype=np.float32)[None, :, None] + counter
        return TrajectoryBufferState(
            experience={"obs": ring.copy()}, current_index=np.int32(counter % capacity),
            is_full=np.bool_(counter >= capacity),
            write_counter=np.array([counter >> 32, counter & 0xFFFFFFFF], np.uint32),
        )  # fmt: skip

    root = tmp_path / "v"
    v = Vault.create(str(root), state(0))
    commit = root / "commit" / "zarr.json"
    v.write(state(5))
    assert read_json(commit)["attributes"]["rlvault_commit"]["source_counter"] == 5
    v.write(state(5 + 14), on_overrun="save_surviving")  # 14 new, 8 survive: 6 lost
    record = read_json(commit)["attributes"]["rlvault_commit"]
    assert record["source_counter"] == 19
    assert record["committed_length"] == 13
    assert record["gaps"] == [{"at": 5, "lost": 6}]
    v.append({"obs": np.zeros((2, 1, 3), np.float32)})
    assert read_json(commit)["attributes"]["rlvault_commit"]["source_counter"] is None
    v.close()
    assert spec_read(root).record["gaps"] == [{"at": 5, "lost": 6}]


# ============================================================== 4.4: the episode index
def test_the_episode_index_is_section_4_4s(main: Written) -> None:
    """The index arrays' metadata, and their entries as the rules of 4.4 make them."""
    root = main.root
    ref = main.episodes[-1]
    count = len(ref["bounds"])
    codecs = [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
        {"name": "crc32c"},
    ]
    for key, dtype, shape, chunk, dims in (
        ("bounds", "int64", [count, 4], [8192, 4], ["episode", "field"]),
        ("returns", "float64", [count], [8192], ["episode"]),
    ):
        meta = read_json(root / "episodes" / key / "zarr.json")
        assert meta["data_type"] == dtype
        assert meta["shape"] == shape
        assert meta["chunk_grid"] == {"name": "regular", "configuration": {"chunk_shape": chunk}}
        assert meta["codecs"] == codecs
        assert meta["fill_value"] == 0
        assert meta["dimension_names"] == dims
        assert meta["chunk_key_encoding"] == {"name": "default"}
    meta = read_json(root / "episodes" / "bounds" / "zarr.json")
    assert meta["attributes"] == {"fields": ["row", "start", "length", "flags"]}
    raw = (root / "episodes/bounds/c/0/0").read_bytes()
    bounds = decode_chunk(raw, codecs, "int64", [8192, 4])
    returns = decode_chunk((root / "episodes/returns/c/0").read_bytes(), codecs, "float64", [8192])
    np.testing.assert_array_equal(bounds[:count], ref["bounds"])
    np.testing.assert_array_equal(returns[:count], ref["returns"])
    flags = ref["bounds"][:, 3]
    assert (flags & 1).any()
    assert set(flags.tolist()) <= {0, 1, 2, 3}


# ======================================================================= 4.6: history
def test_history_holds_every_earlier_record(main: Written) -> None:
    """4.6: ``history/<n>`` is commit n's record (its digest valid, its seq n), and the same
    record as commit/zarr.json held then (its form may differ: ``"edges": {}``)."""
    root = main.root
    for n, raw in enumerate(main.records[:-1]):
        doc = read_json(root / "history" / str(n))
        assert set(doc) == {"zarr_format", "node_type", "attributes"}
        record = doc["attributes"]["rlvault_commit"]
        assert record["seq"] == n
        assert record["committed_length"] == main.lengths[n]
        assert record["digest"] == spec_digest(record)
        then = json.loads(raw)["attributes"]["rlvault_commit"]
        if then.get("edges") is None:
            then["edges"] = {}
        assert {k: v for k, v in record.items() if k != "digest"} == {
            k: v for k, v in then.items() if k != "digest"
        }
    assert (root / "commit/zarr.json").read_bytes() == main.records[-1]
    uids = [json.loads(r)["attributes"]["rlvault_commit"]["uid"] for r in main.records]
    assert len(set(uids)) == len(uids)  # random per commit


def test_history_holds_the_same_record_the_commit_record_had(main: Written) -> None:
    """commit-group.schema.json: ``history/<seq>`` is that commit's record serialized anew:
    the same record as its commit/zarr.json held (the same values, ``edges`` and ``tags``
    absent the same as ``{}``, 4.3), its own digest valid, not always the same bytes."""

    def meaning(record: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in record.items() if k != "digest"}
        for key in ("edges", "tags"):  # 4.3: "Absent or {}"
            if not out.get(key):
                out[key] = {}
        return out

    description = read_json(SCHEMAS / "commit-group.schema.json")["description"]
    assert "not always the same bytes" in description
    for n, raw in enumerate(main.records[:-1]):
        doc = read_json(main.root / "history" / str(n))
        then = json.loads(raw)
        assert {k: v for k, v in doc.items() if k != "attributes"} == {
            k: v for k, v in then.items() if k != "attributes"
        }
        assert set(doc["attributes"]) == set(then["attributes"]) == {"rlvault_commit"}
        record = doc["attributes"]["rlvault_commit"]
        assert record["digest"] == spec_digest(record), n
        old = then["attributes"]["rlvault_commit"]
        assert old["digest"] == spec_digest(old), n
        assert meaning(record) == meaning(old), n


# ========================================================================== 4.7: tags
def test_a_tag_is_the_object_of_section_4_7(main: Written, tmp_path: Path) -> None:
    doc = read_json(main.root / "refs" / "first")
    assert set(doc) == {"commit", "committed_length", "created"}
    tagged = json.loads(main.records[MAIN_TAG_AFTER])["attributes"]["rlvault_commit"]
    assert doc["commit"] == f"{tagged['seq']}-{tagged['uid']}"  # the commit id (6.3)
    assert doc["committed_length"] == main.lengths[MAIN_TAG_AFTER]
    assert dt.datetime.fromisoformat(doc["created"]).utcoffset() is not None
    # no refs/ before the first tag; a tag never moves; names are checked
    root = tmp_path / "v"
    v = Vault.create(str(root), {"x": np.zeros((), np.float32)}, rows=1)
    v.append({"x": np.zeros((1, 2), np.float32)})
    assert not (root / "refs").exists()
    v.tag("a")
    assert read_json(root / "refs" / "zarr.json") == GROUP
    before = (root / "refs" / "a").read_bytes()
    v.tag("a")  # the same name for the same commit: nothing changes
    assert (root / "refs" / "a").read_bytes() == before
    v.append({"x": np.zeros((1, 2), np.float32)})
    with pytest.raises(vault.VaultError):
        v.tag("a")  # for another commit: refused
    for bad in ("", "1abc", "-a", ".a", "a/b", "a b", "x" * 101, "zarr.json", "é"):
        with pytest.raises(vault.VaultError):
            v.tag(bad)
    v.tag("_" + "x" * 99)  # 100 characters, starting with '_'
    v.close()
    assert sorted(os.listdir(root / "refs")) == ["_" + "x" * 99, "a", "zarr.json"]


def test_a_tag_name_with_a_newline_is_refused(tmp_path: Path) -> None:
    v = Vault.create(str(tmp_path / "v"), {"x": np.zeros((), np.float32)}, rows=1)
    v.append({"x": np.zeros((1, 2), np.float32)})
    try:
        with pytest.raises(vault.VaultError):
            v.tag("ok\n")
    finally:
        v.close()


# ================================================================ 4.8.1: the writer lock
def test_the_writer_lock_is_a_flock_on_lock_and_a_record_of_its_holder(tmp_path: Path) -> None:
    root = tmp_path / "v"

    def shared_flock_fails() -> bool:
        fd = os.open(root / "lock", os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    v = Vault.create(str(root), {"x": np.zeros((), np.float32)}, rows=1)
    assert shared_flock_fails()  # held
    doc = read_json(root / "lock" / "zarr.json")
    assert doc["zarr_format"] == 3
    assert doc["node_type"] == "group"
    writer = doc["attributes"]["writer"]
    assert set(writer) == {"pid", "host", "thread", "since"}
    assert writer["pid"] == os.getpid()
    assert writer["host"] == socket.gethostname()
    assert writer["thread"] == threading.current_thread().name
    dt.datetime.fromisoformat(writer["since"])
    v.close()
    assert not shared_flock_fails()  # released
    assert read_json(root / "lock" / "zarr.json") == doc  # it stays after the writer closes
    assert not (root / "lock" / "lease.json").exists()


# ============================================================ 4.5: the place-tag array
def test_place_tags_past_256_go_to_the_place_tag_array(flushed: Written) -> None:
    """4.5: once more than 256 of an array's tags are held they are written to
    ``tags/<array key>`` at ``[b, k * bound + i]`` (its metadata as the section says); the
    record keeps the later ones from ``p``."""
    root = flushed.root
    key = "experience/x"
    meta = read_json(root / "tags" / key / "zarr.json")
    assert meta["zarr_format"] == 3
    assert meta["node_type"] == "array"
    assert meta["data_type"] == "uint32"
    assert meta["fill_value"] == 0
    assert meta["shape"][0] == 2
    assert meta["shape"][1] % 1024 == 0
    assert meta["shape"][1] >= 140
    grid_meta = {"name": "regular", "configuration": {"chunk_shape": [2, 1024]}}
    assert meta["chunk_grid"] == grid_meta
    assert meta["codecs"] == [
        {"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"},
    ]  # fmt: skip
    assert meta["dimension_names"] == ["row_block", "time_chunk"]
    assert meta["chunk_key_encoding"] == {"name": "default"}
    assert sorted(files_under(root / "tags")) == ["experience/x/c/0/0", "experience/x/zarr.json"]
    tags = decode_chunk((root / "tags" / key / "c/0/0").read_bytes(), meta["codecs"], "uint32",
                        [2, 1024])  # fmt: skip
    grid = Grid(key, 2, 1, 1, [2], 2)
    for b in range(2):
        for k in range(70):
            for i in range(2):
                assert tags[b, k * 2 + i] == stored_crc32c(root / grid.chunk(b, k, i))
    record = read_json(root / "commit/zarr.json")["attributes"]["rlvault_commit"]
    kept = record["tags"][key]
    assert kept["from"] == 70
    assert len(kept["tags"]) == 2 * 5 * 2
    history = read_json(root / "history" / "1")["attributes"]["rlvault_commit"]
    assert "tags" not in history  # all written: the record of commit 1 keeps none
    assert flushed.lengths[-1] == 75


# ====================================================== 8.1, 8.2, 4.9: writing, in order
def inodes(root: Path) -> dict[str, int]:
    """Each file's inode (a file of trash/ may be freed meanwhile: then left out)."""
    out = {}
    for key, path in files_under(root).items():
        try:
            out[key] = path.stat().st_ino
        except FileNotFoundError:
            continue
    return out


TRASH_NAME = re.compile(r"trash/\d+-[0-9a-f]+-\d+")


def test_a_creation_writes_its_manifest_last(tmp_path: Path) -> None:
    """8.1: at the moment the manifest is written, the arrays (shape ``[rows, 0, ...]``),
    the groups and the empty commit record are there, and the root zarr.json is not."""
    root = tmp_path / "v"
    seen: dict[str, Any] = {}

    def hook(point: str, info: dict[str, Any], step: Callable[[], Any]) -> Any:
        if point == "create":
            seen["files"] = files_under(root)
            seen["shapes"] = {
                k: read_json(p)["shape"]
                for k, p in seen["files"].items()
                if k.endswith("zarr.json") and read_json(p).get("node_type") == "array"
            }
            seen["record"] = read_json(root / "commit/zarr.json")
        return step()

    previous = vault.set_fault_hook(hook)
    try:
        example = {"obs": np.zeros(3, np.float32), "done": np.zeros((), bool)}
        v = Vault.create(str(root), example, rows=2, done_leaf="done")
    finally:
        vault.set_fault_hook(previous)
    v.close()
    files = seen["files"]
    assert "zarr.json" not in files
    assert {k.split("/")[0] for k in files} <= {"lock", "experience", "episodes", "commit",
                                                "history", "tags", "trash"}  # fmt: skip
    assert {"lock/zarr.json", "experience/zarr.json", "history/zarr.json",
            "episodes/zarr.json"} <= set(files)  # fmt: skip
    assert seen["shapes"] == {
        "experience/obs/zarr.json": [2, 0, 3], "experience/done/zarr.json": [2, 0],
        "episodes/bounds/zarr.json": [0, 4], "episodes/returns/zarr.json": [0],
    }  # fmt: skip
    record = seen["record"]["attributes"]["rlvault_commit"]
    assert record["committed_length"] == 0
    assert record["seq"] == 0
    assert record["gaps"] == []
    assert re.fullmatch(r"[0-9a-f]{12}", record["uid"])
    assert record["episodes"] == {
        "count": 0, "open": {"start": [0, 0], "return": [0.0, 0.0], "flags": [0, 0]},
    }  # fmt: skip


def run_observed_append(root: Path, chunk: dict[str, list[int]]) -> dict[str, Any]:
    """A vault of two rows, appended 5 then 6 timesteps; what the disk held at the second
    append's "resize" and "commit" steps, before and after it."""
    example = {"obs": np.zeros(3, np.float32), "done": np.zeros((), bool)}
    rng = np.random.default_rng(2)
    v = Vault.create(str(root), example, rows=2, chunk=chunk, done_leaf="done")
    v.append(random_steps(rng, example, 2, 5))
    seen: dict[str, Any] = {"before": inodes(root)}
    seen["record bytes"] = (root / "commit/zarr.json").read_bytes()

    def look() -> dict[str, Any]:
        return {
            "inodes": inodes(root),
            "shapes": {
                key: read_json(root / key / "zarr.json")["shape"]
                for key in ("experience/obs", "experience/done", "episodes/bounds")
            },
            "record": read_json(root / "commit/zarr.json")["attributes"]["rlvault_commit"],
        }

    def hook(point: str, info: dict[str, Any], step: Callable[[], Any]) -> Any:
        if point in ("resize", "commit"):
            seen[point] = look()
        return step()

    block = random_steps(rng, example, 2, 6)
    previous = vault.set_fault_hook(hook)
    try:
        v.append(block)
    finally:
        vault.set_fault_hook(previous)
    seen["block"] = block
    seen["after"] = inodes(root)
    v.close()
    seen["closed"] = files_under(root)
    return seen


def held_keys(seen: dict[str, Any], at: str) -> set[str]:
    """The files (keys before the append) that trash/ held a hard link to at step ``at``."""
    linked = {ino for k, ino in seen[at]["inodes"].items() if TRASH_NAME.fullmatch(k)}
    return {k for k, ino in seen["before"].items() if ino in linked and not k.startswith("trash")}


def test_an_append_writes_in_the_order_of_section_8_2(tmp_path: Path) -> None:
    """8.2: Hold, then Grow (by at least a quarter, whole chunks), then data, index and
    history, then the commit record, last; 4.9: the old versions hard-linked into trash/,
    freed at close; 8.4: the arrays trimmed to L."""
    root = tmp_path / "v"
    seen = run_observed_append(root, {"obs": [2, 4, 3], "done": [2, 4]})
    # before growing: the partly filled chunks and the metadata to grow are held; no history
    resize = seen["resize"]
    held = held_keys(seen, "resize")
    assert held >= {"experience/obs/c/0/1/0", "experience/done/c/0/1"}  # partly filled
    assert held >= {"experience/obs/zarr.json", "experience/done/zarr.json"}  # to grow
    assert "history/1" not in resize["inodes"]
    assert resize["record"]["committed_length"] == 5
    assert resize["shapes"]["experience/obs"][1] == 8  # 5 rounded up to whole chunks
    # at the commit: grown, written, history there; the record itself held, still the old one
    commit = seen["commit"]
    assert commit["record"]["committed_length"] == 5
    for key in ("experience/obs", "experience/done"):
        t = commit["shapes"][key][1]
        assert t >= max(11, 8 + 8 // 4)
        assert t % 4 == 0
    assert commit["shapes"]["episodes/bounds"][0] % 8192 == 0
    assert (root / "history" / "1").read_bytes() == seen["record bytes"]
    assert "commit/zarr.json" in held_keys(seen, "commit")
    trash = [k for k in commit["inodes"] if k.startswith("trash/") and k != "trash/zarr.json"]
    assert trash
    for key in trash:  # named <pid>-<id>-<n>
        assert TRASH_NAME.fullmatch(key), key
        assert key.split("/")[1].split("-")[0] == str(os.getpid())
    # every file the append replaced was held first
    replaced = {
        k for k, ino in seen["before"].items()
        if k in seen["after"] and seen["after"][k] != ino and not k.startswith("trash/")
    }  # fmt: skip
    assert replaced
    assert replaced <= held_keys(seen, "commit"), replaced - held_keys(seen, "commit")
    # closed: trash freed, shapes cut to L and count, the data as written
    assert sorted(k for k in seen["closed"] if k.startswith("trash/")) == ["trash/zarr.json"]
    read = spec_read(root)
    assert read.record["committed_length"] == 11
    assert read_json(root / "experience/obs/zarr.json")["shape"] == [2, 11, 3]
    count = read.record["episodes"]["count"]
    assert read_json(root / "episodes/bounds/zarr.json")["shape"] == [count, 4]
    np.testing.assert_array_equal(read.data["obs"][:, 5:], seen["block"]["obs"])


def test_an_append_holds_every_file_it_replaces_when_items_are_cut(tmp_path: Path) -> None:
    seen = run_observed_append(tmp_path / "v", {"obs": [2, 4, 2], "done": [2, 4]})
    replaced = {
        k for k, ino in seen["before"].items()
        if k in seen["after"] and seen["after"][k] != ino and not k.startswith("trash/")
    }  # fmt: skip
    assert "experience/obs/c/0/1/1" in replaced
    assert replaced <= held_keys(seen, "commit"), replaced - held_keys(seen, "commit")


def test_a_new_writer_takes_over_a_closed_vault(tmp_path: Path) -> None:
    """4.9 and 8.1: a new writer deletes leftover ``*.__lock`` files; 4.6: its appends
    continue the commit numbers and history; 4.8.1: it records itself in lock/zarr.json."""
    root = tmp_path / "v"
    example = {"x": np.zeros(2, np.float32)}
    first = write_vault(root, example, 2, [(3, True), (2, True)], seed=4)
    leftover = root / "experience" / "x" / "c" / "0" / "0" / "0.__lock"
    leftover.write_bytes(b"stale")
    v = Vault.open(str(root), mode="a")
    assert not leftover.exists()
    block = random_steps(np.random.default_rng(9), example, 2, 4)
    v.append(block)
    v.close()
    record = read_json(root / "commit/zarr.json")["attributes"]["rlvault_commit"]
    assert record["seq"] == 3
    assert record["committed_length"] == 9
    assert sorted(os.listdir(root / "history")) == ["0", "1", "2", "zarr.json"]
    old = json.loads(first.records[-1])["attributes"]["rlvault_commit"]
    assert read_json(root / "history/2")["attributes"]["rlvault_commit"] == old
    read = spec_read(root)
    np.testing.assert_array_equal(read.data["x"][:, :5], first.data["x"])
    np.testing.assert_array_equal(read.data["x"][:, 5:], block["x"])


# ======================================================================= 5: datasets
def test_a_dataset_is_laid_out_as_section_5_says(dataset: tuple[Path, dict[str, Any]]) -> None:
    root, written = dataset
    doc = read_json(root / "zarr.json")
    assert set(doc) == {"zarr_format", "node_type", "attributes"}
    assert set(doc["attributes"]) == {"rlvault_dataset"}
    ds = doc["attributes"]["rlvault_dataset"]
    assert set(ds) == {"format", "template"}
    assert ds["format"] == 1
    template = ds["template"]
    assert template["digest"] == spec_digest(template)
    assert sorted(os.listdir(root)) == ["catalog", "shards", "zarr.json"]
    assert sorted(os.listdir(root / "shards")) == ["alpha", "beta"]  # no shards/zarr.json
    alpha = read_json(root / "shards/alpha/zarr.json")["attributes"]["rlvault"]
    assert alpha == template  # created and digest included
    beta = read_json(root / "shards/beta/zarr.json")["attributes"]["rlvault"]
    assert beta["rows"] == 1
    assert beta["digest"] == spec_digest(beta)
    expected = json.loads(json.dumps(template))
    expected["rows"] = 1
    for leaf in expected["leaves"]:
        leaf["chunk"][0] = min(leaf["chunk"][0], 1)
    assert {k: v for k, v in beta.items() if k != "digest"} == {
        k: v for k, v in expected.items() if k != "digest"
    }
    # created again with the same structure: opened, the root never rewritten; another: refused
    raw = (root / "zarr.json").read_bytes()
    example = {"obs": np.zeros(2, np.float32), "done": np.zeros((), bool)}
    Dataset.create(str(root), example, rows=2, done_leaf="done", metadata={"d": 1}, exist_ok=True)
    with pytest.raises(vault.VaultError):
        Dataset.create(str(root), {"obs": np.zeros(3, np.float32)}, rows=2, exist_ok=True)
    assert (root / "zarr.json").read_bytes() == raw
    for name, data in written.items():
        read = spec_read(root / "shards" / name)
        for key, values in data.items():
            np.testing.assert_array_equal(read.data[key], values)
        assert read.episodes is not None
        # no reward leaf: the stored returns are 0
        assert not read.episodes["return"][read.episodes["complete"]].any()


def test_the_catalog_is_the_frame_of_section_5_3(dataset: tuple[Path, dict[str, Any]]) -> None:
    import zarr

    root, _written = dataset
    raw = (root / "catalog").read_bytes()
    assert raw[:8] == b"RLVCAT01"
    size = int.from_bytes(raw[8:16], "little")
    assert crc32c(raw[:-4]) == int.from_bytes(raw[-4:], "little")
    header = json.loads(raw[16 : 16 + size].decode("utf-8"))
    assert set(header) == {"format", "dataset", "manifests", "shards"}
    template = read_json(root / "zarr.json")["attributes"]["rlvault_dataset"]["template"]
    assert header["format"] == 1
    assert header["dataset"] == template["digest"]
    texts = {(root / "shards" / n / "zarr.json").read_text() for n in ("alpha", "beta")}
    assert set(header["manifests"]) == texts
    assert len(header["manifests"]) == 2
    bounds, returns = [], []
    for row in header["shards"]:
        name, manifest, commit, length, cid, indexed, kept = row
        shard = root / "shards" / name
        commit_raw = (shard / "commit/zarr.json").read_bytes()
        record = json.loads(commit_raw)["attributes"]["rlvault_commit"]
        assert header["manifests"][manifest] == (shard / "zarr.json").read_text()
        assert commit == hashlib.sha256(commit_raw).hexdigest()[:32]
        assert length == record["committed_length"] == 7
        assert cid == f"{record['seq']}-{record['uid']}"
        assert indexed == record["episodes"]["count"]
        assert kept is True
        store = zarr.storage.LocalStore(shard, read_only=True)
        bounds.append(np.asarray(zarr.open_array(store=store, path="episodes/bounds")[:indexed]))
        returns.append(np.asarray(zarr.open_array(store=store, path="episodes/returns")[:indexed]))
    assert sorted(r[0] for r in header["shards"]) == ["alpha", "beta"]
    n = sum(len(b) for b in bounds)
    columns = raw[16 + size : -4]
    assert len(columns) == 40 * n
    np.testing.assert_array_equal(
        np.frombuffer(columns[: 32 * n], "<i8").reshape(n, 4), np.concatenate(bounds)
    )
    np.testing.assert_array_equal(np.frombuffer(columns[32 * n :], "<f8"), np.concatenate(returns))


def test_a_shard_without_an_episode_index_and_a_default_name(tmp_path: Path) -> None:
    """5.2: the default name ``<host>-<pid>-<8 hex>``; 5.3: ``indexed episodes`` -1 and no
    table; 3: no episodes/ folder without an index."""
    root = tmp_path / "ds"
    ds = Dataset.create(str(root), {"x": np.zeros((), np.float32)}, rows=2)
    with ds.shard() as w:
        w.append({"x": np.ones((2, 3), np.float32)})
    [name] = os.listdir(root / "shards")
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())
    assert re.fullmatch(rf"{re.escape(host)}-{os.getpid()}-[0-9a-f]{{8}}", name), name
    assert not (root / "shards" / name / "episodes").exists()
    raw = (root / "catalog").read_bytes()
    size = int.from_bytes(raw[8:16], "little")
    header = json.loads(raw[16 : 16 + size])
    [row] = header["shards"]
    assert row[0] == name
    assert row[5] == -1
    assert row[6] is False
    assert len(raw) == 16 + size + 4  # no columns


def test_a_reader_writes_the_catalog_only_when_opened_to_write_it(tmp_path: Path) -> None:
    """5.3: a reader writes the catalog only when opened with ``write_catalog=True`` (off by
    default: opening and reading a dataset writes nothing), is not pinned at a tag and has at
    least 8 shards; with no valid catalog it then writes one entering every shard."""
    root = tmp_path / "ds"
    catalog = root / "catalog"
    example = {"x": np.zeros((), np.float32), "done": np.zeros((), bool)}
    ds = Dataset.create(str(root), example, rows=1, done_leaf="done")
    step = {"x": np.ones((1, 2), np.float32), "done": np.array([[False, True]])}

    def add_shard(name: str) -> None:
        with ds.shard(name) as w:
            w.append(step)

    def read(**open_args: Any) -> None:
        reader = Dataset.open(str(root), **open_args)
        try:
            reader.episodes()  # a table built: the other time a reader may write it
        finally:
            reader.close()

    for i in range(7):
        add_shard(f"s{i}")
    catalog.unlink()  # (each shard's writer wrote it as it closed)
    read(write_catalog=True)
    assert not catalog.exists()  # 7 shards: fewer than 8
    add_shard("s7")
    with Dataset.open(str(root)) as tagger:
        tagger.tag("t")
    catalog.unlink(missing_ok=True)  # every shard now missing from it
    read()
    assert not catalog.exists()  # the default: a reader writes nothing
    read(at="t", write_catalog=True)
    assert not catalog.exists()  # pinned at a tag
    read(write_catalog=True)
    raw = catalog.read_bytes()  # opened to write it, 8 shards, none in a catalog: written
    assert raw[:8] == b"RLVCAT01"
    assert crc32c(raw[:-4]) == int.from_bytes(raw[-4:], "little")
    size = int.from_bytes(raw[8:16], "little")
    header = json.loads(raw[16 : 16 + size])
    assert sorted(row[0] for row in header["shards"]) == [f"s{i}" for i in range(8)]


# ============================================================ derived vaults (4.4, 4.9)
def test_derived_vaults_follow_the_specification(
    main: Written, derived: Path, tmp_path: Path
) -> None:
    """A slice: flag 2 (start unknown) on an episode running at the slice's start (4.4), the
    seams kept; a combination: a seam ``lost 0`` at each joint (4.3). Both: no
    ``.partial`` folder left, every record well formed, the data as written."""
    start = DERIVED_START
    assert not [p for p in derived.parent.iterdir() if ".partial-" in p.name]
    read = spec_read(derived)
    assert read.record["gaps"] == [{"at": 11 - start, "lost": 0}]
    for path, values in main.data.items():
        np.testing.assert_array_equal(read.data[path], values[[0, 2], start:], err_msg=path)
    assert read.episodes is not None
    done, cut = main.data["done"], main.data["cut"]
    for new_row, row in enumerate((0, 2)):
        first = int(np.flatnonzero(read.episodes["row"] == new_row)[0])
        running = not (done[row, start - 1] or cut[row, start - 1])
        assert read.episodes["start"][first] == 0
        assert bool(read.episodes["start_known"][first]) is not running
    # combine two vaults: one seam per joint
    a = write_vault(tmp_path / "a", {"x": np.zeros((), np.int32)}, 2, [(3, True)], seed=1)
    b = write_vault(tmp_path / "b", {"x": np.zeros((), np.int32)}, 2, [(4, True)], seed=2)
    both = tmp_path / "both"
    vault.combine([str(a.root), str(b.root)], str(both))
    read = spec_read(both)
    assert read.record["gaps"] == [{"at": 3, "lost": 0}]
    np.testing.assert_array_equal(read.data["x"], np.concatenate([a.data["x"], b.data["x"]], 1))
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_a_derived_vault_records_where_it_comes_from_in_derived_from(
    main: Written,
    derived: Path,
    dataset: tuple[Path, dict[str, Any]],
    tmp_path: Path,
) -> None:
    """4.1.1: a derived vault has its source's ``user_metadata`` with ``derived_from`` set
    (``source``: the source's absolute location, ``op``, and ``start``, ``shard``, ``count``,
    ``shards`` by operation); a source's own ``derived_from`` nested inside, the latest
    operation outermost; every other key the source's, unchanged."""

    def metadata(root: Path) -> dict[str, Any]:
        return read_json(root / "zarr.json")["attributes"]["rlvault"]["user_metadata"]

    def split(root: Path, source: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        """(derived_from without its source, the other keys), its source checked."""
        m = metadata(root)
        record = dict(m.pop("derived_from"))
        where = Path(record.pop("source"))
        assert where.is_absolute(), where
        assert where.resolve() == source.resolve(), (where, source)
        return record, m

    given = {"env": "CartPole-v1", "n": 1, "x": 1.0}
    sliced, rest = split(derived, main.root)  # derive_slice of a vault
    main_length = Vault.open(str(main.root)).committed_length
    assert sliced == {"op": "slice", "start": DERIVED_START, "stop": main_length, "rows": [0, 2]}
    assert rest == given
    assert type(rest["x"]) is float
    # derive_episodes of it: its own record nested inside, the chain kept whole
    src = Vault.open(str(derived))
    table = src.episodes()
    src.close()
    picked = tmp_path / "episodes"
    vault.derive_episodes(str(derived), str(picked), table)
    record, rest = split(picked, derived)
    assert record == {"op": "episodes", "count": len(table),
                      "derived_from": metadata(derived)["derived_from"]}  # fmt: skip
    assert rest == given
    # combine (of it, twice): the first source's metadata, the vaults combined
    both = tmp_path / "both"
    vault.combine([str(picked), str(picked)], str(both))
    record, rest = split(both, picked)
    chain = {"source": str(picked.resolve()), "derived_from": metadata(picked)["derived_from"]}
    assert record == {"op": "combine", "count": 2, "sources": [chain, chain],
                      "derived_from": metadata(picked)["derived_from"]}  # fmt: skip
    assert rest == given
    assert record["derived_from"]["derived_from"]["op"] == "slice"  # three operations, nested
    # a user's own derived_from: replaced, and nested inside as if rlvault had written it
    mine = tmp_path / "mine"
    v = Vault.create(str(mine), {"x": np.zeros((), np.float32)}, rows=1,
                     metadata={"derived_from": "by hand", "k": [1]})  # fmt: skip
    v.append({"x": np.zeros((1, 3), np.float32)})
    v.close()
    vault.derive_slice(str(mine), str(tmp_path / "mine-slice"), start=1)
    record, rest = split(tmp_path / "mine-slice", mine)
    assert record == {"op": "slice", "start": 1, "stop": 3, "rows": [0], "derived_from": "by hand"}
    assert rest == {"k": [1]}
    # a dataset: derive_slice names each shard (5.2: the template kept), derive_episodes the
    # shards the episodes came from, its source the first shard
    ds_root, _written = dataset
    source = Dataset.open(str(ds_root))
    vault.derive_slice(source, str(tmp_path / "ds-slice"), start=1)
    template = read_json(ds_root / "zarr.json")["attributes"]["rlvault_dataset"]["template"]
    kept = read_json(tmp_path / "ds-slice" / "zarr.json")["attributes"]["rlvault_dataset"]
    assert kept["template"] == template
    for name in ("alpha", "beta"):
        record, rest = split(tmp_path / "ds-slice" / "shards" / name, ds_root / "shards" / name)
        stop = source.vault(name).committed_length
        rows = list(range(source.vault(name).rows))
        assert record == {"op": "slice", "start": 1, "stop": stop, "rows": rows, "shard": name}
        assert rest == {"d": 1}
    table = source.episodes()
    vault.derive_episodes(source, str(tmp_path / "ds-episodes"), table)
    source.close()
    record, rest = split(tmp_path / "ds-episodes", ds_root / "shards" / "alpha")
    assert record == {"op": "episodes", "count": len(table), "shards": 2}
    assert rest == {"d": 1}


# ==================================================== 2: every key of every JSON record
CODEC_KEYS = {"name": None, "configuration": None}
SPEC_KEYS: dict[str, Any] = {
    # section 4.1.1, 4.1.3, 4.1.4 (structure nodes: 4.1.2, checked apart)
    "manifest": {
        "format_version": None, "rlvault_version": None, "created": None, "rows": None,
        "structure": "node", "user_metadata": "any", "fill_chunks_stored": None,
        "dimension_names": None, "digest": None,
        "episodes": {"done": None, "truncated": None, "reward": None},
        "leaves": [{"name": None, "shape": None, "dtype": None, "chunk": None,
                    "codecs": [{"name": None, "configuration": {
                        "endian": None, "level": None, "checksum": None, "cname": None,
                        "clevel": None, "shuffle": None, "blocksize": None}}]}],
    },
    # section 4.3 (and its tables: seams, edges, the kept tags; 4.4: episodes)
    "record": {
        "committed_length": None, "source_counter": None, "seq": None, "uid": None,
        "digest": None, "fence": None, "gaps": [{"at": None, "lost": None}],
        "episodes": {"count": None, "open": {"start": None, "return": None, "flags": None}},
        "edges": {"*": {"from": None, "crc": None, "tail": None}},
        "tags": {"*": {"from": None, "tags": None}},
    },
    # section 4.2 (4.4: the index's attributes.fields; 8.3: rlvault_writer)
    "array": {
        "zarr_format": None, "node_type": None, "shape": None, "data_type": None,
        "chunk_grid": {"name": None, "configuration": {"chunk_shape": None}},
        "chunk_key_encoding": {"name": None, "configuration": {"separator": None}},
        "fill_value": None, "dimension_names": None,
        "codecs": [{"name": None, "configuration": {
            "endian": None, "level": None, "checksum": None, "cname": None, "clevel": None,
            "shuffle": None, "blocksize": None, "typesize": None}}],
        "attributes": {"fields": None, "rlvault_writer": None},
    },
    "tag": {"commit": None, "committed_length": None, "created": None},  # 4.7
    "writer": {"pid": None, "host": None, "thread": None, "since": None},  # 4.8.1
    "catalog": {"format": None, "dataset": None, "manifests": None, "shards": None},  # 5.3
}  # fmt: skip


def undocumented(doc: Any, spec: Any, path: str) -> list[str]:
    """Key paths of ``doc`` that ``spec`` (a nesting of documented keys) does not name."""
    if spec == "any" or spec is None:
        return []
    if spec == "node":
        return node_keys(doc, path)
    if isinstance(spec, list):
        return [p for i, x in enumerate(doc) for p in undocumented(x, spec[0], f"{path}[{i}]")]
    out = []
    for key, value in doc.items():
        sub = spec.get(key, spec.get("*", KeyError))
        if sub is KeyError:
            out.append(f"{path}.{key}")
        else:
            out += undocumented(value, sub, f"{path}.{key}")
    return out


def node_keys(node: dict[str, Any], path: str) -> list[str]:
    """Section 4.1.2's table: the keys each kind of node has."""
    named = {"kind", "class", "fields", "children"}
    allowed = {
        "leaf": {"kind"}, "none": {"kind"}, "dict": {"kind", "keys", "children"},
        "namedtuple": named, "dataclass": named,
        "tuple": {"kind", "children"}, "list": {"kind", "children"},
    }[node["kind"]]  # fmt: skip
    out = [f"{path}.{k}" for k in node if k not in allowed]
    for i, child in enumerate(node.get("children", [])):
        out += node_keys(child, f"{path}.children[{i}]")
    return out


def group_keys(doc: dict[str, Any], attributes: dict[str, Any], path: str) -> list[str]:
    """A group's keys: zarr_format, node_type and the documented attributes."""
    out = [f"{path}.{k}" for k in doc if k not in ("zarr_format", "node_type", "attributes")]
    for name, value in doc.get("attributes", {}).items():
        if name not in attributes:
            out.append(f"{path}.attributes.{name}")
        else:
            out += undocumented(value, attributes[name], f"{path}.attributes.{name}")
    return out


def json_key_problems(root: Path, files: dict[str, Path]) -> list[str]:
    out = []
    for key, path in sorted(files.items()):
        rel = key
        if re.search(r"/c(/\d+)+$", key) or key.endswith("catalog"):
            continue
        doc = read_json(path)
        where = str(Path(root.name) / key)
        if rel.endswith("zarr.json") and doc.get("node_type") == "array":
            out += undocumented(doc, SPEC_KEYS["array"], where)
        elif rel.endswith("commit/zarr.json") or re.search(r"history/\d+$", rel):
            out += group_keys(doc, {"rlvault_commit": SPEC_KEYS["record"]}, where)
        elif re.search(r"refs/[^/]+$", rel) and not rel.endswith("zarr.json"):
            out += undocumented(doc, SPEC_KEYS["tag"], where)
        elif rel.endswith("lock/zarr.json"):
            out += group_keys(doc, {"writer": SPEC_KEYS["writer"]}, where)
        elif rel.endswith("trash/zarr.json"):
            out += group_keys(doc, {"rlvault": None}, where)
        elif "rlvault" in doc.get("attributes", {}):
            out += group_keys(doc, {"rlvault": SPEC_KEYS["manifest"]}, where)
        elif "rlvault_dataset" in doc.get("attributes", {}):
            spec = {"rlvault_dataset": {"format": None, "template": SPEC_KEYS["manifest"]}}
            out += group_keys(doc, spec, where)
        else:
            out += group_keys(doc, {}, where)  # an empty group
    return out


def test_every_key_of_every_json_record_is_documented(
    main: Written, flushed: Written, dataset: tuple[Path, dict[str, Any]], derived: Path
) -> None:
    """From the prose of format.md (not the schemas): every key of every JSON object on disk
    is one the specification documents."""
    roots = [main.root, flushed.root, dataset[0], derived]
    problems = []
    for root in roots:
        problems += json_key_problems(root, files_under(root))
    raw = (dataset[0] / "catalog").read_bytes()
    size = int.from_bytes(raw[8:16], "little")
    header = json.loads(raw[16 : 16 + size])
    problems += undocumented(header, SPEC_KEYS["catalog"], "catalog header")
    assert not problems, problems


def schema_validator(name: str) -> Any:
    jsonschema = pytest.importorskip("jsonschema")
    referencing = pytest.importorskip("referencing")
    resources = [
        (p.as_uri(), referencing.Resource.from_contents(json.loads(p.read_text())))
        for p in sorted(SCHEMAS.glob("*.schema.json"))
    ]
    registry = referencing.Registry().with_resources(resources)
    schema = {"$ref": (SCHEMAS / f"{name}.schema.json").as_uri()}
    return jsonschema.Draft202012Validator(schema, registry=registry)


def schema_name(key: str, doc: Any) -> str | None:
    if re.search(r"/c(/\d+)+$", key) or key.endswith("catalog"):
        return None
    if key.startswith("tags/") and key.endswith("zarr.json"):
        return "place-tag-array"
    if key in ("episodes/bounds/zarr.json", "episodes/returns/zarr.json"):
        return "index-array"
    if key.endswith("zarr.json") and doc.get("node_type") == "array":
        return "leaf-array"
    if key == "commit/zarr.json" or re.fullmatch(r"history/\d+", key):
        return "commit-group"
    if key.startswith("refs/") and key != "refs/zarr.json":
        return "tag"
    if key == "lock/zarr.json":
        return "lock-group"
    if key == "trash/zarr.json":
        return "trash-group"
    if key == "zarr.json":
        return "dataset-root" if "rlvault_dataset" in doc.get("attributes", {}) else "vault-root"
    return "group"


def test_every_json_record_validates_against_its_schema(
    main: Written, flushed: Written, dataset: tuple[Path, dict[str, Any]], derived: Path
) -> None:
    """The schemas of docs/schemas/ on this file's vaults: those of 4.1 to 4.9, a dataset
    and its shards, a derived vault."""
    roots = [main.root, flushed.root, dataset[0] / "shards" / "alpha",
             dataset[0] / "shards" / "beta", derived]  # fmt: skip
    validators: dict[str, Any] = {}
    failures, seen = [], set()
    for root in roots:
        for key, path in files_under(root).items():
            doc = None if re.search(r"/c(/\d+)+$", key) else read_json(path)
            name = schema_name(key, doc) if doc is not None else None
            if name is None:
                continue
            seen.add(name)
            if name not in validators:
                validators[name] = schema_validator(name)
            failures += [
                f"{root.name}/{key}: {e.message}" for e in validators[name].iter_errors(doc)
            ]
    root_doc = read_json(dataset[0] / "zarr.json")
    failures += [e.message for e in schema_validator("dataset-root").iter_errors(root_doc)]
    assert not failures, failures[:10]
    assert seen >= {"vault-root", "commit-group", "leaf-array", "index-array", "place-tag-array",
                    "tag", "lock-group", "trash-group", "group"}  # fmt: skip


# ================================================== 2 and 3: zarr-python and the hierarchy
def test_zarr_python_lists_and_reads_every_leaf_and_index_array(main: Written) -> None:
    """Section 2: zarr-python opens the vault as a group, lists its arrays and reads them
    (up to L: the arrays are trimmed at close)."""
    import zarr

    group = zarr.open_group(zarr.storage.LocalStore(main.root, read_only=True), mode="r")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # see the next test
        members = dict(group.members(max_depth=None))
    arrays = {k for k, node in members.items() if isinstance(node, zarr.Array)}
    expected = {f"experience/{p}" for p in main.data} | {"episodes/bounds", "episodes/returns"}
    assert arrays == expected
    for path, values in main.data.items():
        np.testing.assert_array_equal(members[f"experience/{path}"][...], values, err_msg=path)


def zarr_members(root: Path) -> tuple[dict[str, Any], list[warnings.WarningMessage]]:
    """zarr-python's listing of the whole hierarchy at ``root``, and the warnings it gave."""
    import zarr

    group = zarr.open_group(zarr.storage.LocalStore(root, read_only=True), mode="r")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        members = dict(group.members(max_depth=None))
    return members, caught


UNRECOGNIZED = re.compile(r"Object at (.+) is not recognized as a component of a Zarr hierarchy\.")


def test_zarr_python_warns_about_the_plain_objects_section_2_names(
    main: Written, flushed: Written
) -> None:
    """Section 2: zarr-python warns once per name that is neither an array nor a group
    (``ZarrUserWarning``, the last part of the key): ``history/<seq>``, ``refs/<name>``,
    ``tags``; it leaves them out of the members and lists every array all the same. At rest
    trash/ and lock/ hold only their zarr.json, so nothing else is warned about."""
    import zarr

    for written, names in (
        (main, [*map(str, range(len(main.lengths) - 1)), "first"]),  # history/0..3, refs/first
        (flushed, [*map(str, range(len(flushed.lengths) - 1)), "tags"]),  # history/0..1, tags
    ):
        members, caught = zarr_members(written.root)
        assert {w.category.__name__ for w in caught} == {"ZarrUserWarning"}
        said = [UNRECOGNIZED.fullmatch(str(w.message)) for w in caught]
        assert all(said), [str(w.message) for w in caught]
        assert sorted(m.group(1) for m in said if m) == sorted(names)  # once per name
        assert not [k for k in members if k.startswith(("tags", "refs/", "history/"))]
        arrays = {k for k, node in members.items() if isinstance(node, zarr.Array)}
        assert {f"experience/{p}" for p in written.data} <= arrays


def test_every_folder_but_tags_has_a_zarr_json(flushed: Written) -> None:
    """Sections 2 and 3: every folder of the vault (but the chunk folders) has a zarr.json,
    trash/ included; ``tags/`` and the folders under it have none, except each place-tag
    array's own: they are not part of the Zarr hierarchy, so zarr-python does not list the
    place-tag arrays, and opens one by its key."""
    import zarr

    root = flushed.root
    folders = {p.parent for p in files_under(root).values()}
    for folder in sorted(folders):
        rel = folder.relative_to(root).as_posix()
        if re.search(r"/c(/\d+)*$", rel) or rel == "tags" or rel.startswith("tags/"):
            continue
        assert (folder / "zarr.json").exists(), rel
    assert (root / "trash" / "zarr.json").exists()
    for parent in (root / "tags", root / "tags" / "experience"):
        assert parent.is_dir(), parent
        assert not (parent / "zarr.json").exists(), parent
    assert (root / "tags" / "experience" / "x" / "zarr.json").is_file()
    members, _caught = zarr_members(root)
    assert not [k for k in members if k.startswith("tags")]
    store = zarr.storage.LocalStore(root, read_only=True)
    tags = zarr.open_array(store=store, path="tags/experience/x", mode="r")
    assert tags.dtype == np.uint32
    x = read_json(root / "zarr.json")["attributes"]["rlvault"]["leaves"][0]
    assert tags.shape[0] == -(-2 // x["chunk"][0])  # row blocks


# ======================================================= 12: a reader from the page alone
def test_a_reader_written_from_the_specification_reads_what_was_written(main: Written) -> None:
    """At every commit (by number, by id and by the tag), the data, seams and episode table
    read by this file's reader are exactly those written; its fingerprint (6.4) is rlvault's."""
    root = main.root
    m = read_json(root / "zarr.json")["attributes"]["rlvault"]
    for seq, length in enumerate(main.lengths):
        record = json.loads(main.records[seq])["attributes"]["rlvault_commit"]
        for pin in (seq, f"{seq}-{record['uid']}"):
            read = spec_read(root, at=pin)
            assert read.record["committed_length"] == length
            for path, values in main.data.items():
                assert read.data[path].shape == (ROWS, length, *values.shape[2:])
                np.testing.assert_array_equal(read.data[path], values[:, :length], err_msg=path)
            ref = main.episodes[seq]
            assert read.episodes is not None
            n = len(ref["bounds"])
            np.testing.assert_array_equal(read.episodes["start"][:n], ref["bounds"][:, 1])
            np.testing.assert_array_equal(read.episodes["length"][:n], ref["bounds"][:, 2])
            np.testing.assert_array_equal(read.episodes["return"][:n], ref["returns"])
    tagged = spec_read(root, at="first")
    assert tagged.record["committed_length"] == main.lengths[MAIN_TAG_AFTER]
    latest = spec_read(root)
    ref = main.episodes[-1]
    open_rows = [r for r in range(ROWS) if ref["open"]["start"][r] < main.lengths[-1]]
    assert latest.episodes is not None
    assert len(latest.episodes["row"]) == len(ref["bounds"]) + len(open_rows)
    names = [leaf["name"] for leaf in m["leaves"]]
    assert list(latest.data) == names
    assert spec_fingerprint(root, latest) == Vault.open(str(root)).fingerprint()
    pinned = spec_read(root, at=2)
    assert spec_fingerprint(root, pinned) == Vault.open(str(root), at=2).fingerprint()


def test_the_reader_reads_a_vault_whose_tags_are_in_the_place_tag_array(flushed: Written) -> None:
    read = spec_read(flushed.root)
    np.testing.assert_array_equal(read.data["x"], flushed.data["x"])
    for seq in range(len(flushed.lengths)):
        read = spec_read(flushed.root, at=seq)
        np.testing.assert_array_equal(read.data["x"], flushed.data["x"][:, : flushed.lengths[seq]])
    assert spec_fingerprint(flushed.root, read) == Vault.open(str(flushed.root)).fingerprint()


def test_the_reader_refuses_a_chunk_moved_to_another_place(
    flushed: Written, tmp_path: Path
) -> None:
    """Its checks are those of the specification: a complete chunk copied over another one
    (tag in the array, 4.5), and one in the record's kept range, are refused."""
    import shutil

    for a, b in (("0/3/0", "0/4/0"), ("1/71/1", "1/72/1")):
        copy = tmp_path / b.replace("/", "-")
        shutil.copytree(flushed.root, copy)
        shutil.copy(copy / "experience/x/c" / a, copy / "experience/x/c" / b)
        with pytest.raises(AssertionError, match="not written there"):
            spec_read(copy)
        with pytest.raises(vault.VaultError):
            Vault.open(str(copy)).read_numpy()
