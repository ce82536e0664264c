"""The vault benchmark script runs end to end and emits its JSON (no timings are asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "bench_vault.py"


def test_bench_vault_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--quick",
            "--variant",
            "vector",
            "--no-flashbax",
            "--tmpdir",
            str(tmp_path),
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    doc = json.loads(out.read_text())
    metrics = {(row["variant"], row["metric"]) for row in doc["rows"]}
    assert ("vector", "write (all writes)") in metrics
    assert ("vector", "read all, numpy, cold") in metrics
    writes = next(r for r in doc["rows"] if r["metric"] == "write (all writes)")
    assert writes["rlvault"] > 0


def test_bench_vault_durability_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--quick",
            "--variant",
            "none",
            "--durability",
            "--no-flashbax",
            "--tmpdir",
            str(tmp_path),
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    doc = json.loads(out.read_text())
    assert doc["variants"] == []
    rows = {r["metric"]: r for r in doc["rows"] if r["variant"] == "durability"}
    overhead = rows["recording overhead, median step time (image, write every 50 steps)"]
    assert overhead["rlvault"] > 0
    assert overhead["target"] == "<= 1.10x"
    assert rows["crash trials (SIGKILL at random), failed"]["rlvault"] == 0
    assert rows["crash trials"]["rlvault"] > 0
    recording = doc["durability"]["recording"]["with"]["auto"]
    assert recording["steps_run"] == 150  # 50 warm-up steps and a block of 100
    assert recording["recorded"] == 151  # every step (and the compile step) was committed
    assert recording["compression_ratio"] > 1
