"""The recording benchmark runs end to end with two codecs and emits its JSON and table (no
timings are asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "bench_recording.py"


def test_bench_recording_smoke(tmp_path: Path) -> None:
    out = tmp_path / "recording.json"
    run = subprocess.run(
        [
            *(sys.executable, str(SCRIPT), "--quick", "--steps", "40", "--every", "20"),
            *("--rounds", "2"),
            *("--codec", "auto", "--codec", "lz4", "--out", str(out)),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    doc = json.loads(out.read_text())
    assert doc["codecs"] == ["auto", "lz4"]
    # plain, auto, plain, lz4, plain in each of 2 rounds: 5 plain blocks
    assert len(doc["without"]["block_medians_ms"]) == 5
    for codec in ("auto", "lz4"):
        rec = doc["with"][codec]
        assert rec["steps_run"] == 20 + 2 * 40  # warm-up, then 2 blocks
        assert rec["writes"] == 5  # at steps 10, 30, 50, 70, 90
        assert rec["final_write_steps"] == 10  # steps 91-100, written before the final close
        assert rec["recorded"] == 101  # the compile step's timestep and 100 more, all committed
        assert len(rec["round_median_ratios"]) == 2
        assert rec["median_ratio"] > 0
        assert rec["mean_ratio"] > 0
        assert rec["final_flush_s"] >= 0
        # every recorded step falls in one range of steps since the last write (every 20)
        positions = rec["by_steps_since_write"]
        assert [p["steps_since_write"] for p in positions] == ["0-0", "1-4", "5-19"]
        assert sum(p["steps"] for p in positions) == 2 * 40
        assert positions[0]["steps"] == 4  # the writing steps of the two blocks
        assert abs(sum(p["excess_share"] for p in positions) - 1) < 1e-9
    # zstd-3 (auto) compresses the Atari-like frames far better than blosc-lz4
    assert doc["with"]["auto"]["compression_ratio"] > doc["with"]["lz4"]["compression_ratio"] > 1
    assert "| recording, codec lz4 |" in run.stdout
    assert "| lz4 | 5-19 |" in run.stdout
