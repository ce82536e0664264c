"""First read in a new process, for ``tools/bench_vault.py``: what a fresh Python process pays
to import a vault library, open an existing vault and read all of it once as a buffer state.

For each library a vault of the same data is written first (``rows`` x ``steps`` timesteps of
a variant of ``tools/_workloads.py``, through a trajectory buffer, a write every
``append_steps``). Then each run is a fresh child process (``tools/_first_read_child.py``)
that times, with ``time.perf_counter`` from before the import: the import, the open, and the
read of everything (blocked until ready); the parent also times the child's whole life
(interpreter start-up and exit included).

Page cache: the same for both libraries, warm. Every file of the vault is read once right
before each run, and one untimed run per library comes first, so the library's own files
(shared objects, compiled modules) are cached too. Runs alternate between the libraries
(rlvault first in even repeats, Flashbax first in odd ones), so load that comes and goes on
a shared machine falls on both. Reported: median and min over the runs.
"""

from __future__ import annotations

import gc
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import numpy as np
from _first_read_child import MARK
from _probes import MB, total_file_bytes, warm_page_cache
from _report import log
from _vaults import create_vault
from _workloads import DataSource, example_timestep, make_trajectory_buffer, step_nbytes

CHILD = Path(__file__).with_name("_first_read_child.py")
TIMES = ("total_s", "import_s", "open_s", "read_s", "process_s")
CHILD_TIMEOUT_S = 900.0


def build(
    lib: str,
    module: ModuleType,
    vault_cls: Any,
    variant: str,
    rows: int,
    steps: int,
    pool: np.ndarray | None,
    location: Path,
) -> Path:
    """Write ``rows`` x ``steps`` timesteps of ``variant`` to a new vault of ``lib``; returns
    the directory of its files. Every library gets the same data (a fresh ``DataSource``)."""
    append_steps = min(1000, steps // 2)
    buffer = make_trajectory_buffer(module, rows, steps)
    add = jax.jit(buffer.add, donate_argnums=0)
    state = buffer.init(example_timestep(variant))
    source = DataSource(variant, rows, pool)
    v, data_dir = create_vault(lib, vault_cls, location, state)
    for lo in range(0, steps, append_steps):
        state = add(state, source.next(min(append_steps, steps - lo)))
        v.write(state)
    if lib == "rlvault":
        v.close()  # frees the replaced files it held (trash/) and the writer lock
    del v, state, buffer, add
    gc.collect()
    return data_dir


def run_child(lib: str, data_dir: Path) -> dict[str, Any]:
    """One run: warm the vault's files in the page cache, then a fresh child process."""
    cache = warm_page_cache(data_dir)
    spec = json.dumps({"lib": lib, "data_dir": str(data_dir)})
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(CHILD), spec],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    process_s = time.perf_counter() - t0
    found = [ln for ln in done.stdout.splitlines() if ln.startswith(MARK)]
    if done.returncode != 0 or not found:
        log(f"    first-read child of {lib} failed (rc={done.returncode}):\n{done.stderr[-3000:]}")
        return {"error": done.stderr[-2000:], "returncode": done.returncode}
    out: dict[str, Any] = json.loads(found[-1][len(MARK) :])
    return {**out, "process_s": process_s, "page_cache": cache}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and min of every time over ``runs``."""
    out: dict[str, Any] = {}
    for key in TIMES:
        values = [r[key] for r in runs]
        out[key] = {"median": statistics.median(values), "min": min(values), "all": values}
    return out


def measure(
    variant: str,
    libs: dict[str, tuple[ModuleType, Any]],
    *,
    rows: int,
    steps: int,
    repeats: int,
    pool: np.ndarray | None,
    workdir: Path,
) -> dict[str, Any]:
    """The first-read measurement of ``variant`` for every library in ``libs`` (see the module
    docstring); the JSON entry."""
    raw = rows * steps * step_nbytes(variant)
    log(
        f"  first read in a new process: {rows} x {steps:,} steps ({raw / MB:,.0f} MB raw), "
        f"{repeats} runs per library"
    )
    dirs: dict[str, Path] = {}
    locations: list[Path] = []
    try:
        for lib, (module, vault_cls) in libs.items():
            location = workdir / f"first_read_{lib}_{variant}"
            locations.append(location)
            t0 = time.perf_counter()
            dirs[lib] = build(lib, module, vault_cls, variant, rows, steps, pool, location)
            log(f"    {lib:<8} vault written in {time.perf_counter() - t0:.1f} s")
        warmup = {lib: run_child(lib, data_dir) for lib, data_dir in dirs.items()}
        runs: dict[str, list[dict[str, Any]]] = {lib: [] for lib in dirs}
        for i in range(repeats):
            order = list(dirs) if i % 2 == 0 else list(reversed(dirs))
            for lib in order:
                if "error" not in warmup[lib]:  # a library that failed once is not rerun
                    runs[lib].append(run_child(lib, dirs[lib]))
            log(
                f"    run {i + 1}/{repeats}: "
                + ", ".join(describe(lib, r) for lib, r in runs.items())
            )
        disk = {lib: total_file_bytes(d) for lib, d in dirs.items()}
    finally:
        for location in locations:
            shutil.rmtree(location, ignore_errors=True)
    per_lib: dict[str, Any] = {}
    for lib, lib_runs in runs.items():
        good = [r for r in lib_runs if "error" not in r]
        errors = [r["error"] for r in [warmup[lib], *lib_runs] if "error" in r]
        entry: dict[str, Any] = {"disk_bytes": disk[lib], "untimed_first_run": warmup[lib]}
        if good:
            shape = good[0]["first_leaf_shape"]
            if shape[:2] != [rows, steps]:
                errors.append(f"read a {shape} first leaf, not [{rows}, {steps}, ...]")
            else:
                entry |= summarize(good)
                entry["bytes"] = good[0]["bytes"]
                entry["jax_loaded_by_import"] = good[0]["jax_loaded_by_import"]
        if errors:
            entry["errors"] = errors
        per_lib[lib] = {**entry, "runs": lib_runs}
    return {
        "rows": rows,
        "timesteps": steps,
        "raw_bytes": raw,
        "repeats": repeats,
        "page_cache": "warm (vault files read before every run; one untimed run per library)",
        "libraries": per_lib,
    }


def describe(lib: str, runs: list[dict[str, Any]]) -> str:
    """The last run of ``lib`` in a log line."""
    r = runs[-1] if runs else {"error": "not run"}
    if "error" in r:
        return f"{lib} failed"
    return (
        f"{lib} {r['total_s']:.2f} s (import {r['import_s']:.2f}, open {r['open_s']:.2f}, "
        f"read {r['read_s']:.2f}; process {r['process_s']:.2f})"
    )
