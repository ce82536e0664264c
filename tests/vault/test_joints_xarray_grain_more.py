"""More joints of the ecosystem readers (``to_xarray``, ``grain_source``, ``iter_windows``)
with pins and tags: a dataset of shards opened at a tag (shards of different rows and
lengths, seams, a shard joining after the tag), readers made before the shards grew and read
only afterwards (lazily), pickled dask graphs and Grain sources reopened in-process and in a
fresh process without the AWS environment (S3), a writer thread appending while the pinned
readers compute, dask chunks against the stored chunks, the episode variables against a
brute-force episode model, and typed errors that name the argument.

The structure has escaped leaf names (a key with a space, a dotted key holding a key with
``/``), a tuple holding a list, and bool, uint8, int64, float16 and float32 leaves. Every value
says where it belongs (``salt + 1000 * row + t``), so the model of a shard's ``n`` committed
timesteps is ``model(0, n)``; the valid Grain windows and the episodes are enumerated by brute
force over the model.
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vault
import vault.read._xarray
from vault import Dataset, Vault, VaultPinError, VaultReadError, VaultStructureError

xr = pytest.importorskip("xarray")
dask = pytest.importorskip("dask")

ROWS = 3
EXAMPLE = {
    "obs pos": np.zeros(2, np.float32),
    "rgb": np.zeros((2, 2), np.uint8),
    "cfg.v": {"a/b": np.int64(0)},
    "pair": (np.float16(0), [np.bool_(False)]),
    "r": np.float32(0),
    "done": np.bool_(False),
    "tr": np.bool_(False),
}
LEAVES = {  # leaf path -> (variable, item dims)
    "obs%20pos": ("obs%20pos", ("obs%20pos_0",)),
    "rgb": ("rgb", ("rgb_0", "rgb_1")),
    "cfg.v/a%2Fb": ("cfg%2Ev.a%2Fb", ()),
    "pair/0": ("pair.0", ()),
    "pair/1/0": ("pair.1.0", ()),
    "r": ("r", ()),
    "done": ("done", ()),
    "tr": ("tr", ()),
}
CHUNK: dict[str, Sequence[int]] = {  # chunks that cut rows and items unevenly, odd time chunks
    "obs%20pos": [2, 3, 1],
    "rgb": [1, 4, 2, 1],
    "cfg.v/a%2Fb": [2, 5],
    "pair/0": [3, 2],
    "done": [2, 3],
}
SALT = {"a": 100_000, "b": 200_000, "c": 300_000}


def code(lo: int, hi: int, rows: int, salt: int) -> np.ndarray:
    return salt + 1000 * np.arange(rows)[:, None] + np.arange(lo, hi)[None, :]


def model(lo: int, hi: int, rows: int = ROWS, salt: int = 0) -> dict[str, Any]:
    """Steps ``[lo, hi)`` of every leaf, each value saying its place."""
    c = code(lo, hi, rows, salt)
    t = np.arange(lo, hi)[None, :] + np.zeros((rows, 1), np.int64)
    return {
        "obs pos": (c[..., None] + 0.5 * np.arange(2)).astype(np.float32),
        "rgb": ((c[..., None, None] + 2 * np.arange(2)[:, None] + np.arange(2)) % 251).astype(
            np.uint8
        ),
        "cfg.v": {"a/b": (-3 * c).astype(np.int64)},
        "pair": ((t / 4 + np.arange(rows)[:, None]).astype(np.float16), [c % 3 == 0]),
        "r": (c % 5).astype(np.float32),
        "done": c % 7 == 6,
        "tr": c % 11 == 10,
    }


def flat(tree: Any) -> dict[str, np.ndarray]:
    """A record, state or model by leaf path (as the vault names them)."""
    return {
        "obs%20pos": np.asarray(tree["obs pos"]),
        "rgb": np.asarray(tree["rgb"]),
        "cfg.v/a%2Fb": np.asarray(tree["cfg.v"]["a/b"]),
        "pair/0": np.asarray(tree["pair"][0]),
        "pair/1/0": np.asarray(tree["pair"][1][0]),
        "r": np.asarray(tree["r"]),
        "done": np.asarray(tree["done"]),
        "tr": np.asarray(tree["tr"]),
    }


def shard_model(name: str, n: int, rows: int) -> dict[str, np.ndarray]:
    return flat(model(0, n, rows, SALT[name]))


def tagged_models() -> list[dict[str, np.ndarray]]:
    return [shard_model(name, n, rows) for name, (rows, n, _) in TAGGED.items()]


def brute_episodes(m: dict[str, np.ndarray], seams: list[int]) -> list[tuple[Any, ...]]:
    """Complete episodes ``(row, start, length, return, truncated)``: an episode ends at a
    done or truncated step; one still open at a seam is cut off there (not complete)."""
    out = []
    rows, n = m["done"].shape
    for r in range(rows):
        start = 0
        for t in range(n):
            if t in seams:
                start = t
            if m["done"][r, t] or m["tr"][r, t]:
                ret = float(m["r"][r, start : t + 1].astype(np.float64).sum())
                out.append(
                    (r, start, t + 1 - start, ret, bool(m["tr"][r, t] and not m["done"][r, t]))
                )
                start = t + 1
    return sorted(out)


def brute_windows(
    models: list[dict[str, np.ndarray]],
    seams: list[list[int]],
    seq: int,
    stride: int,
    aware: bool,
    rows: Any,
) -> list[tuple[int, int, int]]:
    """Every valid ``(source, row, start)`` in Grain's numbering."""
    out = []
    for s, m in enumerate(models):
        n_rows, n = m["done"].shape
        for r in np.arange(n_rows)[slice(None) if rows is None else rows].tolist():
            for t in range(0, n - seq + 1, stride):
                if any(t < a <= t + seq - 1 for a in seams[s]):
                    continue
                if aware and (m["done"][r, t : t + seq - 1] | m["tr"][r, t : t + seq - 1]).any():
                    continue
                out.append((s, r, t))
    return out


# the tagged dataset: shard a (3 rows, 14 steps, a seam at 9), b (2 rows, 7 steps); after the
# tag a grows to 22, b to 10 (a seam at 7) and shard c joins
TAGGED = {"a": (3, 14, [9]), "b": (2, 7, [])}


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The dataset, and readers made at the tag's commits before the shards grew (nothing of
    their experience read yet)."""
    root = str(tmp_path_factory.mktemp("xg") / "ds")
    data = Dataset.create(
        root, EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done", truncated_leaf="tr",
        reward_leaf="r",
    )  # fmt: skip
    with data.shard("a") as a:
        a.append(model(0, 6, salt=SALT["a"]))
        a.append(model(6, 9, salt=SALT["a"]))
        a.append(model(9, 14, salt=SALT["a"]), continues=False)
    with data.shard("b", rows=2) as b:
        b.append(model(0, 4, rows=2, salt=SALT["b"]))
        b.append(model(4, 7, rows=2, salt=SALT["b"]))
    before = Dataset.open(root)
    tagged = before.tag("T")
    made = {
        "tree": before.to_xarray(),
        "source": vault.grain_source(before, 3, stride=2, episode_aware=True),
        "windows": before.iter_windows(4, rows=[1, 0], prefetch=0),
    }
    made["graphs"] = pickle.dumps({n: made["tree"][f"shards/{n}"]["rgb"].data for n in "ab"})
    made["source_pickle"] = pickle.dumps(made["source"])
    with data.shard("a") as a:
        a.append(model(14, 22, salt=SALT["a"]))
    with data.shard("b") as b:
        b.append(model(7, 10, rows=2, salt=SALT["b"]), continues=False)
    with data.shard("c") as c:
        c.append(model(0, 5, salt=SALT["c"]))
    return {"root": root, "tagged": tagged, **made}


def node_equals_model(node: Any, name: str, rows: int, n: int) -> None:
    want = shard_model(name, n, rows)
    assert dict(node.sizes)["time"] == node.attrs["committed_length"] == n
    assert dict(node.sizes)["row"] == rows
    for leaf, (var, items) in LEAVES.items():
        got = node[var]
        assert got.attrs["leaf"] == leaf
        assert got.dims == ("row", "time", *items), leaf
        assert got.dtype == want[leaf].dtype, leaf
        assert isinstance(got.data, dask.array.Array), leaf
        np.testing.assert_array_equal(got.values, want[leaf], err_msg=f"{name} {leaf}")


# ------------------------------------------------------------------------------ xarray
def test_a_tagged_dataset_converts_to_its_tagged_shards_after_they_grew(
    grown: dict[str, Any],
) -> None:
    """``Dataset.open(root, at=TAG).to_xarray()`` holds the tagged shards only (not the one
    that joined later), each exactly at its tagged commit, equal to the model and to
    ``read_numpy`` at that pin; the latest dataset shows the growth."""
    pinned = Dataset.open(grown["root"], at="T")
    tree = pinned.to_xarray()
    assert tree.attrs["shards"] == pinned.shards == ["a", "b"]
    assert sorted(tree.children["shards"].children) == ["a", "b"]
    for name, (rows, n, _) in TAGGED.items():
        node = tree[f"shards/{name}"].to_dataset()
        assert node.attrs["commit_id"] == grown["tagged"][name] == pinned.commit_ids[name]
        node_equals_model(node, name, rows, n)
        at_pin = Vault.open(node.attrs["location"], at=node.attrs["commit_id"])
        for leaf, x in at_pin.read_numpy(leaves=list(LEAVES)).items():
            np.testing.assert_array_equal(node[LEAVES[leaf][0]].values, x, err_msg=leaf)
    latest = Dataset.open(grown["root"])
    assert latest.committed_lengths == {"a": 22, "b": 10, "c": 5}
    now = latest.to_xarray()
    node_equals_model(now["shards/c"].to_dataset(), "c", ROWS, 5)
    node_equals_model(now["shards/a"].to_dataset(), "a", ROWS, 22)


def test_a_tree_made_before_the_shards_grew_computes_the_commits_it_was_made_from(
    grown: dict[str, Any],
) -> None:
    """The tree was made (lazily, nothing read) before two shards grew and a third joined;
    computed only now it gives the data of its commits, never newer data; its graphs,
    pickled back then, reopen those commits (the per-process cache emptied)."""
    tree = grown["tree"]
    assert tree.attrs["shards"] == ["a", "b"]
    for name, (rows, n, _) in TAGGED.items():
        node = tree[f"shards/{name}"].to_dataset()
        assert node.attrs["commit_id"] == grown["tagged"][name]
        node_equals_model(node, name, rows, n)
        # a reduction along time over every leaf: dask, block by block, against numpy
        want = shard_model(name, n, rows)
        np.testing.assert_array_equal(
            node["cfg%2Ev.a%2Fb"].sum("time").values, want["cfg.v/a%2Fb"].sum(axis=1)
        )
        np.testing.assert_array_equal(node["pair.1.0"].any("time").values, want["pair/1/0"].any(1))
    vault.read._xarray._OPENED.clear()
    graphs = pickle.loads(grown["graphs"])
    for name, (rows, n, _) in TAGGED.items():
        np.testing.assert_array_equal(graphs[name].compute(), shard_model(name, n, rows)["rgb"])
    # the graph pickles as location and commit: small, even after its values were read
    assert len(pickle.dumps(tree["shards/a"]["rgb"].data)) < 8192


def test_dask_blocks_follow_the_stored_chunks_of_every_shard(grown: dict[str, Any]) -> None:
    """Row blocks are the stored row chunks, time blocks whole numbers of stored time chunks
    (the last one cut at the committed length), items whole; shards of 2 and 3 rows alike."""
    tree = Dataset.open(grown["root"]).to_xarray()
    for name in ["a", "b", "c"]:
        node = tree[f"shards/{name}"].to_dataset()
        v = Vault.open(node.attrs["location"])
        for leaf, (var, _) in LEAVES.items():
            spec = v.snapshot.manifest.leaf(leaf)
            row_chunk, time_chunk = int(spec.chunk[0]), int(spec.chunk[1])
            rows, time, *items = node[var].chunks
            assert sum(rows) == v.rows, (name, leaf)
            assert all(r == row_chunk for r in rows[:-1]), (name, leaf)
            assert rows[-1] == v.rows - row_chunk * (len(rows) - 1), (name, leaf)
            edges = np.cumsum(time)[:-1]
            assert all(e % time_chunk == 0 for e in edges), (name, leaf, time)
            assert sum(time) == v.committed_length
            assert [tuple(c) for c in items] == [(d,) for d in spec.shape], (name, leaf)


def test_episode_variables_of_the_tag_are_the_brute_force_episodes(grown: dict[str, Any]) -> None:
    """The episode variables of each tagged shard are its complete episodes (done or
    truncated ends, none across a seam), returns the model's reward sums, which dask computes
    alike from the lazy reward variable."""
    tree = Dataset.open(grown["root"], at="T").to_xarray()
    for name, (rows, n, seams) in TAGGED.items():
        node = tree[f"shards/{name}"].to_dataset()
        got = sorted(
            zip(
                node["episode_row"].values.tolist(),
                node["episode_start"].values.tolist(),
                node["episode_length"].values.tolist(),
                node["episode_return"].values.tolist(),
                node["episode_truncated"].values.tolist(),
                strict=True,
            )
        )
        want = brute_episodes(shard_model(name, n, rows), seams)
        assert len(want) > 3
        assert got == want, name
        assert node["episode_start_known"].values.all()
        for r, s, length, ret, _ in got:
            lazy = node["r"].isel(row=r, time=slice(s, s + length)).astype(np.float64).sum()
            assert float(lazy) == ret


# ------------------------------------------------------------------------------- Grain
@pytest.mark.parametrize(
    ("seq", "stride", "aware", "rows"),
    [(3, 2, True, None), (2, 1, False, [1, 0]), (4, 3, True, slice(0, 2))],
)
def test_grain_records_of_the_tag_are_the_model_windows(
    grown: dict[str, Any], seq: int, stride: int, aware: bool, rows: Any
) -> None:
    """A source over the tagged dataset (shards of 3 and 2 rows, seams, done and truncated
    ends) numbers exactly the brute-force windows; each record is the model's window; a
    pickled copy (a Grain worker's) gives the same records after the shards grew."""
    pinned = Dataset.open(grown["root"], at="T")
    source = vault.grain_source(pinned, seq, stride=stride, episode_aware=aware, rows=rows)
    models = tagged_models()
    want = brute_windows(models, [s for _, _, s in TAGGED.values()], seq, stride, aware, rows)
    assert len(source) == len(want) > 0
    copy = pickle.loads(pickle.dumps(source))
    assert [copy.where(i) for i in range(len(copy))] == want
    for i, (s, r, t) in enumerate(want):
        for got in (source[i], copy[i]):
            assert isinstance(got["pair"], tuple)
            assert isinstance(got["pair"][1], list)
            for leaf, x in flat(got).items():
                assert x.dtype == models[s][leaf].dtype, leaf
                np.testing.assert_array_equal(x, models[s][leaf][r, t : t + seq], err_msg=leaf)


def test_a_grain_source_made_before_growth_stays_at_its_commits(grown: dict[str, Any]) -> None:
    """The source (and its pickle) made before the shards grew and a shard joined numbers the
    old windows; a record changed by its reader does not change what later reads return."""
    models = tagged_models()
    want = brute_windows(models, [s for _, _, s in TAGGED.values()], 3, 2, True, None)
    for source in (grown["source"], pickle.loads(grown["source_pickle"])):
        assert len(source) == len(want)
        assert [source.where(i) for i in range(len(source))] == want
        for i, (s, r, t) in enumerate(want):
            record = source[i]
            np.testing.assert_array_equal(record["rgb"], models[s]["rgb"][r, t : t + 3])
            record["rgb"][...] = 0  # the reader's own array, not the cache's
            record["cfg.v"]["a/b"][...] = 0
        for i, (s, r, t) in enumerate(want):
            for leaf, x in flat(source[i]).items():
                np.testing.assert_array_equal(x, models[s][leaf][r, t : t + 3], err_msg=leaf)
    latest = vault.grain_source(Dataset.open(grown["root"]), 3, stride=2, episode_aware=True)
    assert len(latest) > len(want)
    assert {latest.where(i)[0] for i in range(len(latest))} == {0, 1, 2}


# ------------------------------------------------------------------------------ windows
def test_iter_windows_made_before_growth_yields_the_old_commits(grown: dict[str, Any]) -> None:
    """Windows of 4 of rows [1, 0] of every shard (3 and 2 rows), read only after the shards
    grew, are the model at the old commits; the shorter last window of each shard is a state
    that is not full."""
    stream = grown["windows"]
    want = [(0, 0, 4), (0, 4, 8), (0, 8, 12), (0, 12, 14), (1, 0, 4), (1, 4, 7)]
    assert stream.windows() == want
    states = list(stream)
    assert len(states) == len(want)
    models = tagged_models()
    for (s, lo, hi), state in zip(want, states, strict=True):
        assert int(state.current_index) == (hi - lo) % 4
        assert bool(state.is_full) == (hi - lo == 4)
        for leaf, x in flat(state.experience).items():
            np.testing.assert_array_equal(x[:, : hi - lo], models[s][leaf][[1, 0], lo:hi], leaf)


def test_iter_windows_of_the_tag_shuffles_each_epoch_over_the_same_windows(
    grown: dict[str, Any],
) -> None:
    """Seeded shuffles over the tagged dataset: each epoch a permutation of the same windows,
    each state the model's window (capacity larger than the window)."""
    pinned = Dataset.open(grown["root"], at="T")
    kw: dict[str, Any] = {"rows": slice(0, 2), "capacity": 6, "shuffle": True, "seed": 5}
    stream = pinned.iter_windows(5, epochs=2, **kw)
    plain = [(0, 0, 5), (0, 5, 10), (0, 10, 14), (1, 0, 5), (1, 5, 7)]
    orders = [stream.windows(0), stream.windows(1)]
    assert all(sorted(o) == plain for o in orders)
    assert orders == [pinned.iter_windows(5, **kw).windows(e) for e in (0, 1)]
    models = tagged_models()
    states = list(stream)
    assert len(states) == 2 * len(plain)
    for (s, lo, hi), state in zip(orders[0] + orders[1], states, strict=True):
        got = flat(state.experience)
        assert got["rgb"].shape == (2, 6, 2, 2)
        for leaf, x in got.items():
            np.testing.assert_array_equal(x[:, : hi - lo], models[s][leaf][0:2, lo:hi], leaf)
    with pytest.raises(VaultStructureError, match=re.escape("every source needs 3 rows")) as err:
        pinned.iter_windows(5)
    assert "shards/b): 2 rows" in str(err.value)  # the uneven shard is named


# ------------------------------------------------------------------------------- errors
def test_errors_name_the_argument_and_the_shard(grown: dict[str, Any]) -> None:
    pinned = Dataset.open(grown["root"], at="T")
    with pytest.raises(VaultPinError, match="'nope'"):
        Dataset.open(grown["root"], at="nope")
    with pytest.raises(vault.VaultArgumentError, match="pinned by a tag name"):
        Dataset.open(grown["root"], at=1)
    with pytest.raises(VaultReadError, match=re.escape("unknown leaves ['obs pos']")):
        pinned.to_xarray(leaves=["obs pos"])
    with pytest.raises(vault.VaultArgumentError, match="episodes must be True or False"):
        pinned.to_xarray(episodes="yes")  # type: ignore[arg-type]
    b_where = re.escape(str(Path(grown["root"]) / "shards" / "b"))
    with pytest.raises(VaultReadError, match=b_where + r".*rows \[2\] out of range \[0, 2\)"):
        vault.grain_source(pinned, 2, rows=[2])
    with pytest.raises(VaultReadError, match=b_where + r".*rows \[2\] out of range \[0, 2\)"):
        pinned.iter_windows(2, rows=[2])
    with pytest.raises(VaultReadError, match=re.escape("no window of 15 timesteps")):
        vault.grain_source(pinned, 15)
    with pytest.raises(VaultReadError, match="sequence_length must be an int >= 1"):
        vault.grain_source(pinned, 0)
    some = pinned.to_xarray(leaves=["obs%20pos", "cfg.v/a%2Fb"], episodes=False)
    for name, (rows, n, _) in TAGGED.items():
        node = some[f"shards/{name}"].to_dataset()
        assert sorted(node.data_vars) == ["cfg%2Ev.a%2Fb", "obs%20pos"]
        want = shard_model(name, n, rows)["cfg.v/a%2Fb"]
        np.testing.assert_array_equal(node["cfg%2Ev.a%2Fb"].values, want)


# ----------------------------------------------------------------- a writer meanwhile
def test_pinned_readers_stay_put_while_a_writer_thread_appends(tmp_path: Path) -> None:
    """A writer thread appends (into the partly filled last chunks the pinned commit ends
    in, with a restart among them) while lazy xarray values, Grain records and windows of
    the earlier commit are computed again and again: always the pinned data."""
    where = str(tmp_path / "v")
    writer = Vault.create(where, EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done")
    writer.append(model(0, 7))
    reader = Vault.open(where)
    pin, ds = reader.commit_id, reader.to_xarray()
    source = vault.grain_source(reader, 2)
    want = flat(model(0, 7))
    failures: list[BaseException] = []

    def write() -> None:
        try:
            for k in range(7, 70, 3):
                writer.append(model(k, k + 3), continues=k % 21 != 10)
        except BaseException as err:  # reported by the main thread
            failures.append(err)

    thread = threading.Thread(target=write)
    thread.start()
    rounds = 0
    while thread.is_alive() or rounds < 2:
        for leaf, (var, _) in LEAVES.items():
            np.testing.assert_array_equal(ds[var].values, want[leaf], err_msg=leaf)
        again = Vault.open(where, at=pin).to_xarray(leaves=["rgb"], episodes=False)
        np.testing.assert_array_equal(again["rgb"].values, want["rgb"])
        for i in range(0, len(source), 5):
            _, r, t = source.where(i)
            np.testing.assert_array_equal(source[i]["rgb"], want["rgb"][r, t : t + 2])
        rounds += 1
    thread.join()
    writer.close()
    assert not failures
    assert Vault.open(where).committed_length == 70
    states = list(Vault.open(where, at=pin).iter_windows(3, leaves=["rgb"]))
    got = np.concatenate([np.asarray(s.experience["rgb"]) for s in states], axis=1)
    np.testing.assert_array_equal(got[:, :7], want["rgb"])


# ----------------------------------------------------------------------------------- S3
CHILD = textwrap.dedent(
    """
    import os, pickle, sys
    import numpy as np
    assert not [k for k in os.environ if k.startswith("AWS_")]
    graph, source = pickle.loads(open(sys.argv[1], "rb").read())
    codes = np.stack([source[i]["cfg.v"]["a/b"] for i in range(len(source))])
    np.savez(sys.argv[2], graph=graph.compute(), codes=codes)
    """
)


def test_s3_pins_pickle_to_a_worker_without_the_aws_environment(
    s3_env: Any, tmp_path: Path
) -> None:
    """On S3, a vault opened with ``storage=`` at a tag: its xarray graph and a Grain source
    given the same ``storage`` are pickled, the vault grows, and a fresh process without any
    AWS variable reopens both at the tagged commit (as a process scheduler's or Grain's
    worker would)."""
    env = s3_env.environment()
    keys = {
        "endpoint": s3_env.endpoint,
        "access_key_id": env["AWS_ACCESS_KEY_ID"],
        "secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
    }
    url = f"s3://{s3_env.bucket}/xg-more-{uuid.uuid4().hex[:10]}/v"
    with Vault.create(url, EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done") as w:
        w.append(model(0, 5))
        w.append(model(5, 9), continues=False)
        w.tag("T")
        pinned = Vault.open(vault.parse_location(url, storage=keys), at="T")
        ds = pinned.to_xarray()
        source = vault.grain_source(pinned, 2, episode_aware=True, storage=keys)
        blob = pickle.dumps((ds["cfg%2Ev.a%2Fb"].data, source))
        w.append(model(9, 20))
    assert ds.attrs["location"] == url
    assert ds.attrs["committed_length"] == 9
    want = flat(model(0, 9))
    np.testing.assert_array_equal(ds["rgb"].values, want["rgb"])
    vault.read._xarray._OPENED.clear()
    local = pickle.loads(blob)
    np.testing.assert_array_equal(local[0].compute(), want["cfg.v/a%2Fb"])
    windows = brute_windows([want], [[5]], 2, 1, True, None)
    assert [local[1].where(i) for i in range(len(local[1]))] == windows
    (tmp_path / "blob.pickle").write_bytes(blob)
    (tmp_path / "child.py").write_text(CHILD)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    out = tmp_path / "out.npz"
    done = subprocess.run(
        [sys.executable, str(tmp_path / "child.py"), str(tmp_path / "blob.pickle"), str(out)],
        env=clean, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    got = np.load(out)
    np.testing.assert_array_equal(got["graph"], want["cfg.v/a%2Fb"])
    np.testing.assert_array_equal(
        got["codes"], np.stack([want["cfg.v/a%2Fb"][r, t : t + 2] for _, r, t in windows])
    )
