"""The command as a user runs it: a separate process, real exit codes and stderr.

``COMMAND`` is the installed ``vault`` console script next to this interpreter; ``python -m
vault`` is checked to be the same command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _cli_vaults import build

COMMAND = [str(Path(sys.executable).with_name("vault"))]
HEAVY = ("jax", "matplotlib", "zarr", "PIL", "numpy", "tensorstore")


def run(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *(str(a) for a in args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_help_version_and_info(tmp_path: Path) -> None:
    helped = run("--help")
    assert helped.returncode == 0
    assert "verify" in helped.stdout
    assert "subsample" in helped.stdout
    assert run("--version").stdout.startswith("rlvault ")
    as_module = subprocess.run(
        [sys.executable, "-m", "vault", "--version"], capture_output=True, text=True, check=True
    )
    assert as_module.stdout == run("--version").stdout
    build(tmp_path / "v", writes=(6,))
    info = run("info", tmp_path / "v", "--json")
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["committed"] == 6
    assert info.stderr == ""


def test_failures_are_one_line_with_their_exit_code(tmp_path: Path) -> None:
    missing = run("info", tmp_path / "nowhere")
    assert missing.returncode == 2
    assert missing.stderr == (
        f"vault: {tmp_path / 'nowhere'}: no such file or directory; check the path "
        "(`vault ls DIR` lists the vaults under a folder)\n"
    )
    build(tmp_path / "v", writes=(20,))
    chunk = tmp_path / "v" / "experience" / "obs" / "c" / "0" / "1" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[-7] ^= 0x02
    chunk.write_bytes(bytes(raw))
    shown = run("show", tmp_path / "v", "--leaf", "obs")
    assert shown.returncode == 3
    assert shown.stderr.count("\n") == 1
    assert shown.stderr.startswith("vault: ")
    assert "experience/obs, chunk 0.1.0 is corrupt" in shown.stderr
    verified = run("verify", tmp_path / "v")
    assert verified.returncode == 3
    assert "experience/obs chunk 0.1.0" in verified.stdout
    assert "Traceback" not in verified.stderr + shown.stderr + missing.stderr
    usage = run("show", tmp_path / "v", "--nope")
    assert usage.returncode == 1
    remote = run("info", "gs://bucket/x")
    assert remote.returncode == 1
    assert remote.stderr.count("\n") == 1
    assert remote.stderr.startswith(
        "vault: unsupported vault location scheme 'gs' in 'gs://bucket/x'; supported: a path"
    )


def test_help_imports_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "from vault.cli import app\n"
        "try:\n"
        "    app(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n"
        "print('vault.facade._vault' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip().splitlines()[-2:] == ["[]", "False"]
