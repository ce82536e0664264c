"""Batches cut on the device: ``as_dataset(..., cut_on_device=True)``.

By default the stream's thread copies every batch out of the resident blocks on the host and
hands it to JAX (one transfer per batch and leaf). With ``cut_on_device`` each group of
blocks goes to JAX's default device once, one transfer per leaf, with the starts of its
sequences; the batches are then cut there by a jitted gather, a pack of them per call. On a
GPU that turns thousands of small transfers and the host's copies into a few large transfers
and gathers at the device's memory speed, which the per-batch host work no longer bounds.

The batches and their order are exactly those of the host path: only the whole batches
inside one group are cut on the device; a batch that spans two groups (and an epoch's
incomplete last batch) is cut on the host as before. With ``stack`` the unit is a stack of
batches: a whole stack inside a group comes out of one gather as one array per leaf
(``[stack, batch, seq, ...]``, never split and stacked again); a stack that spans two groups,
and an epoch's short last stack, are cut on the host.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

ZERO_COPY_BYTES = 256 << 10  # batch leaves this large are handed to JAX without a copy


@functools.cache
def _identity() -> Callable[[Any], Any]:
    import jax

    return jax.jit(lambda xs: xs)


def to_device(arrays: list[np.ndarray]) -> list[Any]:
    """JAX arrays of a batch cut on the host. ``jax.device_put`` adopts a large leaf without
    a copy on CPU but costs about 15 us per leaf; small leaves go through one jitted identity
    instead (JAX's C++ dispatch: one call for all of them, at the price of copying them)."""
    import jax

    out: list[Any] = list(arrays)
    small = [i for i, a in enumerate(arrays) if a.nbytes < ZERO_COPY_BYTES]
    large = [i for i, a in enumerate(arrays) if a.nbytes >= ZERO_COPY_BYTES]
    if large:
        moved = jax.device_put([arrays[i] for i in large])
        for i, x in zip(large, moved, strict=True):
            out[i] = x
    if small:
        for i, x in zip(small, _identity()([arrays[i] for i in small]), strict=True):
            out[i] = x
    return out


def wide_windows(flat: list[np.ndarray], base: np.ndarray, seq: int) -> list[np.ndarray]:
    """The windows of ``seq`` timesteps at ``base`` of each 64-bit integer leaf of ``flat``
    (others as empty arrays), for the stream's narrowing check: only the sequences cut on
    the device (a block group's buffers hold unread memory elsewhere)."""
    window = base[:, None] + np.arange(seq)
    return [a[window] if a.dtype.kind in "iu" and a.itemsize == 8 else a[:0] for a in flat]


@functools.cache
def _cut(count: int, item: tuple[int, ...], seq: int) -> Callable[..., Any]:
    """A jitted ``(leaves, starts, first) -> [count items of each leaf]``: the windows of
    ``seq`` timesteps at ``starts[first : first + count * prod(item)]`` of each flat leaf, each
    item shaped ``[*item, seq, ...]`` (``item``: ``(batch,)``, or ``(stack, batch)``: a stack
    comes out of the gather as one array)."""
    import jax
    import jax.numpy as jnp

    unit = math.prod(item)

    def cut(leaves: list[Any], starts: Any, first: Any) -> list[tuple[Any, ...]]:
        idx = jax.lax.dynamic_slice_in_dim(starts, first, count * unit)
        window = idx[:, None] + jnp.arange(seq, dtype=idx.dtype)
        out = []
        for leaf in leaves:
            got = jnp.take(leaf, window, axis=0, mode="clip")
            got = got.reshape(count, *item, seq, *leaf.shape[1:])
            out.append(tuple(got[i] for i in range(count)))
        return out

    return jax.jit(cut)


class DeviceGroup:
    """One group's leaves (flat: ``[rows * width, ...]``) and sequence starts on the device.

    ``starts`` index the flat leaves; they are padded (to a power of two of whole packs, so
    that few shapes are ever compiled) and the padding's items are never handed out. An item
    is a batch (``item=(batch,)``) or a stack of batches (``item=(stack, batch)``).
    """

    def __init__(
        self, flat: list[np.ndarray], starts: np.ndarray, item: tuple[int, ...], pack: int
    ) -> None:
        import jax

        self.item, self.pack, self.unit = item, pack, math.prod(item)
        self.count = starts.size // self.unit  # whole items
        size = max(1, -(-starts.size // (self.unit * pack))) * self.unit * pack
        padded = np.zeros(1 << (size - 1).bit_length(), np.int32)
        padded[: starts.size] = starts
        self.leaves = jax.device_put(flat)
        self.starts = jax.device_put(padded)

    def items(self, seq: int) -> Any:
        """Each whole item's leaves (JAX arrays ``[*item, seq, ...]``), a pack at a time: one
        jitted gather per pack."""
        cut = _cut(self.pack, self.item, seq)
        for first in range(0, self.count, self.pack):
            per_leaf = cut(self.leaves, self.starts, np.int32(first * self.unit))
            yield [list(leaves) for leaves in zip(*per_leaf, strict=True)][: self.count - first]


def rebuilder(tree: Any, leaves: list[Any]) -> Callable[[list[Any]], Any] | None:
    """Rebuild trees shaped like ``tree`` (just built from ``leaves``) through JAX's tree
    definition, about 3x cheaper per batch than :func:`_structure.build`; None when JAX does
    not see exactly those leaves in it (a class JAX does not know as a pytree)."""
    import jax

    flat, treedef = jax.tree.flatten(tree)
    where = {id(x): k for k, x in enumerate(leaves)}
    order = [where.get(id(x), -1) for x in flat]
    if len(where) != len(leaves) or sorted(order) != list(range(len(leaves))):
        return None
    return lambda values: jax.tree.unflatten(treedef, [values[k] for k in order])


def on_accelerator() -> bool:
    """Whether JAX's default backend is an accelerator (batches are then put on it)."""
    import jax

    return bool(jax.default_backend() != "cpu")
