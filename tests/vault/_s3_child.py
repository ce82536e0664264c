"""Child processes of the S3 tests (run as ``python _s3_child.py MODE ...``, with the test
server's AWS environment variables set by the parent).

* ``race ROOT N ME DIR``: for each of N pre-made vaults ``ROOT/i``, wait for the other racer
  (a file barrier in DIR), try to take the writer lock, wait again, then append one block
  tagged ``ME`` if it won; prints ``i won`` or ``i lost``.
* ``writer LOC START N [DIE]``: append blocks ``START..START+N-1`` (block k holds the value
  k), printing ``committed k`` after each; then sleep (to be killed). With DIE, the process
  SIGKILLs itself inside the commit replacement of block DIE.
* ``reader LOC TARGET``: refresh until TARGET timesteps are committed, printing each new
  length seen (a consistent prefix is checked at every step).
* ``derive-dies SRC DEST``: derive a slice of SRC into DEST and die (``os._exit``) at the
  commit of its first append: an interrupted build.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import vault
from vault import Vault, VaultLockedError

ROWS, STEPS = 2, 3
EXAMPLE = {"obs": np.zeros(4, np.float32), "done": np.zeros((), bool)}


def block(k: int) -> dict[str, np.ndarray]:
    """Block ``k``: ``STEPS`` timesteps whose obs all hold ``k`` (row r: ``k + 1000 r``)."""
    rows = 1000 * np.arange(ROWS, dtype=np.float32)[:, None, None]
    obs = np.full((ROWS, STEPS, 4), k, np.float32) + rows
    done = np.zeros((ROWS, STEPS), bool)
    done[:, -1] = k % 2 == 1
    return {"obs": obs, "done": done}


def expected(n_blocks: int) -> np.ndarray:
    return np.concatenate([block(k)["obs"] for k in range(n_blocks)], axis=1)


def _barrier(folder: Path, name: str, me: str) -> None:
    (folder / f"{name}.{me}").touch()
    other = "b" if me == "a" else "a"
    while not (folder / f"{name}.{other}").exists():
        time.sleep(0.0005)


def race(root: str, n: int, me: str, folder: str) -> None:
    where = Path(folder)
    for i in range(n):
        _barrier(where, f"{i}-ready", me)
        try:
            writer: Vault | None = Vault.open(f"{root}/{i}", "a")
        except VaultLockedError:
            writer = None
        _barrier(where, f"{i}-tried", me)
        if writer is not None:
            writer.append(block(ord(me)))
            writer.close()
        print(i, "won" if writer is not None else "lost", flush=True)


def writer(location: str, start: int, n: int, die_in_commit: int = -1) -> None:
    """Append blocks; with ``die_in_commit`` >= 0, SIGKILL this process while the commit
    record of block ``die_in_commit`` is being replaced (a timer fires inside the PUT)."""
    if die_in_commit >= 0:
        seen = [start - 1]

        def hook(point: str, info: dict[str, object], step: Callable[[], object]) -> object:
            if point == "commit":
                seen[0] += 1
                if seen[0] == die_in_commit:
                    delay = 0.0002 * (die_in_commit % 5)
                    threading.Timer(delay, os.kill, (os.getpid(), signal.SIGKILL)).start()
            return step()

        vault.set_fault_hook(hook)
    v = Vault.open(location, "a")
    for k in range(start, start + n):
        v.append(block(k))
        print("committed", k, flush=True)
    time.sleep(600)


def reader(location: str, target: int) -> None:
    v = Vault.open(location)
    seen = -1
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        length = v.refresh()
        if length != seen:
            obs = v.read_numpy()["obs"]
            np.testing.assert_array_equal(obs, expected(length // STEPS))
            print("length", length, flush=True)
            seen = length
        if length >= target:
            return
        time.sleep(0.01)
    raise SystemExit(f"timed out at {seen}")


def derive_dies(src: str, dest: str) -> None:
    def hook(point: str, info: dict[str, object], step: Callable[[], object]) -> object:
        if point == "commit":
            os._exit(9)  # the data is written, the new vault's first commit never lands
        return step()

    vault.set_fault_hook(hook)
    vault.derive_slice(src, dest, rows=[0])


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "race":
        race(args[0], int(args[1]), args[2], args[3])
    elif mode == "writer":
        writer(args[0], int(args[1]), int(args[2]), int(args[3]) if len(args) > 3 else -1)
    elif mode == "reader":
        reader(args[0], int(args[1]))
    elif mode == "derive-dies":
        derive_dies(args[0], args[1])
    else:
        raise SystemExit(f"unknown mode {mode}")
