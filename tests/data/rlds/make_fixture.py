"""Writes the RLDS fixture of ``tests/vault/converters/test_convert_rlds.py`` with TensorFlow
and TFDS (run it with both installed; the test suite itself needs neither TensorFlow nor this
script): ``tf_toy/1.0.0/`` is an RLDS dataset in TFRecord files (two files for ``train``, one
for ``val``) whose images TensorFlow encoded (JPEG, 3 and 1 channels, 4:2:0 and 4:4:4) and
PNG, and ``tf_toy_as_dataset.npz`` is what ``builder.as_dataset`` (TensorFlow's reader, files
in order) returns for every step of ``train``: the reference the import is checked against.

    python tests/data/rlds/make_fixture.py   # from the repository root
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

HERE = Path(__file__).resolve().parent
H, W = 10, 14  # odd chroma blocks at the edges


def _frame(rng: np.random.Generator, channels: int) -> np.ndarray:
    # a gradient with noise: JPEG's IDCTs differ on it
    base = np.linspace(0, 200, H * W * channels).reshape(H, W, channels)
    return np.clip(base + rng.normal(0, 40, base.shape), 0, 255).astype(np.uint8)


class TfToy(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self) -> tfds.core.DatasetInfo:
        step = {
            "observation": tfds.features.FeaturesDict({
                "image": tfds.features.Image(shape=(H, W, 3), encoding_format="jpeg"),
                "wrist": tfds.features.Image(shape=(H, W, 1), encoding_format="jpeg"),
                "depth": tfds.features.Image(shape=(H, W, 1), encoding_format="png"),
                "state": tfds.features.Tensor(shape=(4,), dtype=np.float32),
            }),
            "action": tfds.features.Tensor(shape=(3,), dtype=np.float32),
            "reward": tfds.features.Scalar(dtype=np.float32),
            "discount": tfds.features.Scalar(dtype=np.float32),
            "is_first": tfds.features.Scalar(dtype=np.bool_),
            "is_last": tfds.features.Scalar(dtype=np.bool_),
            "is_terminal": tfds.features.Scalar(dtype=np.bool_),
            "language_instruction": tfds.features.Text(),
        }  # fmt: skip
        features = tfds.features.FeaturesDict({
            "steps": tfds.features.Dataset(step),
            "episode_metadata": tfds.features.FeaturesDict({"file_path": tfds.features.Text()}),
        })  # fmt: skip
        return tfds.core.DatasetInfo(builder=self, features=features)

    def _split_generators(self, dl_manager: object) -> dict[str, object]:
        return {"train": self._generate_examples(0, 6), "val": self._generate_examples(1, 2)}

    def _generate_examples(self, seed: int, count: int) -> Iterator[tuple[str, dict]]:
        rng = np.random.default_rng(seed)
        for e in range(count):
            n = int(rng.integers(2, 7))
            steps = []
            for t in range(n):
                image = _frame(rng, 3)
                subsample = t % 2 == 0  # 4:2:0 and 4:4:4, both encoded by TensorFlow
                steps.append({
                    "observation": {
                        "image": tf.io.encode_jpeg(image, chroma_downsampling=subsample).numpy(),
                        "wrist": tf.io.encode_jpeg(_frame(rng, 1)).numpy(),
                        "depth": _frame(rng, 1),
                        "state": rng.normal(size=4).astype(np.float32),
                    },
                    "action": rng.normal(size=3).astype(np.float32),
                    "reward": np.float32(rng.normal()),
                    "discount": np.float32(1.0),
                    "is_first": t == 0,
                    "is_last": t == n - 1,
                    "is_terminal": t == n - 1 and e % 2 == 0,
                    "language_instruction": f"pick up block {e}",
                })  # fmt: skip
            yield f"{seed}-{e}", {"steps": steps, "episode_metadata": {"file_path": f"/e/{e}"}}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        builder = TfToy(data_dir=tmp, file_format="tfrecord")
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(
                num_shards=2, compute_stats=tfds.download.ComputeStatsMode.SKIP
            )
        )
        target = HERE / "tf_toy" / "1.0.0"
        shutil.rmtree(HERE / "tf_toy", ignore_errors=True)
        shutil.copytree(builder.data_dir, target)
    reread = tfds.builder_from_directory(str(target))
    read = tfds.ReadConfig(interleave_cycle_length=1)
    ds = reread.as_dataset(split="train", shuffle_files=False, read_config=read)
    columns: dict[str, list[np.ndarray]] = {}
    lengths = []
    for episode in tfds.as_numpy(ds):
        steps = list(episode["steps"])
        lengths.append(len(steps))
        for step in steps:
            flat = {**{f"observation/{k}": v for k, v in step["observation"].items()}, **step}
            for key, value in flat.items():
                if key != "observation" and key != "language_instruction":
                    columns.setdefault(key, []).append(np.asarray(value))
    out = {k: np.stack(v) for k, v in columns.items()}
    np.savez_compressed(HERE / "tf_toy_as_dataset.npz", lengths=np.array(lengths), **out)
    print("wrote", target, "and", HERE / "tf_toy_as_dataset.npz", "tensorflow", tf.__version__)


if __name__ == "__main__":
    main()
