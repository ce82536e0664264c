"""Pytree structure <-> JSON, and leaf paths <-> Zarr node names that cannot collide.

Containers: dict (string keys), tuple, list, NamedTuple, dataclasses (chex/flax structs
included) and ``None``. The JSON records the container types (with the importable class of
NamedTuples and dataclasses) so that reads give back what was written; a class that can no
longer be imported comes back as a dict of its fields.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from vault._errors import VaultStructureError

GROUP_FILE = "zarr.json"  # a Zarr group's metadata file: a node of that name would be it
TEMP_SUFFIX = ".__lock"  # TensorStore's temporary files; it refuses path parts ending so
MAX_NAME_BYTES = 255  # the longest file name of common file systems (ext4, APFS, NTFS)


def escape(name: str) -> str:
    """A Zarr-safe node name, injective: ``quote`` plus rules for ``''``, dots, ``__``, and the
    names the store uses itself (``zarr.json``, ``*.__lock``). Every rule writes an escape
    (``%2E``, ``%5F``, ``%7A``, ``%5A``) that ``quote`` never writes, since it leaves ``.``,
    ``_``, ``z`` and ``Z`` alone."""
    if name == "":
        return "%-"
    out = quote(name, safe="")
    if out.startswith((".", "__")):
        out = "%2E" + out[1:] if out[0] == "." else "%5F" + out[1:]
    if out.lower() == GROUP_FILE:  # any case: case-insensitive file systems (macOS, Windows)
        out = f"%{ord(out[0]):02X}" + out[1:]
    if out.lower().endswith(TEMP_SUFFIX):
        out = out[: -len(TEMP_SUFFIX)] + "%2E" + TEMP_SUFFIX[1:]
    return out


def name_problems(names: list[str]) -> list[str]:
    """Leaf paths whose node names are longer than a file name can be (each one named)."""
    out = []
    for name in names:
        parts = name.split("/")
        size = max(len(part.encode()) for part in parts)
        if size > MAX_NAME_BYTES:
            shown = "/".join(p if len(p) <= 40 else f"{p[:20]}...{p[-8:]}" for p in parts)
            out.append(
                f"experience/{shown}: a node name of {size} bytes (escaped); a file name holds "
                f"at most {MAX_NAME_BYTES}: use a shorter dict key"
            )
    return out


def _class_ref(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def describe(tree: Any, path: str = "") -> dict[str, Any]:
    """The JSON description of ``tree``'s containers (leaves are anything array-like)."""
    where = path or "<root>"
    if tree is None:
        return {"kind": "none"}
    if isinstance(tree, dict):
        bad = [k for k in tree if not isinstance(k, str)]
        if bad:
            raise VaultStructureError(
                f"dict keys must be strings to be stored; at {where} got {bad!r}"
            )
        keys = sorted(tree)
        return {
            "kind": "dict",
            "keys": keys,
            "children": [describe(tree[k], f"{path}/{escape(k)}") for k in keys],
        }
    if _is_namedtuple(tree):
        fields = list(type(tree)._fields)
        return {
            "kind": "namedtuple",
            "class": _class_ref(tree),
            "fields": fields,
            "children": [describe(getattr(tree, f), f"{path}/{f}") for f in fields],
        }
    if isinstance(tree, (tuple, list)):
        return {
            "kind": "tuple" if isinstance(tree, tuple) else "list",
            "children": [describe(c, f"{path}/{i}") for i, c in enumerate(tree)],
        }
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        fields = [f.name for f in dataclasses.fields(tree)]
        return {
            "kind": "dataclass",
            "class": _class_ref(tree),
            "fields": fields,
            "children": [describe(getattr(tree, f), f"{path}/{f}") for f in fields],
        }
    if hasattr(tree, "shape") and hasattr(tree, "dtype"):
        return {"kind": "leaf"}
    if isinstance(tree, (bool, int, float)):
        return {"kind": "leaf"}
    raise VaultStructureError(
        f"cannot store a {type(tree).__name__} at {where}: use dicts, tuples, lists, "
        "NamedTuples or dataclasses of arrays"
    )


def _names(node: dict[str, Any]) -> list[str]:
    kind = node["kind"]
    if kind == "dict":
        return [escape(k) for k in node["keys"]]
    if kind in ("namedtuple", "dataclass"):
        return list(node["fields"])
    return [str(i) for i in range(len(node.get("children", [])))]


def leaf_names(node: dict[str, Any], prefix: str = "") -> list[str]:
    """Zarr paths of every leaf, in the order ``leaves(tree)`` yields them."""
    if node["kind"] == "leaf":
        return [prefix]
    out: list[str] = []
    for name, child in zip(_names(node), node.get("children", []), strict=True):
        out += leaf_names(child, f"{prefix}/{name}" if prefix else name)
    return out


def leaves(tree: Any, node: dict[str, Any]) -> list[Any]:
    """The leaves of ``tree`` in ``node``'s order (``tree`` must have that structure)."""
    kind = node["kind"]
    if kind == "leaf":
        return [tree]
    if kind == "none":
        return []
    if kind == "dict":
        children = [tree[k] for k in node["keys"]]
    elif kind in ("namedtuple", "dataclass"):
        children = [getattr(tree, f) for f in node["fields"]]
    else:
        children = list(tree)
    out: list[Any] = []
    for child, sub in zip(children, node["children"], strict=True):
        out += leaves(child, sub)
    return out


def _import(ref: str) -> Any:
    module, _, qual = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def build(node: dict[str, Any], values: list[Any]) -> Any:
    """Rebuild a tree of ``node``'s structure from ``values`` (consumed in leaf order)."""
    return _build(node, iter(values))


def _build(n: dict[str, Any], it: Iterator[Any]) -> Any:
    # A module-level recursion (not a closure): a recursive closure is a reference cycle that
    # would keep ``values``, and so every array just read, alive until the cyclic GC runs.
    kind = n["kind"]
    if kind == "leaf":
        return next(it)
    if kind == "none":
        return None
    children = [_build(c, it) for c in n["children"]]
    if kind == "dict":
        return dict(zip(n["keys"], children, strict=True))
    if kind == "tuple":
        return tuple(children)
    if kind == "list":
        return children
    fields = dict(zip(n["fields"], children, strict=True))
    try:
        return _import(n["class"])(**fields)
    except (ImportError, AttributeError, TypeError, ValueError):  # class moved or changed:
        # give the fields back as a dict rather than fail the read
        return fields
