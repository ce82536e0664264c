"""The trees of a Minari conversion: walking the vault's leaves by path, the Gymnasium spaces
they make or must fit, and the checks an export runs before it writes (``_minari.py``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from vault.format._structure import escape


def space_of(tree: Any) -> Any:
    from gymnasium import spaces

    if isinstance(tree, dict):
        return spaces.Dict({k: space_of(v) for k, v in tree.items()})
    if isinstance(tree, (tuple, list)):
        return spaces.Tuple([space_of(v) for v in tree])
    dtype = np.dtype(tree.dtype)
    shape = tuple(tree.shape[2:])
    if dtype.kind == "f":
        return spaces.Box(-np.inf, np.inf, shape, dtype)
    if dtype.kind == "b":  # a Box of bools (MultiBinary holds int8 and has no 0-d form)
        return spaces.Box(0, 1, shape, np.bool_)
    info = np.iinfo(dtype)
    return spaces.Box(info.min, info.max, shape, dtype)


def subtree(tree: Any, path: str) -> Any:
    """The node of a :func:`_plain` tree at a leaf path (its segments escaped as the vault
    names leaves: ``flags/is%20done``), or None."""
    node = tree
    for key in path.split("/"):
        if isinstance(node, dict):
            names = {escape(str(k)): k for k in node}
            if key not in names:
                return None
            node = node[names[key]]
        elif isinstance(node, (tuple, list)) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
    return node


def plain(tree: Any) -> Any:
    """``tree`` with named tuples and dataclasses as dicts of their fields (so that a Minari
    space keeps the names, and leaf paths find them whether or not the class is importable)
    and lists as tuples."""
    if isinstance(tree, dict):
        return {k: plain(v) for k, v in tree.items()}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return {f: plain(getattr(tree, f)) for f in tree._fields}
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return {f.name: plain(getattr(tree, f.name)) for f in dataclasses.fields(tree)}
    if isinstance(tree, (tuple, list)):
        return tuple(plain(v) for v in tree)
    return tree


def unlike(example: Any, observations: str, next_observations: str) -> list[str]:
    """How the next observations' leaves differ from the observations' (names, dtypes,
    shapes): a Minari episode's observations are both, joined."""
    obs, nxt = subtree(example, observations), subtree(example, next_observations)
    if obs is None or nxt is None:
        return []
    a = [(n, str(x.dtype), x.shape[2:]) for n, x in named(obs)]
    b = [(n, str(x.dtype), x.shape[2:]) for n, x in named(nxt)]
    if a == b:
        return []
    return [
        (
            f"next_observations {next_observations!r} must be shaped like observations "
            f"{observations!r} (leaf, dtype, shape): {b} against {a}"
        )
    ]


def space_problems(space: Any, tree: Any, path: str) -> list[str]:
    """Where a Gymnasium ``space`` cannot hold the leaves of ``tree`` (``[rows, 0, ...]``
    arrays): structure, shapes, integer leaves for discrete spaces."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        if not isinstance(tree, dict) or set(space.spaces) != set(map(str, tree)):
            keys = sorted(map(str, tree)) if isinstance(tree, dict) else None
            return [f"{path}: a Dict of {sorted(space.spaces)}, the leaves {keys}"]
        return [
            p
            for k, v in tree.items()
            for p in space_problems(space.spaces[str(k)], v, f"{path}/{escape(str(k))}")
        ]
    if isinstance(space, spaces.Tuple):
        if not isinstance(tree, tuple) or len(tree) != len(space.spaces):
            return [f"{path}: a Tuple of {len(space.spaces)}, the leaves another structure"]
        return [
            p for i, (s, v) in enumerate(zip(space.spaces, tree, strict=True))
            for p in space_problems(s, v, f"{path}/{i}")
        ]  # fmt: skip
    if isinstance(tree, (dict, tuple)):
        return [f"{path}: a {type(space).__name__}, the leaves a subtree"]
    shape = tuple(tree.shape[2:])
    if isinstance(space, spaces.Discrete) and (shape != () or tree.dtype.kind not in "iu"):
        return [f"{path}: Discrete needs scalar integers, the leaf is {tree.dtype} {shape}"]
    want = getattr(space, "shape", None)
    shaped = isinstance(space, (spaces.Box, spaces.MultiBinary, spaces.MultiDiscrete))
    if shaped and want is not None and tuple(want) != shape:
        return [f"{path}: shape {tuple(want)}, the leaf's {shape}"]
    return []


def drops_next(episode: Any, fields: dict[str, str | None]) -> bool:
    """Whether an episode's next observations (all but the last, which the export keeps)
    differ from its following observations: what a Minari episode cannot hold."""
    obs = subtree(episode, str(fields["observations"]))
    nxt = subtree(episode, str(fields["next_observations"]))
    return any(
        not np.array_equal(n[:-1], o[1:], equal_nan=n.dtype.kind in "fc")
        for (_, o), (_, n) in zip(named(obs), named(nxt), strict=True)
    )


def tree_map(fn: Callable[..., Any], *trees: Any) -> Any:
    first = trees[0]
    if isinstance(first, dict):
        return {k: tree_map(fn, *(t[k] for t in trees)) for k in first}
    if isinstance(first, (tuple, list)):
        return tuple(tree_map(fn, *parts) for parts in zip(*trees, strict=True))
    return fn(*trees)


def tree_leaves(tree: Any) -> list[Any]:
    return [x for _, x in named(tree)]


def named(tree: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(tree, dict):
        return [p for k in tree for p in named(tree[k], f"{prefix}{k}/")]
    if isinstance(tree, (tuple, list)):
        return [p for i, v in enumerate(tree) for p in named(v, f"{prefix}{i}/")]
    return [(prefix.rstrip("/") or "<leaf>", np.asarray(tree))]
