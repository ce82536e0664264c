"""Item buffer: independent items in one row, sampled uniformly one at a time."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax

from buffers import utils as utils
from buffers._core import Experience
from buffers._layout import layout_add
from buffers._validation import check, check_bool, check_time_axis, positive_int
from buffers.trajectory_buffer import (
    TrajectoryBuffer,
    TrajectoryBufferSample,
    TrajectoryBufferState,
    make_trajectory_buffer,
)
from buffers.utils import add_dim_to_args

if TYPE_CHECKING:
    import chex


def validate_sample_batch_size(sample_batch_size: int, max_length: int) -> None:
    """Check ``sample_batch_size <= max_length``.

    Raises:
        BufferConfigError: it is larger (or either is not a positive integer).
    """
    sample_batch_size = positive_int("sample_batch_size", sample_batch_size)
    max_length = positive_int("max_length", max_length)
    check(
        sample_batch_size <= max_length,
        f"`sample_batch_size` ({sample_batch_size}) must be <= `max_length` ({max_length})",
    )


def validate_min_length(min_length: int, max_length: int) -> None:
    """Check ``min_length <= max_length`` (items before sampling, items held).

    Raises:
        BufferConfigError: it is larger (or either is not an integer of the right sign).
    """
    min_length = positive_int("min_length", min_length, allow_zero=True)
    max_length = positive_int("max_length", max_length)
    check(
        min_length <= max_length,
        f"`min_length` ({min_length}) must be <= `max_length` ({max_length})",
    )


def validate_item_buffer_args(max_length: int, min_length: int, sample_batch_size: int) -> None:
    """Check the arguments of :func:`make_item_buffer` without making a buffer.

    Raises:
        BufferConfigError: an argument :func:`make_item_buffer` refuses, e.g. more items than
            a row may hold (:class:`~buffers.ArgumentTypeError` for one that is not an
            integer).
    """
    max_length = positive_int("max_length", max_length)
    validate_sample_batch_size(sample_batch_size, max_length)
    validate_min_length(min_length, max_length)
    check_time_axis(max_length, f"`max_length` ({max_length}) (items, in one row)")


def squeeze_time(sample: Any) -> Any:
    """Drop the length-1 time axis of every sampled sequence."""
    return sample.replace(experience=jax.tree.map(lambda x: x[:, 0], sample.experience))


def item_sample(
    state: Any, rng_key: chex.PRNGKey, *, core_sample: Callable[[Any, Any], Any]
) -> TrajectoryBufferSample:
    """Sample items: sequences of one timestep from ``core_sample``, time axis dropped."""
    return squeeze_time(core_sample(state, rng_key))


def item_add(add_sequences: bool, add_batches: bool, core_add: Any) -> Any:
    """The ``add`` of an item buffer: the user's layout folded into items of one row."""
    return functools.partial(
        layout_add,
        core_add=core_add,
        add_batches=check_bool("add_batches", add_batches),
        add_sequences=check_bool("add_sequences", add_sequences),
        batch_size=None,
        fold_items=True,
    )


def make_item_buffer(
    max_length: int,
    min_length: int,
    sample_batch_size: int,
    add_sequences: bool = False,
    add_batches: bool = False,
) -> TrajectoryBuffer:
    """Make an item buffer (same signature and semantics as the reference's).

    ``add`` takes one item, or ``[n, ...]`` with ``add_batches`` / ``add_sequences``, or
    ``[b, l, ...]`` with both (folded into ``b * l`` items). ``sample`` returns
    ``TrajectoryBufferSample(experience)`` with ``[sample_batch_size, ...]`` leaves.

    Args:
        max_length: items the buffer holds.
        min_length: items to hold before ``can_sample`` is true.
        sample_batch_size: items per ``sample`` call.
        add_sequences: ``add`` takes a leading axis of items.
        add_batches: ``add`` takes a leading axis of items (with ``add_sequences`` too: two
            axes, folded into one).

    Returns:
        The buffer's pure functions (``init``, ``add``, ``sample``, ``can_sample``) and its
        configuration.

    Raises:
        BufferConfigError: a size out of range (``sample_batch_size`` or ``min_length``
            above ``max_length``).
        ArgumentTypeError: a size that is not an integer, or a flag that is not a bool.

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> import buffers as fbx
        >>> buffer = fbx.make_item_buffer(max_length=32, min_length=2, sample_batch_size=4)
        >>> buffer = buffer.replace(add=jax.jit(buffer.add), sample=jax.jit(buffer.sample))
        >>> state = buffer.init({"x": jnp.zeros(3)})
        >>> state = buffer.add(state, {"x": jnp.ones(3)})
        >>> state = buffer.add(state, {"x": jnp.ones(3)})
        >>> buffer.sample(state, jax.random.key(0)).experience["x"].shape
        (4, 3)
    """
    validate_item_buffer_args(max_length, min_length, sample_batch_size)
    core = make_trajectory_buffer(1, sample_batch_size, 1, 1, min_length, None, max_length)
    return dataclasses.replace(
        core,
        add=item_add(add_sequences, add_batches, core.add),
        sample=functools.partial(item_sample, core_sample=core.sample),
    )


create_item_buffer = make_item_buffer
"""The reference's name for the function behind :func:`make_item_buffer` (the same here)."""

__all__ = [
    "Experience",
    "TrajectoryBuffer",
    "TrajectoryBufferSample",
    "TrajectoryBufferState",
    "add_dim_to_args",
    "create_item_buffer",
    "make_item_buffer",
    "make_trajectory_buffer",
    "utils",
    "validate_item_buffer_args",
    "validate_min_length",
    "validate_sample_batch_size",
]
