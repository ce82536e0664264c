"""The parts of a vault's layout that ``spec_reader.py`` derives from the format specification
(``docs/format.md``): node names and the structure's leaves (§4.1.2), dimension names and codec
chains of the arrays (§4.2), and the chunk grids of places and tags (§4.5).

Like ``spec_reader.py`` it knows the specification and nothing else of rlvault.
"""

from __future__ import annotations

from typing import Any

import numpy as np

INDEX_CHUNK = 8192  # episodes per chunk of the episode index (§4.4)


# ----------------------------------------------------------------------------- structure
def node_names(node: dict[str, Any]) -> list[str]:
    """§4.1.2: the node names of a container's children."""
    kind = node["kind"]
    if kind == "dict":
        return [escape(k) for k in node["keys"]]
    if kind in ("namedtuple", "dataclass"):
        return list(node["fields"])
    return [str(i) for i in range(len(node.get("children", [])))]


def escape(key: str) -> str:
    """§4.1.2: the node name of a dict key."""
    if key == "":
        return "%-"
    out = "".join(
        ch if (ch.isascii() and (ch.isalnum() or ch in "_.-~")) else _percent(ch) for ch in key
    )
    if out.startswith("."):
        out = "%2E" + out[1:]
    elif out.startswith("__"):
        out = "%5F" + out[1:]
    if out.lower() == "zarr.json":
        out = f"%{ord(out[0]):02X}" + out[1:]
    if out.lower().endswith(".__lock"):
        out = out[: -len(".__lock")] + "%2E__lock"
    return out


def _percent(ch: str) -> str:
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8"))


def leaf_names(node: dict[str, Any], prefix: str = "") -> list[str]:
    if node["kind"] == "leaf":
        return [prefix]
    out: list[str] = []
    for name, child in zip(node_names(node), node.get("children", []), strict=True):
        out += leaf_names(child, f"{prefix}/{name}" if prefix else name)
    return out


def build_tree(node: dict[str, Any], values: list[Any]) -> Any:
    """The leaves ``values`` (in leaf order) in the structure's containers (named tuples and
    dataclasses as dicts of their fields)."""
    it = iter(values)

    def build(n: dict[str, Any]) -> Any:
        kind = n["kind"]
        if kind == "leaf":
            return next(it)
        if kind == "none":
            return None
        children = [build(c) for c in n["children"]]
        if kind == "tuple":
            return tuple(children)
        if kind == "list":
            return children
        labels = n["keys"] if kind == "dict" else n["fields"]
        return dict(zip(labels, children, strict=True))

    return build(node)


# ----------------------------------------------------------------------------- arrays
def dimension_names(leaf: str, rank: int) -> list[str]:
    """§4.2: ``row``, ``time``, then ``<variable>_<i>`` per item axis."""
    variable = ".".join(part.replace(".", "%2E") for part in leaf.split("/"))
    return ["row", "time", *[f"{variable}_{i}" for i in range(rank)]]


def normal_codecs(codecs: list[dict[str, Any]], itemsize: int) -> list[dict[str, Any]]:
    """§4.1.3: a codec chain as the array metadata states it (``bytes`` without configuration
    for one-byte types, ``blosc`` with ``typesize``)."""
    out = []
    for codec in codecs:
        codec = {k: v for k, v in codec.items() if not (k == "configuration" and v == {})}
        if codec["name"] == "bytes" and itemsize == 1:
            codec = {"name": "bytes"}
        if codec["name"] == "blosc":
            codec = {**codec, "configuration": {"typesize": itemsize, **codec["configuration"]}}
        out.append(codec)
    return out


class Grid:
    """How an array is cut along rows, time and item axes; ``bound``: the item chunks of each
    place (row block, time chunk) bound to it, all in format 4, the first before (§4.5)."""

    def __init__(self, key: str, rows: int, block: int | None, step: int, items: list[int]):
        self.key, self.rows, self.row_block, self.step, self.items = key, rows, block, step, items
        self.count = self.bound = int(np.prod(items, dtype=np.int64))

    @property
    def blocks(self) -> int:
        return 1 if self.row_block is None else -(-self.rows // self.row_block)

    def chunk(self, block: int, k: int, i: int = 0) -> str:
        """The key of item chunk ``i`` (its flat index, C order) of place ``(block, k)``."""
        parts = [block] if self.row_block is not None else []
        at = np.unravel_index(i, self.items) if self.items else ()
        return f"{self.key}/c/" + "/".join(map(str, [*parts, k, *map(int, at)]))

    def bound_keys(self, k: int) -> list[str]:
        """The chunks bound to time chunk ``k``'s places: by row block, then item chunk."""
        return [self.chunk(b, k, i) for b in range(self.blocks) for i in range(self.bound)]


def grids(manifest: dict[str, Any]) -> dict[str, Grid]:
    """Every array of the vault by key: leaves in manifest order, then the episode index."""
    out = {}
    for leaf in manifest["leaves"]:
        key, chunk = f"experience/{leaf['name']}", leaf["chunk"]
        items = [-(-n // c) for n, c in zip(leaf["shape"], chunk[2:], strict=True)]
        out[key] = Grid(key, manifest["rows"], chunk[0], chunk[1], items)
        out[key].bound = out[key].bound if manifest["format_version"] >= 4 else 1
    if manifest.get("episodes") is not None:
        out["episodes/bounds"] = Grid("episodes/bounds", 1, None, INDEX_CHUNK, [1])
        out["episodes/returns"] = Grid("episodes/returns", 1, None, INDEX_CHUNK, [])
    return out


def index_metadata(kind: str) -> dict[str, Any]:
    codecs = [{"configuration": {"endian": "little"}, "name": "bytes"}]
    codecs += [{"configuration": {"checksum": False, "level": 3}, "name": "zstd"}]
    bounds, codecs = kind == "bounds", [*codecs, {"name": "crc32c"}]
    return {
        "data_type": "int64" if bounds else "float64",
        "chunk_shape": [INDEX_CHUNK, 4] if bounds else [INDEX_CHUNK],
        "codecs": codecs,
        "fill_value": 0,
        "dimension_names": ["episode", "field"] if bounds else ["episode"],
        "item": [4] if bounds else [],
    }
