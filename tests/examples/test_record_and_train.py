"""The main job (examples/record_and_train.py) runs end to end and its outcome holds.

One quick run (fixed seed) records a gridworld into a vault with non-blocking writes and
trains behaviour cloning and CQL from it by streaming; the test checks what it recorded
against what the environment reported, that the vault verifies, and that the offline policies
beat the random and behaviour policies by set margins.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import vault as vault_module
from vault import Vault, verify
from vault.cli import app

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "record_and_train.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("record_and_train_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_main_job_end_to_end(tmp_path: Path) -> None:
    """One run (about 15 s), several checks: a single test so that pytest-xdist never runs
    the job twice."""
    module = _load()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = module.main(["--quick", "--out", str(tmp_path / "gridworld")])
    run = (module, result, out.getvalue())
    check_offline_policies_beat_random_and_behaviour(run)
    check_vault_holds_every_recorded_step(run)
    check_episode_index_matches_the_environment(run)
    check_prints_the_summary_and_the_commands(run)
    check_the_printed_commands_work(run)
    check_the_training_data_is_named_exactly(run)


def check_offline_policies_beat_random_and_behaviour(
    run: tuple[ModuleType, dict[str, Any], str],
) -> None:
    _, result, _ = run
    random, behaviour = result["random_return"], result["behaviour_return"]
    # Random walks rarely reach the goal in 40 steps; the noisy behaviour policy often does.
    assert random < -0.3
    assert behaviour > random + 0.4
    # Both offline policies beat the random policy by a wide margin, and CQL (which learns to
    # walk around the wall the behaviour policy runs into) beats the behaviour policy.
    assert result["bc_return"] > random + 0.5
    assert result["cql_return"] > random + 0.6
    assert result["cql_return"] > behaviour + 0.1
    # Evaluated periodically while training, and the reported return is the last evaluation.
    assert [step for step, _ in result["history"]["cql"]] == [2000, 4000, 6000]
    assert result["cql_return"] == result["history"]["cql"][-1][1]


def check_vault_holds_every_recorded_step(run: tuple[ModuleType, dict[str, Any], str]) -> None:
    module, result, _ = run
    quick = module.QUICK
    assert result["timesteps"] == quick.steps
    vault = Vault.open(result["path"])
    assert vault.rows == quick.envs
    assert vault.committed_length == result["committed_length"] == quick.steps
    report = verify(result["path"])
    assert report.ok, [str(p) for p in report.problems]
    assert report.committed_length == quick.steps
    assert result["disk_bytes"] > 0


def check_episode_index_matches_the_environment(
    run: tuple[ModuleType, dict[str, Any], str],
) -> None:
    module, result, _ = run
    vault = Vault.open(result["path"])
    table = vault.episodes()
    # Every episode end the environment reported is one complete episode in the index.
    assert result["episodes_seen"] == result["episodes_recorded"] == len(table) > 100
    # Complete episodes plus each row's open one tile the data exactly.
    whole = vault.episodes(include_open=True)
    assert whole.transitions == vault.rows * vault.committed_length
    limit = module.TIME_LIMIT
    assert np.all(table.length[table.truncated] == limit)
    assert np.all(table.length[~table.truncated] <= limit)
    # Returns: a reached goal is +1 after (length - 1) steps of -0.02; a truncation 40 x -0.02.
    expected = np.where(table.truncated, -0.02 * limit, 1.0 - 0.02 * (table.length - 1))
    np.testing.assert_allclose(table.returns, expected, atol=1e-5)
    assert result["recorded_mean_return"] == pytest.approx(table.returns.mean())
    data = vault.read_numpy(leaves=["reward", "done"])
    np.testing.assert_array_equal(data["reward"] == 1.0, data["done"])


def check_the_training_data_is_named_exactly(run: tuple[ModuleType, dict[str, Any], str]) -> None:
    """The run prints and returns the commit it trained on and its fingerprint: appending
    afterwards changes neither what that commit reads nor its fingerprint."""
    _, result, printed = run
    data = result["data"]
    assert f"training data: commit {data['commit']}, fingerprint {data['fingerprint'][:23]}" in (
        printed
    )
    pinned = Vault.open(result["path"], at=data["commit"])
    assert pinned.fingerprint() == data["fingerprint"]
    report = vault_module.verify(result["path"], at=data["commit"], fingerprint=data["fingerprint"])
    assert report.ok, report.problems


def check_prints_the_summary_and_the_commands(run: tuple[ModuleType, dict[str, Any], str]) -> None:
    module, result, printed = run
    path = result["path"]
    assert f"episodes recorded: {result['episodes_recorded']} complete" in printed
    assert "dataset size on disk:" in printed
    assert f"CQL (offline)            {result['cql_return']:+.3f}" in printed
    assert f"random policy            {result['random_return']:+.3f}" in printed
    hints = printed.split("look at the data:\n", 1)[1].splitlines()
    command = module.vault_command()  # `vault`, or `.venv/bin/vault` when not activated
    assert hints == [
        f"  {command} info {path}",
        f"  {command} plot {path} --out {path}.png",
        f"  {command} verify {path}",
    ]


def check_the_printed_commands_work(run: tuple[ModuleType, dict[str, Any], str]) -> None:
    _, result, _ = run
    path = result["path"]
    runner = CliRunner()
    info = runner.invoke(app, ["info", path, "--json"])
    assert info.exit_code == 0, info.output
    doc = json.loads(info.output)
    assert doc["episodes"] == result["episodes_recorded"]
    assert doc["committed"] == result["committed_length"]
    assert doc["rows"] == result["envs"]
    checked = runner.invoke(app, ["verify", path])
    assert checked.exit_code == 0, checked.output
    # The hints run as printed, in a shell, from where the job ran.
    printed = run[2].split("look at the data:\n", 1)[1].splitlines()
    for line in printed:
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
    assert Path(f"{path}.png").stat().st_size > 10_000


def test_an_earlier_run_is_refused_unless_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = _load()
    path = tmp_path / "gridworld"
    Vault.create(str(path), {"x": np.zeros(2, np.float32)}, rows=1).close()
    with pytest.raises(SystemExit) as exited:  # before anything is recorded
        module.main(["--quick", "--out", str(path)])
    assert exited.value.code == 2
    assert (
        f"{path} already exists (an earlier run?): pass --overwrite to replace it, "
        "or --out to write another vault"
    ) in capsys.readouterr().err
    parser = argparse.ArgumentParser()
    (tmp_path / "notes").mkdir()
    with pytest.raises(SystemExit):
        module._make_room(parser, str(tmp_path / "notes"), True)
    assert "exists and is not a vault" in capsys.readouterr().err
    assert (tmp_path / "notes").is_dir()  # never removed
    module._make_room(parser, str(path), True)  # --overwrite: the old vault goes
    assert not path.exists()


def test_the_hints_name_the_command_that_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _load()
    script = Path(sys.executable).with_name("vault")
    monkeypatch.setenv("PATH", str(script.parent))  # an activated venv: plain `vault`
    assert module.vault_command() == "vault"
    monkeypatch.setenv("PATH", "/nonexistent")  # not activated: the script's own path
    assert module.vault_command() in (os.path.relpath(script), str(script))
