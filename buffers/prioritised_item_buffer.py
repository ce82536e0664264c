"""Prioritised item buffer: independent items sampled in proportion to priority."""

from __future__ import annotations

import dataclasses
import functools

from buffers import utils as utils
from buffers._core import Experience
from buffers._validation import check_priority_exponent
from buffers.item_buffer import item_add, item_sample, validate_item_buffer_args
from buffers.prioritised_trajectory_buffer import (
    PrioritisedTrajectoryBuffer,
    PrioritisedTrajectoryBufferSample,
    PrioritisedTrajectoryBufferState,
    check_device,
    make_prioritised_trajectory_buffer,
    validate_device,
    validate_priority_exponent,
)
from buffers.utils import add_dim_to_args


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
    """Make a prioritised item buffer (same signature and semantics as the reference's).

    Samples are ``PrioritisedTrajectoryBufferSample(experience, indices, probabilities)`` with
    ``[sample_batch_size, ...]`` leaves. ``reference_exact=True`` reproduces Flashbax 0.1.3's
    prioritised draws bit for bit (see :func:`buffers.make_prioritised_trajectory_buffer`).

    Args:
        max_length: items the buffer holds.
        min_length: items to hold before ``can_sample`` is true.
        sample_batch_size: items per ``sample`` call.
        add_sequences: ``add`` takes a leading axis of items.
        add_batches: ``add`` takes a leading axis of items (with ``add_sequences`` too: two
            axes, folded into one).
        priority_exponent: alpha of the PER paper, in [0, 1].
        device: ``"cpu"`` updates the sum tree leaf by leaf where JAX's backend is the CPU;
            ``"gpu"``/``"tpu"``, or any ``device`` traced for an accelerator backend, level by
            level (the same tree). Another name warns and means ``"cpu"``, as the reference's
            does.
        reference_exact: reproduce Flashbax 0.1.3's prioritised draws bit for bit (opt-in).

    Returns:
        The buffer's pure functions, ``set_priorities`` among them, and its configuration.

    Raises:
        BufferConfigError: a size out of range, or a ``priority_exponent`` outside [0, 1].
        ArgumentTypeError: a size that is not an integer, or a flag that is not a bool.
    """
    validate_item_buffer_args(max_length, min_length, sample_batch_size)
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


create_prioritised_item_buffer = make_prioritised_item_buffer
"""The reference's name for the function behind :func:`make_prioritised_item_buffer`."""

__all__ = [
    "Experience",
    "PrioritisedTrajectoryBuffer",
    "PrioritisedTrajectoryBufferSample",
    "PrioritisedTrajectoryBufferState",
    "add_dim_to_args",
    "create_prioritised_item_buffer",
    "make_prioritised_item_buffer",
    "make_prioritised_trajectory_buffer",
    "utils",
    "validate_device",
    "validate_item_buffer_args",
    "validate_priority_exponent",
]
