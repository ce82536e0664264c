"""Resuming a stream from its checkpointed state (``vault/stream/_state.py``), in any process."""

from __future__ import annotations

from typing import Any

from vault._errors import VaultArgumentError
from vault.stream._hosts import process_arg
from vault.stream._state import open_pinned, read_state
from vault.stream._stream import DatasetStream, as_dataset


def resume_stream(
    state: dict[str, Any],
    *,
    storage: dict[str, Any] | None = None,
    sharding: Any = None,
    process_index: int | None = None,
) -> DatasetStream:
    """The stream ``state`` (from :meth:`DatasetStream.state`, e.g. read back from a JSON
    checkpoint) continued exactly where it stopped, every source at its pinned commit.

    ``storage``: as in :meth:`Vault.open` (settings are never saved in a state). A stream
    shared by several processes resumes in each of them from the same state, with the same
    number of processes: ``process_index`` is JAX's when ``jax.distributed`` is initialised
    (else give it); ``sharding`` as in ``as_dataset`` (not saved: it names this run's
    devices)."""
    saved = read_state(state)
    count = saved.process_count
    if process_index is not None:
        process = process_arg(process_index, count)
    else:
        process = process_arg(None, None)
        if process[1] != count:
            raise VaultArgumentError(
                f"the state is of a stream shared by {count} processes; this run has "
                f"{process[1]} (jax.distributed): resume it in {count} processes, each with "
                "its process_index (JAX's, or given)"
            )
    args = dict(saved.args)
    size, length = args.pop("sample_batch_size"), args.pop("sequence_length")
    return as_dataset(
        open_pinned(saved.pins, storage), size, length, resume_at=(saved.epoch, saved.batch),
        sharding=sharding, process_index=process[0], process_count=process[1], **args,
    )  # fmt: skip
