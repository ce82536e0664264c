"""The public docstrings' claims, checked against the behaviour.

Each test takes one sentence of a public docstring (a ``Raises`` entry, a default, a return
shape, an ``Args`` description) and runs it; bad arguments must get a typed error of the
package's hierarchy that names the argument, never an untyped error from deep inside or a
silent wrong result.

Data is tiny numpy; the few buffer tests run eagerly on shapes that need no jitted step.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers as fbx
from buffers import (
    ArgumentTypeError,
    BatchStructureError,
    BufferConfigError,
    NotReadyError,
    PriorityError,
    QueueFullError,
)
from vault import (
    Dataset,
    EpisodeTable,
    Vault,
    VaultArgumentError,
    VaultCorruptError,
    VaultError,
    VaultExistsError,
    VaultLocationError,
    VaultLockedError,
    VaultMetadataError,
    VaultModeError,
    VaultNotFoundError,
    VaultPinError,
    VaultReadError,
    VaultStructureError,
    combine,
    converters,
    derive_episodes,
    derive_slice,
    disk_usage,
    episode_stats,
    grain_source,
    leaf_stats,
    resume_stream,
    time_blocks,
    to_xarray,
    verify,
)

EXAMPLE = {"obs": np.zeros(3, np.float32), "done": np.bool_(False), "r": np.float32(0)}
LENGTH = 10


def _data(n: int, rows: int = 2) -> dict[str, np.ndarray]:
    """``n`` timesteps of every row; episodes end at t = 2, 6, 10, ... of each row."""
    done = np.zeros((rows, n), bool)
    done[:, 2::4] = True
    obs = np.arange(rows * n * 3, dtype=np.float32).reshape(rows, n, 3)
    return {"obs": obs, "done": done, "r": np.ones((rows, n), np.float32)}


@pytest.fixture(scope="module")
def vaults(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Read-only vaults shared by the module: ``ep`` (2 rows x 10, episode index, rewards) and
    ``plain`` (2 rows x 5 of one float leaf, no index)."""
    root = tmp_path_factory.mktemp("claims")
    with Vault.create(root / "ep", EXAMPLE, rows=2, done_leaf="done", reward_leaf="r") as v:
        v.append(_data(LENGTH))
    with Vault.create(root / "plain", {"x": np.float32(0)}, rows=2) as v:
        v.append({"x": np.arange(10, dtype=np.float32).reshape(2, 5)})
    return {
        "root": root,
        "ep": Vault.open(root / "ep"),
        "plain": Vault.open(root / "plain"),
    }


# =============================================================================================
# Vault: create / open / constructor
# =============================================================================================


def test_create_raises_documented_errors(tmp_path: Path, vaults: dict[str, Any]) -> None:
    """Vault.create's Raises: VaultExistsError, VaultMetadataError, VaultArgumentError (codec,
    chunk shape), VaultStructureError (a leaf that cannot be stored); nothing is written."""
    with pytest.raises(VaultExistsError, match="already exists"):
        Vault.create(vaults["root"] / "ep", EXAMPLE, rows=2)
    with pytest.raises(VaultMetadataError, match=r"metadata\['a'\]: a tuple"):
        Vault.create(tmp_path / "v", EXAMPLE, rows=2, metadata={"a": (1, 2)})
    with pytest.raises(VaultArgumentError, match="codec must be"):
        Vault.create(tmp_path / "v", EXAMPLE, rows=2, codec="nope")
    with pytest.raises(VaultArgumentError, match=r"chunk\['obs'\]: expected 3 ints"):
        Vault.create(tmp_path / "v", EXAMPLE, rows=2, chunk={"obs": [1]})
    with pytest.raises(VaultStructureError, match="cannot store a str at /s"):
        Vault.create(tmp_path / "v", {"s": "text"}, rows=2)
    assert not (tmp_path / "v").exists()


def test_open_raises_documented_errors(tmp_path: Path, vaults: dict[str, Any]) -> None:
    with pytest.raises(VaultNotFoundError, match="no vault at"):
        Vault.open(tmp_path / "missing")
    with pytest.raises(VaultPinError, match="no commit 99"):
        Vault.open(vaults["root"] / "ep", at=99)
    with (
        Vault.create(tmp_path / "w", {"x": np.float32(0)}, rows=1),
        pytest.raises(VaultLockedError, match="only one writer at a time"),
    ):
        Vault.open(tmp_path / "w", mode="a")


def test_open_documents_its_argument_error(vaults: dict[str, Any]) -> None:
    with pytest.raises(VaultArgumentError, match="at= pins a commit for reading"):
        Vault.open(vaults["root"] / "ep", mode="a", at=1)
    with pytest.raises(VaultArgumentError, match="mode must be 'r' or 'a'"):
        Vault.open(vaults["root"] / "ep", mode="w")
    assert "VaultArgumentError" in (Vault.open.__doc__ or "")


def test_reference_constructor_raises_not_found(tmp_path: Path) -> None:
    """Vault(...): 'VaultNotFoundError: no vault there and no experience_structure'."""
    with pytest.raises(VaultNotFoundError, match="give `experience_structure`"):
        Vault("run", rel_dir=str(tmp_path))


@pytest.mark.parametrize("name", [5, "../escape"], ids=["int", "dotdot"])
def test_reference_constructor_bad_name_is_typed(tmp_path: Path, name: Any) -> None:
    experience = {"x": np.zeros((1, 2), np.float32)}
    with pytest.raises(VaultError, match="vault_name"):
        Vault(name, experience, rel_dir=str(tmp_path / "rel"))


# =============================================================================================
# Vault: writing
# =============================================================================================


def test_writes_on_read_only_or_closed_vault_raise_mode_error(tmp_path: Path) -> None:
    """write/append: 'VaultModeError: the vault is read-only or closed'."""
    one = {"x": np.zeros((1, 1), np.float32)}
    writer = Vault.create(tmp_path / "v", {"x": np.float32(0)}, rows=1)
    writer.append(one)
    writer.close()
    with pytest.raises(VaultModeError, match="this Vault was closed"):
        writer.append(one)
    reader = Vault.open(tmp_path / "v")
    with pytest.raises(VaultModeError, match="open it with mode='a'"):
        reader.append(one)
    with pytest.raises(VaultModeError, match="open it with mode='a'"):
        reader.write(None)


def test_append_lists_every_bad_leaf(tmp_path: Path) -> None:
    """append: 'VaultStructureError: leaves missing, extra, or of other shapes or dtypes
    (every bad leaf listed)'."""
    with Vault.create(tmp_path / "v", EXAMPLE, rows=2) as v:
        with pytest.raises(VaultStructureError) as err:
            v.append({"obs": np.ones((2, 1, 3), np.float32)})
        assert len(err.value.problems) == 2
        assert "experience/done: missing" in str(err.value)


@pytest.mark.parametrize("where", ["append", "write", "sort", "dataset"])
def test_string_flags_are_refused(tmp_path: Path, vaults: dict[str, Any], where: str) -> None:
    """vault/_args.py: 'A string such as "False" is truthy, so it is refused rather than read
    as true' (bool_arg); these public flags skip it."""
    if where == "append":
        with (
            Vault.create(tmp_path / "v", {"x": np.float32(0)}, rows=1) as v,
            pytest.raises(VaultArgumentError, match="continues"),
        ):
            v.append({"x": np.zeros((1, 1), np.float32)}, continues="False")
    elif where == "write":
        buffer = fbx.make_item_buffer(max_length=4, min_length=1, sample_batch_size=1)
        state = buffer.add(buffer.init({"x": jnp.float32(0)}), {"x": jnp.float32(1)})
        with (
            Vault.create(tmp_path / "v", state) as v,
            pytest.raises(VaultArgumentError, match="new_buffer"),
        ):
            v.write(state, new_buffer="False")
    elif where == "sort":
        with pytest.raises(VaultArgumentError, match="descending"):
            vaults["ep"].episodes().sort("length", descending="False")
    else:
        with pytest.raises(VaultArgumentError, match="exist_ok"):
            Dataset.create(tmp_path / "ds", {"x": np.float32(0)}, rows=1, exist_ok="False")


# =============================================================================================
# Vault: reading
# =============================================================================================


def test_read_numpy_example_and_errors(vaults: dict[str, Any]) -> None:
    plain = vaults["plain"]
    assert plain.read_numpy(rows=[1], last=2)["x"].tolist() == [[8.0, 9.0]]
    with pytest.raises(VaultReadError, match=r"rows \[5\] out of range"):
        plain.read_numpy(rows=[5])
    with pytest.raises(VaultReadError, match="outside the committed"):
        plain.read_numpy(stop=50)
    with pytest.raises(VaultReadError, match="unknown leaves"):
        plain.read_numpy(leaves=["nope"])
    with pytest.raises(VaultReadError, match="at most one of"):
        plain.read_numpy(last=1, start=0)
    with pytest.raises(VaultArgumentError, match=r"stop must be an int, got 2\.0"):
        plain.read_numpy(stop=2.0)


def test_read_documented_errors_and_capacity(vaults: dict[str, Any]) -> None:
    """read: 'both last and timesteps, or a capacity below 1' are VaultReadError."""
    plain = vaults["plain"]
    with pytest.raises(VaultReadError, match="not both"):
        plain.read(3, last=3)
    with pytest.raises(VaultReadError, match="capacity must be >= 1"):
        plain.read(capacity=0)
    state = plain.read(capacity=8)
    assert state.experience["x"].shape == (2, 8)
    assert (int(state.current_index), bool(state.is_full)) == (5, False)
    kept = plain.read(capacity=3)  # 'the most recent capacity timesteps are kept'
    # ... where a ring that had all 5 added holds them: timestep t at t % 3, next add at 2
    assert kept.experience["x"].tolist() == [[3.0, 4.0, 2.0], [8.0, 9.0, 7.0]]
    assert (int(kept.current_index), bool(kept.is_full)) == (2, True)
    assert fbx.timesteps_added(kept) == 5  # 'write_counter is the count read'


def test_episodes_read_episode_iter_episodes(vaults: dict[str, Any]) -> None:
    ep = vaults["ep"]
    table = ep.episodes()
    assert table.length.tolist() == [3, 4, 3, 4]
    assert table.returns.tolist() == [3.0, 4.0, 3.0, 4.0]
    opened = ep.episodes(include_open=True)
    assert opened.complete.tolist() == [True] * 4 + [False] * 2
    assert ep.read_episode(-1)["obs"].shape == (4, 3)
    with pytest.raises(VaultReadError, match="episode 4 out of range"):
        ep.read_episode(4)
    with pytest.raises(VaultReadError, match="takes one episode, got 4"):
        ep.read_episode(table)
    with pytest.raises(VaultArgumentError, match="iter_episodes takes an EpisodeTable"):
        ep.iter_episodes([0])
    with pytest.raises(VaultReadError, match="unknown leaves"):
        ep.iter_episodes(leaves=["nope"])  # at the call, not at next()
    assert [e["obs"].shape[0] for e in ep.iter_episodes(table[:2])] == [3, 4]


def test_episode_table_sort_select(vaults: dict[str, Any]) -> None:
    table = vaults["ep"].episodes()
    with pytest.raises(VaultArgumentError, match="sort by one of"):
        table.sort("nope")
    with pytest.raises(VaultArgumentError, match="top_k must be an int >= 0"):
        table.select(top_k=-1)
    with pytest.raises(VaultArgumentError, match="min_return must be a finite number"):
        table.select(min_return=float("nan"))
    bounds = np.array([[0, 0, 3, 0], [0, 3, 5, 0], [1, 0, 2, 0]])
    example = EpisodeTable.from_bounds(bounds, np.array([1.0, 4.0, 2.0]), True)
    assert example.select(min_length=3).returns.tolist() == [1.0, 4.0]
    assert example.select(top_k=1).start.tolist() == [3]


def test_episode_table_bad_index_is_typed(vaults: dict[str, Any]) -> None:
    with pytest.raises(VaultArgumentError):
        vaults["ep"].episodes()["row"]


def test_tag_documented_errors(tmp_path: Path) -> None:
    """tag: 'VaultExistsError: the tag names another commit already', 'VaultArgumentError: a
    name that is not a valid tag'; a tag on the same commit is no error."""
    writer = Vault.create(tmp_path / "v", {"x": np.float32(0)}, rows=1)
    writer.append({"x": np.zeros((1, 1), np.float32)})
    first = Vault.open(tmp_path / "v")
    assert first.tag("t") == first.tag("t") == first.commit_id
    writer.append({"x": np.zeros((1, 1), np.float32)})
    writer.close()
    with pytest.raises(VaultExistsError, match="tags never move"):
        Vault.open(tmp_path / "v").tag("t")
    with pytest.raises(VaultArgumentError, match="a tag name is 1-100"):
        first.tag("1abc")


# =============================================================================================
# leaf_stats, episode_stats, time_blocks, verify, to_xarray, disk_usage
# =============================================================================================


def test_leaf_stats_claims(vaults: dict[str, Any]) -> None:
    stats = leaf_stats(vaults["plain"])[0]
    assert (stats.count, stats.min, stats.max, stats.mean) == (10, 0.0, 9.0, 4.5)
    assert [s.name for s in leaf_stats(vaults["ep"])] == ["done", "obs", "r"]
    with pytest.raises(VaultArgumentError, match="leaf_stats takes an open Vault or Dataset"):
        leaf_stats(str(vaults["root"] / "plain"))
    with pytest.raises(VaultReadError, match="unknown leaves"):
        leaf_stats(vaults["plain"], leaves=["nope"])


def test_episode_stats_and_time_blocks(vaults: dict[str, Any]) -> None:
    out = episode_stats(vaults["ep"].episodes(include_open=True))
    assert set(out) == {"episodes", "complete", "open", "truncated", "return", "length"}
    assert (out["episodes"], out["complete"], out["open"]) == (6, 4, 2)
    assert out["length"]["max"] == 4
    with pytest.raises(VaultArgumentError, match="episode_stats takes an EpisodeTable"):
        episode_stats([])
    assert time_blocks(10, chunk_time=4, step_bytes=100, block_bytes=900) == [0, 8, 10]
    with pytest.raises(VaultArgumentError, match="chunk_time must be an int >= 1"):
        time_blocks(10, chunk_time=0, step_bytes=100, block_bytes=900)


def test_verify_documented_errors(tmp_path: Path, vaults: dict[str, Any]) -> None:
    assert verify(vaults["root"] / "ep").ok
    with pytest.raises(VaultNotFoundError, match="no vault at"):
        verify(tmp_path / "missing")
    with pytest.raises(VaultArgumentError, match="64 hex digits"):
        verify(vaults["root"] / "ep", fingerprint="sha256:00")
    with pytest.raises(VaultPinError, match="no commit 99"):
        verify(vaults["root"] / "ep", at=99)


def test_verify_checks_progress(vaults: dict[str, Any]) -> None:
    with pytest.raises(VaultArgumentError, match="progress must be a function"):
        verify(vaults["root"] / "ep", progress=5)


def test_to_xarray_claims(vaults: dict[str, Any]) -> None:
    data = to_xarray(vaults["ep"])
    assert dict(data["obs"].sizes) == {"row": 2, "time": LENGTH, "obs_0": 3}
    assert {"episode_row", "episode_return", "episode_start_known"} <= set(data.variables)
    assert sorted(to_xarray(vaults["plain"]).variables) == ["x"]  # no index: none added
    with pytest.raises(VaultReadError, match="unknown leaves"):
        to_xarray(vaults["ep"], leaves=["nope"])


def test_disk_usage_unknown_leaf(vaults: dict[str, Any]) -> None:
    location = vaults["root"] / "plain"
    assert disk_usage(location, "x") > 0
    with pytest.raises(VaultReadError, match="nope"):
        disk_usage(location, "nope")


# =============================================================================================
# derive_slice, derive_episodes, combine
# =============================================================================================


def test_derive_slice_example_and_errors(tmp_path: Path, vaults: dict[str, Any]) -> None:
    part = derive_slice(vaults["ep"], tmp_path / "part", rows=[1], start=6)
    assert (part.rows, part.committed_length) == (1, 4)
    with pytest.raises(VaultReadError, match="rows selects no row"):
        derive_slice(vaults["ep"], tmp_path / "a", rows=[])
    with pytest.raises(VaultReadError, match="outside the committed"):
        derive_slice(vaults["ep"], tmp_path / "b", stop=50)
    with pytest.raises(VaultExistsError, match="already exists"):
        derive_slice(vaults["ep"], tmp_path / "part")
    with pytest.raises(VaultLocationError, match="inside the source vault"):
        derive_slice(vaults["ep"], vaults["root"] / "ep" / "inner")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part"]


def test_derive_slice_empty_time_range(tmp_path: Path, vaults: dict[str, Any]) -> None:
    with pytest.raises(VaultReadError):
        derive_slice(vaults["ep"], tmp_path / "empty", start=3, stop=3)


def test_derive_episodes_documented_errors(tmp_path: Path, vaults: dict[str, Any]) -> None:
    ep = vaults["ep"]
    best = derive_episodes(ep, tmp_path / "best", ep.episodes().select(top_k=2))
    assert (best.rows, best.episodes().length.tolist()) == (1, [4, 4])
    with pytest.raises(VaultArgumentError, match="episodes must be an EpisodeTable"):
        derive_episodes(ep, tmp_path / "a", [0])
    with pytest.raises(VaultReadError, match="complete episodes"):
        derive_episodes(ep, tmp_path / "b", ep.episodes(include_open=True))
    with pytest.raises(VaultReadError, match="has no episode index"):
        derive_episodes(vaults["plain"], tmp_path / "c", ep.episodes())
    beyond = EpisodeTable.from_bounds(np.array([[0, 8, 5, 0]]), np.ones(1), True)
    with pytest.raises(VaultReadError, match="outside the committed data"):
        derive_episodes(ep, tmp_path / "d", beyond)


@pytest.mark.parametrize(
    "bounds",
    [[[5, 0, 2, 0]], [[0, 0, 2, 0], [7, 0, 2, 0]], [[0, -2, 3, 0]]],
    ids=["row-out-of-range", "second-row-out-of-range", "negative-start"],
)
def test_derive_episodes_outside_the_data(
    tmp_path: Path, vaults: dict[str, Any], bounds: list[list[int]]
) -> None:
    table = EpisodeTable.from_bounds(np.array(bounds), np.ones(len(bounds)), True)
    with pytest.raises(VaultReadError):
        derive_episodes(vaults["ep"], tmp_path / "out", table)


def test_combine_documented_errors(tmp_path: Path, vaults: dict[str, Any]) -> None:
    both = combine([vaults["ep"], vaults["root"] / "ep"], tmp_path / "both")
    assert both.committed_length == 2 * LENGTH
    assert [s.at for s in both.seams] == [LENGTH]
    with pytest.raises(VaultArgumentError, match="sources must be a list"):
        combine(str(vaults["root"] / "ep"), tmp_path / "a")
    with pytest.raises(VaultReadError, match="at least one source"):
        combine([], tmp_path / "b")
    with pytest.raises(VaultStructureError, match="the vaults to combine differ"):
        combine([vaults["ep"], vaults["plain"]], tmp_path / "c")
    with pytest.raises(VaultExistsError, match="already exists"):
        combine([vaults["ep"]], tmp_path / "both")


# =============================================================================================
# Streams: as_dataset, resume_stream, iter_windows, grain_source
# =============================================================================================


def test_as_dataset_example_and_documented_errors(vaults: dict[str, Any]) -> None:
    shapes = [b.experience["obs"].shape for b in vaults["ep"].as_dataset(4, 8, seed=0)]
    assert shapes == [(4, 8, 3)]  # 2 rows x 3 starts: one whole batch of 4
    with pytest.raises(VaultArgumentError, match="unknown option 'shufle'"):
        vaults["ep"].as_dataset(1, 2, shufle=True)
    with pytest.raises(VaultArgumentError, match="stack must be an int >= 1"):
        vaults["ep"].as_dataset(1, 2, stack=0)
    with pytest.raises(VaultReadError, match="need at least 12 committed timesteps"):
        vaults["ep"].as_dataset(1, 12)
    with pytest.raises(VaultReadError, match="episode_aware=True needs"):
        vaults["plain"].as_dataset(1, 2, episode_aware=True)


@pytest.mark.parametrize(
    "args",
    [(0, 2, {}), (1, 2, {"stride": 0}), (1, 2, {"prefetch": -1}), (1, 2, {"epochs": -1})],
    ids=["sample_batch_size", "stride", "prefetch", "epochs"],
)
def test_as_dataset_out_of_range_option_class(
    vaults: dict[str, Any], args: tuple[int, int, dict[str, Any]]
) -> None:
    size, length, options = args
    with pytest.raises(VaultReadError, match="must be an int >="):  # out of range: a read error
        vaults["ep"].as_dataset(size, length, **options)


def test_as_dataset_too_little_data_for_one_batch(vaults: dict[str, Any]) -> None:
    with pytest.raises(VaultReadError):
        list(vaults["ep"].as_dataset(40, 2))  # 2 rows x 9 starts < 40


@pytest.mark.parametrize("resume_at", [(-1, 0), (0,), (0, 2.5)], ids=["neg", "short", "float"])
def test_as_dataset_checks_resume_at(vaults: dict[str, Any], resume_at: Any) -> None:
    """as_dataset: 'Every argument is checked at the call (a wrong type is
    VaultArgumentError ...)'."""
    with pytest.raises(VaultError, match="resume_at"):
        list(vaults["plain"].as_dataset(2, 2, shuffle=False, resume_at=resume_at))


def test_resume_stream_claims(vaults: dict[str, Any]) -> None:
    stream = vaults["plain"].as_dataset(2, 2, seed=1)
    it = iter(stream)
    next(it)
    saved = stream.state()
    expected = next(it).experience["x"]
    again = next(iter(resume_stream(saved))).experience["x"]
    assert np.array_equal(again, expected)
    with pytest.raises(VaultArgumentError, match="not a stream state"):
        resume_stream({"format": "nope"})
    with pytest.raises(VaultArgumentError, match=r"process_index must be in \[0, process_count\)"):
        resume_stream(saved, process_index=1)


def test_resume_stream_bad_epoch(vaults: dict[str, Any]) -> None:
    stream = vaults["plain"].as_dataset(2, 2)
    saved = dict(stream.state(), epoch=-1)
    stream.close()
    with pytest.raises(VaultArgumentError, match="epoch"):
        next(iter(resume_stream(saved)))


def test_iter_windows_claims(vaults: dict[str, Any]) -> None:
    states = list(vaults["plain"].iter_windows(2))
    assert [int(s.current_index) for s in states] == [0, 0, 1]  # full, full, a shorter last
    assert [bool(s.is_full) for s in states] == [True, True, False]
    with pytest.raises(VaultArgumentError, match="unknown option 'foo'"):
        vaults["plain"].iter_windows(2, foo=1)
    with pytest.raises(VaultReadError, match=r"capacity \(1\) must be >= window \(2\)"):
        vaults["plain"].iter_windows(2, capacity=1)


@pytest.mark.parametrize("args", [(0, {}), (2, {"prefetch": -1})], ids=["window", "prefetch"])
def test_iter_windows_out_of_range_option_class(
    vaults: dict[str, Any], args: tuple[int, dict[str, Any]]
) -> None:
    window, options = args
    with pytest.raises(VaultReadError, match="must be an int >="):  # out of range: a read error
        vaults["plain"].iter_windows(window, **options)


def test_grain_source_claims(vaults: dict[str, Any]) -> None:
    source = grain_source(vaults["plain"], 4)
    assert len(source) == 4  # 2 rows x 2 starts
    assert source.where(3) == (0, 1, 1)
    assert source[0]["x"].tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(IndexError, match=r"record 4 out of range \[0, 4\)"):
        source[4]
    with pytest.raises(VaultReadError, match="no window of 6 timesteps"):
        grain_source(vaults["plain"], 6)


# =============================================================================================
# Dataset
# =============================================================================================


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset with one empty shard ``e`` and one of 5 timesteps ``f`` (2 rows, no index)."""
    root = tmp_path_factory.mktemp("ds") / "ds"
    ds = Dataset.create(root, {"x": np.float32(0)}, rows=2)
    ds.shard("e").close()
    with ds.shard("f") as writer:
        writer.append({"x": np.zeros((2, 5), np.float32)})
    return root


def test_dataset_documented_errors(tmp_path: Path, dataset: Path) -> None:
    with pytest.raises(VaultExistsError, match="pass exist_ok=True"):
        Dataset.create(dataset, {"x": np.float32(0)}, rows=2)
    with pytest.raises(VaultStructureError, match="has another structure"):
        Dataset.create(dataset, {"y": np.float32(0)}, rows=2, exist_ok=True)
    with pytest.raises(VaultNotFoundError, match="no dataset at"):
        Dataset.open(tmp_path / "missing")
    reader = Dataset.open(dataset)
    assert (reader.shards, reader.timesteps) == (["e", "f"], 10)
    with pytest.raises(VaultArgumentError, match="no shard 'nope'"):
        reader.vault("nope")
    with pytest.raises(VaultArgumentError, match="a shard name is 1 to 128"):
        Dataset.create(dataset, {"x": np.float32(0)}, rows=2, exist_ok=True).shard("-bad")
    with pytest.raises(VaultReadError, match="has no episode index"):
        reader.episodes()
    empty = Dataset.open(Dataset.create(tmp_path / "empty", {"x": np.float32(0)}, rows=1).location)
    with pytest.raises(VaultNotFoundError, match="no shard yet"):
        empty.as_dataset(1, 1)
    with pytest.raises(VaultNotFoundError, match="no shard to tag yet"):
        empty.tag("t")


@pytest.mark.parametrize("method", ["as_dataset", "iter_windows"])
def test_dataset_of_empty_shards(tmp_path: Path, method: str) -> None:
    ds = Dataset.create(tmp_path / "ds", {"x": np.float32(0)}, rows=1)
    ds.shard("empty").close()
    reader = Dataset.open(tmp_path / "ds")
    args = (1, 1) if method == "as_dataset" else (1,)
    with pytest.raises(VaultReadError, match=r"has 0|: 0 committed"):  # shards, no data in them
        getattr(reader, method)(*args)


@pytest.mark.parametrize("method", ["as_dataset", "iter_windows"])
def test_dataset_stream_unknown_option(dataset: Path, method: str) -> None:
    reader = Dataset.open(dataset)
    args = (1, 1) if method == "as_dataset" else (1,)
    with pytest.raises(VaultArgumentError, match="unknown option 'shufle'"):
        getattr(reader, method)(*args, shufle=True)


def test_dataset_vault_bad_name_is_typed(dataset: Path) -> None:
    with pytest.raises(VaultArgumentError, match="no shard"):
        Dataset.open(dataset).vault([])


def test_dataset_shard_float_rows(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds", {"x": np.float32(0)}, rows=2)
    with pytest.raises(VaultArgumentError, match="rows"):
        ds.shard("s", rows=2.0).close()


def test_dataset_episodes_without_index_and_shards(tmp_path: Path) -> None:
    Dataset.create(tmp_path / "ds", {"x": np.float32(0)}, rows=1)
    with pytest.raises(VaultReadError, match="no episode index"):
        Dataset.open(tmp_path / "ds").episodes()


# =============================================================================================
# Converters
# =============================================================================================


@pytest.fixture(scope="module")
def npz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An OGBench-style file: 12 states, trajectories of 5 and 7 states."""
    path = tmp_path_factory.mktemp("ogb") / "toy.npz"
    terminals = np.zeros(12, np.float32)
    terminals[[4, 11]] = 1
    observations = np.arange(24, dtype=np.float32).reshape(12, 2)
    np.savez(path, observations=observations, actions=np.ones((12, 1), np.float32),
             terminals=terminals)  # fmt: skip
    return path


def test_converter_registry_claims() -> None:
    assert converters.IMPORT_FORMATS == ("flashbax", "minari", "d4rl", "ogbench", "rlds")
    assert converters.EXPORT_FORMATS == ("minari",)
    with pytest.raises(VaultArgumentError, match="expected one of flashbax, minari"):
        converters.converter("nope")
    with pytest.raises(VaultArgumentError, match="unknown import format 'nope'"):
        converters.import_dataset("nope", "a", "b")
    with pytest.raises(VaultArgumentError, match="unknown export format 'flashbax'"):
        converters.export_dataset("flashbax", "a", "b")


@pytest.mark.parametrize(
    "args", [("minari", "sideways"), (["minari"], "import")], ids=["direction", "list-fmt"]
)
def test_converter_checks_its_arguments(args: tuple[Any, str]) -> None:
    with pytest.raises(VaultArgumentError):
        converters.converter(*args)


def test_import_ogbench_claims(tmp_path: Path, npz: Path) -> None:
    v = converters.import_ogbench(npz, tmp_path / "o")
    assert (v.rows, v.committed_length, v.episodes().length.tolist()) == (1, 12, [5, 7])
    assert not (tmp_path / "o-val").exists()  # val_dest=True: only 'when the file exists'
    with pytest.raises(VaultNotFoundError, match="expected the validation file"):
        converters.import_ogbench(npz, tmp_path / "p", val_dest=tmp_path / "p-val")
    with pytest.raises(VaultNotFoundError, match="got no such file"):
        converters.import_ogbench(tmp_path / "missing.npz", tmp_path / "q")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(VaultCorruptError, match=r"a zip of \.npy arrays"):
        converters.import_ogbench(tmp_path / "bad.npz", tmp_path / "r")
    np.savez(tmp_path / "short.npz", observations=np.zeros((3, 2), np.float32))
    with pytest.raises(VaultStructureError, match="actions: expected an array"):
        converters.import_ogbench(tmp_path / "short.npz", tmp_path / "s")
    with pytest.raises(VaultExistsError, match="already exists"):
        converters.import_ogbench(npz, tmp_path / "o")
    dataset = converters.ogbench_dataset(v)
    assert {k: x.shape for k, x in dataset.items()} == {
        "observations": (10, 2),
        "actions": (10, 1),
        "terminals": (10,),
        "next_observations": (10, 2),
    }
    with pytest.raises(VaultStructureError, match="expected the leaves of an OGBench import"):
        converters.ogbench_dataset(Vault.create(tmp_path / "x", {"x": np.float32(0)}, rows=1))


@pytest.mark.parametrize("case", ["source", "ob_dtype"])
def test_ogbench_bad_arguments_are_typed(tmp_path: Path, npz: Path, case: str) -> None:
    if case == "source":
        with pytest.raises(VaultError):
            converters.import_ogbench(5, tmp_path / "o")
    else:
        imported = converters.import_ogbench(npz, tmp_path / "o")
        with pytest.raises(VaultError):
            converters.ogbench_dataset(imported, ob_dtype="nonsense")


def test_ogbench_dataset_of_several_rows(tmp_path: Path) -> None:
    example = {
        "observations": np.zeros(2, np.float32),
        "actions": np.zeros(1, np.float32),
        "terminals": np.float32(0),
    }
    terminals = np.zeros((2, 3), np.float32)
    terminals[:, -1] = 1
    with Vault.create(tmp_path / "v", example, rows=2) as v:
        v.append(
            {
                "observations": np.zeros((2, 3, 2), np.float32),
                "actions": np.zeros((2, 3, 1), np.float32),
                "terminals": terminals,
            }
        )
    with pytest.raises(VaultStructureError):
        converters.ogbench_dataset(tmp_path / "v")


def test_import_d4rl_claims(tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f["observations"] = np.zeros((10, 3), np.float32)
        f["actions"] = np.zeros((10, 2), np.float32)
        f["rewards"] = np.ones(10, np.float32)
        f["terminals"] = np.arange(10) == 4
        f["timeouts"] = np.zeros(10, bool)
    v = converters.import_d4rl(tmp_path / "d.h5", tmp_path / "v")
    assert (v.rows, v.episodes().length.tolist(), v.episodes().returns.tolist()) == (
        1,
        [5],
        [5.0],
    )
    with pytest.raises(VaultNotFoundError, match="no such file"):
        converters.import_d4rl(tmp_path / "missing.h5", tmp_path / "w")
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(VaultCorruptError, match="expected an HDF5 file"):
        converters.import_d4rl(tmp_path / "text.h5", tmp_path / "w")
    with pytest.raises(VaultExistsError, match="already exists"):
        converters.import_d4rl(tmp_path / "d.h5", tmp_path / "v")
    with pytest.raises(VaultArgumentError, match="block_bytes must be an int >= 65536"):
        converters.import_d4rl(tmp_path / "d.h5", tmp_path / "w", block_bytes=0)


def test_import_d4rl_missing_datasets(tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f["observations"] = np.zeros((10, 3), np.float32)
    with pytest.raises(VaultStructureError, match="actions"):  # every missing dataset named
        converters.import_d4rl(tmp_path / "d.h5", tmp_path / "v")


def test_import_flashbax_documented_errors(tmp_path: Path) -> None:
    with pytest.raises(VaultNotFoundError, match="expected a Flashbax vault"):
        converters.import_flashbax(tmp_path / "missing", tmp_path / "v")
    (tmp_path / "fb").mkdir()
    (tmp_path / "fb" / "manifest.ocdbt").write_bytes(b"")
    (tmp_path / "fb" / "metadata.json").write_text("{}")
    with pytest.raises(VaultCorruptError, match="expected the keys"):
        converters.import_flashbax(tmp_path / "fb", tmp_path / "v")


# =============================================================================================
# buffers: factories
# =============================================================================================


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: fbx.make_flat_buffer(10, 2, 11), BufferConfigError, "must be <= `max_length`"),
        (lambda: fbx.make_flat_buffer(1, 0, 1), BufferConfigError, "must be >= 2"),
        (lambda: fbx.make_flat_buffer(10, 10, 1), BufferConfigError, "`min_length` .* large"),
        (lambda: fbx.make_flat_buffer(10.0, 2, 3), ArgumentTypeError, "max_length=10"),
        (lambda: fbx.make_flat_buffer(10, 2, 3, "yes"), ArgumentTypeError, "add_sequences"),
        (
            lambda: fbx.make_trajectory_buffer(2, 4, 3, 1, 1),
            BufferConfigError,
            "exactly one of `max_size`",
        ),
        (
            lambda: fbx.make_trajectory_buffer(2, 4, 20, 1, 1, max_length_time_axis=16),
            BufferConfigError,
            "`sample_sequence_length` \\(20\\)",
        ),
        (
            lambda: fbx.make_trajectory_buffer(True, 4, 3, 1, 1, max_length_time_axis=16),
            ArgumentTypeError,
            "a bool is not a size",
        ),
        (lambda: fbx.make_item_buffer(8, 9, 3), BufferConfigError, "`min_length` \\(9\\)"),
        (lambda: fbx.make_item_buffer(8, 1, 3, add_batches="x"), ArgumentTypeError, "bool"),
        (
            lambda: fbx.make_prioritised_item_buffer(8, 1, 3, priority_exponent=2),
            BufferConfigError,
            "must be in \\[0, 1\\]",
        ),
        (
            lambda: fbx.make_prioritised_flat_buffer(8, 2, 3, priority_exponent="0.5"),
            ArgumentTypeError,
            "must be a real number",
        ),
        (
            lambda: fbx.make_n_step_buffer(8, 2, 3, n_step=8),
            BufferConfigError,
            "`n_step` \\(8\\) must be < `max_length`",
        ),
        (
            lambda: fbx.make_n_step_buffer(8, 2, 3, n_step=2, n_step_functional_map={"r": len}),
            ArgumentTypeError,
            "keys must be tuples",
        ),
        (
            lambda: fbx.make_episode_buffer(1, 2, 3, 3, max_length_time_axis=16, device="q"),
            BufferConfigError,
            "device must be cpu, gpu or tpu",
        ),
        (
            lambda: fbx.make_episode_buffer(1, 2, 3, 3, max_length_time_axis=16, episode_end=5),
            ArgumentTypeError,
            "`episode_end` must be a leaf name",
        ),
        (
            lambda: fbx.make_trajectory_queue(8, 2, 9, 4),
            BufferConfigError,
            "`add_sequence_length` \\(9\\)",
        ),
        (lambda: fbx.make_trajectory_queue(8.0, 2, 4, 4), ArgumentTypeError, "8.0"),
        (lambda: fbx.make_mixer([], 8, []), BufferConfigError, "must not be empty"),
        (lambda: fbx.make_mixer([5], 8, [1]), ArgumentTypeError, "must be a buffer"),
        (lambda: fbx.ReplayBuffer(0), BufferConfigError, "`buffer_size` must be"),
        (lambda: fbx.ReplayBuffer(2.0), ArgumentTypeError, "`buffer_size` must be"),
        (lambda: fbx.write_counter_from_int(-1), BufferConfigError, "in \\[0, 2\\*\\*64\\)"),
        (lambda: fbx.write_counter_from_int(1.0), ArgumentTypeError, "an integer"),
    ],
)
def test_factory_documented_errors(make: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match) as err:
        make()
    if error is BufferConfigError:  # the exact class: not the ArgumentTypeError subclass
        assert type(err.value) is BufferConfigError


def test_mixer_shares_and_state_count() -> None:
    a = fbx.make_flat_buffer(max_length=32, min_length=2, sample_batch_size=8)
    b = fbx.make_flat_buffer(max_length=32, min_length=2, sample_batch_size=8)
    mixer = fbx.make_mixer([a, b], sample_batch_size=8, proportions=[3, 1])
    assert mixer.batch_sizes == (6, 2)
    with pytest.raises(BufferConfigError, match="its share is 10"):
        fbx.make_mixer([a, b], 20, [1, 1])
    state = a.init({"x": jnp.float32(0)})
    with pytest.raises(BufferConfigError, match="got 1 states for 2 buffers"):
        mixer.sample([state], jax.random.key(0))


def test_mixer_non_buffer_among_buffers() -> None:
    a = fbx.make_flat_buffer(max_length=32, min_length=2, sample_batch_size=8)
    with pytest.raises(ArgumentTypeError, match=r"`buffers\[1\]` must be a buffer"):
        fbx.make_mixer([a, 5], 8, [1, 1])


def test_n_step_examples_and_errors() -> None:
    assert fbx.n_step_returns(jnp.ones(4), jnp.full(4, 0.5), n_step=2).tolist() == [
        1.5,
        1.5,
        1.5,
        1.0,
    ]
    assert fbx.n_step_discounts(jnp.full(4, 0.5), n_step=2).tolist() == [0.25, 0.25, 0.25, 0.5]
    with pytest.raises(BufferConfigError, match="must have the same shape"):
        fbx.n_step_returns(jnp.ones(4), jnp.ones(3), n_step=2)
    with pytest.raises(BufferConfigError, match="got a scalar"):
        fbx.n_step_discounts(jnp.float32(0.5), n_step=2)
    with pytest.raises(ArgumentTypeError, match="n_step=2"):
        fbx.n_step_returns(jnp.ones(4), jnp.ones(4), n_step=2.0)


@pytest.mark.parametrize("fn", ["returns", "discounts"])
def test_n_step_zero_class(fn: str) -> None:
    """The docstrings: a non-integer ``n_step`` is ArgumentTypeError, one below 1
    BufferConfigError."""
    call = (
        (lambda n: fbx.n_step_returns(jnp.ones(4), jnp.ones(4), n_step=n))
        if fn == "returns"
        else (lambda n: fbx.n_step_discounts(jnp.ones(4), n_step=n))
    )
    with pytest.raises(BufferConfigError, match="must be an integer >= 1, got 0") as caught:
        call(0)
    assert not isinstance(caught.value, ArgumentTypeError)
    with pytest.raises(ArgumentTypeError):
        call(2.0)


def test_n_step_returns_integer_rewards() -> None:
    out = fbx.n_step_returns(jnp.ones(4, jnp.int32), jnp.full(4, 0.5), n_step=2)
    assert np.allclose(np.asarray(out, np.float64), [1.5, 1.5, 1.5, 1.0])


def test_flat_buffer_min_length_meaning() -> None:
    """The docstring: ``can_sample`` once each row holds ``min_length // rows + 1`` timesteps
    (as the reference): min_length=4 with one row needs 5."""
    buffer = fbx.make_flat_buffer(max_length=16, min_length=4, sample_batch_size=2)
    state = buffer.init({"x": jnp.float32(0)})
    ready = []
    for i in range(5):
        state = buffer.add(state, {"x": jnp.float32(i)})
        ready.append(bool(buffer.can_sample(state)))
    assert ready == [False, False, False, False, True]


# =============================================================================================
# buffers: the returned buffers' methods
# =============================================================================================


def test_buffer_methods_documented_errors() -> None:
    key = jax.random.key(0)
    buffer = fbx.make_item_buffer(max_length=4, min_length=2, sample_batch_size=2)
    state = buffer.init({"x": jnp.zeros(2)})
    with pytest.raises(NotReadyError, match="cannot be sampled yet"):
        buffer.sample(state, key)
    with pytest.raises(BatchStructureError, match=r"experience/x: expected \[2\] float32"):
        buffer.add(state, {"x": jnp.zeros(3)})
    with pytest.raises(ArgumentTypeError, match="`state` must be a buffer state"):
        buffer.add({"x": 1}, {"x": jnp.zeros(2)})
    with pytest.raises(ArgumentTypeError, match="leaves must be arrays or numbers"):
        buffer.init({"x": "text"})
    with pytest.raises(ArgumentTypeError, match="`rng_key` must be one PRNG key"):
        buffer.sample(state, 5)
    with pytest.raises(ArgumentTypeError, match="the state is traced"):
        jax.jit(fbx.gather_all)(state)
    with pytest.raises(ArgumentTypeError, match="must be a buffer state of this package"):
        fbx.timesteps_added({"x": 1})


def test_replay_buffer_documented_errors() -> None:
    replay = fbx.ReplayBuffer(buffer_size=4)
    state = replay.init({"o": jnp.zeros(2)})
    with pytest.raises(NotReadyError):
        replay.sample(state, 2, jax.random.key(0))
    with pytest.raises(BufferConfigError, match="5 transitions exceed buffer_size 4"):
        replay.add(state, {"o": jnp.zeros((5, 2))})
    with pytest.raises(BatchStructureError, match=r"data/o: expected \[k, 2\]"):
        replay.add(state, {"o": jnp.zeros(2)})
    with pytest.raises(ArgumentTypeError, match="leaves must be arrays or numbers"):
        replay.init({"o": "text"})


@pytest.mark.parametrize("transition", [{"o": jnp.zeros(2), "n": None}, {"n": None}])
def test_replay_buffer_init_none_leaf(transition: dict[str, Any]) -> None:
    """The docstring: a None leaf is no leaf (only the arrays are stored); a transition with
    no array leaf at all is BufferConfigError."""
    buffer = fbx.ReplayBuffer(buffer_size=4)
    if "o" in transition:
        stored = [leaf.shape for leaf in jax.tree.leaves(buffer.init(transition))]
        assert (4, 2) in stored  # "o", ring of 4
        assert not any(shape[:1] == (4,) and shape != (4, 2) for shape in stored)  # no "n"
    else:
        with pytest.raises(BufferConfigError, match="at least one array leaf"):
            buffer.init(transition)


def test_queue_and_priorities_documented_errors() -> None:
    queue = fbx.make_trajectory_queue(4, 1, 2, 2)
    state = queue.init({"x": jnp.int32(0)})
    for _ in range(2):
        state = queue.add(state, {"x": jnp.zeros((1, 2), jnp.int32)})
    with pytest.raises(QueueFullError, match="2 timesteps do not fit"):
        queue.add(state, {"x": jnp.zeros((1, 2), jnp.int32)})
    buffer = fbx.make_prioritised_item_buffer(max_length=8, min_length=1, sample_batch_size=2)
    pstate = buffer.add(buffer.init({"x": jnp.float32(0)}), {"x": jnp.float32(1)})
    with pytest.raises(PriorityError, match="must be finite and >= 0"):
        buffer.set_priorities(pstate, jnp.array([0]), jnp.array([float("nan")]))
    with pytest.raises(PriorityError, match=r"must be in \[0, 8\)"):
        buffer.set_priorities(pstate, jnp.array([99]), 1.0)
    with pytest.raises(PriorityError, match="`indices` must be integers"):
        buffer.set_priorities(pstate, jnp.array([0.0]), 1.0)
    with pytest.raises(PriorityError, match="must have the shape of `indices`"):
        buffer.set_priorities(pstate, jnp.array([0]), jnp.ones(2))


def test_episode_buffer_end_leaf_errors() -> None:
    buffer = fbx.make_episode_buffer(1, 2, 2, 2, max_length_time_axis=8)
    with pytest.raises(BufferConfigError, match="names the leaf 'done'"):
        buffer.init({"x": jnp.float32(0)})
    with pytest.raises(BufferConfigError, match="one flag per timestep"):
        buffer.init({"x": jnp.float32(0), "done": jnp.zeros(2, bool)})


def test_get_tree_shape_prefix_claims() -> None:
    tree = {"a": jnp.zeros((2, 5, 3)), "b": jnp.zeros((2, 5))}
    assert fbx.utils.get_tree_shape_prefix(tree, 2) == (2, 5)
    with pytest.raises(BufferConfigError, match="got no leaves"):
        fbx.utils.get_tree_shape_prefix({}, 1)
    with pytest.raises(BatchStructureError, match="b: expected leading axes"):
        fbx.utils.get_tree_shape_prefix({"a": jnp.zeros((2, 3)), "b": jnp.zeros((3, 3))})


def test_get_tree_shape_prefix_negative_axes() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(BufferConfigError):
            fbx.utils.get_tree_shape_prefix({"a": jnp.zeros((2, 3))}, -1)


@pytest.mark.parametrize("fmt", ["d4rl", "flashbax", "minari", "ogbench", "rlds"])
def test_every_importer_names_a_source_that_is_not_a_path(tmp_path: Path, fmt: str) -> None:
    """``source`` is a path (or a name): an int is a typed error naming it, before anything
    is read or created."""
    needs = {"d4rl": "h5py", "minari": "minari", "rlds": "tensorflow_datasets"}.get(fmt)
    if needs is not None:
        pytest.importorskip(needs)
    with pytest.raises(VaultArgumentError, match=r"source: expected .* got 5 \(an int\)"):
        converters.import_dataset(fmt, 5, tmp_path / "v")
    assert not (tmp_path / "v").exists()
