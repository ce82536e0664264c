"""n-step buffer: the flat buffer generalised to transitions ``(s_t, s_{t+n})``.

Windows of ``n_step + 1`` timesteps are sampled; ``first`` is the window's first timestep and
``second`` its last. ``n_step_functional_map`` (as in the reference) transforms fields over the
whole window before that, e.g. to turn rewards into n-step returns with :func:`n_step_returns`.
Windows never straddle the write position; they may cross episode boundaries, so fold
``discount`` (0 at terminal steps) into the returns as :func:`n_step_returns` does.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from buffers._validation import check, positive_int
from buffers.flat_buffer import make_sequence_view, transition_sample
from buffers.trajectory_buffer import TrajectoryBuffer

FunctionalMap = Mapping[Any, Callable[..., Any]]


def apply_functional_map(functional_map: FunctionalMap, sequences: Any) -> Any:
    """Replace fields of ``sequences`` by functions of the whole sampled window.

    Keys are tuples ``(target, arg1, arg2, ...)`` of field names; ``target`` becomes
    ``fn(sequences[arg1], sequences[arg2], ...)`` (mapped over matching leaves). The optional
    key ``"dict_mapper"`` converts the experience to a dict first (for NamedTuples and other
    containers); the result is rebuilt with the experience's own type.
    """
    mapper = functional_map.get("dict_mapper")
    as_dict = dict(mapper(sequences) if mapper is not None else sequences)
    updates = {}
    for key, fn in functional_map.items():
        if key == "dict_mapper":
            continue
        target, *args = key
        updates[target] = jax.tree.map(fn, *[as_dict[a] for a in args])
    as_dict.update(updates)
    if isinstance(sequences, dict):
        return type(sequences)(as_dict)
    return type(sequences)(**as_dict)


def n_step_returns(rewards: Array, discounts: Array, n_step: int) -> Array:
    """Discounted n-step returns along the last axis, truncated at the end of the sequence.

    ``G[t] = r[t] + d[t] r[t+1] + d[t] d[t+1] r[t+2] + ...`` over at most ``n_step`` terms.
    ``rewards`` and ``discounts`` have the same shape ``[..., T]``; so has the result.
    """
    n_step = positive_int("n_step", n_step)
    rewards = jnp.asarray(rewards)
    discounts = jnp.asarray(discounts, rewards.dtype)
    seq_len = rewards.shape[-1]
    pad = [(0, 0)] * (rewards.ndim - 1) + [(0, n_step - 1)]
    r = jnp.pad(rewards, pad)
    d = jnp.pad(discounts, pad, constant_values=1)
    out = jnp.zeros_like(rewards)
    for i in reversed(range(n_step)):
        out = r[..., i : i + seq_len] + d[..., i : i + seq_len] * out
    return out


def n_step_discounts(discounts: Array, n_step: int) -> Array:
    """Product of ``n_step`` consecutive discounts along the last axis (truncated at the end).

    ``D[t] = d[t] d[t+1] ... d[t+n-1]``: the bootstrap factor for ``G[t]`` of
    :func:`n_step_returns` (multiply by ``gamma ** n`` yourself if ``d`` holds 0/1 flags).
    """
    n_step = positive_int("n_step", n_step)
    discounts = jnp.asarray(discounts)
    seq_len = discounts.shape[-1]
    pad = [(0, 0)] * (discounts.ndim - 1) + [(0, n_step - 1)]
    d = jnp.pad(discounts, pad, constant_values=1)
    out = jnp.ones_like(discounts)
    for i in range(n_step):
        out = out * d[..., i : i + seq_len]
    return out


def make_n_step_buffer(
    max_length: int,
    min_length: int,
    sample_batch_size: int,
    add_sequences: bool = False,
    add_batch_size: int | None = None,
    n_step: int = 1,
    n_step_functional_map: FunctionalMap | None = None,
) -> TrajectoryBuffer:
    """An n-step transition buffer.

    Same layout as :func:`buffers.make_flat_buffer` (``make_n_step_buffer(32, 8, 4, False, 6)``
    keeps 6 rows of 5 timesteps); ``sample`` returns ``TransitionSample(ExperiencePair(first,
    second))`` with ``second`` taken ``n_step`` timesteps after ``first``.
    """
    n_step = positive_int("n_step", n_step)
    check(
        n_step < max_length,
        f"`n_step` ({n_step}) must be < `max_length` ({max_length})",
    )
    core, add = make_sequence_view(
        max_length, min_length, sample_batch_size, add_sequences, add_batch_size, n_step + 1
    )
    transform = (
        None
        if n_step_functional_map is None
        else functools.partial(apply_functional_map, dict(n_step_functional_map))
    )
    sample = functools.partial(transition_sample, core_sample=core.sample, transform=transform)
    return dataclasses.replace(core, add=add, sample=sample)
