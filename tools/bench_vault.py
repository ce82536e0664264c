"""Benchmark rlvault's ``vault.Vault`` against Flashbax's Vault (when importable) on one workload.

Workload (the reference's measurement setup): a trajectory buffer of 16 rows and a 10_000-step
time axis; 1_000 timesteps are added per round (one ``[16, 1000, ...]`` batch through a jitted
``add`` with ``donate_argnums=0``) and the vault is written after every round, 12 rounds, so
the ring wraps. Two experience shapes:

* ``image``: ``{obs: uint8 (84, 84, 3), action: int32, reward: float32, done: bool}`` with
  Atari-like frames: per "game" a static tiled playfield rendered at 2x and area-downscaled
  (blended edges), a scrolling band, an animated "water" band, a few moving sprites and a
  score counter. Frames are pre-generated into a pool (4 games x 512 frames) and each row
  walks through its game's frames from its own offset, so consecutive steps of a row are
  consecutive frames and rows differ (zstd-3 ratio about 14x, gzip-5 about 11x);
* ``vector``: ``obs: float32 (64,)`` smooth random walks, same scalar fields.

Actions are uniform ints in [0, 18), rewards sparse (2 % non-zero) and ``done`` occasional
(0.2 %). The data is deterministic, and both libraries get identical batches.

Measured, per variant and library (only one library's buffer alive at a time):

* writes: only the ``vault.write`` calls are timed; MB/s = raw experience bytes written (sum of
  ``rows x steps x bytes per timestep`` over leaves) / summed write time (MB = 10**6 bytes).
  The loop's total (data generation + add + write) is reported separately;
* on-disk bytes (sum of file sizes, and allocated blocks like ``du``), file count and the
  compression ratio raw / on-disk;
* reads, in a fresh subprocess per library and operation (JAX's backend and TensorStore's
  threads are started on unrelated data before timing, then the peak RSS is reset with
  ``/proc/self/clear_refs`` where allowed):
  read everything and read the last ``steps_per_write`` timesteps (rlvault ``read_numpy`` and
  ``read``, Flashbax ``read``), cold (page cache of every vault file dropped with ``fsync`` +
  ``posix_fadvise(POSIX_FADV_DONTNEED)``, residency checked with ``fincore`` when present, and
  a fresh Vault object; the cold time includes opening it; median of ``cold_repeats``, the
  first of which also pays one-off per-process costs such as compiling, reported separately)
  and warm (the median of repeated reads on the last object). The peak RSS growth (``VmHWM``)
  of the first cold read is compared with the bytes the read returns;
* the fixed cost of a small write (vector variant): the median ``vault.write`` time when one
  timestep was added since the previous write, appending to the vault of the main run
  ("after the run") and to a fresh vault;
* the disk's own sequential write + ``fsync`` bandwidth (and cold read-back) in the same temp
  directory, and the 1/5/15-minute load averages through the run (other work may share the
  machine);
* durability (``--durability``; part of the full run, not of ``--quick``, about a minute):
  what non-blocking recording adds to a training-loop step at the image workload
  (``tools/bench_recording.py``: median and mean step time with and without
  ``vault.write(block=False)`` every 250 steps, default codec), and crash-test throughput
  (``tools/crash_trials.py``: writers SIGKILLed at random moments, then the vault checked and
  appended to; trials and verified timesteps per second).

Flashbax's Vault is used through its public API with its default compression (gzip level 5);
it needs a write at least every ``time_axis - 1`` timesteps, which this workload respects.

Usage::

    python tools/bench_vault.py --quick                   # smoke test, well under a minute
    python tools/bench_vault.py --out results.json        # full configuration, both variants
    python tools/bench_vault.py --variant vector --no-flashbax
    python tools/bench_vault.py --variant none --durability   # the durability section only
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import importlib
import importlib.metadata
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import numpy as np
from _bench_common import (
    log,
    package_version,
    peak_rss_bytes,
    proc_status_bytes,
    reset_peak_rss,
    tree_nbytes,
    write_json,
)

VARIANTS = ("image", "vector")
LIBRARIES = ("rlvault", "flashbax")
PROBE_MARK = "BENCH_VAULT_PROBE_JSON "
MB = 1e6
MIB = 1 << 20
FRAME_SHAPE = (84, 84, 3)
VECTOR_SIZE = 64
N_ACTIONS = 18

# Read operations: (library, name) -> (label, reads everything?)
READ_OPS: dict[str, list[str]] = {
    "rlvault": ["numpy_all", "state_all", "numpy_last", "state_last"],
    "flashbax": ["state_all", "state_last"],
}
READ_LABELS = {
    "numpy_all": "read all, numpy",
    "state_all": "read all, state",
    "numpy_last": "read last N, numpy",
    "state_last": "read last N, state",
}
# rlvault op -> the Flashbax op it is compared with (Flashbax only returns buffer states)
FBX_COUNTERPART = {
    "numpy_all": "state_all",
    "state_all": "state_all",
    "numpy_last": "state_last",
    "state_last": "state_last",
}


@dataclasses.dataclass(frozen=True)
class Config:
    """Sizes and repeat counts of one run."""

    rows: int
    time_axis: int
    steps_per_write: int
    writes: int
    warm_repeats: int
    cold_repeats: int
    small_writes: int
    small_warmup: int
    disk_bytes: int
    pool_games: int
    pool_frames: int
    fbx_writes: dict[str, int] = dataclasses.field(default_factory=dict)

    def writes_for(self, lib: str, variant: str) -> int:
        if lib == "flashbax" and variant in self.fbx_writes:
            return min(self.writes, self.fbx_writes[variant])
        return self.writes


FULL = Config(
    rows=16,
    time_axis=10_000,
    steps_per_write=1_000,
    writes=12,
    warm_repeats=3,
    cold_repeats=3,
    small_writes=50,
    small_warmup=3,
    disk_bytes=1 << 30,
    pool_games=4,
    pool_frames=512,
)
QUICK = Config(
    rows=16,
    time_axis=1_000,
    steps_per_write=100,
    writes=12,
    warm_repeats=2,
    cold_repeats=2,
    small_writes=20,
    small_warmup=2,
    disk_bytes=512 << 20,
    pool_games=4,
    pool_frames=192,
)

# Targets of the issue. Ratios are "rlvault advantage": > 1 means rlvault is better.
TARGET_IMAGE_WRITE_MB_S = 1000.0
TARGET_IMAGE_WRITE_RATIO = 5.0
TARGET_VECTOR_WRITE_RATIO = 10.0
TARGET_READ_RATIO = 3.0
TARGET_PEAK_READ_FRACTION = 1.3
TARGET_SMALL_WRITE_MS = 5.0
TARGET_RECORDING_MEDIAN_RATIO = 1.10

# Durability section: the recording loop of tools/bench_recording.py and crash trials.
DURABILITY_FULL = {"rounds": 6, "steps": 500, "every": 250, "time_axis": 2000, "crash_trials": 20}
DURABILITY_QUICK = {"rounds": 1, "steps": 100, "every": 50, "time_axis": 200, "crash_trials": 2}


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------

_DIGITS = (
    "111101101101111",
    "010110010010111",
    "111001111100111",
    "111001111001111",
    "101101111001001",
    "111100111001111",
    "111100111101111",
    "111001001001001",
    "111101111101111",
    "111101111001111",
)
_FONT = np.array([[c == "1" for c in d] for d in _DIGITS], bool).reshape(10, 5, 3)


def make_frame_pool(games: int, frames: int, seed: int = 0) -> np.ndarray:
    """``[games, frames, 84, 84, 3]`` uint8 Atari-like frames (see the module docstring).

    Each frame is drawn at 2x resolution in float32 and averaged over 2x2 blocks, like the
    usual Atari preprocessing, so sprite edges blend into the background.
    """
    rng = np.random.default_rng(seed)
    h, w, _ = FRAME_SHAPE
    hh, ww = 2 * h, 2 * w
    pool = np.empty((games, frames, *FRAME_SHAPE), np.uint8)
    hi = np.empty((hh, ww, 3), np.float32)
    for g in range(games):
        palette = rng.integers(0, 256, (10, 3)).astype(np.float32)
        tiles = rng.integers(1, 6, (hh // 6, ww // 6))
        tiles[rng.random(tiles.shape) > 0.35] = 0
        tiles[:4] = 0
        background = palette[np.kron(tiles, np.ones((6, 6), int))]
        background[hh - 24 :] = palette[6] + rng.integers(0, 4, (24, ww))[..., None] * 6.0
        background += rng.integers(0, 2, (hh, ww))[..., None] * 8.0  # static dithering
        band = palette[np.kron(rng.integers(7, 10, (3, ww // 4)), np.ones((6, 4), int))]
        water = palette[1:9] * 0.5 + 60.0
        n_sprites = 6
        pos = rng.uniform([30, 6], [hh - 40, ww - 20], (n_sprites, 2))
        vel = rng.uniform(-2.5, 2.5, (n_sprites, 2))
        sizes = rng.integers(4, 16, (n_sprites, 2))
        colors = palette[rng.integers(1, 10, n_sprites)]
        score = 0
        for f in range(frames):
            hi[:] = background
            hi[40:58] = np.roll(band, f, axis=1)  # scrolling band
            ripples = rng.integers(0, 8, (20, ww // 2))  # animated water, 2x2 texels
            hi[60:100] = water[ripples].repeat(2, axis=0).repeat(2, axis=1)
            for s in range(n_sprites):
                pos[s] += vel[s]
                for d, limit in enumerate((hh, ww)):
                    if not 24 <= pos[s, d] <= limit - 30:
                        vel[s, d] *= -1
                        pos[s, d] = np.clip(pos[s, d], 24, limit - 30)
                y, x = int(pos[s, 0]), int(pos[s, 1])
                hi[y : y + sizes[s, 0], x : x + sizes[s, 1]] = colors[s]
            if rng.random() < 0.03:
                score += int(rng.integers(1, 5)) * 10
            for i, ch in enumerate(f"{score:05d}"):
                mask = np.kron(_FONT[int(ch)], np.ones((3, 3), bool))
                hi[4:19, 96 + 12 * i : 105 + 12 * i][mask] = palette[0] + 120.0
            down = hi.reshape(h, 2, w, 2, 3).mean(axis=(1, 3))
            pool[g, f] = np.clip(down, 0, 255).astype(np.uint8)
    return pool


def example_timestep(variant: str) -> dict[str, np.ndarray]:
    """One timestep (no batch or time axis) of the variant's experience."""
    if variant == "image":
        obs = np.zeros(FRAME_SHAPE, np.uint8)
    else:
        obs = np.zeros((VECTOR_SIZE,), np.float32)
    return {
        "obs": obs,
        "action": np.zeros((), np.int32),
        "reward": np.zeros((), np.float32),
        "done": np.zeros((), np.bool_),
    }


def step_nbytes(variant: str) -> int:
    """Raw bytes of one timestep of one row (all leaves)."""
    return sum(int(x.nbytes) for x in example_timestep(variant).values())


class DataSource:
    """Deterministic batches ``[rows, steps, ...]``; two sources with the same arguments yield
    the same sequence (so both libraries store identical data)."""

    def __init__(self, variant: str, rows: int, pool: np.ndarray | None, seed: int = 1) -> None:
        self.variant = variant
        self.rows = rows
        self.pool = pool
        self.seed = seed
        self.t = 0
        rng = np.random.default_rng([seed, 12345])
        if pool is not None:
            games, frames = pool.shape[:2]
            self.games = np.arange(rows) % games
            self.offsets = (np.arange(rows) * 97 + rng.integers(0, frames, rows)) % frames
        self.walk = rng.standard_normal((rows, VECTOR_SIZE)).astype(np.float32)

    def next(self, steps: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([self.seed, self.t])
        shape = (self.rows, steps)
        if self.variant == "image":
            assert self.pool is not None
            frames = self.pool.shape[1]
            idx = (self.offsets[:, None] + self.t + np.arange(steps)[None, :]) % frames
            obs = self.pool[self.games[:, None], idx]
        else:
            noise = rng.standard_normal((*shape, VECTOR_SIZE), dtype=np.float32)
            obs = self.walk[:, None, :] + np.cumsum(noise * np.float32(0.05), axis=1)
            self.walk = obs[:, -1].copy()
        reward_values = rng.choice(np.array([-1.0, 1.0, 10.0], np.float32), shape)
        batch = {
            "obs": obs,
            "action": rng.integers(0, N_ACTIONS, shape, dtype=np.int32),
            "reward": np.where(rng.random(shape) < 0.02, reward_values, np.float32(0)),
            "done": rng.random(shape) < 0.002,
        }
        self.t += steps
        return batch


# --------------------------------------------------------------------------------------------
# Libraries
# --------------------------------------------------------------------------------------------


def load_libraries(no_flashbax: bool) -> dict[str, tuple[ModuleType, Any]]:
    """``{name: (buffers module, Vault class)}``; Flashbax only when importable."""
    import buffers
    from vault import Vault

    libs: dict[str, tuple[ModuleType, Any]] = {"rlvault": (buffers, Vault)}
    if not no_flashbax:
        try:
            fbx = importlib.import_module("flashbax")
            fbx_vault = importlib.import_module("flashbax.vault")
        except ImportError as err:
            log(f"flashbax not importable ({err}); running rlvault only")
        else:
            libs["flashbax"] = (fbx, fbx_vault.Vault)
    return libs


def make_buffer(module: ModuleType, cfg: Config) -> Any:
    return module.make_trajectory_buffer(
        add_batch_size=cfg.rows,
        sample_batch_size=1,
        sample_sequence_length=1,
        period=1,
        min_length_time_axis=1,
        max_length_time_axis=cfg.time_axis,
    )


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """Flashbax's Vault prints to stdout; keep stdout for the table and the probe's JSON."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def create_vault(lib: str, vault_cls: Any, location: Path, state: Any) -> tuple[Any, Path]:
    """A new vault for ``state``'s experience; returns it and the directory holding its files."""
    if lib == "rlvault":
        return vault_cls.create(str(location), state), location
    with quiet_stdout():
        v = vault_cls(
            vault_name=location.name,
            experience_structure=state.experience,
            rel_dir=str(location.parent),
            vault_uid="v",
        )
    return v, location / "v"


def open_vault(lib: str, vault_cls: Any, data_dir: Path) -> Any:
    if lib == "rlvault":
        return vault_cls.open(str(data_dir), "r")
    with quiet_stdout():
        return vault_cls(
            vault_name=data_dir.parent.name, rel_dir=str(data_dir.parent.parent), vault_uid="v"
        )


def read_op(lib: str, op: str, v: Any, last: int) -> Any:
    if lib == "rlvault":
        if op == "numpy_all":
            return v.read_numpy()
        if op == "numpy_last":
            return v.read_numpy(last=last)
        if op == "state_all":
            return v.read()
        if op == "state_last":
            return v.read(timesteps=last)
    elif op == "state_all":
        return v.read()
    elif op == "state_last":
        return v.read(timesteps=last)
    raise ValueError(f"unknown read op {lib}/{op}")


# --------------------------------------------------------------------------------------------
# Files, page cache, memory
# --------------------------------------------------------------------------------------------


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def dir_usage(path: Path) -> dict[str, int]:
    """File count, summed sizes and allocated bytes (``st_blocks * 512``, as ``du`` counts).

    rlvault's ``trash/`` (old versions of replaced files that a live writer frees in the
    background, see ``vault/_reclaim.py``) is counted apart, as ``trash_*``: it is transient.
    """
    out = {"files": 0, "bytes": 0, "allocated_bytes": 0, "trash_files": 0, "trash_bytes": 0}
    for p in files_under(path):
        try:
            st = p.stat()
        except FileNotFoundError:  # freed while we looked
            continue
        if p.parent.name == "trash" and p.name != "zarr.json":
            out["trash_files"] += 1
            out["trash_bytes"] += st.st_size
            continue
        out["files"] += 1
        out["bytes"] += st.st_size
        out["allocated_bytes"] += st.st_blocks * 512
    return out


def resident_bytes(files: list[Path]) -> int | None:
    """Bytes of ``files`` in the page cache, from ``fincore`` (None when unavailable)."""
    exe = shutil.which("fincore")
    if exe is None or not files:
        return None if exe is None else 0
    total = 0
    for i in range(0, len(files), 400):
        cmd = [exe, "--bytes", "--noheadings", "--raw", "--output", "RES"]
        done = subprocess.run(
            cmd + [str(p) for p in files[i : i + 400]], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            return None
        total += sum(int(x) for x in done.stdout.split())
    return total


def drop_page_cache(path: Path) -> dict[str, Any]:
    """``fsync`` + ``posix_fadvise(DONTNEED)`` every file under ``path`` (or ``path`` itself)."""
    files = [path] if path.is_file() else files_under(path)
    before = resident_bytes(files)
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return {
        "method": "fsync + posix_fadvise(POSIX_FADV_DONTNEED) per file",
        "files": len(files),
        "resident_before_bytes": before,
        "resident_after_bytes": resident_bytes(files),
    }


def block(tree: Any) -> None:
    """Wait for JAX arrays in ``tree`` (numpy leaves are already there)."""
    jax.block_until_ready([x for x in jax.tree.leaves(tree) if isinstance(x, jax.Array)])


# --------------------------------------------------------------------------------------------
# Disk bandwidth
# --------------------------------------------------------------------------------------------


def measure_disk(workdir: Path, nbytes: int) -> dict[str, Any]:
    """Sequential write of ``nbytes`` (random bytes, 16 MiB blocks) + ``fsync``, then a cold
    read-back after dropping the file's pages."""
    block_bytes = 16 * MIB
    data = np.random.default_rng(0).integers(0, 256, block_bytes, dtype=np.uint8).tobytes()
    n_blocks = max(1, nbytes // block_bytes)
    path = workdir / "disk_bandwidth.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        for _ in range(n_blocks):
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        os.fsync(fd)
        write_s = time.perf_counter() - t0
    finally:
        os.close(fd)
    written = n_blocks * block_bytes
    drop = drop_page_cache(path)
    buf = bytearray(block_bytes)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass
    read_s = time.perf_counter() - t0
    path.unlink()
    return {
        "bytes": written,
        "write_fsync_s": write_s,
        "write_fsync_mb_s": written / write_s / MB,
        "cold_read_s": read_s,
        "cold_read_mb_s": written / read_s / MB,
        "cache_drop": drop,
    }


# --------------------------------------------------------------------------------------------
# Writes
# --------------------------------------------------------------------------------------------


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
    cfg: Config,
    pool: np.ndarray | None,
    workdir: Path,
) -> WriteRun:
    """Fill a buffer round by round and write the vault after every round (only writes timed)."""
    buffer = make_buffer(module, cfg)
    add = jax.jit(buffer.add, donate_argnums=0)
    state = buffer.init(example_timestep(variant))
    source = DataSource(variant, cfg.rows, pool)
    location = workdir / f"{lib}_{variant}"
    t0 = time.perf_counter()
    v, data_dir = create_vault(lib, vault_cls, location, state)
    create_s = time.perf_counter() - t0
    per_step = step_nbytes(variant)
    n_writes = cfg.writes_for(lib, variant)
    writes: list[dict[str, Any]] = []
    gen_s = add_s = 0.0
    gc.collect()
    rss_before = proc_status_bytes("VmRSS")
    reset_ok = reset_peak_rss()
    peak_base = peak_rss_bytes()
    loop_t0 = time.perf_counter()
    for i in range(n_writes):
        t0 = time.perf_counter()
        batch = source.next(cfg.steps_per_write)
        t1 = time.perf_counter()
        state = add(state, batch)
        jax.block_until_ready(state)
        del batch
        t2 = time.perf_counter()
        written = v.write(state)
        t3 = time.perf_counter()
        if written != cfg.steps_per_write:
            raise RuntimeError(f"{lib} write {i} wrote {written}, not {cfg.steps_per_write}")
        gen_s += t1 - t0
        add_s += t2 - t1
        raw = cfg.rows * written * per_step
        writes.append({"steps": written, "seconds": t3 - t2, "mb_s": raw / (t3 - t2) / MB})
        log(
            f"    {lib:<8} {variant:<6} write {i + 1:>2}/{n_writes}: {t3 - t2:7.3f} s "
            f"({raw / (t3 - t2) / MB:8.1f} MB/s)"
        )
    loop_s = time.perf_counter() - loop_t0
    write_s = sum(w["seconds"] for w in writes)
    steps = sum(w["steps"] for w in writes)
    raw_bytes = cfg.rows * steps * per_step
    usage = dir_usage(data_dir)
    result = {
        "writes": n_writes,
        "steps_per_write": cfg.steps_per_write,
        "timesteps_written": steps,
        "raw_bytes": raw_bytes,
        "create_s": create_s,
        "write_s": write_s,
        "write_mb_s": raw_bytes / write_s / MB,
        "write_mb_s_median_of_writes": statistics.median(w["mb_s"] for w in writes),
        "write_mb_s_after_first": (
            cfg.rows
            * (steps - writes[0]["steps"])
            * per_step
            / (write_s - writes[0]["seconds"])
            / MB
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
    cfg: Config,
    run: WriteRun,
    workdir: Path,
) -> dict[str, Any]:
    """Median ``write`` time when one timestep was added since the previous write."""
    one = DataSource("vector", cfg.rows, None, seed=7)
    out: dict[str, Any] = {}

    def series(v: Any, state: Any, add1: Callable[[Any, Any], Any]) -> tuple[list[float], Any]:
        times = []
        for i in range(cfg.small_warmup + cfg.small_writes):
            state = add1(state, one.next(1))
            jax.block_until_ready(state)
            t0 = time.perf_counter()
            n = v.write(state)
            dt = time.perf_counter() - t0
            if n != 1:
                raise RuntimeError(f"{lib} small write wrote {n} timesteps, not 1")
            if i >= cfg.small_warmup:
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
    buffer = make_buffer(module, cfg)
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


# --------------------------------------------------------------------------------------------
# Reads (in subprocesses)
# --------------------------------------------------------------------------------------------


def warm_up_process(module: ModuleType) -> float:
    """Pay the process's one-time costs before timing anything: JAX's backend start-up, the
    eager operations of building a (tiny) buffer state of ``module`` (both libraries' ``read``
    build one) and TensorStore's I/O and decoding threads (a small zarr3 array with several
    zstd chunks, written and read back in its own temp directory). No vault data is touched,
    so the reads measured afterwards stay cold."""
    import tensorstore as ts

    t0 = time.perf_counter()
    tiny = {"x": jax.numpy.zeros((1, 1), jax.numpy.float32)}
    state = module.trajectory_buffer.TrajectoryBufferState(
        experience=tiny,
        current_index=jax.numpy.asarray(0, jax.numpy.int32),
        is_full=jax.numpy.asarray(True),
    )
    jax.block_until_ready(jax.tree.leaves(state))
    with tempfile.TemporaryDirectory(prefix="bench_vault_warmup_") as tmp:
        spec = {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": f"{tmp}/"},
            "metadata": {
                "shape": [8, 4096],
                "data_type": "float32",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 512]}},
                "codecs": [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 3}}],
            },
        }
        arr = ts.open(spec, create=True).result()
        arr.write(np.arange(8 * 4096, dtype=np.float32).reshape(8, 4096)).result()
        arr.read().result()
    return time.perf_counter() - t0


def probe_reads(spec: dict[str, Any]) -> dict[str, Any]:
    """Child process: cold then warm reads of ``spec['ops']`` on one vault, peak RSS each."""
    lib, data_dir, last = spec["lib"], Path(spec["data_dir"]), int(spec["last"])
    libs = load_libraries(no_flashbax=lib != "flashbax")
    module, vault_cls = libs[lib]
    results: dict[str, Any] = {"process_warmup_s": warm_up_process(module)}
    can_reset = reset_peak_rss()
    for op in spec["ops"]:
        colds: list[dict[str, Any]] = []
        nbytes, shape, v = 0, [0], None
        for _ in range(int(spec["cold_repeats"])):
            v = None
            gc.collect()
            drop = drop_page_cache(data_dir)
            rss0 = proc_status_bytes("VmRSS")
            reset_peak_rss()
            base = peak_rss_bytes()
            t0 = time.perf_counter()
            v = open_vault(lib, vault_cls, data_dir)
            t1 = time.perf_counter()
            out = read_op(lib, op, v, last)
            block(out)
            t2 = time.perf_counter()
            peak = peak_rss_bytes()
            nbytes = tree_nbytes(out)
            shape = list(jax.tree.leaves(out)[0].shape)
            del out
            colds.append(
                {
                    "open_s": t1 - t0,
                    "read_s": t2 - t1,
                    "total_s": t2 - t0,
                    "rss_before_bytes": rss0,
                    "peak_growth_bytes": peak - base,
                    "cache_drop": drop,
                }
            )
        gc.collect()
        warm = []
        for _ in range(int(spec["repeats"])):
            t3 = time.perf_counter()
            again = read_op(lib, op, v, last)
            block(again)
            warm.append(time.perf_counter() - t3)
            del again
            gc.collect()
        del v
        cold_s = statistics.median(c["total_s"] for c in colds)
        peak_growth = colds[0]["peak_growth_bytes"]
        results[op] = {
            "bytes": nbytes,
            "first_leaf_shape": shape,
            "cold": colds,
            "cold_s": cold_s,
            "cold_mb_s": nbytes / cold_s / MB,
            "first_cold_s": colds[0]["total_s"],
            "first_cold_mb_s": nbytes / colds[0]["total_s"] / MB,
            "warm_s": warm,
            "warm_mb_s": nbytes / statistics.median(warm) / MB,
            "peak_growth_bytes": peak_growth,
            "peak_growth_over_data": peak_growth / nbytes,
            "peak_growth_over_data_each_cold": [c["peak_growth_bytes"] / nbytes for c in colds],
            "peak_clean": can_reset,
        }
    return results


def run_read_probes(
    lib: str, data_dir: Path, cfg: Config, variant: str, timeout: float
) -> dict[str, Any]:
    """A fresh subprocess per read operation, so that its peak RSS is clean (a process keeps
    allocator caches and thread arenas from earlier reads)."""
    groups = [[op] for op in READ_OPS[lib]]
    results: dict[str, Any] = {}
    for group in groups:
        spec = {
            "lib": lib,
            "data_dir": str(data_dir),
            "ops": group,
            "last": cfg.steps_per_write,
            "repeats": cfg.warm_repeats,
            "cold_repeats": cfg.cold_repeats,
        }
        cmd = [sys.executable, os.path.abspath(__file__), "--probe-read", json.dumps(spec)]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        found = [ln for ln in done.stdout.splitlines() if ln.startswith(PROBE_MARK)]
        if done.returncode != 0 or not found:
            log(f"    read probe {lib}/{group} failed (rc={done.returncode}):")
            log(done.stderr[-3000:])
            for op in group:
                results[op] = {"error": done.stderr[-2000:]}
            continue
        got = json.loads(found[-1][len(PROBE_MARK) :])
        results.setdefault("process_warmup_s", []).append(got.pop("process_warmup_s"))
        results.update(got)
        log(f"    {lib:<8} {variant:<6} read probe ({time.perf_counter() - t0:.1f} s):")
        for op in group:
            r = results[op]
            log(
                f"      {READ_LABELS[op]:<20} {r['bytes'] / MB:9.1f} MB  cold {r['cold_s']:7.3f} s "
                f"({r['cold_mb_s']:8.1f} MB/s)  warm {statistics.median(r['warm_s']):7.3f} s "
                f"({r['warm_mb_s']:8.1f} MB/s)  peak growth {r['peak_growth_over_data']:.2f}x data"
            )
    return results


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def run_variant(
    variant: str, libs: dict[str, tuple[ModuleType, Any]], cfg: Config, workdir: Path
) -> dict[str, Any]:
    log(f"== {variant}")
    pool = None
    t0 = time.perf_counter()
    if variant == "image":
        pool = make_frame_pool(cfg.pool_games, cfg.pool_frames)
    pool_s = time.perf_counter() - t0
    per_lib: dict[str, Any] = {}
    for lib, (module, vault_cls) in libs.items():
        run = run_writes(lib, module, vault_cls, variant, cfg, pool, workdir)
        res: dict[str, Any] = {"write": run.result}
        if variant == "image":  # free the 3.4 GB buffer before reading
            run.state = None
        gc.collect()
        timeout = 600.0
        res["reads"] = run_read_probes(lib, run.data_dir, cfg, variant, timeout)
        if variant == "vector":
            res["small_write"] = run_small_writes(lib, module, vault_cls, cfg, run, workdir)
        res["loadavg_after"] = loadavg()
        per_lib[lib] = res
        del run.vault, run.state, run.buffer
        shutil.rmtree(run.location, ignore_errors=True)
        del run
        gc.collect()
    return {
        "variant": variant,
        "step_bytes": step_nbytes(variant),
        "pool_generation_s": pool_s,
        "libraries": per_lib,
    }


def run_durability(quick: bool, workdir: Path) -> dict[str, Any]:
    """Recording overhead (``bench_recording.measure``, default codec) and crash-test
    throughput (``crash_trials.run_trials``, random SIGKILLs)."""
    import bench_recording
    import crash_trials

    cfg = DURABILITY_QUICK if quick else DURABILITY_FULL
    log(
        f"== durability: recording {cfg['rounds']} blocks of {cfg['steps']} steps, "
        f"{cfg['crash_trials']} crash trials"
    )
    t0 = time.perf_counter()
    recording = bench_recording.measure(
        cfg["rounds"],
        cfg["steps"],
        cfg["every"],
        cfg["time_axis"],
        ("auto",),
        workdir=workdir,
        log=log,
    )
    rec = recording["with"]["auto"]
    log(
        f"  recording overhead: median {rec['median_ratio']:.3f}x, mean {rec['mean_ratio']:.3f}x "
        f"({time.perf_counter() - t0:.1f} s)"
    )
    t0 = time.perf_counter()
    crash = crash_trials.run_trials(cfg["crash_trials"], seed=0, fault="random", workdir=workdir)
    log(
        f"  crash trials: {crash['trials']} in {crash['seconds']:.1f} s, "
        f"{crash['failures']} failed ({time.perf_counter() - t0:.1f} s)"
    )
    return {"config": dict(cfg), "recording": recording, "crash_trials": crash}


def code_provenance() -> dict[str, Any]:
    import vault

    root = Path(vault.__file__).resolve().parents[1]

    def git(*cmd: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(root), *cmd], capture_output=True, text=True, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    status = git("status", "--porcelain", "--", "vault", "buffers")
    return {
        "vault_path": str(Path(vault.__file__).parent),
        "git_commit": git("rev-parse", "HEAD"),
        "vault_or_buffers_dirty": None if status is None else bool(status),
    }


def machine_info() -> dict[str, Any]:
    cpu_model = mem_total = None
    with contextlib.suppress(OSError, StopIteration):
        with open("/proc/cpuinfo") as f:
            cpu_model = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
        with open("/proc/meminfo") as f:
            mem_total = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemTotal"))
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model,
        "mem_total_bytes": mem_total,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "numpy": np.__version__,
        "tensorstore": package_version("tensorstore"),
        "flashbax": package_version("flashbax"),
        "rlvault": package_version("rlvault"),
    }


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def ratio(rl: float | None, fb: float | None, higher_is_better: bool) -> float | None:
    """rlvault advantage: > 1 means rlvault is better."""
    if rl is None or fb is None or rl == 0 or fb == 0:
        return None
    return rl / fb if higher_is_better else fb / rl


def build_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Table rows: variant, metric, unit, rlvault, flashbax, ratio, target, met."""
    rows: list[dict[str, Any]] = []

    def add(
        variant: str,
        metric: str,
        unit: str,
        rl: float | None,
        fb: float | None,
        higher_is_better: bool,
        target: str | None = None,
        met: bool | None = None,
    ) -> None:
        rows.append(
            {
                "variant": variant,
                "metric": metric,
                "unit": unit,
                "rlvault": rl,
                "flashbax": fb,
                "ratio": ratio(rl, fb, higher_is_better),
                "target": target,
                "met": met,
            }
        )

    disk = result["disk_bandwidth"]
    add("disk", "sequential write + fsync", "MB/s", disk["write_fsync_mb_s"], None, True)
    add("disk", "cold sequential read", "MB/s", disk["cold_read_mb_s"], None, True)
    last = result["config"]["steps_per_write"]
    for vres in result["variants"]:
        variant = vres["variant"]
        libs = vres["libraries"]
        rl = libs["rlvault"]
        fb = libs.get("flashbax")

        def get(lib: dict[str, Any] | None, *keys: str) -> Any:
            cur: Any = lib
            for k in keys:
                if not isinstance(cur, dict) or k not in cur:
                    return None
                cur = cur[k]
            return cur

        w_rl, w_fb = get(rl, "write", "write_mb_s"), get(fb, "write", "write_mb_s")
        r = ratio(w_rl, w_fb, True)
        if variant == "image":
            add(
                variant,
                "write (all writes)",
                "MB/s",
                w_rl,
                w_fb,
                True,
                f">= {TARGET_IMAGE_WRITE_MB_S:.0f} MB/s and >= {TARGET_IMAGE_WRITE_RATIO:.0f}x",
                w_rl >= TARGET_IMAGE_WRITE_MB_S and (r is None or r >= TARGET_IMAGE_WRITE_RATIO),
            )
        else:
            add(
                variant,
                "write (all writes)",
                "MB/s",
                w_rl,
                w_fb,
                True,
                f">= {TARGET_VECTOR_WRITE_RATIO:.0f}x",
                None if r is None else r >= TARGET_VECTOR_WRITE_RATIO,
            )
        add(
            variant,
            "write, median of writes",
            "MB/s",
            get(rl, "write", "write_mb_s_median_of_writes"),
            get(fb, "write", "write_mb_s_median_of_writes"),
            True,
        )
        add(
            variant,
            "write loop total (gen + add + write)",
            "s",
            get(rl, "write", "loop_total_s"),
            get(fb, "write", "loop_total_s"),
            False,
        )
        for op in READ_OPS["rlvault"]:
            fop = FBX_COUNTERPART[op]
            label = READ_LABELS[op].replace("last N", f"last {last}")
            for temp in ("cold", "warm"):
                a = get(rl, "reads", op, f"{temp}_mb_s")
                b = get(fb, "reads", fop, f"{temp}_mb_s")
                rr = ratio(a, b, True)
                add(
                    variant,
                    f"{label}, {temp}",
                    "MB/s",
                    a,
                    b,
                    True,
                    f">= {TARGET_READ_RATIO:.0f}x",
                    None if rr is None else rr >= TARGET_READ_RATIO,
                )
        for op in ("numpy_all", "state_all"):
            add(
                variant,
                f"{READ_LABELS[op]}, first cold read in a fresh process",
                "MB/s",
                get(rl, "reads", op, "first_cold_mb_s"),
                get(fb, "reads", FBX_COUNTERPART[op], "first_cold_mb_s"),
                True,
            )
        for op in ("numpy_all", "state_all"):
            a = get(rl, "reads", op, "peak_growth_over_data")
            b = get(fb, "reads", FBX_COUNTERPART[op], "peak_growth_over_data")
            add(
                variant,
                f"peak RSS growth / data, {READ_LABELS[op]}",
                "x",
                a,
                b,
                False,
                f"<= {TARGET_PEAK_READ_FRACTION}x",
                None if a is None else a <= TARGET_PEAK_READ_FRACTION,
            )
        d_rl, d_fb = get(rl, "write", "disk"), get(fb, "write", "disk")
        add(
            variant,
            "on-disk bytes",
            "MB",
            d_rl["bytes"] / MB,
            None if d_fb is None else d_fb["bytes"] / MB,
            False,
        )
        add(
            variant,
            "allocated bytes (du)",
            "MB",
            d_rl["allocated_bytes"] / MB,
            None if d_fb is None else d_fb["allocated_bytes"] / MB,
            False,
        )
        add(
            variant,
            "files",
            "",
            d_rl["files"],
            None if d_fb is None else d_fb["files"],
            False,
        )
        add(
            variant,
            "compression ratio (raw / on-disk)",
            "x",
            get(rl, "write", "compression_ratio"),
            get(fb, "write", "compression_ratio"),
            True,
        )
        if variant == "vector":
            for where, label in (("after_run", "after the run"), ("fresh", "fresh vault")):
                a = get(rl, "small_write", where, "median_ms")
                add(
                    variant,
                    f"small write (1 step), {label}",
                    "ms",
                    a,
                    get(fb, "small_write", where, "median_ms"),
                    False,
                    f"<= {TARGET_SMALL_WRITE_MS:.0f} ms",
                    None if a is None else a <= TARGET_SMALL_WRITE_MS,
                )
    durability = result.get("durability")
    if durability:
        rec = durability["recording"]["with"]["auto"]
        every = durability["recording"]["write_every"]
        add(
            "durability",
            f"recording overhead, median step time (image, write every {every} steps)",
            "x",
            rec["median_ratio"],
            None,
            False,
            f"<= {TARGET_RECORDING_MEDIAN_RATIO:.2f}x",
            rec["median_ratio"] <= TARGET_RECORDING_MEDIAN_RATIO,
        )
        add("durability", "recording overhead, mean step time", "x", rec["mean_ratio"], None, False)
        add("durability", "recording, final flush", "s", rec["final_flush_s"], None, False)
        crash = durability["crash_trials"]
        add(
            "durability",
            "crash trials (SIGKILL at random), failed",
            "",
            crash["failures"],
            None,
            False,
            "0",
            crash["failures"] == 0,
        )
        add("durability", "crash trials", "trials/s", crash["trials_per_s"], None, True)
        add(
            "durability",
            "crash trials, timesteps verified",
            "timesteps/s",
            crash["timesteps_verified_per_s"],
            None,
            True,
        )
    return rows


def fmt(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    if unit == "" and float(x).is_integer():
        return f"{int(x):,}"
    if unit == "x":
        return f"{x:.2f}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def markdown(result: dict[str, Any]) -> Iterator[str]:
    cfg = result["config"]
    load = result["loadavg"]
    yield (
        f"{cfg['rows']} rows, {cfg['time_axis']:,}-step time axis, a write every "
        f"{cfg['steps_per_write']:,} steps, {cfg['writes']} writes; MB = 10^6 bytes of raw "
        "experience; ratio = rlvault advantage (> 1: rlvault better; throughput rlvault / "
        "flashbax, sizes, times and memory flashbax / rlvault). Flashbax: default compression "
        "(gzip 5)."
    )
    cut = {k: v for k, v in cfg.get("fbx_writes", {}).items() if v < cfg["writes"]}
    if cut:
        yield f"Flashbax ran fewer writes: {cut} (throughputs are per byte, so still comparable)."
    yield (
        f"Machine: {result['machine']['cpu_count']} CPUs; load average (1/5/15 min) "
        f"{load['start']} at start, {load['end']} at end."
    )
    durability = result.get("durability")
    if durability:
        rec, crash = durability["recording"], durability["crash_trials"]
        yield (
            f"Durability: recording = {rec['rounds']} blocks of {rec['steps_per_block']:,} "
            "steps of tools/bench_recording.py's loop (16 Atari-like frames added per step, "
            f"sample 32, MLP SGD step) with `write(block=False)` every {rec['write_every']} "
            "steps, default codec, taking turns with blocks of the same loop without recording "
            f"(ratio > 1: slower); {crash['trials']} crash trials (tools/crash_trials.py, SIGKILL "
            "at random moments; timesteps per row compared after the kills)."
        )
    yield ""
    yield "| variant | metric | unit | rlvault | flashbax | ratio | target | met |"
    yield "|---|---|---|---:|---:|---:|---|---|"
    for r in result["rows"]:
        met = "-" if r["met"] is None else ("yes" if r["met"] else "**no**")
        yield (
            f"| {r['variant']} | {r['metric']} | {r['unit']} | {fmt(r['rlvault'], r['unit'])} | "
            f"{fmt(r['flashbax'], r['unit'])} | {fmt(r['ratio'], 'x')} | {r['target'] or ''} | "
            f"{met} |"
        )


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small smoke-test configuration")
    p.add_argument(
        "--variant",
        choices=[*VARIANTS, "both", "none"],
        default="both",
        help="workload of the write/read measurements ('none': skip them)",
    )
    p.add_argument(
        "--durability",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="recording overhead and crash-test throughput (default: on in the full run, off "
        "with --quick)",
    )
    p.add_argument("--no-flashbax", action="store_true", help="run rlvault only")
    p.add_argument("--out", type=Path, default=None, help="write the JSON here")
    p.add_argument("--tmpdir", type=Path, default=None, help="parent of the temp directory")
    p.add_argument(
        "--fbx-writes",
        action="append",
        default=[],
        metavar="VARIANT=N",
        help="cut Flashbax's run of a variant to N writes (e.g. image=4)",
    )
    p.add_argument("--writes", type=int, default=None, help="override the number of writes")
    p.add_argument("--probe-read", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.probe_read is not None:
        res = probe_reads(json.loads(args.probe_read))
        print(PROBE_MARK + json.dumps(res), flush=True)
        return 0
    cfg = QUICK if args.quick else FULL
    fbx_writes = {}
    for item in args.fbx_writes:
        name, _, n = item.partition("=")
        if name not in VARIANTS or not n.isdigit():
            raise SystemExit(f"--fbx-writes takes VARIANT=N with VARIANT in {VARIANTS}: {item!r}")
        fbx_writes[name] = int(n)
    cfg = dataclasses.replace(cfg, fbx_writes=fbx_writes)
    if args.writes is not None:
        cfg = dataclasses.replace(cfg, writes=args.writes)
    variants = {"both": list(VARIANTS), "none": []}.get(args.variant, [args.variant])
    durability = (not args.quick) if args.durability is None else args.durability
    libs = load_libraries(args.no_flashbax)
    load_start = loadavg()
    code_start = code_provenance()
    t_start = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="bench_vault_", dir=args.tmpdir))
    mode = "quick" if args.quick else "full"
    log(f"bench_vault: {mode} run in {workdir}; libraries {list(libs)}")
    try:
        disk = measure_disk(workdir, cfg.disk_bytes)
        log(
            f"disk: write+fsync {disk['write_fsync_mb_s']:,.0f} MB/s, cold read "
            f"{disk['cold_read_mb_s']:,.0f} MB/s ({disk['bytes'] / MB:,.0f} MB)"
        )
        variant_results = [run_variant(v, libs, cfg, workdir) for v in variants]
        durability_result = run_durability(args.quick, workdir) if durability else None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    code_end = code_provenance()
    if code_end != code_start:
        log(f"WARNING: vault/ or buffers/ changed during the run: {code_start} -> {code_end}")
    result: dict[str, Any] = {
        "benchmark": "tools/bench_vault.py",
        "quick": args.quick,
        "config": dataclasses.asdict(cfg),
        "libraries": list(libs),
        "machine": machine_info(),
        "rlvault_code": code_start,
        "rlvault_code_at_end": code_end,
        "loadavg": {"start": load_start, "end": loadavg()},
        "total_s": time.perf_counter() - t_start,
        "disk_bandwidth": disk,
        "variants": variant_results,
    }
    if durability_result is not None:
        result["durability"] = durability_result
    result["rows"] = build_rows(result)
    result["targets_missed"] = [
        f"{r['variant']}: {r['metric']}" for r in result["rows"] if r["met"] is False
    ]
    text = "\n".join(markdown(result))
    print(text, flush=True)
    if args.out is not None:
        write_json(args.out, result)
    log(f"total {result['total_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
