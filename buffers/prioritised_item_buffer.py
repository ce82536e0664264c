"""Prioritised item buffer: independent items sampled in proportion to priority."""

from __future__ import annotations

import dataclasses
import functools

from buffers._validation import check_priority_exponent
from buffers.item_buffer import item_add, item_layout_args, item_sample
from buffers.prioritised_trajectory_buffer import (
    PrioritisedTrajectoryBuffer,
    check_device,
    make_prioritised_trajectory_buffer,
)


def make_prioritised_item_buffer(
    max_length: int,
    min_length: int,
    sample_batch_size: int,
    add_sequences: bool = False,
    add_batches: bool = False,
    priority_exponent: float = 0.6,
    device: str = "cpu",
    reference_exact: bool = False,
) -> PrioritisedTrajectoryBuffer:
    """A prioritised item buffer (same signature and semantics as the reference's).

    Samples are ``PrioritisedTrajectoryBufferSample(experience, indices, probabilities)`` with
    ``[sample_batch_size, ...]`` leaves. ``reference_exact=True`` reproduces Flashbax 0.1.3's
    prioritised draws bit for bit (see :func:`buffers.make_prioritised_trajectory_buffer`).
    """
    item_layout_args(max_length, min_length, sample_batch_size)
    priority_exponent = check_priority_exponent(priority_exponent)
    core = make_prioritised_trajectory_buffer(
        1,
        sample_batch_size,
        1,
        1,
        min_length,
        None,
        max_length,
        priority_exponent=priority_exponent,
        device=check_device(device),
        reference_exact=reference_exact,
    )
    return dataclasses.replace(
        core,
        add=item_add(add_sequences, add_batches, core.add),
        sample=functools.partial(item_sample, core_sample=core.sample),
    )
