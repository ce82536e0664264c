"""More joints of the buffers: features that each work alone, combined.

* The episode buffer's ``from_state`` (restarts, ``start_known``) meeting ``pad=True`` and
  the adds that follow it, over a wrap, against a brute-force model of the valid windows;
  the mixer over episode buffers of different batch sizes and time axes under ``jit``.
* Mixed precision meeting the buffers' dtype checks: ``bfloat16`` priorities given to
  ``set_priorities`` (as Flashbax 0.1.3 takes them), a ``bfloat16`` episode-end leaf, a
  Python number that overflows a ``float16`` leaf.
* Prioritised replay where indices outlive the windows they were drawn from: a stale index
  after the ring wrapped past it and completed a new window at the same slot.
* States converted from Flashbax's (``from_flashbax_state``) meeting ``jit``'s cache (no
  retrace on the second call, DESIGN.md buffer invariant 4).
* The mixer meeting a buffer kind it cannot mix (the trajectory queue).

Data encode where they belong (``t = 1000 * row + step``), so every sampled window is
checked against a trivially correct model. Bugs are pinned with strict ``xfail`` tests.
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers

flashbax = pytest.importorskip("flashbax")


def quiet(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call the reference without its advice warnings (period, min length)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# --------------------------------------------------------------------------------------------
# The episode buffer: from_state, restarts and pad, then adds
# --------------------------------------------------------------------------------------------

EP_T, EP_L = 6, 3
EP_EXAMPLE = {"t": jnp.int32(0), "done": jnp.bool_(False)}
EP_SAMPLES = 128  # draws per check: every valid window of these tiny rings shows up


def episode_batch(rows: int, first: int, done: np.ndarray) -> dict[str, jax.Array]:
    """Steps ``first .. first + n`` of every row: ``t = 1000 * row + step``."""
    n = done.shape[1]
    t = np.arange(rows)[:, None] * 1000 + np.arange(first, first + n)[None, :]
    return {"t": jnp.asarray(t, jnp.int32), "done": jnp.asarray(done)}


def model_windows(
    done: np.ndarray, restarts: set[int], first_known: bool, pad: bool
) -> set[tuple[int, int, int]]:
    """``(row, first step, last step)`` of every window the buffer may sample.

    ``done`` holds every step of the history the buffer was given (the state's stored
    steps, then the adds), a restart starts an episode without ending the one before, and
    the ring holds the last ``EP_T`` steps. A full window lies in one episode; with ``pad``,
    a whole episode shorter than ``EP_L`` that ended (a done flag) and whose start is known
    and still stored is one window too."""
    rows, n = done.shape
    first_held = max(0, n - EP_T)
    out = set()
    for r in range(rows):
        episode = np.zeros(n, int)
        for k in range(1, n):
            episode[k] = episode[k - 1] + (done[r, k - 1] or k in restarts)
        for end in range(first_held, n):
            start = end - (EP_L - 1)
            if start >= first_held and (episode[start : end + 1] == episode[end]).all():
                out.add((r, start, end))
            elif pad and done[r, end]:
                begin = end
                while begin > 0 and episode[begin - 1] == episode[end]:
                    begin -= 1
                if begin >= first_held and (begin > 0 or first_known):
                    out.add((r, begin, end))
    return out


def sampled_windows(sample: Any) -> set[tuple[int, int, int]]:
    """``(row, first step, last step)`` of every sampled window, after checking that its
    unmasked steps are consecutive steps of one row and its padding is zeros."""
    t = np.asarray(sample.experience["t"])
    mask = np.asarray(sample.mask)
    assert np.asarray(sample.valid).all()
    out = set()
    for window, keep in zip(t, mask, strict=True):
        n = int(keep.sum())
        assert keep[:n].all(), keep  # the padding comes last
        assert (window[n:] == 0).all(), window  # and holds zeros
        row, steps = np.divmod(window[:n], 1000)
        assert (row == row[0]).all(), window  # one row
        assert (np.diff(steps) == 1).all(), window  # consecutive steps
        out.add((int(row[0]), int(steps[0]), int(steps[-1])))
    return out


EPISODE_BUFFERS = {
    pad: buffers.make_episode_buffer(2, EP_SAMPLES, EP_L, 1, max_length_time_axis=EP_T, pad=pad)
    for pad in (False, True)
}
EP_FROM_STATE = {pad: jax.jit(b.from_state) for pad, b in EPISODE_BUFFERS.items()}
EP_ADD = {pad: jax.jit(b.add) for pad, b in EPISODE_BUFFERS.items()}
EP_SAMPLE = {pad: jax.jit(b.sample) for pad, b in EPISODE_BUFFERS.items()}
RING = buffers.make_trajectory_buffer(2, 1, 1, 1, 1, max_length_time_axis=EP_T)


def ring_state(done: np.ndarray) -> Any:
    """A trajectory state that was given the steps of ``done`` (wrapping if more than T)."""
    state = RING.init(EP_EXAMPLE)
    for first in range(0, done.shape[1], EP_T):
        state = RING.add(state, episode_batch(2, first, done[:, first : first + EP_T]))
    return state


@pytest.mark.parametrize("pad", [False, True])
def test_from_state_then_adds_over_a_wrap_sample_exactly_the_model_s_windows(pad: bool) -> None:
    """A ring that wrapped (its first episode's start overwritten: ``start_known`` false by
    itself), and one that did not, turned into episode states with ``from_state``, then
    given adds that wrap the ring again: at every stage the sampled windows are exactly the
    model's (no window across an episode end or the write position, padded episodes only
    where they ended and their start is held)."""
    rng = np.random.default_rng(3)
    for n0 in (4, 9):  # not wrapped / wrapped
        history = rng.random((2, n0)) < 0.3
        state = EP_FROM_STATE[pad](ring_state(history))
        first_known = n0 <= EP_T
        held = history[:, max(0, n0 - EP_T) :]
        offset = max(0, n0 - EP_T)
        for i, n in enumerate((0, 2, 3, 5)):
            if n:
                done = rng.random((2, n)) < 0.3
                state = EP_ADD[pad](state, episode_batch(2, offset + held.shape[1], done))
                held = np.concatenate([held, done], axis=1)
            want = model_windows(held, set(), first_known, pad)
            got = sampled_windows(EP_SAMPLE[pad](state, jax.random.PRNGKey(i)))
            got = {(r, s - offset, e - offset) for r, s, e in got}
            assert got == want, (n0, i, sorted(got ^ want))


def test_steps_before_a_restart_stay_unsampled_as_an_episode_after_adds() -> None:
    """``from_state(state, restarts=[2])`` on steps without any done flag: the steps before
    the restart end no episode (documented: with ``pad=True`` they are not sampled as a
    whole one). No episode ever ended, so no window may be padded, before or after the
    buffer goes on with an add."""
    no_done = np.zeros((2, 5), bool)
    state = EP_FROM_STATE[True](ring_state(no_done), restarts=[2])
    before = sampled_windows(EP_SAMPLE[True](state, jax.random.PRNGKey(0)))
    assert before == {(r, 2, 4) for r in range(2)}  # the only whole window
    state = EP_ADD[True](state, episode_batch(2, 5, np.zeros((2, 1), bool)))
    after = EP_SAMPLE[True](state, jax.random.PRNGKey(1))
    padded = ~np.asarray(after.mask).all(axis=1)
    assert not padded.any(), np.asarray(after.experience["t"])[padded].tolist()
    assert sampled_windows(after) == {(r, s, s + 2) for r in range(2) for s in (2, 3)}


def test_a_mixer_of_episode_buffers_of_different_sizes_keeps_each_buffer_s_windows() -> None:
    """A mixer over two episode buffers with ``pad=True`` (two rows of 6 with episodes of
    every length, one row of 6 with one long episode; shares 3 and 2), in one jitted step:
    each share holds its own buffer's windows (the model's), masks and validity come along
    (padding only after a short episode's end), and no window crosses an episode end."""
    one = EPISODE_BUFFERS[True]
    two = buffers.make_episode_buffer(1, 3, EP_L, EP_L, max_length_time_axis=EP_T, pad=True)
    mixer = buffers.make_mixer([one, two], sample_batch_size=5, proportions=[3, 2])
    assert mixer.batch_sizes == (3, 2)
    done_one = np.array([[1, 0, 1, 0, 0, 1, 0], [0, 0, 0, 1, 1, 0, 0]], bool)
    done_two = np.zeros((1, 5), bool)

    @jax.jit
    def step(key: jax.Array) -> Any:
        s_one = one.add(one.init(EP_EXAMPLE), episode_batch(2, 0, done_one[:, :5]))
        s_one = one.add(s_one, episode_batch(2, 5, done_one[:, 5:]))  # wraps the ring
        s_two = two.add(two.init(EP_EXAMPLE), episode_batch(1, 0, done_two))
        return jax.vmap(mixer.sample, in_axes=(None, 0))([s_one, s_two], key)

    mixed = step(jax.random.split(jax.random.PRNGKey(5), 16))
    want_one = model_windows(done_one, set(), True, True)
    want_two = {(0, s, s + 2) for s in range(3)}
    seen_one: set[tuple[int, int, int]] = set()
    for draw in range(16):
        part = jax.tree.map(lambda x, d=draw: x[d], mixed)
        first = jax.tree.map(lambda x: x[:3], part)
        second = jax.tree.map(lambda x: x[3:], part)
        got_one, got_two = sampled_windows(first), sampled_windows(second)
        assert got_one <= want_one, sorted(got_one - want_one)
        assert got_two <= want_two, sorted(got_two - want_two)
        seen_one |= got_one
        lengths = np.asarray(part.mask).sum(axis=1)
        for flags, n in zip(np.asarray(part.experience["done"]), lengths, strict=True):
            assert not flags[: n - 1].any(), flags  # an episode end is only a last step
    assert any(e - s + 1 < EP_L for _, s, e in seen_one)  # padded episodes were drawn


# --------------------------------------------------------------------------------------------
# Mixed precision meeting the dtype checks
# --------------------------------------------------------------------------------------------

PER_FLAT = {
    "max_length": 8,
    "min_length": 1,
    "sample_batch_size": 4,
    "add_batch_size": 2,
    "priority_exponent": 1.0,
}


def per_flat_leaves(lib: Any, priorities: jax.Array) -> np.ndarray:
    """The priorities of a prioritised flat buffer (``lib``'s) after three adds and a
    ``set_priorities`` of what a fixed key draws, in one jitted step."""
    buf = quiet(lib.make_prioritised_flat_buffer, **PER_FLAT)

    @jax.jit
    def step(priorities: jax.Array) -> jax.Array:
        state = buf.init({"x": jnp.zeros((), jnp.bfloat16)})
        for i in range(3):
            state = buf.add(state, {"x": jnp.asarray([i, 1000 + i], jnp.bfloat16)})
        drawn = buf.sample(state, jax.random.PRNGKey(0))
        return buf.set_priorities(state, drawn.indices, priorities).sum_tree_state.nodes

    nodes = np.asarray(quiet(step, priorities))
    return nodes[-((nodes.size + 1) // 2) :]  # the leaves, in either layout


def test_bfloat16_priorities_are_set_as_flashbax_sets_them() -> None:
    """TD errors of a bfloat16 network, ``|td| + eps`` in bfloat16, given to
    ``set_priorities`` under ``jit``: stored as the same numbers in float32 are, and as
    Flashbax stores them (the values are exact in bfloat16)."""
    values = jnp.array([0.5, 1.5, 2.5, 3.5])
    as_float32 = per_flat_leaves(buffers, values)
    assert sorted(set(as_float32.tolist()) - {0.0, 1.0}) != []  # some were set
    got = per_flat_leaves(buffers, values.astype(jnp.bfloat16))
    np.testing.assert_array_equal(got, as_float32)
    np.testing.assert_array_equal(got, per_flat_leaves(flashbax, values.astype(jnp.bfloat16)))


def test_a_bfloat16_done_leaf_ends_episodes_as_a_bool_one_does() -> None:
    """The message promises numeric flags (nonzero = episode end); a bfloat16 ``done`` (as
    mixed-precision code casts a whole timestep) must end episodes where the bool one
    would: the sampled windows are the model's."""
    done = np.array([[0, 1, 0, 0, 0, 1, 0], [0, 0, 1, 1, 0, 0, 0]], bool)
    buf = EPISODE_BUFFERS[True]

    @jax.jit
    def step(key: jax.Array) -> Any:
        state = buf.init({"t": jnp.int32(0), "done": jnp.zeros((), jnp.bfloat16)})
        for first, last in ((0, 4), (4, 7)):
            batch = episode_batch(2, first, done[:, first:last])
            batch["done"] = batch["done"].astype(jnp.bfloat16)
            state = buf.add(state, batch)
        return buf.sample(state, key)

    drawn = step(jax.random.PRNGKey(0))
    assert sampled_windows(drawn) == model_windows(done, set(), True, True)


def test_a_python_number_that_overflows_a_float16_leaf_is_refused() -> None:
    """``add`` refuses a Python number that a leaf cannot hold (docs: 2.5 into int32, 300
    into uint8 are BatchStructureError; nothing is converted silently); 70000 does not fit
    float16 (largest 65504): it must be refused, not stored as ``inf``."""
    buf = buffers.make_flat_buffer(max_length=4, min_length=1, sample_batch_size=2)
    state = buf.init({"h": jnp.float16(0), "u": jnp.uint8(0)})
    with pytest.raises(buffers.BatchStructureError, match="experience/u"):
        buf.add(state, {"h": 1.0, "u": 300})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's overflow in the cast
        with pytest.raises(buffers.BatchStructureError, match="experience/h"):
            buf.add(state, {"h": 70000, "u": 1})  # today: stored as inf


# --------------------------------------------------------------------------------------------
# Prioritised replay: indices that outlive their windows
# --------------------------------------------------------------------------------------------


def test_an_index_names_a_slot_partly_overwritten_windows_are_ignored() -> None:
    """docs/concepts.md: "`set_priorities` ignores indices whose window is not whole in the
    buffer now (partly overwritten since it was sampled ...). An index whose slot has since
    been filled by a new whole window sets that window's priority, as in Flashbax". Item 0
    (window of steps 0, 1) is drawn; one more step overwrites step 0 (the window is broken:
    ignored); two more make slot 0 the start of the whole window of steps 4, 5, which the
    late update then sets, as Flashbax's does."""
    kwargs: dict[str, Any] = {
        "add_batch_size": 1,
        "sample_batch_size": 4,
        "sample_sequence_length": 2,
        "period": 1,
        "min_length_time_axis": 2,
        "max_length_time_axis": 4,
        "priority_exponent": 1.0,
    }
    buf = buffers.make_prioritised_trajectory_buffer(**kwargs)
    ref = flashbax.make_prioritised_trajectory_buffer(**kwargs)
    add = jax.jit(buf.add)
    state = add(buf.init({"t": jnp.int32(0)}), {"t": jnp.arange(4, dtype=jnp.int32)[None]})
    drawn = buf.sample(state, jax.random.PRNGKey(0))
    stale = np.asarray(drawn.indices)
    assert 0 in stale.tolist()
    np.testing.assert_array_equal(np.asarray(drawn.experience["t"])[stale == 0], [[0, 1]] * 2)
    only_0 = jnp.zeros(1, jnp.int32)
    state = add(state, {"t": jnp.array([[4]], jnp.int32)})  # step 0 overwritten: (4, 1) broken
    broken = float(state.sum_tree_state.nodes[4])
    after = jax.jit(buf.set_priorities)(state, only_0, jnp.full(1, 50.0))
    assert float(after.sum_tree_state.nodes[4]) == broken == 0.0  # ignored, never drawn
    for t in (5, 6):
        state = add(state, {"t": jnp.array([[t]], jnp.int32)})
    assert float(state.sum_tree_state.nodes[4]) == 1.0  # (4, 5): a new item, at the maximum
    after = jax.jit(buf.set_priorities)(state, only_0, jnp.full(1, 50.0))
    assert float(after.sum_tree_state.nodes[4]) == 50.0  # the slot's new window: set
    # Flashbax, given the same adds, sets the slot's new window too
    ref_state = ref.init({"t": jnp.int32(0)})
    for block in ([0, 1, 2, 3], [4], [5], [6]):
        ref_state = ref.add(ref_state, {"t": jnp.array([block], jnp.int32)})
    ref_after = ref.set_priorities(ref_state, only_0, jnp.full(1, 50.0))
    ref_leaf = flashbax.buffers.sum_tree.get(ref_after.sum_tree_state, 0)
    np.testing.assert_allclose(float(ref_leaf), float(after.sum_tree_state.nodes[4]), rtol=1e-6)


# --------------------------------------------------------------------------------------------
# States converted from Flashbax's, under jit
# --------------------------------------------------------------------------------------------


def test_a_state_from_flashbax_does_not_retrace_the_jitted_add() -> None:
    """A live Flashbax state (a run migrating in process) converted with
    ``from_flashbax_state``, then a jitted add in a loop: one trace, as for a state of our
    own (DESIGN.md buffer invariant 4: no retrace on the second call)."""
    ours = buffers.make_flat_buffer(max_length=8, min_length=1, sample_batch_size=2)
    ref = flashbax.make_flat_buffer(max_length=8, min_length=1, sample_batch_size=2)

    def traced_adds(state: Any) -> int:
        traces: list[int] = []

        @jax.jit
        def add(state: Any, batch: Any) -> Any:
            traces.append(1)
            return ours.add(state, batch)

        before = buffers.timesteps_added(state)
        for i in range(3):
            state = add(state, {"x": jnp.float32(i)})
        assert buffers.timesteps_added(state) == before + 3
        return len(traces)

    assert traced_adds(ours.init({"x": jnp.float32(0)})) == 1  # a state of our own
    ref_state = ref.add(ref.init({"x": jnp.float32(0)}), {"x": jnp.float32(1)})
    converted = buffers.from_flashbax_state(ref_state, ours)
    assert traced_adds(converted) == 1, "the jitted add traced again on its second call"


# --------------------------------------------------------------------------------------------
# The mixer and a kind it cannot mix
# --------------------------------------------------------------------------------------------


def test_a_mixer_of_trajectory_queues_is_refused_with_a_typed_error() -> None:
    """A queue's ``sample(state)`` takes no key and returns ``(state, sample)``: it cannot
    be mixed. The refusal must be a ``buffers.BufferError`` (at ``make_mixer``, or at the
    latest at ``sample``), not a ``TypeError`` from inside the mixer."""
    queue = buffers.make_trajectory_queue(4, 1, 1, 1)
    state = queue.add(queue.init({"x": jnp.int32(0)}), {"x": jnp.ones((1, 1), jnp.int32)})

    def mix() -> Any:
        mixer = buffers.make_mixer([queue, queue], 2, [1, 1])
        return mixer.sample([state, state], jax.random.PRNGKey(0))

    with pytest.raises(buffers.BufferError):
        mix()
