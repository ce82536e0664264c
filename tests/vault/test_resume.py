"""Resuming a vault with a buffer it has not seen: every timestep handed over is stored once.

The first process records ``first`` timesteps; a second, NEW process (real subprocess) makes a
NEW buffer, adds ``second`` timesteps and writes after every add. With the reference-style
constructor (as with Flashbax, which tracks buffers per Vault object) the vault must end with
both runs' data, step by step; with ``Vault.open`` a different buffer is refused unless the
write says ``new_buffer=True``, which is safe to pass on every write.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from vault import Vault, VaultStructureError

ROWS, CAPACITY, ADD = 2, 100, 10

CHILD = textwrap.dedent(
    """
    import json, sys
    import jax.numpy as jnp
    import numpy as np
    import buffers
    from vault import Vault, VaultStructureError

    root, how, run, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ROWS, CAPACITY, ADD = 2, 100, 10

    def batch(t0):
        t = np.arange(t0, t0 + ADD, dtype=np.float32)
        obs = run * 1000 + t[None, :, None] + np.arange(ROWS, dtype=np.float32)[:, None, None] / 4
        obs = np.broadcast_to(obs, (ROWS, ADD, 3)).copy()
        return {"obs": jnp.asarray(obs), "done": jnp.asarray((t % 7 == 6)[None].repeat(ROWS, 0))}

    buf = buffers.make_trajectory_buffer(
        max_length_time_axis=CAPACITY, min_length_time_axis=1, sample_batch_size=1,
        add_batch_size=ROWS, sample_sequence_length=1, period=1,
    )
    state = buf.init({"obs": jnp.zeros(3, jnp.float32), "done": jnp.zeros((), bool)})
    if how.startswith("ref"):
        vault = Vault("demo", state, rel_dir=root, vault_uid="uid")
    else:
        vault = Vault.open(root + "/demo/uid", mode="a")
    counts = []
    for t0 in range(0, steps, ADD):
        state = buf.add(state, batch(t0))
        try:
            counts.append(vault.write(state, new_buffer=how.endswith("_new")))
        except VaultStructureError as err:
            counts.append(str(err))
    vault.close()
    print(json.dumps(counts))
    """
)


def _run(root: Path, how: str, run: int, steps: int) -> list[int | str]:
    script = root / "child.py"
    script.write_text(CHILD)
    out = subprocess.run(
        [sys.executable, str(script), str(root), how, str(run), str(steps)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _expected(run: int, steps: int) -> np.ndarray:
    t = np.arange(steps, dtype=np.float32)
    obs = run * 1000 + t[None, :, None] + np.arange(ROWS, dtype=np.float32)[:, None, None] / 4
    return np.broadcast_to(obs, (ROWS, steps, 3))


@pytest.mark.parametrize(
    ("first", "second"),
    [(60, 40), (60, 60), (50, 60)],
    ids=["counter-behind", "counter-equal", "counter-ahead"],
)
def test_reference_constructor_appends_a_new_buffer_whole(
    tmp_path: Path, first: int, second: int
) -> None:
    assert _run(tmp_path, "ref", 1, first) == [ADD] * (first // ADD)
    assert _run(tmp_path, "ref", 2, second) == [ADD] * (second // ADD)
    stored = Vault.open(str(tmp_path / "demo" / "uid")).read_numpy()["obs"]
    want = np.concatenate([_expected(1, first), _expected(2, second)], axis=1)
    assert stored.shape == want.shape
    for t in range(want.shape[1]):  # step by step
        np.testing.assert_array_equal(stored[:, t], want[:, t], err_msg=f"timestep {t}")


@pytest.mark.parametrize(
    ("how", "first", "second"),
    [("open_new", 60, 40), ("open_new", 60, 60), ("open_new", 50, 60), ("ref_new", 60, 60)],
    ids=["open-behind", "open-equal", "open-ahead", "reference-equal"],
)
def test_new_buffer_on_every_write_stores_each_timestep_once(
    tmp_path: Path, how: str, first: int, second: int
) -> None:
    """The issue's fourth case: ``new_buffer=True`` passed on every write (with ``Vault.open``
    or with the reference constructor) stores every timestep once, never duplicates."""
    assert _run(tmp_path, "ref", 1, first) == [ADD] * (first // ADD)
    assert _run(tmp_path, how, 2, second) == [ADD] * (second // ADD)
    stored = Vault.open(str(tmp_path / "demo" / "uid")).read_numpy()["obs"]
    want = np.concatenate([_expected(1, first), _expected(2, second)], axis=1)
    assert stored.shape == want.shape
    for t in range(want.shape[1]):  # step by step
        np.testing.assert_array_equal(stored[:, t], want[:, t], err_msg=f"timestep {t}")


@pytest.mark.parametrize("second", [40, 60, 70], ids=["behind", "equal", "ahead"])
def test_open_refuses_a_different_buffer_and_writes_nothing(tmp_path: Path, second: int) -> None:
    _run(tmp_path, "ref", 1, 60)
    counts = _run(tmp_path, "open", 2, second)
    assert all(isinstance(c, str) for c in counts), counts
    assert "not the buffer the vault was last written from" in str(counts[-1])
    assert "new_buffer=True" in str(counts[-1])
    stored = Vault.open(str(tmp_path / "demo" / "uid")).read_numpy()["obs"]
    np.testing.assert_array_equal(stored, _expected(1, 60))


def test_open_continues_the_same_buffer(tmp_path: Path) -> None:
    """A vault reopened (new Vault object) with the buffer it was written from continues
    where it stopped: no duplicate, no gap, even with new_buffer=True."""
    import jax.numpy as jnp

    import buffers

    buf = buffers.make_trajectory_buffer(
        max_length_time_axis=16,
        min_length_time_axis=1,
        sample_batch_size=1,
        add_batch_size=ROWS,
        sample_sequence_length=1,
        period=1,
    )
    state = buf.init({"x": jnp.zeros((), jnp.int32)})

    def add(state, t0: int, n: int):  # type: ignore[no-untyped-def]
        x = np.arange(t0, t0 + n, dtype=np.int32)[None].repeat(ROWS, 0)
        return buf.add(state, {"x": jnp.asarray(x)})

    path = str(tmp_path / "v")
    with Vault.create(path, state) as vault:
        state = add(state, 0, 10)
        assert vault.write(state) == 10
    state = add(state, 10, 4)
    with Vault.open(path, mode="a") as vault:
        assert vault.write(state) == 4
    state = add(state, 14, 5)  # the ring (16) wrapped; the vault's last step is still held
    with Vault.open(path, mode="a") as vault:
        assert vault.write(state, new_buffer=True) == 5
        assert vault.write(state, new_buffer=True) == 0
    stored = Vault.open(path).read_numpy()["x"]
    np.testing.assert_array_equal(stored, np.arange(19)[None].repeat(ROWS, 0))
    # a fresh buffer with a lower counter is refused, and nothing is written
    with Vault.open(path, mode="a") as vault:
        with pytest.raises(VaultStructureError, match="not the buffer"):
            vault.write(add(buf.init({"x": jnp.zeros((), jnp.int32)}), 100, 3))
        assert vault.committed_length == 19


def test_a_queue_state_is_written_like_a_buffer(tmp_path: Path) -> None:
    """A trajectory queue's state (position ``write_index``) stores what was added; before,
    it stored nothing and recorded the counter, so the next write reported a loss."""
    import jax.numpy as jnp

    import buffers

    queue = buffers.make_trajectory_queue(
        max_length_time_axis=8,
        add_batch_size=ROWS,
        add_sequence_length=2,
        sample_sequence_length=2,
    )
    state = queue.init({"x": jnp.zeros((), jnp.int32)})
    path = str(tmp_path / "q")
    with Vault.create(path, state) as vault:
        for t0 in range(0, 6, 2):
            x = np.arange(t0, t0 + 2, dtype=np.int32)[None].repeat(ROWS, 0)
            state = queue.add(state, {"x": jnp.asarray(x)})
            assert vault.write(state) == 2
        state, _ = queue.sample(state)
        assert vault.write(state) == 0  # sampling adds nothing
    np.testing.assert_array_equal(
        Vault.open(path).read_numpy()["x"], np.arange(6)[None].repeat(ROWS, 0)
    )


def _files_state(root: Path) -> dict[str, tuple[int, int]]:
    return {
        p.relative_to(root).as_posix(): (p.stat().st_mtime_ns, p.stat().st_size)
        for p in root.rglob("*")
        if p.is_file() and "trash" not in p.parts
    }


def test_a_rejected_write_touches_nothing(tmp_path: Path) -> None:
    """A state whose position is out of range, or an append whose leaves disagree on the
    time length, is refused before the first byte is written: no file changes, no lock
    leftovers."""
    import dataclasses as dc

    import jax.numpy as jnp

    import buffers

    buf = buffers.make_trajectory_buffer(
        max_length_time_axis=16,
        min_length_time_axis=1,
        sample_batch_size=1,
        add_batch_size=ROWS,
        sample_sequence_length=1,
        period=1,
    )
    state = buf.init({"x": jnp.zeros((), jnp.int32), "y": jnp.zeros((), jnp.float32)})
    state = buf.add(state, {"x": jnp.ones((ROWS, 5), jnp.int32), "y": jnp.ones((ROWS, 5))})
    path = tmp_path / "v"
    with Vault.create(str(path), state) as vault:
        vault.write(state)
        before = _files_state(path)
        bad_position = dc.replace(state, current_index=jnp.int32(40))
        with pytest.raises(VaultStructureError, match="outside its time axis"):
            vault.write(bad_position)
        ragged = {"x": np.ones((ROWS, 3), np.int32), "y": np.ones((ROWS, 4), np.float32)}
        with pytest.raises(VaultStructureError, match=r"experience/y: leading axes \[2, 4\]"):
            vault.append(ragged)
        assert _files_state(path) == before
        assert not list(path.rglob("*.__lock"))
        assert vault.committed_length == 5
