"""The reference-exact mode of the prioritised buffers: Flashbax 0.1.3's draws, bit for bit.

By default the prioritised buffers keep their sum tree exact (every parent the float32 sum of
its two children) and give new items the largest priority recorded so far. Flashbax 0.1.3
differs in three ways that change which items a run draws, and this mode reproduces each, so
that a run moved from Flashbax first reproduces its old curves (see
``docs/guides/reference-exact.md``):

* **New items' priority is truncated to an integer**: the reference fills an ``int32`` array
  with the recorded maximum (``2.7`` becomes ``2``; below ``1``, ``0``).
* **Sums are kept by deltas**: setting a leaf adds ``new - old`` to the leaf and to each of
  its ancestors, so a parent drifts from the sum of its children by rounding. With
  ``device="cpu"`` the entries are applied one after another (the reference's
  ``set_batch_scan``); with ``"gpu"``/``"tpu"`` all at once (its ``set_batch_bincount``: the
  leaves are set, each duplicate's delta is divided by its count, and the deltas are
  scatter-added level by level). An ``add`` updates the items that stop being valid first,
  then those that become valid, each in the reference's order.
* **The descent has no guard**: it goes right whenever the target is not below the left
  sum, so rounding can reach a zero-priority item or a padding leaf (an index at or beyond
  the capacity, whose sequence the gather clamps), and ``set_priorities`` sets any leaf of
  the tree it is given, valid item or not.

The tree keeps this package's layout (``nodes[1]`` the root, leaf ``k`` at ``nodes[C + k]``),
which is the reference's array shifted by one place (its root is at 0): the same additions in
the same order give the same floats. The reference's ``running_index`` is the low word of the
state's ``write_counter`` read as ``int32``. Exact on the CPU backend with either ``device``;
on a GPU, XLA does not fix the order of a scatter-add's updates, so the ``"gpu"`` path can
round differently from run to run (the reference's own run too) where two updated leaves
share an ancestor.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
from jax import Array

from buffers import _sum_tree
from buffers._core import tree_shape_prefix
from buffers._sum_tree import SumTreeState
from buffers._validation import check_priorities

if TYPE_CHECKING:
    import chex


def resolve_device(device: str) -> str:
    """The update path the reference takes for ``device``: its own, where JAX has that
    backend, else ``"cpu"`` with a warning (the reference falls back so; ``device="gpu"`` on a
    machine without a GPU updates its tree one entry at a time)."""
    if device == "cpu":
        return device
    try:
        jax.devices(device)
    except RuntimeError:
        warnings.warn(
            f"reference_exact: device={device!r} is not available here, so the sum tree is "
            "updated as the reference does then, with its 'cpu' path",
            stacklevel=3,
        )
        return "cpu"
    return device


def set_leaves(
    tree: SumTreeState, indices: Array, values: Array, ok: Array, device: str, capacity: int
) -> SumTreeState:
    """Set leaves as the reference's ``SET_BATCH_FN[device]`` does; ``ok`` false: ignored.

    ``values`` may be integers (they are converted to float32 where the reference converts
    them: when the delta is taken or the leaf is set). ``capacity``: the number of items.
    """
    indices = jnp.asarray(indices, jnp.int32).reshape(-1)
    values = jnp.asarray(values).reshape(-1)
    ok = jnp.asarray(ok).reshape(-1)
    levels = _sum_tree.depth(tree)
    if device == "cpu":
        nodes = _deltas_one_by_one(tree.nodes, indices, values.astype(jnp.float32), ok, levels)
    else:
        nodes = _deltas_by_level(tree.nodes, indices, values, ok, levels, capacity)
    largest = jnp.max(jnp.where(ok, values, 0)).astype(jnp.float32)
    return SumTreeState(
        nodes=nodes, max_recorded_priority=jnp.maximum(tree.max_recorded_priority, largest)
    )


def _deltas_one_by_one(
    nodes: Array, indices: Array, values: Array, ok: Array, levels: int
) -> Array:
    """Each entry in turn: ``delta = value - leaf`` added to the leaf and every ancestor."""
    leaves = nodes.shape[-1] // 2

    def one(nodes: Array, item: tuple[Array, Array, Array]) -> tuple[Array, None]:
        leaf, value, keep = item
        node = jnp.where(keep, leaf, 0) + leaves
        old = jax.lax.dynamic_index_in_dim(nodes, node, 0, keepdims=False)
        delta = jnp.where(keep, value - old, 0.0)  # x + 0.0 is x: an ignored entry is a no-op
        for _ in range(levels + 1):
            here = jax.lax.dynamic_index_in_dim(nodes, node, 0, keepdims=False)
            nodes = jax.lax.dynamic_update_index_in_dim(nodes, here + delta, node, 0)
            node = node >> 1
        return nodes, None

    return jax.lax.scan(one, nodes, (indices, values, ok))[0]


def _deltas_by_level(
    nodes: Array, indices: Array, values: Array, ok: Array, levels: int, capacity: int
) -> Array:
    """All entries at once: leaves set, deltas split among duplicates, scatter-added upwards."""
    size = nodes.shape[-1]
    leaves = size // 2
    leaf = jnp.where(ok, indices + leaves, size)  # ``size`` is out of range: dropped
    new = nodes.at[leaf].set(values.astype(nodes.dtype), mode="drop")
    delta = new.at[leaf].get(mode="fill", fill_value=0) - nodes.at[leaf].get(
        mode="fill", fill_value=0
    )
    # duplicates counted as the reference's ``bincount(indices, length=capacity)``: a padding
    # leaf (an index at or beyond the item count) is not counted and divides by 1
    counted = jnp.where(ok, indices, capacity)
    counts = jnp.zeros((capacity,), jnp.int32).at[counted].add(1, mode="drop")
    delta = delta / counts.at[indices].get(mode="fill", fill_value=1)
    node = leaf
    for _ in range(levels):
        node = jnp.where(ok, node >> 1, size)
        new = new.at[node].add(delta, mode="drop")
    return new


def changed_items(
    state: Any, seq_len: int, sequence_length: int, period: int
) -> tuple[Array, Array, Array, Array]:
    """``(invalid, invalid_ok, valid, valid_ok)``: the items an append of ``seq_len`` makes
    invalid and valid, flattened row by row in the reference's order (oldest first)."""
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    running = jax.lax.bitcast_convert_type(state.write_counter[..., 1], jnp.int32)

    def start(breaking: Array) -> Array:
        past = jnp.maximum(breaking - t_len, 0)
        return (past + period - 1) // period * period

    def end(first: Array, breaking: Array) -> Array:
        return first + ((breaking - first - sequence_length) // period + 1) * period

    start_1, start_2 = start(running), start(running + seq_len)
    end_1, end_2 = end(start_1, running), end(start_2, running + seq_len)
    steps = jnp.arange(seq_len // period + 1, dtype=jnp.int32) * period
    rows = jnp.arange(b_size, dtype=jnp.int32)[:, None] * (t_len // period)

    def items(low: Array, high: Array) -> tuple[Array, Array]:
        positions = low + steps
        idx = rows + ((positions % t_len) // period)[None, :]
        keep = jnp.broadcast_to((positions < high)[None, :], idx.shape)
        return idx.reshape(-1), keep.reshape(-1)

    invalid, invalid_ok = items(start_1, jnp.minimum(start_2, end_1))
    valid, valid_ok = items(jnp.maximum(start_2, end_1), end_2)
    return invalid, invalid_ok, valid, valid_ok


def append_tree(
    state: Any, seq_len: int, sequence_length: int, period: int, device: str
) -> SumTreeState:
    """The sum tree after appending ``seq_len`` timesteps, updated as the reference does:
    the items made invalid set to 0, then those made valid to the recorded maximum truncated
    to an integer (the reference's ``full_like(int32 indices, max_recorded_priority)``)."""
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    capacity = b_size * (t_len // period)
    invalid, invalid_ok, valid, valid_ok = changed_items(state, seq_len, sequence_length, period)
    tree = state.sum_tree_state
    zeros = jnp.zeros(invalid.shape, jnp.int32)
    tree = set_leaves(tree, invalid, zeros, invalid_ok, device, capacity)
    truncated = jnp.broadcast_to(tree.max_recorded_priority.astype(jnp.int32), valid.shape)
    return set_leaves(tree, valid, truncated, valid_ok, device, capacity)


def sample_items(
    state: Any, rng_key: chex.PRNGKey, batch_size: int, sequence_length: int, period: int
) -> tuple[Array, Array, Array]:
    """``(item_indices, rows, time_indices[batch, L])`` by the reference's unguarded descent."""
    _, t_len = tree_shape_prefix(state.experience, 2)
    tree = state.sum_tree_state
    target = _sum_tree.stratified_uniform(rng_key, batch_size) * _sum_tree.total(tree)
    node = _sum_tree.descend(tree.nodes, target, _sum_tree.depth(tree), guard=False)
    indices = node - tree.nodes.shape[-1] // 2
    items_per_row = t_len // period
    starts = (indices % items_per_row) * period
    times = (starts[:, None] + jnp.arange(sequence_length)) % t_len
    return indices, indices // items_per_row, times


def priorities_tree(
    state: Any,
    indices: Array,
    priorities: Array,
    priority_exponent: float,
    device: str,
    period: int,
) -> SumTreeState:
    """The sum tree with ``priorities ** priority_exponent`` set at any leaf of the tree,
    valid item or not, as the reference's ``set_priorities`` does.

    Raises :class:`~buffers.PriorityError` as the default mode does, except that an index is
    accepted up to the tree's leaf count (a padding leaf is what the reference's sampler can
    return). Inside ``jit`` such bad entries are ignored (the reference has no such check).
    """
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    leaves = state.sum_tree_state.nodes.shape[-1] // 2
    indices, priorities = check_priorities(indices, priorities, leaves)
    values = jnp.where(priorities == 0, 0.0, priorities**priority_exponent)
    ok = jnp.isfinite(values) & (priorities >= 0) & (indices >= 0) & (indices < leaves)
    capacity = b_size * (t_len // period)
    return set_leaves(state.sum_tree_state, indices, values, ok, device, capacity)
