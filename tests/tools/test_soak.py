"""``tools/soak.py`` for 20 seconds, on a local disk and on S3: a writer appending with kills
and resumes (and a full disk where the machine lets the soak mount a tmpfs), four readers
checking every value they read; no inconsistency."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "soak.py"


def _soak(tmp_path: Path, *extra: str) -> dict[str, Any]:
    out = tmp_path / "soak.json"
    run = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--minutes",
            str(20 / 60),
            "--kill-every",
            "3",
            "--fill-every",
            "4",
            "--workdir",
            str(tmp_path / "work"),
            "--json",
            str(out),
            *extra,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert summary["inconsistencies"] == 0, summary["inconsistency_lines"]
    assert summary["timesteps_written"] > 0
    assert summary["reads_checked"] > 0
    assert all(n > 0 for n in summary["reads_by_reader"].values()), summary
    assert summary["kills"] >= 1, summary
    return summary


def test_soak_file(tmp_path: Path) -> None:
    summary = _soak(tmp_path, "--location", "file")
    if not any(note.startswith("no tmpfs") for note in summary["notes"]):
        assert summary["disk_full_events"] >= 1, summary
        assert summary["disk_full_errors_survived"] >= 1, summary
    assert not (tmp_path / "work").exists()  # unmounted and removed


def test_soak_s3(tmp_path: Path, s3_env: Any) -> None:
    url = f"s3://{s3_env.bucket}/soak-{uuid.uuid4().hex[:8]}"
    _soak(tmp_path, "--location", "s3", "--s3-url", url)


@pytest.mark.parametrize("bad", [["--minutes", "-1"], ["--location", "ftp"]])
def test_soak_refuses_bad_arguments(bad: list[str]) -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), *bad], check=False, capture_output=True, text=True
    )
    assert run.returncode == 2, run.stderr
