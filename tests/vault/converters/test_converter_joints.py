"""Where the converters meet the rest of rlvault: round trips through Minari (vault -> Minari ->
vault, D4RL -> vault -> Minari -> vault), sources with odd shapes (length-1 episodes, episodes
ending on a chunk or import-block boundary, an open last episode, none complete, 0-d, uint8,
bool, nested and list leaves, float64, int64), destinations on disk and on S3, imports
followed by appends, tags, pins, derive, verify, the stream and ``read_numpy``, Flashbax
vaults written by Flashbax 0.1.3 itself, and the ``vault import``/``vault export`` commands
against the API.

Every source is made here by its own library (h5py, numpy, Minari, Flashbax, TFDS); nothing
is downloaded. Six bugs found this way were fixed with these tests: bool leaves exported to
Minari under a space that did not hold them, an export with no complete episode, no
``next_observations``, Flashbax metadata with NaN or infinities, and RLDS shard imports resumed
from another source or JPEG decoder.
"""

from __future__ import annotations

import contextlib
import io
import json
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import h5py
import numpy as np
import pytest
from _convert_sources import TOY_ID, write_flashbax, write_minari, write_ogbench, write_rlds
from typer.testing import CliRunner

from vault import (
    Dataset,
    Vault,
    VaultError,
    VaultExistsError,
    derive_episodes,
    verify,
)
from vault.cli import app
from vault.converters import (
    export_minari,
    import_d4rl,
    import_flashbax,
    import_minari,
    import_ogbench,
    import_rlds,
    ogbench_dataset,
)

# ------------------------------------------------------------------------------- helpers


def _flat(tree: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """``{leaf path: array}`` of a tree of dicts, tuples, lists and NamedTuples."""
    if isinstance(tree, tuple) and hasattr(type(tree), "_fields"):
        tree = tree._asdict()
    if isinstance(tree, dict):
        return {k: v for key in tree for k, v in _flat(tree[key], f"{prefix}{key}/").items()}
    if isinstance(tree, (tuple, list)):
        return {k: v for i, x in enumerate(tree) for k, v in _flat(x, f"{prefix}{i}/").items()}
    return {prefix.rstrip("/"): np.asarray(tree)}


def _same(a: Any, b: Any, where: str = "") -> None:
    """Same leaf paths, dtypes, shapes and values (bit-exact)."""
    fa, fb = _flat(a), _flat(b)
    assert sorted(fa) == sorted(fb), where
    for k in fa:
        assert fa[k].dtype == fb[k].dtype, f"{where}{k}: {fa[k].dtype} != {fb[k].dtype}"
        assert fa[k].shape == fb[k].shape, f"{where}{k}: {fa[k].shape} != {fb[k].shape}"
        np.testing.assert_array_equal(fa[k], fb[k], err_msg=f"{where}{k}")


def _table(vault: Any, include_open: bool = False) -> list[tuple[Any, ...]]:
    t = vault.episodes(include_open=include_open)
    returns = [None if np.isnan(x) else x for x in np.round(t.returns, 4).tolist()]
    return list(
        zip(
            t.row.tolist(), t.start.tolist(), t.length.tolist(), returns,
            t.truncated.tolist(), t.complete.tolist(), t.start_known.tolist(), strict=True,
        )
    )  # fmt: skip


def _reference_table(
    done: np.ndarray, trunc: np.ndarray, reward: np.ndarray | None
) -> list[tuple[Any, ...]]:
    """Episodes of one row by walking its flags (the open last one included)."""
    out, start = [], 0
    for t in range(len(done)):
        if done[t] or trunc[t]:
            ret = float(reward[start : t + 1].sum(dtype=np.float64)) if reward is not None else 0
            out.append((0, start, t + 1 - start, round(ret, 4), bool(trunc[t] and not done[t])))
            start = t + 1
    return out


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Minari and Gymnasium warn about authors, casts and the like; Flashbax prints."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


@pytest.fixture(scope="module")
def minari_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("minari")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINARI_DATASETS_PATH", str(root))
        yield root


def _load_minari(dataset_id: str) -> tuple[Any, list[Any]]:
    import minari

    with _quiet():
        ds = minari.load_dataset(dataset_id)
        return ds, list(ds.iterate_episodes())


# ------------------------------------------------------------------ a D4RL file of odd shapes
# episodes of 1, 4, 1, 3, 1 and 5 steps (ended by terminal, timeout, timeout, both flags,
# terminal, timeout), then 2 steps of an open one; float64 observations, 0-d int64 actions,
# next_observations consistent with the observations (so a Minari round trip is exact)
ENDS = [("term", 1), ("timeout", 4), ("timeout", 1), ("both", 3), ("term", 1), ("timeout", 5)]
OPEN = 2


def _write_d4rl(path: Path, ends: list[tuple[str, int]], open_steps: int) -> dict[str, Any]:
    lengths = [n for _, n in ends] + ([open_steps] if open_steps else [])
    n = sum(lengths)
    t = np.arange(n)
    obs = np.stack([t * 1.5, -t / 3.0, np.sqrt(t + 0.25)], axis=1).astype(np.float64)
    nxt = np.empty_like(obs)
    nxt[:-1] = obs[1:]
    terminals, timeouts = np.zeros(n, bool), np.zeros(n, bool)
    end = 0
    for kind, length in ends:
        end += length
        nxt[end - 1] = obs[end - 1] + 1000.0  # the final observation, seen nowhere else
        terminals[end - 1] = kind in ("term", "both")
        timeouts[end - 1] = kind in ("timeout", "both")
    nxt[-1] = obs[-1] + 1000.0
    data = {
        "observations": obs,
        "next_observations": nxt,
        "actions": (t * 7 % 5).astype(np.int64),
        "rewards": ((t % 4) - 1.25).astype(np.float32),
        "terminals": terminals,
        "timeouts": timeouts,
    }
    with h5py.File(path, "w") as f:
        for key, value in data.items():
            f[key] = value
    return data


@pytest.mark.parametrize("fmt", ["hdf5", "arrow"])
def test_d4rl_to_minari_and_back_is_bit_exact(minari_root: Path, tmp_path: Path, fmt: str) -> None:
    data = _write_d4rl(tmp_path / "src.hdf5", ENDS, OPEN)
    vault = import_d4rl(tmp_path / "src.hdf5", tmp_path / "d4rl", block_bytes=1 << 16)
    # the file's episodes: the open one last, both flags count as terminated
    want = _reference_table(data["terminals"], data["timeouts"], data["rewards"])
    assert _table(vault) == [(*e, True, True) for e in want]
    full = _table(vault, include_open=True)
    assert full[-1][1:3] == (sum(n for _, n in ENDS), OPEN)
    assert full[-1][5] is False

    out = export_minari(vault, f"d4rl-{fmt}-v0", data_format=fmt)
    assert out == minari_root / f"d4rl-{fmt}-v0"
    ds, episodes = _load_minari(f"d4rl-{fmt}-v0")
    assert ds.total_episodes == len(ENDS)  # the open episode is left out
    assert ds.total_steps == sum(n for _, n in ENDS)
    start = 0
    for ep, (kind, length) in zip(episodes, ENDS, strict=True):
        s = slice(start, start + length)
        assert len(ep) == length
        np.testing.assert_array_equal(
            ep.observations,
            np.concatenate([data["observations"][s], data["next_observations"][s][-1:]]),
        )
        np.testing.assert_array_equal(ep.actions, data["actions"][s])
        np.testing.assert_array_equal(ep.rewards, data["rewards"][s])
        np.testing.assert_array_equal(ep.terminations, data["terminals"][s])
        np.testing.assert_array_equal(ep.truncations, data["timeouts"][s])
        assert bool(ep.terminations[-1]) == (kind in ("term", "both"))
        start += length

    back = import_minari(f"d4rl-{fmt}-v0", tmp_path / "back")
    stop = sum(n for _, n in ENDS)
    ours = vault.read_numpy(stop=stop)
    theirs = back.read_numpy()
    renamed = {"terminals": "terminations", "timeouts": "truncations"}
    _same({renamed.get(k, k): v for k, v in ours.items()}, theirs)
    assert _table(back) == _table(vault)
    assert back.metadata["imported_from"]["dataset_id"] == f"d4rl-{fmt}-v0"
    assert verify(tmp_path / "back").problems == []


# ------------------------------------------------------------- Minari sources of odd shapes
def _stack(*xs: Any) -> np.ndarray:
    return np.stack(xs)


def _write_minari_storage(
    dataset_id: str, fmt: str, obs_space: Any, act_space: Any, episodes: list[tuple[int, str]]
) -> list[dict[str, Any]]:
    """A Minari dataset written with Minari's own storage (no DataCollector): episodes of the
    given lengths ending in ``term``, ``trunc`` or ``none`` (no flag at all, which other
    writers than the DataCollector may produce). Returns what was written."""
    import jax
    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer
    from minari.dataset.minari_storage import MinariStorage

    from vault.converters import datasets_root

    root = datasets_root() / dataset_id / "data"
    root.parent.mkdir(parents=True)
    obs_space.seed(0)
    act_space.seed(1)
    written, buffers = [], []
    with _quiet():
        storage = MinariStorage.new(
            root, observation_space=obs_space, action_space=act_space, data_format=fmt,
            jpeg_encoding=False,
        )  # fmt: skip
        for i, (n, end) in enumerate(episodes):
            obs = jax.tree.map(_stack, *[obs_space.sample() for _ in range(n + 1)])
            act = jax.tree.map(_stack, *[act_space.sample() for _ in range(n)])
            term, trunc = np.zeros(n, bool), np.zeros(n, bool)
            term[-1], trunc[-1] = end == "term", end == "trunc"
            rew = np.arange(n, dtype=np.float64) - i
            ep = {"observations": obs, "actions": act, "rewards": rew, "terminations": term,
                  "truncations": trunc}  # fmt: skip
            written.append(ep)
            buffers.append(EpisodeBuffer(id=i, **ep))
        storage.update_episodes(buffers)
        storage.update_metadata({"dataset_id": dataset_id, "minari_version": minari.__version__})
    return written


@pytest.mark.parametrize("fmt", ["hdf5", "arrow"])
def test_minari_tuple_space_length_one_and_flagless_episodes_round_trip(
    minari_root: Path, tmp_path: Path, fmt: str
) -> None:
    from gymnasium import spaces

    obs_space = spaces.Tuple(
        (
            spaces.Discrete(4),
            spaces.Box(-1, 1, (2,), np.float64),
            spaces.Box(0, 255, (3, 3), np.uint8),
        )
    )
    act_space = spaces.Discrete(3)
    ends = [(1, "term"), (3, "none"), (1, "trunc"), (4, "term"), (1, "none")]
    written = _write_minari_storage(f"tup-{fmt}-v0", fmt, obs_space, act_space, ends)
    vault = import_minari(f"tup-{fmt}-v0", tmp_path / "v")
    # an episode with no flag is marked truncated at its last step, as documented
    lengths = [n for n, _ in ends]
    starts = np.cumsum([0, *lengths[:-1]]).tolist()
    assert _table(vault) == [
        (0, s, n, round(float(np.arange(n).sum() - i * n), 4), e != "term", True, True)
        for i, (s, (n, e)) in enumerate(zip(starts, ends, strict=True))
    ]
    assert len(vault.episodes(include_open=True)) == len(ends)  # nothing open
    for i, ep in enumerate(written):
        got = vault.read_episode(i)
        obs = _flat(ep["observations"])
        for k, x in obs.items():
            np.testing.assert_array_equal(got["observations"][int(k)], x[:-1])
            np.testing.assert_array_equal(got["next_observations"][int(k)], x[1:])
            assert got["observations"][int(k)].dtype == x.dtype
        np.testing.assert_array_equal(got["actions"], ep["actions"])
        assert got["actions"].dtype == np.asarray(ep["actions"]).dtype

    export_minari(vault, f"tup-{fmt}-back-v0", data_format=fmt)
    ds, episodes = _load_minari(f"tup-{fmt}-back-v0")
    assert ds.observation_space == obs_space
    assert ds.action_space == act_space
    for i, (a, b) in enumerate(zip(written, episodes, strict=True)):
        _same(a["observations"], b.observations, f"episode {i}/")
        _same(a["actions"], b.actions, f"episode {i}/")
        _same(a["rewards"], b.rewards, f"episode {i}/")
        np.testing.assert_array_equal(b.terminations, a["terminations"])
        want_trunc = a["truncations"].copy()
        want_trunc[-1] |= not a["terminations"][-1]
        np.testing.assert_array_equal(b.truncations, want_trunc)


# leaves of a recorded vault (no import: the spaces are inferred at export)
OBS_KINDS = {
    "frames": lambda rng, n: rng.integers(0, 256, (1, n, 4, 4, 3)).astype(np.uint8),
    "nested": lambda rng, n: {
        "a": rng.normal(size=(1, n, 2)).astype(np.float32),
        "b": {"c": rng.integers(-9, 9, (1, n)).astype(np.int32)},
    },
    "f64": lambda rng, n: rng.normal(size=(1, n)),
    "bool0": lambda rng, n: rng.integers(0, 2, (1, n)).astype(bool),
}
ACT_KINDS = {
    "int64": lambda rng, n: rng.integers(0, 4, (1, n)).astype(np.int64),
    "f32": lambda rng, n: rng.normal(size=(1, n, 2)).astype(np.float32),
    "bool3": lambda rng, n: rng.integers(0, 2, (1, n, 3)).astype(bool),
}


@pytest.mark.parametrize(
    ("fmt", "obs_kind", "act_kind"),
    [
        ("hdf5", "frames", "int64"),
        ("arrow", "frames", "int64"),
        ("hdf5", "nested", "f32"),
        ("arrow", "nested", "f32"),
        ("arrow", "f64", "int64"),
        ("hdf5", "f64", "bool3"),
        ("arrow", "f64", "bool3"),
        ("arrow", "bool0", "f32"),
        ("hdf5", "bool0", "f32"),
    ],
)
def test_recorded_vault_exports_to_minari_and_imports_back(
    minari_root: Path, tmp_path: Path, fmt: str, obs_kind: str, act_kind: str
) -> None:
    import jax

    rng = np.random.default_rng(3)
    n = 9
    obs = OBS_KINDS[obs_kind](rng, n + 1)
    done = np.zeros((1, n), bool)
    done[0, [0, 4, 6]] = True  # episodes of 1, 4 and 2 steps, then 2 steps left open
    data = {
        "observations": jax.tree.map(lambda x: x[:, :-1], obs),
        "next_observations": jax.tree.map(lambda x: x[:, 1:], obs),
        "actions": ACT_KINDS[act_kind](rng, n),
        "rewards": rng.normal(size=(1, n)).astype(np.float32),
        "terminals": done,
    }
    example = jax.tree.map(lambda x: np.zeros(x.shape[2:], x.dtype), data)
    with Vault.create(
        tmp_path / "rec", example, rows=1, done_leaf="terminals", reward_leaf="rewards"
    ) as v:
        v.append(data)
    dataset_id = f"rec-{fmt}-{obs_kind}-{act_kind}-v0"
    export_minari(tmp_path / "rec", dataset_id, data_format=fmt)
    ds, episodes = _load_minari(dataset_id)
    assert len(episodes) == 3
    with _quiet():
        for ep in episodes:
            for t in range(len(ep)):
                step_obs = jax.tree.map(lambda x, t=t: x[t], ep.observations)
                assert ds.observation_space.contains(step_obs), (t, step_obs)
                assert ds.action_space.contains(ep.actions[t]), (t, ep.actions[t])
    back = import_minari(dataset_id, tmp_path / "back")
    stop = 7  # the complete episodes
    ours = Vault.open(tmp_path / "rec").read_numpy(stop=stop)
    theirs = back.read_numpy()
    for field in ("observations", "next_observations", "actions", "rewards"):
        _same(ours[field], theirs[field], f"{field}/")
    np.testing.assert_array_equal(theirs["terminations"], ours["terminals"])


def test_export_minari_refuses_a_vault_without_complete_episodes(
    minari_root: Path, tmp_path: Path
) -> None:
    _write_d4rl(tmp_path / "open.hdf5", [], 6)  # one open episode, nothing complete
    vault = import_d4rl(tmp_path / "open.hdf5", tmp_path / "v")
    assert len(vault.episodes()) == 0
    assert len(vault.episodes(include_open=True)) == 1
    with pytest.raises(VaultError):
        export_minari(vault, "open-only-v0")
    assert not (minari_root / "open-only-v0").exists()


def test_export_minari_without_next_observations_is_a_typed_error(
    minari_root: Path, tmp_path: Path
) -> None:
    data = _write_d4rl(tmp_path / "src.hdf5", ENDS, 0)
    with h5py.File(tmp_path / "src.hdf5", "a") as f:
        del f["next_observations"]
    vault = import_d4rl(tmp_path / "src.hdf5", tmp_path / "v")
    assert "next_observations" not in vault.leaf_names
    assert vault.committed_length == len(data["rewards"])
    with pytest.raises(VaultError):
        export_minari(vault, "no-next-v0", next_observations=None)  # type: ignore[arg-type]


# -------------------------------------------- episodes on chunk and import-block boundaries
def test_episodes_on_chunk_and_block_boundaries_read_stream_and_verify(tmp_path: Path) -> None:
    width = 256  # 1 KiB observations
    example = {
        "observations": np.zeros(width, np.float32),
        "actions": np.zeros(2, np.float32),
        "rewards": np.float32(0),
        "terminals": np.bool_(False),
        "timeouts": np.bool_(False),
    }
    with Vault.create(f"memory://probe-{uuid.uuid4().hex}", example, rows=1) as probe:
        chunk = probe.manifest.leaf("observations").chunk_time
    assert 8 < chunk < 4096
    n = 2 * chunk + 6
    ends_t = [0, chunk - 1, chunk, 2 * chunk - 1]  # length 1 first; ends on both sides of a cut
    ends_o = [chunk - 3, chunk + 1, 2 * chunk + 2]
    rng = np.random.default_rng(5)
    data = {
        "observations": rng.normal(size=(n, width)).astype(np.float32),
        "actions": rng.normal(size=(n, 2)).astype(np.float32),
        "rewards": np.arange(n, dtype=np.float32) % 11,
        "terminals": np.isin(np.arange(n), ends_t),
        "timeouts": np.isin(np.arange(n), ends_o),
    }
    with h5py.File(tmp_path / "src.hdf5", "w") as f:
        for key, value in data.items():
            f[key] = value
    calls: list[int] = []
    vault = import_d4rl(
        tmp_path / "src.hdf5", tmp_path / "v", block_bytes=1 << 16,
        progress=lambda done, total: calls.append(done),
    )  # fmt: skip
    assert len(calls) > 4  # several import blocks, cut elsewhere than the chunks
    want = _reference_table(data["terminals"], data["timeouts"], data["rewards"])
    got = _table(vault, include_open=True)
    assert got[:-1] == [(*e, True, True) for e in want]
    assert got[-1][1:3] == (2 * chunk + 3, n - 2 * chunk - 3)
    report = verify(tmp_path / "v")
    assert report.problems == []
    assert report.episodes_checked == len(want)
    # episodes read back whole across chunks; windows around each cut
    for i, (_, start, length, *_) in enumerate(want):
        ep = vault.read_episode(i)
        np.testing.assert_array_equal(
            ep["observations"], data["observations"][start : start + length]
        )
    for cut in (chunk, 2 * chunk):
        got_window = vault.read_numpy(rows=[0], start=cut - 1, stop=cut + 1)
        for key, value in data.items():
            np.testing.assert_array_equal(got_window[key][0], value[cut - 1 : cut + 1])
    # the stream: every window of 3 that crosses no episode end, exactly once
    ends = data["terminals"] | data["timeouts"]
    windows = {s for s in range(n - 2) if not ends[s : s + 2].any()}
    firsts = []
    options = {"shuffle": True, "seed": 1, "episode_aware": True, "drop_remainder": False}
    for batch in vault.as_dataset(4, 3, leaves=["rewards", "observations"], **options):
        obs = np.asarray(batch.experience["observations"])
        for row, start in zip(obs, batch.start.tolist(), strict=True):
            np.testing.assert_array_equal(row, data["observations"][start : start + 3])
            firsts.append(start)
    assert sorted(firsts) == sorted(windows)


# ---------------------------------------------- imports to disk and S3, verify, exist, export
@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory, minari_root: Path) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("sources")
    out: dict[str, Any] = {}
    out["d4rl"] = (root / "d.hdf5", _write_d4rl(root / "d.hdf5", ENDS, OPEN))
    out["ogbench"] = (root / "og.npz", write_ogbench(root / "og.npz", [3, 0, 5]))
    write_ogbench(root / "og-val.npz", [2, 1], seed=1)
    spec = {"obs": ((3,), np.float32), "done": ((), np.bool_), "reward": ((), np.float32)}
    with _quiet():
        out["flashbax"] = write_flashbax(
            root / "fbx", "run", spec, rows=3, capacity=8, steps=19, write_every=5
        )
        write_minari("joint-toy-v0", "hdf5", env_id=TOY_ID, steps=40, seed=4)
    out["minari"] = ("joint-toy-v0", None)
    out["rlds"] = (write_rlds(root / "tfds", {"train": [3, 1, 4, 2]}, num_shards=2), None)
    return out


IMPORTS = {
    "d4rl": lambda src, dest: import_d4rl(src, dest),
    "ogbench": lambda src, dest: import_ogbench(src, dest),
    "flashbax": lambda src, dest: import_flashbax(src, dest, done="done", reward="reward"),
    "minari": lambda src, dest: import_minari(src, dest),
    "rlds": lambda src, dest: import_rlds(src, dest),
}


@pytest.mark.parametrize("fmt", list(IMPORTS))
def test_import_to_disk_and_s3_verifies_reads_and_refuses_an_existing_vault(
    sources: dict[str, Any], vault_url: str, fmt: str
) -> None:
    src, data = sources[fmt]
    vault = IMPORTS[fmt](src, vault_url)
    assert verify(vault_url).problems == []
    got = vault.read_numpy()
    if fmt in ("d4rl", "ogbench"):
        assert sorted(_flat(got)) == sorted(data)
        for key, value in data.items():
            assert got[key].dtype == value.dtype, key
            np.testing.assert_array_equal(got[key][0], value, err_msg=key)
    elif fmt == "flashbax":
        _same(got, data)
        want = [
            e
            for r in range(3)
            for e in [
                (r, *x[1:])
                for x in _reference_table(data["done"][r], np.zeros(19, bool), data["reward"][r])
            ]
        ]
        assert sorted(x[:5] for x in _table(vault)) == sorted(want)
    if fmt == "ogbench":  # the validation file went to <dest>-val, on S3 too
        val = Vault.open(f"{vault_url}-val")
        assert val.committed_length == 5
        assert vault.metadata["imported_from"]["validation"] == f"{vault_url}-val"
        regular = ogbench_dataset(vault_url, add_info=True)
        import ogbench

        theirs = ogbench.load_dataset(str(src), compact_dataset=False, add_info=True)
        _same(regular, theirs)
    if fmt == "minari":  # and out again, from S3 too
        did = f"joint-back-{'s3' if vault_url.startswith('s3') else 'disk'}-v0"
        export_minari(vault_url, did)
        ds, _ = _load_minari(did)
        assert ds.total_episodes == len(vault.episodes())
    # importing again over it is refused and leaves it as it was
    before = vault.committed_length, _table(vault, include_open=True)
    with pytest.raises(VaultExistsError):
        IMPORTS[fmt](src, vault_url)
    again = Vault.open(vault_url)
    assert (again.committed_length, _table(again, include_open=True)) == before
    _same(again.read_numpy(), got)


# ------------------------------------------------ import, then append, tag, pin and derive
def test_import_then_append_tag_pin_derive_and_export(minari_root: Path, tmp_path: Path) -> None:
    data = _write_d4rl(tmp_path / "src.hdf5", ENDS, OPEN)
    vault = import_d4rl(tmp_path / "src.hdf5", tmp_path / "v")
    imported = _table(vault, include_open=True)
    length = vault.committed_length
    with Vault.open(tmp_path / "v", mode="a") as w:
        commit = w.tag("imported")
        more = w.read_numpy(start=0, stop=4)  # 4 more steps: the open episode ends at the 2nd
        more["terminals"][:] = [[False, True, False, False]]
        more["timeouts"][:] = False
        more["rewards"][:] = [[10.0, 20.0, 30.0, 40.0]]
        w.append(more)
    latest = Vault.open(tmp_path / "v")
    assert latest.committed_length == length + 4
    tab = _table(latest, include_open=True)
    open_start = sum(n for _, n in ENDS)
    open_return = float(data["rewards"][open_start:].sum()) + 30.0
    assert tab[: len(ENDS)] == imported[: len(ENDS)]
    assert tab[len(ENDS)] == (0, open_start, OPEN + 2, round(open_return, 4), False, True, True)
    assert tab[-1] == (0, length + 2, 2, 70.0, False, False, True)
    # the tag still reads the import exactly
    pinned = Vault.open(tmp_path / "v", at="imported")
    assert pinned.commit_id == commit
    assert _table(pinned, include_open=True) == imported
    _same(pinned.read_numpy(), vault.read_numpy())
    export_minari(pinned, "pinned-v0")
    assert _load_minari("pinned-v0")[0].total_episodes == len(ENDS)
    # derive: the episode that spans the import and the append, and two of length 1
    table = latest.episodes()
    picked = table[[len(ENDS), 0, 2]]
    derived = derive_episodes(latest, tmp_path / "derived", picked)
    assert derived.episodes().length.tolist() == [1, 1, OPEN + 2]
    # the appended steps' next observations are not the following observations: said
    with pytest.warns(UserWarning, match="in 1 of 3 episodes the next observations"):
        export_minari(derived, "derived-v0", data_format="arrow")
    back = import_minari("derived-v0", tmp_path / "back")
    for i, j in enumerate([0, 2, len(ENDS)]):
        ours = latest.read_episode(j)
        theirs = back.read_episode(i)
        np.testing.assert_array_equal(theirs["observations"], ours["observations"])
        np.testing.assert_array_equal(theirs["actions"], ours["actions"])
        np.testing.assert_array_equal(theirs["rewards"], ours["rewards"])
    assert verify(tmp_path / "v").problems == []


# ------------------------------------- Flashbax 0.1.3's own vaults: lists, wraps, full buffer
class Step(NamedTuple):
    obs: Any
    parts: Any


def test_flashbax_namedtuple_with_a_list_written_by_flashbax_itself(tmp_path: Path) -> None:
    import flashbax as fbx
    import jax
    import jax.numpy as jnp
    from flashbax.vault import Vault as FlashbaxVault

    rows, capacity, steps, every = 2, 6, 23, 5  # wraps the ring four times, full from step 6
    buf = fbx.make_trajectory_buffer(
        add_batch_size=rows, sample_batch_size=1, sample_sequence_length=1, period=1,
        min_length_time_axis=1, max_length_time_axis=capacity,
    )  # fmt: skip
    example = Step(
        obs=jnp.zeros((2, 2), jnp.uint8),
        parts=[{"a": jnp.zeros((), jnp.int16)}, {"done": jnp.zeros((), jnp.bool_)}],
    )
    with _quiet():
        state = buf.init(example)
        add = jax.jit(buf.add)
        theirs_vault = FlashbaxVault("lists", state.experience, rel_dir=str(tmp_path),
                                     vault_uid="u", metadata={"seed": 7})  # fmt: skip
        handed = []
        for t in range(steps):
            step = Step(
                obs=np.full((rows, 2, 2), t, np.uint8)
                + np.arange(rows, dtype=np.uint8)[:, None, None],
                parts=[
                    {"a": np.arange(rows, dtype=np.int16) * 1000 + t},
                    {"done": (np.arange(rows) + t) % 4 == 3},
                ],
            )
            handed.append(step)
            state = add(state, jax.tree.map(lambda x: jnp.asarray(x)[:, None], step))
            if (t + 1) % every == 0 or t + 1 == steps:
                theirs_vault.write(state)
        assert bool(state.is_full)
        by_flashbax = jax.tree.map(
            np.asarray,
            FlashbaxVault("lists", rel_dir=str(tmp_path), vault_uid="u").read().experience,
        )
    want = jax.tree.map(lambda *xs: np.stack(xs, axis=1), *handed)
    vault = import_flashbax(tmp_path / "lists" / "u", tmp_path / "v", done="parts/1/done")
    assert sorted(vault.leaf_names) == ["obs", "parts/0/a", "parts/1/done"]
    assert vault.rows == rows
    assert vault.committed_length == steps
    got = vault.read_numpy()
    _same(got, want)
    _same(got, by_flashbax)
    assert vault.metadata["seed"] == 7
    # the episode index: per row, by the flags
    done = want.parts[1]["done"]
    ref = sorted(
        (r, s, n, tr)
        for r in range(rows)
        for _, s, n, _, tr in _reference_table(done[r], np.zeros(steps, bool), None)
    )
    table = vault.episodes()
    ours = sorted(
        zip(table.row.tolist(), table.start.tolist(), table.length.tolist(),
            table.truncated.tolist(), strict=True)
    )  # fmt: skip
    assert ours == [(r, s, n, tr) for r, s, n, tr in ref]
    for i in range(len(table)):
        r, s, n = int(table.row[i]), int(table.start[i]), int(table.length[i])
        ep = vault.read_episode(i)
        np.testing.assert_array_equal(ep["obs"], want.obs[r, s : s + n])
        assert bool(ep["parts"]["1"]["done"][-1])
    window = vault.read_numpy(rows=[1], start=steps - 3, stop=steps)
    np.testing.assert_array_equal(window["parts"]["0"]["a"], want.parts[0]["a"][1:, -3:])


def test_flashbax_vault_with_non_finite_metadata_imports(tmp_path: Path) -> None:
    spec = {"obs": ((2,), np.float32), "done": ((), np.bool_)}
    with _quiet():
        path, data = write_flashbax(tmp_path, "meta", spec, rows=1, capacity=8, steps=4,
                                    write_every=4, metadata={"best_return": float("-inf"),
                                                             "env": "toy"})  # fmt: skip
    assert "-Infinity" in (path / "metadata.json").read_text()
    vault = import_flashbax(path, tmp_path / "v")
    _same(vault.read_numpy(), data)
    assert vault.metadata["env"] == "toy"
    assert vault.metadata["best_return"] == "-inf"  # strict JSON: a string


# ------------------------------------------------------------- RLDS: shards, derive, resume
@pytest.fixture(scope="module")
def rlds_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("rlds-pair")
    a = write_rlds(root / "a", {"train": [3, 1, 4, 2, 1]}, num_shards=2)
    b = write_rlds(root / "b", {"train": [6, 6, 6, 6]}, num_shards=2)
    return a, b


def test_rlds_shards_resumed_on_disk_and_s3_derive_and_stream_like_one_vault(
    rlds_pair: tuple[Path, Path], tmp_path: Path, vault_url: str
) -> None:
    a, _ = rlds_pair
    one = import_rlds(a, tmp_path / "one")
    first = import_rlds(a, vault_url, shards=True, files=[1])  # one machine, then the rest
    assert first.shards == ["train-00001"]
    shards = import_rlds(a, vault_url, shards=True)
    assert isinstance(shards, Dataset)
    assert shards.shards == ["train-00000", "train-00001"]
    table = shards.episodes()
    assert table.length.tolist() == one.episodes().length.tolist()  # TFDS's file order
    assert sorted(table.length.tolist()) == [1, 1, 2, 3, 4]
    assert table.truncated.tolist() == one.episodes().truncated.tolist()
    gathered = derive_episodes(shards, tmp_path / "gathered", table)
    _same(gathered.read_numpy(), one.read_numpy())
    assert _table(gathered) == _table(one)
    # the same windows from the dataset and from the vault
    count = sum(max(0, n - 1) for n in [3, 1, 4, 2, 1])
    for source in (shards, one):
        stream = source.as_dataset(2, 2, shuffle=False, episode_aware=True, drop_remainder=False)
        assert sum(len(b.experience["reward"]) for b in stream) == count


@pytest.mark.parametrize("second", ["other dataset", "other jpeg"])
def test_rlds_shards_resume_refuses_or_imports_a_different_source(
    rlds_pair: tuple[Path, Path], tmp_path: Path, second: str
) -> None:
    a, b = rlds_pair
    import_rlds(a, tmp_path / "ds", shards=True, files=[0])
    try:
        if second == "other dataset":
            out = import_rlds(b, tmp_path / "ds", shards=True)
        else:
            out = import_rlds(a, tmp_path / "ds", shards=True, jpeg="tfds-numpy")
    except VaultError:
        return  # refused: fine
    origins = {
        (v.metadata["imported_from"]["source"], v.metadata["imported_from"]["jpeg"])
        for _, v in out.vaults()
    }
    assert len(origins) == 1, f"one dataset, shards of several imports: {sorted(origins)}"


# ---------------------------------------------------------------- the commands vs the API
def _cli(*args: Any) -> dict[str, Any]:
    result = CliRunner().invoke(
        app, [str(a) for a in args], env={"COLUMNS": "200", "NO_COLOR": "1"}
    )
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout)


CLI_ARGS = {
    "d4rl": [],
    "ogbench": ["--no-val"],
    "flashbax": ["--done", "done", "--reward", "reward"],
    "minari": [],
    "rlds": [],
}
API_OPTIONS = {
    "d4rl": {},
    "ogbench": {"val_dest": False},
    "flashbax": {"done": "done", "reward": "reward"},
    "minari": {},
    "rlds": {},
}


@pytest.mark.parametrize("fmt", list(CLI_ARGS))
def test_cli_import_gives_what_the_api_gives(
    sources: dict[str, Any], tmp_path: Path, fmt: str
) -> None:
    from vault.converters import import_dataset

    src = sources[fmt][0]
    doc = _cli("import", fmt, src, "--out", tmp_path / "cli", *CLI_ARGS[fmt], "--json")
    api = import_dataset(fmt, src, tmp_path / "api", **API_OPTIONS[fmt])
    cli = Vault.open(tmp_path / "cli")
    assert doc["leaf_names"] == cli.leaf_names == api.leaf_names
    assert doc["committed"] == api.committed_length
    assert doc["episodes"] == (len(api.episodes()) if api.has_episodes else None)
    _same(cli.read_numpy(), api.read_numpy())
    assert _table(cli, include_open=True) == _table(api, include_open=True)
    assert cli.episode_leaves == api.episode_leaves
    assert cli.metadata == api.metadata
    assert [(leaf.name, leaf.chunk, leaf.codecs) for leaf in cli.manifest.leaves] == [
        (leaf.name, leaf.chunk, leaf.codecs) for leaf in api.manifest.leaves
    ]


def test_cli_export_minari_gives_what_the_api_gives(
    sources: dict[str, Any], minari_root: Path, tmp_path: Path
) -> None:
    src = sources["d4rl"][0]
    vault = import_d4rl(src, tmp_path / "v")
    doc = _cli("export", tmp_path / "v", "--format", "minari", "--out", "cli/d4rl-v0",
               "--data-format", "arrow", "--json")  # fmt: skip
    assert Path(doc["out"]) == minari_root / "cli" / "d4rl-v0"
    export_minari(vault, "api/d4rl-v0", data_format="arrow")
    cli_ds, cli_eps = _load_minari("cli/d4rl-v0")
    api_ds, api_eps = _load_minari("api/d4rl-v0")
    assert cli_ds.observation_space == api_ds.observation_space
    assert cli_ds.action_space == api_ds.action_space
    assert (cli_ds.total_episodes, cli_ds.total_steps) == (
        api_ds.total_episodes,
        api_ds.total_steps,
    )
    for a, b in zip(cli_eps, api_eps, strict=True):
        for field in ("observations", "actions", "rewards", "terminations", "truncations"):
            _same(getattr(a, field), getattr(b, field), f"{field}/")
