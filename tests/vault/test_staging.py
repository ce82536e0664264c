"""Appends staged in whole chunks (``vault/write/_stage.py``): the staging arrays are reused only
once nothing references them, and appends that start and end inside chunks store exactly the
data given (also across reopening, when the writer no longer holds the partly filled chunk)."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts

from vault import Vault
from vault.write._commit import write_parts
from vault.write._plan import AppendJob
from vault.write._stage import StagingPool, stage


def test_pool_reuses_an_array_only_once_nothing_else_holds_it() -> None:
    pool = StagingPool()
    one = [[np.ones((2, 5, 3), np.float32)]]
    _, staged, _ = stage(0, None, one, [4], pool.empty)
    held = staged[0].data  # as TensorStore holds the array while it writes from it
    pool.release(staged)
    del staged
    fresh = pool.empty((2, 8, 3), np.dtype(np.float32))
    assert not np.shares_memory(fresh, held)  # still referenced: a new array
    del held, fresh
    _, staged, _ = stage(0, None, one, [4], pool.empty)
    base = weakref.ref(staged[0].data.base)
    pool.release(staged)
    del staged
    again = pool.empty((2, 6, 3), np.dtype(np.float32))  # a shorter append fits
    assert again.base is base()
    assert again.shape == (2, 6, 3)
    other = pool.empty((2, 6, 3), np.dtype(np.float32))
    assert not np.shares_memory(again, other)  # handed out once


def test_stage_pads_to_whole_chunks_after_the_kept_tail() -> None:
    new = np.arange(2 * 6).reshape(2, 6)
    parts, staged, tails = stage(5, (np.full((2, 1), -1),), [[new[:, :4], new[:, 4:]]], [4])
    # timesteps 4..11 (chunk 1 and 2): the kept timestep 4, the six new ones, one fill value
    assert staged[0].begin == 4
    np.testing.assert_array_equal(staged[0].data, np.c_[np.full((2, 1), -1), new, np.zeros(2)])
    np.testing.assert_array_equal(parts[0], new)
    np.testing.assert_array_equal(tails[0], new[:, 3:])  # timesteps 8..10
    assert not staged[0].data.flags.writeable
    # the chunk at the start not known: written from the append's start, merged by storage
    _, staged, tails = stage(5, None, [[new[:, :2]]], [4])
    assert staged[0].begin == 5
    assert staged[0].data.shape == (2, 3)
    assert tails[0] is None  # still inside that chunk: its start is still not known


def test_appends_inside_chunks_across_reopening(tmp_path: Path) -> None:
    path = str(tmp_path / "v")
    example = {"obs": np.zeros((2, 3), np.uint8), "r": np.float32(0)}
    vault = Vault.create(path, example, rows=3, chunk={"obs": [1, 4, 2, 3], "r": [3, 8]})
    rng = np.random.default_rng(0)
    expected: list[dict[str, np.ndarray]] = []
    for i, n in enumerate([3, 2, 7, 1, 9, 4, 5]):
        if i in (2, 5):  # a new writer: the partly filled chunk is only on disk
            vault.close()
            vault = Vault.open(path, mode="a")
        part = {
            "obs": rng.integers(0, 255, (3, n, 2, 3), dtype=np.uint8),
            "r": rng.normal(size=(3, n)).astype(np.float32),
        }
        vault.append(part)
        expected.append(part)
        got = vault.read_numpy()
        for key in ("obs", "r"):
            np.testing.assert_array_equal(got[key], np.concatenate([e[key] for e in expected], 1))
    vault.close()
    got = Vault.open(path).read_numpy()
    np.testing.assert_array_equal(got["obs"], np.concatenate([e["obs"] for e in expected], 1))


class _Watched:
    """A real TensorStore array that notes, as each write starts, how many of the writes
    started before it are still running."""

    def __init__(self, array: Any, started: list[Any], busy: list[int]) -> None:
        self.array, self.started, self.busy = array, started, busy

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    def __getitem__(self, where: Any) -> _Watched:
        return _Watched(self.array[where], self.started, self.busy)

    def write(self, data: np.ndarray, **options: Any) -> Any:
        self.busy.append(sum(not f.done() for f in self.started))
        future = self.array.write(data, **options)
        self.started.append(future)
        return future


@pytest.mark.parametrize("lanes", [None, 1, 2])
def test_write_parts_writes_chunk_by_chunk_in_at_most_lanes_at_once(
    tmp_path: Path, lanes: int | None
) -> None:
    rows, step = 3, 4  # chunks of 1 row x 4 timesteps (obs) and 3 rows x 8 (r)
    chunks = [(1, step, 2), (3, 8)]
    arrays = [
        ts.open(
            {
                "driver": "zarr3",
                "kvstore": {"driver": "file", "path": str(tmp_path / name)},
                "metadata": {
                    "shape": [rows, 32, *item],
                    "data_type": "int32",
                    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}},
                },
            },
            create=True,
        ).result()
        for name, item, chunk in (("obs", [2], list(chunks[0])), ("r", [], list(chunks[1])))
    ]
    rng = np.random.default_rng(1)
    new = [rng.integers(0, 1 << 30, (rows, 13, *a.shape[2:]), dtype=np.int32) for a in arrays]
    # timesteps 5..17: obs staged from 4 (its tail kept: one timestep), r from 5 (not known)
    tails = (new[0][:, :1] * 0 - 7, None)
    parts, staged, _ = stage(5, tails, [[n] for n in new], [4, 8])
    job = AppendJob(5, 18, parts, None, (), staged=staged)
    started: list[Any] = []
    busy: list[int] = []
    watched = tuple(_Watched(a, started, busy) for a in arrays)
    for future in write_parts(watched, job, chunks, lanes):
        future.result()
    if lanes is None:
        assert len(started) == 2  # one write per leaf, every chunk encoded at once
    else:
        # obs: 3 rows x timesteps 4-7, 8-11, 12-15, 16-19; r: 5-7 (the rest of its first
        # chunk, merged by storage), 8-15 and 16-23
        assert len(started) == 3 * 4 + 3
        assert max(busy) <= lanes - 1
    got_obs = arrays[0][:, 4:18].read().result()
    np.testing.assert_array_equal(got_obs[:, 0], np.full((rows, 2), -7))
    np.testing.assert_array_equal(got_obs[:, 1:], new[0])
    np.testing.assert_array_equal(arrays[1][:, 5:18].read().result(), new[1])
