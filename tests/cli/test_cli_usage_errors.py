"""Usage errors are one line: the command, click's message and where the help is; exit 1.

An unknown command or option, a missing argument and a value out of range (``--head -3``) used
to print typer's usage line, a hint and a boxed message (five lines). ``vault.cli.app``
documents one line per failure and exit 1 for usage errors (2 is "not found").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _cli_vaults import Cli, build, one_error_line

COMMAND = str(Path(sys.executable).with_name("vault"))
USAGE_EXIT = 1


def _usage_cases(vault: Path, out: Path) -> list[tuple[list[object], str]]:
    """(arguments, the one line on stderr)."""
    return [
        (
            ["info", vault, "--foo"],
            "vault: `vault info`: No such option: --foo. See `vault info --help`.",
        ),
        (
            ["frobnicate"],
            "vault: `vault`: No such command 'frobnicate'. See `vault --help`.",
        ),
        (
            ["infoo", vault],
            "vault: `vault`: No such command 'infoo'. Did you mean 'info'? See `vault --help`.",
        ),
        (["--bogus"], "vault: `vault`: No such option: --bogus. See `vault --help`."),
        (
            ["info"],
            "vault: `vault info`: Missing argument 'PATH'. See `vault info --help`.",
        ),
        (
            ["slice", vault],
            "vault: `vault slice`: Missing option '--out' / '-o'. See `vault slice --help`.",
        ),
        (
            ["episodes", vault, "--head", "-3"],
            (
                "vault: `vault episodes`: Invalid value for '--head' / '-n': Input should be "
                "greater than or equal to 0. See `vault episodes --help`."
            ),
        ),
        (
            ["subsample", vault, "-o", out, "--min-length", "-1"],
            (
                "vault: `vault subsample`: Invalid value for '--min-length': Input should be "
                "greater than or equal to 0. See `vault subsample --help`."
            ),
        ),
        (
            ["show", vault, "--rows"],
            "vault: `vault show`: Option '--rows' requires an argument. See `vault show --help`.",
        ),
    ]


@pytest.fixture(scope="module")
def small_vault(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("usage") / "v"
    build(path, writes=(6,))
    return path


@pytest.mark.parametrize("case", range(len(_usage_cases(Path("v"), Path("o")))))
def test_a_usage_error_is_one_line(cli: Cli, small_vault: Path, tmp_path: Path, case: int) -> None:
    args, line = _usage_cases(small_vault, tmp_path / "out")[case]
    result = cli(*args, code=USAGE_EXIT)
    assert one_error_line(result) == line
    assert result.stdout == ""
    assert not (tmp_path / "out").exists()


def test_the_installed_command_prints_one_line_too(small_vault: Path) -> None:
    for args, line in _usage_cases(small_vault, small_vault.parent / "out")[:3]:
        done = subprocess.run(
            [COMMAND, *(str(a) for a in args)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "COLUMNS": "80"},
        )
        assert (done.returncode, done.stderr, done.stdout) == (USAGE_EXIT, f"{line}\n", "")


def test_bare_vault_still_shows_the_help(cli: Cli) -> None:
    result = cli(code=USAGE_EXIT)
    assert "Usage: vault" in result.output
    assert "slice" in result.output
    assert "vault: " not in result.stderr
