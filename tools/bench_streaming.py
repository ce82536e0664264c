"""Benchmark streaming reads (``as_dataset``) against reading the whole vault at once.

Workload: the data of ``tools/bench_vault.py`` (from ``tools/_workloads.py``; 16 rows):
``image`` (Atari-like uint8 ``(84, 84, 3)`` frames from ``make_frame_pool``, plus ``action``,
``reward``, ``done``), 4,096 timesteps (1.39 GB raw), and ``vector`` (float32 ``(64,)``
random walks, same scalars), 65,536 timesteps (278 MB raw). Each vault is created with the
default codecs and chunks and ``done_leaf="done"`` (so the episode-aware stream can run),
appended 1,024 timesteps at a time.

Measured per variant in ``rounds`` rounds (after one untimed warm-up of everything); in each
round every measurement runs cold (every vault file's pages dropped from the page cache with
``fsync`` + ``posix_fadvise(DONTNEED)`` first; the vault is reopened) and then warm:

* read all: ``vault.read_numpy()`` of every leaf; MB/s = raw bytes / seconds (MB = 10**6 B);
* streaming: one epoch of ``vault.as_dataset(...)`` per configuration, with the default
  ``device_put`` (on CPU: numpy batches, which a jitted step takes as they are) unless the
  label says ``JAX arrays (device_put=True)``; ``stack=32``: 32 batches handed over at a
  time, stacked (one JAX array per leaf per stack; batches/s counts batches). The consumer calls
  ``jax.block_until_ready(batch.experience)`` on each batch, or, where the label says
  ``consumer: a jitted step``, a jitted function that takes every leaf (numpy leaves are
  copied in by that call), blocking on its result. Reported: batches/s; yielded MB/s (bytes
  of the batches); data MB/s (raw bytes of the vault that the epoch covers, i.e. the vault's
  size, / seconds).

Times are medians over the rounds. The ratio streaming / read all is the median over rounds
of the ratio within a round (the machine may be shared: load moves both runs of a round).
Target: ratio >= 0.70 for the sequence-length-1 streams in their default configuration,
which deliver each timestep once as reading all does; a stream of length-L sequences copies
every timestep L times (its yielded MB/s says how fast), so its ratio is reported without a
target, as are the streams forced to make JAX arrays on CPU (each JAX array costs a few
microseconds to create, whatever its size: the price of a setting, not of the disk) and the
runs with a jitted-step consumer (they add the consumer's own per-call cost, which reading all
has no counterpart for; they compare numpy and JAX-array batches end to end). The peak
RSS growth (``VmHWM``) of each measurement is taken once per variant in a fresh process
(JAX's backend and compiler and TensorStore's threads started on other data first): streaming
holds about ``(1 + prefetch) x interleave`` blocks, reading all holds the data.

Usage::

    python tools/bench_streaming.py --quick                 # smoke test (seconds)
    python tools/bench_streaming.py --out results.json      # full run, both variants
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
from _argtypes import existing_dir, out_file
from _probes import (
    MB,
    code_provenance,
    drop_page_cache,
    loadavg,
    machine_info,
    peak_rss_bytes,
    reset_peak_rss,
    total_file_bytes,
    tree_nbytes,
)
from _report import log, write_json
from _workloads import VARIANTS, DataSource, example_timestep, make_frame_pool, step_nbytes

from vault import Vault

PROBE_MARK = "BENCH_STREAMING_PROBE_JSON "
READ_ALL = "read all (read_numpy)"
TARGET_RATIO = 0.70


@dataclasses.dataclass(frozen=True)
class Config:
    rows: int
    steps: dict[str, int]
    append_steps: int
    rounds: int
    pool_games: int
    pool_frames: int
    streams: dict[str, tuple[tuple[str, dict[str, Any]], ...]]


COMMON = (
    ("shuffled, L=1, batch 256", {"sample_batch_size": 256, "sequence_length": 1}),
    (
        "in order, L=1, batch 256",
        {"sample_batch_size": 256, "sequence_length": 1, "shuffle": False},
    ),
    ("shuffled, L=2, batch 256", {"sample_batch_size": 256, "sequence_length": 2}),
    (
        "shuffled, L=8, batch 256, episode-aware, interleave 4",
        {"sample_batch_size": 256, "sequence_length": 8, "episode_aware": True, "interleave": 4},
    ),
)
BIG_BATCH = (("shuffled, L=1, batch 4096", {"sample_batch_size": 4096, "sequence_length": 1}),)
JAX_ARRAYS = ", JAX arrays (device_put=True)"
FORCED = (
    (
        "shuffled, L=1, batch 256" + JAX_ARRAYS,
        {"sample_batch_size": 256, "sequence_length": 1, "device_put": True},
    ),
)
STACKED = (
    (
        "shuffled, L=1, batch 256, stack=32" + JAX_ARRAYS,
        {"sample_batch_size": 256, "sequence_length": 1, "device_put": True, "stack": 32},
    ),
)
FORCED_BIG = (
    (
        "shuffled, L=1, batch 4096" + JAX_ARRAYS,
        {"sample_batch_size": 4096, "sequence_length": 1, "device_put": True},
    ),
)
WITH_STEP = ", consumer: a jitted step"
STEPPED = tuple(
    (label + WITH_STEP, {**kw, "consumer": "step"}) for label, kw in (COMMON[0], *FORCED)
)
STREAMS = {
    "image": COMMON + FORCED,
    "vector": COMMON + BIG_BATCH + FORCED + STACKED + FORCED_BIG + STEPPED,
}

FULL = Config(
    rows=16,
    steps={"image": 4096, "vector": 65536},
    append_steps=1024,
    rounds=5,
    pool_games=4,
    pool_frames=512,
    streams=STREAMS,
)
QUICK = Config(
    rows=4,
    steps={"image": 512, "vector": 4096},
    append_steps=256,
    rounds=1,
    pool_games=2,
    pool_frames=64,
    streams={v: STREAMS[v][::2] for v in VARIANTS},
)


def build_vault(variant: str, cfg: Config, path: Path) -> tuple[Vault, int]:
    """A vault of ``cfg.steps[variant]`` timesteps of the variant's data; its raw bytes."""
    pool = make_frame_pool(cfg.pool_games, cfg.pool_frames) if variant == "image" else None
    source = DataSource(variant, cfg.rows, pool)
    vault = Vault.create(str(path), example_timestep(variant), rows=cfg.rows, done_leaf="done")
    steps = cfg.steps[variant]
    for lo in range(0, steps, cfg.append_steps):
        vault.append(source.next(min(cfg.append_steps, steps - lo)))
    vault.close()
    return Vault.open(str(path)), steps * cfg.rows * step_nbytes(variant)


def measure(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``fn`` once; add its seconds."""
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    out["seconds"] = time.perf_counter() - t0
    return out


def probe_memory(spec: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: the peak RSS growth (``VmHWM``) of one read-all or one epoch.

    JAX's backend and compiler and TensorStore's threads are started first, on other data, so
    that the growth is the measurement's own."""
    import numpy as np

    vault = Vault.open(spec["path"])
    jax.block_until_ready(jax.jit(lambda x: x + 1)(np.ones(1 << 16, np.float32)))
    vault.read_numpy(stop=1)
    gc.collect()
    reset_peak_rss()
    before = peak_rss_bytes()
    if spec["kwargs"] is None:
        read_all(Path(spec["path"]))
    else:
        stream_epoch(Path(spec["path"]), spec["kwargs"])
    return {"peak_rss_growth_bytes": peak_rss_bytes() - before}


def run_probe(path: Path, kwargs: dict[str, Any] | None) -> dict[str, Any] | None:
    spec = json.dumps({"path": str(path), "kwargs": kwargs})
    done = subprocess.run(
        [sys.executable, __file__, "--probe-memory", spec],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith(PROBE_MARK):
            return json.loads(line[len(PROBE_MARK) :])  # type: ignore[no-any-return]
    log(f"memory probe failed ({done.returncode}): {done.stderr[-2000:]}")
    return None


def read_all(path: Path) -> dict[str, Any]:
    vault = Vault.open(str(path))
    data = vault.read_numpy()
    return {"bytes": tree_nbytes(data)}


@jax.jit
def _step(experience: Any) -> Any:
    """The least a training step does: take every leaf (numpy leaves are copied in)."""
    return sum(leaf.ravel()[0].astype("float32") for leaf in jax.tree.leaves(experience))


def stream_epoch(path: Path, kwargs: dict[str, Any]) -> dict[str, Any]:
    vault = Vault.open(str(path))
    batches = yielded = 0
    options = dict(kwargs)
    step = options.pop("consumer", None) == "step"
    with vault.as_dataset(seed=0, epochs=1, **options) as stream:
        for batch in stream:
            if step:
                _step(batch.experience).block_until_ready()
            else:
                jax.block_until_ready(batch.experience)
            batches += batch.row.shape[0] if batch.row.ndim > 1 else 1  # (stack=S: S batches)
            yielded += tree_nbytes(batch.experience)
    return {"batches": batches, "yielded_bytes": yielded, "block_bytes": stream.block_bytes}


def run_round(
    measurements: list[tuple[str, Callable[[], dict[str, Any]]]], path: Path
) -> dict[str, dict[str, dict[str, Any]]]:
    """One cold run (page cache dropped first) and one warm run of every measurement."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for label, fn in measurements:
        drop_page_cache(path)
        cold = measure(fn)
        warm = measure(fn)  # the cold run has just read every file
        out[label] = {"cold": cold, "warm": warm}
    return out


def run_variant(
    variant: str, cfg: Config, workdir: Path, memory_probes: bool = True
) -> dict[str, Any]:
    path = workdir / variant
    t0 = time.perf_counter()
    vault, raw = build_vault(variant, cfg, path)
    log(f"{variant}: vault of {raw / MB:,.0f} MB raw built in {time.perf_counter() - t0:.1f} s")
    with vault.as_dataset(1, 1) as probe:  # the block size the default configuration picks
        block, block_bytes = probe.block_timesteps, probe.block_bytes
    disk = total_file_bytes(path)
    streams = dict(cfg.streams[variant])
    measurements: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        (READ_ALL, lambda: read_all(path))
    ]
    measurements += [
        (label, lambda kw=kw: stream_epoch(path, kw))  # type: ignore[misc]
        for label, kw in streams.items()
    ]
    for _, fn in measurements:  # compile and warm up once, untimed
        fn()
    rounds = []
    for i in range(cfg.rounds):
        rounds.append(run_round(measurements, path))
        log(
            f"  round {i + 1}/{cfg.rounds}: "
            + ", ".join(
                f"{label.split(',')[0] if label == READ_ALL else label} "
                f"{r['cold']['seconds']:.2f}/{r['warm']['seconds']:.2f} s"
                for label, r in rounds[-1].items()
            )
        )
    memory = {
        label: run_probe(path, streams.get(label)) if memory_probes else None
        for label, _ in measurements
    }
    episodes = len(vault.episodes(include_open=True))  # before the vault's files are gone
    shutil.rmtree(path, ignore_errors=True)
    results = []
    for label, _ in measurements:
        entry: dict[str, Any] = {
            "label": label,
            "kwargs": streams.get(label),
            "memory_fresh_process": memory[label],
        }
        for cache in ("cold", "warm"):
            runs = [r[label][cache] for r in rounds]
            base = [r[READ_ALL][cache]["seconds"] for r in rounds]
            entry[cache] = {
                **{k: v for k, v in runs[0].items() if k != "seconds"},
                "seconds": statistics.median(r["seconds"] for r in runs),
                "seconds_all": [r["seconds"] for r in runs],
                # paired with the read-all run of the same round: load on the shared machine
                # moves both
                "ratio_paired_median": statistics.median(
                    b / r["seconds"] for r, b in zip(runs, base, strict=True)
                ),
            }
        results.append(entry)
    return {
        "variant": variant,
        "rows": cfg.rows,
        "timesteps": vault.committed_length,
        "raw_bytes": raw,
        "disk_bytes": disk,
        "default_block_timesteps": block,
        "default_block_bytes": block_bytes,
        "episodes": episodes,
        "read_all": results[0],
        "streams": results[1:],
    }


def build_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for var in result["variants"]:
        raw = var["raw_bytes"]
        for cache in ("cold", "warm"):
            for entry in [var["read_all"], *var["streams"]]:
                run = entry[cache]
                stream = entry is not var["read_all"]
                ratio = run["ratio_paired_median"]
                rows.append(
                    {
                        "variant": var["variant"],
                        "cache": cache,
                        "what": entry["label"],
                        "batches_per_s": run["batches"] / run["seconds"] if stream else None,
                        "yielded_mb_s": (run["yielded_bytes"] if stream else raw)
                        / MB
                        / run["seconds"],
                        "data_mb_s": raw / MB / run["seconds"],
                        "ratio": ratio,
                        "peak_rss_growth_mb": None
                        if entry["memory_fresh_process"] is None
                        else entry["memory_fresh_process"]["peak_rss_growth_bytes"] / MB,
                        "met": ratio >= TARGET_RATIO
                        if stream
                        and entry["kwargs"]["sequence_length"] == 1
                        and "device_put" not in entry["kwargs"]
                        and "consumer" not in entry["kwargs"]
                        else None,
                    }
                )
    return rows


def markdown(result: dict[str, Any]) -> list[str]:
    head = (
        "| variant | cache | read | batches/s | yielded MB/s | data MB/s | vs read all "
        f"(target >= {TARGET_RATIO:.2f}) | peak RSS growth MB |"
    )
    lines = [
        head,
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        bps = "" if r["batches_per_s"] is None else f"{r['batches_per_s']:,.0f}"
        mark = "" if r["met"] is None else (" ok" if r["met"] else " MISSED")
        rss = "" if r["peak_rss_growth_mb"] is None else f"{r['peak_rss_growth_mb']:,.0f}"
        lines.append(
            f"| {r['variant']} | {r['cache']} | {r['what']} | {bps} | {r['yielded_mb_s']:,.0f} "
            f"| {r['data_mb_s']:,.0f} | {r['ratio']:.2f}{mark} | {rss} |"
        )
    for var in result["variants"]:
        lines.append(
            f"\n{var['variant']}: {var['rows']} rows x {var['timesteps']:,} timesteps, "
            f"{var['raw_bytes'] / MB:,.0f} MB raw, {var['disk_bytes'] / MB:,.0f} MB on disk, "
            f"default block {var['default_block_timesteps']} timesteps "
            f"({var['default_block_bytes'] / MB:,.1f} MB), {var['episodes']:,} episodes"
        )
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small smoke-test configuration")
    p.add_argument("--variant", choices=[*VARIANTS, "both"], default="both")
    p.add_argument("--out", type=out_file, default=None, help="write the JSON here")
    p.add_argument("--tmpdir", type=existing_dir, default=None, help="parent of the temp directory")
    p.add_argument("--no-memory", action="store_true", help="skip the fresh-process RSS probes")
    p.add_argument("--probe-memory", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.probe_memory is not None:
        print(PROBE_MARK + json.dumps(probe_memory(json.loads(args.probe_memory))), flush=True)
        return 0
    cfg = QUICK if args.quick else FULL
    variants = list(VARIANTS) if args.variant == "both" else [args.variant]
    load_start = loadavg()
    code_start = code_provenance("vault", ("vault", "buffers"))
    t_start = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="bench_streaming_", dir=args.tmpdir))
    log(f"bench_streaming: {'quick' if args.quick else 'full'} run in {workdir}")
    try:
        variant_results = [run_variant(v, cfg, workdir, not args.no_memory) for v in variants]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result: dict[str, Any] = {
        "benchmark": "tools/bench_streaming.py",
        "quick": args.quick,
        "config": dataclasses.asdict(cfg),
        "target_ratio": TARGET_RATIO,
        "machine": machine_info(),
        "rlvault_code": code_start,
        "rlvault_code_at_end": code_provenance("vault", ("vault", "buffers")),
        "loadavg": {"start": load_start, "end": loadavg()},
        "total_s": time.perf_counter() - t_start,
        "variants": variant_results,
    }
    result["rows"] = build_rows(result)
    result["targets_missed"] = [
        f"{r['variant']} {r['cache']}: {r['what']}" for r in result["rows"] if r["met"] is False
    ]
    print("\n".join(markdown(result)), flush=True)
    if args.out is not None:
        write_json(args.out, result)
    log(f"total {result['total_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
