"""The vault benchmark script runs end to end and emits its JSON (no timings are asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
SCRIPT = TOOLS / "bench_vault.py"


def test_bench_vault_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    run = subprocess.run(
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
        check=False,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-5000:]
    doc = json.loads(out.read_text())
    metrics = {(row["variant"], row["metric"]) for row in doc["rows"]}
    assert ("vector", "write (all writes)") in metrics
    assert ("vector", "read all, numpy, cold") in metrics
    writes = next(r for r in doc["rows"] if r["metric"] == "write (all writes)")
    assert writes["rlvault"] > 0
    # first read in a new process: the vector vault of its own, 16 x 6,000 steps, page cache warm
    prefix = "first read in a new process (16 x 6,000 steps, files in page cache): "
    first = {r["metric"][len(prefix) :]: r for r in doc["rows"] if r["metric"].startswith(prefix)}
    assert set(first) == {
        "import + open + read, median",
        "import + open + read, min",
        "import, median",
        "open, median",
        "read all as a state, blocked, median",
        "whole process, timed by the parent, median",
    }
    for row in first.values():
        assert row["variant"] == "vector"
        assert row["unit"] == "s"
        assert row["rlvault"] > 0
        assert row["flashbax"] is None  # --no-flashbax
    measured = doc["variants"][0]["first_read"]
    assert measured["timesteps"] == 6000
    rl = measured["libraries"]["rlvault"]
    assert len(rl["runs"]) == 2  # --quick
    assert rl["total_s"]["min"] <= rl["total_s"]["median"]
    assert rl["bytes"] == 16 * 6000 * (64 * 4 + 4 + 4 + 1)
    for run in rl["runs"]:
        assert run["import_s"] + run["open_s"] + run["read_s"] == pytest.approx(run["total_s"])
        assert run["process_s"] > run["total_s"]  # the parent also sees start-up and exit
        assert run["page_cache"]["bytes_read"] == rl["disk_bytes"]  # every file read first


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
    assert rows["recording overhead, mean step time"]["target"] == "<= 1.05x"
    assert rows["recording overhead, slowest 1 % of steps (p99)"]["target"] == "<= 1.5x"
    assert rows["crash trials (SIGKILL at random), failed"]["rlvault"] == 0
    assert rows["crash trials"]["rlvault"] > 0
    recording = doc["durability"]["recording"]["with"]["auto"]
    assert recording["steps_run"] == 150  # 50 warm-up steps and a block of 100
    assert recording["recorded"] == 151  # every step (and the compile step) was committed
    assert recording["compression_ratio"] > 1


def test_first_read_of_both_libraries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first-read measurement with Flashbax as well (a small vault): the same data for
    both libraries, positive times, and table rows with a ratio."""
    pytest.importorskip("flashbax")
    monkeypatch.syspath_prepend(str(TOOLS))
    import _first_read
    import _vaults
    import bench_vault
    from _report import Rows

    libs = _vaults.load_libraries(no_flashbax=False)
    first = _first_read.measure(
        "vector", libs, rows=4, steps=200, repeats=1, pool=None, workdir=tmp_path
    )
    assert list(tmp_path.iterdir()) == []  # the vaults were removed
    measured = first["libraries"]
    assert set(measured) == {"rlvault", "flashbax"}
    assert measured["rlvault"]["bytes"] == measured["flashbax"]["bytes"] == 4 * 200 * 265
    for lib in measured.values():
        assert "errors" not in lib
        assert [r["page_cache"]["bytes_read"] for r in lib["runs"]] == [lib["disk_bytes"]]
        for key in _first_read.TIMES:
            assert lib[key]["median"] > 0
    table = Rows()
    bench_vault.first_read_rows(table, "vector", first)
    assert len(table.rows) == 6
    for row in table.rows:
        assert row["metric"].startswith("first read in a new process (4 x 200 steps, files in")
        assert row["rlvault"] > 0
        assert row["flashbax"] > 0
        assert row["ratio"] == pytest.approx(row["flashbax"] / row["rlvault"])
