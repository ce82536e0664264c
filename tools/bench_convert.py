"""Converter benchmark: import throughput per format, and reading the data back through the
vault vs through the source library, in one run.

For each format a source of about ``--gb`` GB of raw data (float32 observations of 256 values
plus actions, rewards and flags) is written by its own library: a Flashbax 0.1.3 vault
(default gzip-5 compression, 16 rows), a D4RL-style HDF5 file (h5py, chunked, uncompressed),
a Minari dataset (HDF5 backend, episodes of 1,000 steps), an OGBench ``.npz`` file (deflated
as ``np.savez_compressed`` does, trajectories of 1,001 states) and an RLDS dataset built by
TFDS (``array_record`` files, episodes of 1,000 steps). Then:

* import: ``vault.converters.import_<format>`` into a new vault (MB/s of raw data);
* read back, all of it, warm page cache: the vault (``Vault.read_numpy``) vs the source library
  (Flashbax ``Vault.read()``, ``MinariDataset.iterate_episodes()``, h5py ``ds[:]``,
  ``ogbench.load_dataset``, TFDS's ``builder.as_data_source`` episode by episode).

Prints a table and JSON (``--out FILE`` writes the JSON). ``--quick``: a few MB each.
Needs ``pip install -e ".[bench,minari,d4rl,rlds]" ogbench``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _argtypes import choices_list, existing_dir, out_file, positive_float

WIDTH = 256
STEP = WIDTH * 4 + 4 * 2 + 4 + 1 + 1  # obs, action[2], reward, terminal, timeout (bytes)


def _raw_mb(steps: int) -> float:
    return steps * STEP / 1e6


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def make_flashbax(root: Path, steps: int) -> Path:
    import flashbax as fbx
    import jax.numpy as jnp
    from flashbax.vault import Vault as FbxVault

    rows = 16
    block = min(2048, max(1, steps // rows))
    buf = fbx.make_trajectory_buffer(
        add_batch_size=rows, sample_batch_size=1, sample_sequence_length=1, period=1,
        min_length_time_axis=1, max_length_time_axis=block * 2,
    )  # fmt: skip
    example = {
        "obs": jnp.zeros(WIDTH, jnp.float32),
        "action": jnp.zeros(2, jnp.float32),
        "reward": jnp.zeros((), jnp.float32),
        "terminal": jnp.zeros((), bool),
        "timeout": jnp.zeros((), bool),
    }
    state = buf.init(example)
    rng = np.random.default_rng(0)
    with contextlib.redirect_stdout(io.StringIO()):
        vault = FbxVault("bench", state.experience, rel_dir=str(root), vault_uid="uid")
        for _ in range(max(1, steps // (rows * block))):
            batch = {
                "obs": rng.normal(size=(rows, block, WIDTH)).astype(np.float32),
                "action": rng.normal(size=(rows, block, 2)).astype(np.float32),
                "reward": rng.normal(size=(rows, block)).astype(np.float32),
                "terminal": rng.random((rows, block)) < 0.001,
                "timeout": np.zeros((rows, block), bool),
            }
            state = buf.add(state, batch)
            vault.write(state)
    return root / "bench" / "uid"


def make_d4rl(path: Path, steps: int) -> Path:
    import h5py

    rng = np.random.default_rng(1)
    with h5py.File(path, "w") as f:
        obs = f.create_dataset(
            "observations", (steps, WIDTH), np.float32, chunks=(min(4096, steps), WIDTH)
        )
        act = f.create_dataset("actions", (steps, 2), np.float32, chunks=(min(65536, steps), 2))
        rew = f.create_dataset("rewards", (steps,), np.float32, chunks=(min(65536, steps),))
        term = f.create_dataset("terminals", (steps,), bool, chunks=(min(65536, steps),))
        tout = f.create_dataset("timeouts", (steps,), bool, chunks=(min(65536, steps),))
        for t0 in range(0, steps, 65536):
            t1 = min(steps, t0 + 65536)
            obs[t0:t1] = rng.normal(size=(t1 - t0, WIDTH)).astype(np.float32)
            act[t0:t1] = rng.normal(size=(t1 - t0, 2)).astype(np.float32)
            rew[t0:t1] = rng.normal(size=t1 - t0).astype(np.float32)
            term[t0:t1] = (np.arange(t0, t1) % 1000) == 999
            tout[t0:t1] = False
    return path


def make_minari(root: Path, steps: int) -> Path:
    import minari
    from gymnasium import spaces
    from minari.data_collector.episode_buffer import EpisodeBuffer
    from minari.dataset.minari_storage import MinariStorage

    data = root / "bench-v0" / "data"
    data.parent.mkdir(parents=True)
    storage = MinariStorage.new(
        data,
        observation_space=spaces.Box(-np.inf, np.inf, (WIDTH,), np.float32),
        action_space=spaces.Box(-np.inf, np.inf, (2,), np.float32),
        data_format="hdf5",
        jpeg_encoding=False,
    )
    storage.update_metadata({"dataset_id": "bench-v0", "minari_version": minari.__version__})
    rng = np.random.default_rng(2)
    length = 1000
    for _ in range(max(1, steps // length) // 50 or 1):
        batch = []
        for _ in range(min(50, max(1, steps // length))):
            term = np.zeros(length, bool)
            term[-1] = True
            batch.append(
                EpisodeBuffer(
                    observations=rng.normal(size=(length + 1, WIDTH)).astype(np.float32),
                    actions=rng.normal(size=(length, 2)).astype(np.float32),
                    rewards=rng.normal(size=length).astype(np.float32),
                    terminations=term,
                    truncations=np.zeros(length, bool),
                )
            )
        storage.update_episodes(batch)
    return data.parent


def make_ogbench(path: Path, steps: int) -> Path:
    import zipfile

    rng = np.random.default_rng(3)
    terminals = (np.arange(steps) % 1001) == 1000
    arrays = {
        "observations": ((steps, WIDTH), "<f4"),
        "actions": ((steps, 2), "<f4"),
        "qpos": ((steps,), "<f4"),  # the reward's 4 bytes: the same raw size as the others
        "terminals": ((steps,), "|b1"),
        "button_states": ((steps,), "|b1"),
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:  # as np.savez_compressed
        for key, (shape, descr) in arrays.items():
            with zf.open(f"{key}.npy", "w", force_zip64=True) as member:
                header = {"descr": descr, "fortran_order": False, "shape": shape}
                np.lib.format.write_array_header_1_0(member, header)
                for t0 in range(0, steps, 65536):
                    t1 = min(steps, t0 + 65536)
                    if key == "terminals":
                        block: np.ndarray = terminals[t0:t1]
                    elif descr == "|b1":
                        block = np.zeros(t1 - t0, bool)
                    else:
                        block = rng.normal(size=(t1 - t0, *shape[1:])).astype(np.float32)
                    member.write(block.tobytes())
    return path


def make_rlds(root: Path, steps: int) -> Path:
    import tensorflow_datasets as tfds

    length = min(1000, steps)
    count = -(-steps // length)  # whole episodes, at least the steps asked for
    step = {
        "observation": tfds.features.Tensor(shape=(WIDTH,), dtype=np.float32),
        "action": tfds.features.Tensor(shape=(2,), dtype=np.float32),
        "reward": tfds.features.Scalar(dtype=np.float32),
        "is_first": tfds.features.Scalar(dtype=np.bool_),
        "is_last": tfds.features.Scalar(dtype=np.bool_),
    }

    class BenchRlds(tfds.core.GeneratorBasedBuilder, skip_registration=True):  # type: ignore[misc]
        VERSION = tfds.core.Version("1.0.0")

        def _info(self) -> Any:
            features = tfds.features.FeaturesDict({"steps": tfds.features.Dataset(step)})
            return tfds.core.DatasetInfo(builder=self, features=features)

        def _split_generators(self, dl_manager: Any) -> Any:
            return {"train": self._generate_examples()}

        def _generate_examples(self) -> Any:
            rng = np.random.default_rng(4)
            flags = np.arange(length)
            for e in range(count):
                yield e, {"steps": {
                    "observation": rng.normal(size=(length, WIDTH)).astype(np.float32),
                    "action": rng.normal(size=(length, 2)).astype(np.float32),
                    "reward": rng.normal(size=length).astype(np.float32),
                    "is_first": flags == 0,
                    "is_last": flags == length - 1,
                }}  # fmt: skip

    builder = BenchRlds(data_dir=str(root), file_format="array_record")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(
                compute_stats=tfds.download.ComputeStatsMode.SKIP
            )
        )
    return Path(builder.data_dir)


def read_source(fmt: str, src: Path) -> int:
    """Read all of the source through its own library; returns the bytes read."""
    if fmt == "flashbax":
        import jax
        from flashbax.vault import Vault as FbxVault

        with contextlib.redirect_stdout(io.StringIO()):
            v = FbxVault(src.parent.name, rel_dir=str(src.parent.parent), vault_uid=src.name)
        data = jax.block_until_ready(v.read().experience)
        return sum(x.nbytes for x in jax.tree.leaves(data))
    if fmt == "d4rl":
        import h5py

        with h5py.File(src, "r") as f:
            return sum(f[k][:].nbytes for k in f)
    if fmt == "ogbench":
        import ogbench

        data = ogbench.load_dataset(str(src), compact_dataset=True, add_info=True)
        return sum(x.nbytes for x in data.values())
    if fmt == "rlds":
        import tensorflow_datasets as tfds

        source = tfds.builder_from_directory(str(src)).as_data_source(split="train")
        total = 0
        for i in range(len(source)):
            steps = source[i]["steps"]
            for t in range(len(steps)):
                total += sum(np.asarray(v).nbytes for v in steps[t].values())
        return total
    from minari import MinariDataset

    total = 0
    for ep in MinariDataset(src / "data").iterate_episodes():
        total += ep.observations.nbytes + ep.actions.nbytes + ep.rewards.nbytes
        total += ep.terminations.nbytes + ep.truncations.nbytes
    return total


def read_vault(dest: Path) -> int:
    from vault import Vault

    v = Vault.open(dest)
    total = 0
    edges = [*list(range(0, v.committed_length, 65536)), v.committed_length]
    for a, b in itertools.pairwise(edges):  # in blocks: memory stays bounded
        data = v.read_numpy(start=a, stop=b, leaves=v.leaf_names)
        total += sum(x.nbytes for x in data.values())
    return total


def run(gb: float, workdir: Path, formats: list[str]) -> list[dict[str, Any]]:
    from vault.converters import import_dataset

    rows = []
    steps = int(gb * 1e9 / STEP)
    for fmt in formats:
        where = workdir / fmt
        where.mkdir()
        t_make, src = _timed(
            lambda fmt=fmt, where=where: {
                "flashbax": lambda: make_flashbax(where, steps),
                "d4rl": lambda: make_d4rl(where / "d.hdf5", steps),
                "minari": lambda: make_minari(where, steps),
                "ogbench": lambda: make_ogbench(where / "bench-v0.npz", steps),
                "rlds": lambda: make_rlds(where / "tfds", steps),
            }[fmt]()
        )
        dest = where / "vault"
        t_import, vault = _timed(lambda src=src, dest=dest, fmt=fmt: import_dataset(fmt, src, dest))
        raw = (
            sum(vault.manifest.leaf(n).step_bytes for n in vault.leaf_names)
            * vault.rows
            * vault.committed_length
        )
        read_source(fmt, src)  # warm the page cache
        t_src, src_bytes = _timed(lambda fmt=fmt, src=src: read_source(fmt, src))
        read_vault(dest)
        t_vault, vault_bytes = _timed(lambda dest=dest: read_vault(dest))
        rows.append(
            {
                "format": fmt,
                "raw_mb": round(raw / 1e6, 1),
                "source_written_s": round(t_make, 1),
                "import_s": round(t_import, 2),
                "import_mb_s": round(raw / 1e6 / t_import, 1),
                "read_source_mb_s": round(src_bytes / 1e6 / t_src, 1),
                "read_vault_mb_s": round(vault_bytes / 1e6 / t_vault, 1),
                "read_ratio": round((vault_bytes / t_vault) / (src_bytes / t_src), 2),
            }
        )
        shutil.rmtree(where)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| format | raw MB | import MB/s | read: source library MB/s | read: vault MB/s | ratio |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['format']} | {r['raw_mb']:,} | {r['import_mb_s']:,} | "
            f"{r['read_source_mb_s']:,} | {r['read_vault_mb_s']:,} | {r['read_ratio']} |"
        )
    return "\n".join(lines)


FORMATS = ("flashbax", "d4rl", "minari", "ogbench", "rlds")
QUICK_GB = 0.004  # --quick: a few MB per format (also the smallest --gb: a few episodes)


def _gb(text: str) -> float:
    value = positive_float(text)
    if value < QUICK_GB:
        raise argparse.ArgumentTypeError(f"must be at least {QUICK_GB} (a few MB), got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=_gb, default=None, help="raw GB per format (default 1)")
    parser.add_argument(
        "--quick", action="store_true", help=f"a few MB per format (--gb {QUICK_GB})"
    )
    parser.add_argument(
        "--formats",
        type=choices_list(FORMATS),
        default=list(FORMATS),
        help=f"comma-separated formats to run (default: {','.join(FORMATS)})",
    )
    parser.add_argument("--out", type=out_file, help="write the JSON here")
    parser.add_argument(
        "--workdir", type=existing_dir, help="an existing folder for the sources and vaults"
    )
    args = parser.parse_args(argv)
    if args.quick and args.gb is not None:
        parser.error("--quick is --gb 0.004: give one of them")
    if len(set(args.formats)) != len(args.formats):
        parser.error(f"--formats names a format twice: {','.join(args.formats)}")
    gb = QUICK_GB if args.quick else (1.0 if args.gb is None else args.gb)
    workdir = Path(tempfile.mkdtemp(prefix="bench-convert-", dir=args.workdir))
    os.environ["MINARI_DATASETS_PATH"] = str(workdir / "minari-root")
    try:
        rows = run(gb, workdir, args.formats)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    doc = {"gb": gb, "results": rows}
    print(table(rows))
    print(json.dumps(doc, indent=1))
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
