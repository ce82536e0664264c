"""Raw TensorStore on the S3 benchmark's server (``tools/bench_s3.py``): the same arrays as the
vault's (one per leaf, its chunk shape and codec chain), created at their final shape and
written, read and appended to without a vault around them; the ceiling the vault is held to.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Protocol

import numpy as np
import tensorstore as ts
from _probes import CpuClock

from vault.storage._s3 import S3Config, context_spec

S3_RETRIES = S3Config.retries  # the vault's defaults
S3_CONCURRENCY = S3Config.request_concurrency
COMMIT_RECORD = b"x" * 2000  # about a vault's commit record (``commit/zarr.json``)
# what a raw TensorStore write method sends besides its chunks (``write_raw_run``)
RECORDS = {
    "tensorstore_s3": "",
    "tensorstore_s3_commit": "commit",
    "tensorstore_s3_records": "vault",
}


class Places(Protocol):
    """Where the benchmark's data goes (``bench_s3.Places``)."""

    def kvstore(self, prefix: str) -> dict[str, Any]:
        """The s3 kvstore spec of ``prefix``."""
        ...


def s3_context() -> ts.Context:
    """A TensorStore context of its own with the vault's S3 defaults (retries, concurrent
    requests): the vault's spec, not its shared context."""
    return ts.Context(context_spec(S3_RETRIES, S3_CONCURRENCY))


def raw_spec(places: Places, prefix: str, leaf: dict[str, Any], rows: int, length: int) -> dict:
    spec: dict[str, Any] = {
        "driver": "zarr3",
        "kvstore": places.kvstore(f"{prefix}/experience/{leaf['name']}"),
    }
    if length:
        spec["metadata"] = {
            "shape": [rows, length, *leaf["shape"]],
            "data_type": leaf["dtype"],
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": leaf["chunk"]}},
            "codecs": leaf["codecs"],
        }
    return spec


def raw_create(
    places: Places, prefix: str, layout: list[dict[str, Any]], rows: int, length: int
) -> dict[str, ts.TensorStore]:
    ctx = s3_context()
    futures = {
        leaf["name"]: ts.open(
            raw_spec(places, prefix, leaf, rows, length), create=True, context=ctx
        )
        for leaf in layout
    }
    return {name: f.result() for name, f in futures.items()}


def raw_write(arrays: dict[str, ts.TensorStore], batch: dict[str, np.ndarray], at: int) -> None:
    """One round: ``batch`` written at time ``at`` into every leaf at once, waited for."""
    n = next(iter(batch.values())).shape[1]
    pending = [arrays[name][:, at : at + n].write(batch[name]) for name in arrays]
    for p in pending:
        p.commit.result()


def raw_open(
    places: Places, prefix: str, layout: list[dict[str, Any]]
) -> dict[str, ts.TensorStore]:
    """The raw arrays of ``layout`` under ``prefix``, opened together (one context)."""
    ctx = s3_context()
    opened = {
        leaf["name"]: ts.open(raw_spec(places, prefix, leaf, 0, 0), open=True, context=ctx)
        for leaf in layout
    }
    return {name: f.result() for name, f in opened.items()}


def raw_read(
    places: Places, prefix: str, layout: list[dict[str, Any]], length: int
) -> dict[str, np.ndarray]:
    arrays = raw_open(places, prefix, layout)
    reads = {name: a[:, :length].read() for name, a in arrays.items()}
    return {name: f.result() for name, f in reads.items()}


def write_raw_run(
    places: Places,
    prefix: str,
    layout: list[dict[str, Any]],
    batches: list[dict[str, np.ndarray]],
    capacity: int,
    records: str = "",
    clock: CpuClock | None = None,
) -> float:
    """Raw TensorStore arrays (created untimed at ``capacity`` timesteps) written round by
    round; the rounds' summed time.

    ``records="commit"``: each round then PUTs one small object of the size of a vault's commit
    record and waits for it: the one round trip that any store whose appends become visible
    atomically adds to each append (rlvault's commit record, written after the append's chunks
    have landed). ``records="vault"``: besides, each round sends the other requests a vault's
    append sends beside its chunks, together with them: the lease check's GET and the PUT of
    the record the commit replaces (``history/``). (In format 5 an append sends no tag chunk
    until its commit record holds more than 256 tags of an array: none in this benchmark's
    runs.) What remains between rlvault and this is rlvault's own client work (encoding
    through memory, Python).

    ``clock`` (a ``_probes.CpuClock``) times the rounds' loop, for the CPU it took."""
    rows = next(iter(batches[0].values())).shape[0]
    arrays = raw_create(places, prefix, layout, rows, capacity)
    kv = ts.KvStore.open(places.kvstore(f"{prefix}/"), context=s3_context()).result()
    total, at = 0.0, 0
    with clock or contextlib.nullcontext():
        for i, batch in enumerate(batches):
            n = next(iter(batch.values())).shape[1]
            t0 = time.perf_counter()
            sent = []
            if records == "vault":
                sent.append(kv.read("lock/lease.json"))
                sent.append(kv.write(f"history/{i}", COMMIT_RECORD + str(i).encode()))
            raw_write(arrays, batch, at)
            for future in sent:
                future.result()
            if records:
                kv.write("commit.json", COMMIT_RECORD + str(i).encode()).result()
            total += time.perf_counter() - t0
            at += n
    return total


def one_step_raw(
    places: Places,
    prefix: str,
    layout: list[dict[str, Any]],
    extra: list[dict[str, np.ndarray]],
    at: int,
) -> list[float]:
    """Raw TensorStore: one timestep of every leaf written at ``at``, ``at + 1``, ..."""
    arrays = raw_open(places, prefix, layout)
    raw_write(arrays, extra[0], at)
    out = []
    for i, batch in enumerate(extra[1:]):
        t0 = time.perf_counter()
        raw_write(arrays, batch, at + 1 + i)
        out.append(time.perf_counter() - t0)
    return out
