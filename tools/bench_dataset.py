"""Benchmark datasets of shards (``vault.Dataset``): many writers, and many small shards.

Measured, in one run:

* **aggregate write throughput** with 1, 2 and 4 writer processes, each appending to its own
  shard of one dataset (vector workload: ``obs`` float32 (64,), action, reward, done; each
  writer 16 rows, appends of ``--steps`` timesteps), on the local disk and, with ``--s3``, on
  a SeaweedFS server on loopback (``vault.testing.S3TestServer``). The clock runs from a
  common start time (every writer has imported and created its shard) to the last writer's
  last commit; MB = 10**6 bytes of raw experience;
* **overhead of many small shards**: the same data as one vault of 64 x R rows and as a
  dataset of 64 shards of R rows each: open time (``Vault.open`` vs ``Dataset.open``), the
  episode table (``episodes()`` again on the open object, as a learner that refreshes calls
  it), a fresh open followed by the episode table, and one epoch of a shuffled stream
  (``as_dataset``, batches of 256 sequences of 2), each the median of ``--repeats`` runs, page
  cache warm. Opens are timed with the dataset's catalog current (as a finished dataset's
  writers leave it) and without one (deleted: as when every shard moved since it was
  written). The target is a dataset at most 2x the single vault's time;
* **streaming per process with 1 and 2 JAX processes**: the 64-shard dataset streamed for one
  epoch (global batches of 256 sequences of 2) by one process, then by two processes under
  ``jax.distributed`` on loopback (each reads its share and yields global ``jax.Array``s for a
  sharding over both processes' devices); sequences per second per process, from the first
  batch to the last (compilation and start-up excluded).

Usage::

    python tools/bench_dataset.py --quick          # smoke test, well under a minute
    python tools/bench_dataset.py --s3 --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _argtypes import out_file, positive_int
from _probes import loadavg, machine_info
from _report import fmt, log, write_json

ROWS = 16


def example() -> dict[str, Any]:
    return {
        "obs": np.zeros((64,), np.float32),
        "action": np.int32(0),
        "reward": np.float32(0),
        "done": np.bool_(False),
    }


def block(rng: np.random.Generator, rows: int, steps: int) -> dict[str, np.ndarray]:
    return {
        "obs": rng.standard_normal((rows, steps, 64), dtype=np.float32),
        "action": rng.integers(0, 18, (rows, steps), dtype=np.int32),
        "reward": (rng.random((rows, steps)) < 0.02).astype(np.float32),
        "done": rng.random((rows, steps)) < 0.01,
    }


def step_bytes() -> int:
    return 64 * 4 + 4 + 4 + 1


# ---------------------------------------------------------------------------------- writers
def writer_child(root: str, shard: str, appends: int, steps: int, start_at: float) -> None:
    """One writer process: create (or join) the dataset, make its shard, wait for the common
    start, append, print its finish time."""
    from vault import Dataset

    dataset = Dataset.create(root, example(), rows=ROWS, done_leaf="done", exist_ok=True)
    rng = np.random.default_rng(abs(hash(shard)) % 2**32)
    blocks = [block(rng, ROWS, steps) for _ in range(min(appends, 4))]
    with dataset.shard(shard) as writer:
        print("ready", flush=True)
        while time.time() < start_at:
            time.sleep(0.001)
        for k in range(appends):
            writer.append(blocks[k % len(blocks)])
        done = time.time()
    print(f"done {done}", flush=True)


def run_writers(root: str, writers: int, appends: int, steps: int) -> dict[str, Any]:
    start_at = time.time() + 4.0 + writers  # every child imports and creates its shard first
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--child",
                root,
                f"w{i}",
                str(appends),
                str(steps),
                str(start_at),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(writers)
    ]
    ends = []
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"writer failed: {out}")
        ends.append(float(out.split("done ")[1]))
    wall = max(ends) - start_at
    raw = writers * appends * steps * ROWS * step_bytes()
    return {"writers": writers, "seconds": wall, "mb": raw / 1e6, "mb_s": raw / 1e6 / wall}


# ------------------------------------------------------------------------ streaming processes
def stream_child(root: str, port: int, processes: int, index: int) -> None:
    """One JAX process streaming an epoch of the dataset; prints sequences/s."""
    import jax

    if processes > 1:
        address = f"127.0.0.1:{port}"
        jax.distributed.initialize(
            coordinator_address=address, num_processes=processes, process_id=index,
            coordinator_bind_address=address, initialization_timeout=60,
        )  # fmt: skip
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from vault import Dataset

    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    dataset = Dataset.open(root)
    options = {"shuffle": True, "seed": 0, "epochs": 1, "sharding": sharding}
    stream = dataset.as_dataset(256, 2, **options)
    first = next(stream)
    jax.block_until_ready(first.experience)
    start, count = time.perf_counter(), 0
    for batch in stream:
        jax.block_until_ready(batch.experience)
        count += 1
    seconds = time.perf_counter() - start
    local = 256 // processes
    print(f"rate {count * local / seconds} batches {count + 1}", flush=True)
    if processes > 1:
        jax.distributed.shutdown()


def run_streams(root: str, processes: int) -> dict[str, Any]:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--stream-child", root, str(port), str(processes), str(i)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(processes)
    ]
    rates, batches = [], []
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"stream process failed: {out}")
        fields = out.split("rate ")[1].split()
        rates.append(float(fields[0]))
        batches.append(int(fields[2]))
    return {"processes": processes, "sequences_s_per_process": rates, "batches": batches}


# ------------------------------------------------------------------------- many small shards
def build_pair(where: Path, shards: int, rows: int, steps: int) -> tuple[str, str]:
    from vault import Dataset, Vault

    rng = np.random.default_rng(0)
    data = [block(rng, rows, steps) for _ in range(shards)]
    one = str(where / "one")
    with Vault.create(one, example(), rows=shards * rows, done_leaf="done") as vault:
        vault.append({k: np.concatenate([d[k] for d in data]) for k in data[0]})
    root = str(where / "dataset")
    dataset = Dataset.create(root, example(), rows=rows, done_leaf="done")
    for i, d in enumerate(data):
        with dataset.shard(f"s{i:03d}") as shard:
            shard.append(d)
    return one, root


def time_median(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def overhead(one: str, root: str, repeats: int) -> list[dict[str, Any]]:
    """The single vault against the dataset, with the dataset's catalog current (as its
    writers leave it when they close) and with none (deleted: as when every shard committed
    since it was written)."""
    from vault import Dataset, Vault

    def stream(source: Any) -> int:
        n = 0
        with source.as_dataset(256, 2, shuffle=True, seed=0, epochs=1) as batches:
            for _ in batches:
                n += 1
        return n

    catalog = Path(root) / "catalog"

    def with_catalog(present: bool) -> None:
        if present:
            Dataset.open(root, write_catalog=True).episodes()  # writes it, index columns too
            assert catalog.is_file()
        else:
            catalog.unlink(missing_ok=True)

    vault, dataset = Vault.open(one), Dataset.open(root)
    stream(vault), stream(dataset)  # compile and warm both
    rows = []
    for name, present, fv, fd in (
        ("open", True, lambda: Vault.open(one), lambda: Dataset.open(root)),
        (
            "open, no catalog",
            False,
            lambda: Vault.open(one),
            lambda: Dataset.open(root, write_catalog=False),
        ),
        ("episode table, again on the open object", True, vault.episodes, dataset.episodes),
        (
            "open + episode table",
            True,
            lambda: Vault.open(one).episodes(),
            lambda: Dataset.open(root).episodes(),
        ),
        (
            "open + episode table, no catalog",
            False,
            lambda: Vault.open(one).episodes(),
            lambda: Dataset.open(root, write_catalog=False).episodes(),
        ),
        ("stream one epoch", True, lambda: stream(vault), lambda: stream(dataset)),
    ):
        with_catalog(present)
        tv, td = time_median(fv, repeats), time_median(fd, repeats)
        rows.append({"metric": name, "vault_s": tv, "dataset_s": td, "ratio": td / tv})
    # The floor of an open with no catalog: each vault's two records read and parsed as JSON,
    # nothing checked, nothing else (what any reader of these files must do at the least).
    shard_dirs = sorted(p for p in (Path(root) / "shards").iterdir() if p.is_dir())

    def floor(dirs: list[Path]) -> None:
        for d in dirs:
            json.loads((d / "zarr.json").read_bytes())
            json.loads((d / "commit" / "zarr.json").read_bytes())

    tv = time_median(lambda: floor([Path(one)]), repeats)
    td = time_median(lambda: floor(shard_dirs), repeats)
    rows.append(
        {
            "metric": "floor: every vault's manifest and commit record read and parsed as JSON "
            "(nothing checked)",
            "vault_s": tv,
            "dataset_s": td,
            "ratio": td / tv,
        }
    )
    floor_s = td
    for row in rows:
        if row["metric"].startswith("open") and "no catalog" in row["metric"]:
            row["dataset_vs_floor"] = row["dataset_s"] / floor_s
    counts = {"vault_s": stream(vault), "dataset_s": stream(dataset)}
    rows.append({"metric": "batches per epoch", **counts, "ratio": None})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--s3", action="store_true", help="also write to a local S3 server")
    parser.add_argument(
        "--steps", type=positive_int, default=500, help="timesteps per append (default 500)"
    )
    parser.add_argument(
        "--repeats", type=positive_int, default=5, help="runs per timing, median (default 5)"
    )
    parser.add_argument("--out", type=out_file, help="write the JSON here")
    parser.add_argument(
        "--shards-only", action="store_true", help="only the 64-shard overhead (no writers)"
    )
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--stream-child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stream_child:
        root, port, processes, index = args.stream_child
        stream_child(root, int(port), int(processes), int(index))
        return
    if args.child:
        root, shard, appends, steps, start_at = args.child
        writer_child(root, shard, int(appends), int(steps), float(start_at))
        return
    appends = 4 if args.quick else 40
    shard_rows, shard_steps = (2, 200) if args.quick else (4, 2000)
    result: dict[str, Any] = {
        "machine": machine_info(),
        "config": {
            "quick": args.quick,
            "s3": args.s3,
            "steps": args.steps,
            "repeats": args.repeats,
            "shards_only": args.shards_only,
        },
        "load_start": loadavg(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        places = {"local": lambda i: str(Path(tmp) / f"w{i}")}
        server = None
        if args.s3:
            from vault.testing import S3TestServer

            server = S3TestServer(Path(tmp) / "seaweedfs")
            server.start()
            os.environ.update(server.environment())
            places["s3"] = lambda i: f"s3://{server.bucket}/bench-{os.getpid()}-{i}"
        try:
            writes = []
            for kind, place in places.items() if not args.shards_only else ():
                for n in (1, 2, 4):
                    log(f"{kind}: {n} writers x {appends} appends of {args.steps} steps")
                    row = run_writers(place(n), n, appends, args.steps)
                    writes.append({"store": kind, **row})
            result["writes"] = writes
        finally:
            if server is not None:
                server.stop()
        log(f"64 shards of {shard_rows} rows x {shard_steps} steps vs one vault of the same data")
        one, root = build_pair(Path(tmp), 64, shard_rows, shard_steps)
        result["shards_64"] = overhead(one, root, args.repeats)
        result["streams"] = []
        if not args.shards_only:
            log("streaming the 64-shard dataset with 1, then 2 JAX processes")
            result["streams"] = [run_streams(root, n) for n in (1, 2)]
    result["load_end"] = loadavg()
    if result["writes"]:
        print_writes(result["writes"])
    print(
        "| 64 shards vs one vault | one vault | dataset | dataset / vault (target <= 2) "
        "| dataset / floor |"
    )
    print("|---|---:|---:|---:|---:|")
    for row in result["shards_64"]:
        ratio = "" if row["ratio"] is None else f"{row['ratio']:.2f}"
        if row["ratio"] is None:  # a count
            cells = f"{fmt(row['vault_s'])} | {fmt(row['dataset_s'])}"
        else:
            cells = f"{fmt(row['vault_s'] * 1e3)} ms | {fmt(row['dataset_s'] * 1e3)} ms"
        above = f"{row['dataset_vs_floor']:.2f}" if "dataset_vs_floor" in row else ""
        print(f"| {row['metric']} | {cells} | {ratio} | {above} |")
    if result["streams"]:
        print_streams(result["streams"])
    print(f"\nload average at start {result['load_start']}, at end {result['load_end']}")
    if args.out:
        write_json(args.out, result)
    else:
        log(json.dumps(result)[:200] + " ...")


def print_writes(writes: list[dict[str, Any]]) -> None:
    """The writers' table: MB/s per store and writer count, against one writer."""
    print("| store | writers | MB | seconds | MB/s | vs 1 writer |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in writes:
        base = next(r for r in writes if r["store"] == row["store"] and r["writers"] == 1)
        print(
            f"| {row['store']} | {row['writers']} | {fmt(row['mb'])} | {fmt(row['seconds'])} "
            f"| {fmt(row['mb_s'])} | {row['mb_s'] / base['mb_s']:.2f} |"
        )
    print()


def print_streams(streams: list[dict[str, Any]]) -> None:
    """The streams' table: sequences per second with 1 and 2 JAX processes."""
    print()
    print("| JAX processes | batches per process | sequences/s per process | total sequences/s |")
    print("|---:|---:|---:|---:|")
    for row in streams:
        rates = row["sequences_s_per_process"]
        print(
            f"| {row['processes']} | {row['batches'][0]} | {fmt(min(rates))} to {fmt(max(rates))} "
            f"| {fmt(sum(rates))} |"
        )


if __name__ == "__main__":
    main()
