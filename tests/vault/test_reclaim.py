"""Replaced files are freed off the write path (vault/storage/_reclaim.py), and never lost or
leaked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

import vault
from vault import Vault
from vault.storage._reclaim import TRASH_DIR

ROWS = 3
EXAMPLE = {"obs": np.zeros(4, np.float32), "done": np.bool_(False)}


def block(lo: int, n: int) -> dict[str, np.ndarray]:
    t = np.arange(lo, lo + n, dtype=np.float32)
    obs = t[None, :, None] + 1000 * np.arange(ROWS, dtype=np.float32)[:, None, None]
    return {"obs": np.repeat(obs, 4, axis=2), "done": np.zeros((ROWS, n), bool)}


def waiting(root: Path) -> list[Path]:
    return sorted(p for p in (root / TRASH_DIR).iterdir() if p.name != "zarr.json")


def test_old_versions_are_held_while_appending_then_freed(tmp_path: Path) -> None:
    v = Vault.create(str(tmp_path / "v"), EXAMPLE, rows=ROWS, done_leaf="done")
    v.append(block(0, 5))
    record = (tmp_path / "v" / "commit" / "zarr.json").read_bytes()
    rec = v._writer.reclaimer
    assert rec is not None
    with rec.appending():  # the reaper pauses while an append runs
        v.append(block(5, 2))
        held = waiting(tmp_path / "v")
        # the commit record and each leaf's partly filled chunk were replaced; their old
        # versions wait in trash/, the first commit record among them
        assert len(held) >= 3
        assert record in [p.read_bytes() for p in held]
    v.close()
    assert waiting(tmp_path / "v") == []
    np.testing.assert_array_equal(
        Vault.open(str(tmp_path / "v")).read_numpy()["obs"], block(0, 7)["obs"]
    )


def test_zarr_python_sees_the_trash_as_an_empty_group(tmp_path: Path) -> None:
    import zarr

    v = Vault.create(str(tmp_path / "v"), EXAMPLE, rows=ROWS)
    v.append(block(0, 3))
    v.append(block(3, 3))
    v.close()
    group = zarr.open_group(str(tmp_path / "v"), mode="r")
    assert TRASH_DIR in dict(group.members())
    assert (
        json.loads((tmp_path / "v" / TRASH_DIR / "zarr.json").read_text())["node_type"] == "group"
    )


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from test_reclaim import block
    from vault import Vault

    v = Vault.open({path!r}, mode="a")
    with v._writer.reclaimer.appending():  # keep the reaper from freeing anything
        for i in range(4):
            v.append(block(6 + 2 * i, 2))
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_files_held_by_a_killed_writer_are_freed_by_the_next_writer(tmp_path: Path) -> None:
    path = tmp_path / "v"
    v = Vault.create(str(path), EXAMPLE, rows=ROWS, done_leaf="done")
    v.append(block(0, 6))
    v.close()
    code = CHILD.format(tests=str(Path(__file__).parent), path=str(path))
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    left = waiting(path)
    assert len(left) >= 8  # four appends' worth of old versions, never freed
    assert all(os.stat(p).st_nlink == 1 for p in left)  # nothing live among them

    report = vault.verify(str(path))  # sound, with a warning about the held files
    assert report.ok, report.problems
    assert [w.place for w in report.warnings] == [TRASH_DIR]
    assert f"{len(left)} old versions of replaced files" in report.warnings[0].message

    reader = Vault.open(str(path))
    assert reader.committed_length == 14
    np.testing.assert_array_equal(reader.read_numpy()["obs"], block(0, 14)["obs"])

    writer = Vault.open(str(path), mode="a")  # takes the lock and frees the leftovers
    writer.append(block(14, 1))
    writer.close()
    assert waiting(path) == []
    np.testing.assert_array_equal(Vault.open(str(path)).read_numpy()["obs"], block(0, 15)["obs"])
    report = vault.verify(str(path))
    assert report.ok, report.problems
    assert not report.warnings, report.warnings
