"""Seeded corruption trials: a damaged vault returns its committed data bit-identical or
raises a typed error, never different data; and ``verify`` reports a problem whenever the
read would differ or raise.

Every file kind of a small vault with an episode index is hit (data chunks, the partly
filled last chunks, array metadata, the manifest, the commit record, the episode index, the
checksum tags, group metadata) with one of: flip a byte, truncate, zero-fill, delete, swap
with another file of the same array, edit a JSON value. 400 trials in four seeded batches.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vault import Vault, VaultError, verify

ROWS, STEPS = 3, 45
CHUNKS = {"obs": [1, 8, 4], "action": [3, 8], "reward": [3, 8], "done": [3, 8]}
TRIALS_PER_BATCH = 100
KINDS = ("flip", "truncate", "zero", "delete", "swap", "edit")


def _data(t0: int, n: int) -> dict[str, np.ndarray]:
    t = np.arange(t0, t0 + n)
    rows = np.arange(ROWS)[:, None]
    return {
        "obs": (t[None, :, None] * 0.5 + rows[..., None] + np.arange(4)).astype(np.float32),
        "action": ((t[None] * 7 + rows) % 5).astype(np.int32),
        "reward": np.sin(t[None] + rows).astype(np.float32),
        "done": ((t[None] + rows) % 7 == 6),
    }


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    path = tmp_path_factory.mktemp("pristine") / "v"
    example = {k: v[0, 0] for k, v in _data(0, 1).items()}
    with Vault.create(
        str(path), example, rows=ROWS, chunk=CHUNKS, done_leaf="done", reward_leaf="reward"
    ) as vault:
        for t0, n in ((0, 13), (13, 20), (33, 12)):  # three commits; 45 = 5 chunks + 5
            vault.append(_data(t0, n))
    return path, _contents(str(path))


def _contents(path: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    vault = Vault.open(path)
    data = vault.read_numpy()
    table = vault.episodes(include_open=True)
    fields = [f.name for f in dataclasses.fields(table)]
    episodes = {name: getattr(table, name) for name in fields if getattr(table, name) is not None}
    return data, episodes


def _same(a: Any, b: Any) -> bool:
    data_a, eps_a = a
    data_b, eps_b = b
    return all(
        x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()
        for part_a, part_b in ((data_a, data_b), (eps_a, eps_b))
        for x, y in ((part_a[k], part_b[k]) for k in part_a)
    )


def _files(root: Path) -> list[Path]:
    skip = {"lock", "trash"}
    return sorted(
        p for p in root.rglob("*") if p.is_file() and p.relative_to(root).parts[0] not in skip
    )


def _edit_json(path: Path, rng: random.Random) -> None:
    doc = json.loads(path.read_text())
    spots: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            if isinstance(value, (dict, list)):
                walk(value)
            elif key != "digest":
                spots.append((node, key))

    walk(doc)
    node, key = rng.choice(spots)
    value = node[key]
    if isinstance(value, bool):
        node[key] = not value
    elif isinstance(value, int):
        node[key] = value + rng.choice([-1, 1, 4])
    elif isinstance(value, float):
        node[key] = value + 1.0
    elif isinstance(value, str):
        node[key] = {"int32": "uint32", "little": "big", "float32": "int32"}.get(value, value + "x")
    else:
        node[key] = 0
    path.write_text(json.dumps(doc))


def _corrupt(root: Path, rng: random.Random) -> str:
    files = _files(root)
    target = rng.choice(files)
    rel = target.relative_to(root).as_posix()
    kind = rng.choice(KINDS)
    if target.name == "zarr.json" and rng.random() < 0.6:
        kind = "edit"
    raw = target.read_bytes()
    if kind == "flip" and raw:
        i = rng.randrange(len(raw))
        target.write_bytes(raw[:i] + bytes([raw[i] ^ (1 << rng.randrange(8))]) + raw[i + 1 :])
    elif kind == "truncate":
        target.write_bytes(raw[: rng.randrange(len(raw) + 1) // 2])
    elif kind == "zero":
        i = rng.randrange(len(raw) + 1)
        target.write_bytes(raw[:i] + bytes(min(len(raw) - i, rng.randrange(1, 64))) + raw[i + 64 :])
    elif kind == "delete":
        target.unlink()
    elif kind == "swap":
        # another chunk of the same array (the crc32c of each still matches its bytes)
        array = rel.split("/c/")[0] if "/c/" in rel else None
        others = [f for f in files if f != target and array and f.as_posix().count(f"{array}/c/")]
        if not others:
            others = [f for f in files if f != target and f.name == target.name]
        other = rng.choice(others)
        target.write_bytes(other.read_bytes())
        rel = f"{rel} <- {other.relative_to(root).as_posix()}"
    elif kind == "edit" and target.name == "zarr.json":
        _edit_json(target, rng)
    else:
        target.write_bytes(raw + b"\x00")
        kind = "append a byte"
    return f"{kind} {rel}"


@pytest.mark.parametrize("batch", range(4))
def test_corruption_is_never_silent(pristine: tuple[Path, Any], tmp_path: Path, batch: int) -> None:
    source, want = pristine
    silent, untyped, missed = [], [], []
    outcomes = {"identical": 0, "typed error": 0}
    for trial in range(TRIALS_PER_BATCH):
        seed = batch * TRIALS_PER_BATCH + trial
        rng = random.Random(seed)
        root = tmp_path / f"t{seed}"
        shutil.copytree(source, root)
        what = f"seed {seed}: " + _corrupt(root, rng)
        differs = True
        try:
            got = _contents(str(root))
            differs = not _same(got, want)
            if differs:
                silent.append(what)
            else:
                outcomes["identical"] += 1
        except VaultError:
            outcomes["typed error"] += 1
        except Exception as err:
            untyped.append(f"{what}: {type(err).__name__}: {str(err)[:200]}")
        if differs:
            try:
                report = verify(str(root))
                if report.ok:
                    missed.append(what)
            except VaultError:
                pass
            except Exception as err:
                untyped.append(f"{what} (verify): {type(err).__name__}: {str(err)[:200]}")
        shutil.rmtree(root)
    assert not silent, f"wrong data returned without an error: {silent}"
    assert not untyped, f"untyped errors: {untyped}"
    assert not missed, f"verify called these sound although the read differed or raised: {missed}"
    assert outcomes["typed error"] > TRIALS_PER_BATCH // 4, outcomes
