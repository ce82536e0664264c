"""Record a vectorised Gymnasium environment (no JAX in the loop) into a vault.

Run: ``python examples/record_gymnasium.py`` (needs ``pip install gymnasium``; ``--out PATH``:
where to put the vault, default a new temporary directory; an existing PATH is refused).

Four CartPole environments are stepped by a ``SyncVectorEnv`` with a balancing rule and
10 % to 70 % random actions (one level per environment).
Steps are gathered in numpy and appended every 50 steps with ``vault.append(arrays)``
(arrays ``[envs, steps, ...]``), with the episode index on: ``terminated`` ends an episode,
``truncated`` marks the time limit. With ``autoreset_mode=SAME_STEP`` the observation returned
with a finished episode is already the next episode's first, so every recorded step is
``(observation acted on, action, reward, terminated, truncated)``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import tempfile
from typing import Any

import gymnasium as gym
import numpy as np

from vault import Vault, parse_location

ENVS, CHUNK = 4, 50


NOISE = np.array([0.1, 0.3, 0.5, 0.7])  # each environment's share of random actions


def policy(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Push the cart towards where the pole leans (a decent rule), with some random actions."""
    lean = obs[:, 2] + 0.5 * obs[:, 3]
    action = (lean > 0).astype(np.int64)
    random = rng.random(len(obs)) < NOISE
    return np.where(random, rng.integers(0, 2, len(obs)), action)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="vault location (default: a temporary directory)")
    args = parser.parse_args(argv)
    chunks = 6
    path = args.out or tempfile.mkdtemp(prefix="rlvault-gym-") + "/vault"
    if os.path.lexists(path) if "://" not in path else not parse_location(path).is_empty():
        parser.error(
            f"{path} already exists; pass another --out, or delete it first "
            f"(rm -r {shlex.quote(path)})"
        )

    envs = gym.make_vec(
        "CartPole-v1",
        num_envs=ENVS,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    rng = np.random.default_rng(0)
    obs, _ = envs.reset(seed=0)
    one_step: dict[str, np.ndarray] = {  # one timestep of one environment: shapes, dtypes
        "obs": np.zeros(4, np.float32),
        "action": np.zeros((), np.int64),
        "reward": np.zeros((), np.float32),
        "terminated": np.zeros((), bool),
        "truncated": np.zeros((), bool),
    }
    returns: list[float] = []  # finished episodes, as counted here
    running = np.zeros(ENVS)
    with Vault.create(
        path,
        one_step,
        rows=ENVS,
        done_leaf="terminated",
        truncated_leaf="truncated",
        reward_leaf="reward",
        metadata={"env": "CartPole-v1", "policy": "lean rule, 10-70% random"},
    ) as vault:
        for _ in range(chunks):
            steps: dict[str, list[np.ndarray]] = {name: [] for name in one_step}
            for _ in range(CHUNK):
                action = policy(obs, rng)
                next_obs, reward, terminated, truncated, _ = envs.step(action)
                for name, value in zip(
                    one_step, (obs, action, reward, terminated, truncated), strict=True
                ):
                    steps[name].append(np.asarray(value, dtype=one_step[name].dtype))
                running += reward
                for i in np.flatnonzero(terminated | truncated):
                    returns.append(float(running[i]))
                    running[i] = 0.0
                obs = next_obs
            vault.append({name: np.stack(v, axis=1) for name, v in steps.items()})
    envs.close()

    saved = Vault.open(path)
    table = saved.episodes()
    print(f"recorded {saved.committed_length} steps x {saved.rows} environments")
    print(f"episodes: {len(table)} in the vault's index, {len(returns)} counted while stepping")
    print(
        f"mean return {table.returns.mean():.1f} (best {table.returns.max():.0f}); "
        f"{int(table.truncated.sum())} hit the time limit"
    )
    if not args.out:  # say where, so that `vault info PATH` can look at it
        print(f"the vault is in a new temporary folder: {shlex.quote(path)}")
    return {
        "committed_length": saved.committed_length,
        "steps": chunks * CHUNK,
        "episodes": len(table),
        "returns_counted": sorted(returns),
        "returns_indexed": sorted(table.returns.tolist()),
        "lengths_equal_returns": bool(np.array_equal(table.length, table.returns)),
        "path": path,
    }


if __name__ == "__main__":
    main()
