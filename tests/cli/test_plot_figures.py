"""The figures ``vault plot`` draws, judged as a reader sees them.

Vaults that stress the drawing (one row and 64; a handful and thousands of episodes; rewards
all NaN, infinite, piled up at the best return, rising; long paths, long escaped leaf names,
a dataset of shards with long names, an empty vault) are plotted through the command. The
figure it saves is caught on its way to the PNG (a spy on ``Figure.savefig`` that records the
figure and saves it as before), so its geometry can be measured with matplotlib's own
renderer: every text inside the canvas, no two texts on top of each other, legends off the
data, titles that count what the vault holds, and ``--json`` that agrees with the PNG.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
from _cli_vaults import Cli

from vault import Dataset, Vault

ONE = {"reward": np.float32(0), "done": np.bool_(False)}
LONG_SHARDS = [  # 73 characters, as "actor-host-pid" names of a cluster's hosts are
    f"actor-{i}-on-host-gpu-node-{i:03d}.rack-17.eu-west.cluster.example.org-pid-{4000 + i}"
    for i in range(5)
]
TOLERANCE = 1.0  # pixels: text may touch an edge or a neighbour, not cross it


# ------------------------------------------------------------------------------ helpers
def make(
    path: Path, reward: np.ndarray, done: np.ndarray, *, key: str = "reward"
) -> tuple[Path, str]:
    """A vault of ``reward`` (under dict key ``key``) and ``done``, with an episode index;
    returns its path and the reward leaf's name (the escaped key)."""
    leaf = quote(key, safe="")
    example = {key: np.float32(0), "done": np.bool_(False)}
    with Vault.create(
        str(path), example, rows=reward.shape[0], done_leaf="done", reward_leaf=leaf
    ) as vault:
        if reward.shape[1]:
            vault.append({key: reward.astype(np.float32), "done": done})
    return path, leaf


class Drawn:
    """One run of ``vault plot --json``: its JSON, the figure it saved, the PNG and every
    warning raised while drawing."""

    def __init__(self, doc: dict[str, Any], fig: Any, png: Path, caught: list[Any]) -> None:
        self.doc, self.fig, self.png = doc, fig, png
        self.warnings = [w for w in caught if issubclass(w.category, RuntimeWarning)]

    @property
    def axes(self) -> list[Any]:
        return list(self.fig.axes)

    def renderer(self) -> Any:
        return self.fig.canvas.get_renderer()


@pytest.fixture(scope="module")
def plot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``plot(path, *options) -> Drawn``: runs ``vault plot`` in-process with a spy on
    ``Figure.savefig`` (it records the figure, then saves it unchanged)."""
    from matplotlib.figure import Figure

    out_dir = tmp_path_factory.mktemp("plot-figures-png")
    saved: list[Any] = []
    original = Figure.savefig

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        saved.append(self)
        return original(self, *args, **kwargs)

    cli = Cli()

    def run(path: Path, *options: str) -> Drawn:
        png = out_dir / f"{len(list(out_dir.iterdir()))}.png"
        saved.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            doc = cli.json("plot", path, "--out", png, *options)
        assert len(saved) == 1
        return Drawn(doc, saved[0], png, list(caught))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Figure, "savefig", spy)
        yield run


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("plot-figures")


def boxes(drawn: Drawn) -> list[tuple[str, Any]]:
    """Every text a reader sees, ``(what, window extent in pixels)``: the figure's title,
    each panel's title, axis labels, tick labels in view, messages, and legends (whole)."""
    from matplotlib.text import Text

    renderer, fig = drawn.renderer(), drawn.fig
    out: list[tuple[str, Any]] = []

    def add(name: str, artist: Any) -> None:
        if artist is None or not artist.get_visible():
            return
        if isinstance(artist, Text) and not artist.get_text().strip():
            return
        out.append((name, artist.get_window_extent(renderer)))

    for text in fig.findobj(Text):
        if text.get_text() == fig.get_suptitle():
            add("figure title", text)
    for i, ax in enumerate(fig.axes):
        add(f"panel {i} title", ax.title)
        add(f"panel {i} x label", ax.xaxis.label)
        add(f"panel {i} y label", ax.yaxis.label)
        add(f"panel {i} legend", ax.get_legend())
        for j, text in enumerate(ax.texts):
            add(f"panel {i} message {j}", text)
        for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            lo, hi = min(lo, hi), max(lo, hi)
            for tick in axis.get_major_ticks():
                if lo - 1e-9 * (hi - lo) <= tick.get_loc() <= hi + 1e-9 * (hi - lo):
                    for label in (tick.label1, tick.label2):
                        add(f"panel {i} {axis.axis_name} tick {label.get_text()!r}", label)
    return out


def outside(drawn: Drawn) -> list[str]:
    """Texts that reach past the canvas, with how far."""
    width, height = drawn.fig.canvas.get_width_height()
    out = []
    for name, box in boxes(drawn):
        over = max(-box.x0, -box.y0, box.x1 - width, box.y1 - height)
        if over > TOLERANCE:
            out.append(f"{name}: {over:.0f} px past the edge")
    return out


def overlaps(drawn: Drawn) -> list[str]:
    """Pairs of texts drawn on top of each other."""
    found = boxes(drawn)
    out = []
    for i, (a, box_a) in enumerate(found):
        for b, box_b in found[i + 1 :]:
            dx = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
            dy = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
            if dx > TOLERANCE and dy > TOLERANCE:
                out.append(f"{a} / {b}")
    return out


def png_size(path: Path) -> tuple[int, int]:
    from PIL import Image

    with Image.open(path) as image:
        return image.size


def title_numbers(text: str) -> list[int]:
    """The whole numbers of a panel's title's first line (its counts)."""
    return [int(n) for n in re.findall(r"\d+", text.splitlines()[0])]


def title_mean(ax: Any) -> str:
    """The mean a histogram's title gives (its second line: "mean M (dashed)")."""
    found = re.fullmatch(r"mean (\S+) \(dashed\)", ax.get_title().splitlines()[1])
    assert found, ax.get_title()
    return found.group(1)


# ------------------------------------------------------------------------------ vaults
@pytest.fixture(scope="module")
def one_row(root: Path, plot: Any) -> Drawn:
    rng = np.random.default_rng(0)
    path, _ = make(root / "one-row", rng.normal(size=(1, 600)), rng.random((1, 600)) < 0.05)
    return plot(path)


@pytest.fixture(scope="module")
def many_rows(root: Path) -> Path:
    """64 rows x 150 steps, an episode ends at one step in three: thousands of episodes."""
    rng = np.random.default_rng(1)
    path, _ = make(root / "rows64", rng.normal(size=(64, 150)), rng.random((64, 150)) < 0.3)
    return path


@pytest.fixture(scope="module")
def heat(many_rows: Path, plot: Any) -> Drawn:
    return plot(many_rows)


@pytest.fixture(scope="module")
def handful(root: Path, plot: Any) -> Drawn:
    """One row, 8 steps, rewards 1..8; episodes end at t=2 and t=6: returns 6 and 22,
    lengths 3 and 4."""
    reward = np.arange(1, 9, dtype=np.float64)[None]
    done = np.isin(np.arange(8), [2, 6])[None]
    return plot(make(root / "handful", reward, done)[0])


@pytest.fixture(scope="module")
def shards(root: Path) -> Path:
    """A dataset of five shards with long names (as a default host-pid shard name is)."""
    rng = np.random.default_rng(2)
    dataset = Dataset.create(str(root / "ds"), ONE, rows=2, done_leaf="done", reward_leaf="reward")
    for i, name in enumerate(LONG_SHARDS):
        n = 60 + 25 * i  # the longest (160 steps) is binned on the heat map
        with dataset.shard(name) as writer:
            writer.append(
                {
                    "reward": rng.normal(size=(2, n)).astype(np.float32),
                    "done": rng.random((2, n)) < 0.15,
                }
            )
    return root / "ds"


# ------------------------------------------------------------------ promises that hold
@pytest.mark.parametrize("which", ["one_row", "heat"])
def test_json_agrees_with_the_png(which: str, request: pytest.FixtureRequest) -> None:
    drawn: Drawn = request.getfixturevalue(which)
    rows = 1 if which == "one_row" else 64
    assert png_size(drawn.png) == (drawn.doc["width"], drawn.doc["height"]) == (1200, 800)
    assert drawn.doc["rows_drawn"] == rows
    assert drawn.doc["reward_panel"] == ("lines" if rows <= 3 else "heat map")
    assert drawn.png.stat().st_size < 1 << 20  # a figure, not a megabyte of noise
    if rows == 1:
        reward_ax = drawn.axes[2]
        assert [line.get_label() for line in reward_ax.get_lines()] == ["row 0"]
    else:
        # the heat map has one image row per vault row; the band says over how many
        [image] = drawn.axes[3].get_images()
        assert image.get_array().shape[0] == 64
        assert "across 64 rows" in drawn.axes[2].get_title()


@pytest.mark.parametrize("which", ["one_row", "heat"])
def test_ordinary_figures_keep_every_text_inside_and_apart(
    which: str, request: pytest.FixtureRequest
) -> None:
    drawn: Drawn = request.getfixturevalue(which)
    assert outside(drawn) == []
    assert overlaps(drawn) == []
    assert drawn.warnings == []


def test_titles_count_thousands_of_episodes(heat: Drawn, many_rows: Path) -> None:
    table = Vault.open(str(many_rows)).episodes()
    complete = int(np.asarray(table.complete).sum())
    assert complete > 2000
    returns = np.asarray(table.returns, np.float64)[np.asarray(table.complete, bool)]
    assert f"{complete} complete episodes" in heat.fig.get_suptitle()
    ret_ax, len_ax = heat.axes[:2]
    assert title_numbers(ret_ax.get_title()) == [complete]
    assert title_numbers(len_ax.get_title()) == [complete]
    assert title_mean(ret_ax) == f"{returns.mean():.3g}"


def test_a_handful_of_episodes_is_counted_and_averaged(handful: Drawn) -> None:
    ret_ax, len_ax = handful.axes[:2]
    assert "2 complete episodes" in handful.fig.get_suptitle()
    assert title_mean(ret_ax) == "14"
    assert title_mean(len_ax) == "3.5"
    heights = sorted(p.get_height() for p in len_ax.patches if p.get_height() > 0)
    assert heights == [1, 1]  # one bar per length: 3 and 4


def test_an_empty_vault_gets_a_message_in_every_panel(root: Path, plot: Any) -> None:
    path, _ = make(root / "empty", np.zeros((2, 0)), np.zeros((2, 0), bool))
    drawn = plot(path)
    assert png_size(drawn.png) == (drawn.doc["width"], drawn.doc["height"])
    assert "0 complete episodes" in drawn.fig.get_suptitle()
    for ax in drawn.axes:
        assert [t.get_text() for t in ax.texts], ax.get_title()
    assert outside(drawn) == []


def test_a_dataset_heat_map_names_each_of_its_few_shards(shards: Path, plot: Any) -> None:
    drawn = plot(shards)
    assert drawn.doc["kind"] == "dataset"
    assert drawn.doc["rows_drawn"] == 2 * len(LONG_SHARDS)
    assert drawn.doc["reward_panel"] == "heat map"
    heat_ax = drawn.axes[3]
    names = [t.get_text() for t in heat_ax.get_yticklabels()]
    assert len(names) == len(LONG_SHARDS)
    for name, shard in zip(names, sorted(LONG_SHARDS), strict=True):  # both ends kept
        head, tail = name.split("…")
        assert shard.startswith(head)
        assert shard.endswith(tail)
        assert len(name) <= 24


# ------------------------------------------------------------------------------ bugs
def test_a_long_vault_path_stays_inside_the_figure(root: Path, plot: Any) -> None:
    deep = root / ("experiment-" * 16) / "run-2024-06-01-seed-12345-lr-3e-4"
    deep.parent.mkdir()
    rng = np.random.default_rng(3)
    drawn = plot(make(deep, rng.normal(size=(1, 40)), rng.random((1, 40)) < 0.2)[0])
    assert outside(drawn) == []


def test_a_long_reward_leaf_name_stays_inside_the_figure(root: Path, plot: Any) -> None:
    key = "reward of the agent, clipped to [-1, 1] & summed over 4 skipped frames: $r_t$"
    rng = np.random.default_rng(4)
    path, leaf = make(
        root / "long-leaf", rng.normal(size=(2, 40)), rng.random((2, 40)) < 0.2, key=key
    )
    drawn = plot(path)
    assert drawn.doc["reward_leaf"] == leaf
    title = drawn.axes[2].get_title()
    head, tail = title.split("'")[1].split("…")  # shortened in its middle, both ends kept
    assert leaf.startswith(head)
    assert leaf.endswith(tail)
    assert tail.endswith("%24r_t%24")  # verbatim: a '$' is not mathtext
    assert outside(drawn) == []


def test_a_dataset_with_long_shard_names_as_lines_keeps_titles_apart(
    shards: Path, plot: Any
) -> None:
    drawn = plot(shards, "--max-rows", "8")
    assert drawn.doc["reward_panel"] == "lines"
    assert overlaps(drawn) == []


def test_a_dataset_with_long_shard_names_as_heat_map_stays_inside(shards: Path, plot: Any) -> None:
    drawn = plot(shards)
    assert outside(drawn) == []


def test_twenty_four_shard_names_do_not_overlap(root: Path, plot: Any) -> None:
    dataset = Dataset.create(
        str(root / "ds24"), ONE, rows=1, done_leaf="done", reward_leaf="reward"
    )
    for i in range(24):
        with dataset.shard(f"actor-{i:02d}") as writer:
            writer.append(
                {"reward": np.full((1, 6), float(i), np.float32), "done": np.ones((1, 6), bool)}
            )
    drawn = plot(root / "ds24")
    assert drawn.doc["reward_panel"] == "heat map"
    # more shards than the panel's height can name apart: numbered, not named on top of
    # each other
    assert not any(t.get_text().startswith("actor") for t in drawn.axes[3].get_yticklabels())
    assert overlaps(drawn) == []


def test_many_rows_drawn_as_lines_keep_their_legend_inside(many_rows: Path, plot: Any) -> None:
    drawn = plot(many_rows, "--max-rows", "64")
    assert drawn.doc["reward_panel"] == "lines"
    assert outside(drawn) == []
    assert overlaps(drawn) == []


def test_histogram_legends_do_not_cover_the_bars(root: Path, plot: Any) -> None:
    rng = np.random.default_rng(5)
    reward = np.zeros((4, 200))
    reward[:, 19::20] = np.where(rng.random((4, 10)) < 0.9, 1.0, rng.random((4, 10)))
    done = np.broadcast_to(np.arange(200) % 20 == 19, (4, 200))
    drawn = plot(make(root / "solved", reward, done)[0])
    renderer = drawn.renderer()
    covered = []
    for ax in drawn.axes[:2]:
        legend = ax.get_legend()  # the mean is in the title: no legend, or one clear of bars
        if legend is None:
            continue
        box = legend.get_window_extent(renderer)
        for bar in ax.patches:
            if bar.get_height() > 0 and box.overlaps(bar.get_window_extent(renderer)):
                covered.append((ax.get_title(), bar.get_x(), bar.get_height()))
    assert covered == []
    assert title_mean(drawn.axes[0])  # the mean is still given


def test_band_legend_does_not_cover_a_rising_mean(root: Path, plot: Any) -> None:
    rng = np.random.default_rng(6)
    reward = np.linspace(0, 1, 120)[None] + 0.05 * rng.normal(size=(8, 120))
    drawn = plot(make(root / "rising", reward, rng.random((8, 120)) < 0.1)[0])
    band = drawn.axes[2]
    [mean] = [line for line in band.get_lines() if line.get_label() == "mean"]
    legend = band.get_legend().get_window_extent(drawn.renderer())
    points = band.transData.transform(mean.get_xydata())
    inside = (
        (points[:, 0] >= legend.x0)
        & (points[:, 0] <= legend.x1)
        & (points[:, 1] >= legend.y0)
        & (points[:, 1] <= legend.y1)
    )
    assert not inside.any(), f"{inside.sum()} of {len(points)} points of the mean under it"


def test_histogram_axes_tick_at_whole_numbers(handful: Drawn) -> None:
    fractional = []
    ret_ax, len_ax = handful.axes[:2]
    for name, ax, axis in (
        ("return counts", ret_ax, "y"),
        ("length counts", len_ax, "y"),
        ("lengths", len_ax, "x"),
    ):
        ticks = ax.get_yticks() if axis == "y" else ax.get_xticks()
        lo, hi = sorted(ax.get_ylim() if axis == "y" else ax.get_xlim())
        shown = [t for t in ticks if lo <= t <= hi]
        fractional += [f"{name}: {t:g}" for t in shown if t != round(t)]
    assert fractional == []


@pytest.fixture(scope="module")
def all_nan(root: Path) -> Path:
    rng = np.random.default_rng(7)
    return make(root / "all-nan", np.full((2, 40), np.nan), rng.random((2, 40)) < 0.2)[0]


@pytest.mark.parametrize("case", ["all NaN", "no steps"])
def test_the_return_panel_does_not_deny_a_recorded_reward_leaf(
    case: str, all_nan: Path, root: Path, plot: Any
) -> None:
    if case == "all NaN":
        path = all_nan
    else:
        path, _ = make(root / "no-steps", np.zeros((1, 0)), np.zeros((1, 0), bool))
    drawn = plot(path)
    assert drawn.doc["reward_leaf"] == "reward"
    messages = " ".join(t.get_text() for t in drawn.axes[0].texts)
    assert messages  # the panel is empty and says why
    assert "no reward leaf" not in messages


@pytest.mark.parametrize("max_rows", ["3", "1"])
def test_all_nan_rewards_get_a_message_not_an_empty_axis(
    max_rows: str, all_nan: Path, plot: Any
) -> None:
    drawn = plot(all_nan, "--max-rows", max_rows)
    assert [str(w.message) for w in drawn.warnings] == []
    reward_ax = drawn.axes[2]
    assert [t.get_text() for t in reward_ax.texts]  # says the rewards are all NaN


def test_the_return_title_counts_every_complete_episode(root: Path, plot: Any) -> None:
    reward = np.ones((2, 40))
    reward[0, 5] = np.inf
    reward[1, 25] = -np.inf
    done = np.broadcast_to(np.arange(40) % 10 == 9, (2, 40))
    drawn = plot(make(root / "inf", reward, done)[0])
    assert "8 complete episodes" in drawn.fig.get_suptitle()
    assert 8 in title_numbers(drawn.axes[0].get_title())  # "6 of 8 ...", not "6 complete"


def test_plot_at_an_older_commit_draws_that_commit(root: Path, plot: Any) -> None:
    """``--at`` as the other commands take it: the figure of an older commit (its episodes
    and rewards, not those appended since), and the title says which."""
    path, _ = make(root / "pinned", np.ones((1, 20)), np.arange(20)[None] % 5 == 4)  # 4 eps
    with Vault.open(str(path), mode="a") as vault:  # commit 2: 6 more episodes, rewards 3
        vault.append({"reward": np.full((1, 30), 3, np.float32), "done": np.ones((1, 30), bool)})
    now, then = plot(path), plot(path, "--at", "1")
    assert "50 timesteps, 34 complete episodes" in now.fig.get_suptitle()
    assert f"{path} at 1\n1 row x 20 timesteps, 4 complete episodes" == then.fig.get_suptitle()
    assert title_mean(then.axes[0]) == "5"  # returns of 5 ones, none of the later 3s


@pytest.mark.parametrize("rows", [2, 8], ids=["lines", "heat map"])
def test_seams_are_marked_and_no_line_joins_their_two_sides(
    root: Path, plot: Any, rows: int
) -> None:
    """A seam (here the rows restarted at 40 and at 70) is a dotted line across the reward
    panels, named once in the legend; no reward line is drawn across it, so a jump there is
    not read as the agent's; --json counts the seams."""
    from matplotlib.collections import LineCollection

    path = root / f"seams{rows}"
    with Vault.create(str(path), ONE, rows=rows, done_leaf="done", reward_leaf="reward") as vault:
        for k, (n, continues) in enumerate([(40, True), (30, False), (30, False)]):
            reward = np.full((rows, n), k, np.float32)
            vault.append({"reward": reward, "done": np.zeros((rows, n), bool)}, continues=continues)
    assert [(s.at, s.lost) for s in Vault.open(str(path)).seams] == [(40, 0), (70, 0)]
    drawn = plot(path)
    assert drawn.doc["seams_marked"] == 2
    panels = [ax for ax in drawn.axes if ax.get_ylabel() in ("reward", "row")]
    assert len(panels) == (1 if rows == 2 else 2), [ax.get_ylabel() for ax in drawn.axes]
    for ax in panels:
        marks = [c for c in ax.collections if isinstance(c, LineCollection)]
        xs = sorted(float(seg[0][0]) for c in marks for seg in c.get_segments())
        assert xs == [39.5, 69.5], ax.get_ylabel()
    legend = [t.get_text() for t in panels[0].get_legend().get_texts()]
    assert [text for text in legend if "seam" in text] == ["2 seams (rows restarted)"]
    for line in panels[0].get_lines():  # the rows' lines and their mean
        x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
        for cut, before, after in [(39.5, 0, 1), (69.5, 1, 2)]:
            assert (x == cut).sum() == 1, (line, cut)
            assert np.isnan(y[x == cut]).all(), (line, cut)
            below, above = x < cut, x > cut  # each side keeps its own level up to the seam
            assert y[below][-1] == before, (line, cut)
            assert y[above][0] == after, (line, cut)
