"""Where the ``vault`` command meets the rest of the library: every read-only command on
vaults with seams (an overrun saved with ``on_overrun="save_surviving"`` and a restart), on
nested containers with odd leaf names, on derived vaults, on a dataset of shards, at a pinned
commit, on S3, on an empty vault and on one another process is writing. What each command
says (``--json`` where it has it) is compared with what the Python API and numpy say about
the same data; failures must be one line naming the place, with their exit code.

Six bugs found this way were fixed with these tests: paths with ``..``, paths printed as
rich markup, ``--out`` URLs taken as local paths, ``slice`` of an empty source naming an
option never passed, ``unlock`` where there is no vault, and a malformed ``--fingerprint``.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from _cli_vaults import Cli, block, build, example, one_error_line

from vault import Dataset, Vault

EPISODE_LEAVES: dict[str, Any] = {
    "done_leaf": "done",
    "truncated_leaf": "trunc",
    "reward_leaf": "reward",
}


# ------------------------------------------------------------------------------ helpers
def stats_of(values: np.ndarray) -> dict[str, Any]:
    """What ``vault stats`` must say about one leaf's values (finite ones counted)."""
    flat = np.asarray(values).reshape(-1)
    if flat.dtype == np.bool_:
        flat = flat.view(np.uint8)
    finite = flat[np.isfinite(flat)] if flat.dtype.kind == "f" else flat
    as_float = finite.astype(np.float64)
    return {
        "count": flat.size,
        "finite": finite.size,
        "min": finite.min().item() if finite.size else None,
        "max": finite.max().item() if finite.size else None,
        "mean": float(as_float.mean()) if finite.size else None,
        "std": float(as_float.std()) if finite.size else None,
    }


def assert_leaf_stats(doc: dict[str, Any], data: dict[str, np.ndarray]) -> None:
    leaves = {leaf["name"]: leaf for leaf in doc["leaves"]}
    assert sorted(leaves) == sorted(data)
    for name, values in data.items():
        want = stats_of(values)
        got = leaves[name]
        assert got["count"] == want["count"], name
        assert got["finite"] == want["finite"], name
        assert got["min"] == want["min"], name
        assert got["max"] == want["max"], name
        for key in ("mean", "std"):
            if want[key] is None:
                assert got[key] is None, name
            else:
                assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-12), (name, key)


def assert_episode_stats(doc: dict[str, Any], table: Any) -> None:
    """The episode keys of ``vault stats --json`` against the API's table (with open)."""
    complete = np.asarray(table.complete, bool)
    assert doc["episodes"] == int(complete.sum())
    assert doc["open_episodes"] == int((~complete).sum())
    assert doc["truncated_episodes"] == int(np.asarray(table.truncated, bool)[complete].sum())
    lengths = np.asarray(table.length)[complete]
    if lengths.size == 0:
        assert doc["episode_length"] is None
        return
    assert doc["episode_length"]["min"] == lengths.min()
    assert doc["episode_length"]["max"] == lengths.max()
    assert doc["episode_length"]["mean"] == pytest.approx(lengths.mean())
    returns = np.asarray(table.returns, np.float64)[complete]
    assert doc["episode_return"]["max"] == pytest.approx(returns.max())
    assert doc["episode_return"]["mean"] == pytest.approx(returns.mean())
    assert doc["episode_return"]["std"] == pytest.approx(returns.std())


def assert_returns_match_the_data(records: list[dict[str, Any]], reward: np.ndarray) -> None:
    """Each episode's return is the sum of its rewards in the data (float32 sums)."""
    for r in records:
        span = reward[r["row"], r["start"] : r["start"] + r["length"]]
        assert r["return"] == pytest.approx(float(span.astype(np.float64).sum()), abs=1e-4), r


def flat_numpy(vault: Any) -> dict[str, np.ndarray]:
    """Every leaf by its path (``info/step``), as the commands name them."""
    return vault.read_numpy(leaves=vault.leaf_names)


def seam_vault(path: Path) -> Vault:
    """Two rows written from a trajectory buffer of 4 steps: 3 steps, then 7 more (3 of them
    overwritten before the write: a seam losing 3), then 2, then a restart (a seam losing 0)
    appended directly. Rewards are the global step, an episode ends every third step."""
    import jax.numpy as jnp

    import buffers as fbx

    rows = 2
    buf = fbx.make_trajectory_buffer(
        add_batch_size=rows,
        sample_batch_size=1,
        sample_sequence_length=1,
        period=1,
        min_length_time_axis=1,
        max_length_time_axis=4,
    )
    state = buf.init({"obs": jnp.zeros(2), "done": jnp.bool_(False), "reward": jnp.float32(0)})
    vault = Vault.create(str(path), state, done_leaf="done", reward_leaf="reward")
    t = 0

    def add(state: Any, n: int) -> Any:
        nonlocal t
        for _ in range(n):
            step = {
                "obs": jnp.full((rows, 1, 2), t, jnp.float32),
                "done": jnp.full((rows, 1), t % 3 == 2),
                "reward": jnp.full((rows, 1), float(t), jnp.float32),
            }
            state = buf.add(state, step)
            t += 1
        return state

    state = add(state, 3)
    vault.write(state)
    state = add(state, 7)
    vault.write(state, on_overrun="save_surviving")
    state = add(state, 2)
    vault.write(state)
    fresh = {
        "obs": np.full((rows, 4, 2), 100, np.float32),
        "done": np.array([[False, True, False, False]] * rows),
        "reward": np.arange(100, 104, dtype=np.float32)[None].repeat(rows, 0),
    }
    vault.append(fresh, continues=False)
    vault.close()
    return Vault.open(str(path))


# ------------------------------------------------------------------ seams: every command
def test_every_read_only_command_agrees_with_the_api_across_seams(cli: Cli, tmp_path: Path) -> None:
    vault = seam_vault(tmp_path / "seams")
    path = tmp_path / "seams"
    assert [s.to_json() for s in vault.seams] == [{"at": 3, "lost": 3}, {"at": 9, "lost": 0}]
    data = flat_numpy(vault)
    table = vault.episodes(include_open=True)

    info = cli.json("info", path)
    assert info["committed"] == vault.committed_length == 13
    assert info["seams"] == [{"at": 3, "lost": 3}, {"at": 9, "lost": 0}]
    assert info["episodes"] == len(vault.episodes())
    assert info["open_episodes"] == len(table) - len(vault.episodes())
    assert info["commit"] == vault.commit_id
    assert info["fingerprint"] == vault.fingerprint()
    assert {leaf["name"]: leaf["shape"] for leaf in info["leaves"]} == {
        name: list(values.shape) for name, values in data.items()
    }
    assert "3 lost at t=3, restart at t=9" in cli("info", path).stdout

    stats = cli.json("stats", path)
    assert stats["committed"] == 13
    assert_leaf_stats(stats, data)
    assert_episode_stats(stats, table)

    episodes = cli.json("episodes", path, "--open", "--head", "0")
    assert episodes["records"] == json.loads(json.dumps(table.to_records()))
    assert [r["start_known"] for r in episodes["records"] if r["start"] == 3] == [False, False]
    assert_returns_match_the_data(episodes["records"], data["reward"])

    verified = cli.json("verify", path)
    assert verified["ok"] is True
    assert verified["committed"] == 13
    assert verified["episodes_checked"] == len(vault.episodes())
    assert verified["problems"] == []

    shown = cli.json("show", path, "--time", "2:11")
    for leaf in shown["leaves"]:
        np.testing.assert_array_equal(leaf["values"], data[leaf["name"]][:, 2:11])

    out = tmp_path / "seams.npz"
    cli("export", path, "--out", out)
    with np.load(out) as npz:
        for name, values in data.items():
            np.testing.assert_array_equal(npz[name], values)

    pictured = cli.json("plot", path, "--out", tmp_path / "seams.png")
    assert pictured["reward_leaf"] == "reward"
    assert (tmp_path / "seams.png").stat().st_size > 0


def test_derived_vaults_keep_seams_and_episodes_the_api_reports(cli: Cli, tmp_path: Path) -> None:
    seam_vault(tmp_path / "src")
    build(tmp_path / "other", rows=2, writes=(6,), episodes=False)
    combined = cli.json("combine", tmp_path / "src", tmp_path / "src", "--out", tmp_path / "cc")
    sliced = cli.json("slice", tmp_path / "cc", "--out", tmp_path / "sl", "--time", "4:20")
    sub = cli.json("subsample", tmp_path / "cc", "--out", tmp_path / "sub", "--min-length", "2")
    for doc, name in ((combined, "cc"), (sliced, "sl"), (sub, "sub")):
        vault = Vault.open(str(tmp_path / name))
        assert doc["committed"] == vault.committed_length
        assert doc["episodes"] == len(vault.episodes())
        info = cli.json("info", tmp_path / name)
        assert info["seams"] == [s.to_json() for s in vault.seams], name
        assert info["episodes"] == len(vault.episodes()), name
        assert info["fingerprint"] == vault.fingerprint()
        records = cli.json("episodes", tmp_path / name, "--open", "--head", "0")["records"]
        assert records == json.loads(json.dumps(vault.episodes(include_open=True).to_records()))
        assert_returns_match_the_data(records, vault.read_numpy(leaves=["reward"])["reward"])
        assert cli.json("verify", tmp_path / name)["ok"] is True, name
        assert_leaf_stats(cli.json("stats", tmp_path / name), flat_numpy(vault))
    assert Vault.open(str(tmp_path / "cc")).committed_length == 26
    assert {s["at"] for s in cli.json("info", tmp_path / "cc")["seams"]} >= {3, 9, 13}
    assert sub["episodes_selected"] == sub["episodes"]
    listed = {Path(e["path"]).name: e for e in cli.json("ls", tmp_path)}
    assert set(listed) == {"src", "other", "cc", "sl", "sub"}
    for name in ("cc", "sl", "sub"):
        assert listed[name]["committed"] == Vault.open(str(tmp_path / name)).committed_length


# ------------------------------------------------------------------ pinned commits (--at)
@pytest.mark.parametrize("how", ["number", "id", "tag"])
def test_commands_at_a_pinned_commit_read_that_commit(cli: Cli, tmp_path: Path, how: str) -> None:
    path = tmp_path / "v"
    build(path, writes=(13, 14, 15))
    pinned = Vault.open(str(path), at=2)
    at = {"number": "2", "id": pinned.commit_id, "tag": "half"}[how]
    if how == "tag":
        tagged = cli.json("tag", path, "half", "--at", "2")
        assert tagged["commit"] == pinned.commit_id
        assert tagged["committed"] == 27
    data = flat_numpy(pinned)
    info = cli.json("info", path, "--at", at)
    assert info["commit"] == pinned.commit_id
    assert info["committed"] == 27
    assert info["episodes"] == len(pinned.episodes())
    assert info["fingerprint"] == pinned.fingerprint()
    assert {leaf["name"]: leaf["shape"][1] for leaf in info["leaves"]} == dict.fromkeys(data, 27)
    stats = cli.json("stats", path, "--at", at)
    assert stats["committed"] == 27
    assert_leaf_stats(stats, data)
    assert_episode_stats(stats, pinned.episodes(include_open=True))
    episodes = cli.json("episodes", path, "--at", at, "--open", "--head", "0")
    assert episodes["records"] == json.loads(json.dumps(pinned.episodes(True).to_records()))
    shown = cli.json("show", path, "--at", at, "--leaf", "reward", "--time", "-5:")
    assert shown["time"] == [22, 27]
    np.testing.assert_array_equal(shown["leaves"][0]["values"], data["reward"][:, 22:])
    verified = cli.json("verify", path, "--at", at, "--fingerprint", pinned.fingerprint())
    assert verified["ok"] is True
    assert verified["committed"] == 27
    # out of the pinned range: the pinned length, not the latest, bounds --time
    line = one_error_line(cli("show", path, "--at", at, "--time", "0:30", code=1))
    assert "outside the vault's 27 timesteps" in line


@pytest.mark.parametrize("command", ["info", "show", "stats", "episodes", "verify"])
@pytest.mark.parametrize("at", ["nope", "99", "7-0123456789ab"])
def test_a_wrong_at_is_one_line_exit_2_naming_the_vault(
    cli: Cli, tmp_path: Path, command: str, at: str
) -> None:
    path = tmp_path / "v"
    build(path, writes=(4, 4))
    line = one_error_line(cli(command, path, "--at", at, code=2))
    assert str(path) in line
    assert "Traceback" not in line


# --------------------------------------------------------------------- dataset of shards
def make_dataset(root: Path) -> Dataset:
    """Shard ``a`` (3 rows, 15 steps, tagged ``t1``), then shard ``b`` (2 rows, 7 steps)."""
    rng = np.random.default_rng(5)
    dataset = Dataset.create(str(root), example(), rows=3, **EPISODE_LEAVES)
    with dataset.shard("a") as shard:
        shard.append(block(rng, 3, 0, 10))
        shard.append(block(rng, 3, 10, 5))
    dataset.refresh()
    dataset.tag("t1")
    with Dataset.create(str(root), example(), rows=3, exist_ok=True, **EPISODE_LEAVES).shard(
        "b", rows=2
    ) as shard:
        shard.append(block(rng, 2, 0, 7))
    return Dataset.open(str(root))


def test_a_dataset_of_shards_agrees_with_the_api(cli: Cli, tmp_path: Path) -> None:
    root = tmp_path / "ds"
    dataset = make_dataset(root)
    assert dataset.shards == ["a", "b"]
    per_shard = {name: flat_numpy(vault) for name, vault in dataset.vaults()}
    everything = {
        leaf: np.concatenate([per_shard[s][leaf].reshape(-1) for s in dataset.shards])
        for leaf in dataset.leaf_names
    }
    info = cli.json("info", root)
    assert info["kind"] == "dataset"
    assert info["timesteps"] == dataset.timesteps == 3 * 15 + 2 * 7
    assert info["shards"] == dataset.describe()["shards"]
    stats = cli.json("stats", root)
    assert stats["timesteps"] == dataset.timesteps
    assert_leaf_stats(stats, everything)
    assert_episode_stats(stats, dataset.episodes(include_open=True))
    episodes = cli.json("episodes", root, "--open", "--head", "0")
    assert episodes["records"] == json.loads(json.dumps(dataset.episodes(True).to_records()))
    for r in episodes["records"]:
        span = per_shard[r["shard"]]["reward"][r["row"], r["start"] : r["start"] + r["length"]]
        assert r["return"] == pytest.approx(float(span.sum()), abs=1e-4)
    shown = cli.json("show", root, "--leaf", "obs", "--time", "-4:")
    for shard in shown["shards"]:
        want = per_shard[shard["shard"]]["obs"]
        np.testing.assert_array_equal(shard["leaves"][0]["values"], want[:, -4:])
    out = tmp_path / "ds.npz"
    exported = cli.json("export", root, "--out", out, "--rows", "-1")
    assert [s["rows_selected"] for s in exported["shards"]] == [[2], [1]]
    with np.load(out) as npz:
        np.testing.assert_array_equal(npz["shards/a/reward"], per_shard["a"]["reward"][[2]])
        np.testing.assert_array_equal(npz["shards/b/obs"], per_shard["b"]["obs"][[1]])
    verified = cli.json("verify", root)
    assert verified["ok"] is True
    assert [(s["shard"], s["committed"]) for s in verified["shards"]] == [("a", 15), ("b", 7)]
    listed = cli.json("ls", tmp_path)
    assert [(e["kind"], e["timesteps"]) for e in listed] == [("dataset", dataset.timesteps)]
    assert [e["committed"] for e in cli.json("ls", root)] == [15, 7]

    # as tagged: shard b came later and is left out, by every command alike
    tagged = Dataset.open(str(root), at="t1")
    assert cli.json("info", root, "--at", "t1")["timesteps"] == tagged.timesteps == 45
    at_stats = cli.json("stats", root, "--at", "t1")
    assert_leaf_stats(at_stats, {k: v.reshape(-1) for k, v in per_shard["a"].items()})
    at_eps = cli.json("episodes", root, "--at", "t1", "--head", "0")
    assert {r["shard"] for r in at_eps["records"]} == {"a"}
    assert at_eps["episodes"] == len(tagged.episodes())
    assert [s["shard"] for s in cli.json("show", root, "--at", "t1")["shards"]] == ["a"]
    assert [s["shard"] for s in cli.json("verify", root, "--at", "t1")["shards"]] == ["a"]
    line = one_error_line(cli("info", root, "--at", "nope", code=2))
    assert "no shard has the tag 'nope'" in line


# ------------------------------------------------------ nested containers, odd leaf names
class Pair(NamedTuple):
    a: Any
    b: Any


@dataclasses.dataclass
class Box:
    x: Any
    nothing: Any


def odd_example() -> dict[str, Any]:
    return {
        "a b": np.float32(0),
        "x/y": np.int32(0),
        "ü": np.int8(0),
        "": np.int16(0),
        ".hid": np.uint8(0),
        "__x": np.float64(0),
        "zarr.json": np.float32(0),
        "[b]": np.float32(0),
        "pair": Pair(np.float32(0), np.zeros(2, np.float32)),
        "box": Box(np.int32(0), None),
        "seq": [np.float32(0), (np.int64(0),)],
        "wide": tuple(np.int16(0) for _ in range(11)),
    }


def odd_data(rows: int, n: int) -> dict[str, Any]:
    """Every leaf of :func:`odd_example`, numbered so that no two leaves hold the same."""
    counter = iter(range(1, 100))

    def leaf(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        k = next(counter)
        size = rows * n * int(np.prod(shape, dtype=np.int64))
        return (np.arange(size) % 50 + 100 * k).reshape(rows, n, *shape).astype(dtype)

    return {
        "a b": leaf((), np.float32),
        "x/y": leaf((), np.int32),
        "ü": leaf((), np.int8) % 100,
        "": leaf((), np.int16),
        ".hid": leaf((), np.uint8) % 200,
        "__x": leaf((), np.float64),
        "zarr.json": leaf((), np.float32),
        "[b]": leaf((), np.float32),
        "pair": Pair(leaf((), np.float32), leaf((2,), np.float32)),
        "box": Box(leaf((), np.int32), None),
        "seq": [leaf((), np.float32), (leaf((), np.int64),)],
        "wide": tuple(leaf((), np.int16) for _ in range(11)),
    }


def test_nested_containers_and_odd_leaf_names(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "odd"
    with Vault.create(str(path), odd_example(), rows=2) as vault:
        vault.append(odd_data(2, 5))
    vault = Vault.open(str(path))
    names = vault.leaf_names
    data = flat_numpy(vault)
    assert "wide/10" in names
    assert "x%2Fy" in names
    info = cli.json("info", path)
    assert [leaf["name"] for leaf in info["leaves"]] == names
    for leaf in info["leaves"]:
        assert leaf["shape"] == list(data[leaf["name"]].shape), leaf["name"]
        assert leaf["dtype"] == vault.manifest.leaf(leaf["name"]).dtype
        assert leaf["disk_bytes"] > 0
    # the tree shows each leaf's own facts under its own label (11 tuple items: [10] last)
    text = cli("info", path).stdout
    for label, name in (("[9]", "wide/9"), ("[10]", "wide/10"), ("[b]", "%5Bb%5D")):
        dtype = vault.manifest.leaf(name).dtype
        assert f"{label}  {dtype} [2, 5]" in text, (label, text)
    assert "nothing  None" in text
    assert_leaf_stats(cli.json("stats", path), data)
    for name in names:
        shown = cli.json("show", path, "--leaf", name, "--rows", "1", "--time", "1:4")
        np.testing.assert_array_equal(shown["leaves"][0]["values"], data[name][1:2, 1:4])
    cli("export", path, "--out", tmp_path / "odd.npz")
    with np.load(tmp_path / "odd.npz") as npz:
        assert sorted(npz.files) == sorted([*names, "__manifest__"])
        for name in names:
            np.testing.assert_array_equal(npz[name], data[name])
    assert cli.json("verify", path)["ok"] is True


def test_zero_d_leaves_of_extreme_integers_are_exact(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "ints"
    example = {"u": np.uint64(0), "i": np.int64(0), "h": np.float16(0), "done": np.bool_(False)}
    data: dict[str, np.ndarray] = {
        "u": np.array([[2**64 - 1, 0, 1], [5, 2**63, 7]], np.uint64),
        "i": np.array([[-(2**63), 2**63 - 1, 0], [1, -1, 3]], np.int64),
        "h": np.array([[np.nan, np.inf, -65504], [65504, 0.5, -np.inf]], np.float16),
        "done": np.array([[True, False, False], [False, False, True]]),
    }
    with Vault.create(str(path), example, rows=2, done_leaf="done") as vault:
        vault.append(data)
    stats = {leaf["name"]: leaf for leaf in cli.json("stats", path)["leaves"]}
    assert stats["u"]["min"] == 0
    assert stats["u"]["max"] == 2**64 - 1
    assert stats["i"]["min"] == -(2**63)
    assert stats["i"]["max"] == 2**63 - 1
    assert (stats["h"]["nan"], stats["h"]["inf"], stats["h"]["finite"]) == (1, 2, 3)
    assert (stats["h"]["min"], stats["h"]["max"]) == (-65504.0, 65504.0)
    assert_leaf_stats({"leaves": list(stats.values())}, data)
    shown = cli.json("show", path, "--leaf", "u", "--leaf", "i")
    assert shown["leaves"][0]["values"] == data["u"].tolist()
    assert shown["leaves"][1]["values"] == data["i"].tolist()
    episodes = cli.json("episodes", path, "--open")
    assert [(r["row"], r["length"], r["complete"]) for r in episodes["records"]] == [
        (0, 1, True),
        (1, 3, True),
        (0, 2, False),
    ]
    assert {r["return"] for r in episodes["records"]} == {None}  # no reward leaf


# ------------------------------------------------------------------------- empty vaults
def test_an_empty_vault_reads_as_empty_in_every_command(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "empty"
    Vault.create(str(path), example(), rows=2, **EPISODE_LEAVES).close()
    info = cli.json("info", path)
    assert (info["committed"], info["episodes"], info["open_episodes"]) == (0, 0, 0)
    assert info["raw_bytes"] == 0
    assert {tuple(leaf["shape"][:2]) for leaf in info["leaves"]} == {(2, 0)}
    stats = cli.json("stats", path)
    assert {leaf["count"] for leaf in stats["leaves"]} == {0}
    assert {leaf["min"] for leaf in stats["leaves"]} == {None}
    assert stats["episode_return"] is None
    assert cli.json("episodes", path, "--open")["records"] == []
    assert cli.json("verify", path)["chunks_checked"] == 0
    shown = cli.json("show", path, "--leaf", "obs")
    assert shown["leaves"][0]["shape"] == [2, 0, 2]
    assert "time [0, 0) of 0 committed" in cli("show", path).stdout
    assert cli.json("plot", path, "--out", tmp_path / "e.png")["width"] > 0
    cli("export", path, "--out", tmp_path / "e.npz")
    with np.load(tmp_path / "e.npz") as npz:
        assert npz["obs"].shape == (2, 0, 2)
    assert [e["committed"] for e in cli.json("ls", tmp_path)] == [0]


@pytest.mark.parametrize("kind", ["vault", "dataset"])
def test_slicing_an_empty_source_says_why_without_a_phantom_option(
    cli: Cli, tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "src"
    if kind == "vault":
        Vault.create(str(path), example(), rows=2).close()
    else:
        Dataset.create(str(path), example(), rows=2).shard("s0").close()
    line = one_error_line(cli("slice", path, "--out", tmp_path / "out", code=1))
    assert "None" not in line
    assert "no committed timesteps" in line or "empty" in line


# ------------------------------------------------------------- a writer in another process
WRITER = """
import sys
import numpy as np
sys.path.insert(0, {here!r})
from _cli_vaults import block
from vault import Vault
v = Vault.open({path!r}, mode="a")
v.append(block(np.random.default_rng(1), 3, 5, 4))
print("ready", flush=True)
sys.stdin.readline()
v.close()
"""


def test_a_vault_another_process_is_writing(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "v"
    build(path, writes=(5,))
    code = WRITER.format(here=str(Path(__file__).parent), path=str(path))
    with subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdin is not None
            assert proc.stdout.readline().strip() == "ready"
            info = cli.json("info", path)
            assert info["writer"]["held"] is True
            assert info["writer"]["holder"]["pid"] == proc.pid
            assert info["committed"] == Vault.open(str(path)).committed_length == 9
            assert f"yes: pid {proc.pid}" in cli("info", path).stdout
            assert cli.json("verify", path)["ok"] is True
            assert_leaf_stats(cli.json("stats", path), flat_numpy(Vault.open(str(path))))
            line = one_error_line(cli("unlock", path, "--yes", code=1))
            assert str(path) in line
            assert "no lock to break" in line
            line = one_error_line(cli("unlock", path, code=1))
            assert f"pid {proc.pid}" in line
            assert Vault.open(str(path)).lock_holder() is not None  # nothing was broken
            proc.stdin.write("\n")
            proc.stdin.flush()
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    assert cli.json("info", path)["writer"] == {"held": False, "holder": None}


# ---------------------------------------------------------------------- disk, then on S3
def test_read_only_commands_on_disk_and_on_s3_agree_with_the_api(cli: Cli, vault_url: str) -> None:
    data = build(vault_url, writes=(13, 14))
    vault = Vault.open(vault_url)
    info = cli.json("info", vault_url)
    assert info["path"] == vault.location
    assert info["committed"] == 27
    assert info["episodes"] == len(vault.episodes())
    assert info["raw_bytes"] == sum(v.nbytes for v in data.values())
    if vault_url.startswith("s3://"):
        assert info["disk_bytes"] is None
        assert info["ratio"] is None
    else:
        assert info["disk_bytes"] > 0
    assert_leaf_stats(cli.json("stats", vault_url), data)
    records = cli.json("episodes", vault_url, "--head", "0")["records"]
    assert records == json.loads(json.dumps(vault.episodes().to_records()))
    assert_returns_match_the_data(records, data["reward"])
    assert cli.json("verify", vault_url)["ok"] is True
    shown = cli.json("show", vault_url, "--leaf", "obs", "--rows", "2,0", "--time", "10:20")
    np.testing.assert_array_equal(shown["leaves"][0]["values"], data["obs"][[2, 0], 10:20])
    parent = vault_url.rsplit("/", 1)[0]
    assert [e["path"] for e in cli.json("ls", parent)] == [vault.location]
    tagged = cli.json("tag", vault_url, "first", "--at", "1")
    assert tagged["committed"] == 13
    assert cli.json("info", vault_url, "--at", "first")["committed"] == 13


def test_unlock_where_there_is_no_vault_is_not_found(cli: Cli, vault_url: str) -> None:
    result = cli("unlock", vault_url, "--yes", code=None)
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert vault_url in one_error_line(result)


# ------------------------------------------------------------------------ corrupt chunks
def corrupt_reward_chunk(path: Path) -> None:
    chunk = path / "experience" / "reward" / "c" / "0" / "1"
    raw = bytearray(chunk.read_bytes())
    raw[-6] ^= 0x10
    chunk.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        ("show", ["--leaf", "reward", "--time", "8:16"]),
        ("stats", ["--leaf", "reward"]),
        ("export", ["--out", "{tmp}/o.npz"]),
        ("plot", ["--out", "{tmp}/o.png"]),
        ("slice", ["--out", "{tmp}/s"]),
        ("subsample", ["--out", "{tmp}/s"]),
        ("combine", ["{path}", "--out", "{tmp}/s"]),
    ],
)
def test_a_corrupt_chunk_stops_every_reader_in_one_line_exit_3(
    cli: Cli, tmp_path: Path, command: str, extra: list[str]
) -> None:
    path = tmp_path / "v"
    build(path)
    corrupt_reward_chunk(path)
    out = tmp_path / "out"
    out.mkdir()
    args = [a.format(tmp=out, path=path) for a in extra]
    line = one_error_line(cli(command, path, *args, code=3))
    assert f"{path}: array experience/reward, chunk 0.1 is corrupt" in line
    assert list(out.iterdir()) == []  # nothing half-written is left
    report = cli.json("verify", path, code=3)
    assert report["ok"] is False
    assert [p["place"] for p in report["problems"]] == ["experience/reward chunk 0.1"]


# --------------------------------------------------------------------- paths, as typed
@pytest.mark.parametrize("command", ["info", "stats", "verify", "ls"])
def test_a_relative_path_through_the_parent_folder(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    build(tmp_path / "runs" / "v", writes=(6,))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    where = "../runs" if command == "ls" else "../runs/v"
    doc = cli.json(command, where)
    if command == "ls":
        assert [e.get("error") for e in doc] == [None]
        assert doc[0]["committed"] == 6
    else:
        assert doc["committed"] == 6


MARKUP_DIR = "sweep[/]1"  # a folder name a shell and a file system take as it is


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        ("stats", []),
        ("episodes", []),
        ("tag", ["first"]),
        ("export", ["--out", "{dir}/o.npz"]),
        ("slice", ["--out", "{dir}/s"]),
        ("plot", ["--out", "{dir}/o.png"]),
        ("ls", []),
    ],
)
def test_a_path_with_brackets_is_printed_as_typed(
    cli: Cli, tmp_path: Path, command: str, extra: list[str]
) -> None:
    folder = tmp_path / MARKUP_DIR
    build(folder / "v", writes=(6,))
    (folder / "none").mkdir()
    where = folder / "none" if command == "ls" else folder / "v"
    result = cli(command, where, *(a.format(dir=folder) for a in extra), code=None)
    assert result.exit_code == 0, result.stderr
    assert MARKUP_DIR in "".join(result.stdout.split())  # a table title may wrap anywhere


def test_stats_names_a_path_with_a_style_tag_as_typed(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "exp[i]" / "v"
    build(path, writes=(6,))
    shown = "".join(cli("stats", path).stdout.split())  # the title may wrap anywhere
    assert "".join(f"{path}: 3 rows x 6 timesteps".split()) in shown


@pytest.mark.parametrize(("command", "suffix"), [("export", "npz"), ("plot", "png")])
@pytest.mark.parametrize("scheme", ["s3", "file"])
def test_an_out_url_is_never_a_local_folder_named_after_the_scheme(
    cli: Cli,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    suffix: str,
    scheme: str,
) -> None:
    build(tmp_path / "v", writes=(4,))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    target = tmp_path / f"o.{suffix}"
    out = f"s3://bucket/o.{suffix}" if scheme == "s3" else f"file://{target}"
    result = cli(command, tmp_path / "v", "--out", out, code=None)
    assert list(work.iterdir()) == []  # no ./s3: or ./file: folder
    if result.exit_code == 0:
        assert scheme == "file"
        assert target.exists()
    else:
        assert out in one_error_line(result)


def test_a_malformed_fingerprint_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    build(tmp_path / "v", writes=(4,))
    line = one_error_line(cli("verify", tmp_path / "v", "--fingerprint", "junk", code=1))
    assert "--fingerprint" in line
