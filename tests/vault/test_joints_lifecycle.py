"""Where the features of a vault's lifecycle meet: a writer appending, killed (SIGKILL of a
real process at a named step of the commit protocol), resumed with ``Vault.open(mode="a")``,
trimmed as it closes, and the old versions it leaves in ``trash/``; pins, tags, fingerprints
and ``verify`` of the commits it made; derived vaults of pinned or tagged data; datasets of
shards written by separate processes, their catalog, and shards resumed, killed or trimmed
after the catalog was written; and the ``vault`` command on vaults in each of these states.

Every value read is compared with a trivially correct model: the data say where they belong
(``obs = 100_000 * salt + 1000 * row + t``), so the model of a commit of ``n`` timesteps is
``data(rows, 0, n)``, and its episodes (``done`` flags, restarts, rewards) are enumerated by
brute force. Writers run as real subprocesses whose code is written to ``tmp_path`` from
this file, so readers share no TensorStore state with them.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import vault
from vault import (
    Dataset,
    Vault,
    VaultCorruptError,
    VaultPinError,
    derive_episodes,
    derive_slice,
)
from vault.cli.app import app

ROWS = 3
EXAMPLE = {
    "obs": np.zeros(2, np.float32),
    "rew": np.zeros((), np.float32),
    "done": np.zeros((), bool),
}
# small, uneven chunks: most appends rewrite a partly filled last chunk
CHUNK = {"obs": [2, 4, 1], "rew": [3, 4], "done": [3, 3]}
ROLES = {"done_leaf": "done", "reward_leaf": "rew"}
REPO = Path(vault.__file__).resolve().parents[1]


def data(rows: int, t0: int, n: int, salt: int = 0) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)`` of every row (of shard ``salt``): obs says where it belongs."""
    t = np.arange(t0, t0 + n)[None, :]
    r = np.arange(rows)[:, None]
    code = 100_000 * salt + 1000 * r + t
    return {
        "obs": (code[..., None] + np.array([0.0, 0.5])).astype(np.float32),
        "rew": (code % 7).astype(np.float32),
        "done": (t + 2 * r + salt) % 5 == 4,
    }


def restarts_of(starts: list[int]) -> list[int]:
    """The restart seams of appends that begin at ``starts`` (the writers' rule below)."""
    return sorted(t for t in starts if t > 0 and t % 4 == 1)


MODEL = "import numpy as np\n\n\n" + inspect.getsource(data)

# Appends sizes[i] timesteps (a restart where an append begins at t % 4 == 1) and prints
# [commit id, committed length, fingerprint] after each commit; SIGKILLs itself at the
# named step of the first append >= kill_at ("trim": as it closes).
CRASH_WRITER = """
import json, os, signal, sys
import vault
from vault import Vault
from vault.format import _tags

_tags.PENDING_MAX = 2  # the record's place tags go to the tag arrays every few appends
path, sizes, point, kill_at = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
now = {"append": -1}


def hook(name, info, step):
    if name == point and now["append"] >= kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    return step()


vault.set_fault_hook(hook)
w = Vault.open(path, mode="a")
t0 = w.committed_length
for i, n in enumerate(sizes):
    now["append"] = i
    w.append(data(3, t0, n), continues=t0 % 4 != 1)
    t0 += n
    print(json.dumps([w.commit_id, t0, w.fingerprint()]), flush=True)
w.close()
"""

# Writes (or resumes) the shards named in argv[2] ({name: [rows, sizes]}) of the dataset at
# argv[1], one after another; SIGKILLs itself at this process's commit number argv[3] (0:
# never). A shard resumed with no sizes is opened and closed (its arrays trimmed).
SHARD_WRITER = """
import json, os, signal, sys
import vault
from vault import Dataset

root, plan, kill = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
commits = {"n": 0}


def hook(name, info, step):
    if name == "commit":
        commits["n"] += 1
        if commits["n"] == kill:
            os.kill(os.getpid(), signal.SIGKILL)
    return step()


vault.set_fault_hook(hook)
example = {k: x[0, 0] for k, x in data(1, 0, 1).items()}
chunk = {"obs": [2, 4, 1], "rew": [3, 4], "done": [3, 3]}
ds = Dataset.create(
    root, example, rows=3, chunk=chunk, done_leaf="done", reward_leaf="rew", exist_ok=True
)
for name, (rows, sizes) in plan.items():
    with ds.shard(name, rows=rows) as w:
        t0 = w.committed_length
        for n in sizes:
            w.append(data(rows, t0, n, int(name[1:])))
            t0 += n
"""


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(MODEL + textwrap.dedent(body))
    return path


def child_env() -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *sys.path])
    return env


def start(tmp_path: Path, name: str, body: str, *args: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(script(tmp_path, name, body)), *map(str, args)],
        env=child_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def finish(child: subprocess.Popen[str], killed: bool = False) -> str:
    """Wait for ``child``; it must have exited cleanly, or (``killed``) by its own SIGKILL."""
    try:
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == (-signal.SIGKILL if killed else 0), err[-3000:]
    return out


def model_episodes(
    rows: int, length: int, salt: int = 0, restarts: list[int] | None = None
) -> list[tuple[int, int, int, float]]:
    """(row, start, length, return) of every complete episode, by brute force: an episode
    ends at a done flag; a restart drops the open ones and starts every row afresh."""
    m = data(rows, 0, length, salt)
    out = []
    for r in range(rows):
        begin = 0
        for t in range(length):
            if restarts and t in restarts:
                begin = t
            if m["done"][r, t]:
                out.append((r, begin, t - begin + 1, float(m["rew"][r, begin : t + 1].sum())))
                begin = t + 1
    return sorted(out)


def episodes_of(table: Any) -> list[tuple[int, int, int, float]]:
    rows = zip(table.row, table.start, table.length, table.returns, strict=True)
    return sorted((int(r), int(s), int(n), float(g)) for r, s, n, g in rows)


def assert_model(got: dict[str, np.ndarray], rows: int, length: int, salt: int = 0) -> None:
    want = data(rows, 0, length, salt)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def cli(*args: Any, code: int = 0) -> Any:
    result = CliRunner().invoke(
        app, [str(a) for a in args], env={"COLUMNS": "200", "NO_COLOR": "1"}
    )
    assert result.exit_code == code, (result.output, result.exception)
    return json.loads(result.output) if "--json" in args else result.output


def new_vault(path: Path) -> None:
    Vault.create(str(path), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES).close()


def crash_writer(tmp_path: Path, path: Path, sizes: list[int], point: str, kill_at: int) -> list:
    """Run CRASH_WRITER until it kills itself; returns what it committed (id, length, fp)."""
    child = start(tmp_path, "crash", CRASH_WRITER, path, json.dumps(sizes), point, kill_at)
    out = finish(child, killed=True)
    return [json.loads(line) for line in out.splitlines() if line.strip()]


# ----------------------------------------------------------- a writer killed, resumed, trimmed
def test_killed_resumed_and_trimmed_writers_keep_every_pin_tag_and_fingerprint(
    tmp_path: Path,
) -> None:
    """Three writer processes, each killed inside another step (writing the episode index,
    writing the place tags the record kept, trimming at close), each resumed by the next:
    after each, the latest commit, every commit any of them reported (pins by id) and every
    tag set in between read, index their episodes and fingerprint as the model says, and
    verify (library and CLI, at each tag with its fingerprint) finds nothing wrong."""
    path = tmp_path / "v"
    new_vault(path)
    committed: list[list[Any]] = []  # [commit id, length, fingerprint]
    starts: list[int] = []
    tags: dict[str, tuple[int, str]] = {}
    length = 0
    for gen, (sizes, point, kill_at) in enumerate(
        [([3, 5, 2, 7], "index", 2), ([2, 6, 1, 5, 3], "tags", 1), ([4, 1, 6], "trim", 2)]
    ):
        done = crash_writer(tmp_path, path, sizes, point, kill_at)
        # what it committed is exactly what it reported: the killed append is not visible
        reported = done[-1][1] if done else length
        starts += [length + sum(sizes[:i]) for i in range(len(done))]
        committed += done
        live = Vault.open(str(path))
        length = live.committed_length
        assert length == reported, (point, length, reported)
        restarts = restarts_of(starts)
        assert [(s.at, s.lost) for s in live.seams] == [(t, 0) for t in restarts]
        assert_model(live.read_numpy(), ROWS, length)
        assert episodes_of(live.episodes()) == model_episodes(ROWS, length, 0, restarts)
        report = vault.verify(str(path))
        assert report.ok, report.problems
        assert report.committed_length == length
        for commit, n, fingerprint in committed:
            pinned = Vault.open(str(path), at=commit)
            assert pinned.committed_length == n
            assert pinned.fingerprint() == fingerprint
            assert_model(pinned.read_numpy(), ROWS, n)
            older = [t for t in restarts if t < n]
            assert episodes_of(pinned.episodes()) == model_episodes(ROWS, n, 0, older)
        tags[f"gen{gen}"] = (length, live.fingerprint())
        live.tag(f"gen{gen}")
    assert sorted(Vault.open(str(path)).tags()) == sorted(tags)
    # the appends the killed writers had under way never became commits
    latest = Vault.open(str(path)).commit_id
    number = int(latest.split("-")[0]) + 1
    with pytest.raises(
        VaultPinError,
        match=re.escape(f"{path}: no commit {number}: the latest commit is {latest}"),
    ):
        Vault.open(str(path), at=number)
    for tag, (n, fingerprint) in tags.items():
        assert Vault.open(str(path), at=tag).committed_length == n
        report = vault.verify(str(path), at=tag, fingerprint=fingerprint)
        assert report.ok, report.problems
        doc = cli("verify", path, "--at", tag, "--fingerprint", fingerprint, "--json")
        assert (doc["ok"], doc["committed"]) == (True, n)
        info = cli("info", path, "--at", tag, "--json")
        assert (info["committed"], info["fingerprint"]) == (n, fingerprint)
    # the writer killed in its trim left the arrays longer than the commit: a new writer that
    # appends and closes leaves them at exactly the committed length
    with Vault.open(str(path), mode="a") as writer:
        writer.append(data(ROWS, length, 2), continues=length % 4 != 1)
    shape = json.loads((path / "experience" / "obs" / "zarr.json").read_text())["shape"]
    assert shape == [ROWS, length + 2, 2]
    assert_model(Vault.open(str(path)).read_numpy(), ROWS, length + 2)
    assert vault.verify(str(path)).warnings == []


def test_the_cli_on_a_vault_left_by_a_killed_writer_agrees_with_the_library(
    tmp_path: Path,
) -> None:
    """A writer killed while replacing the commit record leaves arrays grown past the last
    commit and old versions in trash/: every command shows the last commit, exactly."""
    path = tmp_path / "v"
    new_vault(path)
    done = crash_writer(tmp_path, path, [3, 4, 2, 5], "commit", 2)
    length = done[-1][1]
    grown = json.loads((path / "experience" / "obs" / "zarr.json").read_text())["shape"][1]
    assert grown > length  # the killed append had grown the arrays
    live = Vault.open(str(path))
    restarts = restarts_of([0, 3])
    model = data(ROWS, 0, length)
    info = cli("info", path, "--json")
    assert (info["committed"], info["commit"], info["fingerprint"]) == (
        length,
        done[-1][0],
        done[-1][2],
    )
    assert [leaf["shape"][1] for leaf in info["leaves"]] == [length] * 3
    assert info["writer"]["held"] is False
    assert [(s["at"], s["lost"]) for s in info["seams"]] == [(t, 0) for t in restarts]
    listed = cli("ls", tmp_path, "--json")
    assert [(e["path"], e["committed"]) for e in listed] == [(str(path), length)]
    shown = cli("show", path, "--leaf", "obs", "--time", "-3:", "--json")
    assert shown["time"] == [length - 3, length]
    np.testing.assert_array_equal(np.array(shown["leaves"][0]["values"]), model["obs"][:, -3:])
    eps = cli("episodes", path, "--head", "0", "--json")
    records = [(r["row"], r["start"], r["length"], r["return"]) for r in eps["records"]]
    assert sorted(records) == model_episodes(ROWS, length, 0, restarts)
    assert episodes_of(live.episodes()) == sorted(records)
    stats = cli("stats", path, "--json")
    obs = next(leaf for leaf in stats["leaves"] if leaf["name"] == "obs")
    assert (obs["count"], obs["max"]) == (model["obs"].size, float(model["obs"].max()))
    doc = cli("verify", path, "--json")
    assert (doc["ok"], doc["committed"]) == (True, length)
    assert [w["place"] for w in doc["warnings"]] == ["trash"]  # the dead writer's old files


# ------------------------------------------------------------ shards, the catalog and resumes
def test_shards_resumed_killed_and_trimmed_after_the_catalog_read_as_their_models(
    tmp_path: Path,
) -> None:
    """Eight shards written by two processes at once, cataloged by a reader; then one shard
    is resumed (it appends and closes), one is resumed and killed mid-append, one is opened
    and closed (trimmed, nothing appended). A new reader (through the catalog), the first
    reader refreshed, and the CLI all see exactly each shard's model: data, lengths, episode
    table; the catalog serves only the shards whose commit it names."""
    root = tmp_path / "ds"
    plan = {f"s{i}": [1 + i % 3, [2, 3]] for i in range(8)}
    first = {k: v for k, v in plan.items() if int(k[1:]) < 4}
    second = {k: v for k, v in plan.items() if int(k[1:]) >= 4}
    writers = [
        start(tmp_path, f"shards{i}", SHARD_WRITER, root, json.dumps(part), 0)
        for i, part in enumerate([first, second])
    ]
    for child in writers:
        finish(child)
    lengths = dict.fromkeys(plan, 5)
    rows = {name: spec[0] for name, spec in plan.items()}
    reader = Dataset.open(str(root), write_catalog=True)
    reader.episodes()  # the table read: a catalog with every shard's index is written
    assert reader.check_catalog()["problems"] == []
    assert (root / "catalog").exists()

    resumed = {"s1": [2, [4, 1]], "s3": [1, []]}  # s3: opened, trimmed, closed
    finish(start(tmp_path, "resume", SHARD_WRITER, root, json.dumps(resumed), 0))
    lengths["s1"] = 10
    killed = start(tmp_path, "killed", SHARD_WRITER, root, json.dumps({"s2": [3, [2, 2, 2]]}), 2)
    finish(killed, killed=True)
    lengths["s2"] = 7

    fresh = Dataset.open(str(root))
    assert fresh.committed_lengths == lengths
    catalog = fresh.check_catalog()
    assert (catalog["state"], catalog["used"], catalog["problems"]) == ("valid", 7, [])
    doc = cli("verify", root, "--json")  # the CLI reads the same catalog, writes none
    assert doc["ok"]
    assert doc["catalog"]["used"] == 7
    assert {s["shard"]: s["committed"] for s in doc["shards"]} == lengths
    listed = cli("ls", root, "--json")
    assert {e["shard"]: (e["rows"], e["committed"]) for e in listed} == {
        name: (rows[name], lengths[name]) for name in plan
    }
    eps = cli("episodes", root, "--head", "0", "--json")
    assert eps["episodes"] == len(fresh.episodes())
    gained = reader.refresh()  # the first reader (it may rewrite the catalog now)
    assert gained == 2 * 5 + 3 * 2
    assert reader.committed_lengths == lengths
    for dataset in (fresh, reader):
        table = dataset.episodes()
        for name in dataset.shards:
            salt = int(name[1:])
            assert_model(dataset.read_numpy(name), rows[name], lengths[name], salt)
            mine = table[table.shard == name]
            assert episodes_of(mine) == model_episodes(rows[name], lengths[name], salt), name
    assert Dataset.open(str(root)).check_catalog()["problems"] == []


def test_derived_data_of_a_tagged_dataset_is_the_tagged_data_after_resumes(
    tmp_path: Path,
) -> None:
    """A dataset tagged, then a shard resumed by a process killed in its second append: a
    slice and an episode selection derived from the dataset at the
    tag (and a slice of one shard pinned at its tagged commit) hold exactly the tagged data,
    record where they came from, and verify; the tag still opens the same commits."""
    root = tmp_path / "ds"
    plan = {"s0": [3, [4, 3]], "s1": [2, [6]]}
    finish(start(tmp_path, "shards", SHARD_WRITER, root, json.dumps(plan), 0))
    ids = Dataset.open(str(root)).tag("t1")
    lengths = {"s0": 7, "s1": 6}
    rows = {"s0": 3, "s1": 2}
    more = {"s0": [3, [2, 5]], "s1": [2, [3]]}
    finish(start(tmp_path, "more", SHARD_WRITER, root, json.dumps(more), 2), killed=True)
    live = Dataset.open(str(root))
    assert live.committed_lengths == {"s0": 9, "s1": 6}

    tagged = Dataset.open(str(root), at="t1")
    assert (tagged.committed_lengths, tagged.commit_ids) == (lengths, ids)
    sliced = derive_slice(tagged, str(tmp_path / "sliced"), start=1, stop=6)
    assert sliced.committed_lengths == {"s0": 5, "s1": 5}
    for name in sliced.shards:
        want = {k: x[:, 1:6] for k, x in data(rows[name], 0, 6, int(name[1:])).items()}
        got = sliced.read_numpy(name)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{name} {key}")
        origin = sliced.vault(name).metadata["derived_from"]
        assert (origin["op"], origin["start"], origin["shard"]) == ("slice", 1, name)
        assert vault.verify(sliced.vault(name)).ok
    table = tagged.episodes()
    assert len(table) == sum(len(model_episodes(rows[n], lengths[n], int(n[1:]))) for n in lengths)
    chosen = table.select(min_length=2)
    picked = derive_episodes(tagged, str(tmp_path / "picked"), chosen)
    parts = []
    for name, row, begin, n in zip(
        chosen.shard, chosen.row, chosen.start, chosen.length, strict=True
    ):
        model = data(rows[name], 0, lengths[name], int(name[1:]))
        parts.append((name, int(begin), int(row), model["obs"][row, begin : begin + n]))
    parts.sort(key=lambda p: (p[0], p[1], p[2]))  # shard by shard, by start, then row
    np.testing.assert_array_equal(
        picked.read_numpy()["obs"][0], np.concatenate([p[3] for p in parts])
    )
    assert len(picked.episodes()) == len(chosen)
    assert vault.verify(str(tmp_path / "picked")).ok

    shard = root / "shards" / "s0"
    pinned = Vault.open(str(shard), at="t1")
    copy = derive_slice(pinned, str(tmp_path / "copy"))
    assert_model(copy.read_numpy(), 3, 7)
    assert episodes_of(copy.episodes()) == model_episodes(3, 7)
    assert Dataset.open(str(root), at="t1").committed_lengths == lengths


# ------------------------------------------------------------------------------- bugs found
@pytest.mark.parametrize("how", ["vault", "dataset"])
def test_verify_of_a_pinned_vault_checks_the_commit_it_reads(tmp_path: Path, how: str) -> None:
    """``vault.verify`` takes "an open Vault"; a Vault pinned at a commit (``at=``, or a shard
    of a dataset opened at a tag, as the many-writers guide verifies shards) reads only that
    commit, so its report should be of that commit (its length, its fingerprint)."""
    if how == "vault":
        path = tmp_path / "v"
        with Vault.create(str(path), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES) as writer:
            writer.append(data(ROWS, 0, 5))
            writer.tag("t")
            writer.append(data(ROWS, 5, 6))
        pinned = Vault.open(str(path), at="t")
    else:
        root = tmp_path / "ds"
        ds = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
        with ds.shard("s0") as writer:
            writer.append(data(ROWS, 0, 5))
        Dataset.open(str(root)).tag("t")
        with ds.shard("s0") as writer:
            writer.append(data(ROWS, 5, 6))
        pinned = Dataset.open(str(root), at="t").vault("s0")
    assert pinned.committed_length == 5
    report = vault.verify(pinned)
    assert report.ok, report.problems
    assert report.committed_length == 5  # got 11: the latest commit was checked
    report = vault.verify(pinned, fingerprint=pinned.fingerprint())
    assert report.warnings == []  # got "the vault has grown since fingerprint ..."


@pytest.mark.parametrize("how", ["vault", "dataset"])
def test_refresh_after_the_vault_was_replaced_is_not_called_corrupt(
    tmp_path: Path, how: str
) -> None:
    """A reader refreshes after the vault it reads was deleted and made again at the same
    place with other rows (a rerun; a dataset's shard name reused by a new actor). The new
    vault is sound (verify says so); the reader should read it, or refuse it saying it was
    replaced (as a pin does), not call its commit record malformed."""
    if how == "vault":
        path = tmp_path / "v"
        with Vault.create(str(path), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES) as writer:
            writer.append(data(ROWS, 0, 5))
        reader: Any = Vault.open(str(path))
    else:
        root = tmp_path / "ds"
        ds = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
        with ds.shard("s0") as writer:
            writer.append(data(ROWS, 0, 5))
        reader = Dataset.open(str(root))
        reader.read_numpy("s0")
        path = root / "shards" / "s0"
    shutil.rmtree(path)
    if how == "vault":
        replaced = Vault.create(str(path), EXAMPLE, rows=2, chunk=CHUNK, **ROLES)
    else:
        replaced = ds.shard("s0", rows=2)
    with replaced:
        replaced.append(data(2, 0, 9, salt=1))
    assert vault.verify(str(path)).ok
    refused: vault.VaultError | None = None
    try:
        reader.refresh()
    except vault.VaultError as err:
        refused = err
    if refused is None:
        got = reader.read_numpy() if how == "vault" else reader.read_numpy("s0")
        assert_model(got, 2, 9, salt=1)
    else:  # a typed refusal is fine if it says what happened
        assert not isinstance(refused, VaultCorruptError), (
            f"a sound vault called corrupt: {refused}"
        )
        assert "replaced" in str(refused)


def test_a_resumed_writer_that_closes_frees_what_a_dead_writer_left(tmp_path: Path) -> None:
    """docs/format.md 4.9: "all are freed when the writer closes, and the next writer frees
    those a dead writer left"; docs/concepts.md: "a writer that died leaves them for the
    next writer". The next writer here opens, trims and closes."""
    path = tmp_path / "v"
    new_vault(path)
    done = crash_writer(tmp_path, path, [3, 4, 2], "commit", 2)
    warned = vault.verify(str(path)).warnings
    assert [w.place for w in warned] == ["trash"]
    assert "the next writer frees them" in warned[0].message
    with Vault.open(str(path), mode="a") as writer:  # the next writer
        assert writer.committed_length == done[-1][1]
    shape = json.loads((path / "experience" / "obs" / "zarr.json").read_text())["shape"]
    assert shape[1] == done[-1][1]  # it did trim the arrays as it closed
    assert vault.verify(str(path)).warnings == []
    assert sorted(os.listdir(path / "trash")) == ["zarr.json"]


def test_vault_ls_of_a_dataset_with_a_shard_killed_while_created(tmp_path: Path) -> None:
    """An actor killed while creating its shard leaves no vault there (format.md 8.1: until
    its manifest is written there is no vault; 5.2: a shard being created is not shown).
    ``Dataset.open``, ``vault ls DATASET`` and ``vault verify DATASET`` ignore it, and a new
    writer takes the place over; ``vault ls DIR`` should not call it a vault that is gone."""
    root = tmp_path / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    with ds.shard("s0") as writer:
        writer.append(data(ROWS, 0, 4))
    body = SHARD_WRITER.replace('name == "commit"', 'name == "create"')
    finish(start(tmp_path, "creating", body, root, json.dumps({"s1": [3, [2]]}), 1), True)
    assert (root / "shards" / "s1" / "commit").is_dir()  # what the killed creation left
    assert Dataset.open(str(root)).shards == ["s0"]
    assert [e["shard"] for e in cli("ls", root, "--json")] == ["s0"]
    assert cli("verify", root, "--json")["ok"]
    listed = cli("ls", tmp_path, "--json")
    assert [e["path"] for e in listed if e.get("kind") == "dataset"] == [str(root)]
    errors = [e["error"] for e in listed if "error" in e]
    assert not any("not a vault any more" in e for e in errors), errors
    # a new writer of that shard takes the place over
    with ds.shard("s1") as writer:
        writer.append(data(ROWS, 0, 2, salt=1))
    assert Dataset.open(str(root)).committed_lengths == {"s0": 4, "s1": 2}


def test_a_dataset_tags_the_commits_it_reports(tmp_path: Path) -> None:
    """``Dataset.tag`` names "every shard's current commit"; a learner logs the dataset's
    ``commit_ids`` and ``committed_lengths`` with the tag. After ``data.vault(name)`` (the
    shard's read-only vault) was refreshed, the tag should still name what the dataset
    reports (or the dataset should report what it tags)."""
    root = tmp_path / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    with ds.shard("s0") as writer:
        writer.append(data(ROWS, 0, 5))
    learner = Dataset.open(str(root))
    with ds.shard("s0") as writer:
        writer.append(data(ROWS, 5, 4))
    assert learner.vault("s0").refresh() == 9
    reported = (learner.commit_ids, learner.committed_lengths)
    tagged = learner.tag("x")
    assert tagged == reported[0]
    assert Dataset.open(str(root), at="x").committed_lengths == reported[1]


def test_every_command_given_a_dataset_root_says_kind_dataset(tmp_path: Path) -> None:
    """docs/guides/cli-tour.md, JSON keys: ``kind`` is given by "every command given a
    dataset's root"; ``timesteps`` by ``ls``, ``info``, ``stats``, ``verify``, ``slice``,
    ``tag`` of a dataset."""
    root = tmp_path / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    with ds.shard("s0") as writer:
        writer.append(data(ROWS, 0, 6))
    missing = {}
    for command in ("info", "stats", "verify", "show", "episodes", "tag"):
        extra = ["t"] if command == "tag" else []
        doc = cli(command, root, *extra, "--json")
        lacks = [k for k in ("kind",) if doc.get(k) != "dataset"]
        if command in ("info", "stats", "verify", "tag") and doc.get("timesteps") != 18:
            lacks.append("timesteps")
        if lacks:
            missing[command] = lacks
    assert missing == {}
