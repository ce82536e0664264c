"""Importers stream: converting a dataset four times larger than a memory budget stays inside
it. Measured in a fresh process (peak RSS, ``ru_maxrss``), after a small warm-up import has
loaded every library, codec and thread pool."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest

BUDGET = 24 << 20  # peak RSS growth allowed while importing
RAW = 96 << 20  # the dataset: four budgets
WIDTH = 1024  # float32 observation width: 4 KiB per timestep

CHILD = textwrap.dedent(
    """
    import json, resource, sys
    from vault.converters import import_dataset

    fmt, small, big, out = sys.argv[1:5]
    import_dataset(fmt, small, out + "-warm", block_bytes=2 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    vault = import_dataset(fmt, big, out, block_bytes=2 << 20)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"growth": after - before, "length": vault.committed_length}))
    """
)


def _d4rl(path: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        obs = f.create_dataset("observations", (n, WIDTH), np.float32)
        for t0 in range(0, n, 4096):  # written in blocks: the test process stays small too
            t1 = min(n, t0 + 4096)
            obs[t0:t1] = rng.normal(size=(t1 - t0, WIDTH)).astype(np.float32)
        f["actions"] = rng.normal(size=(n, 2)).astype(np.float32)
        f["rewards"] = np.ones(n, np.float32)
        terminals = np.zeros(n, bool)
        terminals[99::100] = True
        f["terminals"] = terminals


def _flashbax(root: Path, name: str, n: int) -> Path:
    import contextlib
    import io

    import flashbax as fbx
    import jax.numpy as jnp
    from flashbax.vault import Vault as FbxVault

    rows = 4
    buf = fbx.make_trajectory_buffer(
        add_batch_size=rows, sample_batch_size=1, sample_sequence_length=1, period=1,
        min_length_time_axis=1, max_length_time_axis=n // rows + 1,
    )  # fmt: skip
    state = buf.init({"obs": jnp.zeros(WIDTH, jnp.float32), "done": jnp.zeros((), bool)})
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(rows, n // rows, WIDTH)).astype(np.float32)
    state = buf.add(state, {"obs": obs, "done": np.zeros((rows, n // rows), bool)})
    with contextlib.redirect_stdout(io.StringIO()):
        FbxVault(name, state.experience, rel_dir=str(root), vault_uid="uid",
                 compression={"id": "zstd", "level": 1}).write(state)  # fmt: skip
    return root / name / "uid"


def _ogbench(path: Path, n: int) -> None:
    """An OGBench-layout .npz (deflated members), written a block at a time."""
    import zipfile

    rng = np.random.default_rng(2)
    terminals = np.zeros(n, bool)
    terminals[100::101] = True
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        with zf.open("observations.npy", "w", force_zip64=True) as member:
            header = {"descr": "<f4", "fortran_order": False, "shape": (n, WIDTH)}
            np.lib.format.write_array_header_1_0(member, header)
            for t0 in range(0, n, 4096):
                t1 = min(n, t0 + 4096)
                member.write(rng.normal(size=(t1 - t0, WIDTH)).astype(np.float32).tobytes())
        for key, value in [("actions", rng.normal(size=(n, 2)).astype(np.float32)),
                           ("terminals", terminals)]:  # fmt: skip
            with zf.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, value)


def _rlds(root: Path, n: int) -> Path:
    """An RLDS dataset built by TFDS (array_record files) of episodes of 256 steps."""
    import tensorflow_datasets as tfds
    from _convert_sources import write_rlds

    per = 256
    features = {
        "observation": tfds.features.Tensor(shape=(WIDTH,), dtype=np.float32),
        "is_first": tfds.features.Scalar(dtype=np.bool_),
        "is_last": tfds.features.Scalar(dtype=np.bool_),
    }

    def steps(seed: int, e: int, length: int) -> dict[str, object]:
        obs = np.random.default_rng([seed, e]).normal(size=(length, WIDTH)).astype(np.float32)
        flags = np.arange(length)
        return {"steps": {"observation": obs, "is_first": flags == 0,
                          "is_last": flags == length - 1}}  # fmt: skip

    return write_rlds(root, {"train": [min(per, n)] * max(1, n // per)}, steps_of=steps,
                      features=features)  # fmt: skip


@pytest.mark.parametrize("fmt", ["d4rl", "flashbax", "ogbench", "rlds"])
def test_import_memory_is_bounded_by_a_block(tmp_path: Path, fmt: str) -> None:
    n = RAW // (WIDTH * 4)
    if fmt == "d4rl":
        small, big = tmp_path / "small.hdf5", tmp_path / "big.hdf5"
        _d4rl(small, 400)
        _d4rl(big, n)
    elif fmt == "rlds":
        small, big = _rlds(tmp_path / "small", 400), _rlds(tmp_path / "big", n)
    elif fmt == "ogbench":
        small, big = tmp_path / "small.npz", tmp_path / "big.npz"
        _ogbench(small, 400)
        _ogbench(big, n)
    else:
        small, big = _flashbax(tmp_path, "small", 400), _flashbax(tmp_path, "big", n)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    run = subprocess.run(
        [sys.executable, str(script), fmt, str(small), str(big), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout.strip().splitlines()[-1])
    rows = 4 if fmt == "flashbax" else 1
    assert doc["length"] == n // rows
    assert doc["growth"] < BUDGET, (
        f"peak RSS grew {doc['growth'] / 2**20:.1f} MiB for {RAW >> 20} MiB"
    )
