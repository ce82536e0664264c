"""Where the xarray/dask and Grain readers meet other features: odd leaves (item axes, nested
containers, names with dots and escapes) of every stored dtype, chunks that cut rows and items
unevenly, dask blocks of any size, pins, a reader that refreshes while a writer appends,
datasets of shards of different rows and lengths (an empty one among them), seams, episode
ends, pickling (Grain's worker processes) and Grain's own ``MapDataset`` and ``DataLoader``.

Every value is compared with a trivially correct model: the data say where they belong
(``1000 * row + t`` plus a salt per shard), so the model of ``n`` committed timesteps is
``model(0, n)``, and the valid windows of a Grain source are enumerated by brute force over
it; ``read_numpy`` is checked against the model too.
"""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

import vault
import vault.read._xarray
import vault.stream._grain
from vault import Dataset, Vault, VaultReadError

xr = pytest.importorskip("xarray")
dask = pytest.importorskip("dask")
grain = pytest.importorskip("grain")


class Pair(NamedTuple):
    code: Any
    flag: Any


ROWS = 3
EXAMPLE = {
    "obs": np.zeros(5, np.float32),
    "img": np.zeros((3, 4), np.uint16),
    "flag": np.bool_(False),
    "i8": np.int8(0),
    "half": np.float16(0),
    "f64": np.zeros(2, np.float64),
    "info": {"x.y": np.zeros(3, np.int8), ".lead": np.float32(0)},
    "tup": (np.int32(0), [np.zeros(2, np.uint16)]),
    "done": np.bool_(False),
}
LEAVES = {  # leaf path -> (variable, item dims)
    "done": ("done", ()),
    "f64": ("f64", ("f64_0",)),
    "flag": ("flag", ()),
    "half": ("half", ()),
    "i8": ("i8", ()),
    "img": ("img", ("img_0", "img_1")),
    "info/%2Elead": ("info.%2Elead", ()),
    "info/x.y": ("info.x%2Ey", ("info.x%2Ey_0",)),
    "obs": ("obs", ("obs_0",)),
    "tup/0": ("tup.0", ()),
    "tup/1/0": ("tup.1.0", ("tup.1.0_0",)),
}
# chunks that cut rows (2 of 3) and items (2 of 5, 3 of 4) unevenly, and odd time chunks
CHUNK = {
    "obs": [2, 3, 2],
    "img": [1, 2, 2, 3],
    "flag": [2, 5],
    "half": [3, 4],
    "f64": [1, 7, 1],
    "done": [2, 3],
}


def code(lo: int, hi: int, rows: int = ROWS, salt: int = 0) -> np.ndarray:
    """``[rows, hi - lo]``: where each timestep belongs."""
    return salt + 1000 * np.arange(rows)[:, None] + np.arange(lo, hi)[None, :]


def model(lo: int, hi: int, rows: int = ROWS, salt: int = 0) -> dict[str, Any]:
    """History steps ``[lo, hi)`` of every leaf of ``EXAMPLE``, each value saying its place."""
    c = code(lo, hi, rows, salt)
    t = np.arange(lo, hi)[None, :] + np.zeros((rows, 1), np.int64)
    return {
        "obs": (c[..., None] + 0.125 * np.arange(5)).astype(np.float32),
        "img": (c[..., None, None] % 60_000 + 10 * np.arange(3)[:, None] + np.arange(4)).astype(
            np.uint16
        ),
        "flag": c % 3 == 0,
        "i8": (c % 200 - 100).astype(np.int8),
        "half": (t / 8 + np.arange(rows)[:, None]).astype(np.float16),
        "f64": (c[..., None] + 0.5 * np.arange(2)).astype(np.float64),
        "info": {
            "x.y": ((c[..., None] + np.arange(3)) % 127).astype(np.int8),
            ".lead": c.astype(np.float32),
        },
        "tup": ((2 * c).astype(np.int32), [(c[..., None] + np.arange(2)).astype(np.uint16)]),
        "done": (c * 7) % 5 == 4,
    }


def flat(tree: dict[str, Any]) -> dict[str, np.ndarray]:
    """``model``'s arrays by leaf path (as the vault names them)."""
    return {
        "done": tree["done"],
        "f64": tree["f64"],
        "flag": tree["flag"],
        "half": tree["half"],
        "i8": tree["i8"],
        "img": tree["img"],
        "info/%2Elead": tree["info"][".lead"],
        "info/x.y": tree["info"]["x.y"],
        "obs": tree["obs"],
        "tup/0": tree["tup"][0],
        "tup/1/0": tree["tup"][1][0],
    }


def cat(*parts: dict[str, Any]) -> dict[str, Any]:
    out = {k: np.concatenate([flat(p)[k] for p in parts], axis=1) for k in LEAVES}
    return out


def odd_vault(path: Path) -> tuple[Vault, str]:
    """A closed vault of 17 steps (appends of 11, then 6 after a restart seam at 11), and
    the id of its first commit."""
    v = Vault.create(str(path), EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done")
    v.append(model(0, 11))
    pin = v.commit_id
    v.append(model(11, 17), continues=False)
    v.close()
    return Vault.open(str(path)), pin


def variable(ds: Any, leaf: str) -> Any:
    found = [ds[k] for k in ds.variables if ds[k].attrs.get("leaf") == leaf]
    assert len(found) == 1, leaf
    return found[0]


# ------------------------------------------------------------------------------ xarray
@pytest.mark.parametrize("block_bytes", [None, 1])
def test_xarray_of_odd_leaves_is_the_model_at_any_dask_block_size(
    tmp_path: Path, monkeypatch: Any, block_bytes: int | None
) -> None:
    """Names, dims, dtypes and every value of every leaf; then subsets, reversed and strided
    selections, a rechunk and reductions along time, each equal to numpy on the model."""
    if block_bytes is not None:
        monkeypatch.setattr(vault.read._xarray, "BLOCK_BYTES", block_bytes)
    v, _ = odd_vault(tmp_path / "v")
    want = cat(model(0, 17))
    got = v.read_numpy(leaves=v.leaf_names)
    assert sorted(v.leaf_names) == sorted(LEAVES)
    ds = v.to_xarray()
    assert [s.at for s in v.seams] == [11]
    assert dict(ds.sizes)["time"] == ds.attrs["committed_length"] == 17
    for leaf, (name, items) in LEAVES.items():
        np.testing.assert_array_equal(got[leaf], want[leaf], err_msg=leaf)
        var = ds[name]
        assert var.attrs["leaf"] == leaf
        assert var.dims == ("row", "time", *items), leaf
        assert var.dtype == want[leaf].dtype, leaf
        assert isinstance(var.data, dask.array.Array)
        x = want[leaf]
        np.testing.assert_array_equal(var.values, x, err_msg=leaf)
        np.testing.assert_array_equal(
            var.isel(row=[2, 0], time=slice(3, 16, 4)).values, x[[2, 0]][:, 3:16:4]
        )
        np.testing.assert_array_equal(var.isel(time=slice(None, None, -1)).values, x[:, ::-1])
        np.testing.assert_array_equal(var.isel(time=-1, row=1).values, x[1, -1])
        np.testing.assert_array_equal(var.chunk({"time": 5, "row": 1}).values, x)
        np.testing.assert_array_equal(var.max("time").values, x.max(axis=1))
        if x.dtype.kind in "iu":  # integer sums are exact in any order
            np.testing.assert_array_equal(
                var.astype(np.int64).sum("time").values, x.astype(np.int64).sum(axis=1)
            )
        if x.dtype.kind == "f":
            wide = var.astype(np.float64)
            np.testing.assert_allclose(wide.mean("time").values, x.astype(np.float64).mean(1))
            np.testing.assert_allclose(wide.std("time").values, x.astype(np.float64).std(1))
    if block_bytes == 1:  # one stored time chunk per block, rows by the stored row blocks
        assert ds["obs"].chunks == ((2, 1), (3, 3, 3, 3, 3, 2), (5,))
        assert ds["img"].chunks == ((1, 1, 1), (2,) * 8 + (1,), (3,), (4,))


def test_dask_reads_nothing_until_computed_then_only_the_blocks_asked_for(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """``to_xarray`` of a vault and of a dataset reads no experience; a selection computes
    the blocks it touches (and only those); the episode index is read at once."""
    v, _ = odd_vault(tmp_path / "v")
    data = Dataset.create(str(tmp_path / "ds"), EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done")
    with data.shard("a") as shard:
        shard.append(model(0, 9))
    opened = Dataset.open(str(tmp_path / "ds"))
    calls: list[tuple[Any, int, int, tuple[str, ...]]] = []
    read = vault.read._xarray._read.read_numpy

    def spy(snap: Any, rows: Any, lo: int, hi: int, names: list[str], *a: Any, **k: Any) -> Any:
        calls.append((rows, lo, hi, tuple(names)))
        return read(snap, rows, lo, hi, names, *a, **k)

    monkeypatch.setattr(vault.read._xarray._read, "read_numpy", spy)
    monkeypatch.setattr(vault.read._xarray, "BLOCK_BYTES", 1)
    ds = v.to_xarray()
    tree = opened.to_xarray()
    assert calls == []
    part = ds["obs"].isel(row=2, time=slice(4, 6)).values  # one block: rows [2, 3), t [3, 6)
    np.testing.assert_array_equal(part, cat(model(0, 17))["obs"][2, 4:6])
    assert calls == [(slice(2, 3), 3, 6, ("obs",))]
    calls.clear()
    node = tree["shards/a"]["img"].isel(row=0, time=slice(2, 4)).values
    np.testing.assert_array_equal(node, model(0, 9)["img"][0, 2:4])
    assert calls == [(slice(0, 1), 2, 4, ("img",))]


def test_xarray_of_a_pin_and_of_a_refreshed_reader_while_a_writer_appends(
    tmp_path: Path,
) -> None:
    """A reader's Dataset stays at its commit after the writer appends; after refresh() the
    reader converts the new commit; the pin converts its own (episodes included), and a
    pickled graph of the old commit computes the old data once the vault has grown."""
    _v, pin = odd_vault(tmp_path / "v")
    reader = Vault.open(str(tmp_path / "v"))
    before = reader.to_xarray()
    graph = pickle.dumps(before["img"].data)
    with Vault.open(str(tmp_path / "v"), "a") as w:
        w.append(model(17, 23))
        w.append(model(23, 26), continues=False)
    assert before.sizes["time"] == 17
    np.testing.assert_array_equal(before["img"].values, cat(model(0, 17))["img"])
    assert reader.refresh() == 26
    after = reader.to_xarray()
    assert after.attrs["commit_id"] != before.attrs["commit_id"]
    whole = cat(model(0, 26))
    for leaf, (name, _) in LEAVES.items():
        np.testing.assert_array_equal(after[name].values, whole[leaf], err_msg=leaf)
    vault.read._xarray._OPENED.clear()  # the unpickled graph reopens its commit
    np.testing.assert_array_equal(pickle.loads(graph).compute(), cat(model(0, 17))["img"])
    pinned = Vault.open(str(tmp_path / "v"), at=pin)
    old = pinned.to_xarray()
    assert old.attrs["commit_id"] == pin
    assert old.sizes["time"] == 11
    for leaf, (name, _) in LEAVES.items():
        np.testing.assert_array_equal(old[name].values, cat(model(0, 11))[leaf], err_msg=leaf)
    for table, ds in (
        (pinned.episodes(), old),
        (Vault.open(str(tmp_path / "v")).episodes(), after),
    ):
        assert ds.sizes["episode"] == len(table) > 0
        np.testing.assert_array_equal(ds["episode_row"].values, table.row)
        np.testing.assert_array_equal(ds["episode_start"].values, table.start)
        np.testing.assert_array_equal(ds["episode_length"].values, table.length)
        np.testing.assert_array_equal(ds["episode_start_known"].values, table.start_known)


def test_a_tree_of_uneven_shards_equals_each_shard_and_its_episodes(tmp_path: Path) -> None:
    """Shards of 3, 2 and 3 rows and 13, 7 and 0 timesteps (one with a seam): each node holds
    exactly its shard's data, dims and episode index; ``leaves=`` selects in every node."""
    data = Dataset.create(str(tmp_path / "ds"), EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done")
    with data.shard("a") as a:
        a.append(model(0, 8, salt=100_000))
        a.append(model(8, 13, salt=100_000), continues=False)
    with data.shard("b.2", rows=2) as b:
        b.append(model(0, 7, rows=2, salt=200_000))
    data.shard("c").close()  # a shard that holds no timestep yet
    opened = Dataset.open(str(tmp_path / "ds"))
    tree = opened.to_xarray()
    assert tree.attrs["shards"] == opened.shards == ["a", "b.2", "c"]
    wants = {
        "a": cat(model(0, 13, salt=100_000)),
        "b.2": cat(model(0, 7, rows=2, salt=200_000)),
        "c": cat(model(0, 0)),
    }
    for name, want in wants.items():
        node = tree[f"shards/{name}"].to_dataset()
        assert node.attrs["commit_id"] == opened.commit_ids[name]
        assert dict(node.sizes)["time"] == opened.committed_lengths[name]
        for leaf, (var, items) in LEAVES.items():
            assert node[var].dims == ("row", "time", *items)
            np.testing.assert_array_equal(node[var].values, want[leaf], err_msg=f"{name} {leaf}")
        table = opened.vault(name).episodes()
        np.testing.assert_array_equal(node["episode_row"].values, table.row)
        np.testing.assert_array_equal(node["episode_start"].values, table.start)
    some = opened.to_xarray(leaves=["img", "info/x.y"], episodes=False)
    for name, want in wants.items():
        node = some[f"shards/{name}"].to_dataset()
        assert sorted(node.data_vars) == ["img", "info.x%2Ey"]
        np.testing.assert_array_equal(node["info.x%2Ey"].values, want["info/x.y"])


@pytest.mark.parametrize("name", ["time", "row", "episode", "obs_0"])
def test_a_leaf_named_like_a_dimension_is_refused_not_turned_into_a_coordinate(
    tmp_path: Path, name: str
) -> None:
    """xarray turns a variable named like a dimension into a coordinate (out of
    ``data_vars``, silently dropped by ``ds.mean("time")``): ``to_xarray`` refuses such a leaf
    with a typed error naming it, and reads the vault once it is left out."""
    example = {"obs": np.zeros(3, np.float32), name: np.float32(0), "done": np.bool_(False)}
    c = code(0, 6, rows=2)
    with Vault.create(str(tmp_path / "v"), example, rows=2, done_leaf="done") as v:
        v.append(
            {
                "obs": np.repeat(c[..., None], 3, axis=2).astype(np.float32),
                name: c.astype(np.float32),
                "done": c % 3 == 2,
            }
        )
    reader = Vault.open(str(tmp_path / "v"))
    with pytest.raises(
        vault.VaultArgumentError, match=re.escape(f"leaves ['{name}'] have the names of dimensions")
    ):
        reader.to_xarray()
    ds = reader.to_xarray(leaves=["done", "obs"])
    episode_vars = ["row", "start", "length", "return", "truncated", "start_known"]
    assert sorted(ds.data_vars) == sorted(["done", "obs", *(f"episode_{v}" for v in episode_vars)])
    np.testing.assert_array_equal(ds.mean("time")["obs"].values[..., 0], c.mean(axis=1))


def test_an_empty_dataset_refuses_unknown_leaves_in_to_xarray(tmp_path: Path) -> None:
    Dataset.create(str(tmp_path / "ds"), EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done")
    empty = Dataset.open(str(tmp_path / "ds"))
    assert empty.shards == []
    with pytest.raises(VaultReadError, match=re.escape("unknown leaves ['nope']")):
        empty.to_xarray(leaves=["nope"])


# ------------------------------------------------------------------------------- Grain
SEQ_CASES = [
    # (sequence_length, stride, episode_aware, rows)
    (3, 2, True, None),
    (4, 3, False, [1, 0]),
    (2, 1, True, slice(None, None, -1)),
    (5, 1, True, slice(0, 2)),
]


def uneven_dataset(root: Path) -> tuple[Dataset, list[dict[str, np.ndarray]]]:
    """Shards a (3 rows, 13 steps), b (2 rows, 11 steps, a restart seam at 4), c (3 rows,
    2 steps) and d (3 rows, none); and the model of each."""
    data = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done")
    with data.shard("a") as a:
        a.append(model(0, 6, salt=100_000))
        a.append(model(6, 13, salt=100_000))
    with data.shard("b", rows=2) as b:
        b.append(model(0, 4, rows=2, salt=200_000))
        b.append(model(4, 11, rows=2, salt=200_000), continues=False)
    with data.shard("c") as c:
        c.append(model(0, 2, salt=300_000))
    data.shard("d").close()
    models = [
        cat(model(0, 13, salt=100_000)),
        cat(model(0, 11, rows=2, salt=200_000)),
        cat(model(0, 2, salt=300_000)),
        cat(model(0, 0)),
    ]
    return Dataset.open(str(root)), models


def brute_windows(
    models: list[dict[str, np.ndarray]],
    seams: list[list[int]],
    seq: int,
    stride: int,
    aware: bool,
    rows: Any,
) -> list[tuple[int, int, int]]:
    """Every (source, row, start) in Grain's numbering: source by source, row by row (in the
    selection's order), in time order."""
    out = []
    for s, m in enumerate(models):
        n_rows, length = m["done"].shape
        for r in np.arange(n_rows)[slice(None) if rows is None else rows].tolist():
            for t in range(0, length - seq + 1, stride):
                if any(t < a <= t + seq - 1 for a in seams[s]):
                    continue
                if aware and m["done"][r, t : t + seq - 1].any():
                    continue
                out.append((s, r, t))
    return out


@pytest.mark.parametrize(("seq", "stride", "aware", "rows"), SEQ_CASES)
def test_grain_records_over_uneven_shards_are_the_model_windows_the_stream_yields(
    tmp_path: Path, seq: int, stride: int, aware: bool, rows: Any
) -> None:
    """``where(i)`` numbers the brute-force windows; every record is the model's window in the
    vault's structure; the stream (not shuffled) yields the same set of windows."""
    data, models = uneven_dataset(tmp_path / "ds")
    seams = [[s.at for s in v.seams] for _, v in data.vaults()]
    assert seams == [[], [4], [], []]
    source = vault.grain_source(
        data, seq, stride=stride, episode_aware=aware, rows=rows, cache_bytes=200
    )
    want = brute_windows(models, seams, seq, stride, aware, rows)
    assert len(source) == len(want) > 0
    assert [source.where(i) for i in range(len(source))] == want
    for i, (s, r, t) in enumerate(want):
        record = source[i]
        assert set(record) == set(EXAMPLE)
        for leaf, x in flat(record).items():
            np.testing.assert_array_equal(x, models[s][leaf][r, t : t + seq], err_msg=leaf)
        assert isinstance(record["tup"], tuple)
        assert isinstance(record["tup"][1], list)
    with data.as_dataset(
        4, seq, stride=stride, episode_aware=aware, rows=rows, shuffle=False,
        drop_remainder=False, prefetch=0,
    ) as stream:  # fmt: skip
        streamed = [
            (int(s), int(r), int(t))
            for b in stream
            for s, r, t in zip(b.source, b.row, b.start, strict=True)
        ]
    assert sorted(streamed) == sorted(want)


def test_grain_reads_each_chunk_once_in_index_order_and_nothing_at_construction(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Without episode_aware a source reads nothing when made; reading every record in order
    decodes each (row block, time chunk) once; episode_aware reads the end leaf once."""
    v, _ = odd_vault(tmp_path / "v")
    calls: list[str] = []
    read = vault.stream._grain._read.read_numpy

    def spy(snap: Any, rows: Any, lo: int, hi: int, names: list[str], *a: Any, **k: Any) -> Any:
        calls.append(repr((rows, lo, hi, names)))
        return read(snap, rows, lo, hi, names, *a, **k)

    monkeypatch.setattr(vault.stream._grain._read, "read_numpy", spy)
    source = vault.grain_source(v, 3, leaves=["img", "obs"])
    assert calls == []
    whole = cat(model(0, 17))
    for i in range(len(source)):
        _s, r, t = source.where(i)
        np.testing.assert_array_equal(source[i]["img"], whole["img"][r, t : t + 3])
    # img is the heaviest leaf: chunks of 1 row x 2 steps -> 3 rows x 9 time chunks
    assert len(calls) == len(set(calls)) == 3 * 9
    calls.clear()
    vault.grain_source(v, 3, episode_aware=True, rows=[2, 0])
    assert calls == [repr(([2, 0], 0, 16, ["done"]))]


def test_grain_pickles_pins_and_map_dataset_batches_over_a_growing_dataset(
    tmp_path: Path,
) -> None:
    """A source over a dataset pickles to its pinned commits (the shard grows meanwhile);
    Grain's MapDataset batches nested records as numpy stacks of the records; out of range
    and negative indices are IndexError."""
    data, models = uneven_dataset(tmp_path / "ds")
    source = vault.grain_source(data, 2, episode_aware=True)
    n = len(source)
    with Dataset.create(
        str(tmp_path / "ds"), EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done", exist_ok=True
    ).shard("a") as a:
        a.append(model(13, 20, salt=100_000))
    copy = pickle.loads(pickle.dumps(source))
    assert repr(copy) == repr(source)
    assert len(copy) == n
    assert [copy.where(i) for i in range(n)] == [source.where(i) for i in range(n)]
    for i in range(0, n, 5):
        s, r, t = copy.where(i)
        for leaf, x in flat(copy[i]).items():
            np.testing.assert_array_equal(x, models[s][leaf][r, t : t + 2], err_msg=leaf)
    assert len(vault.grain_source(Dataset.open(str(tmp_path / "ds")), 2, episode_aware=True)) > n
    batches = list(grain.MapDataset.source(copy).batch(8))
    assert len(batches) == -(-n // 8)
    for k, batch in enumerate(batches):
        idx = range(8 * k, min(8 * k + 8, n))
        places = [copy.where(i) for i in idx]
        for leaf in LEAVES:
            stacked = np.stack([models[s][leaf][r, t : t + 2] for s, r, t in places])
            np.testing.assert_array_equal(flat(batch)[leaf], stacked, err_msg=leaf)
    for bad in (n, -1, np.int64(-n)):
        with pytest.raises(IndexError, match=re.escape(f"record {int(bad)} out of range [0, {n})")):
            copy[bad]


CHILD = textwrap.dedent(
    """
    import pickle, sys
    import numpy as np
    from absl import flags
    import grain

    flags.FLAGS.mark_as_parsed()
    if __name__ == "__main__":
        source = pickle.loads(open(sys.argv[1], "rb").read())
        sampler = grain.samplers.IndexSampler(len(source), shuffle=False, num_epochs=1)
        loader = grain.DataLoader(
            data_source=source, sampler=sampler,
            operations=[grain.transforms.Batch(5, drop_remainder=False)], worker_count=1,
        )
        codes = np.concatenate([np.asarray(b["tup"][0]) for b in loader])
        np.save(sys.argv[2], codes)
    """
)


def test_a_grain_data_loader_worker_process_reads_the_pinned_records(tmp_path: Path) -> None:
    """A DataLoader with a worker process (which unpickles the source) yields every record of
    the pinned commit in index order, after the vault has grown."""
    _v, pin = odd_vault(tmp_path / "v")
    pinned = Vault.open(str(tmp_path / "v"), at=pin)
    source = vault.grain_source(pinned, 3, stride=2)
    with Vault.open(str(tmp_path / "v"), "a") as w:
        w.append(model(17, 30))
    (tmp_path / "source.pickle").write_bytes(pickle.dumps(source))
    (tmp_path / "child.py").write_text(CHILD)
    out = tmp_path / "codes.npy"
    subprocess.run(
        [sys.executable, str(tmp_path / "child.py"), str(tmp_path / "source.pickle"), str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    got = np.load(out)
    want = [2 * code(0, 11)[r, t : t + 3] for r in range(ROWS) for t in range(0, 9, 2)]
    np.testing.assert_array_equal(got, np.stack(want))


def test_grain_source_of_a_dataset_without_shards_says_it_has_no_window(tmp_path: Path) -> None:
    Dataset.create(str(tmp_path / "ds"), EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done")
    empty = Dataset.open(str(tmp_path / "ds"))
    with pytest.raises(vault.VaultNotFoundError, match=re.escape("the dataset has no shard yet")):
        empty.as_dataset(2, 2)  # the stream's words for it
    with pytest.raises((VaultReadError, vault.VaultNotFoundError)):
        vault.grain_source(empty, 2)
