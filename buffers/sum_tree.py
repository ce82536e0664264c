"""The prioritised buffers' sum tree, under the reference's names (``flashbax.buffers.sum_tree``).

Code that imported the reference's module runs with ``from buffers import sum_tree``; every
function works on this package's :class:`SumTreeState` (a prioritised state's
``sum_tree_state``). Two things differ on purpose, as in the buffers (docs: Migrate from
Flashbax, "Same draws as the reference"):

* Layout: ``nodes[1]`` is the root and node ``i`` has children ``2i`` and ``2i + 1`` (the
  reference stores the root at 0; :func:`get_tree_index` maps a node to its place here).
  Leaves hold the priorities, internal nodes are recomputed from their children on every set,
  never adjusted by differences, so sums never drift.
* A draw never lands on a zero-priority leaf while any leaf is positive, and an empty tree
  gives probability 0, not NaN.

Set functions ignore entries whose index names no leaf or whose value is negative, infinite or
NaN (the leaf keeps its value), so a bad value cannot poison the sums.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
from jax import Array

from buffers import _sum_tree
from buffers._errors import ArgumentTypeError
from buffers._sum_tree import SumTreeState
from buffers._validation import check_item_count, check_key, positive_int

if TYPE_CHECKING:
    import chex


def get_tree_depth(capacity: int) -> int:
    """Levels below the root of a tree over ``capacity`` leaves: ``ceil(log2(capacity))``.

    Args:
        capacity: number of priorities (items) the tree holds.

    Returns:
        The depth (0 for one leaf).

    Raises:
        BufferConfigError: ``capacity`` below 1 (:class:`~buffers.ArgumentTypeError` if it is
            not an integer).
    """
    capacity = positive_int("capacity", capacity)
    return _sum_tree.tree_size(capacity).bit_length() - 1


def init(capacity: int) -> SumTreeState:
    """An empty tree (every priority 0, ``max_recorded_priority`` 1) over ``capacity`` items.

    Args:
        capacity: number of priorities the tree holds (at most 2**30).

    Returns:
        The tree's state.

    Raises:
        BufferConfigError: ``capacity`` below 1 or above 2**30.
    """
    capacity = positive_int("capacity", capacity)
    check_item_count(capacity, "init: capacity")
    return _sum_tree.init(capacity)


def get_tree_index(depth_level: Array | int, node_index: Array | int) -> Array:
    """The place in ``nodes`` of the ``node_index``-th node (from the left) at ``depth_level``.

    The root is level 0; the leaves are level :func:`get_tree_depth`, where ``node_index`` is
    the item's index: ``state.nodes[get_tree_index(depth, i)] == get(state, i)``.
    """
    return jnp.left_shift(1, jnp.asarray(depth_level, jnp.int32)) + jnp.asarray(node_index)


def _leaves(state: SumTreeState) -> int:
    return int(state.nodes.shape[-1]) // 2


def sample(
    state: SumTreeState,
    rng_key: chex.PRNGKey | None = None,
    query_value: Array | float | None = None,
) -> Array:
    """One item drawn with probability ``p_i / sum_j p_j``.

    Args:
        state: the tree.
        rng_key: source of the uniform draw when ``query_value`` is not given.
        query_value: a value in ``[0, 1)`` that selects the item (the fraction of the total
            priority to the left of the draw).

    Returns:
        The item's index (int32 scalar).

    Raises:
        ArgumentTypeError: neither ``rng_key`` nor ``query_value`` given, or ``rng_key`` is
            not a PRNG key.
    """
    if query_value is None:
        if rng_key is None:
            raise ArgumentTypeError(
                "sample: give `rng_key` (a PRNG key) or `query_value` (a number in [0, 1))"
            )
        check_key(rng_key, "sum_tree.sample")
        query_value = jax.random.uniform(rng_key, dtype=jnp.float32)
    target = jnp.asarray(query_value, jnp.float32) * _sum_tree.total(state)
    return _sum_tree.find(state, target)


def stratified_sample(state: SumTreeState, batch_size: int, rng_key: chex.PRNGKey) -> Array:
    """``batch_size`` items, one drawn from each of ``batch_size`` equal slices of the total.

    The prioritised buffers' ``sample`` uses this draw (as in the PER paper); the same key
    gives the reference's uniform numbers.

    Returns:
        Item indices, int32 ``[batch_size]``.
    """
    batch_size = positive_int("batch_size", batch_size)
    check_key(rng_key, "sum_tree.stratified_sample")
    return _sum_tree.sample(state, rng_key, batch_size, _leaves(state))


def get(state: SumTreeState, node_index: Array | int) -> Array:
    """The priority of item ``node_index`` (a leaf's value)."""
    return _sum_tree.get(state, jnp.asarray(node_index))


def get_batch(state: SumTreeState, node_indices: Array) -> Array:
    """The priorities of items ``node_indices`` (any shape)."""
    return _sum_tree.get(state, jnp.asarray(node_indices))


def get_probability(state: SumTreeState, node_index: Array | int) -> Array:
    """``p_i / sum_j p_j`` of item(s) ``node_index``; 0 (not NaN) when every priority is 0."""
    return _sum_tree.probabilities(state, jnp.asarray(node_index))


def _set(state: SumTreeState, indices: Array, values: Array, device: str) -> SumTreeState:
    indices = jnp.asarray(indices, jnp.int32).reshape(-1)
    values = jnp.asarray(values, jnp.float32).reshape(-1)
    values = jnp.broadcast_to(values, indices.shape) if values.size == 1 else values
    ok = (indices >= 0) & (indices < _leaves(state)) & jnp.isfinite(values) & (values >= 0)
    return _sum_tree.set_batch(state, indices, values, ok, device)


def set_non_batched(
    state: SumTreeState, node_index: Array | int, value: Array | float
) -> SumTreeState:
    """Set one item's priority (and ``max_recorded_priority`` if it is larger).

    Args:
        state: the tree.
        node_index: the item.
        value: its new priority (finite, >= 0; 0: never drawn).

    Returns:
        The updated tree.
    """
    return _set(state, jnp.asarray(node_index), jnp.asarray(value), "cpu")


def set_batch_bincount(state: SumTreeState, node_indices: Array, values: Array) -> SumTreeState:
    """Set many items' priorities, every tree level at once for the whole batch.

    The accelerator strategy (the reference's choice for ``device="gpu"``/``"tpu"``). With
    repeated indices the last value is kept, as in :func:`set_batch_scan`.

    Args:
        state: the tree.
        node_indices: items, int ``[n]``.
        values: their priorities ``[n]`` (or one for all).

    Returns:
        The updated tree.
    """
    return _set(state, node_indices, values, "gpu")


def set_batch_scan(state: SumTreeState, node_indices: Array, values: Array) -> SumTreeState:
    """Set many items' priorities one leaf at a time (the CPU strategy).

    The last value of a repeated index is kept. Same result as :func:`set_batch_bincount`.
    """
    return _set(state, node_indices, values, "cpu")


__all__ = [
    "SumTreeState",
    "get",
    "get_batch",
    "get_probability",
    "get_tree_depth",
    "get_tree_index",
    "init",
    "sample",
    "set_batch_bincount",
    "set_batch_scan",
    "set_non_batched",
    "stratified_sample",
]
