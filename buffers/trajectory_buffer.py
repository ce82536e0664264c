"""The core ring buffer: experience ``[B, T, ...]`` written along the time axis.

Every other buffer kind (flat, item, n-step, prioritised, queue) is this buffer with some
functions replaced. The public names follow the reference API (Flashbax) so that code written
for it runs by changing the import.

Sampling before ready
---------------------
``sample`` requires ``can_sample(state)``. Called eagerly (outside ``jit``) on a state that is
not ready it raises :class:`~buffers.NotReadyError`. Inside ``jit`` nothing can be raised, so
every sample carries a ``valid`` mask (``bool[sample_batch_size]``) that is false when the
state was not ready; to get an error instead, add ``checkify.check(sample.valid.all(), ...)``
to your step and run it under ``jax.experimental.checkify.checkify``. (The sample itself adds
no checkify effect: that would cost every jitted call JAX's fast dispatch path.) Samples are
never silently made of unwritten slots.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
from jax import Array

from buffers import _counter
from buffers import utils as utils
from buffers._core import (
    Experience,
    advance_indices,
    check_ring_state,
    check_sample_args,
    empty_ring,
    gather,
    ready_mask,
    sample_windows,
    tree_shape_prefix,
    write_experience,
)
from buffers._core import can_sample as ring_can_sample
from buffers._flashbax_state import accept_reference
from buffers._pytree import Replaceable, derived, frozen_container, pytree_dataclass
from buffers._validation import (
    check_sequence_args,
    positive_int,
    resolve_time_axis,
    validate_batch,
)

if TYPE_CHECKING:
    import chex


@pytree_dataclass
class TrajectoryBufferState(Replaceable, Generic[Experience]):
    """State of a trajectory buffer.

    Attributes:
        experience: pytree whose leaves are ``[add_batch_size, max_length_time_axis, ...]``.
        current_index: next time index to be written (int32 scalar).
        is_full: whether every time index has been written at least once.
        write_counter: timesteps ever added along the time axis, as ``uint32[2]`` (high, low);
            never wraps (see :func:`buffers.timesteps_added`). When a state is built by hand
            without it, it is derived from ``current_index`` and ``is_full`` (the fewest
            timesteps consistent with them: ``current_index``, plus ``T`` when full).
    """

    experience: Experience
    current_index: Array
    is_full: Array
    write_counter: Array = derived(default=None)

    def __post_init__(self) -> None:
        if self.write_counter is None:
            t_len = tree_shape_prefix(self.experience, np.ndim(self.current_index) + 2)[-1]
            counter = _counter.derive(
                lambda xp, index, full: xp.where(full, index + t_len, index),
                self.current_index,
                self.is_full,
            )
            object.__setattr__(self, "write_counter", counter)


@pytree_dataclass
class TrajectoryBufferSample(Replaceable, Generic[Experience]):
    """A batch of sampled sequences.

    Attributes:
        experience: pytree whose leaves are ``[sample_batch_size, L, ...]`` (``L`` the sample
            sequence length).
        valid: ``bool[sample_batch_size]``, false for items drawn from a state that was not
            ready (see the module docstring); every sample the buffers return has it.
    """

    experience: Experience
    valid: Array | None = None


def init(
    experience: Experience, add_batch_size: int, max_length_time_axis: int
) -> TrajectoryBufferState[Experience]:
    """An empty state for timesteps shaped like ``experience`` (one timestep, no batch axis)."""
    return TrajectoryBufferState(**empty_ring(experience, add_batch_size, max_length_time_axis))


def add(state: TrajectoryBufferState[Experience], batch: Experience) -> Any:
    """Append ``batch`` (leaves ``[add_batch_size, L, ...]``, 1 <= L <= T) along time."""
    state = accept_reference(state, "add")
    check_ring_state(state, "add")
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    batch = validate_batch(state.experience, batch, 2, (b_size, "L"), max_time=t_len)
    seq_len = tree_shape_prefix(batch, 2)[1]
    experience = write_experience(state.experience, batch, state.current_index, t_len)
    return state.replace(experience=experience, **advance_indices(state, seq_len, t_len))


def sample(
    state: TrajectoryBufferState[Experience],
    rng_key: chex.PRNGKey,
    batch_size: int,
    sequence_length: int,
    period: int,
    min_length_time_axis: int = 1,
) -> TrajectoryBufferSample[Experience]:
    """Sample ``batch_size`` sequences of ``sequence_length`` uniformly over valid windows.

    Ready once ``min_length_time_axis``, and at least ``sequence_length``, timesteps per row
    were added: a shorter ring has no whole window.
    """
    state = accept_reference(state, "sample")
    check_ring_state(state, "sample")
    check_sample_args(state, rng_key, batch_size, sequence_length)
    ready = can_sample(state, max(int(min_length_time_axis), int(sequence_length)))
    valid = ready_mask(ready, batch_size, "sample")
    rows, times = sample_windows(state, rng_key, batch_size, sequence_length, period)
    return TrajectoryBufferSample(experience=gather(state.experience, rows, times), valid=valid)


BufferState = TypeVar("BufferState", bound=TrajectoryBufferState)
"""The state type a buffer's functions take and return (the reference's type variable)."""
BufferSample = TypeVar("BufferSample", bound=TrajectoryBufferSample)
"""The sample type a buffer's ``sample`` returns (the reference's type variable)."""


def can_sample(state: TrajectoryBufferState[Experience], min_length_time_axis: int) -> Array:
    """Whether at least ``min_length_time_axis`` timesteps per row have been added."""
    return ring_can_sample(accept_reference(state, "can_sample"), min_length_time_axis)


@frozen_container
class TrajectoryBuffer(Replaceable, Generic[Experience, BufferState, BufferSample]):
    """Pure functions of a trajectory buffer, plus its static configuration.

    Made by :func:`make_trajectory_buffer` (and the other ``make_*`` factories, which replace
    some of the functions). The configuration fields are plain Python values for inspection;
    the functions do not read them.

    Attributes:
        init: ``init(timestep) -> state``: an empty state for timesteps shaped like
            ``timestep`` (one timestep, no batch or time axis).
        add: ``add(state, batch) -> state``: append ``batch`` (leaves ``[add_batch_size, L,
            ...]``) along the time axis.
        sample: ``sample(state, rng_key) -> TrajectoryBufferSample``: sequences drawn
            uniformly over the valid windows.
        can_sample: ``can_sample(state) -> bool[]``: whether the state holds enough timesteps.
        add_batch_size: rows ``B`` of the state.
        sample_batch_size: sequences per ``sample`` call.
        max_length_time_axis: time-axis length ``T`` of the state.
        min_length_time_axis: timesteps per row before ``can_sample`` is true.
        sample_sequence_length: length ``L`` of sampled sequences.
        period: distance between the starts of consecutive sampleable sequences.
    """

    init: Callable[..., Any]
    add: Callable[..., Any]
    sample: Callable[..., Any]
    can_sample: Callable[..., Array]
    add_batch_size: int = dataclasses.field(default=0, kw_only=True)
    sample_batch_size: int = dataclasses.field(default=0, kw_only=True)
    max_length_time_axis: int = dataclasses.field(default=0, kw_only=True)
    min_length_time_axis: int = dataclasses.field(default=0, kw_only=True)
    sample_sequence_length: int = dataclasses.field(default=0, kw_only=True)
    period: int = dataclasses.field(default=1, kw_only=True)

    @property
    def capacity(self) -> int:
        """Timesteps the buffer holds: ``add_batch_size * max_length_time_axis``."""
        return self.add_batch_size * self.max_length_time_axis


def validate_size(
    max_length_time_axis: int | None, max_size: int | None, add_batch_size: int
) -> None:
    """Check the capacity arguments as :func:`make_trajectory_buffer` does.

    Args:
        max_length_time_axis: time-axis length ``T``, or ``None`` when ``max_size`` is given.
        max_size: total timesteps, or ``None`` when ``max_length_time_axis`` is given.
        add_batch_size: rows ``B``.

    Raises:
        BufferConfigError: both or neither of the sizes given, a size below 1, or a time axis
            over the limit. Warns with the effective capacity when ``max_size`` is not a
            multiple of ``add_batch_size``.
    """
    add_batch_size = positive_int("add_batch_size", add_batch_size)
    resolve_time_axis(add_batch_size, max_size, max_length_time_axis, stacklevel=2)


def validate_trajectory_buffer_args(
    max_length_time_axis: int | None,
    min_length_time_axis: int,
    add_batch_size: int,
    sample_sequence_length: int,
    period: int,
    max_size: int | None,
) -> None:
    """Check the arguments of :func:`make_trajectory_buffer` without making a buffer.

    Args:
        max_length_time_axis: time-axis length ``T`` (or ``None`` with ``max_size``).
        min_length_time_axis: timesteps per row before sampling.
        add_batch_size: rows ``B``.
        sample_sequence_length: length of sampled sequences.
        period: distance between sampleable sequence starts.
        max_size: total timesteps (or ``None`` with ``max_length_time_axis``).

    Raises:
        BufferConfigError: an argument :func:`make_trajectory_buffer` refuses (e.g. a
            sequence or minimum length longer than the time axis); also
            :class:`~buffers.ArgumentTypeError` for a size that is not an integer.
    """
    add_batch_size = positive_int("add_batch_size", add_batch_size)
    t_len = resolve_time_axis(add_batch_size, max_size, max_length_time_axis, stacklevel=2)
    check_sequence_args(sample_sequence_length, period, min_length_time_axis, t_len)


def make_trajectory_buffer(
    add_batch_size: int,
    sample_batch_size: int,
    sample_sequence_length: int,
    period: int,
    min_length_time_axis: int,
    max_size: int | None = None,
    max_length_time_axis: int | None = None,
) -> TrajectoryBuffer:
    """Make a trajectory buffer (same signature and semantics as the reference's).

    Args:
        add_batch_size: rows ``B`` of the state; batches given to ``add`` are ``[B, L, ...]``.
        sample_batch_size: sequences per ``sample`` call.
        sample_sequence_length: length ``L`` of sampled sequences.
        period: distance between the starts of consecutive sampleable sequences, counted from
            the oldest timestep (1: any overlap; ``L``: no overlap).
        min_length_time_axis: timesteps per row before ``can_sample`` is true (raised to
            ``sample_sequence_length`` if smaller, as in the reference).
        max_size: total timesteps; ``max_length_time_axis = max_size // add_batch_size`` (a
            warning names the effective capacity when it does not divide evenly).
        max_length_time_axis: time-axis length ``T`` (give this or ``max_size``).

    Returns:
        The buffer's pure functions (``init``, ``add``, ``sample``, ``can_sample``) and its
        configuration.

    Raises:
        BufferConfigError: a size out of range (e.g. ``sample_sequence_length`` longer than
            the time axis, or neither ``max_size`` nor ``max_length_time_axis`` given).
        ArgumentTypeError: a size that is not an integer (``2.5``, ``True``).

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> import buffers as fbx
        >>> buffer = fbx.make_trajectory_buffer(
        ...     add_batch_size=2, sample_batch_size=4, sample_sequence_length=3, period=1,
        ...     min_length_time_axis=3, max_length_time_axis=16)
        >>> buffer = buffer.replace(add=jax.jit(buffer.add), sample=jax.jit(buffer.sample))
        >>> state = buffer.init({"obs": jnp.zeros(2), "reward": jnp.float32(0)})
        >>> state = buffer.add(state, {"obs": jnp.ones((2, 5, 2)), "reward": jnp.ones((2, 5))})
        >>> batch = buffer.sample(state, jax.random.key(0))
        >>> batch.experience["obs"].shape, bool(batch.valid.all())
        ((4, 3, 2), True)
    """
    add_batch_size = positive_int("add_batch_size", add_batch_size)
    sample_batch_size = positive_int("sample_batch_size", sample_batch_size)
    t_len = resolve_time_axis(add_batch_size, max_size, max_length_time_axis, stacklevel=2)
    min_len = check_sequence_args(sample_sequence_length, period, min_length_time_axis, t_len)
    sample_sequence_length, period = int(sample_sequence_length), int(period)
    return TrajectoryBuffer(
        init=functools.partial(init, add_batch_size=add_batch_size, max_length_time_axis=t_len),
        add=add,
        sample=functools.partial(
            sample,
            batch_size=sample_batch_size,
            sequence_length=sample_sequence_length,
            period=period,
            min_length_time_axis=min_len,
        ),
        can_sample=functools.partial(can_sample, min_length_time_axis=min_len),
        add_batch_size=add_batch_size,
        sample_batch_size=sample_batch_size,
        max_length_time_axis=t_len,
        min_length_time_axis=min_len,
        sample_sequence_length=sample_sequence_length,
        period=period,
    )


__all__ = [
    "BufferSample",
    "BufferState",
    "Experience",
    "TrajectoryBuffer",
    "TrajectoryBufferSample",
    "TrajectoryBufferState",
    "add",
    "can_sample",
    "init",
    "make_trajectory_buffer",
    "sample",
    "validate_size",
    "validate_trajectory_buffer_args",
]
