"""Small real vaults for the ``vault`` command's tests, and a CliRunner wrapper.

Vaults are written with the public API (``Vault.create`` + ``append``) into ``tmp_path``; the
builders return every appended value so tests can check what the command shows or writes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from typer.testing import CliRunner

from vault import Vault
from vault.cli import app

ROWS = 3
WRITES = (13, 14, 15)  # three appends: 42 timesteps, episodes spanning the seams
LEAVES = ("done", "info/step", "obs", "reward", "trunc")


def example() -> dict[str, Any]:
    return {
        "obs": np.zeros(2, np.float32),
        "done": np.bool_(False),
        "trunc": np.bool_(False),
        "reward": np.float32(0),
        "info": {"step": np.int32(0)},
    }


def chunks(rows: int) -> dict[str, list[int]]:
    """Small chunks (8 timesteps) so that a few dozen timesteps span several chunk files."""
    return {
        "obs": [1, 8, 2],
        "done": [rows, 8],
        "trunc": [rows, 8],
        "reward": [rows, 8],
        "info/step": [rows, 8],
    }


def block(rng: np.random.Generator, rows: int, t0: int, n: int) -> dict[str, Any]:
    steps = np.broadcast_to(np.arange(t0, t0 + n, dtype=np.int32), (rows, n)).copy()
    return {
        "obs": rng.normal(size=(rows, n, 2)).astype(np.float32),
        "done": rng.random((rows, n)) < 0.15,
        "trunc": rng.random((rows, n)) < 0.05,
        "reward": rng.normal(size=(rows, n)).astype(np.float32),
        "info": {"step": steps},
    }


def flatten(tree: dict[str, Any]) -> dict[str, np.ndarray]:
    return {
        "done": tree["done"],
        "info/step": tree["info"]["step"],
        "obs": tree["obs"],
        "reward": tree["reward"],
        "trunc": tree["trunc"],
    }


def build(
    path: Path | str,
    *,
    rows: int = ROWS,
    writes: tuple[int, ...] = WRITES,
    seed: int = 0,
    episodes: bool = True,
    metadata: dict[str, Any] | None = None,
) -> dict[str, np.ndarray]:
    """Write a vault at ``path`` (a folder or a URL); return ``{leaf path: [rows, T, ...]}``
    of all it holds."""
    rng = np.random.default_rng(seed)
    kw: dict[str, Any] = {}
    if episodes:
        kw = {"done_leaf": "done", "truncated_leaf": "trunc", "reward_leaf": "reward"}
    parts = []
    with Vault.create(
        str(path), example(), rows=rows, chunk=chunks(rows), metadata=metadata, **kw
    ) as vault:
        t = 0
        for n in writes:
            data = block(rng, rows, t, n)
            vault.append(data)
            parts.append(flatten(data))
            t += n
    return {k: np.concatenate([p[k] for p in parts], axis=1) for k in LEAVES}


def tree_bytes(path: Path) -> int:
    """Sum of the sizes of every file under ``path`` (what ``disk_bytes`` must report)."""
    return sum(os.lstat(p).st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def reference_episodes(data: dict[str, np.ndarray]) -> list[tuple[int, int, int, float, bool]]:
    """Complete episodes (row, start, length, return, truncated), walking every step."""
    out = []
    done, trunc, reward = data["done"], data["trunc"], data["reward"]
    for r in range(done.shape[0]):
        start, ret = 0, 0.0
        for t in range(done.shape[1]):
            ret += float(reward[r, t])
            if done[r, t] or trunc[r, t]:
                out.append((r, start, t + 1 - start, ret, bool(trunc[r, t] and not done[r, t])))
                start, ret = t + 1, 0.0
    return out


class Cli:
    """``cli("info", path)`` runs the app in-process (CliRunner) with a wide terminal."""

    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, *args: Any, code: int | None = 0) -> Any:
        result = self.runner.invoke(
            app, [str(a) for a in args], env={"COLUMNS": "200", "NO_COLOR": "1"}
        )
        if code is not None:
            assert result.exit_code == code, (
                f"exit {result.exit_code} (wanted {code}) for {args}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}\n{result.exception!r}"
            )
        return result

    def json(self, *args: Any, code: int = 0) -> Any:
        return json.loads(self(*args, "--json", code=code).stdout)


def one_error_line(result: Any) -> str:
    """The single ``vault: ...`` line a failing command writes to stderr (no traceback)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("vault: "), lines
    assert "Traceback" not in result.output
    return lines[0]
