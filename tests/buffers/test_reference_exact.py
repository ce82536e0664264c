"""The reference-exact mode against the reference itself (Flashbax 0.1.3, in the ``dev``
extra): a Rainbow-like loop (add, sample, ``set_priorities`` from TD-error-like float32
priorities) draws the reference's items at every step, and the sum trees stay bit-identical,
on both of the reference's update paths; the default mode is pinned to differ.
"""

from __future__ import annotations

import importlib.metadata
import re
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers
from buffers import _reference_exact
from buffers import prioritised_trajectory_buffer as ours
from buffers._sum_tree import SumTreeState

flashbax = pytest.importorskip("flashbax")
if importlib.metadata.version("flashbax") != "0.1.3":
    pytest.skip("the exact mode reproduces Flashbax 0.1.3", allow_module_level=True)
from flashbax.buffers import prioritised_trajectory_buffer as theirs  # noqa: E402
from flashbax.buffers import sum_tree as their_tree  # noqa: E402

STEPS = 120
TIMESTEP = {"obs": jnp.zeros((3,), jnp.float32), "reward": jnp.zeros((), jnp.float32)}


def td_priorities(indices: jax.Array, step: jax.Array) -> jax.Array:
    """Float32 priorities as ``|td_error| + eps`` from a learner would be: no two alike."""
    td = jnp.sin(indices.astype(jnp.float32) * 1.37 + step * 0.113) * 3.3
    return jnp.abs(td) + 1e-3


def rainbow_loop(
    make: Callable[[Any], Any], batch_of: Callable[[int], Any], steps: int = STEPS
) -> tuple[list[Any], Any]:
    """Add, then sample and re-prioritise what was drawn; every draw and the last state."""
    buf = make(TIMESTEP)
    add, sample = jax.jit(buf.add), jax.jit(buf.sample)

    @jax.jit
    def reprioritise(state: Any, indices: jax.Array, step: jax.Array) -> Any:
        return buf.set_priorities(state, indices, td_priorities(indices, step))

    state, key, draws = buf.init(TIMESTEP), jax.random.PRNGKey(7), []
    for step in range(steps):
        state = add(state, batch_of(step))
        if not bool(jax.numpy.all(buf.can_sample(state))):
            continue
        key, draw_key = jax.random.split(key)
        drawn = sample(state, draw_key)
        draws.append(
            jax.tree.map(np.asarray, (drawn.indices, drawn.probabilities, drawn.experience))
        )
        state = reprioritise(state, drawn.indices, jnp.float32(step))
    return draws, state


def flat_batch(step: int) -> Any:
    obs = jnp.full((4, 3), step, jnp.float32) + jnp.arange(4, dtype=jnp.float32)[:, None]
    return {"obs": obs, "reward": jnp.arange(4, dtype=jnp.float32) * 0.25 * step}


def sequence_batch(step: int) -> Any:
    obs = jnp.full((2, 3, 3), step, jnp.float32) + jnp.arange(3, dtype=jnp.float32)[:, None]
    return {"obs": obs, "reward": jnp.full((2, 3), 0.5 * step, jnp.float32)}


def item_batch(step: int) -> Any:
    return {"obs": jnp.full((3,), step, jnp.float32), "reward": jnp.float32(step)}


def flat(lib: Any, **kw: Any) -> Callable[[Any], Any]:
    # the flat buffer of a DQN/Rainbow learner: 4 environments, transitions (sequences of 2)
    return lambda _: lib.make_prioritised_flat_buffer(
        max_length=64, min_length=8, sample_batch_size=16, add_batch_size=4, **kw
    )


def trajectory(lib: Any, **kw: Any) -> Callable[[Any], Any]:
    # n-step sequences: windows of 3, starts 2 apart, 2 rows, a ring that wraps many times
    return lambda _: lib.make_prioritised_trajectory_buffer(
        add_batch_size=2,
        sample_batch_size=8,
        sample_sequence_length=3,
        period=2,
        min_length_time_axis=3,
        max_length_time_axis=20,
        priority_exponent=0.7,
        **kw,
    )


def item(lib: Any, **kw: Any) -> Callable[[Any], Any]:
    return lambda _: lib.make_prioritised_item_buffer(
        max_length=24, min_length=4, sample_batch_size=8, **kw
    )


KINDS = {"flat": (flat, flat_batch), "trajectory": (trajectory, sequence_batch)}
KINDS["item"] = (item, item_batch)


def assert_same_draws(ours_draws: list[Any], their_draws: list[Any]) -> None:
    assert len(ours_draws) == len(their_draws) > STEPS // 2
    for step, (got, want) in enumerate(zip(ours_draws, their_draws, strict=True)):
        np.testing.assert_array_equal(got[0], want[0], err_msg=f"indices, draw {step}")
        np.testing.assert_array_equal(got[1], want[1], err_msg=f"probabilities, draw {step}")
        for g, w in zip(jax.tree.leaves(got[2]), jax.tree.leaves(want[2]), strict=True):
            np.testing.assert_array_equal(g, w, err_msg=f"experience, draw {step}")


def assert_same_tree(ours_state: Any, their_state: Any) -> None:
    # this package's layout is the reference's shifted by one place (its root is at 0)
    mine, ref = ours_state.sum_tree_state, their_state.sum_tree_state
    np.testing.assert_array_equal(np.asarray(mine.nodes)[1:], np.asarray(ref.nodes))
    assert mine.max_recorded_priority == ref.max_recorded_priority


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_exact_mode_draws_what_the_reference_draws_over_a_long_run(kind: str) -> None:
    make, batch_of = KINDS[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference's advice on period and lengths
        their_draws, their_state = rainbow_loop(make(flashbax), batch_of)
    exact_draws, exact_state = rainbow_loop(make(buffers, reference_exact=True), batch_of)
    assert_same_draws(exact_draws, their_draws)
    assert_same_tree(exact_state, their_state)
    # the default mode differs (truncation, rounding): this run exercises both
    default_draws, _ = rainbow_loop(make(buffers), batch_of)
    assert any(
        not np.array_equal(d[0], t[0]) for d, t in zip(default_draws, their_draws, strict=True)
    )


def test_exact_mode_follows_the_references_batched_update_path() -> None:
    # ``device="gpu"`` selects the reference's level-wide update (bincount of duplicates);
    # its buffers fall back to the one-by-one path where JAX has no GPU, so the module
    # functions are called with the device directly, on any backend
    make = trajectory(buffers, reference_exact=True)
    buf = make(TIMESTEP)
    state, theirs_state = buf.init(TIMESTEP), None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = trajectory(flashbax)(TIMESTEP)
        theirs_state = ref.init(TIMESTEP)
    kw = {"sample_sequence_length": 3, "period": 2, "device": "gpu"}
    add_ours = jax.jit(lambda s, b: ours.prioritised_add(s, b, reference_exact=True, **kw))
    add_theirs = jax.jit(lambda s, b: theirs.prioritised_add(s, b, **kw))

    def set_ours(s: Any, i: jax.Array, p: jax.Array) -> Any:
        return ours.set_priorities(s, i, p, 0.7, reference_exact=True, **kw)

    def set_theirs(s: Any, i: jax.Array, p: jax.Array) -> Any:
        return theirs.set_priorities(s, i, p, 0.7, "gpu")

    set_ours_jit, set_theirs_jit = jax.jit(set_ours), jax.jit(set_theirs)
    sample_ours, sample_theirs = jax.jit(buf.sample), jax.jit(ref.sample)
    key = jax.random.PRNGKey(3)
    for step in range(STEPS):
        state = add_ours(state, sequence_batch(step))
        theirs_state = add_theirs(theirs_state, sequence_batch(step))
        if step < 2:
            continue
        key, draw_key = jax.random.split(key)
        got, want = sample_ours(state, draw_key), sample_theirs(theirs_state, draw_key)
        np.testing.assert_array_equal(np.asarray(got.indices), np.asarray(want.indices))
        # duplicates in every update: the reference splits their deltas by their count
        indices = jnp.concatenate([want.indices, want.indices[:3]])
        priorities = td_priorities(indices, jnp.float32(step))
        state = set_ours_jit(state, indices, priorities)
        theirs_state = set_theirs_jit(theirs_state, indices, priorities)
        assert_same_tree(state, theirs_state)


def test_the_batched_tree_update_matches_the_references_on_arbitrary_batches() -> None:
    # random leaves with duplicates and padding leaves (beyond the 37 items: the reference's
    # sampler can return them), float32 priorities over many updates
    rng = np.random.default_rng(0)
    capacity = 37
    theirs_tree = their_tree.init(capacity)
    mine = _reference_exact.set_leaves  # the same tree, in this package's layout
    state = SumTreeState(
        nodes=jnp.zeros((2 * 64,), jnp.float32), max_recorded_priority=jnp.float32(1.0)
    )
    ref_set = jax.jit(their_tree.set_batch_bincount)
    our_set = jax.jit(mine, static_argnames=("device", "capacity"))
    for _ in range(60):
        idx = jnp.asarray(rng.integers(0, 64, 24), jnp.int32)
        val = jnp.asarray(rng.gamma(2.0, 1.5, 24), jnp.float32)
        theirs_tree = ref_set(theirs_tree, idx, val)
        state = our_set(state, idx, val, jnp.ones(24, bool), device="gpu", capacity=capacity)
        np.testing.assert_array_equal(np.asarray(state.nodes)[1:], np.asarray(theirs_tree.nodes))


def test_new_items_get_the_recorded_maximum_truncated_in_exact_mode_only() -> None:
    def leaf_after_reprioritising(**kw: Any) -> float:
        buf = flat(buffers, **kw)(TIMESTEP)
        state = buf.add(buf.init(TIMESTEP), flat_batch(0))
        state = buf.add(state, flat_batch(1))  # each row's first item: 0, 16, 32, 48
        state = buf.set_priorities(state, jnp.asarray([0]), jnp.asarray([2.7 ** (1 / 0.6)]))
        state = buf.add(state, flat_batch(2))  # each row's second item (1, 17, ...) now
        return float(state.sum_tree_state.nodes[64 + 1])

    assert leaf_after_reprioritising(reference_exact=True) == 2.0  # int(2.7)
    assert leaf_after_reprioritising() == pytest.approx(2.7, rel=1e-6)


def test_exact_mode_sets_priorities_where_the_reference_does() -> None:
    # an item whose window was overwritten: the default mode ignores it, the reference (and
    # the exact mode) set it anyway, and it can be drawn again
    def leaf(**kw: Any) -> float:
        buf = item(buffers, **kw)(TIMESTEP)
        state = buf.add(buf.init(TIMESTEP), item_batch(0))
        # only item 0 was ever written: item 5 is no valid item
        state = buf.set_priorities(state, jnp.asarray([5]), jnp.asarray([3.0]))
        return float(state.sum_tree_state.nodes[32 + 5])

    assert leaf() == 0.0
    assert leaf(reference_exact=True) == pytest.approx(3.0**0.6)


def test_exact_mode_still_refuses_bad_priorities_and_indices() -> None:
    buf = flat(buffers, reference_exact=True)(TIMESTEP)
    state = buf.add(buf.init(TIMESTEP), flat_batch(0))
    with pytest.raises(buffers.PriorityError, match=re.escape("must be finite and >= 0")):
        buf.set_priorities(state, jnp.asarray([0, 1]), jnp.asarray([1.0, jnp.nan]))
    # a padding leaf (beyond the 64 items, within the tree's 64 leaves) cannot exist here, so
    # the tree's leaf count is the bound
    with pytest.raises(buffers.PriorityError, match=re.escape("must be in [0, 64)")):
        buf.set_priorities(state, jnp.asarray([64]), jnp.asarray([1.0]))
    with pytest.raises(buffers.ArgumentTypeError, match="reference_exact"):
        buffers.make_prioritised_flat_buffer(64, 8, 16, reference_exact="yes")  # type: ignore[arg-type]


def test_a_device_jax_does_not_have_falls_back_to_the_one_by_one_path_with_a_warning() -> None:
    # as the reference's own buffers do (the machines that run these tests have no TPU)
    with pytest.warns(UserWarning, match=re.escape("device='tpu' is not available here")):
        buffers.make_prioritised_flat_buffer(64, 8, 16, device="tpu", reference_exact=True)


def test_recompute_sums_makes_every_parent_the_sum_of_its_children() -> None:
    # an exact-mode run's sums drift from its leaves by rounding; recomputed, they are exact,
    # the priorities unchanged, and the default mode takes the state on
    _, state = rainbow_loop(flat(buffers, reference_exact=True), flat_batch, steps=40)
    fixed = buffers.prioritised_trajectory_buffer.recompute_sums(state)
    nodes = np.asarray(fixed.sum_tree_state.nodes)
    leaves = nodes.shape[0] // 2
    for i in range(1, leaves):
        assert nodes[i] == np.float32(nodes[2 * i] + nodes[2 * i + 1])
    np.testing.assert_array_equal(nodes[leaves:], np.asarray(state.sum_tree_state.nodes)[leaves:])
    drifted = np.asarray(state.sum_tree_state.nodes)[1:leaves] != nodes[1:leaves]
    assert drifted.any()  # the exact mode's own sums were not all exact
    default = flat(buffers)(TIMESTEP)
    drawn = default.sample(fixed, jax.random.PRNGKey(1))
    assert bool(drawn.valid.all())
