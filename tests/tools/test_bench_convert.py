"""``tools/bench_convert.py --quick`` runs every importer end to end and reports each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "bench_convert.py"


def test_quick_run_reports_every_format(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    run = subprocess.run(
        [sys.executable, str(TOOL), "--quick", "--out", str(out), "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    formats = ["flashbax", "d4rl", "minari", "ogbench", "rlds"]
    assert [r["format"] for r in doc["results"]] == formats
    for row in doc["results"]:
        assert row["raw_mb"] > 3
        assert row["import_mb_s"] > 0
        assert row["read_vault_mb_s"] > 0
        assert row["read_source_mb_s"] > 0
    assert "| flashbax |" in run.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # its work folder is removed
