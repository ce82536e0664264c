"""Exports out of a vault and back in: vaults with seams (an overrun saved with
``on_overrun="save_surviving"``, a restart) and open episodes at the end of their rows, exported
to Minari at the head and at a tag, by the API and by ``vault export`` (on disk and from S3),
then imported back; the npz/npy exports of the same vault; exports that fail half-way; and the
structures a vault holds that an export must carry (named tuples, dataclasses, escaped leaf
names, leaf names that collide as file names) or refuse out loud (fields that disagree with
each other, with a given space or with Minari's metadata rules, next observations an export
would drop).

Every vault is written here with data that say where they belong: row ``r`` at history step
``t`` holds the observation ``[1000 r + t, -(1000 r + t)]``, its next observation is the
one of ``t + 1``, the action ``1000 r + t`` and the reward ``r + t / 8``; the stored position of
each history step is known (the overrun's lost steps are skipped), so each exported episode is
checked against a model walked from the end flags.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from typer.testing import CliRunner

from buffers.trajectory_buffer import TrajectoryBufferState
from vault import (
    Dataset,
    Vault,
    VaultArgumentError,
    VaultCorruptError,
    VaultError,
    VaultExistsError,
)
from vault.cli import app
from vault.converters import export_minari, import_minari

# ------------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Minari and Gymnasium warn about authors, casts and the like."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


@pytest.fixture(scope="module")
def minari_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("minari")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINARI_DATASETS_PATH", str(root))
        yield root


def _cli(*args: Any) -> Any:
    env = {"COLUMNS": "200", "NO_COLOR": "1"}
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def _cli_json(*args: Any) -> dict[str, Any]:
    result = _cli(*args, "--json")
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout)


def _minari_episodes(dataset_id: str) -> tuple[Any, list[Any]]:
    import minari

    with _quiet():
        ds = minari.load_dataset(dataset_id)
        return ds, list(ds.iterate_episodes())


def _export(source: Any, dataset_id: str, **options: Any) -> Path:
    with _quiet():
        return export_minari(source, dataset_id, **options)


def _import(dataset_id: str, dest: Any) -> Vault:
    with _quiet():
        return import_minari(dataset_id, dest)


def _leftovers(root: Path) -> list[str]:
    """Every file or folder under ``root`` (hidden staging ones included)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


# ------------------------------------------------ a vault with seams and open episodes
ROWS, CAPACITY = 2, 8
# the history steps that end an episode, per row
ENDS = {0: {2, 5, 9, 14, 16, 102, 105}, 1: {1, 6, 12, 13, 101, 106}}
# the stored runs: (first stored position, history steps, whether its first episode's
# beginning is stored): the first write (0..6), the write that overran (7..10 lost, 11..18
# kept: Seam(at=7, lost=4)), then a restart (append continues=False: Seam(at=15, lost=0))
RUNS = [
    (0, list(range(7)), True),
    (7, list(range(11, 19)), False),
    (15, list(range(100, 109)), True),
]
SEAMS = [{"at": 7, "lost": 4}, {"at": 15, "lost": 0}]
TAGGED = 2  # the tag is set after the first two runs


def _value(r: int, t: int) -> float:
    return 1000.0 * r + t


def _step(r: int, t: int) -> dict[str, Any]:
    v = _value(r, t)
    return {
        "observations": np.array([v, -v], np.float32),
        "next_observations": np.array([v + 1, -(v + 1)], np.float32),
        "actions": np.int32(v),
        "rewards": np.float32(r + t / 8),
        "terminations": np.bool_(t in ENDS[r]),
    }


def _ring(counter: int) -> Any:
    """A trajectory buffer state after ``counter`` adds of ``_step`` (a ring of 8)."""
    example = _step(0, 0)
    exp = {
        k: np.zeros((ROWS, CAPACITY, *np.shape(x)), np.asarray(x).dtype) for k, x in example.items()
    }
    for r in range(ROWS):
        for t in range(max(0, counter - CAPACITY), counter):
            for k, x in _step(r, t).items():
                exp[k][r, t % CAPACITY] = x
    fields: dict[str, Any] = {
        "current_index": np.int32(counter % CAPACITY),
        "is_full": np.bool_(counter >= CAPACITY),
        "write_counter": np.array([0, counter], np.uint32),  # (high, low)
    }
    return TrajectoryBufferState(experience=exp, **fields)


def _block(ts: list[int]) -> dict[str, np.ndarray]:
    steps = [[_step(r, t) for t in ts] for r in range(ROWS)]
    return {k: np.stack([np.stack([s[k] for s in row]) for row in steps]) for k in steps[0][0]}


def _write_seamed(location: Any) -> None:
    """The vault of RUNS, tagged ``runs-0-1`` after the overrun; open episodes at the end."""
    v = Vault.create(location, _ring(0), done_leaf="terminations", reward_leaf="rewards")
    with v:
        assert v.write(_ring(7)) == 7
        assert v.write(_ring(19), on_overrun="save_surviving") == 8  # 12 new, 8 kept
        v.tag("runs-0-1")
        assert v.append(_block(RUNS[2][1]), continues=False) == 9


def _model(runs: list[tuple[int, list[int], bool]]) -> set[tuple[int, int, tuple[int, ...]]]:
    """(row, stored start, history steps) of every episode an export must carry: ended in
    its run, and its beginning stored (not the first one of a run after lost steps)."""
    out = set()
    for r in range(ROWS):
        for first, ts, known in runs:
            start, seen_end = 0, False
            for i, t in enumerate(ts):
                if t in ENDS[r]:
                    if known or seen_end:
                        out.add((r, first + start, tuple(ts[start : i + 1])))
                    start, seen_end = i + 1, True
    return out


def _check_minari_episode(ep: Any) -> tuple[int, tuple[int, ...]]:
    """The row and history steps a Minari episode of the seamed vault holds, after checking
    every field against them."""
    obs = np.asarray(ep.observations)
    r = int(obs[0, 0]) // 1000
    ts = tuple(int(x) - 1000 * r for x in obs[:-1, 0])
    assert list(ts) == list(range(ts[0], ts[0] + len(ts))), ts  # no step missing or added
    want = [_step(r, t) for t in ts]
    np.testing.assert_array_equal(obs[:-1], np.stack([w["observations"] for w in want]))
    np.testing.assert_array_equal(obs[-1], want[-1]["next_observations"])
    np.testing.assert_array_equal(ep.actions, np.array([w["actions"] for w in want]))
    np.testing.assert_array_equal(ep.rewards, np.array([w["rewards"] for w in want]))
    np.testing.assert_array_equal(ep.terminations, [t in ENDS[r] for t in ts])
    assert ep.terminations[-1]
    assert not np.asarray(ep.truncations).any()
    return r, ts


@pytest.fixture(scope="module")
def seamed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("seamed") / "v"
    _write_seamed(path)
    return path


def test_the_seamed_vault_is_what_the_model_says(seamed: Path) -> None:
    """The premise of the export tests: the seams, the lost steps and the index."""
    v = Vault.open(seamed)
    assert v.gaps == SEAMS
    assert v.committed_length == 24
    obs = v.read_numpy()["observations"][..., 0]
    stored = [t for _, ts, _ in RUNS for t in ts]
    np.testing.assert_array_equal(obs, [[_value(r, t) for t in stored] for r in range(ROWS)])
    table = v.episodes(include_open=True)
    assert (~table.complete).sum() == ROWS  # each row ends in an open episode
    assert (~table.start_known).sum() == ROWS  # each row's first episode after the overrun
    known = table[np.asarray(table.complete & table.start_known, bool)]
    model = _model(RUNS)
    assert sorted(
        zip(known.row.tolist(), known.start.tolist(), known.length.tolist(), strict=True)
    ) == sorted((r, s, len(ts)) for r, s, ts in model)


# ------------------------------------------------------------- Minari: seams, tags, back in
@pytest.mark.parametrize("fmt", ["hdf5", "arrow"])
def test_minari_export_of_seams_and_open_episodes_carries_whole_episodes_and_imports_back(
    seamed: Path, minari_root: Path, tmp_path: Path, fmt: str
) -> None:
    v = Vault.open(seamed)
    out = _export(v, f"seams/{fmt}-v0", data_format=fmt)
    assert out == minari_root / "seams" / f"{fmt}-v0"
    ds, episodes = _minari_episodes(f"seams/{fmt}-v0")
    got = [_check_minari_episode(ep) for ep in episodes]
    # exactly the whole, ended episodes: no open one, none cut by the overrun or the restart
    model = _model(RUNS)
    assert sorted(got) == sorted((r, ts) for r, _, ts in model)
    # in the episode index's order
    table = v.episodes()
    table = table[np.asarray(table.start_known, bool)]
    by_place = {(r, s): ts for r, s, ts in model}
    places = zip(table.row.tolist(), table.start.tolist(), strict=True)
    assert got == [(r, by_place[r, s]) for r, s in places]
    assert ds.total_steps == sum(len(ts) for _, ts in got)
    # and back in: one row, the same episodes one after another, the same returns
    back = _import(f"seams/{fmt}-v0", tmp_path / "back")
    assert back.rows == 1
    assert back.gaps == []
    theirs = back.episodes()
    assert theirs.length.tolist() == table.length.tolist()
    np.testing.assert_allclose(theirs.returns, table.returns, rtol=1e-6)
    assert not theirs.truncated.any()
    data = back.read_numpy()
    for i, (start, length) in enumerate(
        zip(theirs.start.tolist(), theirs.length.tolist(), strict=True)
    ):
        ours = v.read_episode(table[i : i + 1])
        for leaf, value in ours.items():
            np.testing.assert_array_equal(data[leaf][0, start : start + length], value, leaf)
        assert not data["truncations"][0, start : start + length].any()


def test_minari_export_of_a_tag_is_that_commits_episodes_and_an_existing_id_is_refused(
    seamed: Path, minari_root: Path
) -> None:
    pinned = Vault.open(seamed, at="runs-0-1")
    assert pinned.committed_length == 15
    _export(pinned, "tagged/pinned-v0")
    _, episodes = _minari_episodes("tagged/pinned-v0")
    got = [_check_minari_episode(ep) for ep in episodes]
    assert sorted(got) == sorted((r, ts) for r, _, ts in _model(RUNS[:TAGGED]))
    # the head's export starts with the tag's episodes (the index is in commit order)
    _export(Vault.open(seamed), "tagged/head-v0")
    _, head = _minari_episodes("tagged/head-v0")
    assert [_check_minari_episode(ep) for ep in head[: len(got)]] == got
    assert len(head) == len(_model(RUNS))
    # exporting over an existing dataset is refused, and it stays as it was
    before = _leftovers(minari_root / "tagged")
    with pytest.raises(VaultExistsError, match="already exists"):
        _export(Vault.open(seamed), "tagged/pinned-v0")
    result = _cli("export", seamed, "--format", "minari", "--out", "tagged/pinned-v0")
    assert result.exit_code == 1
    assert "already exists" in result.output
    assert _leftovers(minari_root / "tagged") == before
    _, again = _minari_episodes("tagged/pinned-v0")
    assert [_check_minari_episode(ep) for ep in again] == got


# -------------------------------------------------------------------- npz and npy of seams
def test_npz_export_of_a_vault_with_seams_says_where_they_are(seamed: Path, tmp_path: Path) -> None:
    v = Vault.open(seamed)
    doc = _cli_json("export", seamed, "--out", tmp_path / "x.npz")
    assert doc["bytes"] == (tmp_path / "x.npz").stat().st_size
    assert doc["leaf_names"] == v.leaf_names
    data = v.read_numpy()
    with np.load(tmp_path / "x.npz") as npz:
        for leaf in v.leaf_names:
            np.testing.assert_array_equal(npz[leaf], data[leaf], leaf)
        header = json.loads(str(npz["__manifest__"]))
    assert (header["rows"], header["time"]) == ([0, 1], [0, 24])
    # the data run across two seams (4 steps lost at 7, a restart at 15): the header says so
    assert header.get("seams", header.get("gaps")) == SEAMS


# ------------------------------------------------------------------ S3, CLI against the API
def test_an_s3_vault_with_seams_exports_by_the_cli_as_by_the_api_and_imports_back(
    s3_env: Any, minari_root: Path, tmp_path: Path
) -> None:
    url = f"s3://{s3_env.bucket}/exports-{tmp_path.name}/v"
    _write_seamed(url)
    v = Vault.open(url)
    assert v.gaps == SEAMS
    # npz through the command, from the bucket
    doc = _cli_json("export", url, "--out", tmp_path / "x.npz", "--rows", "1", "--time", "5:20")
    assert (doc["path"], doc["format"]) == (v.location, "npz")
    with np.load(tmp_path / "x.npz") as npz:
        for leaf, value in v.read_numpy(rows=[1], start=5, stop=20).items():
            np.testing.assert_array_equal(npz[leaf], value, leaf)
    # Minari through the command and through the API
    doc = _cli_json("export", url, "--format", "minari", "--out", "s3/cli-v0")
    assert doc == {"path": v.location, "format": "minari", "dataset_id": "s3/cli-v0",
                   "out": str(minari_root / "s3" / "cli-v0")}  # fmt: skip
    assert _export(url, "s3/api-v0") == minari_root / "s3" / "api-v0"
    _, cli_eps = _minari_episodes("s3/cli-v0")
    _, api_eps = _minari_episodes("s3/api-v0")
    got = [_check_minari_episode(ep) for ep in cli_eps]
    assert got == [_check_minari_episode(ep) for ep in api_eps]
    assert sorted(got) == sorted((r, ts) for r, _, ts in _model(RUNS))
    # back in, into the bucket, by the command: the JSON says what the API's import holds
    back = f"{url}-back"
    doc = _cli_json("import", "minari", "s3/cli-v0", "--out", back)
    api = _import("s3/api-v0", tmp_path / "api-back")
    made = Vault.open(back)
    assert (doc["committed"], doc["episodes"], doc["leaf_names"]) == (
        api.committed_length, len(api.episodes()), api.leaf_names)  # fmt: skip
    assert doc["committed"] == sum(len(ts) for _, ts in got)
    for leaf, value in api.read_numpy().items():
        np.testing.assert_array_equal(made.read_numpy()[leaf], value, leaf)


# ------------------------------------------------------------ failing half-way: nothing left
def test_exports_that_fail_half_way_leave_nothing(
    tmp_path: Path, minari_root: Path, seamed: Path
) -> None:
    import shutil

    path = tmp_path / "v"
    shutil.copytree(seamed, path)
    # damage a chunk of the last leaf read (observations, after actions and more)
    chunks = sorted(p for p in (path / "experience" / "observations").rglob("*")
                    if p.is_file() and p.name != "zarr.json")  # fmt: skip
    damaged = bytearray(chunks[-1].read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    chunks[-1].write_bytes(bytes(damaged))
    with pytest.raises(VaultCorruptError):
        _export(Vault.open(path), "broken/half-v0")
    assert _leftovers(minari_root / "broken") == []
    out = tmp_path / "out"
    for fmt, name in (("npz", "x.npz"), ("npy", "y")):
        result = _cli("export", path, "--out", out / name, "--format", fmt)
        assert result.exit_code == 3, result.output
        assert "corrupt" in result.output
        assert _leftovers(out) == []


# -------------------------------------------------------- structures an export must carry
class Transition(NamedTuple):
    observations: Any
    next_observations: Any
    actions: Any
    rewards: Any
    terminations: Any


@dataclasses.dataclass
class TransitionRecord:
    observations: Any
    next_observations: Any
    actions: Any
    rewards: Any
    terminations: Any


class Pose(NamedTuple):
    pos: Any
    vel: Any


N = 9
T = np.arange(N)
ONE_ROW_ENDS = [2, 5]  # episodes of 3 and 3 steps, then 3 open


def _one_row(obs: Any = None, nxt: Any = None) -> dict[str, Any]:
    """One row of ``N`` steps; observations ``[t, -t]`` unless given."""
    pair = lambda t: np.stack([t, -t], -1)[None].astype(np.float32)  # noqa: E731
    return {
        "observations": pair(T) if obs is None else obs,
        "next_observations": pair(T + 1) if nxt is None else nxt,
        "actions": T[None].astype(np.int32),
        "rewards": (T / 4)[None].astype(np.float32),
        "terminations": np.isin(T, ONE_ROW_ENDS)[None],
    }


def _example(tree: Any) -> Any:
    import jax

    return jax.tree.map(lambda x: np.zeros(x.shape[2:], x.dtype), tree)


def _vault(path: Path, data: Any, **roles: Any) -> Vault:
    roles = roles or {"done_leaf": "terminations", "reward_leaf": "rewards"}
    with Vault.create(path, _example(data), rows=1, **roles) as v:
        v.append(data)
    return Vault.open(path)


@pytest.mark.parametrize("cls", [Transition, TransitionRecord])
def test_a_vault_of_named_tuple_or_dataclass_steps_exports_to_minari(
    cls: Any, minari_root: Path, tmp_path: Path
) -> None:
    row = _one_row()
    example = cls(**_example(row))
    with Vault.create(
        tmp_path / "v", example, rows=1, done_leaf="terminations", reward_leaf="rewards"
    ) as v:
        v.append(cls(**row))
    vault = Vault.open(tmp_path / "v")
    assert type(vault.read_numpy(stop=1)) is cls  # the class is rebuilt in this process
    assert vault.leaf_names == list(_one_row())
    _export(vault, f"{cls.__name__.lower()}-v0")
    _, episodes = _minari_episodes(f"{cls.__name__.lower()}-v0")
    assert [len(ep) for ep in episodes] == [3, 3]
    np.testing.assert_array_equal(episodes[1].observations[:, 0], [3, 4, 5, 6])


def test_named_tuple_observations_keep_their_field_names_through_minari(
    minari_root: Path, tmp_path: Path
) -> None:
    from gymnasium import spaces

    pose = lambda t: Pose(  # noqa: E731
        np.stack([t, -t], -1)[None].astype(np.float32), (t / 2)[None].astype(np.float64)
    )
    vault = _vault(tmp_path / "v", _one_row(pose(T), pose(T + 1)))
    _export(vault, "pose-v0")
    ds, episodes = _minari_episodes("pose-v0")
    assert len(episodes) == 2
    back = _import("pose-v0", tmp_path / "back")
    assert sorted(back.leaf_names) == sorted([*vault.leaf_names, "truncations"])
    assert isinstance(ds.observation_space, spaces.Dict)


def test_episode_leaves_with_escaped_names_export_to_minari(
    minari_root: Path, tmp_path: Path
) -> None:
    row = _one_row()
    data = {
        "observations": row["observations"], "next_observations": row["next_observations"],
        "actions": row["actions"], "reward now": row["rewards"],
        "flags": {"is done": row["terminations"], "__cut": np.zeros((1, N), bool)},
    }  # fmt: skip
    vault = _vault(tmp_path / "v", data, done_leaf="flags/is%20done",
                   truncated_leaf="flags/%5F_cut", reward_leaf="reward%20now")  # fmt: skip
    assert len(vault.episodes()) == 2
    _export(vault, "escaped-v0")
    _, episodes = _minari_episodes("escaped-v0")
    assert [len(ep) for ep in episodes] == [3, 3]
    np.testing.assert_array_equal(episodes[0].rewards, row["rewards"][0, :3])


def test_npz_export_of_leaves_whose_names_collide_as_files(tmp_path: Path) -> None:
    a, b = np.arange(3, dtype=np.float32)[None], np.full((1, 3), 7, np.int16)
    data = {"a": a, "a.npy": {"b": b}}
    vault = _vault(tmp_path / "v", data, done_leaf=None)
    assert vault.leaf_names == ["a", "a.npy/b"]
    result = _cli("export", tmp_path / "v", "--out", tmp_path / "x.npz")
    assert result.exit_code == 0, result.output
    with np.load(tmp_path / "x.npz") as npz:
        np.testing.assert_array_equal(npz["a"], a)
        np.testing.assert_array_equal(npz["a.npy/b"], b)


# ------------------------------------------------- what an export must refuse, out loud
@pytest.mark.parametrize("how", ["dtype", "shape"])
def test_observations_and_next_observations_that_disagree_are_refused(
    minari_root: Path, tmp_path: Path, how: str
) -> None:
    t = T + 1
    nxt = (
        np.stack([t, -t], -1)[None].astype(np.float64)
        if how == "dtype"
        else np.stack([t, -t, t], -1)[None].astype(np.float32)
    )
    vault = _vault(tmp_path / "v", _one_row(nxt=nxt))
    with pytest.raises(VaultError, match="next_observations"):
        _export(vault, f"disagree-{how}-v0")
    assert not (minari_root / f"disagree-{how}-v0").exists()


@pytest.mark.parametrize("fmt", ["hdf5", "arrow"])
def test_a_given_space_that_contradicts_the_leaves_is_refused(
    minari_root: Path, tmp_path: Path, fmt: str
) -> None:
    from gymnasium import spaces

    vault = _vault(tmp_path / "v", _one_row())
    space = spaces.Box(-np.inf, np.inf, (5,), np.float32)  # the leaf is [2] float32
    with pytest.raises(VaultError, match="observation"):
        _export(vault, f"space-{fmt}-v0", data_format=fmt, observation_space=space)
    assert not (minari_root / f"space-{fmt}-v0").exists()


@pytest.mark.parametrize("metadata", [{"algorithm_name": 3}, {"ref_min_score": np.float32(1.5)}])
def test_metadata_minari_refuses_is_a_typed_error_naming_the_key(
    minari_root: Path, tmp_path: Path, metadata: dict[str, Any]
) -> None:
    vault = _vault(tmp_path / "v", _one_row())
    key = next(iter(metadata))
    with pytest.raises(VaultArgumentError, match=key):
        _export(vault, f"meta-{key}-v0", metadata=metadata)
    assert not (minari_root / f"meta-{key}-v0").exists()


def test_next_observations_an_export_drops_are_not_dropped_silently(
    minari_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    t = T + 0.5  # each next observation is its own, seen in no observation
    vault = _vault(tmp_path / "v", _one_row(nxt=np.stack([t, -t], -1)[None].astype(np.float32)))
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
        warnings.simplefilter("always")
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                export_minari(vault, "nxt-v0")
        except VaultError:
            return  # refused: said out loud
    said = [str(w.message) for w in caught] + [
        r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
    ]
    assert any("next_observations" in line for line in said), said


def test_a_failed_export_leaves_no_namespace_folders_and_a_dataset_is_refused_with_a_way(
    minari_root: Path, tmp_path: Path
) -> None:
    """A dataset that appears "whole or not at all" leaves nothing when interrupted, not the
    namespace folders it made; a dataset of shards is refused naming how to export one."""
    vault = _vault(tmp_path / "v", _one_row())

    def interrupt(done: int, total: int) -> None:
        if done:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _export(vault, "fresh/deep/cut-v0", progress=interrupt)
    assert not (minari_root / "fresh").exists()
    ds = Dataset.create(tmp_path / "ds", _example(_one_row()), rows=1, done_leaf="terminations")
    with pytest.raises(VaultArgumentError, match="shards/NAME"):
        _export(ds, "ds-v0")
