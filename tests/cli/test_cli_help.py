"""What a new user reads first: ``vault --help`` and each command's help wrap whole paragraphs
at the terminal's width, flags show no value type, counts of one are singular, and the format
lists come from the one registry (:mod:`vault.converters`)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from _cli_vaults import Cli, build, one_error_line
from typer.testing import CliRunner

from vault import converters
from vault.cli import app
from vault.cli.app import reflow


def _help(args: list[str], columns: int) -> list[str]:
    result = CliRunner().invoke(app, args, env={"COLUMNS": str(columns), "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def _early_breaks(lines: list[str], start: int, room: int) -> list[str]:
    """Lines that end although the next word of the same paragraph or description would have
    fitted on them (a line break of the docstring's source showing through). A description
    goes on where a line's first ``start`` characters are blank; ``room`` is its width."""
    early = []
    for line, following in itertools.pairwise(lines):
        text, nxt = line[start:].rstrip(" │"), following[start:].strip(" │")
        goes_on = not following[:start].strip(" │")
        if goes_on and text and nxt and len(text) + 1 + len(nxt.split()[0]) <= room:
            early.append(f"{text!r} then {nxt.split()[0]!r}")
    return early


@pytest.mark.parametrize("columns", [60, 80, 200])
def test_command_list_wraps_whole_paragraphs(columns: int) -> None:
    lines = _help(["--help"], columns)
    panel = lines[lines.index(next(x for x in lines if "Commands" in x)) :]
    rows = [line for line in panel if line.startswith("│")]
    names = [re.match(r"│ \S+\s+", r) for r in rows if r[2] != " "]
    start = max(m.end() for m in names if m)  # where the description column starts
    assert _early_breaks(rows, start, columns - 2 - start) == []
    if columns == 200:  # the whole first paragraph of `ls` on one line
        assert any(
            "List every vault and dataset under DIR: path, rows, committed timesteps, episodes, "
            "sizes, format. A dataset is one entry;" in line
            for line in panel
        )


@pytest.mark.parametrize("columns", [60, 80, 200])
def test_command_help_paragraphs_are_reflowed(columns: int) -> None:
    lines = _help(["verify", "--help"], columns)
    body = lines[lines.index(next(x for x in lines if "Check the manifest" in x)) :]
    body = body[: body.index(next(x for x in body if "Arguments" in x))]
    assert _early_breaks(body, 1, columns - 2) == []
    assert (
        "With --at, the data of that commit; with --fingerprint, the data must have that "
        "fingerprint (the chunk problems then name the arrays and time ranges that differ); "
        "without --at, the commit that has it is checked (growth since is no problem). "
        "Exit 0 when the vault is sound, 3 when any problem was found (each one is listed with "
        "its place), 2 when there is no vault at PATH (or no such commit)."
    ) in " ".join(line.strip() for line in body)


def test_reflow_keeps_paragraphs_and_list_items() -> None:
    doc = """First line
    goes on.

    Second paragraph
    on two lines:
    * item one
      wraps;
    * item two.
    """
    assert reflow(doc) == (
        "First line goes on.\n\nSecond paragraph on two lines:\n* item one wraps;\n* item two."
    )


@pytest.mark.parametrize("args", [["--help"], ["ls", "--help"], ["export", "--help"]])
def test_flags_show_no_value_type(args: list[str]) -> None:
    lines = _help(args, 100)
    assert not [line for line in lines if "<bool>" in line]
    json_line = next(line for line in lines if "--json" in line or "--version" in line)
    assert re.search(r"--(json|version)\s+(Print JSON for scripts|Show the version)\.", json_line)
    out_line = next((line for line in lines if re.search(r"--out\s+-o", line)), None)
    if out_line is not None:  # options that take a value still show what they take
        assert "<str>" in out_line


def test_counts_of_one_are_singular(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "v"
    build(path, rows=1, writes=(13,), episodes=False)
    assert f"{path}: 1 row x 13 timesteps" in " ".join(cli("stats", path).stdout.split())
    text = cli("slice", path, "--time", "0:1", "--out", tmp_path / "s").stdout
    assert f"wrote {tmp_path / 's'}: 1 row x 1 timestep" in text
    text = cli("export", path, "--leaf", "obs", "--out", tmp_path / "e.npz").stdout
    assert re.search(r"\(npz, 1 leaf, \d+ bytes\)", text)
    assert f"sound: {tmp_path / 's'}: 1 timestep; checked " in cli("verify", tmp_path / "s").stdout

    (path / "trash").mkdir(exist_ok=True)
    (path / "trash" / "held").write_bytes(b"x")  # a replaced file a writer has not freed yet
    chunk = path / "experience" / "obs" / "c" / "0" / "1" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[-5] ^= 0x40
    chunk.write_bytes(bytes(raw))
    lines = cli("verify", path, code=3).stdout.splitlines()
    assert "1 problem" in [line.strip() for line in lines]
    assert "1 warning" in [line.strip() for line in lines]
    assert lines[-1].endswith("; 1 problem")
    assert "1 old version of a replaced file is waiting to be freed" in " ".join(lines)


def test_format_lists_come_from_the_registry(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "v"
    build(path, rows=1, writes=(4,), episodes=False)
    exports = ("npz", "npy", *converters.EXPORT_FORMATS)
    assert exports == ("npz", "npy", "minari")
    line = one_error_line(cli("export", path, "--format", "csv", "--out", tmp_path / "x", code=1))
    assert line == "vault: --format must be one of npz, npy, minari, got 'csv'"
    assert not (tmp_path / "x").exists()
    line = one_error_line(cli("import", "csv", path, "--out", tmp_path / "y", code=1))
    assert line == f"vault: FORMAT must be one of {', '.join(converters.IMPORT_FORMATS)}, got 'csv'"
    assert " ".join(_help(["export", "--help"], 200)).count("npz, npy or minari.") == 1
    imports = converters.IMPORT_FORMATS
    listed = f"{', '.join(imports[:-1])} or {imports[-1]}."  # every format of the registry
    assert " ".join(_help(["import", "--help"], 200)).count(listed) == 1
