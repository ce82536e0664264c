"""RLDS datasets -> vault, without TensorFlow: datasets built here by TFDS itself (checked step by
step against TFDS's own numpy reader, ``builder.as_data_source``), and a fixture of TFRecord
files written by TensorFlow with TensorFlow-encoded JPEGs (checked against what TFDS's
TensorFlow reader, ``as_dataset``, returned for it: ``tests/data/rlds/make_fixture.py``)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow_datasets as tfds
from _convert_sources import write_rlds

from vault import (
    Dataset,
    Vault,
    VaultArgumentError,
    VaultCorruptError,
    VaultNotFoundError,
    VaultStructureError,
)
from vault.converters import import_dataset, import_rlds

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "rlds"
TF_TOY = FIXTURE / "tf_toy" / "1.0.0"
LEAVES = ["action", "discount", "is_first", "is_last", "is_terminal", "observation/depth",
          "observation/image", "observation/state", "reward"]  # fmt: skip


def _leaf(tree: Any, path: str) -> Any:
    for key in path.split("/"):
        tree = tree[key]
    return tree


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_rlds(
        tmp_path_factory.mktemp("rlds"), {"train": [3, 5, 1, 4, 2, 6], "val": [2, 3]},
        num_shards=2,
    )  # fmt: skip


def _steps_of_source(source: Path, split: str) -> tuple[list[int], dict[str, np.ndarray]]:
    """Every step of ``split`` as TFDS's own numpy reader returns it, episodes in order."""
    data = tfds.builder_from_directory(str(source)).as_data_source(split=split)
    lengths, columns = [], {k: [] for k in LEAVES}  # type: dict[str, list[Any]]
    for i in range(len(data)):
        steps = data[i]["steps"]
        lengths.append(len(steps))
        for t in range(len(steps)):
            for key in LEAVES:
                columns[key].append(np.asarray(_leaf(steps[t], key)))
    return lengths, {k: np.stack(v) for k, v in columns.items()}


def test_every_step_as_tfds_numpy_reader_gives_it(built: Path, tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    vault = import_rlds(built, tmp_path / "v", jpeg="tfds-numpy", block_bytes=1 << 16,
                        progress=lambda d, t: seen.append((d, t)))  # fmt: skip
    lengths, want = _steps_of_source(built, "train")
    got = vault.read_numpy()
    assert sorted(vault.leaf_names) == LEAVES
    for key in LEAVES:
        value = _leaf(got, key)[0]
        assert value.dtype == want[key].dtype, key
        np.testing.assert_array_equal(value, want[key], err_msg=key)
    table = vault.episodes()
    assert table.length.tolist() == lengths
    assert table.complete.all()
    ends = np.cumsum(lengths) - 1
    np.testing.assert_array_equal(table.truncated, ~want["is_terminal"][ends])
    starts = np.concatenate([[0], ends[:-1] + 1])
    sums = [want["reward"][a : b + 1].sum() for a, b in zip(starts, ends, strict=True)]
    np.testing.assert_allclose(table.returns, sums)
    origin = vault.metadata["imported_from"]
    assert origin["skipped"] == ["steps/language_instruction", "episode_metadata (per episode)"]
    assert (origin["split"], origin["file_format"], origin["jpeg"]) == (
        "train", "array_record", "tfds-numpy"
    )  # fmt: skip
    assert seen[-1][0] == seen[-1][1] > 0
    # TensorFlow's pixels (the default): the same but for JPEG's inverse DCT
    tf_like = import_dataset("rlds", built, tmp_path / "w", split="val").read_numpy()
    val_lengths, val = _steps_of_source(built, "val")
    assert len(_leaf(tf_like, "reward")[0]) == sum(val_lengths)
    for key in LEAVES:
        if key != "observation/image":  # PNG is lossless: every decoder agrees
            np.testing.assert_array_equal(_leaf(tf_like, key)[0], val[key], err_msg=key)
    diff = np.abs(_leaf(tf_like, "observation/image")[0].astype(int) - val["observation/image"])
    assert 0 < diff.max() < 32


def test_tensorflow_written_tfrecords_give_as_datasets_pixels(tmp_path: Path) -> None:
    want = np.load(FIXTURE / "tf_toy_as_dataset.npz")
    vault = import_rlds(TF_TOY, tmp_path / "v", block_bytes=1 << 16)
    got = vault.read_numpy()
    assert vault.episodes().length.tolist() == want["lengths"].tolist()
    for key in want.files:
        if key == "lengths":
            continue
        value = _leaf(got, key)[0]
        assert value.dtype == want[key].dtype, key
        np.testing.assert_array_equal(value, want[key], err_msg=key)  # JPEG too: bit-exact
    assert vault.metadata["imported_from"]["file_format"] == "tfrecord"
    # as shards: one per file, read as one dataset
    dataset = import_rlds(TF_TOY, tmp_path / "d", shards=True)
    assert isinstance(dataset, Dataset)
    assert dataset.shards == ["train-00000", "train-00001"]
    parts = [dataset.read_numpy(name)["observation"]["image"][0] for name in dataset.shards]
    np.testing.assert_array_equal(np.concatenate(parts), want["observation/image"])
    assert len(dataset.episodes()) == len(want["lengths"])


def test_shards_resume_and_are_never_half_made(built: Path, tmp_path: Path) -> None:
    dest = tmp_path / "d"
    first = import_rlds(built, dest, shards=True, files=[1])
    assert first.shards == ["train-00001"]
    before = Vault.open(dest / "shards" / "train-00001").commit_id

    def stop(done: int, total: int) -> None:
        if done:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_rlds(built, dest, shards=True, block_bytes=1 << 16, progress=stop)
    assert Dataset.open(dest).shards == ["train-00001"]  # the interrupted one left nothing
    assert sorted(p.name for p in (dest / "shards").iterdir()) == ["train-00001"]
    again = import_rlds(built, dest, shards=True)
    assert again.shards == ["train-00000", "train-00001"]
    assert Vault.open(dest / "shards" / "train-00001").commit_id == before  # kept as it was
    lengths, _ = _steps_of_source(built, "train")
    assert sorted(again.episodes().length.tolist()) == sorted(lengths)
    with pytest.raises(VaultArgumentError, match=re.escape("files: expected indices")):
        import_rlds(built, dest, shards=True, files=[2])
    with pytest.raises(VaultArgumentError, match="for shards=True"):
        import_rlds(built, tmp_path / "x", files=[0])


def test_sources_that_are_not_rlds(built: Path, tmp_path: Path) -> None:
    with pytest.raises(VaultNotFoundError, match="expected a TFDS dataset directory"):
        import_rlds(tmp_path, tmp_path / "v")
    with pytest.raises(VaultNotFoundError, match=re.escape("got only ['train', 'val']")):
        import_rlds(built, tmp_path / "v", split="test")
    with pytest.raises(VaultArgumentError, match="jpeg must be one of"):
        import_rlds(built, tmp_path / "v", jpeg="pil")

    def no_last(seed: int, e: int, n: int) -> dict[str, Any]:
        steps = [{"x": np.float32(t), "is_first": t == 0, "is_last": False} for t in range(n)]
        return {"steps": steps}

    bad = write_rlds(tmp_path / "bad", {"train": [2, 3]}, steps_of=no_last, features={
        "x": tfds.features.Scalar(dtype=np.float32),
        "is_first": tfds.features.Scalar(dtype=np.bool_),
        "is_last": tfds.features.Scalar(dtype=np.bool_),
    })  # fmt: skip
    with pytest.raises(VaultStructureError, match="RLDS flags do not end it") as err:
        import_rlds(bad, tmp_path / "v")
    assert "steps/is_last: expected True at its last step" in str(err.value)
    assert not (tmp_path / "v").exists()

    def flat(seed: int, e: int, n: int) -> dict[str, Any]:
        return {"steps": [{"x": np.float32(t)} for t in range(n)]}

    plain = write_rlds(tmp_path / "plain", {"train": [2]}, steps_of=flat,
                       features={"x": tfds.features.Scalar(dtype=np.float32)})  # fmt: skip
    with pytest.raises(VaultStructureError, match="not an RLDS dataset") as err:
        import_rlds(plain, tmp_path / "v")
    assert "steps/is_first: expected a bool scalar per step, got nothing" in str(err.value)


def test_damaged_and_truncated_tfrecords(tmp_path: Path) -> None:
    copy = tmp_path / "tf_toy" / "1.0.0"
    shutil.copytree(TF_TOY, copy)
    target = copy / "tf_toy-train.tfrecord-00001-of-00002"
    raw = bytearray(target.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    target.write_bytes(bytes(raw))
    with pytest.raises(VaultCorruptError, match=r"tf_toy-train.tfrecord-00001-of-00002: record \d"):
        import_rlds(copy, tmp_path / "v", block_bytes=1 << 16)
    assert not (tmp_path / "v").exists()
    target.write_bytes(bytes(raw[: len(raw) // 2]))
    with pytest.raises(VaultCorruptError, match="the file is truncated"):
        import_rlds(copy, tmp_path / "v")


def test_from_a_bucket(s3_env: Any, tmp_path: Path) -> None:
    import uuid

    import s3fs

    prefix = f"{s3_env.bucket}/rlds-{uuid.uuid4().hex[:8]}/tf_toy/1.0.0"
    fs = s3fs.S3FileSystem()  # configured the AWS way: AWS_ENDPOINT_URL, keys, region
    fs.put(str(TF_TOY) + "/", prefix, recursive=True)
    want = np.load(FIXTURE / "tf_toy_as_dataset.npz")
    vault = import_rlds(f"s3://{prefix}", tmp_path / "v")
    np.testing.assert_array_equal(
        vault.read_numpy()["observation"]["image"][0], want["observation/image"]
    )


def test_encoded_tensors_and_episodes_without_steps(tmp_path: Path) -> None:
    features = {
        "packed": tfds.features.Tensor(shape=(2, 3), dtype=np.uint16, encoding="zlib"),
        "label": tfds.features.ClassLabel(num_classes=5),
        "is_first": tfds.features.Scalar(dtype=np.bool_),
        "is_last": tfds.features.Scalar(dtype=np.bool_),
    }

    def steps(seed: int, e: int, n: int) -> dict[str, Any]:
        rng = np.random.default_rng(e)
        return {"steps": [{"packed": rng.integers(0, 60000, (2, 3)).astype(np.uint16),
                           "label": int(rng.integers(0, 5)), "is_first": t == 0,
                           "is_last": t == n - 1} for t in range(n)]}  # fmt: skip

    source = write_rlds(tmp_path / "src", {"train": [3, 0, 4, 2]}, steps_of=steps,
                        features=features)  # fmt: skip
    vault = import_rlds(source, tmp_path / "v")
    data = tfds.builder_from_directory(str(source)).as_data_source(split="train")
    episodes = [data[i]["steps"] for i in range(len(data))]
    want = [ep for ep in episodes if len(ep)]
    assert len(want) == 3  # the episode without steps is left out
    assert vault.episodes().length.tolist() == [len(ep) for ep in want]
    got = vault.read_numpy()
    for key in ("packed", "label"):
        expected = np.stack([np.asarray(ep[t][key]) for ep in want for t in range(len(ep))])
        assert got[key][0].dtype == expected.dtype, key
        np.testing.assert_array_equal(got[key][0], expected, err_msg=key)
