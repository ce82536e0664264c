"""Non-blocking writes: the buffer may be donated at once; order, back-pressure, errors."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers as fbx
from vault import Vault, VaultError, verify

ROWS, T = 2, 16
BUFFER = fbx.make_trajectory_buffer(ROWS, 1, 1, 1, 1, max_length_time_axis=T)
ADD = jax.jit(BUFFER.add, donate_argnums=0)


def codes(t0: int, n: int) -> np.ndarray:
    return (np.arange(ROWS)[:, None] * 100_000 + np.arange(t0, t0 + n)[None]).astype(np.int32)


def test_donated_buffer_with_non_blocking_writes_records_exactly(tmp_path: Path) -> None:
    state = BUFFER.init({"x": jnp.int32(0), "y": jnp.zeros(3, jnp.float32)})
    vault = Vault.create(str(tmp_path / "v"), state)
    vault.max_pending = 3
    issued = 0
    for step in range(200):
        c = codes(step, 1)
        batch = {"x": jnp.asarray(c), "y": jnp.asarray(np.repeat(c[..., None], 3, -1), jnp.float32)}
        state = ADD(state, batch)  # the previous state's buffers are donated (reused) here
        if step % 5 == 4:
            issued += vault.write(state, block=False)
    vault.flush()
    assert issued == 200
    assert vault.committed_length == 200
    data = Vault.open(str(tmp_path / "v")).read_numpy()
    np.testing.assert_array_equal(data["x"], codes(0, 200))
    np.testing.assert_array_equal(data["y"][..., 2], codes(0, 200).astype(np.float32))
    vault.close()


def test_background_writes_split_into_chunks_store_exactly_the_data(tmp_path: Path) -> None:
    # a queued write is written chunk by chunk (``BACKGROUND_LANES`` at once): appends that
    # start and end inside chunks of 1 row x 4 timesteps and 2 rows x 8
    state = BUFFER.init({"x": jnp.int32(0), "y": jnp.zeros(3, jnp.float32)})
    path = str(tmp_path / "v")
    vault = Vault.create(path, state, chunk={"x": [1, 4], "y": [2, 8, 3]})
    for step in range(61):
        c = codes(step, 1)
        batch = {"x": jnp.asarray(c), "y": jnp.asarray(np.repeat(c[..., None], 3, -1), jnp.float32)}
        state = ADD(state, batch)
        if step % 7 == 6 or step == 60:
            vault.write(state, block=False)
    vault.close()
    data = Vault.open(path).read_numpy()
    np.testing.assert_array_equal(data["x"], codes(0, 61))
    np.testing.assert_array_equal(data["y"][..., 1], codes(0, 61).astype(np.float32))
    assert verify(path).ok  # every chunk matches its checksum and place tag


def test_close_waits_for_pending_writes(tmp_path: Path) -> None:
    state = BUFFER.init({"x": jnp.int32(0)})
    with Vault.create(str(tmp_path / "v"), state) as vault:
        for step in range(8):
            state = ADD(state, {"x": jnp.asarray(codes(step * 2, 2))})
            vault.write(state, block=False)
    assert Vault.open(str(tmp_path / "v")).committed_length == 16


def test_a_background_failure_surfaces_and_nothing_after_it_is_committed(tmp_path: Path) -> None:
    path = tmp_path / "v"
    state = BUFFER.init({"x": jnp.int32(0)})
    vault = Vault.create(str(path), state)
    state = ADD(state, {"x": jnp.asarray(codes(0, 4))})
    vault.write(state)
    # Break the array's chunk directory: the next append can only fail, in the background.
    chunks = path / "experience" / "x" / "c"
    chunks.rename(tmp_path / "saved-chunks")
    chunks.write_text("not a directory")
    state = ADD(state, {"x": jnp.asarray(codes(4, 4))})
    assert vault.write(state, block=False) == 4  # returns at once
    state = ADD(state, {"x": jnp.asarray(codes(8, 4))})
    with pytest.raises(VaultError, match="a background write failed") as info:
        vault.flush()
    assert "at its last commit (4 timesteps)" in str(info.value)
    assert Vault.open(str(path)).committed_length == 4
    # Repaired, the same buffer is written again from the last commit on.
    chunks.unlink()
    (tmp_path / "saved-chunks").rename(chunks)
    assert vault.write(state) == 8
    vault.close()
    np.testing.assert_array_equal(Vault.open(str(path)).read_numpy()["x"], codes(0, 12))


def test_the_source_may_be_overwritten_as_soon_as_write_returns(tmp_path: Path) -> None:
    """What donation does to a device buffer, done by hand to a host buffer: overwrite it in
    place right after ``write(block=False)`` returns; the vault must hold the old values."""
    t_len = 4096
    original = np.arange(ROWS * t_len * 64, dtype=np.float32).reshape(ROWS, t_len, 64)
    experience = {"x": original.copy()}
    state = fbx.TrajectoryBufferState(
        experience=experience, current_index=jnp.int32(0), is_full=jnp.bool_(True)
    )
    vault = Vault.create(str(tmp_path / "v"), state)
    for i in range(3):
        assert vault.write(state, block=False, new_buffer=True) == t_len
        experience["x"][...] = original + 1000.0 * (i + 1)  # the buffer is reused at once
    vault.close()
    data = Vault.open(str(tmp_path / "v")).read_numpy()["x"]
    expected = [original + 1000.0 * i for i in range(3)]
    np.testing.assert_array_equal(data, np.concatenate(expected, axis=1))


@pytest.mark.parametrize("rows", [3, 5])
def test_background_writes_of_a_last_row_block_with_fewer_rows(tmp_path: Path, rows: int) -> None:
    """Rows in chunks of 2, so the last row block holds one row: a background write, which
    writes chunk by chunk, stores it as a blocking write does (it once addressed rows past
    the array's end and failed)."""
    x = (np.arange(rows)[:, None] * 1000 + np.arange(24)[None]).astype(np.float32)

    def state(n: int) -> fbx.TrajectoryBufferState:
        return fbx.TrajectoryBufferState(
            experience={"x": x}, current_index=jnp.int32(n), is_full=jnp.bool_(False)
        )

    where = str(tmp_path / "v")
    with Vault.create(where, {"x": np.float32(0)}, rows=rows, chunk={"x": [2, 4]}) as v:
        assert v.write(state(5)) == 5
        assert v.write(state(7), block=False) == 2  # within one time chunk
        assert v.write(state(18), block=False) == 11  # across three
        v.flush()
        assert v.committed_length == 18
    np.testing.assert_array_equal(Vault.open(where).read_numpy()["x"], x[:, :18])
    assert verify(where).ok
