"""Where the place tags kept in the commit record (format 5) meet the other features.

The commit record keeps the tags of each array's latest complete chunks and the writer writes
them to the array's tag array once more than ``PENDING_MAX`` are held (docs/format.md, sections
4.3 and 4.5). Here ``PENDING_MAX`` is 4 (or 1), the arrays tiny and their chunks two or three
timesteps long, so that appends of a few timesteps keep tags in the record and flush them to the
tag arrays in the middle of every scenario: pins of every commit, writers that close and reopen,
derived and imported vaults, datasets of shards, background writes, chunks that cut the item
axes, an episode index of more than one index chunk, and damaged or moved chunks whose tag only
the record holds. Every value read is compared with the model, bit for bit.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import buffers as fbx
import vault
from vault import Dataset, Vault, VaultCorruptError, parse_location
from vault.format import _tags

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import spec_reader

ROWS = 3
EXAMPLE = {
    "obs": np.zeros(4, np.float32),
    "done": np.zeros((), bool),
    "reward": np.zeros((), np.float32),
}
# obs: two row blocks (two tags per time chunk); done and reward: one row block, other steps
CHUNK = {"obs": [2, 2, 4], "done": [3, 3], "reward": [3, 2]}
# obs cut along its item axis: two item chunks per place, both bound (four tags per time chunk)
CUT = {"obs": [2, 2, 2], "done": [3, 3], "reward": [3, 2]}
EPISODES = {"done_leaf": "done", "reward_leaf": "reward"}
STEPS = (3, 1, 4, 2, 5, 3, 1, 4, 2)  # 25 timesteps in 9 appends
OBS = "experience/obs"
VAULT_CLI = str(Path(sys.executable).with_name("vault"))


@pytest.fixture(autouse=True)
def few_pending(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most 4 tags of an array held in the commit record: flushes every few appends."""
    monkeypatch.setattr(_tags, "PENDING_MAX", 4)


def data(t0: int, n: int, salt: int = 0) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)`` of every row; each value says where it belongs."""
    t = np.arange(t0, t0 + n)[None, :]
    r = np.arange(ROWS)[:, None]
    obs = (t + 1000 * r + 100_000 * salt)[..., None] + np.array([0.0, 0.125, 0.25, 0.5])
    return {
        "obs": obs.astype(np.float32),
        "done": (t + r) % 4 == 3,
        "reward": (0.5 * t + r + salt).astype(np.float32),
    }


def model_episodes(n: int) -> list[tuple[int, int, int, float]]:
    """(row, start, length, return) of every complete episode in ``data(0, n)``."""
    d = data(0, n)
    out = []
    for r in range(ROWS):
        start = 0
        for t in np.flatnonzero(d["done"][r]):
            ret = float(np.sum(d["reward"][r, start : t + 1], dtype=np.float64))
            out.append((r, start, int(t) - start + 1, ret))
            start = int(t) + 1
    return sorted(out)


def episodes_of(v: Any) -> list[tuple[int, int, int, float]]:
    table = v.episodes()
    rows = zip(table.row, table.start, table.length, table.returns, strict=True)
    return sorted((int(a), int(b), int(c), float(d)) for a, b, c, d in rows)


def assert_data(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], strict=True, err_msg=key)


def pending_of(v: Vault) -> dict[str, tuple[int, int]]:
    """Per array, (first time chunk, count) of the tags the vault's commit record keeps."""
    return {k: (p.start, len(p.values)) for k, p in (v.snapshot.commit.tags or {}).items()}


def assert_verified(where: Any, at: Any = None) -> None:
    report = vault.verify(where, at=at)
    assert report.ok, report.problems
    assert not report.warnings, report.warnings


def build(where: Any, chunk: dict[str, list[int]] = CHUNK, reopen: bool = True) -> list[Any]:
    """:data:`STEPS` appended (each by a writer that reopened the vault when ``reopen``); per
    commit: (commit id, length, fingerprint, pending tags)."""
    commits = []
    v = Vault.create(where, EXAMPLE, rows=ROWS, chunk=chunk, **EPISODES)
    t0 = 0
    for n in STEPS:
        if reopen:
            v.close()
            v = Vault.open(where, "a")
        v.append(data(t0, n))
        t0 += n
        commits.append((v.commit_id, t0, v.fingerprint(), pending_of(v)))
    v.close()
    return commits


def assert_flushed_midway(commits: list[Any], key: str = OBS) -> None:
    """Some commit kept tags of ``key`` in its record, and a later one wrote them out."""
    kept = [c[3].get(key) for c in commits]
    first = next(i for i, p in enumerate(kept) if p is not None)
    later = [p for p in kept[first + 1 :] if p is None or p[0] > kept[first][0]]
    assert later, kept
    assert kept[-1] is not None, kept  # the last commit keeps some too


# ------------------------------------------------------------------------------------ where
@pytest.fixture
def where(vault_url: str) -> str:
    """A fresh vault location, on disk then on S3 (the suite's ``vault_url``)."""
    return vault_url


# ------------------------------------------------------------------------------ 1. pins
def test_every_commit_reads_verifies_and_fingerprints_as_it_was_across_flushes(where: str) -> None:
    commits = build(where)
    assert_flushed_midway(commits)
    assert_flushed_midway(commits, "experience/reward")
    theirs = spec_reader.open_vault(where)
    for commit_id, n, fingerprint, pending in commits:
        old = Vault.open(where, at=commit_id)
        assert old.committed_length == n
        assert pending_of(old) == pending
        assert_data(old.read_numpy(), data(0, n))
        part = {k: x[2:] for k, x in data(n // 3, n - n // 3).items()}
        assert_data(old.read_numpy(rows=[2], start=n // 3), part)
        assert episodes_of(old) == model_episodes(n)
        assert old.fingerprint() == fingerprint
        assert_verified(where, at=commit_id)
        report = vault.verify(where, at=commit_id, fingerprint=fingerprint)
        assert report.ok, report.problems
        spec = theirs.at(commit_id)  # the specification's reader agrees
        assert_data(spec.read(), data(0, n))
        assert spec.fingerprint() == fingerprint


def test_a_tag_name_pins_a_commit_whose_tags_were_written_out_since(tmp_path: Path) -> None:
    where = tmp_path / "v"
    with Vault.create(where, EXAMPLE, rows=ROWS, chunk=CHUNK, **EPISODES) as v:
        v.append(data(0, 5))  # obs: chunks 0, 1 complete, 4 tags kept
        assert pending_of(v)[OBS] == (0, 4)
        v.tag("before")
        v.append(data(5, 4))  # 4 complete: 8 > 4, written to the tag array
        assert OBS not in pending_of(v)
    old = Vault.open(where, at="before")
    assert pending_of(old)[OBS] == (0, 4)
    assert_data(old.read_numpy(), data(0, 5))
    out = subprocess.run(
        [VAULT_CLI, "verify", str(where), "--at", "before", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["ok"] is True


def test_a_reader_refreshed_across_a_flush_reads_the_new_commit(tmp_path: Path) -> None:
    where = tmp_path / "v"
    writer = Vault.create(where, EXAMPLE, rows=ROWS, chunk=CHUNK, **EPISODES)
    writer.append(data(0, 5))
    reader = Vault.open(where)
    assert_data(reader.read_numpy(), data(0, 5))  # its checks' cache holds the kept tags
    writer.append(data(5, 6))  # flushed: obs tags now in the tag array
    assert OBS not in pending_of(writer)
    assert reader.refresh() == 11
    assert_data(reader.read_numpy(), data(0, 11))
    assert episodes_of(reader) == model_episodes(11)
    writer.append(data(11, 3))
    reader.refresh()
    assert_data(reader.read_numpy(), data(0, 14))
    # a place that a refreshed reader has not read yet is still checked against its tag
    kv = parse_location(where).kvstore()
    kv.write(f"{OBS}/c/1/6/0", bytes(kv.read(f"{OBS}/c/1/5/0").result().value)).result()
    fresh = Vault.open(where)
    with pytest.raises(VaultCorruptError, match=re.escape(f"{OBS}/c/1/6/0 (timesteps 12-13)")):
        fresh.read_numpy()
    writer.close()


# ------------------------------------------------------------------ 2. close and reopen
def test_writers_that_reopen_with_tags_kept_append_across_flushes(where: str) -> None:
    commits = build(where, reopen=True)
    assert_flushed_midway(commits)
    n = sum(STEPS)
    # and once more: one writer, several appends, each of them with tags kept on open
    with Vault.open(where, "a") as v:
        assert pending_of(v) == commits[-1][3]
        for k in range(3):
            v.append(data(n, 3 + k))
            n += 3 + k
        assert_data(v.read_numpy(), data(0, n))  # the writer reads what it wrote
    v = Vault.open(where)
    assert_data(v.read_numpy(), data(0, n))
    assert episodes_of(v) == model_episodes(n)
    assert_verified(where)
    theirs = spec_reader.open_vault(where)
    assert_data(theirs.read(), data(0, n))
    assert theirs.fingerprint() == v.fingerprint()
    # the tags in the record and the tag array together: one per complete chunk, as stored
    snap = v.snapshot
    grid = snap.grids[OBS]
    complete = n // grid.step
    tags = _tags.read_tags(snap, grid, complete)
    kv = parse_location(where).kvstore()
    stored = [
        [int.from_bytes(bytes(kv.read(grid.chunk(b, k)).result().value)[-4:], "little") for k in
         range(complete)]
        for b in range(grid.row_blocks)
    ]  # fmt: skip
    np.testing.assert_array_equal(tags[:, :, 0], stored)


def test_a_restart_seam_and_a_reopened_writer_keep_the_tags(tmp_path: Path) -> None:
    where = tmp_path / "v"
    with Vault.create(where, EXAMPLE, rows=ROWS, chunk=CHUNK, **EPISODES) as v:
        v.append(data(0, 5))
        v.append(data(5, 4), continues=False)  # a seam at 5
    with Vault.open(where, "a") as v:
        assert v.seams == [vault.Seam(5, 0)]
        v.append(data(9, 7))
    got = Vault.open(where)
    assert_data(got.read_numpy(), data(0, 16))
    assert_verified(where)
    assert_data(spec_reader.open_vault(str(where)).read(), data(0, 16))


# -------------------------------------------------------------------- 3. derived vaults
@pytest.fixture
def small_default_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """New vaults made without ``chunk=`` (derived, imported) get chunks of 2 timesteps here
    (obs: 3 rows x 16 bytes), and derive appends one timestep at a time."""
    from vault.derive import _derive
    from vault.storage import _arrays

    monkeypatch.setattr(_arrays, "SMALL_ITEM_CHUNK_BYTES", 96)
    monkeypatch.setattr(_derive, "BLOCK_BYTES", 1)


def assert_sound(v: Vault, want: dict[str, np.ndarray]) -> None:
    assert_data(v.read_numpy(), want)
    assert_verified(v.location)
    theirs = spec_reader.open_vault(str(v.location))
    assert_data(theirs.read(), want)
    assert theirs.fingerprint() == v.fingerprint()


def test_slices_and_combinations_of_a_vault_with_kept_tags(
    tmp_path: Path, small_default_chunks: None
) -> None:
    src = tmp_path / "src"
    commits = build(src)
    assert_flushed_midway(commits)
    n = commits[-1][1]
    part = vault.derive_slice(src, tmp_path / "part", rows=[0, 2], start=3, stop=n - 1)
    want = {k: x[[0, 2], 3 : n - 1] for k, x in data(0, n).items()}
    assert part.manifest.leaves[0].chunk[1] == 2 or part.manifest.leaves[1].chunk[1] == 2
    assert_sound(part, want)
    # the derived vault kept tags in its own record and wrote some out too
    assert pending_of(part), pending_of(part)
    assert (tmp_path / "part" / "tags" / OBS / "zarr.json").is_file()
    # from a pinned commit whose tags its record kept
    pinned = Vault.open(src, at=commits[3][0])
    m = commits[3][1]
    early = vault.derive_slice(pinned, tmp_path / "early")
    assert_sound(early, data(0, m))
    both = vault.combine([src, pinned], tmp_path / "both")
    want = {k: np.concatenate([data(0, n)[k], data(0, m)[k]], axis=1) for k in EXAMPLE}
    assert_sound(both, want)
    chosen = Vault.open(src).episodes()
    chosen = chosen[chosen.row == 1]
    picked = vault.derive_episodes(src, tmp_path / "episodes", chosen)
    d = data(0, n)
    want = {
        k: np.concatenate(
            [d[k][1:2, s : s + ln] for s, ln in zip(chosen.start, chosen.length, strict=True)], 1
        )
        for k in EXAMPLE
    }
    assert_sound(picked, want)
    assert len(picked.episodes()) == len(chosen)


def test_a_vault_being_written_is_derived_at_its_latest_commit(
    tmp_path: Path, small_default_chunks: None
) -> None:
    src = tmp_path / "src"
    with Vault.create(src, EXAMPLE, rows=ROWS, chunk=CHUNK, **EPISODES) as v:
        v.append(data(0, 7))
        v.append(data(7, 4))
        copy = vault.derive_slice(v, tmp_path / "copy")  # the open writer as the source
        v.append(data(11, 2))
    assert_sound(copy, data(0, 11))
    assert_sound(Vault.open(src), data(0, 13))


# ----------------------------------------------------------------------- 4. flashbax
def test_a_reference_vault_written_from_buffer_states_in_the_background(
    tmp_path: Path, small_default_chunks: None
) -> None:
    """The reference's API (``Vault(name, state, rel_dir=...)``, ``write(state)``) from a
    trajectory buffer whose ring wraps between writes, some writes in the background."""
    cap = 8
    buffer = fbx.make_trajectory_buffer(
        add_batch_size=ROWS,
        sample_batch_size=1,
        sample_sequence_length=1,
        period=1,
        min_length_time_axis=1,
        max_length_time_axis=cap,
    )
    state = buffer.init({k: jnp.asarray(x) for k, x in EXAMPLE.items()})
    add = buffer.add
    from vault.vault import Vault as ReferenceVault

    v = ReferenceVault("run", state, rel_dir=str(tmp_path), vault_uid="u")
    t0 = 0
    for i, n in enumerate(STEPS):
        state = add(state, {k: jnp.asarray(x) for k, x in data(t0, n).items()})
        t0 += n
        assert v.write(state, block=i % 2 == 1) == n
    v.close()
    where = tmp_path / "run" / "u"
    got = Vault.open(where)
    assert got.manifest.format_version == 5
    assert pending_of(got), pending_of(got)
    assert (where / "tags" / OBS / "zarr.json").is_file()  # some written out
    assert_data(got.read_numpy(), data(0, t0))
    assert_verified(where)


def test_flashbax_vault_imported_with_tags_kept_and_written(
    tmp_path: Path, small_default_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from _convert_sources import write_flashbax

    from vault.converters import _sink, import_flashbax

    monkeypatch.setattr(_sink, "MIN_BLOCK_BYTES", 1)
    spec = {"obs": ((4,), np.float32), "reward": ((), np.float32), "done": ((), np.bool_)}
    source, want = write_flashbax(
        tmp_path / "fbx", "run", spec, rows=ROWS, capacity=8, steps=23, write_every=3
    )
    out = import_flashbax(source, tmp_path / "imported", done="done", reward="reward",
                          block_bytes=60)  # fmt: skip
    assert out.committed_length == 23
    commit = out.snapshot.commit
    assert commit.seq > 3  # several appends
    assert any(p.start > 0 for p in (commit.tags or {}).values()), commit.tags
    assert_sound(out, {k: np.asarray(x) for k, x in want.items()})


# ------------------------------------------------------------------------- 5. datasets
def test_a_dataset_of_shards_with_tags_kept_reads_and_verifies(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **EPISODES)
    lengths = {"a": 0, "b": 0}
    for i, n in enumerate(STEPS):
        name = "ab"[i % 2]
        with Dataset.open(str(root)).shard(name) as shard:
            shard.append(data(lengths[name], n, salt=i % 2))
        lengths[name] += n
    ds = Dataset.open(str(root))
    assert ds.committed_lengths == lengths
    for salt, name in enumerate("ab"):
        assert_data(ds.read_numpy(name), data(0, lengths[name], salt))
        assert pending_of(ds.vault(name)), name
        assert_verified(root / "shards" / name)
    table = ds.episodes()
    assert sorted(set(table.shard.tolist())) == ["a", "b"]
    for name in "ab":
        mine = table[table.shard == name]
        got = zip(mine.row, mine.start, mine.length, strict=True)
        want = [e[:3] for e in model_episodes(lengths[name])]
        assert sorted((int(a), int(b), int(c)) for a, b, c in got) == want
    out = subprocess.run([VAULT_CLI, "verify", str(root), "--json"], capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    spec = spec_reader.open_dataset(str(root))
    for salt, name in enumerate("ab"):
        assert_data(spec.shard(name).read(), data(0, lengths[name], salt))


def test_an_episode_index_of_several_index_chunks_with_tags_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every timestep ends an episode of every row: 4 rows x 2100 timesteps per append is 8400
    episodes, more than one index chunk (8192); with one tag kept at most, the index's tags
    go to the record, then to its tag array, then to the record again. Read through a
    dataset (which reads shards' index chunks itself) and as a vault, pinned too."""
    monkeypatch.setattr(_tags, "PENDING_MAX", 1)
    rows, n = 4, 2100
    example = {"done": np.zeros((), bool), "reward": np.zeros((), np.float32)}
    chunk = {"done": [4, 512], "reward": [4, 512]}
    root = tmp_path / "ds"
    Dataset.create(str(root), example, rows=rows, chunk=chunk, done_leaf="done",
                   reward_leaf="reward")  # fmt: skip
    ids, kept = [], []
    for i in range(3):
        with Dataset.open(str(root)).shard("s") as shard:
            t = np.arange(i * n, (i + 1) * n)[None, :] + np.zeros((rows, 1), int)
            rewards = (t % 7 + np.arange(rows)[:, None]).astype(np.float32)
            shard.append({"done": np.ones((rows, n), bool), "reward": rewards})
            ids.append(shard.commit_id)
            kept.append(pending_of(shard).get("episodes/bounds"))
    assert kept == [(0, 1), None, (2, 1)], kept
    where = root / "shards" / "s"
    for i, commit_id in enumerate(ids):
        v = Vault.open(where, at=commit_id)
        table = v.episodes()
        count = rows * n * (i + 1)
        assert len(table) == count
        order = np.lexsort((table.start, table.row))
        np.testing.assert_array_equal(table.length, np.ones(count, int))
        want_rows = np.repeat(np.arange(rows), n * (i + 1))
        np.testing.assert_array_equal(table.row[order], want_rows)
        t = np.tile(np.arange(n * (i + 1)), rows)
        np.testing.assert_array_equal(table.start[order], t)
        np.testing.assert_array_equal(table.returns[order], t % 7 + want_rows)
        assert_verified(where, at=commit_id)
    ds = Dataset.open(str(root))
    table = ds.episodes()
    assert len(table) == rows * n * 3
    np.testing.assert_array_equal(
        np.sort(table.returns), np.sort(Vault.open(where).episodes().returns)
    )
    # an index chunk moved over the one place whose tag only the record holds
    kv = parse_location(where).kvstore()
    kv.write(
        "episodes/bounds/c/2/0", bytes(kv.read("episodes/bounds/c/1/0").result().value)
    ).result()
    wrong = re.escape("episodes/bounds/c/2/0 (episodes 16384-24575) is not the chunk written there")
    with pytest.raises(VaultCorruptError, match=wrong):
        Dataset.open(str(root)).episodes()
    with pytest.raises(VaultCorruptError, match=wrong):
        Vault.open(where).episodes()
    report = vault.verify(where)
    assert any(re.search(wrong, p.message) for p in report.problems), report.problems


# ------------------------------------------------------------------------ 6. corruption
def chunk_key_kept(where: Path) -> tuple[str, str, int]:
    """(the key of an obs chunk whose tag only the record holds, of another complete obs
    chunk, its time chunk)."""
    v = Vault.open(where)
    held = v.snapshot.commit.tags[OBS]
    complete = v.committed_length // 2
    assert held.start < complete, held
    k = complete - 1
    assert k >= held.start
    assert k > 0
    return f"{OBS}/c/0/{k}/0", f"{OBS}/c/0/{k - 1}/0", k


def test_a_damaged_chunk_whose_tag_the_record_keeps_is_named(tmp_path: Path) -> None:
    where = tmp_path / "v"
    build(where)
    key, _, k = chunk_key_kept(where)
    path = where / key
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x5A
    path.write_bytes(bytes(raw))
    with pytest.raises(VaultCorruptError, match=re.escape("experience/obs")) as err:
        Vault.open(where).read_numpy()
    assert f"c/0/{k}/0" in str(err.value) or f"{2 * k}" in str(err.value), str(err.value)
    report = vault.verify(where)
    places = [p.place for p in report.problems]
    assert f"{OBS} chunk 0.{k}.0" in places, report.problems
    out = subprocess.run([VAULT_CLI, "verify", str(where), "--json"], capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert out.returncode == 3, out.stdout + out.stderr
    assert f"{OBS} chunk 0.{k}.0" in [p["place"] for p in json.loads(out.stdout)["problems"]]


def test_a_sound_chunk_moved_or_restored_from_another_vault_is_named(tmp_path: Path) -> None:
    where = tmp_path / "v"
    build(where)
    key, other, k = chunk_key_kept(where)
    want = re.escape(f"{key} (timesteps {2 * k}-{2 * k + 1}) is not the chunk written there")
    original = (where / key).read_bytes()
    # 1. another chunk of the same array moved over it
    shutil.copyfile(where / other, where / key)
    with pytest.raises(VaultCorruptError, match=want):
        Vault.open(where).read_numpy()
    with pytest.raises(VaultCorruptError, match=want):
        Vault.open(where).read_numpy(rows=[1], start=2 * k, stop=2 * k + 1)
    report = vault.verify(where)
    assert any(re.search(want, p.message) for p in report.problems), report.problems
    out = subprocess.run([VAULT_CLI, "verify", str(where), "--json"], capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert out.returncode == 3, out.stdout + out.stderr
    problems = json.loads(out.stdout)["problems"]
    assert any(re.search(want, p["message"]) for p in problems), problems
    # 2. the chunk at the same place of another vault (the same shape, other values)
    twin = tmp_path / "twin"
    with Vault.create(twin, EXAMPLE, rows=ROWS, chunk=CHUNK, **EPISODES) as t:
        t.append(data(0, sum(STEPS), salt=1))
    shutil.copyfile(twin / key, where / key)
    with pytest.raises(VaultCorruptError, match=want):
        Vault.open(where).read_numpy()
    assert not vault.verify(where).ok
    with pytest.raises(spec_reader.SpecError, match="not the chunk written there"):
        spec_reader.open_vault(str(where)).read()
    # restored: sound again
    (where / key).write_bytes(original)
    assert_data(Vault.open(where).read_numpy(), data(0, sum(STEPS)))
    assert_verified(where)


# -------------------------------------------------------------------------- 7. others
def test_chunks_that_cut_the_item_axes_keep_every_item_chunks_tag(tmp_path: Path) -> None:
    where = tmp_path / "v"
    commits = build(where, chunk=CUT)
    assert_flushed_midway(commits)
    for commit_id, n, fingerprint, _ in commits:
        old = Vault.open(where, at=commit_id)
        assert_data(old.read_numpy(), data(0, n))
        assert old.fingerprint() == fingerprint
        assert_verified(where, at=commit_id)
    v = Vault.open(where)
    held = v.snapshot.commit.tags[OBS]
    k = sum(STEPS) // 2 - 1
    assert k >= held.start
    assert len(held.values) == 2 * 2 * (k + 1 - held.start)  # 2 row blocks x 2 item chunks
    # item chunk 1 of a place whose tags the record keeps, swapped with its item chunk 0
    kv = parse_location(where).kvstore()
    a, b = f"{OBS}/c/1/{k}/0", f"{OBS}/c/1/{k}/1"
    raw_a, raw_b = (bytes(kv.read(x).result().value) for x in (a, b))
    kv.write(a, raw_b).result()
    kv.write(b, raw_a).result()
    with pytest.raises(VaultCorruptError, match=re.escape(f"{a} (timesteps {2 * k}-")):
        Vault.open(where).read_numpy()
    with pytest.raises(VaultCorruptError, match=re.escape(f"{b} (timesteps {2 * k}-")):
        Vault.open(where).read_numpy(rows=[2], leaves=["obs"])
    report = vault.verify(where)
    assert not report.ok
    assert any(b in p.message for p in report.problems), report.problems


def test_background_writes_from_a_buffer_flush_tags_between_them(tmp_path: Path) -> None:
    cap = 64
    where = tmp_path / "v"

    def state(n: int) -> Any:
        experience = {}
        for key, values in data(0, n).items():
            ring = np.zeros((ROWS, cap, *values.shape[2:]), values.dtype)
            ring[:, :n] = values
            experience[key] = ring
        return fbx.TrajectoryBufferState(
            experience=experience, current_index=jnp.int32(n), is_full=jnp.bool_(False)
        )

    ids = []
    # obs in one row block: background writes of a leaf cut into row blocks of 2 out of 3
    # rows fail on their own (test_a_background_write_of_a_partial_row_block below)
    chunk = {**CHUNK, "obs": [3, 2, 4]}
    with Vault.create(where, state(0), chunk=chunk, **EPISODES) as v:
        v.max_pending = 3
        n = 0
        for step in STEPS:
            n += step
            v.write(state(n), block=False)
        v.flush()
        ids.append(v.commit_id)
        v.write(state(n + 5), block=False)  # left for close to wait for
    n += 5
    got = Vault.open(where)
    assert got.snapshot.commit.seq == len(STEPS) + 1
    assert_data(got.read_numpy(), data(0, n))
    assert episodes_of(got) == model_episodes(n)
    assert_verified(where)
    assert_data(Vault.open(where, at=ids[0]).read_numpy(), data(0, n - 5))


def test_reads_by_windows_and_xarray_check_kept_tags(tmp_path: Path) -> None:
    where = tmp_path / "v"
    build(where)
    n = sum(STEPS)
    v = Vault.open(where)
    xr = v.to_xarray()
    np.testing.assert_array_equal(xr["obs"].values, data(0, n)["obs"])
    key, other, k = chunk_key_kept(where)
    shutil.copyfile(where / other, where / key)
    moved = re.escape(f"{key} (timesteps {2 * k}-{2 * k + 1})")
    with pytest.raises(VaultCorruptError, match=moved):
        np.asarray(Vault.open(where).to_xarray()["obs"].values)
    with pytest.raises(VaultCorruptError, match=moved):
        list(Vault.open(where).as_dataset(1, 2, seed=0))


def test_a_flush_across_a_tag_chunk_boundary_from_a_reopened_writer(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks that cut 4 item chunks, one timestep long: 240 tags per append of 60; at most 300
    kept, so every other writer writes them out, the third time (tags 960 to 1440) across the
    tag array's first chunk (1024 tags), from tags that a writer before it kept."""
    monkeypatch.setattr(_tags, "PENDING_MAX", 300)
    example = {"x": np.zeros(4, np.float32)}

    def block(t0: int, n: int) -> dict[str, np.ndarray]:
        t = np.arange(t0, t0 + n, dtype=np.float32)
        return {"x": (t[:, None] + np.array([0.0, 0.25, 0.5, 0.75], np.float32))[None]}

    Vault.create(where, example, rows=1, chunk={"x": [1, 1, 1]}).close()
    kept = []
    for i in range(6):
        with Vault.open(where, "a") as v:
            v.append(block(60 * i, 60))
            kept.append(pending_of(v).get("experience/x"))
    assert kept == [(0, 240), None, (120, 240), None, (240, 240), None], kept
    v = Vault.open(where)
    assert_data(v.read_numpy(), block(0, 360))
    assert_verified(where)
    snap = v.snapshot
    grid = snap.grids["experience/x"]
    tags = _tags.read_tags(snap, grid, 360)
    kv = parse_location(where).kvstore()
    raws = [bytes(r.value) for r in [kv.read(grid.chunk(0, k, i)) for k in (250, 300, 359)
                                     for i in range(4)] for r in [r.result()]]  # fmt: skip
    want = [int.from_bytes(raw[-4:], "little") for raw in raws]
    assert tags[0, [250, 300, 359]].ravel().tolist() == want
    theirs = spec_reader.open_vault(str(where))
    assert_data(theirs.read(), block(0, 360))
    assert theirs.fingerprint() == v.fingerprint()
