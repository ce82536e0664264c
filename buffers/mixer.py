"""Mixer: one batch drawn from several buffers in fixed proportions."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import jax
import jax.numpy as jnp
from jax import Array

from buffers._errors import ArgumentTypeError, BatchStructureError, LeafMismatch
from buffers._pytree import Replaceable, frozen_container
from buffers._validation import (
    as_list,
    check,
    check_key,
    describe,
    dtype_name,
    leaves_with_paths,
    positive_int,
    real_number,
)
from buffers.flat_buffer import TransitionSample
from buffers.prioritised_trajectory_buffer import (
    PrioritisedTrajectoryBuffer,
    PrioritisedTrajectoryBufferSample,
    PrioritisedTrajectoryBufferState,
)
from buffers.trajectory_buffer import (
    TrajectoryBuffer,
    TrajectoryBufferSample,
    TrajectoryBufferState,
)

if TYPE_CHECKING:
    import chex


sample_types = [TrajectoryBufferSample, PrioritisedTrajectoryBufferSample, TransitionSample]
"""The sample types a mixer concatenates (the reference's list)."""
SampleTypes = TypeVar(
    "SampleTypes", TrajectoryBufferSample, PrioritisedTrajectoryBufferSample, TransitionSample
)
state_types = [TrajectoryBufferState, PrioritisedTrajectoryBufferState]
"""The state types a mixer samples from (the reference's list)."""
StateTypes = TypeVar("StateTypes", TrajectoryBufferState, PrioritisedTrajectoryBufferState)
BufferTypes = TypeVar("BufferTypes", TrajectoryBuffer, PrioritisedTrajectoryBuffer)


@frozen_container
class Mixer(Replaceable):
    """One batch drawn from several buffers in fixed proportions.

    Attributes:
        sample: ``sample(states, rng_key)``: each buffer's share of the batch from its state
            (``states`` in the order of the buffers), concatenated along the batch axis.
        can_sample: ``can_sample(states) -> bool[]``: whether every buffer can sample.
        batch_sizes: each buffer's share of the batch.
    """

    sample: Callable[..., Any]
    can_sample: Callable[..., Array]
    batch_sizes: tuple[int, ...] = ()


def split_batch(sample_batch_size: int, proportions: Sequence[float]) -> tuple[int, ...]:
    """Integer shares of ``sample_batch_size`` (largest remainders get the leftovers)."""
    total = float(sum(proportions))
    exact = [sample_batch_size * p / total for p in proportions]
    sizes = [int(x) for x in exact]
    order = sorted(range(len(exact)), key=lambda i: exact[i] - sizes[i], reverse=True)
    for i in order[: sample_batch_size - sum(sizes)]:
        sizes[i] += 1
    return tuple(sizes)


def sample_mixer_fn(
    states: Sequence[Any],
    key: chex.PRNGKey,
    prop_batch_sizes: Sequence[int],
    sample_fns: Sequence[Callable[[Any, Any], Any]],
) -> Any:
    """Sample each buffer, keep its share of the batch, concatenate along the batch axis.

    A mixer's ``sample`` is this function with ``prop_batch_sizes`` and ``sample_fns`` bound.

    Args:
        states: one state per buffer.
        key: PRNG key; split into one key per buffer, as the reference splits it.
        prop_batch_sizes: items kept from each buffer's sample (its share).
        sample_fns: each buffer's ``sample``.

    Returns:
        The samples' first ``prop_batch_sizes[i]`` items, concatenated in buffer order.

    Raises:
        BufferConfigError: not one state per buffer.
        BatchStructureError: the buffers' samples differ in structure or item shape.
    """
    states = _check_states(states, len(sample_fns), "Mixer.sample")
    check_key(key, "Mixer.sample")
    keys = jax.random.split(key, len(sample_fns))
    parts = [
        (i, jax.tree.map(lambda x, n=n: x[:n], fn(state, k)))
        for i, (fn, state, k, n) in enumerate(
            zip(sample_fns, states, keys, prop_batch_sizes, strict=True)
        )
        if n > 0
    ]
    _check_same_samples(parts)
    return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *(p for _, p in parts))


def _check_states(states: Any, n_buffers: int, what: str) -> list[Any]:
    states = as_list("states", states)
    check(
        len(states) == n_buffers,
        f"{what}: got {len(states)} states for {n_buffers} buffers: pass one state per "
        "buffer, in the order of `buffers`",
    )
    return states


def _check_same_samples(parts: Sequence[tuple[int, Any]]) -> None:
    """Every buffer's sample must have the first one's structure and per-item shapes."""
    first_i, first = parts[0]
    want = leaves_with_paths(first, "sample")
    want_def: Any = jax.tree_util.tree_structure(first)
    found: list[LeafMismatch] = []
    for i, part in parts[1:]:
        if jax.tree_util.tree_structure(part) != want_def:
            found.append(
                LeafMismatch(
                    f"buffer {i}", f"structure {want_def}", f"{jax.tree_util.tree_structure(part)}"
                )
            )
            continue
        for (path, a), (_, b) in zip(want, leaves_with_paths(part, "sample"), strict=True):
            if a.shape[1:] != b.shape[1:] or a.dtype != b.dtype:
                found.append(
                    LeafMismatch(
                        f"buffer {i}: {path}",
                        f"[n{''.join(f', {d}' for d in a.shape[1:])}] {dtype_name(a.dtype)} "
                        f"(as buffer {first_i})",
                        f"[n{''.join(f', {d}' for d in b.shape[1:])}] {dtype_name(b.dtype)}",
                    )
                )
    if found:
        raise BatchStructureError(
            "Mixer.sample: the buffers' samples differ",
            found,
            "Mix buffers of the same kind, sample sequence length and timestep structure.",
        )


def can_sample_mixer_fn(
    states: Sequence[Any], can_sample_fns: Sequence[Callable[[Any], Array]]
) -> Array:
    """Whether every buffer can sample (a mixer's ``can_sample``, with the functions bound).

    Args:
        states: one state per buffer.
        can_sample_fns: each buffer's ``can_sample``.

    Returns:
        A bool scalar.
    """
    states = _check_states(states, len(can_sample_fns), "Mixer.can_sample")
    return jnp.all(jnp.stack([fn(s) for fn, s in zip(can_sample_fns, states, strict=True)]))


def _check_buffer(i: int, buf: Any, *methods: str) -> None:
    """``buffers[i]`` must have every one of ``methods`` (callable), else ArgumentTypeError."""
    if not all(callable(getattr(buf, name, None)) for name in methods):
        raise ArgumentTypeError(
            f"`buffers[{i}]` must be a buffer (the result of a make_* factory), got {describe(buf)}"
        )


def make_mixer(
    buffers: Sequence[Any], sample_batch_size: int, proportions: Sequence[float]
) -> Mixer:
    """Make a mixer over ``buffers`` (same signature as the reference's).

    All buffers must return samples of the same structure (same kind and sequence length);
    each must sample at least its share of ``sample_batch_size``.

    Args:
        buffers: buffers made by the same ``make_*`` factory.
        sample_batch_size: items of every mixed batch.
        proportions: one non-negative share per buffer (the batch is split in proportion,
            the largest remainders getting the leftover items).

    Returns:
        The mixer's ``sample`` and ``can_sample`` and each buffer's share of the batch.

    Raises:
        BufferConfigError: no buffers, buffers of different kinds, trajectory queues (their
            ``sample`` takes no key and consumes), proportions that do not
            match the buffers or are negative, or a buffer whose ``sample_batch_size`` is
            below its share.
        ArgumentTypeError: an element of ``buffers`` that is not a buffer (the message names
            its index and type, e.g. ``buffers[1]``; checked before the kinds are compared),
            or a proportion that is not a number.

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> import buffers as fbx
        >>> a = fbx.make_flat_buffer(max_length=32, min_length=2, sample_batch_size=8)
        >>> b = fbx.make_flat_buffer(max_length=32, min_length=2, sample_batch_size=8)
        >>> mixer = fbx.make_mixer([a, b], sample_batch_size=8, proportions=[3, 1])
        >>> mixer.batch_sizes
        (6, 2)
    """
    sample_batch_size = positive_int("sample_batch_size", sample_batch_size)
    buffers = as_list("buffers", buffers)
    proportions = as_list("proportions", proportions)
    check(len(buffers) > 0, "`buffers` must not be empty")
    # Each element must be a buffer at all (it has a `sample`) before the kinds are compared,
    # so that `[buffer, 5]` names `buffers[1]`; then every one must be mixable (`can_sample`).
    for i, buf in enumerate(buffers):
        _check_buffer(i, buf, "sample")
    kinds = {type(b).__name__ for b in buffers}
    check(len(kinds) == 1, f"all buffers must be of the same kind, got {sorted(kinds)}")
    # one factory (a flat and an item buffer share a class) and one sequence length: their
    # samples must concatenate
    made = {f for f in map(_factory_of, buffers) if f is not None}
    check(len(made) <= 1, f"all buffers must come from one make_* factory, got {sorted(made)}")
    lengths = {getattr(b, "sample_sequence_length", None) for b in buffers}
    check(
        len(lengths) == 1,
        f"all buffers must sample sequences of one length, got sample_sequence_length "
        f"{sorted(lengths, key=str)}",
    )
    check(
        kinds != {"TrajectoryQueue"},
        "trajectory queues cannot be mixed: a queue's `sample(state)` takes no key and "
        "consumes what it returns (a new state with it); mix replay buffers",
    )
    for i, buf in enumerate(buffers):
        _check_buffer(i, buf, "sample", "can_sample")
    check(
        len(buffers) == len(proportions),
        f"got {len(buffers)} buffers but {len(proportions)} proportions",
    )
    shares = [
        real_number(f"proportions[{i}]", p, "pass one non-negative number per buffer")
        for i, p in enumerate(proportions)
    ]
    check(
        all(math.isfinite(p) for p in shares),
        f"`proportions` must be finite, got {list(proportions)}",
    )
    check(
        all(p >= 0 for p in shares) and sum(shares) > 0,
        f"`proportions` must be non-negative with a positive sum, got {list(proportions)}",
    )
    proportions = shares
    sizes = split_batch(sample_batch_size, proportions)
    for i, (buf, n) in enumerate(zip(buffers, sizes, strict=True)):
        have = getattr(buf, "sample_batch_size", 0)
        check(
            not have or n <= have,
            f"buffer {i} samples {have} items per call but its share is {n}; make its "
            "`sample_batch_size` at least that",
        )
    return Mixer(
        sample=functools.partial(
            sample_mixer_fn, prop_batch_sizes=sizes, sample_fns=[b.sample for b in buffers]
        ),
        can_sample=functools.partial(
            can_sample_mixer_fn, can_sample_fns=[b.can_sample for b in buffers]
        ),
        batch_sizes=sizes,
    )


__all__ = [
    "BufferTypes",
    "Mixer",
    "PrioritisedTrajectoryBuffer",
    "PrioritisedTrajectoryBufferSample",
    "PrioritisedTrajectoryBufferState",
    "SampleTypes",
    "StateTypes",
    "TrajectoryBuffer",
    "TrajectoryBufferSample",
    "TrajectoryBufferState",
    "TransitionSample",
    "can_sample_mixer_fn",
    "make_mixer",
    "sample_mixer_fn",
    "sample_types",
    "state_types",
]


def _factory_of(buffer: Any) -> str | None:
    """The sampling function's name that a ``make_*`` factory bound in ``buffer``.

    Its ``sample`` is a partial of it; None where ``sample`` was replaced by something else.
    """
    fn = getattr(buffer, "sample", None)
    if isinstance(fn, functools.partial):
        return getattr(fn.func, "__qualname__", None)
    return None
