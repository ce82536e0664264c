"""Buffer leaves that live on an accelerator: the timesteps a write saves are cut there.

``np.asarray`` of a leaf on a GPU copies the whole leaf to the host. A write saves only the
timesteps added since the last one, so for a ring of 2,000 timesteps of 16 rows of Atari frames
(677 MB) written every 250 steps that is 8 times more than it keeps. A leaf on one accelerator
is cut on its device instead: jitted gathers of the new timesteps (the ring's wrap included)
into new device arrays. A blocking write copies them to the host at once (every copy started
before any is awaited); a background write (``write(block=False)``) hands them to the
background thread, which copies and stages them, so the calling thread pays only the
gathers' dispatch.

Measured on an H100 host (``tools/bench_recording.py``: 16 Atari-like frames per step, a ring
of 2,000, ``write(block=False)`` every 250 steps; docs/performance.md, "Recording on a GPU"):
the step that wrote took 509-568 ms with the whole ring copied, 121-125 ms with the cut and its
host copies started by the calling thread, and 41-56 ms with the copies made by the background
thread. There, each copy held the GIL for all of its bytes (85 MB: 50-65 ms in which the
calling thread could not run), so a gather hands its timesteps over in pieces of at most
:data:`PIECE_BYTES`, and the GIL is free between them (not yet measured on a GPU).

The cut is a new array, so the buffer may be donated or overwritten right after ``write``
returns (the device runs the gather before any later computation that reuses the buffer).
Host leaves (numpy, or jax arrays on the CPU, which numpy reads in place) are sliced on the
host, as before; this module never imports jax for them.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np


def on_accelerator(value: Any) -> bool:
    """Whether ``value`` is a jax array held in the memory of one device that is not the
    CPU (:func:`device_memory_of`)."""
    device = device_memory_of(value)
    return device is not None and device.platform != "cpu"


def device_memory_of(value: Any) -> Any | None:
    """The one device whose own memory holds ``value``; None where ``value`` is not a jax
    array, is spread over several devices, or is offloaded to host memory (``memory_kind``
    ``"pinned_host"`` or ``"unpinned_host"``, which numpy reads as any host array)."""
    if "jax" not in sys.modules:
        return None  # no jax array can exist without jax imported
    devices = getattr(value, "devices", None)
    if devices is None or isinstance(value, np.ndarray):
        return None
    try:
        held = devices()
    except Exception:  # not a jax array after all (another library's ``devices``)
        return None
    kind = getattr(getattr(value, "sharding", None), "memory_kind", None)
    if len(held) != 1 or kind not in (None, "device"):
        return None
    return next(iter(held))


# the most bytes of one piece a cut hands over: each piece's copy to the host holds the
# GIL for all of its bytes (jax copies a GPU array into pageable memory on the thread that
# asks), so pieces this size keep the calling thread's waits for the GIL to a few ms
PIECE_BYTES = 4 << 20


def cut(value: Any, lead: int, start: int, n: int) -> list[Any]:
    """Timesteps ``start, start + 1, ... (mod T)``, ``n`` of them, of a device leaf shaped
    ``[*stack, rows, T, ...]`` (``lead`` = the number of axes before T): device arrays
    ``[rows * prod(stack), k, ...]`` in time order (:func:`to_host` copies them).

    One gather per power of two in ``n`` (``250 = 128 + 64 + 32 + 16 + 8 + 2``): a jitted
    function compiles once per shape of its result, so a process compiles at most
    ``log2(T) + 1`` gathers per leaf, however its writes are spaced (a gather of each ``n``
    would compile on every new spacing: about 0.2 s each, measured on this project's CPU).
    A gather larger than :data:`PIECE_BYTES` returns its timesteps in pieces of at most that
    many bytes (a power of two of timesteps each)."""
    import jax

    device = next(iter(value.devices()))
    step_bytes = value.dtype.itemsize * math.prod(value.shape) // max(value.shape[lead], 1)
    most = 1 << max(0, (PIECE_BYTES // max(step_bytes, 1)).bit_length() - 1)
    pieces: list[Any] = []
    at = start
    for bit in reversed(range(max(n, 1).bit_length())):
        size = 1 << bit
        if n & size:
            # the start put there explicitly: a write moves nothing implicitly to the device
            # (it works under ``jax.transfer_guard_host_to_device("disallow")``)
            first = jax.device_put(np.int32(at), device)
            pieces += _gather(lead, size, min(size, most))(value, first)
            at += size
    return pieces


@functools.cache
def _gather(lead: int, n: int, piece: int) -> Any:
    """A jitted gather of ``n`` timesteps from a start (mod T), in pieces of ``piece``."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def gather(value: Any, start: Any) -> tuple[Any, ...]:
        rows = value.reshape((-1, *value.shape[lead:]))
        steps = (start + jnp.arange(n, dtype=jnp.int32)) % rows.shape[1]
        # every index is in range (mod T): "clip" is a plain gather, no masking select that
        # could touch a NaN payload
        out = jnp.take(rows, steps, axis=1, mode="clip")
        return tuple(out[:, i : i + piece] for i in range(0, n, piece))

    return gather


def to_host(values: Sequence[Any]) -> list[np.ndarray]:
    """``values`` as numpy arrays: every device array's copy started before any is awaited."""
    for value in values:
        if not isinstance(value, np.ndarray) and hasattr(value, "copy_to_host_async"):
            value.copy_to_host_async()
    return [np.asarray(value) for value in values]
