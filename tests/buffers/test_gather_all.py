"""``buffers.gather_all`` against a trivially correct ring model, for every buffer kind.

The model keeps every value ever added to each row in a Python list (and, for the queue, drops
what ``sample`` consumed); what a state holds is then the last ``T`` values of each row (the
unread ones for a queue). Each added timestep is distinguishable (``conftest.timesteps``:
``action = v``, ``obs = [v, v + 0.5]``, ``reward = -v``), so comparing ``action`` checks order
and validity, and the other leaves must agree with it. Counts of adds range from an empty state
through an exactly full one to several wraps.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import buffers

ONE_PER_ROW = {"prioritised_flat", "n_step"}  # [B] batches: one timestep per row


def rows_added(kind: Any, step: int) -> list[list[int]]:
    """The ``action`` values that ``kind.batch(step)`` appends to each row, in order."""
    values = 100 * step + np.arange(int(np.prod(kind.batch_prefix, dtype=int)))
    if len(kind.batch_prefix) == 2:  # [B, L]
        return values.reshape(kind.batch_prefix).tolist()
    if kind.name in ONE_PER_ROW:
        return [[int(v)] for v in values]
    return [values.tolist()]  # one row: items (or transitions) in order


def capacity(state: Any) -> int:
    if hasattr(state, "data"):
        return int(jax.tree.leaves(state.data)[0].shape[0])
    return int(jax.tree.leaves(state.experience)[0].shape[1])


def check_against(got: Any, rows: list[list[int]]) -> None:
    want = np.array(rows, dtype=np.int32).reshape(len(rows), -1)
    action = np.asarray(got["action"])
    assert action.shape == want.shape
    np.testing.assert_array_equal(action, want)
    np.testing.assert_array_equal(np.asarray(got["reward"]), -want.astype(np.float32))
    np.testing.assert_array_equal(
        np.asarray(got["obs"]), np.stack([want, want + 0.5], axis=-1).astype(np.float32)
    )


FEW = settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
OPS = st.lists(st.booleans(), min_size=0, max_size=16)  # True: add, False: sample


@FEW
@given(ops=OPS)
@example(ops=[])  # empty
@example(ops=[True] * 4)  # exactly full for the [2, 2]-per-add kinds of capacity 8
@example(ops=[True] * 13)  # wrapped several times
@example(ops=[True] * 4 + [False, True, False, False, True, True])  # a queue wrapped, part read
def test_gather_all_is_what_the_ring_model_holds(counted_kind: Any, ops: list[bool]) -> None:
    """Rings hold the last ``T`` timesteps of each row; a queue its unread ones (a ``sample``
    consumes the oldest ``L``, an ``add`` that does not fit is not made)."""
    harness = counted_kind.harness()
    state = harness.init(counted_kind.timestep())
    queue = counted_kind.name == "trajectory_queue"
    t_len, length = capacity(state), 2
    held: list[list[int]] = [[] for _ in rows_added(counted_kind, 0)]
    for step, is_add in enumerate(ops):
        if is_add and not (queue and len(held[0]) + length > t_len):
            state = harness.jit_add(state, counted_kind.batch(step))
            for row, values in zip(held, rows_added(counted_kind, step), strict=True):
                row.extend(values)
            held = [row[-t_len:] for row in held]
        elif not is_add and queue and len(held[0]) >= length:
            state, _, _ = harness.jit_sample(state, jax.random.PRNGKey(step))
            held = [row[length:] for row in held]
        check_against(buffers.gather_all(state), held)


def test_gather_all_of_stacked_states_and_its_errors() -> None:
    buffer = buffers.make_trajectory_buffer(2, 1, 1, 1, 1, max_length_time_axis=3)
    add = jax.jit(buffer.add)
    state = buffer.init({"x": jnp.float32(0)})
    for step in range(4):  # wraps: holds steps 1, 2, 3
        state = add(state, {"x": jnp.full((2, 1), step, jnp.float32)})
    stacked = jax.tree.map(lambda a, b: jnp.stack([a, b]), state, state)
    np.testing.assert_array_equal(buffers.gather_all(stacked)["x"], [[[1, 2, 3]] * 2] * 2)

    apart = jax.tree.map(lambda a, b: jnp.stack([a, b]), state, add(state, {"x": jnp.ones((2, 1))}))
    with pytest.raises(buffers.BufferConfigError, match=re.escape("current_index = [1, 2]")):
        buffers.gather_all(apart)
    with pytest.raises(buffers.ArgumentTypeError, match="call it outside the transformation"):
        jax.jit(buffers.gather_all)(state)
    with pytest.raises(buffers.ArgumentTypeError, match="must be a buffer state"):
        buffers.gather_all({"x": jnp.zeros(3)})
