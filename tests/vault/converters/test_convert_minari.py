"""Minari datasets <-> vault, with datasets recorded here by Minari's DataCollector (HDF5 and
Arrow backends; Dict/Tuple observation spaces), checked episode by episode both ways."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import minari
import numpy as np
import pytest
from _convert_sources import TOY_ID, write_minari

from vault import (
    Vault,
    VaultArgumentError,
    VaultExistsError,
    VaultNotFoundError,
    VaultReadError,
    VaultStructureError,
)
from vault.converters import export_minari, import_minari


@pytest.fixture(scope="module")
def minari_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("minari")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINARI_DATASETS_PATH", str(root))
        yield root


@pytest.fixture(scope="module")
def toy(minari_root: Path) -> dict[str, Any]:
    return {
        fmt: write_minari(f"toy-{fmt}-v0", fmt, env_id=TOY_ID, steps=70, seed=1)
        for fmt in ("hdf5", "arrow")
    }


def _eq(a: Any, b: Any, where: str) -> None:
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), where
        for k in a:
            _eq(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _eq(x, y, f"{where}/{i}")
    else:
        x, y = np.asarray(a), np.asarray(b)
        assert x.dtype == y.dtype, f"{where}: {x.dtype} != {y.dtype}"
        np.testing.assert_array_equal(x, y, err_msg=where)


def _sl(tree: Any, s: slice) -> Any:
    if isinstance(tree, dict):
        return {k: _sl(v, s) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return tuple(_sl(v, s) for v in tree)
    return np.asarray(tree)[s]


@pytest.mark.parametrize("fmt", ["hdf5", "arrow"])
def test_round_trip_episode_by_episode(
    toy: dict[str, Any], minari_root: Path, tmp_path: Path, fmt: str
) -> None:
    source = toy[fmt]
    episodes = list(source.iterate_episodes())
    assert len(episodes) >= 8
    vault = import_minari(f"toy-{fmt}-v0", tmp_path / "v", block_bytes=1 << 16)
    assert vault.rows == 1
    assert vault.committed_length == sum(len(e) for e in episodes)
    table = vault.episodes()
    assert len(table) == len(episodes)
    assert table.complete.all()
    for i, ep in enumerate(episodes):  # the vault, episode by episode
        got = vault.read_episode(i)
        _eq(got["observations"], _sl(ep.observations, slice(None, -1)), f"{i}/observations")
        _eq(got["next_observations"], _sl(ep.observations, slice(1, None)), f"{i}/next")
        _eq(got["actions"], ep.actions, f"{i}/actions")
        _eq(got["rewards"], ep.rewards, f"{i}/rewards")
        _eq(got["terminations"], ep.terminations, f"{i}/terminations")
        _eq(got["truncations"], ep.truncations, f"{i}/truncations")
        assert table.truncated[i] == bool(ep.truncations[-1] and not ep.terminations[-1])
        np.testing.assert_allclose(table.returns[i], ep.rewards.sum())
    assert vault.metadata["imported_from"]["dataset_id"] == f"toy-{fmt}-v0"
    # and back: Minari opens the export and gives the same episodes and spaces
    out = export_minari(vault, f"back-{fmt}-v0", data_format=fmt)
    assert out == minari_root / f"back-{fmt}-v0"
    back = minari.load_dataset(f"back-{fmt}-v0")
    assert back.observation_space == source.observation_space
    assert back.action_space == source.action_space
    assert back.total_episodes == len(episodes)
    assert back.total_steps == source.total_steps
    for i, (a, b) in enumerate(
        zip(source.iterate_episodes(), back.iterate_episodes(), strict=True)
    ):
        for field in ("observations", "actions", "rewards", "terminations", "truncations"):
            _eq(getattr(b, field), getattr(a, field), f"episode {i}/{field}")


def test_cartpole_by_path(minari_root: Path, tmp_path: Path) -> None:
    source = write_minari("cartpole-v0", "hdf5", env_id="CartPole-v1", steps=120, seed=2)
    vault = import_minari(minari_root / "cartpole-v0", tmp_path / "v")
    assert vault.committed_length == source.total_steps
    first = next(source.iterate_episodes())
    np.testing.assert_array_equal(vault.read_episode(0)["actions"], first.actions)


def test_metadata_round_trip_and_recover_environment(minari_root: Path, tmp_path: Path) -> None:
    # made as a new user would: Minari's own API, CartPole, an algorithm and an author
    source = write_minari("cartpole/meta-v0", "hdf5", env_id="CartPole-v1", steps=50, seed=3,
                          algorithm_name="PPO", author="Ada Lovelace",
                          author_email="ada@example.org", code_permalink="https://example.org/c",
                          description="CartPole with PPO")  # fmt: skip
    vault = import_minari("cartpole/meta-v0", tmp_path / "v")
    export_minari(vault, "cartpole/meta-back-v0", data_format="arrow")
    back = minari.load_dataset("cartpole/meta-back-v0")
    assert back.spec.env_spec == source.spec.env_spec
    assert back.spec.env_spec is not None
    theirs, ours = source.storage.metadata, back.storage.metadata
    for key in ("algorithm_name", "author", "author_email", "code_permalink", "description"):
        assert ours[key] == theirs[key], key
    assert ours["author"] == {"Ada Lovelace"}
    assert ours["dataset_id"] == "cartpole/meta-back-v0"
    assert ours["data_format"] == "arrow"
    assert ours["total_steps"] == theirs["total_steps"] == 50
    assert (back.total_episodes, back.total_steps) == (source.total_episodes, 50)
    env = back.recover_environment()
    assert env.spec is not None
    assert env.spec.id == "CartPole-v1"
    assert env.spec.max_episode_steps == 500
    env.close()
    # a recorded vault (nothing imported) gets its environment and metadata from the caller
    data = {"obs": np.zeros((1, 4, 4), np.float32), "next_obs": np.ones((1, 4, 4), np.float32),
            "act": np.zeros((1, 4), np.int64), "rew": np.ones((1, 4), np.float32),
            "done": np.array([[False, True, False, True]])}  # fmt: skip
    example = {k: np.zeros(v.shape[2:], v.dtype) for k, v in data.items()}
    with Vault.create(tmp_path / "rec", example, rows=1, done_leaf="done", reward_leaf="rew") as v:
        v.append(data)
    with pytest.warns(UserWarning, match="in 2 of 2 episodes the next observations"):
        export_minari(tmp_path / "rec", "cartpole/rec-v0", observations="obs",
                      next_observations="next_obs", actions="act", env_spec="CartPole-v1",
                      metadata={"algorithm_name": "DQN", "author": "Grace"})  # fmt: skip
    rec = minari.load_dataset("cartpole/rec-v0")
    assert rec.storage.metadata["algorithm_name"] == "DQN"
    assert rec.storage.metadata["author"] == {"Grace"}
    assert rec.recover_environment().spec.id == "CartPole-v1"
    names = {"observations": "obs", "next_observations": "next_obs", "actions": "act"}
    with pytest.raises(VaultArgumentError, match="env_spec: "):
        export_minari(tmp_path / "rec", "cartpole/bad-v0", env_spec="NoSuchEnv-v9", **names)


def test_a_recorded_vault_exports_with_inferred_spaces(minari_root: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 40
    obs = rng.normal(size=(2, n + 1, 3)).astype(np.float32)
    done = np.zeros((2, n), bool)
    done[:, [9, 20, 33]] = True
    data = {
        "obs": obs[:, :-1],
        "next_obs": obs[:, 1:],
        "act": rng.integers(0, 4, (2, n)).astype(np.int64),
        "rew": rng.normal(size=(2, n)).astype(np.float32),
        "done": done,
    }
    example = {k: np.zeros(v.shape[2:], v.dtype) for k, v in data.items()}
    with Vault.create(tmp_path / "v", example, rows=2, done_leaf="done", reward_leaf="rew") as v:
        v.append(data)
    export_minari(
        tmp_path / "v",
        "recorded-v0",
        observations="obs",
        next_observations="next_obs",
        actions="act",
        data_format="arrow",
    )
    back = minari.load_dataset("recorded-v0")
    table = Vault.open(tmp_path / "v").episodes()
    assert back.total_episodes == len(table) == 6
    for ep, row, start, length in zip(
        back.iterate_episodes(), table.row, table.start, table.length, strict=True
    ):
        np.testing.assert_array_equal(ep.observations, obs[row, start : start + length + 1])
        np.testing.assert_array_equal(ep.actions, data["act"][row, start : start + length])
        assert ep.terminations[-1]
        assert not ep.truncations.any()


def test_export_errors(toy: dict[str, Any], minari_root: Path, tmp_path: Path) -> None:
    vault = import_minari("toy-hdf5-v0", tmp_path / "v")
    with pytest.raises(VaultExistsError, match="already exists"):
        export_minari(vault, "toy-hdf5-v0")
    with pytest.raises(
        VaultStructureError, match=re.escape("next_observations: no leaf or subtree 'nothing'")
    ):
        export_minari(vault, "x-v0", next_observations="nothing")
    with Vault.create(tmp_path / "plain", {"o": np.zeros(2)}, rows=1) as plain:
        plain.append({"o": np.zeros((1, 3, 2))})
    with pytest.raises(VaultReadError, match="has no episode index"):
        export_minari(tmp_path / "plain", "plain-v0")

    def stop(done: int, total: int) -> None:
        if done:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        export_minari(vault, "stopped-v0", block_bytes=1 << 16, progress=stop)
    assert not [p for p in minari_root.iterdir() if "stopped" in p.name]


def test_import_errors(minari_root: Path, tmp_path: Path) -> None:
    with pytest.raises(VaultNotFoundError, match="expected a Minari dataset"):
        import_minari("no-such-v0", tmp_path / "v")
    assert not (tmp_path / "v").exists()
