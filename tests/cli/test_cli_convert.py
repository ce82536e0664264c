"""``vault import`` (flashbax, minari, d4rl) and ``vault export --format minari``, in-process
and through the installed command; errors are one line with their exit code."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import minari
import numpy as np
import pytest
from _cli_vaults import Cli, one_error_line
from _convert_sources import TOY_ID, write_d4rl, write_flashbax, write_minari

from vault import Vault

SPEC = {"obs": ((3,), np.float32), "reward": ((), np.float32), "done": ((), np.bool_)}


def test_import_flashbax_with_episode_leaves(cli: Cli, tmp_path: Path) -> None:
    src, data = write_flashbax(
        tmp_path / "vaults", "run", SPEC, rows=2, capacity=10, steps=25, write_every=5
    )
    doc = cli.json("import", "flashbax", src, "--out", tmp_path / "v", "--done", "done",
                   "--reward", "reward")  # fmt: skip
    assert doc["committed"] == 25
    assert doc["rows"] == 2
    assert doc["episodes"] > 0
    vault = Vault.open(tmp_path / "v")
    np.testing.assert_array_equal(vault.read_numpy()["obs"], data["obs"])
    assert vault.episode_leaves["done"] == "done"
    # an existing destination is refused before anything is read
    line = one_error_line(cli("import", "flashbax", src, "--out", tmp_path / "v", code=1))
    assert "already exists" in line
    # a bad episode leaf: one line, nothing left
    line = one_error_line(
        cli("import", "flashbax", src, "--out", tmp_path / "w", "--done", "nope", code=1)
    )
    assert "done_leaf 'nope': no such leaf" in line
    assert not (tmp_path / "w").exists()


def test_import_d4rl_and_usage_errors(cli: Cli, tmp_path: Path) -> None:
    write_d4rl(tmp_path / "d.hdf5", [4, 6, 3])
    out = cli("import", "d4rl", tmp_path / "d.hdf5", "--out", tmp_path / "v")
    assert "1 row x 13 timesteps" in out.stdout
    assert "2 episodes" in out.stdout
    line = one_error_line(cli("import", "csv", "x", "--out", tmp_path / "z", code=1))
    assert "FORMAT must be one of flashbax, minari, d4rl, got 'csv'" in line
    line = one_error_line(
        cli("import", "d4rl", tmp_path / "d.hdf5", "--out", tmp_path / "z", "--done", "x", code=1)
    )
    assert "--done/--truncated/--reward are for flashbax vaults" in line
    line = one_error_line(
        cli("import", "d4rl", tmp_path / "no.hdf5", "--out", tmp_path / "z", code=2)
    )
    assert "no such file" in line


def test_minari_import_then_export(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    source = write_minari("toy-v0", "hdf5", env_id=TOY_ID, steps=40, seed=5)
    doc = cli.json("import", "minari", "toy-v0", "--out", tmp_path / "v")
    assert doc["episodes"] == source.total_episodes
    out = cli("export", tmp_path / "v", "--format", "minari", "--out", "back-v0",
              "--data-format", "arrow")  # fmt: skip
    assert "wrote Minari dataset back-v0" in out.stdout
    back = minari.load_dataset("back-v0")
    for a, b in zip(source.iterate_episodes(), back.iterate_episodes(), strict=True):
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.observations["pos"], b.observations["pos"])
    line = one_error_line(
        cli("export", tmp_path / "v", "--format", "minari", "--out", "b-v0", "--rows", "0", code=1)
    )
    assert "--format minari exports every complete episode" in line
    # npz still works through the same command
    cli("export", tmp_path / "v", "--out", tmp_path / "x.npz", "--leaf", "rewards")
    assert np.load(tmp_path / "x.npz")["rewards"].shape == (1, doc["committed"])


def test_installed_command_imports(tmp_path: Path) -> None:
    write_d4rl(tmp_path / "d.hdf5", [4, 6, 3])
    exe = shutil.which("vault", path=os.path.dirname(sys.executable))
    assert exe is not None
    run = subprocess.run(
        [exe, "import", "d4rl", str(tmp_path / "d.hdf5"), "--out", str(tmp_path / "v"), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert Vault.open(tmp_path / "v").committed_length == 13
