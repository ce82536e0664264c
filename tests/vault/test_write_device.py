"""Writes of a buffer whose leaves live on an accelerator (``vault/write/_device.py``): only the
new timesteps cross to the host, cut on the device; a background write hands them to the
writer's thread still on the device, which copies and stages them there.

On an accelerator these run on it as they are. On a CPU-only machine (this project's CI) jax
arrays on the CPU are taken for device leaves (``on_accelerator`` answers for them), so the
same path runs: the jitted cut, the copy started early, the staging in the background thread
with the tails it leaves the next append.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers as fbx
import vault
from vault import Vault
from vault.write import _device

T = 8
ROWS = 2


def timesteps(start: int, stop: int) -> dict[str, Any]:
    """Timesteps ``[start, stop)`` of every row, ``[ROWS, n, ...]`` per leaf, each value
    saying where it belongs."""
    t, r = np.broadcast_arrays(np.arange(start, stop)[None, :], np.arange(ROWS)[:, None])
    return {
        "obs": np.stack([t + 0.25, r.astype(float)], -1).astype(np.float32),
        "act": ((7 * t + r) % 251).astype(np.uint8),
        "pair": ((t + r) % 5 == 4, (100 * t + r).astype(np.int32)),
    }


@pytest.fixture
def cuts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every cut made on a device, ``(start, n)``; on a CPU-only machine, jax arrays on the
    CPU taken for device leaves."""
    made: list[tuple[int, int]] = []
    real_cut = _device.cut

    def cut(value: Any, lead: int, start: int, n: int) -> Any:
        made.append((start, n))
        return real_cut(value, lead, start, n)

    monkeypatch.setattr(_device, "cut", cut)
    if jax.default_backend() == "cpu":
        monkeypatch.setattr(
            _device, "on_accelerator", lambda v: _device.device_memory_of(v) is not None
        )
    return made


class Run:
    """A trajectory buffer on the default device, fed the timesteps of :func:`timesteps`,
    its adds donated (the state a write saw is overwritten by the next add)."""

    def __init__(self) -> None:
        self.buffer = fbx.make_trajectory_buffer(
            add_batch_size=ROWS,
            sample_batch_size=2,
            sample_sequence_length=2,
            period=1,
            min_length_time_axis=2,
            max_length_time_axis=T,
        )
        first = jax.tree.map(lambda x: jnp.asarray(x[0, 0]), timesteps(0, 1))
        self.state = self.buffer.init(first)
        self.add = jax.jit(self.buffer.add, donate_argnums=0)
        self.t = 0

    def adds(self, n: int) -> None:
        batch = jax.tree.map(jnp.asarray, timesteps(self.t, self.t + n))
        self.state = self.add(self.state, batch)
        self.t += n


def assert_stored(path: Path, start: int, stop: int) -> None:
    got = Vault.open(path).read_numpy()
    want = timesteps(start, stop)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.dtype == w.dtype
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)


ODD_CHUNKS: dict[str, Sequence[int]] = {
    "obs": [1, 3, 2],
    "act": [2, 5],
    "pair/0": [1, 3],
    "pair/1": [2, 7],
}
SCHEDULE = (1, 3, T, 2, 5, 7, 1, 4, T, 6)  # adds between writes, up to a whole ring


@pytest.mark.parametrize("chunk", [None, ODD_CHUNKS], ids=["default-chunks", "odd-chunks"])
@pytest.mark.parametrize("mode", ["block", "background", "alternating"])
def test_a_device_buffer_written_every_few_adds_stores_every_timestep_once(
    tmp_path: Path, cuts: list[tuple[int, int]], mode: str, chunk: Any
) -> None:
    run = Run()
    path = tmp_path / "v"
    v = Vault.create(path, run.state, chunk=chunk)
    for i, n in enumerate(SCHEDULE):
        before = len(cuts)
        run.adds(n)
        block = mode == "block" or (mode == "alternating" and i % 3 == 2)
        assert v.write(run.state, block=block) == n
        # only the new timesteps were cut, one cut per leaf, where the ring put them
        assert cuts[before:] == [((run.t - n) % T, n)] * 4
    v.close()
    assert_stored(path, 0, run.t)
    assert vault.verify(path).ok


def test_a_background_write_keeps_the_timesteps_of_a_state_donated_right_after(
    tmp_path: Path, cuts: list[tuple[int, int]]
) -> None:
    """The cut is the write's own copy: the adds that overwrite (donate) the state's arrays
    right after ``write`` returns, while the copy and the staging are queued, change nothing
    stored."""
    run = Run()
    path = tmp_path / "v"
    v = Vault.create(path, run.state)
    v.max_pending = 4
    for _ in range(4):
        run.adds(T)  # the whole ring each time: every timestep the write saw is overwritten
        v.write(run.state, block=False)
        run.adds(T)
        v.write(run.state, block=False)
    v.close()
    assert_stored(path, 0, run.t)
    assert len(cuts) == 8 * 4


def test_a_new_buffer_on_the_device_is_told_from_the_old_one_by_its_last_timestep(
    tmp_path: Path, cuts: list[tuple[int, int]]
) -> None:
    """``new_buffer=True`` compares the timestep the vault holds last with the buffer's at
    that counter: cut on the device too (one timestep), in a new writer and in the same one."""
    run = Run()
    path = tmp_path / "v"
    v = Vault.create(path, run.state)
    run.adds(5)
    v.write(run.state, block=False)
    v.close()
    v = Vault.open(path, mode="a")
    run.adds(2)
    assert v.write(run.state, new_buffer=True) == 2  # the same buffer: only the 2 new ones
    assert (4, 1) in cuts  # its timestep 4 (the vault's last) compared
    run.adds(3)
    assert v.write(run.state, new_buffer=True, block=False) == 3
    v.close()
    assert_stored(path, 0, run.t)


def test_a_failed_background_write_of_a_device_buffer_leaves_the_last_commit(
    tmp_path: Path, cuts: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy to the host fails in the background thread: the error is raised by the next
    call (``flush`` here), the vault stays at its last commit, and the next write of the same
    buffer appends exactly what is missing (the tails the failed staging never set are not
    waited for)."""
    run = Run()
    path = tmp_path / "v"
    v = Vault.create(path, run.state, chunk=ODD_CHUNKS)
    run.adds(3)
    v.write(run.state, block=False)
    v.flush()
    real = _device.to_host

    def broken(values: Any) -> Any:
        raise OSError("the host copy failed")

    monkeypatch.setattr(_device, "to_host", broken)
    run.adds(2)
    v.write(run.state, block=False)
    run.adds(1)
    with pytest.raises(vault.VaultError, match="background write failed"):
        v.flush()
    assert Vault.open(path).committed_length == 3
    monkeypatch.setattr(_device, "to_host", real)
    assert v.write(run.state, block=False) == 3
    v.close()
    assert_stored(path, 0, run.t)


@pytest.mark.parametrize(("start", "n"), [(0, 8), (6, 5), (3, 1), (7, 7), (2, 0)])
def test_a_cut_is_one_gather_per_power_of_two_in_time_order_across_the_wrap(
    start: int, n: int
) -> None:
    """A cut of ``n`` timesteps compiles gathers of powers of two only (a process compiles at
    most log2(T) + 1 per leaf, however its writes are spaced), stacked axes folded into
    rows."""
    ring = jnp.arange(3 * 2 * T * 2, dtype=jnp.int32).reshape(3, 2, T, 2)  # [stack, rows, T, 2]
    pieces = _device.cut(ring, 2, start, n)
    sizes = [int(p.shape[1]) for p in pieces]
    assert sizes == sorted(sizes, reverse=True)
    assert all(s & (s - 1) == 0 for s in sizes)
    assert sum(sizes) == n
    got = np.concatenate(_device.to_host(pieces), axis=1) if pieces else np.zeros((6, 0, 2))
    want = np.asarray(ring).reshape(6, T, 2)[:, (start + np.arange(n)) % T]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("block", [True, False], ids=["block", "background"])
def test_a_vmapped_batch_of_device_buffers_is_cut_buffer_major(
    tmp_path: Path, cuts: list[tuple[int, int]], block: bool
) -> None:
    """Two buffers stacked by ``vmap`` on one device: the cut folds the stacked axis into
    the rows, buffer-major, as the host path does."""
    run = Run()
    init = jax.jit(jax.vmap(run.buffer.init, in_axes=None, axis_size=2))
    add = jax.jit(jax.vmap(run.buffer.add), donate_argnums=0)
    state = init(jax.tree.map(lambda x: jnp.asarray(x[0, 0]), timesteps(0, 1)))
    path = tmp_path / "v"
    v = Vault.create(path, state)
    t = 0
    for n in (3, T, 5):
        for _ in range(n):  # buffer 1 holds buffer 0's values shifted by 1000 timesteps
            step = [timesteps(t, t + 1), timesteps(t + 1000, t + 1001)]
            state = add(state, jax.tree.map(lambda *x: jnp.stack(x), *step))
            t += 1
        assert v.write(state, block=block) == n
    v.close()
    assert len(cuts) == 3 * 4
    got = Vault.open(path).read_numpy()
    both = [timesteps(0, t), timesteps(1000, 1000 + t)]
    want = jax.tree.map(lambda a, b: np.concatenate([a, b], axis=0), *both)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(g, w)


def test_background_writes_of_a_device_buffer_to_s3(
    vault_url: str, cuts: list[tuple[int, int]]
) -> None:
    """On a remote location (no staging: the relay keeps the partly filled chunks), the
    background thread copies the cut to the host and writes it as it is."""
    run = Run()
    v = Vault.create(vault_url, run.state, chunk=ODD_CHUNKS)
    for n in (3, T, 2, 5):
        run.adds(n)
        v.write(run.state, block=False)
    v.close()
    assert len(cuts) == 4 * 4
    got = Vault.open(vault_url).read_numpy()
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(timesteps(0, run.t)), strict=True):
        np.testing.assert_array_equal(g, w)


def test_a_large_cut_comes_in_pieces_of_at_most_piece_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each piece's host copy holds the GIL for all of its bytes: a cut hands over pieces of
    at most ``PIECE_BYTES`` (a power of two of timesteps each), in time order."""
    ring = jnp.arange(2 * T * 4, dtype=jnp.int32).reshape(2, T, 4)  # 32 bytes per timestep
    monkeypatch.setattr(_device, "PIECE_BYTES", 64)  # 2 timesteps per piece
    pieces = _device.cut(ring, 1, 5, 7)  # 4 + 2 + 1 timesteps, across the wrap
    assert [int(p.shape[1]) for p in pieces] == [2, 2, 2, 1]
    got = np.concatenate(_device.to_host(pieces), axis=1)
    np.testing.assert_array_equal(got, np.asarray(ring)[:, (5 + np.arange(7)) % T])


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_a_cut_keeps_every_bit_nan_payloads_included(dtype: Any) -> None:
    """The cut is a plain gather: NaN payloads, -0.0 and denormals come out bit for bit."""
    half = [0x7E01, 0xFE33, 0x8000, 0x0001]  # NaNs with payloads, -0.0, a denormal
    single = [0x7FC00001, 0xFFBADBAD, 0x80000000, 0x00000001]
    size = np.dtype(dtype).itemsize
    raw = np.array(half if size == 2 else single, f"u{size}").view(dtype)
    ring = jnp.asarray(np.tile(raw, (2, 2))[:, :, None])  # [2 rows, T = 8, 1]
    got = np.concatenate(_device.to_host(_device.cut(ring, 1, 6, 5)), axis=1)
    want = np.asarray(ring)[:, (6 + np.arange(5)) % T]
    assert got.tobytes() == want.tobytes()
