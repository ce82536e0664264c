"""Episode-aware trajectory buffer: sampled windows never cross an episode boundary.

The core ring buffer plus, per slot, its step within its episode (``episode_step``: 0 at the
first step of an episode) and a sum tree with one leaf per slot. Leaf ``row * T + t`` is 1
exactly when a sampleable window *ends* at slot ``t`` of that row:

* a full window: ``episode_step >= L - 1`` (the ``L`` steps ending there lie in one episode,
  so an episode end can only be the window's last step), or
* with ``pad=True``, a whole episode shorter than ``L``: its last step (the episode ended
  there, and its start is known: ``start_known``, false for an episode that goes on after
  lost data), sampled as its ``episode_step + 1`` steps followed by zeros, with ``mask``
  false on the padding;

and the window's first step has not been overwritten (it does not straddle the write
position). Windows start at any offset (not only multiples of ``L``), and sampling is uniform
over all valid windows.

Costs: ``add`` of ``n`` steps updates ``B * (n + L - 1)`` tree leaves (the new slots, and the
``L - 1`` oldest slots per row whose windows may have lost their first step):
``O(B (n + L) log(B T))``. ``sample`` descends the tree once per item: ``O(batch log(B T))``,
independent of the buffer's contents (no scan). The tree holds float32 counts, exact up to
2**24 valid windows; beyond that the probabilities are uniform to float32 precision.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic

import jax
import jax.numpy as jnp
from jax import Array

from buffers import _sum_tree
from buffers._core import (
    RING_FIELDS,
    Experience,
    advance_indices,
    check_ring_state,
    check_sample_args,
    empty_ring,
    ready_mask,
    tree_shape_prefix,
    write_experience,
)
from buffers._errors import ArgumentTypeError, BufferConfigError
from buffers._pytree import derived, frozen_container, pytree_dataclass
from buffers._sum_tree import SumTreeState
from buffers._validation import (
    check,
    check_bool,
    check_item_count,
    check_sequence_args,
    check_state,
    describe,
    dtype_kind,
    dtype_name,
    key_to_str,
    positive_int,
    resolve_time_axis,
    validate_batch,
)
from buffers.trajectory_buffer import (
    TrajectoryBuffer,
    TrajectoryBufferSample,
    TrajectoryBufferState,
)

if TYPE_CHECKING:
    import chex

EpisodeEnd = str | Callable[[Any], Array]


@pytree_dataclass
class EpisodeBufferState(TrajectoryBufferState, Generic[Experience]):
    """A trajectory buffer state plus episode bookkeeping.

    Attributes:
        episode_step: int32 ``[B, T]``, steps since the slot's episode began.
        last_done: bool ``[B]``, whether the newest timestep of each row ended its episode
            (true initially, so the first step starts one).
        sum_tree_state: a sum tree with one leaf per slot, 1 where a valid window ends.
        start_known: bool ``[B, T]``, whether the slot's episode began at a known step; false
            for one that goes on after lost data (a ``gaps`` entry of ``from_state``), which
            is never sampled as a whole padded episode. Derived as all true when a state is
            built without it.
    """

    episode_step: Array = dataclasses.field(kw_only=True)
    last_done: Array = dataclasses.field(kw_only=True)
    sum_tree_state: SumTreeState = dataclasses.field(kw_only=True)
    start_known: Array = derived(default=None, kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.start_known is None:
            known = jnp.ones(jnp.shape(self.episode_step), bool)
            object.__setattr__(self, "start_known", known)


@pytree_dataclass
class EpisodeBufferSample(TrajectoryBufferSample, Generic[Experience]):
    """Sampled windows ``[batch, L, ...]`` that never cross an episode boundary.

    Attributes:
        mask: bool ``[batch, L]``, false on the zero padding after a short episode (all true
            without ``pad``).
    """

    mask: Array | None = dataclasses.field(default=None, kw_only=True)


_STATE_FIELDS = (*RING_FIELDS, "episode_step", "last_done", "sum_tree_state")


def check_episode_state(state: Any, what: str) -> None:
    """``state`` is an episode state whose sum tree has one leaf per slot."""
    check_state(state, _STATE_FIELDS, "EpisodeBufferState", what)
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    leaves = state.sum_tree_state.nodes.shape[-1] // 2
    check(
        leaves == _sum_tree.tree_size(b_size * t_len),
        f"{what}: `state` does not fit: its sum tree has {leaves} leaves but its [{b_size}, "
        f"{t_len}] slots need {_sum_tree.tree_size(b_size * t_len)}; build it with this "
        "buffer's `init` or `from_state`",
    )


def episode_init(
    experience: Experience,
    add_batch_size: int,
    max_length_time_axis: int,
    episode_end: EpisodeEnd | None = None,
) -> EpisodeBufferState[Experience]:
    """An empty episode state for timesteps shaped like ``experience``.

    With ``episode_end`` a leaf name, the timestep must have that leaf, one flag per timestep
    (shape ``[]``).
    """
    if isinstance(episode_end, str):
        episode_ends(experience, episode_end, (), "init")
    return EpisodeBufferState(
        **empty_ring(experience, add_batch_size, max_length_time_axis),
        episode_step=jnp.zeros((add_batch_size, max_length_time_axis), jnp.int32),
        last_done=jnp.ones((add_batch_size,), bool),
        sum_tree_state=_sum_tree.init(add_batch_size * max_length_time_axis),
        start_known=jnp.ones((add_batch_size, max_length_time_axis), bool),
    )


def _named_flags(batch: Any, episode_end: str, what: str) -> Any:
    """The leaf ``episode_end`` names in ``batch`` (a key, or an attribute).

    A typed error lists the fields the batch has when it has no such leaf.
    """
    if isinstance(batch, Mapping):
        if episode_end in batch:
            return batch[episode_end]
    elif hasattr(batch, episode_end):
        return getattr(batch, episode_end)
    paths, _ = jax.tree_util.tree_flatten_with_path(batch)
    fields = sorted({key_to_str(path[0]) for path, _ in paths if path})
    raise BufferConfigError(
        f"{what}: `episode_end` names the leaf {episode_end!r}, but the timesteps have no such "
        f"field; their fields are {fields}. Give make_episode_buffer episode_end=<the name of "
        "the leaf that marks an episode's last step>, or a function batch -> bool [B, n]."
    )


def episode_ends(
    batch: Any, episode_end: EpisodeEnd, shape: tuple[int, ...] | None = None, what: str = "add"
) -> Array:
    """The bool flags (``shape``, e.g. ``[B, L]``) marking the last step of an episode."""
    if callable(episode_end):
        flags = episode_end(batch)
        source = "`episode_end` (a function) must return"
    else:
        flags = _named_flags(batch, episode_end, what)
        source = f"the episode-end leaf experience/{episode_end} must be"
    dtype = getattr(flags, "dtype", None)
    if dtype is None and not isinstance(flags, (bool, int, float)):
        raise BufferConfigError(
            f"{what}: {source} one bool flag per timestep, got {describe(flags)}"
        )
    flags = jnp.asarray(flags)
    if shape is not None and flags.shape != shape:
        raise BufferConfigError(
            f"{what}: {source} one flag per timestep, shape {list(shape)}, got "
            f"{list(flags.shape)} {dtype_name(flags.dtype)}"
        )
    check(
        dtype_kind(flags.dtype) in "biuf",
        f"{what}: {source} bool (or numeric, nonzero = episode end), got {dtype_name(flags.dtype)}",
    )
    return flags.astype(bool)


def _steps_within(ends: Array, last_step: Array, last_done: Array) -> Array:
    """``episode_step`` of ``L`` new timesteps per row.

    Given the flags of each new step and the newest stored step (``last_step``,
    ``last_done``).
    """
    length = ends.shape[1]
    starts = _episode_starts(ends, last_done)
    idx = jnp.arange(length, dtype=jnp.int32)
    last_start = jax.lax.cummax(jnp.where(starts, idx, -1), axis=1)
    return jnp.where(last_start >= 0, idx - last_start, last_step[:, None] + 1 + idx)


def _episode_starts(ends: Array, last_done: Array) -> Array:
    """Whether each of ``L`` new timesteps per row begins an episode (after an end)."""
    return jnp.concatenate([last_done[:, None], ends[:, :-1]], axis=1)


def _window_weights(
    state: EpisodeBufferState,
    rows: Array,
    slots: Array,
    seq_len: int,
    pad: bool,
    ends: Array | None = None,
) -> Array:
    """1.0 where a sampleable window ends at ``(rows, slots)``, else 0.0 (same shapes).

    ``ends``: where episodes end (``[B, T]`` by slot); by default where the next stored
    step starts one.
    """
    t_len = state.episode_step.shape[1]
    filled = jnp.where(state.is_full, t_len, state.current_index)
    oldest = jnp.where(state.is_full, state.current_index, 0)
    logical = (slots - oldest) % t_len  # 0 = oldest stored timestep
    written = logical < filled
    step = state.episode_step[rows, slots]
    newest = logical == filled - 1
    after = state.episode_step[rows, (slots + 1) % t_len]
    ended = jnp.where(newest, state.last_done[rows], after == 0 if ends is None else ends)
    span = jnp.minimum(step, seq_len - 1)  # the window's steps before its last
    whole = ended & state.start_known[rows, slots]  # a whole episode, from its known start
    ok = (step >= seq_len - 1) | (pad & whole)
    return (written & ok & (span <= logical)).astype(jnp.float32)


def episode_add(
    state: EpisodeBufferState[Experience],
    batch: Experience,
    episode_end: EpisodeEnd,
    sequence_length: int,
    pad: bool,
    device: str,
) -> EpisodeBufferState[Experience]:
    """Append ``batch`` (``[B, n, ...]``) and update the windows it completes or invalidates."""
    check_episode_state(state, "add")
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    batch = validate_batch(state.experience, batch, 2, (b_size, "L"), max_time=t_len)
    n = tree_shape_prefix(batch, 2)[1]
    ends = episode_ends(batch, episode_end, (b_size, n), "add")
    newest = (state.current_index - 1) % t_len
    last_step = state.episode_step[:, newest]
    steps = _steps_within(ends, last_step, state.last_done)
    new_slots = (state.current_index + jnp.arange(n, dtype=jnp.int32)) % t_len
    episode_step = state.episode_step.at[:, new_slots].set(steps, unique_indices=True)
    # a step that begins no episode in the batch goes on with the newest stored one's
    begun = jax.lax.cummax(_episode_starts(ends, state.last_done).astype(jnp.int32), axis=1) > 0
    known = begun | state.start_known[:, newest][:, None]
    start_known = state.start_known.at[:, new_slots].set(known, unique_indices=True)
    state = state.replace(
        experience=write_experience(state.experience, batch, state.current_index, t_len),
        episode_step=episode_step,
        start_known=start_known,
        last_done=ends[:, -1],
        **advance_indices(state, n, t_len),
    )
    # new slots, then the L - 1 oldest (their windows may have lost their first step)
    oldest = jnp.where(state.is_full, state.current_index, 0)
    zone = (oldest + jnp.arange(sequence_length - 1, dtype=jnp.int32)) % t_len
    slots = jnp.concatenate([new_slots, zone])
    rows = jnp.broadcast_to(jnp.arange(b_size, dtype=jnp.int32)[:, None], (b_size, slots.shape[0]))
    slots = jnp.broadcast_to(slots[None], rows.shape)
    # where episodes end: the flags (the new ones, and the stored ones of the oldest slots),
    # never a next step's 0, which a restart of ``from_state`` (a seam) makes too
    stored = _stored_flags(state.experience, episode_end, zone, (b_size, zone.shape[0]))
    ended = jnp.concatenate([ends, stored], axis=1)
    weights = _window_weights(state, rows, slots, sequence_length, pad, ended)
    tree = _sum_tree.set_batch(state.sum_tree_state, rows * t_len + slots, weights, device=device)
    return state.replace(sum_tree_state=tree)


def _stored_flags(
    experience: Any, episode_end: EpisodeEnd, slots: Array, shape: tuple[int, int]
) -> Array:
    """The episode-end flags of the stored timesteps at ``slots`` of every row (``shape``)."""
    if isinstance(episode_end, str):  # only that leaf is gathered, also outside jit
        experience = _named_flags(experience, episode_end, "add")
        return episode_ends({"done": experience[:, slots]}, "done", shape, "add")
    picked = jax.tree.map(lambda x: x[:, slots], experience)
    return episode_ends(picked, episode_end, shape, "add")


def episode_can_sample(state: EpisodeBufferState[Experience], min_length_time_axis: int) -> Array:
    """At least ``min_length_time_axis`` steps per row and at least one valid window."""
    check_state(state, _STATE_FIELDS, "EpisodeBufferState", "can_sample")
    enough = state.is_full | (state.current_index >= min_length_time_axis)
    return enough & (_sum_tree.total(state.sum_tree_state) > 0)


def episode_sample(
    state: EpisodeBufferState[Experience],
    rng_key: chex.PRNGKey,
    batch_size: int,
    sequence_length: int,
    min_length_time_axis: int,
) -> EpisodeBufferSample[Experience]:
    """Draw ``batch_size`` windows uniformly over every valid window (see the module doc)."""
    check_episode_state(state, "sample")
    check_sample_args(state, rng_key, batch_size, sequence_length)
    valid = ready_mask(episode_can_sample(state, min_length_time_axis), batch_size, "sample")
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    leaf = _sum_tree.sample(state.sum_tree_state, rng_key, batch_size, b_size * t_len)
    rows, ends = leaf // t_len, leaf % t_len
    span = jnp.minimum(state.episode_step[rows, ends], sequence_length - 1)
    offsets = jnp.arange(sequence_length, dtype=jnp.int32)
    times = (ends[:, None] - span[:, None] + offsets) % t_len
    mask = offsets[None, :] <= span[:, None]

    def take(x: Array) -> Array:
        got = x[rows[:, None], times]
        keep = mask.reshape(mask.shape + (1,) * (got.ndim - 2))
        return jnp.where(keep, got, jnp.zeros((), got.dtype))

    return EpisodeBufferSample(
        experience=jax.tree.map(take, state.experience), valid=valid, mask=mask & valid[:, None]
    )


def episode_state_from(
    state: TrajectoryBufferState[Experience],
    episode_end: EpisodeEnd,
    sequence_length: int,
    pad: bool = False,
    device: str = "cpu",
    *,
    restarts: Sequence[int] | Array = (),
    start_known: bool | Sequence[bool] | Array | None = None,
    gaps: Sequence[int] | Array = (),
) -> EpisodeBufferState[Experience]:
    """An episode buffer state holding the data of a trajectory-buffer state.

    For example a state from ``vault.read(...)``: episode steps are rebuilt from its
    episode-end flags, in time order from its oldest timestep. O(B T) once; the result
    samples and adds as usual.

    Args:
        state: the trajectory-buffer state.
        episode_end: the done leaf (or leaves, or a function of a timestep) that ends an
            episode, as the buffer's ``episode_end``.
        sequence_length: the buffer's window length.
        pad: whether episodes shorter than a window are sampled whole, padded.
        device: where the sum tree is updated, as the buffer's ``device``.
        restarts: timesteps (counted from the oldest stored one, 0) where every row begins
            a new episode whatever its flags say, such as a vault's seams:
            ``vault.episode_seams(start=a, stop=b)`` gives them for
            ``vault.read(start=a, stop=b)``, with ``gaps`` and ``start_known``. The timesteps
            before a restart end no episode (with ``pad=True`` they are not sampled as a
            whole one).
        gaps: timesteps (counted as ``restarts``) where data were lost just before (a vault
            seam with ``lost > 0``), or where another source began (a new buffer's first
            write): every row restarts there too, but the episode that goes on there has no
            known start, so it is never sampled as a whole padded one.
        start_known: whether each row's oldest stored timestep begins an episode (one
            bool for every row, or one per row, ``[B]``). By default it does unless the ring
            has wrapped (``write_counter`` beyond what is
            stored: its start was overwritten). Where it does not (also data read from the
            middle of an episode: pass ``False``), windows of that first episode are
            sampled only where they lie within the stored timesteps, and it is never
            sampled as a whole padded episode.

    Returns:
        The episode buffer's state.

    Raises:
        BufferConfigError: ``start_known`` neither one bool nor one per row.
    """
    check_ring_state(state, "from_state")
    b_size, t_len = tree_shape_prefix(state.experience, 2)
    filled = jnp.where(state.is_full, t_len, state.current_index)
    oldest = jnp.where(state.is_full, state.current_index, 0)
    order = (oldest + jnp.arange(t_len, dtype=jnp.int32)) % t_len  # logical -> physical
    ends = episode_ends(state.experience, episode_end, (b_size, t_len), "from_state")[:, order]
    if start_known is None:
        high, low = state.write_counter[0], state.write_counter[1]  # (uint32[2] counter)
        known = (high == 0) & (low <= filled.astype(jnp.uint32))  # nothing overwritten
    else:
        known = jnp.asarray(start_known, bool)
        check(
            known.shape in ((), (b_size,)),
            f"from_state: start_known must be one bool or one per row ([{b_size}]), got "
            f"shape {known.shape}",
        )
        known = known.reshape(-1, 1) if known.ndim else known
    logical = jnp.arange(t_len, dtype=jnp.int32)

    def at(positions: Sequence[int] | Array) -> Array:  # [T]: whether each step is one
        if not len(positions):
            return jnp.zeros((t_len,), bool)
        return (logical[:, None] == jnp.asarray(positions, jnp.int32)[None]).any(axis=1)

    gap = at(gaps)
    starts = jnp.concatenate([jnp.broadcast_to(known, (b_size, 1)), ends[:, :-1]], axis=1)
    starts = starts | at(restarts)[None] | gap[None]
    last_start = jax.lax.cummax(jnp.where(starts, logical, -1), axis=1)
    # an episode that goes on after a gap ends where its flags say, but is never whole
    after_gap = gap[jnp.maximum(last_start, 0)] & (last_start >= 0)
    ends_whole = ends & ~after_gap
    # before the first known start, steps count on from beyond the ring (its start unknown)
    steps = jnp.where(last_start >= 0, logical - last_start, t_len + logical)
    episode_step = jnp.zeros((b_size, t_len), jnp.int32).at[:, order].set(steps)
    last = jnp.maximum(filled - 1, 0)
    out: EpisodeBufferState[Experience] = EpisodeBufferState(
        experience=state.experience,
        current_index=state.current_index,
        is_full=state.is_full,
        write_counter=state.write_counter,
        episode_step=episode_step,
        last_done=jnp.where(filled > 0, ends[:, last], True),
        sum_tree_state=_sum_tree.init(b_size * t_len),
        start_known=jnp.zeros((b_size, t_len), bool).at[:, order].set(~after_gap),
    )
    rows = jnp.broadcast_to(jnp.arange(b_size, dtype=jnp.int32)[:, None], (b_size, t_len))
    slots = jnp.broadcast_to(jnp.arange(t_len, dtype=jnp.int32)[None], (b_size, t_len))
    ended = jnp.zeros((b_size, t_len), bool).at[:, order].set(ends_whole)  # done/truncated
    weights = _window_weights(out, rows, slots, sequence_length, pad, ended)
    tree = _sum_tree.set_batch(out.sum_tree_state, rows * t_len + slots, weights, device=device)
    return out.replace(sum_tree_state=tree)


@frozen_container
class EpisodeBuffer(TrajectoryBuffer, Generic[Experience]):
    """A trajectory buffer whose ``sample`` never crosses an episode boundary.

    Attributes:
        from_state: ``from_state(trajectory_state, *, restarts=(), start_known=None,
            gaps=()) -> EpisodeBufferState``: a trajectory-buffer state (for example one read from a
            vault, with the vault's seams as ``restarts``) as this buffer's state
            (:func:`episode_state_from`).
        pad: whether whole episodes shorter than the sequence length are sampled, padded.
    """

    from_state: Callable[..., Any] = dataclasses.field(kw_only=True)
    pad: bool = dataclasses.field(default=False, kw_only=True)


def make_episode_buffer(
    add_batch_size: int,
    sample_batch_size: int,
    sample_sequence_length: int,
    min_length_time_axis: int,
    max_size: int | None = None,
    max_length_time_axis: int | None = None,
    *,
    episode_end: EpisodeEnd = "done",
    pad: bool = False,
    device: str = "cpu",
) -> EpisodeBuffer:
    """Make an episode-aware trajectory buffer (see the module docstring).

    Windows may start at any offset, so there is no ``period``.

    Args:
        add_batch_size: rows ``B`` of the state; batches given to ``add`` are ``[B, n, ...]``.
        sample_batch_size: windows per ``sample`` call.
        sample_sequence_length: length ``L`` of sampled windows.
        min_length_time_axis: timesteps per row before ``can_sample`` is true.
        max_size: total timesteps (give this or ``max_length_time_axis``).
        max_length_time_axis: time-axis length ``T``.
        episode_end: the key (or attribute) of the bool leaf that marks an episode's last step
            in the timesteps given to ``add``, or a function ``batch -> bool [B, n]`` (for
            example ``lambda b: b["terminated"] | b["truncated"]``).
        pad: also sample whole episodes shorter than ``sample_sequence_length``, zero-padded
            after their end with ``mask`` false there (otherwise they are never sampled).
        device: ``"cpu"`` or an accelerator, for the sum-tree update strategy.

    Returns:
        The buffer's pure functions (``init``, ``add``, ``sample``, ``can_sample``,
        ``from_state``) and its configuration.

    Raises:
        BufferConfigError: a size out of range, or a device that is not cpu, gpu or tpu.
        ArgumentTypeError: a size that is not an integer, or an ``episode_end`` that is
            neither a leaf name nor a function.

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> import buffers as fbx
        >>> buffer = fbx.make_episode_buffer(
        ...     add_batch_size=1, sample_batch_size=8, sample_sequence_length=3,
        ...     min_length_time_axis=3, max_length_time_axis=16)
        >>> buffer = buffer.replace(add=jax.jit(buffer.add), sample=jax.jit(buffer.sample))
        >>> state = buffer.init({"t": jnp.int32(0), "done": jnp.bool_(False)})
        >>> done = jnp.arange(8)[None] == 3  # the first episode ends at t = 3
        >>> state = buffer.add(state, {"t": jnp.arange(8, dtype=jnp.int32)[None], "done": done})
        >>> t = buffer.sample(state, jax.random.key(0)).experience["t"]
        >>> bool(((t <= 3).all(axis=1) | (t >= 4).all(axis=1)).all())  # never across t = 3
        True
    """
    add_batch_size = positive_int("add_batch_size", add_batch_size)
    sample_batch_size = positive_int("sample_batch_size", sample_batch_size)
    t_len = resolve_time_axis(add_batch_size, max_size, max_length_time_axis, stacklevel=2)
    min_len = check_sequence_args(sample_sequence_length, 1, min_length_time_axis, t_len)
    sample_sequence_length = int(sample_sequence_length)
    check_item_count(
        add_batch_size * t_len,
        f"add_batch_size ({add_batch_size}) x max_length_time_axis ({t_len})",
    )
    if not (callable(episode_end) or isinstance(episode_end, str)):
        raise ArgumentTypeError(
            "`episode_end` must be a leaf name (str) or a function batch -> bool [B, n], got "
            f"{describe(episode_end)}"
        )
    pad = check_bool("pad", pad)
    check(device in ("cpu", "gpu", "tpu"), f"device must be cpu, gpu or tpu, got {device!r}")
    settings: dict[str, Any] = {"sequence_length": sample_sequence_length, "pad": pad}
    return EpisodeBuffer(
        init=functools.partial(
            episode_init,
            add_batch_size=add_batch_size,
            max_length_time_axis=t_len,
            episode_end=episode_end,
        ),
        add=functools.partial(episode_add, episode_end=episode_end, device=device, **settings),
        sample=functools.partial(
            episode_sample,
            batch_size=sample_batch_size,
            sequence_length=sample_sequence_length,
            min_length_time_axis=min_len,
        ),
        can_sample=functools.partial(episode_can_sample, min_length_time_axis=min_len),
        from_state=functools.partial(
            episode_state_from, episode_end=episode_end, device=device, **settings
        ),
        add_batch_size=add_batch_size,
        sample_batch_size=sample_batch_size,
        max_length_time_axis=t_len,
        min_length_time_axis=min_len,
        sample_sequence_length=sample_sequence_length,
        period=1,
        pad=bool(pad),
    )
