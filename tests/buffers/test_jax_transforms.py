"""Every buffer kind under ``jit``, ``vmap``, ``pmap``, ``lax.scan`` and donation.

DESIGN.md, buffer invariant 4: everything works under ``jit`` (no retrace on the second
call), ``vmap``, ``pmap`` and ``lax.scan``, and with ``donate_argnums``. The same tests run
over the whole conformance table (``buffer_kind``, see ``tests/conftest.py``); each compares
the transformed computation with the plain jitted one, member by member or step by step.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest


def assert_trees_equal(actual: Any, expected: Any) -> None:
    """Same structure, and every leaf equal (shapes, dtypes and values)."""
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    got = jax.tree_util.tree_leaves_with_path(actual)
    want = jax.tree.leaves(expected)
    for (path, a), e in zip(got, want, strict=True):
        where = jax.tree_util.keystr(path)
        a, e = np.asarray(a), np.asarray(e)
        assert a.dtype == e.dtype, where
        np.testing.assert_array_equal(a, e, err_msg=where)


def stack_trees(trees: list[Any]) -> Any:
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def member(tree: Any, i: int) -> Any:
    return jax.tree.map(lambda x: x[i], tree)


# --------------------------------------------------------------------------------------------
# jit
# --------------------------------------------------------------------------------------------


def test_jit_add_and_sample_trace_once(buffer_kind):
    """Second (and later) calls reuse the first trace: the state's types are stable.

    States from eager ``init``, jitted ``init``, jitted ``add`` and jitted ``sample`` (the
    queue's consumed state) all have the same types, so each jitted function traces once.
    """
    kind, h = buffer_kind, buffer_kind.harness()
    eager_state = h.init(kind.timestep())
    jitted_state = jax.jit(h.init)(kind.timestep())
    assert_trees_equal(jitted_state, eager_state)

    h.jit_add(jitted_state, kind.batch(0))
    state = eager_state
    for i in range(kind.adds_to_ready + 2):
        state = h.jit_add(state, kind.batch(i))
    for key in jax.random.split(jax.random.PRNGKey(0), 3):
        state, _, valid = h.jit_sample(state, key)
        assert np.asarray(valid).all()
    state = h.jit_add(state, kind.batch(99))
    h.jit_sample(state, jax.random.PRNGKey(1))

    assert h.traces["add"] == 1
    assert h.traces["sample"] == 1
    assert h.jit_add._cache_size() == 1
    assert h.jit_sample._cache_size() == 1


# --------------------------------------------------------------------------------------------
# vmap and pmap: independent states stacked on a leading axis
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("transform", "members"), [("vmap", 3), ("pmap", 2)])
def test_stacked_states_match_independent_ones(buffer_kind, transform, members):
    """``init`` and an add-then-sample step mapped over a leading axis of independent states
    equal each member's own computation, before and after the buffers are ready."""
    kind, h = buffer_kind, buffer_kind.harness()

    def step(state: Any, batch: Any, key: jax.Array) -> tuple[Any, Any, jax.Array]:
        return h.sample(h.add(state, batch), key)

    if transform == "vmap":
        mapped_init, mapped_step = jax.vmap(h.init), jax.jit(jax.vmap(step))
    else:
        assert jax.device_count() == 2, "tests/conftest.py fakes 2 CPU devices for pmap"
        mapped_init, mapped_step = jax.pmap(h.init), jax.pmap(step)

    timestep = kind.timestep()
    states = mapped_init(
        jax.tree.map(lambda x: jnp.stack([x + j for j in range(members)]), timestep)
    )
    singles = [h.init(timestep) for _ in range(members)]
    assert_trees_equal(states, stack_trees(singles))

    for i in range(kind.adds_to_ready + 1):
        steps = [10 * i + j for j in range(members)]  # different data in every member
        keys = jax.random.split(jax.random.PRNGKey(i), members)
        states, experience, valid = mapped_step(
            states, stack_trees([kind.batch(t) for t in steps]), keys
        )
        for leaf in jax.tree.leaves(states):
            assert leaf.shape[0] == members
        assert np.asarray(valid).shape == (members, kind.sample_batch)
        for j in range(members):
            single = h.jit_add(singles[j], kind.batch(steps[j]))
            singles[j], single_experience, single_valid = h.jit_sample(single, keys[j])
            assert_trees_equal(member(states, j), singles[j])
            assert_trees_equal(member((experience, valid), j), (single_experience, single_valid))
    assert np.asarray(valid).all()


# --------------------------------------------------------------------------------------------
# lax.scan
# --------------------------------------------------------------------------------------------


def test_scan_add_then_sample_matches_python_loop(buffer_kind):
    """A scanned add-then-sample loop equals the same loop of jitted calls, step by step."""
    kind, h = buffer_kind, buffer_kind.harness()
    n_steps = kind.adds_to_ready + 2
    keys = jax.random.split(jax.random.PRNGKey(2), n_steps)
    steps = jnp.arange(n_steps, dtype=jnp.int32)

    def body(state: Any, xs: tuple[jax.Array, jax.Array]) -> tuple[Any, Any]:
        step, key = xs
        state = h.add(state, kind.batch(step))
        state, experience, valid = h.sample(state, key)
        return state, (experience, valid)

    final, (experiences, valids) = jax.jit(lambda s: jax.lax.scan(body, s, (steps, keys)))(
        h.init(kind.timestep())
    )

    state = h.init(kind.timestep())
    outputs = []
    for i in range(n_steps):
        state = h.jit_add(state, kind.batch(i))
        state, experience, valid = h.jit_sample(state, keys[i])
        outputs.append((experience, valid))
    assert_trees_equal(final, state)
    assert_trees_equal((experiences, valids), stack_trees(outputs))

    # Samples drawn before the buffer is ready are flagged invalid, the later ones valid (the
    # mixer flags items per buffer, so only "all valid" is tied to its readiness).
    ready = np.arange(1, n_steps + 1) >= kind.adds_to_ready
    valids = np.asarray(valids)
    np.testing.assert_array_equal(valids.all(axis=1), ready)
    assert not valids[0].any() or kind.adds_to_ready == 1
    # Valid items hold written timesteps (see conftest.timesteps: obs = [v, v + 0.5]).
    obs_leaves = [
        np.asarray(leaf)[valids]
        for path, leaf in jax.tree_util.tree_leaves_with_path(experiences)
        if path[-1] == jax.tree_util.DictKey("obs")
    ]
    assert obs_leaves
    for obs in obs_leaves:
        np.testing.assert_array_equal(obs[..., 1] - obs[..., 0], 0.5)


# --------------------------------------------------------------------------------------------
# Donation
# --------------------------------------------------------------------------------------------


def test_add_with_donated_state(buffer_kind):
    """``jax.jit(add, donate_argnums=0)`` gives the same states as the plain jitted add."""
    kind, h = buffer_kind, buffer_kind.harness()
    donating_add = jax.jit(h.add, donate_argnums=0)
    state = h.init(kind.timestep())
    expected = h.init(kind.timestep())
    for i in range(kind.adds_to_ready + 1):
        expected = h.jit_add(expected, kind.batch(i))
        donated = state
        state = donating_add(donated, kind.batch(i))
        assert_trees_equal(state, expected)
        # The donated state's buffers were handed over: it must not (and cannot) be used again.
        assert all(leaf.is_deleted() for leaf in jax.tree.leaves(donated))
    key = jax.random.PRNGKey(3)
    assert_trees_equal(h.jit_sample(state, key), h.jit_sample(expected, key))
