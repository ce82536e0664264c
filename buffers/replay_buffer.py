"""A minimal functional replay buffer: one flat ring of independent transitions.

For users who want only that: no rows, no sequences. ``add`` takes ``[k, ...]`` transitions
(``k <= buffer_size``); ``sample`` draws ``batch_size`` of the stored ones uniformly with
replacement. Sampling an empty buffer raises :class:`~buffers.NotReadyError` eagerly; inside
``jit`` use ``sample_masked`` (which also returns the ``valid`` mask);
plain ``sample`` fills floating leaves with NaN in that case so the mistake cannot pass as data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from buffers import _counter
from buffers._core import ready_mask, tree_shape_prefix
from buffers._errors import BufferConfigError
from buffers._pytree import Replaceable, derived, frozen_container, pytree_dataclass
from buffers._validation import (
    check_key,
    check_nbytes,
    check_state,
    check_timestep,
    positive_int,
    timestep_nbytes,
    validate_batch,
)

if TYPE_CHECKING:
    import chex

_STATE_FIELDS = ("data", "position", "size", "write_counter")

Transition = TypeVar("Transition", bound="chex.ArrayTree")


@pytree_dataclass
class ReplayBufferState(Replaceable, Generic[Transition]):
    """State of a :class:`ReplayBuffer`.

    Attributes:
        data: pytree whose leaves are ``[buffer_size, ...]``.
        position: next slot to be written (int32 scalar).
        size: transitions stored (int32 scalar, at most ``buffer_size``).
        write_counter: transitions ever added (never wraps). Built by hand without it, it is
            derived: the fewest transitions consistent with ``position`` and ``size``
            (``position``, plus ``buffer_size`` when full).
    """

    data: Transition
    position: Array
    size: Array
    write_counter: Array = derived(default=None)

    def __post_init__(self) -> None:
        if self.write_counter is None:
            n = tree_shape_prefix(self.data, np.ndim(self.position) + 1)[-1]
            counter = _counter.derive(
                lambda xp, position, size: xp.where(size >= n, position + n, position),
                self.position,
                self.size,
            )
            object.__setattr__(self, "write_counter", counter)


@frozen_container
class ReplayBuffer(Replaceable):
    """A minimal functional replay buffer: one flat ring of independent transitions.

    Every method is pure and jittable (``batch_size`` is static).

    Attributes:
        buffer_size: transitions the buffer holds.

    Raises:
        BufferConfigError: ``buffer_size`` is not positive.
        ArgumentTypeError: ``buffer_size`` is not an integer.

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> import buffers as fbx
        >>> replay = fbx.ReplayBuffer(buffer_size=100)
        >>> state = replay.init({"obs": jnp.zeros(3)})
        >>> state = jax.jit(replay.add)(state, {"obs": jnp.ones((5, 3))})
        >>> sample = jax.jit(replay.sample, static_argnums=1)
        >>> state, batch = sample(state, 4, jax.random.key(0))
        >>> int(state.size), batch["obs"].shape
        (5, (4, 3))
    """

    buffer_size: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "buffer_size", positive_int("buffer_size", self.buffer_size))

    def init(self, sample_transition: Transition) -> ReplayBufferState[Transition]:
        """An empty state for transitions shaped like ``sample_transition``.

        Args:
            sample_transition: one transition (a pytree of arrays, no batch axis). ``None``
                is an empty subtree in JAX, not a leaf: ``{"o": x, "n": None}`` stores only
                ``o`` (and keeps ``n`` as ``None``).

        Returns:
            A state of zeros, ``size`` 0.

        Raises:
            BufferTooLargeError: the state would not fit in the devices' memory.
            BufferConfigError: ``sample_transition`` has no array leaf at all (e.g. ``{}``,
                or ``{"n": None}``, whose only value is ``None``).
            ArgumentTypeError: a leaf that is not an array or a number (e.g. a string).
        """
        example = check_timestep(sample_transition)
        per_step = timestep_nbytes(example, 0)
        check_nbytes(
            self.buffer_size * per_step,
            "ReplayBuffer.init: the state",
            f"{self.buffer_size} transitions (buffer_size) x {per_step} bytes per transition",
            "Make buffer_size smaller, or the transitions (fewer or smaller leaves).",
        )
        data = jax.tree.map(lambda x: jnp.zeros((self.buffer_size, *x.shape), x.dtype), example)
        position, size = jnp.array(0, jnp.int32), jnp.array(0, jnp.int32)  # distinct: donation
        return ReplayBufferState(data, position, size, _counter.zero())

    def add(
        self, state: ReplayBufferState[Transition], transitions: Transition
    ) -> ReplayBufferState[Transition]:
        """Write ``[k, ...]`` transitions after the last ones, overwriting the oldest.

        Args:
            state: the buffer's state.
            transitions: ``k`` transitions (leaves ``[k, ...]``, ``k <= buffer_size``).

        Returns:
            The new state.

        Raises:
            BatchStructureError: ``transitions`` do not match the state's structure or shapes.
            BufferConfigError: more transitions than ``buffer_size``.
        """
        check_state(state, _STATE_FIELDS, "ReplayBufferState", "ReplayBuffer.add")
        # The stored data has one leading axis; validate with a dummy time axis folded away.
        expanded = jax.tree.map(lambda x: x[None], state.data)
        transitions = validate_batch(
            expanded, transitions, 2, ("k",), max_time=None, what="ReplayBuffer.add", root="data"
        )
        k = jax.tree_util.tree_leaves(transitions)[0].shape[0]
        if k > self.buffer_size:
            raise BufferConfigError(
                f"ReplayBuffer.add: {k} transitions exceed buffer_size {self.buffer_size}"
            )
        idx = (state.position + jnp.arange(k)) % self.buffer_size
        data = jax.tree.map(
            lambda buf, new: buf.at[idx].set(new, unique_indices=True), state.data, transitions
        )
        return ReplayBufferState(
            data,
            ((state.position + k) % self.buffer_size).astype(jnp.int32),
            jnp.minimum(state.size + k, self.buffer_size).astype(jnp.int32),
            _counter.advance(state.write_counter, k),
        )

    def sample_masked(
        self, state: ReplayBufferState[Transition], batch_size: int, key: chex.PRNGKey
    ) -> tuple[ReplayBufferState[Transition], Transition, Array]:
        """Draw ``batch_size`` stored transitions uniformly, with a mask of valid items.

        Args:
            state: the buffer's state.
            batch_size: transitions to draw (static under ``jit``).
            key: a JAX PRNG key.

        Returns:
            ``(state, batch, valid)``, the state unchanged, the transitions (leaves
            ``[batch_size, ...]``) and ``valid`` (``bool[batch_size]``, false for every
            item of an empty buffer).

        Raises:
            NotReadyError: the buffer is empty (eagerly, outside ``jit``).
        """
        check_state(state, _STATE_FIELDS, "ReplayBufferState", "ReplayBuffer.sample")
        batch_size = positive_int("batch_size", batch_size)
        check_key(key, "ReplayBuffer.sample")
        per_step = timestep_nbytes(state.data, 1)
        check_nbytes(
            batch_size * per_step,
            "ReplayBuffer.sample: the sample",
            f"{batch_size} transitions (batch_size) x {per_step} bytes per transition",
            "Make batch_size smaller.",
        )
        valid = ready_mask(state.size > 0, batch_size, "ReplayBuffer.sample")
        idx = jax.random.randint(key, (batch_size,), 0, jnp.maximum(state.size, 1))
        return state, jax.tree.map(lambda x: x[idx], state.data), valid

    def sample(
        self, state: ReplayBufferState[Transition], batch_size: int, key: chex.PRNGKey
    ) -> tuple[ReplayBufferState[Transition], Transition]:
        """Draw ``batch_size`` stored transitions uniformly, with replacement.

        Args:
            state: the buffer's state.
            batch_size: transitions to draw (static under ``jit``).
            key: a JAX PRNG key.

        Returns:
            ``(state, batch)``; inside ``jit``, the floating leaves of a batch drawn from an
            empty buffer are NaN (use :meth:`sample_masked` for a mask).

        Raises:
            NotReadyError: the buffer is empty (eagerly, outside ``jit``).
        """
        state, batch, valid = self.sample_masked(state, batch_size, key)

        def poison(x: Array) -> Array:
            if not jnp.issubdtype(x.dtype, jnp.inexact):
                return x
            mask = valid.reshape((-1,) + (1,) * (x.ndim - 1))
            return jnp.where(mask, x, jnp.nan)

        return state, jax.tree.map(poison, batch)

    def add_and_sample(
        self,
        state: ReplayBufferState[Transition],
        transitions: Transition,
        batch_size: int,
        key: chex.PRNGKey,
    ) -> tuple[ReplayBufferState[Transition], Transition]:
        """:meth:`add` then :meth:`sample`, in one call.

        Args:
            state: the buffer's state.
            transitions: ``k`` transitions (leaves ``[k, ...]``).
            batch_size: transitions to draw.
            key: a JAX PRNG key.

        Returns:
            ``(state, batch)`` as :meth:`sample` returns them, from the state after the add.
        """
        return self.sample(self.add(state, transitions), batch_size, key)
