"""Crash safety with real processes: 50 SIGKILLed writers, then check what survived.

The trials live in ``tools/crash_trials.py`` (run it with ``--trials N`` for more); each kills
a writer process at a random moment of its append loop and checks that the vault reopens at a
committed length >= the last commit the writer reported, that the committed prefix of every
leaf is bit-identical to what was added, and that a new writer takes the lock at once and
appends exactly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "crash_trials.py"


def test_fifty_sigkilled_writers_leave_exact_committed_prefixes(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--trials", "50", "--seed", "7", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["trials"] == 50
    assert summary["failures"] == 0, summary["problems"]
    assert run.returncode == 0
    assert min(summary["committed_lengths"]) > 0
