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

from buffers._errors import ArgumentTypeError, BufferConfigError
from buffers._validation import check, check_bool, describe, positive_int
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
    fields = mapper(sequences) if mapper is not None else sequences
    try:
        as_dict = dict(fields)
    except (TypeError, ValueError):
        raise BufferConfigError(
            "n_step_functional_map: the experience must be a dict (or give a `dict_mapper` "
            f"that turns it into one), got {type(fields).__name__}"
        ) from None
    updates = {}
    for key, fn in functional_map.items():
        if key == "dict_mapper":
            continue
        target, *args = key
        missing = [a for a in args if a not in as_dict]
        check(
            not missing,
            f"n_step_functional_map: key {key!r} names field(s) {missing} that the experience "
            f"does not have; its fields are {sorted(map(str, as_dict))}",
        )
        updates[target] = jax.tree.map(fn, *[as_dict[a] for a in args])
    as_dict.update(updates)
    if isinstance(sequences, dict):
        return type(sequences)(as_dict)
    return type(sequences)(**as_dict)


def check_functional_map(functional_map: Any) -> dict[Any, Callable[..., Any]]:
    """Validate ``n_step_functional_map`` once, at factory time."""
    if not isinstance(functional_map, Mapping):
        raise ArgumentTypeError(
            "`n_step_functional_map` must be a dict {(target, arg1, ...): fn}, got "
            f"{describe(functional_map)}"
        )
    for key, fn in functional_map.items():
        if key != "dict_mapper" and not (isinstance(key, tuple) and len(key) >= 2):
            raise ArgumentTypeError(
                "`n_step_functional_map` keys must be tuples of field names (target, arg1, "
                f"...) with at least one argument, or 'dict_mapper'; got {key!r}"
            )
        if not callable(fn):
            raise ArgumentTypeError(
                f"`n_step_functional_map[{key!r}]` must be a function, got {describe(fn)}"
            )
    return dict(functional_map)


def _returns_dtype(rewards: Array, discounts: Array) -> Any:
    """The dtype :func:`n_step_returns` computes in: its inputs' promoted floating type.

    The promoted type of ``rewards`` and ``discounts``, made floating (the default float type)
    when both are integers or bools, so that fractional discounts are never truncated; two
    float32 inputs stay float32.
    """
    dtype = jnp.result_type(rewards, discounts)
    if not jnp.issubdtype(dtype, jnp.inexact):
        dtype = jnp.result_type(dtype, float)
    return dtype


def n_step_returns(rewards: Array, discounts: Array, n_step: int) -> Array:
    """Discounted n-step returns along the last axis, truncated at the end of the sequence.

    ``G[t] = r[t] + d[t] r[t+1] + d[t] d[t+1] r[t+2] + ...`` over at most ``n_step`` terms.

    Args:
        rewards: rewards ``[..., T]`` (time last).
        discounts: discounts of the same shape (0 at terminal steps).
        n_step: the most terms summed.

    Returns:
        The returns, shaped like ``rewards``, computed in the promoted type of ``rewards``
        and ``discounts`` (JAX's promotion rules), made floating when both are integers or
        bools (the default float type: float32 unless x64 is enabled). Float32 inputs give
        float32; integer rewards with float discounts give the discounts' float type, so a
        discount of 0.5 is never truncated.

    Raises:
        BufferConfigError: ``rewards`` and ``discounts`` differ in shape, or are scalars; or
            ``n_step`` is an integer below 1 (e.g. 0).
        ArgumentTypeError: ``n_step`` is not an integer (a float, even a whole one, a bool,
            or a traced value).

    Examples:
        >>> import jax.numpy as jnp
        >>> import buffers as fbx
        >>> fbx.n_step_returns(jnp.ones(4), jnp.full(4, 0.5), n_step=2).tolist()
        [1.5, 1.5, 1.5, 1.0]
    """
    n_step = positive_int("n_step", n_step)
    rewards = jnp.asarray(rewards)
    discounts = jnp.asarray(discounts)
    check(
        rewards.ndim >= 1 and discounts.shape == rewards.shape,
        "n_step_returns: `rewards` and `discounts` must have the same shape [..., T] (time "
        f"last), got rewards {list(rewards.shape)} and discounts {list(discounts.shape)}",
    )
    dtype = _returns_dtype(rewards, discounts)
    rewards, discounts = rewards.astype(dtype), discounts.astype(dtype)
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

    Args:
        discounts: discounts ``[..., T]`` (time last).
        n_step: the most factors multiplied.

    Returns:
        The products, shaped like ``discounts``.

    Raises:
        BufferConfigError: ``discounts`` is a scalar, or ``n_step`` is an integer below 1
            (e.g. 0).
        ArgumentTypeError: ``n_step`` is not an integer (a float, even a whole one, a bool,
            or a traced value).

    Examples:
        >>> import jax.numpy as jnp
        >>> import buffers as fbx
        >>> fbx.n_step_discounts(jnp.full(4, 0.5), n_step=2).tolist()
        [0.25, 0.25, 0.25, 0.5]
    """
    n_step = positive_int("n_step", n_step)
    discounts = jnp.asarray(discounts)
    check(
        discounts.ndim >= 1,
        "n_step_discounts: `discounts` must be [..., T] (time last), got a scalar",
    )
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
    """Make an n-step transition buffer.

    Same layout as :func:`buffers.make_flat_buffer` (``make_n_step_buffer(32, 8, 4, False, 6)``
    keeps 6 rows of 5 timesteps); ``sample`` returns ``TransitionSample(ExperiencePair(first,
    second))`` with ``second`` taken ``n_step`` timesteps after ``first``.

    Args:
        max_length: timesteps the buffer holds in all.
        min_length: sets when ``can_sample`` becomes true (as in the reference's flat
            buffer): once every row holds ``min_length // rows + 1`` timesteps (``rows``:
            ``add_batch_size``, 1 when ``None``), and at least ``n_step + 1`` (one window).
            With one row that is ``max(min_length, n_step) + 1`` timesteps.
        sample_batch_size: transitions per ``sample`` call.
        add_sequences: ``add`` takes a time axis rather than one timestep.
        add_batch_size: rows added per ``add`` call (``None``: one timestep, no batch axis).
        n_step: how many timesteps ``second`` comes after ``first``.
        n_step_functional_map: ``{(target, arg1, ...): fn}``: replace field ``target`` of the
            sampled window by ``fn(window[arg1], ...)`` before ``first`` and ``second`` are
            taken (e.g. rewards into n-step returns with :func:`n_step_returns`); the key
            ``"dict_mapper"`` turns a non-dict experience into a dict first.

    Returns:
        The buffer's pure functions (``init``, ``add``, ``sample``, ``can_sample``) and its
        configuration.

    Raises:
        BufferConfigError: a size out of range (``n_step`` not below ``max_length``, rows
            shorter than ``n_step + 1`` timesteps).
        ArgumentTypeError: a size that is not an integer, or a functional map that is not a
            dict of tuples to functions.

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> import buffers as fbx
        >>> buffer = fbx.make_n_step_buffer(
        ...     max_length=64, min_length=4, sample_batch_size=8, n_step=3)
        >>> buffer = buffer.replace(add=jax.jit(buffer.add), sample=jax.jit(buffer.sample))
        >>> state = buffer.init({"t": jnp.int32(0)})
        >>> for i in range(10):
        ...     state = buffer.add(state, {"t": jnp.int32(i)})
        >>> pair = buffer.sample(state, jax.random.key(0)).experience
        >>> bool(((pair.second["t"] - pair.first["t"]) == 3).all())
        True
    """
    n_step = positive_int("n_step", n_step)
    max_length = positive_int("max_length", max_length)
    check(
        n_step < max_length,
        f"`n_step` ({n_step}) must be < `max_length` ({max_length})",
    )
    add_sequences = check_bool("add_sequences", add_sequences)
    core, add = make_sequence_view(
        max_length, min_length, sample_batch_size, add_sequences, add_batch_size, n_step + 1
    )
    transform = (
        None
        if n_step_functional_map is None
        else functools.partial(apply_functional_map, check_functional_map(n_step_functional_map))
    )
    sample = functools.partial(transition_sample, core_sample=core.sample, transform=transform)
    return dataclasses.replace(core, add=add, sample=sample)
