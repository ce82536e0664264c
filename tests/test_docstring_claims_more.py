"""More of the public docstrings' claims, checked against the behaviour.

A sequel to ``test_docstring_claims.py`` (whose sentences are not repeated here). Each test
takes claims of a public docstring of ``vault``, ``vault.converters`` or ``buffers`` (a
``Raises`` entry, a default, a return shape or type, an ``Args`` description of the values
accepted, a property's value after an operation) and runs them. Bad arguments must get a typed
error of the package's hierarchy that names the argument, never an untyped error from deep
inside or a silent wrong result. Three checks read the docstrings themselves: the documented
``**options`` are the options accepted, every ``Raises`` entry names a real exception, and
every cross-reference (``:func:`...```) names something the API pages render.

Data is tiny numpy and encodes where it belongs (``x = 1000 * row + t``); the buffer tests
run eagerly on tiny shapes.
"""

from __future__ import annotations

import builtins
import errno
import importlib
import inspect
import json
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import buffers as fbx
import vault
from buffers import BatchStructureError, BufferConfigError, BufferTooLargeError
from vault import (
    CommitRecord,
    Dataset,
    EpisodeTable,
    LeafSpec,
    LockHolder,
    Manifest,
    Seam,
    UnsavedDataLostError,
    Vault,
    VaultAccessError,
    VaultArgumentError,
    VaultError,
    VaultExistsError,
    VaultLocationError,
    VaultModeError,
    VaultNotFoundError,
    VaultPinError,
    VaultReadError,
    VaultStorageError,
    VaultStructureError,
    VaultVersionError,
    converters,
    episode_stats,
    find_vaults,
    is_dataset,
    leaf_stats,
    lock_holder,
    parse_location,
    set_fault_hook,
    storage_error,
    to_xarray,
    verify,
)

ROOT = Path(__file__).resolve().parents[1]
PUBLIC: dict[str, Any] = {"vault": vault, "buffers": fbx, "vault.converters": converters}
EXAMPLE = {"x": np.float32(0), "info": {"y": np.zeros(2, np.float32)}, "done": np.bool_(False)}
LENGTH = 10


def _data(rows: int = 2, n: int = LENGTH) -> dict[str, Any]:
    """``x = 1000 * row + t``; ``info/y`` holds ``(t, -t)``; episodes end at t = 4 and 9."""
    t = np.arange(n, dtype=np.float32)
    x = 1000 * np.arange(rows, dtype=np.float32)[:, None] + t
    done = np.zeros((rows, n), bool)
    done[:, 4::5] = True
    y = np.stack([np.broadcast_to(t, (rows, n)), -np.broadcast_to(t, (rows, n))], axis=-1)
    return {"x": x, "info": {"y": y.astype(np.float32)}, "done": done}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Read-only data shared by the module: ``ep`` (2 rows x 10, an episode index without a
    reward leaf, a nested leaf) and ``ds`` (a dataset of shards ``a`` and ``b``, 1 row x 6,
    ``x = 100 * shard + t``)."""
    root = tmp_path_factory.mktemp("more")
    with Vault.create(root / "ep", EXAMPLE, rows=2, done_leaf="done") as v:
        v.append(_data())
    ds = Dataset.create(root / "ds", {"x": np.float32(0)}, rows=1)
    for k, name in enumerate(["a", "b"]):
        with ds.shard(name) as writer:
            writer.append({"x": (100 * k + np.arange(6, dtype=np.float32))[None]})
    return {"root": root, "ep": Vault.open(root / "ep"), "ds": Dataset.open(root / "ds")}


# =============================================================================================
# Vault.create / append / properties
# =============================================================================================


def test_create_lists_every_bad_episode_leaf_and_writes_nothing(tmp_path: Path) -> None:
    """create: 'VaultStructureError: ... an episode leaf (done_leaf, ...) that is not one of its
    leaves (every bad one listed)'; 'Every argument is checked before anything is written'."""
    with pytest.raises(VaultStructureError) as caught:
        Vault.create(tmp_path / "v", {"x": np.float32(0)}, rows=1, done_leaf="d", reward_leaf="r")
    assert len(caught.value.problems) == 2
    assert "done_leaf 'd'" in str(caught.value)
    assert "reward_leaf 'r'" in str(caught.value)
    with pytest.raises(VaultArgumentError, match=r"rows must be an int >= 1, got 2\.5"):
        Vault.create(tmp_path / "v", {"x": np.float32(0)}, rows=2.5)  # type: ignore[arg-type]
    with pytest.raises(VaultArgumentError, match="level must be in \\[0, 9\\] for codec 'gzip'"):
        Vault.create(tmp_path / "v", {"x": np.float32(0)}, rows=1, codec="gzip", level=50)
    assert not (tmp_path / "v").exists()


def test_create_refuses_a_location_that_holds_other_data(tmp_path: Path) -> None:
    """create: 'location ... must be empty or absent'; 'VaultExistsError: the location holds a
    vault or other data (named)'."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "notes.txt").write_text("mine")
    (tmp_path / "file").write_text("mine")
    with pytest.raises(VaultExistsError, match=r"notes\.txt"):
        Vault.create(tmp_path / "dir", {"x": np.float32(0)}, rows=1)
    with pytest.raises(VaultExistsError, match="a file, not a directory"):
        Vault.create(tmp_path / "file", {"x": np.float32(0)}, rows=1)
    assert (tmp_path / "dir" / "notes.txt").read_text() == "mine"
    assert (tmp_path / "file").read_text() == "mine"


def test_append_seams_commit_ids_pins_and_tags(tmp_path: Path) -> None:
    """append returns ``n``; ``continues=False`` records a seam ``Seam(at, 0)`` (``gaps``: the
    same as dicts); ``commit_id`` is ``"<number>-<uid>"`` and ``open(at=commit_id)`` reads
    exactly that commit (``pinned``); ``fingerprint`` is ``"sha256:<hex>"``; ``tags()`` maps
    tag -> commit id; ``metadata`` is what was given."""
    one = {"x": np.zeros((1, 3), np.float32)}
    with Vault.create(tmp_path / "v", {"x": np.float32(0)}, rows=1, metadata={"k": [1]}) as v:
        assert v.append(one) == 3
        first = v.commit_id
        assert v.append({"x": np.ones((1, 2), np.float32)}, continues=False) == 2
        assert v.seams == [Seam(at=3, lost=0)]
        assert v.gaps == [{"at": 3, "lost": 0}]
        assert v.metadata == {"k": [1]}
        assert v.vault_index == v.committed_length == 5
    assert re.fullmatch(r"1-[0-9a-f]+", first)
    pinned = Vault.open(tmp_path / "v", at=first)
    assert (pinned.pinned, pinned.committed_length, pinned.commit_id) == (True, 3, first)
    assert pinned.refresh() == 3  # 'a pinned vault (at=) stays at its commit'
    assert pinned.read_numpy()["x"].tolist() == [[0.0, 0.0, 0.0]]
    latest = Vault.open(tmp_path / "v")
    assert not latest.pinned
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", latest.fingerprint())
    assert latest.fingerprint() != pinned.fingerprint()
    assert pinned.tag("first") == first
    assert latest.tags() == {"first": first}
    assert Vault.open(tmp_path / "v", at="first").committed_length == 3


def test_lock_holder_names_the_writer_while_it_writes(tmp_path: Path) -> None:
    """Vault.lock_holder / vault.lock_holder: the holder (process, host, since), or None:
    nobody, or no vault there."""
    writer = Vault.create(tmp_path / "v", {"x": np.float32(0)}, rows=1)
    holder = Vault.open(tmp_path / "v").lock_holder()
    assert isinstance(holder, LockHolder)
    assert (holder.pid, holder.host) == (os.getpid(), socket.gethostname())
    assert lock_holder(tmp_path / "v") == holder
    writer.close()
    assert Vault.open(tmp_path / "v").lock_holder() is None
    assert lock_holder(tmp_path / "nothing") is None


def test_write_overrun_policies_keep_exactly_the_surviving_timesteps(tmp_path: Path) -> None:
    """write: 'UnsavedDataLostError ... it says how many' (``lost``) and the vault is unchanged;
    'save_surviving saves the surviving ones and records the loss as a seam'; a policy
    that is neither is VaultArgumentError."""
    buffer = fbx.make_flat_buffer(max_length=8, min_length=1, sample_batch_size=1)
    state = buffer.init({"x": jnp.float32(0)})
    for t in range(3):
        state = buffer.add(state, {"x": jnp.float32(t)})
    with Vault.create(tmp_path / "v", state) as v:
        assert v.write(state) == 3
        for t in range(3, 13):  # 10 new timesteps, the buffer holds 8: t = 3, 4 are lost
            state = buffer.add(state, {"x": jnp.float32(t)})
        with pytest.raises(VaultArgumentError, match="on_overrun"):
            v.write(state, on_overrun="bogus")  # type: ignore[arg-type]
        with pytest.raises(UnsavedDataLostError) as caught:
            v.write(state)
        assert caught.value.lost == 2
        assert v.committed_length == 3
        assert v.write(state, on_overrun="save_surviving") == 8
        assert v.seams == [Seam(at=3, lost=2)]
    expected = [0, 1, 2, *range(5, 13)]
    assert Vault.open(tmp_path / "v").read_numpy()["x"].tolist() == [expected]


def test_read_timesteps_percentiles_and_rows_slice(store: dict[str, Any]) -> None:
    """read: ``timesteps`` is the reference's name for ``last``; ``percentiles`` ``(a, b)``;
    ``rows`` indices or a slice."""
    ep = store["ep"]
    assert np.array_equal(ep.read(3).experience["x"], ep.read(last=3).experience["x"])
    half = ep.read_numpy(percentiles=(0, 50), leaves=["x"])["x"]
    assert half.tolist() == _data()["x"][:, :5].tolist()
    assert ep.read_numpy(rows=slice(1, 2), leaves=["x"])["x"][0, 0] == 1000.0
    with pytest.raises(VaultReadError, match="percentiles"):
        ep.read_numpy(percentiles=(60, 20))
    with pytest.raises(VaultArgumentError, match="rows must be a list of row indices"):
        ep.read_numpy(rows=1)
    episode = ep.read_episode(1, leaves=["info/y"])  # 'a subset gives a dict'
    assert list(episode) == ["info/y"]
    assert episode["info/y"][:, 0].tolist() == [5, 6, 7, 8, 9]


def test_reference_constructor_writes_then_reopens(tmp_path: Path) -> None:
    """Vault(name, ...): 'opens rel_dir/vault_name/vault_uid, or creates it'; ``rel_dir`` may
    be ``file://`` + a path (vault.vault.DRIVER)."""
    experience = {"x": np.zeros((1, 4), np.float32)}
    v = Vault("run", experience, rel_dir=str(tmp_path), metadata={"a": 1})
    uid = Path(v.location).name
    assert Path(v.location).parent == tmp_path / "run"
    v.close()
    again = Vault("run", rel_dir=f"file://{tmp_path}", vault_uid=uid)
    assert (again.location, again.metadata) == (v.location, {"a": 1})


@pytest.mark.parametrize("compression", ["zstd", 5], ids=["str", "int"])
def test_reference_constructor_compression_must_be_a_dict(tmp_path: Path, compression: Any) -> None:
    with pytest.raises(VaultArgumentError, match="compression"):
        Vault(
            "run",
            {"x": np.zeros((1, 4), np.float32)},
            rel_dir=str(tmp_path),
            compression=compression,
        )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("structure", [{"x": "text"}, "text"], ids=["leaf", "bare"])
def test_reference_constructor_string_structure_is_typed(tmp_path: Path, structure: Any) -> None:
    with pytest.raises(VaultStructureError, match="str"):
        Vault("run", structure, rel_dir=str(tmp_path))


# =============================================================================================
# EpisodeTable, episode_stats, leaf_stats, to_xarray, verify
# =============================================================================================


def _table() -> EpisodeTable:
    """Four episodes: plain (return 1), truncated (NaN), start unknown (2), open (5)."""
    bounds = np.array([[0, 0, 3, 0], [0, 3, 5, 1], [1, 0, 2, 2], [1, 2, 4, 0]])
    returns = np.array([1.0, np.nan, 2.0, 5.0])
    return EpisodeTable.from_bounds(bounds, returns, True, complete=np.array([1, 1, 1, 0], bool))


def test_episode_table_columns_sort_select_records() -> None:
    """from_bounds: flags bit 0 truncated, bit 1 start unknown; sort: 'a stable sort; NaN last'
    (both ways); select: 'Complete episodes with a known start ... in index order';
    to_records: 'a missing return is None', JSON-ready; indexing with an int gives a table,
    iterating gives to_records's dicts; ``transitions``: total timesteps."""
    table = _table()
    assert table.truncated.tolist() == [False, True, False, False]
    assert table.start_known.tolist() == [True, True, False, True]
    assert table.transitions == 14
    assert table.sort().returns.tolist()[:3] == [5.0, 2.0, 1.0]
    assert np.isnan(table.sort().returns[-1])
    assert np.isnan(table.sort(descending=False).returns[-1])
    assert table.sort("row").start.tolist() == [0, 2, 0, 3]  # row 1 first, stable within a row
    assert table.select().start.tolist() == [0, 3]  # the unknown start and the open one left out
    assert table.select(max_return=10).returns.tolist() == [1.0]  # NaN passes no bound
    records = table.to_records()
    assert records[1]["return"] is None
    assert json.loads(json.dumps(records)) == records
    assert list(table) == records
    assert isinstance(table[0], EpisodeTable)
    assert len(table[0]) == 1
    assert len(EpisodeTable.concat([table, table])) == 8
    assert (len(EpisodeTable.empty()), EpisodeTable.empty().transitions) == (0, 0)
    no_reward = EpisodeTable.from_bounds(np.array([[0, 0, 1, 0]]), np.ones(1), False)
    assert np.isnan(no_reward.returns).all()  # 'has_reward: ... (else they are NaN)'


def test_select_transitions_draws_until_enough() -> None:
    """select(transitions=n): 'draw episodes uniformly at random (seeded) until their lengths
    add up to at least that many timesteps (or every episode is taken)', in index order."""
    n = 20
    bounds = np.stack(
        [np.zeros(n, int), 10 * np.arange(n), np.arange(1, n + 1), np.zeros(n, int)], 1
    )
    table = EpisodeTable.from_bounds(bounds, np.arange(n, dtype=float), True)
    for seed in range(3):
        drawn = table.select(transitions=30, seed=seed)
        assert drawn.transitions >= 30
        assert drawn.start.tolist() == sorted(drawn.start.tolist())
        assert drawn.transitions - drawn.length.max() < 30 or len(drawn) == 1  # no extra draw
    assert (
        table.select(transitions=30, seed=1).start.tolist()
        == table.select(transitions=30, seed=1).start.tolist()
    )
    assert len(table.select(transitions=10**6)) == n


@pytest.mark.parametrize("case", ["bounds-3-cols", "returns-short", "ragged-columns", "concat"])
def test_episode_table_malformed_columns_are_typed(case: str) -> None:
    calls = {
        "bounds-3-cols": lambda: EpisodeTable.from_bounds(np.zeros((2, 3), int), np.zeros(2), True),
        "returns-short": lambda: EpisodeTable.from_bounds(
            np.array([[0, 0, 3, 0], [0, 3, 2, 0]]), np.zeros(1), True
        ),
        "ragged-columns": lambda: EpisodeTable(
            row=np.zeros(1, int),
            start=np.zeros(2, int),
            length=np.ones(3, int),
            returns=np.zeros(1),
            truncated=np.zeros(1, bool),
            complete=np.ones(1, bool),
            start_known=np.ones(1, bool),
        ),
        "concat": lambda: EpisodeTable.concat([1, 2]),  # type: ignore[list-item]
    }
    with pytest.raises(VaultArgumentError):
        calls[case]()


def test_episode_stats_of_no_episode_and_of_open_ones() -> None:
    """episode_stats: counts, and ``return``/``length`` stats over the complete episodes
    ('None when there are none; non-finite returns left out')."""
    assert episode_stats(EpisodeTable.empty()) == {
        "episodes": 0, "complete": 0, "open": 0, "truncated": 0, "return": None, "length": None
    }  # fmt: skip
    out = episode_stats(_table())
    assert (out["episodes"], out["complete"], out["open"], out["truncated"]) == (4, 3, 1, 1)
    assert out["return"]["min"] == 1.0
    assert out["return"]["max"] == 2.0
    assert (out["length"]["min"], out["length"]["max"]) == (2, 5)


def test_leaf_stats_nan_bool_and_nested_leaves(tmp_path: Path) -> None:
    """LeafStats: 'Booleans count as 0/1'; min/max/mean/std 'None when there is none';
    ``count``: timesteps x rows x item elements; to_dict: JSON-ready, ``shape`` a list."""
    example = {"n": np.float32(0), "b": np.bool_(False), "v": np.zeros(2, np.float32)}
    with Vault.create(tmp_path / "v", example, rows=1) as v:
        v.append(
            {
                "n": np.full((1, 3), np.nan, np.float32),
                "b": np.array([[True, False, True]]),
                "v": np.ones((1, 3, 2), np.float32),
            }
        )
    stats = {s.name: s for s in leaf_stats(Vault.open(tmp_path / "v"))}
    assert list(stats) == ["b", "n", "v"]
    n = stats["n"]
    assert (n.count, n.finite, n.nan, n.min, n.max, n.mean, n.std) == (
        3,
        0,
        3,
        None,
        None,
        None,
        None,
    )
    b = stats["b"]
    assert (b.min, b.max, b.count) == (0, 1, 3)
    assert b.mean == pytest.approx(2 / 3)
    assert stats["v"].count == 6
    as_dict = stats["v"].to_dict()
    assert as_dict["shape"] == [2]
    assert json.loads(json.dumps(as_dict)) == as_dict


def test_to_xarray_names_nested_leaves_and_attrs(store: dict[str, Any]) -> None:
    """to_xarray: a leaf's variable is its path with '/' written '.' (``attrs["leaf"]`` keeps
    the path), item axes ``<name>_0``; ``attrs`` name location, commit_id, committed_length;
    episode_return is NaN without a reward leaf; ``episodes=False`` adds none."""
    ep = store["ep"]
    data = to_xarray(ep)
    assert data["info.y"].attrs["leaf"] == "info/y"
    assert dict(data["info.y"].sizes) == {"row": 2, "time": LENGTH, "info.y_0": 2}
    assert dict(data.attrs) == {
        "location": ep.location, "commit_id": ep.commit_id, "committed_length": LENGTH
    }  # fmt: skip
    assert np.isnan(data["episode_return"].values).all()
    assert data["episode_length"].values.tolist() == [5, 5, 5, 5]
    assert sorted(to_xarray(ep, episodes=False).variables) == ["done", "info.y", "x"]
    tree = store["ds"].to_xarray()
    assert sorted(tree["shards"].children) == ["a", "b"]


def test_verify_report_fields(tmp_path: Path, store: dict[str, Any]) -> None:
    """VerifyReport: ``episodes_checked`` None without an index; to_dict's keys; progress is
    called as ``progress(done, total)`` up to the total."""
    calls: list[tuple[int, int]] = []
    report = verify(store["root"] / "ep", progress=lambda done, total: calls.append((done, total)))
    assert report.ok
    assert report.committed_length == LENGTH
    assert report.chunks_checked > 0
    assert report.episodes_checked == 4
    assert calls
    assert calls[-1][0] == calls[-1][1]
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert sorted(report.to_dict()) == [
        "chunks_checked", "committed_length", "episodes_checked", "location", "ok", "problems",
        "warnings",
    ]  # fmt: skip
    with Vault.create(tmp_path / "plain", {"x": np.float32(0)}, rows=1) as v:
        v.append({"x": np.zeros((1, 2), np.float32)})
    assert verify(tmp_path / "plain").episodes_checked is None


# =============================================================================================
# Streams: StreamBatch, stacks, WindowStream, grain, the documented options
# =============================================================================================


def test_stream_batch_is_what_read_numpy_reads(store: dict[str, Any]) -> None:
    """StreamBatch: 'Sequence i is read_numpy(rows=[row[i]], start=start[i], stop=start[i] +
    sequence_length)'; row/start int64 ``[batch]``; epoch an int; source 0 for one vault.
    DatasetStream: local_batch_size is sample_batch_size / process_count; state() is
    JSON-serialisable; close() is idempotent and ``closed`` says so."""
    ep = store["ep"]
    stream = ep.as_dataset(4, 3, seed=0, leaves=["x"], epochs=2)
    assert (stream.local_batch_size, stream.process_count, stream.sources) == (4, 1, 1)
    seen = 0
    for batch in stream:
        assert (batch.row.dtype, batch.start.dtype, batch.row.shape) == (np.int64, np.int64, (4,))
        assert isinstance(batch.epoch, int)
        assert batch.source.tolist() == [0, 0, 0, 0]
        for i in range(4):
            row, start = int(batch.row[i]), int(batch.start[i])
            want = ep.read_numpy(rows=[row], start=start, stop=start + 3, leaves=["x"])["x"][0]
            assert batch.experience["x"][i].tolist() == want.tolist()
        seen += 4
    assert seen == 2 * 16  # 2 epochs x 2 rows x 8 starts
    assert stream.closed
    json.dumps(stream.state())
    stream.close()
    stream.close()


def test_dataset_stream_source_indexes_shards(store: dict[str, Any]) -> None:
    """Dataset.as_dataset: ``StreamBatch.source`` indexes ``shards``; an epoch visits every
    valid start of every shard exactly once."""
    ds = store["ds"]
    starts = []
    for batch in ds.as_dataset(2, 2, shuffle=False, drop_remainder=False):
        for i in range(len(batch.row)):
            source, start = int(batch.source[i]), int(batch.start[i])
            assert batch.experience["x"][i].tolist() == [
                100 * source + start,
                100 * source + start + 1,
            ]
            starts.append((ds.shards[source], start))
    assert sorted(starts) == [(s, t) for s in ("a", "b") for t in range(5)]


def test_stacked_stream_is_the_unstacked_stream(store: dict[str, Any]) -> None:
    """DatasetStream with ``stack=S``: 'exactly the unstacked stream's batches, in its order';
    'An epoch's last stack is shorter'; 'without drop_remainder the incomplete last batch
    follows alone ([1, rest, ...])'; row/start ``[S, batch]``; epoch one int."""
    ep = store["ep"]
    flat = [b.experience["x"] for b in ep.as_dataset(3, 3, seed=2, leaves=["x"])]
    stacked = list(ep.as_dataset(3, 3, seed=2, leaves=["x"], stack=2))
    assert [s.experience["x"].shape for s in stacked] == [(2, 3, 3), (2, 3, 3), (1, 3, 3)]
    assert [s.row.shape for s in stacked] == [(2, 3), (2, 3), (1, 3)]
    unstacked = [s.experience["x"][k] for s in stacked for k in range(len(s.row))]
    assert [u.tolist() for u in unstacked] == [f.tolist() for f in flat]
    rest = list(ep.as_dataset(3, 3, seed=2, leaves=["x"], stack=2, drop_remainder=False))
    assert rest[-1].experience["x"].shape == (1, 1, 3)  # 16 starts = 5 x 3 + 1
    assert all(isinstance(s.epoch, int) for s in rest)


def test_window_stream_windows_tell_which_window_is_which(store: dict[str, Any]) -> None:
    """WindowStream.windows/ranges: '(source, start, stop) of an epoch's windows, in yield
    order', shuffled or not; a shorter last window (current_index, is_full) in a state of
    ``capacity`` timesteps."""
    ep = store["ep"]
    stream = ep.iter_windows(4, shuffle=True, seed=3, leaves=["x"], capacity=6)
    states = list(stream)
    assert sorted(stream.ranges(0)) == [(0, 4), (4, 8), (8, 10)]
    for state, (source, start, stop) in zip(states, stream.windows(0), strict=True):
        assert source == 0
        assert state.experience["x"].shape == (2, 6)
        assert (int(state.current_index), bool(state.is_full)) == (stop - start, False)
        assert np.asarray(state.experience["x"])[1, : stop - start].tolist() == list(
            range(1000 + start, 1000 + stop)
        )
    windows = store["ds"].iter_windows(4, shuffle=False)
    assert [np.asarray(s.experience["x"])[0, 0] for s in windows] == [0, 4, 100, 104]
    assert windows.windows(0) == [(0, 0, 4), (0, 4, 6), (1, 0, 4), (1, 4, 6)]


def test_grain_source_stride_and_dataset_numbering(store: dict[str, Any]) -> None:
    """grain_source: 'only starts t with t % stride == 0'; 'numbered source by source, row by
    row, in time order'; a dataset of shards is a source per shard."""
    source = vault.grain_source(store["ep"], 3, stride=2, leaves=["x"])
    where = [source.where(i) for i in range(len(source))]
    assert where == [(0, r, t) for r in (0, 1) for t in (0, 2, 4, 6)]
    assert source[5]["x"].tolist() == [1002.0, 1003.0, 1004.0]
    shards = vault.grain_source(store["ds"], 2)
    assert len(shards) == 10
    assert shards.where(5) == (1, 0, 0)
    assert shards[5]["x"].tolist() == [100.0, 101.0]


def _documented_options(doc: str) -> set[str]:
    """The option names a docstring's ``**options`` lists (or those of the Vault method it
    says it takes them as)."""
    block = re.search(r"\*\*options:(.*?)\n\n", inspect.cleandoc(doc) + "\n\n", re.S)
    assert block is not None
    names = set(re.findall(r"``(\w+)``", block.group(1))) - {"None"}
    referred = re.search(r"as :meth:`Vault\.(\w+)` takes them\.", block.group(1))
    if not names and referred is not None:
        return _documented_options(getattr(Vault, referred.group(1)).__doc__)
    return names


def _accepted_options(call: Any) -> set[str]:
    with pytest.raises(VaultArgumentError, match="unknown option") as caught:
        call(zzz_not_an_option=1)
    listed = re.search(r"the options are (\[.*?\])", str(caught.value))
    assert listed is not None
    return set(json.loads(listed.group(1).replace("'", '"')))


@pytest.mark.parametrize(
    "where",
    ["Vault.as_dataset", "Vault.iter_windows", "Dataset.as_dataset", "Dataset.iter_windows"],
)
def test_documented_options_are_the_options_accepted(store: dict[str, Any], where: str) -> None:
    """The ``**options`` of as_dataset/iter_windows list every option they accept, and no
    other."""
    cls, method = where.split(".")
    obj = store["ep"] if cls == "Vault" else store["ds"]
    args = (1, 2) if method == "as_dataset" else (2,)
    documented = _documented_options(getattr(type(obj), method).__doc__)
    accepted = _accepted_options(lambda **kw: getattr(obj, method)(*args, **kw))
    assert documented == accepted


# =============================================================================================
# Dataset
# =============================================================================================


def test_dataset_properties_and_describe(store: dict[str, Any]) -> None:
    """Dataset: shards sorted, committed_lengths / commit_ids keyed by shard, timesteps of
    every row of every shard, describe() JSON-ready, manifest 'The same as template',
    snapshots in shard order, vaults() ``(name, vault)`` read-only; read/read_numpy of an
    unknown shard: 'VaultArgumentError: no such shard'."""
    ds = store["ds"]
    assert (ds.shards, ds.timesteps, ds.committed_lengths) == (["a", "b"], 12, {"a": 6, "b": 6})
    assert ds.commit_ids == {name: v.commit_id for name, v in ds.vaults()}
    assert ds.manifest == ds.template
    assert ds.template.rows == 1
    assert [s.length for s in ds.snapshots] == [6, 6]
    described = ds.describe()
    assert json.loads(json.dumps(described)) == described
    assert [s["shard"] for s in described["shards"]] == ["a", "b"]
    assert ds.read_numpy("b")["x"].tolist() == [[100, 101, 102, 103, 104, 105]]
    for method in (ds.read, ds.read_numpy):
        with pytest.raises(VaultArgumentError, match="no shard 'nope'"):
            method("nope")
    assert is_dataset(store["root"] / "ds")
    assert not is_dataset(store["root"] / "ep")
    assert not is_dataset(store["root"] / "nothing")


def test_dataset_shard_defaults_and_tags(tmp_path: Path) -> None:
    """shard(): 'default: host, process id and a random part'; rows default to those given to
    create; an existing shard of other rows is VaultStructureError; tag() returns shard ->
    commit id; open(at=tag): ``tagged`` and a shard() on it is VaultModeError; an unknown tag
    is VaultPinError; check_open() raises VaultNotFoundError with no shard."""
    ds = Dataset.create(tmp_path / "ds", {"x": np.float32(0)}, rows=2)
    with pytest.raises(VaultNotFoundError, match="no shard yet"):
        ds.check_open()
    assert ds.tagged is None
    with ds.shard() as writer:
        name = Path(writer.location).name
        assert writer.rows == 2
        writer.append({"x": np.zeros((2, 3), np.float32)})
    assert re.fullmatch(rf"{re.escape(socket.gethostname())}-{os.getpid()}-\w+", name)
    with pytest.raises(VaultStructureError, match=r"exists with 2 rows, not 3"):
        ds.shard(name, rows=3)
    reader = Dataset.open(tmp_path / "ds")
    ids = reader.tag("t")
    assert ids == reader.commit_ids
    tagged = Dataset.open(tmp_path / "ds", at="t")
    assert tagged.tagged == "t"
    with pytest.raises(VaultModeError, match="opened at tag"):
        tagged.shard("other")
    with pytest.raises(VaultPinError, match="'nope'"):
        Dataset.open(tmp_path / "ds", at="nope")


def test_dataset_open_write_catalog_string_is_refused(store: dict[str, Any]) -> None:
    with pytest.raises(VaultArgumentError, match="write_catalog"):
        Dataset.open(store["root"] / "ds", write_catalog="False")  # type: ignore[arg-type]


def test_unknown_options_and_bounds_are_refused_by_name(
    store: dict[str, Any], tmp_path: Path
) -> None:
    """Options passed on (``**options``) are checked as ``as_dataset``'s are: an unknown one is
    VaultArgumentError naming it and the closest valid name; a length bound of ``select`` is
    an int >= 0."""
    with pytest.raises(VaultArgumentError, match=r"'leafs' .*did you mean 'leaves'"):
        Dataset.open(store["root"] / "ds").leaf_stats(leafs=["obs"])
    with pytest.raises(VaultArgumentError, match=r"'codc' .*did you mean 'codec'"):
        converters.import_dataset("d4rl", "x.hdf5", store["root"] / "nope", codc="zstd")
    assert not (store["root"] / "nope").exists()
    table = store["ep"].episodes()
    for bad in (-1, 1.5):
        with pytest.raises(VaultArgumentError, match="min_length"):
            table.select(min_length=bad)
    with pytest.raises(vault.VaultLocationError, match="empty"):
        vault.parse_location("")
    odd = Vault.create(tmp_path / "odd", {"info": {"c d": np.float32(0)}}, rows=1)
    with odd:
        odd.append({"info": {"c d": np.zeros((1, 2), np.float32)}})
        assert odd.leaf_names == ["info/c%20d"]
        with pytest.raises(VaultReadError, match=r"escapes its keys.*write 'info/c%20d'"):
            odd.read_numpy(leaves=["info/c d"])  # the key as given: named, with its path
    with pytest.raises(vault.VaultLocationError, match="path"):
        vault.parse_location({"driver": "file"})


# =============================================================================================
# Locations, storage errors, fault hooks
# =============================================================================================


def test_find_vaults_lists_datasets_and_skips_hidden(tmp_path: Path, store: dict[str, Any]) -> None:
    """find_vaults: sorted by location; 'hidden folders are skipped'; ``datasets=True`` lists a
    dataset's root (kind "dataset"); its shards are listed as vaults either way."""
    with Vault.create(tmp_path / ".hidden", {"x": np.float32(0)}, rows=1):
        pass
    assert find_vaults(tmp_path) == []
    found = find_vaults(store["root"])
    assert [f.location for f in found] == sorted(f.location for f in found)
    names = {(Path(f.location).name, f.kind) for f in found}
    assert names == {("ep", "vault"), ("a", "vault"), ("b", "vault")}
    with_roots = {
        (Path(f.location).name, f.kind) for f in find_vaults(store["root"], datasets=True)
    }
    assert with_roots == names | {("ds", "dataset")}


def test_find_vaults_datasets_string_is_refused(store: dict[str, Any]) -> None:
    with pytest.raises(VaultArgumentError, match="datasets"):
        find_vaults(store["root"], datasets="False")  # type: ignore[arg-type]


def test_parse_location_claims(tmp_path: Path) -> None:
    """parse_location: 'a location (returned as it is)'; a NUL byte names ``argument``;
    ``storage`` with a location that is not an object store is VaultLocationError; a file
    location can lock, rename and persists."""
    location = parse_location(tmp_path / "v")
    assert parse_location(location) is location
    assert location.spec == {"driver": "file", "path": f"{tmp_path}/v/"}
    caps = location.capabilities
    assert (caps.exclusive_lock, caps.atomic_rename, caps.persistent, caps.lease) == (
        True, True, True, False
    )  # fmt: skip
    assert not parse_location("memory://x").capabilities.persistent
    with pytest.raises(VaultLocationError, match=r"dest .* NUL byte"):
        parse_location("a\0b", argument="dest")
    with pytest.raises(VaultLocationError, match="storage="):
        parse_location(tmp_path / "v", storage={"region": "x"})
    with pytest.raises(VaultLocationError, match="unsupported kvstore driver 'nope'"):
        parse_location({"driver": "nope"})


def test_parse_location_bytes_is_typed(tmp_path: Path) -> None:
    with pytest.raises(VaultLocationError, match="dest"):
        parse_location(os.fsencode(tmp_path / "v"), argument="dest")  # type: ignore[arg-type]


def test_parse_location_spec_path_must_be_a_string(tmp_path: Path) -> None:
    with pytest.raises(VaultLocationError, match="path"):
        parse_location({"driver": "file", "path": 5})


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (errno.ENOSPC, VaultStorageError),
        (errno.EIO, VaultStorageError),
        (errno.EACCES, VaultAccessError),
        (errno.EPERM, VaultAccessError),
        (errno.EROFS, VaultAccessError),
        (errno.ENOENT, VaultNotFoundError),
    ],
)
def test_storage_error_types_by_errno(code: int, error: type[VaultError]) -> None:
    """storage_error: VaultAccessError (no permission, read-only), VaultNotFoundError (a path
    that leads nowhere), VaultStorageError (full disk, I/O), naming where, what was being
    done and the path; None for what is not a storage failure."""
    typed = storage_error(OSError(code, os.strerror(code), "/x/y"), "WHERE", "write the tag")
    assert type(typed) is error
    assert getattr(typed, "errno", code) == code
    assert str(typed).startswith("WHERE: cannot write the tag")
    assert "/x/y" in str(typed)
    assert storage_error(ValueError("x"), "WHERE", "read") is None


def test_set_fault_hook_refuses_a_non_callable() -> None:
    try:
        with pytest.raises(VaultArgumentError, match="hook"):
            set_fault_hook(5)  # type: ignore[arg-type]
    finally:
        set_fault_hook(None)


def test_fault_hook_sees_only_documented_points(tmp_path: Path) -> None:
    """set_fault_hook: 'Returns: The previous hook'; the hook is called as hook(point, info,
    step) at the points of FAULT_POINTS."""
    seen: list[str] = []

    def hook(point: str, info: dict[str, Any], step: Any) -> Any:
        seen.append(point)
        return step()

    assert set_fault_hook(hook) is None
    try:
        with Vault.create(tmp_path / "v", {"x": np.float32(0)}, rows=1) as v:
            v.append({"x": np.zeros((1, 2), np.float32)})
    finally:
        assert set_fault_hook(None) is hook
    assert seen
    assert set(seen) <= set(vault.FAULT_POINTS)
    assert Vault.open(tmp_path / "v").committed_length == 2


# =============================================================================================
# Format records and snapshots
# =============================================================================================


def test_records_round_trip_and_describe_themselves(store: dict[str, Any]) -> None:
    """Manifest/LeafSpec/CommitRecord to_json -> from_json round trips; Manifest.leaf: 'KeyError:
    no leaf at that path'; LeafSpec.chunk_time / step_bytes; Manifest.step_bytes: every leaf;
    CommitRecord.to_bytes: 'without whitespace'; a newer format is VaultVersionError; Seam /
    EpisodeLeaves / LockHolder JSON forms."""
    manifest = store["ep"].manifest
    assert Manifest.from_json(manifest.to_json(), "w") == manifest
    leaf = manifest.leaf("info/y")
    assert LeafSpec.from_json(leaf.to_json()) == leaf
    assert leaf.to_json()["shape"] == [2]
    assert leaf.chunk_time == leaf.chunk[1]
    assert leaf.step_bytes == 2 * 4
    assert manifest.step_bytes == sum(s.step_bytes for s in manifest.leaves) == 1 + 8 + 4
    assert [s.name for s in manifest.leaves] == ["done", "info/y", "x"]
    with pytest.raises(KeyError):
        manifest.leaf("nope")
    newer = dict(manifest.to_json(), format_version=99)
    with pytest.raises(VaultVersionError, match="99"):
        Manifest.from_json(newer, "w")
    commit = store["ep"].snapshot.commit
    assert CommitRecord.from_json(commit.to_json(), "w", manifest) == commit
    assert b" " not in commit.to_bytes()
    assert b"\n" not in commit.to_bytes()
    assert json.loads(commit.to_bytes())["attributes"]["rlvault_commit"] == commit.to_json()
    assert Seam(3, 1).to_json() == {"at": 3, "lost": 1}
    assert manifest.episodes is not None
    assert manifest.episodes.as_dict() == {"done": "done", "truncated": None, "reward": None}
    assert store["ep"].episode_leaves == manifest.episodes.as_dict()
    assert LockHolder.from_json([1]) is None


def test_snapshot_properties(store: dict[str, Any]) -> None:
    """Snapshot: length, rows, names in leaf order, episode_count, writable false for a reader,
    refreshed() is ``self`` when nothing changed, array(name) the leaf's handle."""
    snap = store["ep"].snapshot
    assert (snap.length, snap.rows, snap.names, snap.episode_count) == (
        LENGTH, 2, ["done", "info/y", "x"], 4
    )  # fmt: skip
    assert not snap.writable
    assert snap.refreshed() is snap
    assert snap.array("x").shape == (2, LENGTH)


def test_snapshot_array_unknown_leaf_is_typed(store: dict[str, Any]) -> None:
    with pytest.raises(VaultError, match="nope"):
        store["ep"].snapshot.array("nope")


# =============================================================================================
# Converters
# =============================================================================================


def test_converter_lookup_and_minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """converter(fmt, "export") is export_<fmt>; datasets_root: 'MINARI_DATASETS_PATH or
    ~/.minari/datasets'."""
    assert converters.converter("minari", "export") is converters.export_minari
    assert converters.converter("ogbench") is converters.import_ogbench
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "m"))
    assert converters.datasets_root() == tmp_path / "m"
    monkeypatch.delenv("MINARI_DATASETS_PATH")
    assert converters.datasets_root() == Path.home() / ".minari" / "datasets"


def test_import_ogbench_by_name_and_val_dest(tmp_path: Path) -> None:
    """import_ogbench: a dataset name is 'looked up as <dataset_dir>/<name>.npz'; the
    ``-val`` file goes to ``<dest>-val`` (``True``), is skipped with ``False``, and a
    ``val_dest`` for a file that is itself a validation file is VaultArgumentError."""
    terminals = np.zeros(6, np.float32)
    terminals[[2, 5]] = 1
    arrays = {
        "observations": np.arange(12, dtype=np.float32).reshape(6, 2),
        "actions": np.ones((6, 1), np.float32),
        "terminals": terminals,
    }
    np.savez(tmp_path / "toy.npz", **arrays)  # type: ignore[arg-type]
    np.savez(tmp_path / "toy-val.npz", **arrays)  # type: ignore[arg-type]
    imported = converters.import_ogbench("toy", tmp_path / "o", dataset_dir=tmp_path)
    assert imported.read_numpy()["observations"][0].tolist() == arrays["observations"].tolist()
    assert Vault.open(tmp_path / "o-val").committed_length == 6
    converters.import_ogbench(tmp_path / "toy.npz", tmp_path / "p", val_dest=False)
    assert not (tmp_path / "p-val").exists()
    with pytest.raises(VaultArgumentError, match=r"val_dest: toy-val\.npz is a validation file"):
        converters.import_ogbench(tmp_path / "toy-val.npz", tmp_path / "q", val_dest=tmp_path / "r")
    with pytest.raises(VaultArgumentError, match="dataset_dir"):
        converters.import_ogbench("toy", tmp_path / "s", dataset_dir=5)  # type: ignore[arg-type]
    assert not (tmp_path / "q").exists()
    assert not (tmp_path / "s").exists()


# =============================================================================================
# buffers
# =============================================================================================


def test_buffer_capacity_and_layouts() -> None:
    """capacity: 'add_batch_size * max_length_time_axis'; make_trajectory_buffer: min length
    'raised to sample_sequence_length'; make_n_step_buffer(32, 8, 4, False, 6) 'keeps 6 rows
    of 5 timesteps' (a warning names the effective capacity); the configuration fields are
    plain Python ints."""
    trajectory = fbx.make_trajectory_buffer(2, 4, 3, 1, 1, max_length_time_axis=16)
    assert (trajectory.capacity, trajectory.min_length_time_axis) == (32, 3)
    assert all(
        type(getattr(trajectory, name)) is int
        for name in ("add_batch_size", "sample_batch_size", "max_length_time_axis", "period")
    )
    with pytest.warns(UserWarning, match="holds 30 timesteps"):
        n_step = fbx.make_n_step_buffer(32, 8, 4, False, 6)
    assert (n_step.add_batch_size, n_step.max_length_time_axis, n_step.capacity) == (6, 5, 30)
    with pytest.warns(UserWarning, match="using 15"):
        prioritised = fbx.make_prioritised_trajectory_buffer(1, 2, 2, 3, 2, max_length_time_axis=16)
    assert prioritised.max_length_time_axis == 15  # 'rounded down to a multiple of period'
    queue = fbx.make_trajectory_queue(8, 2, 2, 2, max_size=30)  # 'max_size ... overrides'
    assert (queue.max_length_time_axis, queue.capacity) == (15, 30)


def test_n_step_buffer_readiness_rule() -> None:
    """make_n_step_buffer: 'With one row that is max(min_length, n_step) + 1 timesteps'."""
    buffer = fbx.make_n_step_buffer(16, 1, 2, n_step=3)
    state = buffer.init({"x": jnp.float32(0)})
    ready = []
    for t in range(5):
        state = buffer.add(state, {"x": jnp.float32(t)})
        ready.append(bool(buffer.can_sample(state)))
    assert ready == [False, False, False, True, True]


def test_hand_built_states_derive_their_write_counter() -> None:
    """The states' ``write_counter``, built by hand without it: 'the fewest timesteps
    consistent with' the indices (``+ T`` when full / wrapped)."""
    x = {"x": jnp.zeros((1, 4))}
    full = fbx.TrajectoryBufferState(x, current_index=jnp.int32(1), is_full=jnp.bool_(True))
    part = fbx.TrajectoryBufferState(x, current_index=jnp.int32(3), is_full=jnp.bool_(False))
    assert (fbx.timesteps_added(full), fbx.timesteps_added(part)) == (5, 3)
    wrapped = fbx.TrajectoryQueueState(
        x, write_index=jnp.int32(1), read_index=jnp.int32(3), is_full=jnp.bool_(False)
    )
    assert fbx.timesteps_added(wrapped) == 5
    replay = fbx.ReplayBufferState({"x": jnp.zeros(4)}, position=jnp.int32(1), size=jnp.int32(4))
    assert fbx.timesteps_added(replay) == 5
    assert fbx.write_counter_from_int(2**64 - 1).tolist() == [2**32 - 1, 2**32 - 1]
    with pytest.raises(BufferConfigError, match="2\\*\\*64"):
        fbx.write_counter_from_int(2**64)


def test_gather_all_of_queue_and_replay_states() -> None:
    """gather_all: a queue's unread timesteps, 'the ones the next sample calls would return, in
    that order'; a ReplayBufferState's ``size`` transitions, oldest first, as ``[1, size,
    ...]`` (hand-built states: the slots hold ``10 + slot``)."""
    slots = {"x": jnp.arange(10, 14, dtype=jnp.int32)[None]}
    for read, write, unread in [(1, 3, [11, 12]), (3, 1, [13, 10])]:
        queue = fbx.TrajectoryQueueState(
            slots,
            write_index=jnp.int32(write),
            read_index=jnp.int32(read),
            is_full=jnp.bool_(False),
        )
        assert fbx.gather_all(queue)["x"].tolist() == [unread]
    full = fbx.ReplayBufferState(
        {"o": jnp.arange(10, 14, dtype=jnp.float32)}, position=jnp.int32(3), size=jnp.int32(4)
    )
    assert fbx.gather_all(full)["o"].tolist() == [[13.0, 10.0, 11.0, 12.0]]
    part = fbx.ReplayBufferState(
        {"o": jnp.arange(10, 14, dtype=jnp.float32)}, position=jnp.int32(2), size=jnp.int32(2)
    )
    assert fbx.gather_all(part)["o"].tolist() == [[10.0, 11.0]]


def test_to_flashbax_state_shapes_and_round_trip() -> None:
    """to_flashbax_state: the documented keys per kind (running_index int32); from_flashbax_state
    of ours 'comes back unchanged' and of its own output gives our kind back."""
    flat = fbx.make_flat_buffer(8, 1, 1)
    state = flat.add(flat.init({"x": jnp.float32(0)}), {"x": jnp.float32(1)})
    assert sorted(fbx.to_flashbax_state(state)) == ["current_index", "experience", "is_full"]
    assert fbx.from_flashbax_state(state) is state
    again = fbx.from_flashbax_state(fbx.to_flashbax_state(state))
    assert isinstance(again, fbx.TrajectoryBufferState)
    assert fbx.timesteps_added(again) == 1
    prioritised = fbx.make_prioritised_item_buffer(8, 1, 2)
    pstate = prioritised.init({"x": jnp.float32(0)})
    shaped = fbx.to_flashbax_state(pstate)
    assert sorted(shaped) == [
        "current_index", "experience", "is_full", "running_index", "sum_tree_state"
    ]  # fmt: skip
    assert sorted(shaped["sum_tree_state"]) == ["max_recorded_priority", "nodes"]
    assert shaped["running_index"].dtype == jnp.int32
    assert pstate.running_index.dtype == jnp.uint32
    assert int(pstate.running_index) == 0


def test_buffer_errors_carry_their_documented_fields() -> None:
    """BufferTooLargeError: 'refused before allocating', ``nbytes`` > ``limit``, also a
    MemoryError; BatchStructureError: 'every bad leaf (not only the first)' as LeafMismatch
    (path, expected, got)."""
    huge = fbx.make_flat_buffer(max_length=2**30, min_length=1, sample_batch_size=1)
    with pytest.raises(BufferTooLargeError) as too_large:
        huge.init({"x": jnp.zeros(10**6)})
    assert too_large.value.nbytes == 2**30 * 4 * 10**6 > too_large.value.limit
    assert isinstance(too_large.value, MemoryError)
    items = fbx.make_item_buffer(4, 1, 1)
    state = items.init({"a": jnp.zeros(2), "b": jnp.int32(0)})
    with pytest.raises(BatchStructureError) as mismatch:
        items.add(state, {"a": jnp.zeros(3), "b": jnp.float32(0)})
    assert [(m.path, m.expected, m.got) for m in mismatch.value.mismatches] == [
        ("experience/a", "[2] float32", "[3] float32"),
        ("experience/b", "[] int32", "[] float32"),
    ]


def test_mixer_splits_by_largest_remainder() -> None:
    """make_mixer: 'the batch is split in proportion, the largest remainders getting the
    leftover items'."""
    parts = [fbx.make_flat_buffer(32, 2, 8) for _ in range(3)]
    assert fbx.make_mixer(parts, 8, [1, 1, 1]).batch_sizes == (3, 3, 2)
    assert fbx.make_mixer(parts, 8, [5, 2, 1]).batch_sizes == (5, 2, 1)
    assert fbx.make_mixer(parts[:2], 7, [1, 2]).batch_sizes == (2, 5)


@pytest.mark.parametrize("pair", ["flat-item", "sequence-lengths"])
def test_make_mixer_refuses_buffers_of_different_kinds(pair: str) -> None:
    if pair == "flat-item":
        buffers = [fbx.make_flat_buffer(32, 2, 8), fbx.make_item_buffer(32, 2, 8)]
    else:
        buffers = [
            fbx.make_trajectory_buffer(1, 8, 2, 1, 2, max_length_time_axis=8),
            fbx.make_trajectory_buffer(1, 8, 3, 1, 3, max_length_time_axis=8),
        ]
    with pytest.raises(BufferConfigError):
        fbx.make_mixer(buffers, 8, [1, 1])


# =============================================================================================
# The docstrings themselves
# =============================================================================================

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj):`~?([^`<>]+)`")


def _documented() -> list[tuple[str, Any, Any]]:
    """(where, object, its class or None) for every public name and every public member of a
    public class (members this project's mixins give it included)."""
    out: list[tuple[str, Any, Any]] = []
    for prefix, module in PUBLIC.items():
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.ismodule(obj):
                continue
            out.append((f"{prefix}.{name}", obj, None))
            if inspect.isclass(obj):
                for member_name, member in inspect.getmembers(obj):
                    static = inspect.getattr_static(obj, member_name, None)
                    if member_name.startswith("_"):
                        continue
                    if isinstance(static, property):
                        out.append((f"{prefix}.{name}.{member_name}", static.fget, obj))
                    elif (
                        callable(member)
                        and (getattr(member, "__module__", None) or "").split(".")[0] in PUBLIC
                    ):
                        out.append((f"{prefix}.{name}.{member_name}", member, obj))
    return out


def _resolve(name: str, obj: Any, cls: Any) -> Any:
    """What a role's name names, resolved as the API pages resolve it (class, module, the
    packages); ``None`` for nothing."""
    head, *rest = name.split(".")
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    scopes = [cls, obj if inspect.isclass(obj) else None, module, vault, fbx, converters]
    for scope in scopes:
        if scope is None:
            continue
        annotations: dict[str, Any] = {}
        if inspect.isclass(scope):
            for base in scope.__mro__:
                annotations.update(getattr(base, "__annotations__", {}))
        target = getattr(scope, head, None)
        if target is None and head in annotations and not rest:
            return scope  # an instance attribute documented on its class
        if target is not None:
            try:
                for part in rest:
                    target = getattr(target, part)
            except AttributeError:
                continue
            return target
    parts = name.split(".")
    for i in range(len(parts), 0, -1):  # an absolute path: a module, then attributes
        try:
            target = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for part in parts[i:]:
                target = getattr(target, part)
        except AttributeError:
            return None
        return target
    return None


def test_every_docstring_cross_reference_resolves() -> None:
    """A ``:class:``/``:func:``/``:meth:`` role in a public docstring names an object."""
    broken = [
        (where, name)
        for where, obj, cls in _documented()
        for name in ROLE.findall(inspect.getdoc(obj) or "")
        if _resolve(name, obj, cls) is None
    ]
    assert broken == []


def _rendered() -> tuple[set[int], set[int]]:
    """ids of the objects the API pages render, and of the classes whose members they
    render."""
    objects, classes = set(), set()
    for page in (ROOT / "docs" / "api").glob("*.md"):
        for path in re.findall(r"^::: (\S+)$", page.read_text(), re.M):
            prefix, name = path.rsplit(".", 1)
            obj = getattr(importlib.import_module(prefix), name)
            if not inspect.ismodule(obj):
                objects.add(id(obj))
                if inspect.isclass(obj):
                    classes.add(id(obj))
    return objects, classes


def test_every_cross_reference_names_something_rendered() -> None:
    objects, classes = _rendered()
    unrendered = []
    for where, obj, cls in _documented():
        scope = cls if cls is not None else (obj if inspect.isclass(obj) else None)
        for name in ROLE.findall(inspect.getdoc(obj) or ""):
            target = _resolve(name, obj, cls)
            if target is None or inspect.ismodule(target) or id(target) in objects:
                continue
            owner, _, attr = name.rpartition(".")
            parent = _resolve(owner, obj, cls) if owner else scope
            member = parent is not None and getattr(parent, attr, None) == target
            if not (member and inspect.isclass(parent) and id(parent) in classes):
                unrendered.append((where, name))
    assert unrendered == []


def test_every_raises_entry_names_an_exception() -> None:
    """Each entry of a public docstring's ``Raises`` section is an exception class of vault,
    buffers or the builtins (no typo, no renamed class)."""
    unknown = []
    for where, obj, _ in _documented():
        doc = inspect.getdoc(obj) or ""
        section = re.search(r"^Raises:\n((?:[ \t]+.*\n?|\n)*)", doc, re.M)
        if section is None:
            continue
        for name in re.findall(r"^    (\w+):", section.group(1), re.M):
            cls = (
                getattr(vault, name, None)
                or getattr(fbx, name, None)
                or getattr(builtins, name, None)
            )
            if not (inspect.isclass(cls) and issubclass(cls, BaseException)):
                unknown.append((where, name))
    assert unknown == []
    assert any("UnsavedDataLostError" in (inspect.getdoc(o) or "") for _, o, _ in _documented())
