"""Flat buffer quickstart: add transitions one step at a time, sample (s, s') pairs, save them
to a vault and sample again from what was read back.

Run: ``python examples/quickstart_flat.py`` (``--out PATH``: where to put the vault, default a
new temporary directory; an existing PATH is refused).
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

ENVS = 4


def timestep(t: int) -> dict[str, jax.Array]:
    """Environment ``i`` at step ``t`` observes ``[i, t]``; every 8th step ends an episode."""
    return {
        "obs": jnp.stack([jnp.arange(ENVS), jnp.full(ENVS, t)], axis=1).astype(jnp.float32),
        "reward": jnp.full(ENVS, t % 2, jnp.float32),
        "done": jnp.full(ENVS, t % 8 == 7),
    }


def consecutive(pairs: Any) -> bool:
    """Every sampled pair is one environment at steps t and t + 1."""
    first, second = np.asarray(pairs.first["obs"]), np.asarray(pairs.second["obs"])
    return bool(np.all(first[:, 0] == second[:, 0]) and np.all(second[:, 1] == first[:, 1] + 1))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="vault location (default: a temporary directory)")
    args = parser.parse_args(argv)
    steps = 96
    path = args.out or tempfile.mkdtemp(prefix="rlvault-flat-") + "/vault"
    if os.path.lexists(path):
        parser.error(
            f"{path} already exists; pass another --out, or delete it first "
            f"(rm -r {shlex.quote(path)})"
        )

    # 4 rows of 64 timesteps; `add` takes one timestep of every environment ([4, ...]).
    buffer = fbx.make_flat_buffer(
        max_length=ENVS * 64, min_length=16, sample_batch_size=32, add_batch_size=ENVS
    )
    add = jax.jit(buffer.add, donate_argnums=0)  # updates the state in place
    sample = jax.jit(buffer.sample)
    state = buffer.init(jax.tree.map(lambda x: x[0], timestep(0)))  # one env's timestep

    with Vault.create(path, state, done_leaf="done", reward_leaf="reward") as vault:
        for t in range(steps):
            state = add(state, timestep(t))
            if (t + 1) % 16 == 0:
                vault.write(state)  # appends only the 16 steps added since the last write

    batch = sample(state, jax.random.key(0))
    print(f"{fbx.timesteps_added(state)} steps added; the buffer holds the last 64 per row")
    print(
        f"sampled pairs: obs {batch.experience.first['obs'][0].tolist()} -> "
        f"{batch.experience.second['obs'][0].tolist()}; all valid: {bool(batch.valid.all())}"
    )

    saved = Vault.open(path)
    offline = saved.read(capacity=buffer.max_length_time_axis)  # the last 64 steps per row
    again = sample(offline, jax.random.key(1))  # same buffer functions, same compiled code
    print(f"vault: {saved.committed_length} steps per row, {len(saved.episodes())} episodes")
    if not args.out:  # say where, so that `vault info PATH` can look at it
        print(f"the vault is in a new temporary folder: {shlex.quote(path)}")
    return {
        "steps": steps,
        "valid": bool(batch.valid.all()),
        "consecutive": consecutive(batch.experience),
        "committed_length": saved.committed_length,
        "episodes": len(saved.episodes()),
        "offline_valid": bool(again.valid.all()),
        "offline_consecutive": consecutive(again.experience),
        "offline_min_t": float(np.asarray(again.experience.first["obs"])[:, 1].min()),
    }


if __name__ == "__main__":
    main()
