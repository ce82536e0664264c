"""A float32 sum tree over ``capacity`` non-negative priorities, for prioritised sampling.

Layout: ``nodes[1]`` is the root, node ``i`` has children ``2i`` and ``2i + 1``, leaf ``k`` is
``nodes[C + k]`` with ``C`` the next power of two >= capacity; ``nodes[0]`` is unused.

* ``set_batch`` writes leaves then recomputes each touched ancestor from its two children, so
  parents never drift from their children (no accumulated float deltas): cost
  ``O(k log C)`` for ``k`` updates; with duplicate indices the last one's value is kept, and
  the sums always match the leaves.
* ``sample`` descends with a guard: it never steps into a subtree whose sum is zero, so float32
  rounding near the boundaries can never select a zero-priority leaf while any leaf is positive.

The reference-exact mode updates this same layout with the reference's own arithmetic
(``buffers/_reference_exact.py``).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from buffers._pytree import Replaceable, pytree_dataclass


@pytree_dataclass
class SumTreeState(Replaceable):
    """``nodes``: float32 ``[2C]``; ``max_recorded_priority``: the largest leaf value ever set."""

    nodes: Array
    max_recorded_priority: Array


def tree_size(capacity: int) -> int:
    """``C``: the number of leaf slots (next power of two >= capacity)."""
    return 1 << max(capacity - 1, 0).bit_length()


def init(capacity: int) -> SumTreeState:
    return SumTreeState(
        nodes=jnp.zeros((2 * tree_size(capacity),), jnp.float32),
        max_recorded_priority=jnp.array(1.0, jnp.float32),
    )


def depth(state: SumTreeState) -> int:
    return (state.nodes.shape[-1] // 2).bit_length() - 1


def set_batch(
    state: SumTreeState,
    indices: Array,
    values: Array,
    mask: Any = None,
    device: str = "cpu",
    track_max: bool = True,
) -> SumTreeState:
    """Set leaves ``indices`` to ``values``; entries where ``mask`` is false are ignored.

    ``max_recorded_priority`` becomes the largest value set, unless ``track_max`` is false
    (for a caller that only sets values no larger than it, which saves the reduction).

    Two exact strategies, same result (with duplicate indices, the last one's value is kept):
    on CPU each leaf's path is walked with scalar in-place updates (a few hundred ns per leaf;
    level-wide gathers and scatters on a large tree cost far more there); on accelerators
    every level is updated for the whole batch at once. ``device`` is the reference's
    argument, whose default is ``"cpu"``; the level-wide strategy is also taken whenever the
    function is traced for an accelerator backend (``jax.default_backend()``), since walking
    paths one scalar kernel at a time costs milliseconds per batch there.
    """
    indices = jnp.asarray(indices, jnp.int32).reshape(-1)
    values = jnp.asarray(values, jnp.float32).reshape(-1)
    leaves = state.nodes.shape[-1] // 2
    valid = indices < leaves if mask is None else jnp.asarray(mask).reshape(-1)
    if device == "cpu" and jax.default_backend() == "cpu":
        nodes = _set_paths(state.nodes, indices, values, valid, depth(state))
    else:
        nodes = _set_by_level(state.nodes, indices, values, valid, depth(state))
    if not track_max:
        return SumTreeState(nodes=nodes, max_recorded_priority=state.max_recorded_priority)
    masked_max = jnp.max(jnp.where(valid, values, 0.0), initial=0.0)
    return SumTreeState(
        nodes=nodes,
        max_recorded_priority=jnp.maximum(state.max_recorded_priority, masked_max),
    )


def _set_paths(nodes: Array, indices: Array, values: Array, valid: Array, levels: int) -> Array:
    """Each leaf in turn: write it, then recompute its ancestors from their two children.

    An ignored entry walks leaf 0's path writing back the values already there: since every
    parent already equals the sum of its children, that changes nothing (on a tree whose sums
    were kept by deltas it makes that path's sums exact), and it costs less than a branch
    (``lax.cond``) would.
    """
    leaves = nodes.shape[-1] // 2

    def write(nodes: Array, leaf: Array, value: Array, ok: Array) -> Array:
        node = jnp.where(ok, leaf, 0) + leaves
        old = jax.lax.dynamic_index_in_dim(nodes, node, 0, keepdims=False)
        nodes = jax.lax.dynamic_update_index_in_dim(nodes, jnp.where(ok, value, old), node, 0)
        for _ in range(levels):  # unrolled (the depth is static)
            node = node >> 1
            pair = jax.lax.dynamic_slice_in_dim(nodes, 2 * node, 2)
            nodes = jax.lax.dynamic_update_index_in_dim(nodes, pair[0] + pair[1], node, 0)
        return nodes

    # a scan even for one or two leaves: XLA's cost model counts a loop body once, so an
    # ``add`` stays under the CPU client's threshold for running a program inline on the
    # calling thread (about 1,000 flops); written out, the paths cost it a thread hand-off
    def one(nodes: Array, item: tuple[Array, Array, Array]) -> tuple[Array, None]:
        return write(nodes, *item), None

    return jax.lax.scan(one, nodes, (indices, values, valid))[0]


def _last_of_each(indices: Array, valid: Array) -> Array:
    """``valid`` without the entries whose index comes again later in the batch: a scatter keeps
    an unspecified one of duplicates, the scalar path keeps the last."""
    key = jnp.where(valid, indices, -1)
    order = jnp.argsort(key, stable=True)
    ordered = key[order]
    last = jnp.concatenate([ordered[1:] != ordered[:-1], jnp.ones((1,), bool)])
    return valid & jnp.zeros(key.shape, bool).at[order].set(last)


def _set_by_level(nodes: Array, indices: Array, values: Array, valid: Array, levels: int) -> Array:
    size = nodes.shape[-1]
    valid = _last_of_each(indices, valid)
    node = jnp.where(valid, indices + size // 2, size)  # ``size`` is out of range: dropped
    nodes = nodes.at[node].set(values, mode="drop")
    for _ in range(levels):
        node = jnp.where(valid, node >> 1, size)
        left = jnp.minimum(2 * node, size - 2)
        nodes = nodes.at[node].set(nodes[left] + nodes[left + 1], mode="drop")
    return nodes


def total(state: SumTreeState) -> Array:
    """The sum of every priority: the root (one per tree of a state stacked by vmap/pmap)."""
    return state.nodes[..., 1]


def get(state: SumTreeState, indices: Array) -> Array:
    return state.nodes[indices + state.nodes.shape[-1] // 2]


def probabilities(state: SumTreeState, indices: Array) -> Array:
    """Normalised probabilities of ``indices``; 0 (never NaN) when the tree is empty."""
    tot = total(state)
    return jnp.where(tot > 0, get(state, indices) / jnp.where(tot > 0, tot, 1.0), 0.0)


def stratified_uniform(rng_key: Array, batch_size: int) -> Array:
    """One uniform draw in each of ``batch_size`` equal slices of ``[0, 1)``, float32.

    Drawn as the reference (Flashbax 0.1.3) draws them, so that the same key gives the same
    numbers: one key per slice (``split(rng_key, batch_size)``), each slice's bounds from
    ``linspace(0, 1, batch_size + 1)``.
    """
    keys = jax.random.split(rng_key, batch_size)
    bounds = jnp.linspace(0.0, 1.0, batch_size + 1, dtype=jnp.float32)
    draw = functools.partial(jax.random.uniform, shape=(), dtype=jnp.float32)
    return jax.vmap(lambda k, lo, hi: draw(k, minval=lo, maxval=hi))(keys, bounds[:-1], bounds[1:])


def sample(state: SumTreeState, rng_key: Array, batch_size: int, capacity: int) -> Array:
    """Stratified sampling: one draw in each of ``batch_size`` equal slices of the total.

    The descent is the reference's (left when the target is below the left sum) except that it
    never enters a subtree whose sum is zero; so wherever the reference's draw has a positive
    priority, the same key and sums give the same leaf.
    """
    target = stratified_uniform(rng_key, batch_size) * total(state)
    node = descend(state.nodes, target, depth(state))
    return jnp.minimum(node - state.nodes.shape[-1] // 2, capacity - 1)


def find(state: SumTreeState, target: Array) -> Array:
    """The leaf whose prefix-sum interval holds ``target`` (a value in ``[0, total)``).

    For every element of ``target``: the descent of :func:`sample`.
    """
    target = jnp.asarray(target, jnp.float32)
    node = descend(state.nodes, target.reshape(-1), depth(state)).reshape(target.shape)
    return node - state.nodes.shape[-1] // 2


def descend(nodes: Array, target: Array, levels: int, guard: bool = True) -> Array:
    """The leaf node reached from the root towards each ``target`` (one per element).

    At each level: left when the target is below the left child's sum, else right with the
    left sum taken off the target. With ``guard``, a child whose sum is zero is never entered
    while its sibling's is positive; without, the decisions are the reference's own.

    On CPU the levels are a loop whose body reads both children in one gather: written out,
    XLA fuses the whole descent into every consumer of its result (the gather of the sampled
    experience among them) and recomputes it there, and gives each level's gathers a parallel
    dispatch of their own. On accelerators the levels are written out (a loop costs a
    synchronisation per iteration there). Both make the same decisions.
    """
    pairs = nodes.reshape(-1, 2)  # row i: the children of node i

    def step(node: Array, target: Array) -> tuple[Array, Array]:
        children = pairs[node]
        left_sum, right_sum = children[:, 0], children[:, 1]
        if guard:
            go_right = ((target >= left_sum) & (right_sum > 0)) | (left_sum <= 0)
        else:
            go_right = ~(target < left_sum)
        return 2 * node + go_right.astype(jnp.int32), jnp.where(go_right, target - left_sum, target)

    node = jnp.ones(target.shape, jnp.int32)
    if jax.default_backend() == "cpu":
        node, _ = jax.lax.fori_loop(0, levels, lambda _, c: step(*c), (node, target))
        return node
    for _ in range(levels):
        node, target = step(node, target)
    return node
