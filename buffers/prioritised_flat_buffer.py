"""Prioritised flat buffer: transitions sampled in proportion to priority."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from buffers._pytree import pytree_dataclass
from buffers._validation import check_priority_exponent
from buffers.flat_buffer import (
    ExperiencePair,
    TransitionSample,
    make_sequence_view,
    pair_from_sequences,
    validate_flat_buffer_args,
)
from buffers.prioritised_trajectory_buffer import (
    Indices,
    PrioritisedTrajectoryBuffer,
    PrioritisedTrajectoryBufferState,
    Probabilities,
    check_device,
    make_prioritised_trajectory_buffer,
    validate_device,
    validate_priority_exponent,
)
from buffers.utils import add_dim_to_args

if TYPE_CHECKING:
    import chex


@pytree_dataclass
class PrioritisedTransitionSample(TransitionSample):
    """A :class:`TransitionSample` with its items and sampling probabilities.

    Attributes:
        indices: the sampled items, to give back to ``set_priorities``.
        probabilities: each item's normalised sampling probability.
    """

    indices: Indices | None = dataclasses.field(default=None, kw_only=True)
    probabilities: Probabilities | None = dataclasses.field(default=None, kw_only=True)


def prioritised_transition_sample(
    state: Any, rng_key: chex.PRNGKey, *, core_sample: Callable[[Any, Any], Any]
) -> PrioritisedTransitionSample:
    """Sample windows of two timesteps with ``core_sample``; return them as transitions."""
    seq = core_sample(state, rng_key)
    return PrioritisedTransitionSample(
        experience=pair_from_sequences(seq.experience),
        valid=seq.valid,
        indices=seq.indices,
        probabilities=seq.probabilities,
    )


def make_prioritised_flat_buffer(
    max_length: int,
    min_length: int,
    sample_batch_size: int,
    add_sequences: bool = False,
    add_batch_size: int | None = None,
    priority_exponent: float = 0.6,
    device: str = "cpu",
    reference_exact: bool = False,
) -> PrioritisedTrajectoryBuffer:
    """Make a prioritised flat buffer (same signature and semantics as the reference's).

    ``reference_exact=True`` reproduces Flashbax 0.1.3's prioritised draws bit for bit (see
    :func:`buffers.make_prioritised_trajectory_buffer` and the guide "Same draws as Flashbax").

    Transitions ``(s_t, s_{t+1})`` laid out as in :func:`buffers.make_flat_buffer`, sampled in
    proportion to their priorities.

    Args:
        max_length: timesteps the buffer holds in all.
        min_length: sets when ``can_sample`` becomes true (as in the reference): once every
            row holds ``min_length // rows + 1`` timesteps (``rows``: ``add_batch_size``, 1
            when ``None``), and at least 2 (one transition). With one row that is
            ``min_length + 1`` timesteps.
        sample_batch_size: transitions per ``sample`` call.
        add_sequences: ``add`` takes a time axis rather than one timestep.
        add_batch_size: rows added per ``add`` call (``None``: one timestep, no batch axis).
        priority_exponent: alpha of the PER paper, in [0, 1].
        device: ``"cpu"`` updates the sum tree leaf by leaf where JAX's backend is the CPU;
            ``"gpu"``/``"tpu"``, or any ``device`` traced for an accelerator backend, level by
            level (the same tree). Another name warns and means ``"cpu"``, as the reference's
            does.
        reference_exact: reproduce Flashbax 0.1.3's prioritised draws bit for bit (opt-in).

    Returns:
        The buffer's pure functions, ``set_priorities`` among them, and its configuration;
        ``sample`` returns a :class:`PrioritisedTransitionSample`.

    Raises:
        BufferConfigError: a size out of range, or a ``priority_exponent`` outside [0, 1].
        ArgumentTypeError: a size that is not an integer, or a flag that is not a bool.
    """
    priority_exponent = check_priority_exponent(priority_exponent)
    core, add = make_sequence_view(
        max_length,
        min_length,
        sample_batch_size,
        add_sequences,
        add_batch_size,
        2,
        make=make_prioritised_trajectory_buffer,
        priority_exponent=priority_exponent,
        device=check_device(device),
        reference_exact=reference_exact,
    )
    return dataclasses.replace(
        core,
        add=add,
        sample=functools.partial(prioritised_transition_sample, core_sample=core.sample),
    )


__all__ = [
    "ExperiencePair",
    "Indices",
    "PrioritisedTrajectoryBuffer",
    "PrioritisedTrajectoryBufferState",
    "PrioritisedTransitionSample",
    "Probabilities",
    "TransitionSample",
    "add_dim_to_args",
    "make_prioritised_flat_buffer",
    "make_prioritised_trajectory_buffer",
    "validate_device",
    "validate_flat_buffer_args",
    "validate_priority_exponent",
]
