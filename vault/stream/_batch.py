"""One batch of a stream (``vault/stream/_stream.py``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


class StreamBatch(NamedTuple):
    """One batch of a stream (:meth:`Vault.as_dataset`).

    Sequence ``i`` is ``read_numpy(rows=[row[i]], start=start[i], stop=start[i] +
    sequence_length)`` of source ``source[i]``. With a ``sharding`` the leaves are global
    ``jax.Array`` s and ``source``/``row``/``start`` describe this process's part of them.
    With ``stack`` (:meth:`Vault.as_dataset`), an item holds consecutive batches of one epoch:
    every array gains a leading axis (``[stack, batch, ...]``), ``epoch`` stays one int.

    Attributes:
        experience: the vault's structure (or ``{path: array}`` when ``leaves`` was given)
            with leaves ``[batch, sequence_length, ...]``.
        row: each sequence's row (int64 numpy, ``[batch]``).
        start: each sequence's first timestep (int64 numpy, ``[batch]``).
        epoch: the epoch, counted from 0.
        source: each sequence's source, an index into the stream's snapshots (0 for a
            single vault).
    """

    experience: Any
    row: np.ndarray
    start: np.ndarray
    epoch: int
    source: np.ndarray
