"""Joints: buffer features meeting each other and JAX transformations, run against Flashbax.

Each test runs one program twice, once with ``buffers`` and once with Flashbax 0.1.3 (the
reference, in the ``dev`` extra), or against a small numpy model, and compares shapes, dtypes
and values wherever the draws are meant to agree (the uniform buffers always, the prioritised
ones in the reference-exact mode). What the other test modules already cover on its own (one
kind under one transformation, the stored draw table, long exact-mode runs of a single buffer)
is not repeated here; these tests combine: a PER loop under ``jit(vmap(scan))`` with
``lax.cond``, duplicates and zero priorities; the exact mode inside a mixer; states handed to
Flashbax with ``to_flashbax_state`` and continued there; the queue, the sum-tree module and
``buffers.utils`` on the same inputs as the reference's; unusual containers and dtypes through
every layout.

Bugs found this way, fixed with these tests: the module-level ``trajectory_buffer.sample``
marked windows of unwritten zeros valid, ``from_flashbax_state`` of a stacked state kept
revived stale windows, and priorities whose sum overflows float32 were accepted. The
module-level ``set_priorities`` called with the reference's arguments assumes windows of 1
(documented; its test gives the buffer's sequence length).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers
from buffers import prioritised_trajectory_buffer as ptb
from buffers import sum_tree, trajectory_buffer, utils

flashbax = pytest.importorskip("flashbax")
from flashbax import utils as fbx_utils  # noqa: E402
from flashbax.buffers import prioritised_trajectory_buffer as fbx_ptb  # noqa: E402
from flashbax.buffers import sum_tree as fbx_tree  # noqa: E402
from flashbax.buffers import trajectory_buffer as fbx_tb  # noqa: E402
from flashbax.buffers import trajectory_queue as fbx_tq  # noqa: E402

CODE = {"c": jnp.int32(0)}


def quiet(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call the reference without its advice warnings (period, min length) and deprecations."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def codes(step: Any, rows: int, length: int) -> dict[str, jax.Array]:
    """Batch ``[rows, length]`` of add number ``step``: codes ``100 * step + position``.

    Consecutive timesteps of a row always have increasing codes, so a window whose codes
    decrease crosses the write position (newest timestep, then the oldest)."""
    flat = 100 * jnp.asarray(step, jnp.int32) + jnp.arange(rows * length, dtype=jnp.int32)
    return {"c": flat.reshape(rows, length)}


def assert_equal(got: Any, want: Any, what: str) -> None:
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got_leaves) == len(want_leaves), what
    for g, w in zip(got_leaves, want_leaves, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (what, g.shape, w.shape)
        assert g.dtype == w.dtype, (what, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w, err_msg=what)


# --------------------------------------------------------------------------------------------
# A PER learner's loop under jit(vmap(scan)), exact mode against the reference
# --------------------------------------------------------------------------------------------

PER = {
    "add_batch_size": 2,
    "sample_batch_size": 5,
    "sample_sequence_length": 3,
    "period": 2,
    "min_length_time_axis": 3,
    "max_length_time_axis": 6,
    "priority_exponent": 0.7,
}
PER_STEPS, MEMBERS = 9, 3


def per_step(buf: Any) -> Any:
    """Add 3 timesteps per row (the ring of 6 wraps every other step), sample, and set the
    drawn items' priorities: TD-error-like floats, one duplicated index (the last value
    wins) and one zero."""

    def step(state: Any, xs: tuple[jax.Array, jax.Array]) -> tuple[Any, Any]:
        i, key = xs
        state = buf.add(state, codes(i, 2, 3))
        drawn = buf.sample(state, key)
        indices = drawn.indices.at[-1].set(drawn.indices[0])
        priorities = jnp.abs(jnp.sin(indices * 1.37 + i * 0.113)) * 3.3 + 1e-3
        priorities = jnp.where(jnp.arange(5) == 2, 0.0, priorities)
        state = buf.set_priorities(state, indices, priorities)
        return state, (drawn.indices, drawn.probabilities, drawn.experience["c"])

    return step


def per_run(buf: Any) -> Any:
    step = per_step(buf)

    def run(first_code: jax.Array, keys: jax.Array) -> Any:
        state = buf.init({"c": first_code})
        return jax.lax.scan(step, state, (jnp.arange(1, PER_STEPS + 1), keys))

    return jax.jit(jax.vmap(run))


def test_exact_mode_per_loop_under_vmap_and_scan_is_the_reference_s_bit_for_bit() -> None:
    """Three independent learners (``vmap``) each run a scanned add/sample/re-prioritise loop;
    in the exact mode every draw, probability, sampled window and the final sum trees equal
    the reference's own ``jit(vmap(scan))`` run, and a donated jitted step in a Python loop
    gives that member the same draws again."""
    ours_buf = buffers.make_prioritised_trajectory_buffer(**PER, reference_exact=True)
    ref_buf = quiet(flashbax.make_prioritised_trajectory_buffer, **PER)
    keys = jax.random.split(jax.random.PRNGKey(0), MEMBERS * PER_STEPS)
    keys = keys.reshape(MEMBERS, PER_STEPS, -1)
    firsts = jnp.arange(MEMBERS, dtype=jnp.int32)
    ours_final, ours_draws = per_run(ours_buf)(firsts, keys)
    ref_final, ref_draws = quiet(per_run(ref_buf), firsts, keys)
    assert_equal(ours_draws, ref_draws, "draws")
    np.testing.assert_array_equal(  # our layout is the reference's shifted by one place
        np.asarray(ours_final.sum_tree_state.nodes)[:, 1:], ref_final.sum_tree_state.nodes
    )
    assert_equal(
        ours_final.sum_tree_state.max_recorded_priority,
        ref_final.sum_tree_state.max_recorded_priority,
        "max priority",
    )
    assert_equal(ours_final.experience, ref_final.experience, "experience")
    assert buffers.timesteps_added(ours_final).tolist() == [3 * PER_STEPS] * MEMBERS

    donating = jax.jit(per_step(ours_buf), donate_argnums=0)
    member = 1
    state = ours_buf.init({"c": firsts[member]})
    for t in range(PER_STEPS):
        before = state
        state, draw = donating(state, (jnp.int32(t + 1), keys[member, t]))
        assert all(leaf.is_deleted() for leaf in jax.tree.leaves(before))
        assert_equal(draw, jax.tree.map(lambda x, t=t: x[member, t], ours_draws), f"step {t}")


def valid_windows_model(state: Any, rows: int, t_len: int, length: int, period: int) -> Any:
    """Which items (``row * (T // period) + slot // period``) hold a whole written window that
    does not cross the write position, from ``current_index`` and ``is_full`` alone."""
    cur, full = int(state.current_index), bool(state.is_full)
    filled = t_len if full else cur
    out = []
    for _row in range(rows):
        for slot in range(0, t_len, period):
            dist = (cur - slot) % t_len or (t_len if full else 0)  # back from the write position
            out.append(length <= dist <= filled)
    return np.array(out)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_default_mode_loop_with_cond_nan_and_duplicates_keeps_its_invariants(device: str) -> None:
    """The default mode in the same vmapped, scanned loop, with ``set_priorities`` under
    ``lax.cond`` (only when the draw is valid) and a NaN among the priorities (ignored inside
    ``jit``): with either tree update (leaf by leaf, or level-wide: ``device="gpu"`` on a CPU
    backend), every internal node is the exact sum of its children, exactly the valid items
    have a positive priority, and no valid draw crosses the write position."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # device="gpu" is not available here: a warning
        buf = buffers.make_prioritised_trajectory_buffer(**PER, device=device)

    def step(state: Any, xs: tuple[jax.Array, jax.Array]) -> tuple[Any, Any]:
        i, key = xs
        state = buf.add(state, codes(i, 2, 3))
        drawn = buf.sample(state, key)
        indices = drawn.indices.at[-1].set(drawn.indices[0])
        priorities = jnp.abs(jnp.sin(indices * 1.37 + i * 0.113)) * 3.3 + 1e-3
        priorities = jnp.where(jnp.arange(5) == 2, jnp.nan, priorities)
        state = jax.lax.cond(
            drawn.valid.all(),
            lambda s: buf.set_priorities(s, indices, priorities),
            lambda s: s,
            state,
        )
        return state, (drawn.valid, drawn.experience["c"])

    def run(first_code: jax.Array, keys: jax.Array) -> Any:
        return jax.lax.scan(step, buf.init({"c": first_code}), (jnp.arange(1, 12), keys))

    keys = jax.random.split(jax.random.PRNGKey(4), 2 * 11).reshape(2, 11, -1)
    final, (valid, windows) = jax.jit(jax.vmap(run))(jnp.arange(2, dtype=jnp.int32), keys)
    assert np.asarray(valid).all()
    assert (np.diff(np.asarray(windows), axis=-1) > 0).all()  # no window crosses the head
    nodes = np.asarray(final.sum_tree_state.nodes)
    leaves = nodes.shape[-1] // 2
    for m in range(2):
        parents = np.arange(1, leaves)
        np.testing.assert_array_equal(
            nodes[m, parents], nodes[m, 2 * parents] + nodes[m, 2 * parents + 1]
        )
        member = jax.tree.map(lambda x, m=m: x[m], final)
        want = valid_windows_model(member, 2, 6, 3, 2)
        np.testing.assert_array_equal(nodes[m, leaves : leaves + want.size] > 0, want)
        assert not np.isnan(nodes[m]).any()


# --------------------------------------------------------------------------------------------
# Mixer over prioritised buffers
# --------------------------------------------------------------------------------------------


def test_mixer_of_exact_mode_buffers_draws_the_reference_mixer_s_items() -> None:
    """A mixer over two prioritised trajectory buffers in the exact mode, each re-prioritised
    from its part of the mixed batch (split by the shares), draws exactly what the
    reference's mixer draws, step after step."""
    out = {}
    for lib, extra in ((buffers, {"reference_exact": True}), (flashbax, {})):
        common = {"sample_batch_size": 4, "sample_sequence_length": 2, "period": 1}
        big = quiet(
            lib.make_prioritised_trajectory_buffer,
            add_batch_size=2,
            min_length_time_axis=2,
            max_length_time_axis=6,
            priority_exponent=0.5,
            **common,
            **extra,
        )
        small = quiet(
            lib.make_prioritised_trajectory_buffer,
            add_batch_size=2,
            min_length_time_axis=2,
            max_length_time_axis=4,
            priority_exponent=0.5,
            **common,
            **extra,
        )
        mixer = quiet(lib.make_mixer, [big, small], sample_batch_size=6, proportions=[2, 1])
        sample = jax.jit(mixer.sample)
        set_big, set_small = jax.jit(big.set_priorities), jax.jit(small.set_priorities)
        add_big, add_small = jax.jit(big.add), jax.jit(small.add)
        states = [big.init(CODE), small.init(CODE)]
        draws = []
        for i in range(10):
            states = [add_big(states[0], codes(i, 2, 1)), add_small(states[1], codes(-i, 2, 1))]
            if not bool(mixer.can_sample(states)):
                continue
            drawn = quiet(sample, states, jax.random.PRNGKey(i))
            draws.append((drawn.indices, drawn.probabilities, drawn.experience["c"]))
            p = jnp.abs(jnp.cos(drawn.indices * 0.7 + i)) * 2 + 0.1
            states = [
                set_big(states[0], drawn.indices[:4], p[:4]),
                set_small(states[1], drawn.indices[4:], p[4:]),
            ]
        out[lib.__name__] = draws
    assert len(out["buffers"]) == 9
    assert_equal(out["buffers"], out["flashbax"], "mixed draws")


def test_mixer_of_prioritised_flat_buffers_under_jit_and_vmap() -> None:
    """The reference's mixer cannot mix prioritised flat buffers (its list of sample types
    lacks their sample); ours does, under ``jit`` and over a ``vmap`` of keys: indices and
    probabilities concatenated in buffer order, each part equal to its buffer's own draw."""
    a = buffers.make_prioritised_flat_buffer(12, 2, 4, add_batch_size=2, priority_exponent=1.0)
    b = buffers.make_prioritised_flat_buffer(8, 2, 4, add_batch_size=2, priority_exponent=1.0)
    mixer = buffers.make_mixer([a, b], sample_batch_size=6, proportions=[2, 1])
    assert mixer.batch_sizes == (4, 2)
    add_a, add_b = jax.jit(a.add), jax.jit(b.add)
    states = [a.init(CODE), b.init(CODE)]
    for i in range(5):
        batch = {"c": codes(i, 2, 1)["c"][:, 0]}
        states = [add_a(states[0], batch), add_b(states[1], {"c": -batch["c"]})]
    keys = jax.random.split(jax.random.PRNGKey(1), 3)
    mixed = jax.jit(jax.vmap(mixer.sample, in_axes=(None, 0)))(states, keys)
    assert mixed.indices.shape == mixed.probabilities.shape == mixed.valid.shape == (3, 6)
    assert mixed.experience.first["c"].shape == (3, 6)
    sample_a, sample_b = jax.jit(a.sample), jax.jit(b.sample)
    for j in range(3):
        k_a, k_b = jax.random.split(keys[j], 2)
        own_a, own_b = sample_a(states[0], k_a), sample_b(states[1], k_b)
        np.testing.assert_array_equal(mixed.indices[j], np.r_[own_a.indices, own_b.indices[:2]])
        np.testing.assert_array_equal(
            mixed.experience.second["c"][j],
            np.r_[own_a.experience.second["c"], own_b.experience.second["c"][:2]],
        )
    assert np.asarray(mixed.valid).all()
    assert (np.asarray(mixed.experience.first["c"])[:, :4] >= 0).all()  # buffer a's codes
    assert (np.asarray(mixed.experience.first["c"])[:, 4:] <= 0).all()  # buffer b's codes


# --------------------------------------------------------------------------------------------
# States handed to the reference: to_flashbax_state, then Flashbax goes on
# --------------------------------------------------------------------------------------------


def as_reference_prioritised(state: Any, capacity: int) -> Any:
    """The reference's own state object from ``to_flashbax_state``'s dicts."""
    d = buffers.to_flashbax_state(state)
    tree = fbx_tree.SumTreeState(
        nodes=d["sum_tree_state"]["nodes"],
        max_recorded_priority=d["sum_tree_state"]["max_recorded_priority"],
        tree_depth=fbx_tree.get_tree_depth(capacity),
        capacity=capacity,
    )
    return fbx_ptb.PrioritisedTrajectoryBufferState(
        experience=d["experience"],
        current_index=d["current_index"],
        is_full=d["is_full"],
        running_index=d["running_index"],
        sum_tree_state=tree,
    )


def test_an_exact_mode_state_handed_to_flashbax_goes_on_bit_for_bit() -> None:
    """A state of the exact mode after wraps and re-prioritisations, in the reference's shape
    (``to_flashbax_state``), is one the reference continues exactly as ours does: same draws,
    probabilities and sum trees over the following adds and re-prioritisations."""
    ours = buffers.make_prioritised_trajectory_buffer(**PER, reference_exact=True)
    ref = quiet(flashbax.make_prioritised_trajectory_buffer, **PER)
    step = jax.jit(per_step(ours))
    ref_step = jax.jit(per_step(ref))
    state = ours.init(CODE)
    for i in range(7):
        state, _ = step(state, (jnp.int32(i), jax.random.PRNGKey(i)))
    ref_state = as_reference_prioritised(state, fbx_ptb.get_sum_tree_capacity(6, 2, 2))
    assert int(ref_state.running_index) == buffers.timesteps_added(state) == 21
    for i in range(7, 14):
        key = jax.random.PRNGKey(i)
        state, got = step(state, (jnp.int32(i), key))
        ref_state, want = quiet(ref_step, ref_state, (jnp.int32(i), key))
        assert_equal(got, want, f"step {i}")
    np.testing.assert_array_equal(
        np.asarray(state.sum_tree_state.nodes)[1:], ref_state.sum_tree_state.nodes
    )


def test_uniform_and_queue_states_handed_to_flashbax_go_on_alike() -> None:
    """A trajectory state that wrapped, and a queue state with unread data across the end of
    its ring, continue in the reference exactly as in ours (``to_flashbax_state``), and come
    back (``from_flashbax_state``) with the same position and timestep count."""
    traj_args = {
        "add_batch_size": 2,
        "sample_batch_size": 3,
        "sample_sequence_length": 3,
        "period": 2,
        "min_length_time_axis": 3,
        "max_length_time_axis": 5,
    }
    ours = buffers.make_trajectory_buffer(**traj_args)
    ref = quiet(flashbax.make_trajectory_buffer, **traj_args)
    state = ours.init(CODE)
    for i in range(4):
        state = ours.add(state, codes(i, 2, 2))  # 8 timesteps into 5: wrapped
    ref_state = fbx_tb.TrajectoryBufferState(**buffers.to_flashbax_state(state))
    for i in range(4, 7):
        state, ref_state = ours.add(state, codes(i, 2, 3)), ref.add(ref_state, codes(i, 2, 3))
        key = jax.random.PRNGKey(i)
        assert_equal(
            ours.sample(state, key).experience,
            ref.sample(ref_state, key).experience,
            f"trajectory sample {i}",
        )
    back = buffers.from_flashbax_state(ref_state, ours)
    assert buffers.timesteps_added(back) == 7  # 17 added; the fewest consistent: 2 + T
    assert_equal(buffers.gather_all(back), buffers.gather_all(state), "gather_all")

    queue_args = {
        "max_length_time_axis": 5,
        "add_batch_size": 2,
        "add_sequence_length": 2,
        "sample_sequence_length": 3,
    }
    q = buffers.make_trajectory_queue(**queue_args)
    rq = quiet(flashbax.make_trajectory_queue, **queue_args)
    qs = q.add(q.add(q.init(CODE), codes(0, 2, 2)), codes(1, 2, 2))
    qs, _ = q.sample(qs)
    qs = q.add(qs, codes(2, 2, 2))  # unread: slots 3, 4, 0, 1 (across the ring's end)
    rqs = fbx_tq.TrajectoryQueueState(**buffers.to_flashbax_state(qs))
    for i in range(3, 7):
        assert bool(q.can_sample(qs)) == bool(rq.can_sample(rqs))
        if bool(q.can_sample(qs)):
            (qs, got), (rqs, want) = q.sample(qs), rq.sample(rqs)
            assert_equal(got.experience, want.experience, f"queue read {i}")
        assert bool(q.can_add(qs)) == bool(rq.can_add(rqs))
        if bool(q.can_add(qs)):
            qs, rqs = q.add(qs, codes(i, 2, 2)), rq.add(rqs, codes(i, 2, 2))
    assert_equal(
        buffers.gather_all(buffers.from_flashbax_state(rqs)), buffers.gather_all(qs), "queue unread"
    )


# --------------------------------------------------------------------------------------------
# The queue on legal operation sequences, against the reference
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("t_len", "add_len", "read_len"), [(5, 2, 3), (4, 4, 1), (6, 1, 6), (3, 2, 2)]
)
def test_queue_agrees_with_flashbax_wherever_both_may_act(
    t_len: int, add_len: int, read_len: int
) -> None:
    """Random adds and reads (each only when both queues allow it): ``can_add``,
    ``can_sample``, every read and the positions agree with the reference's; ours refuses
    a full add eagerly (the reference would overwrite unread data)."""
    args = {
        "max_length_time_axis": t_len,
        "add_batch_size": 2,
        "add_sequence_length": add_len,
        "sample_sequence_length": read_len,
    }
    ours, ref = buffers.make_trajectory_queue(**args), quiet(flashbax.make_trajectory_queue, **args)
    state, ref_state = ours.init(CODE), ref.init(CODE)
    rng = np.random.default_rng(t_len * 100 + add_len * 10 + read_len)
    for i in range(16):
        if rng.random() < 0.55:
            can = bool(ours.can_add(state))
            assert can == bool(ref.can_add(ref_state)), f"can_add, op {i}"
            if can:
                state, ref_state = (
                    ours.add(state, codes(i, 2, add_len)),
                    ref.add(ref_state, codes(i, 2, add_len)),
                )
            else:
                with pytest.raises(buffers.QueueFullError):
                    ours.add(state, codes(i, 2, add_len))
        else:
            can = bool(ours.can_sample(state))
            assert can == bool(ref.can_sample(ref_state)), f"can_sample, op {i}"
            if can:
                (state, got), (ref_state, want) = ours.sample(state), ref.sample(ref_state)
                assert_equal(got.experience, want.experience, f"read, op {i}")
                assert bool(got.valid.all())
        for field in ("write_index", "read_index", "is_full"):
            assert int(getattr(state, field)) == int(getattr(ref_state, field)), (field, i)


# --------------------------------------------------------------------------------------------
# buffers.sum_tree and buffers.utils on the reference's inputs
# --------------------------------------------------------------------------------------------

EXACT_VALUES = np.array([0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0], np.float32)  # sums stay exact
SETTERS = {"scan": "set_batch_scan", "bincount": "set_batch_bincount"}


@functools.partial(jax.jit, static_argnums=(0, 1))
def tree_update(module: Any, which: str, tree: Any, idx: jax.Array, val: jax.Array) -> Any:
    """One update of ``module``'s sum tree (ours or the reference's) through setter ``which``."""
    if which == "single":
        return module.set_non_batched(tree, idx[0], val[0])
    return getattr(module, SETTERS[which])(tree, idx, val)


@functools.partial(jax.jit, static_argnums=0)
def tree_reads(module: Any, tree: Any, items: jax.Array, queries: jax.Array) -> Any:
    """Every priority, the maximum, the probabilities and one draw per query value."""
    draws = jax.vmap(module.sample, in_axes=(None, None, 0))(tree, None, queries)
    return (
        module.get_batch(tree, items),
        tree.max_recorded_priority,
        module.get_probability(tree, items),
        draws,
        module.get_batch(tree, draws),
    )


@pytest.mark.parametrize("capacity", [1, 3, 6, 8])
def test_sum_tree_module_follows_the_reference_through_random_updates(capacity: int) -> None:
    """Random updates through each setter (leaf-by-leaf scan, level-wide, one at a time) on
    trees of capacities that are and are not powers of two: every priority, the maximum,
    the probabilities and the draws for fixed query values agree with the reference's tree
    (a draw may differ only where the reference's lands on a zero priority)."""
    rng = np.random.default_rng(capacity)
    ours, ref = sum_tree.init(capacity), fbx_tree.init(capacity)
    items = jnp.arange(capacity)
    queries = jnp.linspace(0.0, 0.999, 13, dtype=jnp.float32)
    for op in range(9):
        which = ("scan", "bincount", "single")[op % 3]
        n = 3 if which != "bincount" else min(3, capacity)
        # scan: duplicates allowed, the last value is kept by both; bincount: distinct
        # indices (the reference splits a duplicate's delta by its count, inexactly)
        idx = jnp.asarray(rng.choice(capacity, n, replace=which != "bincount"), jnp.int32)
        val = jnp.asarray(rng.choice(EXACT_VALUES, n))
        ours = tree_update(sum_tree, which, ours, idx, val)
        ref = tree_update(fbx_tree, which, ref, idx, val)
        got, want = (
            tree_reads(sum_tree, ours, items, queries),
            tree_reads(fbx_tree, ref, items, queries),
        )
        assert_equal(got[:2], want[:2], f"priorities and maximum, op {op}")
        if not np.asarray(want[0]).any():
            np.testing.assert_array_equal(got[2], 0.0)  # the reference's: NaN
            continue
        np.testing.assert_allclose(got[2], want[2], rtol=2e-7)
        differ = np.asarray(got[3]) != np.asarray(want[3])
        assert (np.asarray(want[4])[differ] == 0).all(), (got[3], want[3])
        assert (np.asarray(got[4]) > 0).all()


def test_utils_follow_the_reference_s() -> None:
    """``add_dim_to_args`` for every combination of axis, argument range and keyword list,
    and ``get_timestep_count`` (eager, jitted and over a ``vmap`` of states) give what the
    reference's give."""

    def shapes(*args: Any, **kwargs: Any) -> Any:
        return jax.tree.map(jnp.shape, (args, kwargs))

    args = (jnp.zeros((2, 3)), {"a": jnp.zeros((4,)), "b": jnp.zeros(())}, jnp.zeros((5, 1)))
    kwargs = {"k1": jnp.zeros((2, 2)), "k2": (jnp.zeros((3,)),)}

    def outcome(add_dim: Any, *options: Any) -> Any:
        try:
            return add_dim(shapes, *options)(*args, **dict(kwargs))
        except ValueError:  # an axis out of range for a 0-d or 1-d leaf: both refuse
            return "refused"

    for axis in (0, 1, -1):
        for start in (None, 0, 1, -1):
            for end in (None, 0, 2, -1):
                for keys in (None, [], ["k1"]):
                    got = outcome(utils.add_dim_to_args, axis, start, end, keys)
                    want = outcome(fbx_utils.add_dim_to_args, axis, start, end, keys)
                    assert got == want, (axis, start, end, keys)

    ours = buffers.make_trajectory_buffer(2, 2, 2, 1, 2, max_length_time_axis=5)
    ref = quiet(flashbax.make_trajectory_buffer, 2, 2, 2, 1, 2, max_length_time_axis=5)
    state, ref_state = ours.init(CODE), ref.init(CODE)
    for i in range(4):
        state, ref_state = ours.add(state, codes(i, 2, 2)), ref.add(ref_state, codes(i, 2, 2))
        assert_equal(utils.get_timestep_count(state), fbx_utils.get_timestep_count(ref_state), "n")
    assert int(jax.jit(utils.get_timestep_count)(state)) == 10
    stacked = jax.tree.map(lambda *x: jnp.stack(x), ours.init(CODE), state)
    np.testing.assert_array_equal(jax.vmap(utils.get_timestep_count)(stacked), [0, 10])
    assert utils.get_tree_shape_prefix(state.experience, 2) == fbx_utils.get_tree_shape_prefix(
        ref_state.experience, 2
    )


# --------------------------------------------------------------------------------------------
# Containers and dtypes through every layout
# --------------------------------------------------------------------------------------------


class Obs(NamedTuple):
    pixels: Any
    flag: Any


@chex.dataclass(frozen=True)
class Extras:
    mask: Any
    small: Any


def odd_timestep() -> Any:
    """A tuple holding a NamedTuple, a list and a chex dataclass; bool, uint8, int8, float16
    and float32 leaves, 0-d and not."""
    return (
        Obs(pixels=jnp.zeros((2, 2), jnp.uint8), flag=jnp.bool_(False)),
        [jnp.int8(0), jnp.zeros((), jnp.float16)],
        Extras(mask=jnp.zeros((3,), bool), small=jnp.float32(0)),
    )


def odd_batch(code: int, prefix: tuple[int, ...]) -> Any:
    """Leaves with leading axes ``prefix`` whose values all derive from a running code."""
    n = int(np.prod(prefix, dtype=np.int64))
    c = (code + np.arange(n)).reshape(prefix)
    return (
        Obs(
            pixels=jnp.asarray((c[..., None, None] + np.arange(4).reshape(2, 2)) % 256, jnp.uint8),
            flag=jnp.asarray(c % 2 == 1),
        ),
        [jnp.asarray(c % 100, jnp.int8), jnp.asarray(c / 4, jnp.float16)],
        Extras(
            mask=jnp.asarray((c[..., None] + np.arange(3)) % 3 == 0),
            small=jnp.asarray(-c, jnp.float32),
        ),
    )


LAYOUTS = {
    "flat/single": (
        "make_flat_buffer",
        {"max_length": 4, "min_length": 2, "sample_batch_size": 3},
        (),
    ),
    "flat/sequences": (
        "make_flat_buffer",
        {
            "max_length": 8,
            "min_length": 1,
            "sample_batch_size": 3,
            "add_sequences": True,
            "add_batch_size": 2,
        },
        (2, 3),
    ),
    "item/batches-sequences": (
        "make_item_buffer",
        {
            "max_length": 7,
            "min_length": 1,
            "sample_batch_size": 4,
            "add_sequences": True,
            "add_batches": True,
        },
        (2, 2),
    ),
    "trajectory": (
        "make_trajectory_buffer",
        {
            "add_batch_size": 2,
            "sample_batch_size": 3,
            "sample_sequence_length": 2,
            "period": 1,
            "min_length_time_axis": 2,
            "max_length_time_axis": 4,
        },
        (2, 3),
    ),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_nested_containers_and_narrow_dtypes_sample_as_the_reference_s(layout: str) -> None:
    """Timesteps of nested containers (tuple, NamedTuple, list, chex dataclass) with bool,
    uint8, int8, float16 and 0-d leaves, added in each layout until the ring wraps: the
    samples have the reference's structure, shapes, dtypes and values."""
    factory, args, prefix = LAYOUTS[layout]
    ours, ref = getattr(buffers, factory)(**args), quiet(getattr(flashbax, factory), **args)
    state, ref_state = ours.init(odd_timestep()), ref.init(odd_timestep())
    assert jax.tree.structure(state.experience) == jax.tree.structure(ref_state.experience)
    for i in range(5):
        batch = odd_batch(10 * i, prefix)
        state, ref_state = ours.add(state, batch), ref.add(ref_state, batch)
    key = jax.random.PRNGKey(2)
    got, want = ours.sample(state, key).experience, ref.sample(ref_state, key).experience
    if hasattr(want, "first"):  # each library's own ExperiencePair class
        got, want = (got.first, got.second), (want.first, want.second)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    assert_equal(got, want, layout)


# --------------------------------------------------------------------------------------------
# Bugs found at the joints (xfail, strict: each passes once its bug is fixed)
# --------------------------------------------------------------------------------------------


def test_module_level_sample_of_a_too_short_state_is_not_silently_valid() -> None:
    """``trajectory_buffer.sample(state, key, batch_size, sequence_length, period)``, the
    reference's function and arguments, on a row holding 1 timestep with sequences of 3:
    the reference returns zeros silently; ours must raise ``NotReadyError`` eagerly (or at
    least mark the sample invalid), as every buffer's ``sample`` does."""
    state = trajectory_buffer.init(CODE, 1, 8)
    state = trajectory_buffer.add(state, {"c": jnp.full((1, 1), 7, jnp.int32)})
    assert not bool(trajectory_buffer.can_sample(state, 3))
    try:
        sample = trajectory_buffer.sample(state, jax.random.PRNGKey(0), 4, 3, 1)
    except buffers.NotReadyError:
        return
    assert not np.asarray(sample.valid).any(), np.asarray(sample.experience["c"]).tolist()


def test_module_level_set_priorities_with_the_buffer_s_settings_revives_no_window() -> None:
    """``ptb.set_priorities(state, indices, priorities, priority_exponent, device)`` (the
    reference's signature) assumes windows of 1 (documented); given the buffer's sequence
    length, as the buffer's own ``set_priorities`` binds it, items 4 and 5 of a full row of 6
    with windows of 3 (both cross the write position: slot 5 is the newest timestep, slot 0
    the oldest) keep priority 0 and are never drawn."""
    buf = buffers.make_prioritised_trajectory_buffer(
        add_batch_size=1,
        sample_batch_size=4,
        sample_sequence_length=3,
        period=1,
        min_length_time_axis=3,
        max_length_time_axis=6,
        priority_exponent=1.0,
    )
    state = buf.add(buf.init(CODE), codes(0, 1, 6))
    bound = buf.set_priorities(state, jnp.array([4, 5]), jnp.array([50.0, 50.0]))
    np.testing.assert_array_equal(bound.sum_tree_state.nodes[8:14], [1, 1, 1, 1, 0, 0])
    state = ptb.set_priorities(
        state, jnp.array([4, 5]), jnp.array([50.0, 50.0]), 1.0, "cpu", sample_sequence_length=3
    )
    np.testing.assert_array_equal(state.sum_tree_state.nodes, bound.sum_tree_state.nodes)
    drawn = buf.sample(state, jax.random.PRNGKey(0))
    windows = np.asarray(drawn.experience["c"])[np.asarray(drawn.valid)]
    assert (np.diff(windows, axis=-1) > 0).all(), windows.tolist()


@jax.jit
def revived_reference_state(first_code: jax.Array) -> Any:
    """A reference state whose item 0 was revived by ``set_priorities`` from a stale index:
    after the row of 4 wrapped by one timestep, item 0's window (slots 0, 1) runs from the
    newest timestep into the oldest."""
    ref = quiet(
        flashbax.make_prioritised_trajectory_buffer,
        add_batch_size=1,
        sample_batch_size=4,
        sample_sequence_length=2,
        period=1,
        min_length_time_axis=2,
        max_length_time_axis=4,
        priority_exponent=1.0,
    )
    state = ref.init(CODE)
    state = ref.add(state, {"c": (first_code + jnp.arange(4, dtype=jnp.int32))[None]})
    state = ref.add(state, {"c": jnp.full((1, 1), first_code + 4, jnp.int32)})
    return ref.set_priorities(state, jnp.array([0]), jnp.array([5.0]))


def test_from_flashbax_state_of_stacked_states_drops_revived_windows_too() -> None:
    """The same reference state, once alone and once stacked for two learners (``vmap``, as a
    pmapped run saves it): converted with the buffer, both must hold priority 0 for the
    revived window, so no learner draws it."""
    ours = buffers.make_prioritised_trajectory_buffer(
        add_batch_size=1,
        sample_batch_size=4,
        sample_sequence_length=2,
        period=1,
        min_length_time_axis=2,
        max_length_time_axis=4,
        priority_exponent=1.0,
    )
    single = buffers.from_flashbax_state(revived_reference_state(jnp.int32(0)), ours)
    np.testing.assert_array_equal(single.sum_tree_state.nodes[4:], [0, 1, 1, 1])
    members = [revived_reference_state(jnp.int32(c)) for c in (0, 100)]
    stacked_ref = jax.tree.map(lambda *x: jnp.stack(x), *members)  # as a pmapped run saves it
    stacked = buffers.from_flashbax_state(stacked_ref, ours)
    drawn = jax.vmap(ours.sample)(stacked, jax.random.split(jax.random.PRNGKey(0), 2))
    windows = np.asarray(drawn.experience["c"])[np.asarray(drawn.valid)]
    assert (np.diff(windows, axis=-1) > 0).all(), windows.tolist()
    np.testing.assert_array_equal(stacked.sum_tree_state.nodes[:, 4:], [[0, 1, 1, 1]] * 2)


def test_priorities_whose_sum_overflows_are_refused_or_sampled() -> None:
    """Two priorities of 3e38 (finite, accepted one by one) with ``priority_exponent=1``:
    their sum is not a float32. Either ``set_priorities`` refuses them (``PriorityError``),
    or the buffer stays sampleable as ``can_sample`` promises: valid draws with positive,
    finite probabilities."""
    buf = buffers.make_prioritised_item_buffer(
        max_length=4, min_length=1, sample_batch_size=4, add_batches=True, priority_exponent=1.0
    )
    state = buf.add(buf.init(CODE), {"c": jnp.arange(4, dtype=jnp.int32)})
    try:
        state = buf.set_priorities(
            state, jnp.arange(4), jnp.array([3e38, 3e38, 1.0, 1.0], jnp.float32)
        )
    except buffers.PriorityError:
        return
    assert bool(buf.can_sample(state))
    drawn = buf.sample(state, jax.random.PRNGKey(0))
    probabilities = np.asarray(drawn.probabilities)
    assert np.asarray(drawn.valid).all(), (np.asarray(drawn.indices), probabilities)
    assert (np.isfinite(probabilities) & (probabilities > 0)).all()
