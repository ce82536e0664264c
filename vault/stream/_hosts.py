"""Streams over several JAX processes: which process this is, how much of each global batch
it holds, and the global ``jax.Array`` batches built from its part.

JAX is imported only when a sharding is given or JAX is already loaded (to ask whether its
distributed runtime is initialised): a stream on one process never needs it.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from vault import _args
from vault._errors import VaultArgumentError


def process_arg(process_index: Any, process_count: Any) -> tuple[int, int]:
    """``(process_index, process_count)``: as given (both, or neither), else JAX's when
    ``jax.distributed`` is initialised, else ``(0, 1)``."""
    if process_index is None and process_count is None:
        if "jax" not in sys.modules:  # never imported: its distributed runtime is not running
            return 0, 1
        import jax

        if not jax.distributed.is_initialized():
            return 0, 1
        return jax.process_index(), jax.process_count()
    if process_index is None or process_count is None:
        raise VaultArgumentError(
            "give both process_index and process_count, or neither (then JAX's, when "
            f"jax.distributed is initialised, else 0 and 1); got process_index={process_index!r}, "
            f"process_count={process_count!r}"
        )
    count = _args.int_arg("process_count", process_count, 1, VaultArgumentError)
    index = _args.int_arg("process_index", process_index, 0, VaultArgumentError)
    if index >= count:
        raise VaultArgumentError(
            f"process_index must be in [0, process_count) = [0, {count}), got {index}"
        )
    return index, count


def local_batch_size(batch: int, process_count: int) -> int:
    """The sequences of each global batch of ``batch`` that one process holds."""
    if batch % process_count:
        raise VaultArgumentError(
            f"sample_batch_size is the global batch: {batch} does not split evenly over "
            f"{process_count} processes (give a multiple of {process_count})"
        )
    return batch // process_count


def check_sharding(
    sharding: Any, batch: int, process_count: int, shapes: list[tuple[int, ...]]
) -> None:
    """``sharding`` lays out every leaf shape ``[batch, ...]`` in ``shapes`` so that this
    process holds ``batch / process_count`` of its sequences (VaultArgumentError if not)."""
    import jax

    local = batch // process_count
    if not isinstance(sharding, jax.sharding.Sharding):
        raise VaultArgumentError(
            "sharding must be a jax.sharding.Sharding of the global batch (e.g. "
            f"NamedSharding(mesh, PartitionSpec('data'))), got {_args.kind(sharding)}"
        )
    for shape in sorted(set(shapes)):
        try:
            indices = sharding.addressable_devices_indices_map(shape)
        except (ValueError, TypeError) as err:
            raise VaultArgumentError(
                f"the sharding cannot lay out a batch leaf of shape {list(shape)}: {err}"
            ) from None
        held: set[int] = set()
        for index in indices.values():
            held.update(range(*index[0].indices(batch)) if index else range(batch))
        if len(held) != local:
            raise VaultArgumentError(
                f"the sharding gives this process {len(held)} of the {batch} sequences of a "
                f"global batch (leaf shape {list(shape)}), expected {local} = sample_batch_size "
                f"/ {process_count} processes: it must split the batch axis evenly over the "
                "processes' devices, e.g. NamedSharding(Mesh(np.array(jax.devices()), "
                "('data',)), PartitionSpec('data'))"
            )


def to_global(sharding: Any, batch: int, leaves: list[np.ndarray]) -> list[Any]:
    """Global ``jax.Array`` leaves ``[batch, ...]`` laid out by ``sharding``, from this
    process's part of each (``jax.make_array_from_process_local_data``)."""
    import jax

    return [
        jax.make_array_from_process_local_data(sharding, leaf, (batch, *leaf.shape[1:]))
        for leaf in leaves
    ]
