"""What recording costs a training loop: step time with and without ``vault.write(block=False)``.

A jitted, donated training-like step (add one timestep of 16 Atari-sized frames to a
trajectory buffer, sample 32 frames, one SGD step of a 2-layer MLP on them) runs N steps; the
recording run also calls ``vault.write(state, block=False)`` every K steps. Prints JSON and a
table: median and mean step time of both runs and their ratio (issue target: <= 1.10).

Usage: ``python tools/bench_recording.py [--steps 3000] [--every 250] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import buffers as fbx
from vault import Vault

ROWS = 16


def make_step(buf: Any) -> Any:
    """Add one timestep per row, sample 32 frames, one SGD step of a 2-layer MLP on them."""

    def loss_fn(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
        hidden = jnp.tanh(x @ params["w1"])
        return jnp.mean((hidden @ params["w2"]) ** 2)

    def step(
        state: Any, params: dict[str, jax.Array], frames: jax.Array, key: jax.Array
    ) -> tuple[Any, dict[str, jax.Array], jax.Array]:
        state = buf.add(state, {"obs": frames[:, None], "reward": jnp.ones((ROWS, 1))})
        batch = buf.sample(state, key).experience["obs"]
        x = batch.reshape(batch.shape[0], -1).astype(jnp.float32) / 255.0
        loss, grads = jax.value_and_grad(loss_fn)(params, x)
        params = jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)
        return state, params, loss

    return jax.jit(step, donate_argnums=(0, 1))


def run(
    steps: int, every: int | None, t_len: int, workdir: Path, codec: str = "auto"
) -> dict[str, Any]:
    buf = fbx.make_trajectory_buffer(ROWS, 32, 1, 1, 1, max_length_time_axis=t_len)
    example = {"obs": jnp.zeros((84, 84, 3), jnp.uint8), "reward": jnp.float32(0)}
    rng = np.random.default_rng(0)
    pool = jnp.asarray(rng.integers(0, 16, size=(64, ROWS, 84, 84, 3), dtype=np.uint8) * 16)
    params = {
        "w1": jnp.asarray(rng.normal(size=(84 * 84 * 3, 256)).astype(np.float32) * 0.01),
        "w2": jnp.asarray(rng.normal(size=(256, 8)).astype(np.float32) * 0.1),
    }
    step = make_step(buf)
    state = buf.init(example)
    keys = jax.random.split(jax.random.key(0), steps + 1)
    state, params, loss = step(state, params, pool[0], keys[0])  # compile
    loss.block_until_ready()
    vault = Vault.create(str(workdir / f"rec-{every}"), state, codec=codec) if every else None
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        state, params, loss = step(state, params, pool[i % 64], keys[i + 1])
        if vault is not None and every and (i + 1) % every == 0:
            vault.write(state, block=False)
        loss.block_until_ready()
        times.append(time.perf_counter() - t0)
    flush_s = 0.0
    if vault is not None:
        t0 = time.perf_counter()
        vault.close()
        flush_s = time.perf_counter() - t0
    return {
        "median_ms": statistics.median(times) * 1e3,
        "mean_ms": statistics.fmean(times) * 1e3,
        "p99_ms": float(np.percentile(times, 99)) * 1e3,
        "final_flush_s": flush_s,
        "recorded": None
        if vault is None
        else Vault.open(str(workdir / f"rec-{every}")).committed_length,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--every", type=int, default=250)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--codec", default="auto", help="vault codec: auto, zstd, lz4, blosc, gzip")
    args = parser.parse_args(argv)
    steps, t_len = (300, 400) if args.quick else (args.steps, 2000)
    every = min(args.every, t_len)
    with tempfile.TemporaryDirectory() as tmp:
        plain = run(steps, None, t_len, Path(tmp))
        recording = run(steps, every, t_len, Path(tmp), args.codec)
        plain_again = run(steps, None, t_len, Path(tmp))  # bracket the recording run
    base_median = (plain["median_ms"] + plain_again["median_ms"]) / 2
    base_mean = (plain["mean_ms"] + plain_again["mean_ms"]) / 2
    result = {
        "steps": steps,
        "write_every": every,
        "codec": args.codec,
        "frames_per_write_mb": every * ROWS * 84 * 84 * 3 / 1e6,
        "without": [plain, plain_again],
        "with": recording,
        "median_ratio": recording["median_ms"] / base_median,
        "mean_ratio": recording["mean_ms"] / base_mean,
    }
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)
    print("\n| run | median ms/step | mean ms/step | p99 ms |\n|---|---:|---:|---:|")
    for name, r in (
        ("no recording", plain),
        ("recording", recording),
        ("no recording", plain_again),
    ):
        print(f"| {name} | {r['median_ms']:.2f} | {r['mean_ms']:.2f} | {r['p99_ms']:.2f} |")
    ratios = f"median {result['median_ratio']:.3f}, mean {result['mean_ratio']:.3f}"
    print(f"\nrecording / no recording: {ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
