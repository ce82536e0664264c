"""The path-to-the-accelerator benchmark runs end to end on whatever backend is here (CPU in the
suite) and emits its JSON and table (no timings are asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "bench_gpu.py"


def test_bench_gpu_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--rounds", "2", "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    doc = json.loads(out.read_text())
    assert doc["config"]["rounds"] == 2
    assert len(doc["rounds"]) == 2
    cfg = doc["config"]
    for r in doc["rounds"]:
        # the stream visits every timestep of the vault exactly once per epoch
        assert r["rlvault"]["stream_sequences"] == cfg["rows"] * cfg["steps"]
    rl = doc["summary"]["rlvault"]
    assert rl["read_all_mb_s"] > 0
    assert rl["sample_batches_s"] > 0
    assert rl["stream_mb_s"] > 0
    if "flashbax" in doc["summary"]:  # dev installs it; both libraries stored the same bytes
        assert doc["summary"]["flashbax"]["read_all_mb_s"] > 0
    assert "| vector | read all to the device | MB/s |" in done.stdout
    for batch, rates in doc["rounds"][0]["stream_rates"].items():
        # stacked (counted per batch) or not, an epoch's stream yields the same batches
        want = rates["rlvault_stream_device"]["batches"]
        assert want == cfg["rows"] * cfg["steps"] // int(batch)
        assert rates["rlvault_stream_device_stack"]["batches"] == want
        assert rates["rlvault_stream_device_stack_alone"]["batches"] == want
    assert "(cut_on_device, stack=8, scanned step) vs Flashbax" in done.stdout
