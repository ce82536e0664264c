"""Property tests of the trajectory queue and the mixer against numpy reference models.

Every timestep carries a unique code (``offset + row * ROW_STRIDE + t``, ``t`` its index in its
row over everything ever added) in every leaf of a dict holding a nested tuple, so a sampled
value names its buffer, row and timestep.

* Queue: random interleavings of adds and samples against a per-row FIFO. Allowed operations
  must match the model (FIFO order, occupancy, ``can_add`` / ``can_sample``); refused ones must
  raise eagerly and leave the state unchanged inside ``jit``.
* Mixer: the batch is made of each buffer's share (``mixer.batch_sizes``, from the proportions),
  in buffer order, each part drawn from that buffer's valid windows.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import buffers

ROW_STRIDE = 10_000
BUFFER_OFFSET = 1_000_000  # buffer i of a mixer stores codes offset by i * BUFFER_OFFSET


def experience_of(codes: Any) -> dict[str, Any]:
    """The test structure for ``codes`` (any shape): every leaf is an exact function of them."""
    codes = np.asarray(codes, np.int64)
    return {
        "obs": np.stack([codes, codes + 0.5], axis=-1).astype(np.float32),
        "info": (codes.astype(np.int32), {"parity": (codes % 2).astype(np.uint8)}),
    }


EXAMPLE = experience_of(0)


def decode(tree: Any) -> np.ndarray:
    """The codes of a sampled structure, after checking every leaf against them."""
    codes = np.asarray(tree["info"][0]).astype(np.int64)
    expected = experience_of(codes)
    assert jax.tree.structure(tree) == jax.tree.structure(expected)
    for got, want in zip(jax.tree.leaves(tree), jax.tree.leaves(expected), strict=True):
        assert np.asarray(got).dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got), want)
    return codes


def row_codes(offset: int, rows: int, start: int, length: int) -> np.ndarray:
    """Codes ``[rows, length]`` of timesteps ``start .. start + length - 1`` of every row."""
    times = np.arange(start, start + length)
    return offset + np.arange(rows)[:, None] * ROW_STRIDE + times[None, :]


def assert_same_state(actual: Any, expected: Any) -> None:
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for got, want in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


# --------------------------------------------------------------------------------------------
# Trajectory queue
# --------------------------------------------------------------------------------------------

Q_ROWS, Q_T, Q_ADD_LEN, Q_SAMPLE_LEN = 2, 8, 3, 2
Q_ADD_LENGTHS = (1, Q_ADD_LEN, Q_T)
QUEUE = buffers.make_trajectory_queue(
    max_length_time_axis=Q_T,
    add_batch_size=Q_ROWS,
    add_sequence_length=Q_ADD_LEN,
    sample_sequence_length=Q_SAMPLE_LEN,
)
Q_INIT = functools.cache(lambda: jax.jit(QUEUE.init)(EXAMPLE))  # built on first use
Q_ADD = jax.jit(QUEUE.add)
Q_SAMPLE = jax.jit(QUEUE.sample)


class QueueModel:
    """A FIFO per row: ``written`` timesteps ever added, ``read`` of them consumed."""

    def __init__(self) -> None:
        self.written = 0
        self.read = 0

    @property
    def occupancy(self) -> int:
        return self.written - self.read

    def can_add(self, length: int) -> bool:
        return self.occupancy + length <= Q_T

    def can_sample(self) -> bool:
        return self.occupancy >= Q_SAMPLE_LEN

    def add(self, length: int) -> np.ndarray:
        codes = row_codes(0, Q_ROWS, self.written, length)
        self.written += length
        return codes

    def sample(self) -> np.ndarray:
        codes = row_codes(0, Q_ROWS, self.read, Q_SAMPLE_LEN)
        self.read += Q_SAMPLE_LEN
        return codes

    def check_state(self, state: buffers.TrajectoryQueueState) -> None:
        assert int(state.write_index) == self.written % Q_T
        assert int(state.read_index) == self.read % Q_T
        assert bool(state.is_full) == (self.occupancy == Q_T)
        assert buffers.timesteps_added(state) == self.written
        assert bool(QUEUE.can_add(state)) == self.can_add(Q_ADD_LEN)
        assert bool(QUEUE.can_sample(state)) == self.can_sample()
        stored = np.asarray(state.experience["info"][0])
        unread = row_codes(0, Q_ROWS, self.read, self.occupancy)
        np.testing.assert_array_equal(stored[:, np.arange(self.read, self.written) % Q_T], unread)


QUEUE_OPS = st.lists(
    st.one_of(st.tuples(st.just("add"), st.sampled_from(Q_ADD_LENGTHS)), st.just(("sample",))),
    min_size=1,
    max_size=25,
)


@settings(max_examples=50, deadline=None)
@given(ops=QUEUE_OPS)
def test_trajectory_queue_is_fifo(ops: Sequence[tuple[Any, ...]]) -> None:
    model = QueueModel()
    state = Q_INIT()
    model.check_state(state)
    sampled: list[np.ndarray] = []
    for op in ops:
        if op[0] == "add":
            length = op[1]
            batch = experience_of(row_codes(0, Q_ROWS, model.written, length))
            if model.can_add(length):
                state = Q_ADD(state, batch)
                model.add(length)
            else:  # refused: an error eagerly, the same state inside jit
                with pytest.raises(buffers.QueueFullError):
                    QUEUE.add(state, batch)
                assert_same_state(Q_ADD(state, batch), state)
        elif model.can_sample():
            state, sample = Q_SAMPLE(state)
            assert np.asarray(sample.valid).shape == (Q_ROWS,)
            assert np.asarray(sample.valid).all()
            codes = decode(sample.experience)
            np.testing.assert_array_equal(codes, model.sample())
            sampled.append(codes)
        else:  # not ready: an error eagerly; inside jit the read position stays put
            with pytest.raises(buffers.NotReadyError):
                QUEUE.sample(state)
            new_state, sample = Q_SAMPLE(state)
            assert not np.asarray(sample.valid).any()
            assert_same_state(new_state, state)
        model.check_state(state)
    # FIFO: everything sampled, concatenated, is what was added, in order, per row
    consumed = np.concatenate(sampled, axis=1) if sampled else np.zeros((Q_ROWS, 0), np.int64)
    np.testing.assert_array_equal(consumed, row_codes(0, Q_ROWS, 0, model.read))


# --------------------------------------------------------------------------------------------
# Mixer
# --------------------------------------------------------------------------------------------


class MixedBuffer(NamedTuple):
    """A trajectory buffer configuration used by the mixer, with its jitted functions."""

    buffer: buffers.TrajectoryBuffer
    rows: int
    t_len: int
    seq_len: int
    period: int
    ready_at: int
    initial: Callable[[], Any]  # the empty state, built (and compiled) on first use
    add: Callable[..., Any]


def mixed_buffer(rows: int, t_len: int, period: int, min_length: int, sbs: int) -> MixedBuffer:
    seq_len = 2  # every buffer of a mixer samples the same structure
    buffer = buffers.make_trajectory_buffer(
        add_batch_size=rows,
        sample_batch_size=sbs,
        sample_sequence_length=seq_len,
        period=period,
        min_length_time_axis=min_length,
        max_length_time_axis=t_len,
    )
    return MixedBuffer(
        buffer,
        rows,
        t_len,
        seq_len,
        period,
        max(min_length, seq_len),
        functools.cache(lambda: jax.jit(buffer.init)(EXAMPLE)),
        jax.jit(buffer.add),
    )


WIDE = mixed_buffer(rows=2, t_len=6, period=1, min_length=2, sbs=8)
NARROW = mixed_buffer(rows=1, t_len=5, period=2, min_length=3, sbs=6)
MIXED = (WIDE, NARROW, WIDE)  # buffer 0 and 2 share a configuration, not their states
MIX_BATCH = 8
MIX_ADD_LENGTHS = (1, 3)
PROPORTION_SETS = ((1.0, 1.0, 2.0), (0.0, 3.0, 1.0), (0.5, 0.2, 0.3))
MIXERS = {
    props: buffers.make_mixer([m.buffer for m in MIXED], MIX_BATCH, props)
    for props in PROPORTION_SETS
}
MIX_SAMPLE = {
    props: jax.jit(lambda states, seed, mixer=mixer: mixer.sample(states, jax.random.key(seed)))
    for props, mixer in MIXERS.items()
}


def check_mixed_windows(codes: np.ndarray, i: int, m: MixedBuffer, added: int) -> None:
    """Sequences of buffer ``i``: one row each, consecutive stored timesteps, period respected."""
    rows, times = np.divmod(codes - i * BUFFER_OFFSET, ROW_STRIDE)
    assert ((rows >= 0) & (rows < m.rows)).all(), codes
    np.testing.assert_array_equal(rows, np.broadcast_to(rows[:, :1], rows.shape))
    np.testing.assert_array_equal(times, times[:, :1] + np.arange(m.seq_len))
    oldest = max(0, added - m.t_len)
    assert (times[:, 0] >= oldest).all()
    assert (times[:, -1] < added).all()
    assert ((times[:, 0] - oldest) % m.period == 0).all()


# Never called, only configured: a buffer whose sample batch fits any share below.
BIG_BATCH_BUFFER = buffers.make_trajectory_buffer(1, 64, 1, 1, 1, max_length_time_axis=64)


@settings(max_examples=40, deadline=None)
@given(
    proportions=st.lists(st.floats(0.0, 10.0, allow_nan=False), min_size=1, max_size=4).filter(
        lambda p: sum(p) > 0
    ),
    batch=st.integers(1, 64),
)
def test_mixer_batch_sizes_follow_proportions(proportions: list[float], batch: int) -> None:
    """Shares sum to the batch; each is its exact share rounded down or up; zero gets none."""
    mixer = buffers.make_mixer([BIG_BATCH_BUFFER] * len(proportions), batch, proportions)
    sizes = mixer.batch_sizes
    assert len(sizes) == len(proportions)
    assert sum(sizes) == batch
    total = sum(proportions)
    for size, p in zip(sizes, proportions, strict=True):
        exact = batch * p / total
        assert math.floor(exact) <= size <= math.ceil(exact)
        if p == 0:
            assert size == 0


@pytest.mark.parametrize("proportions", PROPORTION_SETS, ids=str)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_mixer_samples_each_buffer_in_proportion(
    proportions: tuple[float, ...], data: st.DataObject
) -> None:
    mixer, sample = MIXERS[proportions], MIX_SAMPLE[proportions]
    sizes = mixer.batch_sizes
    assert sum(sizes) == MIX_BATCH
    adds = [
        data.draw(st.lists(st.sampled_from(MIX_ADD_LENGTHS), max_size=6), label=f"adds {i}")
        for i in range(len(MIXED))
    ]
    seed = data.draw(st.integers(0, 2**20), label="seed")
    states, added = [], []
    for i, (m, lengths) in enumerate(zip(MIXED, adds, strict=True)):
        state, count = m.initial(), 0
        for length in lengths:
            state = m.add(state, experience_of(row_codes(i * BUFFER_OFFSET, m.rows, count, length)))
            count += length
        states.append(state)
        added.append(count)
    ready = [count >= m.ready_at for m, count in zip(MIXED, added, strict=True)]
    assert bool(mixer.can_sample(states)) == all(ready)
    result = sample(states, seed)
    valid = np.asarray(result.valid)
    codes = np.asarray(result.experience["info"][0]).astype(np.int64)
    assert valid.shape == (MIX_BATCH,)
    assert codes.shape == (MIX_BATCH, 2)
    bounds = np.cumsum((0, *sizes))
    for i, (m, count) in enumerate(zip(MIXED, added, strict=True)):
        part = slice(bounds[i], bounds[i + 1])
        assert (valid[part] == ready[i]).all()
        if ready[i]:  # the part comes from buffer i and is one of its valid windows
            decode(jax.tree.map(lambda x, part=part: np.asarray(x)[part], result.experience))
            check_mixed_windows(codes[part], i, m, count)
