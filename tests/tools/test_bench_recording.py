"""The recording benchmark runs end to end with two codecs and a floor recorder and emits its
JSON and table (no timings are asserted); the floor recorder writes every timestep it is given,
ring wraps included."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import buffers as fbx

TOOLS = Path(__file__).resolve().parents[2] / "tools"
SCRIPT = TOOLS / "bench_recording.py"


def test_bench_recording_smoke(tmp_path: Path) -> None:
    out = tmp_path / "recording.json"
    run = subprocess.run(
        [
            *(sys.executable, str(SCRIPT), "--quick", "--steps", "40", "--every", "20"),
            *("--rounds", "2"),
            *("--codec", "auto", "--codec", "lz4", "--codec", "floor-zstd", "--out", str(out)),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    doc = json.loads(out.read_text())
    assert doc["codecs"] == ["auto", "lz4", "floor-zstd"]
    # plain, auto, plain, lz4, plain, floor-zstd, plain in each of 2 rounds: 7 plain blocks
    assert len(doc["without"]["block_medians_ms"]) == 7
    for codec in ("auto", "lz4", "floor-zstd"):
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
    # the floor compresses with zstd too; each vault codec is compared with it, it with none
    assert doc["with"]["floor-zstd"]["compression_ratio"] > doc["with"]["lz4"]["compression_ratio"]
    assert set(doc["with"]["auto"]["against_floor"]) == {"floor-zstd"}
    assert doc["with"]["floor-zstd"]["against_floor"] == {}
    assert doc["with"]["lz4"]["against_floor"]["floor-zstd"]["mean"] > 0
    assert "| recording, codec lz4 |" in run.stdout
    assert "| floor recorder, floor-zstd |" in run.stdout
    assert "| lz4 | floor-zstd |" in run.stdout
    assert "| lz4 | 5-19 |" in run.stdout


def _floor_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_floor", TOOLS / "_floor.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("compress", [True, False])
def test_floor_recorder_writes_every_timestep_across_wraps(tmp_path: Path, compress: bool) -> None:
    floor = _floor_module().FloorRecorder(tmp_path / "floor", compress=compress)
    buf = fbx.make_trajectory_buffer(2, 2, 1, 1, 1, max_length_time_axis=8)
    example = {"obs": np.zeros(3, np.uint8), "reward": np.float32(0)}
    state = buf.init(example)
    added = 0
    # writes after 5, 6 (wrapping the ring of 8), 7 (wrapping again) and 3 adds
    for n, block in ((5, False), (6, False), (7, True), (3, False)):
        for _ in range(n):
            step = {
                "obs": np.full((2, 1, 3), added % 256, np.uint8)
                + np.arange(2, dtype=np.uint8)[:, None, None],
                "reward": np.full((2, 1), added, np.float32),
            }
            state = buf.add(state, step)
            added += 1
        assert floor.write(state, block=block) == n
    assert floor.write(state) == 0  # nothing new
    floor.close()
    assert floor.recorded == added == 21
    for row in range(2):
        obs = floor.read("obs", row)
        assert obs.shape == (21, 3)
        np.testing.assert_array_equal(obs[:, 0], np.arange(21) + row)
        np.testing.assert_array_equal(floor.read("reward", row), np.arange(21, dtype=np.float32))
