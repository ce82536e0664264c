"""The reference's (Flashbax's) quickstarts, run against this package.

Each test follows a quickstart of the reference's README or example notebooks with only the
import changed (``import buffers as fbx``) and its ``print``s turned into assertions. Two
further changes are forced by the environment, not by this package: ``jax.tree_map`` (removed
from JAX) is spelled ``jax.tree.map``, and ``chex.set_n_cpu_devices(2)`` is done once for the
whole suite by ``tests/conftest.py``. The reference's ``n_step_buffer.n_step_product`` is
called ``fbx.n_step_discounts`` here. Extra assertions after each quickstart check the data
that comes back, not only its shapes.
"""

from __future__ import annotations

import re
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers as fbx

DEVICE_COUNT_MOCK = 2


# --------------------------------------------------------------------------------------------
# (a) README quickstart: the flat buffer
# --------------------------------------------------------------------------------------------


def test_readme_flat_buffer_quickstart():
    # Instantiate the flat buffer using `make_flat_buffer` with a simple configuration.
    buffer = fbx.make_flat_buffer(max_length=32, min_length=2, sample_batch_size=1)

    # Initialise the buffer's state.
    fake_timestep = {"obs": jnp.array([0, 0]), "reward": jnp.array(0.0)}
    state = buffer.init(fake_timestep)

    # Now we add data to the buffer.
    state = buffer.add(state, {"obs": jnp.array([1, 2]), "reward": jnp.array(3.0)})
    assert not buffer.can_sample(state)  # False because min_length not reached yet.

    state = buffer.add(state, {"obs": jnp.array([4, 5]), "reward": jnp.array(6.0)})
    assert not buffer.can_sample(state)  # Still False: we need 2 *transitions* (3 timesteps).

    state = buffer.add(state, {"obs": jnp.array([7, 8]), "reward": jnp.array(9.0)})
    assert buffer.can_sample(state)  # True! We have 2 transitions (3 timesteps).

    # Get a transition from the buffer.
    rng_key = jax.random.PRNGKey(0)  # Source of randomness.
    batch = buffer.sample(state, rng_key)  # Sample

    # We have a transition: obs -> obs' is one of the two that were added.
    first, second = batch.experience.first, batch.experience.second
    assert first["obs"].shape == (1, 2)
    assert first["reward"].shape == (1,)
    pair = (first["obs"].tolist(), second["obs"].tolist())
    assert pair in [([[1, 2]], [[4, 5]]), ([[4, 5]], [[7, 8]])]
    assert float(second["reward"][0]) == float(first["reward"][0]) + 3.0
    assert bool(batch.valid.all())


def test_readme_flat_buffer_jitted():
    """The README's advice: jit every function, donating the state to ``add``."""
    buffer = fbx.make_flat_buffer(max_length=32, min_length=2, sample_batch_size=1)
    buffer = buffer.replace(
        init=jax.jit(buffer.init),
        add=jax.jit(buffer.add, donate_argnums=0),
        sample=jax.jit(buffer.sample),
        can_sample=jax.jit(buffer.can_sample),
    )
    fake_timestep = {"obs": jnp.array([0, 0]), "reward": jnp.array(0.0)}
    state = buffer.init(fake_timestep)
    n_added = 40  # more than max_length: the ring wraps
    for i in range(1, n_added + 1):
        # `jnp.array([i, i])` is int32 like the timestep given to init (no x64).
        state = buffer.add(state, {"obs": jnp.array([i, i]), "reward": jnp.array(i, jnp.float32)})
        assert bool(buffer.can_sample(state)) == (i >= 3)
    assert state.experience["obs"].shape == (1, 32, 2)
    assert fbx.timesteps_added(state) == n_added

    for rng_key in jax.random.split(jax.random.PRNGKey(0), 16):
        batch = buffer.sample(state, rng_key)
        first, second = batch.experience.first, batch.experience.second
        assert first["obs"].dtype == jnp.int32
        # Consecutive timesteps, never straddling the write position, only surviving ones.
        np.testing.assert_array_equal(second["obs"], first["obs"] + 1)
        np.testing.assert_array_equal(second["reward"], first["reward"] + 1)
        assert int(first["obs"].min()) >= n_added - 32 + 1
        assert int(second["obs"].max()) <= n_added


# --------------------------------------------------------------------------------------------
# (b) Notebook quickstart: the n-step buffer
# --------------------------------------------------------------------------------------------


def get_fake_batch(fake_timestep: chex.ArrayTree, batch_size: int) -> chex.ArrayTree:
    return jax.tree.map(lambda x: jnp.stack([x + i for i in range(batch_size)]), fake_timestep)


def test_n_step_buffer_quickstart():
    max_length = 32  # Maximum length of buffer (max number of experiences stored).
    min_length = 8  # Minimum number of experiences saved before we can sample.
    sample_batch_size = 4  # Batch size of experience data sampled from the buffer.
    add_sequences = False  # Will we be adding data in sequences to the buffer?
    add_batch_size = 6  # Will we be adding data in batches to the buffer?
    # 32 is not a multiple of 6: like the reference, the buffer warns (here naming what it
    # really holds) and keeps 6 rows of 32 // 6 = 5 timesteps.
    with pytest.warns(UserWarning, match=re.escape("holds 30 timesteps (6 rows x 5)")):
        buffer = fbx.make_n_step_buffer(
            max_length, min_length, sample_batch_size, add_sequences, add_batch_size
        )
    assert buffer.capacity == 30

    fake_timestep = {"obs": jnp.zeros(2), "reward": jnp.float32(0)}
    state = buffer.init(fake_timestep)
    # (add_batch_size, max_length // add_batch_size, *fake_timestep['obs'].shape)
    assert state.experience["obs"].shape == (6, 5, 2)
    assert {"experience", "current_index", "is_full"} <= set(state.__dict__)
    assert set(state.experience) == {"obs", "reward"}

    fake_batch = jax.tree.map(
        lambda x: jnp.stack([x + i for i in range(add_batch_size)]), fake_timestep
    )
    state = buffer.add(state, fake_batch)
    assert not buffer.can_sample(state)  # Buffer is not ready to sample
    state = buffer.add(state, fake_batch)
    assert buffer.can_sample(state)  # Buffer is now ready to sample

    rng_key = jax.random.PRNGKey(0)
    batch = buffer.sample(state, rng_key)
    assert set(batch.experience.first) == {"obs", "reward"}
    assert set(batch.experience.second) == {"obs", "reward"}
    assert batch.experience.first["reward"].shape == (4,)  # (sample_batch_size,)
    assert batch.experience.first["obs"].shape == (4, 2)
    # Both adds wrote row i as `fake_timestep + i`: first and second come from one row.
    np.testing.assert_array_equal(batch.experience.first["obs"], batch.experience.second["obs"])


@pytest.mark.parametrize("n_step", [1, 3])
def test_n_step_buffer_second_is_n_steps_after_first(n_step):
    """Beyond the notebook: with time-stamped data, ``second`` is ``n_step`` after ``first``,
    from the same row, also after the ring has wrapped."""
    with pytest.warns(UserWarning, match="holds 30 timesteps"):
        buffer = fbx.make_n_step_buffer(32, 8, 4, False, 6, n_step=n_step)
    state = buffer.init({"obs": jnp.zeros(2), "reward": jnp.float32(0)})
    add, sample = jax.jit(buffer.add), jax.jit(buffer.sample)
    rows = jnp.arange(6, dtype=jnp.float32)
    n_added = 12  # rows hold 5 timesteps: two and a bit laps
    for t in range(n_added):
        time = jnp.full((6,), t, jnp.float32)
        state = add(state, {"obs": jnp.stack([time, rows], axis=-1), "reward": time})
    for rng_key in jax.random.split(jax.random.PRNGKey(1), 8):
        batch = sample(state, rng_key)
        first, second = batch.experience.first, batch.experience.second
        np.testing.assert_array_equal(second["obs"][:, 0] - first["obs"][:, 0], n_step)
        np.testing.assert_array_equal(second["obs"][:, 1], first["obs"][:, 1])
        assert float(first["reward"].min()) >= n_added - 5
        assert bool(batch.valid.all())


def test_n_step_buffer_quickstart_pmap():
    assert jax.device_count() == DEVICE_COUNT_MOCK
    max_length, min_length, sample_batch_size, add_sequences = 32, 8, 4, False
    add_batch_size = 8
    fake_timestep = {"obs": jnp.zeros(2), "reward": jnp.float32(0)}

    # Re-instantiate the buffer
    buffer = fbx.make_n_step_buffer(
        max_length=max_length,
        min_length=min_length,
        sample_batch_size=sample_batch_size,
        add_sequences=add_sequences,
        add_batch_size=add_batch_size,
        n_step=1,
    )

    # Initialize the buffer's state with a "device" dimension
    fake_timestep_per_device = jax.tree.map(
        lambda x: jnp.stack([x + i for i in range(DEVICE_COUNT_MOCK)]), fake_timestep
    )
    state = jax.pmap(buffer.init)(fake_timestep_per_device)

    # Fill the buffer above its minimum length
    fake_batch = jax.pmap(get_fake_batch, static_broadcasted_argnums=1)(
        fake_timestep_per_device, add_batch_size
    )
    # Add two timesteps to form one transition pair
    state = jax.pmap(buffer.add)(state, fake_batch)
    state = jax.pmap(buffer.add)(state, fake_batch)
    assert buffer.can_sample(state).all()

    # Sample from the buffer
    rng_key = jax.random.PRNGKey(0)
    rng_key_per_device = jax.random.split(rng_key, DEVICE_COUNT_MOCK)
    batch = jax.pmap(buffer.sample)(state, rng_key_per_device)

    # (DEVICE_COUNT_MOCK, add_batch_size, max_length // add_batch_size, *obs.shape)
    assert state.experience["obs"].shape == (2, 8, 4, 2)
    # (DEVICE_COUNT_MOCK, sample_batch_size, *reward.shape)
    assert batch.experience.first["reward"].shape == (2, 4)
    np.testing.assert_array_equal(buffer.can_sample(state), [True, True])
    # Device d holds `fake_timestep + d + row`: every sample comes from its own device.
    rewards = np.asarray(batch.experience.first["reward"])
    assert ((rewards[0] >= 0) & (rewards[0] <= 7)).all()
    assert ((rewards[1] >= 1) & (rewards[1] <= 8)).all()
    assert fbx.timesteps_added(state).tolist() == [2, 2]


def test_n_step_buffer_quickstart_n_step_returns():
    """The notebook's "n-step > 1" section: rewards become n-step returns via the map."""
    n_step = 3
    add_batch_size = 1
    add_sequence_size = 12
    max_length = 64
    sample_batch_size = 4
    add_sequences = True
    min_length = 8

    returns_fun = lambda x, y: jax.vmap(fbx.n_step_returns, in_axes=(0, 0, None))(  # noqa: E731
        x, y, n_step
    )
    discount_fun = lambda x: jax.vmap(fbx.n_step_discounts, in_axes=(0, None))(  # noqa: E731
        x, n_step
    )
    n_step_functional_map = {
        ("reward", "reward", "discount"): returns_fun,
        ("discount", "discount"): discount_fun,
    }
    buffer = fbx.make_n_step_buffer(
        max_length=max_length,
        min_length=min_length,
        sample_batch_size=sample_batch_size,
        add_sequences=add_sequences,
        add_batch_size=add_batch_size,
        n_step=n_step,
        n_step_functional_map=n_step_functional_map,
    )
    fake_timestep = {
        "obs": jnp.array([5, 4]),
        "reward": jnp.array(1.0),
        "discount": jnp.array(1.0),
    }
    buffer_state = buffer.init(fake_timestep)
    fake_batch_sequence = jax.tree.map(
        lambda x: jnp.stack([x for i in range(add_batch_size)])[:, jnp.newaxis].repeat(
            add_sequence_size, axis=1
        ),
        fake_timestep,
    )
    fake_batch_sequence["discount"] = fake_batch_sequence["discount"].at[0, 2].set(0)
    fake_batch_sequence["reward"] = fake_batch_sequence["reward"] + jnp.arange(add_sequence_size)
    buffer_state = buffer.add(buffer_state, fake_batch_sequence)

    rng_key = jax.random.PRNGKey(2)
    sampled_batch = buffer.sample(buffer_state, rng_key)

    # Hand computation over the added sequence: r[k] = 1 + k, d[k] = 1 except d[2] = 0;
    # G[t] = r[t] + d[t] r[t+1] + d[t] d[t+1] r[t+2], D[t] = d[t] d[t+1] d[t+2].
    r = [1.0 + k for k in range(add_sequence_size)]
    d = [0.0 if k == 2 else 1.0 for k in range(add_sequence_size)]
    first, second = sampled_batch.experience.first, sampled_batch.experience.second
    # The window [t, t + n_step]: `second` is its last timestep, whose return is truncated
    # at the window's end to its own reward r[t + 3] = t + 4 (the notebook reads t from it).
    starts = [int(x) - 4 for x in np.asarray(second["reward"])]
    for i, t in enumerate(starts):
        assert 0 <= t <= add_sequence_size - 1 - n_step
        g = r[t] + d[t] * r[t + 1] + d[t] * d[t + 1] * r[t + 2]
        assert float(first["reward"][i]) == pytest.approx(g)
        assert float(first["discount"][i]) == d[t] * d[t + 1] * d[t + 2]
        assert float(second["discount"][i]) == d[t + 3]
    np.testing.assert_array_equal(first["obs"], np.broadcast_to([5, 4], (4, 2)))
    # The notebook's worked example: the window [2, 3, 4, 5] with discounts [1, 0, 1, 1]
    # has return 2 + 1.0 * (3 + 0.0 * 4) = 5 and discount 0.
    window = fbx.n_step_returns(jnp.array([2.0, 3, 4, 5]), jnp.array([1.0, 0, 1, 1]), 3)
    assert float(window[0]) == 5.0
    assert float(fbx.n_step_discounts(jnp.array([1.0, 0, 1, 1]), 3)[0]) == 0.0


def _hand_returns(rewards: list[float], discounts: list[float], n: int) -> list[float]:
    out = []
    for t in range(len(rewards)):
        total, factor = 0.0, 1.0
        for k in range(t, min(t + n, len(rewards))):
            total += factor * rewards[k]
            factor *= discounts[k]
        out.append(total)
    return out


def _hand_discounts(discounts: list[float], n: int) -> list[float]:
    out = []
    for t in range(len(discounts)):
        factor = 1.0
        for k in range(t, min(t + n, len(discounts))):
            factor *= discounts[k]
        out.append(factor)
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_n_step_returns_and_discounts_match_hand_computation(n):
    rewards = [1.0, -2.0, 3.5, 0.25, 4.0, -1.0]
    discounts = [0.9, 0.5, 0.0, 1.0, 0.8, 0.7]
    got_returns = fbx.n_step_returns(jnp.array(rewards), jnp.array(discounts), n)
    got_discounts = fbx.n_step_discounts(jnp.array(discounts), n)
    np.testing.assert_allclose(got_returns, _hand_returns(rewards, discounts, n), rtol=1e-6)
    np.testing.assert_allclose(got_discounts, _hand_discounts(discounts, n), rtol=1e-6)
    assert got_returns.shape == got_discounts.shape == (6,)

    # Leading axes are batch axes: each row is computed on its own.
    batch_rewards = jnp.array([rewards, rewards[::-1]])
    batch_discounts = jnp.array([discounts, discounts[::-1]])
    np.testing.assert_allclose(
        fbx.n_step_returns(batch_rewards, batch_discounts, n),
        [
            _hand_returns(rewards, discounts, n),
            _hand_returns(rewards[::-1], discounts[::-1], n),
        ],
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        fbx.n_step_discounts(batch_discounts, n),
        [_hand_discounts(discounts, n), _hand_discounts(discounts[::-1], n)],
        rtol=1e-6,
    )


def test_n_step_returns_of_one_step_are_the_rewards():
    rewards, discounts = jnp.array([1.0, 2.0, 3.0]), jnp.array([0.5, 0.0, 0.9])
    np.testing.assert_array_equal(fbx.n_step_returns(rewards, discounts, 1), rewards)
    np.testing.assert_array_equal(fbx.n_step_discounts(discounts, 1), discounts)


def test_n_step_functional_map_without_vmap():
    """The functions work along the last axis, so a map can use them directly, with
    discounts scaled by gamma as the docstring advises."""
    gamma, n_step = 0.9, 2
    functional_map: dict[Any, Any] = {
        ("reward", "reward", "discount"): lambda r, d: fbx.n_step_returns(r, gamma * d, n_step),
        ("discount", "discount"): lambda d: fbx.n_step_discounts(gamma * d, n_step),
    }
    buffer = fbx.make_n_step_buffer(
        16, 1, 8, add_sequences=True, n_step=n_step, n_step_functional_map=functional_map
    )
    state = buffer.init({"reward": jnp.float32(0), "discount": jnp.float32(0)})
    rewards = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    discounts = [1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    state = buffer.add(state, {"reward": jnp.array(rewards), "discount": jnp.array(discounts)})
    batch = buffer.sample(state, jax.random.PRNGKey(0))
    first, second = batch.experience.first, batch.experience.second
    returns = _hand_returns(rewards, [gamma * x for x in discounts], n_step)
    bootstrap = _hand_discounts([gamma * x for x in discounts], n_step)
    # The window's last reward is untouched by the truncated map: it names the window.
    for g, disc, last in zip(first["reward"], first["discount"], second["reward"], strict=True):
        t = rewards.index(float(last)) - n_step
        assert float(g) == pytest.approx(returns[t])
        assert float(disc) == pytest.approx(bootstrap[t])


# --------------------------------------------------------------------------------------------
# (c) Notebook quickstart: the trajectory buffer
# --------------------------------------------------------------------------------------------


def test_trajectory_buffer_quickstart():
    max_length_time_axis = 32  # Maximum length of the buffer along the time axis.
    min_length_time_axis = 16  # Minimum length across the time axis before we can sample.
    sample_batch_size = 4  # Batch size of trajectories sampled from the buffer.
    add_batch_size = 6  # Batch size of trajectories added to the buffer.
    sample_sequence_length = 8  # Sequence length of trajectories sampled from the buffer.
    add_sequence_length = 10  # Sequence length of trajectories added to the buffer.
    period = 1  # Period at which we sample trajectories from the buffer.

    buffer = fbx.make_trajectory_buffer(
        max_length_time_axis=max_length_time_axis,
        min_length_time_axis=min_length_time_axis,
        sample_batch_size=sample_batch_size,
        add_batch_size=add_batch_size,
        sample_sequence_length=sample_sequence_length,
        period=period,
    )
    fake_timestep = {"obs": jnp.array([5, 4]), "reward": jnp.array(1.0)}
    state = buffer.init(fake_timestep)

    broadcast_fn = lambda x: jnp.broadcast_to(  # noqa: E731
        x, (add_batch_size, add_sequence_length, *x.shape)
    )
    fake_batch_sequence = jax.tree.map(broadcast_fn, fake_timestep)
    state = buffer.add(state, fake_batch_sequence)
    assert not buffer.can_sample(state)  # After one batch the buffer is not yet full.
    state = buffer.add(state, fake_batch_sequence)
    assert buffer.can_sample(state)  # Now it is filled above min_length_time_axis.

    rng_key = jax.random.PRNGKey(0)
    batch = buffer.sample(state, rng_key)
    assert set(batch.experience) == {"obs", "reward"}
    # (sample_batch_size, sample_sequence_length, *fake_timestep['reward'].shape)
    assert batch.experience["reward"].shape == (4, 8)
    assert batch.experience["obs"].shape == (4, 8, 2)
    assert {"experience", "current_index", "is_full"} <= set(state.__dict__)
    # (add_batch_size, max_length_time_axis, *fake_timestep['obs'].shape)
    assert state.experience["obs"].shape == (6, 32, 2)
    np.testing.assert_array_equal(batch.experience["obs"], np.broadcast_to([5, 4], (4, 8, 2)))


def _time_stamped(start: int, batch: int, length: int) -> dict[str, jax.Array]:
    """``[batch, length]`` timesteps: ``obs = [t, row]``, ``reward = t``."""
    time = jnp.arange(start, start + length, dtype=jnp.float32)
    rows = jnp.arange(batch, dtype=jnp.float32)
    obs = jnp.stack(jnp.broadcast_arrays(time[None, :], rows[:, None]), axis=-1)
    return {"obs": obs, "reward": jnp.broadcast_to(time, (batch, length))}


def test_trajectory_buffer_with_max_size():
    """The ``max_size`` spelling: ``[B, L, ...]`` batches in, ``[sample_batch, seq_len, ...]``
    contiguous sequences out, also after the ring wrapped several times."""
    add_batch_size, add_length, seq_len, period = 3, 5, 4, 2
    buffer = fbx.make_trajectory_buffer(
        add_batch_size=add_batch_size,
        sample_batch_size=5,
        sample_sequence_length=seq_len,
        period=period,
        min_length_time_axis=6,
        max_size=add_batch_size * 12,
    )
    assert buffer.max_length_time_axis == 12
    assert buffer.capacity == 36
    state = buffer.init({"obs": jnp.zeros(2), "reward": jnp.float32(0)})
    add, sample = jax.jit(buffer.add), jax.jit(buffer.sample)
    n_adds = 7  # 35 timesteps per row: the 12-long rows wrapped twice
    for k in range(n_adds):
        state = add(state, _time_stamped(k * add_length, add_batch_size, add_length))
        assert bool(buffer.can_sample(state)) == ((k + 1) * add_length >= 6)
    assert fbx.timesteps_added(state) == n_adds * add_length
    oldest = n_adds * add_length - 12
    for rng_key in jax.random.split(jax.random.PRNGKey(0), 8):
        batch = sample(state, rng_key)
        obs = np.asarray(batch.experience["obs"])
        assert obs.shape == (5, seq_len, 2)
        assert batch.experience["reward"].shape == (5, seq_len)
        np.testing.assert_array_equal(np.diff(obs[..., 0], axis=1), 1.0)  # contiguous
        assert (obs[..., 1] == obs[:, :1, 1]).all()  # one row per sequence
        assert (obs[:, 0, 0] >= oldest).all()  # only surviving timesteps
        assert ((obs[:, 0, 0] - oldest) % period == 0).all()  # starts `period` apart
        assert bool(batch.valid.all())
