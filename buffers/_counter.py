"""The never-wrapping write counter (shared/DESIGN.md, buffer invariant 2).

The counter is a ``uint32[2]`` array ``[high, low]``: a 64-bit count of timesteps ever added
along the time axis, kept exact without ``jax_enable_x64`` by carrying from the low word into
the high one. The Vault reads it on the host with :func:`timesteps_added`.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import Array

_LOW = 1 << 32


def zero() -> Array:
    return jnp.zeros((2,), dtype=jnp.uint32)


def from_int(n: int) -> Array:
    """A counter holding ``n`` (host helper, e.g. to start a test near 2**31 or 2**32)."""
    if n < 0 or n >= 1 << 64:
        raise ValueError(f"write counter must be in [0, 2**64), got {n}")
    return jnp.asarray(np.array([n >> 32, n & (_LOW - 1)], dtype=np.uint32))


def advance(counter: Array, n: int | Array) -> Array:
    """``counter + n`` with carry; ``n`` must be below 2**32 (any real add is)."""
    high, low = counter[..., 0], counter[..., 1]
    new_low = low + jnp.asarray(n, dtype=jnp.uint32)
    carry = (new_low < low).astype(jnp.uint32)
    return jnp.stack([high + carry, new_low], axis=-1)


def to_int(counter: Any) -> Any:
    """Host-side value of one counter (``int``) or of a stacked counter (``np.ndarray``)."""
    arr = np.asarray(counter).astype(np.uint64)
    value = (arr[..., 0] << np.uint64(32)) | arr[..., 1]
    if value.ndim == 0:
        return int(value)
    return value.astype(object)


def timesteps_added(state: Any) -> Any:
    """Timesteps ever added along the time axis of ``state`` (any buffer state of this package).

    Returns a Python ``int``, or for a ``pmap``/``vmap``-stacked state an array of ints with the
    stacking shape. Exact past 2**31 and 2**32 without x64.
    """
    return to_int(state.write_counter)
