"""OGBench dataset files (written here in OGBench's layout) -> vault: every array bit-identical,
the trajectories as episodes, the validation file as a second vault, and OGBench's derived
fields recomputed exactly as ``ogbench.load_dataset`` computes them."""

from __future__ import annotations

import itertools
import re
import zipfile
from pathlib import Path

import numpy as np
import ogbench
import pytest
from _convert_sources import write_ogbench

from vault import (
    Vault,
    VaultArgumentError,
    VaultCorruptError,
    VaultNotFoundError,
    VaultStructureError,
)
from vault.converters import import_dataset, import_ogbench, ogbench_dataset

LENGTHS = [6, 3, 9, 1, 5]  # transitions per trajectory (each has one more state)
VAL_LENGTHS = [4, 2]


def _pair(folder: Path, name: str = "pointmaze-tiny-navigate-v0", **kw: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_ogbench(folder / f"{name}.npz", LENGTHS, **kw)  # type: ignore[arg-type]
    write_ogbench(folder / f"{name}-val.npz", VAL_LENGTHS, seed=1, **kw)  # type: ignore[arg-type]
    return folder / f"{name}.npz"


@pytest.mark.parametrize("visual", [False, True], ids=["states", "visual"])
def test_every_array_every_trajectory_and_the_validation_vault(
    tmp_path: Path, visual: bool
) -> None:
    src = _pair(tmp_path / "data", visual=visual)
    seen: list[tuple[int, int]] = []
    vault = import_ogbench(
        src, tmp_path / "v", block_bytes=1 << 16, progress=lambda d, t: seen.append((d, t))
    )
    for file, where, lengths in [(src, tmp_path / "v", LENGTHS),
                                 (src.with_name(src.stem + "-val.npz"), tmp_path / "v-val",
                                  VAL_LENGTHS)]:  # fmt: skip
        got = Vault.open(where)
        with np.load(file) as data:
            assert sorted(got.leaf_names) == sorted(data.files)
            for key in data.files:
                value = got.read_numpy()[key][0]
                assert value.dtype == data[key].dtype, key
                np.testing.assert_array_equal(value, data[key], err_msg=key)
        table = got.episodes()
        assert table.length.tolist() == [n + 1 for n in lengths]  # states, the last included
        assert table.complete.all()
        assert len(got.episodes(include_open=True)) == len(lengths)
        assert got.episode_leaves["done"] == "terminals"
    assert vault.metadata["imported_from"]["split"] == "train"
    assert vault.metadata["imported_from"]["validation"] == str(tmp_path / "v-val")
    assert Vault.open(tmp_path / "v-val").metadata["imported_from"]["split"] == "val"
    total = seen[-1][1]
    assert seen[-1][0] == total
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)  # one progress over both files


def _same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key].dtype == want[key].dtype, key
        assert got[key].shape == want[key].shape, key
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


@pytest.mark.parametrize(
    ("compact", "add_info"), list(itertools.product([False, True], [False, True]))
)
def test_derived_fields_are_ogbench_loaders_own(
    tmp_path: Path, compact: bool, add_info: bool
) -> None:
    src = _pair(tmp_path / "data")
    vault = import_ogbench(src, tmp_path / "v")
    want = ogbench.load_dataset(str(src), compact_dataset=compact, add_info=add_info)
    _same(ogbench_dataset(vault, compact_dataset=compact, add_info=add_info), want)
    val = ogbench.load_dataset(str(src.with_name(src.stem + "-val.npz")), compact_dataset=compact)
    _same(ogbench_dataset(tmp_path / "v-val", compact_dataset=compact), val)


def test_derived_fields_visual_with_the_loaders_dtypes(tmp_path: Path) -> None:
    src = _pair(tmp_path / "data", visual=True, info=False)
    import_ogbench(src, tmp_path / "v", val_dest=False)
    for compact in (False, True):
        kw = {"ob_dtype": np.uint8, "action_dtype": np.float32, "compact_dataset": compact}
        _same(ogbench_dataset(tmp_path / "v", **kw), ogbench.load_dataset(str(src), **kw))


def test_next_observations_by_their_definition(tmp_path: Path) -> None:
    # independent of OGBench's code: every transition of every trajectory, in order
    src = tmp_path / "d.npz"
    data = write_ogbench(src, LENGTHS)
    import_ogbench(src, tmp_path / "v")
    got = ogbench_dataset(tmp_path / "v", add_info=True)
    obs, starts = data["observations"], np.cumsum([0] + [n + 1 for n in LENGTHS[:-1]])
    pairs = [(s + i, s + i + 1) for s, n in zip(starts, LENGTHS, strict=True) for i in range(n)]
    np.testing.assert_array_equal(got["observations"], obs[[a for a, _ in pairs]])
    np.testing.assert_array_equal(got["next_observations"], obs[[b for _, b in pairs]])
    np.testing.assert_array_equal(got["qvel"], data["qvel"][[a for a, _ in pairs]])
    ends = np.zeros(len(pairs), np.float32)
    ends[np.cumsum(LENGTHS) - 1] = 1
    np.testing.assert_array_equal(got["terminals"], ends)


def test_names_val_choices_and_the_registry(tmp_path: Path) -> None:
    src = _pair(tmp_path / "data", name="cube-single-play-v0")
    vault = import_dataset(
        "ogbench", "cube-single-play-v0", tmp_path / "a", dataset_dir=tmp_path / "data"
    )
    assert vault.committed_length == sum(LENGTHS) + len(LENGTHS)
    assert (tmp_path / "a-val").is_dir()
    import_ogbench(src, tmp_path / "b", val_dest=False)
    assert not (tmp_path / "b-val").exists()
    import_ogbench(src, tmp_path / "c", val_dest=tmp_path / "elsewhere")
    assert Vault.open(tmp_path / "elsewhere").committed_length == sum(VAL_LENGTHS) + 2
    val = src.with_name(src.stem + "-val.npz")
    assert import_ogbench(val, tmp_path / "d").committed_length == sum(VAL_LENGTHS) + 2
    assert not (tmp_path / "d-val").exists()
    with pytest.raises(VaultArgumentError, match="is a validation file itself"):
        import_ogbench(val, tmp_path / "e", val_dest=tmp_path / "f")
    lone = tmp_path / "lone.npz"
    write_ogbench(lone, [2, 2])
    import_ogbench(lone, tmp_path / "g")  # no validation file beside it: none made
    assert not (tmp_path / "g-val").exists()
    with pytest.raises(VaultNotFoundError, match=re.escape("lone-val.npz: expected the valid")):
        import_ogbench(lone, tmp_path / "h", val_dest=tmp_path / "h2")
    assert not (tmp_path / "h").exists()
    with pytest.raises(VaultNotFoundError, match="rlvault never downloads"):
        import_ogbench("antmaze-large-navigate-v0", tmp_path / "i", dataset_dir=tmp_path)


def test_bad_files_are_named_and_leave_nothing(tmp_path: Path) -> None:
    src = tmp_path / "d.npz"
    data = write_ogbench(src, [3, 4])
    np.savez(src, observations=data["observations"], terminals=data["terminals"])
    with pytest.raises(VaultStructureError, match="not an OGBench dataset file") as err:
        import_ogbench(src, tmp_path / "v")
    assert "actions: expected an array [N, ...], got nothing" in str(err.value)
    np.savez(src, observations=data["observations"], actions=data["actions"],
             terminals=data["terminals"][:-1], qpos=np.array(["a"] * 9),
             observation_interval=np.int32(1))  # fmt: skip
    with pytest.raises(VaultStructureError) as err:
        import_ogbench(src, tmp_path / "v")
    assert "terminals: expected 9 timesteps (as observations), got 8 ([8])" in str(err.value)
    assert "qpos: expected bool, integer or floating-point data, got <U1" in str(err.value)
    # a scalar that is not OGBench's is skipped and recorded
    np.savez(src, **data, observation_interval=np.int32(1))
    vault = import_ogbench(src, tmp_path / "ok")
    assert vault.metadata["imported_from"]["skipped"] == ["observation_interval"]
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(VaultCorruptError, match=re.escape("expected a .npz file")):
        import_ogbench(tmp_path / "junk.npz", tmp_path / "v")
    # a damaged member (the validation file's): found at its end, neither vault is left
    good = _pair(tmp_path / "data")
    val = good.with_name(good.stem + "-val.npz")
    _damage(val, "observations.npy")
    with pytest.raises(VaultCorruptError, match=re.escape("member observations.npy")):
        import_ogbench(good, tmp_path / "w", block_bytes=1 << 16)
    assert not (tmp_path / "w").exists()
    assert not (tmp_path / "w-val").exists()


def _damage(path: Path, member: str) -> None:
    """Flip one byte in the middle of ``member``'s stored (compressed) data."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    raw = bytearray(path.read_bytes())
    at = info.header_offset  # the local header: its name and extra field lengths
    names, extra = (int.from_bytes(raw[at + i : at + i + 2], "little") for i in (26, 28))
    start = at + 30 + names + extra
    raw[start + info.compress_size // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
