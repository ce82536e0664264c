"""Crash safety with real processes: SIGKILLed writers, then check what survived.

The trials live in ``tools/crash_trials.py`` (run it with ``--trials N [--fault F]`` for more).
Each kills a writer process and checks that the vault reopens at a committed length >= the
last commit the writer reported, that the committed prefix of every leaf is bit-identical to
what was added, and that a new writer takes the lock at once and appends exactly. 30 trials
kill at random moments of the append loop; 10 kill inside the array resize step of an append,
10 inside the write of the place tags the commit record kept (format 5) and 10 inside the
replacement of the commit record (the writer kills itself there); 10 kill writers whose writes
run in the background (``block=False``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "crash_trials.py"


def run_trials(tmp_path: Path, trials: int, seed: int, fault: str) -> dict[str, Any]:
    run = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            *("--trials", str(trials), "--seed", str(seed), "--fault", fault),
            *("--workdir", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.stdout.strip(), run.stderr[-3000:]
    summary: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["trials"] == trials
    assert summary["failures"] == 0, summary["problems"]
    assert run.returncode == 0
    return summary


def test_thirty_sigkilled_writers_leave_exact_committed_prefixes(tmp_path: Path) -> None:
    summary = run_trials(tmp_path, 30, seed=7, fault="random")
    assert min(summary["committed_lengths"]) > 0


@pytest.mark.parametrize("fault", ["resize", "tags", "commit"])
def test_writers_killed_inside_a_step_of_the_append_leave_exact_prefixes(
    tmp_path: Path, fault: str
) -> None:
    summary = run_trials(tmp_path, 10, seed=11, fault=fault)
    # Every kill was sent while the targeted call was in progress (the writer says so).
    assert summary["kill_in"] == {fault: 10}
    assert summary["armed"] == 10 + summary["missed"]


def test_writers_killed_while_background_writes_run_leave_exact_prefixes(tmp_path: Path) -> None:
    # block=False writes: the background thread writes chunk by chunk, then commits
    summary = run_trials(tmp_path, 10, seed=3, fault="background")
    assert summary["kill_in"].get("data write", 0) >= 3  # kills landed while chunks were written
