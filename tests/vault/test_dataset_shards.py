"""A dataset reads its shards as records in batches (vault/dataset/_shards.py): the episode
table across shards equals every shard's own table, the batched index read refuses damaged
index chunks as a shard's own read does, and a shard's arrays are opened only when its data is
read. Real TensorStore/Zarr in a temp dir."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import vault
from vault import Dataset, Vault
from vault.format._limits import MAX_RECORD_DEPTH

EXAMPLE = {"obs": np.zeros((3,), np.float32), "reward": np.float32(0), "done": np.bool_(False)}
ROWS = 2


def _block(seed: int, steps: int, every: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    done = np.zeros((ROWS, steps), bool)
    done[:, every - 1 :: every] = True
    done[1, ::5] = False  # rows end episodes at different times
    return {
        "obs": rng.standard_normal((ROWS, steps, 3)).astype(np.float32),
        "reward": rng.standard_normal((ROWS, steps)).astype(np.float32),
        "done": done,
    }


def _dataset(root: Path, shards: dict[str, tuple[int, int]]) -> Dataset:
    """Shards name -> (steps, an episode ends every n steps), each appended twice."""
    ds = Dataset.create(str(root), EXAMPLE, rows=ROWS, done_leaf="done", reward_leaf="reward")
    for i, (name, (steps, every)) in enumerate(shards.items()):
        with ds.shard(name) as shard:
            shard.append(_block(2 * i, steps, every))
            shard.append(_block(2 * i + 1, steps, every))
    return Dataset.open(str(root))


def _shard_tables(root: Path, names: list[str], include_open: bool) -> vault.EpisodeTable:
    tables = []
    for name in names:
        table = Vault.open(str(root / "shards" / name)).episodes(include_open=include_open)
        tables.append(table)
    return vault.EpisodeTable.concat(tables)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shards") / "ds"
    # "long" holds more than one index chunk (8,192 episodes): its first chunk is complete
    _dataset(root, {"a": (40, 3), "b": (24, 4), "long": (2400, 1), "quiet": (10, 1000)})
    return root


@pytest.mark.parametrize("include_open", [False, True])
def test_the_table_across_shards_is_every_shards_own(built: Path, include_open: bool) -> None:
    ds = Dataset.open(str(built))
    table = ds.episodes(include_open=include_open)
    expected = _shard_tables(built, ds.shards, include_open)
    assert len(table) == len(expected)
    assert len(table) > 8192  # the long shard crosses an index chunk
    for column in ("row", "start", "length", "returns", "truncated", "complete", "start_known"):
        np.testing.assert_array_equal(getattr(table, column), getattr(expected, column))
    counts = {n: len(_shard_tables(built, [n], include_open)) for n in ds.shards}
    assert table.shard is not None
    assert {n: int((table.shard == n).sum()) for n in ds.shards} == counts
    again = ds.episodes(include_open=include_open)  # checks are not repeated, data the same
    np.testing.assert_array_equal(again.start, table.start)


def test_shards_share_their_manifest_bytes(built: Path) -> None:
    raw = {(built / "shards" / n / "zarr.json").read_bytes() for n in ("a", "b", "long")}
    assert len(raw) == 1  # one template: a reader parses it once


def test_lengths_come_from_the_commit_records_and_reads_open_a_shard(built: Path) -> None:
    ds = Dataset.open(str(built))
    assert ds.committed_lengths == {"a": 80, "b": 48, "long": 4800, "quiet": 20}
    assert ds.timesteps == ROWS * (80 + 48 + 4800 + 20)
    for name in ds.shards:
        own = Vault.open(str(built / "shards" / name))
        assert ds.commit_ids[name] == own.commit_id
        np.testing.assert_array_equal(ds.read_numpy(name)["obs"], own.read_numpy()["obs"])


def _damaged(built: Path, tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(built, root)
    return root


def _chunk(root: Path, shard: str, key: str = "bounds", j: int = 0) -> Path:
    return (
        root / "shards" / shard / "episodes" / key / "c" / str(j) / ("0" if key == "bounds" else "")
    )


@pytest.mark.parametrize(
    "damage",
    ["delete", "flip", "truncate", "swap", "complete_swap", "returns_delete", "zero_fill"],
)
def test_a_damaged_index_chunk_is_an_error_naming_it(
    built: Path, tmp_path: Path, damage: str
) -> None:
    root = _damaged(built, tmp_path)
    target = _chunk(root, "a")
    if damage == "delete":
        target.unlink()
    elif damage == "returns_delete":
        target = root / "shards" / "a" / "episodes" / "returns" / "c" / "0"
        target.unlink()
    elif damage == "flip":
        raw = bytearray(target.read_bytes())
        raw[len(raw) // 2] ^= 0x10
        target.write_bytes(bytes(raw))
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-7])
    elif damage == "zero_fill":
        target.write_bytes(bytes(len(target.read_bytes())))
    elif damage == "swap":  # another shard's chunk: a valid chunk, in the wrong place
        shutil.copyfile(_chunk(root, "b"), target)
    else:  # the long shard's complete first chunk replaced by its second
        target = _chunk(root, "long", j=0)
        shutil.copyfile(_chunk(root, "long", j=1), target)
    shard = "long" if damage == "complete_swap" else "a"
    (root / "catalog").unlink(missing_ok=True)  # a reader with no catalog reads the index
    ds = Dataset.open(str(root))
    with pytest.raises(vault.VaultCorruptError, match=f"shards/{shard}"):
        ds.episodes()
    with pytest.raises(vault.VaultCorruptError):  # the shard's own read refuses it too
        Vault.open(str(root / "shards" / shard)).episodes()
    assert vault.verify(str(root / "shards" / shard)).problems


def test_a_shard_with_damaged_arrays_fails_only_when_its_data_is_read(
    built: Path, tmp_path: Path
) -> None:
    root = _damaged(built, tmp_path)
    (root / "shards" / "b" / "experience" / "obs" / "zarr.json").write_text("{")
    ds = Dataset.open(str(root))  # the records are sound: lengths and episodes are served
    assert ds.committed_lengths["b"] == 48
    assert len(ds.episodes()) == len(_shard_tables(built, ds.shards, False))
    np.testing.assert_array_equal(
        ds.read_numpy("a")["obs"], Vault.open(str(built / "shards" / "a")).read_numpy()["obs"]
    )
    with pytest.raises(vault.VaultCorruptError, match="obs"):
        ds.read_numpy("b")


def test_refresh_sees_new_commits_and_new_shards(tmp_path: Path) -> None:
    ds = _dataset(tmp_path / "ds", {"a": (8, 2)})
    reader = Dataset.open(str(tmp_path / "ds"))
    np.testing.assert_array_equal(reader.read_numpy("a")["obs"], ds.read_numpy("a")["obs"])
    before = reader.episodes(include_open=True)  # kept per shard until its commit moves
    writer = Dataset.open(str(tmp_path / "ds"))
    with writer.shard("a") as shard:
        shard.append(_block(9, 6, 2))
    with writer.shard("new") as shard:
        shard.append(_block(10, 4, 2))
    assert reader.refresh() == ROWS * (6 + 4)
    assert reader.committed_lengths == {"a": 22, "new": 4}
    own = Vault.open(str(tmp_path / "ds" / "shards" / "a"))
    np.testing.assert_array_equal(reader.read_numpy("a")["obs"], own.read_numpy()["obs"])
    after = reader.episodes(include_open=True)
    expected = _shard_tables(tmp_path / "ds", ["a", "new"], True)
    assert len(after) > len(before)
    for column in ("row", "start", "length", "returns", "complete"):
        np.testing.assert_array_equal(getattr(after, column), getattr(expected, column))


@pytest.mark.parametrize("damage", ["edited", "attributes", "not_json", "deep"])
def test_a_shard_with_a_damaged_commit_record_is_an_error_naming_it(
    built: Path, tmp_path: Path, damage: str
) -> None:
    root = _damaged(built, tmp_path)
    (root / "catalog").unlink(missing_ok=True)  # every shard's record read and checked
    record = root / "shards" / "b" / "commit" / "zarr.json"
    group = json.loads(record.read_bytes())
    if damage == "edited":  # its digest no longer matches
        group["attributes"]["rlvault_commit"]["seq"] += 1
        expected = f"{root}/shards/b: the commit record (commit/zarr.json) is malformed"
    elif damage == "attributes":  # not an object
        group["attributes"] = ["rlvault_commit"]
        expected = f"{root}/shards/b/commit/zarr.json: no 'rlvault_commit' attributes"
    elif damage == "deep":
        group["attributes"]["rlvault_commit"]["x"] = [[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]] * 8
        for _ in range(MAX_RECORD_DEPTH):
            group["attributes"]["rlvault_commit"]["x"] = [
                group["attributes"]["rlvault_commit"]["x"]
            ]
        expected = f"{root}/shards/b/commit/zarr.json nests objects and lists more than"
    if damage == "not_json":
        record.write_bytes(b"{")
        expected = f"{root}/shards/b/commit/zarr.json is not valid JSON"
    else:
        record.write_text(json.dumps(group))
    with pytest.raises(vault.VaultCorruptError, match=re.escape(expected)):
        Dataset.open(str(root))
    with pytest.raises(vault.VaultCorruptError):  # the shard opened alone refuses it too
        Vault.open(str(root / "shards" / "b"))
