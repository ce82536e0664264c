"""Datasets in foreign formats, written by their own libraries, for the converter tests.

* :func:`write_flashbax`: a vault written by Flashbax 0.1.3 itself (its trajectory buffer and
  ``flashbax.vault.Vault``), adding one timestep per call and writing every few, so that the
  buffer's ring wraps between writes; returns the data it handed over, ``[rows, T, ...]``.
* :func:`write_d4rl`: a D4RL-style HDF5 file written with h5py.
* :func:`write_minari`: a Minari dataset recorded with Minari's ``DataCollector`` on a
  Gymnasium environment (a registered toy one with Dict/Tuple spaces, or CartPole).

Values are a function of (row, timestep, leaf), so every leaf of every timestep differs.
"""

from __future__ import annotations

import contextlib
import gc
import io
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


def step_value(shape: tuple[int, ...], dtype: Any, rows: int, t: int, salt: int) -> np.ndarray:
    """Timestep ``t`` of a leaf for every row: ``[rows, *shape]``, distinct per row/t/leaf."""
    size = int(np.prod(shape)) if shape else 1
    base = (np.arange(rows)[:, None] * 7919 + t * 131 + salt * 17 + np.arange(size)[None]) % 251
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        out = (base % 3 == 0) if salt % 2 else (base % 5 == 1)
    elif dtype.kind == "f":
        out = base.astype(dtype) / 8 - t * 0.5
    else:
        out = base.astype(dtype)
    return out.reshape((rows, *shape))


def _tree_of(spec: Any, fn: Callable[[tuple[int, ...], Any, int], Any], salt: list[int]) -> Any:
    if isinstance(spec, dict):
        return {k: _tree_of(v, fn, salt) for k, v in spec.items()}
    if isinstance(spec, tuple) and hasattr(type(spec), "_fields"):
        return type(spec)(*(_tree_of(v, fn, salt) for v in spec))
    shape, dtype = spec
    salt[0] += 1
    return fn(shape, dtype, salt[0])


def write_flashbax(
    rel_dir: Path,
    name: str,
    spec: Any,
    *,
    rows: int,
    capacity: int,
    steps: int,
    write_every: int,
    compression: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
) -> tuple[Path, Any]:
    """Write a Flashbax vault ``rel_dir/name/uid`` with Flashbax 0.1.3; ``spec`` is a tree of
    ``(shape, dtype)`` (dicts and NamedTuples). Returns its directory and the expected data
    (the same tree of numpy ``[rows, steps, ...]``)."""
    import flashbax as fbx
    import jax
    import jax.numpy as jnp
    from flashbax.vault import Vault as FbxVault

    example = _tree_of(spec, lambda s, d, _: jnp.zeros(s, d), [0])
    buf = fbx.make_trajectory_buffer(
        add_batch_size=rows,
        sample_batch_size=1,
        sample_sequence_length=1,
        period=1,
        min_length_time_axis=1,
        max_length_time_axis=capacity,
    )
    add = jax.jit(buf.add)
    state = buf.init(example)
    with contextlib.redirect_stdout(io.StringIO()):  # Flashbax prints
        vault = FbxVault(
            name,
            state.experience,
            rel_dir=str(rel_dir),
            vault_uid="uid",
            compression=compression,
            metadata=metadata,
        )
        for t in range(steps):
            batch = _tree_of(spec, lambda s, d, k, t=t: step_value(s, d, rows, t, k)[:, None], [0])
            state = add(state, jax.tree.map(jnp.asarray, batch))
            if (t + 1) % write_every == 0 or t + 1 == steps:
                vault.write(state)
    expected = _tree_of(
        spec,
        lambda s, d, k: np.stack([step_value(s, d, rows, t, k) for t in range(steps)], axis=1),
        [0],
    )
    return rel_dir / name / "uid", expected


def read_with_flashbax(path: Path) -> Any:
    """What Flashbax's own ``Vault.read()`` returns for the vault at ``path`` (numpy)."""
    import jax
    from flashbax.vault import Vault as FbxVault

    with contextlib.redirect_stdout(io.StringIO()):
        vault = FbxVault(path.parent.name, rel_dir=str(path.parent.parent), vault_uid=path.name)
    return jax.tree.map(np.asarray, vault.read().experience)


# ----------------------------------------------------------------------------------- D4RL
def write_d4rl(
    path: Path,
    lengths: list[int],
    *,
    last_open: bool = True,
    timeouts_every: int = 3,
    obs_shape: tuple[int, ...] = (5,),
    infos: bool = True,
    next_observations: bool = True,
) -> dict[str, np.ndarray]:
    """A D4RL-style file of episodes of ``lengths`` concatenated: every ``timeouts_every``-th
    episode ends by a timeout, the others by a terminal; with ``last_open`` the last one ends
    with neither. Returns the arrays written."""
    import h5py

    n = sum(lengths)
    t = np.arange(n)
    data = {
        "observations": step_value(obs_shape, np.float32, n, 0, 1).reshape(n, *obs_shape)
        + t.reshape(-1, *([1] * len(obs_shape))),
        "actions": step_value((2,), np.float32, n, 0, 2),
        "rewards": (t % 7).astype(np.float32) - 2.5,
        "terminals": np.zeros(n, bool),
        "timeouts": np.zeros(n, bool),
    }
    if next_observations:
        data["next_observations"] = data["observations"] + 0.5
    if infos:
        data["infos/qpos"] = step_value((3,), np.float64, n, 0, 3)
        data["infos/goal/xy"] = step_value((2,), np.int32, n, 0, 4)
    end = 0
    for i, length in enumerate(lengths):
        end += length
        if i == len(lengths) - 1 and last_open:
            break
        key = "timeouts" if (i + 1) % timeouts_every == 0 else "terminals"
        data[key][end - 1] = True
    with h5py.File(path, "w") as f:
        for key, value in data.items():
            f.create_dataset(key, data=value, chunks=True, compression="gzip")
        f.create_dataset("metadata/algorithm", data="SAC")
    return data


# --------------------------------------------------------------------------------- Minari
TOY_ID = "RlvaultToy-v0"


class Toy(gym.Env):  # type: ignore[misc]
    """Dict (with a nested Tuple) observations, a Box action; episodes of 3-9 steps."""

    observation_space = spaces.Dict(
        {
            "pos": spaces.Box(-10, 10, (3,), np.float32),
            "pair": spaces.Tuple((spaces.Discrete(5), spaces.Box(0, 255, (4, 4), np.uint8))),
        }
    )
    action_space = spaces.Box(-1, 1, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        self.limit = int(self.np_random.integers(3, 10))
        return self._obs(), {}

    def _obs(self) -> Any:
        r = self.np_random
        return {
            "pos": r.uniform(-1, 1, 3).astype(np.float32) + self.t,
            "pair": (int(r.integers(0, 5)), r.integers(0, 256, (4, 4)).astype(np.uint8)),
        }

    def step(self, action: Any) -> Any:
        self.t += 1
        terminated = self.t == self.limit and self.limit % 2 == 0
        truncated = self.t == self.limit and not terminated
        return self._obs(), float(action.sum() + self.t), terminated, truncated, {}


def _register_toy() -> None:
    if TOY_ID not in gym.registry:
        gym.register(TOY_ID, entry_point=f"{__name__}:Toy")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():  # Minari warns about missing authors, eval_env, ...
        warnings.simplefilter("ignore")
        yield


def write_minari(
    dataset_id: str, data_format: str, *, env_id: str, steps: int, seed: int, **create: Any
) -> Any:
    """Record ``steps`` steps of ``env_id`` (random actions) with Minari's DataCollector into
    dataset ``dataset_id`` (under ``MINARI_DATASETS_PATH``; ``create``: more arguments of
    ``create_dataset``, e.g. ``author``); returns ``minari.load_dataset`` of it."""
    import minari
    from minari import DataCollector

    _register_toy()
    with _quiet():
        env = DataCollector(gym.make(env_id), data_format=data_format)
        env.action_space.seed(seed)
        env.reset(seed=seed)
        for _ in range(steps):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
        options = {"algorithm_name": "random", "description": "test", **create}
        env.create_dataset(dataset_id, **options)
        env.close()
        del env  # its temporary directories are finalised (with a ResourceWarning) here
        gc.collect()
        return minari.load_dataset(dataset_id)


# -------------------------------------------------------------------------------- OGBench
def write_ogbench(
    path: Path,
    lengths: list[int],
    *,
    visual: bool = False,
    info: bool = True,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """An OGBench dataset file in OGBench's layout (``np.savez_compressed``, the dtypes of its
    data-generation scripts): trajectories of ``lengths`` transitions, each ``length + 1``
    states with ``terminals`` set at the last; float32 (or, ``visual``, uint8 frame)
    observations, float32 actions, bool terminals, and with ``info`` float32 ``qpos``/``qvel``
    and int64 ``button_states``. Returns the arrays written."""
    rng = np.random.default_rng(seed)
    n = sum(length + 1 for length in lengths)
    terminals = np.zeros(n, bool)
    terminals[np.cumsum([length + 1 for length in lengths]) - 1] = True
    data = {
        "observations": rng.integers(0, 256, (n, 6, 6, 3)).astype(np.uint8)
        if visual
        else rng.normal(size=(n, 5)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
        "terminals": terminals,
    }
    if info:
        data["qpos"] = rng.normal(size=(n, 4)).astype(np.float32)
        data["qvel"] = rng.normal(size=(n, 4)).astype(np.float32)
        data["button_states"] = rng.integers(0, 2, (n, 3)).astype(np.int64)
    np.savez_compressed(path, **data)
    return data


# ----------------------------------------------------------------------------------- RLDS
def write_rlds(
    data_dir: Path,
    episodes: dict[str, list[int]],
    *,
    file_format: str = "array_record",
    image: tuple[int, int] = (6, 8),
    steps_of: Callable[[int, int, int], dict[str, Any]] | None = None,
    features: dict[str, Any] | None = None,
    num_shards: int | None = None,
) -> Path:
    """An RLDS dataset built by TFDS itself (a ``GeneratorBasedBuilder``; no TensorFlow: images
    are handed to TFDS as Pillow images, which it encodes with Pillow): for each split, episodes
    of the given numbers of steps with a JPEG ``observation/image``, a PNG
    ``observation/depth``, a float32 ``observation/state``, ``action``, ``reward``,
    ``discount``, the three RLDS flags (every other episode terminal, the rest truncated), a
    ``language_instruction`` Text and ``episode_metadata``. ``steps_of(split seed, episode,
    steps)`` and ``features`` (of a step; then no episode metadata) may replace them. Returns
    the dataset's directory."""
    import tensorflow_datasets as tfds
    from PIL import Image

    h, w = image
    step = {
        "observation": tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(h, w, 3), encoding_format="jpeg"),
            "depth": tfds.features.Image(shape=(h, w, 1), encoding_format="png"),
            "state": tfds.features.Tensor(shape=(4,), dtype=np.float32),
        }),
        "action": tfds.features.Tensor(shape=(2,), dtype=np.float32),
        "reward": tfds.features.Scalar(dtype=np.float32),
        "discount": tfds.features.Scalar(dtype=np.float32),
        "is_first": tfds.features.Scalar(dtype=np.bool_),
        "is_last": tfds.features.Scalar(dtype=np.bool_),
        "is_terminal": tfds.features.Scalar(dtype=np.bool_),
        "language_instruction": tfds.features.Text(),
    }  # fmt: skip

    def steps_default(seed: int, e: int, n: int) -> dict[str, Any]:
        rng = np.random.default_rng([seed, e])
        return {
            "steps": [
                {
                    "observation": {
                        "image": Image.fromarray(rng.integers(0, 256, (h, w, 3), np.uint8)),
                        "depth": Image.fromarray(rng.integers(0, 256, (h, w), np.uint8)),
                        "state": rng.normal(size=4).astype(np.float32),
                    },
                    "action": rng.normal(size=2).astype(np.float32),
                    "reward": np.float32(t - e),
                    "discount": np.float32(1.0),
                    "is_first": t == 0,
                    "is_last": t == n - 1,
                    "is_terminal": t == n - 1 and e % 2 == 0,
                    "language_instruction": f"episode {e}",
                }
                for t in range(n)
            ],
            "episode_metadata": {"file_path": f"/episodes/{e}"},
        }

    make = steps_of or steps_default

    class RldsToy(tfds.core.GeneratorBasedBuilder, skip_registration=True):  # type: ignore[misc]
        VERSION = tfds.core.Version("1.0.0")

        def _info(self) -> Any:
            top = {"steps": tfds.features.Dataset(features or step)}
            if features is None:
                meta = tfds.features.FeaturesDict({"file_path": tfds.features.Text()})
                top["episode_metadata"] = meta
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(top))

        def _split_generators(self, dl_manager: Any) -> Any:
            return {
                name: self._generate_examples(i, lengths)
                for i, (name, lengths) in enumerate(episodes.items())
            }

        def _generate_examples(self, seed: int, lengths: list[int]) -> Any:
            for e, n in enumerate(lengths):
                yield f"{e:06d}", make(seed, e, n)

    builder = RldsToy(data_dir=str(data_dir), file_format=file_format)
    config = tfds.download.DownloadConfig(
        num_shards=num_shards, compute_stats=tfds.download.ComputeStatsMode.SKIP
    )
    with _quiet(), contextlib.redirect_stderr(io.StringIO()):
        builder.download_and_prepare(download_config=config)
    return Path(builder.data_dir)
