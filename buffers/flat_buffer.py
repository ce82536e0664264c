"""Flat buffer: transitions ``(s_t, s_{t+1})`` drawn from a trajectory buffer of length 2."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, NamedTuple

import jax

from buffers._core import Experience
from buffers._layout import layout_add
from buffers._pytree import Replaceable, pytree_dataclass
from buffers._validation import check, check_bool, check_time_axis, positive_int
from buffers.trajectory_buffer import (
    TrajectoryBuffer,
    TrajectoryBufferState,
    make_trajectory_buffer,
)
from buffers.utils import add_dim_to_args

if TYPE_CHECKING:
    import chex


class ExperiencePair(NamedTuple, Generic[Experience]):
    """A transition: two timesteps of the same row.

    Attributes:
        first: the timestep at ``t``.
        second: the timestep at ``t + 1`` (``t + n`` for an n-step buffer).
    """

    first: Experience
    second: Experience


@pytree_dataclass
class TransitionSample(Replaceable, Generic[Experience]):
    """A batch of sampled transitions.

    Attributes:
        experience: an :class:`ExperiencePair` whose leaves are ``[sample_batch_size, ...]``.
        valid: ``bool[sample_batch_size]``, false for items sampled from a state that was not
            ready.
    """

    experience: ExperiencePair[Experience]
    valid: Any = None


def pair_from_sequences(sequences: Any) -> ExperiencePair:
    """First and last timestep of every sampled sequence ``[batch, L, ...]``."""
    return ExperiencePair(
        first=jax.tree.map(lambda x: x[:, 0], sequences),
        second=jax.tree.map(lambda x: x[:, -1], sequences),
    )


def transition_sample(
    state: Any,
    rng_key: chex.PRNGKey,
    *,
    core_sample: Callable[[Any, Any], Any],
    transform: Callable[[Any], Any] | None = None,
) -> TransitionSample:
    """Sample sequences with ``core_sample`` and return their first/last timesteps."""
    seq = core_sample(state, rng_key)
    experience = seq.experience if transform is None else transform(seq.experience)
    return TransitionSample(experience=pair_from_sequences(experience), valid=seq.valid)


def validate_sample_batch_size(sample_batch_size: int, max_length: int) -> None:
    """Check that a sample can be drawn: ``sample_batch_size <= max_length``.

    Raises:
        BufferConfigError: it is larger (or either is not a positive integer).
    """
    sample_batch_size = positive_int("sample_batch_size", sample_batch_size)
    max_length = positive_int("max_length", max_length)
    check(
        sample_batch_size <= max_length,
        f"`sample_batch_size` ({sample_batch_size}) must be <= `max_length` ({max_length})",
    )


def validate_min_length(min_length: int, add_batch_size: int | None, max_length: int) -> None:
    """Check that ``min_length`` fits the buffer's rows.

    The ``min_length // add_batch_size + 1`` timesteps per row it needs must fit rows of
    ``max_length // add_batch_size`` (``None`` rows: 1).

    Raises:
        BufferConfigError: it does not fit.
    """
    rows = _rows(add_batch_size)
    min_length = positive_int("min_length", min_length, allow_zero=True)
    t_len = positive_int("max_length", max_length) // rows
    min_time = min_length // rows + 1
    check(
        min_time <= t_len,
        f"`min_length` ({min_length}) is too large: it needs {min_time} timesteps per row but "
        f"rows hold {t_len}",
    )


def validate_max_length_add_batch_size(max_length: int, add_batch_size: int | None) -> None:
    """Check that rows hold a transition: ``max_length // add_batch_size >= 2``.

    Raises:
        BufferConfigError: they do not, or rows would exceed the time-axis limit.
    """
    rows = _rows(add_batch_size)
    max_length = positive_int("max_length", max_length)
    t_len = max_length // rows
    check(
        t_len >= 2,
        f"`max_length // add_batch_size` must be >= 2, got {max_length}//{rows} = {t_len}",
    )
    check_time_axis(t_len, f"`max_length` ({max_length}) // `add_batch_size` ({rows})")


def validate_flat_buffer_args(
    max_length: int, min_length: int, sample_batch_size: int, add_batch_size: int | None
) -> None:
    """Check the arguments of :func:`make_flat_buffer` without making a buffer.

    Raises:
        BufferConfigError: an argument :func:`make_flat_buffer` refuses
            (:class:`~buffers.ArgumentTypeError` for one that is not an integer).
    """
    validate_sample_batch_size(sample_batch_size, max_length)
    validate_max_length_add_batch_size(max_length, add_batch_size)
    validate_min_length(min_length, add_batch_size, max_length)


def _rows(add_batch_size: int | None) -> int:
    return 1 if add_batch_size is None else positive_int("add_batch_size", add_batch_size)


def flat_layout_args(
    max_length: int, min_length: int, sample_batch_size: int, add_batch_size: int | None
) -> tuple[int, bool, int, int]:
    """Validate flat-buffer sizes; return ``(rows, add_batches, time_axis, min_time)``."""
    max_length = positive_int("max_length", max_length)
    min_length = positive_int("min_length", min_length, allow_zero=True)
    rows = _rows(add_batch_size)
    validate_sample_batch_size(sample_batch_size, max_length)
    validate_max_length_add_batch_size(max_length, rows)
    t_len = max_length // rows
    if t_len * rows != max_length:
        warnings.warn(
            f"max_length={max_length} is not a multiple of add_batch_size={rows}: the buffer "
            f"holds {t_len * rows} timesteps ({rows} rows x {t_len}), "
            f"{max_length - t_len * rows} fewer than asked. See `buffer.capacity`.",
            stacklevel=4,
        )
    validate_min_length(min_length, rows, max_length)
    return rows, add_batch_size is not None, t_len, min_length // rows + 1


def make_sequence_view(
    max_length: int,
    min_length: int,
    sample_batch_size: int,
    add_sequences: bool,
    add_batch_size: int | None,
    sequence_length: int,
    make: Callable[..., Any] = make_trajectory_buffer,
    **make_kwargs: Any,
) -> tuple[Any, Callable[..., Any]]:
    """A core buffer for windows of ``sequence_length`` plus an ``add`` in the user's layout."""
    add_sequences = check_bool("add_sequences", add_sequences)
    rows, add_batches, t_len, min_time = flat_layout_args(
        max_length, min_length, sample_batch_size, add_batch_size
    )
    check(
        sequence_length <= t_len,
        f"sequences of {sequence_length} timesteps need rows of at least that length, got "
        f"max_length // add_batch_size = {t_len}",
    )
    core = make(
        rows,
        sample_batch_size,
        sequence_length,
        1,
        min_time,
        max_length_time_axis=t_len,
        **make_kwargs,
    )
    add = functools.partial(
        layout_add,
        core_add=core.add,
        add_batches=add_batches,
        add_sequences=add_sequences,
        batch_size=rows,
        sample_sequence_length=sequence_length,
    )
    return core, add


def make_flat_buffer(
    max_length: int,
    min_length: int,
    sample_batch_size: int,
    add_sequences: bool = False,
    add_batch_size: int | None = None,
) -> TrajectoryBuffer:
    """Make a flat transition buffer (same signature and semantics as the reference's).

    ``add`` takes one timestep (default), ``[add_batch_size, ...]`` when ``add_batch_size`` is
    given, with a time axis after it when ``add_sequences``. ``sample`` returns
    ``TransitionSample(experience=ExperiencePair(first, second))``. The state keeps
    ``add_batch_size`` rows of ``max_length // add_batch_size`` timesteps.

    Args:
        max_length: timesteps the buffer holds in all (a warning names the effective capacity
            when ``add_batch_size`` does not divide it).
        min_length: sets when ``can_sample`` becomes true (as in the reference): once every
            row holds ``min_length // rows + 1`` timesteps (``rows``: ``add_batch_size``, 1
            when ``None``), and at least 2 (one transition). With one row that is
            ``min_length + 1`` timesteps: ``min_length=4`` needs 5 ``add`` calls.
        sample_batch_size: transitions per ``sample`` call.
        add_sequences: ``add`` takes a time axis (``[..., L, ...]``) rather than one timestep.
        add_batch_size: rows added per ``add`` call (``None``: one timestep, no batch axis).

    Returns:
        The buffer's pure functions (``init``, ``add``, ``sample``, ``can_sample``) and its
        configuration.

    Raises:
        BufferConfigError: a size out of range (``sample_batch_size`` above ``max_length``,
            rows shorter than 2 timesteps, ``min_length // rows + 1`` more than the rows
            hold).
        ArgumentTypeError: a size that is not an integer, or a flag that is not a bool.

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> import buffers as fbx
        >>> buffer = fbx.make_flat_buffer(max_length=100, min_length=4, sample_batch_size=8)
        >>> buffer = buffer.replace(add=jax.jit(buffer.add), sample=jax.jit(buffer.sample))
        >>> state = buffer.init({"obs": jnp.float32(0)})
        >>> for i in range(6):
        ...     state = buffer.add(state, {"obs": jnp.float32(i)})
        >>> pair = buffer.sample(state, jax.random.key(0)).experience
        >>> bool(((pair.second["obs"] - pair.first["obs"]) == 1).all())
        True
    """
    core, add = make_sequence_view(
        max_length, min_length, sample_batch_size, add_sequences, add_batch_size, 2
    )
    return dataclasses.replace(
        core, add=add, sample=functools.partial(transition_sample, core_sample=core.sample)
    )


create_flat_buffer = make_flat_buffer
"""The reference's name for the function behind :func:`make_flat_buffer` (the same here)."""

__all__ = [
    "ExperiencePair",
    "TrajectoryBuffer",
    "TrajectoryBufferState",
    "TransitionSample",
    "add_dim_to_args",
    "create_flat_buffer",
    "make_flat_buffer",
    "make_trajectory_buffer",
    "validate_flat_buffer_args",
    "validate_max_length_add_batch_size",
    "validate_min_length",
    "validate_sample_batch_size",
]
