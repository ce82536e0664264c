"""Streaming statistics (``vault.facade._stats``) against numpy over the whole data at once."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from vault import EpisodeTable, Vault, VaultReadError
from vault.facade._stats import _Accumulator, episode_stats, leaf_stats, time_blocks

ROWS = 4
EXAMPLE = {
    "x": np.zeros(3, np.float32),
    "k": np.int16(0),
    "flag": np.bool_(False),
}


def make(path: Path, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(3.0, 2.0, size=(ROWS, n, 3)).astype(np.float32)
    x[0, 5, 1] = np.nan
    x[2, n - 1, 0] = np.inf
    x[3, 7, 2] = -np.inf
    x[1, 9, :] = np.nan
    data = {
        "x": x,
        "k": rng.integers(-300, 300, size=(ROWS, n)).astype(np.int16),
        "flag": rng.random((ROWS, n)) < 0.3,
    }
    chunk = {"x": [1, 16, 3], "k": [ROWS, 16], "flag": [ROWS, 16]}
    with Vault.create(str(path), EXAMPLE, rows=ROWS, chunk=chunk) as vault:
        vault.append({k: v[:, : n // 3] for k, v in data.items()})
        vault.append({k: v[:, n // 3 :] for k, v in data.items()})
    return data


def reference(values: np.ndarray) -> dict[str, object]:
    flat = values.reshape(-1)
    if flat.dtype == np.bool_:
        flat = flat.astype(np.uint8)
    finite = flat[np.isfinite(flat)] if flat.dtype.kind == "f" else flat
    return {
        "count": values.size,
        "finite": finite.size,
        "nan": int(np.isnan(flat).sum()) if flat.dtype.kind == "f" else 0,
        "inf": int(np.isinf(flat).sum()) if flat.dtype.kind == "f" else 0,
        "min": finite.min().item(),
        "max": finite.max().item(),
        "mean": float(finite.astype(np.float64).mean()),
        "std": float(finite.astype(np.float64).std()),
    }


@pytest.mark.parametrize("block_bytes", [1, 200, 64 << 20])
def test_leaf_stats_match_numpy_whatever_the_block_size(tmp_path: Path, block_bytes: int) -> None:
    data = make(tmp_path / "v", 100)
    seen: list[tuple[int, int]] = []
    stats = leaf_stats(
        Vault.open(str(tmp_path / "v")),
        block_bytes=block_bytes,
        progress=lambda done, total: seen.append((done, total)),
    )
    assert [s.name for s in stats] == ["flag", "k", "x"]
    for s in stats:
        want = reference(data[s.name])
        got = {k: getattr(s, k) for k in want}
        for key in ("count", "finite", "nan", "inf"):
            assert got[key] == want[key], (s.name, key)
        for key in ("min", "max", "mean", "std"):
            assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-9), (s.name, key)
    x = next(s for s in stats if s.name == "x")
    assert (x.nan, x.inf, x.shape, x.dtype) == (4, 2, (3,), "float32")
    total = sum(v.nbytes for v in data.values())
    assert seen[0] == (0, total)
    assert seen[-1] == (total, total)
    if block_bytes == 1:  # one time-chunk (16 steps) per block: ceil(100 / 16) per leaf
        assert len(seen) == 1 + 3 * math.ceil(100 / 16)


def test_selected_leaves_and_unknown_leaf(tmp_path: Path) -> None:
    make(tmp_path / "v", 20)
    vault = Vault.open(str(tmp_path / "v"))
    assert [s.name for s in leaf_stats(vault, leaves=["x", "k"])] == ["x", "k"]
    with pytest.raises(VaultReadError, match=r"unknown leaves \['nope'\]"):
        leaf_stats(vault, leaves=["nope"])


def test_empty_vault_and_all_nan_leaf(tmp_path: Path) -> None:
    vault = Vault.create(str(tmp_path / "e"), {"x": np.zeros(2, np.float32)}, rows=2)
    [empty] = leaf_stats(vault)
    assert (empty.count, empty.min, empty.mean, empty.std) == (0, None, None, None)
    vault.append({"x": np.full((2, 3, 2), np.nan, np.float32)})
    [nan] = leaf_stats(vault)
    assert (nan.count, nan.nan, nan.finite, nan.max) == (12, 12, 0, None)
    assert nan.to_dict()["shape"] == [2]


def test_accumulator_is_stable_far_from_zero() -> None:
    acc = _Accumulator(np.dtype(np.float64))
    rng = np.random.default_rng(3)
    values = 1e9 + rng.normal(size=300_000)
    for part in np.array_split(values, 7):
        acc.update(part)
    result = acc.result("v", ())
    assert result.mean == pytest.approx(values.mean(), rel=1e-15)
    assert result.std == pytest.approx(values.std(), rel=1e-6)


def test_time_blocks_are_whole_chunks() -> None:
    assert time_blocks(0, 8, 10, 100) == [0]
    assert time_blocks(20, 8, 10, 100) == [0, 8, 16, 20]  # 100 B fit 10 steps: one chunk
    assert time_blocks(20, 8, 10, 170) == [0, 16, 20]  # 17 steps: two chunks
    assert time_blocks(5, 8, 10**9, 1) == [0, 5]  # at least one chunk per block


def test_episode_stats() -> None:
    bounds = np.array([[0, 0, 3, 0], [0, 3, 5, 1], [1, 0, 4, 0], [1, 4, 2, 0]], np.int64)
    returns = np.array([1.0, -2.0, 4.0, 0.5])
    table = EpisodeTable.from_bounds(bounds, returns, has_reward=True)
    complete = np.array([True, True, True, False])
    table = EpisodeTable(**{**table.__dict__, "complete": complete})
    out = episode_stats(table)
    assert (out["episodes"], out["complete"], out["open"], out["truncated"]) == (4, 3, 1, 1)
    assert out["return"]["mean"] == pytest.approx(1.0)
    assert out["return"]["std"] == pytest.approx(np.std([1.0, -2.0, 4.0]))
    assert (out["length"]["min"], out["length"]["max"]) == (3, 5)
    no_reward = EpisodeTable.from_bounds(bounds, returns, has_reward=False)
    assert episode_stats(no_reward)["return"] is None
    assert episode_stats(EpisodeTable.empty())["length"] is None
