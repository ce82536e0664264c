"""What a new user meets: one JSON vocabulary (the README's key table), tables that fit the
terminal, a plot that stays readable for many rows and for one, and messages that say what to
do next.

The vaults are built once per module (a small episode vault for the commands; a 64-row,
3,000-step one and a 1-row one for the plot).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _cli_vaults import Cli, build, one_error_line
from typer.testing import CliRunner

from vault import Vault
from vault.cli import app

# the JSON keys table lives in the docs' CLI guide (it was the README's)
README = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "cli-tour.md").read_text()
OLD_KEYS = {"location", "committed_length", "gaps", "selected", "complete", "open"}
JSON_TYPES = {
    "int": (int,),
    "number": (int, float),
    "string": (str,),
    "list": (list,),
    "object": (dict,),
    "bool": (bool,),
    "null": (type(None),),
}


def vocabulary(readme: str = README) -> dict[str, tuple[type, ...]]:
    """``{key: allowed Python types}`` from the README's table of JSON keys."""
    table = readme.split("| key | JSON type |", 1)[1].split("\n\n", 1)[0]
    keys: dict[str, tuple[type, ...]] = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        names = re.findall(r"`(\w+)`", cells[0])
        kinds = [k.strip() for k in cells[1].split(",")]
        assert len(kinds) in (1, len(names)), line
        for i, name in enumerate(names):
            words = kinds[i if len(kinds) > 1 else 0].split(" or ")
            keys[name] = tuple(t for w in words for t in JSON_TYPES[w])
    return keys


def check_schema(doc: dict[str, Any], vocab: dict[str, tuple[type, ...]]) -> None:
    for key, value in doc.items():
        assert key in vocab, f"{key!r} is not in the README's JSON key table"
        allowed = vocab[key]
        if isinstance(value, bool):
            assert bool in allowed, (key, value)
        else:
            assert isinstance(value, allowed), (key, value, allowed)
    assert not OLD_KEYS & set(doc)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ux")
    build(root / "v", writes=(13, 14, 15))
    # a nested vault, so that `vault ls` of this folder has the same path column whichever
    # tests ran before in this worker (the schema test adds vaults under json-out/)
    build(root / "json-out" / "n", writes=(4,))
    return root


def test_every_command_speaks_the_readme_vocabulary(shared: Path) -> None:
    vocab = vocabulary()
    assert {"path", "rows", "committed", "episodes", "open_episodes"} <= set(vocab)
    cli, v, out = Cli(), shared / "v", shared / "json-out"
    out.mkdir(exist_ok=True)
    docs = {
        "ls": cli.json("ls", shared),
        "info": cli.json("info", v),
        "show": cli.json("show", v, "--time", "0:2"),
        "stats": cli.json("stats", v),
        "episodes": cli.json("episodes", v, "--head", "3"),
        "plot": cli.json("plot", v, "--out", out / "p.png", "--force"),
        "verify": cli.json("verify", v),
        "slice": cli.json("slice", v, "--out", out / "s", "--time", "0:20"),
        "subsample": cli.json("subsample", v, "--out", out / "b", "--top-k", "2"),
        "combine": cli.json("combine", v, out / "s", "--out", out / "c"),
        "export": cli.json("export", v, "--out", out / "e.npz"),
        "tag": cli.json("tag", v, "schema-check"),
    }
    (listed,) = [e for e in docs.pop("ls") if e["path"] == str(v)]
    for doc in [listed, *docs.values()]:
        check_schema(doc, vocab)
    # The same facts under the same keys, whichever command is asked.
    same = ("path", "committed", "episodes", "open_episodes")
    facts = {name: {k: docs[name][k] for k in same if k in docs[name]} for name in docs}
    whole = {k: listed[k] for k in same}
    table = Vault.open(str(v)).episodes(include_open=True)
    assert whole["episodes"] == int(table.complete.sum())  # complete episodes only
    assert whole["open_episodes"] == int((~table.complete).sum()) == 3
    for name in ("info", "stats", "episodes", "verify"):
        assert facts[name] == {k: whole[k] for k in facts[name]}, name
    assert set(facts["verify"]) == {"path", "committed"}
    assert set(facts["stats"]) == set(same)


def test_the_readme_key_table_is_checked_as_parsed() -> None:
    vocab = vocabulary()
    assert vocab["committed"] == (int, type(None))
    assert vocab["seams"] == (list,)
    assert vocab["episode_leaves"] == (dict, type(None))
    with pytest.raises(AssertionError, match="not in the README"):
        check_schema({"committed_length": 3}, vocab)
    with pytest.raises(AssertionError):
        check_schema({"episodes": {"complete": 3}}, vocab)


def _run(columns: int, *args: Any) -> str:
    result = CliRunner().invoke(
        app, [str(a) for a in args], env={"COLUMNS": str(columns), "NO_COLOR": "1"}
    )
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("command", ["ls", "info", "episodes"])
def test_tables_fit_80_columns_and_use_200(shared: Path, command: str) -> None:
    target = shared if command == "ls" else shared / "v"
    narrow, wide = _run(80, command, target), _run(200, command, target)
    assert max(map(len, narrow.splitlines())) <= 80
    if command == "ls":
        head = next(line for line in narrow.splitlines() if "path" in line).split()
        assert head == ["path", "rows", "committed", "episodes", "disk", "raw"]
        assert "(hidden to fit: created, format, leaves, ratio, rlvault; see --json)" in narrow
        head = next(line for line in wide.splitlines() if "path" in line).split()
        assert head[-5:] == ["created", "format", "leaves", "ratio", "rlvault"]
        assert "hidden" not in wide
        assert re.search(r" v +3 +42 .* \d{4}-\d\d-\d\d \d\d:\d\d ", wide)
    elif command == "info":
        codecs = "blosc(zstd-1, shuffle) + crc32c"
        # 80 columns: each leaf's storage on its own line, never cut mid-word.
        assert re.search(
            r"obs  float32 \[3, 42, 2\]  raw .*\n.*chunk \[1, 8, 2\]  " + re.escape(codecs), narrow
        )
        # 200 columns: one line per leaf.
        assert re.search(
            r"obs  float32 \[3, 42, 2\]  chunk \[1, 8, 2\]  " + re.escape(codecs) + "  raw", wide
        )
    else:
        assert "start known" in wide
        assert " row " in narrow
        assert "complete episodes" in narrow


def _pixels(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"), dtype=np.int64)


def _reward_vault(path: Path, rows: int, steps: int) -> None:
    rng = np.random.default_rng(1)
    one = {"reward": np.float32(0), "done": np.bool_(False)}
    with Vault.create(str(path), one, rows=rows, done_leaf="done", reward_leaf="reward") as v:
        goal = rng.random((rows, steps)) < np.linspace(0.02, 0.2, rows)[:, None]
        v.append({"reward": np.where(goal, 1.0, -0.02).astype(np.float32), "done": goal})


@pytest.mark.parametrize(("rows", "panel"), [(64, "heat map"), (1, "lines")])
def test_plot_reward_panel_stays_readable(tmp_path: Path, rows: int, panel: str) -> None:
    _reward_vault(tmp_path / "v", rows, 3000)
    out = tmp_path / "v.png"
    doc = Cli().json("plot", tmp_path / "v", "--out", out)
    assert (doc["rows_drawn"], doc["reward_panel"]) == (rows, panel)
    pixels = _pixels(out)
    bottom = pixels[600:760, 80:1050]  # inside the lowest panel
    white = (bottom.min(axis=2) > 235).mean()
    if panel == "heat map":
        # Every row over time, coloured: the panel is filled, not a tangle of lines on white,
        # and rows that reach the goal more often (higher rows here) are brighter.
        assert white < 0.05
        brightness = bottom.sum(axis=2)
        assert brightness[-40:].mean() > brightness[:40].mean() + 30
    else:
        assert white > 0.6  # one line (and its grid) on white


def test_plot_refuses_to_overwrite_without_force(shared: Path, tmp_path: Path) -> None:
    cli, out = Cli(), tmp_path / "p.png"
    out.write_bytes(b"mine")
    line = one_error_line(cli("plot", shared / "v", "--out", out, code=1))
    assert (
        line
        == f"vault: {out} already exists; pass --force to overwrite it, or choose another --out"
    )
    assert out.read_bytes() == b"mine"
    cli("plot", shared / "v", "--out", out, "--force")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    line = one_error_line(cli("plot", shared / "v", "--out", tmp_path / "p.jpg", code=1))
    assert line.endswith(f"e.g. --out {tmp_path / 'p.png'}")


def test_ls_messages_name_the_fix(tmp_path: Path) -> None:
    cli = Cli()
    line = one_error_line(cli("ls", tmp_path / "nowhere", code=2))
    assert line == (
        f"vault: {tmp_path / 'nowhere'}: no such file or directory; pass a folder that exists "
        "(`vault ls` alone searches the current one)"
    )
    (tmp_path / "f").write_text("x")
    line = one_error_line(cli("ls", tmp_path / "f", code=2))
    assert line == (
        f"vault: {tmp_path / 'f'} is a file, not a folder; `vault ls` searches a folder "
        "(pass the folder that holds your vaults)"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--rows", "5:2"],
            (
                "vault: --rows '5:2': the start (5) is after the stop (2); "
                "put the smaller index first, e.g. --rows 2:5"
            ),
        ),
        (
            ["--time", "30:10"],
            (
                "vault: --time '30:10': the start (30) is after the stop (10); "
                "put the smaller index first, e.g. --time 10:30"
            ),
        ),
        (
            ["--time", "0:99"],
            (
                "vault: --time '0:99' is outside the vault's 42 timesteps [0, 42); pick a range "
                "inside it, e.g. --time 0:42 (negative numbers count from the end)"
            ),
        ),
    ],
)
def test_slice_ranges_say_what_is_wrong(tmp_path: Path, args: list[str], message: str) -> None:
    big = tmp_path / "six"
    build(big, rows=6, writes=(42,))
    line = one_error_line(Cli()("slice", big, "--out", tmp_path / "o", *args, code=1))
    assert line == message
    assert not (tmp_path / "o").exists()
