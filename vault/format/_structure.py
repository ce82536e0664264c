"""Pytree structure <-> JSON, and leaf paths <-> Zarr node names that cannot collide.

Containers: dict (string keys), tuple, list, NamedTuple, dataclasses (chex/flax structs
included) and ``None``. The JSON records the container types (with the class of NamedTuples
and dataclasses, as ``module:QualName``) so that reads give back what was written. A read
rebuilds such a container with its class only when the reading process has imported the
class's module already and the class still has the recorded fields (:func:`known_class`);
otherwise it comes back as a dict of its fields. Reading never imports a module named by a
vault: that would run code chosen by whoever made the vault.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from vault._errors import VaultStructureError
from vault.format._limits import MAX_STRUCTURE_DEPTH

GROUP_FILE = "zarr.json"  # a Zarr group's metadata file: a node of that name would be it
TEMP_SUFFIX = ".__lock"  # TensorStore's temporary files; it refuses path parts ending so
MAX_NAME_BYTES = 255  # the longest file name of common file systems (ext4, APFS, NTFS)


def escape(name: str) -> str:
    """A Zarr-safe node name: ``quote`` plus rules for ``''``, dots, ``__``, and the names the
    store uses itself (``zarr.json``, ``*.__lock``, that ending written in lower case, so keys
    that differ only in its case share a name: :func:`describe` refuses them). Every rule
    writes an escape
    (``%2E``, ``%5F``, ``%7A``, ``%5A``) that ``quote`` never writes, since it leaves ``.``,
    ``_``, ``z`` and ``Z`` alone."""
    if name == "":
        return "%-"
    out = quote(name, safe="")
    if out.startswith((".", "__")):
        out = "%2E" + out[1:] if out[0] == "." else "%5F" + out[1:]
    if out.lower() == GROUP_FILE:  # any case: case-insensitive file systems (macOS, Windows)
        out = f"%{ord(out[0]):02X}" + out[1:]
    if out.lower().endswith(TEMP_SUFFIX):  # (the ending written in lower case: format 1 on)
        out = out[: -len(TEMP_SUFFIX)] + "%2E" + TEMP_SUFFIX[1:]
    return out


def _same_names(keys: list[str]) -> list[str]:
    """Keys whose node names are the same: only keys that differ in the letter case of a
    ``.__lock`` ending can be (rule 5 writes that ending in lower case)."""
    if not any(k.lower().endswith(TEMP_SUFFIX) for k in keys):
        return []
    by_name: dict[str, list[str]] = {}
    for key in keys:
        by_name.setdefault(escape(key), []).append(key)
    return [key for group in by_name.values() if len(group) > 1 for key in group]


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


class Stored:
    """A tree known by its stored description alone: ``node`` (a manifest's ``structure``) and
    its leaves in that order. :func:`describe` gives ``node`` back and :func:`leaves` the
    values, so a vault's data is copied into another vault with the source's containers even
    where this process has not imported their classes (rebuilt, they would be dicts, whose
    leaves are in another order)."""

    __slots__ = ("node", "values")

    def __init__(self, node: dict[str, Any], values: list[Any]) -> None:
        self.node, self.values = node, values


def describe(tree: Any, path: str = "", depth: int = 0) -> dict[str, Any]:
    """The JSON description of ``tree``'s containers (leaves are anything array-like)."""
    if isinstance(tree, Stored):
        return tree.node
    where = path or "<root>"
    if depth > MAX_STRUCTURE_DEPTH:
        raise VaultStructureError(
            f"containers nested more than {MAX_STRUCTURE_DEPTH} levels deep at {where} (or a "
            "container that holds itself): flatten the structure"
        )
    if tree is None:
        return {"kind": "none"}
    if isinstance(tree, dict):
        bad = [k for k in tree if not isinstance(k, str)]
        if bad:
            raise VaultStructureError(
                f"dict keys must be strings to be stored; at {where} got {bad!r}"
            )
        keys = sorted(tree)
        same = _same_names(keys)
        if same:
            raise VaultStructureError(
                f"dict keys {same} at {where} would be stored under one node name (a key "
                f"ending in {TEMP_SUFFIX!r} keeps that ending in lower case, as "
                "docs/format.md section 4.1.2 says): rename one of them"
            )
        return {
            "kind": "dict",
            "keys": keys,
            "children": [describe(tree[k], f"{path}/{escape(k)}", depth + 1) for k in keys],
        }
    if _is_namedtuple(tree):
        fields = list(type(tree)._fields)
        return {
            "kind": "namedtuple",
            "class": _class_ref(tree),
            "fields": fields,
            "children": [describe(getattr(tree, f), f"{path}/{f}", depth + 1) for f in fields],
        }
    if isinstance(tree, (tuple, list)):
        return {
            "kind": "tuple" if isinstance(tree, tuple) else "list",
            "children": [describe(c, f"{path}/{i}", depth + 1) for i, c in enumerate(tree)],
        }
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        fields = [f.name for f in dataclasses.fields(tree)]
        return {
            "kind": "dataclass",
            "class": _class_ref(tree),
            "fields": fields,
            "children": [describe(getattr(tree, f), f"{path}/{f}", depth + 1) for f in fields],
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
    if isinstance(tree, Stored):
        return list(tree.values)
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


def known_class(ref: str, kind: str, fields: list[str]) -> type | None:
    """The class that ``ref`` (``"module:Qual.Name"``, from a vault's manifest) names, when this
    process has imported its module already and it is what the manifest says: a NamedTuple
    class (``kind`` ``"namedtuple"``) or a dataclass (``"dataclass"``) with exactly ``fields``.
    Else None (the caller gives the fields back as a dict).

    Never imports anything and never calls anything the name reaches: the manifest of a vault
    made by someone else could name any module on ``sys.path`` (a file beside the vault, in
    the working directory) or any callable, and importing it would run its code. Attributes are
    looked up statically (no module ``__getattr__``, no properties)."""
    module_name, _, qual = ref.partition(":")
    obj: Any = sys.modules.get(module_name)
    if obj is None or not qual:
        return None
    for part in qual.split("."):
        try:
            obj = inspect.getattr_static(obj, part)
        except AttributeError:
            return None
    if not isinstance(obj, type):
        return None
    if kind == "namedtuple":
        ok = issubclass(obj, tuple) and list(getattr(obj, "_fields", ())) == fields
    else:
        ok = dataclasses.is_dataclass(obj) and [f.name for f in dataclasses.fields(obj)] == fields
    return obj if ok else None


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
    cls = known_class(n["class"], kind, list(n["fields"]))
    if cls is None:  # not imported here, moved or changed: the fields as a dict
        return fields
    try:
        return cls(**fields)
    except (TypeError, ValueError):  # its constructor refuses these values: a dict
        return fields
