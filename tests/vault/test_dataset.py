"""Datasets of shards (vault/dataset/_dataset.py): many writer processes, one dataset, no
coordinator; readers see every shard's committed data as one. Real processes on a real file system
and on the S3 test server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vault
from vault import Dataset, Vault

sys.path.insert(0, os.path.dirname(__file__))
from _dataset_child import EXAMPLE, ROWS, check, expected

CHILD = os.path.join(os.path.dirname(__file__), "_dataset_child.py")


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, CHILD, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"child failed ({proc.returncode}): {err[-3000:]}"
    return out


def create(root: str, **options: Any) -> Dataset:
    return Dataset.create(
        root, EXAMPLE, rows=ROWS, done_leaf="done", reward_leaf="reward", **options
    )


# --------------------------------------------------------------------------- on one process
def test_a_dataset_fixes_its_structure_once(tmp_path: Path) -> None:
    root = str(tmp_path / "ds")
    create(root)
    assert vault.is_dataset(root)
    assert not vault.is_dataset(str(tmp_path))
    with pytest.raises(vault.VaultExistsError, match="exist_ok=True"):
        create(root)
    again = create(root, exist_ok=True)  # what every actor calls at start
    assert again.template.leaf_names == ["done", "obs", "reward"]
    other = {"obs": np.zeros((4,), np.float32), "reward": np.float32(0), "done": np.bool_(0)}
    with pytest.raises(vault.VaultStructureError, match=r"leaf 'obs' is float32 \[4\]"):
        Dataset.create(root, other, rows=ROWS, done_leaf="done", exist_ok=True)
    with pytest.raises(vault.VaultNotFoundError, match="no dataset"):
        Dataset.open(str(tmp_path / "nothing"))
    Vault.create(str(tmp_path / "v"), EXAMPLE, rows=ROWS)
    with pytest.raises(vault.VaultExistsError, match="not a dataset"):
        create(str(tmp_path / "v"), exist_ok=True)


def test_shards_are_vaults_of_the_datasets_structure(tmp_path: Path) -> None:
    root = str(tmp_path / "ds")
    dataset = create(root)
    for bad in ("", ".hidden", "a/b", "x" * 200, 7):
        with pytest.raises(vault.VaultArgumentError, match="shard name"):
            dataset.shard(bad)  # type: ignore[arg-type]
    with dataset.shard("w-0") as w0, dataset.shard("w-1", rows=3) as w1:
        w0.append(expected(0, ROWS, 0, 12))
        w1.append(expected(1, 3, 0, 5))
        assert w1.rows == 3
        wrong = {"obs": np.zeros((ROWS, 4, 2), np.float32)}
        with pytest.raises(vault.VaultError):
            w0.append(wrong)  # the vault's own checks: a shard takes only its structure
    # an existing shard is opened for appending, where it stopped
    with dataset.shard("w-0") as w0:
        assert w0.committed_length == 12
        w0.append(expected(0, ROWS, 12, 20))
    reader = Dataset.open(root)
    assert reader.shards == ["w-0", "w-1"]
    assert reader.committed_lengths == {"w-0": 20, "w-1": 5}
    assert reader.timesteps == ROWS * 20 + 3 * 5
    assert np.array_equal(reader.read_numpy("w-0")["obs"], expected(0, ROWS, 0, 20)["obs"])
    assert set(reader.commit_ids) == {"w-0", "w-1"}
    with pytest.raises(vault.VaultArgumentError, match="no shard 'w-9'"):
        reader.read_numpy("w-9")
    # a vault put under shards/ by other means, with another structure, is refused by name
    Vault.create(os.path.join(root, "shards", "intruder-2"), {"x": np.float32(0)}, rows=1)
    with pytest.raises(vault.VaultStructureError, match="shard 'intruder-2' does not match"):
        reader.refresh()


def test_episode_table_and_statistics_span_the_shards(tmp_path: Path) -> None:
    root = str(tmp_path / "ds")
    dataset = create(root)
    lengths = {0: 23, 1: 9, 2: 40}
    for index, length in lengths.items():
        with dataset.shard(f"w-{index}") as writer:
            writer.append(expected(index, ROWS, 0, length))
    reader = Dataset.open(root)
    table = reader.episodes()
    parts = [reader.vault(f"w-{i}").episodes() for i in lengths]
    assert len(table) == sum(len(p) for p in parts)
    assert list(table.shard) == [
        f"w-{i}" for i, p in zip(lengths, parts, strict=True) for _ in range(len(p))
    ]
    assert np.array_equal(table.start, np.concatenate([p.start for p in parts]))
    assert table.to_records()[0]["shard"] == "w-0"
    longest = table.sort("length")[:3]
    assert list(longest.shard) == list(table.shard[np.argsort(-table.length, kind="stable")[:3]])
    with_open = reader.episodes(include_open=True)
    assert len(with_open) > len(table)
    stats = {s.name: s for s in reader.leaf_stats()}
    values = np.concatenate(
        [expected(i, ROWS, 0, n)["obs"].reshape(-1) for i, n in lengths.items()]
    ).astype(np.float64)
    assert stats["obs"].count == values.size
    assert stats["obs"].mean == pytest.approx(values.mean())
    assert stats["obs"].std == pytest.approx(values.std())
    assert stats["obs"].max == values.max()
    assert vault.leaf_stats(reader)[1].mean == pytest.approx(values.mean())


def test_refresh_sees_new_shards_and_new_commits(tmp_path: Path) -> None:
    root = str(tmp_path / "ds")
    dataset = create(root)
    reader = Dataset.open(root)
    assert reader.shards == []
    assert reader.timesteps == 0
    with pytest.raises(vault.VaultNotFoundError, match="no shard yet"):
        reader.as_dataset(2, 2)
    with dataset.shard("w-0") as writer:
        writer.append(expected(0, ROWS, 0, 4))
        assert reader.refresh() == ROWS * 4
        writer.append(expected(0, ROWS, 4, 10))
        assert reader.committed_lengths == {"w-0": 4}  # a reader's view moves on refresh only
        assert reader.refresh() == ROWS * 6
    assert check(reader) == ROWS * 10


# ----------------------------------------------------------------- many writer processes
def run_writers_and_reader(root: str, appends: int, steps: int, kill_after: int) -> None:
    """Four writers race to create the dataset and append to their own shards while a
    reader checks every shard's prefix; writer 3 is SIGKILLed after ``kill_after`` commits."""
    writers = [
        spawn("write", root, f"w-{i}", str(i), str(appends), str(steps), "0.01") for i in range(4)
    ]
    reader = spawn("read", root, "6")
    victim = writers[3]
    assert victim.stdout is not None
    seen = 0
    deadline = time.monotonic() + 60
    while seen < kill_after and time.monotonic() < deadline:
        line = victim.stdout.readline()
        if line.startswith("committed"):
            seen += 1
        elif not line:
            break
    victim.send_signal(signal.SIGKILL)  # mid-append, most likely
    victim.wait()
    for proc in writers[:3]:
        assert f"done w-{writers.index(proc)}" in finish(proc)
    rounds, shards = (int(x) for x in finish(reader).split()[2:5:2])
    assert rounds >= 3
    assert shards >= 3
    for pipe in (victim.stdout, victim.stderr):
        if pipe is not None:
            pipe.close()
    dataset = Dataset.open(root)
    assert dataset.shards == ["w-0", "w-1", "w-2", "w-3"]
    lengths = dataset.committed_lengths
    assert [lengths[f"w-{i}"] for i in range(3)] == [appends * steps] * 3  # nothing lost
    assert kill_after * steps <= lengths["w-3"] < appends * steps
    assert check(dataset) == ROWS * sum(lengths.values())  # nothing duplicated or mixed
    for name in dataset.shards:
        assert vault.verify(dataset.vault(name)).ok, name


def test_four_writer_processes_and_a_reader_on_disk(tmp_path: Path) -> None:
    root = str(tmp_path / "ds")
    run_writers_and_reader(root, appends=40, steps=7, kill_after=10)
    # the killed writer's shard takes a new writer (its flock died with it) that appends
    with Dataset.open(root).shard("w-3") as writer:
        length = writer.committed_length
        writer.append(expected(3, ROWS, length, length + 5))
    reopened = Dataset.open(root)
    assert check(reopened) == ROWS * sum(reopened.committed_lengths.values())


def test_four_writer_processes_and_a_reader_on_s3(s3_env: Any) -> None:
    root = f"s3://{s3_env.bucket}/ds-{uuid.uuid4().hex[:10]}"
    run_writers_and_reader(root, appends=12, steps=5, kill_after=4)
    assert vault.break_lock(f"{root}/shards/w-3")  # its lease outlives it: broken explicitly
    dataset = Dataset.open(root)
    writer = create(root, exist_ok=True).shard("w-3")
    length = writer.committed_length
    writer.append(expected(3, ROWS, length, length + 5))
    writer.close()
    dataset.refresh()
    assert dataset.committed_lengths["w-3"] == length + 5
    assert check(dataset) == ROWS * sum(dataset.committed_lengths.values())


def test_derive_episodes_takes_a_selection_spanning_the_shards(tmp_path: Path) -> None:
    root = str(tmp_path / "ds")
    dataset = create(root)
    for index, length in enumerate((23, 31)):
        with dataset.shard(f"w-{index}") as writer:
            writer.append(expected(index, ROWS, 0, length))
    reader = Dataset.open(root)
    table = reader.episodes()
    picked = table.select(min_length=5)  # episodes of both shards
    assert set(picked.shard.tolist()) == {"w-0", "w-1"}
    made = vault.derive_episodes(reader, str(tmp_path / "best"), picked)
    assert made.rows == 1
    assert made.committed_length == picked.transitions
    got = made.read_numpy()["obs"][0]
    want = []
    for name in reader.shards:  # shard by shard, each by row then start
        mine = picked[picked.shard == name]
        mine = mine[np.lexsort((mine.row, mine.start))]
        data = reader.read_numpy(name)["obs"]
        want += [
            data[r, s : s + n] for r, s, n in zip(mine.row, mine.start, mine.length, strict=False)
        ]
    assert np.array_equal(got, np.concatenate(want))
    rebuilt = made.episodes()
    assert sorted(rebuilt.length.tolist()) == sorted(picked.length.tolist())
    assert made.metadata["derived_from"]["shards"] == 2
    with pytest.raises(vault.VaultArgumentError, match="shard column"):
        vault.derive_episodes(reader, str(tmp_path / "x"), reader.vault("w-0").episodes())
    assert not os.path.exists(tmp_path / "x")
