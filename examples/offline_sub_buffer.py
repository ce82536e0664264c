"""Load parts of a vault as buffers and sample from them offline.

Run: ``python examples/offline_sub_buffer.py`` (``--out DIR``: where to put the vaults
``walks`` and ``best``, default a new temporary directory; existing ones are refused). It
records a random walk into a vault, then

1. reads a block of rows and time (``vault.read(rows=, start=, stop=)``) as a trajectory
   buffer state and samples sequences from it;
2. keeps the best quarter of the episodes (``vault.episodes().select(top_k=...)``), copies them
   into a new vault (``derive_episodes``) and samples windows that never cross an episode end
   with ``make_episode_buffer(...).from_state(...)``;
3. walks the whole vault in shuffled windows (``vault.iter_windows``, read ahead in the
   background), one sub-buffer at a time.
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
import vault
from vault import Vault

ROWS, SEQ = 8, 8


def random_walk(steps: int, key: jax.Array) -> dict[str, jax.Array]:
    """``ROWS`` walks on [-5, 5] from 0; an episode ends at either end. Reward: +1 for
    reaching +5, -0.02 for every other step (quick successes have the highest returns)."""

    def step(pos: jax.Array, k: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        new = pos + 2 * jax.random.bernoulli(k, 0.5, pos.shape).astype(jnp.int32) - 1
        done = jnp.abs(new) == 5
        reward = jnp.where(new == 5, 1.0, -0.02).astype(jnp.float32)
        ts = {"pos": pos, "reward": reward, "done": done}
        return jnp.where(done, 0, new), ts

    _, out = jax.lax.scan(step, jnp.zeros(ROWS, jnp.int32), jax.random.split(key, steps))
    out = jax.tree.map(lambda x: x.swapaxes(0, 1), out)  # [rows, steps]
    out["t"] = jnp.broadcast_to(jnp.arange(steps, dtype=jnp.int32), (ROWS, steps))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="directory for the vaults (default: a temporary one)")
    args = parser.parse_args(argv)
    steps = 1024
    root = args.out or tempfile.mkdtemp(prefix="rlvault-sub-")
    taken = [p for p in (f"{root}/walks", f"{root}/best") if os.path.lexists(p)]
    if taken:  # every one named, so that one deletion makes the next run work
        parser.error(
            f"{' and '.join(taken)} already exist{'s' if len(taken) == 1 else ''}; pass another "
            f"--out, or delete {'it' if len(taken) == 1 else 'them'} first "
            f"(rm -r {' '.join(shlex.quote(p) for p in taken)})"
        )

    data = jax.jit(random_walk, static_argnums=0)(steps, jax.random.key(0))
    one_step = jax.tree.map(lambda x: x[0, 0], data)
    with Vault.create(
        f"{root}/walks", one_step, rows=ROWS, done_leaf="done", reward_leaf="reward"
    ) as v:
        v.append(data)  # [rows, steps] arrays; a buffer state works too (v.write)
    walks = Vault.open(f"{root}/walks")

    # 1. Rows 0-3, time [256, 768): a trajectory buffer state of 4 rows x 512 steps.
    sub = walks.read(rows=[0, 1, 2, 3], start=256, stop=768)
    buffer = fbx.make_trajectory_buffer(
        add_batch_size=4,
        sample_batch_size=32,
        sample_sequence_length=SEQ,
        period=1,
        min_length_time_axis=SEQ,
        max_length_time_axis=512,
    )
    batch = jax.jit(buffer.sample)(sub, jax.random.key(1))
    t = np.asarray(batch.experience["t"])
    print(f"1. sub-buffer {sub.experience['t'].shape}: sampled times {t.min()}..{t.max()}")

    # 2. The best quarter of the episodes (highest returns), copied into a one-row vault.
    table = walks.episodes()
    best = table.select(top_k=len(table) // 4)
    best_vault = vault.derive_episodes(walks, f"{root}/best", best)
    episodes = fbx.make_episode_buffer(
        add_batch_size=1,
        sample_batch_size=64,
        sample_sequence_length=SEQ,
        min_length_time_axis=SEQ,
        max_length_time_axis=best_vault.committed_length,
        episode_end="done",
    )
    state = jax.jit(episodes.from_state)(best_vault.read())  # episode steps rebuilt from done
    windows = jax.jit(episodes.sample)(state, jax.random.key(2))
    done = np.asarray(windows.experience["done"])
    print(
        f"2. {len(best)} of {len(table)} episodes, {best.transitions} steps; "
        f"windows crossing an episode end: {int(done[:, :-1].any(axis=1).sum())}"
    )

    # 3. The whole vault, 256 steps at a time in a shuffled order, one sub-buffer each.
    window_buffer = fbx.make_trajectory_buffer(
        add_batch_size=ROWS,
        sample_batch_size=32,
        sample_sequence_length=SEQ,
        period=1,
        min_length_time_axis=SEQ,
        max_length_time_axis=256,
    )
    sample = jax.jit(window_buffer.sample)
    seen, valid = [], []
    with walks.iter_windows(256, shuffle=True, seed=0) as stream:
        for i, window in enumerate(stream):
            part = sample(window, jax.random.key(10 + i))  # e.g. one training epoch's batches
            seen.append(int(window.experience["t"][0, 0]))
            valid.append(bool(part.valid.all()))
    shown = ", ".join(map(str, seen[:6])) + (", ..." if len(seen) > 6 else "")
    print(f"3. {len(seen)} windows of 256 steps, starting at {shown}")
    if not args.out:  # say where, so that `vault info PATH` can look at them
        print(f"the vaults walks and best are in a new temporary folder: {shlex.quote(root)}")
    return {
        "sub_times": (int(t.min()), int(t.max())),
        "sub_valid": bool(batch.valid.all()),
        "episodes": len(table),
        "best": len(best),
        "best_min_return": float(best.returns.min()),
        "best_steps": best_vault.committed_length,
        "best_transitions": best.transitions,
        "crossing": int(done[:, :-1].any(axis=1).sum()),
        "episode_valid": bool(windows.valid.all()),
        "window_starts": seen,
        "windows_valid": all(valid),
        "all_returns": table.returns,
    }


if __name__ == "__main__":
    main()
