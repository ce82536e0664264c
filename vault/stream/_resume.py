"""Resuming a stream from its checkpointed state (``vault/stream/_state.py``), in any process."""

from __future__ import annotations

import inspect
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
    """A checkpointed stream, continued exactly where it stopped.

    Every source is read at the commit the stream was pinned to. A stream shared by several
    processes resumes in each of them from the same state, with the same number of processes.

    Args:
        state: what :meth:`DatasetStream.state` returned (e.g. read back from a JSON
            checkpoint).
        storage: as in :meth:`Vault.open` (settings are never saved in a state).
        sharding: as in :meth:`Vault.as_dataset` (not saved: it names this run's devices).
        process_index: this process (default: JAX's when ``jax.distributed`` is initialised).

    Returns:
        The stream; its next batch is the one after the checkpoint.

    Raises:
        VaultArgumentError: a state that is not a stream state, or a run with another
            number of processes.
        VaultPinError: a source can no longer serve its pinned commit.

    Examples:
        >>> import numpy as np
        >>> from vault import Vault, resume_stream
        >>> with Vault.create("runs/doc", {"x": np.float32(0)}, rows=2) as v:
        ...     v.append({"x": np.arange(40, dtype=np.float32).reshape(2, 20)})
        20
        >>> stream = Vault.open("runs/doc").as_dataset(4, 4, seed=1)
        >>> it = iter(stream)
        >>> first = next(it)
        >>> saved = stream.state()  # e.g. json.dumps(saved) into a checkpoint
        >>> expected = next(it).experience["x"]
        >>> again = next(iter(resume_stream(saved))).experience["x"]
        >>> bool((again == expected).all())
        True
    """
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
    taken = set(inspect.signature(as_dataset).parameters) - _GIVEN_HERE
    unknown = sorted(set(args) - taken)
    if unknown:
        raise VaultArgumentError(
            f"a stream state with options this as_dataset does not take: {unknown} (a state "
            f"of another rlvault, or edited); it takes {sorted(taken)}"
        )
    size, length = args.pop("sample_batch_size"), args.pop("sequence_length")
    return as_dataset(
        open_pinned(saved.pins, storage), size, length, resume_at=(saved.epoch, saved.batch),
        sharding=sharding, process_index=process[0], process_count=process[1], **args,
    )  # fmt: skip


_GIVEN_HERE = {"snaps", "resume_at", "sharding", "process_index", "process_count"}
"""The options of ``as_dataset`` that ``resume_stream`` gives itself (never a state's)."""
