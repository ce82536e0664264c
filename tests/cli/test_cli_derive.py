"""``vault slice``, ``subsample``, ``combine`` and ``export``: the content of what they write
is checked against the source, the sources are untouched, and nothing half-written is left."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _cli_vaults import LEAVES, ROWS, Cli, build, one_error_line, reference_episodes

from vault import Vault


def digest(path: Path) -> str:
    """A hash of every file under ``path`` (names and bytes): sources must not change."""
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def read_all(path: Path) -> dict[str, np.ndarray]:
    vault = Vault.open(str(path))
    return vault.read_numpy(leaves=vault.leaf_names)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_slice_rows_and_time(cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, data = vault_dir
    before = digest(path)
    out = path.parent / "sliced"
    doc = cli.json("slice", path, "--out", out, "--rows", "0,2", "--time", "5:-7")
    assert doc["rows"] == 2
    assert doc["committed"] == 30
    assert doc["time"] == [5, 35]
    got = read_all(out)
    for name in LEAVES:
        np.testing.assert_array_equal(got[name], data[name][[0, 2], 5:35])
    assert digest(path) == before
    assert leftovers(path.parent) == []
    assert cli.json("verify", out)["ok"] is True
    text = cli("slice", path, "-o", path.parent / "s2", "-t", ":10").stdout
    assert f"wrote {path.parent / 's2'}: 3 rows x 10 timesteps" in text


def test_slice_refuses_an_existing_destination_and_empty_ranges(
    cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]]
) -> None:
    path, _ = vault_dir
    (path.parent / "taken").mkdir()
    line = one_error_line(cli("slice", path, "--out", path.parent / "taken", code=1))
    assert "already exists" in line
    line = one_error_line(cli("slice", path, "--out", path.parent / "n", "--time", "4:4", code=1))
    assert "selects no timesteps" in line
    assert not (path.parent / "n").exists()


def test_subsample_episodes(cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, data = vault_dir
    before = digest(path)
    episodes = reference_episodes(data)
    best = sorted(episodes, key=lambda e: -e[3])[:4]
    out = path.parent / "best"
    doc = cli.json("subsample", path, "--out", out, "--top-k", "4")
    assert doc["rows"] == 1
    assert doc["episodes_selected"] == 4
    assert doc["episodes"] == 4
    assert doc["committed"] == sum(e[2] for e in best)
    got = read_all(out)
    in_order = sorted(best, key=lambda e: (e[1], e[0]))  # by start time, then row
    for name in LEAVES:
        expected = np.concatenate([data[name][r, s : s + n] for r, s, n, _, _ in in_order])
        np.testing.assert_array_equal(got[name][0], expected)
    table = Vault.open(str(out)).episodes()
    assert sorted(table.returns) == pytest.approx(sorted(e[3] for e in best))
    assert digest(path) == before
    assert cli.json("verify", out)["ok"] is True


def test_subsample_filters(cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, data = vault_dir
    episodes = reference_episodes(data)
    kept = [e for e in episodes if -1.0 <= e[3] <= 3.0 and 2 <= e[2] <= 8]
    doc = cli.json(
        "subsample",
        path,
        "-o",
        path.parent / "f",
        "--min-return",
        "-1",
        "--max-return",
        "3",
        "--min-length",
        "2",
        "--max-length",
        "8",
    )
    assert doc["episodes_selected"] == len(kept) > 0
    assert doc["committed"] == sum(e[2] for e in kept)
    some = cli.json(
        "subsample", path, "-o", path.parent / "t", "--transitions", "10", "--seed", "3"
    )
    assert 10 <= some["committed"] < 10 + max(e[2] for e in episodes)
    line = one_error_line(
        cli("subsample", path, "-o", path.parent / "none", "--min-return", "1e9", code=1)
    )
    assert "no complete episode passes the filters" in line
    assert not (path.parent / "none").exists()


def test_subsample_needs_an_episode_index(cli: Cli, tmp_path: Path) -> None:
    build(tmp_path / "plain", writes=(5,), episodes=False)
    line = one_error_line(cli("subsample", tmp_path / "plain", "-o", tmp_path / "o", code=1))
    assert "keeps no episode index" in line


def test_combine_vaults_of_different_lengths(cli: Cli, tmp_path: Path) -> None:
    a = build(tmp_path / "a", writes=(9,), seed=1)
    b = build(tmp_path / "b", writes=(5, 6), seed=2)
    before = [digest(tmp_path / "a"), digest(tmp_path / "b")]
    doc = cli.json("combine", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "ab")
    assert doc["committed"] == 20
    assert doc["rows"] == ROWS
    assert doc["sources"] == [str(tmp_path / "a"), str(tmp_path / "b")]
    got = read_all(tmp_path / "ab")
    for name in LEAVES:
        np.testing.assert_array_equal(got[name], np.concatenate([a[name], b[name]], axis=1))
    complete = len(reference_episodes(a)) + len(reference_episodes(b))
    assert doc["episodes"] == complete
    assert [digest(tmp_path / "a"), digest(tmp_path / "b")] == before
    assert cli.json("verify", tmp_path / "ab")["ok"] is True


def test_combine_errors(cli: Cli, tmp_path: Path) -> None:
    build(tmp_path / "a", writes=(3,))
    build(tmp_path / "two", rows=2, writes=(3,))
    line = one_error_line(
        cli("combine", tmp_path / "a", tmp_path / "two", "-o", tmp_path / "x", code=1)
    )
    assert "rows: expected 3, got 2" in line
    assert not (tmp_path / "x").exists()
    assert leftovers(tmp_path) == []
    one_error_line(cli("combine", tmp_path / "a", "-o", tmp_path / "y", code=1))
    one_error_line(cli("combine", tmp_path / "a", tmp_path / "nope", "-o", tmp_path / "z", code=2))


@pytest.mark.parametrize("compress", [False, True])
def test_export_npz(
    cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]], compress: bool
) -> None:
    path, data = vault_dir
    out = path.parent / "data.npz"
    args: list[Any] = ["export", path, "--out", out, "--rows", "1:3", "--time", "2:40"]
    doc = cli.json(*args, *(["--compress"] if compress else []))
    assert doc["format"] == "npz"
    assert doc["bytes"] == out.stat().st_size
    with np.load(out) as npz:
        assert sorted(npz.files) == sorted([*LEAVES, "__manifest__"])
        for name in LEAVES:
            np.testing.assert_array_equal(npz[name], data[name][1:3, 2:40])
        header = json.loads(str(npz["__manifest__"]))
    assert header["rows"] == [1, 2]
    assert header["time"] == [2, 40]
    assert header["manifest"]["rows"] == ROWS
    assert leftovers(path.parent) == []


def test_export_npy_folder_selected_leaves(
    cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]]
) -> None:
    path, data = vault_dir
    out = path.parent / "npy"
    cli("export", path, "-o", out, "--format", "npy", "--leaf", "obs", "-l", "info/step")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "info/step.npy",
        "manifest.json",
        "obs.npy",
    ]
    obs = np.load(out / "obs.npy", mmap_mode="r")
    np.testing.assert_array_equal(obs, data["obs"])
    np.testing.assert_array_equal(np.load(out / "info" / "step.npy"), data["info/step"])
    assert json.loads((out / "manifest.json").read_text())["leaves"] == ["obs", "info/step"]


def test_export_large_leaf_in_several_blocks(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vault.cli import _export

    data = build(tmp_path / "v", writes=(50, 30), episodes=False)
    monkeypatch.setattr(_export, "BLOCK_BYTES", 64)  # one 8-step chunk per block
    cli("export", tmp_path / "v", "-o", tmp_path / "x.npz", "--time", "3:77")
    with np.load(tmp_path / "x.npz") as npz:
        for name in LEAVES:
            np.testing.assert_array_equal(npz[name], data[name][:, 3:77])


def test_export_errors_and_interruption_leave_nothing(
    cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = vault_dir
    out = path.parent / "x.npz"
    cli("export", path, "-o", out, "--format", "csv", code=1)
    out.write_bytes(b"keep me")
    assert "already exists" in one_error_line(cli("export", path, "-o", out, code=1))
    assert out.read_bytes() == b"keep me"
    out.unlink()
    calls = {"n": 0}
    original = Vault.read_numpy

    def interrupted(self: Vault, **kw: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return original(self, **kw)

    monkeypatch.setattr(Vault, "read_numpy", interrupted)
    for fmt in ("npz", "npy"):
        calls["n"] = 0
        result = cli("export", path, "-o", out, "--format", fmt, code=130)
        assert "interrupted" in one_error_line(result)
        assert not out.exists()
        assert leftovers(path.parent) == []


@pytest.mark.parametrize("command", ["slice", "subsample", "combine"])
def test_interrupted_derive_leaves_no_destination(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    from vault.cli import _derive

    build(tmp_path / "a", writes=(20,))
    build(tmp_path / "b", writes=(10,), seed=5)
    before = digest(tmp_path / "a")
    calls = {"n": 0}

    def interrupt(done: int, total: int) -> None:
        # the library reports progress after each block it copied: Ctrl-C after the first
        if done > 0:
            calls["n"] += 1
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def progress_bar(description: str, **kw: Any) -> Iterator[Any]:
        yield interrupt

    monkeypatch.setattr(_derive, "progress_bar", progress_bar)
    sources = [tmp_path / "a", tmp_path / "b"] if command == "combine" else [tmp_path / "a"]
    result = cli(command, *sources, "--out", tmp_path / "out", code=130)
    assert calls["n"] == 1
    assert "interrupted" in one_error_line(result)
    assert not (tmp_path / "out").exists()
    assert leftovers(tmp_path) == []
    assert digest(tmp_path / "a") == before
