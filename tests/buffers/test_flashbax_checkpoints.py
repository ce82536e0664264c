"""A run checkpointed with orbax while it used Flashbax restores into ``buffers`` and goes on.

Real orbax checkpoints on disk (``tmp_path``), written from real Flashbax 0.1.3 states (a
trajectory, a prioritised and a queue state, and a whole learner state: parameters, optax
state and buffer state), restored with :func:`buffers.to_flashbax_state` as the target (or
raw) and converted with :func:`buffers.from_flashbax_state`. Training then continues on both
sides with the same keys: adds and samples give the same draws and values where the two
libraries are meant to agree (README, "Same draws as the reference": prioritised runs with
exact priorities whose largest is whole).
"""

from __future__ import annotations

import re
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

import buffers

flashbax = pytest.importorskip("flashbax")


class Step(NamedTuple):
    obs: jax.Array
    reward: jax.Array


TIMESTEP = Step(jnp.zeros(3, jnp.float32), jnp.float32(0))
TRAJECTORY = {
    "add_batch_size": 2,
    "sample_batch_size": 4,
    "sample_sequence_length": 3,
    "period": 1,
    "min_length_time_axis": 3,
    "max_length_time_axis": 10,
}


def batch(step: int, length: int = 2) -> Step:
    v = 10.0 * step + jnp.arange(2 * length, dtype=jnp.float32).reshape(2, length)
    return Step(jnp.stack([v, v + 0.25, -v], axis=-1), v / 7)


def reference(fn: Any, *args: Any, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference's advice and jax deprecations
        return fn(*args, **kwargs)


def jitted(buffer: Any) -> Any:
    """The reference's buffer with its functions jitted (eagerly, each call compiles)."""
    return buffer.replace(**{f: jax.jit(getattr(buffer, f)) for f in ("add", "sample")})


def save(path: Any, tree: Any) -> None:
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, tree)
    checkpointer.wait_until_finished()


def restore(path: Any, target: Any = None) -> Any:
    checkpointer = ocp.StandardCheckpointer()
    return checkpointer.restore(path) if target is None else checkpointer.restore(path, target)


def assert_same(got: Any, want: Any, what: str) -> None:
    jax.tree.map(
        lambda g, w: np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=what),
        got,
        want,
    )


def test_a_trajectory_run_restores_and_draws_what_flashbax_draws(tmp_path: Any) -> None:
    ref_buffer = jitted(reference(flashbax.make_trajectory_buffer, **TRAJECTORY))
    ours_buffer = buffers.make_trajectory_buffer(**TRAJECTORY)
    ref_state = ref_buffer.init(TIMESTEP)
    for step in range(7):  # 14 timesteps into rows of 10: wrapped
        ref_state = ref_buffer.add(ref_state, batch(step))
    save(tmp_path / "ckpt", {"buffer_state": ref_state, "env_steps": jnp.int32(14)})

    with pytest.raises(ValueError, match="write_counter"):  # what the issue saw
        restore(tmp_path / "ckpt", {"buffer_state": ours_buffer.init(TIMESTEP), "env_steps": 0})
    target = {
        "buffer_state": buffers.to_flashbax_state(ours_buffer.init(TIMESTEP)),
        "env_steps": jnp.int32(0),
    }
    restored = restore(tmp_path / "ckpt", target)
    state = buffers.from_flashbax_state(restored["buffer_state"], ours_buffer)
    assert isinstance(state.experience, Step)
    assert buffers.timesteps_added(state) == 14
    assert_same(buffers.gather_all(state), buffers.gather_all(ref_state), "gather_all")

    ours_add, ours_sample = jax.jit(ours_buffer.add), jax.jit(ours_buffer.sample)
    for step in range(7, 11):
        key = jax.random.PRNGKey(step)
        ref_state = ref_buffer.add(ref_state, batch(step))
        state = ours_add(state, batch(step))
        got, want = ours_sample(state, key), ref_buffer.sample(ref_state, key)
        assert_same(got.experience, want.experience, f"sample after add {step}")
    assert buffers.timesteps_added(state) == 22

    raw = restore(tmp_path / "ckpt")["buffer_state"]  # no target: nested dicts
    from_raw = ours_buffer.add(raw, {"obs": jnp.ones((2, 1, 3)), "reward": jnp.ones((2, 1))})
    assert buffers.timesteps_added(from_raw) == 15


def test_a_prioritised_run_restores_and_goes_on_as_flashbax_does(tmp_path: Any) -> None:
    kw = {**TRAJECTORY, "priority_exponent": 1.0}
    ref_buffer = jitted(reference(flashbax.make_prioritised_trajectory_buffer, **kw))
    ref_buffer = ref_buffer.replace(set_priorities=jax.jit(ref_buffer.set_priorities))
    ours_buffer = buffers.make_prioritised_trajectory_buffer(**kw)
    ref_state = ref_buffer.init(TIMESTEP)
    for step in range(7):
        ref_state = ref_buffer.add(ref_state, batch(step))
        if step >= 2:  # priorities in halves, the largest whole: exact in both
            drawn = ref_buffer.sample(ref_state, jax.random.PRNGKey(100 + step))
            priorities = 0.5 * (1 + (drawn.indices % 4)).astype(jnp.float32)
            ref_state = ref_buffer.set_priorities(ref_state, drawn.indices, priorities)
    save(tmp_path / "ckpt", {"buffer_state": ref_state})

    template = buffers.to_flashbax_state(ours_buffer.init(TIMESTEP))
    restored = restore(tmp_path / "ckpt", {"buffer_state": template})["buffer_state"]
    state = buffers.from_flashbax_state(restored, ours_buffer)
    assert buffers.timesteps_added(state) == 14
    np.testing.assert_array_equal(  # same leaves, moved to our layout
        state.sum_tree_state.nodes[16:], ref_state.sum_tree_state.nodes[15:]
    )
    assert float(state.sum_tree_state.max_recorded_priority) == 2.0

    ours_add = jax.jit(ours_buffer.add)
    ours_sample, ours_set = jax.jit(ours_buffer.sample), jax.jit(ours_buffer.set_priorities)
    for step in range(7, 12):
        key = jax.random.PRNGKey(step)
        ref_state = ref_buffer.add(ref_state, batch(step))
        state = ours_add(state, batch(step))
        got, want = ours_sample(state, key), ref_buffer.sample(ref_state, key)
        assert_same(got.indices, want.indices, f"indices after add {step}")
        assert_same(got.probabilities, want.probabilities, f"probabilities after add {step}")
        assert_same(got.experience, want.experience, f"sample after add {step}")
        priorities = 0.5 * (1 + (want.indices % 3)).astype(jnp.float32)
        ref_state = ref_buffer.set_priorities(ref_state, want.indices, priorities)
        state = ours_set(state, got.indices, priorities)
    # the reference's state, as it is, is accepted where a state is taken
    ref_view = ours_sample(ref_state, jax.random.PRNGKey(99))
    assert_same(ref_view.indices, ours_sample(state, jax.random.PRNGKey(99)).indices, "as is")


def test_a_whole_learner_state_restores_and_training_continues(tmp_path: Any) -> None:
    """Parameters, optax state and a Flashbax flat buffer in one checkpoint; the restored run
    and the Flashbax run then train to bit-identical parameters."""
    ref_buffer = reference(flashbax.make_flat_buffer, 16, 4, 8, add_batch_size=2)
    ours_buffer = buffers.make_flat_buffer(16, 4, 8, add_batch_size=2)
    optimiser = optax.adam(0.05)

    def loss(params: Any, transitions: Any) -> jax.Array:
        first, second = transitions.experience.first, transitions.experience.second
        guess = first.obs @ params["w"] + params["b"]
        return jnp.mean((guess - second.reward) ** 2)

    def train_step(buffer: Any, learner: dict[str, Any], timestep: Step, key: jax.Array) -> Any:
        buffer_state = buffer.add(learner["buffer_state"], timestep)
        grads = jax.grad(loss)(learner["params"], buffer.sample(buffer_state, key))
        updates, opt_state = optimiser.update(grads, learner["opt_state"])
        params = optax.apply_updates(learner["params"], updates)
        return {"params": params, "opt_state": opt_state, "buffer_state": buffer_state}

    def one(step: int) -> Step:
        whole = batch(step)
        return Step(whole.obs[:, 0], whole.reward[:, 0])

    params = {"w": jnp.full(3, 0.1, jnp.float32), "b": jnp.float32(0)}
    learner = {
        "params": params,
        "opt_state": optimiser.init(params),
        "buffer_state": ref_buffer.init(TIMESTEP),
    }
    ref_train = jax.jit(lambda lr, ts, k: train_step(ref_buffer, lr, ts, k))
    for step in range(12):  # 24 transitions into 16 slots: wrapped
        learner = ref_train(learner, one(step), jax.random.PRNGKey(step))
    save(tmp_path / "learner", learner)

    target = {
        "params": params,
        "opt_state": optimiser.init(params),
        "buffer_state": buffers.to_flashbax_state(ours_buffer.init(TIMESTEP)),
    }
    restored = restore(tmp_path / "learner", target)
    restored["buffer_state"] = buffers.from_flashbax_state(restored["buffer_state"], ours_buffer)
    ours_train = jax.jit(lambda lr, ts, k: train_step(ours_buffer, lr, ts, k))
    for step in range(12, 18):
        key = jax.random.PRNGKey(step)
        learner, restored = ref_train(learner, one(step), key), ours_train(restored, one(step), key)
        assert_same(restored["params"], learner["params"], f"parameters after step {step}")
        assert_same(restored["opt_state"], learner["opt_state"], f"optimiser after step {step}")
    assert buffers.timesteps_added(restored["buffer_state"]) == 18


def test_a_queue_restores_and_reads_on(tmp_path: Any) -> None:
    kw = {"max_length_time_axis": 8, "add_batch_size": 2, "add_sequence_length": 2}
    ref_queue = jitted(reference(flashbax.make_trajectory_queue, sample_sequence_length=3, **kw))
    ours_queue = buffers.make_trajectory_queue(sample_sequence_length=3, **kw)
    ref_state = ref_queue.init(TIMESTEP)
    for step in range(3):
        ref_state = ref_queue.add(ref_state, batch(step))
    ref_state, _ = ref_queue.sample(ref_state)
    save(tmp_path / "queue", {"queue": ref_state})
    template = {"queue": buffers.to_flashbax_state(ours_queue.init(TIMESTEP))}
    state = buffers.from_flashbax_state(restore(tmp_path / "queue", template)["queue"])
    assert_same(buffers.gather_all(state), buffers.gather_all(ref_state), "unread")
    for step in range(3, 5):
        ref_state, want = ref_queue.sample(ref_queue.add(ref_state, batch(step)))
        state, got = ours_queue.sample(ours_queue.add(state, batch(step)))
        assert_same(got.experience, want.experience, f"read after add {step}")


def test_our_states_go_to_the_reference_s_shape_and_back() -> None:
    ours = buffers.make_prioritised_trajectory_buffer(**TRAJECTORY)
    state, add = ours.init(TIMESTEP), jax.jit(ours.add)
    for step in range(8):
        state = add(state, batch(step))
    state = ours.set_priorities(state, jnp.array([3, 5]), jnp.array([0.5, 3.0]))
    shaped = buffers.to_flashbax_state(state)
    assert sorted(shaped) == [
        "current_index",
        "experience",
        "is_full",
        "running_index",
        "sum_tree_state",
    ]
    assert shaped["sum_tree_state"]["nodes"].shape == (63,)  # 20 items: 32 leaves, root at 0
    back = buffers.from_flashbax_state(shaped, ours)
    assert_same(back, state, "round trip")
    assert buffers.from_flashbax_state(state) is state


def test_states_that_do_not_fit_are_refused_with_the_fix() -> None:
    ours = buffers.make_trajectory_buffer(**TRAJECTORY)
    other = reference(flashbax.make_trajectory_buffer, **{**TRAJECTORY, "max_length_time_axis": 12})
    with pytest.raises(
        buffers.BufferConfigError,
        match=re.escape(
            "the state's experience is [2, 12, ...] (rows, time) but the buffer's is [2, 10"
        ),
    ):
        buffers.from_flashbax_state(other.init(TIMESTEP), ours)
    with pytest.raises(buffers.ArgumentTypeError, match="must be a buffer state in the reference"):
        buffers.from_flashbax_state({"params": jnp.zeros(3)})
    shaped = buffers.to_flashbax_state(
        buffers.make_prioritised_trajectory_buffer(**TRAJECTORY).init(TIMESTEP)
    )
    shaped["sum_tree_state"]["nodes"] = jnp.zeros(30)
    with pytest.raises(
        buffers.BufferConfigError,
        match=re.escape("has 30 nodes; the reference's tree has 2**k - 1"),
    ):
        buffers.from_flashbax_state(shaped)


def test_a_vault_takes_a_restored_reference_state(tmp_path: Any) -> None:
    from vault import Vault

    ref_buffer = reference(flashbax.make_trajectory_buffer, **TRAJECTORY)
    ref_state = ref_buffer.init(TIMESTEP)
    for step in range(5):  # exactly full
        ref_state = ref_buffer.add(ref_state, batch(step))
    with Vault.create(tmp_path / "v", buffers.from_flashbax_state(ref_state)) as v:
        assert v.write(ref_state) == 10
    read = Vault.open(tmp_path / "v").read_numpy()
    assert_same(read, buffers.gather_all(ref_state), "vault")
