"""Prioritised trajectory buffer quickstart: sample, score what was sampled, set its priority,
and watch sampling turn towards the sequences that matter.

Run: ``python examples/quickstart_prioritised.py`` (no options; the tests run it as it is).
Rewards are rare (3 % of steps); each sampled sequence gets the priority ``sum of its rewards
+ 0.01`` (a stand-in for a TD error), so rewarding sequences end up sampled far more often
than their share of the buffer.
"""

from __future__ import annotations

import argparse
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import buffers as fbx

ENVS, STEPS, SEQ, PERIOD = 8, 256, 4, 2


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)  # no options; --help describes the example
    updates = 40

    buffer = fbx.make_prioritised_trajectory_buffer(
        add_batch_size=ENVS,
        sample_batch_size=64,
        sample_sequence_length=SEQ,
        period=PERIOD,
        min_length_time_axis=SEQ,
        max_length_time_axis=STEPS,
        priority_exponent=0.6,
    )
    k_data, k_loop = jax.random.split(jax.random.key(0))
    rewards = jax.random.bernoulli(k_data, 0.03, (ENVS, STEPS)).astype(jnp.float32)
    state = buffer.init({"reward": jnp.float32(0)})
    state = jax.jit(buffer.add)(state, {"reward": rewards})

    @jax.jit
    def sample_and_reprioritise(state: Any, key: jax.Array) -> tuple[Any, jax.Array]:
        batch = buffer.sample(state, key)
        scores = batch.experience["reward"].sum(axis=1)
        state = buffer.set_priorities(state, batch.indices, scores + 0.01)
        return state, scores > 0

    hits = []
    for key in jax.random.split(k_loop, updates):
        state, rewarding = sample_and_reprioritise(state, key)
        hits.append(float(rewarding.mean()))

    final = jax.jit(buffer.sample)(state, jax.random.key(1))
    rewarding = np.asarray(final.experience["reward"].sum(axis=1) > 0)
    probs = np.asarray(final.probabilities)
    windows = np.lib.stride_tricks.sliding_window_view(np.asarray(rewards), SEQ, axis=1)
    share = float((windows[:, ::PERIOD].sum(axis=-1) > 0).mean())  # of all sequence starts
    print(f"rewarding sequences: {share:.1%} of the buffer")
    print(f"in sampled batches: {hits[0]:.1%} at first, {np.mean(hits[-10:]):.1%} at the end")
    print(
        f"probability of a rewarding item {probs[rewarding].mean():.2e}, "
        f"of another {probs[~rewarding].mean():.2e}"
    )
    return {
        "share": share,
        "first_batch": hits[0],
        "last_batches": float(np.mean(hits[-10:])),
        "final_rewarding": rewarding,
        "final_probabilities": probs,
    }


if __name__ == "__main__":
    main()
