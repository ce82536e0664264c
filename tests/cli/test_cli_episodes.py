"""``vault stats``, ``vault episodes`` and ``vault plot``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from _cli_vaults import Cli, build, one_error_line, reference_episodes


def test_stats_json_matches_numpy(cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, data = vault_dir
    doc = cli.json("stats", path)
    assert doc["committed"] == 42
    by_name = {s["name"]: s for s in doc["leaves"]}
    assert set(by_name) == set(data)
    for name, values in data.items():
        s = by_name[name]
        as_float = values.astype(np.float64)
        assert s["count"] == values.size
        assert s["nan"] == 0
        assert s["inf"] == 0
        assert s["min"] == pytest.approx(as_float.min())
        assert s["max"] == pytest.approx(as_float.max())
        assert s["mean"] == pytest.approx(as_float.mean())
        assert s["std"] == pytest.approx(as_float.std())
    episodes = reference_episodes(data)
    lengths = np.array([e[2] for e in episodes])
    returns = np.array([e[3] for e in episodes])
    assert doc["episodes"] == len(episodes)  # complete ones, as every command counts them
    assert doc["truncated_episodes"] == sum(e[4] for e in episodes)
    assert doc["open_episodes"] == 3
    assert doc["episode_length"]["mean"] == pytest.approx(lengths.mean())
    assert doc["episode_return"]["max"] == pytest.approx(returns.max())
    only = cli.json("stats", path, "--leaf", "obs", "-l", "reward")
    assert [s["name"] for s in only["leaves"]] == ["obs", "reward"]


def test_stats_text(cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]]) -> None:
    out = cli("stats", vault_dir[0]).stdout
    for word in ("leaf", "mean", "std", "NaN", "Inf", "info/step", "episodes:", "return"):
        assert word in out


def test_stats_nan_and_inf_are_counted_and_json_stays_valid(cli: Cli, tmp_path: Path) -> None:
    from vault import Vault

    with Vault.create(str(tmp_path / "n"), {"x": np.float32(0)}, rows=1) as vault:
        vault.append({"x": np.array([[np.nan, np.inf, -np.inf, np.nan]], np.float32)})
    [leaf] = cli.json("stats", tmp_path / "n")["leaves"]
    assert (leaf["nan"], leaf["inf"], leaf["finite"]) == (2, 2, 0)
    assert leaf["mean"] is None
    assert leaf["min"] is None


def test_episodes_table_sort_head_open(
    cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]]
) -> None:
    path, data = vault_dir
    expected = reference_episodes(data)
    doc = cli.json("episodes", path, "--head", "0")
    got = [(r["row"], r["start"], r["length"], r["return"], r["truncated"]) for r in doc["records"]]
    assert [g[:3] + g[4:] for g in sorted(got)] == [e[:3] + e[4:] for e in sorted(expected)]
    assert [g[3] for g in sorted(got)] == pytest.approx([e[3] for e in sorted(expected)])
    assert (doc["episodes"], doc["open_episodes"]) == (len(expected), 3)
    best = cli.json("episodes", path, "--sort", "return", "--head", "3")["records"]
    assert [r["return"] for r in best] == pytest.approx(sorted(e[3] for e in expected)[::-1][:3])
    shortest = cli.json("episodes", path, "--sort", "length", "--ascending", "-n", "2")
    assert [r["length"] for r in shortest["records"]] == sorted(e[2] for e in expected)[:2]
    with_open = cli.json("episodes", path, "--open", "--head", "0")
    assert (with_open["episodes"], with_open["open_episodes"]) == (len(expected), 3)
    assert len(with_open["records"]) == len(expected) + 3
    assert sum(not r["complete"] for r in with_open["records"]) == 3
    text = cli("episodes", path, "--head", "4").stdout
    assert f"{len(expected) - 4} more (--head 0 shows all)" in text
    assert "truncated" in text


def test_episodes_errors(cli: Cli, tmp_path: Path) -> None:
    build(tmp_path / "plain", writes=(4,), episodes=False)
    assert "keeps no episode index" in one_error_line(cli("episodes", tmp_path / "plain", code=1))
    build(tmp_path / "e", writes=(4,))
    cli("episodes", tmp_path / "e", "--sort", "colour", code=1)
    cli("episodes", tmp_path / "e", "--head", "-1", code=1)


def _pixels(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"), dtype=np.float64)


def test_plot_writes_a_clear_figure(cli: Cli, tmp_path: Path) -> None:
    build(tmp_path / "v", rows=10, writes=(700, 500), seed=4)
    out = tmp_path / "figs" / "v.png"
    doc = cli.json("plot", tmp_path / "v", "--out", out)
    assert doc == {
        "path": str(tmp_path / "v"),
        "out": str(out),
        "width": 1200,
        "height": 800,
        "reward_leaf": "reward",
        "rows_drawn": 10,
        "reward_panel": "heat map",
        "seams_marked": 0,
    }
    pixels = _pixels(out)
    assert pixels.shape == (800, 1200, 3)
    assert pixels.std() > 20  # not blank: bars, lines and text on white
    colours = {tuple(p) for p in pixels[::7, ::7].reshape(-1, 3)}
    assert len(colours) > 50
    assert not list(out.parent.glob(".*"))  # no temporary file left next to it
    assert "wrote" in cli("plot", tmp_path / "v", "-o", tmp_path / "again.png").stdout


def test_plot_without_episode_index_or_reward(cli: Cli, tmp_path: Path) -> None:
    build(tmp_path / "plain", writes=(30,), episodes=False)
    out = tmp_path / "plain.png"
    cli("plot", tmp_path / "plain", "--out", out)  # reward leaf found by its name
    assert _pixels(out).std() > 10
    doc = cli.json(
        "plot", tmp_path / "plain", "-o", tmp_path / "x.png", "--reward", "obs", "--max-rows", "2"
    )
    assert (doc["reward_leaf"], doc["rows_drawn"], doc["reward_panel"]) == ("obs", 3, "heat map")
    line = one_error_line(
        cli("plot", tmp_path / "plain", "-o", tmp_path / "y.png", "--reward", "r", code=1)
    )
    assert "no leaf 'r'" in line
    assert ".png" in one_error_line(
        cli("plot", tmp_path / "plain", "-o", tmp_path / "a.jpg", code=1)
    )


def test_plot_without_matplotlib_says_how_to_get_it(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build(tmp_path / "v", writes=(3,))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    line = one_error_line(cli("plot", tmp_path / "v", "--out", tmp_path / "p.png", code=1))
    assert "pip install 'rlvault[plot]'" in line
    assert not (tmp_path / "p.png").exists()


def test_show_stats_and_episodes_of_an_older_commit(
    cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]]
) -> None:
    """--at reads the commit it names (a number, an id or a tag), as Vault.open(at=) does:
    here commit 2, the first two appends (27 of the 42 timesteps)."""
    from vault import Vault

    path, data = vault_dir
    pinned = Vault.open(str(path), at=2)
    assert pinned.committed_length == 27
    cli("tag", path, "early", "--at", "2")
    old = {k: v[:, :27] for k, v in data.items()}
    for at in ("2", pinned.commit_id, "early"):
        stats = cli.json("stats", path, "--at", at, "--leaf", "reward")
        assert stats["committed"] == 27
        (reward,) = stats["leaves"]
        assert reward["count"] == old["reward"].size
        assert reward["mean"] == pytest.approx(old["reward"].astype(np.float64).mean())
        assert stats["episodes"] == len(reference_episodes(old))
        shown = cli.json("show", path, "--at", at, "--leaf", "reward", "--time", "-3:")
        assert shown["time"] == [24, 27]
        np.testing.assert_array_equal(shown["leaves"][0]["values"], old["reward"][:, 24:27])
        table = cli.json("episodes", path, "--at", at, "--head", "0", "--open")
        assert table["records"] == pinned.episodes(include_open=True).to_records()
    latest = cli.json("episodes", path, "--head", "0")
    assert len(latest["records"]) == len(reference_episodes(data)) > stats["episodes"]
    line = one_error_line(cli("stats", path, "--at", "9", code=2))
    assert "9" in line
