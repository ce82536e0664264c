"""n-step buffer quickstart: sample (s_t, s_{t+n}) transitions whose rewards are already the
discounted n-step returns, cut at episode ends.

Run: ``python examples/quickstart_n_step.py`` (no options; the tests run it as it is). Experience is
collected by 4 environments inside a jitted ``lax.scan``, ``CHUNK`` steps at a time (an add of
sequences must fit in the buffer's 128 steps per environment); ``n_step_functional_map`` turns
the rewards and discounts of every sampled window into the n-step return and bootstrap factor.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import buffers as fbx

ENVS, N_STEP, GAMMA, EPISODE = 4, 3, 0.9, 5
CAPACITY = 128  # steps per environment the buffer holds
CHUNK = 32  # steps per environment collected and added at a time (at most CAPACITY)


def env_step(t: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Episodes of 5 steps; the reward at step k of an episode is k + 1."""
    k = t % EPISODE
    done = k == EPISODE - 1
    timestep = {
        "obs": k.astype(jnp.float32),
        "reward": (k + 1).astype(jnp.float32),
        "discount": jnp.where(done, 0.0, GAMMA).astype(jnp.float32),  # 0 ends the return
    }
    return t + 1, timestep


def expected_return(k: int) -> tuple[float, float]:
    """The n-step return from step ``k`` of an episode, and its bootstrap factor."""
    total, factor = 0.0, 1.0
    for i in range(N_STEP):
        total += factor * (k + i + 1)
        factor *= 0.0 if k + i == EPISODE - 1 else GAMMA
        if factor == 0.0:
            break
    return total, factor


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)  # no options; --help describes the example
    steps = 256  # per environment: the buffer (128) wraps twice

    buffer = fbx.make_n_step_buffer(
        max_length=ENVS * CAPACITY,
        min_length=N_STEP + 1,
        sample_batch_size=64,
        add_sequences=True,  # add [envs, time, ...] chunks
        add_batch_size=ENVS,
        n_step=N_STEP,
        n_step_functional_map={
            ("reward", "reward", "discount"): functools.partial(fbx.n_step_returns, n_step=N_STEP),
            ("discount", "discount"): functools.partial(fbx.n_step_discounts, n_step=N_STEP),
        },
    )

    @jax.jit
    def collect(state: Any, t: jax.Array) -> tuple[Any, jax.Array]:
        """``CHUNK`` steps of every environment from step counters ``t``, added as one
        ``[ENVS, CHUNK]`` sequence."""
        t, steps_taken = jax.lax.scan(lambda t, _: env_step(t), t, None, length=CHUNK)
        return buffer.add(state, jax.tree.map(lambda x: x.swapaxes(0, 1), steps_taken)), t

    _, example = env_step(jnp.int32(0))
    state, t = buffer.init(example), jnp.zeros(ENVS, jnp.int32)
    for _ in range(steps // CHUNK):
        state, t = collect(state, t)
    batch = jax.jit(buffer.sample)(state, jax.random.key(0))
    first, second = batch.experience.first, batch.experience.second

    # Every sampled transition against the returns computed by hand.
    ks = np.asarray(first["obs"]).astype(int)
    want = np.array([expected_return(k) for k in ks])
    got = np.stack([np.asarray(first["reward"]), np.asarray(first["discount"])], axis=1)
    matches = bool(np.allclose(got, want, rtol=1e-6))

    def show(x: Any) -> list[float]:
        return [round(float(v), 3) for v in np.asarray(x)[:6]]

    print(f"{N_STEP}-step transitions from episode steps {ks[:6].tolist()}:")
    print(f"  n-step returns       {show(first['reward'])}")
    print(f"  bootstrap factors    {show(first['discount'])}")
    print(f"  episode step of s'   {show(second['obs'])}")
    print(f"all {len(ks)} match the returns computed by hand: {matches}")
    return {
        "valid": bool(batch.valid.all()),
        "steps_apart": np.asarray(second["obs"] - first["obs"]) % EPISODE,
        "matches": matches,
        "bootstrap_zero": int((want[:, 1] == 0).sum()),
    }


if __name__ == "__main__":
    main()
