"""The manifest's schema: every way a manifest departs from what :meth:`Vault.create` writes.

Used by ``Vault.open`` (a malformed manifest is :class:`VaultCorruptError`, never a
``KeyError``) and by :func:`vault._verify.verify`.
"""

from __future__ import annotations

from typing import Any, TypeGuard

import numpy as np

from vault import _structure

FORMAT_VERSION = 2  # 2: optional episode index (episodes/); version 1 vaults still open
FILL_CHUNKS_KEY = "fill_chunks_stored"
"""Manifest flag: the writer stores every chunk, even one equal to the fill value, so a chunk
file missing inside the committed range is a lost chunk. Without it TensorStore leaves out
chunks that equal the fill value, and a missing chunk can only be reported as a warning."""

_KINDS = {"dict", "namedtuple", "dataclass", "tuple", "list", "leaf", "none"}


def is_int(value: Any, minimum: int) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def is_int_list(value: Any, minimum: int) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(is_int(x, minimum) for x in value)


def manifest_problems(manifest: Any) -> list[str]:
    """Every way ``manifest`` (the ``rlvault`` attributes of the root ``zarr.json``) departs
    from the schema that :meth:`Vault.create` writes."""
    if not isinstance(manifest, dict):
        return [f"the 'rlvault' attributes must be an object, got {type(manifest).__name__}"]
    out = []
    version = manifest.get("format_version")
    if not is_int(version, 1) or version > FORMAT_VERSION:
        out.append(f"format_version {version!r} is not one of 1..{FORMAT_VERSION}")
    if not is_int(manifest.get("rows"), 1):
        out.append(f"rows must be an int >= 1, got {manifest.get('rows')!r}")
    for key in ("rlvault_version", "created"):
        if not isinstance(manifest.get(key), str):
            out.append(f"{key} must be a string, got {manifest.get(key)!r}")
    if not isinstance(manifest.get("user_metadata", {}), dict):
        out.append("user_metadata must be an object")
    structure = manifest.get("structure")
    node_problems = _node_problems(structure, "structure")
    out += node_problems
    leaves = manifest.get("leaves")
    if not isinstance(leaves, list):
        return [*out, f"leaves must be a list, got {type(leaves).__name__}"]
    for i, leaf in enumerate(leaves):
        out += [f"leaves[{i}]: {p}" for p in _leaf_problems(leaf)]
    listed = [leaf.get("name") for leaf in leaves if isinstance(leaf, dict)]
    if not node_problems:
        names = _structure.leaf_names(structure)  # type: ignore[arg-type]
        if listed != names:
            out.append(f"leaves {listed} do not match the structure's leaves {names}")
    shapes = {leaf.get("name"): leaf.get("shape") for leaf in leaves if isinstance(leaf, dict)}
    return out + _episodes_config_problems(manifest.get("episodes"), shapes)


def _episodes_config_problems(cfg: Any, shapes: dict[Any, Any]) -> list[str]:
    if cfg is None:
        return []
    if not isinstance(cfg, dict) or not isinstance(cfg.get("done"), str):
        return [f"episodes must name at least a 'done' leaf, got {cfg!r}"]
    out = []
    for role in ("done", "truncated", "reward"):
        name = cfg.get(role)
        if name is None:
            continue
        if name not in shapes:
            out.append(f"episodes.{role} names {name!r}, which is not a leaf")
        elif shapes[name] != []:
            out.append(f"episodes.{role} leaf {name!r} has shape {shapes[name]}, expected []")
    return out


def episode_record_problems(record: Any, rows: int, length: int) -> list[str]:
    if not isinstance(record, dict):
        return [f"the vault keeps an episode index but the record has {record!r} for it"]
    out = []
    if not is_int(record.get("count"), 0):
        out.append(f"episodes.count must be an int >= 0, got {record.get('count')!r}")
    opened = record.get("open")
    columns = ("start", "return", "flags")
    if not isinstance(opened, dict) or not all(
        isinstance(opened.get(k), list) and len(opened[k]) == rows for k in columns
    ):
        return [*out, f"episodes.open must hold {columns} lists of {rows} entries"]
    if not is_int_list(opened["start"], 0) or any(s > length for s in opened["start"]):
        out.append(f"episodes.open.start must be ints in [0, {length}], got {opened['start']}")
    if not is_int_list(opened["flags"], 0):
        out.append(f"episodes.open.flags must be ints >= 0, got {opened['flags']}")
    return out


def _node_problems(node: Any, where: str) -> list[str]:
    if not isinstance(node, dict) or node.get("kind") not in _KINDS:
        kind = node.get("kind") if isinstance(node, dict) else node
        return [f"{where}: unknown node {kind!r}"]
    kind = node["kind"]
    if kind in ("leaf", "none"):
        return []
    children = node.get("children")
    if not isinstance(children, list):
        return [f"{where}: a {kind} node needs a list of children"]
    labels_key = {"dict": "keys", "namedtuple": "fields", "dataclass": "fields"}.get(kind)
    out = []
    if labels_key is not None:
        labels = node.get(labels_key)
        if not isinstance(labels, list) or len(labels) != len(children):
            out.append(f"{where}: {labels_key} must list one name per child")
        elif not all(isinstance(x, str) for x in labels):
            out.append(f"{where}: {labels_key} must be strings")
        if kind != "dict" and not isinstance(node.get("class"), str):
            out.append(f"{where}: a {kind} node needs its 'class'")
    for i, child in enumerate(children):
        out += _node_problems(child, f"{where}.children[{i}]")
    return out


def _leaf_problems(leaf: Any) -> list[str]:
    if not isinstance(leaf, dict):
        return ["must be an object"]
    out = []
    if not isinstance(leaf.get("name"), str):
        out.append(f"name must be a string, got {leaf.get('name')!r}")
    shape = leaf.get("shape")
    if not is_int_list(shape, 0):
        out.append(f"shape must be a list of ints >= 0, got {shape!r}")
    try:
        np.dtype(leaf.get("dtype"))
    except TypeError:
        out.append(f"dtype {leaf.get('dtype')!r} is not a numpy dtype name")
    chunk = leaf.get("chunk")
    if not is_int_list(chunk, 1) or (isinstance(shape, list) and len(chunk) != len(shape) + 2):
        out.append(f"chunk must be [rows, time, *shape] ints >= 1, got {chunk!r}")
    codecs = leaf.get("codecs")
    if not isinstance(codecs, list) or not all(
        isinstance(c, dict) and isinstance(c.get("name"), str) for c in codecs
    ):
        out.append(f"codecs must be a list of {{'name': ...}} objects, got {codecs!r}")
    return out
