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
import warnings
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import chex
import jax
import jax.numpy as jnp
from jax import Array

from buffers import _counter
from buffers._errors import NotReadyError
from buffers._pytree import frozen_container, pytree_dataclass
from buffers._validation import (
    check,
    check_timestep,
    positive_int,
    validate_batch,
)

Experience = TypeVar("Experience", bound=chex.ArrayTree)


@pytree_dataclass
class TrajectoryBufferState(Generic[Experience]):
    """State of a trajectory buffer.

    Attributes:
        experience: pytree whose leaves are ``[add_batch_size, max_length_time_axis, ...]``.
        current_index: next time index to be written (int32 scalar).
        is_full: whether every time index has been written at least once.
        write_counter: timesteps ever added along the time axis, as ``uint32[2]`` (high, low);
            never wraps (see :func:`buffers.timesteps_added`). When a state is built by hand
            without it, it is derived from ``current_index`` and ``is_full``.
    """

    experience: Experience
    current_index: Array
    is_full: Array
    write_counter: Array = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.write_counter is None:
            object.__setattr__(self, "write_counter", _derive_counter(self))


def _derive_counter(state: Any) -> Array:
    current = jnp.asarray(state.current_index)
    leaf = jax.tree_util.tree_leaves(state.experience)[0]
    t_len = leaf.shape[current.ndim + 1]
    count = jnp.where(jnp.asarray(state.is_full), current + t_len, current)
    return _counter.advance(jnp.zeros((*current.shape, 2), jnp.uint32), count)


@pytree_dataclass
class TrajectoryBufferSample(Generic[Experience]):
    """A batch of sequences: ``experience`` leaves are ``[sample_batch_size, L, ...]``.

    ``valid`` (``bool[sample_batch_size]``) is false for items drawn from a state that was not
    ready (see the module docstring).
    """

    experience: Experience
    valid: Array = None  # type: ignore[assignment]


def tree_shape_prefix(tree: Any, n_axes: int = 1) -> tuple[int, ...]:
    """The leading ``n_axes`` sizes shared by every leaf of ``tree``."""
    leaves = jax.tree_util.tree_leaves(tree)
    return tuple(leaves[0].shape[:n_axes])


def is_tracing(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def init(
    experience: Experience, add_batch_size: int, max_length_time_axis: int
) -> TrajectoryBufferState[Experience]:
    """An empty state for timesteps shaped like ``experience`` (one timestep, no batch axis)."""
    experience = check_timestep(experience)
    stacked = jax.tree.map(
        lambda x: jnp.zeros((add_batch_size, max_length_time_axis, *x.shape), x.dtype),
        experience,
    )
    return TrajectoryBufferState(
        experience=stacked,
        current_index=jnp.array(0, dtype=jnp.int32),
        is_full=jnp.array(False),
        write_counter=_counter.zero(),
    )


def write_experience(experience: Any, batch: Any, current_index: Array, t_len: int) -> Any:
    """Write ``batch`` (``[B, L, ...]``) into ``experience`` at ``current_index``, wrapping."""
    seq_len = tree_shape_prefix(batch, 2)[1]
    if seq_len == 1:
        return jax.tree.map(
            lambda buf, new: jax.lax.dynamic_update_slice_in_dim(buf, new, current_index, 1),
            experience,
            batch,
        )
    indices = (current_index + jnp.arange(seq_len, dtype=jnp.int32)) % t_len
    return jax.tree.map(
        lambda buf, new: buf.at[:, indices].set(new, unique_indices=True), experience, batch
    )


def advance_indices(state: Any, seq_len: int, t_len: int) -> dict[str, Array]:
    new_index = state.current_index + seq_len
    return {
        "current_index": (new_index % t_len).astype(jnp.int32),
        "is_full": state.is_full | (new_index >= t_len),
        "write_counter": _counter.advance(state.write_counter, seq_len),
    }


def add(state: TrajectoryBufferState[Experience], batch: Experience) -> Any:
    """Append ``batch`` (leaves ``[add_batch_size, L, ...]``, 1 <= L <= T) along time."""
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    batch = validate_batch(state.experience, batch, 2, (b_size, "L"), max_time=t_len)
    seq_len = tree_shape_prefix(batch, 2)[1]
    experience = write_experience(state.experience, batch, state.current_index, t_len)
    return state.replace(  # type: ignore[attr-defined]
        experience=experience, **advance_indices(state, seq_len, t_len)
    )


def can_sample(state: TrajectoryBufferState[Experience], min_length_time_axis: int) -> Array:
    """Whether at least ``min_length_time_axis`` timesteps per row have been added."""
    return state.is_full | (state.current_index >= min_length_time_axis)


def ready_mask(ready: Array, batch_size: int, what: str) -> Array:
    """Raise eagerly if not ready; return the ``valid`` mask (false when not ready)."""
    if not is_tracing(ready) and not bool(ready):
        raise NotReadyError(
            f"{what}: the buffer cannot be sampled yet (`can_sample(state)` is false). "
            "Add more experience first, or check `can_sample` before sampling."
        )
    return jnp.broadcast_to(ready, (batch_size,))


def sample_windows(
    state: Any, rng_key: chex.PRNGKey, batch_size: int, sequence_length: int, period: int
) -> tuple[Array, Array]:
    """Draw ``(rows, time_indices[batch, L])`` uniformly over rows and valid window starts.

    Window starts are ``period`` apart, counted from the oldest timestep, so a window never
    straddles the write position and never includes unwritten slots.
    """
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    max_time = jnp.where(state.is_full, t_len, state.current_index)
    head = jnp.where(state.is_full, state.current_index, 0)
    max_start = max_time - sequence_length
    num_items = jnp.where(max_start >= 0, max_start // period + 1, 0)
    key_items, key_rows = jax.random.split(rng_key)
    items = jax.random.randint(key_items, (batch_size,), 0, jnp.maximum(num_items, 1))
    rows = jax.random.randint(key_rows, (batch_size,), 0, b_size)
    starts = (head + items * period) % t_len
    times = (starts[:, None] + jnp.arange(sequence_length)) % t_len
    return rows, times


def gather(experience: Any, rows: Array, times: Array) -> Any:
    return jax.tree.map(lambda x: x[rows[:, None], times], experience)


def sample(
    state: TrajectoryBufferState[Experience],
    rng_key: chex.PRNGKey,
    batch_size: int,
    sequence_length: int,
    period: int,
    min_length_time_axis: int = 1,
) -> TrajectoryBufferSample[Experience]:
    """Sample ``batch_size`` sequences of ``sequence_length`` uniformly over valid windows."""
    valid = ready_mask(can_sample(state, min_length_time_axis), batch_size, "sample")
    rows, times = sample_windows(state, rng_key, batch_size, sequence_length, period)
    return TrajectoryBufferSample(experience=gather(state.experience, rows, times), valid=valid)


@frozen_container
class TrajectoryBuffer(Generic[Experience]):
    """Pure functions of a trajectory buffer, plus its static configuration.

    ``init(timestep)``, ``add(state, batch)``, ``sample(state, key)``, ``can_sample(state)``.
    The configuration fields (``add_batch_size``, ``max_length_time_axis``, ``capacity`` ...)
    are plain Python values for inspection; they are not used by the functions.
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


def resolve_time_axis(
    add_batch_size: int, max_size: int | None, max_length_time_axis: int | None, stacklevel: int
) -> int:
    """``max_length_time_axis`` from exactly one of ``max_size`` / ``max_length_time_axis``."""
    check(
        (max_size is None) != (max_length_time_axis is None),
        "give exactly one of `max_size` and `max_length_time_axis`, got "
        f"max_size={max_size!r}, max_length_time_axis={max_length_time_axis!r}",
    )
    if max_length_time_axis is not None:
        return positive_int("max_length_time_axis", max_length_time_axis)
    max_size = positive_int("max_size", max_size)
    t_len = max_size // add_batch_size
    check(
        t_len >= 1,
        f"`max_size` ({max_size}) must be at least `add_batch_size` ({add_batch_size})",
    )
    if t_len * add_batch_size != max_size:
        warnings.warn(
            f"max_size={max_size} is not a multiple of add_batch_size={add_batch_size}: the "
            f"buffer holds {t_len * add_batch_size} timesteps ({add_batch_size} rows x "
            f"{t_len}), {max_size - t_len * add_batch_size} fewer than asked. See "
            "`buffer.capacity`.",
            stacklevel=stacklevel + 1,
        )
    return t_len


def check_sequence_args(
    sample_sequence_length: int, period: int, min_length_time_axis: int, t_len: int
) -> int:
    """Validate sequence arguments; return the effective minimum length (>= sequence length)."""
    positive_int("sample_sequence_length", sample_sequence_length)
    positive_int("period", period)
    positive_int("min_length_time_axis", min_length_time_axis, allow_zero=True)
    check(
        sample_sequence_length <= t_len,
        f"`sample_sequence_length` ({sample_sequence_length}) must be <= "
        f"`max_length_time_axis` ({t_len})",
    )
    check(
        min_length_time_axis <= t_len,
        f"`min_length_time_axis` ({min_length_time_axis}) must be <= "
        f"`max_length_time_axis` ({t_len})",
    )
    return max(min_length_time_axis, sample_sequence_length)


def make_trajectory_buffer(
    add_batch_size: int,
    sample_batch_size: int,
    sample_sequence_length: int,
    period: int,
    min_length_time_axis: int,
    max_size: int | None = None,
    max_length_time_axis: int | None = None,
) -> TrajectoryBuffer:
    """A trajectory buffer (same signature and semantics as the reference's).

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
    """
    add_batch_size = positive_int("add_batch_size", add_batch_size)
    sample_batch_size = positive_int("sample_batch_size", sample_batch_size)
    t_len = resolve_time_axis(add_batch_size, max_size, max_length_time_axis, stacklevel=2)
    min_len = check_sequence_args(sample_sequence_length, period, min_length_time_axis, t_len)
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
