"""A dataset tagged and read as tagged (``Dataset.tag``, ``Dataset.open(at=TAG)``), and a
dataset sliced into a new dataset (``derive_slice`` of a ``Dataset``): real shards on disk,
values compared with what was appended."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import vault
from vault import Dataset

EXAMPLE = {"obs": np.zeros((2,), np.float32), "reward": np.float32(0), "done": np.bool_(False)}


def block(shard: int, rows: int, t0: int, n: int) -> dict[str, np.ndarray]:
    """Values that say where they are: obs = (shard * 100 + row, t)."""
    t = np.arange(t0, t0 + n)[None, :] + np.zeros((rows, 1), np.int64)
    row = np.arange(rows)[:, None] + np.zeros((1, n), np.int64)
    return {
        "obs": np.stack([shard * 100 + row, t], axis=-1).astype(np.float32),
        "reward": (t % 3 == 0).astype(np.float32),
        "done": (t % 4) == 3,
    }


def make(root: Path, lengths: dict[str, int], rows: int = 2) -> Dataset:
    dataset = Dataset.create(str(root), EXAMPLE, rows=rows, done_leaf="done", reward_leaf="reward")
    for index, (name, n) in enumerate(lengths.items()):
        with dataset.shard(name) as writer:
            writer.append(block(index, rows, 0, n))
    return Dataset.open(str(root))


def test_a_tag_pins_every_shard_and_leaves_later_shards_out(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    dataset = make(root, {"a": 6, "b": 9})
    commits = dataset.tag("base")
    assert commits == dataset.commit_ids
    assert dataset.tag("base") == commits  # the same commits again: nothing moves
    writer = Dataset.open(str(root))
    with writer.shard("a") as a:
        a.append(block(0, 2, 6, 5))
    with writer.shard("c") as c:
        c.append(block(2, 2, 0, 4))
    now = Dataset.open(str(root))
    assert now.committed_lengths == {"a": 11, "b": 9, "c": 4}
    pinned = Dataset.open(str(root), at="base")
    assert pinned.tagged == "base"
    assert now.tagged is None
    assert pinned.shards == ["a", "b"]
    assert pinned.committed_lengths == {"a": 6, "b": 9}
    assert pinned.commit_ids == commits
    np.testing.assert_array_equal(pinned.read_numpy("a")["obs"], block(0, 2, 0, 6)["obs"])
    assert pinned.refresh() == 0
    assert pinned.committed_lengths == {"a": 6, "b": 9}
    table = pinned.episodes()
    assert sorted(set(table.shard.tolist())) == ["a", "b"]
    assert int((table.start + table.length).max()) <= 9
    with pytest.raises(vault.VaultModeError, match=re.escape("opened at tag 'base', for reading")):
        pinned.shard("d")


def test_a_tag_that_would_move_tags_no_shard(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    make(root, {"a": 5, "b": 5}).tag("v1")
    writer = Dataset.open(str(root))
    with writer.shard("a") as a:
        a.append(block(0, 2, 5, 3))
    with writer.shard("c") as c:
        c.append(block(2, 2, 0, 3))
    moved = Dataset.open(str(root))
    with pytest.raises(
        vault.VaultExistsError, match=r"tag 'v1' already names other commits of shards a \(1-"
    ):
        moved.tag("v1")
    assert "v1" not in moved.vault("c").tags()  # checked before any shard was tagged
    assert moved.vault("b").tags()["v1"] == moved.commit_ids["b"]


def test_a_dataset_is_pinned_by_a_tag_only(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    make(root, {"a": 3})
    with pytest.raises(vault.VaultPinError, match=re.escape("no shard has the tag 'nope'")):
        Dataset.open(str(root), at="nope")
    for pin in (1, "1", "1-abcdef12"):
        with pytest.raises(vault.VaultArgumentError, match="a dataset is pinned by a tag name"):
            Dataset.open(str(root), at=pin)
    empty = Dataset.create(str(tmp_path / "empty"), EXAMPLE, rows=2)
    with pytest.raises(vault.VaultNotFoundError, match="no shard to tag"):
        empty.tag("x")


def test_slicing_a_dataset_gives_a_dataset_of_sliced_shards(tmp_path: Path) -> None:
    dataset = make(tmp_path / "ds", {"a": 10, "b": 7})
    seen: list[tuple[int, int]] = []
    made = vault.derive_slice(
        dataset,
        str(tmp_path / "s"),
        rows=[1],
        start=2,
        stop=6,
        progress=lambda d, t: seen.append((d, t)),
    )
    assert isinstance(made, Dataset)
    assert vault.is_dataset(str(tmp_path / "s"))
    assert made.shards == ["a", "b"]
    assert made.committed_lengths == {"a": 4, "b": 4}
    assert made.template.leaf_names == dataset.template.leaf_names
    for index, name in enumerate(("a", "b")):
        got = made.read_numpy(name)
        want = block(index, 2, 2, 4)
        for leaf in ("obs", "reward", "done"):
            np.testing.assert_array_equal(got[leaf], want[leaf][1:2])
        # the episode index is rebuilt: the episode running at t=2 has an unknown start
        table = made.vault(name).episodes(include_open=True)
        assert table.start.tolist() == [0, 2]
        assert table.start_known.tolist() == [False, True]
    assert seen[-1] == (8, 8)
    spans = vault.derive_slice(dataset, str(tmp_path / "t"), spans={"b": (5, 7)})
    assert spans.shards == ["b"]
    assert spans.committed_lengths == {"b": 2}
    np.testing.assert_array_equal(spans.read_numpy("b")["obs"], block(1, 2, 5, 2)["obs"])


def test_slicing_a_dataset_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    dataset = make(tmp_path / "ds", {"a": 4, "b": 6})
    cases = [
        (
            {"dest": str(tmp_path / "ds" / "x")},
            vault.VaultLocationError,
            "inside the source dataset",
        ),
        (
            {"dest": str(tmp_path / "o"), "spans": {"zz": (0, 1)}},
            vault.VaultArgumentError,
            "no shards ['zz']",
        ),
        (
            {"dest": str(tmp_path / "o"), "start": 0, "spans": {"a": (0, 1)}},
            vault.VaultArgumentError,
            "not both",
        ),
        (
            {"dest": str(tmp_path / "o"), "stop": 5},
            vault.VaultReadError,
            "time range [0, 5) is outside the committed [0, 4)",
        ),
        (
            {"dest": str(tmp_path / "o"), "rows": []},
            vault.VaultReadError,
            "rows selects no row of shard 'a'",
        ),
    ]
    for options, error, message in cases:
        with pytest.raises(error, match=re.escape(message)):
            vault.derive_slice(dataset, **options)  # type: ignore[call-overload]
        assert not (tmp_path / "o").exists()
    with pytest.raises(vault.VaultArgumentError, match="spans= picks time ranges"):
        vault.derive_slice(dataset.vault("a"), str(tmp_path / "o"), spans={"a": (0, 1)})  # type: ignore[call-overload]
