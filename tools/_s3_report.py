"""The S3 benchmark's tables: rows side by side per method, the targets, and Markdown
(``tools/bench_s3.py`` measures; this turns its measurements into the report)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from typing import Any

from _report import fmt

METHODS = (
    "rlvault_s3",
    "rlvault_local",
    "tensorstore_s3",
    "tensorstore_s3_commit",
    "tensorstore_s3_records",
    "zarr_s3fs",
)
LABELS = {
    "rlvault_s3": "rlvault S3",
    "rlvault_local": "rlvault local",
    "tensorstore_s3": "TensorStore S3",
    "tensorstore_s3_commit": "TensorStore S3 + commit PUT",
    "tensorstore_s3_records": "TensorStore S3 + the vault's requests",
    "zarr_s3fs": "zarr+s3fs S3",
}
WRITERS = (
    "rlvault_s3",
    "tensorstore_s3",
    "tensorstore_s3_commit",
    "tensorstore_s3_records",
    "rlvault_local",
)
READERS = ("rlvault_s3", "tensorstore_s3", "zarr_s3fs", "rlvault_local")
STREAMERS = ("rlvault_s3", "rlvault_local")
# The vault's defaults for s3:// locations (docs: Object storage), used by raw TensorStore
TARGETS = {
    "write_vs_tensorstore": 0.9,  # issue 32 (was 0.8, issue 15)
    "write_vs_committed": 0.9,
    "write_vs_records": 0.9,
    "read_vs_tensorstore": 0.8,
    "read_vs_zarr": 2.0,
}
STREAM_TARGET = 0.7


def paired(num: list[float], den: list[float]) -> float | None:
    pairs = [a / b for a, b in zip(num, den, strict=True) if a and b]
    return statistics.median(pairs) if pairs else None


def med(values: list[float]) -> float:
    return statistics.median(values)


def build_rows(variants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def add(variant: str, metric: str, unit: str, values: dict[str, float | None]) -> None:
        rows.append(
            {
                "variant": variant,
                "metric": metric,
                "unit": unit,
                **{m: values.get(m) for m in METHODS},
            }
        )

    for r in variants:
        v = r["variant"]
        add(v, "write", "MB/s", {m: med(x["mb_s"]) for m, x in r["writes"].items()})
        for side, what in (("client", "this process"), ("server", "the S3 server")):
            add(
                v,
                f"write: CPU per append, {what}",
                "ms",
                {
                    m: med(x["cpu_ms_per_append"][side])
                    for m, x in r["writes"].items()
                    if side == "client" or m != "rlvault_local"
                },
            )
        add(v, "read all", "MB/s", {m: med(x["mb_s"]) for m, x in r["reads"].items()})
        add(
            v, "one-step append", "ms", {m: x["ms_median"] for m, x in r["one_step_append"].items()}
        )
        add(
            v,
            "streaming (256 x 1, shuffled, 1 epoch)",
            "batches/s",
            {m: med(x["batches_s"]) for m, x in r["streaming"].items()},
        )
        add(
            v,
            "streaming (256 x 1, shuffled, 1 epoch)",
            "MB/s",
            {m: med(x["mb_s"]) for m, x in r["streaming"].items()},
        )
        add(
            v,
            "streaming / read all",
            "x",
            {m: paired(r["streaming"][m]["mb_s"], r["reads"][m]["mb_s"]) for m in STREAMERS},
        )
        sent = r["requests"]
        add(
            v,
            "S3 requests, read all",
            "GETs",
            {m: med(x["read_all_gets"]) for m, x in sent.items()},
        )
        add(
            v, "S3 requests per append", "GETs", {m: med(x["append_gets"]) for m, x in sent.items()}
        )
        add(
            v, "S3 requests per append", "PUTs", {m: med(x["append_puts"]) for m, x in sent.items()}
        )
    return rows


def build_targets(variants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(variant: str, what: str, num: list[float], den: list[float], goal: float) -> None:
        ratio = paired(num, den)
        out.append(
            {
                "variant": variant,
                "target": what,
                "rlvault": med(num),
                "reference": med(den),
                "ratio": ratio,
                "ratio_of_medians": med(num) / med(den),
                "goal": goal,
                "met": ratio is not None and ratio >= goal,
            }
        )

    for r in variants:
        v, w, rd, st = r["variant"], r["writes"], r["reads"], r["streaming"]
        add(
            v,
            "S3 write MB/s vs raw TensorStore (>= 0.90)",
            w["rlvault_s3"]["mb_s"],
            w["tensorstore_s3"]["mb_s"],
            TARGETS["write_vs_tensorstore"],
        )
        add(
            v,
            "S3 write MB/s vs raw TensorStore + one commit PUT per append (>= 0.90)",
            w["rlvault_s3"]["mb_s"],
            w["tensorstore_s3_commit"]["mb_s"],
            TARGETS["write_vs_committed"],
        )
        add(
            v,
            "S3 write MB/s vs raw TensorStore + the vault's other requests (>= 0.90)",
            w["rlvault_s3"]["mb_s"],
            w["tensorstore_s3_records"]["mb_s"],
            TARGETS["write_vs_records"],
        )
        add(
            v,
            "S3 read all MB/s vs raw TensorStore (>= 0.80)",
            rd["rlvault_s3"]["mb_s"],
            rd["tensorstore_s3"]["mb_s"],
            TARGETS["read_vs_tensorstore"],
        )
        add(
            v,
            "S3 read all MB/s vs zarr-python + s3fs (>= 2.0)",
            rd["rlvault_s3"]["mb_s"],
            rd["zarr_s3fs"]["mb_s"],
            TARGETS["read_vs_zarr"],
        )
        add(
            v,
            "S3 streaming MB/s vs S3 read all (>= 0.70)",
            st["rlvault_s3"]["mb_s"],
            rd["rlvault_s3"]["mb_s"],
            STREAM_TARGET,
        )
    return out


def markdown(result: dict[str, Any]) -> Iterator[str]:
    heads = [LABELS[m] for m in METHODS]
    yield "| variant | metric | unit | " + " | ".join(heads) + " |"
    yield "|---|---|---|" + "---:|" * len(heads)
    for r in result["rows"]:
        cells = [fmt(r[m], r["unit"]) for m in METHODS]
        yield f"| {r['variant']} | {r['metric']} | {r['unit']} | " + " | ".join(cells) + " |"
    yield ""
    yield "| variant | target | rlvault S3 | reference | ratio | met |"
    yield "|---|---|---:|---:|---:|---|"
    for t in result["targets"]:
        met = "yes" if t["met"] else "**no**"
        yield (
            f"| {t['variant']} | {t['target']} | {fmt(t['rlvault'])} | "
            f"{fmt(t['reference'])} | {fmt(t['ratio'], 'x')} | {met} |"
        )
    yield ""
    yield (
        f"load average (1/5/15 min): start {result['loadavg']['start']}, "
        f"end {result['loadavg']['end']}"
    )


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------
