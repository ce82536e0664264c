"""Vaults in xarray and dask: ``Vault.to_xarray()`` (lazy, dask-backed, exactly the committed
data, read through the vault's checks), the dimension names every new array carries, and a
vault at rest opened by plain ``xarray.open_zarr`` (a closing writer trims each array's shape
to the committed length). Statistics computed with dask equal ``vault stats`` on a local
vault and on the S3 test server."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import dask
import jax
import numpy as np
import pytest
import xarray as xr

import vault
import vault.read._xarray
from vault import Dataset, Vault, VaultArgumentError, VaultCorruptError, VaultReadError
from vault.format._records import DIMS_KEY, digest
from vault.testing import ACCESS_KEY, SECRET_KEY, S3TestServer

ROWS = 3


class Pair(NamedTuple):
    left: Any
    right: Any


EXAMPLE = {
    "obs": np.zeros(4, np.float32),
    "act": np.zeros(2, np.int8),
    "done": np.bool_(False),
    "reward": np.float32(0),
    "info": {"a.b": np.zeros((2, 3), np.int16), "t": (np.int32(0), np.zeros(5, np.uint8))},
    "pair": Pair(np.float64(0), np.zeros(2, np.int64)),
}
CHUNK = {"obs": [2, 4, 4], "info/a.b": [ROWS, 8, 1, 3]}


def block(start: int, n: int, seed: int = 0) -> dict[str, Any]:
    """``n`` timesteps from ``start``, with NaN and infinities in ``obs``."""
    rng = np.random.default_rng(seed + start)
    obs = rng.normal(1.0, 2.0, (ROWS, n, 4)).astype(np.float32)
    obs[0, 0, 1] = np.nan
    obs[1, n - 1, 2] = np.inf
    obs[2, n // 2, 0] = -np.inf
    return {
        "obs": obs,
        "act": rng.integers(-3, 3, (ROWS, n, 2)).astype(np.int8),
        "done": rng.random((ROWS, n)) < 0.25,
        "reward": rng.normal(size=(ROWS, n)).astype(np.float32),
        "info": {
            "a.b": rng.integers(-900, 900, (ROWS, n, 2, 3)).astype(np.int16),
            "t": (
                rng.integers(-5, 5, (ROWS, n)).astype(np.int32),
                rng.integers(0, 255, (ROWS, n, 5)).astype(np.uint8),
            ),
        },
        "pair": Pair(rng.normal(size=(ROWS, n)), rng.integers(0, 9, (ROWS, n, 2))),
    }


def make(where: Any, sizes: tuple[int, ...] = (7, 6, 9)) -> Vault:
    """A closed vault of every leaf kind, appended in ``sizes`` steps."""
    with Vault.create(
        where, EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done", reward_leaf="reward"
    ) as v:
        start = 0
        for n in sizes:
            v.append(block(start, n))
            start += n
    return Vault.open(where)


def variable(ds: xr.Dataset, leaf: str) -> xr.DataArray:
    found = [ds[k] for k in ds.data_vars if ds[k].attrs.get("leaf") == leaf]
    assert len(found) == 1, leaf
    return found[0]


def array_meta(path: Path, key: str) -> dict[str, Any]:
    return json.loads((path / key / "zarr.json").read_text())


# --------------------------------------------------------------------------- to_xarray
def test_to_xarray_holds_exactly_the_committed_data_of_every_leaf(tmp_path: Path) -> None:
    v = make(tmp_path / "v")
    ds = v.to_xarray()
    reference = v.read_numpy(leaves=v.leaf_names)
    assert ds.sizes["row"] == ROWS
    assert ds.sizes["time"] == v.committed_length == 22
    assert sorted(ds.data_vars) == sorted(
        [
            "act", "done", "info.a%2Eb", "info.t.0", "info.t.1", "obs", "pair.left", "pair.right",
            "reward", "episode_row", "episode_start", "episode_length", "episode_return",
            "episode_truncated", "episode_start_known",
        ]
    )  # fmt: skip
    for name in v.leaf_names:
        var = variable(ds, name)
        assert isinstance(var.data, dask.array.Array), name
        np.testing.assert_array_equal(var.values, reference[name])
        assert var.dtype == reference[name].dtype
    assert ds["obs"].dims == ("row", "time", "obs_0")
    assert ds["info.a%2Eb"].dims == ("row", "time", "info.a%2Eb_0", "info.a%2Eb_1")
    assert ds["pair.left"].dims == ("row", "time")
    assert ds.attrs == {
        "location": v.location,
        "commit_id": v.commit_id,
        "committed_length": 22,
    }


def test_dask_blocks_are_whole_stored_chunks(tmp_path: Path, monkeypatch: Any) -> None:
    v = make(tmp_path / "v")
    ds = v.to_xarray()  # blocks of about 4 MiB: each leaf here is one block along time
    assert ds["obs"].chunks == ((2, 1), (22,), (4,))  # the stored chunks' row blocks
    assert ds["info.a%2Eb"].chunks == ((ROWS,), (22,), (2,), (3,))  # whole items
    monkeypatch.setattr(vault.read._xarray, "BLOCK_BYTES", 1)  # one stored chunk per block
    one = v.to_xarray()
    assert one["obs"].chunks == ((2, 1), (4, 4, 4, 4, 4, 2), (4,))
    assert one["info.a%2Eb"].chunks == ((ROWS,), (8, 8, 6), (2,), (3,))
    monkeypatch.setattr(vault.read._xarray, "BLOCK_BYTES", 2 * 4 * 16 * 2)  # two obs chunks
    assert v.to_xarray()["obs"].chunks == ((2, 1), (8, 8, 6), (4,))
    part = one["obs"].isel(row=slice(2, 3), time=slice(8, 12)).values  # one block alone
    np.testing.assert_array_equal(part, v.read_numpy(rows=[2], start=8, stop=12)["obs"])
    np.testing.assert_array_equal(one["obs"].values, v.read_numpy()["obs"])


def test_episode_variables_equal_the_episode_table(tmp_path: Path) -> None:
    v = make(tmp_path / "v")
    table = v.episodes()
    ds = v.to_xarray()
    assert ds.sizes["episode"] == len(table) > 0
    np.testing.assert_array_equal(ds["episode_row"].values, table.row)
    np.testing.assert_array_equal(ds["episode_start"].values, table.start)
    np.testing.assert_array_equal(ds["episode_length"].values, table.length)
    np.testing.assert_array_equal(ds["episode_return"].values, table.returns)
    np.testing.assert_array_equal(ds["episode_truncated"].values, table.truncated)
    np.testing.assert_array_equal(ds["episode_start_known"].values, table.start_known)
    only = v.to_xarray(leaves=["obs", "info/a.b"], episodes=False)
    assert sorted(only.data_vars) == ["info.a%2Eb", "obs"]
    assert "episode" not in only.dims


def test_a_pinned_vault_converts_to_its_commit(tmp_path: Path) -> None:
    v = make(tmp_path / "v", sizes=(5, 6))
    pin = v.commit_id
    with Vault.open(tmp_path / "v", "a") as w:
        w.append(block(11, 10))
    old = Vault.open(tmp_path / "v", at=pin).to_xarray()
    assert old.sizes["time"] == 11
    assert old.attrs["commit_id"] == pin
    np.testing.assert_array_equal(old["obs"].values, v.read_numpy()["obs"])
    assert old.sizes["episode"] == len(v.episodes())
    snap = Vault.open(tmp_path / "v").snapshot  # the module function over a snapshot
    assert vault.to_xarray(snap)["obs"].shape == (ROWS, 21, 4)


def test_a_writer_converts_its_latest_commit(tmp_path: Path) -> None:
    with Vault.create(tmp_path / "v", EXAMPLE, rows=ROWS, chunk=CHUNK) as w:
        empty = w.to_xarray()
        assert empty.sizes["time"] == 0
        assert empty["obs"].values.shape == (ROWS, 0, 4)
        w.append(block(0, 5))
        ds = w.to_xarray()
        w.append(block(5, 5))  # a Dataset stays at the commit it was made from
        assert ds.sizes["time"] == 5
        np.testing.assert_array_equal(ds["obs"].values, block(0, 5)["obs"])
        assert w.to_xarray().sizes["time"] == 10


def test_the_dask_graph_runs_in_another_process(tmp_path: Path) -> None:
    v = make(tmp_path / "v")
    graph = tmp_path / "obs.pickle"
    graph.write_bytes(pickle.dumps(v.to_xarray()["obs"].data))
    script = (
        "import pickle, sys, numpy as np\n"
        "data = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "np.save(sys.argv[2], data.compute(scheduler='sync'))\n"
    )
    out = tmp_path / "obs.npy"
    subprocess.run([sys.executable, "-c", script, str(graph), str(out)], check=True)
    np.testing.assert_array_equal(np.load(out), v.read_numpy()["obs"])


def test_reads_keep_the_vaults_integrity_checks(tmp_path: Path) -> None:
    v = make(tmp_path / "v")
    ds = v.to_xarray()
    (tmp_path / "v/experience/obs/c/0/1/0").unlink()  # a lost chunk, never fill values
    with pytest.raises(VaultCorruptError, match=re.escape("experience/obs")):
        ds["obs"].isel(time=slice(4, 8)).values
    first = tmp_path / "v/experience/info/a.b/c/0/0/0/0"
    first.write_bytes((tmp_path / "v/experience/info/a.b/c/0/1/0/0").read_bytes())  # moved
    with pytest.raises(VaultCorruptError, match="not the chunk written there"):
        Vault.open(tmp_path / "v").to_xarray()["info.a%2Eb"].values


def test_bad_arguments_are_typed_errors(tmp_path: Path) -> None:
    v = make(tmp_path / "v", sizes=(4,))
    with pytest.raises(
        VaultArgumentError, match=re.escape("takes an open Vault, Dataset or Snapshot")
    ):
        vault.to_xarray(str(tmp_path / "v"))
    with pytest.raises(VaultReadError, match=re.escape("unknown leaves ['nope']")):
        v.to_xarray(leaves=["nope"])
    with pytest.raises(VaultArgumentError, match=re.escape("episodes must be True or False")):
        v.to_xarray(episodes="yes")  # type: ignore[arg-type]


def test_a_leaf_named_like_an_episode_variable_is_refused_with_episodes(tmp_path: Path) -> None:
    example = {"episode_return": np.float32(0), "done": np.bool_(False)}
    with Vault.create(tmp_path / "v", example, rows=2, done_leaf="done") as v:
        v.append({"episode_return": np.ones((2, 3), np.float32), "done": np.ones((2, 3), bool)})
        with pytest.raises(VaultArgumentError, match=re.escape("pass episodes=False")):
            v.to_xarray()
        ds = v.to_xarray(episodes=False)
        np.testing.assert_array_equal(ds["episode_return"].values, np.ones((2, 3)))


def test_without_xarray_the_error_names_the_extra(tmp_path: Path) -> None:
    make(tmp_path / "v", sizes=(4,))
    script = (
        "import sys\n"
        "sys.modules['xarray'] = None\n"
        "import vault\n"
        "v = vault.Vault.open(sys.argv[1])\n"
        "assert 'dask' not in sys.modules\n"
        "try:\n"
        "    v.to_xarray()\n"
        "except vault.VaultDependencyError as err:\n"
        "    assert isinstance(err, ImportError)\n"
        "    print(err)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "v")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert out.strip() == (
        "to_xarray needs 'xarray', which is not installed: "
        'pip install "rlvault[xarray]" (xarray and dask[array])'
    )


# --------------------------------------------------------------------------- statistics
def dask_stats(values: xr.DataArray) -> dict[str, Any]:
    """``vault stats``' numbers for one leaf's values, computed with dask: over finite values
    (booleans as 0/1), population std, counts of NaN and infinities."""
    floating = values.dtype.kind == "f"
    finite = np.isfinite(values) if floating else xr.ones_like(values, dtype=bool)
    clean = values.astype(np.float64).where(finite)
    none = 0 * finite.sum()
    lazy = {
        "finite": finite.sum(),
        "nan": np.isnan(values).sum() if floating else none,
        "inf": np.isinf(values).sum() if floating else none,
        "min": clean.min(),
        "max": clean.max(),
        "mean": clean.mean(),
        "std": clean.std(),
    }
    (done,) = dask.compute(lazy)
    out = {k: v.item() for k, v in done.items()}
    out["count"] = int(values.size)
    return out


def assert_stats_equal(got: dict[str, Any], expected: dict[str, Any]) -> None:
    for key in ("count", "finite", "nan", "inf", "min", "max"):
        assert got[key] == expected[key], (expected["name"], key)
    for key in ("mean", "std"):
        assert got[key] == pytest.approx(expected[key], rel=1e-9, abs=1e-12), key


def stats_json(location: str) -> dict[str, Any]:
    from typer.testing import CliRunner

    from vault.cli.app import app

    result = CliRunner().invoke(app, ["stats", location, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.fixture(params=["file", "s3"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "s3":
        server = request.getfixturevalue("s3_env")
        return f"s3://{server.bucket}/xarray-{uuid.uuid4().hex[:12]}/v"
    return str(tmp_path / "v")


def test_dask_statistics_equal_vault_stats(location: str) -> None:
    v = make(location)
    ds = v.to_xarray()
    doc = stats_json(location)
    assert [leaf["name"] for leaf in doc["leaves"]] == v.leaf_names
    for expected in doc["leaves"]:
        assert_stats_equal(dask_stats(variable(ds, expected["name"])), expected)
    assert doc["committed"] == ds.sizes["time"] == 22
    assert any(leaf["nan"] for leaf in doc["leaves"])
    assert any(leaf["inf"] for leaf in doc["leaves"])


def test_a_dataset_of_shards_is_a_tree_and_its_dask_statistics_equal_vault_stats(
    location: str,
) -> None:
    dataset = Dataset.create(location, EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done")
    with dataset.shard("a") as a:
        a.append(block(0, 7))
        a.append(block(7, 5))
    with dataset.shard("b", rows=2) as b:
        b.append(jax.tree.map(lambda x: x[:2], block(0, 9, seed=1)))
    opened = Dataset.open(location)
    tree = opened.to_xarray()
    assert isinstance(tree, xr.DataTree)
    assert list(tree["shards"].children) == ["a", "b"]
    assert tree.attrs["shards"] == ["a", "b"]
    assert tree["shards/a"].sizes["time"] == 12
    assert dict(tree["shards/b"].sizes)["row"] == 2
    for shard in ("a", "b"):
        node = tree[f"shards/{shard}"].to_dataset()
        reference = opened.read_numpy(shard, leaves=opened.leaf_names)
        for name in opened.leaf_names:
            np.testing.assert_array_equal(variable(node, name).values, reference[name])
        table = opened.vault(shard).episodes()
        np.testing.assert_array_equal(node["episode_start"].values, table.start)
        assert node.attrs["commit_id"] == opened.commit_ids[shard]
    doc = stats_json(location)
    for expected in doc["leaves"]:
        parts = [variable(tree[f"shards/{s}"].to_dataset(), expected["name"]) for s in "ab"]
        flat = dask.array.concatenate([p.data.reshape(-1) for p in parts])
        assert_stats_equal(dask_stats(xr.DataArray(flat, dims=["value"])), expected)


# --------------------------------------------------------------------------- plain xarray
def test_plain_open_zarr_of_a_closed_vault_shows_the_committed_data(tmp_path: Path) -> None:
    path = tmp_path / "v"
    v = make(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = xr.open_zarr(path, group="experience", consolidated=False)
        info = xr.open_zarr(path, group="experience/info", consolidated=False)
        index = xr.open_zarr(path, group="episodes", consolidated=False)
        tree = xr.open_datatree(path, engine="zarr", group="experience", consolidated=False)
    ours = v.to_xarray()
    assert ds.sizes["time"] == v.committed_length
    for name in ("obs", "done", "reward"):
        np.testing.assert_array_equal(ds[name].values, ours[name].values)
        assert ds[name].dims == ours[name].dims
    np.testing.assert_array_equal(info["a.b"].values, ours["info.a%2Eb"].values)
    assert info["a.b"].dims == ours["info.a%2Eb"].dims
    np.testing.assert_array_equal(tree["info/t/1"].values, ours["info.t.1"].values)
    assert tree["pair"].sizes["time"] == v.committed_length
    assert index["bounds"].dims == ("episode", "field")
    assert index.sizes["episode"] == len(v.episodes())
    np.testing.assert_array_equal(index["bounds"].values[:, 2], v.episodes().length)


def test_shapes_run_past_the_commit_while_a_writer_is_active(tmp_path: Path) -> None:
    path = tmp_path / "v"
    with Vault.create(path, EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done") as w:
        w.append(block(0, 5))
        reader = Vault.open(path)  # opened mid-write: its handles are the grown ones
        grown = {k: array_meta(path, f"experience/{k}")["shape"][1] for k in ("obs", "done")}
        assert min(grown.values()) > 5
        assert grown["obs"] != grown["done"]  # each leaf grows by its own chunk
    assert array_meta(path, "experience/obs")["shape"] == [ROWS, 5, 4]
    assert array_meta(path, "experience/info/a.b")["shape"] == [ROWS, 5, 2, 3]
    assert array_meta(path, "episodes/bounds")["shape"][0] == len(reader.episodes())
    np.testing.assert_array_equal(reader.read_numpy()["obs"], block(0, 5)["obs"])
    with Vault.open(path, "a") as again:  # the next writer grows them again
        again.append(block(5, 4))
        assert array_meta(path, "experience/obs")["shape"][1] > 9
    assert reader.refresh() == 9
    np.testing.assert_array_equal(reader.read_numpy()["obs"][:, 5:], block(5, 4)["obs"])
    assert array_meta(path, "experience/obs")["shape"] == [ROWS, 9, 4]
    assert vault.verify(path).ok
    assert Vault.open(path, at=1).read_numpy()["obs"].shape == (ROWS, 5, 4)


def test_a_killed_writer_leaves_longer_shapes_until_a_writer_closes(tmp_path: Path) -> None:
    path = tmp_path / "v"
    Vault.create(path, EXAMPLE, rows=ROWS, chunk=CHUNK).close()
    script = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_xarray import block\n"
        "from vault import Vault\n"
        "w = Vault.open(sys.argv[1], 'a')\n"
        "w.append(block(0, 6))\n"
        "os.kill(os.getpid(), 9)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(path)], check=False)
    assert proc.returncode == -9
    assert array_meta(path, "experience/obs")["shape"][1] > 6
    assert Vault.open(path).committed_length == 6
    Vault.open(path, "a").close()  # a writer that appends nothing still trims
    assert array_meta(path, "experience/obs")["shape"] == [ROWS, 6, 4]
    plain = xr.open_zarr(path, group="experience", consolidated=False)
    np.testing.assert_array_equal(plain["obs"].values, block(0, 6)["obs"])


@pytest.mark.parametrize("delay", [0.0, 0.001, 0.004])
def test_a_writer_killed_while_it_trims_leaves_its_last_commit(
    tmp_path: Path, delay: float
) -> None:
    path = tmp_path / "v"
    Vault.create(path, EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done").close()
    script = (
        "import os, sys, threading, time\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_xarray import block\n"
        "import vault\n"
        "def hook(point, info, step):\n"
        "    if point != 'trim':\n"
        "        return step()\n"
        "    threading.Timer(float(sys.argv[2]), os.kill, (os.getpid(), 9)).start()\n"
        "    step()\n"
        "    time.sleep(30)\n"
        "w = vault.Vault.open(sys.argv[1], 'a')\n"
        "w.append(block(0, 6))\n"
        "vault.set_fault_hook(hook)\n"
        "w.close()\n"
    )
    run = [sys.executable, "-c", script, str(path), str(delay)]
    assert subprocess.run(run, check=False).returncode == -9
    v = Vault.open(path)
    assert v.committed_length == 6
    np.testing.assert_array_equal(v.read_numpy()["obs"], block(0, 6)["obs"])
    assert vault.verify(path).ok
    for leaf in v.leaf_names:
        assert array_meta(path, f"experience/{leaf}")["shape"][1] >= 6
    Vault.open(path, "a").close()
    assert array_meta(path, "experience/obs")["shape"][1] == 6


def test_a_failed_trim_is_a_warning_and_leaves_the_data(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v"
    w = Vault.create(path, EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done")
    w.append(block(0, 5))

    def hook(point: str, info: dict[str, Any], step: Callable[[], Any]) -> Any:
        if point == "trim":
            raise OSError(f"injected at {point} {info}")
        return step()

    vault.set_fault_hook(hook)
    try:
        with pytest.warns(RuntimeWarning, match=re.escape("injected at trim {'length': 5")):
            w.close()
    finally:
        vault.set_fault_hook(None)
    assert vault.lock_holder(path) is None
    assert array_meta(path, "experience/obs")["shape"][1] > 5
    np.testing.assert_array_equal(Vault.open(path).read_numpy()["obs"], block(0, 5)["obs"])
    Vault.open(path, "a").close()
    assert array_meta(path, "experience/obs")["shape"][1] == 5


def test_plain_open_zarr_over_s3fs_at_rest(s3_env: S3TestServer) -> None:
    loc = f"s3://{s3_env.bucket}/xarray-{uuid.uuid4().hex[:12]}/v"
    v = make(loc, sizes=(5, 4))
    storage = {
        "key": ACCESS_KEY,
        "secret": SECRET_KEY,
        "client_kwargs": {"endpoint_url": s3_env.endpoint, "region_name": "us-east-1"},
    }
    ds = xr.open_zarr(loc, group="experience", consolidated=False, storage_options=storage)
    assert ds.sizes["time"] == 9
    np.testing.assert_array_equal(ds["obs"].values, v.read_numpy()["obs"])


def test_a_writer_that_lost_its_lease_leaves_the_shapes_to_the_new_one(
    s3_env: S3TestServer,
) -> None:
    loc = f"s3://{s3_env.bucket}/xarray-{uuid.uuid4().hex[:12]}/v"
    old = Vault.create(loc, EXAMPLE, rows=ROWS, chunk=CHUNK)
    old.append(block(0, 5))  # obs grown past 5 timesteps (whole time-chunks of 4)
    grown = Vault.open(loc).snapshot.array("obs").shape[1]
    assert grown > 5
    assert grown % 4 == 0
    vault.break_lock(loc)  # the old writer is presumed dead
    new = Vault.open(loc, "a")  # its handles hold that length: no resize below it
    old.close()  # no warning, and nothing cut under the new writer
    assert Vault.open(loc).snapshot.array("obs").shape[1] == grown
    new.append(block(5, 2))
    new.close()
    ds = Vault.open(loc).to_xarray()
    assert ds.sizes["time"] == 7
    np.testing.assert_array_equal(ds["obs"].values[:, 5:], block(5, 2)["obs"])


# --------------------------------------------------------------------------- dimension names
def test_new_arrays_carry_dimension_names_and_opening_checks_them(tmp_path: Path) -> None:
    path = tmp_path / "v"
    make(path, sizes=(4,))
    assert array_meta(path, "experience/info/a.b")["dimension_names"] == [
        "row", "time", "info.a%2Eb_0", "info.a%2Eb_1",
    ]  # fmt: skip
    assert array_meta(path, "experience/pair/right")["dimension_names"] == [
        "row", "time", "pair.right_0",
    ]  # fmt: skip
    assert array_meta(path, "episodes/bounds")["dimension_names"] == ["episode", "field"]
    root = json.loads((path / "zarr.json").read_text())
    assert root["attributes"]["rlvault"][DIMS_KEY] is True
    meta = array_meta(path, "experience/obs")
    meta["dimension_names"] = ["row", "time", "dim_0"]
    (path / "experience/obs/zarr.json").write_text(json.dumps(meta))
    with pytest.raises(VaultCorruptError, match=re.escape("array experience/obs: its metadata")):
        Vault.open(path)
    assert not vault.verify(path).ok


def test_an_older_vault_without_names_still_opens_and_converts(tmp_path: Path) -> None:
    path = tmp_path / "v"
    v = make(path, sizes=(6,))
    expected = v.read_numpy(leaves=v.leaf_names)
    for leaf in v.manifest.leaves:  # as earlier versions wrote them
        meta = array_meta(path, f"experience/{leaf.name}")
        meta["dimension_names"] = ["row", "time", *[f"dim_{i}" for i in range(len(leaf.shape))]]
        meta["shape"][1] = 64  # and longer than committed, as their writers left them
        (path / f"experience/{leaf.name}/zarr.json").write_text(json.dumps(meta))
    root = json.loads((path / "zarr.json").read_text())
    manifest = root["attributes"]["rlvault"]
    del manifest[DIMS_KEY]
    manifest["digest"] = digest(manifest)
    (path / "zarr.json").write_text(json.dumps(root))
    old = Vault.open(path)
    assert old.manifest.dimension_names is False
    ds = old.to_xarray()
    assert ds.sizes["time"] == 6
    assert ds["info.a%2Eb"].dims == ("row", "time", "info.a%2Eb_0", "info.a%2Eb_1")
    for name in old.leaf_names:
        np.testing.assert_array_equal(variable(ds, name).values, expected[name])
    with pytest.raises(ValueError, match="conflicting sizes for dimension"):
        xr.open_zarr(path, group="experience", consolidated=False)
    assert vault.verify(path).ok
    with Vault.open(path, "a") as w:  # a writer of this version appends and trims as usual
        w.append(block(6, 2))
    assert array_meta(path, "experience/obs")["shape"][1] == 8
    assert array_meta(path, "experience/obs")["dimension_names"] == ["row", "time", "dim_0"]


def test_import_vault_stays_free_of_xarray() -> None:
    script = "import sys, vault\nprint(sorted({'xarray', 'dask'} & set(sys.modules)))\n"
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "[]"
