"""Buffers quickstart: collect experience in a jitted, scanned loop and sample from it.

Run: ``python examples/quickstart.py`` (a few seconds; the tests run it as it is).
It fills a flat buffer, a trajectory buffer and a prioritised trajectory buffer from a toy
random-walk environment stepped inside ``jax.lax.scan`` with 8 parallel environments, samples
from each, updates priorities, and prints what it saw.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

import buffers as fbx


def env_step(pos: jax.Array, key: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """A random walk on [-5, 5]; reaching either end terminates and resets to 0."""
    action = jax.random.randint(key, pos.shape, 0, 2)
    new_pos = pos + 2 * action - 1
    done = jnp.abs(new_pos) >= 5
    reward = jnp.where(new_pos >= 5, 1.0, 0.0).astype(jnp.float32)
    timestep = {"obs": pos.astype(jnp.float32), "action": action, "reward": reward, "done": done}
    return jnp.where(done, 0, new_pos), timestep


def main() -> dict[str, float]:
    num_envs, steps = 8, 64
    example = {
        "obs": jnp.float32(0),
        "action": jnp.int32(0),
        "reward": jnp.float32(0),
        "done": jnp.bool_(False),
    }
    flat = fbx.make_flat_buffer(
        max_length=num_envs * 512, min_length=64, sample_batch_size=32, add_batch_size=num_envs
    )
    traj = fbx.make_trajectory_buffer(
        add_batch_size=num_envs,
        sample_batch_size=16,
        sample_sequence_length=8,
        period=4,
        min_length_time_axis=16,
        max_length_time_axis=512,
    )
    prio = fbx.make_prioritised_trajectory_buffer(num_envs, 16, 8, 4, 16, max_length_time_axis=512)

    @jax.jit
    def collect(key: jax.Array) -> tuple[tuple, dict[str, jax.Array]]:
        def body(carry, k):
            pos, states = carry
            pos, ts = env_step(pos, k)
            one_step = jax.tree.map(lambda x: x[:, None], ts)  # [envs, 1] for sequence buffers
            states = (
                flat.add(states[0], ts),
                traj.add(states[1], one_step),
                prio.add(states[2], one_step),
            )
            return (pos, states), ts["reward"].sum()

        states = (flat.init(example), traj.init(example), prio.init(example))
        (_, states), rewards = jax.lax.scan(
            body, (jnp.zeros(num_envs, jnp.int32), states), jax.random.split(key, steps)
        )
        return states, {"reward_sum": rewards.sum()}

    t0 = time.perf_counter()
    (flat_state, traj_state, prio_state), info = collect(jax.random.key(0))
    jax.block_until_ready(flat_state)
    elapsed = time.perf_counter() - t0
    keys = jax.random.split(jax.random.key(1), 3)

    transitions = jax.jit(flat.sample)(flat_state, keys[0])
    sequences = jax.jit(traj.sample)(traj_state, keys[1])
    prio_sample = jax.jit(prio.sample)(prio_state, keys[2])
    new_priorities = jnp.abs(prio_sample.experience["reward"]).sum(axis=1) + 0.1
    prio_state = jax.jit(prio.set_priorities)(prio_state, prio_sample.indices, new_priorities)

    obs_first = transitions.experience.first["obs"]
    obs_second = transitions.experience.second["obs"]
    moved = jnp.abs(obs_second - obs_first)
    result = {
        "timesteps_added_per_env": float(fbx.timesteps_added(flat_state)),
        "collect_seconds_including_compile": elapsed,
        "total_reward": float(info["reward_sum"]),
        "flat_samples_valid": float(transitions.valid.mean()),
        "flat_mean_abs_step": float(moved.mean()),
        "trajectory_sample_shape": float(sequences.experience["obs"].shape[1]),
        "prioritised_mean_probability": float(prio_sample.probabilities.mean()),
    }
    print(f"collected {steps} steps x {num_envs} envs in {elapsed:.2f}s (incl. compile)")
    print(f"timesteps added per env (write counter): {fbx.timesteps_added(flat_state)}")
    print(f"flat sample: first obs {obs_first[:6].tolist()} -> second {obs_second[:6].tolist()}")
    print(f"trajectory sample: {sequences.experience['obs'].shape} (batch, time)")
    print(f"prioritised sample probabilities: {prio_sample.probabilities[:4].tolist()} ...")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args()  # no options; --help describes the example
    main()
