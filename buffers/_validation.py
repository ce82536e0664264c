"""Argument and tree validation for every buffer kind, in one place.

Everything here runs in Python at trace time (shapes and dtypes are static), so it costs
nothing inside a compiled step and reports every bad leaf, not only the first. Checks of
*values* (priorities, indices) run only on concrete arrays, outside ``jit``.

Limits enforced before anything is allocated:

* :data:`MAX_TIME_AXIS`: a row holds at most 2**30 timesteps, and a sum tree (prioritised and
  episode buffers) at most :data:`MAX_ITEMS` = 2**30 items: indices are int32, and an index plus
  an add of up to ``T`` timesteps must stay below 2**31.
* Memory: a state (``init``) or a sample may not need more bytes than the default backend's
  devices hold (see :class:`~buffers.BufferTooLargeError`).
"""

from __future__ import annotations

import functools
import math
import numbers
import operator
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from buffers._errors import (
    ArgumentTypeError,
    BatchStructureError,
    BufferConfigError,
    BufferTooLargeError,
    LeafMismatch,
    PriorityError,
)
from buffers._pytree import Replaceable

MAX_TIME_AXIS = 1 << 30
MAX_ITEMS = 1 << 30


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


def describe(value: Any) -> str:
    """A value for a message: ``2.5 (float)``, ``'abc' (str)``, ``float32[2] (ArrayImpl)``."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None and not isinstance(value, np.generic):
        return f"{dtype_name(dtype)}{_fmt_shape(shape)} ({type(value).__name__})"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def dtype_name(dtype: Any) -> str:
    try:
        return np.dtype(dtype).name
    except TypeError:  # JAX extended dtypes (PRNG keys)
        return str(dtype)


def positive_int(name: str, value: Any, *, allow_zero: bool = False) -> int:
    """``value`` as an ``int`` >= 1 (>= 0 with ``allow_zero``).

    Anything with ``__index__`` counts (``int``, NumPy and concrete JAX integers); ``bool`` and
    floats (even whole ones) do not: a size given as ``2.5`` or ``True`` is a bug, not a size.
    """
    bound = ">= 0" if allow_zero else ">= 1"
    number: int | None = None
    if not isinstance(value, (bool, np.bool_)):
        try:
            number = operator.index(value)
        except TypeError:
            number = None
    if number is None:
        if isinstance(value, jax.core.Tracer):
            remedy = "it is a static setting: pass a Python int (mark it static under `jit`)"
        elif isinstance(value, (bool, np.bool_)):
            remedy = "a bool is not a size: pass a Python int"
        elif isinstance(value, (float, np.floating)) and math.isfinite(value):
            remedy = f"pass a Python int, e.g. {name}={max(int(value), 0 if allow_zero else 1)}"
        else:
            remedy = "pass a Python int"
        raise ArgumentTypeError(
            f"`{name}` must be an integer {bound}, got {describe(value)}: {remedy}"
        )
    if number < (0 if allow_zero else 1):
        raise BufferConfigError(f"`{name}` must be an integer {bound}, got {value!r}")
    return number


_LIMIT_REASON = (
    f"buffers index time and items with int32, so a row holds at most 2**30 = {MAX_TIME_AXIS} "
    f"timesteps and a sum tree at most {MAX_ITEMS} items"
)


def check_time_axis(t_len: int, what: str) -> int:
    """Refuse a time axis longer than :data:`MAX_TIME_AXIS` (``what`` says where it came from)."""
    check(
        t_len <= MAX_TIME_AXIS,
        f"{what} gives rows of {t_len} timesteps, more than {MAX_TIME_AXIS}: {_LIMIT_REASON}. "
        "Spread the capacity over more rows (`add_batch_size`) or make the buffer smaller.",
    )
    return t_len


def check_item_count(items: int, what: str) -> None:
    """Refuse a sum tree of more than :data:`MAX_ITEMS` items."""
    check(
        items <= MAX_ITEMS,
        f"{what} = {items} sum-tree items, more than {MAX_ITEMS}: {_LIMIT_REASON}. "
        "Make the buffer smaller (or, with a prioritised buffer, `period` larger).",
    )


def check_bool(name: str, value: Any) -> bool:
    """``value`` as a ``bool``: ``True``/``False`` (also NumPy's, and the integers 0 and 1)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    raise ArgumentTypeError(f"`{name}` must be a bool (True or False), got {describe(value)}")


def real_number(name: str, value: Any, remedy: str) -> float:
    """``value`` as a ``float`` (a real number, not a bool or a string); may be NaN or inf."""
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        return float(value)
    dtype = getattr(value, "dtype", None)
    if (
        dtype is not None
        and np.ndim(value) == 0
        and not isinstance(value, jax.core.Tracer)
        and dtype_kind(dtype) in "iuf"
    ):
        return float(value)
    raise ArgumentTypeError(f"`{name}` must be a real number, got {describe(value)}: {remedy}")


def check(condition: bool, message: str) -> None:
    if not condition:
        raise BufferConfigError(message)


def check_priority_exponent(priority_exponent: Any) -> float:
    """``priority_exponent`` (alpha) as a ``float`` in [0, 1]."""
    alpha = real_number("priority_exponent", priority_exponent, "pass a float in [0, 1]")
    check(
        0.0 <= alpha <= 1.0,
        f"`priority_exponent` must be in [0, 1], got {priority_exponent!r}: it is alpha of "
        "prioritised replay (0: uniform, 1: fully proportional to priority)",
    )
    return alpha


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
        t_len = positive_int("max_length_time_axis", max_length_time_axis)
        return check_time_axis(t_len, f"`max_length_time_axis` ({t_len})")
    max_size = positive_int("max_size", max_size)
    t_len = max_size // add_batch_size
    check(
        t_len >= 1,
        f"`max_size` ({max_size}) must be at least `add_batch_size` ({add_batch_size})",
    )
    check_time_axis(t_len, f"`max_size` ({max_size}) // `add_batch_size` ({add_batch_size})")
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
    sample_sequence_length = positive_int("sample_sequence_length", sample_sequence_length)
    positive_int("period", period)
    min_length_time_axis = positive_int(
        "min_length_time_axis", min_length_time_axis, allow_zero=True
    )
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
        dtype = exp_leaf.dtype
        if _is_python_scalar(leaf) and n_prefix == 0 and item_shape == ():
            if _scalar_fits(leaf, dtype):
                converted.append(jnp.asarray(leaf, dtype=dtype))
            else:
                mismatches.append(LeafMismatch(path, f"[] {dtype_name(dtype)}", describe(leaf)))
                converted.append(leaf)
            continue
        want = f"{_fmt_shape([*want_dims, *item_shape])} {dtype_name(dtype)}"
        if not hasattr(leaf, "dtype") and not _is_python_scalar(leaf):
            mismatches.append(LeafMismatch(path, want, describe(leaf)))
            converted.append(leaf)
            continue
        shape = tuple(np.shape(leaf))
        got_dtype = leaf.dtype if hasattr(leaf, "dtype") else np.asarray(leaf).dtype
        got = f"{_fmt_shape(shape)} {dtype_name(got_dtype)}"
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


def _scalar_fits(value: Any, dtype: Any) -> bool:
    """Whether a Python number converts to ``dtype`` without losing anything (no silent
    truncation of ``2.5`` to an integer leaf, no wrap-around of ``300`` into ``uint8``)."""
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        return False
    kind = dtype_kind(np_dtype)
    if isinstance(value, bool):
        return kind in "biufc"
    if isinstance(value, int):
        if kind in "iu":
            info = np.iinfo(np_dtype)
            return int(info.min) <= value <= int(info.max)
        if kind == "f":
            return _float_fits(value, np_dtype)
        return kind == "c" or (kind == "b" and value in (0, 1))
    if isinstance(value, float):
        return kind == "c" or (kind == "f" and _float_fits(value, np_dtype))
    return kind == "c"


def _float_fits(value: float, dtype: np.dtype) -> bool:
    """Whether ``value`` (a Python int or float) stays finite in the float ``dtype`` when it is
    finite (``70000`` becomes ``inf`` in float16)."""
    try:
        as_float = float(value)
    except OverflowError:  # an int beyond every float
        return False
    if not math.isfinite(as_float):
        return isinstance(value, float)  # inf and nan are what they were
    return abs(as_float) <= float(jnp.finfo(dtype).max)


def _bad_timestep_leaf(leaf: Any) -> str | None:
    """What is wrong with one leaf of an example timestep, or ``None``."""
    if _is_python_scalar(leaf):
        return None
    dtype = getattr(leaf, "dtype", None)
    if dtype is None or not hasattr(leaf, "shape"):
        return describe(leaf)
    if jnp.issubdtype(dtype, jax.dtypes.prng_key):
        return None
    if dtype_kind(dtype) not in "biufc":
        return f"{describe(leaf)}, whose dtype is not bool or numeric"
    return None


def dtype_kind(dtype: Any) -> str:
    """numpy's kind letter of ``dtype`` (``b``, ``i``, ``u``, ``f``, ``c``, ...), with JAX's
    extra numeric types (``bfloat16``, the ``float8`` types, ``int4``: kind ``V`` to numpy)
    given the kind they are numbers of, as Flashbax takes them."""
    np_dtype = np.dtype(dtype)
    if np_dtype.kind != "V":
        return np_dtype.kind
    for kind, family in (("f", jnp.floating), ("u", jnp.unsignedinteger), ("i", jnp.integer)):
        if jnp.issubdtype(np_dtype, family):
            return kind
    return np_dtype.kind


def check_timestep(experience: Any) -> Any:
    """Validate and convert the example timestep given to ``init``."""
    paths = leaves_with_paths(experience, "experience")
    if not paths:
        raise BufferConfigError(
            "`init` needs a timestep with at least one array leaf, got none "
            f"({describe(experience)}): give one timestep, e.g. "
            '{"obs": jnp.zeros(obs_shape), "reward": jnp.zeros(())}'
        )
    bad = [(p, problem) for p, leaf in paths if (problem := _bad_timestep_leaf(leaf)) is not None]
    if bad:
        lines = "".join(
            f"\n  - {LeafMismatch(p, 'an array or a number (bool or numeric dtype)', got)}"
            for p, got in bad
        )
        raise ArgumentTypeError(
            f"`init` timestep leaves must be arrays or numbers; bad: {[p for p, _ in bad]}{lines}"
            "\nKeep strings and other metadata out of the timestep (a buffer stores arrays)."
        )
    return jax.tree.map(jnp.asarray, experience)


def timestep_nbytes(experience: Any, prefix_axes: int) -> int:
    """Bytes of one timestep of ``experience`` (leaves with ``prefix_axes`` leading axes)."""
    total = 0
    for leaf in jax.tree_util.tree_leaves(experience):
        total += math.prod(leaf.shape[prefix_axes:]) * leaf.dtype.itemsize
    return total


def memory_limit() -> tuple[int, str] | None:
    """``(bytes, where)``: the memory of the local devices of the platform arrays are created
    on (``jax_default_device`` if set, else the default backend), or ``None`` when it does not
    report it (then nothing is refused)."""
    device = getattr(jax.config, "jax_default_device", None)
    if device is None:
        platform = jax.default_backend()
    else:
        platform = device if isinstance(device, str) else device.platform
    return _platform_memory(platform)


@functools.cache
def _platform_memory(platform: str) -> tuple[int, str] | None:
    if platform == "cpu":
        try:
            ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):
            return None
        return (ram, "the host's physical memory (the cpu backend's)") if ram > 0 else None
    total = 0
    try:
        devices = jax.local_devices(backend=platform)
        for dev in devices:
            stats = dev.memory_stats() or {}
            if "bytes_limit" not in stats:
                return None
            total += int(stats["bytes_limit"])
    except Exception:  # a backend without memory statistics: refuse nothing
        return None
    return total, f"the memory of the {len(devices)} local {platform} device(s)"


def _fmt_bytes(n: int) -> str:
    """``n`` bytes for a message: ``512 bytes``, ``23.5 GiB``, ``12.0 PiB``."""
    if n < 1024:
        return f"{n} bytes"
    value, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB", "TiB", "PiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"


def check_nbytes(nbytes: int, what: str, sizes: str, remedy: str) -> None:
    """Refuse to allocate ``nbytes`` (``what``, made of ``sizes``) beyond :func:`memory_limit`."""
    limit = memory_limit()
    if limit is None or nbytes <= limit[0]:
        return
    raise BufferTooLargeError(
        f"{what} would need {_fmt_bytes(nbytes)} ({nbytes} bytes: {sizes}), more than the "
        f"{_fmt_bytes(limit[0])} of {limit[1]}. {remedy}",
        nbytes,
        limit[0],
    )


def check_sample_nbytes(experience: Any, items: int, length: int, what: str, size: str) -> None:
    """Refuse a sample of ``items`` sequences of ``length`` timesteps that cannot fit."""
    per_step = timestep_nbytes(experience, 2)
    check_nbytes(
        items * length * per_step,
        f"{what}: the sample",
        f"{items} {size} x {length} timesteps x {per_step} bytes per timestep",
        f"Make {size} smaller.",
    )


def check_state(state: Any, fields: Sequence[str], kind: str, what: str) -> None:
    """``state`` must have ``fields`` (duck-typed, so hand-built states work)."""
    missing = [f for f in fields if not hasattr(state, f)]
    if missing and isinstance(state, dict) and all(f in state for f in fields):
        raise ArgumentTypeError(
            f"{what}: `state` must be a {kind} (from this buffer's `init`), got a dict with "
            "its fields (what orbax restores without a target): restore it with the "
            "target `buffer.init(example)`, as docs/guides/flashbax-checkpoints.md shows"
        )
    if missing:
        raise ArgumentTypeError(
            f"{what}: `state` must be a {kind} (from this buffer's `init`), got "
            f"{type(state).__name__}, which has no {', '.join(missing)}. Pass the state that "
            "this buffer's `init` (or its last `add`) returned."
        )


def check_key(key: Any, what: str) -> None:
    """``key`` must be one PRNG key: ``uint32[2]`` (``PRNGKey``, or another raw key) or a typed
    key (``jax.random.key``) of shape ``[]``."""
    shape = getattr(key, "shape", None)
    dtype = getattr(key, "dtype", None)
    if shape is not None and dtype is not None:
        if dtype == np.uint32 and len(shape) == 1:
            return
        if jnp.issubdtype(dtype, jax.dtypes.prng_key) and shape == ():
            return
    is_key_data = dtype is not None and (
        dtype == np.uint32 or jnp.issubdtype(dtype, jax.dtypes.prng_key)
    )
    batched = is_key_data and shape is not None and len(shape) >= 1
    hint = "; for a batch of keys, map over it with `jax.vmap`" if batched else ""
    raise ArgumentTypeError(
        f"{what}: `rng_key` must be one PRNG key (`jax.random.PRNGKey(seed)` or "
        f"`jax.random.key(seed)`), got {describe(key)}{hint}"
    )


def check_priority_sum(values: Any, limit: float) -> None:
    """Stored priorities (``p ** priority_exponent``), when concrete: none above ``limit``
    (float32's largest over the tree's leaves), so that their sum stays finite."""
    if isinstance(values, jax.core.Tracer):
        return
    stored = np.asarray(values, np.float64).reshape(-1)
    over = np.isfinite(stored) & (stored > limit)
    if over.any():
        found = ", ".join(f"{float(stored[i])!r} at position {i}" for i in np.flatnonzero(over)[:5])
        raise PriorityError(
            f"set_priorities: stored priorities must be at most {limit:.4g} (float32's largest "
            f"over the sum tree's leaves, so that their total stays finite), got "
            f"{int(over.sum())} above: {found}. Rescale the priorities."
        )


def check_priorities(indices: Any, priorities: Any, n_items: int) -> tuple[Any, Any]:
    """Validate ``set_priorities`` arguments; return them as int32 / float32 arrays.

    Dtypes and shapes always; values only when concrete (outside ``jit``).
    """
    idx_dtype = indices.dtype if hasattr(indices, "dtype") else np.asarray(indices).dtype
    pri_dtype = priorities.dtype if hasattr(priorities, "dtype") else np.asarray(priorities).dtype
    idx_shape, pri_shape = tuple(np.shape(indices)), tuple(np.shape(priorities))
    if dtype_kind(idx_dtype) not in "iu":
        raise PriorityError(
            f"set_priorities: `indices` must be integers (the `indices` of a sample), got "
            f"{dtype_name(idx_dtype)}{_fmt_shape(idx_shape)}"
        )
    if dtype_kind(pri_dtype) not in "iuf":
        raise PriorityError(
            f"set_priorities: `priorities` must be real numbers, got "
            f"{dtype_name(pri_dtype)}{_fmt_shape(pri_shape)}"
        )
    if pri_shape not in (idx_shape, ()):
        raise PriorityError(
            f"set_priorities: `priorities` must have the shape of `indices` "
            f"{_fmt_shape(idx_shape)} (one per index) or be a scalar, got "
            f"{_fmt_shape(pri_shape)}"
        )
    if not isinstance(priorities, jax.core.Tracer):
        values = np.asarray(priorities, dtype=np.float64).reshape(-1)
        bad = ~(np.isfinite(values) & (values >= 0))
        if bad.any():
            found = ", ".join(
                f"{float(values[i])!r} at position {i}" for i in np.flatnonzero(bad)[:5]
            )
            raise PriorityError(
                f"set_priorities: `priorities` must be finite and >= 0, got {int(bad.sum())} "
                f"bad: {found}. Use e.g. |td_error| + 1e-6; a NaN loss upstream shows up here."
            )
    if not isinstance(indices, jax.core.Tracer):
        ids = np.asarray(indices).reshape(-1)
        bad = (ids < 0) | (ids >= n_items)
        if bad.any():
            found = ", ".join(f"{int(ids[i])} at position {i}" for i in np.flatnonzero(bad)[:5])
            raise PriorityError(
                f"set_priorities: `indices` must be in [0, {n_items}) (item indices returned by "
                f"this buffer's `sample`), got {int(bad.sum())} outside: {found}"
            )
    idx = jnp.asarray(indices, jnp.int32)
    values_out = jnp.broadcast_to(jnp.asarray(priorities, jnp.float32), idx.shape)
    return idx, values_out


def as_list(name: str, value: Any) -> list[Any]:
    """A sequence argument as a list (a mapping, a string or a single object, a buffer or a
    state among them, is refused)."""
    if isinstance(value, (str, bytes, Mapping, Replaceable)) or not isinstance(value, Iterable):
        raise ArgumentTypeError(f"`{name}` must be a list or tuple, got {describe(value)}")
    return list(value)
