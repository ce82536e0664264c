"""Benchmark a Grain data source over a vault (``vault.grain_source``: records are sequence
windows) against the native stream (``Vault.as_dataset``), same data, one process.

Workload: the data of ``tools/bench_streaming.py`` (``tools/_workloads.py``; 16 rows):
``image`` (uint8 ``(84, 84, 3)`` Atari-like frames plus ``action``, ``reward``, ``done``),
1,024 timesteps (347 MB raw), and ``vector`` (float32 ``(64,)``, same scalars), 16,384
timesteps (69 MB raw); default codecs and chunks. Both pipelines yield shuffled batches of
``L``-step windows (``L = 2``) as numpy arrays:

* native: ``vault.as_dataset(batch, L, shuffle=True, epochs=None, device_put=False)``;
* Grain: ``grain.MapDataset.source(vault.grain_source(vault, L, cache_bytes=...))
  .shuffle(seed=0).batch(batch, drop_remainder=True).to_iter_dataset()`` (Grain's default
  read options: 16 reading threads, prefetch 500), once with the source's default chunk cache
  (256 MiB: the vector vault fits, the image vault does not) and once with a cache of an
  eighth of the vault (the case streaming is for: data larger than memory).

Each measurement takes two untimed batches (threads start, first reads), then times batches
until 2,000 have come or 5 s have passed; batches/s = batches / seconds.
Rounds interleave every measurement (the machine may be shared); reported are medians over
rounds, and the ratio Grain / native is the median over rounds of the ratio within a round.
The page cache is warm (the vaults were just written).

Usage::

    python tools/bench_grain.py --quick                # smoke test (seconds)
    python tools/bench_grain.py --out results.json     # full run, prints a markdown table
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import itertools
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _argtypes import existing_dir, out_file
from _probes import MB, code_provenance, loadavg, machine_info, package_version
from _report import log, write_json
from _workloads import VARIANTS, DataSource, example_timestep, make_frame_pool, step_nbytes

import vault
from vault import Vault

SEQUENCE_LENGTH = 2


@dataclasses.dataclass(frozen=True)
class Config:
    rows: int
    steps: dict[str, int]
    batches: tuple[int, ...]
    rounds: int
    max_batches: int
    max_seconds: float
    pool_frames: int


FULL = Config(16, {"image": 1024, "vector": 16384}, (64, 256), 3, 2000, 5.0, 512)
QUICK = Config(4, {"image": 128, "vector": 1024}, (16,), 1, 8, 2.0, 32)


def build_vault(variant: str, cfg: Config, path: Path) -> tuple[Vault, int]:
    pool = make_frame_pool(2, cfg.pool_frames) if variant == "image" else None
    source = DataSource(variant, cfg.rows, pool)
    v = Vault.create(str(path), example_timestep(variant), rows=cfg.rows, done_leaf="done")
    steps = cfg.steps[variant]
    for lo in range(0, steps, 256):
        v.append(source.next(min(256, steps - lo)))
    v.close()
    return Vault.open(str(path)), steps * cfg.rows * step_nbytes(variant)


def native(path: Path, batch: int) -> Iterator[Any]:
    stream = Vault.open(str(path)).as_dataset(
        batch, SEQUENCE_LENGTH, shuffle=True, seed=0, epochs=None, device_put=False
    )
    with stream:
        for b in stream:
            yield b.experience


def with_grain(path: Path, batch: int, cache_bytes: int | None) -> Iterator[Any]:
    import grain

    options = {} if cache_bytes is None else {"cache_bytes": cache_bytes}
    source = vault.grain_source(Vault.open(str(path)), SEQUENCE_LENGTH, **options)
    dataset = grain.MapDataset.source(source).shuffle(seed=0).repeat()
    batches = iter(dataset.batch(batch, drop_remainder=True).to_iter_dataset())
    try:
        yield from batches
    finally:
        batches.close()  # stop its reading threads before the next measurement


def timed(batches: Iterator[Any], cfg: Config) -> dict[str, Any]:
    """Two untimed batches, then batches until ``max_batches`` or ``max_seconds``."""
    gc.collect()
    for _ in itertools.islice(batches, 2):
        pass
    count, t0 = 0, time.perf_counter()
    for _ in batches:
        count += 1
        if count >= cfg.max_batches or time.perf_counter() - t0 >= cfg.max_seconds:
            break
    seconds = time.perf_counter() - t0
    close = getattr(batches, "close", None)
    if close is not None:
        close()
    return {"batches": count, "seconds": seconds, "batches_per_s": count / seconds}


def run_variant(variant: str, cfg: Config, workdir: Path) -> dict[str, Any]:
    path = workdir / variant
    t0 = time.perf_counter()
    v, raw = build_vault(variant, cfg, path)
    log(f"{variant}: vault of {raw / MB:,.0f} MB raw built in {time.perf_counter() - t0:.1f} s")
    records = len(vault.grain_source(v, SEQUENCE_LENGTH))
    rounds: list[dict[str, dict[str, Any]]] = []
    for r in range(cfg.rounds):
        row: dict[str, dict[str, Any]] = {}
        for batch in cfg.batches:
            row[f"native/{batch}"] = timed(native(path, batch), cfg)
            row[f"grain/{batch}/default"] = timed(with_grain(path, batch, None), cfg)
            row[f"grain/{batch}/eighth"] = timed(with_grain(path, batch, raw // 8), cfg)
        log(
            f"{variant} round {r + 1}: "
            + ", ".join(f"{k} {m['batches_per_s']:,.1f}/s" for k, m in row.items())
        )
        rounds.append(row)
    results = []
    for batch in cfg.batches:
        base = f"native/{batch}"
        pipelines = [
            (base, "native as_dataset"),
            (f"grain/{batch}/default", "Grain, default cache (256 MiB)"),
            (f"grain/{batch}/eighth", "Grain, cache = 1/8 of the vault"),
        ]
        for key, what in pipelines:
            rate = statistics.median(x[key]["batches_per_s"] for x in rounds)
            ratio = statistics.median(
                x[key]["batches_per_s"] / x[base]["batches_per_s"] for x in rounds
            )
            results.append(
                {
                    "variant": variant,
                    "batch": batch,
                    "what": what,
                    "batches_per_s": rate,
                    "records_per_s": rate * batch,
                    "ratio_to_native": ratio,
                }
            )
    return {
        "variant": variant,
        "rows": cfg.rows,
        "timesteps": cfg.steps[variant],
        "raw_bytes": raw,
        "records": records,
        "rounds": rounds,
        "results": results,
    }


def table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| variant | batch | pipeline | batches/s | windows/s | Grain / native |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in results:
        ratio = "1" if r["what"].startswith("native") else f"{r['ratio_to_native']:.3f}"
        lines.append(
            f"| {r['variant']} | {r['batch']} | {r['what']} | {r['batches_per_s']:,.1f} | "
            f"{r['records_per_s']:,.0f} | {ratio} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny data, one round")
    parser.add_argument("--out", type=out_file, help="write the JSON results here")
    parser.add_argument(
        "--tmpdir", type=existing_dir, help="an existing folder to build the vaults in"
    )
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    args = parser.parse_args(argv)
    try:
        import grain  # noqa: F401
    except ImportError:
        print("bench_grain needs Grain: pip install grain (or the dev extra)", file=sys.stderr)
        return 2
    cfg = QUICK if args.quick else FULL
    workdir = Path(tempfile.mkdtemp(prefix="bench_grain_", dir=args.tmpdir))
    try:
        variants = [run_variant(variant, cfg, workdir) for variant in args.variants]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results = [r for v in variants for r in v["results"]]
    doc = {
        "benchmark": "bench_grain",
        "config": dataclasses.asdict(cfg),
        "sequence_length": SEQUENCE_LENGTH,
        "grain_version": package_version("grain"),
        "machine": machine_info(),
        "loadavg_after": loadavg(),
        "code": code_provenance("vault", ("vault/stream/_grain.py", "vault/stream/_stream.py")),
        "variants": variants,
        "rows": results,
    }
    if args.out is not None:
        write_json(args.out, doc)
    else:
        print(json.dumps(doc, indent=1, default=str))
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
