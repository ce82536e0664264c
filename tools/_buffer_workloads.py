"""The workloads of ``tools/bench_buffers.py``: for each buffer kind and layout the buffer of
either library (rlvault's ``buffers`` or Flashbax), the batch one ``add`` takes and the jitted
functions that are timed (a Python loop of jitted calls, or N iterations in one ``lax.scan``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

KINDS = ("flat", "item", "trajectory", "prioritised_trajectory")
LAYOUTS = ("single", "batch")


@dataclasses.dataclass(frozen=True)
class Config:
    """Sizes and iteration counts of one benchmark run."""

    capacity: int
    repeats: int
    inner: int
    n_add1_loop: int
    n_add1_scan: int
    n_addb_loop: int
    n_addb_scan: int
    n_sample_loop: int
    n_sample_scan: int
    add_batch_size: int = 128
    sample_batch_size: int = 256
    sample_sequence_length: int = 2
    period: int = 1
    obs_shape: tuple[int, ...] = (32, 32, 3)
    kinds: tuple[str, ...] = KINDS  # the buffer kinds measured
    device: str = "cpu"  # the prioritised buffers' ``device`` argument (both libraries)


# --------------------------------------------------------------------------------------------
# Libraries, buffers, data
# --------------------------------------------------------------------------------------------


def load_libraries() -> dict[str, ModuleType]:
    """``{"rlvault": buffers, "flashbax": flashbax}``; Flashbax only when importable."""
    import buffers

    libs: dict[str, ModuleType] = {"rlvault": buffers}
    with contextlib.suppress(ImportError):
        libs["flashbax"] = importlib.import_module("flashbax")
    return libs


def timestep(cfg: Config) -> dict[str, jax.Array]:
    """One timestep (no batch or time axis)."""
    return {
        "obs": jnp.zeros(cfg.obs_shape, jnp.float32),
        "reward": jnp.zeros((), jnp.float32),
        "done": jnp.zeros((), jnp.bool_),
        "action": jnp.zeros((), jnp.int32),
    }


def layout_capacity(cfg: Config, layout: str) -> int:
    """Timesteps held: the batch layout rounds down to a multiple of ``add_batch_size``."""
    if layout == "single":
        return cfg.capacity
    return (cfg.capacity // cfg.add_batch_size) * cfg.add_batch_size


def make_buffer(lib: ModuleType, kind: str, layout: str, cfg: Config) -> Any:
    """The buffer of ``kind`` whose ``add`` takes one timestep (single) or 128 (batch)."""
    cap = layout_capacity(cfg, layout)
    single = layout == "single"
    rows = 1 if single else cfg.add_batch_size
    seq, period = cfg.sample_sequence_length, cfg.period
    if kind == "flat":
        return lib.make_flat_buffer(
            cap,
            cfg.sample_batch_size,
            cfg.sample_batch_size,
            add_batch_size=None if single else rows,
        )
    if kind == "item":
        return lib.make_item_buffer(
            cap, cfg.sample_batch_size, cfg.sample_batch_size, add_batches=not single
        )
    if kind == "trajectory":
        return lib.make_trajectory_buffer(
            rows, cfg.sample_batch_size, seq, period, seq, max_length_time_axis=cap // rows
        )
    if kind == "prioritised_trajectory":
        return lib.make_prioritised_trajectory_buffer(
            rows,
            cfg.sample_batch_size,
            seq,
            period,
            seq,
            max_length_time_axis=cap // rows,
            priority_exponent=0.6,
            device=cfg.device,
        )
    raise ValueError(f"unknown buffer kind {kind!r}")


def describe_layout(kind: str, layout: str, cfg: Config) -> str:
    cap = layout_capacity(cfg, layout)
    b = cfg.add_batch_size
    seq = f"sample_sequence_length={cfg.sample_sequence_length}, period={cfg.period}"
    if kind == "flat":
        return f"max_length={cap}, add_batch_size={None if layout == 'single' else b}"
    if kind == "item":
        return f"max_length={cap}, add_batches={layout == 'batch'}"
    rows = 1 if layout == "single" else b
    return f"add_batch_size={rows}, max_length_time_axis={cap // rows}, {seq}"


def make_batch(kind: str, layout: str, cfg: Config) -> dict[str, jax.Array]:
    """What one ``add`` call takes for this kind and layout (non-zero data)."""
    if layout == "single":
        prefix: tuple[int, ...] = (1, 1) if kind.endswith("trajectory") else ()
    else:
        b = cfg.add_batch_size
        prefix = (b, 1) if kind.endswith("trajectory") else (b,)
    rng = np.random.default_rng(0)
    return {
        "obs": jnp.asarray(rng.standard_normal((*prefix, *cfg.obs_shape), dtype=np.float32)),
        "reward": jnp.ones(prefix, jnp.float32),
        "done": jnp.zeros(prefix, jnp.bool_),
        "action": jnp.ones(prefix, jnp.int32),
    }


def adds_to_fill(cfg: Config, layout: str) -> int:
    """``add`` calls that write every slot (each call adds 1 or ``add_batch_size`` timesteps)."""
    per_add = 1 if layout == "single" else cfg.add_batch_size
    return layout_capacity(cfg, layout) // per_add


# --------------------------------------------------------------------------------------------
# Jitted workloads
# --------------------------------------------------------------------------------------------


def checksum(tree: Any) -> jax.Array:
    """A scalar that depends on every element of ``tree`` (keeps the sample from being elided)."""
    total = jnp.zeros((), jnp.float32)
    for leaf in jax.tree_util.tree_leaves(tree):
        total = total + jnp.sum(leaf.astype(jnp.float32))
    return total


def scan_add(add: Callable[[Any, Any], Any], n: int) -> Callable[[Any, Any], Any]:
    """``state -> state`` after ``n`` adds of ``batch``, all inside one ``lax.scan``."""

    def run(state: Any, batch: Any) -> Any:
        def body(carry: Any, _: None) -> tuple[Any, None]:
            return add(carry, batch), None

        out, _ = jax.lax.scan(body, state, None, length=n)
        return out

    return run


def scan_sample(sample: Callable[[Any, Any], Any], n: int) -> Callable[[Any, Any], jax.Array]:
    """``n`` samples inside one ``lax.scan``, each reduced into a running checksum."""

    def run(state: Any, key: jax.Array) -> jax.Array:
        def body(acc: jax.Array, k: jax.Array) -> tuple[jax.Array, None]:
            return acc + checksum(sample(state, k)), None

        out, _ = jax.lax.scan(body, jnp.zeros((), jnp.float32), jax.random.split(key, n))
        return out

    return run


@dataclasses.dataclass
class Workload:
    """One library's buffer for one (kind, layout) and its jitted functions (compiled once)."""

    buffer: Any
    batch: dict[str, jax.Array]
    add_loop: Callable[[Any, Any], Any]
    add_scan: Callable[[Any, Any], Any]
    n_add_loop: int
    n_add_scan: int
    sample_loop: Callable[[Any, Any], Any] | None = None
    sample_scan: Callable[[Any, Any], jax.Array] | None = None
    first_call_s: dict[str, float] = dataclasses.field(default_factory=dict)


def make_workload(lib: ModuleType, kind: str, layout: str, cfg: Config) -> Workload:
    buf = make_buffer(lib, kind, layout, cfg)
    single = layout == "single"
    n_loop = cfg.n_add1_loop if single else cfg.n_addb_loop
    n_scan = cfg.n_add1_scan if single else cfg.n_addb_scan
    wl = Workload(
        buffer=buf,
        batch=make_batch(kind, layout, cfg),
        add_loop=jax.jit(buf.add, donate_argnums=0),
        add_scan=jax.jit(scan_add(buf.add, n_scan), donate_argnums=0),
        n_add_loop=n_loop,
        n_add_scan=n_scan,
    )
    if not single:
        wl.sample_loop = jax.jit(buf.sample)
        wl.sample_scan = jax.jit(scan_sample(buf.sample, cfg.n_sample_scan))
    return wl


def n_iters(cfg: Config, op: str, loop: str) -> int:
    if op == "add_1":
        return cfg.n_add1_loop if loop == "loop" else cfg.n_add1_scan
    if op.startswith("add_"):
        return cfg.n_addb_loop if loop == "loop" else cfg.n_addb_scan
    return cfg.n_sample_loop if loop == "loop" else cfg.n_sample_scan
