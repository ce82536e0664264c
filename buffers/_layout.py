"""Batch layouts: how the flat, item and n-step buffers map what users add onto ``[B, L, ...]``.

One wrapper serves them all: it validates the batch against the layout the user declared
(``add_batches`` / ``add_sequences``), so errors speak of the shapes the user passes, then adds
the missing axes (and, for item buffers, folds batch and time into one row) before calling the
core ``add``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from buffers._core import tree_shape_prefix
from buffers._errors import BatchStructureError, LeafMismatch
from buffers._flashbax_state import accept_reference
from buffers._validation import check_state, leaves_with_paths, validate_batch


def layout_prefix(add_batches: bool, add_sequences: bool, batch_size: int | None) -> list[Any]:
    prefix: list[Any] = []
    if add_batches:
        prefix.append("B" if batch_size is None else batch_size)
    if add_sequences:
        prefix.append("L")
    return prefix


def layout_add(
    state: Any,
    batch: Any,
    *,
    core_add: Callable[[Any, Any], Any],
    add_batches: bool,
    add_sequences: bool,
    batch_size: int | None,
    fold_items: bool = False,
    sample_sequence_length: int = 1,
) -> Any:
    """Validate ``batch`` in the user's layout, reshape it to ``[B, L, ...]`` and add it.

    ``sample_sequence_length`` is the core buffer's (its windows start every timestep), for
    a state in the reference's shape to be converted with (see ``buffers/_flashbax_state.py``).
    """
    state = accept_reference(state, "add", sample_sequence_length=sample_sequence_length, period=1)
    check_state(state, ("experience",), "buffer state", "add")
    _, t_len = tree_shape_prefix(state.experience, 2)
    prefix = layout_prefix(add_batches, add_sequences, batch_size)
    batch = validate_batch(
        state.experience, batch, 2, prefix, max_time=None if fold_items else t_len
    )
    if fold_items:
        _check_item_count(batch, len(prefix), t_len)
    if not add_batches:
        batch = jax.tree.map(lambda x: x[None], batch)
    if not add_sequences:
        batch = jax.tree.map(lambda x: x[:, None], batch)
    if fold_items:
        batch = jax.tree.map(lambda x: x.reshape((1, x.shape[0] * x.shape[1], *x.shape[2:])), batch)
    return core_add(state, batch)


def _check_item_count(batch: Any, n_prefix: int, capacity: int) -> None:
    """Items folded from ``[b, l]`` must fit the buffer; report it in the user's shapes."""
    paths = leaves_with_paths(batch, "experience")
    count = 1
    for size in paths[0][1].shape[:n_prefix]:
        count *= int(size)
    if count > capacity:
        raise BatchStructureError(
            f"add: {count} items do not fit a buffer of max_length {capacity}",
            [
                LeafMismatch(path, f"at most {capacity} items", f"{list(leaf.shape)} {leaf.dtype}")
                for path, leaf in paths
            ],
            "Add at most max_length items per call.",
        )
