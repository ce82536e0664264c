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
)
from buffers.prioritised_trajectory_buffer import (
    Indices,
    PrioritisedTrajectoryBuffer,
    Probabilities,
    check_device,
    make_prioritised_trajectory_buffer,
)

if TYPE_CHECKING:
    import chex


@pytree_dataclass
class PrioritisedTransitionSample(TransitionSample):
    """A :class:`TransitionSample` with item ``indices`` and normalised ``probabilities``."""

    indices: Indices | None = dataclasses.field(default=None, kw_only=True)
    probabilities: Probabilities | None = dataclasses.field(default=None, kw_only=True)


def prioritised_transition_sample(
    state: Any, rng_key: chex.PRNGKey, *, core_sample: Callable[[Any, Any], Any]
) -> PrioritisedTransitionSample:
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
    """A prioritised flat buffer (same signature and semantics as the reference's).

    ``reference_exact=True`` reproduces Flashbax 0.1.3's prioritised draws bit for bit (see
    :func:`buffers.make_prioritised_trajectory_buffer` and ``docs/guides/reference-exact.md``).
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


__all__ = ["ExperiencePair", "PrioritisedTransitionSample", "make_prioritised_flat_buffer"]
