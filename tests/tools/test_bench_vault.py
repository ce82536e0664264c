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
