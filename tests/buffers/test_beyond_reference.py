"""Promises this package makes beyond the reference (Flashbax) API.

(a) sampling a state that is not ready is an error eagerly and a false ``valid`` mask in
    ``jit`` (no effects in the compiled sample), never silent zeros;
(b) the never-wrapping write counter;
(c) ``add`` names every bad leaf of a batch; (d) prioritised sampling edge cases; (e) warnings
    that name the effective capacity; (f) configuration errors; (g) the state containers.

Tests over every kind take the ``buffer_kind`` / ``counted_kind`` / ``prioritised_kind``
fixtures of the conformance table in ``tests/conftest.py``.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.experimental import checkify

import buffers
from buffers import _sum_tree


def timestep() -> dict[str, jax.Array]:
    return {"obs": jnp.zeros((2,), jnp.float32), "reward": jnp.zeros((), jnp.float32)}


# --------------------------------------------------------------------------------------------
# (a) Sampling when can_sample is false
# --------------------------------------------------------------------------------------------


def test_eager_sample_before_ready_raises(buffer_kind):
    h = buffer_kind.harness()
    empty = h.init(buffer_kind.timestep())
    assert not bool(h.can_sample(empty))
    with pytest.raises(buffers.NotReadyError, match=re.escape("`can_sample(state)` is false")):
        h.sample(empty, jax.random.PRNGKey(0))
    if buffer_kind.adds_to_ready > 1:  # one add short of ready is still not ready
        almost = h.filled_state(buffer_kind.adds_to_ready - 1)
        assert not bool(h.can_sample(almost))
        with pytest.raises(buffers.NotReadyError):
            h.sample(almost, jax.random.PRNGKey(0))
    assert bool(h.can_sample(h.filled_state()))


def test_not_ready_is_a_runtime_error_of_the_hierarchy():
    assert issubclass(buffers.NotReadyError, buffers.BufferError)
    assert issubclass(buffers.NotReadyError, RuntimeError)
    assert issubclass(buffers.QueueFullError, buffers.BufferError)
    assert issubclass(buffers.QueueFullError, RuntimeError)


def test_jitted_sample_before_ready_is_flagged_invalid(buffer_kind):
    h = buffer_kind.harness()
    _, _, valid = h.jit_sample(h.init(buffer_kind.timestep()), jax.random.PRNGKey(0))
    assert np.asarray(valid).shape == (buffer_kind.sample_batch,)
    assert not np.asarray(valid).any()
    _, _, valid = h.jit_sample(h.filled_state(), jax.random.PRNGKey(0))
    assert np.asarray(valid).all()


def test_jitted_sample_has_no_effects(buffer_kind):
    """No checkify/debug effects: a jitted sample keeps JAX's fast dispatch path."""
    h = buffer_kind.harness()
    jaxpr = jax.make_jaxpr(h.sample)(h.init(buffer_kind.timestep()), jax.random.PRNGKey(0))
    assert not jaxpr.effects


def test_the_valid_mask_turns_into_a_checkify_error_in_user_code(buffer_kind):
    """The documented recipe for users who want an error inside jit."""
    h = buffer_kind.harness()

    def step(state, key):
        _, _, valid = h.sample(state, key)
        checkify.check(valid.all(), "sampled before can_sample")
        return valid

    checked = checkify.checkify(jax.jit(step))
    err, _ = checked(h.init(buffer_kind.timestep()), jax.random.PRNGKey(0))
    assert "sampled before can_sample" in err.get()
    err, _ = checked(h.filled_state(), jax.random.PRNGKey(0))
    assert err.get() is None


def test_jitted_queue_does_not_consume_when_not_ready():
    queue = buffers.make_trajectory_queue(8, 2, 2, 2)
    empty = queue.init(timestep())
    state, sample = jax.jit(queue.sample)(empty)
    assert not np.asarray(sample.valid).any()
    assert int(state.read_index) == 0
    assert int(state.write_index) == 0
    assert buffers.timesteps_added(state) == 0


def test_full_queue_refuses_add():
    queue = buffers.make_trajectory_queue(4, 1, 2, 2)
    batch = {"obs": jnp.ones((1, 2, 2)), "reward": jnp.ones((1, 2))}
    add = jax.jit(queue.add)
    full = add(add(queue.init(timestep()), batch), batch)
    assert not bool(queue.can_add(full))
    with pytest.raises(buffers.QueueFullError, match=re.escape("the queue holds 4 unread of 4")):
        queue.add(full, batch)
    # In jit the add is refused: nothing is overwritten and the counter does not move.
    refused = add(full, jax.tree.map(lambda x: 7 * x, batch))
    for got, want in zip(jax.tree.leaves(refused), jax.tree.leaves(full), strict=True):
        np.testing.assert_array_equal(got, want)
    assert buffers.timesteps_added(refused) == 4
    # After a sample (which consumes two timesteps) the add fits again.
    state, sample = queue.sample(full)
    assert np.asarray(sample.valid).all()
    assert buffers.timesteps_added(add(state, batch)) == 6


def test_replay_buffer_before_ready():
    rb = buffers.ReplayBuffer(4)
    empty = rb.init({"obs": jnp.zeros(2), "action": jnp.int32(0)})
    key = jax.random.PRNGKey(0)
    with pytest.raises(buffers.NotReadyError, match=re.escape("ReplayBuffer.sample:")):
        rb.sample(empty, 3, key)
    with pytest.raises(buffers.NotReadyError):
        rb.sample_masked(empty, 3, key)

    sample = jax.jit(rb.sample, static_argnums=1)
    sample_masked = jax.jit(rb.sample_masked, static_argnums=1)
    _, batch = sample(empty, 3, key)
    assert np.isnan(np.asarray(batch["obs"])).all()  # floats are poisoned, never zeros
    assert batch["action"].dtype == jnp.int32  # other leaves keep their dtype
    _, _, valid = sample_masked(empty, 3, key)
    assert not np.asarray(valid).any()

    state = rb.add(empty, {"obs": jnp.ones((2, 2)), "action": jnp.array([5, 6], jnp.int32)})
    _, batch = sample(state, 3, key)
    np.testing.assert_array_equal(batch["obs"], np.ones((3, 2)))
    assert set(np.asarray(batch["action"]).tolist()) <= {5, 6}
    _, _, valid = sample_masked(state, 3, key)
    assert np.asarray(valid).all()


# --------------------------------------------------------------------------------------------
# (b) The write counter
# --------------------------------------------------------------------------------------------


def test_timesteps_added_counts_every_add(counted_kind):
    """Past the ring's capacity too (and for the queue, which consumes, interleaved)."""
    h = counted_kind.harness()
    state = h.init(counted_kind.timestep())
    assert buffers.timesteps_added(state) == 0
    for i in range(10):
        state = h.jit_add(state, counted_kind.batch(i))
        state, _, _ = h.jit_sample(state, jax.random.PRNGKey(i))
        assert buffers.timesteps_added(state) == (i + 1) * counted_kind.steps_per_add
    assert type(buffers.timesteps_added(state)) is int


@pytest.mark.parametrize("start", [2**31 - 3, 2**32 - 2, 2**33 + 2**32 - 1])
def test_write_counter_is_exact_past_2_to_the_31_and_32(counted_kind, start):
    assert not jax.config.jax_enable_x64
    h = counted_kind.harness()
    state = h.init(counted_kind.timestep())
    state = state.replace(write_counter=buffers.write_counter_from_int(start))
    assert buffers.timesteps_added(state) == start
    for i in range(4):
        state = h.jit_add(state, counted_kind.batch(i))
    expected = start + 4 * counted_kind.steps_per_add
    assert buffers.timesteps_added(state) == expected
    assert state.write_counter.dtype == jnp.uint32
    assert np.asarray(state.write_counter).tolist() == [expected >> 32, expected % 2**32]


@pytest.mark.parametrize("start", [2**31 - 1, 2**32 - 1])
def test_write_counter_is_exact_eagerly(start):
    buffer = buffers.make_trajectory_buffer(1, 1, 1, 1, 1, max_length_time_axis=4)
    state = buffer.init(timestep())
    state = state.replace(write_counter=buffers.write_counter_from_int(start))
    state = buffer.add(state, {"obs": jnp.zeros((1, 3, 2)), "reward": jnp.zeros((1, 3))})
    assert buffers.timesteps_added(state) == start + 3
    rb = buffers.ReplayBuffer(4)
    rb_state = rb.init(timestep()).replace(write_counter=buffers.write_counter_from_int(start))
    rb_state = rb.add(rb_state, {"obs": jnp.zeros((3, 2)), "reward": jnp.zeros(3)})
    assert buffers.timesteps_added(rb_state) == start + 3


def test_write_counter_of_stacked_states(counted_kind):
    """For a vmapped (or pmapped) state, an array of exact Python ints."""
    h = counted_kind.harness()
    starts = [0, 2**31 - 1, 2**32 - 1]
    states = jax.vmap(h.init)(jax.tree.map(lambda x: jnp.stack([x] * 3), counted_kind.timestep()))
    counters = jnp.stack([buffers.write_counter_from_int(s) for s in starts])
    states = states.replace(write_counter=counters)
    add = jax.jit(jax.vmap(h.add))
    for i in range(2):
        states = add(states, jax.tree.map(lambda x: jnp.stack([x] * 3), counted_kind.batch(i)))
    added = buffers.timesteps_added(states)
    assert isinstance(added, np.ndarray)
    assert added.shape == (3,)
    assert added.tolist() == [s + 2 * counted_kind.steps_per_add for s in starts]
    assert all(type(x) is int for x in added.tolist())


def test_write_counter_from_int_bounds():
    assert buffers.timesteps_added(
        buffers.TrajectoryBufferState(
            experience={"x": jnp.zeros((1, 2))},
            current_index=jnp.int32(0),
            is_full=jnp.bool_(False),
            write_counter=buffers.write_counter_from_int(2**64 - 1),
        )
    ) == (2**64 - 1)
    for bad in (-1, 2**64):
        with pytest.raises(ValueError, match=re.escape("write counter must be in [0, 2**64)")):
            buffers.write_counter_from_int(bad)


def test_prioritised_running_index_is_the_low_word():
    buffer = buffers.make_prioritised_trajectory_buffer(1, 1, 1, 1, 1, max_length_time_axis=4)
    state = buffer.init(timestep())
    state = state.replace(write_counter=buffers.write_counter_from_int(2**32 + 5))
    assert int(state.running_index) == 5
    assert state.running_index.dtype == jnp.uint32


# --------------------------------------------------------------------------------------------
# (c) add names every bad leaf
# --------------------------------------------------------------------------------------------

TRAJECTORY = buffers.make_trajectory_buffer(
    add_batch_size=2,
    sample_batch_size=2,
    sample_sequence_length=2,
    period=1,
    min_length_time_axis=2,
    max_length_time_axis=8,
)
LAYOUT_REMEDY = (
    "Check the leading axes this buffer expects (shown first in each shape) and cast leaves "
    "to the dtypes of the example given to `init`."
)


def ts3() -> dict[str, jax.Array]:
    return {
        "obs": jnp.zeros((2,), jnp.float32),
        "action": jnp.zeros((), jnp.int32),
        "reward": jnp.zeros((), jnp.float32),
    }


def test_wrong_shape_names_the_leaf_with_expected_and_got():
    state = TRAJECTORY.init(ts3())
    bad = {
        "obs": jnp.zeros((2, 2, 3)),
        "action": jnp.zeros((2, 2), jnp.int32),
        "reward": jnp.zeros((2, 2)),
    }
    with pytest.raises(buffers.BatchStructureError) as info:
        TRAJECTORY.add(state, bad)
    assert str(info.value) == (
        "add: batch does not match the buffer: 1 bad leaf/leaves\n"
        "  - experience/obs: expected [2, 1..8, 2] float32, got [2, 2, 3] float32\n" + LAYOUT_REMEDY
    )
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, buffers.BufferError)


def test_every_bad_leaf_is_reported():
    state = TRAJECTORY.init(ts3())
    bad = {
        "obs": jnp.zeros((2, 2, 3), jnp.float32),  # wrong item shape
        "action": jnp.zeros((3, 2), jnp.int32),  # wrong batch size
        "reward": jnp.zeros((2, 2), jnp.int32),  # wrong dtype
    }
    with pytest.raises(buffers.BatchStructureError, match="3 bad leaf/leaves") as info:
        TRAJECTORY.add(state, bad)
    message = str(info.value)
    for line in (
        "experience/obs: expected [2, 1..8, 2] float32, got [2, 2, 3] float32",
        "experience/action: expected [2, 1..8] int32, got [3, 2] int32",
        "experience/reward: expected [2, 1..8] float32, got [2, 2] int32",
    ):
        assert f"  - {line}\n" in message
    assert [(m.path, m.expected, m.got) for m in info.value.mismatches] == [
        ("experience/action", "[2, 1..8] int32", "[3, 2] int32"),
        ("experience/obs", "[2, 1..8, 2] float32", "[2, 2, 3] float32"),
        ("experience/reward", "[2, 1..8] float32", "[2, 2] int32"),
    ]
    assert all(isinstance(m, buffers.LeafMismatch) for m in info.value.mismatches)


def test_wrong_structure_names_missing_and_extra_leaves():
    state = TRAJECTORY.init(ts3())
    bad = {"obs": jnp.zeros((2, 2, 2)), "actions": jnp.zeros((2, 2), jnp.int32)}
    with pytest.raises(buffers.BatchStructureError) as info:
        TRAJECTORY.add(state, bad)
    message = str(info.value)
    assert message.startswith("add: batch structure differs from the buffer's: 3 bad leaf/leaves")
    assert "  - experience/action: expected a leaf here, got nothing\n" in message
    assert "  - experience/reward: expected a leaf here, got nothing\n" in message
    assert "  - experience/actions: expected no leaf here, got a leaf\n" in message
    assert message.endswith(
        "Add batches with exactly the structure of the timestep given to `init`."
    )
    assert sorted(m.path for m in info.value.mismatches) == [
        "experience/action",
        "experience/actions",
        "experience/reward",
    ]


def test_time_axis_longer_than_the_buffer_and_unequal_time_axes():
    state = TRAJECTORY.init(ts3())
    too_long = {
        "obs": jnp.zeros((2, 9, 2)),
        "action": jnp.zeros((2, 9), jnp.int32),
        "reward": jnp.zeros((2, 9)),
    }
    with pytest.raises(
        buffers.BatchStructureError,
        match=re.escape("experience/obs: expected [2, 1..8, 2] float32, got [2, 9, 2] float32"),
    ):
        TRAJECTORY.add(state, too_long)
    unequal = {  # leaves are checked in flattening (sorted key) order
        "obs": jnp.zeros((2, 2, 2)),
        "action": jnp.zeros((2, 2), jnp.int32),
        "reward": jnp.zeros((2, 3)),
    }
    with pytest.raises(
        buffers.BatchStructureError,
        match=re.escape(
            "experience/reward: expected axis L of size 2 (as experience/action), got 3"
        ),
    ):
        TRAJECTORY.add(state, unequal)


def test_bad_batch_raises_at_trace_time_under_jit():
    state = TRAJECTORY.init(ts3())
    bad = {
        "obs": jnp.zeros((2, 2, 2), jnp.int32),
        "action": jnp.zeros((2, 2), jnp.int32),
        "reward": jnp.zeros((2, 2)),
    }
    with pytest.raises(
        buffers.BatchStructureError,
        match=re.escape("experience/obs: expected [2, 1..8, 2] float32, got [2, 2, 2] int32"),
    ):
        jax.jit(TRAJECTORY.add)(state, bad)


@pytest.mark.parametrize(
    ("make", "bad_obs", "reward", "expected"),
    [
        pytest.param(
            lambda: buffers.make_flat_buffer(8, 1, 2),
            jnp.zeros((3,)),
            0.0,
            "experience/obs: expected [2] float32, got [3] float32",
            id="flat-one-timestep",
        ),
        pytest.param(
            lambda: buffers.make_flat_buffer(8, 1, 2, add_batch_size=4),
            jnp.zeros((3, 2)),
            jnp.zeros(4),
            "experience/obs: expected [4, 2] float32, got [3, 2] float32",
            id="flat-batches",
        ),
        pytest.param(
            lambda: buffers.make_flat_buffer(8, 1, 2, add_sequences=True),
            jnp.zeros((3, 3)),
            jnp.zeros(3),
            "experience/obs: expected [1..8, 2] float32, got [3, 3] float32",
            id="flat-sequences",
        ),
        pytest.param(
            lambda: buffers.make_flat_buffer(16, 1, 2, add_sequences=True, add_batch_size=4),
            jnp.zeros((4, 3, 2), jnp.int32),
            jnp.zeros((4, 3)),
            "experience/obs: expected [4, 1..4, 2] float32, got [4, 3, 2] int32",
            id="flat-batches-of-sequences",
        ),
        pytest.param(
            lambda: buffers.make_prioritised_flat_buffer(8, 1, 2, add_batch_size=2),
            jnp.zeros((2,)),
            jnp.zeros(2),
            "experience/obs: expected [2, 2] float32, got [2] float32",
            id="prioritised-flat",
        ),
        pytest.param(
            lambda: buffers.make_n_step_buffer(16, 1, 2, add_batch_size=4, n_step=2),
            jnp.zeros((3, 2)),
            jnp.zeros(4),
            "experience/obs: expected [4, 2] float32, got [3, 2] float32",
            id="n-step",
        ),
        pytest.param(
            lambda: buffers.make_item_buffer(8, 1, 2),
            jnp.zeros((1, 2)),
            0.0,
            "experience/obs: expected [2] float32, got [1, 2] float32",
            id="item-one",
        ),
        pytest.param(
            lambda: buffers.make_item_buffer(8, 1, 2, add_batches=True),
            jnp.zeros((3,)),
            jnp.zeros(3),
            "experience/obs: expected [B, 2] float32, got [3] float32",
            id="item-batches",
        ),
        pytest.param(
            lambda: buffers.make_prioritised_item_buffer(8, 1, 2, add_sequences=True),
            jnp.zeros((2, 3)),
            jnp.zeros(2),
            "experience/obs: expected [L, 2] float32, got [2, 3] float32",
            id="prioritised-item-sequences",
        ),
    ],
)
def test_layout_buffers_speak_of_the_shapes_the_user_passes(make, bad_obs, reward, expected):
    """Flat, item and n-step errors describe the user's layout, not the internal [B, T].

    ``reward`` is right (a Python float is fine for a scalar leaf); only ``obs`` is wrong.
    """
    buffer = make()
    state = buffer.init(timestep())
    with pytest.raises(buffers.BatchStructureError, match=re.escape(expected)) as info:
        buffer.add(state, {"obs": bad_obs, "reward": reward})
    assert [m.path for m in info.value.mismatches] == ["experience/obs"]


@pytest.mark.parametrize(
    ("make", "expected_obs", "expected_reward"),
    [
        pytest.param(
            lambda: buffers.make_flat_buffer(8, 1, 2, add_sequences=True),
            "experience/obs: expected [1..8, 2] float32, got [12, 2] float32",
            "experience/reward: expected [1..8] float32, got [12] float32",
            id="flat-sequences",
        ),
        pytest.param(
            lambda: buffers.make_item_buffer(8, 1, 2, add_batches=True),
            "got [12, 2] float32",
            "got [12] float32",
            id="item-batches",
        ),
        pytest.param(
            lambda: buffers.make_item_buffer(8, 1, 2, add_sequences=True),
            "got [12, 2] float32",
            "got [12] float32",
            id="item-sequences",
        ),
    ],
)
def test_more_timesteps_than_the_buffer_holds_speaks_of_the_users_shapes(
    make, expected_obs, expected_reward
):
    """12 timesteps or items into a buffer of 8: both leaves named, in the user's layout."""
    buffer = make()
    with pytest.raises(buffers.BatchStructureError) as info:
        buffer.add(buffer.init(timestep()), {"obs": jnp.zeros((12, 2)), "reward": jnp.zeros(12)})
    message = str(info.value)
    assert expected_obs in message
    assert expected_reward in message


def test_replay_buffer_add_errors():
    rb = buffers.ReplayBuffer(4)
    state = rb.init(timestep())
    with pytest.raises(
        buffers.BatchStructureError,
        match=re.escape("data/obs: expected [k, 2] float32, got [3, 3] float32"),
    ):
        rb.add(state, {"obs": jnp.zeros((3, 3)), "reward": jnp.zeros(3)})
    with pytest.raises(buffers.BufferError, match="5 transitions exceed buffer_size 4") as info:
        rb.add(state, {"obs": jnp.zeros((5, 2)), "reward": jnp.zeros(5)})
    assert isinstance(info.value, ValueError)


# --------------------------------------------------------------------------------------------
# (d) Prioritised sampling edge cases
# --------------------------------------------------------------------------------------------


def test_empty_prioritised_buffer_has_zero_not_nan_probabilities(prioritised_kind):
    h = prioritised_kind.harness()
    sample = jax.jit(h.buffer.sample)
    batch = sample(h.init(prioritised_kind.timestep()), jax.random.PRNGKey(0))
    probabilities = np.asarray(batch.probabilities)
    assert not np.isnan(probabilities).any()
    np.testing.assert_array_equal(probabilities, 0.0)
    assert not np.asarray(batch.valid).any()

    # A ready buffer whose priorities were all set to zero: no NaN either, and flagged.
    state = h.filled_state()
    n_items = state.sum_tree_state.nodes.shape[0] // 2
    zeroed = jax.jit(h.buffer.set_priorities)(state, jnp.arange(n_items), jnp.zeros(n_items))
    batch = sample(zeroed, jax.random.PRNGKey(0))
    np.testing.assert_array_equal(np.asarray(batch.probabilities), 0.0)
    assert not np.asarray(batch.valid).any()

    batch = sample(state, jax.random.PRNGKey(0))
    assert (np.asarray(batch.probabilities) > 0).all()
    assert np.asarray(batch.valid).all()


N_SLOTS = 16  # the sum tree's leaves
N_WRITTEN = 12  # items 12..15 were never written: priority 0 for good
EXTREME = buffers.make_prioritised_trajectory_buffer(
    add_batch_size=1,
    sample_batch_size=32,
    sample_sequence_length=1,
    period=1,
    min_length_time_axis=1,
    max_length_time_axis=N_SLOTS,
    priority_exponent=1.0,
)


@jax.jit
def _extreme_draws(priorities: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    state = EXTREME.init({"x": jnp.zeros(())})
    state = EXTREME.add(state, {"x": jnp.arange(N_WRITTEN, dtype=jnp.float32)[None]})
    state = EXTREME.set_priorities(state, jnp.arange(N_WRITTEN), priorities)
    keys = jax.random.split(jax.random.PRNGKey(0), 64)
    batch = jax.vmap(EXTREME.sample, in_axes=(None, 0))(state, keys)
    leaves = _sum_tree.get(state.sum_tree_state, jnp.arange(N_SLOTS))
    return batch.indices, batch.probabilities, batch.valid, leaves


PRIORITY_VALUES = st.sampled_from([0.0, 1e-30, 1e-20, 1e-7, 1.0, 3.0, 1e7, 1e20, 1e30])


@given(st.lists(PRIORITY_VALUES, min_size=N_WRITTEN, max_size=N_WRITTEN))
def test_extreme_priority_ranges_never_sample_a_zero_priority_item(priorities):
    """float32 rounding in the sum tree's descent never lands on a zero-priority item."""
    if not any(priorities):  # an all-zero tree is the empty case, tested above
        priorities = [*priorities[:-1], 1e-30]
    indices, probabilities, valid, leaves = map(
        np.asarray, _extreme_draws(jnp.array(priorities, jnp.float32))
    )
    np.testing.assert_array_equal(leaves[:N_WRITTEN], np.float32(priorities))
    np.testing.assert_array_equal(leaves[N_WRITTEN:], 0.0)
    assert (leaves[indices] > 0).all(), sorted(set(indices[leaves[indices] == 0].tolist()))
    assert (probabilities > 0).all()
    assert not np.isnan(probabilities).any()
    assert valid.all()


@pytest.mark.parametrize(
    "priorities",
    [
        [1e-30] * (N_WRITTEN - 1) + [1e30],  # the huge item last, zeros right after it
        [1e30] * (N_WRITTEN - 1) + [1e-30],  # a tiny item at the edge of the written ones
        [1e30, 0.0] * (N_WRITTEN // 2),  # zeros interleaved with huge items
        [0.0] * (N_WRITTEN - 1) + [1e-30],  # a single tiny item
    ],
    ids=["huge-last", "tiny-last", "interleaved-zeros", "single-tiny"],
)
def test_extreme_priority_patterns(priorities):
    indices, probabilities, valid, leaves = map(
        np.asarray, _extreme_draws(jnp.array(priorities, jnp.float32))
    )
    assert (leaves[indices] > 0).all()
    assert (probabilities > 0).all()
    assert valid.all()


def test_set_priorities_ignores_an_overwritten_window():
    buffer = buffers.make_prioritised_trajectory_buffer(
        add_batch_size=1,
        sample_batch_size=4,
        sample_sequence_length=2,
        period=1,
        min_length_time_axis=2,
        max_length_time_axis=4,
        priority_exponent=1.0,
    )

    def leaves(state: Any) -> list[float]:
        return np.asarray(_sum_tree.get(state.sum_tree_state, jnp.arange(4))).tolist()

    # Jitted: op-by-op, the sum tree's unrolled loops would dominate the test's run time.
    add, set_priorities = jax.jit(buffer.add), jax.jit(buffer.set_priorities)
    sample = jax.jit(jax.vmap(buffer.sample, in_axes=(None, 0)))
    state = buffer.init({"x": jnp.zeros(())})
    state = add(state, {"x": jnp.arange(4.0)[None]})
    # Windows [0, 1], [1, 2], [2, 3] are valid; [3, 0] would straddle the write position.
    assert leaves(state) == [1.0, 1.0, 1.0, 0.0]
    state = set_priorities(state, jnp.array([0, 1, 2]), jnp.array([2.0, 3.0, 4.0]))
    assert leaves(state) == [2.0, 3.0, 4.0, 0.0]

    # One more timestep overwrites slot 0: item 0's window is gone, item 3's is complete.
    state = add(state, {"x": jnp.array([[4.0]])})
    assert leaves(state) == [0.0, 3.0, 4.0, 4.0]
    stale = set_priorities(state, jnp.array([0, 0, 0]), jnp.array([100.0, 100.0, 100.0]))
    assert leaves(stale) == [0.0, 3.0, 4.0, 4.0]  # ignored
    assert float(stale.sum_tree_state.max_recorded_priority) == 4.0
    batch = sample(stale, jax.random.split(jax.random.PRNGKey(0), 32))
    assert 0 not in np.asarray(batch.indices).tolist()
    assert set(np.asarray(batch.indices).ravel().tolist()) == {1, 2, 3}

    # When slot 0 holds a complete window again, it gets the max recorded priority, not 100.
    state = add(stale, {"x": jnp.array([[5.0]])})
    assert leaves(state) == [4.0, 0.0, 4.0, 4.0]


def test_set_priorities_ignores_indices_outside_the_buffer():
    """An index that names no item (>= capacity, or negative) has no window: it is ignored
    like a stale one, rather than written into the sum tree's padding or inner nodes."""
    buffer = buffers.make_prioritised_trajectory_buffer(
        1, 8, 1, 1, 1, max_length_time_axis=3, priority_exponent=1.0
    )
    state = jax.jit(buffer.add)(buffer.init({"x": jnp.zeros(())}), {"x": jnp.arange(3.0)[None]})
    before = np.asarray(state.sum_tree_state.nodes)
    np.testing.assert_array_equal(before[4:], [1.0, 1.0, 1.0, 0.0])  # 3 items, 1 padding leaf
    after = jax.jit(buffer.set_priorities)(state, jnp.array([3, 7, -1]), jnp.full(3, 100.0))
    np.testing.assert_array_equal(np.asarray(after.sum_tree_state.nodes), before)
    assert float(after.sum_tree_state.max_recorded_priority) == 1.0


# --------------------------------------------------------------------------------------------
# (e) Warnings that name the effective capacity
# --------------------------------------------------------------------------------------------


def test_max_size_not_divisible_by_add_batch_size_warns():
    with pytest.warns(UserWarning, match="not a multiple") as record:
        buffer = buffers.make_trajectory_buffer(
            add_batch_size=3,
            sample_batch_size=2,
            sample_sequence_length=2,
            period=1,
            min_length_time_axis=2,
            max_size=10,
        )
    assert [str(w.message) for w in record] == [
        (
            "max_size=10 is not a multiple of add_batch_size=3: the buffer holds 9 timesteps "
            "(3 rows x 3), 1 fewer than asked. See `buffer.capacity`."
        )
    ]
    assert record[0].filename == __file__  # points at the caller
    assert buffer.capacity == 9
    assert buffer.max_length_time_axis == 3


def test_prioritised_period_rounding_warns():
    with pytest.warns(UserWarning, match="not a multiple") as record:
        buffer = buffers.make_prioritised_trajectory_buffer(
            add_batch_size=2,
            sample_batch_size=2,
            sample_sequence_length=2,
            period=3,
            min_length_time_axis=2,
            max_length_time_axis=10,
        )
    assert [str(w.message) for w in record] == [
        (
            "max_length_time_axis=10 is not a multiple of period=3: using 9, so the buffer "
            "holds 18 timesteps (2 fewer). See `buffer.capacity`."
        )
    ]
    assert record[0].filename == __file__
    assert buffer.capacity == 18
    assert buffer.max_length_time_axis == 9
    state = buffer.init(timestep())
    assert state.experience["obs"].shape == (2, 9, 2)


def test_both_roundings_warn_once_each():
    with pytest.warns(UserWarning, match="not a multiple") as record:
        buffer = buffers.make_prioritised_trajectory_buffer(2, 2, 2, 3, 2, max_size=21)
    messages = [str(w.message) for w in record]
    assert len(messages) == 2
    assert "holds 20 timesteps (2 rows x 10), 1 fewer than asked" in messages[0]
    assert "using 9, so the buffer holds 18 timesteps" in messages[1]
    assert buffer.capacity == 18


@pytest.mark.parametrize(
    "make",
    [
        lambda: buffers.make_flat_buffer(10, 1, 2, add_batch_size=3),
        lambda: buffers.make_n_step_buffer(10, 1, 2, add_batch_size=3, n_step=1),
        lambda: buffers.make_prioritised_flat_buffer(10, 1, 2, add_batch_size=3),
    ],
    ids=["flat", "n-step", "prioritised-flat"],
)
def test_flat_max_length_not_divisible_warns(make):
    with pytest.warns(UserWarning, match="not a multiple") as record:
        buffer = make()
    assert [str(w.message) for w in record] == [
        (
            "max_length=10 is not a multiple of add_batch_size=3: the buffer holds 9 timesteps "
            "(3 rows x 3), 1 fewer than asked. See `buffer.capacity`."
        )
    ]
    assert record[0].filename == __file__
    assert buffer.capacity == 9


def test_queue_max_size_not_divisible_warns_and_reports_capacity():
    with pytest.warns(UserWarning, match=re.escape("holds 9 timesteps (3 rows x 3)")):
        queue = buffers.make_trajectory_queue(8, 3, 1, 1, max_size=10)
    assert queue.max_length_time_axis == 3
    # The warning says "See `buffer.capacity`": the queue must have it too.
    assert queue.capacity == 9


def test_divisible_sizes_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert buffers.make_trajectory_buffer(3, 2, 2, 1, 2, max_size=12).capacity == 12
        assert buffers.make_prioritised_trajectory_buffer(2, 2, 2, 3, 2, max_size=18).capacity == 18
        assert buffers.make_flat_buffer(12, 1, 2, add_batch_size=3).capacity == 12


def test_unknown_device_warns_and_uses_cpu():
    with pytest.warns(UserWarning, match=re.escape("device must be one of")) as record:
        buffers.make_prioritised_flat_buffer(8, 1, 2, device="quantum")
    assert record[0].filename == __file__


# --------------------------------------------------------------------------------------------
# (f) Configuration errors
# --------------------------------------------------------------------------------------------

mixer_parts = [buffers.make_flat_buffer(8, 1, 1), buffers.make_flat_buffer(8, 1, 4)]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(
            lambda: buffers.make_trajectory_buffer(2, 2, 9, 1, 2, max_length_time_axis=8),
            "`sample_sequence_length` (9) must be <= `max_length_time_axis` (8)",
            id="sequence-longer-than-time-axis",
        ),
        pytest.param(
            lambda: buffers.make_trajectory_buffer(2, 2, 2, 1, 9, max_length_time_axis=8),
            "`min_length_time_axis` (9) must be <= `max_length_time_axis` (8)",
            id="min-length-longer-than-time-axis",
        ),
        pytest.param(
            lambda: buffers.make_trajectory_buffer(2, 2, 2, 1, 2, 16, 8),
            "give exactly one of `max_size` and `max_length_time_axis`, got max_size=16, "
            "max_length_time_axis=8",
            id="both-sizes",
        ),
        pytest.param(
            lambda: buffers.make_trajectory_buffer(2, 2, 2, 1, 2),
            "give exactly one of `max_size` and `max_length_time_axis`",
            id="no-size",
        ),
        pytest.param(
            lambda: buffers.make_trajectory_buffer(0, 2, 2, 1, 2, max_length_time_axis=8),
            "`add_batch_size` must be an integer >= 1, got 0",
            id="zero-batch",
        ),
        pytest.param(
            lambda: buffers.make_trajectory_buffer(2.0, 2, 2, 1, 2, max_length_time_axis=8),
            "`add_batch_size` must be an integer >= 1, got 2.0",
            id="float-batch",
        ),
        pytest.param(
            lambda: buffers.make_trajectory_buffer(2, 2, 2, 0, 2, max_length_time_axis=8),
            "`period` must be an integer >= 1, got 0",
            id="zero-period",
        ),
        pytest.param(
            lambda: buffers.make_trajectory_buffer(4, 2, 2, 1, 2, max_size=3),
            "`max_size` (3) must be at least `add_batch_size` (4)",
            id="max-size-below-batch",
        ),
        pytest.param(
            lambda: buffers.make_prioritised_trajectory_buffer(
                2, 2, 2, 1, 2, max_length_time_axis=8, priority_exponent=1.5
            ),
            "`priority_exponent` must be in [0, 1], got 1.5",
            id="priority-exponent",
        ),
        pytest.param(
            lambda: buffers.make_prioritised_trajectory_buffer(
                2, 2, 2, 9, 2, max_length_time_axis=8
            ),
            "`period` (9) must be <= max_length_time_axis (8)",
            id="period-longer-than-time-axis",
        ),
        pytest.param(
            lambda: buffers.make_flat_buffer(8, 1, 9),
            "`sample_batch_size` (9) must be <= `max_length` (8)",
            id="flat-sample-batch",
        ),
        pytest.param(
            lambda: buffers.make_flat_buffer(3, 1, 1, add_batch_size=2),
            "`max_length // add_batch_size` must be >= 2, got 3//2 = 1",
            id="flat-rows-too-short",
        ),
        pytest.param(
            lambda: buffers.make_flat_buffer(8, 8, 1),
            "`min_length` (8) is too large: it needs 9 timesteps per row but rows hold 8",
            id="flat-min-length",
        ),
        pytest.param(
            lambda: buffers.make_n_step_buffer(8, 1, 1, n_step=8),
            "`n_step` (8) must be < `max_length` (8)",
            id="n-step-too-long",
        ),
        pytest.param(
            lambda: buffers.make_item_buffer(8, 9, 1),
            "`min_length` (9) must be <= `max_length` (8)",
            id="item-min-length",
        ),
        pytest.param(
            lambda: buffers.make_trajectory_queue(8, 2, 1, 9),
            "`sample_sequence_length` (9) and `add_sequence_length` (1) must be <= the time "
            "axis (8)",
            id="queue-sequence",
        ),
        pytest.param(
            lambda: buffers.make_mixer([], 4, []),
            "`buffers` must not be empty",
            id="mixer-empty",
        ),
        pytest.param(
            lambda: buffers.make_mixer(mixer_parts, 4, [1.0]),
            "got 2 buffers but 1 proportions",
            id="mixer-proportions",
        ),
        pytest.param(
            lambda: buffers.make_mixer(mixer_parts, 4, [1.0, -1.0]),
            "`proportions` must be non-negative with a positive sum, got [1.0, -1.0]",
            id="mixer-negative",
        ),
        pytest.param(
            lambda: buffers.make_mixer(mixer_parts, 4, [1.0, 1.0]),
            "buffer 0 samples 1 items per call but its share is 2",
            id="mixer-share",
        ),
        pytest.param(
            lambda: buffers.make_mixer([mixer_parts[0], buffers.ReplayBuffer(4)], 2, [1, 1]),
            "all buffers must be of the same kind, got ['ReplayBuffer', 'TrajectoryBuffer']",
            id="mixer-kinds",
        ),
        pytest.param(
            lambda: buffers.ReplayBuffer(0),
            "`buffer_size` must be an integer >= 1, got 0",
            id="replay-size",
        ),
        pytest.param(
            lambda: buffers.n_step_returns(jnp.zeros(3), jnp.ones(3), 0),
            "`n_step` must be an integer >= 1, got 0",
            id="n-step-returns",
        ),
    ],
)
def test_config_errors(make, message):
    with pytest.raises(buffers.BufferConfigError, match=re.escape(message)) as info:
        make()
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, buffers.BufferError)


def test_init_needs_array_leaves():
    with pytest.raises(buffers.BufferConfigError, match="at least one array leaf"):
        TRAJECTORY.init({})
    with pytest.raises(buffers.BufferConfigError, match=re.escape("bad: ['experience/name']")):
        TRAJECTORY.init({"obs": jnp.zeros(2), "name": "cartpole"})


# --------------------------------------------------------------------------------------------
# (g) State containers
# --------------------------------------------------------------------------------------------


def test_replace_returns_a_new_frozen_state():
    state = TRAJECTORY.init(timestep())
    moved = state.replace(current_index=jnp.int32(3))
    assert int(moved.current_index) == 3
    assert int(state.current_index) == 0
    assert moved.experience is state.experience
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.current_index = jnp.int32(1)  # type: ignore[misc]
    buffer = TRAJECTORY.replace(sample=None)
    assert buffer.sample is None
    assert TRAJECTORY.sample is not None


@pytest.mark.parametrize(("current_index", "is_full", "expected"), [(3, False, 3), (3, True, 11)])
def test_hand_built_state_derives_its_write_counter(current_index, is_full, expected):
    experience = {"obs": jnp.zeros((2, 8, 2)), "reward": jnp.zeros((2, 8))}
    state = buffers.TrajectoryBufferState(
        experience=experience,
        current_index=jnp.int32(current_index),
        is_full=jnp.bool_(is_full),
    )
    assert state.write_counter.dtype == jnp.uint32
    assert buffers.timesteps_added(state) == expected
    # It behaves like any other state.
    state = TRAJECTORY.add(state, {"obs": jnp.ones((2, 2, 2)), "reward": jnp.ones((2, 2))})
    assert buffers.timesteps_added(state) == expected + 2
    assert int(state.current_index) == current_index + 2


def test_hand_built_stacked_and_prioritised_states_derive_their_write_counters():
    stacked = buffers.TrajectoryBufferState(
        experience={"obs": jnp.zeros((2, 1, 8, 2))},
        current_index=jnp.array([3, 5], jnp.int32),
        is_full=jnp.array([False, True]),
    )
    assert stacked.write_counter.shape == (2, 2)
    assert buffers.timesteps_added(stacked).tolist() == [3, 13]

    buffer = buffers.make_prioritised_trajectory_buffer(1, 1, 1, 1, 1, max_length_time_axis=8)
    template = buffer.init(timestep())
    state = buffers.PrioritisedTrajectoryBufferState(
        experience=template.experience,
        current_index=jnp.int32(6),
        is_full=jnp.bool_(False),
        sum_tree_state=template.sum_tree_state,
    )
    assert buffers.timesteps_added(state) == 6
    assert int(state.running_index) == 6


def test_flatten_with_path_gives_attribute_keys():
    state = TRAJECTORY.init(timestep())
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(state)[0]]
    assert [jax.tree_util.keystr(p) for p in paths] == [
        ".experience['obs']",
        ".experience['reward']",
        ".current_index",
        ".is_full",
        ".write_counter",
    ]
    assert all(isinstance(p[0], jax.tree_util.GetAttrKey) for p in paths)
    assert [p[0].name for p in paths] == [
        "experience",
        "experience",
        "current_index",
        "is_full",
        "write_counter",
    ]

    prioritised = buffers.make_prioritised_trajectory_buffer(1, 1, 1, 1, 1, max_length_time_axis=4)
    names = [
        jax.tree_util.keystr(p)
        for p, _ in jax.tree_util.tree_flatten_with_path(prioritised.init(timestep()))[0]
    ]
    assert names[-2:] == [
        ".sum_tree_state.nodes",
        ".sum_tree_state.max_recorded_priority",
    ]


def test_containers_round_trip_through_tree_operations():
    state = TRAJECTORY.init(timestep())
    leaves, treedef = jax.tree.flatten(state)
    rebuilt = jax.tree.unflatten(treedef, leaves)
    assert type(rebuilt) is buffers.TrajectoryBufferState
    # Unflattening bypasses __init__: arbitrary leaves (here None-free sentinels) are fine.
    sentinels = jax.tree.map(lambda _: object(), state)
    assert type(sentinels) is buffers.TrajectoryBufferState
    assert jax.tree.structure(sentinels) == treedef
    # Samples are containers too.
    sample = buffers.TransitionSample(
        experience=buffers.ExperiencePair(first={"x": jnp.zeros(1)}, second={"x": jnp.ones(1)}),
        valid=jnp.ones(1, bool),
    )
    assert [
        jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(sample)[0]
    ] == [
        ".experience.first['x']",
        ".experience.second['x']",
        ".valid",
    ]
