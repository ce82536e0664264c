"""States built by hand without a ``write_counter`` derive it, cheaply and exactly.

A state built outside ``jit`` (for example by a Vault read) computes its counter on the host
and moves it to the device in one transfer: no XLA compilation. Inside ``jit``/``vmap``/
``pmap`` the same formula runs with ``jax.numpy``. Both must give what the original
``jax.numpy`` derivation gave (``reference_counter`` below), on the same device.

Also here: the typed ``replace`` every container gets from ``buffers._pytree.Replaceable``.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import buffers
from buffers import _counter
from buffers._pytree import Replaceable, frozen_container, pytree_dataclass


def reference_counter(experience: Any, current_index: Any, is_full: Any) -> jax.Array:
    """The derivation as it was: eager ``jax.numpy`` (about a dozen small compilations)."""
    current = jnp.asarray(current_index)
    leaf = jax.tree_util.tree_leaves(experience)[0]
    t_len = leaf.shape[current.ndim + 1]
    count = jnp.where(jnp.asarray(is_full), current + t_len, current)
    return _counter.advance(jnp.zeros((*current.shape, 2), jnp.uint32), count)


def trajectory_state(experience: Any, current_index: Any, is_full: Any) -> Any:
    return buffers.TrajectoryBufferState(
        experience=experience, current_index=current_index, is_full=is_full
    )


def assert_same_counter(got: jax.Array, want: jax.Array) -> None:
    assert got.dtype == jnp.uint32
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


# --------------------------------------------------------------------------------------------
# Trajectory buffer states: concrete inputs (host path)
# --------------------------------------------------------------------------------------------


@given(
    stack=st.sampled_from([(), (1,), (3,), (2, 2)]),
    t_len=st.integers(1, 9),
    data=st.data(),
)
def test_hand_built_state_counter_matches_the_jax_numpy_derivation(stack, t_len, data):
    size = int(np.prod(stack, dtype=int))
    index = np.array(data.draw(st.lists(st.integers(0, t_len - 1), min_size=size, max_size=size)))
    full = np.array(data.draw(st.lists(st.booleans(), min_size=size, max_size=size)))
    index, full = index.reshape(stack).astype(np.int32), full.reshape(stack)
    experience = {"obs": jnp.zeros((*stack, 2, t_len, 3)), "done": jnp.zeros((*stack, 2, t_len))}
    want = reference_counter(experience, jnp.asarray(index), jnp.asarray(full))
    # jax arrays, numpy arrays and (unstacked) Python values all give the same counter.
    inputs = [(jnp.asarray(index), jnp.asarray(full)), (index, full)]
    if not stack:
        inputs.append((int(index), bool(full)))
    for current_index, is_full in inputs:
        got = trajectory_state(experience, current_index, is_full).write_counter
        assert_same_counter(got, want)
        assert isinstance(got, jax.Array)
    expected = np.where(full, index + t_len, index)
    state = trajectory_state(experience, jnp.asarray(index), jnp.asarray(full))
    added = buffers.timesteps_added(state)
    assert (added if not stack else added.tolist()) == expected.tolist()


def test_hand_built_state_compiles_nothing(caplog):
    """The concrete path is numpy plus one transfer: no XLA compilation at all."""
    stack = (3, 7)  # a stacking shape no other test uses, so nothing is cached for it
    experience = {"obs": jnp.zeros((*stack, 2, 11, 3))}
    current_index = jnp.zeros(stack, jnp.int32) + 5
    is_full = jnp.zeros(stack, bool).at[0].set(True)
    jax.block_until_ready((experience, current_index, is_full))

    def compiles() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("Compiling")]

    with caplog.at_level(logging.DEBUG, logger="jax"), jax.log_compiles(True):
        state = trajectory_state(experience, current_index, is_full)
        jax.block_until_ready(state.write_counter)
        assert compiles() == []
        # The check can see a compilation: the traced path (inside jit) compiles.
        jax.block_until_ready(jax.jit(trajectory_state)(experience, current_index, is_full))
        assert compiles() != []
    want = reference_counter(experience, current_index, is_full)
    assert_same_counter(state.write_counter, want)


# --------------------------------------------------------------------------------------------
# Trajectory buffer states: traced inputs (jax.numpy path) and devices
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("is_full", [False, True])
def test_hand_built_state_counter_under_jit_and_vmap(is_full):
    experience = {"obs": jnp.zeros((2, 8, 2))}
    current_index, full = jnp.int32(3), jnp.bool_(is_full)
    want = reference_counter(experience, current_index, full)

    traced = jax.jit(trajectory_state)(experience, current_index, full)
    assert_same_counter(traced.write_counter, want)
    assert buffers.timesteps_added(traced) == (11 if is_full else 3)

    indices = jnp.array([0, 3, 7], jnp.int32)
    flags = jnp.array([is_full, False, True])
    mapped = jax.jit(jax.vmap(lambda i, f: trajectory_state(experience, i, f).write_counter))
    pairs = zip(indices, flags, strict=True)
    want_stacked = jnp.stack([reference_counter(experience, i, f) for i, f in pairs])
    assert_same_counter(mapped(indices, flags), want_stacked)


def test_hand_built_state_counter_under_pmap_and_on_pmap_stacked_inputs():
    assert jax.device_count() == 2, "tests/conftest.py fakes 2 CPU devices for pmap"
    experience = {"obs": jnp.zeros((2, 1, 8, 2))}
    indices, flags = jnp.array([3, 5], jnp.int32), jnp.array([False, True])
    want = reference_counter(experience, indices, flags)

    # Built inside pmap: traced.
    per_device = {"obs": jnp.zeros((1, 8, 2))}
    built = jax.pmap(lambda i, f: trajectory_state(per_device, i, f).write_counter)
    assert_same_counter(built(indices, flags), want)

    # Built outside from pmap-sharded (multi-device) inputs: same values and placement.
    ident = jax.pmap(lambda x: x)
    sharded_index, sharded_flags = ident(indices), ident(flags)
    got = trajectory_state(experience, sharded_index, sharded_flags).write_counter
    want = reference_counter(experience, sharded_index, sharded_flags)
    assert_same_counter(got, want)
    assert got.sharding == want.sharding
    assert buffers.timesteps_added(
        trajectory_state(experience, sharded_index, sharded_flags)
    ).tolist() == [3, 13]


@pytest.mark.parametrize("committed_input", ["current_index", "is_full", "both", "neither"])
def test_hand_built_state_counter_follows_its_inputs_device(committed_input):
    """As eager jax.numpy would: committed inputs put the counter on their device."""
    device = jax.devices()[-1]
    experience = {"obs": jnp.zeros((2, 8, 2))}
    current_index, is_full = jnp.int32(3), jnp.bool_(True)
    if committed_input in ("current_index", "both"):
        current_index = jax.device_put(current_index, device)
    if committed_input in ("is_full", "both"):
        is_full = jax.device_put(is_full, device)
    got = trajectory_state(experience, current_index, is_full).write_counter
    want = reference_counter(experience, current_index, is_full)
    assert_same_counter(got, want)
    assert got.committed == want.committed == (committed_input != "neither")
    assert got.devices() == want.devices()


def test_hand_built_prioritised_and_episode_states_derive_their_counters():
    buffer = buffers.make_prioritised_trajectory_buffer(2, 1, 1, 1, 1, max_length_time_axis=8)
    template = buffer.init({"x": jnp.zeros(())})
    state = buffers.PrioritisedTrajectoryBufferState(
        experience=template.experience,
        current_index=jnp.int32(6),
        is_full=jnp.bool_(True),
        sum_tree_state=template.sum_tree_state,
    )
    want = reference_counter(template.experience, jnp.int32(6), jnp.bool_(True))
    assert_same_counter(state.write_counter, want)
    assert int(state.running_index) == 14

    episodes = buffers.make_episode_buffer(2, 1, 2, 2, max_length_time_axis=8)
    start = episodes.init({"x": jnp.zeros(()), "done": jnp.zeros((), bool)})
    fields = {f.name: getattr(start, f.name) for f in dataclasses.fields(start)}
    fields.update(current_index=jnp.int32(5), write_counter=None)
    rebuilt = buffers.EpisodeBufferState(**fields)
    assert buffers.timesteps_added(rebuilt) == 5


# --------------------------------------------------------------------------------------------
# Replay buffer and trajectory queue states
# --------------------------------------------------------------------------------------------


@given(buffer_size=st.integers(1, 6), counts=st.lists(st.integers(1, 6), min_size=0, max_size=6))
def test_hand_built_replay_state_derives_the_fewest_consistent_transitions(buffer_size, counts):
    rb = buffers.ReplayBuffer(buffer_size)
    state = rb.init({"x": jnp.zeros(())})
    for k in counts:
        k = min(k, buffer_size)
        state = rb.add(state, {"x": jnp.ones((k,))})
    total = buffers.timesteps_added(state)
    rebuilt = buffers.ReplayBufferState(state.data, state.position, state.size)
    derived = buffers.timesteps_added(rebuilt)
    assert derived == (total if total < buffer_size else buffer_size + total % buffer_size)
    traced = jax.jit(lambda d, p, s: buffers.ReplayBufferState(d, p, s))(
        state.data, state.position, state.size
    )
    assert_same_counter(traced.write_counter, rebuilt.write_counter)
    # It behaves like any other state.
    assert buffers.timesteps_added(rb.add(rebuilt, {"x": jnp.ones((1,))})) == derived + 1


@given(ops=st.lists(st.tuples(st.booleans(), st.integers(1, 4)), min_size=0, max_size=10))
def test_hand_built_queue_state_derives_the_fewest_consistent_timesteps(ops):
    t_len = 6
    queue = buffers.make_trajectory_queue(t_len, 1, 1, 1)
    state = queue.init({"x": jnp.zeros(())})
    for is_add, n in ops:
        if is_add:
            n = min(n, t_len - int(np.asarray(state.write_index - state.read_index) % t_len))
            if bool(state.is_full) or n == 0:
                continue
            state = jax.jit(queue.add)(state, {"x": jnp.ones((1, n))})
        elif bool(queue.can_sample(state)):
            state, _ = queue.sample(state)
    total = buffers.timesteps_added(state)
    rebuilt = buffers.TrajectoryQueueState(
        state.experience, state.write_index, state.read_index, state.is_full
    )
    derived = buffers.timesteps_added(rebuilt)
    assert derived % t_len == total % t_len
    assert derived <= total
    wrapped = bool(state.is_full) or int(state.write_index) < int(state.read_index)
    assert derived == int(state.write_index) + (t_len if wrapped else 0)
    if total < t_len:
        assert derived == total
    traced = jax.jit(lambda *leaves: buffers.TrajectoryQueueState(*leaves))(
        state.experience, state.write_index, state.read_index, state.is_full
    )
    assert_same_counter(traced.write_counter, rebuilt.write_counter)


# --------------------------------------------------------------------------------------------
# The container base: typed replace
# --------------------------------------------------------------------------------------------


def test_replace_keeps_the_container_type_and_fields():
    buffer = buffers.make_prioritised_trajectory_buffer(1, 1, 1, 1, 1, max_length_time_axis=4)
    state = buffer.init({"x": jnp.zeros(())})
    moved = state.replace(current_index=jnp.int32(2))
    assert type(moved) is buffers.PrioritisedTrajectoryBufferState
    assert moved.sum_tree_state is state.sum_tree_state
    assert moved.write_counter is state.write_counter
    assert isinstance(state, Replaceable)
    assert isinstance(buffer, Replaceable)
    assert type(buffer.replace(period=1)) is buffers.PrioritisedTrajectoryBuffer


def test_containers_must_subclass_replaceable():
    class Plain:
        x: int

    for decorator in (pytree_dataclass, frozen_container):
        with pytest.raises(TypeError, match=re.escape("Plain must subclass")):
            decorator(Plain)  # type: ignore[type-var]


def test_prioritised_and_episode_buffers_need_their_extra_function():
    noop = lambda *a: None  # noqa: E731
    with pytest.raises(TypeError, match="set_priorities"):
        buffers.PrioritisedTrajectoryBuffer(noop, noop, noop, noop)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="from_state"):
        buffers.EpisodeBuffer(noop, noop, noop, noop)  # type: ignore[call-arg]
