"""Pytree helpers with the reference's names (``flashbax.utils``), for code that imports them.

``import flashbax.utils`` becomes ``import buffers.utils``; each function does what the
reference's does, with this package's typed errors where the reference asserts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from buffers._core import tree_shape_prefix
from buffers._errors import BatchStructureError, LeafMismatch
from buffers._validation import check_state, dtype_name, leaves_with_paths, positive_int


def get_tree_shape_prefix(tree: Any, n_axes: int = 1) -> tuple[int, ...]:
    """The sizes of the leading ``n_axes`` axes, which every leaf of ``tree`` must share.

    Args:
        tree: a pytree of arrays (e.g. a state's ``experience``, or a batch).
        n_axes: how many leading axes to read: an integer >= 0 (0 gives ``()``).

    Returns:
        The shared leading sizes, e.g. ``(add_batch_size, max_length_time_axis)``.

    Raises:
        BufferConfigError: ``n_axes`` is negative (it counts axes from the front; a negative
            one would silently read all but the last axes), ``tree`` has no leaves, or its
            first leaf has fewer axes.
        ArgumentTypeError: ``n_axes`` is not an integer (a float or a bool).
        BatchStructureError: a leaf's leading sizes differ from the first leaf's (every such
            leaf is named).

    Example:
        >>> get_tree_shape_prefix({"a": jnp.zeros((2, 5, 3)), "b": jnp.zeros((2, 5))}, 2)
        (2, 5)
    """
    n_axes = positive_int("n_axes", n_axes, allow_zero=True)
    prefix = tree_shape_prefix(tree, n_axes)
    paths = leaves_with_paths(tree)
    bad = [
        LeafMismatch(path, f"leading axes {list(prefix)} (as {paths[0][0]})", f"{shape_of(leaf)}")
        for path, leaf in paths
        if tuple(getattr(leaf, "shape", ())[:n_axes]) != prefix
    ]
    if bad:
        raise BatchStructureError(
            f"get_tree_shape_prefix: leaves differ in their leading {n_axes} axes",
            bad,
            "Every leaf must share the leading (batch/time) axes.",
        )
    return prefix


def shape_of(leaf: Any) -> str:
    return f"{list(getattr(leaf, 'shape', ()))} {dtype_name(getattr(leaf, 'dtype', 'object'))}"


def add_dim_to_args(
    func: Callable[..., Any],
    axis: int = 1,
    starting_arg_index: int | None = 1,
    ending_arg_index: int | None = None,
    kwargs_on_device_keys: list[str] | None = None,
) -> Callable[..., Any]:
    """Wrap ``func`` so that some of its arguments gain a length-1 axis before the call.

    Every leaf of the positional arguments ``starting_arg_index`` up to (not including)
    ``ending_arg_index`` (all the rest when ``None``) is expanded at ``axis``; so are the
    keyword arguments named in ``kwargs_on_device_keys`` (every keyword argument when
    ``None``), at axis 1, as the reference does. E.g. ``add_dim_to_args(buffer.add, axis=0,
    starting_arg_index=1, ending_arg_index=2)`` turns an ``add`` of ``[B, L, ...]`` batches into
    one of ``[L, ...]`` (one row).

    Args:
        func: the function to wrap.
        axis: where the new axis goes in the positional arguments' leaves.
        starting_arg_index: first positional argument to expand (``None``: from the first).
        ending_arg_index: positional arguments from this index on are passed unchanged.
        kwargs_on_device_keys: keyword arguments to expand (``None``: all of them).

    Returns:
        The wrapped function (``functools.wraps(func)``).
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        end = len(args) if ending_arg_index is None else ending_arg_index
        expanded = list(args)
        for i in range(len(args))[starting_arg_index:end]:
            expanded[i] = jax.tree.map(lambda x: jnp.expand_dims(x, axis), args[i])
        for key, value in kwargs.items():
            if kwargs_on_device_keys is None or key in kwargs_on_device_keys:
                kwargs[key] = jax.tree.map(lambda x: jnp.expand_dims(x, 1), value)
        return func(*expanded, **kwargs)

    return wrapper


def get_timestep_count(buffer_state: Any) -> Array:
    """Timesteps the state holds now: ``add_batch_size x`` the filled part of the time axis.

    ``T`` per row once full, else ``current_index``; works under ``jit``. (For the count of
    timesteps ever added, which does not stop at the capacity, see
    :func:`buffers.timesteps_added`.)

    Args:
        buffer_state: a trajectory, flat, item or prioritised buffer state (it has
            ``experience``, ``current_index`` and ``is_full``).

    Returns:
        An int32 scalar array.

    Raises:
        ArgumentTypeError: ``buffer_state`` lacks one of those fields.
    """
    check_state(
        buffer_state,
        ("experience", "current_index", "is_full"),
        "TrajectoryBufferState",
        "get_timestep_count",
    )
    b_size, t_len = tree_shape_prefix(buffer_state.experience, 2)
    filled = jnp.where(buffer_state.is_full, t_len, buffer_state.current_index)
    return (b_size * filled).astype(jnp.int32)


__all__ = ["add_dim_to_args", "get_timestep_count", "get_tree_shape_prefix"]
