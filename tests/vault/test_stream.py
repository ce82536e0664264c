"""Streaming reads: as_dataset batches and iter_windows sub-buffers (real files, real TS)."""

from __future__ import annotations

import dataclasses
import gc
import itertools
import json
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
import pytest

import buffers as fbx
from vault import Vault, VaultArgumentError, VaultCorruptError, VaultReadError
from vault.stream._device_cut import rebuilder
from vault.stream._stream import StreamBatch

ROWS = 3
CODE = 100_000  # code = row * CODE + t


def make_vault(
    path: Path,
    length: int,
    *,
    rows: int = ROWS,
    done: np.ndarray | None = None,
    truncated: np.ndarray | None = None,
    chunk_t: int = 8,
) -> Vault:
    """A vault whose ``code`` leaf is ``row * CODE + t`` and ``obs`` is ``[code, -code]``; an
    episode index when ``done`` is given. Small time chunks, so streams cross many blocks."""
    example: dict[str, Any] = {"code": np.int64(0), "obs": np.zeros(2, np.float32)}
    chunk = {"code": [rows, chunk_t], "obs": [rows, chunk_t, 2]}
    episodes: dict[str, str] = {}
    if done is not None:
        example["done"] = np.bool_(False)
        chunk["done"] = [rows, chunk_t]
        episodes["done_leaf"] = "done"
    if truncated is not None:
        example["trunc"] = np.bool_(False)
        chunk["trunc"] = [rows, chunk_t]
        episodes["truncated_leaf"] = "trunc"
    vault = Vault.create(str(path), example, rows=rows, chunk=chunk, **episodes)
    code = np.arange(rows, dtype=np.int64)[:, None] * CODE + np.arange(length)[None]
    data: dict[str, Any] = {
        "code": code,
        "obs": np.stack([code, -code], axis=-1).astype(np.float32),
    }
    if done is not None:
        data["done"] = done
    if truncated is not None:
        data["trunc"] = truncated
    for lo in range(0, length, 13):  # several appends, not aligned with the chunks
        vault.append({k: v[:, lo : lo + 13] for k, v in data.items()})
    return vault


def valid_starts(length: int, seq: int, rows: int = ROWS, **kw: Any) -> set[tuple[int, int]]:
    """The reference: every (row, t) a stream must yield, by brute force."""
    stride = kw.get("stride", 1)
    ends = kw.get("ends")
    gaps = kw.get("gaps", ())
    out = set()
    for r in range(rows):
        for t in range(0, length - seq + 1, stride):
            if any(t < a <= t + seq - 1 for a in gaps):
                continue
            if ends is not None and ends[r, t : t + seq - 1].any():
                continue
            out.add((r, t))
    return out


def collect(stream: Any, seq: int) -> list[tuple[int, int]]:
    """(row, start) of every sequence yielded, checking each sequence's data against its
    origin on the way."""
    seen = []
    for batch in stream:
        code = np.asarray(batch.experience["code"])
        obs = np.asarray(batch.experience["obs"])
        want = batch.row[:, None] * CODE + batch.start[:, None] + np.arange(seq)[None]
        np.testing.assert_array_equal(code, want)
        np.testing.assert_array_equal(obs[..., 1], -want.astype(np.float32))
        seen += list(zip(batch.row.tolist(), batch.start.tolist(), strict=True))
    return seen


_OTHER_THREADS: set[threading.Thread] = set()


def stream_threads() -> list[threading.Thread]:
    """Stream threads started by the running test (not by other tests of the session)."""
    return [
        t
        for t in threading.enumerate()
        if t.name.startswith("rlvault-") and t not in _OTHER_THREADS
    ]


@pytest.fixture(autouse=True)
def _no_leaked_threads() -> Iterator[None]:
    """Every test of this module ends with its stream threads stopped."""
    _OTHER_THREADS.clear()
    _OTHER_THREADS.update(stream_threads())
    yield
    gc.collect()
    assert not stream_threads()


@pytest.mark.parametrize(
    ("seq", "kw"),
    [
        (1, {"shuffle": False}),
        (3, {"shuffle": False, "block_timesteps": 16, "interleave": 2}),
        (3, {"block_timesteps": 16}),  # shuffled runs, heads from disk and carried
        (4, {"block_timesteps": 8, "interleave": 3, "run_blocks": 2, "prefetch": 0}),
        (2, {"block_timesteps": 12, "stride": 3, "device_put": True}),  # not chunk-aligned
        (5, {"block_timesteps": 1000}),  # one block holds everything
        (3, {"shuffle": False, "block_timesteps": 16, "block_rows": 2}),  # rows 0-1, then 2
        (2, {"block_timesteps": 8, "block_rows": 2, "interleave": 2, "run_blocks": 3}),
    ],
)
def test_an_epoch_yields_every_valid_start_exactly_once(
    tmp_path: Path, seq: int, kw: dict[str, Any]
) -> None:
    length = 70
    vault = make_vault(tmp_path / "v", length)
    kw = {"device_put": False, **kw}
    batches = list(vault.as_dataset(5, seq, drop_remainder=False, seed=3, **kw))
    assert all(isinstance(b, StreamBatch) and b.epoch == 0 for b in batches)
    sizes = [len(b.row) for b in batches]
    assert all(s == 5 for s in sizes[:-1])
    assert 1 <= sizes[-1] <= 5
    leaf = batches[0].experience["code"]
    assert isinstance(leaf, jax.Array) == kw["device_put"]
    assert leaf.shape == (5, seq)
    assert batches[0].experience["obs"].shape == (5, seq, 2)
    seen = collect(batches, seq)
    want = valid_starts(length, seq, stride=kw.get("stride", 1))
    assert len(seen) == len(want)  # no duplicates ...
    assert set(seen) == want  # ... and nothing missing
    if not kw.get("shuffle", True):  # time order (inside each group of rows)
        for rows in ({0, 1}, {2}) if "block_rows" in kw else ({0, 1, 2},):
            times = [t for r, t in seen if r in rows]
            assert times == sorted(times)


@pytest.mark.parametrize(
    ("seq", "kw"),
    [
        (1, {"shuffle": False, "block_timesteps": 16}),  # batches span groups: topped up
        (3, {"block_timesteps": 16, "interleave": 2, "epochs": 2}),  # heads, reshuffled
        (2, {"block_timesteps": 1000, "drop_remainder": False}),  # one group, a short last
        (4, {"block_timesteps": 8, "stride": 2, "run_blocks": 2, "prefetch": 0}),
    ],
)
def test_batches_cut_on_the_device_are_the_batches_cut_on_the_host(
    tmp_path: Path, seq: int, kw: dict[str, Any]
) -> None:
    vault = make_vault(tmp_path / "v", 70)
    kw = {"drop_remainder": True, "seed": 5, **kw}
    host = list(vault.as_dataset(6, seq, device_put=True, **kw))
    device = list(vault.as_dataset(6, seq, cut_on_device=True, **kw))
    assert len(device) == len(host) > 4
    for got, want in zip(device, host, strict=True):
        for name in ("row", "start", "source"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
        assert got.epoch == want.epoch
        leaves = jax.tree.leaves(got.experience), jax.tree.leaves(want.experience)
        for g, w in zip(*leaves, strict=True):
            assert isinstance(g, jax.Array)
            assert (g.shape, g.dtype) == (w.shape, w.dtype)
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    assert collect(device, seq)  # and every sequence is the data at its (row, start)


def test_cut_on_device_refuses_a_sharding(tmp_path: Path) -> None:
    vault = make_vault(tmp_path / "v", 20)
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    with pytest.raises(VaultArgumentError, match=re.escape("give one or the other")):
        vault.as_dataset(4, 2, cut_on_device=True, sharding=sharding)


def test_default_leaves_follow_the_backend(tmp_path: Path) -> None:
    # CPU (as here): numpy, taken as they are by a jitted step; an
    # accelerator: JAX arrays put on it in the background. Forced either way by device_put.
    assert jax.default_backend() == "cpu"
    vault = make_vault(tmp_path / "v", 20)
    [default] = itertools.islice(vault.as_dataset(4, 2), 1)
    [forced] = itertools.islice(vault.as_dataset(4, 2, device_put=True), 1)
    for leaf in jax.tree.leaves(default.experience):
        assert type(leaf) is np.ndarray
    assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(forced.experience))
    step = jax.jit(lambda e: e["code"] * 2)
    np.testing.assert_array_equal(step(default.experience), default.experience["code"] * 2)
    np.testing.assert_array_equal(np.asarray(forced.experience["code"]), default.experience["code"])


class Pair(NamedTuple):
    x: Any
    y: Any


@dataclasses.dataclass
class Plain:  # not a pytree: JAX takes it for one leaf
    u: Any
    v: Any


@pytest.mark.parametrize("device_put", [False, True])
def test_batches_keep_the_vault_structure(tmp_path: Path, device_put: bool) -> None:
    example = {"z": Pair(np.float32(0), (np.int32(0), np.zeros(2, np.uint8))), "n": None}
    vault = Vault.create(str(tmp_path / "v"), example, rows=2)
    n = 12
    t = np.arange(2 * n).reshape(2, n)
    pair = np.stack([t, t + 1], -1) % 256
    z = Pair(t.astype(np.float32), (-t.astype(np.int32), pair.astype(np.uint8)))
    vault.append({"z": z, "n": None})
    batches = list(vault.as_dataset(5, 1, shuffle=False, device_put=device_put))
    assert len(batches) == 2 * n // 5
    for batch in batches:
        code = batch.row * n + batch.start  # the value of t there
        exp = batch.experience
        assert set(exp) == {"z", "n"}
        assert exp["n"] is None
        assert type(exp["z"]) is Pair
        assert type(exp["z"].y) is tuple
        np.testing.assert_array_equal(np.asarray(exp["z"].x)[:, 0], code)
        np.testing.assert_array_equal(np.asarray(exp["z"].y[0])[:, 0], -code)
        np.testing.assert_array_equal(np.asarray(exp["z"].y[1])[:, 0, 1], (code + 1) % 256)


def test_trees_jax_cannot_flatten_are_built_the_slow_way() -> None:
    a, b = np.zeros(1), np.ones(1)
    assert rebuilder(Plain(a, b), [a, b]) is None  # JAX sees one leaf, not two
    rebuild = rebuilder({"y": (b, None), "x": a}, [b, a])  # another leaf order than JAX's
    assert rebuild is not None
    c, d = np.full(1, 2), np.full(1, 3)
    assert rebuild([c, d]) == {"y": (c, None), "x": d}


def test_drop_remainder_and_several_epochs_reshuffled(tmp_path: Path) -> None:
    vault = make_vault(tmp_path / "v", 40)
    want = valid_starts(40, 2)  # 117 starts: 23 full batches of 5, 2 left over
    batches = list(vault.as_dataset(5, 2, epochs=3, block_timesteps=16, device_put=False))
    assert [b.epoch for b in batches] == [e for e in range(3) for _ in range(23)]
    orders = []
    for epoch in range(3):
        got = [s for b in batches if b.epoch == epoch for s in zip(b.row, b.start, strict=True)]
        assert len(set(got)) == len(got) == 115
        assert set(got) <= want
        orders.append(got)
    assert orders[0] != orders[1] != orders[2]  # a new order each epoch


def test_same_seed_same_batches_whatever_the_prefetch(tmp_path: Path) -> None:
    vault = make_vault(tmp_path / "v", 60)

    def run(seed: int, prefetch: int) -> list[tuple[list[int], list[int]]]:
        stream = vault.as_dataset(
            4,
            3,
            seed=seed,
            prefetch=prefetch,
            epochs=2,
            block_timesteps=8,
            interleave=2,
            device_put=False,
        )
        return [(b.row.tolist(), b.start.tolist()) for b in stream]

    first = run(7, 2)
    assert run(7, 2) == first
    assert run(7, 0) == first  # no thread at all: same batches, same order
    assert run(7, 5) == first
    assert run(8, 2) != first


def test_shuffle_mixes_blocks_and_rows(tmp_path: Path) -> None:
    vault = make_vault(tmp_path / "v", 64)
    stream = vault.as_dataset(8, 1, block_timesteps=8, interleave=4, device_put=False)
    first = next(stream)
    stream.close()
    assert len({int(t) // 8 for t in first.start}) > 1  # several blocks in one batch
    assert len(set(first.row.tolist())) > 1


def test_rows_and_row_groups_selection_out_of_order(tmp_path: Path) -> None:
    vault = make_vault(tmp_path / "v", 40, rows=5)
    kw: dict[str, Any] = {"drop_remainder": False, "device_put": False}
    stream = vault.as_dataset(4, 3, rows=[4, 1, 2], block_rows=2, block_timesteps=16, **kw)
    assert (stream.block_rows, stream.block_timesteps) == (2, 16)
    seen = collect(stream, 3)
    want = {(r, t) for r, t in valid_starts(40, 3, rows=5) if r in (1, 2, 4)}
    assert len(seen) == len(want)
    assert set(seen) == want


def test_many_rows_are_split_into_row_groups(tmp_path: Path) -> None:
    rows = 64  # frames of 4 KiB: one chunk is 1 row x 512 timesteps (2 MiB)
    vault = Vault.create(str(tmp_path / "v"), {"frame": np.zeros(4096, np.uint8)}, rows=rows)
    vault.append({"frame": np.zeros((rows, 600, 4096), np.uint8)})
    with vault.as_dataset(8, 2, device_put=False) as stream:
        # all 64 rows x 512 timesteps would be 134 MB: 16 rows at a time stay near 32 MiB
        assert (stream.block_timesteps, stream.block_rows) == (512, 16)
        assert stream.block_bytes == 16 * 512 * 4096
        assert len(next(stream).row) == 8


def test_episode_aware_windows_hold_an_end_only_at_their_last_step(tmp_path: Path) -> None:
    length, seq = 90, 4
    rng = np.random.default_rng(0)
    done = rng.random((ROWS, length)) < 0.12
    trunc = rng.random((ROWS, length)) < 0.05
    vault = make_vault(tmp_path / "v", length, done=done, truncated=trunc)
    assert vault.episode_leaves["truncated"] == "trunc"
    for kw in ({"shuffle": False}, {"block_timesteps": 16, "interleave": 2}):
        stream = vault.as_dataset(
            6, seq, episode_aware=True, drop_remainder=False, device_put=False, **kw
        )
        seen = []
        for batch in stream:
            assert set(batch.experience) == {"code", "obs", "done", "trunc"}
            ends = np.asarray(batch.experience["done"]) | np.asarray(batch.experience["trunc"])
            assert not ends[:, :-1].any()
            seen += list(zip(batch.row.tolist(), batch.start.tolist(), strict=True))
        want = valid_starts(length, seq, ends=done | trunc)
        assert len(seen) == len(want)
        assert set(seen) == want
        assert len(want) < 0.75 * ROWS * (length - seq + 1)  # the filter really removed many


def test_episode_aware_reads_the_done_leaf_even_when_not_selected(tmp_path: Path) -> None:
    done = np.zeros((ROWS, 30), bool)
    done[:, 9] = True
    vault = make_vault(tmp_path / "v", 30, done=done)
    stream = vault.as_dataset(
        4, 3, episode_aware=True, leaves=["code"], drop_remainder=False, device_put=False
    )
    seen = []
    for batch in stream:
        assert list(batch.experience) == ["code"]
        seen += list(zip(batch.row.tolist(), batch.start.tolist(), strict=True))
    assert set(seen) == valid_starts(30, 3, ends=done)
    assert (0, 8) not in set(seen)  # done at 9 is not the last step of [8, 11)
    assert (0, 7) in set(seen)  # ... but it is of [7, 10)


def test_episode_aware_needs_an_episode_index(tmp_path: Path) -> None:
    vault = make_vault(tmp_path / "v", 20)
    with pytest.raises(VaultReadError, match=re.escape("needs a vault that knows its episode")):
        vault.as_dataset(2, 2, episode_aware=True)


def test_forever_with_no_valid_sequence_is_an_error_not_a_hang(tmp_path: Path) -> None:
    vault = make_vault(tmp_path / "v", 20, done=np.ones((ROWS, 20), bool))
    stream = vault.as_dataset(2, 2, episode_aware=True, epochs=None, device_put=False)
    with pytest.raises(VaultReadError, match=re.escape("an epoch yields no batch of 2")):
        next(stream)
    assert stream.closed
    assert not stream_threads()


def test_sequences_never_straddle_a_recorded_gap(tmp_path: Path) -> None:
    buffer = fbx.make_trajectory_buffer(2, 1, 1, 1, 1, max_length_time_axis=8)
    add = jax.jit(buffer.add)
    state = buffer.init({"code": np.int64(0), "obs": np.zeros(2, np.float32)})

    def add_steps(state: Any, lo: int, hi: int) -> Any:
        code = np.arange(2)[:, None] * CODE + np.arange(lo, hi)[None]
        obs = np.stack([code, -code], -1).astype(np.float32)
        return add(state, {"code": code.astype(np.int32), "obs": obs})

    vault = Vault.create(str(tmp_path / "v"), state)
    state = add_steps(state, 0, 6)
    vault.write(state)
    state = add_steps(state, 6, 11)
    state = add_steps(state, 11, 16)  # 10 since the last write, the buffer holds 8: 2 lost
    vault.write(state, on_overrun="save_surviving")
    state = add_steps(state, 16, 20)
    vault.write(state)
    assert vault.gaps == [{"at": 6, "lost": 2}]
    # stored times: 0..5 then 8..19 (14 + 4 = 18 per row); index 6 holds time 8
    stored = vault.read_numpy()["code"][0]
    assert stored.tolist() == [*range(6), *range(8, 20)]
    seen = set()
    for batch in vault.as_dataset(3, 3, drop_remainder=False, block_timesteps=8, device_put=False):
        code = np.asarray(batch.experience["code"])
        assert (np.diff(code, axis=1) == 1).all()  # consecutive times only
        seen |= set(zip(batch.row.tolist(), batch.start.tolist(), strict=True))
    assert seen == valid_starts(18, 3, rows=2, gaps=[6])


def test_sequences_never_straddle_a_restart(tmp_path: Path) -> None:
    vault = make_vault(tmp_path / "v", 20, done=np.zeros((ROWS, 20), bool))
    code = np.arange(ROWS, dtype=np.int64)[:, None] * CODE + np.arange(20, 30)[None]
    more = {
        "code": code,
        "obs": np.stack([code, -code], axis=-1).astype(np.float32),
        "done": np.zeros((ROWS, 10), bool),
    }
    vault.append(more, continues=False)  # the rows restart at 20: no episode end recorded
    assert vault.gaps == [{"at": 20, "lost": 0}]
    for aware in (False, True):
        stream = vault.as_dataset(
            4, 3, drop_remainder=False, block_timesteps=8, episode_aware=aware, device_put=False
        )
        seen = collect(stream, 3)
        assert len(seen) == len(set(seen))
        assert set(seen) == valid_starts(30, 3, gaps=[20])


def test_rows_and_leaves_selection(tmp_path: Path) -> None:
    vault = make_vault(tmp_path / "v", 30)
    stream = vault.as_dataset(
        4, 2, rows=[2, 0], leaves=["code"], drop_remainder=False, device_put=False
    )
    seen = []
    for batch in stream:
        assert list(batch.experience) == ["code"]
        code = batch.experience["code"]
        np.testing.assert_array_equal(code[:, 0], batch.row * CODE + batch.start)
        seen += list(zip(batch.row.tolist(), batch.start.tolist(), strict=True))
    assert set(seen) == {s for s in valid_starts(30, 2) if s[0] in (0, 2)}
    assert len(seen) == 2 * 29


def test_early_exit_stops_the_thread(tmp_path: Path) -> None:
    vault = make_vault(tmp_path / "v", 80)
    with vault.as_dataset(2, 2, epochs=None, block_timesteps=8, device_put=False) as stream:
        for _ in itertools.islice(stream, 3):
            pass
        assert len(stream_threads()) == 1
    assert not stream_threads()
    assert stream.closed
    assert next(stream, None) is None  # a closed stream is exhausted
    stream.close()  # idempotent

    # Dropped without close(): collecting it stops the thread.
    dropped = vault.as_dataset(2, 2, epochs=None, block_timesteps=8, device_put=False)
    next(dropped)
    del dropped
    gc.collect()
    assert not stream_threads()


def test_a_corrupt_chunk_surfaces_in_the_consumer(tmp_path: Path) -> None:
    vault = make_vault(tmp_path / "v", 64)
    chunk = tmp_path / "v" / "experience" / "code" / "c" / "0" / "5"
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    stream = vault.as_dataset(4, 1, shuffle=False, block_timesteps=8, device_put=False)
    got = list(itertools.islice(stream, 30))  # blocks 0-4 (6 batches each) are intact
    assert [int(b.start.max()) for b in got[5::6]] == [7, 15, 23, 31, 39]
    with pytest.raises(VaultCorruptError, match=re.escape("array experience/code, chunk 0.5")):
        next(stream)
    assert stream.closed
    assert not stream_threads()


def test_argument_errors(tmp_path: Path) -> None:
    vault = make_vault(tmp_path / "v", 10)
    with pytest.raises(VaultReadError, match=re.escape("need at least 11 committed timesteps")):
        vault.as_dataset(2, 11)
    with pytest.raises(VaultReadError, match=re.escape("block_timesteps (4) must be >= seq")):
        vault.as_dataset(2, 5, block_timesteps=4)
    with pytest.raises(VaultReadError, match=re.escape("sample_batch_size must be an int >= 1")):
        vault.as_dataset(0, 1)
    with pytest.raises(VaultReadError, match=re.escape("unknown leaves ['nope']")):
        vault.as_dataset(2, 1, leaves=["nope"])
    with pytest.raises(VaultReadError, match=re.escape("rows [7] out of range")):
        vault.as_dataset(2, 1, rows=[7])
    with pytest.raises(VaultReadError, match=re.escape("rows [1, 0, 1] name a row twice")):
        vault.as_dataset(2, 1, rows=[1, 0, 1])
    with pytest.raises(VaultReadError, match=re.escape("capacity (3) must be >= window (4)")):
        vault.iter_windows(4, capacity=3)
    with pytest.raises(VaultReadError, match=re.escape("prefetch must be an int >= 0")):
        vault.iter_windows(4, prefetch=-1)
    assert not stream_threads()


# --------------------------------------------------------------------------------------------
# iter_windows
# --------------------------------------------------------------------------------------------

WINDOW_BUFFER = fbx.make_trajectory_buffer(ROWS, 16, 3, 1, 3, max_length_time_axis=20)
WINDOW_SAMPLE = jax.jit(WINDOW_BUFFER.sample)


@pytest.mark.parametrize("shuffle", [False, True])
def test_windows_visit_every_timestep_once_and_buffers_sample_them(
    tmp_path: Path, shuffle: bool
) -> None:
    length, window = 87, 20
    vault = make_vault(tmp_path / "v", length)
    windows = vault.iter_windows(window, shuffle=shuffle, seed=1, leaves=["code"], epochs=2)
    ranges = [windows.ranges(0), windows.ranges(1)]
    for r in ranges:
        assert sorted(r) == [(t, min(t + 20, length)) for t in range(0, length, 20)]
    assert (ranges[0] != ranges[1]) == shuffle
    visited = np.zeros((ROWS, 2, length), int)
    for i, state in enumerate(windows):
        epoch = i // 5
        lo, hi = ranges[epoch][i % 5]
        assert isinstance(state, fbx.TrajectoryBufferState)
        code = np.asarray(state.experience["code"])
        assert code.shape == (ROWS, window)  # one shape: the jitted sample never retraces
        n = int(state.current_index) if not bool(state.is_full) else window
        assert n == hi - lo
        np.testing.assert_array_equal(code[:, :n] % CODE, np.tile(np.arange(lo, hi), (ROWS, 1)))
        visited[np.arange(ROWS)[:, None], epoch, code[:, :n] % CODE] += 1
        assert bool(WINDOW_BUFFER.can_sample(state))
        sample = WINDOW_SAMPLE(state, jax.random.key(i))
        got = np.asarray(sample.experience["code"]) % CODE
        assert sample.valid.all()
        assert ((got >= lo) & (got < hi)).all()  # samples come from this window only
        assert (np.diff(got, axis=1) == 1).all()
    assert (visited == 1).all()
    assert WINDOW_SAMPLE._cache_size() == 1
    assert not stream_threads()


def test_windows_drop_remainder_capacity_and_early_close(tmp_path: Path) -> None:
    vault = make_vault(tmp_path / "v", 50)
    states = list(vault.iter_windows(16, drop_remainder=True, capacity=32, prefetch=0))
    assert len(states) == 3  # [0,16) [16,32) [32,48); 48..49 dropped
    assert all(s.experience["code"].shape == (ROWS, 32) for s in states)
    assert all(int(s.current_index) == 16 and not bool(s.is_full) for s in states)
    with vault.iter_windows(8, epochs=None, prefetch=2) as windows:
        next(windows)
        assert len(stream_threads()) == 1
    assert not stream_threads()


# --------------------------------------------------------------------------------------------
# Memory: a vault several times larger than the budget streams with bounded RSS
# --------------------------------------------------------------------------------------------

RSS_PROBE = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    from vault import Vault

    def hwm():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024

    v = Vault.open(sys.argv[1])
    # start JAX's backend and compiler (streaming compiles one tiny function) and TensorStore
    jax.block_until_ready(jax.jit(lambda x: x + 1)(np.ones(1 << 16, np.float32)))
    v.read_numpy(stop=16)
    before = hwm()
    total, count = 0, 0
    for batch in v.as_dataset(64, 2, block_timesteps=128, prefetch=2, seed=0):
        jax.block_until_ready(batch.experience)
        frames = np.asarray(batch.experience["frame"])  # no JAX op: nothing to compile
        total += int(frames[:, 0, 0].sum()) + int(batch.start.sum())
        count += len(batch.row)
    streamed = hwm()
    everything = v.read_numpy()
    read_all = hwm()
    print(json.dumps({"stream_growth": streamed - before, "read_all_growth": read_all - before,
                      "sequences": count, "nbytes": sum(x.nbytes for x in everything.values())}))
    """
)


def test_streaming_a_vault_larger_than_the_budget_keeps_rss_bounded(tmp_path: Path) -> None:
    rows, frame, length = 4, 4096, 15360  # 252 MB of incompressible frames
    # 2 MiB blocks, 3 resident: about 45 MB measured (a fixed ~40 MB of thread arenas, JAX and
    # queued batches, plus about 5 blocks with TensorStore's decoding buffers)
    budget = 96 << 20
    path = tmp_path / "big"
    vault = Vault.create(
        str(path), {"frame": np.zeros(frame, np.uint8), "t": np.int32(0)}, rows=rows
    )
    rng = np.random.default_rng(0)
    for lo in range(0, length, 1024):
        frames = rng.integers(0, 256, (rows, 1024, frame), dtype=np.uint8)
        t = np.broadcast_to(np.arange(lo, lo + 1024, dtype=np.int32), (rows, 1024))
        vault.append({"frame": frames, "t": t})
    vault.close()
    raw = rows * length * (frame + 4)
    assert raw > 2.5 * budget
    done = subprocess.run(
        [sys.executable, "-c", RSS_PROBE, str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["sequences"] == rows * (length - 1) // 64 * 64
    assert report["nbytes"] == raw
    assert report["read_all_growth"] > 0.9 * raw  # the probe does see a full read ...
    assert report["stream_growth"] < budget, report  # ... and streaming stays far below it


def test_unclosed_streams_at_interpreter_exit_stop_cleanly(tmp_path: Path) -> None:
    """A stream left open when the program ends: no traceback, no abort, exit code 0."""
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from vault import Vault\n"
        f"v = Vault.create({str(tmp_path / 'v')!r}, {{'a': np.float32(0)}}, rows=2)\n"
        "v.append({'a': np.ones((2, 64), np.float32)})\n"
        "w = v.iter_windows(4); next(w)\n"
        "d = v.as_dataset(4, 2, epochs=None); next(d)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_read_results_are_freed_without_the_cyclic_gc(tmp_path: Path) -> None:
    import gc
    import weakref

    v = Vault.create(str(tmp_path / "v"), {"a": np.zeros(3, np.float32), "b": np.int32(0)}, rows=2)
    v.append({"a": np.ones((2, 10, 3), np.float32), "b": np.zeros((2, 10), np.int32)})
    gc.disable()
    try:
        got = v.read_numpy()
        ref = weakref.ref(got["a"].base)
        del got
        assert ref() is None  # freed by reference counting alone
    finally:
        gc.enable()
