"""Where S3 locations meet the other features: derived vaults between disk and S3, datasets of
shards on a bucket (and the CLI on their s3:// URLs), pins and tags across appends and a
writer reopen, reads through xarray, streams and Grain, background writes of buffer states,
chunk shapes that cut rows and item axes unevenly, converters importing into a bucket, and
damaged objects. Every test runs against the real S3 server of ``tests/conftest.py``
(SeaweedFS on loopback) and, where cheap, repeats the same steps on a local disk: the same
data must read back bit for bit, with the same fingerprints.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import buffers as fbx
import vault
from vault import Dataset, Vault, VaultCorruptError, VaultPinError, parse_location
from vault.testing import S3TestServer

ROWS = 3  # rows cut into row blocks of 2: the last block holds one row
EXAMPLE = {
    "obs": np.zeros(5, np.float32),  # item axis of 5 cut into chunks of 2: 2 + 2 + 1
    "item": np.zeros((2, 3), np.int16),  # both item axes cut
    "done": np.zeros((), bool),
    "reward": np.zeros((), np.float32),
}
CHUNK = {"obs": [2, 4, 2], "item": [2, 4, 1, 2], "done": [2, 4], "reward": [3, 8]}
EPISODES = {"done_leaf": "done", "reward_leaf": "reward"}


def data(t0: int, n: int) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)`` of every row: each value says where it belongs."""
    t = np.arange(t0, t0 + n)[None, :]
    r = np.arange(ROWS)[:, None]
    return {
        "obs": ((t + 1000 * r)[..., None] + np.arange(5) / 8).astype(np.float32),
        "item": ((t + 100 * r)[..., None, None] * 10 + np.arange(6).reshape(2, 3)).astype(np.int16),
        "done": (t + 2 * r) % 5 == 4,
        "reward": (0.5 * t - r).astype(np.float32),
    }


def equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray], where: str = "") -> None:
    assert sorted(got) == sorted(want), where
    for name, value in want.items():
        assert got[name].dtype == value.dtype, (where, name)
        np.testing.assert_array_equal(got[name], value, err_msg=f"{where} {name}")


def cut(tree: dict[str, np.ndarray], rows: Any = slice(None), lo: int = 0, hi: Any = None) -> Any:
    return {k: v[rows][:, lo:hi] for k, v in tree.items()}


def s3(server: S3TestServer, name: str = "v") -> str:
    return f"s3://{server.bucket}/joints-s3-{uuid.uuid4().hex[:10]}/{name}"


def make(loc: Any, sizes: list[int], chunk: dict[str, list[int]] | None = CHUNK) -> str:
    with Vault.create(loc, EXAMPLE, rows=ROWS, chunk=chunk, **EPISODES) as v:
        t = 0
        for n in sizes:
            v.append(data(t, n))
            t += n
    return str(loc)


def sound(loc: Any) -> None:
    report = vault.verify(loc)
    assert report.ok, [str(p) for p in report.problems]


def kv(loc: str) -> Any:
    return parse_location(loc).kvstore()


def keys(loc: str) -> list[str]:
    return sorted(bytes(k).decode() for k in kv(loc).list().result())


def get(loc: str, key: str) -> bytes:
    got = kv(loc).read(key).result()
    assert got.state == "value", key
    return bytes(got.value)


def put(loc: str, key: str, value: bytes | None) -> None:
    kv(loc).write(key, value).result()


SHARDS = ["actor-0", "actor-1", "actor-2"]


def drain(stream: Any) -> None:
    with stream:
        for _ in stream:
            pass


def episode_rows(table: Any) -> list[tuple[int, int, int, bool]]:
    return [
        (int(r), int(s), int(n), bool(c))
        for r, s, n, c in zip(table.row, table.start, table.length, table.complete, strict=True)
    ]


# ---------------------------------------------------------------------------- 1. derive
def test_the_same_appends_on_disk_and_s3_read_and_fingerprint_alike(
    s3_env: S3TestServer, tmp_path: Path
) -> None:
    sizes = [7, 11, 5]  # 23 timesteps: time chunks of 4 and 8, the last ones partly filled
    on_s3, on_disk = make(s3(s3_env), sizes), make(tmp_path / "v", sizes)
    a, b = Vault.open(on_s3), Vault.open(on_disk)
    equal(a.read_numpy(), data(0, 23), "s3")
    equal(b.read_numpy(), data(0, 23), "disk")
    assert a.fingerprint() == b.fingerprint()
    assert episode_rows(a.episodes(include_open=True)) == episode_rows(
        b.episodes(include_open=True)
    )
    np.testing.assert_array_equal(a.episodes().returns, b.episodes().returns)
    sound(on_s3)
    sound(on_disk)


@pytest.mark.parametrize("way", ["s3-to-disk", "disk-to-s3", "s3-to-s3", "disk-to-disk"])
def test_derived_vaults_between_disk_and_s3_are_exact_and_alike(
    s3_env: S3TestServer, tmp_path: Path, way: str
) -> None:
    sizes = [7, 11, 5]
    src_kind, dest_kind = way.split("-to-")
    src = make(s3(s3_env, "src") if src_kind == "s3" else tmp_path / "src", sizes)
    other = make(tmp_path / "other" if src_kind == "s3" else s3(s3_env, "other"), [6, 3])

    def dest(name: str) -> Any:
        return s3(s3_env, name) if dest_kind == "s3" else tmp_path / name

    want = data(0, 23)
    # a slice of rows (out of order) and time across chunk boundaries
    sliced = vault.derive_slice(src, dest("slice"), rows=[2, 0], start=3, stop=17)
    equal(Vault.open(sliced.location).read_numpy(), cut(want, [2, 0], 3, 17), way)
    sound(sliced.location)
    # the best episodes, one row back to back
    table = Vault.open(src).episodes()
    chosen = table.select(top_k=4)
    picked = vault.derive_episodes(src, dest("episodes"), chosen)
    # in order of their start time (ties by row)
    ordered = sorted(
        zip(chosen.start.tolist(), chosen.row.tolist(), chosen.length.tolist(), strict=True)
    )
    parts = [cut(want, [r], s, s + n) for s, r, n in ordered]
    joined = {k: np.concatenate([p[k] for p in parts], axis=1) for k in want}
    equal(Vault.open(picked.location).read_numpy(), joined, way)
    assert Vault.open(picked.location).episodes().length.tolist() == [n for _, _, n in ordered]
    sound(picked.location)
    # two vaults, one on each kind of location, one after the other
    both = vault.combine([src, other], dest("combined"))
    want_both = {k: np.concatenate([want[k], data(0, 9)[k]], axis=1) for k in want}
    equal(Vault.open(both.location).read_numpy(), want_both, way)
    assert [s.at for s in Vault.open(both.location).seams] == [23]
    sound(both.location)
    # the same derivations from a disk copy of the source give the same fingerprints
    ref = make(tmp_path / "ref", sizes)
    ref_other = make(tmp_path / "ref-other", [6, 3])
    fp_slice = vault.derive_slice(ref, tmp_path / "r1", rows=[2, 0], start=3, stop=17)
    fp_picked = vault.derive_episodes(ref, tmp_path / "r2", chosen)
    fp_both = vault.combine([ref, ref_other], tmp_path / "r3")
    assert Vault.open(sliced.location).fingerprint() == fp_slice.fingerprint()
    assert Vault.open(picked.location).fingerprint() == fp_picked.fingerprint()
    assert Vault.open(both.location).fingerprint() == fp_both.fingerprint()


def test_a_derived_vault_on_s3_takes_appends_after_a_reopen(
    s3_env: S3TestServer, tmp_path: Path
) -> None:
    src = make(tmp_path / "src", [9, 4])
    dest = s3(s3_env, "dest")
    vault.derive_slice(src, dest, start=2)
    with Vault.open(dest, "a") as w:
        w.append(data(13, 6))
    want = cut(data(0, 19), slice(None), 2)
    got = Vault.open(dest)
    equal(got.read_numpy(), want)
    assert got.committed_length == 17
    sound(dest)


# ---------------------------------------------------------------------------- 2. datasets
def _fill_dataset(root: Any) -> Vault:
    """Two closed shards and one still open (its writer returned)."""
    for i, (t0, n) in enumerate([(0, 9), (20, 6)]):
        ds = Dataset.create(root, EXAMPLE, rows=ROWS, chunk=CHUNK, exist_ok=True, **EPISODES)
        with ds.shard(f"actor-{i}") as shard:
            shard.append(data(t0, n - 3))
            shard.append(data(t0 + n - 3, 3))
    ds = Dataset.create(root, EXAMPLE, rows=ROWS, chunk=CHUNK, exist_ok=True, **EPISODES)
    open_shard = ds.shard("actor-2")
    open_shard.append(data(40, 5))
    return open_shard


def test_a_dataset_of_shards_on_s3_reads_streams_and_verifies_as_on_disk(
    s3_env: S3TestServer, tmp_path: Path
) -> None:
    root = s3(s3_env, "actors")
    local = tmp_path / "actors"
    writers = [_fill_dataset(root), _fill_dataset(local)]
    try:
        got, ref = Dataset.open(root), Dataset.open(local)
        assert got.shards == ref.shards == ["actor-0", "actor-1", "actor-2"]
        assert got.committed_lengths == {"actor-0": 9, "actor-1": 6, "actor-2": 5}
        for name, (t0, n) in zip(got.shards, [(0, 9), (20, 6), (40, 5)], strict=True):
            equal(got.read_numpy(name), data(t0, n), name)
            assert got.vault(name).fingerprint() == ref.vault(name).fingerprint(), name
            sound(got.vault(name))
        a, b = got.episodes(), ref.episodes()
        assert episode_rows(a) == episode_rows(b)
        assert a.shard.tolist() == b.shard.tolist()
        np.testing.assert_array_equal(a.returns, b.returns)
        # a stream over every shard: each batch is the data at its (source, row, start)
        with got.as_dataset(4, 3, shuffle=True, seed=1, epochs=1) as stream:
            seen = []
            for batch in stream:
                for j in range(len(batch.start)):
                    name = got.shards[int(batch.source[j])]
                    row, start = int(batch.row[j]), int(batch.start[j])
                    want = got.read_numpy(name, rows=[row], start=start, stop=start + 3)
                    for leaf, value in want.items():
                        np.testing.assert_array_equal(batch.experience[leaf][j], value[0])
                    seen.append((name, row, start))
        starts = 3 * ((9 - 2) + (6 - 2) + (5 - 2))
        assert len(set(seen)) == len(seen) == starts - starts % 4
    finally:
        for w in writers:
            w.close()
    # after the last writer closed, a reader that may write the catalog builds it from S3
    again = Dataset.open(root, write_catalog=True)
    equal(again.read_numpy("actor-2"), data(40, 5))
    assert again.check_catalog() == {"state": "valid", "used": 3, "problems": []}
    for name in again.shards:
        sound(again.vault(name))


def test_a_dataset_on_s3_derives_pins_and_selects_episodes_as_on_disk(
    s3_env: S3TestServer, tmp_path: Path
) -> None:
    root = s3(s3_env, "actors")
    _fill_dataset(root).close()
    ds = Dataset.open(root)
    ds.tag("collected")
    with Vault.open(f"{root}/shards/actor-0", "a") as w:  # a shard grows after the tag
        w.append(data(9, 4))
    pinned = Dataset.open(root, at="collected")
    assert pinned.committed_lengths == {"actor-0": 9, "actor-1": 6, "actor-2": 5}
    equal(pinned.read_numpy("actor-0"), data(0, 9))
    assert Dataset.open(root).committed_lengths["actor-0"] == 13
    # a dataset slice S3 -> S3 and S3 -> disk: every shard sliced alike, the same fingerprints
    on_s3 = vault.derive_slice(pinned, s3(s3_env, "sliced"), rows=[2, 0], start=1, stop=5)
    on_disk = vault.derive_slice(pinned, tmp_path / "sliced", rows=[2, 0], start=1, stop=5)
    for name, t0 in zip(["actor-0", "actor-1", "actor-2"], [0, 20, 40], strict=True):
        equal(on_s3.read_numpy(name), cut(data(t0 + 1, 4), [2, 0]), name)
        assert on_s3.vault(name).fingerprint() == on_disk.vault(name).fingerprint(), name
        sound(on_s3.vault(name))
    # the best episodes of every shard into one vault on S3
    table = pinned.episodes()
    chosen = table.select(top_k=5)
    picked = vault.derive_episodes(pinned, s3(s3_env, "best"), chosen)
    starts = {"actor-0": 0, "actor-1": 20, "actor-2": 40}
    parts = []
    for shard in pinned.shards:
        mine = chosen[chosen.shard == shard]
        for s, r, n in sorted(
            zip(mine.start.tolist(), mine.row.tolist(), mine.length.tolist(), strict=True)
        ):
            parts.append(cut(data(starts[shard] + s, n), [r]))
    joined = {k: np.concatenate([p[k] for p in parts], axis=1) for k in EXAMPLE}
    equal(picked.read_numpy(), joined)
    assert picked.fingerprint() == (
        vault.derive_episodes(pinned, tmp_path / "best", chosen).fingerprint()
    )
    sound(picked.location)


def test_the_cli_lists_and_verifies_a_dataset_on_s3(s3_env: S3TestServer) -> None:
    from typer.testing import CliRunner

    from vault.cli.app import app

    root = s3(s3_env, "actors")
    _fill_dataset(root).close()
    runner = CliRunner()
    parent = root.rsplit("/", 1)[0]
    listed = runner.invoke(app, ["ls", parent, "--json"])
    assert listed.exit_code == 0, listed.output
    assert root in listed.output
    shards = runner.invoke(app, ["ls", root, "--json"])
    assert shards.exit_code == 0, shards.output
    for name in ("actor-0", "actor-1", "actor-2"):
        assert name in shards.output
    verified = runner.invoke(app, ["verify", root])
    assert verified.exit_code == 0, verified.output
    assert "sound" in verified.output
    tagged = runner.invoke(app, ["tag", root, "collected"])
    assert tagged.exit_code == 0, tagged.output
    at = runner.invoke(app, ["verify", root, "--at", "collected"])
    assert at.exit_code == 0, at.output
    one = runner.invoke(app, ["verify", f"{root}/shards/actor-1"])
    assert one.exit_code == 0, one.output
    assert "sound" in one.output
    put(root, "shards/actor-1/experience/obs/c/0/1/0", None)
    broken = runner.invoke(app, ["verify", root])
    assert broken.exit_code != 0, broken.output
    assert "actor-1" in broken.output
    assert "experience/obs" in broken.output


# ---------------------------------------------------------------------------- 3. pins and tags
def test_pins_and_tags_on_s3_hold_across_appends_and_a_reopen(
    s3_env: S3TestServer, tmp_path: Path
) -> None:
    loc, ref = s3(s3_env), tmp_path / "ref"
    writers = [Vault.create(w, EXAMPLE, rows=ROWS, chunk=CHUNK, **EPISODES) for w in (loc, ref)]
    pins: dict[str, tuple[int, str, str]] = {}  # tag -> (length, commit id, fingerprint)
    t = 0
    for k in range(14):
        n = 1 + k % 4
        for w in writers:
            w.append(data(t, n))
        t += n
        if k == 4:  # the writer closes and another reopens, twice
            for w in writers:
                w.close()
            writers = [Vault.open(w, "a") for w in (loc, ref)]
        if k % 3 == 1:
            name = f"at_{k}"
            here = Vault.open(loc)
            here.tag(name)
            Vault.open(ref).tag(name)
            pins[name] = (here.committed_length, here.commit_id, here.fingerprint())
            assert here.fingerprint() == Vault.open(ref).fingerprint(), name
    old = Vault.open(loc, at="at_1")  # a reader pinned at an old commit ...
    before = old.read_numpy()
    for w in writers:
        w.append(data(t, 6))  # ... while the writer appends
    t += 6
    assert old.refresh() == old.committed_length == pins["at_1"][0]
    equal(old.read_numpy(), before)
    for w in writers:
        w.close()
    assert Vault.open(loc).tags() == {name: cid for name, (_, cid, _) in pins.items()}
    for name, (length, cid, fp) in pins.items():
        for where in (loc, ref):
            pinned = Vault.open(where, at=name)
            assert pinned.committed_length == length, (where, name)
            equal(pinned.read_numpy(), data(0, length), f"{where} {name}")
            assert pinned.fingerprint() == fp, (where, name)
        by_id = Vault.open(loc, at=cid)
        assert by_id.fingerprint() == fp
        report = vault.verify(loc, at=name, fingerprint=fp)
        assert report.ok, [str(p) for p in report.problems]
    assert Vault.open(loc).fingerprint() == Vault.open(ref).fingerprint()
    equal(Vault.open(loc).read_numpy(), data(0, t))
    with pytest.raises(vault.VaultExistsError):
        Vault.open(loc).tag("at_1")


def test_a_stream_checkpoint_of_a_pinned_s3_vault_resumes_on_the_same_data(
    s3_env: S3TestServer,
) -> None:
    loc = s3(s3_env)
    w = Vault.create(loc, EXAMPLE, rows=ROWS, chunk=CHUNK, **EPISODES)
    w.append(data(0, 13))
    stream = Vault.open(loc).as_dataset(4, 2, shuffle=True, seed=3)
    next(stream)
    checkpoint = json.loads(json.dumps(stream.state()))
    following = next(stream)
    stream.close()
    w.append(data(13, 9))
    w.close()
    rest = vault.resume_stream(checkpoint)
    try:
        again = next(rest)
    finally:
        rest.close()
    np.testing.assert_array_equal(again.start, following.start)
    np.testing.assert_array_equal(again.row, following.row)
    for leaf in EXAMPLE:
        np.testing.assert_array_equal(again.experience[leaf], following.experience[leaf])


# ---------------------------------------------------------------------------- 4. reads
@pytest.mark.parametrize(
    ("rows", "start", "stop"),
    [
        (None, 0, 23),
        ([2], 0, 23),  # the row block holding one row
        ([1, 2], 3, 9),  # rows across row blocks, time across a chunk boundary
        ([2, 0, 1], 7, 8),  # one timestep at the end of a chunk
        ([0], 8, 23),  # from a boundary into the partly filled last chunk
        ([1], 20, 23),  # only the partly filled last chunk
        (slice(1, 3), 15, 17),  # across the boundary before the last chunk
        ([2, 2], 22, 23),  # the last committed timestep, a row twice
    ],
)
def test_sub_reads_of_an_s3_vault_cross_chunk_boundaries_exactly(
    s3_env: S3TestServer, rows: Any, start: int, stop: int
) -> None:
    loc = _shared_vault(s3_env)
    want = cut(data(0, 23), slice(None) if rows is None else rows, start, stop)
    got = Vault.open(loc).read_numpy(rows=rows, start=start, stop=stop)
    equal(got, want, f"{rows} {start}:{stop}")
    state = Vault.open(loc).read(rows=rows, start=start, stop=stop, capacity=32)
    for leaf, value in want.items():
        np.testing.assert_array_equal(np.asarray(state.experience[leaf])[:, : stop - start], value)
    assert int(state.current_index) == stop - start


_SHARED: dict[str, str] = {}


def _shared_vault(server: S3TestServer) -> str:
    """One vault of 23 timesteps (appends of 7, 11, 5) on the session's server."""
    key = server.endpoint
    if key not in _SHARED:
        _SHARED[key] = make(s3(server), [7, 11, 5])
    return _SHARED[key]


def test_xarray_on_an_s3_vault_equals_read_numpy(s3_env: S3TestServer) -> None:
    loc = _shared_vault(s3_env)
    v = Vault.open(loc)
    ds = v.to_xarray()
    want = data(0, 23)
    assert ds.sizes["time"] == 23
    for leaf, value in want.items():
        np.testing.assert_array_equal(ds[leaf].values, value, err_msg=leaf)
    np.testing.assert_array_equal(
        ds["obs"].isel(row=slice(1, 3), time=slice(5, 19)).values, want["obs"][1:3, 5:19]
    )
    table = v.episodes()
    assert ds.sizes["episode"] == len(table)


def test_an_s3_dataset_as_an_xarray_tree_equals_its_shards(s3_env: S3TestServer) -> None:
    root = s3(s3_env, "actors")
    _fill_dataset(root).close()
    tree = Dataset.open(root).to_xarray()
    for name, (t0, n) in zip(SHARDS, [(0, 9), (20, 6), (40, 5)], strict=True):
        node = tree[f"shards/{name}"].to_dataset()
        for leaf, value in data(t0, n).items():
            np.testing.assert_array_equal(node[leaf].values, value, err_msg=f"{name} {leaf}")


@pytest.mark.parametrize(
    "options",
    [
        {"shuffle": False},
        {"shuffle": True, "seed": 5, "block_timesteps": 4, "interleave": 2},
        {"shuffle": True, "seed": 2, "episode_aware": True},
        {"shuffle": True, "seed": 7, "stride": 3, "rows": [2, 0]},
    ],
)
def test_streams_from_s3_equal_the_same_streams_from_disk(
    s3_env: S3TestServer, tmp_path: Path, options: dict[str, Any]
) -> None:
    loc = _shared_vault(s3_env)
    ref = make(tmp_path / "ref", [7, 11, 5])
    a = Vault.open(loc).as_dataset(3, 4, epochs=1, drop_remainder=False, **options)
    b = Vault.open(ref).as_dataset(3, 4, epochs=1, drop_remainder=False, **options)
    want = data(0, 23)
    with a, b:
        got = list(a)
        exp = list(b)
    assert len(got) == len(exp) > 0
    for x, y in zip(got, exp, strict=True):
        np.testing.assert_array_equal(x.row, y.row)
        np.testing.assert_array_equal(x.start, y.start)
        for leaf in EXAMPLE:
            np.testing.assert_array_equal(x.experience[leaf], y.experience[leaf])
        for j in range(len(x.start)):
            r, s = int(x.row[j]), int(x.start[j])
            np.testing.assert_array_equal(x.experience["item"][j], want["item"][r, s : s + 4])


def test_windows_and_grain_read_an_s3_vault_exactly(s3_env: S3TestServer) -> None:
    loc = _shared_vault(s3_env)
    want = data(0, 23)
    v = Vault.open(loc)
    with v.iter_windows(6, shuffle=False, capacity=6) as windows:
        got = [np.asarray(w.experience["obs"]) for w in windows]
    assert [g.shape[1] for g in got] == [6, 6, 6, 6]
    np.testing.assert_array_equal(np.concatenate(got, axis=1)[:, :23], want["obs"])
    grain = pytest.importorskip("grain")
    source = vault.grain_source([v], 5, stride=2)
    assert len(source) == ROWS * len(range(0, 23 - 5 + 1, 2))
    for i in range(len(source)):
        _, row, start = source.where(i)
        record = source[i]
        for leaf, value in want.items():
            np.testing.assert_array_equal(record[leaf], value[row, start : start + 5])
    batches = list(grain.MapDataset.source(source).batch(4))
    assert sum(len(b["obs"]) for b in batches) == len(source)


# ---------------------------------------------------------------------------- 5. writes
def test_every_feature_follows_explicit_storage_settings_without_the_environment(
    s3_env: S3TestServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys_ = {
        "endpoint": s3_env.endpoint,
        "access_key_id": s3_env.environment()["AWS_ACCESS_KEY_ID"],
        "secret_access_key": s3_env.environment()["AWS_SECRET_ACCESS_KEY"],
    }
    loc = _shared_vault(s3_env)
    root = s3(s3_env, "actors")
    _fill_dataset(root).close()
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    with pytest.raises(vault.VaultStorageError):
        Vault.open(loc)  # the environment no longer names the server
    v = Vault.open(loc, storage=keys_)
    want = data(0, 23)
    equal(v.read_numpy(), want)
    np.testing.assert_array_equal(v.to_xarray()["item"].values, want["item"])
    stream = v.as_dataset(4, 2, shuffle=True, seed=0)
    next(stream)
    checkpoint = stream.state()
    following = next(stream)
    stream.close()
    assert keys_["secret_access_key"] not in json.dumps(checkpoint)
    with vault.resume_stream(checkpoint, storage=keys_) as rest:
        np.testing.assert_array_equal(next(rest).start, following.start)
    assert vault.verify(v).ok
    dest = parse_location(s3(s3_env, "derived"), storage=keys_)
    out = vault.derive_slice(v, dest, start=2)
    equal(out.read_numpy(), cut(want, slice(None), 2))
    both = vault.combine([v, out], tmp_path / "both")
    assert both.committed_length == 44
    ds = Dataset.open(root, storage=keys_)
    assert ds.committed_lengths == {"actor-0": 9, "actor-1": 6, "actor-2": 5}
    equal(ds.read_numpy("actor-1"), data(20, 6))
    assert len(list(ds.as_dataset(4, 2, epochs=1))) == 12


def test_seams_of_overruns_and_new_starts_on_s3_equal_those_on_disk(
    s3_env: S3TestServer, tmp_path: Path
) -> None:
    def run(where: Any) -> tuple[Any, ...]:
        buffer = fbx.make_trajectory_buffer(
            add_batch_size=ROWS,
            sample_batch_size=2,
            sample_sequence_length=2,
            period=1,
            min_length_time_axis=2,
            max_length_time_axis=8,
        )
        state = buffer.init({k: jnp.asarray(v) for k, v in EXAMPLE.items()})
        added = data(0, 26)
        with Vault.create(where, state, chunk=CHUNK, **EPISODES) as v:
            for step in range(26):
                one = {k: jnp.asarray(x[:, step : step + 1]) for k, x in added.items()}
                state = buffer.add(state, one)
                if step in (6, 19, 25):  # 13 new at step 19, the ring holds 8: an overrun
                    v.write(state, on_overrun="save_surviving", block=step != 6)
            v.append(data(100, 3), continues=False)
        with Vault.open(where, "a") as v:
            v.append(data(200, 2), continues=False)
        o = Vault.open(where)
        want = {
            k: np.concatenate(
                [added[k][:, :7], added[k][:, 12:26], data(100, 3)[k], data(200, 2)[k]], axis=1
            )
            for k in EXAMPLE
        }
        equal(o.read_numpy(), want, str(where))
        sound(where)
        table = o.episodes(include_open=True)
        return o.seams, o.fingerprint(), episode_rows(table), table.start_known.tolist()

    a, b = run(s3(s3_env)), run(tmp_path / "ref")
    assert [(s.at, s.lost) for s in a[0]] == [(7, 5), (21, 0), (24, 0)]
    assert a == b


def _buffer_run(loc: Any) -> tuple[str, dict[str, np.ndarray]]:
    """Background writes of a wrapping trajectory buffer; returns what was added."""
    buffer = fbx.make_trajectory_buffer(
        add_batch_size=ROWS,
        sample_batch_size=2,
        sample_sequence_length=2,
        period=1,
        min_length_time_axis=2,
        max_length_time_axis=8,
    )
    state = buffer.init({k: jnp.asarray(v) for k, v in EXAMPLE.items()})
    added = data(0, 30)
    with Vault.create(loc, state, chunk=CHUNK, **EPISODES) as v:
        for step in range(30):
            one = {k: jnp.asarray(x[:, step : step + 1]) for k, x in added.items()}
            state = buffer.add(state, one)
            if step % 5 == 4:  # 5 new timesteps a write, the ring of 8 wraps in between
                v.write(state, block=False)
        v.flush()
    return str(loc), added


def test_background_writes_of_a_buffer_state_to_s3_equal_those_to_disk(
    s3_env: S3TestServer, tmp_path: Path
) -> None:
    loc, added = _buffer_run(s3(s3_env))
    ref, _ = _buffer_run(tmp_path / "ref")
    a, b = Vault.open(loc), Vault.open(ref)
    assert a.committed_length == 30
    equal(a.read_numpy(), added, "s3")
    equal(b.read_numpy(), added, "disk")
    assert a.fingerprint() == b.fingerprint()
    assert episode_rows(a.episodes(include_open=True)) == episode_rows(
        b.episodes(include_open=True)
    )
    sound(loc)


def test_a_closed_writer_trims_and_a_reopened_one_appends_with_uneven_chunks(
    s3_env: S3TestServer, tmp_path: Path
) -> None:
    loc = s3(s3_env)
    for where in (loc, tmp_path / "ref"):
        make(where, [5])  # closed: arrays cut to 5 timesteps, inside a chunk
        for t0, n in [(5, 2), (7, 9), (16, 1)]:
            with Vault.open(where, "a") as w:
                w.append(data(t0, n))
    for name in EXAMPLE:
        meta = json.loads(get(loc, f"experience/{name}/zarr.json"))
        assert meta["shape"][:2] == [ROWS, 17], name
    got = Vault.open(loc)
    equal(got.read_numpy(), data(0, 17))
    assert got.fingerprint() == Vault.open(tmp_path / "ref").fingerprint()
    assert episode_rows(got.episodes(include_open=True)) == episode_rows(
        Vault.open(tmp_path / "ref").episodes(include_open=True)
    )
    sound(loc)


def test_an_episode_index_across_index_chunks_on_s3(s3_env: S3TestServer) -> None:
    from vault.format._records import INDEX_CHUNK

    example = {"done": np.zeros((), bool), "reward": np.zeros((), np.float32)}
    loc = s3(s3_env)
    per = INDEX_CHUNK // ROWS // 2 + 7  # two appends fill more than one index chunk
    with Vault.create(loc, example, rows=ROWS, **EPISODES) as w:
        for k in range(3):
            t = np.arange(k * per, (k + 1) * per)
            w.append(
                {
                    "done": np.ones((ROWS, per), bool),
                    "reward": np.tile(t.astype(np.float32), (ROWS, 1)),
                }
            )
    v = Vault.open(loc)
    table = v.episodes()
    assert len(table) == 3 * per * ROWS > INDEX_CHUNK
    assert (table.length == 1).all()
    order = np.lexsort((table.start, table.row))
    np.testing.assert_array_equal(table.row[order], np.repeat(np.arange(ROWS), 3 * per))
    np.testing.assert_array_equal(table.start[order], np.tile(np.arange(3 * per), ROWS))
    np.testing.assert_array_equal(table.returns[order], np.tile(np.arange(3 * per), ROWS))
    assert any(k.startswith("episodes/bounds/c/1/") for k in keys(loc))
    sound(loc)


def test_a_d4rl_file_imports_into_s3_as_into_disk(s3_env: S3TestServer, tmp_path: Path) -> None:
    from _convert_sources import write_d4rl

    from vault.converters import import_d4rl

    lengths = [5, 1, 9, 4, 12, 3]
    src = tmp_path / "d.hdf5"
    written = write_d4rl(src, lengths, last_open=True)
    loc = s3(s3_env)
    got = import_d4rl(src, loc, block_bytes=1 << 16)
    ref = import_d4rl(src, tmp_path / "ref", block_bytes=1 << 16)
    back = Vault.open(loc).read_numpy()
    for key, value in written.items():
        node = back
        for part in key.split("/"):
            node = node[part]
        np.testing.assert_array_equal(node[0], value, err_msg=key)
    assert got.episodes(include_open=True).length.tolist() == lengths
    assert Vault.open(loc).fingerprint() == Vault.open(ref.location).fingerprint()
    sound(loc)


def test_a_flashbax_vault_imports_into_s3_as_into_disk(
    s3_env: S3TestServer, tmp_path: Path
) -> None:
    from _convert_sources import write_flashbax

    from vault.converters import import_flashbax

    spec = {"obs": ((3,), np.float32), "action": ((), np.int32), "done": ((), np.bool_)}
    path, handed_over = write_flashbax(
        tmp_path / "fbx", "src", spec, rows=2, capacity=8, steps=21, write_every=5
    )
    loc = s3(s3_env)
    got = import_flashbax(path, loc)
    ref = import_flashbax(path, tmp_path / "ref")
    back = Vault.open(loc).read_numpy()
    for leaf, value in handed_over.items():
        np.testing.assert_array_equal(back[leaf], np.asarray(value), err_msg=leaf)
    assert got.committed_length == 21
    assert Vault.open(loc).fingerprint() == ref.fingerprint()
    sound(loc)


# ---------------------------------------------------------------------------- locations
def test_an_s3_url_whose_key_holds_a_hash_or_question_mark_names_its_own_place(
    s3_env: S3TestServer,
) -> None:
    """S3 keys may hold ``#`` and ``?`` (``aws s3`` takes them as they are). Such a URL must
    name exactly its own prefix, or be refused as a location: never another place."""
    base = f"s3://{s3_env.bucket}/joints-s3-{uuid.uuid4().hex[:10]}"
    runs = [f"{base}/run#1/v", f"{base}/run#2/v", f"{base}/run?3/v"]
    for k, url in enumerate(runs):
        try:
            where = parse_location(url)
        except vault.VaultLocationError:
            continue  # refused by name: acceptable
        assert str(where) == url
        with Vault.create(url, EXAMPLE, rows=ROWS, chunk=CHUNK, **EPISODES) as w:
            w.append(data(10 * k, 3 + k))
    for k, url in enumerate(runs):
        equal(Vault.open(url).read_numpy(), data(10 * k, 3 + k), url)


# ---------------------------------------------------------------------------- 6. damage
def test_damage_on_s3_is_named_by_verify_and_reads(s3_env: S3TestServer, tmp_path: Path) -> None:
    loc = make(s3(s3_env), [7, 11, 5])
    ref = make(tmp_path / "ref", [7, 11, 5])
    # the third item chunk of obs, row block 1 (one row), time chunk 1 (complete)
    key = "experience/obs/c/1/1/2"
    assert key in keys(loc)
    put(loc, key, None)
    Path(ref, *key.split("/")).unlink()
    report = vault.verify(loc)
    assert not report.ok
    assert any(key in str(p) for p in report.problems), [str(p) for p in report.problems]
    assert [str(p) for p in report.problems] == [str(p) for p in vault.verify(ref).problems]
    with pytest.raises(VaultCorruptError, match=re.escape(key) + ".*missing"):
        Vault.open(loc).read_numpy(rows=[2], start=4, stop=8)
    equal(Vault.open(loc).read_numpy(rows=[0, 1]), cut(data(0, 23), [0, 1]))  # others read
    with pytest.raises(VaultCorruptError, match=re.escape(key)):
        drain(Vault.open(loc).as_dataset(2, 2, shuffle=False, epochs=1))
    # the same chunk swapped for a neighbour: checksums pass, its place does not
    loc = make(s3(s3_env), [7, 11, 5])
    put(loc, "experience/item/c/0/2/1/0", get(loc, "experience/item/c/0/3/1/0"))
    report = vault.verify(loc)
    assert any("experience/item/c/0/2/1/0" in str(p) for p in report.problems), report.problems
    with pytest.raises(VaultCorruptError, match=re.escape("experience/item/c/0/2/1/0")):
        Vault.open(loc).read_numpy(leaves=["item"])


def test_damage_to_a_derived_s3_vault_and_its_history(s3_env: S3TestServer, tmp_path: Path) -> None:
    src = make(tmp_path / "src", [7, 11, 5])
    loc = s3(s3_env)
    vault.derive_slice(src, loc, rows=[1, 2], start=1)
    with Vault.open(loc, "a") as w:
        w.append(cut(data(23, 4), [1, 2]))
    first = Vault.open(loc, at=1)
    assert first.committed_length == 22
    history = [k for k in keys(loc) if k.startswith("history/")]
    assert history, keys(loc)
    # a lost history record: the pin fails typed, naming it; the latest commit reads
    for k in history:
        put(loc, k, None)
    with pytest.raises(VaultPinError):
        Vault.open(loc, at=1)
    equal(Vault.open(loc).read_numpy(), cut(data(0, 27), [1, 2], 1))
    # a damaged episode-index chunk
    bounds = [k for k in keys(loc) if k.startswith("episodes/bounds/c/")]
    raw = bytearray(get(loc, bounds[0]))
    raw[len(raw) // 2] ^= 0xFF
    put(loc, bounds[0], bytes(raw))
    report = vault.verify(loc)
    assert not report.ok
    assert any("episodes/bounds" in str(p) for p in report.problems), report.problems
    with pytest.raises(VaultCorruptError, match="episodes/bounds"):
        Vault.open(loc).episodes()
