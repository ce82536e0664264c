"""Argument and tree validation for every buffer kind, in one place.

Everything here runs in Python at trace time (shapes and dtypes are static), so it costs
nothing inside a compiled step and reports every bad leaf, not only the first.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from buffers._errors import BatchStructureError, BufferConfigError, LeafMismatch


def key_to_str(key: Any) -> str:
    """One path element as text: dict key, field name or sequence index."""
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def path_to_str(path: Sequence[Any], prefix: str = "") -> str:
    parts = [key_to_str(k) for k in path]
    if prefix:
        parts.insert(0, prefix)
    return "/".join(parts) if parts else "<root>"


def leaves_with_paths(tree: Any, prefix: str = "") -> list[tuple[str, Any]]:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(path_to_str(p, prefix), leaf) for p, leaf in flat]


def _fmt_shape(dims: Sequence[Any]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def _is_python_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic)


def positive_int(name: str, value: Any, *, allow_zero: bool = False) -> int:
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if not ok or value < (0 if allow_zero else 1):
        bound = ">= 0" if allow_zero else ">= 1"
        raise BufferConfigError(f"`{name}` must be an integer {bound}, got {value!r}")
    return int(value)


def check(condition: bool, message: str) -> None:
    if not condition:
        raise BufferConfigError(message)


def check_priority_exponent(priority_exponent: float) -> None:
    check(
        0.0 <= float(priority_exponent) <= 1.0,
        f"`priority_exponent` must be in [0, 1], got {priority_exponent!r}",
    )


def resolve_time_axis(
    add_batch_size: int, max_size: int | None, max_length_time_axis: int | None, stacklevel: int
) -> int:
    """``max_length_time_axis`` from exactly one of ``max_size`` / ``max_length_time_axis``."""
    check(
        (max_size is None) != (max_length_time_axis is None),
        "give exactly one of `max_size` and `max_length_time_axis`, got "
        f"max_size={max_size!r}, max_length_time_axis={max_length_time_axis!r}",
    )
    if max_length_time_axis is not None:
        return positive_int("max_length_time_axis", max_length_time_axis)
    max_size = positive_int("max_size", max_size)
    t_len = max_size // add_batch_size
    check(
        t_len >= 1,
        f"`max_size` ({max_size}) must be at least `add_batch_size` ({add_batch_size})",
    )
    if t_len * add_batch_size != max_size:
        warnings.warn(
            f"max_size={max_size} is not a multiple of add_batch_size={add_batch_size}: the "
            f"buffer holds {t_len * add_batch_size} timesteps ({add_batch_size} rows x "
            f"{t_len}), {max_size - t_len * add_batch_size} fewer than asked. See "
            "`buffer.capacity`.",
            stacklevel=stacklevel + 1,
        )
    return t_len


def check_sequence_args(
    sample_sequence_length: int, period: int, min_length_time_axis: int, t_len: int
) -> int:
    """Validate sequence arguments; return the effective minimum length (>= sequence length)."""
    positive_int("sample_sequence_length", sample_sequence_length)
    positive_int("period", period)
    positive_int("min_length_time_axis", min_length_time_axis, allow_zero=True)
    check(
        sample_sequence_length <= t_len,
        f"`sample_sequence_length` ({sample_sequence_length}) must be <= "
        f"`max_length_time_axis` ({t_len})",
    )
    check(
        min_length_time_axis <= t_len,
        f"`min_length_time_axis` ({min_length_time_axis}) must be <= "
        f"`max_length_time_axis` ({t_len})",
    )
    return max(min_length_time_axis, sample_sequence_length)


def validate_batch(
    experience: Any,
    batch: Any,
    state_prefix_axes: int,
    batch_prefix: Sequence[int | str],
    *,
    max_time: int | None = None,
    what: str = "add",
    root: str = "experience",
) -> Any:
    """Check ``batch`` against a state's ``experience`` and return it with scalars converted.

    ``experience`` leaves have ``state_prefix_axes`` leading axes (``[B, T]`` -> 2) followed by
    the per-timestep shape. ``batch`` leaves must have ``batch_prefix`` leading axes, each an
    exact size or a label (``"L"``, ``"B"``) for a free size that every leaf must share
    (``"L"``, the time axis, is also bounded by ``max_time``), then the same per-timestep
    shape and dtype. Raises :class:`BatchStructureError` that names every bad leaf.
    """
    exp_paths = leaves_with_paths(experience, root)
    exp_def: Any = jax.tree_util.tree_structure(experience)
    try:
        batch_leaves = exp_def.flatten_up_to(batch)
    except (ValueError, TypeError):
        got_paths = leaves_with_paths(batch, root)
        want_paths = {p for p, _ in exp_paths}
        have_paths = {p for p, _ in got_paths}
        missing = sorted(want_paths - have_paths)
        extra = sorted(have_paths - want_paths)
        found = [LeafMismatch(p, "a leaf here", "nothing") for p in missing]
        found += [LeafMismatch(p, "no leaf here", "a leaf") for p in extra]
        if not found:
            got_def = jax.tree_util.tree_structure(batch)
            found = [LeafMismatch(root, f"structure {exp_def}", f"{got_def}")]
        raise BatchStructureError(
            f"{what}: batch structure differs from the buffer's",
            found,
            "Add batches with exactly the structure of the timestep given to `init`.",
        ) from None

    mismatches: list[LeafMismatch] = []
    converted: list[Any] = []
    free_sizes: dict[str, tuple[int, str]] = {}
    n_prefix = len(batch_prefix)
    want_dims = [
        d if not isinstance(d, str) else (f"1..{max_time}" if d == "L" and max_time else d)
        for d in batch_prefix
    ]
    for (path, exp_leaf), leaf in zip(exp_paths, batch_leaves, strict=True):
        item_shape = tuple(exp_leaf.shape[state_prefix_axes:])
        dtype = np.dtype(exp_leaf.dtype)
        if _is_python_scalar(leaf) and n_prefix == 0 and item_shape == ():
            converted.append(jnp.asarray(leaf, dtype=dtype))
            continue
        shape = tuple(np.shape(leaf))
        got_dtype = np.dtype(leaf.dtype) if hasattr(leaf, "dtype") else np.asarray(leaf).dtype
        want = f"{_fmt_shape([*want_dims, *item_shape])} {dtype.name}"
        got = f"{_fmt_shape(shape)} {got_dtype.name}"
        bad = len(shape) != n_prefix + len(item_shape) or shape[n_prefix:] != item_shape
        if not bad:
            for want_d, got_d in zip(batch_prefix, shape[:n_prefix], strict=True):
                if not isinstance(want_d, str):
                    bad = bad or got_d != want_d
                elif got_d < 1 or (want_d == "L" and max_time is not None and got_d > max_time):
                    bad = True
                elif want_d not in free_sizes:
                    free_sizes[want_d] = (got_d, path)
                elif free_sizes[want_d][0] != got_d:
                    size, owner = free_sizes[want_d]
                    mismatches.append(
                        LeafMismatch(path, f"axis {want_d} of size {size} (as {owner})", f"{got_d}")
                    )
        if bad or got_dtype != dtype:
            mismatches.append(LeafMismatch(path, want, got))
        converted.append(leaf)
    if mismatches:
        raise BatchStructureError(
            f"{what}: batch does not match the buffer",
            mismatches,
            "Check the leading axes this buffer expects (shown first in each shape) and cast "
            "leaves to the dtypes of the example given to `init`.",
        )
    return exp_def.unflatten(converted)


def check_timestep(experience: Any) -> Any:
    """Validate and convert the example timestep given to ``init``."""
    paths = leaves_with_paths(experience, "experience")
    if not paths:
        raise BufferConfigError("`init` needs a timestep with at least one array leaf, got none")
    bad = [p for p, leaf in paths if not hasattr(leaf, "shape") and not _is_python_scalar(leaf)]
    if bad:
        raise BufferConfigError(f"`init` timestep leaves must be arrays or numbers; bad: {bad}")
    return jax.tree.map(jnp.asarray, experience)
