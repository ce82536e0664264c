"""Vault core: unseen-only appends, reads, structures, errors, format (real files, real TS)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers as fbx
from vault import (
    Seam,
    UnsavedDataLostError,
    Vault,
    VaultCorruptError,
    VaultError,
    VaultExistsError,
    VaultMetadataError,
    VaultModeError,
    VaultNotFoundError,
    VaultReadError,
    VaultStructureError,
    VaultVersionError,
    parse_location,
)
from vault.format._records import FORMAT_VERSION
from vault.storage._reclaim import MAX_HELD, MAX_HELD_BYTES, TRASH_DIR

ROWS, T = 2, 8
BUFFER = fbx.make_trajectory_buffer(ROWS, 4, 2, 1, 2, max_length_time_axis=T)
ADD = jax.jit(BUFFER.add)
EXAMPLE = {"obs": jnp.zeros(3, jnp.float32), "step": jnp.int32(0)}


class Recorder:
    """Adds timesteps whose values encode (row, t) and remembers everything added."""

    def __init__(self) -> None:
        self.state = BUFFER.init(EXAMPLE)
        self.t = 0

    def add(self, n: int) -> None:
        while n:
            k = min(n, T)
            steps = np.arange(self.t, self.t + k, dtype=np.int32)
            rows = np.arange(ROWS, dtype=np.int32)[:, None] * 100_000
            step = jnp.asarray(rows + steps[None])
            obs = jnp.broadcast_to(step[..., None].astype(jnp.float32), (ROWS, k, 3))
            self.state = ADD(self.state, {"obs": obs, "step": step})
            self.t += k
            n -= k

    def expected(self, start: int, stop: int) -> np.ndarray:
        return np.arange(ROWS)[:, None] * 100_000 + np.arange(start, stop)[None]


def stored_steps(vault: Vault) -> np.ndarray:
    return vault.read_numpy(leaves=["step"])["step"]


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


def test_appends_only_unseen_across_patterns(tmp_path: Path, rec: Recorder) -> None:
    vault = Vault.create(str(tmp_path / "v"), rec.state)
    rec.add(3)
    assert vault.write(rec.state) == 3
    rec.add(T)  # exactly T between writes
    assert vault.write(rec.state) == T
    rec.add(1)
    assert vault.write(rec.state) == 1
    assert vault.write(rec.state) == 0  # same state twice: nothing the second time
    assert vault.committed_length == 3 + T + 1
    np.testing.assert_array_equal(stored_steps(vault), rec.expected(0, rec.t))
    obs = vault.read_numpy()["obs"]
    np.testing.assert_array_equal(obs[..., 1], rec.expected(0, rec.t))


def test_first_write_of_exactly_full_buffer(tmp_path: Path, rec: Recorder) -> None:
    rec.add(T)
    assert bool(rec.state.is_full)
    assert int(rec.state.current_index) == 0
    vault = Vault.create(str(tmp_path / "v"), rec.state)
    assert vault.write(rec.state) == T
    np.testing.assert_array_equal(stored_steps(vault), rec.expected(0, T))


def test_first_write_after_wraps_saves_what_the_buffer_holds(tmp_path: Path, rec: Recorder) -> None:
    rec.add(3 * T + 3)
    vault = Vault.create(str(tmp_path / "v"), rec.state)
    assert vault.write(rec.state) == T
    np.testing.assert_array_equal(stored_steps(vault), rec.expected(2 * T + 3, 3 * T + 3))
    # the 2T + 3 timesteps overwritten before the first write are a recorded seam, not silence
    assert vault.seams == [Seam(0, 2 * T + 3)]
    assert Vault.open(str(tmp_path / "v")).seams == [Seam(0, 2 * T + 3)]
    rec.add(2)
    assert vault.write(rec.state) == 2  # later writes continue exactly, no new seam
    assert vault.seams == [Seam(0, 2 * T + 3)]


def test_first_write_of_a_buffer_that_filled_exactly_records_no_seam(
    tmp_path: Path, rec: Recorder
) -> None:
    rec.add(T)
    vault = Vault.create(str(tmp_path / "v"), rec.state)
    vault.write(rec.state)
    assert vault.seams == []


def test_overrun_is_a_typed_error_and_leaves_the_vault_unchanged(
    tmp_path: Path, rec: Recorder
) -> None:
    vault = Vault.create(str(tmp_path / "v"), rec.state)
    rec.add(2)
    vault.write(rec.state)
    rec.add(2 * T + 3)  # several wraps between writes
    with pytest.raises(UnsavedDataLostError, match=re.escape(f"{T + 3} were overwritten")) as info:
        vault.write(rec.state)
    assert info.value.lost == T + 3
    assert isinstance(info.value, ValueError)
    assert Vault.open(str(tmp_path / "v")).committed_length == 2
    np.testing.assert_array_equal(stored_steps(vault), rec.expected(0, 2))
    # Opt-in: save what survives and record the gap.
    assert vault.write(rec.state, on_overrun="save_surviving") == T
    assert vault.gaps == [{"at": 2, "lost": T + 3}]
    assert Vault.open(str(tmp_path / "v")).gaps == [{"at": 2, "lost": T + 3}]
    expected = np.concatenate([rec.expected(0, 2), rec.expected(rec.t - T, rec.t)], axis=1)
    np.testing.assert_array_equal(stored_steps(vault), expected)


def test_write_right_after_reopening(tmp_path: Path, rec: Recorder) -> None:
    vault = Vault.create(str(tmp_path / "v"), rec.state)
    rec.add(5)
    vault.write(rec.state)
    del vault
    rec.add(6)
    reopened = Vault.open(str(tmp_path / "v"), mode="a")
    assert reopened.write(rec.state) == 6
    np.testing.assert_array_equal(stored_steps(reopened), rec.expected(0, 11))


def test_reader_refresh_sees_new_commits(tmp_path: Path, rec: Recorder) -> None:
    writer = Vault.create(str(tmp_path / "v"), rec.state)
    reader = Vault.open(str(tmp_path / "v"))
    rec.add(4)
    writer.write(rec.state)
    assert reader.committed_length == 0
    assert reader.refresh() == 4
    np.testing.assert_array_equal(stored_steps(reader), rec.expected(0, 4))


def test_other_buffer_with_lower_counter_is_refused(tmp_path: Path, rec: Recorder) -> None:
    vault = Vault.create(str(tmp_path / "v"), rec.state)
    rec.add(6)
    vault.write(rec.state)
    other = Recorder()
    other.add(2)
    with pytest.raises(VaultStructureError, match="is behind the vault's record"):
        vault.write(other.state)
    assert vault.write(other.state, new_buffer=True) == 2
    assert vault.committed_length == 8


class Pair(NamedTuple):
    left: jax.Array
    right: jax.Array


@dataclasses.dataclass
class Info:
    value: jax.Array
    flags: list


def _structured_timestep() -> dict:
    return {
        "a.b": jnp.float32(0),
        "c/d": jnp.zeros(2, jnp.int32),
        "pair": Pair(jnp.zeros(1, jnp.float32), jnp.bool_(False)),
        "tup": (jnp.int32(0), [jnp.float32(0), jnp.zeros(2, jnp.uint8)]),
        "info": Info(jnp.float32(0), [jnp.int32(0)]),
    }


def test_structures_round_trip_with_their_container_types(tmp_path: Path) -> None:
    example = _structured_timestep()
    # Info is a plain dataclass, not a pytree node: jax treats it as a leaf, so flatten it
    # through a registered copy of the structure for the buffer and keep it for the vault.
    jax.tree_util.register_dataclass(Info, data_fields=["value", "flags"], meta_fields=[])
    buf = fbx.make_trajectory_buffer(2, 2, 1, 1, 1, max_length_time_axis=4)
    state = buf.init(example)
    batch = jax.tree.map(lambda x: jnp.ones((2, 3, *x.shape), x.dtype), example)
    state = buf.add(state, batch)
    vault = Vault.create(str(tmp_path / "v"), state)
    names = vault.leaf_names
    assert len(set(names)) == len(names) == len(jax.tree_util.tree_leaves(example))
    assert "a.b" in names
    assert "c%2Fd" in names
    assert vault.write(state) == 3
    back = Vault.open(str(tmp_path / "v")).read_numpy()
    assert isinstance(back["pair"], Pair)
    assert isinstance(back["tup"], tuple)
    assert isinstance(back["tup"][1], list)
    assert isinstance(back["info"], Info)
    assert isinstance(back["info"].flags, list)
    assert back["c/d"].shape == (2, 3, 2)
    assert back["c/d"].dtype == np.int32
    assert back["tup"][1][1].dtype == np.uint8


def test_state_mismatch_names_every_bad_leaf_and_writes_nothing(
    tmp_path: Path, rec: Recorder
) -> None:
    vault = Vault.create(str(tmp_path / "v"), rec.state)
    rec.add(2)
    vault.write(rec.state)
    other_buf = fbx.make_trajectory_buffer(ROWS, 4, 2, 1, 2, max_length_time_axis=T)
    bad = other_buf.init({"obs": jnp.zeros(4, jnp.float32), "step": jnp.float32(0)})
    bad = other_buf.add(bad, {"obs": jnp.ones((ROWS, 3, 4)), "step": jnp.ones((ROWS, 3))})
    with pytest.raises(VaultStructureError) as info:
        vault.write(bad)
    text = str(info.value)
    assert "experience/obs: expected [2, T, 3] float32, got [2, T, 4] float32" in text
    assert "experience/step: expected [2, T] int32, got [2, T] float32" in text
    assert len(info.value.problems) == 2
    missing = other_buf.init({"obs": jnp.zeros(3, jnp.float32)})
    with pytest.raises(VaultStructureError, match=re.escape("experience/step: missing")):
        vault.write(missing)
    assert Vault.open(str(tmp_path / "v")).committed_length == 2


def test_user_metadata_cannot_overwrite_reserved_keys(tmp_path: Path, rec: Recorder) -> None:
    meta = {"format_version": 99, "rows": -1, "note": "hello"}
    vault = Vault.create(str(tmp_path / "v"), rec.state, metadata=meta)
    reopened = Vault.open(str(tmp_path / "v"))
    assert reopened.metadata == meta
    assert reopened.manifest.format_version == 5  # the user's key changed nothing
    assert reopened.rows == ROWS
    assert vault.manifest.rlvault_version
    with pytest.raises(VaultMetadataError, match="must be JSON that comes back as given"):
        Vault.create(str(tmp_path / "w"), rec.state, metadata={"x": object()})


def test_format_version_1_vaults_still_open_and_newer_ones_are_refused(
    tmp_path: Path, rec: Recorder
) -> None:
    vault = Vault.create(str(tmp_path / "v"), rec.state)
    rec.add(3)
    vault.write(rec.state)
    vault.close()
    root = tmp_path / "v" / "zarr.json"
    doc = json.loads(root.read_text())
    doc["attributes"]["rlvault"]["format_version"] = 1  # version 1: no episode index
    del doc["attributes"]["rlvault"]["digest"]  # nor a digest (format 3)
    root.write_text(json.dumps(doc))
    old = Vault.open(str(tmp_path / "v"), "a")
    assert old.committed_length == 3
    assert not old.has_episodes
    rec.add(2)
    assert old.write(rec.state) == 2
    np.testing.assert_array_equal(stored_steps(old), rec.expected(0, 5))
    old.close()
    doc["attributes"]["rlvault"]["format_version"] = FORMAT_VERSION + 1
    root.write_text(json.dumps(doc))
    newer = f"in format version {FORMAT_VERSION + 1}; this rlvault reads versions 1 to "
    with pytest.raises(VaultVersionError, match=re.escape(f"{newer}{FORMAT_VERSION}. Upgrade")):
        Vault.open(str(tmp_path / "v"))


def test_read_errors_are_typed_and_clear(tmp_path: Path, rec: Recorder) -> None:
    vault = Vault.create(str(tmp_path / "v"), rec.state)
    rec.add(5)
    vault.write(rec.state)
    with pytest.raises(VaultReadError, match="asked for the last 6 timesteps but only 5"):
        vault.read(timesteps=6)
    with pytest.raises(VaultReadError, match=re.escape("0 <= a <= b <= 100")):
        vault.read(percentiles=(50, 20))
    with pytest.raises(VaultReadError, match=re.escape("unknown leaves ['nope']")):
        vault.read_numpy(leaves=["nope"])
    with pytest.raises(VaultReadError, match="outside the committed"):
        vault.read_numpy(start=2, stop=9)
    with pytest.raises(VaultReadError, match="out of range"):
        vault.read_numpy(rows=[5])


def test_reads_by_rows_time_last_percentiles(tmp_path: Path, rec: Recorder) -> None:
    vault = Vault.create(str(tmp_path / "v"), rec.state)
    rec.add(5)
    vault.write(rec.state)
    rec.add(5)
    vault.write(rec.state)
    full = rec.expected(0, 10)
    np.testing.assert_array_equal(vault.read_numpy(rows=[1])["step"], full[1:2])
    np.testing.assert_array_equal(vault.read_numpy(start=2, stop=5)["step"], full[:, 2:5])
    np.testing.assert_array_equal(vault.read_numpy(last=3)["step"], full[:, 7:])
    np.testing.assert_array_equal(vault.read_numpy(percentiles=(20, 60))["step"], full[:, 2:6])
    state = vault.read(timesteps=4)
    np.testing.assert_array_equal(np.asarray(state.experience["step"]), full[:, 6:])


def test_read_as_state_with_capacity_lets_add_continue(tmp_path: Path, rec: Recorder) -> None:
    vault = Vault.create(str(tmp_path / "v"), rec.state)
    rec.add(6)
    vault.write(rec.state)
    state = vault.read(capacity=T)
    assert int(state.current_index) == 6
    assert not bool(state.is_full)
    assert fbx.timesteps_added(state) == 6
    step = jnp.full((ROWS, 2), -1, jnp.int32)
    state = BUFFER.add(state, {"obs": jnp.zeros((ROWS, 2, 3)), "step": step})
    assert bool(state.is_full)
    assert int(state.current_index) == 0
    np.testing.assert_array_equal(np.asarray(state.experience["step"])[:, 6:], -1)
    small = vault.read(capacity=4)  # keeps the most recent 4, timestep t at t % 4
    ring = rec.expected(2, 6)[:, [2, 3, 0, 1]]  # timesteps 4, 5, 2, 3
    np.testing.assert_array_equal(np.asarray(small.experience["step"]), ring)
    assert bool(small.is_full)
    assert int(small.current_index) == 2  # the next add replaces the oldest, timestep 2
    assert fbx.timesteps_added(small) == 6


@pytest.mark.parametrize(
    "make",
    [
        lambda: fbx.make_flat_buffer(16, 0, 2, add_batch_size=2),
        lambda: fbx.make_item_buffer(16, 1, 2, add_batches=True),
        lambda: fbx.make_n_step_buffer(16, 4, 2, False, 2, n_step=2),
        lambda: fbx.make_prioritised_trajectory_buffer(2, 2, 2, 1, 2, max_length_time_axis=8),
    ],
    ids=["flat", "item", "n_step", "prioritised"],
)
def test_every_trajectory_like_state_kind(tmp_path: Path, make) -> None:
    buf = make()
    sequences = isinstance(buf, fbx.PrioritisedTrajectoryBuffer) and buf.sample_sequence_length > 1
    state = buf.init({"x": jnp.int32(0)})
    vault = Vault.create(str(tmp_path / "v"), state)
    rows = vault.rows
    added = []
    for i in range(12):
        value = jnp.full((2,), i, jnp.int32)
        state = buf.add(state, {"x": value[:, None] if sequences else value})
        added.append(i)
        if i % 5 == 4:
            vault.write(state)
    vault.write(state)
    stored = vault.read_numpy()["x"]
    assert stored.shape[0] == rows
    # Every timestep, once, in order (item buffers fold the 2 added items into one row).
    flat = stored.reshape(-1) if rows == 1 else stored[0]
    expected = np.repeat(added, 2) if rows == 1 else np.array(added)
    np.testing.assert_array_equal(flat, expected)


def test_stacked_state_folds_the_device_axis_into_rows(tmp_path: Path) -> None:
    buf = fbx.make_trajectory_buffer(2, 2, 1, 1, 1, max_length_time_axis=4)
    states = jax.vmap(buf.init)({"x": jnp.zeros((3,), jnp.int32)})  # 3 "devices"
    batch = {"x": jnp.arange(3 * 2 * 3, dtype=jnp.int32).reshape(3, 2, 3)}
    states = jax.vmap(buf.add)(states, batch)
    vault = Vault.create(str(tmp_path / "v"), states)
    assert vault.rows == 6
    assert vault.write(states) == 3
    np.testing.assert_array_equal(vault.read_numpy()["x"], np.asarray(batch["x"]).reshape(6, 3))


def test_pmap_stacked_state(tmp_path: Path) -> None:
    assert jax.device_count() == 2
    buf = fbx.make_trajectory_buffer(2, 2, 1, 1, 1, max_length_time_axis=4)
    states = jax.pmap(buf.init)({"x": jnp.zeros((2,), jnp.int32)})
    batch = {"x": jnp.arange(2 * 2 * 3, dtype=jnp.int32).reshape(2, 2, 3)}
    states = jax.pmap(buf.add)(states, batch)
    vault = Vault.create(str(tmp_path / "v"), states)
    assert vault.rows == 4
    assert vault.write(states) == 3
    assert vault.write(states) == 0
    np.testing.assert_array_equal(vault.read_numpy()["x"], np.asarray(batch["x"]).reshape(4, 3))


def test_zarr_python_reads_every_leaf(tmp_path: Path, rec: Recorder) -> None:
    vault = Vault.create(str(tmp_path / "v"), rec.state)
    rec.add(5)
    vault.write(rec.state)
    # Without rlvault: the committed length is in the `commit` group's attributes; arrays may
    # run up to one chunk past it (fill values).
    code = (
        "import sys, zarr, json\n"
        "g = zarr.open_group(sys.argv[1], mode='r')\n"
        "n = g['commit'].attrs['rlvault_commit']['committed_length']\n"
        "print(json.dumps(g['experience']['step'][:, :n].tolist()))\n"
        "print(g['experience/obs'][:, :n].shape, g.attrs['rlvault']['format_version'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code, str(tmp_path / "v")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out[0] == str(rec.expected(0, 5).tolist())
    assert out[1] == "(2, 5, 3) 5"  # written in format 5


@pytest.mark.parametrize("codec", ["zstd", "lz4", "blosc", "gzip", None])
def test_flipped_byte_is_a_typed_error_naming_array_and_chunk(
    tmp_path: Path, rec: Recorder, codec: str | None
) -> None:
    vault = Vault.create(str(tmp_path / "v"), rec.state, codec=codec)
    rec.add(5)
    vault.write(rec.state)
    chunk = tmp_path / "v" / "experience" / "obs" / "c" / "0" / "0" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    chunk.write_bytes(bytes(raw))
    with pytest.raises(VaultCorruptError, match=re.escape("experience/obs, chunk 0.0.0")):
        Vault.open(str(tmp_path / "v")).read_numpy()
    # Other leaves are still readable.
    ok = Vault.open(str(tmp_path / "v")).read_numpy(leaves=["step"])["step"]
    np.testing.assert_array_equal(ok, rec.expected(0, 5))


def test_open_create_and_mode_errors(tmp_path: Path, rec: Recorder) -> None:
    with pytest.raises(VaultNotFoundError):
        Vault.open(str(tmp_path / "missing"))
    Vault.create(str(tmp_path / "v"), rec.state)
    with pytest.raises(VaultExistsError):
        Vault.create(str(tmp_path / "v"), rec.state)
    with pytest.raises(VaultModeError):
        Vault.open(str(tmp_path / "v")).write(rec.state)
    assert isinstance(VaultNotFoundError("x"), FileNotFoundError)


def test_memory_and_file_urls(tmp_path: Path, rec: Recorder) -> None:
    rec.add(3)
    mem = Vault.create("memory://tests/core", rec.state)
    mem.write(rec.state)
    np.testing.assert_array_equal(
        stored_steps(Vault.open("memory://tests/core")), rec.expected(0, 3)
    )
    url = Vault.create(f"file://{tmp_path}/u", rec.state)
    url.write(rec.state)
    np.testing.assert_array_equal(stored_steps(Vault.open(str(tmp_path / "u"))), rec.expected(0, 3))
    # "#" and "?" belong to the name (not a fragment or a query cut off): each URL names its
    # own place, never a shorter one shared with the others
    for i, name in enumerate(["run#1", "run#2", "run?3"]):
        Vault.create(f"file://{tmp_path}/{name}/v", rec.state).write(rec.state)
        Vault.create(f"memory://tests/{name}/v", rec.state).write(rec.state)
        assert (tmp_path / name / "v" / "zarr.json").is_file(), i
        assert str(parse_location(f"memory://tests/{name}/v")).startswith(
            f"memory://tests/{name}/v"
        )
    assert not (tmp_path / "run").exists()


def test_reference_compatible_constructor(tmp_path: Path, rec: Recorder, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    v = Vault("demo", experience_structure=rec.state, vault_uid="run1")
    rec.add(6)
    v.write(rec.state)
    assert v.vault_index == 6
    again = Vault("demo", vault_uid="run1")
    assert again.read().experience["step"].shape == (ROWS, 6)
    assert again.read(timesteps=2).experience["step"].shape == (ROWS, 2)
    assert again.read(percentiles=(50, 100)).experience["step"].shape == (ROWS, 3)
    assert (tmp_path / "vaults" / "demo" / "run1" / "zarr.json").exists()
    # The reference's own call passes the experience tree, not the state.
    by_experience = Vault("demo2", experience_structure=rec.state.experience, vault_uid="x")
    assert by_experience.rows == ROWS
    assert by_experience.write(rec.state) == 6  # first write: everything the buffer holds
    latest = Vault("demo2")  # no uid: the most recent vault of that name
    assert latest.committed_length == 6


def _disk_bytes(path: Path, skip: str | None = None) -> int:
    """Bytes of the files under ``path`` (not under a folder named ``skip``); a file freed
    while we look (by a writer's background reclaimer) counts as gone."""
    total = 0
    for p in path.rglob("*"):
        if skip is not None and skip in p.relative_to(path).parts[:-1]:
            continue
        with contextlib.suppress(FileNotFoundError):
            total += p.stat().st_size if p.is_file() else 0
    return total


def test_many_small_writes_use_no_more_disk_than_one_bulk_write(tmp_path: Path) -> None:
    buf = fbx.make_trajectory_buffer(2, 2, 1, 1, 1, max_length_time_axis=16)
    rng = np.random.default_rng(0)
    data = rng.integers(0, 8, size=(2, 400, 16)).astype(np.uint8)  # compressible-ish
    small_state = buf.init({"x": jnp.zeros(16, jnp.uint8)})
    small = Vault.create(str(tmp_path / "small"), small_state)
    for i in range(100):
        small_state = buf.add(small_state, {"x": jnp.asarray(data[:, 4 * i : 4 * i + 4])})
        small.write(small_state)
    bulk = Vault.create(
        str(tmp_path / "bulk"), buf.init({"x": jnp.zeros(16, jnp.uint8)}), rows=None
    )
    bulk_state = fbx.TrajectoryBufferState(
        experience={"x": jnp.asarray(data)},
        current_index=jnp.int32(0),
        is_full=jnp.bool_(True),
    )
    assert bulk.write(bulk_state, new_buffer=True) == 400
    np.testing.assert_array_equal(small.read_numpy()["x"], bulk.read_numpy()["x"])
    bulk.close()
    # While the writer is open, old versions of replaced files may wait in trash/ to be
    # freed off the write path (vault.storage._reclaim), a bounded number of them ...
    trash = tmp_path / "small" / "trash"
    assert len([p for p in trash.iterdir() if p.name != "zarr.json"]) <= MAX_HELD
    assert _disk_bytes(trash) <= MAX_HELD_BYTES
    # Pins keep every replaced commit record (history/<n>): a small, bounded cost per commit,
    # counted apart from the data (this test's data is tiny: 128 bytes per write)
    history = _disk_bytes(tmp_path / "small" / "history")
    assert history <= 100 * 1024  # 100 commits, at most 1 KiB each
    live = _disk_bytes(tmp_path / "small", skip=TRASH_DIR) - history
    assert live <= 1.1 * _disk_bytes(tmp_path / "bulk")
    # ... and closing frees them: what is left is no bigger than one bulk write (+ history)
    small.close()
    assert [p.name for p in trash.iterdir()] == ["zarr.json"]
    assert _disk_bytes(tmp_path / "small") - history <= 1.1 * _disk_bytes(tmp_path / "bulk")


def test_unsupported_dtypes_and_malformed_manifests_are_typed_errors(tmp_path: Path) -> None:
    with pytest.raises(VaultStructureError, match="leaves of unsupported dtypes") as err:
        Vault.create(str(tmp_path / "c"), {"c": np.complex64(0), "x": np.float32(0)}, rows=1)
    assert err.value.problems == [
        (
            "experience/c: dtype complex64 is not supported (bool, integer and float16/32/64 "
            "leaves are)"
        )
    ]
    Vault.create(str(tmp_path / "v"), {"x": np.float32(0)}, rows=1).close()
    root = tmp_path / "v" / "zarr.json"
    doc = json.loads(root.read_text())
    del doc["attributes"]["rlvault"]["leaves"][0]["name"]
    root.write_text(json.dumps(doc))
    with pytest.raises(VaultCorruptError, match=re.escape("leaves[0]: name must be a string")):
        Vault.open(str(tmp_path / "v"))


def test_a_failed_blocking_write_is_a_vault_error_and_the_retry_is_exact(
    tmp_path: Path, rec: Recorder
) -> None:
    vault = Vault.create(str(tmp_path / "v"), rec.state)
    rec.add(4)
    assert vault.write(rec.state) == 4
    chunks = tmp_path / "v" / "experience" / "step" / "c"
    chunks.rename(tmp_path / "saved")
    chunks.write_text("not a directory")  # the next data write of this leaf fails
    rec.add(3)
    with pytest.raises(VaultError, match=r"the write failed .*at its last commit \(4 timesteps\)"):
        vault.write(rec.state)
    assert vault.committed_length == 4
    chunks.unlink()
    (tmp_path / "saved").rename(chunks)
    assert vault.write(rec.state) == 3  # the same state again: exactly what is missing
    rec.add(2)
    assert vault.write(rec.state) == 2
    np.testing.assert_array_equal(stored_steps(vault), rec.expected(0, 9))
