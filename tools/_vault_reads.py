"""The read measurements of ``tools/bench_vault.py``: cold and warm reads of one vault, each
operation in a fresh subprocess (this module run as a script), with the peak RSS growth of
the first cold read.

In the child, JAX's backend and TensorStore's threads are started on unrelated data before
timing, then the peak RSS is reset with ``/proc/self/clear_refs`` where allowed. Cold: the
page cache of every vault file is dropped (``fsync`` + ``posix_fadvise(POSIX_FADV_DONTNEED)``)
and a fresh Vault object is opened (the cold time includes opening it); warm: repeated reads
on the last object.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import numpy as np
from _probes import (
    MB,
    drop_page_cache,
    peak_rss_bytes,
    proc_status_bytes,
    reset_peak_rss,
    tree_nbytes,
)
from _report import log
from _vaults import READ_LABELS, READ_OPS, block, load_libraries, open_vault, read_op

PROBE_MARK = "BENCH_VAULT_PROBE_JSON "


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
    lib: str,
    data_dir: Path,
    variant: str,
    *,
    last: int,
    warm_repeats: int,
    cold_repeats: int,
    timeout: float,
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
            "last": last,
            "repeats": warm_repeats,
            "cold_repeats": cold_repeats,
        }
        cmd = [sys.executable, os.path.abspath(__file__), json.dumps(spec)]
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


def print_probe(spec: dict[str, Any]) -> None:
    """The child's whole job: measure, then print the result on one marked stdout line."""
    print(PROBE_MARK + json.dumps(probe_reads(spec)), flush=True)


if __name__ == "__main__":
    print_probe(json.loads(sys.argv[1]))
