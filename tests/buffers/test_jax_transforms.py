"""Every buffer kind under ``jit``, ``vmap``, ``pmap``, ``lax.scan`` and donation.

DESIGN.md, buffer invariant 4: everything works under ``jit`` (no retrace on the second
call), ``vmap``, ``pmap`` and ``lax.scan``, and with ``donate_argnums``. The same tests run
over the whole conformance table (``buffer_kind``, see ``tests/conftest.py``); each compares
the transformed computation with the plain jitted one, member by member or step by step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
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


def counting(fn: Callable[..., Any], counter: Counter[str], name: str) -> Callable[..., Any]:
    """``fn`` with a Python side effect that counts how often it is traced."""

    def counted(*args: Any) -> Any:
        counter[name] += 1
        return fn(*args)

    return counted


def stack_trees(trees: list[Any]) -> Any:
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def member(tree: Any, i: int) -> Any:
    return jax.tree.map(lambda x: x[i], tree)


# --------------------------------------------------------------------------------------------
# jit
# --------------------------------------------------------------------------------------------


def test_jit_add_and_sample_trace_once(buffer_kind):
    """Second (and later) calls reuse the first trace: the state's types are stable."""
    kind, h = buffer_kind, buffer_kind.harness()
    traces: Counter[str] = Counter()
    jit_init = jax.jit(counting(h.init, traces, "init"))
    jit_add = jax.jit(counting(h.add, traces, "add"))
    jit_sample = jax.jit(counting(h.sample, traces, "sample"))

    eager_state = h.init(kind.timestep())
    jitted_state = jit_init(kind.timestep())
    assert_trees_equal(jitted_state, eager_state)

    # A state from eager init, from jitted init and from jitted add all hit the same trace.
    jit_add(jitted_state, kind.batch(0))
    state = eager_state
    for i in range(kind.adds_to_ready + 2):
        state = jit_add(state, kind.batch(i))
        eager_state = h.add(eager_state, kind.batch(i))
    assert traces["add"] == 1
    assert jit_add._cache_size() == 1
    assert_trees_equal(state, eager_state)

    key = jax.random.PRNGKey(0)
    for k in jax.random.split(key, 3):
        state, experience, valid = jit_sample(state, k)
        assert bool(jnp.all(valid))
    assert traces["sample"] == 1
    assert jit_sample._cache_size() == 1
    # ... and a state returned by sample (the queue's consumed state) reuses the add trace.
    state = jit_add(state, kind.batch(99))
    assert traces["add"] == 1
    # The jitted sample matches the eager one.
    _, eager_experience, eager_valid = h.sample(state, key)
    _, experience, valid = jit_sample(state, key)
    assert_trees_equal((experience, valid), (eager_experience, eager_valid))


# --------------------------------------------------------------------------------------------
# vmap and pmap: independent states stacked on a leading axis
# --------------------------------------------------------------------------------------------


def _map(transform: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    return jax.jit(jax.vmap(fn)) if transform == "vmap" else jax.pmap(fn)


@pytest.mark.parametrize(("transform", "members"), [("vmap", 3), ("pmap", 2)])
def test_stacked_states_match_independent_ones(buffer_kind, transform, members):
    """init, add and sample mapped over a leading axis equal each member's own computation."""
    if transform == "pmap":
        assert jax.device_count() == 2, "tests/conftest.py fakes 2 CPU devices for pmap"
    kind, h = buffer_kind, buffer_kind.harness()
    mapped_init = _map(transform, h.init)
    mapped_add = _map(transform, h.add)
    mapped_sample = _map(transform, h.sample)

    timestep = kind.timestep()
    stacked_timestep = jax.tree.map(lambda x: jnp.stack([x + j for j in range(members)]), timestep)
    states = mapped_init(stacked_timestep)
    singles = [h.init(timestep) for _ in range(members)]
    assert_trees_equal(states, stack_trees(singles))

    for i in range(kind.adds_to_ready + 1):
        steps = [10 * i + j for j in range(members)]  # different data in every member
        batches = stack_trees([kind.batch(s) for s in steps])
        states = mapped_add(states, batches)
        singles = [h.jit_add(s, kind.batch(t)) for s, t in zip(singles, steps, strict=True)]
    for leaf in jax.tree.leaves(states):
        assert leaf.shape[0] == members
    assert_trees_equal(states, stack_trees(singles))

    keys = jax.random.split(jax.random.PRNGKey(1), members)
    states, experience, valid = mapped_sample(states, keys)
    assert np.asarray(valid).shape == (members, kind.sample_batch)
    assert np.asarray(valid).all()
    for j in range(members):
        single_state, single_experience, single_valid = h.jit_sample(singles[j], keys[j])
        assert_trees_equal(member(states, j), single_state)
        assert_trees_equal(member((experience, valid), j), (single_experience, single_valid))


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

    # Steps before the buffer is ready are flagged invalid, the others valid.
    ready = np.arange(1, n_steps + 1) >= kind.adds_to_ready
    np.testing.assert_array_equal(np.asarray(valids).all(axis=1), ready)
    np.testing.assert_array_equal(np.asarray(valids).any(axis=1), ready)


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
        state = donating_add(state, kind.batch(i))  # the old state must not be used again
        assert_trees_equal(state, expected)
    key = jax.random.PRNGKey(3)
    assert_trees_equal(h.jit_sample(state, key), h.jit_sample(expected, key))
