"""Every ``vault`` command on a dataset of shards: ``ls`` shows it as one entry (and lists a
dataset's shards), ``show``, ``plot`` and ``export`` cover every shard (``--shard`` picks
one), ``slice`` makes a new dataset, ``combine`` one vault of every shard, ``tag`` tags every
shard (and ``info``/``verify --at TAG`` read the dataset as tagged), ``unlock`` says which
shard to unlock. Output is compared with the library's own reads, and every ``--json`` key is
in the README's table.

Shards are small (2 rows, a few dozen timesteps) and are written with the public API.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _cli_vaults import Cli, build, one_error_line, tree_bytes
from test_cli_ux import check_schema, vocabulary

from vault import Dataset, Vault

EXAMPLE = {"obs": np.zeros((2,), np.float32), "reward": np.float32(0), "done": np.bool_(False)}
LENGTHS = {"actor-0": 10, "actor-1": 17}


def block(shard: int, rows: int, t0: int, n: int) -> dict[str, np.ndarray]:
    """Values that say where they are: obs = (shard * 100 + row, t)."""
    t = np.arange(t0, t0 + n)[None, :] + np.zeros((rows, 1), np.int64)
    row = np.arange(rows)[:, None] + np.zeros((1, n), np.int64)
    return {
        "obs": np.stack([shard * 100 + row, t], axis=-1).astype(np.float32),
        "reward": (t % 3 == 0).astype(np.float32) * (shard + 1),
        "done": (t % 4) == 3,
    }


def make(root: Path, lengths: dict[str, int], rows: int | dict[str, int] = 2) -> Path:
    dataset = Dataset.create(str(root), EXAMPLE, rows=2, done_leaf="done", reward_leaf="reward")
    for index, (name, n) in enumerate(lengths.items()):
        n_rows = rows if isinstance(rows, int) else rows[name]
        with dataset.shard(name, rows=n_rows) as writer:
            writer.append(block(index, n_rows, 0, n))
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a dataset ``ds`` (two shards) and a vault ``v``."""
    root = tmp_path_factory.mktemp("cli-dataset-commands")
    make(root / "ds", LENGTHS)
    build(root / "v", rows=2, writes=(5,))
    return root


def checked(doc: dict[str, Any]) -> dict[str, Any]:
    check_schema(doc, vocabulary())
    return doc


# ---------------------------------------------------------------------------------------- ls
def test_ls_shows_a_dataset_as_one_entry(folder: Path) -> None:
    cli, ds = Cli(), Dataset.open(str(folder / "ds"))
    entries = cli.json("ls", folder)
    assert [e["path"] for e in entries] == [str(folder / "ds"), str(folder / "v")]
    entry, plain = (checked(e) for e in entries)
    assert (entry["kind"], plain["kind"]) == ("dataset", "vault")
    assert entry["shards"] == ds.describe()["shards"]
    assert [s["commit"] for s in entry["shards"]] == list(ds.commit_ids.values())
    assert entry["timesteps"] == ds.timesteps == 2 * (10 + 17)
    table = ds.episodes(include_open=True)
    assert entry["episodes"] == int(table.complete.sum()) == 2 * (2 + 4)
    assert entry["open_episodes"] == int((~table.complete).sum())
    assert entry["disk_bytes"] == tree_bytes(folder / "ds")
    assert entry["raw_bytes"] == 2 * 27 * (4 * 2 + 4 + 1)
    assert entry["leaf_count"] == 3
    text = cli("ls", folder).stdout
    assert re.search(r" ds \(dataset, 2 shards\) +4 +10\.\.17 +12 ", text)
    assert "shards/actor" not in text
    assert "vaults and datasets under" in text
    assert "`vault ls DATASET` lists its shards" in " ".join(text.split())


def test_ls_of_a_dataset_lists_its_shards(folder: Path, tmp_path: Path) -> None:
    cli, ds = Cli(), Dataset.open(str(folder / "ds"))
    entries = cli.json("ls", folder / "ds")
    for entry in entries:
        checked(entry)
    assert [(e["shard"], e["committed"], e["commit"]) for e in entries] == [
        (name, ds.committed_lengths[name], ds.commit_ids[name]) for name in ds.shards
    ]
    assert [e["path"] for e in entries] == [ds.vault(n).location for n in ds.shards]
    assert entries[1]["disk_bytes"] == tree_bytes(folder / "ds" / "shards" / "actor-1")
    text = cli("ls", folder / "ds").stdout
    assert "dataset of 2 shards, 54 timesteps" in text
    assert re.search(r" actor-1 +2 +17 +" + re.escape(ds.commit_ids["actor-1"]), text)
    # inside the dataset, its shards are vaults like any other
    inside = cli.json("ls", folder / "ds" / "shards")
    assert [(e["kind"], e["committed"]) for e in inside] == [("vault", 10), ("vault", 17)]
    Dataset.create(str(tmp_path / "new"), EXAMPLE, rows=2)
    assert cli.json("ls", tmp_path / "new") == []
    assert "a dataset with no shards yet" in cli("ls", tmp_path / "new").stdout
    # a dataset with no shard yet is still listed under its folder (found by its root)
    (empty,) = [checked(e) for e in cli.json("ls", tmp_path) if e["path"].endswith("/new")]
    assert (empty["kind"], empty["shards"], empty["timesteps"]) == ("dataset", [], 0)
    assert "new (dataset, 0 shards)" in cli("ls", tmp_path).stdout


# -------------------------------------------------------------------------------------- show
def test_show_labels_every_shard_and_shard_picks_one(folder: Path) -> None:
    cli, ds = Cli(), Dataset.open(str(folder / "ds"))
    doc = checked(cli.json("show", folder / "ds", "--leaf", "obs", "--time", "2:5", "--rows", "1"))
    assert doc["kind"] == "dataset"
    assert [s["shard"] for s in doc["shards"]] == ds.shards
    for part in doc["shards"]:
        assert (part["rows_selected"], part["time"]) == ([1], [2, 5])
        want = ds.read_numpy(part["shard"], rows=[1], start=2, stop=5)["obs"]
        np.testing.assert_array_equal(np.array(part["leaves"][0]["values"]), want)
    doc = checked(cli.json("show", folder / "ds", "--shard", "actor-1", "--time", "-2:"))
    assert (doc["shard"], doc["path"], doc["time"]) == (
        "actor-1",
        ds.vault("actor-1").location,
        [15, 17],
    )
    got = {leaf["name"]: np.array(leaf["values"]) for leaf in doc["leaves"]}
    for name, value in ds.read_numpy("actor-1", start=15, stop=17).items():
        np.testing.assert_array_equal(got[name], value)
    text = cli("show", folder / "ds", "--leaf", "reward", "--time", "-3:").stdout
    assert "dataset of 2 shards" in text
    assert "shard actor-0: rows 0..1, time [7, 10) of 10 committed" in text
    assert "shard actor-1: rows 0..1, time [14, 17) of 17 committed" in text
    assert "[[0. 2. 0.]" in text  # actor-1's rewards at t = 14, 15, 16: 2 where t % 3 == 0


def test_a_selection_a_shard_cannot_give_names_the_shard(folder: Path) -> None:
    cli, ds = Cli(), folder / "ds"
    line = one_error_line(cli("show", ds, "--time", "0:12", code=1))
    assert line.startswith("vault: shard 'actor-0': --time '0:12' is outside the vault's 10")
    assert line.endswith("or choose one shard with --shard NAME")
    line = one_error_line(cli("show", ds, "--shard", "nope", code=2))
    assert line == (
        f"vault: {ds}: no shard 'nope' in this dataset (its shards: actor-0, actor-1; "
        f"`vault ls {ds}` lists them)"
    )
    line = one_error_line(cli("show", folder / "v", "--shard", "actor-0", code=1))
    assert "--shard picks a shard of a dataset, but" in line


# -------------------------------------------------------------------------------------- plot
def test_plot_draws_one_line_per_shard(folder: Path, tmp_path: Path) -> None:
    from vault.cli import _plot

    cli, ds = Cli(), Dataset.open(str(folder / "ds"))
    doc = checked(cli.json("plot", folder / "ds", "--out", tmp_path / "p.png"))
    assert (doc["kind"], doc["reward_leaf"], doc["reward_panel"]) == ("dataset", "reward", "lines")
    assert doc["rows_drawn"] == 4
    assert doc["shards"] == ds.describe()["shards"]
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    heat = cli.json("plot", folder / "ds", "--out", tmp_path / "h.png", "--max-rows", "1")
    assert heat["reward_panel"] == "heat map"
    one = checked(
        cli.json("plot", folder / "ds", "--shard", "actor-0", "--out", tmp_path / "o.png")
    )
    assert (one["shard"], one["rows_drawn"], one["path"]) == (
        "actor-0",
        2,
        ds.vault("actor-0").location,
    )
    # the curve drawn: each shard the mean of its rows per timestep, on one time axis
    curve = _plot.shards_curve(ds, "reward")
    assert curve["rows"].shape == (2, 17)
    assert curve["width"] == 1
    for i, name in enumerate(ds.shards):
        reward = ds.read_numpy(name)["reward"].mean(axis=0)
        np.testing.assert_allclose(curve["rows"][i, : reward.size], reward)
        assert np.isnan(curve["rows"][i, reward.size :]).all()


# ------------------------------------------------------------------------------------ export
def test_export_writes_every_shard_or_one(folder: Path, tmp_path: Path) -> None:
    cli, ds = Cli(), Dataset.open(str(folder / "ds"))
    out = tmp_path / "all.npz"
    doc = checked(cli.json("export", folder / "ds", "--out", out, "--rows", "1", "--time", "1:4"))
    assert doc["kind"] == "dataset"
    assert doc["bytes"] == out.stat().st_size
    assert [(s["shard"], s["rows_selected"], s["time"]) for s in doc["shards"]] == [
        (name, [1], [1, 4]) for name in ds.shards
    ]
    with np.load(out) as npz:
        header = json.loads(str(npz["__manifest__"]))
        assert header["kind"] == "dataset"
        assert header["leaves"] == ["done", "obs", "reward"]
        assert set(npz.files) == {"__manifest__"} | {
            f"shards/{name}/{leaf}" for name in ds.shards for leaf in header["leaves"]
        }
        for name in ds.shards:
            for leaf, value in ds.read_numpy(name, rows=[1], start=1, stop=4).items():
                np.testing.assert_array_equal(npz[f"shards/{name}/{leaf}"], value)
    one = tmp_path / "one"
    doc = checked(
        cli.json("export", folder / "ds", "--shard", "actor-1", "--format", "npy", "--out", one)
    )
    assert doc["shard"] == "actor-1"
    np.testing.assert_array_equal(np.load(one / "obs.npy"), ds.read_numpy("actor-1")["obs"])
    line = one_error_line(
        cli("export", folder / "ds", "--format", "minari", "--out", "x/y-v0", code=1)
    )
    assert "pass --shard NAME, or first gather every shard's episodes" in line
    assert f"`vault subsample {folder / 'ds'} --out VAULT`" in line


# ------------------------------------------------------------------------------------- slice
def test_slice_of_a_dataset_is_a_dataset(folder: Path, tmp_path: Path) -> None:
    cli, ds = Cli(), Dataset.open(str(folder / "ds"))
    out = tmp_path / "last4"
    doc = checked(cli.json("slice", folder / "ds", "--out", out, "--rows", "0", "--time", "-4:"))
    made = Dataset.open(str(out))
    assert doc["kind"] == "dataset"
    assert doc["shards"] == made.describe()["shards"]
    assert (doc["source"], doc["rows_selected"], doc["timesteps"]) == (ds.location, [0], 8)
    assert made.shards == ds.shards
    assert made.committed_lengths == {"actor-0": 4, "actor-1": 4}
    for name, n in LENGTHS.items():
        want = ds.read_numpy(name, rows=[0], start=n - 4, stop=n)
        for leaf, value in made.read_numpy(name).items():
            np.testing.assert_array_equal(value, want[leaf])
    assert doc["episodes"] == int(made.episodes().complete.sum())
    text = cli("slice", folder / "ds", "--out", tmp_path / "again", "--time", "0:8").stdout
    assert f"wrote {tmp_path / 'again'}: dataset of 2 shards, 32 timesteps" in text
    one = checked(
        cli.json(
            "slice", folder / "ds", "--shard", "actor-1", "--out", tmp_path / "v", "--time", "3:9"
        )
    )
    assert (one["shard"], one["committed"], one["time"]) == ("actor-1", 6, [3, 9])
    np.testing.assert_array_equal(
        Vault.open(str(tmp_path / "v")).read_numpy()["obs"],
        ds.read_numpy("actor-1", start=3, stop=9)["obs"],
    )
    line = one_error_line(
        cli("slice", folder / "ds", "--out", tmp_path / "x", "--time", "12:", code=1)
    )
    assert line.startswith("vault: shard 'actor-0': --time '12:'")
    assert not (tmp_path / "x").exists()


# ----------------------------------------------------------------------------------- combine
def test_combine_of_a_dataset_is_one_vault_of_every_shard(folder: Path, tmp_path: Path) -> None:
    cli, ds = Cli(), Dataset.open(str(folder / "ds"))
    doc = checked(cli.json("combine", folder / "ds", "--out", tmp_path / "c"))
    assert doc["sources"] == [ds.vault(n).location for n in ds.shards]
    assert (doc["rows"], doc["committed"]) == (2, 27)
    got = Vault.open(str(tmp_path / "c")).read_numpy()
    for leaf in ("obs", "reward", "done"):
        want = np.concatenate([ds.read_numpy(n)[leaf] for n in ds.shards], axis=1)
        np.testing.assert_array_equal(got[leaf], want)
    # a dataset among vaults stands for its shards, in order
    both = checked(cli.json("combine", folder / "ds", tmp_path / "c", "--out", tmp_path / "cc"))
    assert both["committed"] == 54
    assert len(both["sources"]) == 3
    mixed = make(tmp_path / "mixed", {"x": 4, "y": 4}, rows={"x": 2, "y": 3})
    line = one_error_line(cli("combine", mixed, "--out", tmp_path / "m", code=1))
    assert "these have [2, 3] rows" in line
    assert f"`vault subsample {mixed} --out VAULT`" in line
    assert not (tmp_path / "m").exists()


# ---------------------------------------------------------------------------------------- tag
def test_tag_pins_every_shard_and_info_verify_read_it(tmp_path: Path) -> None:
    cli, root = Cli(), make(tmp_path / "ds", {"a": 6, "b": 9})
    before = Dataset.open(str(root))
    doc = checked(cli.json("tag", root, "base"))
    assert (doc["kind"], doc["tag"], doc["timesteps"]) == ("dataset", "base", 30)
    assert {s["shard"]: s["commit"] for s in doc["shards"]} == before.commit_ids
    writer = Dataset.open(str(root))
    with writer.shard("a") as a:
        a.append(block(0, 2, 6, 4))
    with writer.shard("c") as c:
        c.append(block(2, 2, 0, 3))
    info = checked(cli.json("info", root, "--at", "base"))
    assert info["tag"] == "base"
    assert [(s["shard"], s["committed"], s["commit"]) for s in info["shards"]] == [
        ("a", 6, before.commit_ids["a"]),
        ("b", 9, before.commit_ids["b"]),
    ]
    text = " ".join(cli("info", root, "--at", "base").stdout.split())
    assert "dataset at tag base of 2 shards, 30 timesteps" in text
    verified = checked(cli.json("verify", root, "--at", "base"))
    assert verified["ok"]
    assert [(s["shard"], s["committed"]) for s in verified["shards"]] == [
        ("a", 6),
        ("b", 9),
    ]
    pinned = Dataset.open(str(root), at="base")
    np.testing.assert_array_equal(pinned.read_numpy("a")["obs"], block(0, 2, 0, 6)["obs"])
    # show, stats and episodes read the tagged commits too (shard c is not in them)
    shown = checked(cli.json("show", root, "--at", "base", "--leaf", "obs"))
    assert [(d["shard"], d["time"]) for d in shown["shards"]] == [("a", [0, 6]), ("b", [0, 9])]
    np.testing.assert_array_equal(
        np.array(shown["shards"][0]["leaves"][0]["values"]), block(0, 2, 0, 6)["obs"]
    )
    stats = checked(cli.json("stats", root, "--at", "base"))
    assert stats["timesteps"] == 30
    assert [s["shard"] for s in stats["shards"]] == ["a", "b"]
    table = checked(cli.json("episodes", root, "--at", "base", "--open", "--head", "0"))
    assert table["records"] == pinned.episodes(include_open=True).to_records()
    line = one_error_line(cli("stats", root, "--at", "1", code=1))
    assert "--at 1: a dataset is pinned by a tag" in line
    # a tag never moves: shard a is at a new commit now, so nothing is tagged
    line = one_error_line(cli("tag", root, "base", code=1))
    assert "tag 'base' already names other commits of shards a (" in line
    assert "base" not in Dataset.open(str(root)).vault("c").tags()
    # --at TAG: the tagged commits get another name
    again = checked(cli.json("tag", root, "first", "--at", "base"))
    assert {s["shard"]: s["commit"] for s in again["shards"]} == before.commit_ids
    text = cli("tag", root, "now").stdout
    assert "tag now -> the commits of 3 shards (44 timesteps)" in text
    line = one_error_line(cli("info", root, "--at", "1", code=1))
    assert "--at 1: a dataset is pinned by a tag" in line
    line = one_error_line(cli("verify", root, "--at", "nope", code=2))
    assert "no shard has the tag 'nope'" in line


# --------------------------------------------------------------------------------- unlock
def test_unlock_of_a_dataset_names_the_shard_to_unlock(folder: Path) -> None:
    line = one_error_line(Cli()("unlock", folder / "ds", "--yes", code=1))
    ds = folder / "ds"
    assert line == (
        f"vault: {ds} is a dataset of shards, each with its own writer lock: unlock the shard "
        f"whose writer died, `vault unlock {ds}/shards/NAME` (`vault ls {ds}` lists the shards)"
    )


# --------------------------------------------------------------------------------------- S3
def test_a_dataset_on_s3_is_listed_sliced_and_tagged(s3_env: Any) -> None:
    cli = Cli()
    prefix = f"s3://{s3_env.bucket}/cli-{uuid.uuid4().hex[:10]}"
    Dataset.create(f"{prefix}/ds", EXAMPLE, rows=2, done_leaf="done", reward_leaf="reward")
    writer = Dataset.open(f"{prefix}/ds")
    for index, (name, n) in enumerate({"a": 6, "b": 9}.items()):
        with writer.shard(name) as shard:
            shard.append(block(index, 2, 0, n))
    with Vault.create(f"{prefix}/v", EXAMPLE, rows=2) as plain:
        plain.append(block(5, 2, 0, 3))
    ds = Dataset.open(f"{prefix}/ds")
    entries = [checked(e) for e in cli.json("ls", prefix)]
    assert [(e["path"].rstrip("/"), e["kind"]) for e in entries] == [
        (f"{prefix}/ds", "dataset"),
        (f"{prefix}/v", "vault"),
    ]
    assert entries[0]["shards"] == ds.describe()["shards"]
    shards = cli.json("ls", f"{prefix}/ds")
    assert [(e["shard"], e["commit"]) for e in shards] == list(ds.commit_ids.items())
    doc = checked(cli.json("slice", f"{prefix}/ds", "--out", f"{prefix}/tail", "--time", "-2:"))
    made = Dataset.open(f"{prefix}/tail")
    assert doc["timesteps"] == 8
    assert made.committed_lengths == {"a": 2, "b": 2}
    np.testing.assert_array_equal(made.read_numpy("b")["obs"], block(1, 2, 7, 2)["obs"])
    tagged = checked(cli.json("tag", f"{prefix}/ds", "s3-tag"))
    assert {s["shard"]: s["commit"] for s in tagged["shards"]} == ds.commit_ids
    assert Dataset.open(f"{prefix}/ds", at="s3-tag").committed_lengths == {"a": 6, "b": 9}
