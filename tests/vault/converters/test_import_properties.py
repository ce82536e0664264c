"""Importers against a trivially correct model of their source, on sources drawn by hypothesis.

D4RL-style HDF5 files (with and without ``timeouts``, ``next_observations`` and nested
``infos/*``; terminals and timeouts on the same step; episodes of one step; a last episode
that neither terminates nor times out; float terminals) and OGBench ``.npz`` files (with and
without ``next_observations``, stored or compressed) are written here in the exact layout the
importers read, imported, and compared with what the source says: every leaf's values and
dtype in order, the episode table (starts, lengths, returns, truncated, complete, start_known),
``imported_from`` metadata, and the documented refusals (a typed error naming the field,
nothing left at the destination) for malformed sources.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vault import VaultStructureError
from vault.converters import import_d4rl, import_minari, import_ogbench

SETTINGS = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# how an episode ends: a terminal, a timeout, both on the same step, or (the last one) neither
ENDS = ("terminal", "timeout", "both")


def _model_episodes(
    lengths: list[int], ends: list[str], rewards: np.ndarray
) -> list[dict[str, Any]]:
    """The episode table the source describes (format.md 4.4: truncated only when the last
    step is a timeout and not a terminal; the open last episode is incomplete)."""
    out, start = [], 0
    for n, end in zip(lengths, ends, strict=True):
        out.append({
            "start": start,
            "length": n,
            "returns": float(rewards[start : start + n].astype(np.float64).sum()),
            "truncated": end == "timeout",
            "complete": end != "open",
            "start_known": True,
        })  # fmt: skip
        start += n
    return out


def _table(vault: Any) -> list[dict[str, Any]]:
    t = vault.episodes(include_open=True)
    return [
        {
            "start": int(t.start[i]),
            "length": int(t.length[i]),
            "returns": float(t.returns[i]),
            "truncated": bool(t.truncated[i]),
            "complete": bool(t.complete[i]),
            "start_known": bool(t.start_known[i]),
        }
        for i in range(len(t.start))
    ]


def _leaf(tree: dict[str, Any], name: str) -> Any:
    for part in name.split("/"):
        tree = tree[part]
    return tree


# ------------------------------------------------------------------------------------- D4RL
@st.composite
def d4rl_sources(draw: st.DrawFn) -> dict[str, Any]:
    has_timeouts = draw(st.booleans())
    ends_allowed = ENDS if has_timeouts else ("terminal",)
    n_eps = draw(st.integers(0, 5))
    lengths = [draw(st.integers(1, 4)) for _ in range(n_eps)]
    ends = [draw(st.sampled_from(ends_allowed)) for _ in range(n_eps)]
    if draw(st.booleans()) and lengths:
        ends[-1] = "open"
    if not lengths:  # an empty source has no episodes; at least one step keeps it interesting
        lengths, ends = [draw(st.integers(1, 3))], ["open"]
    return {
        "lengths": lengths,
        "ends": ends,
        "timeouts": has_timeouts,
        "next_observations": draw(st.booleans()),
        "infos": draw(st.booleans()),
        "flag_dtype": draw(st.sampled_from([np.bool_, np.float32, np.uint8])),
        "obs_dtype": draw(st.sampled_from([np.float32, np.float64, np.uint8, np.int64])),
        "obs_shape": draw(st.sampled_from([(3,), (2, 2), ()])),
        "chunked": draw(st.booleans()),
    }


def _write_d4rl(path: Path, spec: dict[str, Any]) -> dict[str, np.ndarray]:
    """The file ``spec`` describes; values encode where they belong (obs = 1000 * t + i)."""
    lengths, ends = spec["lengths"], spec["ends"]
    n = sum(lengths)
    t = np.arange(n)
    shape = spec["obs_shape"]
    size = int(np.prod(shape)) if shape else 1
    obs = (t[:, None] * 10 + np.arange(size)[None]).reshape(n, *shape)
    term = np.zeros(n, bool)
    tout = np.zeros(n, bool)
    stop = np.cumsum(lengths) - 1
    for s, end in zip(stop, ends, strict=True):
        term[s] = end in ("terminal", "both")
        tout[s] = end in ("timeout", "both")
    data: dict[str, np.ndarray] = {
        "observations": obs.astype(spec["obs_dtype"]),
        "actions": (t[:, None] * 2 + np.arange(2)[None]).astype(np.float32) / 4,
        "rewards": ((t % 5) - 1.5).astype(np.float32),
        "terminals": term.astype(spec["flag_dtype"]),
    }
    if spec["timeouts"]:
        data["timeouts"] = tout.astype(spec["flag_dtype"])
    if spec["next_observations"]:
        data["next_observations"] = (obs + 1).astype(spec["obs_dtype"])
    if spec["infos"]:
        data["infos/qpos"] = (t[:, None] + np.arange(3)[None] / 8).astype(np.float64)
        data["infos/goal/xy"] = (t[:, None] * 3 + np.arange(2)[None]).astype(np.int32)
        data["infos/flag"] = t % 2 == 0
    with h5py.File(path, "w") as f:
        for key, value in data.items():
            if spec["chunked"]:
                f.create_dataset(key, data=value, chunks=True, compression="gzip")
            else:
                f.create_dataset(key, data=value)
        f.create_dataset("metadata/algorithm", data="SAC")
        f["metadata"].attrs["note"] = "not per timestep"
    return data


@SETTINGS
@given(spec=d4rl_sources())
def test_d4rl_import_matches_the_source(tmp_path: Path, spec: dict[str, Any]) -> None:
    work = tmp_path / uuid.uuid4().hex[:8]
    work.mkdir()
    src = work / "d.hdf5"
    data = _write_d4rl(src, spec)
    seen: list[tuple[int, int]] = []
    vault = import_d4rl(
        src, work / "out", block_bytes=1 << 16, progress=lambda d, t: seen.append((d, t))
    )
    step = sum(v[:1].nbytes for v in data.values())
    assert seen[0] == (0, step * sum(spec["lengths"]))
    assert seen[-1] == (seen[-1][1], seen[-1][1])
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    n = sum(spec["lengths"])
    got = vault.read_numpy()
    assert vault.rows == 1
    assert vault.committed_length == n
    assert sorted(vault.leaf_names) == sorted(data), "leaves"
    for key, value in data.items():
        leaf = _leaf(got, key)
        assert leaf.dtype == value.dtype, key
        np.testing.assert_array_equal(leaf[0], value, err_msg=key)
    assert vault.episode_leaves == {
        "done": "terminals",
        "truncated": "timeouts" if spec["timeouts"] else None,
        "reward": "rewards",
    }
    want = _model_episodes(spec["lengths"], spec["ends"], data["rewards"])
    assert _table(vault) == want
    assert len(vault.episodes()) == sum(1 for e in spec["ends"] if e != "open")
    origin = vault.metadata["imported_from"]
    assert origin == {
        "format": "d4rl",
        "source": str(src.absolute()),
        "timesteps": n,
        "skipped": ["metadata/algorithm"],
    }
    vault.close()


@pytest.mark.parametrize(
    ("mutate", "named"),
    [
        (lambda f: f.__delitem__("terminals"),
         "terminals: expected a dataset [N, ...], got nothing"),
        (lambda f: f.__delitem__("observations"), "observations: expected a dataset"),
        (
            lambda f: (f.__delitem__("actions"), f.create_group("actions")),
            "actions: expected a dataset [N, ...], got Group",
        ),
        (
            lambda f: (f.__delitem__("timeouts"),
                       f.create_dataset("timeouts", data=np.zeros(6, bool))),
            "timeouts: expected 7 timesteps (as observations), got 6",
        ),
        (
            lambda f: f.create_dataset("next_observations", data=np.zeros((8, 2), np.float32)),
            "next_observations: expected 7 timesteps (as observations), got 8",
        ),
        (
            lambda f: f.create_dataset("infos/deep/x", data=np.zeros(5, np.float32)),
            "infos/deep/x: expected 7 timesteps (as observations), got 5",
        ),
        (
            lambda f: f.create_dataset("infos/s", data=np.float32(1.0)),
            "infos/s: expected 7 timesteps (as observations), got a scalar",
        ),
        (
            lambda f: (f.__delitem__("rewards"), f.create_dataset("rewards", data=np.float32(0))),
            "rewards: expected 7 timesteps (as observations), got a scalar",
        ),
    ],
    ids=["no-terminals", "no-observations", "actions-group", "short-timeouts", "long-next-obs",
         "short-nested-info", "scalar-info", "scalar-rewards"],
)  # fmt: skip
def test_d4rl_refusals_name_the_dataset_and_leave_nothing(
    tmp_path: Path, mutate: Any, named: str
) -> None:
    src = tmp_path / "d.hdf5"
    spec = {
        "lengths": [3, 4], "ends": ["terminal", "open"], "timeouts": True,
        "next_observations": False, "infos": False, "flag_dtype": np.bool_,
        "obs_dtype": np.float32, "obs_shape": (2,), "chunked": False,
    }  # fmt: skip
    _write_d4rl(src, spec)
    with h5py.File(src, "a") as f:
        mutate(f)
    with pytest.raises(VaultStructureError) as err:
        import_d4rl(src, tmp_path / "out")
    assert named in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.hdf5"]


# ----------------------------------------------------------------------------------- OGBench
@st.composite
def ogbench_sources(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "lengths": draw(st.lists(st.integers(0, 4), min_size=1, max_size=4)),
        "next_observations": draw(st.booleans()),
        "info": draw(st.booleans()),
        "compressed": draw(st.booleans()),
        "visual": draw(st.booleans()),
        "last_terminal": draw(st.booleans()),
    }


def _write_ogbench(path: Path, spec: dict[str, Any]) -> dict[str, np.ndarray]:
    """OGBench's layout: trajectories of ``L`` transitions hold ``L + 1`` states, ``terminals``
    1 at the last state (all but maybe the file's last)."""
    lengths = spec["lengths"]
    n = sum(k + 1 for k in lengths)
    t = np.arange(n)
    terminals = np.zeros(n, bool)
    terminals[np.cumsum([k + 1 for k in lengths]) - 1] = True
    if not spec["last_terminal"]:
        terminals[-1] = False
    if spec["visual"]:
        obs = ((t[:, None, None, None] * 7 + np.arange(12).reshape(1, 2, 2, 3)) % 256).astype(
            np.uint8
        )
    else:
        obs = (t[:, None] * 10 + np.arange(4)[None]).astype(np.float32)
    data: dict[str, np.ndarray] = {
        "observations": obs,
        "actions": (t[:, None] + np.arange(2)[None] / 4).astype(np.float32),
        "terminals": terminals,
    }
    if spec["next_observations"]:
        data["next_observations"] = np.concatenate([obs[1:], obs[-1:]])
    if spec["info"]:
        data["qpos"] = (t[:, None] * 0.5 + np.arange(3)[None]).astype(np.float32)
        data["qvel"] = (t[:, None] * -0.25 + np.arange(3)[None]).astype(np.float32)
        data["button_states"] = (t[:, None] + np.arange(2)[None]) % 2
    save: Any = np.savez_compressed if spec["compressed"] else np.savez
    save(path, **data, env_name=np.array("pointmaze"))
    return data


@SETTINGS
@given(spec=ogbench_sources())
def test_ogbench_import_matches_the_source(tmp_path: Path, spec: dict[str, Any]) -> None:
    work = tmp_path / uuid.uuid4().hex[:8]
    work.mkdir()
    src = work / "maze-tiny-v0.npz"
    data = _write_ogbench(src, spec)
    vault = import_ogbench(src, work / "out", block_bytes=1 << 16)
    n = len(data["terminals"])
    got = vault.read_numpy()
    assert vault.rows == 1
    assert vault.committed_length == n
    assert sorted(vault.leaf_names) == sorted(data)
    for key, value in data.items():
        assert got[key].dtype == value.dtype, key
        np.testing.assert_array_equal(got[key][0], value, err_msg=key)
    states = [k + 1 for k in spec["lengths"]]
    ends = ["terminal"] * len(states)
    if not spec["last_terminal"]:
        ends[-1] = "open"
    want = _model_episodes(states, ends, np.zeros(n))
    table = _table(vault)
    for row in table:
        assert np.isnan(row.pop("returns"))  # no reward leaf: returns are not available
    for row in want:
        row.pop("returns")
    assert table == want
    assert vault.episode_leaves == {"done": "terminals", "truncated": None, "reward": None}
    assert vault.metadata["imported_from"] == {
        "format": "ogbench",
        "source": str(src.absolute()),
        "split": "train",
        "timesteps": n,
        "skipped": ["env_name"],
    }
    assert not (work / "out-val").exists()
    vault.close()


@pytest.mark.parametrize(
    ("arrays", "named"),
    [
        ({"actions": 7, "terminals": 7}, "observations: expected an array [N, ...], got nothing"),
        ({"observations": 7, "terminals": 7}, "actions: expected an array [N, ...], got nothing"),
        ({"observations": 7, "actions": 7}, "terminals: expected an array [N, ...], got nothing"),
        ({"observations": 7, "actions": 6, "terminals": 7},
         "actions: expected 7 timesteps (as observations), got 6"),
        ({"observations": 7, "actions": 7, "terminals": 7, "qpos": 8},
         "qpos: expected 7 timesteps (as observations), got 8"),
    ],
    ids=["no-observations", "no-actions", "no-terminals", "short-actions", "long-qpos"],
)  # fmt: skip
def test_ogbench_refusals_name_the_array_and_leave_nothing(
    tmp_path: Path, arrays: dict[str, int], named: str
) -> None:
    src = tmp_path / "maze-tiny-v0.npz"
    members: dict[str, Any] = {k: np.zeros((n, 2), np.float32) for k, n in arrays.items()}
    np.savez(src, **members)
    with pytest.raises(VaultStructureError) as err:
        import_ogbench(src, tmp_path / "out")
    assert named in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["maze-tiny-v0.npz"]


def test_ogbench_validation_file_is_a_second_vault_with_its_own_model(tmp_path: Path) -> None:
    spec = {"lengths": [2, 0, 3], "next_observations": False, "info": True,
            "compressed": True, "visual": False, "last_terminal": True}  # fmt: skip
    src = tmp_path / "maze-tiny-v0.npz"
    train = _write_ogbench(src, spec)
    val = _write_ogbench(tmp_path / "maze-tiny-v0-val.npz", {**spec, "lengths": [1, 4]})
    vault = import_ogbench(src, tmp_path / "out", block_bytes=1 << 16)
    from vault import Vault

    other = Vault.open(tmp_path / "out-val")
    for v, data, lengths in [(vault, train, [3, 1, 4]), (other, val, [2, 5])]:
        got = v.read_numpy()
        for key, value in data.items():
            np.testing.assert_array_equal(got[key][0], value, err_msg=key)
        assert v.episodes().length.tolist() == lengths
    assert vault.metadata["imported_from"]["validation"] == str(tmp_path / "out-val")
    assert other.metadata["imported_from"]["split"] == "val"


# ------------------------------------------------------------------------------------ Minari
MINARI_ENDS = ("terminal", "truncated", "both", "neither")


@pytest.fixture(scope="module")
def minari_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("minari")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINARI_DATASETS_PATH", str(root))
        yield root


def _minari_episode(i: int, n: int, terms: list[bool], truncs: list[bool], nested: bool) -> Any:
    from minari.data_collector.episode_buffer import EpisodeBuffer

    t = np.arange(n + 1)
    pos = (t[:, None] * 10 + i * 1000 + np.arange(3)[None]).astype(np.float32)
    obs: Any = {"pos": pos, "k": (t + i) % 4} if nested else pos
    actions = (np.arange(n)[:, None] + i * 100 + np.arange(2)[None]).astype(np.float32)
    rewards = [float(s + i) / 2 for s in range(n)]
    return EpisodeBuffer(
        id=i,
        observations=obs,
        actions=actions.reshape(n, 2),
        rewards=rewards,
        terminations=terms,
        truncations=truncs,
    )


def _write_minari(dataset_id: str, episodes: list[Any], nested: bool, fmt: str) -> None:
    import minari
    from gymnasium import spaces

    box = spaces.Box(-1e9, 1e9, (3,), np.float32)
    space = spaces.Dict({"pos": box, "k": spaces.Discrete(4)}) if nested else box
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        minari.create_dataset_from_buffers(
            dataset_id,
            episodes,
            observation_space=space,
            action_space=spaces.Box(-1e9, 1e9, (2,), np.float32),
            data_format=fmt,
            algorithm_name="hypothesis",
        )


@st.composite
def minari_sources(draw: st.DrawFn) -> dict[str, Any]:
    n_eps = draw(st.integers(1, 4))
    return {
        "lengths": [draw(st.integers(1, 4)) for _ in range(n_eps)],
        "ends": [draw(st.sampled_from(MINARI_ENDS)) for _ in range(n_eps)],
        "nested": draw(st.booleans()),
        "format": draw(st.sampled_from(["hdf5", "arrow"])),
    }


@settings(SETTINGS, max_examples=8)
@given(spec=minari_sources())
def test_minari_import_matches_the_source(minari_root: Path, spec: dict[str, Any]) -> None:
    lengths, ends, nested = spec["lengths"], spec["ends"], spec["nested"]
    episodes = [
        _minari_episode(
            i,
            n,
            [False] * (n - 1) + [end in ("terminal", "both")],
            [False] * (n - 1) + [end in ("truncated", "both")],
            nested,
        )
        for i, (n, end) in enumerate(zip(lengths, ends, strict=True))
    ]
    name = f"prop/{uuid.uuid4().hex[:8]}-v0"
    _write_minari(name, episodes, nested, spec["format"])
    vault = import_minari(name, minari_root / "vaults" / name, block_bytes=1 << 16)
    got = vault.read_numpy()

    def cat(part: Any) -> np.ndarray:
        return np.concatenate([np.asarray(part(e)) for e in episodes])

    def pick(obs: Any, key: str | None) -> Any:
        return obs[key] if key else obs

    obs_leaves: list[str | None] = ["pos", "k"] if nested else [None]
    for key in obs_leaves:
        want_obs = cat(lambda e, key=key: pick(e.observations, key)[:-1])
        want_next = cat(lambda e, key=key: pick(e.observations, key)[1:])
        have_obs = got["observations"][key] if key else got["observations"]
        have_next = got["next_observations"][key] if key else got["next_observations"]
        np.testing.assert_array_equal(have_obs[0], want_obs, err_msg=f"observations/{key}")
        np.testing.assert_array_equal(have_next[0], want_next, err_msg=f"next/{key}")
    np.testing.assert_array_equal(got["actions"][0], cat(lambda e: e.actions))
    np.testing.assert_array_equal(got["rewards"][0], cat(lambda e: e.rewards))
    # an episode with neither flag is marked truncated at its last step (module docstring)
    model_ends = ["truncated" if e == "neither" else e for e in ends]
    np.testing.assert_array_equal(
        got["terminations"][0], cat(lambda e: e.terminations).astype(bool)
    )
    pairs = zip(lengths, model_ends, strict=True)
    want_trunc = np.concatenate(
        [[False] * (n - 1) + [e in ("truncated", "both")] for n, e in pairs]
    )
    np.testing.assert_array_equal(got["truncations"][0], want_trunc)
    rewards = cat(lambda e: e.rewards)
    want = _model_episodes(
        lengths, ["timeout" if e == "truncated" else e for e in model_ends], rewards
    )
    assert _table(vault) == want
    origin = vault.metadata["imported_from"]
    assert (origin["format"], origin["dataset_id"], origin["episodes"]) == (
        "minari",
        name,
        len(lengths),
    )
    assert origin["data_format"] == spec["format"]
    vault.close()


def test_minari_flag_inside_an_episode_is_refused_or_kept_inside(minari_root: Path) -> None:
    episodes = [
        _minari_episode(0, 3, [True, False, True], [False] * 3, False),
        _minari_episode(1, 2, [False, True], [False, False], False),
    ]
    _write_minari("prop/mid-flag-v0", episodes, False, "hdf5")
    dest = minari_root / "vaults" / "mid-flag"
    try:
        vault = import_minari("prop/mid-flag-v0", dest)
    except VaultStructureError as err:  # a refusal naming the episode is fine too
        assert "episode 0" in str(err)  # noqa: PT017
        assert not dest.exists()
        return
    table = vault.episodes(include_open=True)
    assert table.start.tolist() == [0, 3]
    assert table.length.tolist() == [3, 2]


# ------------------------------------------------------------------- refusals worth a message
def test_d4rl_scalar_observations_are_named_not_none_timesteps(tmp_path: Path) -> None:
    src = tmp_path / "d.hdf5"
    with h5py.File(src, "w") as f:
        f["observations"] = np.float32(1.0)
        f["actions"] = np.zeros((4, 2), np.float32)
        f["rewards"] = np.zeros(4, np.float32)
        f["terminals"] = np.zeros(4, bool)
    with pytest.raises(VaultStructureError) as err:
        import_d4rl(src, tmp_path / "out")
    text = str(err.value)
    assert not (tmp_path / "out").exists()
    assert "observations: expected a dataset [N, ...]" in text, text
    assert "None" not in text, text


def test_ogbench_scalar_observations_are_named_not_minus_one_timesteps(tmp_path: Path) -> None:
    src = tmp_path / "maze-tiny-v0.npz"
    np.savez(
        src, observations=np.float32(1), actions=np.zeros((4, 2), np.float32),
        terminals=np.zeros(4, bool),
    )  # fmt: skip
    with pytest.raises(VaultStructureError) as err:
        import_ogbench(src, tmp_path / "out")
    text = str(err.value)
    assert not (tmp_path / "out").exists()
    assert "observations: expected an array [N, ...]" in text, text
    assert "-1 timesteps" not in text, text


def test_ogbench_fortran_ordered_extra_array_is_imported_or_refused(tmp_path: Path) -> None:
    src = tmp_path / "maze-tiny-v0.npz"
    obs = np.arange(8, dtype=np.float32).reshape(4, 2)
    nxt = np.asfortranarray(obs + 100)
    np.savez(
        src, observations=obs, actions=np.zeros((4, 2), np.float32),
        terminals=np.array([0, 1, 0, 1], bool), next_observations=nxt,
    )  # fmt: skip
    try:
        vault = import_ogbench(src, tmp_path / "out")
    except VaultStructureError as err:  # refused, naming it, as qpos would be
        assert "next_observations" in str(err)  # noqa: PT017
        return
    assert "next_observations" in vault.leaf_names, vault.metadata["imported_from"]["skipped"]
    np.testing.assert_array_equal(vault.read_numpy()["next_observations"][0], nxt)
