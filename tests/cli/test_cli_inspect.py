"""``vault ls``, ``info``, ``show``; exit codes and one-line errors shared by every command."""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path

import numpy as np
import pytest
from _cli_vaults import ROWS, Cli, block, build, one_error_line, tree_bytes

from vault import Vault

COMMANDS = [
    "ls",
    "info",
    "show",
    "stats",
    "verify",
    "episodes",
    "plot",
    "slice",
    "subsample",
    "combine",
    "export",
]


def test_version_and_help(cli: Cli) -> None:
    assert re.fullmatch(r"rlvault \S+\n", cli("--version").stdout)
    top = cli("--help").stdout
    for name in COMMANDS:
        assert name in top
        assert "--json" in cli(name, "--help").stdout, name


def test_usage_errors_exit_1(cli: Cli, tmp_path: Path) -> None:
    result = cli("show", tmp_path, "--bogus", code=1)
    assert "No such option" in result.output
    cli("frobnicate", code=1)
    cli("info", code=1)  # missing argument


def test_ls_lists_every_vault_and_broken_ones(cli: Cli, tmp_path: Path) -> None:
    a = build(tmp_path / "runs" / "a", writes=(5,), episodes=False)
    build(tmp_path / "runs" / "deep" / "b", writes=(4, 6))
    broken = tmp_path / "runs" / "c"
    build(broken, writes=(3,))
    (broken / "zarr.json").write_text("{not json")
    (tmp_path / "runs" / "not_a_vault").mkdir()
    (tmp_path / "runs" / "not_a_vault" / "x.txt").write_text("hello")
    entries = cli.json("ls", tmp_path / "runs")
    assert [Path(e["path"]).relative_to(tmp_path / "runs").as_posix() for e in entries] == [
        "a",
        "c",
        "deep/b",
    ]
    first, bad, deep = entries
    assert first["rows"] == ROWS
    assert first["committed"] == 5
    assert first["episodes"] is None
    raw = sum(v[0, 0].nbytes for v in a.values()) * ROWS * 5
    assert first["raw_bytes"] == raw
    assert first["disk_bytes"] == tree_bytes(tmp_path / "runs" / "a") > 0
    assert first["format_version"] >= 2
    assert first["created"].startswith("20")
    assert "corrupt manifest" in bad["error"]
    assert deep["committed"] == 10
    assert deep["episodes"] == len(Vault.open(deep["path"]).episodes())
    text = cli("ls", tmp_path / "runs").stdout
    assert "deep/b" in text
    assert "corrupt manifest" in text
    assert "no vaults under" in cli("ls", tmp_path / "runs" / "not_a_vault").stdout
    assert "no such file" in one_error_line(cli("ls", tmp_path / "nowhere", code=2))


def test_info_structure_sizes_metadata_writer(
    cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]]
) -> None:
    path, data = vault_dir
    doc = cli.json("info", path)
    leaves = {leaf["name"]: leaf for leaf in doc["leaves"]}
    assert list(leaves) == ["done", "info/step", "obs", "reward", "trunc"]
    assert leaves["obs"]["shape"] == [ROWS, 42, 2]
    assert leaves["obs"]["dtype"] == "float32"
    assert leaves["obs"]["chunk"] == [1, 8, 2]
    assert leaves["obs"]["codecs"] == "blosc(zstd-1, shuffle) + crc32c"
    assert leaves["done"]["codecs"] == "zstd-3 + crc32c"
    assert leaves["obs"]["raw_bytes"] == data["obs"].nbytes
    assert leaves["obs"]["disk_bytes"] == tree_bytes(path / "experience" / "obs") > 0
    assert doc["raw_bytes"] == sum(v.nbytes for v in data.values())
    assert doc["disk_bytes"] == tree_bytes(path)
    assert doc["ratio"] == pytest.approx(doc["raw_bytes"] / doc["disk_bytes"])
    assert doc["episodes"] == len(Vault.open(str(path)).episodes())
    assert doc["episode_leaves"] == {"done": "done", "truncated": "trunc", "reward": "reward"}
    assert doc["writer"] == {"held": False, "holder": None}
    text = cli("info", path).stdout
    for word in ("obs", "step", "float32 [3, 42, 2]", "chunk [1, 8, 2]", "compression"):
        assert word in text
    with Vault.open(str(path), mode="a"):
        held = cli.json("info", path)["writer"]
        assert held["held"] is True
        assert held["holder"]["pid"] == os.getpid()
        assert f"yes: pid {os.getpid()}" in cli("info", path).stdout
    assert cli.json("info", path)["writer"]["held"] is False


def test_info_user_metadata(cli: Cli, tmp_path: Path) -> None:
    build(tmp_path / "m", writes=(2,), episodes=False, metadata={"env": "Pong", "seed": 3})
    assert cli.json("info", tmp_path / "m")["user_metadata"] == {"env": "Pong", "seed": 3}
    text = cli("info", tmp_path / "m").stdout
    assert '"env": "Pong"' in text
    assert "no episode index" in text


def test_info_lists_the_seams(cli: Cli, tmp_path: Path) -> None:
    build(tmp_path / "s", writes=(3,), episodes=False)
    vault = Vault.open(str(tmp_path / "s"), mode="a")
    vault.append(block(np.random.default_rng(1), ROWS, 3, 2), continues=False)
    vault.close()
    assert cli.json("info", tmp_path / "s")["seams"] == [{"at": 3, "lost": 0}]
    assert re.search(r"seams\s+restart at t=3", cli("info", tmp_path / "s").stdout)


def test_show_small_selection_prints_like_numpy(
    cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]]
) -> None:
    path, data = vault_dir
    out = cli("show", path, "--leaf", "obs", "--rows", "1", "--time", "2:5").stdout
    expected = np.array2string(data["obs"][1:2, 2:5], separator=" ")
    assert expected in out
    assert "obs  float32 [1, 3, 2]" in out
    out = cli("show", path, "-l", "info/step", "-r", "0,2", "-t", "-3:").stdout
    assert np.array2string(data["info/step"][[0, 2], 39:42], separator=" ") in out


@pytest.mark.parametrize(("rows", "time"), [(None, None), ("0:5", "5:150"), ("2,5,7", "-180:")])
def test_show_large_leaf_is_summarised_exactly_like_numpy(
    cli: Cli, tmp_path: Path, rows: str | None, time: str | None
) -> None:
    data = build(tmp_path / "big", rows=8, writes=(150, 50), episodes=False)
    args = ["show", tmp_path / "big", "--leaf", "obs"]
    args += ["--rows", rows] if rows else []
    args += ["--time", time] if time else []
    out = cli(*args).stdout
    picked = {None: slice(None), "0:5": slice(0, 5), "2,5,7": [2, 5, 7]}[rows]
    span = {None: slice(None), "5:150": slice(5, 150), "-180:": slice(20, 200)}[time]
    full = data["obs"][picked, span]
    assert full.size > 1000
    expected = np.array2string(full, separator=" ", max_line_width=200)
    assert "..." in expected
    assert expected in out


def test_show_json_values(cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, data = vault_dir
    doc = cli.json("show", path, "--leaf", "reward", "--leaf", "done", "--time", "0:10")
    assert doc["time"] == [0, 10]
    assert doc["rows_selected"] == [0, 1, 2]
    leaves = {leaf["name"]: leaf for leaf in doc["leaves"]}
    assert list(leaves) == ["reward", "done"]
    np.testing.assert_array_equal(leaves["reward"]["values"], data["reward"][:, :10])
    np.testing.assert_array_equal(leaves["done"]["values"], data["done"][:, :10])
    assert leaves["reward"]["shape"] == [3, 10]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--time", "5:2"],
            (
                "--time '5:2': the start (5) is after the stop (2); "
                "put the smaller index first, e.g. --time 2:5"
            ),
        ),
        (
            ["--time", "0:50"],
            (
                "--time '0:50' is outside the vault's 42 timesteps [0, 42); "
                "pick a range inside it, e.g. --time 0:42"
            ),
        ),
        (
            ["--rows", "2:1"],
            (
                "--rows '2:1': the start (2) is after the stop (1); "
                "put the smaller index first, e.g. --rows 1:2"
            ),
        ),
        (["--time", "x"], "--time must look like"),
        (["--rows", "7"], "--rows '7': rows must be in [0, 3) (the vault has 3 rows); pick rows"),
        (["--rows", "a,b"], "--rows must look like"),
        (["--rows", "1:1"], "--rows '1:1' selects no rows"),
        (["--leaf", "nope"], "unknown leaves ['nope']"),
    ],
)
def test_show_bad_selections(
    cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]], args: list[str], message: str
) -> None:
    line = one_error_line(cli("show", vault_dir[0], *args, code=1))
    assert message in line


@pytest.mark.parametrize(
    "command", ["info", "show", "stats", "verify", "episodes", "export", "plot", "slice"]
)
def test_missing_and_not_a_vault_exit_2(cli: Cli, tmp_path: Path, command: str) -> None:
    outs = {"export": "o.npz", "plot": "o.png", "slice": "o"}
    extra = ["--out", tmp_path / outs[command]] if command in outs else []
    line = one_error_line(cli(command, tmp_path / "nowhere", *extra, code=2))
    assert line == (
        f"vault: {tmp_path / 'nowhere'}: no such file or directory; check the path "
        "(`vault ls DIR` lists the vaults under a folder)"
    )
    (tmp_path / "file").write_text("x")
    line = one_error_line(cli(command, tmp_path / "file", *extra, code=2))
    assert line == (
        f"vault: {tmp_path / 'file'} is a file, not a vault (a vault is a folder holding "
        "zarr.json); pass the vault's folder"
    )
    (tmp_path / "empty").mkdir()
    line = one_error_line(cli(command, tmp_path / "empty", *extra, code=2))
    assert line == (
        f"vault: {tmp_path / 'empty'} is a folder but not a vault (no zarr.json in it); "
        f"`vault ls {tmp_path / 'empty'}` lists the vaults under it"
    )
    (tmp_path / "zarr").mkdir()
    (tmp_path / "zarr" / "zarr.json").write_text(json.dumps({"zarr_format": 3}))
    assert "not an rlvault vault" in one_error_line(cli(command, tmp_path / "zarr", *extra, code=2))


@pytest.mark.parametrize("command", ["info", "show", "stats", "episodes", "plot", "export"])
def test_corrupt_manifest_exits_3_in_one_line(cli: Cli, tmp_path: Path, command: str) -> None:
    path = tmp_path / "v"
    build(path, writes=(4,))
    doc = json.loads((path / "zarr.json").read_text())
    (path / "zarr.json").write_text(json.dumps(doc)[:-20])
    extra = ["--out", tmp_path / "o.png"] if command in ("plot", "export") else []
    line = one_error_line(cli(command, path, *extra, code=3))
    assert "zarr.json is not valid JSON" in line
    doc["attributes"]["rlvault"]["leaves"][0] = {"shape": []}  # valid JSON, broken schema
    (path / "zarr.json").write_text(json.dumps(doc))
    line = one_error_line(cli(command, path, *extra, code=3))
    assert "the manifest (zarr.json) is malformed: leaves[0]: name must be a string" in line
    assert f"vault verify {path}" in line


def test_corrupt_chunk_exits_3_in_one_line(
    cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]]
) -> None:
    path, _ = vault_dir
    chunk = path / "experience" / "obs" / "c" / "1" / "2" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[-6] ^= 0x10
    chunk.write_bytes(bytes(raw))
    line = one_error_line(cli("show", path, "--leaf", "obs", "--rows", "1", code=3))
    assert "experience/obs, chunk 1.2.0 is corrupt" in line
    line = one_error_line(cli("stats", path, code=3))
    assert "experience/obs, chunk 1.2.0" in line


def test_info_of_a_location_that_cannot_tell_its_size(cli: Cli) -> None:
    """A ``memory://`` vault (this process's): sizes it cannot tell are ``None`` / ``-``."""
    location = f"memory://cli-info-{uuid.uuid4().hex}"
    build(location, writes=(4,), episodes=False)
    doc = cli.json("info", location)
    assert doc["path"] == Vault.open(location).location
    assert doc["committed"] == 4
    assert doc["disk_bytes"] is None
    assert doc["ratio"] is None
    assert {leaf["disk_bytes"] for leaf in doc["leaves"]} == {None}
    assert doc["writer"] == {"held": False, "holder": None}
    assert re.search(r"disk size\s+-", cli("info", location).stdout)
    assert [e["path"] for e in cli.json("ls", location)] == [doc["path"]]


@pytest.mark.parametrize(
    "args",
    [
        ["info", "s3://bucket/x"],
        ["verify", "s3://bucket/x"],
        ["ls", "s3://bucket/x"],
        ["show", "s3://bucket/x"],
        ["stats", "s3://bucket/x"],
        ["episodes", "s3://bucket/x"],
        ["slice", "s3://bucket/x", "--out", "out"],
        ["combine", "s3://bucket/x", "s3://bucket/y", "--out", "out"],
        ["export", "s3://bucket/x", "--out", "out.npz"],
    ],
)
def test_an_unreachable_object_store_is_one_line_exit_1(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """An S3 endpoint where nothing answers: one line naming the location and the endpoint,
    within seconds, no traceback, nothing written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    line = one_error_line(cli(*args, code=1))
    assert "s3://bucket/x" in line
    assert "cannot reach the S3 endpoint http://127.0.0.1:9" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["slice", "combine"])
def test_an_unsupported_destination_is_one_line_exit_1(
    cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]], command: str
) -> None:
    path, _ = vault_dir
    before = sorted(p.name for p in path.parent.iterdir())
    sources = [path, path] if command == "combine" else [path]
    line = one_error_line(cli(command, *sources, "--out", "gs://bucket/new", code=1))
    assert "unsupported vault location scheme 'gs' in 'gs://bucket/new'" in line
    assert sorted(p.name for p in path.parent.iterdir()) == before


@pytest.mark.parametrize("command", ["info", "show", "stats", "episodes", "plot", "export"])
def test_newer_format_says_upgrade_exit_1(cli: Cli, tmp_path: Path, command: str) -> None:
    path = tmp_path / "v"
    build(path, writes=(4,))
    doc = json.loads((path / "zarr.json").read_text())
    doc["attributes"]["rlvault"]["format_version"] = 99
    (path / "zarr.json").write_text(json.dumps(doc))
    extra = ["--out", tmp_path / "o.png"] if command in ("plot", "export") else []
    line = one_error_line(cli(command, path, *extra, code=1))
    assert f"{path}: the vault is in format version 99" in line
    assert "Upgrade rlvault (pip install -U rlvault)" in line


def test_a_bug_is_one_line_too(
    cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from vault.cli import _facts

    def broken(vault: Vault) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(_facts, "summary", broken)
    line = one_error_line(cli("info", vault_dir[0], code=1))
    assert line == "vault: unexpected RuntimeError: boom (a bug in rlvault: please report it)"
