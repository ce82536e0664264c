"""What recording costs a training loop: step time with and without ``vault.write(block=False)``.

A jitted, donated training-like step (add one timestep of 16 Atari-sized frames to a
trajectory buffer, sample 32 frames, one SGD step of a 2-layer MLP on them), timed step by
step. A recording loop also calls ``vault.write(state, block=False)`` every K steps. The frames
are the image workload of ``tools/bench_vault.py`` (its ``make_frame_pool`` and ``DataSource``:
each row walks through the consecutive Atari-like frames of one game from its own offset), so
the vault compresses them as it would real frames (zstd-3 about 14x) at the speed it would.

This machine is shared, and other work comes and goes on a scale of seconds, so the loops run
side by side in one process and take turns in blocks of N steps (a multiple of K): a plain
loop, then per round and codec the recording loop of that codec followed by the plain loop
(codecs A, B: plain, A, plain, B, plain, A, ...). Each loop keeps its own buffer, parameters
and vault across its blocks, so a recording loop is in the steady state of a long run; its
writes fall mid-way between block ends (at steps K/2, 3K/2, ...), so the background work of a
block's last write ends within the block (the wait for it at the block's end is reported and
should be ~0). The jitted step is compiled once; each loop first runs K untimed steps.
Reported per codec, over all its blocks' step times against all plain blocks' step times:
median, mean and p99 step time and their ratios (> 1: recording is slower), the per-round
median ratios (a recording block against the mean of the plain blocks on either side), the
final flush (at the end, the steps since the last write are written with ``block=False`` and
``close()`` is timed: what ending a run costs) and the compression ratio on disk. Issue target: the
default codec's median ratio <= 1.10.

Usage::

    python tools/bench_recording.py --codec auto --codec lz4 --out results.json
    python tools/bench_recording.py --quick          # small smoke run
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
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
FRAME_SHAPE = (84, 84, 3)
POOL_GAMES, POOL_FRAMES = 4, 256  # the step pool: 256 steps x 16 rows of frames (87 MB)
TARGET_MEDIAN_RATIO = 1.10
DEFAULTS = {"rounds": 6, "steps": 500, "every": 250, "time_axis": 2000}
QUICK = {"rounds": 1, "steps": 200, "every": 100, "time_axis": 400}


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


@functools.cache
def _buffer_and_step(t_len: int) -> tuple[Any, Any]:
    """The buffer and its jitted step, shared by every run of a time-axis length."""
    buf = fbx.make_trajectory_buffer(ROWS, 32, 1, 1, 1, max_length_time_axis=t_len)
    return buf, make_step(buf)


def frame_steps(n_steps: int = POOL_FRAMES, seed: int = 0) -> np.ndarray:
    """``[n_steps, ROWS, 84, 84, 3]`` uint8: the image workload's frames, step by step."""
    from bench_vault import DataSource, make_frame_pool

    pool = make_frame_pool(POOL_GAMES, POOL_FRAMES, seed)
    obs = DataSource("image", ROWS, pool).next(n_steps)["obs"]  # [ROWS, n_steps, ...]
    return np.ascontiguousarray(obs.swapaxes(0, 1))


def _disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class Loop:
    """One training loop (buffer, parameters, step count), optionally recorded to a vault."""

    def __init__(
        self,
        t_len: int,
        pool: jax.Array,
        workdir: Path,
        codec: str | None = None,
        every: int | None = None,
    ) -> None:
        self.buf, self.step = _buffer_and_step(t_len)
        rng = np.random.default_rng(0)
        self.params = {
            "w1": jnp.asarray(rng.normal(size=(84 * 84 * 3, 256)).astype(np.float32) * 0.01),
            "w2": jnp.asarray(rng.normal(size=(256, 8)).astype(np.float32) * 0.1),
        }
        example = {"obs": jnp.zeros(FRAME_SHAPE, jnp.uint8), "reward": jnp.float32(0)}
        self.state = self.buf.init(example)
        self.pool = pool
        self.keys = jax.random.split(jax.random.key(0), 1024)
        self.i = 0
        self.state, self.params, loss = self.step(self.state, self.params, pool[0], self.keys[0])
        loss.block_until_ready()  # compiles once, for the first loop
        self.every = every
        self.location = workdir / f"rec-{codec}"
        self.vault = (
            None if codec is None else Vault.create(str(self.location), self.state, codec=codec)
        )
        self.writes = 0

    def run(self, steps: int) -> list[float]:
        """``steps`` steps; each one's time in seconds (the step, a due write, the wait for
        the loss)."""
        times = []
        n_pool, n_keys = int(self.pool.shape[0]), len(self.keys)
        for _ in range(steps):
            t0 = time.perf_counter()
            self.i += 1
            self.state, self.params, loss = self.step(
                self.state, self.params, self.pool[self.i % n_pool], self.keys[self.i % n_keys]
            )
            if self.vault is not None and self.every and self.i % self.every == self.every // 2:
                self.vault.write(self.state, block=False)
                self.writes += 1
            loss.block_until_ready()
            times.append(time.perf_counter() - t0)
        return times

    def settle(self) -> float:
        """Wait for pending writes (untimed, between blocks); seconds waited."""
        t0 = time.perf_counter()
        if self.vault is not None:
            self.vault.flush()
        return time.perf_counter() - t0

    def finish(self) -> dict[str, Any]:
        """End the run as a training script would: write the steps since the last write
        (``block=False``) and close the vault. The time ``close()`` takes (the final flush),
        what was recorded, the compression ratio."""
        if self.vault is None:
            raise ValueError("finish() is for a recording loop")
        tail = self.vault.write(self.state, block=False)
        t0 = time.perf_counter()
        self.vault.close()
        flush_s = time.perf_counter() - t0
        recorded = Vault.open(str(self.location)).committed_length
        raw = recorded * ROWS * (int(np.prod(FRAME_SHAPE)) + 4)
        ratio = raw / _disk_bytes(self.location)
        shutil.rmtree(self.location, ignore_errors=True)
        return {
            "final_flush_s": flush_s,
            "final_write_steps": tail,
            "writes": self.writes,
            "steps_run": self.i,
            "recorded": recorded,
            "compression_ratio": ratio,
        }


def _stats(times: list[float]) -> dict[str, float]:
    return {
        "median_ms": statistics.median(times) * 1e3,
        "mean_ms": statistics.fmean(times) * 1e3,
        "p99_ms": float(np.percentile(times, 99)) * 1e3,
        "max_ms": max(times) * 1e3,
    }


def measure(
    rounds: int = DEFAULTS["rounds"],
    steps: int = DEFAULTS["steps"],
    every: int = DEFAULTS["every"],
    t_len: int = DEFAULTS["time_axis"],
    codecs: tuple[str, ...] = ("auto",),
    workdir: Path | None = None,
    log: Any = None,
) -> dict[str, Any]:
    """Plain and recording loops in turns (see the module docstring); the JSON document."""
    if steps % every or every < 2 or every > t_len:
        raise ValueError(
            f"steps per block ({steps}) must be a multiple of the write interval ({every}), "
            f"which must be in [2, time axis {t_len}]"
        )
    pool = jnp.asarray(frame_steps())
    load_start = _loadavg()
    blocks: dict[str | None, list[list[float]]] = {None: [], **{c: [] for c in codecs}}
    settle: dict[str, list[float]] = {c: [] for c in codecs}
    rounds_out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        loops: dict[str | None, Loop] = {None: Loop(t_len, pool, Path(tmp))}
        for codec in codecs:
            loops[codec] = Loop(t_len, pool, Path(tmp), codec, every)
        for loop in loops.values():  # warm up, and put the writes mid-way between block ends
            loop.run(every)
            loop.settle()

        def block(codec: str | None) -> dict[str, float]:
            times = loops[codec].run(steps)
            blocks[codec].append(times)
            if codec is not None:
                settle[codec].append(loops[codec].settle())
            return _stats(times)

        before = block(None)
        for i in range(rounds):
            for codec in codecs:
                rec = block(codec)
                after = block(None)
                rounds_out.append(
                    {
                        "round": i,
                        "codec": codec,
                        "median_ratio": rec["median_ms"]
                        / statistics.fmean((before["median_ms"], after["median_ms"])),
                        "mean_ratio": rec["mean_ms"]
                        / statistics.fmean((before["mean_ms"], after["mean_ms"])),
                    }
                )
                if log:
                    log(
                        f"  round {i} {codec}: median {rec['median_ms']:.2f} ms/step, plain "
                        f"{before['median_ms']:.2f} / {after['median_ms']:.2f}"
                    )
                before = after
        finished = {c: loops[c].finish() for c in codecs}
    base = _stats([t for b in blocks[None] for t in b])
    per_codec = {}
    for codec in codecs:
        st = _stats([t for b in blocks[codec] for t in b])
        mine = [r for r in rounds_out if r["codec"] == codec]
        per_codec[codec] = {
            **st,
            "median_ratio": st["median_ms"] / base["median_ms"],
            "mean_ratio": st["mean_ms"] / base["mean_ms"],
            "p99_ratio": st["p99_ms"] / base["p99_ms"],
            "round_median_ratios": [r["median_ratio"] for r in mine],
            "round_mean_ratios": [r["mean_ratio"] for r in mine],
            "block_medians_ms": [statistics.median(b) * 1e3 for b in blocks[codec]],
            "settle_max_s": max(settle[codec]),
            **finished[codec],
        }
    first = per_codec[codecs[0]]
    return {
        "benchmark": "tools/bench_recording.py",
        "workload": "image (tools/bench_vault.py make_frame_pool), 16 rows x 84x84x3 uint8",
        "rounds": rounds,
        "steps_per_block": steps,
        "write_every": every,
        "time_axis": t_len,
        "frames_per_write_mb": every * ROWS * int(np.prod(FRAME_SHAPE)) / 1e6,
        "codecs": list(codecs),
        "without": {
            **base,
            "block_medians_ms": [statistics.median(b) * 1e3 for b in blocks[None]],
        },
        "with": per_codec,
        "target": f"median ratio <= {TARGET_MEDIAN_RATIO:.2f} ({codecs[0]})",
        "target_met": first["median_ratio"] <= TARGET_MEDIAN_RATIO,
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "loadavg": {"start": load_start, "end": _loadavg()},
    }


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def table(result: dict[str, Any]) -> list[str]:
    header = (
        "| run | median ms/step | mean ms/step | p99 ms | median ratio | mean ratio | "
        "median ratio by round | final flush s | compression |"
    )
    lines = [header, "|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    lines.append(_row("no recording", result["without"]))
    for codec, r in result["with"].items():
        lines.append(_row(f"recording, codec {codec}", r))
    return lines


def _row(name: str, r: dict[str, Any]) -> str:
    def opt(key: str, spec: str, suffix: str = "") -> str:
        return "" if key not in r else f"{r[key]:{spec}}{suffix}"

    rounds = ", ".join(f"{x:.3f}" for x in r.get("round_median_ratios", []))
    return (
        f"| {name} | {r['median_ms']:.2f} | {r['mean_ms']:.2f} | {r['p99_ms']:.2f} | "
        f"{opt('median_ratio', '.3f')} | {opt('mean_ratio', '.3f')} | {rounds} | "
        f"{opt('final_flush_s', '.2f')} | {opt('compression_ratio', '.1f', 'x')} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=None, help="recording blocks per codec (6)")
    parser.add_argument("--steps", type=int, default=None, help="steps per block (500)")
    parser.add_argument("--every", type=int, default=None, help="steps between writes (250)")
    parser.add_argument(
        "--quick", action="store_true", help="1 round of 300 steps, write every 100"
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--codec",
        action="append",
        default=None,
        help="vault codec (auto, zstd, lz4, blosc, gzip); repeat to compare (default: auto)",
    )
    args = parser.parse_args(argv)
    cfg = dict(QUICK if args.quick else DEFAULTS)
    for key in ("rounds", "steps", "every"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    codecs = tuple(args.codec or ["auto"])
    result = measure(cfg["rounds"], cfg["steps"], cfg["every"], cfg["time_axis"], codecs, log=_log)
    result["command"] = " ".join(["python", "tools/bench_recording.py", *(argv or sys.argv[1:])])
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    print()
    print("\n".join(table(result)))
    return 0


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
