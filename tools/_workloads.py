"""Workloads shared by the benchmark scripts in ``tools/``: the experience that
``bench_vault``, ``bench_streaming`` and the recording benchmark write and read.

Two experience shapes, each ``{obs, action: int32, reward: float32, done: bool}``:

* ``image``: ``obs`` uint8 ``(84, 84, 3)`` Atari-like frames: per "game" a static tiled
  playfield rendered at 2x and area-downscaled (blended edges), a scrolling band, an animated
  "water" band, a few moving sprites and a score counter. Frames are pre-generated into a pool
  (:func:`make_frame_pool`) and each row walks through its game's frames from its own offset,
  so consecutive steps of a row are consecutive frames and rows differ (zstd-3 ratio about
  14x, gzip-5 about 11x);
* ``vector``: ``obs`` float32 ``(64,)`` smooth random walks.

Actions are uniform ints in [0, 18), rewards sparse (2 % non-zero) and ``done`` occasional
(0.2 %). The data is deterministic: two :class:`DataSource` objects with the same arguments
yield the same batches, so both libraries store identical data.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

VARIANTS = ("image", "vector")
FRAME_SHAPE = (84, 84, 3)
VECTOR_SIZE = 64
N_ACTIONS = 18

_DIGITS = (
    "111101101101111",
    "010110010010111",
    "111001111100111",
    "111001111001111",
    "101101111001001",
    "111100111001111",
    "111100111101111",
    "111001001001001",
    "111101111101111",
    "111101111001111",
)
_FONT = np.array([[c == "1" for c in d] for d in _DIGITS], bool).reshape(10, 5, 3)


def make_frame_pool(games: int, frames: int, seed: int = 0) -> np.ndarray:
    """``[games, frames, 84, 84, 3]`` uint8 Atari-like frames (see the module docstring).

    Each frame is drawn at 2x resolution in float32 and averaged over 2x2 blocks, like the
    usual Atari preprocessing, so sprite edges blend into the background.
    """
    rng = np.random.default_rng(seed)
    h, w, _ = FRAME_SHAPE
    hh, ww = 2 * h, 2 * w
    pool = np.empty((games, frames, *FRAME_SHAPE), np.uint8)
    hi = np.empty((hh, ww, 3), np.float32)
    for g in range(games):
        palette = rng.integers(0, 256, (10, 3)).astype(np.float32)
        tiles = rng.integers(1, 6, (hh // 6, ww // 6))
        tiles[rng.random(tiles.shape) > 0.35] = 0
        tiles[:4] = 0
        background = palette[np.kron(tiles, np.ones((6, 6), int))]
        background[hh - 24 :] = palette[6] + rng.integers(0, 4, (24, ww))[..., None] * 6.0
        background += rng.integers(0, 2, (hh, ww))[..., None] * 8.0  # static dithering
        band = palette[np.kron(rng.integers(7, 10, (3, ww // 4)), np.ones((6, 4), int))]
        water = palette[1:9] * 0.5 + 60.0
        n_sprites = 6
        pos = rng.uniform([30, 6], [hh - 40, ww - 20], (n_sprites, 2))
        vel = rng.uniform(-2.5, 2.5, (n_sprites, 2))
        sizes = rng.integers(4, 16, (n_sprites, 2))
        colors = palette[rng.integers(1, 10, n_sprites)]
        score = 0
        for f in range(frames):
            hi[:] = background
            hi[40:58] = np.roll(band, f, axis=1)  # scrolling band
            ripples = rng.integers(0, 8, (20, ww // 2))  # animated water, 2x2 texels
            hi[60:100] = water[ripples].repeat(2, axis=0).repeat(2, axis=1)
            for s in range(n_sprites):
                pos[s] += vel[s]
                for d, limit in enumerate((hh, ww)):
                    if not 24 <= pos[s, d] <= limit - 30:
                        vel[s, d] *= -1
                        pos[s, d] = np.clip(pos[s, d], 24, limit - 30)
                y, x = int(pos[s, 0]), int(pos[s, 1])
                hi[y : y + sizes[s, 0], x : x + sizes[s, 1]] = colors[s]
            if rng.random() < 0.03:
                score += int(rng.integers(1, 5)) * 10
            for i, ch in enumerate(f"{score:05d}"):
                mask = np.kron(_FONT[int(ch)], np.ones((3, 3), bool))
                hi[4:19, 96 + 12 * i : 105 + 12 * i][mask] = palette[0] + 120.0
            down = hi.reshape(h, 2, w, 2, 3).mean(axis=(1, 3))
            pool[g, f] = np.clip(down, 0, 255).astype(np.uint8)
    return pool


def example_timestep(variant: str) -> dict[str, np.ndarray]:
    """One timestep (no batch or time axis) of the variant's experience."""
    if variant == "image":
        obs = np.zeros(FRAME_SHAPE, np.uint8)
    else:
        obs = np.zeros((VECTOR_SIZE,), np.float32)
    return {
        "obs": obs,
        "action": np.zeros((), np.int32),
        "reward": np.zeros((), np.float32),
        "done": np.zeros((), np.bool_),
    }


def step_nbytes(variant: str) -> int:
    """Raw bytes of one timestep of one row (all leaves)."""
    return sum(int(x.nbytes) for x in example_timestep(variant).values())


class DataSource:
    """Deterministic batches ``[rows, steps, ...]``; two sources with the same arguments yield
    the same sequence (so both libraries store identical data)."""

    def __init__(self, variant: str, rows: int, pool: np.ndarray | None, seed: int = 1) -> None:
        self.variant = variant
        self.rows = rows
        self.pool = pool
        self.seed = seed
        self.t = 0
        rng = np.random.default_rng([seed, 12345])
        if pool is not None:
            games, frames = pool.shape[:2]
            self.games = np.arange(rows) % games
            self.offsets = (np.arange(rows) * 97 + rng.integers(0, frames, rows)) % frames
        self.walk = rng.standard_normal((rows, VECTOR_SIZE)).astype(np.float32)

    def next(self, steps: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([self.seed, self.t])
        shape = (self.rows, steps)
        if self.variant == "image":
            assert self.pool is not None
            frames = self.pool.shape[1]
            idx = (self.offsets[:, None] + self.t + np.arange(steps)[None, :]) % frames
            obs = self.pool[self.games[:, None], idx]
        else:
            noise = rng.standard_normal((*shape, VECTOR_SIZE), dtype=np.float32)
            obs = self.walk[:, None, :] + np.cumsum(noise * np.float32(0.05), axis=1)
            self.walk = obs[:, -1].copy()
        reward_values = rng.choice(np.array([-1.0, 1.0, 10.0], np.float32), shape)
        batch = {
            "obs": obs,
            "action": rng.integers(0, N_ACTIONS, shape, dtype=np.int32),
            "reward": np.where(rng.random(shape) < 0.02, reward_values, np.float32(0)),
            "done": rng.random(shape) < 0.002,
        }
        self.t += steps
        return batch


def make_trajectory_buffer(module: ModuleType, rows: int, time_axis: int) -> Any:
    """The benchmarks' trajectory buffer of ``module`` (rlvault's ``buffers`` or Flashbax):
    ``rows`` rows, a ``time_axis``-step time axis, samples of one timestep."""
    return module.make_trajectory_buffer(
        add_batch_size=rows,
        sample_batch_size=1,
        sample_sequence_length=1,
        period=1,
        min_length_time_axis=1,
        max_length_time_axis=time_axis,
    )


def frame_steps(rows: int, n_steps: int, games: int, frames: int, seed: int = 0) -> np.ndarray:
    """``[n_steps, rows, 84, 84, 3]`` uint8: the image workload's frames, step by step (each
    row walks through the frames of one game from its own offset)."""
    pool = make_frame_pool(games, frames, seed)
    obs = DataSource("image", rows, pool).next(n_steps)["obs"]  # [rows, n_steps, ...]
    return np.ascontiguousarray(obs.swapaxes(0, 1))
