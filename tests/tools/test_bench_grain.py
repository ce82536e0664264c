"""The Grain benchmark script runs end to end and emits its JSON and table (no timings are
asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "bench_grain.py"


def test_bench_grain_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--tmpdir", str(tmp_path), "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    doc = json.loads(out.read_text())
    assert {v["variant"] for v in doc["variants"]} == {"image", "vector"}
    for variant in doc["variants"]:
        # records: every valid start of an L=2 window, as the native stream's epoch
        assert variant["records"] == variant["rows"] * (variant["timesteps"] - 1)
    whats = {r["what"] for r in doc["rows"]}
    assert whats == {
        "native as_dataset",
        "Grain, default cache (256 MiB)",
        "Grain, cache = 1/8 of the vault",
    }
    assert all(r["batches_per_s"] > 0 and r["ratio_to_native"] > 0 for r in doc["rows"])
    assert "| variant | batch | pipeline |" in done.stdout
    assert list(tmp_path.glob("bench_grain_*")) == []  # the temp vaults were removed
