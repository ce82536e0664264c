"""Benchmark the path from a vault to the accelerator: rlvault against Flashbax, in one process,
on JAX's default backend (a GPU where there is one; the script runs on CPU too).

The same vector data (``obs`` float32 (64,), action, reward, done; ``--rows`` rows of
``--steps`` timesteps) is written once by each library into its own vault; then, for
``--rounds`` rounds, each measurement runs for both libraries back to back (page cache warm):

* **read all to the device**: open the vault and ``read()`` it into a buffer state on the
  device (both libraries' ``read`` returns JAX arrays on the default device), blocking on the
  result. MB/s of raw experience;
* **sample on the device** (the buffers): a jitted ``buffer.sample`` of batches of ``--batch``
  single timesteps from that state, each batch passed to a jitted step on the device, for
  ``--batches`` batches (one dispatch per batch, as a training loop does). Batches/s of each
  library's own ``make_trajectory_buffer``;
* **stream one epoch to the device** (rlvault only: Flashbax has no stream): ``as_dataset``
  batches of ``--batch`` sequences of one timestep, shuffled, put on the device by the stream's
  background thread, each passed to the same jitted step; every timestep once. Sequences/s;
* **the stream in batches/s**, for each of ``--stream-batches`` (256 and 4,096): an epoch
  streamed with the batches cut on the host (the default) and with ``cut_on_device=True``
  (each group of blocks put on the device once, batches cut there by a jitted gather), side
  by side with Flashbax's read + sample of an epoch's worth of batches of the same size (its
  way to the same data on the same device), each batch passed to the jitted step; and with
  ``cut_on_device=True, stack=S`` (``--stream-stacks``, one per stream batch size: S batches
  per item, one gather per stack), each stack passed to the same step under a jitted
  ``lax.scan`` (one dispatch per stack), counted in batches (items x S);
* **epoch, end to end**: the time from opening the vault to the last batch of an epoch's worth
  of sequences (rows x steps) on the device: Flashbax reads everything, then samples that many
  sequences (with replacement, its only way); rlvault streams the epoch (each timestep once,
  memory bounded by a few blocks) and, for comparison, also reads everything and samples with
  its own buffer.

Times are medians over rounds; ratios are rlvault's advantage (> 1: rlvault is faster).

Usage::

    python tools/bench_gpu.py --quick                # smoke test (seconds, any backend)
    python tools/bench_gpu.py --out results.json     # full run
    python tools/bench_gpu.py --json                 # JSON on stdout, the table on stderr
    python tools/bench_gpu.py --no-flashbax --stream-batches 256,4096 --stream-stacks 32,4
    python tools/bench_gpu.py --sweep --stream-batches 256 --stream-stacks 32 --rounds 2

``--sweep`` adds the stacked stream of the first ``--stream-batches`` size with each
prefetch depth (2, 4, 8), streaming 1 and 4 epochs in one stream, each against Flashbax's
read + sample of as many batches.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _argtypes import existing_dir, out_file, positive_int, positive_ints
from _probes import MB, code_provenance, loadavg, machine_info, tree_nbytes
from _report import Rows, fmt, log, table_lines, write_json
from _vaults import block, create_vault, load_libraries, open_vault, quiet_stdout
from _workloads import DataSource


@dataclasses.dataclass(frozen=True)
class Config:
    rows: int
    steps: int
    batch: int
    batches: int
    rounds: int
    stream_batches: tuple[int, ...] = (256, 4096)
    stream_stacks: tuple[int, ...] = (32, 4)  # the stack of each stream batch size


FULL = Config(rows=16, steps=65536, batch=4096, batches=200, rounds=5)
QUICK = Config(
    rows=4, steps=1024, batch=64, batches=20, rounds=1, stream_batches=(16, 64),
    stream_stacks=(8, 2),
)  # fmt: skip


def _touch(experience: Any) -> Any:
    """The least a training step does on the device: touch every leaf of the batch."""
    return sum(jnp.sum(leaf.astype(jnp.float32)) for leaf in jax.tree.leaves(experience))


_step = jax.jit(_touch)


@jax.jit
def _scan_step(stacked: Any) -> Any:
    """The same step over each batch of a stack ``[S, batch, ...]``, one jitted call."""
    return jax.lax.scan(lambda acc, b: (acc + _touch(b), None), jnp.float32(0), stacked)[0]


def full_state(module: Any, data: dict[str, np.ndarray]) -> Any:
    """A trajectory buffer state holding ``data`` ([rows, steps, ...]) with one spare slot, so
    that both libraries write all of it on the first write (a full buffer's first write stores
    nothing in Flashbax)."""
    spare = {k: np.concatenate([v, v[:, :1]], axis=1) for k, v in data.items()}
    steps = next(iter(data.values())).shape[1]
    return module.trajectory_buffer.TrajectoryBufferState(
        experience=jax.tree.map(jnp.asarray, spare),
        current_index=jnp.asarray(steps, jnp.int32),
        is_full=jnp.asarray(False),
    )


def sampler(module: Any, cfg: Config, batch: int | None = None) -> Any:
    """Each library's own jitted ``sample`` of ``batch`` (default ``cfg.batch``) timesteps."""
    buf = module.make_trajectory_buffer(
        add_batch_size=cfg.rows,
        sample_batch_size=batch or cfg.batch,
        sample_sequence_length=1,
        period=1,
        min_length_time_axis=1,
        max_length_time_axis=cfg.steps + 1,
    )
    return jax.jit(buf.sample)


def timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def read_all(lib: str, cls: Any, where: Path) -> Any:
    with quiet_stdout():
        state = open_vault(lib, cls, where).read()
    block(state)
    return state


def sample_loop(sample: Any, state: Any, n: int) -> None:
    key = jax.random.PRNGKey(0)
    out = None
    for _ in range(n):
        key, sub = jax.random.split(key)
        out = _step(sample(state, sub).experience)
    jax.block_until_ready(out)


def read_and_sample(lib: str, cls: Any, where: Path, sample: Any, n: int) -> None:
    sample_loop(sample, read_all(lib, cls, where), n)


def stream_epoch(
    cls: Any,
    where: Path,
    cfg: Config,
    batch: int | None = None,
    step: bool = True,
    epochs: int = 1,
    **kw: Any,
) -> tuple[int, int]:
    """Stream an epoch (``epochs`` of them, in one stream) through the jitted step (or,
    ``step=False``, only take the batches, waiting for the last one's arrays); return the
    sequences and batches it yielded. With a ``stack`` in ``kw`` each item is a stack of
    batches, passed to the scanned step."""
    sequences = batches = 0
    out = None
    stacked = kw.get("stack") is not None
    run = _scan_step if stacked else _step
    with cls.open(str(where), "r").as_dataset(
        batch or cfg.batch, 1, seed=0, epochs=epochs, device_put=True, **kw
    ) as stream:
        for item in stream:
            out = run(item.experience) if step else item.experience
            shape = jax.tree.leaves(item.experience)[0].shape
            sequences += int(shape[0] * shape[1]) if stacked else int(shape[0])
            batches += int(shape[0]) if stacked else 1
    jax.block_until_ready(out)
    return sequences, batches


def step_alone(cls: Any, where: Path, batch: int, n: int, stack: int | None = None) -> None:
    """The jitted step ``n`` times on one batch already on the device: the floor of any
    loop that runs one step per batch (with ``stack``: the scanned step ``n / stack`` times
    on one stack, the floor of a loop that runs one scan per stack)."""
    with cls.open(str(where), "r").as_dataset(
        batch, 1, epochs=1, cut_on_device=True, stack=stack
    ) as stream:
        experience = next(stream).experience
    out = None
    for _ in range(n if stack is None else n // stack):
        out = _step(experience) if stack is None else _scan_step(experience)
    jax.block_until_ready(out)


STREAM_MODES = {"host": {}, "device": {"cut_on_device": True}, "device_stack": {}}


def stream_modes(cfg: Config, batch: int) -> dict[str, dict[str, Any]]:
    """The stream's options of each mode for this batch size (the stack is per size)."""
    stack = dict(zip(cfg.stream_batches, cfg.stream_stacks, strict=True))[batch]
    return {**STREAM_MODES, "device_stack": {"cut_on_device": True, "stack": stack}}


_SAMPLERS: dict[tuple[str, int], Any] = {}


def cached_sampler(lib: str, module: Any, cfg: Config, batch: int) -> Any:
    """One jitted sampler per library and batch size (a new one would compile again)."""
    if (lib, batch) not in _SAMPLERS:
        _SAMPLERS[lib, batch] = sampler(module, cfg, batch)
    return _SAMPLERS[lib, batch]


def warm_up(libs: dict[str, Any], paths: dict[str, Path], cfg: Config) -> None:
    """Compile everything the rounds time: each stream mode over a whole epoch (the last
    group of an epoch can have other shapes), each sampler."""
    for batch in cfg.stream_batches:
        for lib, (module, cls) in libs.items():
            if lib == "rlvault":
                for kw in stream_modes(cfg, batch).values():
                    stream_epoch(cls, paths[lib], cfg, batch, **kw)
            state = read_all(lib, cls, paths[lib])
            sample_loop(cached_sampler(lib, module, cfg, batch), state, 2)


def stream_rates(libs: dict[str, Any], paths: dict[str, Path], cfg: Config) -> dict[str, Any]:
    """For each stream batch size: seconds and batches of an epoch streamed in each mode
    (rlvault), and of Flashbax's (and rlvault's) read + sample of as many batches."""
    out: dict[str, Any] = {}
    for batch in cfg.stream_batches:
        n = cfg.rows * cfg.steps // batch  # an epoch's worth of whole batches
        r: dict[str, Any] = {}
        for lib, (module, cls) in libs.items():
            if lib == "rlvault":
                for mode, kw in stream_modes(cfg, batch).items():
                    for alone in (False, True):
                        run = partial(stream_epoch, cls, paths[lib], cfg, batch, not alone, **kw)
                        secs, (_, got) = timed(run)
                        name = f"rlvault_stream_{mode}" + ("_alone" if alone else "")
                        r[name] = {"s": secs, "batches": got}
                secs, _ = timed(partial(step_alone, cls, paths[lib], batch, n))
                r["step_alone"] = {"s": secs, "batches": n}
                stack = stream_modes(cfg, batch)["device_stack"]["stack"]
                secs, _ = timed(partial(step_alone, cls, paths[lib], batch, n, stack))
                r["scan_step_alone"] = {"s": secs, "batches": n // stack * stack}
            sample = cached_sampler(lib, module, cfg, batch)
            secs, _ = timed(partial(read_and_sample, lib, cls, paths[lib], sample, n))
            r[f"{lib}_read_sample"] = {"s": secs, "batches": n}
        out[str(batch)] = r
    return out


SWEEP_PREFETCH = (2, 4, 8)
SWEEP_EPOCHS = (1, 4)


def sweep(libs: dict[str, Any], paths: dict[str, Path], cfg: Config) -> dict[str, Any]:
    """``--sweep``: the stacked stream of the first stream batch size with each prefetch depth
    of ``SWEEP_PREFETCH``, streaming ``SWEEP_EPOCHS`` epochs in one stream (its start paid once
    for them all), against Flashbax's read + sample of as many batches (its read paid once).
    Batches/s, the median of ``cfg.rounds`` runs of each."""
    batch = cfg.stream_batches[0]
    stack = stream_modes(cfg, batch)["device_stack"]["stack"]
    out: dict[str, Any] = {"batch": batch, "stack": stack, "rates": {}}
    for epochs in SWEEP_EPOCHS:
        n = epochs * (cfg.rows * cfg.steps // batch)
        for lib, (module, cls) in libs.items():
            runs: list[float] = []
            for prefetch in SWEEP_PREFETCH if lib == "rlvault" else (None,):
                runs = []
                for _ in range(cfg.rounds):
                    if lib == "rlvault":
                        kw = {"cut_on_device": True, "stack": stack, "prefetch": prefetch}
                        run = partial(stream_epoch, cls, paths[lib], cfg, batch, True, epochs, **kw)
                        secs, (_, got) = timed(run)
                    else:
                        sample = cached_sampler(lib, module, cfg, batch)
                        secs, _ = timed(partial(read_and_sample, lib, cls, paths[lib], sample, n))
                        got = n
                    runs.append(got / secs)
                name = f"{lib}_prefetch{prefetch}" if prefetch else f"{lib}_read_sample"
                out["rates"][f"{name}_epochs{epochs}"] = statistics.median(runs)
                log(f"sweep {name}, {epochs} epochs: {out['rates'][f'{name}_epochs{epochs}']:.0f}")
    return out


def one_round(libs: dict[str, Any], paths: dict[str, Path], cfg: Config) -> dict[str, Any]:
    """Every measurement once for each library, back to back."""
    epoch_batches = -(-cfg.rows * cfg.steps // cfg.batch)
    out: dict[str, Any] = {}
    for lib, (module, cls) in libs.items():
        sample = cached_sampler(lib, module, cfg, cfg.batch)
        r: dict[str, Any] = {}
        r["read_s"], state = timed(partial(read_all, lib, cls, paths[lib]))
        sample_loop(sample, state, 2)  # compile outside the clock
        r["sample_s"], _ = timed(partial(sample_loop, sample, state, cfg.batches))
        state = None  # free the device memory before the end-to-end epoch
        r["epoch_sampled_s"], _ = timed(
            partial(read_and_sample, lib, cls, paths[lib], sample, epoch_batches)
        )
        if lib == "rlvault":
            r["stream_s"], (r["stream_sequences"], _) = timed(
                partial(stream_epoch, cls, paths[lib], cfg)
            )
        out[lib] = r
    out["stream_rates"] = stream_rates(libs, paths, cfg)
    return out


def build(libs: dict[str, Any], workdir: Path, cfg: Config) -> tuple[dict[str, Path], int]:
    data = DataSource("vector", cfg.rows, None).next(cfg.steps)
    paths: dict[str, Path] = {}
    for lib, (module, cls) in libs.items():
        state = full_state(module, data)
        with quiet_stdout():
            v, paths[lib] = create_vault(lib, cls, workdir / lib, state)
            v.write(state)
        if lib == "rlvault":
            v.close()
        stored = jax.tree.map(np.asarray, read_all(lib, cls, paths[lib]).experience)
        for name, leaf in data.items():  # both libraries hold exactly the same timesteps
            np.testing.assert_array_equal(stored[name][:, : cfg.steps], leaf, err_msg=lib)
    return paths, tree_nbytes(data)


def summarise(rounds: list[dict[str, Any]], nbytes: int, cfg: Config) -> dict[str, Any]:
    def med(lib: str, key: str) -> float | None:
        vals = [r[lib][key] for r in rounds if lib in r and key in r[lib]]
        return statistics.median(vals) if vals else None

    libs = sorted({lib for r in rounds for lib in r if lib != "stream_rates"})
    out: dict[str, Any] = {"stream_rates": {}}
    for batch in cfg.stream_batches:
        rates: dict[str, float] = {}
        for name in rounds[0]["stream_rates"][str(batch)]:
            runs = [r["stream_rates"][str(batch)][name] for r in rounds]
            rates[name] = statistics.median(x["batches"] / x["s"] for x in runs)
        out["stream_rates"][str(batch)] = rates
    for lib in libs:
        read_s, sample_s = med(lib, "read_s"), med(lib, "sample_s")
        m: dict[str, Any] = {
            "read_all_mb_s": nbytes / MB / read_s if read_s else None,
            "sample_batches_s": cfg.batches / sample_s if sample_s else None,
            "epoch_sampled_s": med(lib, "epoch_sampled_s"),
        }
        stream_s = med(lib, "stream_s")
        if stream_s:
            m["stream_sequences_s"] = cfg.rows * cfg.steps / stream_s
            m["stream_mb_s"] = nbytes / MB / stream_s
            m["epoch_streamed_s"] = stream_s
        out[lib] = m
    return out


def table(summary: dict[str, Any], cfg: Config) -> list[str]:
    rl, fb = summary.get("rlvault", {}), summary.get("flashbax", {})
    rows = Rows()
    rows.add("vector", "read all to the device", "MB/s", rl.get("read_all_mb_s"),
             fb.get("read_all_mb_s"), True)  # fmt: skip
    rows.add("vector", f"sample {cfg.batch} on the device + step", "batches/s",
             rl.get("sample_batches_s"), fb.get("sample_batches_s"), True)  # fmt: skip
    rows.add("vector", "epoch: open, read all, sample an epoch's worth", "s",
             rl.get("epoch_sampled_s"), fb.get("epoch_sampled_s"), False)  # fmt: skip
    rows.add("vector", "epoch: rlvault streams (vs Flashbax read + sample)", "s",
             rl.get("epoch_streamed_s"), fb.get("epoch_sampled_s"), False)  # fmt: skip
    rows.add("vector", "stream one epoch to the device", "MB/s", rl.get("stream_mb_s"), None, True)
    for batch, rates in summary["stream_rates"].items():
        fb_rate = rates.get("flashbax_read_sample")
        stack = stream_modes(cfg, int(batch))["device_stack"]["stack"]
        modes = (("host", "cut on the host"), ("device", "cut_on_device"),
                 ("device_stack", f"cut_on_device, stack={stack}, scanned step"))  # fmt: skip
        for mode, how in modes:
            rows.add("vector", f"stream {int(batch):,} ({how}) vs Flashbax read + sample",
                     "batches/s", rates.get(f"rlvault_stream_{mode}"), fb_rate, True)  # fmt: skip
        rows.add("vector", f"read + sample {int(batch):,}, each library", "batches/s",
                 rates.get("rlvault_read_sample"), fb_rate, True)  # fmt: skip
        for mode, how in modes:
            how = how.split(", scanned")[0]
            rows.add("vector", f"stream {int(batch):,} ({how}), no step", "batches/s",
                     rates.get(f"rlvault_stream_{mode}_alone"), None, True)  # fmt: skip
        rows.add("vector", f"the jitted step alone, batches of {int(batch):,} (floor)",
                 "batches/s", rates.get("step_alone"), None, True)  # fmt: skip
        rows.add("vector", f"the scanned step alone, stacks of {stack} x {int(batch):,} (floor)",
                 "batches/s", rates.get("scan_step_alone"), None, True)  # fmt: skip
    swept = summary.get("sweep")
    if swept:
        batch, stack = swept["batch"], swept["stack"]
        for epochs in SWEEP_EPOCHS:
            fb_rate = swept["rates"].get(f"flashbax_read_sample_epochs{epochs}")
            for prefetch in SWEEP_PREFETCH:
                rows.add("vector", f"stream {batch:,} (cut_on_device, stack={stack}, "
                         f"prefetch={prefetch}), {epochs} epoch(s) per stream, scanned step, vs "
                         "Flashbax read + sample as many", "batches/s",
                         swept["rates"].get(f"rlvault_prefetch{prefetch}_epochs{epochs}"),
                         fb_rate, True)  # fmt: skip
    return list(table_lines(rows.rows))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small smoke-test configuration")
    p.add_argument("--out", type=out_file, help="write the JSON here")
    p.add_argument("--no-flashbax", action="store_true", help="benchmark rlvault alone")
    p.add_argument("--tmpdir", type=existing_dir, help="parent of the temp directory")
    p.add_argument("--json", action="store_true", help="JSON on stdout (the table on stderr)")
    p.add_argument(
        "--sweep",
        action="store_true",
        help="add the stacked stream over prefetch depths and epochs per stream",
    )
    p.add_argument(
        "--stream-batches",
        type=positive_ints,
        help="comma-separated batch sizes of the batches/s rows (default 256,4096)",
    )
    p.add_argument(
        "--stream-stacks",
        type=positive_ints,
        help="the stack=S of each --stream-batches size for the stacked rows (default 32,4)",
    )
    for name in ("rows", "steps", "batch", "batches", "rounds"):
        p.add_argument(f"--{name}", type=positive_int, help=f"override the config's {name}")
    args = p.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    cfg = dataclasses.replace(
        cfg, **{k: getattr(args, k) for k in ("rows", "steps", "batch", "batches", "rounds")
                if getattr(args, k) is not None}
    )  # fmt: skip
    if args.stream_batches:
        cfg = dataclasses.replace(cfg, stream_batches=args.stream_batches)
    if args.stream_stacks:
        cfg = dataclasses.replace(cfg, stream_stacks=args.stream_stacks)
    if len(cfg.stream_stacks) != len(cfg.stream_batches):
        p.error(f"--stream-stacks needs one stack per stream batch size {cfg.stream_batches}")
    stacked = [b * s for b, s in zip(cfg.stream_batches, cfg.stream_stacks, strict=True)]
    if cfg.rows * cfg.steps < max(cfg.batch, *stacked):
        p.error(
            f"--rows x --steps ({cfg.rows} x {cfg.steps}) holds fewer sequences than a batch "
            f"of --batch ({cfg.batch}) or a stack of a stream batch "
            f"(--stream-batches x --stream-stacks: {max(stacked)})"
        )
    libs = load_libraries(args.no_flashbax, log)
    log(f"backend {jax.default_backend()}: {jax.devices()}; libraries {sorted(libs)}; {cfg}")
    with tempfile.TemporaryDirectory(prefix="bench_gpu_", dir=args.tmpdir) as tmp:
        paths, nbytes = build(libs, Path(tmp), cfg)
        warm_up(libs, paths, cfg)
        rounds = []
        for i in range(cfg.rounds):
            rounds.append(one_round(libs, paths, cfg))
            log(f"round {i + 1}/{cfg.rounds}: {rounds[-1]}")
        swept = sweep(libs, paths, cfg) if args.sweep else None
    summary = summarise(rounds, nbytes, cfg)
    if swept:
        summary["sweep"] = swept
    result = {
        "command": " ".join(sys.argv),
        "code": code_provenance("buffers", ("buffers", "vault")),
        "table": None,
        "config": dataclasses.asdict(cfg),
        "raw_mb": nbytes / MB,
        "machine": machine_info(),
        "loadavg": loadavg(),
        "rounds": rounds,
        "summary": summary,
    }
    lines = table(summary, cfg)
    result["table"] = lines
    if args.json:
        print(json.dumps(result, indent=1))
        log("\n".join(lines))
    else:
        print("\n".join(lines))
    log(f"raw experience {fmt(nbytes / MB)} MB; ratio > 1: rlvault faster")
    if args.out:
        write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
