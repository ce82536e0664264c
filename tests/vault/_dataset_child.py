"""Child processes of tests/vault/test_dataset.py: writers appending to their own shard of a
dataset and readers checking every shard while they do (real processes, real storage).

    python _dataset_child.py write ROOT SHARD INDEX APPENDS STEPS [PAUSE]
    python _dataset_child.py read ROOT SECONDS

Every value a writer stores is a function of (shard index, row, time) (:func:`expected`), so a
reader can tell a consistent prefix from anything else without talking to the writers.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import vault

ROWS = 2
EXAMPLE = {"obs": np.zeros((3,), np.float32), "reward": np.float32(0), "done": np.bool_(False)}


def expected(index: int, rows: int, t0: int, t1: int) -> dict[str, np.ndarray]:
    """The data of shard ``index`` at times ``[t0, t1)``."""
    t = np.arange(t0, t1, dtype=np.int64)[None, :]
    r = np.arange(rows, dtype=np.int64)[:, None]
    base = (index * 1_000_000 + r * 10_000 + t).astype(np.float32)
    return {
        "obs": np.stack([base, base + 0.25, base + 0.5], axis=-1),
        "reward": (base % 7).astype(np.float32),
        "done": (t + r) % 5 == 4,
    }


def write(root: str, shard: str, index: int, appends: int, steps: int, pause: float) -> None:
    dataset = vault.Dataset.create(
        root, EXAMPLE, rows=ROWS, done_leaf="done", reward_leaf="reward", exist_ok=True
    )
    writer = dataset.shard(shard)
    start = writer.committed_length
    print(f"ready {shard} {start}", flush=True)
    for k in range(appends):
        t0 = start + k * steps
        writer.append(expected(index, ROWS, t0, t0 + steps))
        print(f"committed {shard} {t0 + steps}", flush=True)
        if pause:
            time.sleep(pause)
    writer.close()
    print(f"done {shard}", flush=True)


def check(dataset: vault.Dataset) -> int:
    """Every shard's committed data is the expected prefix; returns timesteps checked."""
    checked = 0
    for name in dataset.shards:
        index = int(name.rsplit("-", 1)[1])
        got = dataset.read_numpy(name)
        length = dataset.vault(name).committed_length
        want = expected(index, ROWS, 0, length)
        for leaf, values in want.items():
            assert np.array_equal(got[leaf], values), (name, leaf, length)
        checked += ROWS * length
    return checked


def read(root: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not vault.is_dataset(root):
        time.sleep(0.05)
    dataset = vault.Dataset.open(root)
    rounds = 0
    lengths: dict[str, int] = {}
    while time.monotonic() < deadline:
        dataset.refresh()
        now = dataset.committed_lengths
        for name, length in lengths.items():  # commits only ever grow a shard's prefix
            assert now[name] >= length, (name, length, now[name])
        lengths = now
        check(dataset)
        rounds += 1
    print(f"reader rounds {rounds} shards {len(lengths)} timesteps {sum(lengths.values())}")


if __name__ == "__main__":
    mode, root = sys.argv[1], sys.argv[2]
    if mode == "write":
        pause = float(sys.argv[7]) if len(sys.argv) > 7 else 0.0
        write(root, sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), pause)
    elif mode == "read":
        read(root, float(sys.argv[3]))
    else:
        raise SystemExit(f"unknown mode {mode}")
