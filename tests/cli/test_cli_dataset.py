"""The ``vault`` command on a dataset of shards: info, verify, stats and episodes take the
dataset's root and report every shard (with the JSON keys of the README's table)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from _cli_vaults import Cli, one_error_line
from test_cli_ux import check_schema, vocabulary

from vault import Dataset

EXAMPLE = {"obs": np.zeros((2,), np.float32), "reward": np.float32(0), "done": np.bool_(False)}


def data(index: int, rows: int, n: int) -> dict[str, np.ndarray]:
    t = np.arange(n)[None, :] + np.zeros((rows, 1), np.int64)
    return {
        "obs": np.stack([t + index, t * 2.0], axis=-1).astype(np.float32),
        "reward": (t % 3 == 0).astype(np.float32),
        "done": (t % 4) == 3,
    }


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli-ds") / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=2, done_leaf="done", reward_leaf="reward")
    for index, n in enumerate((10, 17)):
        with ds.shard(f"actor-{index}") as writer:
            writer.append(data(index, 2, n))
    return root


def test_info_lists_the_shards(dataset: Path) -> None:
    cli = Cli()
    doc = cli.json("info", dataset)
    check_schema(doc, vocabulary())
    assert doc["kind"] == "dataset"
    assert [(s["shard"], s["rows"], s["committed"]) for s in doc["shards"]] == [
        ("actor-0", 2, 10),
        ("actor-1", 2, 17),
    ]
    assert doc["timesteps"] == 2 * 27
    text = cli("info", dataset).stdout
    assert "dataset of 2 shards, 54 timesteps" in text
    assert "actor-1" in text
    assert "--at" in one_error_line(cli("info", dataset, "--at", "1", code=1))


def test_verify_checks_every_shard_and_names_a_damaged_one(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=2)
    for index in range(2):
        with ds.shard(f"a-{index}") as writer:
            writer.append(data(index, 2, 9000))  # complete chunks to damage
    cli = Cli()
    doc = cli.json("verify", root)
    check_schema(doc, vocabulary())
    assert doc["ok"] is True
    assert [s["ok"] for s in doc["shards"]] == [True, True]
    assert "sound" in cli("verify", root).stdout
    chunk = next(
        os.path.join(d, f)
        for d, _, files in os.walk(root / "shards" / "a-1" / "experience" / "obs" / "c")
        for f in files
    )
    with open(chunk, "r+b") as f:
        f.seek(20)
        f.write(b"\xff\xff\xff\xff")
    doc = cli.json("verify", root, code=3)
    assert [s["ok"] for s in doc["shards"]] == [True, False]
    assert doc["shards"][1]["problems"]
    assert "1 shard with problems" in cli("verify", root, code=3).stdout


def test_stats_and_episodes_span_the_shards(dataset: Path) -> None:
    cli = Cli()
    doc = cli.json("stats", dataset)
    check_schema(doc, vocabulary())
    obs = np.concatenate([data(i, 2, n)["obs"].ravel() for i, n in enumerate((10, 17))])
    stats = {s["name"]: s for s in doc["leaves"]}
    assert stats["obs"]["count"] == obs.size
    assert stats["obs"]["mean"] == pytest.approx(float(obs.astype(np.float64).mean()))
    assert doc["episodes"] == 2 * (2 + 4)
    episodes = cli.json("episodes", dataset, "--head", "0")
    check_schema(episodes, vocabulary())
    shards = [r["shard"] for r in episodes["records"]]
    assert shards == ["actor-0"] * 4 + ["actor-1"] * 8
    text = cli("episodes", dataset, "--sort", "length").stdout
    assert "12 complete episodes in 2 shards" in " ".join(text.split())


def test_subsample_copies_selected_episodes_of_every_shard(dataset: Path, tmp_path: Path) -> None:
    cli = Cli()
    out = tmp_path / "best"
    doc = cli.json("subsample", dataset, "--out", out, "--min-length", "4")
    check_schema(doc, vocabulary())
    assert doc["episodes_selected"] == 12  # every episode of both shards is 4 steps long
    made = Dataset.open(str(dataset)).episodes()
    assert cli.json("info", out)["committed"] == made.transitions
