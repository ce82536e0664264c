"""``vault import`` (every format of the converters' registry) and ``vault export --format
minari``, in-process and through the installed command; errors are one line with their exit
code."""

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
from _convert_sources import TOY_ID, write_d4rl, write_flashbax, write_minari, write_ogbench

from vault import Dataset, Vault
from vault.converters import EXPORT_FORMATS, IMPORT_FORMATS

RLDS = Path(__file__).resolve().parents[1] / "data" / "rlds" / "tf_toy" / "1.0.0"

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
    assert "FORMAT must be one of flashbax, minari, d4rl, ogbench, rlds, got 'csv'" in line
    line = one_error_line(
        cli("import", "d4rl", tmp_path / "d.hdf5", "--out", tmp_path / "z", "--done", "x", code=1)
    )
    assert "--done/--truncated/--reward are for flashbax vaults" in line
    line = one_error_line(
        cli("import", "d4rl", tmp_path / "no.hdf5", "--out", tmp_path / "z", code=2)
    )
    assert "no such file" in line


def test_the_formats_listed_are_the_registrys(cli: Cli, tmp_path: Path) -> None:
    usage = cli("import", "--help").stdout
    assert " or ".join([", ".join(IMPORT_FORMATS[:-1]), IMPORT_FORMATS[-1]]) in usage
    written = ("npz", "npy", *EXPORT_FORMATS)
    assert " or ".join([", ".join(written[:-1]), written[-1]]) in cli("export", "--help").stdout
    write_d4rl(tmp_path / "d.hdf5", [4, 6, 3])
    cli("import", "d4rl", tmp_path / "d.hdf5", "--out", tmp_path / "v")
    line = one_error_line(
        cli("export", tmp_path / "v", "--format", "csv", "--out", tmp_path / "x", code=1)
    )
    assert f"--format must be one of {', '.join(written)}, got 'csv'" in line


def test_import_ogbench_with_its_validation_file(cli: Cli, tmp_path: Path) -> None:
    write_ogbench(tmp_path / "maze-v0.npz", [4, 2])
    write_ogbench(tmp_path / "maze-v0-val.npz", [3], seed=1)
    doc = cli.json("import", "ogbench", tmp_path / "maze-v0.npz", "--out", tmp_path / "v")
    assert (doc["committed"], doc["episodes"]) == (8, 2)
    assert doc["validation"]["path"] == str(tmp_path / "v-val")
    assert (doc["validation"]["committed"], doc["validation"]["episodes"]) == (4, 1)
    out = cli("import", "ogbench", tmp_path / "maze-v0.npz", "--out", tmp_path / "w", "--no-val")
    assert "1 row x 8 timesteps, 6 leaves, 2 episodes" in out.stdout
    assert "validation" not in out.stdout
    assert not (tmp_path / "w-val").exists()
    line = one_error_line(
        cli("import", "d4rl", tmp_path / "maze-v0.npz", "--out", tmp_path / "z", "--no-val",
            code=1)
    )  # fmt: skip
    assert "--no-val is for ogbench files" in line


def test_import_rlds_as_a_vault_and_as_shards(cli: Cli, tmp_path: Path) -> None:
    doc = cli.json("import", "rlds", RLDS, "--out", tmp_path / "v")
    assert (doc["committed"], doc["episodes"]) == (24, 6)
    assert "observation/image" in doc["leaf_names"]
    out = cli("import", "rlds", RLDS, "--out", tmp_path / "d", "--shards", "--split", "val")
    assert "2 shards" in out.stdout
    assert Dataset.open(tmp_path / "d").shards == ["val-00000", "val-00001"]
    again = cli.json("import", "rlds", RLDS, "--out", tmp_path / "d", "--shards", "--split", "val")
    assert len(again["shards"]) == 2  # resumed: nothing left to do, nothing refused
    line = one_error_line(
        cli("import", "d4rl", RLDS, "--out", tmp_path / "z", "--split", "val", code=1)
    )
    assert "--split/--shards/--jpeg are for rlds datasets" in line
    line = one_error_line(cli("import", "rlds", tmp_path, "--out", tmp_path / "z", code=2))
    assert "expected a TFDS dataset directory" in line


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
