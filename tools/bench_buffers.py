"""Benchmark rlvault's ``buffers`` against Flashbax (when importable) on the same workload.

Workload (the reference's benchmark configuration): a buffer of 500_000 timesteps, each a dict
of a float32 ``(32, 32, 3)`` observation plus small scalar fields (reward float32, done bool,
action int32). For the flat, item, trajectory and prioritised trajectory buffers it times:

* ``add_1``: add one timestep per call (flat ``add_batch_size=None``, item
  ``add_batches=False``, trajectory buffers ``add_batch_size=1`` with a length-1 sequence);
* ``add_128``: add a batch of 128 timesteps per call (flat ``add_batch_size=128``, item
  ``add_batches=True``, trajectory buffers ``add_batch_size=128`` with a length-1 sequence);
* ``sample_256``: sample a batch of 256 from a full buffer in the ``add_128`` layout.

Each row is timed two ways: ``loop`` (a Python loop calling the jitted function N times,
``block_until_ready`` at the end) and ``scan`` (N iterations inside one jitted
``jax.lax.scan``). ``add`` is jitted with ``donate_argnums=0`` for both libraries. Each repeat
builds a fresh state (only one buffer state is alive at a time), warms up (compiles on the
first repeat) and keeps the best of ``inner`` timed runs; rows report the median over repeats.
Libraries are interleaved (rlvault then Flashbax in every repeat of every case) so machine noise
affects both alike; besides the ratio of medians, the table gives the *paired ratio*, the median
over repeats of the per-repeat ratio, which is less sensitive to load that changes between
repeats.

Peak memory is measured in fresh subprocesses, one per library (kinds in turn, with the peak
reset through ``/proc/self/clear_refs`` in between), or one per (library, kind) where the peak
cannot be reset. For each buffer everything is compiled first (ahead of time, from abstract
shapes), then the peak resident set size (``VmHWM``) is read before ``init``, after ``init``,
after filling the buffer with a Python loop of donated adds, after a donated ``scan`` of adds
and after sampling; the growth over the baseline is compared with the size of the state's
arrays. The first buffer measured in a process also pays one-off runtime allocations.

Usage::

    python tools/bench_buffers.py --quick            # smoke test, well under a minute
    python tools/bench_buffers.py --out results.json # full configuration
    python tools/bench_buffers.py --json             # JSON on stdout, table on stderr
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, TextIO

import jax
from _argtypes import at_least, choices_list, out_file, positive_int
from _buffer_workloads import (
    KINDS,
    LAYOUTS,
    Config,
    Workload,
    adds_to_fill,
    describe_layout,
    layout_capacity,
    load_libraries,
    make_batch,
    make_buffer,
    make_workload,
    n_iters,
    scan_add,
    timestep,
)
from _probes import (
    code_provenance,
    machine_info,
    peak_rss_bytes,
    proc_status_bytes,
    reset_peak_rss,
    tree_nbytes,
)
from _report import log

PROBE_MARK = "BENCH_PROBE_JSON "
# the smallest --capacity: three adds of 128 timesteps (the flat buffers sample pairs once
# they hold 256 timesteps, min_length = the sample batch, which needs 3 per row of 128)
MIN_CAPACITY = 384

FULL = Config(
    capacity=500_000,
    repeats=7,
    inner=3,
    n_add1_loop=2000,
    n_add1_scan=5000,
    n_addb_loop=200,
    n_addb_scan=200,
    n_sample_loop=100,
    n_sample_scan=100,
)
QUICK = Config(
    capacity=20_000,
    repeats=2,
    inner=2,
    n_add1_loop=200,
    n_add1_scan=500,
    n_addb_loop=20,
    n_addb_scan=20,
    n_sample_loop=20,
    n_sample_scan=20,
)


# --------------------------------------------------------------------------------------------
# Memory helpers
# --------------------------------------------------------------------------------------------


def current_rss_bytes() -> int | None:
    return proc_status_bytes("VmRSS")


def experience_nbytes(state: Any) -> int:
    return tree_nbytes(state.experience)


def first_leaf_pointer(state: Any) -> int | None:
    leaf = jax.tree_util.tree_leaves(state.experience)[0]
    try:
        return int(leaf.unsafe_buffer_pointer())
    except Exception:  # pointer not available on every backend
        return None


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------


def timed_add_loop(
    fn: Callable[[Any, Any], Any], state: Any, batch: Any, n: int
) -> tuple[Any, float]:
    t0 = time.perf_counter()
    for _ in range(n):
        state = fn(state, batch)
    jax.block_until_ready(state)
    return state, time.perf_counter() - t0


def timed_call(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args)
    jax.block_until_ready(out)
    return out, time.perf_counter() - t0


def timed_sample_loop(fn: Callable[[Any, Any], Any], state: Any, keys: list[jax.Array]) -> float:
    outs = []
    t0 = time.perf_counter()
    for k in keys:
        outs.append(fn(state, k))
    jax.block_until_ready(outs)
    dt = time.perf_counter() - t0
    del outs
    return dt


def run_group(
    wl: Workload, kind: str, layout: str, cfg: Config, rep: int
) -> tuple[dict[tuple[str, str], list[float]], dict[str, Any]]:
    """Fresh state, warm-up, then time this layout's rows ``cfg.inner`` times each.

    Returns ``{(op, loop): [us/op of each inner run]}`` and facts about the state.
    """
    results: dict[tuple[str, str], list[float]] = {}
    info: dict[str, Any] = {}
    state = wl.buffer.init(timestep(cfg))
    jax.block_until_ready(state)
    info["rss_after_init"] = current_rss_bytes()
    op = "add_1" if layout == "single" else f"add_{cfg.add_batch_size}"
    added = 0

    # Python loop: warm up (compiles on the first repeat), check donation, then time.
    ptr = first_leaf_pointer(state)
    state, dt = timed_call(wl.add_loop, state, wl.batch)
    if rep == 0:
        wl.first_call_s[f"{op}/loop"] = dt
    info["donated_in_place"] = ptr is not None and ptr == first_leaf_pointer(state)
    for _ in range(2):
        state = wl.add_loop(state, wl.batch)
    added += 3
    for _ in range(cfg.inner):
        state, dt = timed_add_loop(wl.add_loop, state, wl.batch, wl.n_add_loop)
        added += wl.n_add_loop
        results.setdefault((op, "loop"), []).append(dt / wl.n_add_loop * 1e6)

    # One lax.scan of N adds: warm-up call, then timed calls.
    state, dt = timed_call(wl.add_scan, state, wl.batch)
    added += wl.n_add_scan
    if rep == 0:
        wl.first_call_s[f"{op}/scan"] = dt
    for _ in range(cfg.inner):
        state, dt = timed_call(wl.add_scan, state, wl.batch)
        added += wl.n_add_scan
        results.setdefault((op, "scan"), []).append(dt / wl.n_add_scan * 1e6)

    if wl.sample_loop is not None and wl.sample_scan is not None:
        # Fill every slot so that samples range over the whole buffer.
        while added < adds_to_fill(cfg, layout):
            state = wl.add_scan(state, wl.batch)
            added += wl.n_add_scan
        jax.block_until_ready(state)
        info["rss_after_fill"] = current_rss_bytes()
        if not bool(wl.buffer.can_sample(state)):
            raise RuntimeError(f"{kind}: can_sample is false after filling the buffer")
        key = jax.random.PRNGKey(rep)
        keys = list(jax.random.split(key, cfg.n_sample_loop))
        sop = f"sample_{cfg.sample_batch_size}"
        _, dt = timed_call(wl.sample_loop, state, keys[0])
        if rep == 0:
            wl.first_call_s[f"{sop}/loop"] = dt
        timed_sample_loop(wl.sample_loop, state, keys[:3])
        for _ in range(cfg.inner):
            dt = timed_sample_loop(wl.sample_loop, state, keys)
            results.setdefault((sop, "loop"), []).append(dt / cfg.n_sample_loop * 1e6)
        _, dt = timed_call(wl.sample_scan, state, key)
        if rep == 0:
            wl.first_call_s[f"{sop}/scan"] = dt
        for i in range(cfg.inner):
            _, dt = timed_call(wl.sample_scan, state, jax.random.fold_in(key, i + 1))
            results.setdefault((sop, "scan"), []).append(dt / cfg.n_sample_scan * 1e6)

    info["state_bytes"] = tree_nbytes(state)
    del state
    gc.collect()
    return results, info


def run_timings(libs: dict[str, ModuleType], cfg: Config) -> tuple[list[dict[str, Any]], list[Any]]:
    rows: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    for kind in cfg.kinds:
        for layout in LAYOUTS:
            workloads = {name: make_workload(lib, kind, layout, cfg) for name, lib in libs.items()}
            # times[name][(op, loop)]: per repeat, the best of the inner runs (us/op)
            times: dict[str, dict[tuple[str, str], list[float]]] = {name: {} for name in libs}
            inner: dict[str, dict[tuple[str, str], list[list[float]]]] = {name: {} for name in libs}
            infos: dict[str, list[dict[str, Any]]] = {name: [] for name in libs}
            for rep in range(cfg.repeats):
                for name in libs:  # interleaved: rlvault, then flashbax, every repeat
                    t0 = time.perf_counter()
                    res, info = run_group(workloads[name], kind, layout, cfg, rep)
                    infos[name].append(info)
                    for key, runs in res.items():
                        times[name].setdefault(key, []).append(min(runs))
                        inner[name].setdefault(key, []).append(runs)
                    log(
                        f"  {kind:<22} {layout:<6} rep {rep} {name:<8} "
                        + " ".join(f"{o}/{lp}={min(r):.1f}us" for (o, lp), r in res.items())
                        + f"  ({time.perf_counter() - t0:.1f}s)"
                    )
            groups.append(
                {
                    "kind": kind,
                    "layout": layout,
                    "buffer_args": describe_layout(kind, layout, cfg),
                    "capacity": layout_capacity(cfg, layout),
                    "per_library": {
                        name: {
                            "state_bytes": infos[name][0]["state_bytes"],
                            "donated_in_place": all(i["donated_in_place"] for i in infos[name]),
                            "rss_after_init_bytes": [i["rss_after_init"] for i in infos[name]],
                            "rss_after_fill_bytes": [i.get("rss_after_fill") for i in infos[name]],
                            "first_call_s": workloads[name].first_call_s,
                        }
                        for name in libs
                    },
                }
            )
            for op, loop in times["rlvault"]:
                row: dict[str, Any] = {
                    "kind": kind,
                    "op": op,
                    "loop": loop,
                    "n_iters": n_iters(cfg, op, loop),
                    "buffer_args": describe_layout(kind, layout, cfg),
                }
                for name in libs:
                    per_rep = times[name][(op, loop)]
                    row[name] = {
                        "median_us": statistics.median(per_rep),
                        "min_us": min(per_rep),
                        "max_us": max(per_rep),
                        "per_repeat_best_us": per_rep,
                        "inner_runs_us": inner[name][(op, loop)],
                    }
                if "flashbax" in libs:
                    rlv, fbx = row["rlvault"], row["flashbax"]
                    row["ratio_flashbax_over_rlvault"] = fbx["median_us"] / rlv["median_us"]
                    row["paired_ratio_median"] = statistics.median(
                        f / r
                        for f, r in zip(
                            fbx["per_repeat_best_us"], rlv["per_repeat_best_us"], strict=True
                        )
                    )
                    row["ratio_of_mins"] = fbx["min_us"] / rlv["min_us"]
                rows.append(row)
            del workloads
            gc.collect()
    return rows, groups


# --------------------------------------------------------------------------------------------
# Memory probe (runs in a subprocess per library and kind)
# --------------------------------------------------------------------------------------------


def memory_probe(lib_name: str, kind: str, cfg: Config) -> dict[str, Any]:
    """Peak RSS growth while creating, filling and sampling one buffer (batch layout).

    Everything is compiled first; the peak is then reset (where the kernel allows) so that a
    process probing several kinds one after another measures each from its own baseline.
    """
    lib = load_libraries()[lib_name]
    layout = "batch"
    buf = make_buffer(lib, kind, layout, cfg)
    ts = timestep(cfg)
    batch = make_batch(kind, layout, cfg)
    key = jax.random.PRNGKey(0)
    abstract = jax.eval_shape(buf.init, ts)
    n_scan = cfg.n_addb_scan
    add_c = jax.jit(buf.add, donate_argnums=0).lower(abstract, batch).compile()
    scan_c = jax.jit(scan_add(buf.add, n_scan), donate_argnums=0).lower(abstract, batch).compile()
    sample_c = jax.jit(buf.sample).lower(abstract, key).compile()
    keys = list(jax.random.split(key, 10))
    gc.collect()
    was_reset = reset_peak_rss()
    baseline = peak_rss_bytes()
    rss0 = current_rss_bytes()

    state = buf.init(ts)
    jax.block_until_ready(state)
    after_init = peak_rss_bytes()
    for _ in range(adds_to_fill(cfg, layout)):
        state = add_c(state, batch)
    jax.block_until_ready(state)
    after_fill = peak_rss_bytes()
    state = scan_c(state, batch)
    jax.block_until_ready(state)
    after_scan = peak_rss_bytes()
    for k in keys:
        jax.block_until_ready(sample_c(state, k))
    after_sample = peak_rss_bytes()
    data = tree_nbytes(state)
    return {
        "library": lib_name,
        "kind": kind,
        "buffer_args": describe_layout(kind, layout, cfg),
        "peak_was_reset": was_reset,
        "state_bytes": data,
        "experience_bytes": experience_nbytes(state),
        "baseline_peak_rss_bytes": baseline,
        "baseline_rss_bytes": rss0,
        "peak_rss_after_init_bytes": after_init,
        "peak_rss_after_fill_loop_bytes": after_fill,
        "peak_rss_after_scan_add_bytes": after_scan,
        "peak_rss_after_sample_bytes": after_sample,
        "peak_growth_bytes": after_sample - baseline,
        "overhead_bytes": after_sample - baseline - data,
    }


def run_memory_probes(libs: dict[str, ModuleType], cfg: Config, quick: bool) -> list[Any]:
    """Probe peak memory in fresh subprocesses: one per library, measuring the kinds in turn
    with the peak reset in between, or one per (library, kind) where the peak cannot be reset.
    ``--quick`` runs two subprocesses at a time (small buffers); the full run runs one at a
    time so that two large buffers never coexist."""
    jobs = 2 if quick else 1
    if reset_peak_rss():
        tasks = [(name, list(cfg.kinds)) for name in libs]
    else:
        tasks = [(name, [kind]) for kind in cfg.kinds for name in libs]
    results: dict[tuple[str, str], Any] = {}
    for i in range(0, len(tasks), jobs):
        running = []
        for name, kinds in tasks[i : i + jobs]:
            cmd = [sys.executable, os.path.abspath(__file__), "--probe", name, ",".join(kinds)]
            cmd += ["--quick"] if quick else []
            cmd += ["--capacity", str(cfg.capacity), "--device", cfg.device]
            popen = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            running.append((name, kinds, popen, time.perf_counter()))
        for name, kinds, popen, t0 in running:
            stdout, stderr = popen.communicate()
            for line in stdout.splitlines():
                if line.startswith(PROBE_MARK):
                    res = json.loads(line[len(PROBE_MARK) :])
                    results[(res["kind"], name)] = res
            for kind in kinds:
                res = results.get((kind, name))
                if res is None:
                    log(f"  memory probe {name}/{kind} failed (rc={popen.returncode}):\n{stderr}")
                    results[(kind, name)] = {"library": name, "kind": kind, "error": stderr[-2000:]}
                    continue
                log(
                    f"  memory {kind:<22} {name:<8} data {res['state_bytes'] / 2**20:9.1f} MiB, "
                    f"peak growth {res['peak_growth_bytes'] / 2**20:9.1f} MiB"
                )
            log(f"  ({name}: {time.perf_counter() - t0:.1f}s)")
    return [results[(kind, name)] for kind in cfg.kinds for name in libs]


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------


def fmt_us(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.1f}" if x < 1000 else f"{x:,.0f}"


def markdown(result: dict[str, Any]) -> Iterator[str]:
    has_fbx = "flashbax" in result["libraries"]
    yield (
        f"Capacity {result['config']['capacity']:,} timesteps, obs float32 "
        f"{tuple(result['config']['obs_shape'])}; median of {result['config']['repeats']} "
        "repeats; time per operation in microseconds; ratio = flashbax / rlvault "
        "(> 1: rlvault faster)."
    )
    load = result.get("loadavg_start"), result.get("loadavg_end")
    if all(x is not None for x in load):
        yield (
            f"Machine: {result['machine']['cpu_count']} CPUs, jax {result['machine']['jax']} "
            f"on {result['machine']['devices']}; 1-min load average {load[0][0]:.2f} at start, "
            f"{load[1][0]:.2f} at end."
        )
    code = result.get("rlvault_code") or {}
    if code.get("git_commit"):
        dirty = " (buffers/ has uncommitted changes)" if code.get("buffers_dirty") else ""
        yield f"rlvault code: commit {code['git_commit'][:12]}{dirty}."
    yield (
        "Each repeat builds a fresh state and keeps the best of "
        f"{result['config']['inner']} timed runs; paired ratio = median over repeats of the "
        "per-repeat ratio (rlvault and flashbax run back to back in each repeat)."
    )
    yield ""
    yield (
        "| buffer | operation | loop | N | rlvault us/op | flashbax us/op | ratio | paired ratio |"
    )
    yield "|---|---|---|---:|---:|---:|---:|---:|"
    for r in result["rows"]:
        fbx = r["flashbax"]["median_us"] if has_fbx else None
        ratio = f"{r['ratio_flashbax_over_rlvault']:.2f}" if has_fbx else "-"
        paired = f"{r['paired_ratio_median']:.2f}" if has_fbx else "-"
        yield (
            f"| {r['kind']} | {r['op']} | {r['loop']} | {r['n_iters']} | "
            f"{fmt_us(r['rlvault']['median_us'])} | {fmt_us(fbx)} | {ratio} | {paired} |"
        )
    yield ""
    yield "First calls (trace + compile + one run), seconds, summed over each buffer's functions:"
    yield ""
    yield "| buffer | " + " | ".join(result["libraries"]) + " |"
    yield "|---|" + "---:|" * len(result["libraries"])
    for kind in result["config"]["kinds"]:
        totals = []
        for name in result["libraries"]:
            total = sum(
                sum(g["per_library"][name]["first_call_s"].values())
                for g in result["groups"]
                if g["kind"] == kind
            )
            totals.append(f"{total:.2f}")
        yield f"| {kind} | " + " | ".join(totals) + " |"
    if result["memory"]:
        yield ""
        yield (
            "Peak memory (batch layout; a fresh process per library, peak RSS reset before each "
            "buffer; growth of peak RSS over the baseline taken after compilation, through "
            "init, a Python loop of donated adds filling the buffer, a donated scan of adds "
            "and 10 samples; overhead = growth - state size):"
        )
        yield ""
        yield "| library | buffer | state MiB | peak growth MiB | overhead MiB |"
        yield "|---|---|---:|---:|---:|"
        mib = 2**20
        for m in result["memory"]:
            if "error" in m:
                yield f"| {m['library']} | {m['kind']} | error | - | - |"
                continue
            yield (
                f"| {m['library']} | {m['kind']} | {m['state_bytes'] / mib:,.1f} | "
                f"{m['peak_growth_bytes'] / mib:,.1f} | {m['overhead_bytes'] / mib:,.1f} |"
            )
    slower = [
        r
        for r in result["rows"]
        if has_fbx and min(r["ratio_flashbax_over_rlvault"], r["paired_ratio_median"]) < 1.0
    ]
    if slower:
        yield ""
        yield "Rows where rlvault is slower than flashbax (ratio or paired ratio < 1):"
        for r in slower:
            yield (
                f"- {r['kind']} {r['op']} {r['loop']}: ratio "
                f"{r['ratio_flashbax_over_rlvault']:.2f}, paired {r['paired_ratio_median']:.2f}"
            )


def write_table(result: dict[str, Any], stream: TextIO) -> None:
    for line in markdown(result):
        print(line, file=stream)
    stream.flush()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small capacity and few iterations")
    p.add_argument("--json", action="store_true", help="JSON to stdout (table to stderr)")
    p.add_argument("--out", type=out_file, default=None, help="write the JSON to this path")
    p.add_argument(
        "--capacity",
        type=at_least(MIN_CAPACITY),
        default=None,
        help=f"override the capacity (at least {MIN_CAPACITY})",
    )
    p.add_argument("--repeats", type=positive_int, default=None, help="override the repeat count")
    p.add_argument(
        "--inner", type=positive_int, default=None, help="override timed runs per repeat"
    )
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory probes")
    p.add_argument("--no-flashbax", action="store_true", help="benchmark rlvault alone")
    p.add_argument(
        "--kinds",
        type=lambda v: tuple(choices_list(KINDS)(v)),
        default=None,
        help=f"comma-separated buffer kinds (default: all of {','.join(KINDS)})",
    )
    p.add_argument(
        "--device",
        choices=("cpu", "gpu", "tpu"),
        default="cpu",
        help="the prioritised buffers' device argument, for both libraries (default cpu)",
    )
    p.add_argument("--probe", nargs=2, metavar=("LIBRARY", "KINDS"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = QUICK if args.quick else FULL
    if args.capacity is not None:
        cfg = dataclasses.replace(cfg, capacity=args.capacity)
    if args.repeats is not None:
        cfg = dataclasses.replace(cfg, repeats=args.repeats)
    if args.inner is not None:
        cfg = dataclasses.replace(cfg, inner=args.inner)
    if args.kinds is not None:
        cfg = dataclasses.replace(cfg, kinds=args.kinds)
    cfg = dataclasses.replace(cfg, device=args.device)
    warnings.filterwarnings("ignore", category=DeprecationWarning)

    if args.probe:
        for kind in args.probe[1].split(","):
            res = memory_probe(args.probe[0], kind, cfg)
            print(PROBE_MARK + json.dumps(res), flush=True)
            gc.collect()
        return 0

    libs = load_libraries()
    if args.no_flashbax:
        libs.pop("flashbax", None)
    if "flashbax" not in libs:
        log("flashbax is not importable (or disabled): benchmarking rlvault alone")
    log(f"libraries: {list(libs)}; config: {cfg}")
    t_start = time.perf_counter()
    load_start = os.getloadavg()
    provenance = code_provenance(
        "buffers", ("buffers",)
    )  # at start: the code that was imported and timed
    memory: list[Any] = []
    if not args.no_memory:
        log("peak-memory probes (fresh subprocesses):")
        memory = run_memory_probes(libs, cfg, args.quick)
    log("timings:")
    rows, groups = run_timings(libs, cfg)
    result = {
        "config": dataclasses.asdict(cfg) | {"quick": args.quick},
        "libraries": list(libs),
        "machine": machine_info(),
        "rlvault_code": provenance,
        "rows": rows,
        "groups": groups,
        "memory": memory,
        "main_process_peak_rss_bytes": peak_rss_bytes(),
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "wall_time_s": time.perf_counter() - t_start,
    }
    text = json.dumps(result, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
        log(f"wrote {args.out}")
    if args.json:
        write_table(result, sys.stderr)
        print(text)
    else:
        write_table(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
