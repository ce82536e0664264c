"""States shaped as the reference's (Flashbax 0.1.3): recognised, converted, and made.

A run that used Flashbax saved its buffer state as the reference's pytree: a trajectory state
``{experience, current_index, is_full}``, a prioritised one adding ``running_index`` and
``sum_tree_state {nodes, max_recorded_priority}`` (nodes ``[2C - 1]``, root at 0), a queue
``{experience, write_index, read_index, is_full}``. Ours carry a ``write_counter`` leaf and a
sum tree of ``[2C]`` nodes (root at 1), so such a state does not fit our structure as it is.

* :func:`from_flashbax_state` converts one (a Flashbax state object, or the nested dicts an
  orbax checkpoint restores without a target) into ours;
* :func:`to_flashbax_state` gives the reference's shape of one of ours: a restore target for
  an orbax checkpoint written by a Flashbax run, or a state to save for Flashbax;
* every function of the buffers that takes a state accepts the reference's shape too (it is
  converted on the way in: :func:`accept_reference`).

This module only converts layouts; buffers/_sum_tree.py owns the tree.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from buffers import _counter, _sum_tree
from buffers._core import tree_shape_prefix
from buffers._errors import ArgumentTypeError, BufferConfigError

TRAJECTORY = ("experience", "current_index", "is_full")
QUEUE = ("experience", "write_index", "read_index", "is_full")
SUM_TREE = ("nodes", "max_recorded_priority")


def _has(obj: Any, name: str) -> bool:
    return name in obj if isinstance(obj, Mapping) else hasattr(obj, name)


def _get(obj: Any, name: str) -> Any:
    return obj[name] if isinstance(obj, Mapping) else getattr(obj, name)


def reference_kind(state: Any) -> str | None:
    """``"trajectory"``, ``"prioritised"`` or ``"queue"`` for a state in the reference's shape
    (no ``write_counter``); ``None`` for anything else, ours included."""
    if _has(state, "write_counter"):
        return None
    if all(_has(state, f) for f in QUEUE):
        return "queue"
    if not all(_has(state, f) for f in TRAJECTORY):
        return None
    return "prioritised" if _has(state, "sum_tree_state") else "trajectory"


def accept_reference(
    state: Any,
    what: str,
    *,
    sample_sequence_length: int | None = None,
    period: int | None = None,
) -> Any:
    """``state`` as ours: converted when in the reference's shape, else unchanged (ours pass
    at the cost of one attribute lookup). Buffer functions call this first; ``what`` names the
    function in errors, and a prioritised buffer passes its sequence length and period."""
    if hasattr(state, "write_counter") or reference_kind(state) is None:
        return state
    return _convert(state, sample_sequence_length, period, what)


def from_flashbax_state(state: Any, buffer: Any = None) -> Any:
    """A state in the reference's shape (Flashbax 0.1.3) as this package's state.

    Accepts a Flashbax state object (trajectory, flat, item, prioritised or queue), or the
    nested dicts that orbax restores from a checkpoint of one without a target. The write
    counter is derived: for a prioritised state from its ``running_index`` (the exact count,
    below 2**31), otherwise the fewest timesteps consistent with ``current_index`` and
    ``is_full`` (see :class:`~buffers.TrajectoryBufferState`). A prioritised state's sum tree
    moves to our layout, its internal sums recomputed from its leaves (the reference's can
    differ from the leaves' sums in the last bits); with ``buffer``, leaves of items whose
    windows are not valid (the reference lets ``set_priorities`` revive a stale index) are
    set to 0, so such items are never drawn, as in our buffers. A state that is already ours
    comes back unchanged.

    Args:
        state: the reference-shaped state.
        buffer: the buffer that will use the state (the result of a ``make_*`` factory,
            built with the run's arguments); checks that the state fits it. Recommended for
            prioritised states.

    Returns:
        The state as ours (``TrajectoryBufferState``, ``PrioritisedTrajectoryBufferState`` or
        ``TrajectoryQueueState``), arrays on the device of the input's.

    Raises:
        ArgumentTypeError: ``state`` is not a buffer state of either package.
        BufferConfigError: the state does not fit ``buffer``, or its sum tree's size is not
            the reference's (``2**k - 1`` nodes).

    Example:
        Restore an orbax checkpoint of a Flashbax run (``restored`` holds its buffer state
        as saved)::

            state = buffers.from_flashbax_state(restored["buffer_state"], buffer)
    """
    if hasattr(state, "write_counter"):
        return state
    if reference_kind(state) is None:
        raise ArgumentTypeError(
            "from_flashbax_state: `state` must be a buffer state in the reference's shape "
            f"(fields {', '.join(TRAJECTORY)}; a queue's {', '.join(QUEUE)}), got "
            f"{type(state).__name__} with {_fields_of(state)}"
        )
    length = getattr(buffer, "sample_sequence_length", None) if buffer is not None else None
    period = getattr(buffer, "period", None) if buffer is not None else None
    converted = _convert(state, length, period, "from_flashbax_state")
    if buffer is not None:
        _check_fits(converted, buffer)
    return converted


def to_flashbax_state(state: Any) -> dict[str, Any]:
    """The reference's shape (Flashbax 0.1.3) of one of our states, as nested dicts.

    The counter leaf is dropped (a prioritised state's becomes ``running_index``, int32) and
    the sum tree moves to the reference's layout. Use it as the restore target of an orbax
    checkpoint written by a Flashbax run (orbax matches leaves by their key names, so these
    dicts stand in for the reference's classes; give the state of a buffer built like the
    run's, e.g. ``buffer.init(timestep)``), then :func:`from_flashbax_state` the result; or to
    save a state that a Flashbax program restores.

    Args:
        state: a trajectory (flat, item, n-step), prioritised or queue state of ours.

    Returns:
        ``{"experience", "current_index", "is_full"}``; a prioritised state's adds
        ``"running_index"`` and ``"sum_tree_state": {"nodes", "max_recorded_priority"}``; a
        queue's is ``{"experience", "write_index", "read_index", "is_full"}``.

    Raises:
        ArgumentTypeError: ``state`` is not one of those.
    """
    if all(hasattr(state, f) for f in QUEUE) and not hasattr(state, "current_index"):
        return {f: getattr(state, f) for f in QUEUE}
    if not all(hasattr(state, f) for f in (*TRAJECTORY, "write_counter")):
        raise ArgumentTypeError(
            "to_flashbax_state: `state` must be a trajectory, prioritised or queue state of "
            f"this package, got {type(state).__name__}"
        )
    out = {f: getattr(state, f) for f in TRAJECTORY}
    tree = getattr(state, "sum_tree_state", None)
    if tree is not None and not hasattr(state, "episode_step"):
        out["running_index"] = state.write_counter[..., 1].astype(jnp.int32)
        out["sum_tree_state"] = {
            "nodes": tree.nodes[..., 1:],
            "max_recorded_priority": tree.max_recorded_priority,
        }
    return out


# --------------------------------------------------------------------------------- inside
def _fields_of(state: Any) -> str:
    keys = (
        list(state)
        if isinstance(state, Mapping)
        else [k for k in dir(state) if not k.startswith("_")]
    )
    return "fields " + ", ".join(map(str, keys[:12])) if keys else "no fields"


def _convert(state: Any, length: int | None, period: int | None, what: str) -> Any:
    kind = reference_kind(state)
    if kind == "queue":
        from buffers.trajectory_queue import TrajectoryQueueState

        experience, write, read, full = (_get(state, f) for f in QUEUE)
        return TrajectoryQueueState(experience, _strong(write), _strong(read), _strong(full))
    experience, current, full = (_get(state, f) for f in TRAJECTORY)
    current, full = _strong(current), _strong(full)
    if kind == "trajectory":
        from buffers.trajectory_buffer import TrajectoryBufferState

        return TrajectoryBufferState(experience, current, full)
    from buffers.prioritised_trajectory_buffer import PrioritisedTrajectoryBufferState

    stack = np.ndim(current)
    t_len = tree_shape_prefix(experience, stack + 2)[-1]
    running = _get(state, "running_index") if _has(state, "running_index") else None
    ours: Any = PrioritisedTrajectoryBufferState(
        experience,
        current,
        full,
        _counter_of(current, full, running, t_len),
        sum_tree_state=_tree_of(_get(state, "sum_tree_state"), what),
    )
    if length is not None and period is not None:
        clean = functools.partial(_without_invalid_items, length=length, period=period, what=what)
        for _ in range(stack):  # a stacked state (vmap, pmap): each member on its own
            clean = jax.vmap(clean)
        ours = clean(ours)
    return ours


def _strong(value: Any) -> Any:
    """A position or flag of the reference's state with a fixed dtype: the reference's
    ``init`` leaves them weakly typed (``jnp.array(0)``), and a jitted ``add`` returns them
    strongly typed, so its second call would trace again (an int32 or bool array either
    way)."""
    value = jnp.asarray(value)
    return value.astype(jnp.bool_ if value.dtype == jnp.bool_ else jnp.int32)


def _counter_of(current: Any, full: Any, running: Any, t_len: int) -> Array:
    """The running index where it agrees with the position (it is exact below 2**31), else
    the fewest timesteps consistent with the position."""

    def count(xp: Any, cur: Any, full: Any, run: Any) -> Any:
        fewest = xp.where(full, cur + t_len, cur)
        agrees = (run >= 0) & (run % t_len == cur) & ((run >= t_len) == full)
        return xp.where(agrees, run, fewest)

    if running is None:
        running = jnp.full(np.shape(current), -1, jnp.int32)
    return _counter.derive(count, current, full, running)


def _tree_of(tree: Any, what: str) -> _sum_tree.SumTreeState:
    """The reference's tree (root at 0, ``2C - 1`` nodes) in our layout, sums recomputed."""
    if not all(_has(tree, f) for f in SUM_TREE):
        raise ArgumentTypeError(
            f"{what}: the state's `sum_tree_state` must have {' and '.join(SUM_TREE)}, got "
            f"{type(tree).__name__} with {_fields_of(tree)}"
        )
    nodes = jnp.asarray(_get(tree, "nodes"), jnp.float32)
    size = nodes.shape[-1] + 1
    if size & (size - 1):
        raise BufferConfigError(
            f"{what}: `sum_tree_state/nodes` has {size - 1} nodes; the reference's tree has "
            "2**k - 1 (a state of this package has 2**k, and a `write_counter`: pass it as "
            "it is)"
        )
    leaves = nodes[..., size // 2 - 1 :]
    return _sum_tree.SumTreeState(
        nodes=_sums_over(leaves),
        max_recorded_priority=jnp.asarray(_get(tree, "max_recorded_priority"), jnp.float32),
    )


@jax.jit
def _sums_over(leaves: Array) -> Array:
    """Our node array over ``leaves`` (``C`` of them, a power of two): every internal node the
    float32 sum of its two children, as our tree computes it."""
    levels = [leaves]
    while levels[-1].shape[-1] > 1:
        below = levels[-1]
        levels.append(below[..., 0::2] + below[..., 1::2])
    unused = jnp.zeros((*leaves.shape[:-1], 1), jnp.float32)
    return jnp.concatenate([unused, *reversed(levels)], axis=-1)


@functools.partial(jax.jit, static_argnames=("length", "period", "what"))
def _without_invalid_items(state: Any, length: int, period: int, what: str) -> Any:
    from buffers.prioritised_trajectory_buffer import check_prioritised_state, item_is_valid

    check_prioritised_state(state, period, what)
    tree = state.sum_tree_state
    n_leaves = tree.nodes.shape[-1] // 2
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    items = jnp.arange(n_leaves)
    valid = item_is_valid(state, items, length, period) & (items < b_size * (t_len // period))
    leaves = jnp.where(valid, tree.nodes[..., n_leaves:], 0.0)
    return state.replace(sum_tree_state=tree.replace(nodes=_sums_over(leaves)))


def _check_fits(state: Any, buffer: Any) -> None:
    """The converted state has the buffer's rows and time axis."""
    want = (getattr(buffer, "add_batch_size", None), getattr(buffer, "max_length_time_axis", None))
    if None in want:
        return
    stack = np.ndim(getattr(state, "current_index", getattr(state, "write_index", 0)))
    got = tree_shape_prefix(state.experience, stack + 2)[stack:]
    if tuple(got) != want:
        raise BufferConfigError(
            f"from_flashbax_state: the state's experience is [{got[0]}, {got[1]}, ...] "
            f"(rows, time) but the buffer's is [{want[0]}, {want[1]}, ...]: build the buffer "
            "with the run's arguments (add_batch_size, max_length_time_axis / max_size, "
            "period)"
        )
