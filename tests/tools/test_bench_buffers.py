"""The buffer benchmark script runs end to end and emits its JSON (no timings are asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "bench_buffers.py"


def test_bench_buffers_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    args = ["--quick", "--no-flashbax", "--repeats", "1", "--inner", "1", "--no-memory"]
    subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--capacity", "2000", "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    doc = json.loads(out.read_text())
    kinds = {row["kind"] for row in doc["rows"]}
    assert kinds == {"flat", "item", "trajectory", "prioritised_trajectory"}
    ops = {(row["op"], row["loop"]) for row in doc["rows"]}
    assert ("sample_256", "scan") in ops
    assert ("add_1", "loop") in ops
    assert all(row["rlvault"]["median_us"] > 0 for row in doc["rows"])
