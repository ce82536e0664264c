"""Episode-aware vs plain sampling rate, and the add cost of episode bookkeeping.

Reference buffer configuration (as ``tools/bench_buffers.py``): 500_000 timesteps in 128 rows,
each a float32 ``(32, 32, 3)`` observation plus reward, done and action; sample batches of 256
sequences of length ``L`` (2 and 16). Episodes end with probability 1/50 per step. Both
buffers are filled the same way; then ``sample`` is timed in a Python loop of jitted calls and
inside one jitted ``scan``, interleaved (plain, then episode-aware, per repeat), reporting the
median over repeats and the ratio (episode-aware rate / plain rate; target >= 0.5); the scan
body sums the sampled observations, as a training step consumes them. The
``add_128`` row times a donated jitted add of one timestep per row, the same way.

Usage: ``python tools/bench_episode_sampling.py [--quick] [--out FILE.json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _argtypes import out_file
from _probes import package_version
from _report import log

import buffers as fbx

ROWS = 128


def example() -> dict[str, jax.Array]:
    return {
        "obs": jnp.zeros((32, 32, 3), jnp.float32),
        "reward": jnp.float32(0),
        "done": jnp.bool_(False),
        "action": jnp.int32(0),
    }


def batch(i: int, rng: np.random.Generator) -> dict[str, jax.Array]:
    return {
        "obs": jnp.full((ROWS, 1, 32, 32, 3), i, jnp.float32),
        "reward": jnp.ones((ROWS, 1), jnp.float32),
        "done": jnp.asarray(rng.random((ROWS, 1)) < 0.02),
        "action": jnp.full((ROWS, 1), i, jnp.int32),
    }


def build(capacity: int, seq: int) -> dict[str, Any]:
    t_len = capacity // ROWS
    return {
        "plain": fbx.make_trajectory_buffer(ROWS, 256, seq, 1, seq, max_length_time_axis=t_len),
        "episode": fbx.make_episode_buffer(ROWS, 256, seq, seq, max_length_time_axis=t_len),
    }


def fill(buf: Any, t_len: int) -> Any:
    """Fill the buffer once over (a scan of adds with fixed-seed episode ends)."""
    rng = np.random.default_rng(0)
    done = jnp.asarray(rng.random((t_len + 7, ROWS, 1)) < 0.02)

    def body(state: Any, d: jax.Array) -> tuple[Any, None]:
        step = {
            "obs": jnp.zeros((ROWS, 1, 32, 32, 3), jnp.float32),
            "reward": jnp.ones((ROWS, 1), jnp.float32),
            "done": d,
            "action": jnp.zeros((ROWS, 1), jnp.int32),
        }
        return buf.add(state, step), None

    state, _ = jax.jit(lambda s, d: jax.lax.scan(body, s, d), donate_argnums=0)(
        buf.init(example()), done
    )
    return jax.block_until_ready(state)


def _loop(sample: Any, state: Any, keys: jax.Array) -> Any:
    out = None
    for k in keys:
        out = sample(state, k)
    return out


def timed(fn: Any, *args: Any) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t0


def run(capacity: int, seqs: list[int], repeats: int, n_loop: int, n_scan: int) -> list[dict]:
    rows = []
    t_len = capacity // ROWS
    for seq in seqs:
        bufs = build(capacity, seq)
        states = {name: fill(b, t_len) for name, b in bufs.items()}
        samplers = {name: jax.jit(b.sample) for name, b in bufs.items()}

        def scan_fn(buf: Any) -> Any:
            def many(state: Any, key: jax.Array) -> Any:
                keys = jax.random.split(key, n_scan)

                def body(c: jax.Array, k: jax.Array) -> tuple[jax.Array, None]:
                    s = buf.sample(state, k)
                    # consume the observations too, as a training step would (otherwise XLA
                    # drops the gather and only the index arithmetic is timed)
                    return c + s.experience["obs"].sum() + s.experience["action"].sum(), None

                return jax.lax.scan(body, jnp.float32(0), keys)[0]

            return jax.jit(many)

        scans = {name: scan_fn(b) for name, b in bufs.items()}
        times: dict[str, dict[str, list[float]]] = {n: {"loop": [], "scan": []} for n in bufs}
        for name in bufs:  # warm up: run exactly what is timed once, untimed
            # (the Python loop included: iterating a key array compiles its indexing once,
            # a one-off cost that would otherwise land on the first buffer timed)
            keys = jax.random.split(jax.random.key(0), n_loop)
            jax.block_until_ready(_loop(samplers[name], states[name], keys))
            jax.block_until_ready(scans[name](states[name], jax.random.key(0)))
        for r in range(repeats):
            for name in bufs:
                keys = jax.random.split(jax.random.key(r + 1), n_loop)

                times[name]["loop"].append(
                    timed(_loop, samplers[name], states[name], keys) / n_loop
                )
                times[name]["scan"].append(
                    timed(scans[name], states[name], jax.random.key(r)) / n_scan
                )
        for mode in ("loop", "scan"):
            plain = statistics.median(times["plain"][mode])
            episode = statistics.median(times["episode"][mode])
            rows.append(
                {
                    "op": f"sample_256 (L={seq})",
                    "mode": mode,
                    "plain_us": plain * 1e6,
                    "episode_us": episode * 1e6,
                    "ratio": plain / episode,
                    "target": ">= 0.5",
                    "met": plain / episode >= 0.5,
                }
            )
        valid = float(states["episode"].sum_tree_state.nodes[1])
        log(f"L={seq}: {valid:.0f} valid windows of {capacity} slots")
        del states
    # add cost: one timestep per row, donated
    bufs = build(capacity, seqs[0])
    adds = {n: jax.jit(b.add, donate_argnums=0) for n, b in bufs.items()}
    rng = np.random.default_rng(1)
    batches = [batch(i, rng) for i in range(16)]
    add_times: dict[str, list[float]] = {n: [] for n in bufs}
    for name, b in bufs.items():
        state = b.init(example())
        state = jax.block_until_ready(adds[name](state, batches[0]))
        for _ in range(repeats):
            t0 = time.perf_counter()
            for i in range(n_loop):
                state = adds[name](state, batches[i % 16])
            jax.block_until_ready(state)
            add_times[name].append((time.perf_counter() - t0) / n_loop)
        del state
    plain = statistics.median(add_times["plain"])
    episode = statistics.median(add_times["episode"])
    rows.append(
        {
            "op": "add_128 (1 step x 128 rows)",
            "mode": "loop",
            "plain_us": plain * 1e6,
            "episode_us": episode * 1e6,
            "ratio": plain / episode,
            "target": None,
            "met": None,
        }
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small buffer, L=2 only")
    parser.add_argument("--out", type=out_file, default=None, help="write the JSON here")
    args = parser.parse_args(argv)
    if args.quick:
        cfg = {"capacity": 128 * 64, "seqs": [2], "repeats": 2, "n_loop": 20, "n_scan": 20}
    else:
        cfg = {"capacity": 500_000, "seqs": [2, 16], "repeats": 5, "n_loop": 200, "n_scan": 200}
    t0 = time.perf_counter()
    rows = run(**cfg)
    result = {
        "benchmark": "tools/bench_episode_sampling.py",
        "config": cfg,
        "jax": package_version("jax"),
        "rows": rows,
        "total_s": time.perf_counter() - t0,
    }
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)
    print("\n| op | mode | plain µs | episode-aware µs | ratio | target | met |")
    print("|---|---|---:|---:|---:|---|---|")
    for r in rows:
        met = "-" if r["met"] is None else ("yes" if r["met"] else "**no**")
        print(
            f"| {r['op']} | {r['mode']} | {r['plain_us']:.1f} | {r['episode_us']:.1f} | "
            f"{r['ratio']:.2f} | {r['target'] or ''} | {met} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
