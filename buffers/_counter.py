"""The never-wrapping write counter (shared/DESIGN.md, buffer invariant 2).

The counter is a ``uint32[2]`` array ``[high, low]``: a 64-bit count of timesteps ever added
along the time axis, kept exact without ``jax_enable_x64`` by carrying from the low word into
the high one. The Vault reads it on the host with :func:`timesteps_added`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from buffers._errors import ArgumentTypeError, BufferConfigError

_LOW = 1 << 32


def zero() -> Array:
    return jnp.zeros((2,), dtype=jnp.uint32)


def from_int(n: int) -> Array:
    """A write counter holding ``n`` (a host helper, e.g. to start a test near 2**32).

    Args:
        n: timesteps, an integer in [0, 2**64).

    Returns:
        The counter, ``uint32[2]`` (high, low), to put in a state's ``write_counter``.

    Raises:
        ArgumentTypeError: ``n`` is not an integer.
        BufferConfigError: ``n`` is outside [0, 2**64).

    Examples:
        >>> import buffers as fbx
        >>> fbx.write_counter_from_int(2**32 + 5).tolist()
        [1, 5]
    """
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise ArgumentTypeError(
            f"write counter must be an integer in [0, 2**64), got {n!r} ({type(n).__name__})"
        )
    n = int(n)
    if n < 0 or n >= 1 << 64:
        raise BufferConfigError(f"write counter must be in [0, 2**64), got {n}")
    return jnp.asarray(np.array([n >> 32, n & (_LOW - 1)], dtype=np.uint32))


def advance(counter: Array, n: int | Array) -> Array:
    """``counter + n`` with carry; ``n`` must be below 2**32 (any real add is)."""
    high, low = counter[..., 0], counter[..., 1]
    new_low = low + jnp.asarray(n, dtype=jnp.uint32)
    carry = (new_low < low).astype(jnp.uint32)
    return jnp.stack([high + carry, new_low], axis=-1)


def derive(count: Callable[..., Any], *inputs: Any) -> Array:
    """Counter(s) holding ``count(xp, *inputs)``: for a state built without its counter.

    ``count`` is written once against an array namespace ``xp`` (``numpy`` or ``jax.numpy``)
    and returns integer counts, one per stacked state. With concrete inputs on at most one
    device it runs with numpy on the host and the counter reaches the device in one transfer,
    with no XLA compilation (a state built outside ``jit``, e.g. by a Vault read, costs no
    compile); with tracers, or inputs spread over several devices, it runs with ``jax.numpy``.
    Both give the same counter, on the device (and with the commitment) of the inputs.
    """
    on_host, sharding = _host_placement(inputs)
    if not on_host:
        counts = count(jnp, *(jnp.asarray(x) for x in inputs))
        return advance(jnp.zeros((*jnp.shape(counts), 2), jnp.uint32), counts)
    counts = np.asarray(count(np, *(np.asarray(x) for x in inputs))).astype(np.int64)
    # ``advance`` from zero carries nothing into the high word for the int32 counts it sees
    # (negative ones wrap in the low word); the host keeps that and is exact beyond 2**32.
    high = np.maximum(counts >> 32, 0)
    low = counts & (_LOW - 1)
    host = np.stack([high, low], axis=-1).astype(np.uint32)
    return jax.device_put(host, sharding)


def _host_placement(inputs: tuple[Any, ...]) -> tuple[bool, Any]:
    """``(True, sharding)`` when ``inputs`` are concrete and committed to at most one device
    (``sharding``: that device's, or ``None`` for the default device, uncommitted, as eager
    ``jax.numpy`` would give); ``(False, None)`` when ``jax.numpy`` must run (tracers, several
    devices)."""
    sharding: Any = None
    for x in inputs:
        if isinstance(x, jax.core.Tracer):
            return False, None
        if not isinstance(x, jax.Array) or not getattr(x, "committed", True):
            continue
        if not isinstance(x.sharding, jax.sharding.SingleDeviceSharding):
            return False, None
        if sharding is not None and x.sharding.device_set != sharding.device_set:
            return False, None  # jax.numpy raises its usual error for mixed devices
        sharding = x.sharding
    return True, sharding


def to_int(counter: Any) -> Any:
    """Host-side value of one counter (``int``) or of a stacked counter (``np.ndarray``)."""
    arr = np.asarray(counter).astype(np.uint64)
    value = (arr[..., 0] << np.uint64(32)) | arr[..., 1]
    if value.ndim == 0:
        return int(value)
    return value.astype(object)


def timesteps_added(state: Any) -> Any:
    """Timesteps ever added along the time axis of ``state``.

    Exact past 2**31 and 2**32 without x64.

    Args:
        state: any buffer state of this package.

    Returns:
        A Python ``int``, or for a ``pmap``/``vmap``-stacked state an array of ints with the
        stacking shape.

    Raises:
        ArgumentTypeError: ``state`` has no ``write_counter`` (not a state of this package).

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> import buffers as fbx
        >>> buffer = fbx.make_flat_buffer(max_length=8, min_length=1, sample_batch_size=1)
        >>> add = jax.jit(buffer.add)
        >>> state = buffer.init({"x": jnp.float32(0)})
        >>> for _ in range(20):  # wraps the ring twice
        ...     state = add(state, {"x": jnp.float32(1)})
        >>> fbx.timesteps_added(state)
        20
    """
    from buffers._flashbax_state import accept_reference

    counter = getattr(accept_reference(state, "timesteps_added"), "write_counter", None)
    if counter is None or np.shape(counter)[-1:] != (2,):
        raise ArgumentTypeError(
            "timesteps_added: `state` must be a buffer state of this package (it has a "
            f"`write_counter` uint32[..., 2]), got {type(state).__name__}"
        )
    return to_int(counter)
