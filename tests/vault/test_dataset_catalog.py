"""The dataset catalog (vault/dataset/_catalog.py): a cache at a dataset's root that lets a
reader of many shards skip their records and index. It must only ever save work: every answer
with a catalog (current, stale, damaged, another dataset's) equals the answer without one.
Real TensorStore/Zarr in a temp dir; one test on the real S3 test server."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vault
from vault import Dataset, Vault

EXAMPLE = {"obs": np.zeros((2,), np.float32), "reward": np.float32(0), "done": np.bool_(False)}
ROWS = 2
SHARDS = 8  # CATALOG_MIN_SHARDS: fewer shards get no catalog
COLUMNS = ("row", "start", "length", "returns", "truncated", "complete", "start_known")


def _block(seed: int, steps: int = 12) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((ROWS, steps, 2)).astype(np.float32),
        "reward": rng.standard_normal((ROWS, steps)).astype(np.float32),
        "done": rng.random((ROWS, steps)) < 0.3,
    }


def _build(root: str, shards: int = SHARDS) -> None:
    ds = Dataset.create(root, EXAMPLE, rows=ROWS, done_leaf="done", reward_leaf="reward")
    for i in range(shards):
        with ds.shard(f"s{i}") as shard:
            shard.append(_block(i))


def _truth(root: Path) -> dict[str, Any]:
    """What a reader without any catalog sees (each shard opened as a vault)."""
    names = sorted(p.name for p in (root / "shards").iterdir())
    vaults = [Vault.open(str(root / "shards" / n)) for n in names]
    tables = [v.episodes() for v in vaults]
    return {
        "lengths": {n: v.committed_length for n, v in zip(names, vaults, strict=True)},
        "ids": {n: v.commit_id for n, v in zip(names, vaults, strict=True)},
        "table": vault.EpisodeTable.concat(tables),
        "shard": np.concatenate([np.full(len(t), n) for n, t in zip(names, tables, strict=True)]),
        "open": vault.EpisodeTable.concat([v.episodes(include_open=True) for v in vaults]),
    }


def _assert_sees(ds: Dataset, truth: dict[str, Any]) -> None:
    assert ds.committed_lengths == truth["lengths"]
    assert ds.commit_ids == truth["ids"]
    table = ds.episodes()
    for column in COLUMNS:
        np.testing.assert_array_equal(getattr(table, column), getattr(truth["table"], column))
    np.testing.assert_array_equal(table.shard, truth["shard"])
    with_open = ds.episodes(include_open=True)
    for column in COLUMNS:
        np.testing.assert_array_equal(getattr(with_open, column), getattr(truth["open"], column))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("catalog") / "ds"
    _build(str(root))
    return root


def _copy(built: Path, tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(built, root)
    return root


def test_a_reader_writes_the_catalog_and_the_next_one_reads_nothing_else(
    built: Path, tmp_path: Path
) -> None:
    root = _copy(built, tmp_path)
    (root / "catalog").unlink(missing_ok=True)
    truth = _truth(root)
    first = Dataset.open(str(root), write_catalog=True)
    assert (root / "catalog").is_file()  # open wrote it (records only)
    _assert_sees(first, truth)  # the first table adds the index columns
    # every shard's index chunks gone: a reader that still gets the table took it from the
    # catalog (and a reader without it fails: the catalog is what answered)
    for index in (root / "shards").glob("*/episodes"):
        shutil.rmtree(index)
    second = Dataset.open(str(root), write_catalog=True)
    _assert_sees(second, truth)
    (root / "catalog").unlink()
    with pytest.raises(vault.VaultCorruptError, match="episode index chunk"):
        Dataset.open(str(root), write_catalog=False).episodes()


def test_a_shard_that_committed_since_is_read_as_without_a_catalog(
    built: Path, tmp_path: Path
) -> None:
    root = _copy(built, tmp_path)
    Dataset.open(str(root), write_catalog=True).episodes()  # a catalog with every table
    with Dataset.open(str(root), write_catalog=True).shard("s3") as shard:
        shard.append(_block(100, steps=30))
    with Dataset.open(str(root), write_catalog=True).shard("new") as shard:
        shard.append(_block(101))
    truth = _truth(root)
    ds = Dataset.open(str(root), write_catalog=True)
    _assert_sees(ds, truth)
    assert ds.committed_lengths["s3"] == 42
    np.testing.assert_array_equal(
        ds.read_numpy("s3")["obs"], Vault.open(str(root / "shards" / "s3")).read_numpy()["obs"]
    )


def _damage(path: Path, how: str, other: Path) -> None:
    raw = path.read_bytes()
    if how == "flip":
        damaged = bytearray(raw)
        damaged[len(raw) // 3] ^= 0x04
        path.write_bytes(bytes(damaged))
    elif how == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif how == "extended":  # a stale tail after a valid catalog (a torn rewrite)
        path.write_bytes(raw + b"\0" * 64)
    elif how == "garbage":
        path.write_bytes(b"not a catalog")
    elif how == "empty":
        path.write_bytes(b"")
    else:  # another dataset's (valid) catalog
        shutil.copyfile(other, path)


@pytest.mark.parametrize("how", ["flip", "truncate", "extended", "garbage", "empty", "foreign"])
def test_a_damaged_or_foreign_catalog_is_ignored_and_rewritten(
    built: Path, tmp_path: Path, how: str
) -> None:
    root = _copy(built, tmp_path)
    Dataset.open(str(root), write_catalog=True).episodes()
    other = tmp_path / "other"
    _build(str(other))
    Dataset.open(str(other), write_catalog=True).episodes()
    truth = _truth(root)
    _damage(root / "catalog", how, other / "catalog")
    damaged = (root / "catalog").read_bytes()
    _assert_sees(Dataset.open(str(root), write_catalog=True), truth)
    rewritten = (root / "catalog").read_bytes()
    assert rewritten != damaged  # replaced by a sound one
    for index in (root / "shards").glob("*/episodes"):
        shutil.rmtree(index)
    # ... which the next reader uses
    _assert_sees(Dataset.open(str(root), write_catalog=True), truth)


def test_a_catalog_made_before_the_index_was_damaged_still_gives_the_true_table(
    built: Path, tmp_path: Path
) -> None:
    """The catalog holds what was read and checked: damage done to the index later does not
    reach readers through it, and verify still finds the damage."""
    root = _copy(built, tmp_path)
    Dataset.open(str(root), write_catalog=True).episodes()
    truth = _truth(root)
    chunk = root / "shards" / "s1" / "episodes" / "bounds" / "c" / "0" / "0"
    chunk.write_bytes(bytes(len(chunk.read_bytes())))
    _assert_sees(Dataset.open(str(root), write_catalog=True), truth)
    assert vault.verify(str(root / "shards" / "s1")).problems


def test_small_datasets_readers_at_tags_and_the_cli_write_no_catalog(
    built: Path, tmp_path: Path
) -> None:
    small = tmp_path / "small"
    _build(str(small), shards=SHARDS - 1)
    (small / "catalog").unlink()  # its writers made one
    Dataset.open(str(small), write_catalog=True).episodes()
    assert not (small / "catalog").exists()  # its readers do not
    root = _copy(built, tmp_path)
    (root / "catalog").unlink(missing_ok=True)
    Dataset.open(str(root), write_catalog=False).episodes()
    assert not (root / "catalog").exists()
    Dataset.open(str(root), write_catalog=True).tag("v1")
    (root / "catalog").unlink()
    Dataset.open(str(root), at="v1").episodes()
    assert not (root / "catalog").exists()
    from typer.testing import CliRunner

    from vault.cli import app

    for args in (["ls", str(tmp_path)], ["episodes", str(root)], ["verify", str(root)]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
    assert not (root / "catalog").exists()


def test_a_catalog_that_cannot_be_written_is_no_error(built: Path, tmp_path: Path) -> None:
    root = _copy(built, tmp_path)
    (root / "catalog").unlink(missing_ok=True)
    (root / "catalog").mkdir()  # the key is a folder: every write of it fails
    (root / "catalog" / "keep").write_bytes(b"")
    truth = _truth(root)
    _assert_sees(Dataset.open(str(root), write_catalog=True), truth)
    assert (root / "catalog").is_dir()


def test_the_catalog_on_s3(s3_env: Any) -> None:
    root = f"s3://{s3_env.bucket}/catalog-{uuid.uuid4().hex[:10]}"
    _build(root)
    # the writers' conditional updates built it on the bucket, before any reader
    assert Dataset.open(root, write_catalog=False).check_catalog()["used"] == SHARDS
    first = Dataset.open(root, write_catalog=True)
    table = first.episodes()
    second = Dataset.open(root, write_catalog=True)
    assert second.committed_lengths == first.committed_lengths
    again = second.episodes()
    for column in COLUMNS:
        np.testing.assert_array_equal(getattr(again, column), getattr(table, column))
    from vault import parse_location

    assert parse_location(root).read("catalog") is not None


def test_tables_are_kept_for_small_shards_only_and_within_a_budget(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A catalog that held every table of a big dataset would cost more to read at each open
    than it spares: tables are kept for shards of few episodes, up to a total."""
    from vault.dataset import _catalog as catalog

    root = _copy(built, tmp_path)
    (root / "catalog").unlink(missing_ok=True)
    truth = _truth(root)
    counts = {n: int((truth["shard"] == n).sum()) for n in truth["lengths"]}
    per_shard, total = sorted(counts.values())[len(counts) // 2], 2 * max(counts.values())
    monkeypatch.setattr(catalog, "TABLE_ROWS", per_shard)
    monkeypatch.setattr(catalog, "TABLE_ROWS_TOTAL", total)
    _assert_sees(Dataset.open(str(root), write_catalog=True), truth)
    raw = (root / "catalog").read_bytes()
    kept = catalog.decode(raw, Dataset.open(str(root), write_catalog=False)._catalog_key)
    tabled = {n: len(e.bounds) for n, e in kept.entries.items() if e.bounds is not None}
    assert tabled
    assert all(rows <= per_shard for rows in tabled.values())
    assert sum(tabled.values()) <= total
    assert len(tabled) < len(counts)  # some shards left to their index
    # those read their index, the rest not
    _assert_sees(Dataset.open(str(root), write_catalog=True), truth)
    assert (root / "catalog").read_bytes() == raw  # and nothing worth rewriting


def _verify_json(root: Path) -> dict[str, Any]:
    import json

    from typer.testing import CliRunner

    from vault.cli import app

    result = CliRunner().invoke(app, ["verify", str(root), "--json"])
    doc = json.loads(result.stdout)
    assert result.exit_code == (0 if doc["ok"] else 3), result.output
    return doc


def test_verify_checks_the_catalog_against_the_shards(built: Path, tmp_path: Path) -> None:
    """A catalog whose entries disagree with their shards (forged with a valid checksum, or
    the index changed after it was made) would serve readers its own version: verify says
    so, names the shard, and fails."""
    from vault.dataset import _catalog as catalog

    root = _copy(built, tmp_path)
    (root / "catalog").unlink(missing_ok=True)
    assert _verify_json(root)["catalog"] == {"state": "absent", "used": 0, "problems": []}
    Dataset.open(str(root), write_catalog=True).episodes()
    doc = _verify_json(root)
    assert doc["ok"]
    assert doc["catalog"] == {"state": "valid", "used": SHARDS, "problems": []}
    key = Dataset.open(str(root), write_catalog=False)._catalog_key
    kept = catalog.decode((root / "catalog").read_bytes(), key)
    s2 = kept.entries["s2"]
    assert s2.bounds is not None
    assert len(s2.bounds)
    forged = dict(kept.entries)
    forged["s2"] = dataclasses.replace(
        s2, bounds=s2.bounds + np.array([0, 0, 1, 0])
    )  # longer episodes
    forged["s5"] = dataclasses.replace(kept.entries["s5"], length=kept.entries["s5"].length + 1)
    (root / "catalog").write_bytes(catalog.encode(list(forged.values()), key))
    doc = _verify_json(root)
    assert not doc["ok"]
    assert all(s["ok"] for s in doc["shards"])
    problems = doc["catalog"]["problems"]
    assert len(problems) == 2
    assert "'s2'" in problems[0]
    assert "episodes differ" in problems[0]
    assert "'s5'" in problems[1]
    assert "committed length" in problems[1]
    (root / "catalog").write_bytes(b"damaged")
    doc = _verify_json(root)
    assert doc["ok"]
    assert doc["catalog"]["state"] == "damaged"


def _spawn(script: str, *args: str) -> subprocess.Popen[str]:
    """A Python process running ``script`` with ``args`` (its output piped, as text)."""
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


_READER = """
import sys
from pathlib import Path
import numpy as np
from vault import Dataset
root, rounds, expected = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for i in range(rounds):
    if i % 3 == 0:
        Path(root, "catalog").unlink(missing_ok=True)  # every reader rewrites it
    ds = Dataset.open(root, write_catalog=True)
    table = ds.episodes()
    got = f"{sum(ds.committed_lengths.values())}:{len(table)}:{int(table.start.sum())}"
    assert got == expected, (i, got, expected)
print("ok")
"""


def test_readers_writing_the_catalog_at_once_always_read_the_truth(
    built: Path, tmp_path: Path
) -> None:
    """Two reader processes open the dataset over and over, each rewriting the catalog (and
    deleting it now and then) while the other reads it: every read equals the truth."""

    root = _copy(built, tmp_path)
    truth = _truth(root)
    expected = (
        f"{sum(truth['lengths'].values())}:{len(truth['table'])}:{int(truth['table'].start.sum())}"
    )
    procs = [_spawn(_READER, str(root), "40", expected) for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        assert out.strip() == "ok"
    _assert_sees(Dataset.open(str(root), write_catalog=True), truth)


_WRITER = """
import sys
import numpy as np
from vault import Dataset
root, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = np.random.default_rng(len(name))
with Dataset.open(root, write_catalog=False).shard(name) as shard:
    for _ in range(rounds):
        shard.append({
            "obs": rng.standard_normal((2, 5, 2)).astype(np.float32),
            "reward": rng.standard_normal((2, 5)).astype(np.float32),
            "done": rng.random((2, 5)) < 0.3,
        })
print("ok")
"""

_FOLLOWER = """
import sys, time
import numpy as np
from vault import Dataset, Vault
root, seconds = sys.argv[1], float(sys.argv[2])
last, rounds, deadline = {}, 0, time.monotonic() + seconds
while time.monotonic() < deadline:
    # a fresh reader each round: the catalog as others left it
    ds = Dataset.open(root, write_catalog=True)
    table = ds.episodes()
    for name, length in ds.committed_lengths.items():
        assert length >= last.get(name, 0), (name, length, last)
        last[name] = length
        mine = table[table.shard == name]
        own = Vault.open(f"{root}/shards/{name}").episodes()  # now, or later: a longer prefix
        assert len(own) >= len(mine), (name, len(own), len(mine))
        for column in ("row", "start", "length", "returns", "truncated", "start_known"):
            assert np.array_equal(getattr(mine, column), getattr(own, column)[: len(mine)],
                                  equal_nan=column == "returns"), (name, column)
    rounds += 1
print("ok", rounds)
"""


def test_fresh_readers_follow_shards_being_written(built: Path, tmp_path: Path) -> None:
    """Two shards are appended to by writer processes while two reader processes open the
    dataset afresh over and over (each using and rewriting the catalog): every table a reader
    gets is a prefix of each shard's own, and lengths never go back."""

    root = _copy(built, tmp_path)

    writers = [_spawn(_WRITER, str(root), name, "60") for name in ("s0", "s1")]
    readers = [_spawn(_FOLLOWER, str(root), "6") for _ in range(2)]
    for proc in writers + readers:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        assert out.startswith("ok")
        if proc in readers:
            assert int(out.split()[1]) >= 3  # rounds while the writers ran
    truth = _truth(root)
    assert truth["lengths"]["s0"] == 12 + 60 * 5
    _assert_sees(Dataset.open(str(root), write_catalog=True), truth)


def test_the_first_reader_of_a_finished_dataset_finds_every_shard_in_the_catalog(
    built: Path, tmp_path: Path
) -> None:
    """Each shard's writer merges its entry into the catalog when it closes: no reader has
    opened the dataset yet, and it already serves every shard (records and index)."""
    root = _copy(built, tmp_path)
    truth = _truth(root)
    assert Dataset.open(str(root), write_catalog=False).check_catalog() == {
        "state": "valid",
        "used": SHARDS,
        "problems": [],
    }
    for index in (root / "shards").glob("*/episodes"):
        shutil.rmtree(index)  # only the catalog can answer for the index now
    _assert_sees(Dataset.open(str(root), write_catalog=False), truth)


_CLOSER = """
import sys, time
import numpy as np
from vault import Dataset
root, name, at = sys.argv[1], sys.argv[2], float(sys.argv[3])
ds = Dataset.open(root, write_catalog=False)
writer = ds.shard(name)
rng = np.random.default_rng(int(name[1:]))
writer.append({
    "obs": rng.standard_normal((2, 9, 2)).astype(np.float32),
    "reward": rng.standard_normal((2, 9)).astype(np.float32),
    "done": rng.random((2, 9)) < 0.3,
})
time.sleep(max(0.0, at - time.time()))
writer.close()  # all at once: their catalog updates race
print("ok")
"""


def test_writers_closing_at_once_all_get_into_the_catalog(tmp_path: Path) -> None:
    import time

    from vault.dataset import _catalog as catalog

    root = tmp_path / "ds"
    Dataset.create(str(root), EXAMPLE, rows=ROWS, done_leaf="done", reward_leaf="reward")
    at = time.time() + 6
    procs = [_spawn(_CLOSER, str(root), f"w{i}", str(at)) for i in range(6)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        assert out.strip() == "ok"
    key = Dataset.open(str(root), write_catalog=False)._catalog_key
    kept = catalog.decode((root / "catalog").read_bytes(), key)
    assert sorted(kept.entries) == [f"w{i}" for i in range(6)]  # none lost to a race
    truth = _truth(root)
    for index in (root / "shards").glob("*/episodes"):
        shutil.rmtree(index)
    _assert_sees(Dataset.open(str(root), write_catalog=False), truth)
