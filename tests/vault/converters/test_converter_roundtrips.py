"""Converters meeting odd data, round trips, the CLI and crashes: og-marl style multi-agent
Flashbax vaults whose buffer wrapped past its capacity between writes (Flashbax's own data
loss) imported through the API, the ``vault import`` command and the guide's Python call;
Minari datasets of odd spaces (MultiBinary, MultiDiscrete, Discrete with a start, bool Boxes,
a Tuple of more than ten subspaces) with non-finite rewards and flagless episodes, imported
and exported back; a Minari Text space the vault cannot hold; non-finite rewards in one
episode of a D4RL file and the returns of the others; thousands of one-step episodes cut by
import blocks; an OGBench import that fails after its validation vault was built; an
existing validation destination through the command; and an import killed (SIGKILL of a
real process) half-way, on disk and on S3, then run again.

Every source is written by its own library (h5py, numpy, Minari, Flashbax) and every imported
value is compared with the source as that library reads it, or with data that say where they
belong (``1000 * episode + t``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from _convert_sources import read_with_flashbax, write_flashbax, write_ogbench
from typer.testing import CliRunner

from vault import (
    Vault,
    VaultError,
    VaultExistsError,
    VaultNotFoundError,
    find_vaults,
    parse_location,
    verify,
)
from vault.cli import app
from vault.converters import (
    datasets_root,
    export_minari,
    import_d4rl,
    import_flashbax,
    import_minari,
    import_ogbench,
)

REPO = Path(__file__).resolve().parents[3]


# ------------------------------------------------------------------------------- helpers
@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Minari and Gymnasium warn, Flashbax prints."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _flat(tree: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """``{leaf path: array}`` of a tree of dicts, tuples and lists."""
    if isinstance(tree, dict):
        return {k: v for key in tree for k, v in _flat(tree[key], f"{prefix}{key}/").items()}
    if isinstance(tree, (tuple, list)):
        return {k: v for i, x in enumerate(tree) for k, v in _flat(x, f"{prefix}{i}/").items()}
    return {prefix.rstrip("/"): np.asarray(tree)}


def _same(a: Any, b: Any, where: str = "") -> None:
    """Same leaf paths, dtypes, shapes and values (NaN equal to NaN)."""
    fa, fb = _flat(a), _flat(b)
    assert sorted(fa) == sorted(fb), where
    for k in fa:
        assert fa[k].dtype == fb[k].dtype, f"{where}{k}: {fa[k].dtype} != {fb[k].dtype}"
        assert fa[k].shape == fb[k].shape, f"{where}{k}: {fa[k].shape} != {fb[k].shape}"
        np.testing.assert_array_equal(fa[k], fb[k], err_msg=f"{where}{k}")


def _walk(done: np.ndarray, trunc: np.ndarray, reward: np.ndarray) -> list[tuple[Any, ...]]:
    """(start, length, return, truncated) of every ended episode of one row, by its flags."""
    out, start = [], 0
    for t in range(len(done)):
        if done[t] or trunc[t]:
            ret = float(np.sum(reward[start : t + 1], dtype=np.float64))
            out.append((start, t + 1 - start, ret, bool(trunc[t] and not done[t])))
            start = t + 1
    return out


def _episodes(vault: Vault) -> list[tuple[Any, ...]]:
    """(row, start, length, return, truncated) of the vault's ended episodes."""
    t = vault.episodes()
    return sorted(
        zip(t.row.tolist(), t.start.tolist(), t.length.tolist(), t.returns.tolist(),
            t.truncated.tolist(), strict=True)
    )  # fmt: skip


def _cli(*args: Any) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200", "NO_COLOR": "1"})


@pytest.fixture(scope="module")
def minari_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("minari")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINARI_DATASETS_PATH", str(root))
        yield root


# --------------------------------------------- og-marl style Flashbax vault, wrapped buffer
AGENTS = ("agent_0", "agent_1")
OG_MARL = {
    "observations": dict.fromkeys(AGENTS, ((3,), np.float32)),
    "actions": dict.fromkeys(AGENTS, ((), np.int32)),
    "rewards": dict.fromkeys(AGENTS, ((), np.float32)),
    "terminals": dict.fromkeys(AGENTS, ((), np.bool_)),
    "truncations": dict.fromkeys(AGENTS, ((), np.bool_)),
    "infos": {"state": ((4,), np.float32)},
}
BOOL: Any = np.bool_  # a bool Box is valid; gymnasium's annotations say float only

ROLES: dict[str, Any] = {"done": "terminals/agent_0", "truncated": "truncations/agent_0",
                         "reward": "rewards/agent_0"}  # fmt: skip
# a ring of 8 written every 10 adds: Flashbax writes only what the ring still holds since its
# last write (the 2 newest of each 10), and the last 1 at the end: timesteps 8, 9, 18, 19, 20
KEPT = [8, 9, 18, 19, 20]


@pytest.fixture(scope="module")
def og_marl(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Any]:
    root = tmp_path_factory.mktemp("og-marl")
    with _quiet():
        path, handed = write_flashbax(
            root, "smac", OG_MARL, rows=3, capacity=8, steps=21, write_every=10,
            metadata={"env": "smac", "best": float("nan")},
        )  # fmt: skip
        theirs = read_with_flashbax(path)
    return path, handed, theirs


def _reference(theirs: Any) -> list[tuple[Any, ...]]:
    return sorted(
        (r, *e)
        for r in range(3)
        for e in _walk(
            theirs["terminals"]["agent_0"][r],
            theirs["truncations"]["agent_0"][r],
            theirs["rewards"]["agent_0"][r],
        )
    )


def test_og_marl_vault_wrapped_past_its_capacity_imports_what_flashbax_kept(
    og_marl: tuple[Path, Any, Any], tmp_path: Path
) -> None:
    path, handed, theirs = og_marl
    # what Flashbax itself kept of what it was handed: the trivially correct model
    _same(theirs, _take(handed, KEPT))
    api = import_flashbax(path, tmp_path / "api", **ROLES, block_bytes=1 << 16)
    _same(api.read_numpy(), theirs)
    assert api.committed_length == len(KEPT)
    assert api.rows == 3
    assert api.metadata["env"] == "smac"
    assert api.metadata["best"] == "nan"
    assert _episodes(api) == _reference(theirs)
    result = _cli(
        "import", "flashbax", path, "--out", tmp_path / "cli", "--done", ROLES["done"],
        "--truncated", ROLES["truncated"], "--reward", ROLES["reward"], "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    cli = Vault.open(tmp_path / "cli")
    assert doc["committed"] == len(KEPT)
    assert doc["episodes"] == len(api.episodes())
    _same(cli.read_numpy(), api.read_numpy())
    assert _episodes(cli) == _episodes(api)
    assert cli.episode_leaves == api.episode_leaves
    assert verify(tmp_path / "cli").problems == []


def _take(tree: Any, steps: list[int]) -> Any:
    if isinstance(tree, dict):
        return {k: _take(v, steps) for k, v in tree.items()}
    return np.asarray(tree)[:, steps]


def test_the_flashbax_guides_python_call_imports_with_episode_leaves(
    og_marl: tuple[Path, Any, Any], tmp_path: Path
) -> None:
    path, _, theirs = og_marl
    guide = " ".join((REPO / "docs" / "guides" / "migrate-flashbax.md").read_text().split())
    call = (
        'import_flashbax(src, dest, done="terminals/agent_0", truncated="truncations/agent_0", '
        'reward="rewards/agent_0", progress=print)'
    )
    assert call in guide  # the guide's call, with the og-marl leaves it names
    seen: list[tuple[int, int]] = []
    vault = import_flashbax(
        path,
        tmp_path / "v",
        done=ROLES["done"],
        truncated=ROLES["truncated"],
        reward=ROLES["reward"],
        progress=lambda done, total: seen.append((done, total)),
    )
    assert _episodes(vault) == _reference(theirs)
    assert seen[-1][0] == seen[-1][1]


# ------------------------------------------------------------- Minari: odd spaces and data
def _write_minari(dataset_id: str, fmt: str, obs_space: Any, act_space: Any,
                  episodes: list[tuple[int, str, Any]]) -> None:  # fmt: skip
    """A Minari dataset written by Minari's own storage: episodes of (steps, how it ends:
    ``term``/``trunc``/``none``, rewards)."""
    import jax
    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer
    from minari.dataset.minari_storage import MinariStorage

    data = datasets_root() / dataset_id / "data"
    data.parent.mkdir(parents=True)
    obs_space.seed(1)
    act_space.seed(2)
    buffers = []
    for i, (n, end, rewards) in enumerate(episodes):
        obs = jax.tree.map(lambda *x: np.stack(x), *[obs_space.sample() for _ in range(n + 1)])
        act = jax.tree.map(lambda *x: np.stack(x), *[act_space.sample() for _ in range(n)])
        term, trunc = np.zeros(n, bool), np.zeros(n, bool)
        term[-1], trunc[-1] = end == "term", end == "trunc"
        buffers.append(EpisodeBuffer(id=i, observations=obs, actions=act, rewards=rewards,
                                     terminations=term, truncations=trunc))  # fmt: skip
    with _quiet():
        storage = MinariStorage.new(
            data, observation_space=obs_space, action_space=act_space, data_format=fmt,
            jpeg_encoding=False,
        )  # fmt: skip
        storage.update_episodes(buffers)
        storage.update_metadata({"dataset_id": dataset_id, "minari_version": minari.__version__})


def _minari_episodes(dataset_id: str) -> tuple[Any, list[Any]]:
    import minari

    with _quiet():
        ds = minari.load_dataset(dataset_id)
        return ds, list(ds.iterate_episodes())


@pytest.mark.parametrize("fmt", ["hdf5", "arrow"])
def test_minari_odd_spaces_and_non_finite_rewards_round_trip(
    minari_root: Path, tmp_path: Path, fmt: str
) -> None:
    from gymnasium import spaces

    obs_space = spaces.Dict(
        {
            "bits": spaces.MultiBinary(3),
            "cell": spaces.Discrete(4, start=-2),
            "flags": spaces.Box(0, 1, (2,), BOOL),
            "parts": spaces.Tuple([spaces.Box(-1, 1, (i + 1,), np.float32) for i in range(11)]),
        }
    )
    act_space = spaces.MultiDiscrete([3, 4])
    episodes = [
        (1, "term", np.array([1.0])),
        (3, "trunc", np.array([np.nan, np.inf, -np.inf])),
        (1, "none", np.array([-0.0])),
        (2, "term", np.array([2.5, 1e300])),
    ]
    _write_minari(f"odd-{fmt}-v0", fmt, obs_space, act_space, episodes)
    _, theirs = _minari_episodes(f"odd-{fmt}-v0")
    vault = import_minari(f"odd-{fmt}-v0", tmp_path / "v")
    table = vault.episodes()
    assert table.length.tolist() == [1, 3, 1, 2]
    assert table.truncated.tolist() == [False, True, True, False]  # "none": marked truncated
    for i, ep in enumerate(theirs):
        got = vault.read_episode(i)
        obs = ep.observations
        _same(got["observations"], {k: _cut(v, slice(0, -1)) for k, v in obs.items()}, f"{i}/")
        _same(got["next_observations"], {k: _cut(v, slice(1, None)) for k, v in obs.items()})
        _same(got["actions"], ep.actions, f"{i}/actions")
        _same(got["rewards"], ep.rewards, f"{i}/rewards")
        np.testing.assert_array_equal(got["terminations"], ep.terminations)
    other = "arrow" if fmt == "hdf5" else "hdf5"  # and out in the other backend
    export_minari(vault, f"odd-{fmt}-back-v0", data_format=other)
    ds, back = _minari_episodes(f"odd-{fmt}-back-v0")
    assert ds.observation_space == obs_space
    assert ds.action_space == act_space
    assert ds.storage.metadata["data_format"] == other
    for i, (a, b) in enumerate(zip(theirs, back, strict=True)):
        _same(b.observations, a.observations, f"episode {i}/")
        _same(b.actions, a.actions, f"episode {i}/")
        _same(b.rewards, a.rewards, f"episode {i}/")
        np.testing.assert_array_equal(b.terminations, a.terminations)
        want = np.asarray(a.truncations).copy()
        want[-1] |= not a.terminations[-1]
        np.testing.assert_array_equal(b.truncations, want)


def _cut(tree: Any, s: slice) -> Any:
    if isinstance(tree, dict):
        return {k: _cut(v, s) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return {str(i): _cut(v, s) for i, v in enumerate(tree)}
    return np.asarray(tree)[s]


def test_a_minari_text_space_is_a_typed_error_naming_the_leaf(
    minari_root: Path, tmp_path: Path
) -> None:
    import minari
    from gymnasium import spaces
    from minari.data_collector.episode_buffer import EpisodeBuffer
    from minari.dataset.minari_storage import MinariStorage

    space = spaces.Dict({"note": spaces.Text(8), "pos": spaces.Box(-1, 1, (2,), np.float32)})
    data = datasets_root() / "text-v0" / "data"
    data.parent.mkdir(parents=True)
    with _quiet():
        storage = MinariStorage.new(data, observation_space=space,
                                    action_space=spaces.Discrete(2))  # fmt: skip
        obs = {"note": ["go", "left", "stop"], "pos": np.zeros((3, 2), np.float32)}
        storage.update_episodes([EpisodeBuffer(
            id=0, observations=obs, actions=np.array([0, 1]), rewards=np.array([1.0, 2.0]),
            terminations=np.array([False, True]), truncations=np.array([False, False]),
        )])  # fmt: skip
        storage.update_metadata({"dataset_id": "text-v0", "minari_version": minari.__version__})
    _, episodes = _minari_episodes("text-v0")
    assert episodes[0].observations["note"] == ["go", "left", "stop"]  # Minari reads it
    with pytest.raises(VaultError, match="observations/note"):
        import_minari("text-v0", tmp_path / "v")
    assert not (tmp_path / "v").exists()


# --------------------------------------------------- D4RL: non-finite rewards, tiny episodes
@pytest.mark.parametrize("odd", [np.nan, np.inf])
def test_a_non_finite_reward_leaves_the_other_episodes_returns_alone(
    tmp_path: Path, odd: float
) -> None:
    lengths, ends = [3, 4, 2, 3], ["term", "timeout", "term", "open"]
    n = sum(lengths)
    episode = np.repeat(np.arange(len(lengths)), lengths)
    t = np.arange(n)
    rewards = (1000.0 * episode + t).astype(np.float32)
    rewards[1] = odd  # in the first episode only
    last = np.cumsum(lengths) - 1
    with h5py.File(tmp_path / "src.hdf5", "w") as f:
        f["observations"] = np.stack([1000.0 * episode + t, t], axis=1).astype(np.float32)
        f["actions"] = (t % 3).astype(np.int64)
        f["rewards"] = rewards
        f["terminals"] = np.isin(t, [e for e, k in zip(last, ends, strict=True) if k == "term"])
        f["timeouts"] = np.isin(t, [e for e, k in zip(last, ends, strict=True) if k == "timeout"])
    with h5py.File(tmp_path / "src.hdf5", "r") as f:  # the file as h5py reads it
        src = {k: f[k][()] for k in ("rewards", "terminals", "timeouts")}
    with warnings.catch_warnings():  # numpy's "invalid value" warning of inf - inf
        warnings.simplefilter("ignore", RuntimeWarning)
        vault = import_d4rl(tmp_path / "src.hdf5", tmp_path / "v")
    _same(vault.read_numpy(leaves=["rewards"])["rewards"][0], src["rewards"])
    want = [(0, *e) for e in _walk(src["terminals"], src["timeouts"], src["rewards"])]
    assert len(want) == 3
    got = _episodes(vault)
    assert [e[:3] for e in got] == [e[:3] for e in want]
    np.testing.assert_array_equal([e[3] for e in got], [e[3] for e in want])  # NaN == NaN
    open_ep = vault.episodes(include_open=True)[-1:]
    assert float(open_ep.returns[0]) == float(src["rewards"][-3:].sum(dtype=np.float64))


def test_thousands_of_one_step_episodes_across_import_blocks(tmp_path: Path) -> None:
    n = 4001
    t = np.arange(n)
    data = {
        "observations": (t[:, None] + np.arange(8) / 8).astype(np.float32),  # 32 bytes a step
        "actions": (t % 5).astype(np.int16),
        "rewards": (t % 7).astype(np.float32),
        "terminals": t % 3 == 0,
        "timeouts": t % 3 == 1,  # every third step ends nothing: episodes of 1, 1, 2, 1, 2, ...
    }
    with h5py.File(tmp_path / "src.hdf5", "w") as f:
        for key, value in data.items():
            f[key] = value
    calls: list[int] = []
    vault = import_d4rl(tmp_path / "src.hdf5", tmp_path / "v", block_bytes=1 << 16,
                        progress=lambda done, total: calls.append(done))  # fmt: skip
    assert len(calls) > 2  # several blocks, cut inside episodes
    want = [(0, *e) for e in _walk(data["terminals"], data["timeouts"], data["rewards"])]
    assert _episodes(vault) == want
    assert len(vault.episodes(include_open=True)) == len(want)  # the last step ends one
    got = vault.read_numpy()
    for key, value in data.items():
        assert got[key].dtype == value.dtype
        np.testing.assert_array_equal(got[key][0], value, err_msg=key)
    for i in (0, 1, len(want) // 2, len(want) - 1):
        _, start, length, _, _ = want[i]
        ep = vault.read_episode(i)
        np.testing.assert_array_equal(ep["observations"][:, 0], np.arange(start, start + length))


# -------------------------------------------------- OGBench: the validation vault on failure
@pytest.fixture(scope="module")
def ogbench_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ogbench")
    write_ogbench(root / "maze.npz", [3, 0, 4])
    write_ogbench(root / "maze-val.npz", [2, 1], seed=1)
    return root / "maze.npz"


def test_an_ogbench_import_that_fails_leaves_no_validation_vault(
    ogbench_file: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "maze"

    def intruder(done: int, total: int) -> None:
        # another process writes at dest while the import runs (after its last block)
        if done == total and not dest.exists():
            dest.mkdir()
            (dest / "theirs.txt").write_text("not yours")

    with pytest.raises(VaultExistsError):
        import_ogbench(ogbench_file, dest, progress=intruder)
    assert (dest / "theirs.txt").read_text() == "not yours"  # left as it was
    with pytest.raises(VaultNotFoundError):
        Vault.open(tmp_path / "maze-val")


def test_the_import_command_refuses_an_existing_validation_destination(
    ogbench_file: Path, tmp_path: Path
) -> None:
    example = {"observations": np.zeros(2, np.float32)}
    with Vault.create(tmp_path / "maze-val", example, rows=1) as v:
        v.append({"observations": np.arange(6, dtype=np.float32).reshape(1, 3, 2)})
    result = _cli("import", "ogbench", ogbench_file, "--out", tmp_path / "maze")
    assert result.exit_code != 0
    assert "maze-val" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["maze-val"]  # nothing else left
    kept = Vault.open(tmp_path / "maze-val")
    assert kept.leaf_names == ["observations"]
    np.testing.assert_array_equal(
        kept.read_numpy()["observations"], np.arange(6, dtype=np.float32).reshape(1, 3, 2)
    )


# ------------------------------------------------------- an import killed half-way (SIGKILL)
CHILD = """
import sys, time
from vault import parse_location
from vault.converters import import_d4rl

src, dest = sys.argv[1], sys.argv[2]
if dest.startswith("s3://"):
    dest = parse_location(dest, {"lease_seconds": 1.0})

def progress(done, total):
    if 0 < done < total:
        print("half", flush=True)
        time.sleep(120)

import_d4rl(src, dest, block_bytes=1 << 16, progress=progress)
"""


def test_an_import_killed_half_way_leaves_no_vault_and_runs_again(
    tmp_path: Path, vault_url: str
) -> None:
    n, width = 2048, 64  # 256 KiB of observations: several blocks of 64 KiB
    t = np.arange(n)
    data = {
        "observations": (1000.0 * t[:, None] + np.arange(width)).astype(np.float32),
        "actions": (t % 4).astype(np.int64),
        "rewards": np.ones(n, np.float32),
        "terminals": t % 100 == 99,
    }
    src = tmp_path / "src.hdf5"
    with h5py.File(src, "w") as f:
        for key, value in data.items():
            f[key] = value
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}
    child = subprocess.Popen(
        [sys.executable, str(script), str(src), vault_url],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # the child is mid-import, a block or more written
        if line.strip() == "half":
            child.send_signal(signal.SIGKILL)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == -signal.SIGKILL, err[-3000:]
    with pytest.raises(VaultNotFoundError):
        Vault.open(vault_url)
    if vault_url.startswith("s3://"):  # built in place: the abandoned build is there
        assert not parse_location(vault_url).is_empty()
    parent = vault_url.rsplit("/", 1)[0]
    assert [v.location for v in find_vaults(parent)] == []
    # run again (on S3 once the killed writer's lease has run out)
    dest: Any = vault_url
    if vault_url.startswith("s3://"):
        time.sleep(1.5)
        dest = parse_location(vault_url, {"lease_seconds": 1.0})
    vault = import_d4rl(src, dest)
    got = Vault.open(vault_url).read_numpy()
    for key, value in data.items():
        assert got[key].dtype == value.dtype
        np.testing.assert_array_equal(got[key][0], value, err_msg=key)
    assert len(vault.episodes()) == n // 100
    assert verify(vault_url).problems == []
