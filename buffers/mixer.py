"""Mixer: one batch drawn from several buffers in fixed proportions."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import chex
import jax
import jax.numpy as jnp
from jax import Array

from buffers._pytree import Replaceable, frozen_container
from buffers._validation import check, positive_int


@frozen_container
class Mixer(Replaceable):
    """``sample(states, key)`` and ``can_sample(states)`` over a sequence of buffer states."""

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


def mixer_sample(
    states: Sequence[Any],
    key: chex.PRNGKey,
    *,
    sample_fns: Sequence[Callable[[Any, Any], Any]],
    batch_sizes: Sequence[int],
) -> Any:
    """Sample each buffer, keep its share of the batch, concatenate along the batch axis."""
    keys = jax.random.split(key, len(sample_fns))
    parts = [
        jax.tree.map(lambda x, n=n: x[:n], fn(state, k))
        for fn, state, k, n in zip(sample_fns, states, keys, batch_sizes, strict=True)
        if n > 0
    ]
    return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *parts)


def mixer_can_sample(
    states: Sequence[Any], *, can_sample_fns: Sequence[Callable[[Any], Array]]
) -> Array:
    return jnp.all(jnp.stack([fn(s) for fn, s in zip(can_sample_fns, states, strict=True)]))


def make_mixer(
    buffers: Sequence[Any], sample_batch_size: int, proportions: Sequence[float]
) -> Mixer:
    """A mixer over ``buffers`` (same signature as the reference's).

    All buffers must return samples of the same structure (same kind and sequence length);
    each must sample at least its share of ``sample_batch_size``.
    """
    sample_batch_size = positive_int("sample_batch_size", sample_batch_size)
    check(len(buffers) > 0, "`buffers` must not be empty")
    check(
        len(buffers) == len(proportions),
        f"got {len(buffers)} buffers but {len(proportions)} proportions",
    )
    check(
        all(float(p) >= 0 for p in proportions) and sum(proportions) > 0,
        f"`proportions` must be non-negative with a positive sum, got {list(proportions)}",
    )
    kinds = {type(b).__name__ for b in buffers}
    check(len(kinds) == 1, f"all buffers must be of the same kind, got {sorted(kinds)}")
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
            mixer_sample, sample_fns=[b.sample for b in buffers], batch_sizes=sizes
        ),
        can_sample=functools.partial(
            mixer_can_sample, can_sample_fns=[b.can_sample for b in buffers]
        ),
        batch_sizes=sizes,
    )
