"""Vaults of one structure written separately (the sources of one stream), and the
brute-force reference of which sequences a stream over them must yield; shared by
test_multihost.py and test_grain.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vault import Vault

CODE = 1_000  # code = source * SOURCE + row * CODE + t
SOURCE = 100_000


def make_source(
    path: Path, source: int, length: int, *, rows: int = 2, seam: int | None = None
) -> Vault:
    """A vault whose ``code`` leaf says where each timestep is, ``obs`` is ``[code, -code]``
    and ``done`` ends episodes at random (seeded by ``source``); with ``seam``, the rows
    restart there (a seam, as a writer's new buffer would leave)."""
    example = {"code": np.int32(0), "obs": np.zeros(2, np.float32), "done": np.bool_(False)}
    chunk = {"code": [rows, 8], "obs": [rows, 8, 2], "done": [rows, 8]}
    v = Vault.create(str(path), example, rows=rows, chunk=chunk, done_leaf="done")
    code = source * SOURCE + np.arange(rows)[:, None] * CODE + np.arange(length)[None]
    data = {
        "code": code.astype(np.int32),
        "obs": np.stack([code, -code], -1).astype(np.float32),
        "done": np.random.default_rng(source).random((rows, length)) < 0.1,
    }
    cut = length if seam is None else seam
    v.append({k: x[:, :cut] for k, x in data.items()})
    if seam is not None:
        v.append({k: x[:, cut:] for k, x in data.items()}, continues=False)
    return v


def valid_starts(
    vaults: list[Vault], seq: int, stride: int = 1, episode_aware: bool = False
) -> set[tuple[int, int, int]]:
    """The reference: every (source, row, t) an epoch must yield, by brute force."""
    out = set()
    for s, v in enumerate(vaults):
        done = v.read_numpy()["done"]
        seams = [seam.at for seam in v.seams]
        for r in range(v.rows):
            for t in range(0, v.committed_length - seq + 1, stride):
                if any(t < a <= t + seq - 1 for a in seams):
                    continue
                if episode_aware and done[r, t : t + seq - 1].any():
                    continue
                out.add((s, r, t))
    return out
