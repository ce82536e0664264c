"""Prioritised trajectory buffer: the core ring buffer plus a sum tree over sequence starts.

An *item* is a sequence start at a multiple of ``period`` on the physical time axis of one row
(``max_length_time_axis`` is rounded down to a multiple of ``period``, and the effective
capacity is reported). Item ``row * (T // period) + slot`` has a positive priority exactly when
its window of ``sample_sequence_length`` timesteps holds written data and does not straddle the
write position; ``add`` keeps that true in ``O(L/period + n/period)`` tree updates per row, and
``set_priorities`` ignores items that are not valid, so a stale index can never resurrect an
overwritten window. Sampled ``probabilities`` are the true normalised probabilities
(``p_i^alpha / sum_j p_j^alpha``), 0 (never NaN) for an empty buffer.

Bad priorities (NaN, infinite, negative) and indices that name no item raise
:class:`~buffers.PriorityError` when ``set_priorities`` gets concrete arrays (outside ``jit``);
inside ``jit`` values cannot raise, so those entries are ignored (the item keeps its priority)
and the sum tree never holds a NaN.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from buffers import _reference_exact, _sum_tree, sum_tree
from buffers import trajectory_buffer as trajectory_buffer
from buffers import utils as utils
from buffers._core import (
    RING_FIELDS,
    Experience,
    advance_indices,
    check_sample_args,
    empty_ring,
    gather,
    ready_mask,
    tree_shape_prefix,
    write_experience,
)
from buffers._flashbax_state import accept_reference
from buffers._pytree import frozen_container, pytree_dataclass
from buffers._sum_tree import SumTreeState
from buffers._validation import (
    check,
    check_bool,
    check_item_count,
    check_priorities,
    check_priority_exponent,
    check_priority_sum,
    check_sequence_args,
    check_state,
    positive_int,
    resolve_time_axis,
    validate_batch,
)
from buffers.sum_tree import get_tree_depth
from buffers.trajectory_buffer import (
    BufferSample,
    BufferState,
    TrajectoryBuffer,
    TrajectoryBufferSample,
    TrajectoryBufferState,
    can_sample,
    validate_trajectory_buffer_args,
)

if TYPE_CHECKING:
    import chex

Priorities = Array
Probabilities = Array
Indices = Array

_DEVICES = ("cpu", "gpu", "tpu")

SET_BATCH_FN = {
    "tpu": sum_tree.set_batch_bincount,
    "gpu": sum_tree.set_batch_bincount,
    "cpu": sum_tree.set_batch_scan,
}
"""The sum-tree batch update for each ``device``: every level at once on accelerators, leaf
by leaf on CPU (both keep the last value of a repeated index; see :mod:`buffers.sum_tree`)."""


@pytree_dataclass
class PrioritisedTrajectoryBufferState(TrajectoryBufferState, Generic[Experience]):
    """A trajectory buffer state plus the priorities of every item.

    Attributes:
        sum_tree_state: a sum tree over every item's stored priority (``p ** alpha``).
    """

    sum_tree_state: SumTreeState = dataclasses.field(kw_only=True)

    @property
    def running_index(self) -> Array:
        """Timesteps ever added per row (the reference's field), modulo 2**32 as uint32."""
        return self.write_counter[..., 1]


@pytree_dataclass
class PrioritisedTrajectoryBufferSample(TrajectoryBufferSample, Generic[Experience]):
    """Sampled sequences with their items and sampling probabilities.

    Attributes:
        indices: the sampled items (``int32[sample_batch_size]``), to give back to
            ``set_priorities``.
        probabilities: each item's normalised sampling probability
            (``p_i^alpha / sum_j p_j^alpha``; 0, never NaN, for an empty buffer).
    """

    indices: Indices | None = dataclasses.field(default=None, kw_only=True)
    probabilities: Probabilities | None = dataclasses.field(default=None, kw_only=True)


def get_max_divisible_length(max_length_time_axis: int, period: int) -> int:
    """The longest time axis ``<= max_length_time_axis`` that is a multiple of ``period``."""
    return int(max_length_time_axis - max_length_time_axis % period)


def get_num_items_in_row(max_length_time_axis: int, period: int) -> int:
    """Items (sequence starts, ``period`` apart) in one row: ``max_length_time_axis // period``."""
    return int(max_length_time_axis // period)


def get_sum_tree_capacity(max_length_time_axis: int, period: int, add_batch_size: int) -> int:
    """Items in the whole buffer (the sum tree's capacity): items per row times rows."""
    return get_num_items_in_row(max_length_time_axis, period) * int(add_batch_size)


def prioritised_init(
    experience: Experience, add_batch_size: int, max_length_time_axis: int, period: int
) -> PrioritisedTrajectoryBufferState[Experience]:
    """An empty state: the trajectory buffer's, plus a sum tree with every priority 0."""
    capacity = get_sum_tree_capacity(max_length_time_axis, period, add_batch_size)
    return PrioritisedTrajectoryBufferState(
        **empty_ring(experience, add_batch_size, max_length_time_axis),
        sum_tree_state=_sum_tree.init(capacity),
    )


_STATE_FIELDS = (*RING_FIELDS, "sum_tree_state")


def check_prioritised_state(state: Any, period: int, what: str) -> None:
    """``state`` is a prioritised state whose sum tree fits its ``[B, T]`` and ``period``."""
    check_state(state, _STATE_FIELDS, "PrioritisedTrajectoryBufferState", what)
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    leaves = state.sum_tree_state.nodes.shape[-1] // 2
    want = _sum_tree.tree_size(b_size * (t_len // period))
    check(
        leaves == want and t_len % period == 0,
        f"{what}: `state` does not fit this buffer: its sum tree has {leaves} leaves and its "
        f"time axis {t_len} timesteps, but [{b_size}, {t_len}] with period {period} needs "
        f"{want} leaves and a time axis divisible by the period; the state was made by "
        "another buffer's `init`",
    )


def _filled(is_full: Array, current_index: Array, t_len: int) -> Array:
    return jnp.where(is_full, t_len, current_index)


def item_is_valid(state: Any, item_indices: Array, sequence_length: int, period: int) -> Array:
    """Whether each item's window holds written data and does not straddle the write position."""
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    in_range = (item_indices >= 0) & (item_indices < b_size * (t_len // period))
    slot = (item_indices % (t_len // period)) * period
    dist = (state.current_index - slot) % t_len  # distance from the write position back to slot
    dist = jnp.where((dist == 0) & state.is_full, t_len, dist)
    filled = _filled(state.is_full, state.current_index, t_len)
    return in_range & (dist >= sequence_length) & (dist <= filled)


def _changed_items(
    state: Any, seq_len: int, sequence_length: int, period: int, t_len: int, b_size: int
) -> tuple[Array, Array, Array, Array]:
    """Items that stop and start being valid when ``seq_len`` timesteps are appended.

    With ``d`` the distance from the (new) end of data back to an item's start, an item is
    valid iff ``L <= d <= filled``. After appending ``n``: items with ``d_old > T - n`` lose their
    first timestep (invalid), items with ``L <= d_new < L + n`` gain their last one (valid).
    Each is a half-open range of ``n`` distances, holding at most ``ceil(n / period)`` item
    starts (``period`` apart): that many candidates per row are checked.
    """
    items_per_row = t_len // period
    n_max = min(-(-seq_len // period), items_per_row)
    k = jnp.arange(n_max, dtype=jnp.int32)
    cur = state.current_index
    filled_old = _filled(state.is_full, cur, t_len)
    new_unwrapped = cur + seq_len
    cur_new = new_unwrapped % t_len
    filled_new = jnp.where(state.is_full | (new_unwrapped >= t_len), t_len, new_unwrapped)

    d_top = filled_old - ((filled_old - cur) % period)
    d_old = d_top - k * period
    lost = (d_old > t_len - seq_len) & (d_old >= sequence_length)
    lost_slot = (cur - d_old) % t_len

    d_first = sequence_length + ((cur_new - sequence_length) % period)
    d_new = d_first + k * period
    gained = (d_new < sequence_length + seq_len) & (d_new <= filled_new)
    gained_slot = (cur_new - d_new) % t_len

    offsets = jnp.arange(b_size, dtype=jnp.int32)[:, None] * items_per_row

    def flat(slot: Array, mask: Array) -> tuple[Array, Array]:
        idx = offsets + (slot // period)[None, :]
        return idx.reshape(-1), jnp.broadcast_to(mask[None, :], idx.shape).reshape(-1)

    lost_idx, lost_mask = flat(lost_slot, lost)
    gained_idx, gained_mask = flat(gained_slot, gained)
    return lost_idx, lost_mask, gained_idx, gained_mask


def prioritised_add(
    state: PrioritisedTrajectoryBufferState[Experience],
    batch: Experience,
    sample_sequence_length: int,
    period: int,
    device: str = "cpu",
    reference_exact: bool = False,
) -> PrioritisedTrajectoryBufferState[Experience]:
    """Append ``batch`` ``[B, L, ...]``; new items get the maximum priority recorded so far.

    With ``reference_exact``, that priority is truncated to an integer as the reference does.
    """
    state = accept_reference(
        state, "add", sample_sequence_length=sample_sequence_length, period=period
    )
    check_prioritised_state(state, period, "add")
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    batch = validate_batch(state.experience, batch, 2, (b_size, "L"), max_time=t_len)
    seq_len = tree_shape_prefix(batch, 2)[1]
    if reference_exact:
        tree = _reference_exact.append_tree(state, seq_len, sample_sequence_length, period, device)
    else:
        tree = _appended_tree(state, seq_len, sample_sequence_length, period, device)
    experience = write_experience(state.experience, batch, state.current_index, t_len)
    return state.replace(
        experience=experience, sum_tree_state=tree, **advance_indices(state, seq_len, t_len)
    )


def _appended_tree(
    state: Any, seq_len: int, sample_sequence_length: int, period: int, device: str
) -> SumTreeState:
    """The sum tree after appending ``seq_len`` timesteps.

    The items that stop being valid are set to 0, those that become valid to the recorded
    maximum.
    """
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    lost_idx, lost_mask, gained_idx, gained_mask = _changed_items(
        state, seq_len, sample_sequence_length, period, t_len, b_size
    )
    tree = state.sum_tree_state
    # one update, the lost items first: an item both lost and gained ends with the new
    # priority; no value set exceeds the recorded maximum, which therefore stays
    new_priority = jnp.broadcast_to(tree.max_recorded_priority, gained_idx.shape)
    return _sum_tree.set_batch(
        tree,
        jnp.concatenate([lost_idx, gained_idx]),
        jnp.concatenate([jnp.zeros(lost_idx.shape), new_priority]),
        jnp.concatenate([lost_mask, gained_mask]),
        device,
        track_max=False,
    )


def sample_items(
    state: Any, rng_key: chex.PRNGKey, batch_size: int, sequence_length: int, period: int
) -> tuple[Array, Array, Array]:
    """``(item_indices, rows, time_indices[batch, L])`` drawn in proportion to priority."""
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    items_per_row = t_len // period
    indices = _sum_tree.sample(state.sum_tree_state, rng_key, batch_size, b_size * items_per_row)
    rows = indices // items_per_row
    starts = (indices % items_per_row) * period
    times = (starts[:, None] + jnp.arange(sequence_length)) % t_len
    return indices, rows, times


def prioritised_can_sample(state: Any, min_length_time_axis: int) -> Array:
    """Ready when ``min_length_time_axis`` timesteps were added *and* some item is sampleable.

    With a long ``sample_sequence_length`` and ``period`` > 1 no item may have a complete window
    even though enough timesteps were added; then sampling would have nothing to return.
    """
    state = accept_reference(state, "can_sample")
    check_state(state, _STATE_FIELDS, "PrioritisedTrajectoryBufferState", "can_sample")
    return can_sample(state, min_length_time_axis) & (_sum_tree.total(state.sum_tree_state) > 0)


def prioritised_sample(
    state: PrioritisedTrajectoryBufferState[Experience],
    rng_key: chex.PRNGKey,
    batch_size: int,
    sequence_length: int,
    period: int,
    min_length_time_axis: int = 1,
    reference_exact: bool = False,
) -> PrioritisedTrajectoryBufferSample[Experience]:
    """Sample sequences with probability ``p_i^alpha / sum_j p_j^alpha`` (stratified).

    With ``reference_exact`` the descent is the reference's, unguarded: rounding can then draw
    a zero-priority item or a padding leaf, as the reference does (``valid`` is false there).
    """
    state = accept_reference(state, "sample", sample_sequence_length=sequence_length, period=period)
    check_prioritised_state(state, period, "sample")
    check_sample_args(state, rng_key, batch_size, sequence_length)
    ready = prioritised_can_sample(state, min_length_time_axis)
    valid = ready_mask(ready, batch_size, "sample")
    draw = _reference_exact.sample_items if reference_exact else sample_items
    indices, rows, times = draw(state, rng_key, batch_size, sequence_length, period)
    probs = _sum_tree.probabilities(state.sum_tree_state, indices)
    return PrioritisedTrajectoryBufferSample(
        experience=gather(state.experience, rows, times),
        valid=valid & (probs > 0),
        indices=indices,
        probabilities=probs,
    )


def set_priorities(
    state: PrioritisedTrajectoryBufferState[Experience],
    indices: Indices,
    priorities: Priorities,
    priority_exponent: float,
    device: str = "cpu",
    sample_sequence_length: int = 1,
    period: int = 1,
    reference_exact: bool = False,
) -> PrioritisedTrajectoryBufferState[Experience]:
    """Set the priorities ``p`` (e.g. ``|td| + eps``) of sampled items.

    Stored values are ``p ** priority_exponent`` (0 stays 0). Indices whose window is not
    valid now (partly overwritten since it was sampled) are ignored; an index whose slot holds
    a new whole window by now sets that window's priority (an index names a slot, as in
    Flashbax). Inside ``jit`` values cannot
    raise: bad entries are ignored (those items keep their priorities), so one NaN loss cannot
    poison the sum tree. A buffer's ``set_priorities`` binds every argument after
    ``priorities``.

    Args:
        state: the state the items were sampled from (or a later one).
        indices: item indices from a sample's ``indices``.
        priorities: new priorities, shaped like ``indices`` (or one number for all of them).
        priority_exponent: alpha of the PER paper, in [0, 1].
        device: as in :func:`make_prioritised_trajectory_buffer`.
        sample_sequence_length: the buffer's sequence length (which windows are valid).
            Called as the reference's module function (without it), windows of 1 are
            assumed: give the buffer's, or use its bound ``set_priorities``, so that no
            window across the write position is given a priority.
        period: the buffer's period.
        reference_exact: set priorities as Flashbax 0.1.3 does (below).

    Returns:
        The state with the new priorities.

    Raises:
        PriorityError: non-integer ``indices``, non-real ``priorities`` or mismatched shapes
            (also at ``jit`` trace time); when the arrays are concrete (outside ``jit``),
            NaN, infinite or negative priorities, indices that name no item, and stored
            values (``p ** priority_exponent``) above float32's largest divided by the
            items (the tree's total could overflow; inside ``jit`` those are ignored).

    With ``reference_exact``, priorities are set as the reference sets them: at any leaf of
    the sum tree (an item no longer valid, or a padding leaf its sampler returned, included).
    """
    state = accept_reference(
        state, "set_priorities", sample_sequence_length=sample_sequence_length, period=period
    )
    check_prioritised_state(state, period, "set_priorities")
    if reference_exact:
        tree = _reference_exact.priorities_tree(
            state, indices, priorities, priority_exponent, device, period
        )
        return state.replace(sum_tree_state=tree)
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    indices, priorities = check_priorities(indices, priorities, b_size * (t_len // period))
    values = jnp.where(priorities == 0, 0.0, priorities**priority_exponent)
    # the most one item may hold so that the tree's total stays a float32 however many do
    limit = float(np.finfo(np.float32).max) / (state.sum_tree_state.nodes.shape[-1] // 2)
    check_priority_sum(values, limit)
    ok = jnp.isfinite(values) & (priorities >= 0) & (values <= limit)
    mask = item_is_valid(state, indices, sample_sequence_length, period) & ok
    tree = _sum_tree.set_batch(state.sum_tree_state, indices, values, mask, device)
    return state.replace(sum_tree_state=tree)


def recompute_sums(
    state: PrioritisedTrajectoryBufferState[Experience],
) -> PrioritisedTrajectoryBufferState[Experience]:
    """``state`` with every parent of its sum tree recomputed as the sum of its two children.

    The default mode keeps that true after every update, and relies on it: a subtree whose
    sum is zero holds no positive priority, so sampling never draws a zero-priority item. A
    tree whose sums were kept by deltas (the reference-exact mode, or a state converted from
    the reference's) can hold a tiny positive remainder over leaves that are all zero. Call
    this once when such a state moves to a buffer in the default mode. The leaves (the
    priorities) are unchanged; works on stacked (``vmap``/``pmap``) states and under ``jit``.

    Example:
        >>> import buffers, jax.numpy as jnp
        >>> buf = buffers.make_prioritised_flat_buffer(8, 2, 2, reference_exact=True)
        >>> state = buf.add(buf.init(jnp.zeros(())), jnp.ones(()))
        >>> fixed = buffers.prioritised_trajectory_buffer.recompute_sums(state)
    """
    nodes = state.sum_tree_state.nodes
    level = nodes.shape[-1] // 2  # the first leaf; the level above starts at level // 2
    while level > 1:
        children = nodes[..., level : 2 * level]
        nodes = nodes.at[..., level // 2 : level].set(children[..., 0::2] + children[..., 1::2])
        level //= 2
    return state.replace(sum_tree_state=state.sum_tree_state.replace(nodes=nodes))


def get_invalid_indices(
    state: TrajectoryBufferState[Experience],
    sample_sequence_length: int,
    period: int,
    add_batch_size: int,
    max_length_time_axis: int,
) -> Array:
    """Items next to the write position, whose windows may straddle it, in every row.

    The reference's mask of items not to sample: the ``sample_sequence_length // period + 1``
    items that follow the last item whose window ends at or before the write position (the
    same indices as the reference's). This package's buffers do not need it: their sum tree
    holds 0 for every item that is not valid (see :func:`item_is_valid`), so such items are
    never drawn.

    Args:
        state: a prioritised (or trajectory) buffer state.
        sample_sequence_length: length of sampled sequences.
        period: distance between item starts.
        add_batch_size: rows ``B``.
        max_length_time_axis: time-axis length ``T``.

    Returns:
        Item indices, int32 ``[add_batch_size, sample_sequence_length // period + 1]``.
    """
    items_per_row = get_num_items_in_row(max_length_time_axis, period)
    last_start = (state.current_index - sample_sequence_length) % max_length_time_axis
    last_start = jnp.minimum(last_start, get_max_divisible_length(max_length_time_axis, period) - 1)
    first = (last_start // period + 1) % items_per_row
    near = (first + jnp.arange(sample_sequence_length // period + 1)) % items_per_row
    rows = jnp.arange(add_batch_size)[:, None] * items_per_row
    return (near[None, :] + rows).astype(jnp.int32)


@frozen_container
class PrioritisedTrajectoryBuffer(TrajectoryBuffer, Generic[Experience, BufferState, BufferSample]):
    """A trajectory buffer whose items are sampled in proportion to their priorities.

    Attributes:
        set_priorities: ``set_priorities(state, indices, priorities) -> state`` (see
            :func:`buffers.prioritised_trajectory_buffer.set_priorities`).
        reference_exact: whether it was made in the reference-exact mode (Flashbax 0.1.3's
            prioritised draws, bit for bit; see the guide "Same draws as Flashbax").
    """

    set_priorities: Callable[..., Any] = dataclasses.field(kw_only=True)
    reference_exact: bool = dataclasses.field(default=False, kw_only=True)


def validate_priority_exponent(priority_exponent: float) -> None:
    """Check ``priority_exponent`` (alpha of prioritised replay).

    Raises:
        BufferConfigError: outside [0, 1] (:class:`~buffers.ArgumentTypeError` if not a
            real number).
    """
    check_priority_exponent(priority_exponent)


def validate_device(device: str) -> bool:
    """Whether ``device`` names a platform that the sum tree's updates can target here.

    Args:
        device: ``"cpu"``, ``"gpu"`` or ``"tpu"``.

    Returns:
        ``True`` when it is one of those and jax has such devices; otherwise ``False`` after a
        warning (the buffers then update the sum tree as for ``"cpu"`` when the name is
        unknown; a known but absent platform only makes the update strategy a poor fit).
    """
    if device not in _DEVICES:
        warnings.warn(
            f"device must be one of {_DEVICES}, got {device!r}; using 'cpu'", stacklevel=2
        )
        return False
    try:
        jax.devices(device)
    except RuntimeError:
        warnings.warn(
            f"device={device!r} is not available here (jax has {jax.default_backend()!r}); "
            "use the platform you run on",
            stacklevel=2,
        )
        return False
    return True


def check_device(device: str) -> str:
    """``device`` if it is one of cpu, gpu, tpu; otherwise ``"cpu"``, with a warning."""
    if device not in _DEVICES:
        warnings.warn(
            f"device must be one of {_DEVICES}, got {device!r}; using 'cpu'", stacklevel=3
        )
        return "cpu"
    return device


def divisible_time_axis(t_len: int, period: int, add_batch_size: int, stacklevel: int) -> int:
    """Round ``t_len`` down to a multiple of ``period``, warning with the effective capacity."""
    rounded = get_max_divisible_length(t_len, period)
    check(rounded >= 1, f"`period` ({period}) must be <= max_length_time_axis ({t_len})")
    if rounded != t_len:
        warnings.warn(
            f"max_length_time_axis={t_len} is not a multiple of period={period}: using "
            f"{rounded}, so the buffer holds {rounded * add_batch_size} timesteps "
            f"({(t_len - rounded) * add_batch_size} fewer). See `buffer.capacity`.",
            stacklevel=stacklevel + 1,
        )
    return rounded


def build_prioritised(
    add_batch_size: int,
    sample_batch_size: int,
    sample_sequence_length: int,
    period: int,
    min_length_time_axis: int,
    t_len: int,
    priority_exponent: float,
    device: str,
    reference_exact: bool = False,
) -> PrioritisedTrajectoryBuffer:
    """Bind a prioritised buffer from already validated, resolved arguments."""
    min_len = check_sequence_args(sample_sequence_length, period, min_length_time_axis, t_len)
    sample_sequence_length, period = int(sample_sequence_length), int(period)
    check_item_count(
        add_batch_size * (t_len // period),
        f"add_batch_size ({add_batch_size}) x max_length_time_axis ({t_len}) // period ({period})",
    )
    seq: dict[str, Any] = {"sample_sequence_length": sample_sequence_length, "period": period}
    exact: dict[str, Any] = {"reference_exact": True} if reference_exact else {}
    return PrioritisedTrajectoryBuffer(
        init=functools.partial(
            prioritised_init,
            add_batch_size=add_batch_size,
            max_length_time_axis=t_len,
            period=period,
        ),
        add=functools.partial(prioritised_add, device=device, **seq, **exact),
        sample=functools.partial(
            prioritised_sample,
            batch_size=sample_batch_size,
            sequence_length=sample_sequence_length,
            period=period,
            min_length_time_axis=min_len,
            **exact,
        ),
        can_sample=functools.partial(prioritised_can_sample, min_length_time_axis=min_len),
        set_priorities=functools.partial(
            set_priorities, priority_exponent=priority_exponent, device=device, **seq, **exact
        ),
        add_batch_size=add_batch_size,
        sample_batch_size=sample_batch_size,
        max_length_time_axis=t_len,
        min_length_time_axis=min_len,
        sample_sequence_length=sample_sequence_length,
        period=period,
        reference_exact=reference_exact,
    )


def make_prioritised_trajectory_buffer(
    add_batch_size: int,
    sample_batch_size: int,
    sample_sequence_length: int,
    period: int,
    min_length_time_axis: int,
    max_size: int | None = None,
    max_length_time_axis: int | None = None,
    priority_exponent: float = 0.6,
    device: str = "cpu",
    reference_exact: bool = False,
) -> PrioritisedTrajectoryBuffer:
    """Make a prioritised trajectory buffer (same signature and semantics as the reference's).

    ``max_length_time_axis`` is rounded down to a multiple of ``period`` with a warning that
    names the effective capacity.

    ``reference_exact=True`` (opt-in) reproduces Flashbax 0.1.3's prioritised draws bit for
    bit: new items get the recorded maximum priority truncated to an integer, the sums are
    kept by deltas as the reference keeps them (``device`` picks which of its two update
    paths), and the descent and ``set_priorities`` are unguarded as the reference's are. For a
    run moved from Flashbax that must first reproduce its old curves; the default is the
    correct behaviour (see the guide "Same draws as Flashbax").

    Args:
        add_batch_size: rows ``B`` of the state; batches given to ``add`` are ``[B, L, ...]``.
        sample_batch_size: sequences per ``sample`` call.
        sample_sequence_length: length ``L`` of sampled sequences.
        period: distance between the starts of consecutive items (sampleable sequences).
        min_length_time_axis: timesteps per row before ``can_sample`` is true.
        max_size: total timesteps (give this or ``max_length_time_axis``).
        max_length_time_axis: time-axis length ``T``.
        priority_exponent: alpha of the PER paper, in [0, 1].
        device: ``"cpu"`` updates the sum tree leaf by leaf where JAX's backend is the CPU;
            ``"gpu"``/``"tpu"``, or any ``device`` traced for an accelerator backend, level by
            level for the whole batch (the same tree). Another name warns and means ``"cpu"``,
            as the reference's does.
        reference_exact: reproduce Flashbax 0.1.3's prioritised draws bit for bit (opt-in).

    Returns:
        The buffer's pure functions (``init``, ``add``, ``sample``, ``can_sample``,
        ``set_priorities``) and its configuration.

    Raises:
        BufferConfigError: a size out of range, or a ``priority_exponent`` outside [0, 1].
        ArgumentTypeError: a size that is not an integer.

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> import buffers as fbx
        >>> buffer = fbx.make_prioritised_trajectory_buffer(
        ...     add_batch_size=2, sample_batch_size=4, sample_sequence_length=2, period=1,
        ...     min_length_time_axis=2, max_length_time_axis=8)
        >>> buffer = buffer.replace(
        ...     add=jax.jit(buffer.add), sample=jax.jit(buffer.sample),
        ...     set_priorities=jax.jit(buffer.set_priorities))
        >>> state = buffer.init({"r": jnp.float32(0)})
        >>> state = buffer.add(state, {"r": jnp.ones((2, 4))})
        >>> batch = buffer.sample(state, jax.random.key(0))
        >>> state = buffer.set_priorities(state, batch.indices, jnp.full(4, 2.0))
        >>> batch.experience["r"].shape
        (4, 2)
    """
    add_batch_size = positive_int("add_batch_size", add_batch_size)
    sample_batch_size = positive_int("sample_batch_size", sample_batch_size)
    period = positive_int("period", period)
    priority_exponent = check_priority_exponent(priority_exponent)
    device = check_device(device)
    reference_exact = check_bool("reference_exact", reference_exact)
    if reference_exact:
        device = _reference_exact.resolve_device(device)
    t_len = resolve_time_axis(add_batch_size, max_size, max_length_time_axis, stacklevel=2)
    t_len = divisible_time_axis(t_len, period, add_batch_size, stacklevel=2)
    return build_prioritised(
        add_batch_size,
        sample_batch_size,
        sample_sequence_length,
        period,
        min_length_time_axis,
        t_len,
        priority_exponent,
        device,
        reference_exact,
    )


__all__ = [
    "SET_BATCH_FN",
    "BufferSample",
    "BufferState",
    "Indices",
    "Priorities",
    "PrioritisedTrajectoryBuffer",
    "PrioritisedTrajectoryBufferSample",
    "PrioritisedTrajectoryBufferState",
    "Probabilities",
    "get_invalid_indices",
    "get_max_divisible_length",
    "get_num_items_in_row",
    "get_sum_tree_capacity",
    "get_tree_depth",
    "make_prioritised_trajectory_buffer",
    "prioritised_add",
    "prioritised_init",
    "prioritised_sample",
    "recompute_sums",
    "set_priorities",
    "sum_tree",
    "trajectory_buffer",
    "utils",
    "validate_device",
    "validate_priority_exponent",
    "validate_trajectory_buffer_args",
]
