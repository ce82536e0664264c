"""The write measurements of ``tools/bench_vault.py``: a vault written round by round from a
trajectory buffer (only the ``write`` calls timed), and the fixed cost of a small write (one
timestep added since the previous write)."""

from __future__ import annotations

import dataclasses
import gc
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import numpy as np
from _probes import (
    MB,
    dir_usage,
    loadavg,
    peak_rss_bytes,
    proc_status_bytes,
    reset_peak_rss,
    tree_nbytes,
)
from _report import log
from _vaults import create_vault
from _workloads import DataSource, example_timestep, make_trajectory_buffer, step_nbytes


@dataclasses.dataclass
class WriteRun:
    """What the write phase leaves behind for the read and small-write phases."""

    result: dict[str, Any]
    vault: Any
    data_dir: Path
    location: Path
    state: Any
    buffer: Any


def run_writes(
    lib: str,
    module: ModuleType,
    vault_cls: Any,
    variant: str,
    *,
    rows: int,
    time_axis: int,
    steps_per_write: int,
    n_writes: int,
    pool: np.ndarray | None,
    workdir: Path,
) -> WriteRun:
    """Fill a buffer round by round and write the vault after every round (only writes timed)."""
    buffer = make_trajectory_buffer(module, rows, time_axis)
    add = jax.jit(buffer.add, donate_argnums=0)
    state = buffer.init(example_timestep(variant))
    source = DataSource(variant, rows, pool)
    location = workdir / f"{lib}_{variant}"
    t0 = time.perf_counter()
    v, data_dir = create_vault(lib, vault_cls, location, state)
    create_s = time.perf_counter() - t0
    per_step = step_nbytes(variant)
    writes: list[dict[str, Any]] = []
    gen_s = add_s = 0.0
    gc.collect()
    rss_before = proc_status_bytes("VmRSS")
    reset_ok = reset_peak_rss()
    peak_base = peak_rss_bytes()
    loop_t0 = time.perf_counter()
    for i in range(n_writes):
        t0 = time.perf_counter()
        batch = source.next(steps_per_write)
        t1 = time.perf_counter()
        state = add(state, batch)
        jax.block_until_ready(state)
        del batch
        t2 = time.perf_counter()
        written = v.write(state)
        t3 = time.perf_counter()
        if written != steps_per_write:
            raise RuntimeError(f"{lib} write {i} wrote {written}, not {steps_per_write}")
        gen_s += t1 - t0
        add_s += t2 - t1
        raw = rows * written * per_step
        writes.append({"steps": written, "seconds": t3 - t2, "mb_s": raw / (t3 - t2) / MB})
        log(
            f"    {lib:<8} {variant:<6} write {i + 1:>2}/{n_writes}: {t3 - t2:7.3f} s "
            f"({raw / (t3 - t2) / MB:8.1f} MB/s)"
        )
    loop_s = time.perf_counter() - loop_t0
    write_s = sum(w["seconds"] for w in writes)
    steps = sum(w["steps"] for w in writes)
    raw_bytes = rows * steps * per_step
    usage = dir_usage(data_dir)
    result = {
        "writes": n_writes,
        "steps_per_write": steps_per_write,
        "timesteps_written": steps,
        "raw_bytes": raw_bytes,
        "create_s": create_s,
        "write_s": write_s,
        "write_mb_s": raw_bytes / write_s / MB,
        "write_mb_s_median_of_writes": statistics.median(w["mb_s"] for w in writes),
        "write_mb_s_after_first": (
            rows * (steps - writes[0]["steps"]) * per_step / (write_s - writes[0]["seconds"]) / MB
            if n_writes > 1
            else None
        ),
        "per_write": writes,
        "loop_total_s": loop_s,
        "data_generation_s": gen_s,
        "add_s": add_s,
        "buffer_state_bytes": tree_nbytes(state.experience),
        "rss_before_writes_bytes": rss_before,
        "peak_rss_growth_during_loop_bytes": (peak_rss_bytes() - peak_base) if reset_ok else None,
        "disk": usage,
        "compression_ratio": raw_bytes / usage["bytes"],
        "compression_ratio_allocated": raw_bytes / usage["allocated_bytes"],
        "loadavg_after": loadavg(),
    }
    log(
        f"    {lib:<8} {variant:<6} {raw_bytes / MB:,.0f} MB raw in {write_s:.2f} s of writes "
        f"({result['write_mb_s']:,.1f} MB/s); loop {loop_s:.1f} s (generation {gen_s:.1f} s, "
        f"add {add_s:.1f} s); on disk {usage['bytes'] / MB:,.1f} MB in {usage['files']} files "
        f"(ratio {result['compression_ratio']:.2f}; {usage['trash_bytes'] / MB:,.1f} MB of "
        "replaced files not yet freed)"
    )
    return WriteRun(result, v, data_dir, location, state, buffer)


def run_small_writes(
    lib: str,
    module: ModuleType,
    vault_cls: Any,
    run: WriteRun,
    *,
    rows: int,
    time_axis: int,
    warmup: int,
    writes: int,
    workdir: Path,
) -> dict[str, Any]:
    """Median ``write`` time when one timestep was added since the previous write."""
    one = DataSource("vector", rows, None, seed=7)
    out: dict[str, Any] = {}

    def series(v: Any, state: Any, add1: Callable[[Any, Any], Any]) -> tuple[list[float], Any]:
        times = []
        for i in range(warmup + writes):
            state = add1(state, one.next(1))
            jax.block_until_ready(state)
            t0 = time.perf_counter()
            n = v.write(state)
            dt = time.perf_counter() - t0
            if n != 1:
                raise RuntimeError(f"{lib} small write wrote {n} timesteps, not 1")
            if i >= warmup:
                times.append(dt)
        return times, state

    # 1) appending to the vault of the main run (its last time chunk is partly filled)
    add1 = jax.jit(run.buffer.add, donate_argnums=0)
    times, run.state = series(run.vault, run.state, add1)
    out["after_run"] = summarize_small(times)
    out["after_run"]["vault_timesteps_before"] = run.result["timesteps_written"]
    run.state = None
    gc.collect()

    # 2) a fresh vault and a fresh buffer (the first write saves one timestep)
    buffer = make_trajectory_buffer(module, rows, time_axis)
    add1 = jax.jit(buffer.add, donate_argnums=0)
    state = buffer.init(example_timestep("vector"))
    state = add1(state, one.next(1))
    location = workdir / f"{lib}_vector_small"
    v, _ = create_vault(lib, vault_cls, location, state)
    if v.write(state) != 1:
        raise RuntimeError(f"{lib}: the first small write did not write 1 timestep")
    times, state = series(v, state, add1)
    out["fresh"] = summarize_small(times)
    del v, state
    shutil.rmtree(location, ignore_errors=True)
    log(
        f"    {lib:<8} small write: median {out['after_run']['median_ms']:.2f} ms after the run, "
        f"{out['fresh']['median_ms']:.2f} ms on a fresh vault"
    )
    return out


def summarize_small(times: list[float]) -> dict[str, Any]:
    ms = sorted(t * 1e3 for t in times)
    return {
        "n": len(ms),
        "median_ms": statistics.median(ms),
        "min_ms": ms[0],
        "p90_ms": ms[min(len(ms) - 1, int(0.9 * len(ms)))],
        "max_ms": ms[-1],
        "all_ms": ms,
    }
