"""The ring buffer's shared pieces: every buffer kind composes these pure functions.

Experience is ``[B, T, ...]`` (rows, time axis, then the timestep's own shape), written along
the time axis at ``current_index`` and wrapping; ``is_full`` records that every time index has
been written. The public trajectory buffer (:mod:`buffers.trajectory_buffer`) binds these
functions; the flat, item, n-step, episode, prioritised and queue buffers reuse them and
replace only what differs. Argument validators live in :mod:`buffers._validation`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from buffers import _counter
from buffers._errors import BufferConfigError, NotReadyError
from buffers._validation import (
    check,
    check_key,
    check_nbytes,
    check_sample_nbytes,
    check_state,
    check_timestep,
    path_to_str,
    timestep_nbytes,
)

if TYPE_CHECKING:
    import chex

Experience = TypeVar("Experience", bound="chex.ArrayTree")


def tree_shape_prefix(tree: Any, n_axes: int = 1) -> tuple[int, ...]:
    """The leading ``n_axes`` sizes shared by every leaf of ``tree``."""
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves or len(getattr(leaves[0], "shape", ())) < n_axes:
        got = "no leaves"
        if leaves:
            path = path_to_str(jax.tree_util.tree_flatten_with_path(tree)[0][0][0])
            got = f"leaf {path} of shape {list(np.shape(leaves[0]))}"
        raise BufferConfigError(
            f"expected arrays with at least {n_axes} leading axes (a state's `experience` is "
            f"[add_batch_size, max_length_time_axis, ...]), got {got}: build states with the "
            "buffer's `init`"
        )
    return tuple(leaves[0].shape[:n_axes])


def is_tracing(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def empty_experience(experience: Any, add_batch_size: int, max_length_time_axis: int) -> Any:
    """Zeros ``[add_batch_size, max_length_time_axis, ...]`` shaped like one timestep.

    Refuses (:class:`~buffers.BufferTooLargeError`) a state that cannot fit in memory, before
    allocating it.
    """
    experience = check_timestep(experience)
    per_step = timestep_nbytes(experience, 0)
    check_nbytes(
        add_batch_size * max_length_time_axis * per_step,
        "init: the state",
        f"{add_batch_size} rows (add_batch_size) x {max_length_time_axis} timesteps "
        f"(max_length_time_axis) x {per_step} bytes per timestep",
        "Make the buffer smaller (max_length / max_size / max_length_time_axis, "
        "add_batch_size) or its timesteps (fewer or smaller leaves, narrower dtypes).",
    )
    return jax.tree.map(
        lambda x: jnp.zeros((add_batch_size, max_length_time_axis, *x.shape), x.dtype),
        experience,
    )


def empty_ring(experience: Any, add_batch_size: int, max_length_time_axis: int) -> dict[str, Any]:
    """The fields of an empty ring state for timesteps shaped like ``experience`` (one
    timestep, no batch axis): ``experience``, ``current_index``, ``is_full``, ``write_counter``.
    """
    return {
        "experience": empty_experience(experience, add_batch_size, max_length_time_axis),
        "current_index": jnp.array(0, dtype=jnp.int32),
        "is_full": jnp.array(False),
        "write_counter": _counter.zero(),
    }


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
    """The ``current_index``, ``is_full`` and ``write_counter`` after adding ``seq_len``."""
    new_index = state.current_index + seq_len
    return {
        "current_index": (new_index % t_len).astype(jnp.int32),
        "is_full": state.is_full | (new_index >= t_len),
        "write_counter": _counter.advance(state.write_counter, seq_len),
    }


RING_FIELDS = ("experience", "current_index", "is_full")


def check_ring_state(state: Any, what: str, kind: str = "TrajectoryBufferState") -> None:
    check_state(state, RING_FIELDS, kind, what)


def check_sample_args(
    state: Any, rng_key: Any, batch_size: int, sequence_length: int, what: str = "sample"
) -> None:
    """Trace-time checks of a ``sample`` call: a PRNG key, a state whose time axis holds a
    sequence, and a sample that fits in memory."""
    check_key(rng_key, what)
    t_len = tree_shape_prefix(state.experience, 2)[1]
    check(
        sequence_length <= t_len,
        f"{what}: sequences of {sequence_length} timesteps cannot come from a state whose "
        f"time axis holds {t_len}: the state was made by another buffer's `init`",
    )
    check_sample_nbytes(state.experience, batch_size, sequence_length, what, "sample_batch_size")


def can_sample(state: Any, min_length_time_axis: int) -> Array:
    """Whether at least ``min_length_time_axis`` timesteps per row have been added."""
    check_ring_state(state, "can_sample")
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

    The key is used as the reference's (Flashbax 0.1.3) trajectory sampler uses it: the item
    draw takes the second half of ``split(rng_key)``, the row draw the second half of a split
    of the first half. Since the candidate windows are the same too, the same key and state
    give the reference's draws (docs: Migrate from Flashbax, "Same draws as the reference").
    """
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    max_time = jnp.where(state.is_full, t_len, state.current_index)
    head = jnp.where(state.is_full, state.current_index, 0)
    max_start = max_time - sequence_length
    num_items = jnp.where(max_start >= 0, max_start // period + 1, 0)
    rest, key_items = jax.random.split(rng_key)
    key_rows = jax.random.split(rest)[1]
    items = jax.random.randint(key_items, (batch_size,), 0, jnp.maximum(num_items, 1))
    rows = jax.random.randint(key_rows, (batch_size,), 0, b_size)
    starts = (head + items * period) % t_len
    times = (starts[:, None] + jnp.arange(sequence_length)) % t_len
    return rows, times


def gather(experience: Any, rows: Array, times: Array) -> Any:
    return jax.tree.map(lambda x: x[rows[:, None], times], experience)
