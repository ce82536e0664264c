"""The least any persistent recorder of ``tools/bench_recording.py``'s loop must do, as a
recorder of its own: the floor its vault rows are measured against.

Between two writes the buffer's step donates its state, so every recorder must copy the new
timesteps out of the buffer on the loop's thread before the next step; and a recording is only
kept once its bytes are in files and synced. :class:`FloorRecorder` does that and nothing
else: it copies the new timesteps of each leaf into a staging array it reuses (as the vault's
writer does), then one background thread (the vault's background writes use one lane on a
2-core machine) optionally compresses them with zstd level 3 (the vault's default codec, by
numcodecs, which releases the GIL while it encodes), writes them to one file per row and leaf,
and ``fsync``\\ s each file. No chunk index, checksum, commit record, lock or metadata.

So a vault row's ratio against this floor's, from the same run, is what the vault's own design
costs the loop; the floor's own ratio against the unrecorded loop is what recording these
frames costs on this machine whatever the store.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ZSTD_LEVEL = 3


class FloorRecorder:
    """A recorder of a trajectory buffer's new timesteps to plain files (see the module
    docstring); the subset of :class:`vault.Vault`'s writing API the loop calls."""

    def __init__(self, directory: Path, compress: bool) -> None:
        self.directory = directory
        directory.mkdir(parents=True)
        self.codec: Any = None
        if compress:
            from numcodecs import Zstd

            self.codec = Zstd(level=ZSTD_LEVEL)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="floor")
        self.pending: Future[None] | None = None
        self.staging: list[dict[str, np.ndarray]] = [{}, {}]  # two, used in turn
        self.flip = 0
        self.last_index = 0
        self.recorded = 0
        self.layout: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}  # dtype, timestep shape

    def write(self, state: Any, block: bool = False) -> int:
        """Copy the timesteps added since the last write out of ``state`` (a trajectory
        buffer state whose time axis is longer than any interval between writes), then
        compress, write and sync them in the background (``block=True``: before returning).
        The number of timesteps written."""
        index = int(state.current_index)  # waits for the step that made the state
        leaves = {k: np.asarray(v) for k, v in state.experience.items()}
        t_len = next(iter(leaves.values())).shape[1]
        n = (index - self.last_index) % t_len
        if n == 0:
            return 0
        self._wait()  # the staging array of two writes ago may still be read by the thread
        staged = self.staging[self.flip]
        self.flip ^= 1
        cols = (np.arange(self.last_index, self.last_index + n) % t_len).tolist()
        first = self.recorded
        for name, leaf in leaves.items():
            shape = (leaf.shape[0], n, *leaf.shape[2:])
            if name not in staged or staged[name].shape != shape:
                staged[name] = np.empty(shape, leaf.dtype)
            out = staged[name]
            self.layout[name] = (leaf.dtype, leaf.shape[2:])
            start, stop = cols[0], cols[-1] + 1
            if stop > start:  # one piece
                np.copyto(out, leaf[:, start:stop])
            else:  # wrapped around the ring
                head = t_len - start
                np.copyto(out[:, :head], leaf[:, start:])
                np.copyto(out[:, head:], leaf[:, :stop])
        self.last_index = index
        self.recorded += n
        self.pending = self.pool.submit(self._save, staged, first)
        if block:
            self._wait()
        return n

    def _save(self, staged: dict[str, np.ndarray], first: int) -> None:
        for name, values in staged.items():
            for row in range(values.shape[0]):
                data = np.ascontiguousarray(values[row])
                raw = data.data if self.codec is None else memoryview(self.codec.encode(data))
                payload = raw.cast("B")
                path = self.directory / f"{name}.{row}.{first}"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    done = 0
                    while done < len(payload):  # a write may take fewer bytes than given
                        done += os.write(fd, payload[done:])
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def _wait(self) -> None:
        if self.pending is not None:
            self.pending.result()
            self.pending = None

    def flush(self) -> None:
        """Wait for the write in flight."""
        self._wait()

    def close(self) -> None:
        """Wait for the write in flight and stop the background thread."""
        self._wait()
        self.pool.shutdown()

    def read(self, name: str, row: int) -> np.ndarray:
        """Every timestep of leaf ``name`` of ``row`` written so far, in order (to check what
        the floor wrote)."""
        pieces = sorted(
            self.directory.glob(f"{name}.{row}.*"), key=lambda p: int(p.suffix.lstrip("."))
        )
        dtype, shape = self.layout[name]
        raw = b"".join(
            p.read_bytes() if self.codec is None else bytes(self.codec.decode(p.read_bytes()))
            for p in pieces
        )
        return np.frombuffer(raw, dtype=dtype).reshape(-1, *shape)
