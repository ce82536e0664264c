"""Checkpointable stream positions: :meth:`DatasetStream.state` and :func:`resume_stream`.

A state names every source of the stream (its location as shown, and the commit the stream
reads: its id, a pin, so an epoch resumed after a preemption reads the same data however much
was appended since), the arguments of :func:`~vault._stream.as_dataset` (with the number of
processes that share each epoch) and the position of the next batch (epoch, batches already
handed over in it). Streams are deterministic for their arguments, so resuming cuts the
epoch's first batches again (without handing them over) and continues with exactly the
batches an uninterrupted stream would have given. Every process of a multi-process stream
yields the same number of batches per epoch, so after the same step all are at the same
position: a state holds no process index, and one state (say process 0's) resumes every
process. Moving on to the latest commit is an explicit choice: open the vaults again for the
next epoch.
"""

from __future__ import annotations

import json
from typing import Any

from vault._errors import VaultArgumentError
from vault._format import CommitRecord
from vault._pins import commit_id

STATE_FORMAT = "rlvault-stream/2"
_FORMATS = ("rlvault-stream/1", STATE_FORMAT)  # 1: one vault, "location" and "commit"


def state_of(
    pins: list[tuple[str, CommitRecord]], args: dict[str, Any], position: tuple[int, int]
) -> dict[str, Any]:
    saved = dict(args)
    rows = saved.get("rows")
    if isinstance(rows, slice):
        saved["rows"] = {"slice": [rows.start, rows.stop, rows.step]}
    elif rows is not None:
        saved["rows"] = [int(r) for r in rows]
    if saved.get("leaves") is not None:
        saved["leaves"] = [str(x) for x in saved["leaves"]]
    state = {
        "format": STATE_FORMAT,
        "sources": [{"location": where, "commit": commit_id(c)} for where, c in pins],
        "args": saved,
        "epoch": int(position[0]),
        "batch": int(position[1]),
    }
    json.dumps(state)  # a state is JSON: fails here, not when the user saves it
    return state


def resume_stream(
    state: dict[str, Any],
    *,
    storage: dict[str, Any] | None = None,
    sharding: Any = None,
    process_index: int | None = None,
) -> Any:
    """The stream ``state`` (from :meth:`DatasetStream.state`, e.g. read back from a JSON
    checkpoint) continued exactly where it stopped, every source at its pinned commit.

    ``storage``: as in :meth:`Vault.open` (settings are never saved in a state). A stream
    shared by several processes resumes in each of them from the same state, with the same
    number of processes: ``process_index`` is JAX's when ``jax.distributed`` is initialised
    (else give it); ``sharding`` as in ``as_dataset`` (not saved: it names this run's
    devices)."""
    from vault._stream import as_dataset
    from vault._stream_hosts import process_arg
    from vault._vault import Vault

    if not isinstance(state, dict) or state.get("format") not in _FORMATS:
        raise VaultArgumentError(
            f"not a stream state (expected a dict with format {STATE_FORMAT!r}, as "
            "DatasetStream.state() returns), got "
            + (
                f"format {state.get('format')!r}"
                if isinstance(state, dict)
                else type(state).__name__
            )
        )
    try:
        if state["format"] == _FORMATS[0]:
            sources = [{"location": state["location"], "commit": state["commit"]}]
        else:
            sources = [dict(s) for s in state["sources"]]
        pins = [(str(s["location"]), str(s["commit"])) for s in sources]
        args = dict(state["args"])
        epoch, batch = int(state["epoch"]), int(state["batch"])
        count = int(args.pop("process_count", 1))
    except (KeyError, TypeError, ValueError) as err:
        raise VaultArgumentError(f"a stream state is missing or has a bad {err}") from None
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
    rows = args.get("rows")
    if isinstance(rows, dict) and "slice" in rows:
        args["rows"] = slice(*rows["slice"])
    snaps = [Vault.open(where, at=pin, storage=storage).snapshot for where, pin in pins]
    size, length = args.pop("sample_batch_size"), args.pop("sequence_length")
    return as_dataset(
        snaps, size, length, resume_at=(epoch, batch), sharding=sharding,
        process_index=process[0], process_count=process[1], **args,
    )  # fmt: skip
