"""A catalogue of bad inputs to the public API of ``buffers``, each pinned to a typed error.

One row per kind of bad input: a short id, a callable that triggers it, the error type of the
:class:`buffers.BufferError` hierarchy it must raise, and a fragment of the message that
names the argument or leaf path, what was expected and what was got (and the remedy, where
one fits). Shapes are tiny; values that would need petabytes are refused before anything is
allocated, so those rows are as cheap as the others.

After the catalogue: the hierarchy (every error is also the matching builtin), what happens to
bad priorities under ``jit`` (ignored; values are checked only when concrete), and inputs that
code written for the reference (Flashbax) passes, which must keep working.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers
from buffers import (
    ArgumentTypeError,
    BatchStructureError,
    BufferConfigError,
    BufferTooLargeError,
    NotReadyError,
    PriorityError,
    QueueFullError,
)

KEY = jax.random.PRNGKey(0)
PETA = 2**50


def ts() -> dict[str, Any]:
    """One timestep: ``obs`` float32[2], ``reward`` float32[]."""
    return {"obs": jnp.zeros((2,), jnp.float32), "reward": jnp.zeros((), jnp.float32)}


def batch(b: int = 2, length: int = 1, **changes: Any) -> dict[str, Any]:
    """A ``[b, length]`` batch of :func:`ts` timesteps, with some leaves replaced."""
    out: dict[str, Any] = {"obs": jnp.zeros((b, length, 2)), "reward": jnp.zeros((b, length))}
    out.update(changes)
    return out


class Step(NamedTuple):
    obs: Any
    reward: Any


# Buffers and states shared by the rows (built on first use; 2 rows x 8 timesteps).
@functools.cache
def traj() -> buffers.TrajectoryBuffer:
    return buffers.make_trajectory_buffer(2, 2, 2, 1, 2, max_length_time_axis=8)


@functools.cache
def traj_state() -> Any:
    return traj().init(ts())


@functools.cache
def traj_filled() -> Any:
    """4 timesteps per row: sampleable."""
    return traj().add(traj_state(), batch(length=4))


@functools.cache
def prio() -> buffers.PrioritisedTrajectoryBuffer:
    return buffers.make_prioritised_trajectory_buffer(
        2, 2, 2, 1, 2, max_length_time_axis=8, priority_exponent=1.0
    )


@functools.cache
def prio_state() -> Any:
    """16 items (2 rows x 8 slots), 3 of each row sampleable."""
    return prio().add(prio().init(ts()), batch(length=4))


@functools.cache
def queue() -> buffers.TrajectoryQueue:
    return buffers.make_trajectory_queue(4, 2, 1, 1)


@functools.cache
def episodes() -> buffers.EpisodeBuffer:
    return buffers.make_episode_buffer(2, 2, 2, 2, max_length_time_axis=8)


def episode_ts() -> dict[str, Any]:
    return {"obs": jnp.zeros((2,)), "done": jnp.zeros((), bool)}


def n_step_with_map(functional_map: Any) -> Any:
    return buffers.make_n_step_buffer(8, 1, 1, n_step=2, n_step_functional_map=functional_map)


def sample_n_step_with_unknown_field() -> Any:
    buffer = n_step_with_map({("reward", "rewrd"): lambda r: r})
    state = buffer.init(ts())
    for _ in range(3):
        state = buffer.add(state, {"obs": jnp.zeros(2), "reward": 0.0})
    return buffer.sample(state, KEY)


def add_to_full_queue() -> Any:
    state = queue().init(ts())
    for _ in range(4):
        state = queue().add(state, batch())
    return queue().add(state, batch())


def item_add(value: Any, dtype: Any) -> Any:
    buffer = buffers.make_item_buffer(8, 1, 1)
    return buffer.add(buffer.init({"a": jnp.zeros((), dtype)}), {"a": value})


def mixer_over(*parts: Any) -> buffers.Mixer:
    return buffers.make_mixer(list(parts), 2, [1] * len(parts))


class Bad(NamedTuple):
    id: str
    trigger: Callable[[], Any]
    error: type[Exception]
    fragment: str


CATALOGUE = [
    # ---- sizes given to the factories: types --------------------------------------------
    Bad(
        "capacity-float",
        lambda: buffers.make_flat_buffer(2.5, 1, 1),
        ArgumentTypeError,
        "`max_length` must be an integer >= 1, got 2.5 (float): pass a Python int, "
        "e.g. max_length=2",
    ),
    Bad(
        "capacity-whole-float",
        lambda: buffers.make_trajectory_buffer(2, 2, 2, 1, 2, max_size=16.0),
        ArgumentTypeError,
        "`max_size` must be an integer >= 1, got 16.0 (float): pass a Python int, e.g. max_size=16",
    ),
    Bad(
        "size-bool",
        lambda: buffers.make_flat_buffer(8, 1, True),
        ArgumentTypeError,
        "`sample_batch_size` must be an integer >= 1, got True (bool): a bool is not a size",
    ),
    Bad(
        "size-str",
        lambda: buffers.make_trajectory_buffer("2", 2, 2, 1, 2, max_length_time_axis=8),
        ArgumentTypeError,
        "`add_batch_size` must be an integer >= 1, got '2' (str)",
    ),
    Bad(
        "size-numpy-float",
        lambda: buffers.make_trajectory_buffer(2, 2, 2, 1, 2, max_length_time_axis=np.float32(8)),
        ArgumentTypeError,
        "`max_length_time_axis` must be an integer >= 1, got np.float32(8.0) (float32)",
    ),
    Bad(
        "period-float",
        lambda: buffers.make_trajectory_buffer(2, 2, 2, 1.5, 2, max_length_time_axis=8),
        ArgumentTypeError,
        "`period` must be an integer >= 1, got 1.5 (float)",
    ),
    Bad(
        "add-batch-size-float",
        lambda: buffers.make_flat_buffer(8, 1, 1, add_batch_size=2.0),
        ArgumentTypeError,
        "`add_batch_size` must be an integer >= 1, got 2.0 (float)",
    ),
    Bad(
        "n-step-float",
        lambda: buffers.make_n_step_buffer(8, 1, 1, n_step=2.0),
        ArgumentTypeError,
        "`n_step` must be an integer >= 1, got 2.0 (float): pass a Python int, e.g. n_step=2",
    ),
    Bad(
        "n-step-bool",
        lambda: buffers.make_n_step_buffer(8, 1, 1, n_step=True),
        ArgumentTypeError,
        "`n_step` must be an integer >= 1, got True (bool)",
    ),
    Bad(
        "queue-size-float",
        lambda: buffers.make_trajectory_queue(8.0, 2, 1, 1),
        ArgumentTypeError,
        "`max_length_time_axis` must be an integer >= 1, got 8.0 (float)",
    ),
    Bad(
        "flag-not-bool",
        lambda: buffers.make_flat_buffer(8, 1, 1, add_sequences="no"),
        ArgumentTypeError,
        "`add_sequences` must be a bool (True or False), got 'no' (str)",
    ),
    Bad(
        "flag-int-not-0-or-1",
        lambda: buffers.make_item_buffer(8, 1, 1, add_batches=2),
        ArgumentTypeError,
        "`add_batches` must be a bool (True or False), got 2 (int)",
    ),
    # ---- sizes given to the factories: ranges -------------------------------------------
    Bad(
        "size-zero",
        lambda: buffers.make_item_buffer(0, 0, 1),
        BufferConfigError,
        "`max_length` must be an integer >= 1, got 0",
    ),
    Bad(
        "size-negative",
        lambda: buffers.make_trajectory_buffer(2, 2, 2, 1, -1, max_length_time_axis=8),
        BufferConfigError,
        "`min_length_time_axis` must be an integer >= 0, got -1",
    ),
    Bad(
        "sequence-length-zero",
        lambda: buffers.make_trajectory_buffer(2, 2, 0, 1, 2, max_length_time_axis=8),
        BufferConfigError,
        "`sample_sequence_length` must be an integer >= 1, got 0",
    ),
    Bad(
        "sequence-longer-than-time-axis",
        lambda: buffers.make_trajectory_buffer(2, 2, 9, 1, 2, max_length_time_axis=8),
        BufferConfigError,
        "`sample_sequence_length` (9) must be <= `max_length_time_axis` (8)",
    ),
    Bad(
        "both-max-size-and-time-axis",
        lambda: buffers.make_trajectory_buffer(2, 2, 2, 1, 2, 16, 8),
        BufferConfigError,
        "give exactly one of `max_size` and `max_length_time_axis`, got max_size=16, "
        "max_length_time_axis=8",
    ),
    Bad(
        "max-size-below-add-batch-size",
        lambda: buffers.make_trajectory_buffer(4, 2, 2, 1, 2, max_size=3),
        BufferConfigError,
        "`max_size` (3) must be at least `add_batch_size` (4)",
    ),
    Bad(
        "flat-rows-too-short",
        lambda: buffers.make_flat_buffer(3, 1, 1, add_batch_size=2),
        BufferConfigError,
        "`max_length // add_batch_size` must be >= 2, got 3//2 = 1",
    ),
    Bad(
        "item-min-above-max",
        lambda: buffers.make_item_buffer(8, 9, 1),
        BufferConfigError,
        "`min_length` (9) must be <= `max_length` (8)",
    ),
    Bad(
        "n-step-not-below-max-length",
        lambda: buffers.make_n_step_buffer(8, 1, 1, n_step=8),
        BufferConfigError,
        "`n_step` (8) must be < `max_length` (8)",
    ),
    Bad(
        "queue-sequence-longer-than-time-axis",
        lambda: buffers.make_trajectory_queue(8, 2, 1, 9),
        BufferConfigError,
        "`sample_sequence_length` (9) and `add_sequence_length` (1) must be <= the time axis (8)",
    ),
    Bad(
        "priority-exponent-above-1",
        lambda: buffers.make_prioritised_flat_buffer(8, 1, 1, priority_exponent=1.5),
        BufferConfigError,
        "`priority_exponent` must be in [0, 1], got 1.5",
    ),
    Bad(
        "priority-exponent-nan",
        lambda: buffers.make_prioritised_item_buffer(8, 1, 1, priority_exponent=float("nan")),
        BufferConfigError,
        "`priority_exponent` must be in [0, 1], got nan",
    ),
    Bad(
        "priority-exponent-str",
        lambda: buffers.make_prioritised_trajectory_buffer(
            2,
            2,
            2,
            1,
            2,
            max_length_time_axis=8,
            priority_exponent="0.5",
        ),
        ArgumentTypeError,
        "`priority_exponent` must be a real number, got '0.5' (str): pass a float in [0, 1]",
    ),
    # ---- sizes beyond int32 indices, and beyond memory (refused before allocating) -------
    Bad(
        "time-axis-beyond-int32",
        lambda: buffers.make_trajectory_buffer(1, 1, 1, 1, 1, max_length_time_axis=2**31),
        BufferConfigError,
        "`max_length_time_axis` (2147483648) gives rows of 2147483648 timesteps, more than "
        "1073741824",
    ),
    Bad(
        "flat-capacity-beyond-int32",
        lambda: buffers.make_flat_buffer(2**40, 1, 1),
        BufferConfigError,
        "`max_length` (1099511627776) // `add_batch_size` (1) gives rows of 1099511627776 "
        "timesteps",
    ),
    Bad(
        "sum-tree-beyond-int32",
        lambda: buffers.make_prioritised_trajectory_buffer(
            4, 1, 1, 1, 1, max_length_time_axis=2**30
        ),
        BufferConfigError,
        "add_batch_size (4) x max_length_time_axis (1073741824) // period (1) = 4294967296 "
        "sum-tree items, more than 1073741824",
    ),
    Bad(
        "state-of-petabytes",
        lambda: buffers.make_trajectory_buffer(2**20, 1, 1, 1, 1, max_length_time_axis=2**30).init(
            ts()
        ),
        BufferTooLargeError,
        "init: the state would need 12.0 PiB (13510798882111488 bytes: 1048576 rows "
        "(add_batch_size) x 1073741824 timesteps (max_length_time_axis) x 12 bytes per timestep)",
    ),
    Bad(
        "replay-buffer-of-petabytes",
        lambda: buffers.ReplayBuffer(PETA).init(ts()),
        BufferTooLargeError,
        f"ReplayBuffer.init: the state would need 12.0 PiB ({12 * PETA} bytes: {PETA} "
        "transitions (buffer_size) x 12 bytes per transition)",
    ),
    Bad(
        "sample-of-petabytes",
        lambda: buffers.make_trajectory_buffer(2, PETA, 2, 1, 2, max_length_time_axis=8).sample(
            traj_state(), KEY
        ),
        BufferTooLargeError,
        f"sample: the sample would need 24.0 PiB ({24 * PETA} bytes: {PETA} sample_batch_size "
        "x 2 timesteps x 12 bytes per timestep)",
    ),
    # ---- the example timestep given to init ---------------------------------------------
    Bad(
        "init-string-leaf",
        lambda: traj().init({"obs": "abc"}),
        ArgumentTypeError,
        "experience/obs: expected an array or a number (bool or numeric dtype), got 'abc' (str)",
    ),
    Bad(
        "init-numpy-string-array",
        lambda: traj().init({"obs": jnp.zeros(2), "name": np.array(["cartpole"])}),
        ArgumentTypeError,
        "experience/name: expected an array or a number (bool or numeric dtype), got "
        "str256[1] (ndarray), whose dtype is not bool or numeric",
    ),
    Bad(
        "init-object-leaf",
        lambda: traj().init({"obs": jnp.zeros(2), "info": object}),
        ArgumentTypeError,
        "experience/info: expected an array or a number (bool or numeric dtype), got "
        "<class 'object'> (type)",
    ),
    Bad(
        "init-empty-pytree",
        lambda: traj().init({}),
        BufferConfigError,
        "`init` needs a timestep with at least one array leaf, got none ({} (dict))",
    ),
    # ---- batches given to add -----------------------------------------------------------
    Bad(
        "add-missing-leaf",
        lambda: traj().add(traj_state(), {"obs": jnp.zeros((2, 1, 2))}),
        BatchStructureError,
        "experience/reward: expected a leaf here, got nothing",
    ),
    Bad(
        "add-extra-leaf",
        lambda: traj().add(traj_state(), batch(action=jnp.zeros((2, 1), jnp.int32))),
        BatchStructureError,
        "experience/action: expected no leaf here, got a leaf",
    ),
    Bad(
        "add-tuple-for-dict",
        lambda: traj().add(traj_state(), (jnp.zeros((2, 1, 2)), jnp.zeros((2, 1)))),
        BatchStructureError,
        "experience/0: expected no leaf here, got a leaf",
    ),
    Bad(
        "add-namedtuple-for-dict",
        lambda: traj().add(traj_state(), Step(jnp.zeros((2, 1, 2)), jnp.zeros((2, 1)))),
        BatchStructureError,
        "experience: expected structure PyTreeDef({'obs': *, 'reward': *}), got "
        "PyTreeDef(CustomNode(namedtuple[Step], [*, *]))",
    ),
    Bad(
        "add-wrong-dtype",
        lambda: traj().add(traj_state(), batch(obs=jnp.zeros((2, 1, 2), jnp.int32))),
        BatchStructureError,
        "experience/obs: expected [2, 1..8, 2] float32, got [2, 1, 2] int32",
    ),
    Bad(
        "add-float64-numpy",
        lambda: traj().add(traj_state(), batch(obs=np.zeros((2, 1, 2)))),
        BatchStructureError,
        "experience/obs: expected [2, 1..8, 2] float32, got [2, 1, 2] float64",
    ),
    Bad(
        "add-wrong-item-shape",
        lambda: traj().add(traj_state(), batch(obs=jnp.zeros((2, 1, 3)))),
        BatchStructureError,
        "experience/obs: expected [2, 1..8, 2] float32, got [2, 1, 3] float32",
    ),
    Bad(
        "add-wrong-add-batch-size",
        lambda: traj().add(traj_state(), batch(b=3)),
        BatchStructureError,
        "experience/obs: expected [2, 1..8, 2] float32, got [3, 1, 2] float32",
    ),
    Bad(
        "add-mismatched-time-axes",
        lambda: traj().add(traj_state(), batch(reward=jnp.zeros((2, 3)))),
        BatchStructureError,
        "experience/reward: expected axis L of size 1 (as experience/obs), got 3",
    ),
    Bad(
        "add-empty-time-axis",
        lambda: traj().add(traj_state(), batch(length=0)),
        BatchStructureError,
        "experience/obs: expected [2, 1..8, 2] float32, got [2, 0, 2] float32",
    ),
    Bad(
        "add-longer-than-time-axis",
        lambda: traj().add(traj_state(), batch(length=9)),
        BatchStructureError,
        "experience/obs: expected [2, 1..8, 2] float32, got [2, 9, 2] float32",
    ),
    Bad(
        "add-string-leaf",
        lambda: traj().add(traj_state(), batch(obs="abc")),
        BatchStructureError,
        "experience/obs: expected [2, 1..8, 2] float32, got 'abc' (str)",
    ),
    Bad(
        "add-python-float-to-int-leaf",
        lambda: item_add(2.5, jnp.int32),
        BatchStructureError,
        "experience/a: expected [] int32, got 2.5 (float)",
    ),
    Bad(
        "add-python-int-overflowing-uint8",
        lambda: item_add(300, jnp.uint8),
        BatchStructureError,
        "experience/a: expected [] uint8, got 300 (int)",
    ),
    Bad(
        "flat-add-without-the-batch-axis",
        lambda: (lambda b: b.add(b.init(ts()), ts()))(
            buffers.make_flat_buffer(8, 1, 1, add_batch_size=2)
        ),
        BatchStructureError,
        "experience/obs: expected [2, 2] float32, got [2] float32",
    ),
    Bad(
        "add-more-items-than-capacity",
        lambda: (
            lambda b: b.add(b.init(ts()), {"obs": jnp.zeros((12, 2)), "reward": jnp.zeros(12)})
        )(buffers.make_item_buffer(8, 1, 1, add_batches=True)),
        BatchStructureError,
        "add: 12 items do not fit a buffer of max_length 8",
    ),
    Bad(
        "add-more-transitions-than-replay-buffer",
        lambda: buffers.ReplayBuffer(4).add(
            buffers.ReplayBuffer(4).init(ts()),
            {"obs": jnp.zeros((5, 2)), "reward": jnp.zeros(5)},
        ),
        BufferConfigError,
        "ReplayBuffer.add: 5 transitions exceed buffer_size 4",
    ),
    Bad(
        "add-to-full-queue",
        add_to_full_queue,
        QueueFullError,
        "add: 1 timestep does not fit: the queue holds 4 unread of 4",
    ),
    # ---- states: of another kind, or made by another buffer -----------------------------
    Bad(
        "add-queue-state-to-trajectory-buffer",
        lambda: traj().add(queue().init(ts()), batch()),
        ArgumentTypeError,
        "add: `state` must be a TrajectoryBufferState (from this buffer's `init`), got "
        "TrajectoryQueueState, which has no current_index",
    ),
    Bad(
        "add-dict-as-state",
        lambda: buffers.make_flat_buffer(8, 1, 1).add({"obs": 1}, ts()),
        ArgumentTypeError,
        "add: `state` must be a buffer state (from this buffer's `init`), got dict, which has "
        "no experience",
    ),
    Bad(
        "sample-a-state-restored-as-a-dict",  # orbax's restore without a target
        lambda: traj().sample(dict(traj_state().items()), KEY),
        ArgumentTypeError,
        "got a dict with its fields (what orbax restores without a target): restore it with "
        "the target `buffer.init(example)`",
    ),
    Bad(
        "sample-trajectory-state-from-prioritised",
        lambda: prio().sample(traj_state(), KEY),
        ArgumentTypeError,
        "sample: `state` must be a PrioritisedTrajectoryBufferState (from this buffer's "
        "`init`), got TrajectoryBufferState, which has no sum_tree_state",
    ),
    Bad(
        "can-sample-state-of-queue",
        lambda: traj().can_sample(queue().init(ts())),
        ArgumentTypeError,
        "can_sample: `state` must be a TrajectoryBufferState",
    ),
    Bad(
        "sample-state-too-short-for-sequences",
        lambda: buffers.make_trajectory_buffer(2, 2, 9, 1, 9, max_length_time_axis=16).sample(
            traj_state(), KEY
        ),
        BufferConfigError,
        "sample: sequences of 9 timesteps cannot come from a state whose time axis holds 8",
    ),
    Bad(
        "prioritised-state-of-another-period",
        lambda: buffers.make_prioritised_trajectory_buffer(
            2, 2, 2, 2, 2, max_length_time_axis=8
        ).sample(prio_state(), KEY),
        BufferConfigError,
        "sample: `state` does not fit this buffer: its sum tree has 16 leaves and its time "
        "axis 8 timesteps, but [2, 8] with period 2 needs 8 leaves",
    ),
    Bad(
        "hand-built-state-with-empty-experience",
        lambda: buffers.TrajectoryBufferState(
            experience={}, current_index=jnp.int32(0), is_full=jnp.bool_(False)
        ),
        BufferConfigError,
        "expected arrays with at least 2 leading axes (a state's `experience` is "
        "[add_batch_size, max_length_time_axis, ...]), got no leaves",
    ),
    Bad(
        "hand-built-state-without-time-axis",
        lambda: buffers.TrajectoryBufferState(
            experience={"obs": jnp.zeros(8)}, current_index=jnp.int32(0), is_full=jnp.bool_(False)
        ),
        BufferConfigError,
        "got leaf obs of shape [8]: build states with the buffer's `init`",
    ),
    # ---- sample ---------------------------------------------------------------------------
    Bad(
        "sample-not-ready",
        lambda: traj().sample(traj_state(), KEY),
        NotReadyError,
        "sample: the buffer cannot be sampled yet (`can_sample(state)` is false)",
    ),
    Bad(
        "queue-sample-not-ready",
        lambda: queue().sample(queue().init(ts())),
        NotReadyError,
        "sample: the buffer cannot be sampled yet (`can_sample(state)` is false)",
    ),
    Bad(
        "sample-int-as-key",
        lambda: traj().sample(traj_state(), 0),
        ArgumentTypeError,
        "sample: `rng_key` must be one PRNG key (`jax.random.PRNGKey(seed)` or "
        "`jax.random.key(seed)`), got 0 (int)",
    ),
    Bad(
        "sample-batch-of-keys",
        lambda: prio().sample(prio_state(), jax.random.split(KEY, 3)),
        ArgumentTypeError,
        "got uint32[3, 2] (ArrayImpl); for a batch of keys, map over it with `jax.vmap`",
    ),
    Bad(
        "replay-sample-batch-size-zero",
        lambda: buffers.ReplayBuffer(4).sample(buffers.ReplayBuffer(4).init(ts()), 0, KEY),
        BufferConfigError,
        "`batch_size` must be an integer >= 1, got 0",
    ),
    # ---- set_priorities (concrete arrays: checked; see the jit test below) ---------------
    Bad(
        "priorities-nan",
        lambda: prio().set_priorities(prio_state(), jnp.array([0, 1]), jnp.array([jnp.nan, 1])),
        PriorityError,
        "set_priorities: `priorities` must be finite and >= 0, got 1 bad: nan at position 0",
    ),
    Bad(
        "priorities-negative",
        lambda: prio().set_priorities(prio_state(), jnp.array([0, 1]), jnp.array([1.0, -1.0])),
        PriorityError,
        "got 1 bad: -1.0 at position 1. Use e.g. |td_error| + 1e-6",
    ),
    Bad(
        "priorities-infinite",
        lambda: prio().set_priorities(prio_state(), np.array([0, 1]), np.array([np.inf, 1.0])),
        PriorityError,
        "got 1 bad: inf at position 0",
    ),
    Bad(
        "indices-out-of-range",
        lambda: prio().set_priorities(prio_state(), jnp.array([0, 16, -1]), jnp.ones(3)),
        PriorityError,
        "set_priorities: `indices` must be in [0, 16) (item indices returned by this "
        "buffer's `sample`), got 2 outside: 16 at position 1, -1 at position 2",
    ),
    Bad(
        "indices-float",
        lambda: prio().set_priorities(prio_state(), jnp.array([0.5, 1.2]), jnp.ones(2)),
        PriorityError,
        "set_priorities: `indices` must be integers (the `indices` of a sample), got float32[2]",
    ),
    Bad(
        "priorities-shape-mismatch",
        lambda: prio().set_priorities(prio_state(), jnp.array([0, 1]), jnp.ones(3)),
        PriorityError,
        "set_priorities: `priorities` must have the shape of `indices` [2] (one per index) or "
        "be a scalar, got [3]",
    ),
    Bad(
        "priorities-not-numbers",
        lambda: prio().set_priorities(prio_state(), jnp.array([0]), np.array(["high"])),
        PriorityError,
        "set_priorities: `priorities` must be real numbers, got str128[1]",
    ),
    # ---- mixer ----------------------------------------------------------------------------
    Bad(
        "mixer-buffers-not-a-list",
        lambda: buffers.make_mixer(traj(), 2, [1.0]),
        ArgumentTypeError,
        "`buffers` must be a list or tuple, got TrajectoryBuffer(",
    ),
    Bad(
        "mixer-element-not-a-buffer",
        lambda: buffers.make_mixer([1, 2], 2, [1, 1]),
        ArgumentTypeError,
        "`buffers[0]` must be a buffer (the result of a make_* factory), got 1 (int)",
    ),
    Bad(
        "mixer-proportions-count",
        lambda: buffers.make_mixer([traj(), traj()], 2, [1.0]),
        BufferConfigError,
        "got 2 buffers but 1 proportions",
    ),
    Bad(
        "mixer-proportion-negative",
        lambda: buffers.make_mixer([traj(), traj()], 2, [1.0, -1.0]),
        BufferConfigError,
        "`proportions` must be non-negative with a positive sum, got [1.0, -1.0]",
    ),
    Bad(
        "mixer-proportion-infinite",
        lambda: buffers.make_mixer([traj(), traj()], 2, [float("inf"), 1.0]),
        BufferConfigError,
        "`proportions` must be finite, got [inf, 1.0]",
    ),
    Bad(
        "mixer-proportion-str",
        lambda: buffers.make_mixer([traj(), traj()], 2, ["1", 1.0]),
        ArgumentTypeError,
        "`proportions[0]` must be a real number, got '1' (str)",
    ),
    Bad(
        "mixer-wrong-number-of-states",
        lambda: mixer_over(traj(), traj()).sample([traj_state()], KEY),
        BufferConfigError,
        "Mixer.sample: got 1 states for 2 buffers: pass one state per buffer",
    ),
    Bad(
        "mixer-of-two-sequence-lengths",
        lambda: mixer_over(
            traj(), buffers.make_trajectory_buffer(2, 2, 3, 1, 3, max_length_time_axis=8)
        ),
        BufferConfigError,
        "all buffers must sample sequences of one length, got sample_sequence_length [2, 3]",
    ),
    Bad(
        "mixer-samples-of-different-shapes",
        lambda: mixer_over(traj(), traj()).sample(
            [
                traj_filled(),
                traj().add(
                    traj().init({"obs": jnp.zeros((3,)), "reward": jnp.zeros(())}),
                    batch(length=4, obs=jnp.zeros((2, 4, 3))),
                ),
            ],
            KEY,
        ),
        BatchStructureError,
        "buffer 1: sample/experience/obs: expected [n, 2, 2] float32 (as buffer 0), got "
        "[n, 2, 3] float32",
    ),
    # ---- episode buffer -----------------------------------------------------------------
    Bad(
        "episode-end-names-a-missing-leaf",
        lambda: buffers.make_episode_buffer(
            2, 2, 2, 2, max_length_time_axis=8, episode_end="finished"
        ).init(episode_ts()),
        BufferConfigError,
        "init: `episode_end` names the leaf 'finished', but the timesteps have no such field; "
        "their fields are ['done', 'obs']",
    ),
    Bad(
        "episode-end-leaf-not-one-flag",
        lambda: episodes().init({"obs": jnp.zeros(2), "done": jnp.zeros(2)}),
        BufferConfigError,
        "init: the episode-end leaf experience/done must be one flag per timestep, shape [], "
        "got [2] float32",
    ),
    Bad(
        "episode-end-not-a-name-or-function",
        lambda: buffers.make_episode_buffer(2, 2, 2, 2, max_length_time_axis=8, episode_end=3),
        ArgumentTypeError,
        "`episode_end` must be a leaf name (str) or a function batch -> bool [B, n], got 3 (int)",
    ),
    Bad(
        "episode-end-function-wrong-shape",
        lambda: (
            lambda b: b.add(
                b.init(episode_ts()),
                {"obs": jnp.zeros((2, 1, 2)), "done": jnp.zeros((2, 1), bool)},
            )
        )(
            buffers.make_episode_buffer(
                2, 2, 2, 2, max_length_time_axis=8, episode_end=lambda b: b["done"][..., None]
            )
        ),
        BufferConfigError,
        "add: `episode_end` (a function) must return one flag per timestep, shape [2, 1], got "
        "[2, 1, 1] bool",
    ),
    Bad(
        "episode-from-state-without-the-leaf",
        lambda: episodes().from_state(traj_state()),
        BufferConfigError,
        "from_state: `episode_end` names the leaf 'done', but the timesteps have no such "
        "field; their fields are ['obs', 'reward']",
    ),
    Bad(
        "episode-pad-not-bool",
        lambda: buffers.make_episode_buffer(2, 2, 2, 2, max_length_time_axis=8, pad="no"),
        ArgumentTypeError,
        "`pad` must be a bool (True or False), got 'no' (str)",
    ),
    Bad(
        "episode-device-unknown",
        lambda: buffers.make_episode_buffer(2, 2, 2, 2, max_length_time_axis=8, device="cuda"),
        BufferConfigError,
        "device must be cpu, gpu or tpu, got 'cuda'",
    ),
    # ---- n-step -------------------------------------------------------------------------
    Bad(
        "n-step-map-value-not-callable",
        lambda: n_step_with_map({("reward", "reward"): 3}),
        ArgumentTypeError,
        "`n_step_functional_map[('reward', 'reward')]` must be a function, got 3 (int)",
    ),
    Bad(
        "n-step-map-key-not-a-tuple",
        lambda: n_step_with_map({"reward": lambda r: r}),
        ArgumentTypeError,
        "`n_step_functional_map` keys must be tuples of field names (target, arg1, ...) with "
        "at least one argument, or 'dict_mapper'; got 'reward'",
    ),
    Bad(
        "n-step-map-unknown-field",
        sample_n_step_with_unknown_field,
        BufferConfigError,
        "n_step_functional_map: key ('reward', 'rewrd') names field(s) ['rewrd'] that the "
        "experience does not have; its fields are ['obs', 'reward']",
    ),
    Bad(
        "n-step-returns-shapes-differ",
        lambda: buffers.n_step_returns(jnp.zeros(3), jnp.ones(4), 2),
        BufferConfigError,
        "n_step_returns: `rewards` and `discounts` must have the same shape [..., T] (time "
        "last), got rewards [3] and discounts [4]",
    ),
    # ---- write counters -----------------------------------------------------------------
    Bad(
        "write-counter-float",
        lambda: buffers.write_counter_from_int(2.5),
        ArgumentTypeError,
        "write counter must be an integer in [0, 2**64), got 2.5 (float)",
    ),
    Bad(
        "write-counter-negative",
        lambda: buffers.write_counter_from_int(-1),
        BufferConfigError,
        "write counter must be in [0, 2**64), got -1",
    ),
    Bad(
        "timesteps-added-of-a-dict",
        lambda: buffers.timesteps_added({"write_counter": 3}),
        ArgumentTypeError,
        "timesteps_added: `state` must be a buffer state of this package (it has a "
        "`write_counter` uint32[..., 2]), got dict",
    ),
]


def test_the_catalogue_has_at_least_35_distinct_kinds():
    ids = [case.id for case in CATALOGUE]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 35


@pytest.mark.parametrize("case", CATALOGUE, ids=[case.id for case in CATALOGUE])
def test_bad_input_raises_a_typed_error(case: Bad) -> None:
    with pytest.raises(case.error, match=re.escape(case.fragment)) as info:
        case.trigger()
    assert isinstance(info.value, buffers.BufferError)
    assert isinstance(info.value, (ValueError, TypeError, RuntimeError, MemoryError))


@pytest.mark.parametrize(
    ("error", "builtins"),
    [
        (BufferConfigError, (ValueError,)),
        (ArgumentTypeError, (BufferConfigError, TypeError, ValueError)),
        (BufferTooLargeError, (BufferConfigError, MemoryError, ValueError)),
        (BatchStructureError, (ValueError,)),
        (PriorityError, (ValueError,)),
        (NotReadyError, (RuntimeError,)),
        (QueueFullError, (RuntimeError,)),
    ],
)
def test_every_error_is_a_buffer_error_and_the_matching_builtin(error, builtins):
    assert issubclass(error, buffers.BufferError)
    for builtin in builtins:
        assert issubclass(error, builtin)


def test_too_large_error_carries_the_sizes_and_is_raised_at_trace_time():
    buffer = buffers.ReplayBuffer(PETA)
    with pytest.raises(BufferTooLargeError) as info:
        jax.jit(buffer.init)(ts())
    assert info.value.nbytes == 12 * PETA
    assert 0 < info.value.limit < info.value.nbytes


def test_under_jit_bad_priorities_and_indices_are_ignored():
    """Inside ``jit`` values cannot raise: NaN, infinite and negative priorities and indices
    that name no item leave the sum tree as it was; the good entry is written."""
    state = prio_state()
    nodes = np.asarray(state.sum_tree_state.nodes)
    np.testing.assert_array_equal(nodes[16:], [1, 1, 1, 0, 0, 0, 0, 0] * 2)  # 16 leaves
    indices = jnp.array([0, 1, 8, 3, 16, -1])  # 0, 1, 8 are sampleable; 3 is not (yet)
    priorities = jnp.array([jnp.nan, jnp.inf, -1.0, 5.0, 7.0, 7.0])
    after = jax.jit(prio().set_priorities)(state, indices, priorities).sum_tree_state
    np.testing.assert_array_equal(np.asarray(after.nodes), nodes)
    assert float(after.max_recorded_priority) == float(state.sum_tree_state.max_recorded_priority)
    good = jax.jit(prio().set_priorities)(state, jnp.array([0, 1]), jnp.array([jnp.nan, 3.0]))
    np.testing.assert_array_equal(np.asarray(good.sum_tree_state.nodes)[16:18], [1.0, 3.0])


def test_bad_shapes_and_dtypes_of_priorities_raise_under_jit_too():
    with pytest.raises(PriorityError, match=re.escape("must have the shape of `indices` [2]")):
        jax.jit(prio().set_priorities)(prio_state(), jnp.array([0, 1]), jnp.ones(3))


def test_inputs_that_reference_code_passes_still_work():
    """NumPy and concrete JAX integers as sizes, NumPy bools and 0/1 as flags, new-style keys,
    a scalar priority, PRNG keys and Python numbers as leaves: all accepted."""
    buffer = buffers.make_flat_buffer(
        np.int64(8), np.int32(1), jnp.int32(2), add_sequences=np.bool_(False)
    )
    assert buffer.max_length_time_axis == 8
    buffers.make_item_buffer(8, 1, 1, add_sequences=0, add_batches=1)
    state = buffer.add(buffer.init(ts()), {"obs": np.zeros(2, np.float32), "reward": 1})
    state = buffer.add(state, {"obs": jnp.ones(2), "reward": True})
    buffer.sample(state, jax.random.key(0))
    p_state = prio().set_priorities(prio_state(), jnp.array([0, 1]), 2.0)
    np.testing.assert_array_equal(np.asarray(p_state.sum_tree_state.nodes)[16:18], [2.0, 2.0])
    keys = buffers.make_trajectory_buffer(1, 1, 1, 1, 1, max_length_time_axis=2)
    k_state = keys.init({"key": jax.random.key(0)})
    keys.add(k_state, {"key": jax.random.split(jax.random.key(1), 1)[None]})
    assert dataclasses.is_dataclass(
        buffers.make_prioritised_flat_buffer(8, 1, 1, priority_exponent=1)
    )
