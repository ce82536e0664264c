"""Property tests of the uniform buffers against a numpy reference model.

Covers the trajectory, flat, n-step and item buffers and ``ReplayBuffer``.

Every timestep carries a unique code ``row * ROW_STRIDE + t`` (``t``: the timestep's index in its
row, counted over everything ever added), written into every leaf of a nested structure (a dict
holding a tuple holding a NamedTuple, several dtypes), so a sampled value names exactly where it
came from. The reference model keeps every code ever added to each row; the stored ones are the
last ``T`` of each row, and timestep ``t`` sits at physical index ``t % T``.

Each buffer is built and wrapped in ``jax.jit`` once at import (compiled on first use), and add
lengths come from a small fixed set, so the compiled shapes are shared by all hypothesis
examples (compilation, not the examples, dominates the run time).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
import pytest
from _stats import chi2_bound, chi2_statistic
from hypothesis import given, settings
from hypothesis import strategies as st

import buffers

ROW_STRIDE = 100_000
PROPERTY_SETTINGS = settings(max_examples=40, deadline=None)


# --------------------------------------------------------------------------------------------
# Encoding: codes <-> a nested structure whose every leaf is an exact function of the code
# --------------------------------------------------------------------------------------------


class Step(NamedTuple):
    reward: Any
    flag: Any


def tree_of(codes: Any) -> dict[str, Any]:
    """The test structure for ``codes`` (any shape): every leaf is an exact function of them."""
    codes = np.asarray(codes, np.int64)
    return {
        "obs": np.stack([codes, codes + 0.25], axis=-1).astype(np.float32),
        "nested": (
            (-codes).astype(np.int32),
            Step(reward=(codes * 0.5).astype(np.float32), flag=(codes % 251).astype(np.uint8)),
        ),
    }


EXAMPLE = tree_of(0)


def assert_leaf_equal(actual: Any, desired: np.ndarray) -> None:
    actual = np.asarray(actual)
    assert actual.dtype == desired.dtype, (actual.dtype, desired.dtype)
    np.testing.assert_array_equal(actual, desired)


def assert_tree_equal(actual: Any, desired: Any) -> None:
    assert jax.tree.structure(actual) == jax.tree.structure(desired)
    jax.tree.map(assert_leaf_equal, actual, desired)


def decode(tree: Any) -> np.ndarray:
    """The codes of a sampled structure, after checking that every leaf agrees with them."""
    codes = np.asarray(tree["obs"])[..., 0].astype(np.int64)
    assert_tree_equal(tree, tree_of(codes))
    return codes


def masked_tree(codes: np.ndarray, written: np.ndarray) -> Any:
    """``tree_of(codes)`` with zeros where nothing was written (the state's initial value)."""

    def mask(leaf: np.ndarray) -> np.ndarray:
        where = written.reshape(written.shape + (1,) * (leaf.ndim - written.ndim))
        return np.where(where, leaf, 0).astype(leaf.dtype)

    return jax.tree.map(mask, tree_of(codes))


# --------------------------------------------------------------------------------------------
# The reference model
# --------------------------------------------------------------------------------------------


class RingModel:
    """``rows`` rows of a ring of ``t_len`` timesteps: every code ever added, per row."""

    def __init__(self, rows: int, t_len: int, counter_start: int = 0) -> None:
        self.rows = rows
        self.t_len = t_len
        self.counter_start = counter_start  # where the state's write counter was started
        self.history = np.zeros((rows, 0), np.int64)

    @property
    def added(self) -> int:
        """Timesteps ever added to each row."""
        return self.history.shape[1]

    @property
    def oldest(self) -> int:
        """Index of the oldest stored (not yet overwritten) timestep of each row."""
        return max(0, self.added - self.t_len)

    def add(self, length: int) -> np.ndarray:
        """Append ``length`` new timesteps to every row; return their codes ``[rows, length]``."""
        times = np.arange(self.added, self.added + length)
        codes = np.arange(self.rows)[:, None] * ROW_STRIDE + times[None, :]
        self.history = np.concatenate([self.history, codes], axis=1)
        return codes

    def physical(self) -> tuple[np.ndarray, np.ndarray]:
        """Stored codes at their physical positions ``[rows, T]`` and the written mask."""
        codes = np.zeros((self.rows, self.t_len), np.int64)
        written = np.zeros((self.rows, self.t_len), bool)
        for t in range(self.oldest, self.added):
            codes[:, t % self.t_len] = self.history[:, t]
            written[:, t % self.t_len] = True
        return codes, written

    def check_state(self, state: Any) -> None:
        """Data in physical order, ``current_index``, ``is_full`` and the write counter."""
        codes, written = self.physical()
        assert_tree_equal(state.experience, masked_tree(codes, written))
        assert int(state.current_index) == self.added % self.t_len
        assert bool(state.is_full) == (self.added >= self.t_len)
        assert buffers.timesteps_added(state) == self.counter_start + self.added

    def locate(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, times)`` of codes, after checking that the model added every one of them."""
        rows, times = np.divmod(codes, ROW_STRIDE)
        assert ((rows >= 0) & (rows < self.rows)).all(), codes
        assert ((times >= 0) & (times < self.added)).all(), (codes, self.added)
        np.testing.assert_array_equal(self.history[rows, times], codes)
        return rows, times

    def check_windows(self, codes: np.ndarray, period: int) -> np.ndarray:
        """Each sequence ``codes[i]`` is a contiguous run of stored timesteps of one row whose
        start is a multiple of ``period`` after the oldest stored timestep; returns the starts.
        """
        rows, times = self.locate(codes)
        np.testing.assert_array_equal(rows, np.broadcast_to(rows[:, :1], rows.shape))
        np.testing.assert_array_equal(times, times[:, :1] + np.arange(codes.shape[1]))
        # Consecutive, the first not overwritten and the last already written: the window is
        # a slice of the time-ordered stored data and cannot straddle the write position.
        assert (times[:, 0] >= self.oldest).all(), (times, self.oldest)
        assert (times[:, -1] < self.added).all(), (times, self.added)
        assert ((times[:, 0] - self.oldest) % period == 0).all(), (times, self.oldest, period)
        return times[:, 0]

    def check_pairs(self, first: np.ndarray, second: np.ndarray, n_step: int) -> None:
        """``second`` is ``n_step`` timesteps after ``first`` in the same row, both stored
        (so the window between them is stored too and does not straddle the write position).
        """
        rows1, t1 = self.locate(first)
        rows2, t2 = self.locate(second)
        np.testing.assert_array_equal(rows1, rows2)
        np.testing.assert_array_equal(t2, t1 + n_step)
        assert (t1 >= self.oldest).all(), (t1, self.oldest)


class Jitted(NamedTuple):
    """A buffer with its ``init``, ``add`` and ``sample`` jitted once (``sample`` takes an
    integer seed). ``can_sample`` stays eager: its scalar ops compile once for every buffer.
    """

    buffer: Any
    initial: Callable[[], Any]  # the empty state, built (and compiled) on first use
    add: Callable[..., Any]
    sample: Callable[..., Any]


def jit_buffer(buffer: Any) -> Jitted:
    return Jitted(
        buffer=buffer,
        initial=functools.cache(lambda: jax.jit(buffer.init)(EXAMPLE)),
        add=jax.jit(buffer.add),
        sample=jax.jit(lambda state, seed: buffer.sample(state, jax.random.key(seed))),
    )


SEEDS = st.integers(0, 2**20)


# --------------------------------------------------------------------------------------------
# Trajectory buffer
# --------------------------------------------------------------------------------------------


class TrajectoryCase(NamedTuple):
    rows: int
    t_len: int
    seq_len: int
    period: int
    min_length: int
    sample_batch_size: int
    add_lengths: tuple[int, ...]

    def make(self) -> buffers.TrajectoryBuffer:
        return buffers.make_trajectory_buffer(
            add_batch_size=self.rows,
            sample_batch_size=self.sample_batch_size,
            sample_sequence_length=self.seq_len,
            period=self.period,
            min_length_time_axis=self.min_length,
            max_length_time_axis=self.t_len,
        )


TRAJECTORY_CASES = {
    # overlapping windows two apart; ready only after 4 timesteps (more than L)
    "B3-T8-L3-p2": TrajectoryCase(3, 8, 3, 2, 4, 16, (1, 2, 3, 5, 8)),
    # one window: the whole row, in time order (unrolled across the wrap once full)
    "B1-T5-L5-p1": TrajectoryCase(1, 5, 5, 1, 0, 4, (1, 2, 3, 5)),
    # period longer than the window: gaps between sampleable windows; T not a multiple of it
    "B2-T10-L2-p3": TrajectoryCase(2, 10, 2, 3, 1, 12, (1, 2, 10)),
}
TRAJECTORY_BUILT = {name: jit_buffer(case.make()) for name, case in TRAJECTORY_CASES.items()}


@pytest.mark.parametrize("name", list(TRAJECTORY_CASES))
@PROPERTY_SETTINGS
@given(data=st.data())
def test_trajectory_buffer_matches_model(name: str, data: st.DataObject) -> None:
    case, fns = TRAJECTORY_CASES[name], TRAJECTORY_BUILT[name]
    lengths = data.draw(st.lists(st.sampled_from(case.add_lengths), min_size=1, max_size=10))
    seed = data.draw(SEEDS)
    # The write counter never wraps: start it just below 2**31 or 2**32 in some examples.
    counter_start = data.draw(st.sampled_from((0, 2**31 - 3, 2**32 - 5)))
    model = RingModel(case.rows, case.t_len, counter_start)
    ready_at = max(case.min_length, case.seq_len)
    state = fns.initial().replace(write_counter=buffers.write_counter_from_int(counter_start))
    model.check_state(state)
    for i, length in enumerate(lengths):
        state = fns.add(state, tree_of(model.add(length)))
        model.check_state(state)
        ready = model.added >= ready_at
        assert bool(fns.buffer.can_sample(state)) == ready
        sample = fns.sample(state, seed + i)
        assert np.asarray(sample.valid).shape == (case.sample_batch_size,)
        assert (np.asarray(sample.valid) == ready).all()
        if ready:
            codes = decode(sample.experience)
            assert codes.shape == (case.sample_batch_size, case.seq_len)
            model.check_windows(codes, case.period)


def test_trajectory_buffer_not_ready() -> None:
    """Before ``can_sample``: an eager sample raises; a jitted one has an all-false mask."""
    case, fns = TRAJECTORY_CASES["B3-T8-L3-p2"], TRAJECTORY_BUILT["B3-T8-L3-p2"]
    model = RingModel(case.rows, case.t_len)
    state = fns.add(fns.initial(), tree_of(model.add(3)))  # 3 < min_length_time_axis = 4
    assert not bool(fns.buffer.can_sample(state))
    with pytest.raises(buffers.NotReadyError):
        fns.buffer.sample(state, jax.random.key(0))
    assert not np.asarray(fns.sample(state, 0).valid).any()


@functools.cache
def vmapped_sample(name: str) -> Callable[..., Any]:
    """``sample`` of a trajectory case, jitted and mapped over a batch of keys."""
    return jax.jit(jax.vmap(TRAJECTORY_BUILT[name].buffer.sample, in_axes=(None, 0)))


@pytest.mark.parametrize(
    ("name", "added"),
    [("B3-T8-L3-p2", 6), ("B3-T8-L3-p2", 13), ("B2-T10-L2-p3", 7), ("B2-T10-L2-p3", 20)],
)
def test_trajectory_sampling_is_uniform_over_valid_starts(name: str, added: int) -> None:
    """With fixed keys, window starts are uniform over rows x valid starts (chi-square)."""
    case, fns = TRAJECTORY_CASES[name], TRAJECTORY_BUILT[name]
    model = RingModel(case.rows, case.t_len)
    state = fns.initial()
    for _ in range(added):
        state = fns.add(state, tree_of(model.add(1)))
    keys = jax.random.split(jax.random.key(20240611), 400)
    samples = vmapped_sample(name)(state, keys)
    assert np.asarray(samples.valid).all()
    codes = decode(samples.experience).reshape(-1, case.seq_len)
    starts = model.check_windows(codes, case.period)
    filled = min(model.added, case.t_len)
    n_starts = (filled - case.seq_len) // case.period + 1
    cell = (codes[:, 0] // ROW_STRIDE) * n_starts + (starts - model.oldest) // case.period
    counts = np.bincount(cell, minlength=case.rows * n_starts)
    assert counts.size == case.rows * n_starts  # no start outside the valid ones
    uniform = np.full(counts.size, 1.0 / counts.size)
    assert chi2_statistic(counts, uniform) < chi2_bound(counts.size - 1)


# --------------------------------------------------------------------------------------------
# Flat and n-step buffers (every add layout)
# --------------------------------------------------------------------------------------------


class PairCase(NamedTuple):
    make: Callable[[], Any]
    rows: int
    t_len: int
    n_step: int
    add_batches: bool
    add_sequences: bool
    ready_at: int  # timesteps per row before can_sample
    sample_batch_size: int
    add_lengths: tuple[int, ...]


def user_layout(codes: np.ndarray, add_batches: bool, add_sequences: bool) -> np.ndarray:
    """``[rows, L]`` codes in the layout the buffer's ``add`` expects."""
    if not add_sequences:
        codes = codes[:, 0]
    if not add_batches:
        codes = codes[0]
    return codes


PAIR_CASES = {
    "flat-single": PairCase(
        lambda: buffers.make_flat_buffer(8, 3, 4), 1, 8, 1, False, False, 4, 4, (1,)
    ),
    "flat-batch": PairCase(
        lambda: buffers.make_flat_buffer(18, 4, 6, add_batch_size=3),
        3, 6, 1, True, False, 2, 6, (1,),
    ),
    "flat-seq": PairCase(
        lambda: buffers.make_flat_buffer(8, 0, 4, add_sequences=True),
        1, 8, 1, False, True, 2, 4, (1, 3, 8),
    ),
    "flat-batch-seq": PairCase(
        lambda: buffers.make_flat_buffer(16, 6, 8, add_sequences=True, add_batch_size=2),
        2, 8, 1, True, True, 4, 8, (1, 3, 8),
    ),
    "nstep3-batch-seq": PairCase(
        lambda: buffers.make_n_step_buffer(
            16, 2, 8, add_sequences=True, add_batch_size=2, n_step=3
        ),
        2, 8, 3, True, True, 4, 8, (1, 3, 8),
    ),
    "nstep2-single": PairCase(
        lambda: buffers.make_n_step_buffer(6, 0, 4, n_step=2), 1, 6, 2, False, False, 3, 4, (1,)
    ),
}  # fmt: skip
PAIR_BUILT = {name: jit_buffer(case.make()) for name, case in PAIR_CASES.items()}


@pytest.mark.parametrize("name", list(PAIR_CASES))
@PROPERTY_SETTINGS
@given(data=st.data())
def test_flat_and_n_step_buffers_match_model(name: str, data: st.DataObject) -> None:
    case, fns = PAIR_CASES[name], PAIR_BUILT[name]
    lengths = data.draw(st.lists(st.sampled_from(case.add_lengths), min_size=1, max_size=12))
    seed = data.draw(SEEDS)
    model = RingModel(case.rows, case.t_len)
    state = fns.initial()
    for i, length in enumerate(lengths):
        codes = user_layout(model.add(length), case.add_batches, case.add_sequences)
        state = fns.add(state, tree_of(codes))
        model.check_state(state)
        ready = model.added >= case.ready_at
        assert bool(fns.buffer.can_sample(state)) == ready
        sample = fns.sample(state, seed + i)
        assert isinstance(sample.experience, buffers.ExperiencePair)
        assert (np.asarray(sample.valid) == ready).all()
        if ready:
            first, second = decode(sample.experience.first), decode(sample.experience.second)
            assert first.shape == second.shape == (case.sample_batch_size,)
            model.check_pairs(first, second, case.n_step)


# --------------------------------------------------------------------------------------------
# Item buffer (every add layout)
# --------------------------------------------------------------------------------------------


class ItemCase(NamedTuple):
    make: Callable[[], Any]
    max_length: int
    min_length: int
    add_batches: bool
    add_sequences: bool
    add_shapes: tuple[tuple[int, ...], ...]  # shapes of the added code arrays (user layout)


ITEM_BATCH = 4
ITEM_CASES = {
    "single": ItemCase(
        lambda: buffers.make_item_buffer(8, 3, ITEM_BATCH), 8, 3, False, False, ((),)
    ),
    "batches": ItemCase(
        lambda: buffers.make_item_buffer(8, 1, ITEM_BATCH, add_batches=True),
        8, 1, True, False, ((1,), (3,), (8,)),
    ),
    "sequences": ItemCase(
        lambda: buffers.make_item_buffer(8, 0, ITEM_BATCH, add_sequences=True),
        8, 0, False, True, ((1,), (3,), (5,)),
    ),
    "batches-sequences": ItemCase(
        lambda: buffers.make_item_buffer(
            8, 2, ITEM_BATCH, add_sequences=True, add_batches=True
        ),
        8, 2, True, True, ((1, 1), (2, 3), (3, 2), (2, 4)),
    ),
}  # fmt: skip
ITEM_BUILT = {name: jit_buffer(case.make()) for name, case in ITEM_CASES.items()}


@pytest.mark.parametrize("name", list(ITEM_CASES))
@PROPERTY_SETTINGS
@given(data=st.data())
def test_item_buffer_matches_model(name: str, data: st.DataObject) -> None:
    """Items fill one row in the order given (batch-major when both axes are present)."""
    case, fns = ITEM_CASES[name], ITEM_BUILT[name]
    shapes = data.draw(st.lists(st.sampled_from(case.add_shapes), min_size=1, max_size=10))
    seed = data.draw(SEEDS)
    model = RingModel(1, case.max_length)
    state = fns.initial()
    for i, shape in enumerate(shapes):
        codes = model.add(math.prod(shape))[0].reshape(shape)
        state = fns.add(state, tree_of(codes))
        model.check_state(state)
        ready = model.added >= max(case.min_length, 1)
        assert bool(fns.buffer.can_sample(state)) == ready
        sample = fns.sample(state, seed + i)
        assert (np.asarray(sample.valid) == ready).all()
        if ready:  # every sampled item is one of the last max_length added
            items = decode(sample.experience)
            assert items.shape == (ITEM_BATCH,)
            model.check_windows(items[:, None], 1)


# --------------------------------------------------------------------------------------------
# ReplayBuffer (one flat ring of transitions)
# --------------------------------------------------------------------------------------------

REPLAY_SIZE = 7
REPLAY_BATCH = 16
REPLAY = buffers.ReplayBuffer(REPLAY_SIZE)
REPLAY_INIT = functools.cache(lambda: jax.jit(REPLAY.init)(EXAMPLE))  # built on first use
REPLAY_ADD = jax.jit(REPLAY.add)
REPLAY_SAMPLE = jax.jit(
    lambda state, seed: REPLAY.sample(state, REPLAY_BATCH, jax.random.key(seed))
)
REPLAY_SAMPLE_MASKED = jax.jit(
    lambda state, seed: REPLAY.sample_masked(state, REPLAY_BATCH, jax.random.key(seed))
)


def check_replay_state(state: buffers.ReplayBufferState, model: RingModel) -> None:
    codes, written = model.physical()
    assert_tree_equal(state.data, masked_tree(codes[0], written[0]))
    assert int(state.position) == model.added % REPLAY_SIZE
    assert int(state.size) == min(model.added, REPLAY_SIZE)
    assert buffers.timesteps_added(state) == model.added


@PROPERTY_SETTINGS
@given(
    counts=st.lists(st.sampled_from((1, 2, 3, REPLAY_SIZE)), min_size=1, max_size=10),
    seed=SEEDS,
)
def test_replay_buffer_matches_model(counts: Sequence[int], seed: int) -> None:
    model = RingModel(1, REPLAY_SIZE)
    state = REPLAY_INIT()
    check_replay_state(state, model)
    for i, count in enumerate(counts):
        state = REPLAY_ADD(state, tree_of(model.add(count)[0]))
        check_replay_state(state, model)
        same_state, batch = REPLAY_SAMPLE(state, seed + i)
        assert_tree_equal(same_state, state)
        items = decode(batch)  # NaN-poisoned leaves would not decode
        assert items.shape == (REPLAY_BATCH,)
        model.check_windows(items[:, None], 1)


def test_replay_buffer_empty() -> None:
    """Empty: eager sampling raises; jitted, the mask is false and float leaves are NaN."""
    with pytest.raises(buffers.NotReadyError):
        REPLAY.sample(REPLAY_INIT(), REPLAY_BATCH, jax.random.key(0))
    _, _, valid = REPLAY_SAMPLE_MASKED(REPLAY_INIT(), 0)
    assert not np.asarray(valid).any()
    _, batch = REPLAY_SAMPLE(REPLAY_INIT(), 0)
    assert np.isnan(np.asarray(batch["obs"])).all()
    assert np.isnan(np.asarray(batch["nested"][1].reward)).all()
