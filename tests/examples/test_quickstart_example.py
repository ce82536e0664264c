"""The buffers quickstart example runs as a user runs it (no options) and its numbers are what
the buffers promise."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quickstart.py"


def _load():
    spec = importlib.util.spec_from_file_location("quickstart_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quickstart_outcome() -> None:
    result = _load().main()
    assert result["timesteps_added_per_env"] == 64
    assert result["flat_samples_valid"] == 1.0
    # The walk moves by exactly 1 per step except across a reset (|4| or |5| -> 0).
    assert 1.0 <= result["flat_mean_abs_step"] <= 5.0
    assert result["trajectory_sample_shape"] == 8
    assert 0.0 < result["prioritised_mean_probability"] < 1.0


def test_quickstart_runs_as_a_script() -> None:
    out = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, check=True)
    assert "timesteps added per env (write counter): 64" in out.stdout
