"""vault.grain_source: a Grain random-access source of sequence windows over real vaults, read
by Grain's own MapDataset and DataLoader."""

from __future__ import annotations

import pickle
import re
import sys
from pathlib import Path
from typing import Any

import grain
import numpy as np
import pytest

import vault
from vault import Vault, VaultArgumentError, VaultReadError

sys.path.insert(0, str(Path(__file__).parent))
from _sources import CODE, SOURCE, make_source, valid_starts


@pytest.fixture
def two(tmp_path: Path) -> list[Vault]:
    return [make_source(tmp_path / "a", 0, 40), make_source(tmp_path / "b", 1, 29, seam=11)]


def window(v: Vault, row: int, start: int, seq: int) -> dict[str, np.ndarray]:
    got = v.read_numpy(rows=[row], start=start, stop=start + seq)
    return {k: x[0] for k, x in got.items()}


@pytest.mark.parametrize(
    ("seq", "kw"), [(3, {}), (1, {}), (4, {"stride": 2}), (4, {"episode_aware": True})]
)
def test_records_are_the_valid_windows_as_read_numpy_gives_them(
    two: list[Vault], seq: int, kw: dict[str, Any]
) -> None:
    source = vault.grain_source(two, seq, **kw)
    want = valid_starts(two, seq, kw.get("stride", 1), kw.get("episode_aware", False))
    assert len(source) == len(want)
    places = [source.where(i) for i in range(len(source))]
    assert places == sorted(want)  # source by source, row by row, in time order
    for i in range(len(source)):
        s, row, start = places[i]
        record = source[i]
        expected = window(two[s], row, start, seq)
        assert set(record) == set(expected)
        for name, x in expected.items():
            np.testing.assert_array_equal(record[name], x)
            assert record[name].shape == (seq, *x.shape[1:])


def test_a_grain_map_dataset_and_data_loader_yield_the_expected_batches(two: list[Vault]) -> None:
    source = vault.grain_source(two, 3, leaves=["code"])
    n = len(source)
    batches = list(grain.MapDataset.source(source).batch(8))
    assert len(batches) == -(-n // 8)
    for k, batch in enumerate(batches):
        rows = range(8 * k, min(8 * k + 8, n))
        np.testing.assert_array_equal(batch["code"], np.stack([source[i]["code"] for i in rows]))

    shuffled = grain.MapDataset.source(source).shuffle(seed=3).batch(8, drop_remainder=True)
    assert next(iter(shuffled))["code"].shape == (8, 3)
    sampler = grain.samplers.IndexSampler(n, shuffle=True, seed=5, num_epochs=1)
    loader = grain.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[grain.transforms.Batch(8, drop_remainder=False)],
        worker_count=0,
    )
    seen = []
    for batch in loader:
        code = batch["code"]
        assert code.shape[1:] == (3,)
        np.testing.assert_array_equal(np.diff(code, axis=1), 1)  # each a window in time
        seen += [(int(c) // SOURCE, int(c) % SOURCE // CODE, int(c) % CODE) for c in code[:, 0]]
    assert len(seen) == len(set(seen)) == n  # every record once in an epoch ...
    assert set(seen) == valid_starts(two, 3)  # ... and they are the valid windows
    assert seen != sorted(seen)  # in the sampler's shuffled order


def test_a_source_pickles_to_the_same_pinned_records(two: list[Vault]) -> None:
    source = vault.grain_source(two[1], 2, cache_bytes=0)
    before = [source[i] for i in range(0, len(source), 7)]
    pin = two[1].commit_id
    two[1].append(two[1].read_numpy(stop=5))  # a later commit: the copy stays at the pin
    copy = pickle.loads(pickle.dumps(source))
    assert repr(copy) == repr(source)
    assert f"@{pin}" in repr(copy)
    assert len(copy) == len(source)
    for got, want in zip([copy[i] for i in range(0, len(copy), 7)], before, strict=True):
        np.testing.assert_array_equal(got["code"], want["code"])
    assert len(vault.grain_source(Vault.open(two[1].location), 2)) > len(source)


def test_errors(two: list[Vault], tmp_path: Path) -> None:
    source = vault.grain_source(two[0].snapshot, 2)
    with pytest.raises(IndexError, match=re.escape(f"record {len(source)} out of range")):
        source[len(source)]
    with pytest.raises(
        VaultArgumentError, match=re.escape("a record index is an int, got 1.0 (a float)")
    ):
        source[1.0]  # type: ignore[index]
    with pytest.raises(VaultReadError, match=re.escape("no window of 41 timesteps")):
        vault.grain_source(two[0], 41)
    with pytest.raises(VaultReadError, match="sequence_length must be an int >= 1"):
        vault.grain_source(two, 0)
    with pytest.raises(VaultArgumentError, match="must be Snapshots"):
        vault.grain_source([two[0], "nope"], 2)


def test_a_source_over_a_dataset_of_shards(tmp_path: Path) -> None:
    example = {"code": np.int32(0), "obs": np.zeros(2, np.float32)}
    dataset = vault.Dataset.create(tmp_path / "ds", example, rows=2)
    for name, length in (("a", 12), ("b", 7)):
        shard = dataset.shard(name)
        code = np.arange(2 * length, dtype=np.int32).reshape(2, length)
        shard.append({"code": code, "obs": np.zeros((2, length, 2), np.float32)})
        shard.close()
    opened = vault.Dataset.open(tmp_path / "ds")
    source = vault.grain_source(opened, 3)
    assert len(source) == 2 * (12 - 2) + 2 * (7 - 2)
    s, row, start = source.where(len(source) - 1)
    assert (s, row, start) == (1, 1, 4)
    np.testing.assert_array_equal(source[len(source) - 1]["code"], [11, 12, 13])
