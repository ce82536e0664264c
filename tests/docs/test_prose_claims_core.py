"""The prose of the core pages (docs/concepts.md, safety.md, architecture.md,
getting-started.md, index.md, cli.md and README.md), claim by claim, where two features meet.

Code blocks of these pages already run in ``tests/docs/test_pages.py``; this file takes the
sentences around them that promise a behaviour and that no other test pins:

* the ``vault`` command: "every command takes ``--json``" (cli.md, README) and ``vault unlock``
  of a local vault (concepts.md: a ``VaultLocationError``; the command's own help: local vaults
  need no unlocking);
* locations: "a plain path or ``file://`` URL ... ``memory://name``" (concepts.md) for URLs
  that name a host or drop a slash, and "every error of ``vault`` is a ``VaultError``";
* vaults meeting datasets of shards: what ``Vault.create`` / ``Vault.open`` /
  ``Dataset.open`` say when pointed at the other kind (getting-started.md: "it says to open the
  one there with ``Vault.open(path, mode="a")``"; concepts.md: every message says what to do);
* commits meeting disk use: "disk use after many small writes stays close to that of one bulk
  write of the same data" (concepts.md, Disk use), with the history record each commit keeps;
* the episode index meeting the data: "Episode counts, returns and selections then never scan
  the data" (concepts.md, Episodes).

Data say where they belong (``obs = 1000 * row + t``), so every value read back is compared with
that model. Everything is real: TensorStore on files in ``tmp_path``, the typer app through its
``CliRunner``.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

import vault
from vault import Dataset, Vault, VaultError, VaultLocationError, parse_location
from vault.cli.app import app

ROWS = 2
EXAMPLE = {
    "obs": np.zeros(3, np.float32),
    "rew": np.zeros((), np.float32),
    "done": np.zeros((), bool),
}
ROLES: dict[str, Any] = {"done_leaf": "done", "reward_leaf": "rew"}


def data(t0: int, n: int, rows: int = ROWS) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)`` of every row: obs says where it belongs, an episode ends at
    every ``t % 4 == 3`` (row 0) or ``t % 5 == 4`` (row 1), reward ``t % 3``."""
    t = np.arange(t0, t0 + n)[None, :]
    r = np.arange(rows)[:, None]
    code = 1000 * r + t
    return {
        "obs": (code[..., None] + np.array([0.0, 0.25, 0.5])).astype(np.float32),
        "rew": np.broadcast_to(t % 3, (rows, n)).astype(np.float32),
        "done": np.where(r == 0, t % 4 == 3, t % 5 == 4),
    }


def model_episodes(length: int) -> list[tuple[int, int, int, float]]:
    """(row, start, length, return) of every complete episode of ``data(0, length)``."""
    whole = data(0, length)
    out = []
    for row in range(ROWS):
        start = 0
        for t in range(length):
            if whole["done"][row, t]:
                ret = float(whole["rew"][row, start : t + 1].sum())
                out.append((row, start, t + 1 - start, ret))
                start = t + 1
    return sorted(out)


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A closed vault of 12 timesteps and a dataset of two closed shards."""
    base = tmp_path_factory.mktemp("prose")
    with Vault.create(base / "v", EXAMPLE, rows=ROWS, **ROLES) as v:
        v.append(data(0, 7))
        v.append(data(7, 5))
    ds = Dataset.create(base / "ds", EXAMPLE, rows=ROWS, **ROLES)
    for name in ("a", "b"):
        shard = ds.shard(name)
        shard.append(data(0, 6))
        shard.close()
    return {"vault": base / "v", "dataset": base / "ds"}


# ------------------------------------------------------------------------------ the command
# docs/cli.md: "Every command takes `--json` to print JSON for scripts."
# README.md: "Every command takes `--json`, a dataset of shards' root and `s3://bucket/prefix`"
def test_every_command_takes_json() -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    commands = group.list_commands(typer.Context(group))
    assert "unlock" in commands
    assert "ls" in commands
    missing = [
        name
        for name in commands
        if not any("--json" in p.opts for p in group.commands[name].params)
    ]
    assert missing == [], f"commands without --json: {missing}"


# docs/concepts.md (Errors): "`VaultLocationError` (a location that ... cannot do what was
# asked, e.g. `vault unlock` on a local vault)"; `vault unlock --help`: "Local vaults need no
# unlocking (a dead writer's lock goes with its process)."
def test_unlock_of_a_local_vault_says_at_once_that_it_needs_none(places: dict[str, Path]) -> None:
    path = str(places["vault"])
    with_yes = invoke("unlock", path, "--yes")
    assert with_yes.exit_code == 1
    assert "no lock to break" in with_yes.stderr  # the documented refusal, with --yes
    asked = invoke("unlock", path)
    assert asked.exit_code == 1
    lines = asked.stderr.strip().splitlines()
    assert len(lines) == 1, asked.stderr
    assert path in lines[0]
    assert "pass --yes" not in lines[0], lines[0]  # --yes cannot help: nothing to break
    assert "no lock to break" in lines[0] or "need no unlocking" in lines[0], lines[0]


# ------------------------------------------------------------------------------- locations
# docs/concepts.md (Locations): "`memory://name` (in this process only; for tests)"; (Errors):
# "Every error of `vault` is a `VaultError` ... `VaultLocationError` (a location that cannot be
# parsed ...)"
@pytest.mark.parametrize("text", ["memory:/scratch", "memory:scratch"])
def test_a_memory_url_missing_its_slashes_is_a_location_error(text: str) -> None:
    try:
        parse_location(text)
    except Exception as err:  # which type it is, is the point
        caught: Exception | None = err
    else:
        caught = None
    assert isinstance(caught, VaultLocationError), repr(caught)
    assert text in str(caught)


# docs/concepts.md (Locations): "a plain path or `file://` URL (local disk, the default)".
# A file URL's authority is a host (RFC 8089): file://localhost/tmp/v is the file /tmp/v.
def test_a_file_url_naming_localhost_is_the_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    with Vault.create(f"file://localhost{tmp_path}/v", EXAMPLE, rows=ROWS) as v:
        v.append(data(0, 3))
    assert list(cwd.iterdir()) == [], "the vault went under the working directory"
    np.testing.assert_array_equal(Vault.open(tmp_path / "v").read_numpy()["obs"], data(0, 3)["obs"])


def test_a_file_url_naming_another_host_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    refused: VaultLocationError | None = None
    try:
        Vault.create(f"file://fileserver{tmp_path}/v", EXAMPLE, rows=ROWS).close()
    except VaultLocationError as err:
        refused = err
    assert list(cwd.iterdir()) == [], "the vault went under the working directory"
    assert refused is not None, "file://fileserver/... was accepted"
    assert "fileserver" in str(refused)


# ---------------------------------------------------------------- vaults meet datasets
# docs/concepts.md (Errors): "every message names the argument, leaf path or file, what was
# expected, what was got and what to do"; (Datasets of shards): "A dataset is many vaults read
# as one: a root that fixes the structure once, and one shard (a vault) per writer".
@pytest.mark.parametrize("case", ["Vault.open(dataset root)", "Dataset.open(vault)"])
def test_opening_the_other_kind_names_the_call_that_opens_it(
    places: dict[str, Path], case: str
) -> None:
    if case == "Vault.open(dataset root)":
        where, fix = str(places["dataset"]), "Dataset.open"
        with pytest.raises(VaultError) as info:
            Vault.open(where)
    else:
        where, fix = str(places["vault"]), "Vault.open"
        with pytest.raises(VaultError) as info:
            Dataset.open(where)
    message = str(info.value)
    assert where in message
    assert fix in message, message


# docs/getting-started.md: "`Vault.create` never replaces a vault: run it a second time and it
# says to open the one there with `Vault.open(path, mode="a")`, or to choose a new path or
# delete the old one." Over a dataset's root that advice must not be given: it fails.
def test_creating_a_vault_over_a_dataset_gives_advice_that_works(
    places: dict[str, Path],
) -> None:
    root = str(places["dataset"])
    with pytest.raises(vault.VaultExistsError) as info:
        Vault.create(root, EXAMPLE, rows=ROWS)
    message = str(info.value)
    assert root in message
    if "Vault.open(path, mode='a')" in message:  # the advice given: it must work
        try:
            Vault.open(root, mode="a").close()
        except VaultError as err:
            pytest.fail(f"the advice {message!r} fails: {err}")
    assert "dataset" in message.lower(), message
    assert Dataset.open(root).committed_lengths == {"a": 6, "b": 6}  # nothing was touched


# ------------------------------------------------------------------------------ disk use
# docs/concepts.md (Disk use): "the arrays after many small writes take the same space as after
# one bulk write of the same data. What grows with the number of appends is `history/`: one
# record per commit ... (128 one-step appends of 4 rows x 16 float32: 117 KB against 35 KB for
# one bulk append)"
def test_many_small_appends_grow_only_the_history(tmp_path: Path) -> None:
    example = {"obs": np.zeros(16, np.float32), "done": np.zeros((), bool)}
    rows, steps = 4, 128
    rng = np.random.default_rng(0)
    whole = {
        "obs": rng.normal(size=(rows, steps, 16)).astype(np.float32),
        "done": rng.random((rows, steps)) < 0.1,
    }
    used: dict[str, int] = {}
    for name, step in (("bulk", steps), ("small", 1)):
        with Vault.create(tmp_path / name, example, rows=rows, done_leaf="done") as v:
            for t in range(0, steps, step):
                v.append({k: x[:, t : t + step] for k, x in whole.items()})
        back = Vault.open(tmp_path / name).read_numpy()
        np.testing.assert_array_equal(back["obs"], whole["obs"])
        for leaf in ("", "obs", "done"):
            size = vault.disk_usage(tmp_path / name, leaf or None)
            assert size is not None
            used[f"{name}/{leaf}"] = size
        history = tmp_path / name / "history"
        used[f"{name}/history"] = sum(f.stat().st_size for f in history.rglob("*"))
        used[f"{name}/history records"] = sum(1 for f in history.iterdir() if f.name.isdigit())
    # the data take the same room either way
    assert used["small/obs"] == used["bulk/obs"], used
    assert used["small/done"] == used["bulk/done"], used
    # one history record per append (the commit it replaced), and that is the extra room
    assert used["small/history records"] == steps, used
    assert used["bulk/history records"] == 1, used
    extra, history = used["small/"] - used["bulk/"], used["small/history"] - used["bulk/history"]
    assert 0.9 * history <= extra <= 1.1 * history, used
    assert 2.5 * used["bulk/"] <= used["small/"] <= 4 * used["bulk/"], used  # the page's figures


# ------------------------------------------------------------------------------- episodes
# docs/concepts.md (Episodes): "every commit also extends an episode index ... Episode counts,
# returns and selections then never scan the data."
def test_episodes_and_selections_come_from_the_index_without_the_data(tmp_path: Path) -> None:
    path = tmp_path / "v"
    with Vault.create(path, EXAMPLE, rows=ROWS, **ROLES) as v:
        v.append(data(0, 9))
        v.append(data(9, 8))
    want = model_episodes(17)
    for leaf in ("obs", "rew", "done"):  # every data chunk gone: only the index is left
        shutil.rmtree(path / "experience" / leaf / "c")
    r = Vault.open(path)

    def rows_of(table: Any) -> list[tuple[int, int, int, float]]:
        cols = (table.row, table.start, table.length, table.returns)
        return sorted(zip(*(c.tolist() for c in cols), strict=True))

    assert rows_of(r.episodes()) == want
    best = max(w[3] for w in want)
    assert rows_of(r.episodes().select(min_return=best)) == [w for w in want if w[3] == best]
    top = r.episodes().select(top_k=2).returns.tolist()
    assert sorted(top) == sorted(w[3] for w in want)[-2:]
    opened = r.episodes(include_open=True)
    assert len(opened) == len(want) + ROWS  # each row's open episode too, marked so
    assert int((~opened.complete).sum()) == ROWS
    result = invoke("episodes", str(path), "--json")
    assert result.exit_code == 0, result.output
    # ... while reading the data is refused, never filled in
    with pytest.raises(vault.VaultCorruptError, match=re.escape("experience/")):
        r.read_numpy()
