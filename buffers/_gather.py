"""``gather_all``: every valid item of a buffer state, in time order (TF-Agents' ``gather_all``)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from buffers._core import tree_shape_prefix
from buffers._errors import ArgumentTypeError, BufferConfigError


def gather_all(state: Any) -> Any:
    """Every valid item of a buffer state as arrays ``[batch, time, ...]``, oldest first.

    TF-Agents' ``ReplayBuffer.gather_all()``. What is valid depends on the state's kind:

    * trajectory, flat, item, n-step, episode and prioritised states (``experience``
      ``[B, T, ...]``, ``current_index``, ``is_full``): every timestep the state still holds,
      the last ``min(timesteps added, T)`` of each row, from the oldest. Rows advance together,
      so the result is ``[B, n, ...]``. Priorities do not filter: they weigh sequence starts for
      sampling, and a zero-priority window's timesteps are still held data. (Item buffers keep
      one row: ``[1, n, ...]`` in the order the items were added.)
    * queue states (``write_index``, ``read_index``): the unread timesteps, the ones the next
      ``sample`` calls would return, in that order; what was consumed is gone even where its
      slots still hold bytes. Nothing is consumed by this call.
    * :class:`~buffers.ReplayBufferState`: the ``size`` stored transitions, oldest first, as
      one row ``[1, size, ...]``.

    The result has the structure of one timestep (the state's ``experience`` or ``data``);
    its arrays are on the state's device. A state stacked by ``vmap``/``pmap`` gives
    ``[*stack, batch, time, ...]`` when every part is at the same position.
    A state shaped as the reference's (a Flashbax state, or one restored from a checkpoint of
    it) is accepted too (see :func:`buffers.from_flashbax_state`). The number of valid items
    depends on the state's values, so this runs outside ``jit``. A vault's counterpart is
    ``Vault.read_numpy()``: every committed timestep, as numpy arrays.

    Args:
        state: a buffer state of any kind in this package.

    Returns:
        The valid items, a pytree shaped like one timestep, leaves ``[batch, time, ...]``.

    Raises:
        ArgumentTypeError: ``state`` is not a buffer state, or is traced (inside ``jit``).
        BufferConfigError: a stacked state whose parts are at different positions.

    Example:
        >>> import jax.numpy as jnp
        >>> import buffers
        >>> buffer = buffers.make_flat_buffer(max_length=4, min_length=1, sample_batch_size=1)
        >>> state = buffer.init(jnp.float32(0))
        >>> for x in range(6):
        ...     state = buffer.add(state, jnp.float32(x))
        >>> buffers.gather_all(state)  # the last 4 of 6, oldest first
        Array([[2., 3., 4., 5.]], dtype=float32)
    """
    from buffers._flashbax_state import accept_reference

    state = accept_reference(state, "gather_all")
    if all(hasattr(state, f) for f in ("data", "position", "size")):
        return _gather_replay(state)
    if all(hasattr(state, f) for f in ("experience", "write_index", "read_index", "is_full")):
        return _gather_queue(state)
    if all(hasattr(state, f) for f in ("experience", "current_index", "is_full")):
        return _gather_ring(state)
    raise ArgumentTypeError(
        f"gather_all: `state` must be a buffer state (from a buffer's `init` or `add`), got "
        f"{type(state).__name__}"
    )


def _position(value: Any, name: str) -> tuple[int, int]:
    """``(value, stacked axes)`` of a position field that every stacked part shares."""
    if isinstance(value, jax.core.Tracer):
        raise ArgumentTypeError(
            "gather_all: the state is traced (inside `jit`, `vmap` or `scan`), but how many "
            "items are valid depends on its values: call it outside the transformation, on the "
            "state it returns"
        )
    arr = np.asarray(value)
    if arr.size and np.any(arr != arr.flat[0]):
        raise BufferConfigError(
            f"gather_all: the stacked state's parts are at different positions ({name} = "
            f"{arr.tolist()}): gather each part on its own (e.g. `state` indexed by "
            "`jax.tree.map(lambda x: x[i], state)`)"
        )
    return (int(arr.flat[0]) if arr.size else 0), arr.ndim


def _take(tree: Any, times: np.ndarray, axis: int) -> Any:
    index = jnp.asarray(times, jnp.int32)
    return jax.tree.map(lambda x: jnp.take(x, index, axis=axis), tree)


def _gather_ring(state: Any) -> Any:
    current, stack = _position(state.current_index, "current_index")
    full, _ = _position(state.is_full, "is_full")
    t_len = tree_shape_prefix(state.experience, stack + 2)[-1]
    times = (current + np.arange(t_len)) % t_len if full else np.arange(current)
    return _take(state.experience, times, stack + 1)


def _gather_queue(state: Any) -> Any:
    write, stack = _position(state.write_index, "write_index")
    read, _ = _position(state.read_index, "read_index")
    full, _ = _position(state.is_full, "is_full")
    t_len = tree_shape_prefix(state.experience, stack + 2)[-1]
    unread = t_len if full else (write - read) % t_len
    return _take(state.experience, (read + np.arange(unread)) % t_len, stack + 1)


def _gather_replay(state: Any) -> Any:
    position, stack = _position(state.position, "position")
    size, _ = _position(state.size, "size")
    n = tree_shape_prefix(state.data, stack + 1)[-1]
    taken = _take(state.data, (position - size + np.arange(size)) % n, stack)
    return jax.tree.map(lambda x: jnp.expand_dims(x, stack), taken)
