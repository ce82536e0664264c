"""Trajectory buffer quickstart: sample sequences for a recurrent or multi-step learner, and
keep the whole history in a vault while the buffer only holds the latest steps.

Run: ``python examples/quickstart_trajectory.py`` (``--out PATH``:
where to put the vault, default a temporary directory). Four environments are stepped in a
jitted ``lax.scan`` 32 steps at a time; after each chunk the new steps are appended to the
vault with ``write(block=False)``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import tempfile
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import buffers as fbx
from vault import Vault

ENVS, CHUNK, SEQ, PERIOD, GAMMA = 4, 32, 8, 4, 0.9


def discounted_returns(rewards: jax.Array, dones: jax.Array) -> jax.Array:
    """Returns-to-go inside each sampled sequence ``[batch, SEQ]`` (cut at episode ends)."""

    def back(carry: jax.Array, x: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        r, d = x
        carry = r + GAMMA * carry * (1.0 - d)
        return carry, carry

    _, out = jax.lax.scan(back, jnp.zeros(rewards.shape[0]), (rewards.T, dones.T), reverse=True)
    return out.T


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="vault location (default: a temporary directory)")
    args = parser.parse_args(argv)
    chunks = 4
    path = args.out or tempfile.mkdtemp(prefix="rlvault-trajectory-") + "/vault"
    if os.path.lexists(path):
        parser.error(
            f"{path} already exists; pass another --out, or delete it first "
            f"(rm -r {shlex.quote(path)})"
        )

    buffer = fbx.make_trajectory_buffer(
        add_batch_size=ENVS,
        sample_batch_size=16,
        sample_sequence_length=SEQ,
        period=PERIOD,  # sequences start every 4 steps (overlapping by half)
        min_length_time_axis=SEQ,
        max_length_time_axis=64,  # the buffer keeps the last 64 steps of each environment
    )

    @jax.jit
    def collect(state: Any, t0: jax.Array, key: jax.Array) -> Any:
        """CHUNK steps of a noisy counter: obs is the global step, episodes end at random."""

        def step(t: jax.Array, k: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
            done = jax.random.bernoulli(k, 0.1, (ENVS,))
            ts = {"obs": jnp.full(ENVS, t), "reward": jnp.ones(ENVS), "done": done}
            return t + 1, ts

        _, steps = jax.lax.scan(step, t0, jax.random.split(key, CHUNK))
        return buffer.add(state, jax.tree.map(lambda x: x.swapaxes(0, 1), steps))

    example = {"obs": jnp.int32(0), "reward": jnp.float32(0), "done": jnp.bool_(False)}
    state = buffer.init(example)
    key = jax.random.key(0)
    with Vault.create(path, state, done_leaf="done", reward_leaf="reward") as vault:
        for c in range(chunks):
            key, k = jax.random.split(key)
            state = collect(state, jnp.int32(c * CHUNK), k)
            vault.write(state, block=False)

    batch = jax.jit(buffer.sample)(state, jax.random.key(1))
    obs = np.asarray(batch.experience["obs"])
    returns = discounted_returns(batch.experience["reward"], batch.experience["done"])
    print(f"sampled {obs.shape[0]} sequences of {SEQ} steps; the first: {obs[0].tolist()}")
    print(f"their returns-to-go: {[round(float(x), 2) for x in returns[0]]}")

    history = Vault.open(path).read_numpy(leaves=["obs"])["obs"]
    print(
        f"the buffer holds {buffer.max_length_time_axis} steps per environment, "
        f"the vault all {history.shape[1]}"
    )
    if not args.out:  # say where, so that `vault info PATH` can look at it
        print(f"the vault is in a new temporary folder: {shlex.quote(path)}")
    return {
        "valid": bool(batch.valid.all()),
        "contiguous": bool(np.all(np.diff(obs, axis=1) == 1)),
        "starts_on_period": bool(np.all(obs[:, 0] % PERIOD == 0)),
        "oldest_in_buffer": int(obs.min()),
        "vault_steps": history.shape[1],
        "vault_complete": bool(
            np.array_equal(history, np.tile(np.arange(chunks * CHUNK), (ENVS, 1)))
        ),
        "returns": np.asarray(returns),
        "dones": np.asarray(batch.experience["done"]),
    }


if __name__ == "__main__":
    main()
