"""Checkpointable stream positions: the record that :meth:`DatasetStream.state` returns and
:func:`~vault.stream._resume.resume_stream` reads.

A state names every source of the stream (its location as shown, and the commit the stream
reads: its id, a pin, so an epoch resumed after a preemption reads the same data however much
was appended since), the arguments of :func:`~vault.stream._stream.as_dataset` (with the number of
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
from typing import Any, NamedTuple

import numpy as np

from vault._args import int_arg
from vault._errors import VaultArgumentError
from vault.commits._pins import at_pin, commit_id
from vault.commits._snapshot import Snapshot, load_snapshot
from vault.format._records import CommitRecord
from vault.storage._kinds import parse_location

STATE_FORMAT = "rlvault-stream/2"
_FORMATS = ("rlvault-stream/1", STATE_FORMAT)  # 1: one vault, "location" and "commit"


def state_of(
    pins: list[tuple[str, CommitRecord]], args: dict[str, Any], position: tuple[int, int]
) -> dict[str, Any]:
    saved = {key: _plain(value) for key, value in args.items()}
    rows = args.get("rows")
    if isinstance(rows, slice):
        saved["rows"] = {"slice": [_plain(x) for x in (rows.start, rows.stop, rows.step)]}
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


def _plain(value: Any) -> Any:
    """An argument as JSON takes it: numpy scalars (which ``as_dataset`` accepts for its ints
    and bools) as Python numbers, sequences as lists."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


class SavedStream(NamedTuple):
    """A stream state, read back: the sources' ``(location, commit id)``, the arguments of
    ``as_dataset`` (``process_count`` apart), the position and the number of processes."""

    pins: list[tuple[str, str]]
    args: dict[str, Any]
    epoch: int
    batch: int
    process_count: int


def read_state(state: Any) -> SavedStream:
    """``state`` checked and read (either format); VaultArgumentError names what is wrong."""
    if (
        not isinstance(state, dict)
        or not isinstance(state.get("format"), str)
        or (state["format"] not in _FORMATS)
    ):
        raise VaultArgumentError(
            f"not a stream state (expected a dict with format {STATE_FORMAT!r}, as "
            "DatasetStream.state() returns), got "
            + (
                f"format {state.get('format')!r}"
                if isinstance(state, dict)
                else type(state).__name__
            )
        )
    key = "format"
    try:  # each field read in turn, so that an error names the one that is bad
        if state["format"] == _FORMATS[0]:
            key = "location"
            sources = [{"location": state["location"], "commit": state["commit"]}]
        else:
            key = "sources"
            sources = [dict(s) for s in state["sources"]]
        pins = [(str(s["location"]), str(s["commit"])) for s in sources]
        key = "args"
        args = dict(state["args"])
        key = "epoch"
        epoch = int_arg("epoch", state["epoch"], 0)
        key = "batch"
        batch = int_arg("batch", state["batch"], 0)
        key = "args"
        count = int_arg("process_count", args.pop("process_count", 1), 1)
        missing = [n for n in ("sample_batch_size", "sequence_length") if n not in args]
        if missing:
            raise KeyError(missing[0])
    except VaultArgumentError as err:
        raise VaultArgumentError(f"a stream state's {key!r} is bad: {err}") from None
    except (KeyError, TypeError, ValueError) as err:
        what = f"has no {err}" if isinstance(err, KeyError) else f"is bad ({err})"
        raise VaultArgumentError(f"a stream state's {key!r} {what}") from None
    rows = args.get("rows")
    if isinstance(rows, dict) and "slice" in rows:
        args["rows"] = slice(*rows["slice"])
    return SavedStream(pins, args, epoch, batch, count)


def open_pinned(pins: list[tuple[str, str]], storage: dict[str, Any] | None) -> list[Snapshot]:
    """Snapshots of ``(location, commit id)`` pairs, each exactly at its commit (read-only, as
    ``Vault.open(location, at=commit)``)."""
    return [
        at_pin(load_snapshot(parse_location(where, storage), writable=False), pin)
        for where, pin in pins
    ]
