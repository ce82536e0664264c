"""Checkpointable stream positions: :meth:`DatasetStream.state` and :func:`resume_stream`.

A state names the vault (its location as shown), the commit the stream reads (its id: a pin,
so an epoch resumed after a preemption reads the same data however much was appended since),
the arguments of :func:`~vault._stream.as_dataset` and the position of the next batch
(epoch, batches already handed over in it). Streams are deterministic for their arguments, so
resuming cuts the epoch's first batches again (without handing them over) and continues with
exactly the batches an uninterrupted stream would have given. Moving on to the latest commit
is an explicit choice: open the vault again for the next epoch.
"""

from __future__ import annotations

import json
from typing import Any

from vault._errors import VaultArgumentError
from vault._format import CommitRecord
from vault._pins import commit_id

STATE_FORMAT = "rlvault-stream/1"


def state_of(
    where: str, commit: CommitRecord, args: dict[str, Any], position: tuple[int, int]
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
        "location": where,
        "commit": commit_id(commit),
        "args": saved,
        "epoch": int(position[0]),
        "batch": int(position[1]),
    }
    json.dumps(state)  # a state is JSON: fails here, not when the user saves it
    return state


def resume_stream(state: dict[str, Any], *, storage: dict[str, Any] | None = None) -> Any:
    """The stream ``state`` (from :meth:`DatasetStream.state`, e.g. read back from a JSON
    checkpoint) continued exactly where it stopped, at its pinned commit. ``storage``: as in
    :meth:`Vault.open` (settings are never saved in a state)."""
    from vault._vault import Vault

    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
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
        where, pin, args = state["location"], state["commit"], dict(state["args"])
        epoch, batch = int(state["epoch"]), int(state["batch"])
    except (KeyError, TypeError, ValueError) as err:
        raise VaultArgumentError(f"a stream state is missing or has a bad {err}") from None
    rows = args.get("rows")
    if isinstance(rows, dict) and "slice" in rows:
        args["rows"] = slice(*rows["slice"])
    vault = Vault.open(where, at=pin, storage=storage)
    size, length = args.pop("sample_batch_size"), args.pop("sequence_length")
    return vault.as_dataset(size, length, resume_at=(epoch, batch), **args)
