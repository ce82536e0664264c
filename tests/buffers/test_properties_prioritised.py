"""Property tests of the prioritised trajectory, flat and item buffers against a numpy model.

Every timestep carries a unique code ``row * ROW_STRIDE + t`` (``t``: its index in its row over
everything ever added) in every leaf of a NamedTuple holding a dict, so a sample names the
item it came from. The model keeps, per row, how many timesteps were added and, per valid item
(a window of ``L`` stored, consecutive timesteps starting at ``t`` with ``t % period == 0``), its
stored priority ``p ** alpha``. Items are keyed by ``(row, t)``, not by their physical slot, so a
slot that is overwritten starts a new item.

Checked after random adds and random ``set_priorities``: every sum-tree leaf against the model
(positive exactly for valid items, stale indices ignored), the tree's internal sums, sampled
``probabilities`` against ``p^alpha / sum``, and that samples come from their item's window.
A statistical test with fixed keys compares sampling frequencies against ``p^alpha``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np
import pytest
from _stats import chi2_bound, chi2_statistic
from hypothesis import given, settings
from hypothesis import strategies as st

import buffers

ROW_STRIDE = 100_000
PRIORITIES_PER_CALL = 4  # every set_priorities call has this many indices (one compiled shape)


class Transition(NamedTuple):
    obs: Any
    extras: Any


def transition_of(codes: Any) -> Transition:
    """The test structure for ``codes`` (any shape): every leaf is an exact function of them."""
    codes = np.asarray(codes, np.int64)
    return Transition(
        obs=np.stack([codes, -codes], axis=-1).astype(np.float32),
        extras={"id": codes.astype(np.int32), "half": (codes * 0.5).astype(np.float32)},
    )


EXAMPLE = transition_of(0)


def decode(tree: Any) -> np.ndarray:
    """The codes of a sampled structure, after checking every leaf against them."""
    codes = np.asarray(tree.extras["id"]).astype(np.int64)
    expected = transition_of(codes)
    assert jax.tree.structure(tree) == jax.tree.structure(expected)
    for got, want in zip(jax.tree.leaves(tree), jax.tree.leaves(expected), strict=True):
        assert np.asarray(got).dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got), want)
    return codes


# --------------------------------------------------------------------------------------------
# The reference model
# --------------------------------------------------------------------------------------------


class PrioritisedModel:
    """Rows of a ring of ``t_len`` timesteps plus the priority of every valid item."""

    def __init__(self, rows: int, t_len: int, seq_len: int, period: int, alpha: float) -> None:
        self.rows, self.t_len, self.seq_len, self.period = rows, t_len, seq_len, period
        self.alpha = alpha
        self.items_per_row = t_len // period
        self.added = 0
        self.priority: dict[tuple[int, int], float] = {}  # (row, t) -> p ** alpha
        self.max_recorded = 1.0

    @property
    def oldest(self) -> int:
        return max(0, self.added - self.t_len)

    def valid_starts(self) -> list[int]:
        """Starts ``t`` of the valid items of every row, oldest first."""
        first = -(-self.oldest // self.period) * self.period
        return list(range(first, self.added - self.seq_len + 1, self.period))

    def valid_mask(self) -> np.ndarray:
        """Per item slot: whether it holds a valid item (its window is stored and complete)."""
        mask = np.zeros(self.rows * self.items_per_row, bool)
        for row in range(self.rows):
            for t in self.valid_starts():
                mask[self.index(row, t)] = True
        return mask

    def index(self, row: int, t: int) -> int:
        return row * self.items_per_row + (t % self.t_len) // self.period

    def add(self, length: int) -> np.ndarray:
        """Append ``length`` timesteps to every row; items that become valid get the largest
        priority recorded so far, items that stop being valid are dropped."""
        before = set(self.valid_starts())
        times = np.arange(self.added, self.added + length)
        self.added += length
        after = set(self.valid_starts())
        for row in range(self.rows):
            for t in before - after:
                del self.priority[row, t]
            for t in after - before:
                self.priority[row, t] = self.max_recorded
        return np.arange(self.rows)[:, None] * ROW_STRIDE + times[None, :]

    def item_at(self, index: int) -> tuple[int, int] | None:
        """``(row, t)`` of the valid item whose slot is ``index``, or None."""
        row, slot = divmod(index, self.items_per_row)
        latest = self.added - 1 - (self.added - 1 - slot * self.period) % self.t_len
        return (row, latest) if (row, latest) in self.priority else None

    def set_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        for index, p in zip(indices.tolist(), priorities.tolist(), strict=True):
            item = self.item_at(index)
            if item is None:  # stale or never valid: ignored
                continue
            value = 0.0 if p == 0 else float(np.float32(p) ** np.float32(self.alpha))
            self.priority[item] = value
            self.max_recorded = max(self.max_recorded, value)

    def leaves(self) -> np.ndarray:
        """Expected sum-tree leaves ``[rows * items_per_row]``."""
        out = np.zeros(self.rows * self.items_per_row)
        for (row, t), value in self.priority.items():
            out[self.index(row, t)] = value
        return out

    def check_tree(self, state: Any) -> None:
        tree = state.sum_tree_state
        nodes = np.asarray(tree.nodes)
        n_leaves = nodes.size // 2
        leaves = nodes[n_leaves:]
        expected = self.leaves()
        capacity = expected.size
        np.testing.assert_allclose(leaves[:capacity], expected, rtol=1e-5)
        np.testing.assert_array_equal(leaves[:capacity] > 0, expected > 0)
        assert (leaves[capacity:] == 0).all()  # padding up to a power of two
        # every parent is exactly the float32 sum of its two children
        parents = np.arange(1, n_leaves)
        np.testing.assert_array_equal(nodes[parents], nodes[2 * parents] + nodes[2 * parents + 1])
        np.testing.assert_allclose(float(tree.max_recorded_priority), self.max_recorded, rtol=1e-6)

    def check_ring(self, state: Any) -> None:
        assert int(state.current_index) == self.added % self.t_len
        assert bool(state.is_full) == (self.added >= self.t_len)
        assert buffers.timesteps_added(state) == self.added
        assert int(state.running_index) == self.added
        stored = np.asarray(state.experience.extras["id"])
        for t in range(self.oldest, self.added):
            np.testing.assert_array_equal(
                stored[:, t % self.t_len], np.arange(self.rows) * ROW_STRIDE + t
            )

    def check_sample(self, windows: np.ndarray, sample: Any) -> None:
        """Sampled items are valid with positive priority, their probabilities are
        ``p^alpha / sum``, and each sampled window is its item's window."""
        indices = np.asarray(sample.indices)
        expected = self.leaves()
        total = expected.sum()
        if total == 0:  # ready but no valid item: nothing can be drawn
            assert not np.asarray(sample.valid).any()
            assert (np.asarray(sample.probabilities) == 0).all()
            return
        assert np.asarray(sample.valid).all()
        assert (expected[indices] > 0).all(), (indices, expected)
        np.testing.assert_allclose(
            np.asarray(sample.probabilities), expected[indices] / total, rtol=1e-5
        )
        rows, times = np.divmod(windows, ROW_STRIDE)
        for index, row, time in zip(indices.tolist(), rows, times, strict=True):
            item = self.item_at(index)
            assert item is not None
            np.testing.assert_array_equal(row, item[0])
            np.testing.assert_array_equal(time, item[1] + np.arange(self.seq_len))


# --------------------------------------------------------------------------------------------
# Buffers under test
# --------------------------------------------------------------------------------------------


def trajectory_windows(sample: Any) -> np.ndarray:
    return decode(sample.experience)


def pair_windows(sample: Any) -> np.ndarray:
    """Flat buffer: ``(first, second)`` are the whole window of two timesteps."""
    pair = sample.experience
    return np.stack([decode(pair.first), decode(pair.second)], axis=1)


def item_windows(sample: Any) -> np.ndarray:
    return decode(sample.experience)[:, None]


class Case(NamedTuple):
    make: Callable[[], Any]
    rows: int
    t_len: int
    seq_len: int
    period: int
    alpha: float
    ready_at: int  # timesteps per row before can_sample
    windows: Callable[[Any], np.ndarray]
    to_layout: Callable[[np.ndarray], np.ndarray]  # [rows, L] codes -> what add expects
    add_lengths: tuple[int, ...]

    def model(self) -> PrioritisedModel:
        return PrioritisedModel(self.rows, self.t_len, self.seq_len, self.period, self.alpha)


CASES = {
    "trajectory-B2-T8-L3-p2": Case(
        lambda: buffers.make_prioritised_trajectory_buffer(
            add_batch_size=2,
            sample_batch_size=8,
            sample_sequence_length=3,
            period=2,
            min_length_time_axis=3,
            max_length_time_axis=8,
            priority_exponent=0.6,
        ),
        2, 8, 3, 2, 0.6, 3, trajectory_windows, lambda c: c, (1, 3, 8),
    ),
    "flat-B2-T8": Case(
        lambda: buffers.make_prioritised_flat_buffer(
            16, 2, 8, add_sequences=True, add_batch_size=2, priority_exponent=1.0
        ),
        2, 8, 2, 1, 1.0, 2, pair_windows, lambda c: c, (1, 3, 8),
    ),
    "item-8": Case(
        lambda: buffers.make_prioritised_item_buffer(
            8, 1, 4, add_batches=True, priority_exponent=0.5
        ),
        1, 8, 1, 1, 0.5, 1, item_windows, lambda c: c[0], (1, 3, 8),
    ),
}  # fmt: skip


class Jitted(NamedTuple):
    buffer: Any
    initial: Callable[[], Any]  # the empty state, built (and compiled) on first use
    add: Callable[..., Any]
    sample: Callable[..., Any]
    set_priorities: Callable[..., Any]


def jit_buffer(buffer: Any) -> Jitted:
    return Jitted(
        buffer=buffer,
        initial=functools.cache(lambda: jax.jit(buffer.init)(EXAMPLE)),
        add=jax.jit(buffer.add),
        sample=jax.jit(lambda state, seed: buffer.sample(state, jax.random.key(seed))),
        set_priorities=jax.jit(buffer.set_priorities),
    )


BUILT = {name: jit_buffer(case.make()) for name, case in CASES.items()}


def operations(case: Case) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    """Random adds (lengths from a fixed set) and ``set_priorities`` calls (unique indices over
    every item slot, valid or not; positive priorities)."""
    capacity = case.rows * (case.t_len // case.period)
    add = st.tuples(st.just("add"), st.sampled_from(case.add_lengths))
    set_priorities = st.tuples(
        st.just("set"),
        st.lists(
            st.integers(0, capacity - 1),
            min_size=PRIORITIES_PER_CALL,
            max_size=PRIORITIES_PER_CALL,
            unique=True,
        ),
        st.lists(
            st.floats(2.0**-6, 50.0, width=32),
            min_size=PRIORITIES_PER_CALL,
            max_size=PRIORITIES_PER_CALL,
        ),
    )
    return st.lists(st.one_of(add, set_priorities), min_size=1, max_size=14)


@pytest.mark.parametrize("name", list(CASES))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_prioritised_buffer_matches_model(name: str, data: st.DataObject) -> None:
    case, fns = CASES[name], BUILT[name]
    ops = data.draw(operations(case))
    seed = data.draw(st.integers(0, 2**20))
    model = case.model()
    state = fns.initial()
    model.check_tree(state)
    for i, op in enumerate(ops):
        if op[0] == "add":
            codes = model.add(op[1])
            state = fns.add(state, transition_of(case.to_layout(codes)))
        else:
            indices = np.asarray(op[1], np.int32)
            priorities = np.asarray(op[2], np.float32)
            model.set_priorities(indices, priorities)
            state = fns.set_priorities(state, indices, priorities)
        model.check_ring(state)
        model.check_tree(state)
        # every priority set here is positive: a leaf is positive exactly for the valid items
        nodes = np.asarray(state.sum_tree_state.nodes)
        leaves = nodes[nodes.size // 2 :][: model.valid_mask().size]
        np.testing.assert_array_equal(leaves > 0, model.valid_mask())
        ready = model.added >= case.ready_at
        assert bool(fns.buffer.can_sample(state)) == ready
        if ready:
            sample = fns.sample(state, seed + i)
            model.check_sample(case.windows(sample), sample)


def test_can_sample_promises_a_valid_sample_with_a_long_period() -> None:
    """When ``can_sample`` is true, a sample is valid and its windows never straddle the write
    position, also where a window is longer than ``T - period + 1``: there, at some write
    positions no item slot (a multiple of ``period``) starts a complete window."""
    buffer = buffers.make_prioritised_trajectory_buffer(
        add_batch_size=1,
        sample_batch_size=2,
        sample_sequence_length=6,
        period=4,
        min_length_time_axis=6,
        max_length_time_axis=8,
    )
    model = PrioritisedModel(rows=1, t_len=8, seq_len=6, period=4, alpha=0.6)
    add = jax.jit(buffer.add)
    sample = jax.jit(lambda state, seed: buffer.sample(state, jax.random.key(seed)))
    state = jax.jit(buffer.init)(EXAMPLE)
    broken: list[tuple[int, list[int]]] = []  # (timesteps added, a sampled window)
    for step in range(16):
        state = add(state, transition_of(model.add(1)))
        model.check_tree(state)  # the tree itself agrees with the model throughout
        if not bool(buffer.can_sample(state)):
            continue
        drawn = sample(state, step)
        if np.asarray(drawn.valid).all():
            model.check_sample(decode(drawn.experience), drawn)
        else:
            window = np.asarray(drawn.experience.extras["id"])[0] % ROW_STRIDE
            broken.append((model.added, window.tolist()))
    assert not broken, (
        "can_sample(state) is true but the sample is invalid (probabilities 0, and the "
        f"window straddles the write position); (timesteps added, window): {broken}"
    )


@pytest.mark.parametrize("name", list(CASES))
def test_empty_prioritised_buffer(name: str) -> None:
    """Empty: eager sampling raises; jitted, probabilities are 0 (not NaN), valid is false."""
    fns = BUILT[name]
    with pytest.raises(buffers.NotReadyError):
        fns.buffer.sample(fns.initial(), jax.random.key(0))
    sample = fns.sample(fns.initial(), 0)
    probabilities = np.asarray(sample.probabilities)
    assert not np.isnan(probabilities).any()
    assert (probabilities == 0).all()
    assert not np.asarray(sample.valid).any()


# --------------------------------------------------------------------------------------------
# Statistical tests (fixed keys)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_sampling_frequencies_every_kind(name: str) -> None:
    """After a wrap and distinct priorities on every slot, each kind's sampling frequencies
    match the model's ``p^alpha / sum`` over valid items (chi-square, fixed keys)."""
    case, fns = CASES[name], BUILT[name]
    model = case.model()
    state = fns.initial()
    for length in (case.t_len, case.add_lengths[1]):  # fill, then wrap part of the way
        state = fns.add(state, transition_of(case.to_layout(model.add(length))))
    capacity = case.rows * (case.t_len // case.period)
    all_indices = np.arange(capacity, dtype=np.int32)
    for chunk in np.split(all_indices, capacity // PRIORITIES_PER_CALL):
        priorities = (1.0 + chunk).astype(np.float32)
        model.set_priorities(chunk, priorities)
        state = fns.set_priorities(state, chunk, priorities)
    model.check_tree(state)
    draws = 1000  # batches: 4000 to 8000 samples
    sampler = jax.jit(jax.vmap(fns.buffer.sample, in_axes=(None, 0)))
    samples = sampler(state, jax.random.split(jax.random.key(31337), draws))
    assert np.asarray(samples.valid).all()
    expected = model.leaves() / model.leaves().sum()
    indices = np.asarray(samples.indices).reshape(-1)
    np.testing.assert_allclose(
        np.asarray(samples.probabilities).reshape(-1), expected[indices], rtol=1e-5
    )
    counts = np.bincount(indices, minlength=capacity)
    assert counts[expected == 0].sum() == 0  # never an invalid (zero-priority) item
    valid = expected > 0
    assert valid.sum() >= 4
    assert chi2_statistic(counts[valid], expected[valid]) < chi2_bound(int(valid.sum()) - 1)


STATS_ROWS, STATS_T, STATS_L, STATS_PERIOD = 2, 16, 2, 2
STATS_BATCH = 256
STATS_DRAWS = 200  # batches of STATS_BATCH samples
STATS_CAPACITY = STATS_ROWS * (STATS_T // STATS_PERIOD)


def make_stats_buffer(alpha: float) -> buffers.PrioritisedTrajectoryBuffer:
    return buffers.make_prioritised_trajectory_buffer(
        add_batch_size=STATS_ROWS,
        sample_batch_size=STATS_BATCH,
        sample_sequence_length=STATS_L,
        period=STATS_PERIOD,
        min_length_time_axis=STATS_L,
        max_length_time_axis=STATS_T,
        priority_exponent=alpha,
    )


@functools.cache
def stats_tools() -> tuple[Any, Callable[..., Any]]:
    """A full state (every item valid) and a jitted sampler mapped over keys.

    ``priority_exponent`` only enters ``set_priorities``; ``init``, ``add`` and ``sample`` are
    the same for every exponent, so they are compiled once and shared.
    """
    buffer = make_stats_buffer(0.6)
    model = PrioritisedModel(STATS_ROWS, STATS_T, STATS_L, STATS_PERIOD, 0.6)
    state = jax.jit(buffer.add)(jax.jit(buffer.init)(EXAMPLE), transition_of(model.add(STATS_T)))
    assert len(model.priority) == STATS_CAPACITY
    return state, jax.jit(jax.vmap(buffer.sample, in_axes=(None, 0)))


@functools.cache
def stats_set_priorities(alpha: float) -> Callable[..., Any]:
    return jax.jit(make_stats_buffer(alpha).set_priorities)


def sample_counts(state: Any, seed: int) -> tuple[np.ndarray, Any]:
    """Sampled item counts over ``STATS_DRAWS`` batches, and the samples."""
    _, sampler = stats_tools()
    samples = sampler(state, jax.random.split(jax.random.key(seed), STATS_DRAWS))
    assert np.asarray(samples.valid).all()
    indices = np.asarray(samples.indices).reshape(-1)
    return np.bincount(indices, minlength=STATS_CAPACITY), samples


@pytest.mark.parametrize(("alpha", "wrong_alpha"), [(0.0, 0.6), (0.6, 1.0), (1.0, 0.6)])
def test_sampling_frequencies_follow_priority_power(alpha: float, wrong_alpha: float) -> None:
    """Empirical frequencies match ``p^alpha / sum`` (chi-square, fixed keys), and the same
    statistic rejects ``wrong_alpha`` (so the test has power)."""
    state, _ = stats_tools()
    rng = np.random.default_rng(7)
    priorities = rng.permutation(np.arange(1, STATS_CAPACITY + 1)).astype(np.float32)
    indices = np.arange(STATS_CAPACITY, dtype=np.int32)
    state = stats_set_priorities(alpha)(state, indices, priorities)
    counts, samples = sample_counts(state, 1234)
    assert counts.size == STATS_CAPACITY
    expected = priorities.astype(np.float64) ** alpha
    expected /= expected.sum()
    flat_indices = np.asarray(samples.indices).reshape(-1)
    np.testing.assert_allclose(
        np.asarray(samples.probabilities).reshape(-1), expected[flat_indices], rtol=1e-5
    )
    bound = chi2_bound(STATS_CAPACITY - 1)
    assert chi2_statistic(counts, expected) < bound
    wrong = priorities.astype(np.float64) ** wrong_alpha
    assert chi2_statistic(counts, wrong / wrong.sum()) > bound


@pytest.mark.parametrize("alpha", [0.6, 1.0])
def test_tiny_priorities_never_sample_zero_priority_items(alpha: float) -> None:
    """Leaves of 0, 1e-30 and 1e6 side by side: no draw lands on a zero-priority item."""
    state, _ = stats_tools()
    pattern = np.array([0.0, 1e-30, 1e6, 0.0, 1e-30, 0.0, 0.0, 1e6], np.float32)
    priorities = np.resize(pattern, STATS_CAPACITY)
    indices = np.arange(STATS_CAPACITY, dtype=np.int32)
    state = stats_set_priorities(alpha)(state, indices, priorities)
    leaves = np.asarray(state.sum_tree_state.nodes)[-STATS_CAPACITY:]
    np.testing.assert_array_equal(leaves > 0, priorities > 0)
    counts, samples = sample_counts(state, 99)
    assert counts[priorities == 0].sum() == 0
    probabilities = np.asarray(samples.probabilities)
    assert np.isfinite(probabilities).all()
    assert (probabilities > 0).all()
