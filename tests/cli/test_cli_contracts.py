"""The ``vault`` command's contracts where they meet the rest of the library: ``--json`` is one
JSON document on stdout in the vocabulary of the CLI tour's key table, for a vault, a pinned
vault (``--at``), an empty vault, a vault without an episode index and a dataset of shards (at
a tag too); every key any command prints is in that table, meaning one thing; failures exit
with their documented code in one line (a dataset's ``--at``/``--shard``, Ctrl-C at the
``unlock`` prompt); output through a pipe keeps paths whole (long paths, spaces, unicode,
``[``/``]``), and so does ``vault ls`` at 80 columns; local paths with a backslash or ``$``
signs; the open episodes of a dataset; the examples in the help texts run as written; and the
read-only commands write nothing (bytes and mtimes of the whole tree).

The vaults are built once per module with the public API; the dataset's values say where they
belong (``obs = 1000 * shard + 100 * row + t``), so what a command shows is compared with that
model. Real processes (``python -m vault`` with pipes, a pseudo-terminal for the prompt) only
where a terminal or a pipe is the point; the S3 server fixture where ``unlock`` needs it.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _cli_vaults import build, one_error_line
from test_cli_ux import check_schema, vocabulary
from typer.testing import CliRunner

from vault import Dataset, Vault
from vault.cli import app

PY_VAULT = [sys.executable, "-m", "vault"]
EX = {"obs": np.zeros((), np.float32), "reward": np.float32(0), "done": np.bool_(False)}
ROLES: dict[str, Any] = {"done_leaf": "done", "reward_leaf": "reward"}
SHARDS = {"a": 7, "b": 5}  # timesteps at the tag "t"; shard "a" then grows by 3
GROWTH = 3


def shard_data(shard: int, rows: int, t0: int, n: int) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)``: obs = 1000 * shard + 100 * row + t; done every 3rd step."""
    t = np.arange(t0, t0 + n)[None, :] + np.zeros((rows, 1), np.int64)
    row = np.arange(rows)[:, None] + np.zeros((1, n), np.int64)
    return {
        "obs": (1000 * shard + 100 * row + t).astype(np.float32),
        "reward": np.ones((rows, n), np.float32),
        "done": t % 3 == 2,
    }


def model_episodes(lengths: list[int], rows: int = 2) -> tuple[int, int]:
    """(complete, open) episodes of shards of these lengths (done at t % 3 == 2)."""
    complete = sum(rows * (n // 3) for n in lengths)
    opened = sum(rows for n in lengths if n % 3)
    return complete, opened


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``v`` (3 rows, commits of 6 and 11 timesteps, tag ``half`` at the first), ``empty``
    (0 timesteps), ``noeps`` (no episode index) and ``ds`` (shards ``a``, ``b`` tagged ``t``,
    then ``a`` grown)."""
    root = tmp_path_factory.mktemp("contracts")
    build(root / "v", writes=(6, 5))
    Vault.open(str(root / "v"), at=1).tag("half")
    Vault.create(str(root / "empty"), EX, rows=2, **ROLES).close()
    build(root / "noeps", writes=(6,), episodes=False)
    ds = Dataset.create(str(root / "ds"), EX, rows=2, **ROLES)
    for index, (name, n) in enumerate(SHARDS.items()):
        with ds.shard(name) as shard:
            shard.append(shard_data(index, 2, 0, n))
    Dataset.open(str(root / "ds")).tag("t")
    with Dataset.open(str(root / "ds")).shard("a") as shard:
        shard.append(shard_data(0, 2, SHARDS["a"], GROWTH))
    return {"root": root, **{k: root / k for k in ("v", "empty", "noeps", "ds")}}


def invoke(*args: Any, columns: int | None = 200) -> Any:
    """The app in-process; ``columns=None``: no COLUMNS, as in a pipe (rich then uses 80)."""
    env = {"COLUMNS": None if columns is None else str(columns), "NO_COLOR": None}
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def json_of(*args: Any, code: int = 0) -> Any:
    """``--json``: exit ``code``, nothing on stderr, and stdout one JSON document only."""
    result = invoke(*args, "--json")
    assert result.exit_code == code, (args, result.exit_code, result.stderr)
    assert result.stderr == "", (args, result.stderr)
    assert "\x1b[" not in result.stdout
    return json.loads(result.stdout)  # refuses anything after the document


def check_doc(doc: dict[str, Any], vocab: dict[str, Any]) -> None:
    """The tour's table: every key with its type; ``leaves`` objects with ``name`` first;
    ``records`` with the keys it lists; ``shards`` objects naming their shard."""
    check_schema(doc, vocab)
    for leaf in doc.get("leaves", []):
        assert isinstance(leaf, dict), ("leaves holds objects", leaf)
        assert next(iter(leaf)) == "name", leaf
    for record in doc.get("records", []):
        keys = {"row", "start", "length", "return", "truncated", "complete", "start_known"}
        assert keys <= set(record), record
    for shard in doc.get("shards", []) if isinstance(doc.get("shards"), list) else []:
        assert isinstance(shard, dict), shard
        assert "shard" in shard, shard


# ----------------------------------------------------- --json for every kind of source
READERS = ("info", "show", "stats", "episodes", "verify")


@pytest.mark.parametrize("kind", ["v", "v@half", "empty", "noeps", "ds", "ds@t"])
def test_json_is_one_document_in_the_tours_vocabulary(kinds: dict[str, Path], kind: str) -> None:
    vocab = vocabulary()
    name, _, tag = kind.partition("@")
    path, at = kinds[name], (["--at", tag] if tag else [])
    complete: int | None = None
    still_open: int | None = None
    if name == "ds":
        opened: Any = Dataset.open(str(path), at=tag or None)
        lengths = [v.committed_length for _, v in opened.vaults()]
        assert lengths == ([7, 5] if tag else [10, 5])
        complete, still_open = model_episodes(lengths)
    else:
        opened = Vault.open(str(path), at=tag or None)
        if opened.has_episodes:
            table = opened.episodes(include_open=True)
            complete, still_open = int(table.complete.sum()), int((~table.complete).sum())
    docs: dict[str, Any] = {}
    for command in READERS:
        if command == "episodes" and name == "noeps":
            result = invoke(command, path, "--json")
            assert result.exit_code == 1
            assert "keeps no episode index" in one_error_line(result)
            continue
        docs[command] = json_of(command, path, *at)
    if not tag:
        listed = json_of("ls", path)
        docs["ls"] = listed if name == "ds" else listed[0]
    for doc in docs.values():
        for entry in doc if isinstance(doc, list) else [doc]:
            check_doc(entry, vocab)
    if name == "ds":
        assert docs["info"]["timesteps"] == 2 * sum(lengths)
        assert docs["stats"]["episodes"] == docs["episodes"]["episodes"] == complete
        assert docs["stats"]["open_episodes"] == docs["episodes"]["open_episodes"] == still_open
        for shard, (index, n) in zip(docs["show"]["shards"], enumerate(lengths), strict=True):
            (obs,) = [leaf for leaf in shard["leaves"] if leaf["name"] == "obs"]
            assert obs["values"] == shard_data(index, 2, 0, n)["obs"].tolist()
        assert [s["committed"] for s in docs["verify"]["shards"]] == lengths
        return
    committed = opened.committed_length
    assert committed == {"v": 6 if tag else 11, "empty": 0, "noeps": 6}[name]
    for command in ("info", "stats", "verify", "ls"):
        if command in docs:
            assert docs[command]["committed"] == committed, command
    for command in ("info", "stats", "episodes", "ls"):
        if command in docs:
            assert docs[command]["episodes"] == complete, command
            assert docs[command]["open_episodes"] == still_open, command
    assert docs["show"]["time"] == [0, committed]
    if name == "empty":
        assert docs["stats"]["episode_return"] is None
        assert docs["episodes"]["records"] == []
    if name == "noeps":
        assert docs["info"]["episode_leaves"] is None
        assert docs["stats"]["truncated_episodes"] is None


# -------------------------------------------------------- the tour's table, every command
def test_import_json_speaks_the_tours_vocabulary(tmp_path: Path) -> None:
    def ogbench(path: Path, n: int, ends: list[int]) -> None:
        terminals = np.zeros(n, bool)
        terminals[ends] = True
        observations = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        actions = np.zeros((n, 2), np.float32)
        np.savez(path, observations=observations, actions=actions, terminals=terminals)

    ogbench(tmp_path / "maze-v0.npz", 7, [2, 6])
    ogbench(tmp_path / "maze-v0-val.npz", 4, [3])
    doc = json_of("import", "ogbench", tmp_path / "maze-v0.npz", "--out", tmp_path / "v")
    assert (doc["path"], doc["committed"], doc["episodes"]) == (str(tmp_path / "v"), 7, 2)
    check_doc(doc, vocabulary())


def test_minari_export_json_speaks_the_tours_vocabulary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    example = {
        "observations": np.zeros(2, np.float32),
        "next_observations": np.zeros(2, np.float32),
        "actions": np.int64(0),
        "rewards": np.float32(0),
        "terminations": np.bool_(False),
        "truncations": np.bool_(False),
    }
    t = np.arange(8)
    with Vault.create(
        str(tmp_path / "v"),
        example,
        rows=1,
        done_leaf="terminations",
        truncated_leaf="truncations",
        reward_leaf="rewards",
    ) as writer:
        obs = np.stack([t, -t], axis=1)[None].astype(np.float32)
        writer.append(
            {
                "observations": obs,
                "next_observations": np.stack([t + 1, -t - 1], axis=1)[None].astype(np.float32),
                "actions": t[None],
                "rewards": np.ones((1, 8), np.float32),
                "terminations": (t % 4 == 3)[None],
                "truncations": np.zeros((1, 8), bool),
            }
        )
    monkeypatch.chdir(tmp_path)
    doc = json_of("export", "v", "--format", "minari", "--out", "toy/back-v0")
    assert Path(doc["out"]).is_dir()
    assert doc["path"] == json_of("info", "v")["path"]  # the same vault, the same key
    check_doc(doc, vocabulary())
    # next observations that are not the following ones, which Minari cannot hold: said on
    # stderr, one line, and in the JSON; exported all the same
    with Vault.open(str(tmp_path / "v"), mode="a") as writer:
        first = {k: v[:, :4] for k, v in writer.read_numpy().items()}
        writer.append({**first, "next_observations": first["observations"]})
    result = invoke("export", "v", "--format", "minari", "--out", "toy/again-v0", "--json")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.startswith("vault: warning: ")
    assert result.stderr.count("\n") == 1
    doc = json.loads(result.stdout)
    assert doc["warnings"] == [result.stderr.removeprefix("vault: warning: ").strip()]
    check_doc(doc, vocabulary())


def test_unlock_json_speaks_the_tours_vocabulary(s3_env: Any) -> None:
    url = f"s3://{s3_env.bucket}/contracts-{os.getpid()}-{time.monotonic_ns()}/v"
    build(url, writes=(3,))
    doc = json_of("unlock", url, "--yes")
    assert doc["path"] == url
    check_doc(doc, vocabulary())


def test_tag_json_names_the_vault_as_every_command_does(
    kinds: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(kinds["v"], tmp_path / "v")
    monkeypatch.chdir(tmp_path)
    location = json_of("info", "v")["path"]
    assert location == str(tmp_path / "v")
    for typed in ("v", "./v/"):
        assert json_of("verify", typed)["path"] == location
        tagged = json_of("tag", typed, f"as-{len(typed)}")
        assert tagged["committed"] == 11
        assert tagged["path"] == location, typed


# ---------------------------------------------------------------------- exit codes
def test_a_dataset_refuses_a_wrong_at_or_shard_in_one_line_with_its_code(
    kinds: dict[str, Path], tmp_path: Path
) -> None:
    ds = kinds["ds"]
    for command in (*READERS, "tag"):
        extra = ["x"] if command == "tag" else []
        missing = invoke(command, ds, *extra, "--at", "nope")
        assert missing.exit_code == 2, (command, missing.stderr)
        assert one_error_line(missing) == f"vault: {ds}: no shard has the tag 'nope'"
        number = invoke(command, ds, *extra, "--at", "1")
        assert number.exit_code == 1, (command, number.stderr)
        assert one_error_line(number).startswith("vault: --at 1: a dataset is pinned by a tag")
        assert number.stdout == missing.stdout == ""
    for command, out in (("show", None), ("slice", "s"), ("export", "e.npz"), ("plot", "p.png")):
        where = [] if out is None else ["--out", tmp_path / out]
        result = invoke(command, ds, "--shard", "nope", *where)
        assert result.exit_code == 2, (command, result.stderr)
        assert f"vault: {ds}: no shard 'nope' in this dataset" in one_error_line(result)
    assert list(tmp_path.iterdir()) == []
    assert [set(v.tags()) for _, v in Dataset.open(str(ds)).vaults()] == [{"t"}, {"t"}]


def test_ctrl_c_at_the_unlock_prompt_is_an_interruption(s3_env: Any) -> None:
    url = f"s3://{s3_env.bucket}/contracts-{os.getpid()}-{time.monotonic_ns()}/v"
    build(url, writes=(3,))
    master, slave = pty.openpty()  # a terminal: unlock asks before it breaks anything
    proc = subprocess.Popen(
        [*PY_VAULT, "unlock", url],
        stdin=slave,
        stdout=slave,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"},
    )
    os.close(slave)
    seen, deadline = b"", time.monotonic() + 60
    try:
        while b"Break it?" not in seen and time.monotonic() < deadline:
            if select.select([master], [], [], 1)[0]:
                seen += os.read(master, 4096)
        assert b"Break it?" in seen, seen
        proc.send_signal(signal.SIGINT)  # what Ctrl-C at the prompt sends
        try:
            err = proc.communicate(timeout=10)[1].decode()
        except subprocess.TimeoutExpired:
            # the signal reached one of TensorStore's threads, not the one waiting at the
            # prompt: CPython acts on it once that thread wakes. Wake it as a terminal that
            # goes away does (end of input); the pending interruption is then raised
            os.close(master)
            master = -1
            err = proc.communicate(timeout=60)[1].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if master >= 0:
            os.close(master)
    lines = [line for line in err.splitlines() if line.strip()]
    assert (proc.returncode, len(lines)) == (130, 1), (proc.returncode, err)
    assert lines[0].startswith("vault: "), err


# ------------------------------------------------------------- output through a pipe
def odd_place(tmp_path: Path, kinds: dict[str, Path]) -> Path:
    """A copy of ``v`` under a path longer than 80 columns, with spaces, unicode and
    brackets (rich markup) in it."""
    where = tmp_path / ("a_long_folder_name_" * 4) / "ünï [b]cødé[/b] x" / "my vault [1]"
    shutil.copytree(kinds["v"], where)
    assert len(str(where)) > 100
    return where


def piped(*args: Any) -> subprocess.CompletedProcess[str]:
    """``python -m vault ARGS`` with stdout and stderr pipes, no COLUMNS (a script's view)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR")}
    command = [*PY_VAULT, *(str(a) for a in args)]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, check=False, env=env
    )


def test_a_pipe_gets_plain_json_and_plain_text(kinds: dict[str, Path], tmp_path: Path) -> None:
    path = odd_place(tmp_path, kinds)
    stats = piped("stats", path, "--json")
    assert (stats.returncode, stats.stderr) == (0, "")
    doc = json.loads(stats.stdout)
    assert (doc["path"], doc["committed"]) == (str(path), 11)
    check_doc(doc, vocabulary())
    text = piped("episodes", path, "--head", "2")
    assert (text.returncode, text.stderr) == (0, "")
    assert "\x1b[" not in text.stdout + stats.stdout
    more = len(Vault.open(str(path)).episodes()) - 2
    assert f"... {more} more (--head 0 shows all)" in text.stdout
    assert "[b]cødé[/b]" in "".join(text.stdout.split())  # markup printed, not applied


def test_a_pipe_gets_each_path_whole_on_its_line(kinds: dict[str, Path], tmp_path: Path) -> None:
    path = odd_place(tmp_path, kinds)
    where = path.parent
    out = where / "sliced out"
    sliced = piped("slice", path, "--out", out, "--time", "0:4")
    assert (sliced.returncode, sliced.stderr) == (0, "")
    split: list[tuple[Any, str]] = []
    if not any(f"wrote {out}: 3 rows x 4 timesteps" in ln for ln in sliced.stdout.splitlines()):
        split.append(("slice", sliced.stdout))
    expected = {
        ("verify", path): f"sound: {path}: 11 timesteps",
        ("info", path): f"{path}  experience",
        ("stats", path): f"{path}: 3 rows x 11 timesteps",
        ("show", path, "--leaf", "reward", "--time", "0:1"): f"{path}: rows 0..2",
        ("episodes", path): f"{path}: ",
        ("export", path, "--out", where / "e x.npz"): f"wrote {where / 'e x.npz'} (npz",
        ("plot", path, "--out", where / "p q.png"): f"wrote {where / 'p q.png'} (1200x800",
        ("subsample", path, "--out", where / "sub"): f"wrote {where / 'sub'}: 1 row",
        ("combine", path, out, "--out", where / "c"): f"wrote {where / 'c'}: 3 rows x 15",
    }
    for args, line in expected.items():
        result = invoke(*args, columns=None)
        assert result.exit_code == 0, (args, result.stderr)
        if not any(line in ln for ln in result.stdout.splitlines()):
            split.append((args[0], result.stdout))
    assert split == [], [command for command, _ in split]


def test_ls_shows_every_path_whole(kinds: dict[str, Path], tmp_path: Path) -> None:
    name = "sweep lr=0.001 " + "seed-" * 16 + "[0]"
    shutil.copytree(kinds["v"], tmp_path / name)
    listed = json_of("ls", tmp_path)
    assert [e["path"] for e in listed] == [str(tmp_path / name)]
    for columns in (80, None):
        text = invoke("ls", tmp_path, columns=columns)
        assert text.exit_code == 0
        assert "…" not in text.stdout
        assert any(name in line for line in text.stdout.splitlines()), text.stdout


# ----------------------------------------------------------- odd characters in paths
def test_plot_of_a_vault_under_a_folder_with_dollar_signs(
    kinds: dict[str, Path], tmp_path: Path
) -> None:
    path = tmp_path / "run$_$1" / "v"
    shutil.copytree(kinds["v"], path)
    result = invoke("plot", path, "--out", tmp_path / "p.png", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["path"] == str(path)
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_backslash_in_a_vaults_folder_is_never_corruption(
    kinds: dict[str, Path], tmp_path: Path
) -> None:
    path = tmp_path / "c\\d" / "v"
    shutil.copytree(kinds["v"], path)
    for command in ("info", "verify"):
        result = invoke(command, path, "--json")
        if result.exit_code == 0:  # read as it is
            assert json.loads(result.stdout)["committed"] == 11, command
        else:  # or refused for what it is, naming the path: not corrupt, not missing
            assert result.exit_code == 1, (command, result.exit_code, result.stderr)
            assert str(path) in one_error_line(result)


def test_a_backslash_in_a_destination_writes_nothing_elsewhere(
    kinds: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "a\\b" / "s"
    result = invoke("slice", kinds["v"], "--out", out, "--time", "0:4")
    assert not (tmp_path / "a").exists(), sorted(str(p) for p in (tmp_path / "a").rglob("*"))[:3]
    if result.exit_code == 0:
        made = Vault.open(str(out)).read_numpy()["obs"]
        np.testing.assert_array_equal(made, Vault.open(str(kinds["v"])).read_numpy()["obs"][:, :4])
    else:
        assert result.exit_code == 1, (result.exit_code, result.stderr)
        assert str(out) in one_error_line(result)


# ------------------------------------------------------------------ a dataset's episodes
def test_episodes_of_a_dataset_with_open_marks_the_open_ones(kinds: dict[str, Path]) -> None:
    doc = json_of("episodes", kinds["ds"], "--open", "--head", "0")
    complete, still_open = model_episodes([10, 5])
    assert (doc["episodes"], doc["open_episodes"]) == (complete, still_open) == (8, 4)
    assert sum(not r["complete"] for r in doc["records"]) == still_open
    text = invoke("episodes", kinds["ds"], "--open", "--head", "0").stdout
    rows = [line for line in text.splitlines() if re.match(r"^│ [ab] ", line)]
    assert len(rows) == complete + still_open
    assert sum("open" in row for row in rows) == still_open, text  # as `vault episodes VAULT`


# ---------------------------------------------------------------------- the help texts
def help_examples() -> list[str]:
    """Every `vault ...` snippet in the help of the group and of each command."""
    found: list[str] = []
    for command in ("", "ls", "info", "show", "stats", "verify", "episodes", "plot", "slice",
                    "subsample", "combine", "export", "import", "tag", "unlock"):  # fmt: skip
        args = [command, "--help"] if command else ["--help"]
        text = " ".join(invoke(*args, columns=400).stdout.split())
        found += [m for m in re.findall(r"`(vault [^`]+)`", text) if m not in found]
    return found


# the snippets help_examples() finds (checked below; listed here so that collecting this file
# renders no help)
EXAMPLES = ["vault ls DATASET", "vault combine DATASET --out V", "vault verify PATH --at NAME",
            "vault info PATH --json"]  # fmt: skip


def test_the_examples_tried_are_every_example_in_the_help() -> None:
    assert help_examples() == EXAMPLES


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_in_a_help_text_runs_as_written(
    kinds: dict[str, Path], tmp_path: Path, example: str
) -> None:
    place = {"DATASET": kinds["ds"], "PATH": kinds["v"], "NAME": "half", "V": tmp_path / "V"}
    args = [str(place.get(word, word)) for word in shlex.split(example)[1:]]
    result = invoke(*args)
    assert result.exit_code == 0, (example, result.stderr)
    assert result.stderr == ""


# ------------------------------------------------------------- read-only writes nothing
def tree_state(root: Path) -> dict[str, Any]:
    """Every entry under ``root``: its mtime (ns), and a file's bytes."""
    state: dict[str, Any] = {str(root): root.stat().st_mtime_ns}
    for entry in sorted(root.rglob("*")):
        stat = entry.lstat()
        state[str(entry)] = (stat.st_mtime_ns, entry.read_bytes() if entry.is_file() else None)
    return state


def test_read_only_commands_write_nothing(kinds: dict[str, Path]) -> None:
    root = kinds["root"]
    before = tree_state(root)
    runs: list[tuple[Any, ...]] = [("ls", root), ("ls", kinds["ds"])]
    for path, at in ((kinds["ds"], "t"), (kinds["v"], "half"), (kinds["noeps"], None)):
        for command in READERS:
            if not (command == "episodes" and path == kinds["noeps"]):
                runs.append((command, path, *(["--at", at] if at else [])))
    for args in runs:
        for extra in ([], ["--json"]):
            result = invoke(*args, *extra)
            assert result.exit_code == 0, (args, result.stderr)
    assert tree_state(root) == before
