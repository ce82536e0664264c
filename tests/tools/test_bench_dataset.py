"""The dataset benchmark runs end to end (writers, 64 shards vs one vault, one and two JAX
processes streaming) and emits its JSON and tables (no timings are asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "bench_dataset.py"


FLOOR = "floor: every vault's manifest and commit record read and parsed as JSON (nothing checked)"


def test_bench_dataset_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--repeats", "1", "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    doc = json.loads(out.read_text())
    assert [(w["store"], w["writers"]) for w in doc["writes"]] == [
        ("local", 1),
        ("local", 2),
        ("local", 4),
    ]
    assert all(w["mb_s"] > 0 for w in doc["writes"])
    metrics = {row["metric"]: row for row in doc["shards_64"]}
    assert set(metrics) == {
        "open",
        "open, no catalog",
        "episode table, again on the open object",
        "open + episode table",
        "open + episode table, no catalog",
        "stream one epoch",
        "batches per epoch",
        FLOOR,
    }
    # the catalog-less opens are measured against the floor of reading their records
    for name in ("open, no catalog", "open + episode table, no catalog"):
        assert metrics[name]["dataset_vs_floor"] > 0
    # the same data both ways: an epoch has as many batches over 64 shards as over one vault
    assert metrics["batches per epoch"]["vault_s"] == metrics["batches per epoch"]["dataset_s"]
    one, two = doc["streams"]
    assert (one["processes"], two["processes"]) == (1, 2)
    assert two["batches"][0] == two["batches"][1]  # both processes step together
    assert all(row["dataset_s"] > 0 for row in doc["shards_64"])
    assert "| 64 shards vs one vault |" in done.stdout
    assert "| JAX processes |" in done.stdout
