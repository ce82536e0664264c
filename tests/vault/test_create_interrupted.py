"""A ``Vault.create`` killed half-way never wedges its location: the next create there takes
the creation over (once the writer lock shows its creator gone), while a location that holds
data, or anything a creation does not make, is never touched.

Found by the S3 soak (``tools/soak.py``): a writer SIGKILLed inside ``Vault.create`` left
``experience/``, ``episodes/`` and its lease but no manifest, and every later create there
failed with "not empty and holds no vault".
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vault
from vault import Vault, VaultExistsError, VaultLockedError, VaultNotFoundError

EXAMPLE = {"obs": np.zeros(3, np.float32), "done": np.bool_(False)}
ROWS = 2

# A process that creates a vault and kills itself (SIGKILL) at the "create" fault point: its
# arrays, groups and empty commit record are made, its manifest is not.
KILLED_CREATE = """
import os, signal, sys
import numpy as np
from vault import Vault, set_fault_hook

def hook(point, info, step):
    if point == "create":
        os.kill(os.getpid(), signal.SIGKILL)
    return step()

set_fault_hook(hook)
Vault.create(sys.argv[1], {"obs": np.zeros(3, np.float32), "done": np.bool_(False)},
             rows=2, done_leaf="done")
"""


def killed_create(where: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", KILLED_CREATE, where],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert done.returncode == -9, done.stderr[-3000:]


def data(t0: int, n: int) -> dict[str, np.ndarray]:
    t = np.arange(t0, t0 + n, dtype=np.float32)
    obs = np.broadcast_to(t[None, :, None], (ROWS, n, 3)).copy()
    return {"obs": obs, "done": np.zeros((ROWS, n), bool)}


def create_appends_and_reads(where: str) -> None:
    with Vault.create(where, EXAMPLE, rows=ROWS, done_leaf="done") as v:
        v.append(data(0, 7))
    back = Vault.open(where)
    assert back.committed_length == 7
    np.testing.assert_array_equal(back.read_numpy()["obs"], data(0, 7)["obs"])
    assert vault.verify(where).ok


def test_a_create_killed_before_its_manifest_is_taken_over_on_disk(tmp_path: Path) -> None:
    where = str(tmp_path / "v")
    killed_create(where)
    assert sorted(os.listdir(where)) == ["commit", "episodes", "experience", "history", "lock"]
    with pytest.raises(VaultNotFoundError):  # no vault there: nothing to read
        Vault.open(where)
    # the lock of a dead process is free: the next create takes the location over at once
    create_appends_and_reads(where)


def test_a_create_killed_before_its_manifest_is_taken_over_on_s3(s3_env: Any) -> None:
    where = f"s3://{s3_env.bucket}/t-{uuid.uuid4().hex[:12]}/v"
    killed_create(where)
    # its lease outlives it: a creator that may still be at work is never overrun
    with pytest.raises(VaultLockedError, match=r"holds the writer lock|lease"):
        Vault.create(where, EXAMPLE, rows=ROWS, done_leaf="done")
    assert vault.break_lock(where)  # `vault unlock`: the creator is known dead
    create_appends_and_reads(where)


def test_data_without_a_manifest_is_never_taken_over(tmp_path: Path) -> None:
    where = tmp_path / "v"
    with Vault.create(where, EXAMPLE, rows=ROWS, done_leaf="done") as v:
        v.append(data(0, 5))
    (where / "zarr.json").unlink()  # a vault whose manifest was lost: its data is not
    before = sorted(p.relative_to(where) for p in where.rglob("*"))
    with pytest.raises(VaultExistsError, match=r"holds an unfinished copy|holds no vault"):
        Vault.create(where, EXAMPLE, rows=ROWS, done_leaf="done")
    assert sorted(p.relative_to(where) for p in where.rglob("*")) == before


def test_a_location_with_other_files_is_never_taken_over(tmp_path: Path) -> None:
    where = str(tmp_path / "v")
    killed_create(where)
    (Path(where) / "notes.txt").write_text("mine")  # something a creation never makes
    with pytest.raises(VaultExistsError, match=r"holds an unfinished copy|holds no vault"):
        Vault.create(where, EXAMPLE, rows=ROWS, done_leaf="done")
    assert (Path(where) / "notes.txt").read_text() == "mine"
