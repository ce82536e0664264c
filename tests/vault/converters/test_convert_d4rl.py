"""D4RL-style HDF5 files (written here with h5py) -> vault: every dataset, and the episodes
recovered exactly from terminals and timeouts, the unterminated last one included."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from _convert_sources import write_d4rl

from vault import VaultCorruptError, VaultNotFoundError, VaultStructureError
from vault.converters import import_d4rl

LENGTHS = [5, 1, 9, 4, 12, 3, 7]


@pytest.mark.parametrize("last_open", [True, False], ids=["last-open", "last-ended"])
def test_every_dataset_and_every_episode(tmp_path: Path, last_open: bool) -> None:
    src = tmp_path / "d.hdf5"
    data = write_d4rl(src, LENGTHS, last_open=last_open)
    vault = import_d4rl(src, tmp_path / "out", block_bytes=1 << 16)
    got = vault.read_numpy()
    assert vault.rows == 1
    assert vault.committed_length == sum(LENGTHS)
    for key, value in data.items():
        node = got
        for part in key.split("/"):
            node = node[part]
        assert node.dtype == value.dtype, key
        np.testing.assert_array_equal(node[0], value, err_msg=key)
    assert vault.metadata["imported_from"]["skipped"] == ["metadata/algorithm"]
    table = vault.episodes(include_open=True)
    starts = np.cumsum([0, *LENGTHS[:-1]])
    assert table.start.tolist() == starts.tolist()
    assert table.length.tolist() == LENGTHS
    assert table.complete.tolist() == [True] * (len(LENGTHS) - 1) + [not last_open]
    truncated = [(i + 1) % 3 == 0 for i in range(len(LENGTHS))]
    n_complete = len(LENGTHS) - (1 if last_open else 0)
    assert table.truncated[:n_complete].tolist() == truncated[:n_complete]
    want_returns = [data["rewards"][s : s + n].sum() for s, n in zip(starts, LENGTHS, strict=True)]
    np.testing.assert_allclose(table.returns, want_returns, rtol=1e-6)


def test_minimal_file_without_timeouts_or_extras(tmp_path: Path) -> None:
    src = tmp_path / "d.hdf5"
    data = write_d4rl(src, [3, 4], infos=False, next_observations=False, timeouts_every=99)
    with h5py.File(src, "a") as f:
        del f["timeouts"]
    vault = import_d4rl(src, tmp_path / "out")
    assert sorted(vault.leaf_names) == ["actions", "observations", "rewards", "terminals"]
    assert vault.episode_leaves["truncated"] is None
    np.testing.assert_array_equal(vault.read_numpy()["observations"][0], data["observations"])
    assert vault.episodes().length.tolist() == [3]


def test_missing_and_mismatched_datasets_are_all_named(tmp_path: Path) -> None:
    src = tmp_path / "d.hdf5"
    write_d4rl(src, [3, 4])
    with h5py.File(src, "a") as f:
        del f["actions"]
    with pytest.raises(
        VaultStructureError, match=re.escape("actions: expected a dataset [N, ...], got nothing")
    ):
        import_d4rl(src, tmp_path / "out")
    write_d4rl(src, [3, 4])
    with h5py.File(src, "a") as f:
        del f["rewards"]
        f["rewards"] = np.zeros(6, np.float32)
        f["infos/name"] = np.array([b"a"] * 7)
    with pytest.raises(VaultStructureError) as err:
        import_d4rl(src, tmp_path / "out")
    text = str(err.value)
    assert "rewards: expected 7 timesteps (as observations), got 6 ([6])" in text
    assert "infos/name: expected bool, integer or floating-point data, got |S1" in text
    assert not (tmp_path / "out").exists()


def test_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(VaultNotFoundError, match="expected a D4RL-style HDF5 file, got no such"):
        import_d4rl(tmp_path / "none.hdf5", tmp_path / "out")
    (tmp_path / "junk.hdf5").write_bytes(b"not hdf5 at all")
    with pytest.raises(VaultCorruptError, match="expected an HDF5 file"):
        import_d4rl(tmp_path / "junk.hdf5", tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.hdf5"]


def test_an_import_to_object_storage_and_an_interrupted_one(tmp_path: Path, s3_env: Any) -> None:
    import uuid

    import vault

    src = tmp_path / "d.hdf5"
    data = write_d4rl(src, LENGTHS)
    dest = f"s3://{s3_env.bucket}/imports-{uuid.uuid4().hex[:8]}/d4rl"
    out = import_d4rl(src, dest, block_bytes=1 << 16)
    np.testing.assert_array_equal(out.read_numpy()["observations"][0], data["observations"])
    assert vault.verify(dest).ok
    # an import into S3 interrupted after data was written leaves no vault there
    failed = dest + "-failed"

    def boom(done: int, total: int) -> None:
        if done > 0:  # after a block was appended, before the import completes
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_d4rl(src, failed, block_bytes=1 << 16, progress=boom)
    assert [f.location for f in vault.find_vaults(dest.rsplit("/", 1)[0])] == [dest]
    with pytest.raises(VaultNotFoundError):
        vault.Vault.open(failed)
