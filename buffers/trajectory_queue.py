"""Trajectory queue: FIFO over ``[B, T, ...]``; every ``sample`` consumes what it returns.

Unlike the reference, the queue never overwrites unread data and never hands out stale data:

* ``add`` when ``can_add`` is false raises :class:`~buffers.QueueFullError` eagerly; inside
  ``jit`` the add is refused (the state is returned unchanged, ``write_counter`` does not move,
  which is how a caller detects it).
* ``sample`` when ``can_sample`` is false raises :class:`~buffers.NotReadyError` eagerly;
  inside ``jit`` the read position does not move and the sample's ``valid`` mask is false.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Generic

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from buffers import _counter
from buffers import utils as utils
from buffers._core import (
    Experience,
    empty_experience,
    is_tracing,
    ready_mask,
    tree_shape_prefix,
)
from buffers._errors import QueueFullError
from buffers._flashbax_state import accept_reference
from buffers._pytree import Replaceable, derived, frozen_container, pytree_dataclass
from buffers._validation import (
    check,
    check_sample_nbytes,
    check_state,
    positive_int,
    resolve_time_axis,
    validate_batch,
)

_STATE_FIELDS = ("experience", "write_index", "read_index", "is_full")


def check_queue_state(state: Any, what: str) -> None:
    """``state`` is a :class:`TrajectoryQueueState` (a typed error naming ``what`` if not)."""
    check_state(state, _STATE_FIELDS, "TrajectoryQueueState", what)


@pytree_dataclass
class TrajectoryQueueState(Replaceable, Generic[Experience]):
    """State of a trajectory queue (the reference's fields, plus a write counter).

    Attributes:
        experience: pytree whose leaves are ``[add_batch_size, max_length_time_axis, ...]``.
        write_index: next time index to be written (int32 scalar).
        read_index: next time index to be read (int32 scalar).
        is_full: whether every slot holds unread data.
        write_counter: timesteps ever added along the time axis (see
            :func:`buffers.timesteps_added`). Built by hand without it, it is derived: the
            fewest timesteps consistent with the indices (``write_index``, plus ``T`` when the
            writes have wrapped: the queue is full or ``write_index < read_index``).
    """

    experience: Experience
    write_index: Array
    read_index: Array
    is_full: Array
    write_counter: Array = derived(default=None)

    def __post_init__(self) -> None:
        if self.write_counter is None:
            t_len = tree_shape_prefix(self.experience, np.ndim(self.write_index) + 2)[-1]
            counter = _counter.derive(
                lambda xp, write, read, full: xp.where(full | (write < read), write + t_len, write),
                self.write_index,
                self.read_index,
                self.is_full,
            )
            object.__setattr__(self, "write_counter", counter)


@pytree_dataclass
class TrajectoryQueueSample(Replaceable, Generic[Experience]):
    """The oldest unread timesteps of every row.

    Attributes:
        experience: pytree whose leaves are ``[add_batch_size, sample_sequence_length, ...]``.
        valid: ``bool[add_batch_size]``, false when the queue was not ready (inside ``jit``).
    """

    experience: Experience
    valid: Any = None


def init(
    experience: Experience, add_batch_size: int, max_length_time_axis: int
) -> TrajectoryQueueState[Experience]:
    """An empty queue for timesteps shaped like ``experience`` (one timestep, no batch axis)."""
    return TrajectoryQueueState(
        experience=empty_experience(experience, add_batch_size, max_length_time_axis),
        write_index=jnp.array(0, jnp.int32),  # distinct arrays: states may be donated
        read_index=jnp.array(0, jnp.int32),
        is_full=jnp.array(False),
        write_counter=_counter.zero(),
    )


def occupancy(state: TrajectoryQueueState[Experience]) -> Array:
    """Unread timesteps per row."""
    state = accept_reference(state, "occupancy")
    check_queue_state(state, "occupancy")
    # (a state stacked by vmap/pmap has its stacking axes first: the time axis follows them)
    t_len = tree_shape_prefix(state.experience, np.ndim(state.write_index) + 2)[-1]
    return jnp.where(state.is_full, t_len, (state.write_index - state.read_index) % t_len)


def _check_time_axis(state: Any, max_length_time_axis: int | None, what: str) -> int:
    _, t_len = tree_shape_prefix(state.experience, 2)
    check(
        max_length_time_axis is None or max_length_time_axis == t_len,
        f"{what}: `max_length_time_axis` is {max_length_time_axis} but the state's time axis "
        f"holds {t_len}: the state was made by another queue's `init`",
    )
    return t_len


def can_add(
    state: TrajectoryQueueState[Experience],
    add_sequence_length: int,
    max_length_time_axis: int | None = None,
) -> Array:
    """Whether ``add_sequence_length`` more timesteps fit without overwriting unread ones.

    Args:
        state: the queue's state.
        add_sequence_length: timesteps per row of the next ``add``.
        max_length_time_axis: the queue's time axis (the reference's argument); optional, read
            from the state, and checked against it when given.

    Returns:
        A bool scalar.
    """
    t_len = _check_time_axis(state, max_length_time_axis, "can_add")
    return occupancy(state) + add_sequence_length <= t_len


def can_sample(
    state: TrajectoryQueueState[Experience],
    sample_sequence_length: int,
    max_length_time_axis: int | None = None,
) -> Array:
    """Whether ``sample_sequence_length`` unread timesteps are waiting in every row.

    Args:
        state: the queue's state.
        sample_sequence_length: timesteps per row that ``sample`` takes.
        max_length_time_axis: as in :func:`can_add`.

    Returns:
        A bool scalar.
    """
    _check_time_axis(state, max_length_time_axis, "can_sample")
    return occupancy(state) >= sample_sequence_length


def add(
    state: TrajectoryQueueState[Experience], batch: Experience
) -> TrajectoryQueueState[Experience]:
    """Append ``batch`` ``[B, L, ...]`` if it fits; refused (state unchanged) if it does not."""
    state = accept_reference(state, "add")
    check_queue_state(state, "add")
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    batch = validate_batch(state.experience, batch, 2, (b_size, "L"), max_time=t_len)
    seq_len = tree_shape_prefix(batch, 2)[1]
    ok = can_add(state, seq_len)
    if not is_tracing(ok) and not bool(ok):
        steps = "1 timestep does" if seq_len == 1 else f"{seq_len} timesteps do"
        raise QueueFullError(
            f"add: {steps} not fit: the queue holds {int(occupancy(state))} "
            f"unread of {t_len}. Sample (consume) first, or check `can_add`."
        )
    indices = (state.write_index + jnp.arange(seq_len)) % t_len
    experience = jax.tree.map(
        lambda buf, new: buf.at[:, indices].set(
            jnp.where(ok, new, buf[:, indices]), unique_indices=True
        ),
        state.experience,
        batch,
    )
    new_write = (state.write_index + seq_len) % t_len
    return state.replace(
        experience=experience,
        write_index=jnp.where(ok, new_write, state.write_index).astype(jnp.int32),
        is_full=jnp.where(ok, new_write == state.read_index, state.is_full),
        write_counter=_counter.advance(state.write_counter, jnp.where(ok, seq_len, 0)),
    )


def sample(
    state: TrajectoryQueueState[Experience], sequence_length: int
) -> tuple[TrajectoryQueueState[Experience], TrajectoryQueueSample[Experience]]:
    """The oldest ``sequence_length`` unread timesteps of every row, and the advanced state."""
    state = accept_reference(state, "sample")
    check_queue_state(state, "sample")
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    check(
        sequence_length <= t_len,
        f"sample: sequences of {sequence_length} timesteps cannot come from a queue state "
        f"whose time axis holds {t_len}: the state was made by another queue's `init`",
    )
    check_sample_nbytes(state.experience, b_size, sequence_length, "sample", "add_batch_size")
    ready = can_sample(state, sequence_length)
    valid = ready_mask(ready, b_size, "sample")
    times = (state.read_index + jnp.arange(sequence_length)) % t_len
    experience = jax.tree.map(lambda x: x[:, times], state.experience)
    new_read = (state.read_index + sequence_length) % t_len
    new_state = state.replace(
        read_index=jnp.where(ready, new_read, state.read_index).astype(jnp.int32),
        is_full=state.is_full & ~ready,
    )
    return new_state, TrajectoryQueueSample(experience=experience, valid=valid)


@frozen_container
class TrajectoryQueue(Replaceable, Generic[Experience]):
    """Pure functions of a FIFO trajectory queue, plus its static configuration.

    Attributes:
        init: ``init(timestep) -> state``: an empty queue.
        add: ``add(state, batch) -> state``: append ``batch`` (leaves ``[add_batch_size,
            add_sequence_length, ...]``); raises :class:`~buffers.QueueFullError` eagerly
            when it does not fit (inside ``jit`` the state is returned unchanged).
        sample: ``sample(state) -> (state, TrajectoryQueueSample)``: consume the oldest
            ``sample_sequence_length`` unread timesteps of every row.
        can_sample: ``can_sample(state) -> bool[]``.
        can_add: ``can_add(state) -> bool[]``.
        add_batch_size: rows ``B`` of the state.
        max_length_time_axis: time-axis length ``T`` of the state.
    """

    init: Callable[..., Any]
    add: Callable[..., Any]
    sample: Callable[..., Any]
    can_sample: Callable[..., Array]
    can_add: Callable[..., Array]
    add_batch_size: int = dataclasses.field(default=0, kw_only=True)
    max_length_time_axis: int = dataclasses.field(default=0, kw_only=True)

    @property
    def capacity(self) -> int:
        """Timesteps the queue holds: ``add_batch_size * max_length_time_axis``."""
        return self.add_batch_size * self.max_length_time_axis


def validate_trajectory_queue_args(
    max_length_time_axis: int,
    add_batch_size: int,
    sample_sequence_length: int,
    max_size: int | None,
) -> None:
    """Check the sizes of :func:`make_trajectory_queue` without making a queue.

    ``max_size`` (total timesteps), when given, overrides ``max_length_time_axis``.

    Raises:
        BufferConfigError: a size below 1, or ``sample_sequence_length`` longer than the time
            axis (:class:`~buffers.ArgumentTypeError` for one that is not an integer).
    """
    add_batch_size = positive_int("add_batch_size", add_batch_size)
    sample_sequence_length = positive_int("sample_sequence_length", sample_sequence_length)
    t_len = _queue_time_axis(max_length_time_axis, add_batch_size, max_size, stacklevel=3)
    check(
        sample_sequence_length <= t_len,
        f"`sample_sequence_length` ({sample_sequence_length}) must be <= the time axis ({t_len})",
    )


def _queue_time_axis(
    max_length_time_axis: int | None, add_batch_size: int, max_size: int | None, stacklevel: int
) -> int:
    if max_size is not None and max_length_time_axis is not None:
        positive_int("max_length_time_axis", max_length_time_axis)  # overridden, still checked
    return resolve_time_axis(
        add_batch_size,
        max_size,
        None if max_size is not None else max_length_time_axis,
        stacklevel=stacklevel,
    )


def make_trajectory_queue(
    max_length_time_axis: int,
    add_batch_size: int,
    add_sequence_length: int,
    sample_sequence_length: int,
    max_size: int | None = None,
) -> TrajectoryQueue:
    """Make a FIFO trajectory queue (same signature as the reference's).

    Unlike the reference, the queue never overwrites unread data and never hands out stale
    data (see the module docstring).

    Args:
        max_length_time_axis: time-axis length ``T`` of the state.
        add_batch_size: rows ``B``; batches given to ``add`` are ``[B, add_sequence_length,
            ...]``.
        add_sequence_length: timesteps per row of every ``add``.
        sample_sequence_length: timesteps per row that every ``sample`` consumes.
        max_size: total timesteps; overrides ``max_length_time_axis`` when given, as in the
            reference (a warning names the effective capacity when it does not divide
            evenly).

    Returns:
        The queue's pure functions (``init``, ``add``, ``sample``, ``can_sample``,
        ``can_add``) and its configuration.

    Raises:
        BufferConfigError: a size out of range (sequence lengths longer than the time axis).
        ArgumentTypeError: a size that is not an integer.

    Examples:
        >>> import jax.numpy as jnp
        >>> import buffers as fbx
        >>> queue = fbx.make_trajectory_queue(
        ...     max_length_time_axis=8, add_batch_size=2, add_sequence_length=4,
        ...     sample_sequence_length=4)
        >>> state = queue.init({"x": jnp.int32(0)})
        >>> state = queue.add(state, {"x": jnp.arange(8, dtype=jnp.int32).reshape(2, 4)})
        >>> state, batch = queue.sample(state)
        >>> batch.experience["x"].tolist(), bool(queue.can_sample(state))
        ([[0, 1, 2, 3], [4, 5, 6, 7]], False)
    """
    add_batch_size = positive_int("add_batch_size", add_batch_size)
    add_sequence_length = positive_int("add_sequence_length", add_sequence_length)
    sample_sequence_length = positive_int("sample_sequence_length", sample_sequence_length)
    t_len = _queue_time_axis(max_length_time_axis, add_batch_size, max_size, stacklevel=3)
    check(
        sample_sequence_length <= t_len and add_sequence_length <= t_len,
        f"`sample_sequence_length` ({sample_sequence_length}) and `add_sequence_length` "
        f"({add_sequence_length}) must be <= the time axis ({t_len})",
    )
    return TrajectoryQueue(
        init=functools.partial(init, add_batch_size=add_batch_size, max_length_time_axis=t_len),
        add=add,
        sample=functools.partial(sample, sequence_length=sample_sequence_length),
        can_sample=functools.partial(can_sample, sample_sequence_length=sample_sequence_length),
        can_add=functools.partial(can_add, add_sequence_length=add_sequence_length),
        add_batch_size=add_batch_size,
        max_length_time_axis=t_len,
    )


__all__ = [
    "Experience",
    "TrajectoryQueue",
    "TrajectoryQueueSample",
    "TrajectoryQueueState",
    "add",
    "can_add",
    "can_sample",
    "init",
    "make_trajectory_queue",
    "sample",
    "utils",
    "validate_trajectory_queue_args",
]
