"""Crash points beyond the append: a real process SIGKILLed inside an operation that is not
the append loop, then every reader entry point, the next writer and the operation run again,
from this (fresh) process.

The joints: ``Dataset.tag`` killed between its shards; ``Vault.tag`` killed while its tag
file is written, then the tag written again (same commit, another commit); a writer whose
``write(block=False)`` queue holds several pending writes, killed at the commit of one of them
and in the trim of its ``close``; ``derive_slice``/``derive_episodes``/``combine`` killed in
their copy, into a local folder and into S3 (and ``vault unlock`` there); an OGBench import
(numpy only) killed while its two vaults (training, validation) are built and between their
publications.

Where the operation has a named fault point (``vault.set_fault_hook``: the copies' and the
import's appends, commits and trims) the child kills itself there. ``Dataset.tag`` and
``Vault.tag`` have none: a thread of the child watches the files the operation writes and
kills the process the moment the first shard's tag appears (or the tag's temporary file is
complete), so the kill lands at the same place every run.

Every value read is compared with a model: the data say where they belong
(``obs = 100_000 * salt + 1000 * row + t``). Child scripts import only numpy and vault
(no jax), except the background writer, which needs ``buffers`` to count a state's writes.
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
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
    VaultExistsError,
    VaultLockedError,
    VaultNotFoundError,
    VaultPinError,
    combine,
    derive_episodes,
    derive_slice,
)
from vault.cli.app import app
from vault.converters import import_ogbench

REPO = Path(vault.__file__).resolve().parents[1]
ROWS = 3
EXAMPLE = {
    "obs": np.zeros(2, np.float32),
    "rew": np.zeros((), np.float32),
    "done": np.zeros((), bool),
}
CHUNK: dict[str, Any] = {"obs": [2, 4, 1], "rew": [3, 4], "done": [3, 3]}
ROLES: dict[str, Any] = {"done_leaf": "done", "reward_leaf": "rew"}


def at_times(rows: int, t: np.ndarray, salt: int = 0) -> dict[str, np.ndarray]:
    """The model's value of every row at times ``t`` (any shape after the row axis)."""
    r = np.arange(rows).reshape((rows,) + (1,) * t.ndim)
    code = 100_000 * salt + 1000 * r + t[None]
    return {
        "obs": (code[..., None] + np.array([0.0, 0.5])).astype(np.float32),
        "rew": (code % 7).astype(np.float32),
        "done": (t[None] + 2 * r + salt) % 5 == 4,
    }


def data(rows: int, t0: int, n: int, salt: int = 0) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)`` of every row (of shard ``salt``)."""
    return at_times(rows, np.arange(t0, t0 + n), salt)


# Every child starts with this: the model, and arm(point, nth), which SIGKILLs the process at
# the nth run of the named fault point.
PRELUDE = f"""
import json, os, signal, sys, threading, time
import numpy as np
sys.path.insert(0, {str(REPO)!r})
import vault

{inspect.getsource(at_times)}
{inspect.getsource(data)}

def arm(point, nth):
    seen = {{"n": 0}}

    def hook(name, info, step):
        if name == point:
            seen["n"] += 1
            if seen["n"] == nth:
                os.kill(os.getpid(), signal.SIGKILL)
        return step()

    vault.set_fault_hook(hook)


def kill_when(ready):
    # a watcher thread: SIGKILL this process as soon as ready() is true
    def watch():
        while not ready():
            time.sleep(0)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()
"""


def run_child(tmp_path: Path, body: str, *args: Any) -> subprocess.CompletedProcess[str]:
    script = tmp_path / f"child-{uuid.uuid4().hex[:8]}.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def killed(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stderr[-3000:])
    return done.stdout


def cli(*args: Any, code: int = 0) -> Any:
    result = CliRunner().invoke(
        app, [str(a) for a in args], env={"COLUMNS": "200", "NO_COLOR": "1"}
    )
    assert result.exit_code == code, (result.output, result.exception)
    return json.loads(result.output) if "--json" in args else result.output


def assert_model(got: dict[str, np.ndarray], want: dict[str, np.ndarray], what: str = "") -> None:
    assert sorted(got) == sorted(want), what
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=f"{what} {key}")


def model_episodes(rows: int, length: int, salt: int = 0) -> list[tuple[int, int, int, float]]:
    """(row, start, length, return) of every complete episode, by brute force."""
    m = data(rows, 0, length, salt)
    out = []
    for r in range(rows):
        begin = 0
        for t in range(length):
            if m["done"][r, t]:
                out.append((r, begin, t - begin + 1, float(m["rew"][r, begin : t + 1].sum())))
                begin = t + 1
    return sorted(out)


def episodes_of(table: Any) -> list[tuple[int, int, int, float]]:
    rows = zip(table.row, table.start, table.length, table.returns, strict=True)
    return sorted((int(r), int(s), int(n), float(g)) for r, s, n, g in rows)


def check_vault(path: Any, rows: int, length: int, salt: int = 0) -> None:
    """Every reader entry point of the vault at ``path`` shows the model's ``length``."""
    live = Vault.open(str(path))
    assert live.committed_length == length
    assert_model(live.read_numpy(), data(rows, 0, length, salt), str(path))
    assert episodes_of(live.episodes()) == model_episodes(rows, length, salt)
    report = vault.verify(str(path))
    assert report.ok, report.problems
    assert report.committed_length == length
    info = cli("info", path, "--json")
    assert info["committed"] == length
    doc = cli("verify", path, "--json")
    assert (doc["ok"], doc["committed"]) == (True, length)


# ------------------------------------------------------------------- Dataset.tag, killed
SHARDS = {f"s{i}": 2 + i % 3 for i in range(8)}  # name -> committed length (rows: ROWS)

TAG_DATASET = """
import glob
from vault import Dataset

root, name = sys.argv[1], sys.argv[2]
ds = Dataset.open(root)
pattern = os.path.join(root, "shards", "*", "refs", name)
kill_when(lambda: bool(glob.glob(pattern)))  # the first shard's tag is written
ds.tag(name)
print("tagged every shard", flush=True)
"""


@pytest.fixture(scope="module")
def dataset_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("crash-ds") / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    for name, n in SHARDS.items():
        with ds.shard(name) as writer:
            writer.append(data(ROWS, 0, n, int(name[1:])))
    return root


def tag_killed_between_shards(tmp_path: Path, root: Path, name: str) -> list[str]:
    """Run ``Dataset.tag(name)`` in a child killed once the first shard's tag is written;
    returns the shards that have the tag (some, not all: else the test cannot run)."""
    done = run_child(tmp_path, TAG_DATASET, root, name)
    killed(done)
    tagged = sorted(s for s in SHARDS if (root / "shards" / s / "refs" / name).exists())
    if len(tagged) == len(SHARDS):
        pytest.skip("the kill landed after every shard was tagged")
    assert tagged, "the kill landed before any shard was tagged"
    return tagged


def test_a_dataset_tag_killed_between_shards_is_not_read_as_the_whole_dataset(
    tmp_path: Path, dataset_root: Path
) -> None:
    """``Dataset.tag`` names "every shard's current commit". A tagging process killed after
    its first shard leaves the tag on some shards. ``Dataset.open(root, at=tag)`` must then
    refuse the incomplete tag (a typed error naming it), not read a fraction of the data as
    the tagged dataset (a training run pinned at that tag would train on 1 of 8 shards)."""
    tagged = tag_killed_between_shards(tmp_path, dataset_root, "half")
    refused: VaultPinError | None = None
    try:
        pinned = Dataset.open(str(dataset_root), at="half")
    except VaultPinError as err:
        refused = err
    if refused is not None:  # a typed refusal that names the tag is fine
        assert "half" in str(refused)
    else:
        assert pinned.shards == sorted(SHARDS), f"the tag opened as shards {tagged} of 8"


def test_a_dataset_tag_killed_between_shards_loses_nothing_and_runs_again(
    tmp_path: Path, dataset_root: Path
) -> None:
    """After the kill every shard reads exactly its model (library and CLI), and running
    ``Dataset.tag`` again completes the tag: every shard at its commit, read as the model."""
    tag_killed_between_shards(tmp_path, dataset_root, "again")
    live = Dataset.open(str(dataset_root))
    assert live.committed_lengths == SHARDS
    for name, n in SHARDS.items():
        assert_model(live.read_numpy(name), data(ROWS, 0, n, int(name[1:])), name)
    listed = cli("ls", dataset_root, "--json")
    assert {e["shard"]: e["committed"] for e in listed} == SHARDS
    assert cli("verify", dataset_root, "--json")["ok"]
    ids = Dataset.open(str(dataset_root)).tag("again")  # run again: completes it
    assert ids == live.commit_ids
    pinned = Dataset.open(str(dataset_root), at="again")
    assert (pinned.shards, pinned.committed_lengths) == (sorted(SHARDS), SHARDS)
    table = pinned.episodes()
    for name, n in SHARDS.items():
        salt = int(name[1:])
        assert_model(pinned.read_numpy(name), data(ROWS, 0, n, salt), name)
        assert episodes_of(table[table.shard == name]) == model_episodes(ROWS, n, salt)


# --------------------------------------------------------------------- Vault.tag, killed
TAG_VAULT = """
from vault import Vault

path, name, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
temp = os.path.join(path, "refs", name + ".__lock")  # TensorStore's temporary file


def complete():
    try:
        return os.stat(temp).st_size >= size
    except FileNotFoundError:
        return False


live = Vault.open(path)
kill_when(complete)  # the tag's bytes are written, not yet renamed into place
live.tag(name)
print("tagged", flush=True)
"""


@pytest.fixture(scope="module")
def two_commits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A vault of two commits: 5 timesteps (commit 1), then 12 (commit 2)."""
    path = tmp_path_factory.mktemp("crash-tag") / "v"
    with Vault.create(str(path), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES) as writer:
        writer.append(data(ROWS, 0, 5))
        writer.append(data(ROWS, 5, 7))
    return path


def tag_killed_while_written(tmp_path: Path, path: Path, name: str) -> str:
    """``Vault.tag`` of the latest commit in a child killed once the tag's bytes are in
    TensorStore's temporary file, before its rename; returns the name it was killed tagging
    (``name``, or ``name-N`` where an earlier try's kill came too late)."""
    live = Vault.open(str(path))
    stamp = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    doc = {"commit": live.commit_id, "committed_length": live.committed_length, "created": stamp}
    size = len(json.dumps(doc).encode())
    for attempt in range(4):
        tried = f"{name}-{attempt}" if attempt else name
        done = run_child(tmp_path, TAG_VAULT, path, tried, size)
        if done.returncode == -signal.SIGKILL and not (path / "refs" / tried).exists():
            return tried
    pytest.skip("no kill landed between the tag's write and its rename")


def test_a_tag_killed_while_written_is_absent_and_written_again(
    tmp_path: Path, two_commits: Path
) -> None:
    """A tagger killed mid-write leaves no tag (the name is unknown, the other readers and
    the CLI work); tagging the same commit again works and pins it."""
    name = tag_killed_while_written(tmp_path, two_commits, "nightly")
    live = Vault.open(str(two_commits))
    assert name not in live.tags()
    with pytest.raises(VaultPinError, match=name):
        Vault.open(str(two_commits), at=name)
    check_vault(two_commits, ROWS, 12)
    assert live.tag(name) == live.commit_id  # run again
    assert Vault.open(str(two_commits), at=name).committed_length == 12
    assert cli("info", two_commits, "--at", name, "--json")["committed"] == 12


def test_a_tag_written_after_a_killed_tag_of_that_name_is_readable(
    tmp_path: Path, two_commits: Path
) -> None:
    """A learner tags its latest commit "best" and is killed while the tag is written (no tag
    results). Rerun, it tags the commit it now judges best, an earlier one: that tag must
    read back as written (``Vault.open(at="best")`` at that commit, ``tags()`` listing it),
    not as a malformed tag that no one can ever replace (tags never move)."""
    name = tag_killed_while_written(tmp_path, two_commits, "best")
    earlier = Vault.open(str(two_commits), at=1)
    assert earlier.committed_length == 5
    target = earlier.tag(name)
    try:
        pinned = Vault.open(str(two_commits), at=name)
        listed = Vault.open(str(two_commits)).tags()
    except VaultCorruptError as err:
        pytest.fail(f"the new tag reads as corrupt: {err}")
    assert (pinned.commit_id, pinned.committed_length) == (target, 5)
    assert listed[name] == target


# ------------------------------------------------ background writes: several pending, killed
BACKGROUND = """
import types
from vault import Vault

path, point, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
ROWS, CAP, STEP, WRITES = 3, 16, 3, 8


def state(n):
    # a ring buffer of CAP slots after n timesteps: slot i holds the latest time = i (mod CAP)
    base = n - n % CAP
    times = np.where(np.arange(CAP) < n % CAP, base, base - CAP) + np.arange(CAP)
    return types.SimpleNamespace(
        experience=at_times(ROWS, times),
        current_index=np.int32(n % CAP),
        is_full=np.bool_(n >= CAP),
        write_counter=np.array([0, n], np.uint32),
    )


chunk = {"obs": [2, 4, 1], "rew": [3, 4], "done": [3, 3]}
writer = Vault.create(path, state(0), chunk=chunk, done_leaf="done", reward_leaf="rew")
writer.max_pending = 4
queued = threading.Event()  # four writes wait behind the one being committed
seen = {"n": 0}


def hook(name, info, step):
    if name == point:
        seen["n"] += 1
        if seen["n"] == nth:
            queued.wait(60)
            os.kill(os.getpid(), signal.SIGKILL)
    return step()


vault.set_fault_hook(hook)
for k in range(1, WRITES + 1):
    if point == "commit" and k == nth + 4:
        queued.set()  # (this write would wait for the killed one)
    writer.write(state(STEP * k), block=False)
    print("issued", STEP * k, flush=True)
queued.set()
writer.close()
"""


@pytest.mark.parametrize(
    ("point", "nth", "committed", "issued"),
    [("commit", 3, 6, 18), ("trim", 1, 24, 24)],
    ids=["commit-of-the-third-of-several-pending", "trim-of-close"],
)
def test_a_writer_with_several_pending_writes_killed_keeps_exactly_the_writes_before(
    tmp_path: Path, point: str, nth: int, committed: int, issued: int
) -> None:
    """Eight ``write(block=False)`` of 3 timesteps, four allowed pending. Killed at the commit
    of the third (several more queued behind it): exactly the first two are committed, every
    commit pins its own data. Killed in the trim of ``close`` (which waited for all eight):
    all 24 are. Then the next writer appends exactly and closes with the arrays trimmed."""
    path = tmp_path / "v"
    out = killed(run_child(tmp_path, BACKGROUND, path, point, nth))
    assert out.split()[-1] == str(issued)  # the commit's kill: with four writes pending
    check_vault(path, ROWS, committed)
    for k in range(1, committed // 3 + 1):  # commit k holds the first k writes
        pinned = Vault.open(str(path), at=k)
        assert pinned.committed_length == 3 * k
        assert_model(pinned.read_numpy(), data(ROWS, 0, 3 * k), f"commit {k}")
    with pytest.raises(VaultPinError):
        Vault.open(str(path), at=committed // 3 + 1)  # the killed write never became one
    with Vault.open(str(path), mode="a") as writer:
        assert writer.committed_length == committed
        writer.append(data(ROWS, committed, 5))
    check_vault(path, ROWS, committed + 5)
    shape = json.loads((path / "experience" / "obs" / "zarr.json").read_text())["shape"]
    assert shape == [ROWS, committed + 5, 2]
    assert vault.verify(str(path)).warnings == []


# ------------------------------------------------------------- derive / combine, killed
DERIVE = """
from vault import Vault, combine, derive_episodes, derive_slice

op, src, dest, point, nth = sys.argv[1:6]
arm(point, int(nth))
if op == "slice":
    derive_slice(src, dest, rows=[0, 2], start=2, stop=11)
elif op == "episodes":
    source = Vault.open(src)
    derive_episodes(source, dest, source.episodes().select(min_length=2))
else:
    combine([src, src], dest)
print("built", flush=True)
"""
SOURCE_LENGTH = 13


def build(op: str, src: str, dest: str) -> Vault:
    """The operation run whole, in this process."""
    if op == "slice":
        return derive_slice(src, dest, rows=[0, 2], start=2, stop=11)
    if op == "episodes":
        source = Vault.open(src)
        return derive_episodes(source, dest, source.episodes().select(min_length=2))
    return combine([src, src], dest)


def make_source(where: str) -> str:
    with Vault.create(where, EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES) as writer:
        writer.append(data(ROWS, 0, 6))
        writer.append(data(ROWS, 6, SOURCE_LENGTH - 6))
    return Vault.open(where).fingerprint()


@pytest.fixture(scope="module")
def local_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, Any]]:
    """A source vault, its fingerprint, and each operation's result run whole (the model)."""
    folder = tmp_path_factory.mktemp("crash-derive")
    src = folder / "src"
    fingerprint = make_source(str(src))
    models = {}
    for op in ("slice", "episodes", "combine"):
        made = build(op, str(src), str(folder / f"model-{op}"))
        models[op] = (made.read_numpy(), made.fingerprint(), episodes_of(made.episodes()))
    return src, fingerprint, models


@pytest.mark.parametrize("op", ["slice", "episodes", "combine"])
def test_a_local_derive_killed_in_its_copy_leaves_nothing_and_runs_again(
    tmp_path: Path, local_source: tuple[Path, str, dict[str, Any]], op: str
) -> None:
    """Killed at the commit of its copy: nothing at the destination (not a vault, not listed),
    the source unchanged (its fingerprint, verify); run again, the result equals the
    operation run whole (data, fingerprint, episodes)."""
    src, fingerprint, models = local_source
    dest = tmp_path / "out" / "dest"
    killed(run_child(tmp_path, DERIVE, op, src, dest, "commit", 1))
    with pytest.raises(VaultNotFoundError):
        Vault.open(str(dest))
    assert cli("ls", tmp_path / "out", "--json") == []
    assert Vault.open(str(src)).fingerprint() == fingerprint
    assert vault.verify(str(src)).ok
    made = build(op, str(src), str(dest))
    values, want_fingerprint, want_episodes = models[op]
    assert_model(made.read_numpy(), values, op)
    assert made.fingerprint() == want_fingerprint
    assert episodes_of(made.episodes()) == want_episodes
    assert cli("verify", dest, "--json")["ok"]
    if op == "slice":  # and against the data model itself
        want = {k: x[[0, 2], 2:11] for k, x in data(ROWS, 0, SOURCE_LENGTH).items()}
        assert_model(made.read_numpy(), want, "slice")


def test_a_local_derive_killed_and_run_again_leaves_no_hidden_copy(
    tmp_path: Path, local_source: tuple[Path, str, dict[str, Any]]
) -> None:
    """On S3 the next build into the place of a killed one removes what it left
    (docs/guides/object-storage.md); on a disk the killed build's staged copy (as large as
    the result) stays beside the destination, hidden from ``vault ls``, after the rerun."""
    src, _, _ = local_source
    out = tmp_path / "out"
    killed(run_child(tmp_path, DERIVE, "slice", src, out / "dest", "commit", 1))
    build("slice", str(src), str(out / "dest"))
    assert sorted(os.listdir(out)) == ["dest"]


@pytest.fixture
def s3_source(s3_env: Any) -> tuple[str, str, str]:
    """A source vault on the S3 test server: (prefix, source, fingerprint)."""
    prefix = f"s3://{s3_env.bucket}/crash-{uuid.uuid4().hex[:10]}"
    fingerprint = make_source(f"{prefix}/src")
    return prefix, f"{prefix}/src", fingerprint


def test_a_derive_killed_on_s3_is_replaced_by_the_next_build_or_named_locked(
    tmp_path: Path, s3_source: tuple[str, str, str]
) -> None:
    """docs/guides/object-storage.md: an interrupted build "is never opened or listed as a
    vault; the next build into the same place removes it". Within the killed build's lease
    the rerun cannot know its builder is dead; it may then refuse, as ``Vault.create`` does
    in that case (``VaultLockedError`` naming the lease), but not tell the user to pick
    another destination as though something else were there."""
    prefix, src, _ = s3_source
    dest = f"{prefix}/dest"
    killed(run_child(tmp_path, DERIVE, "slice", src, dest, "commit", 1))
    locked: VaultLockedError | None = None
    try:
        build("slice", src, dest)
    except VaultLockedError as err:
        locked = err
    except VaultExistsError as err:
        pytest.fail(f"the rerun of a killed build is refused as though the place were taken: {err}")
    if locked is not None:  # refused while the lease runs: it must say so
        assert "lease" in str(locked) or "unlock" in str(locked), locked
    else:
        assert Vault.open(dest).committed_length == 9


def test_a_derive_killed_on_s3_is_no_vault_and_runs_again_after_vault_unlock(
    tmp_path: Path,
    s3_source: tuple[str, str, str],
    local_source: tuple[Path, str, dict[str, Any]],
) -> None:
    """Killed at the commit of its copy on S3: not a vault (open, ``vault ls``), the source
    unchanged; ``vault unlock`` frees the dead build's lease and the rerun equals the
    operation run whole (the same models as on a disk)."""
    prefix, src, fingerprint = s3_source
    dest, op = f"{prefix}/dest", "episodes"
    killed(run_child(tmp_path, DERIVE, op, src, dest, "commit", 1))
    with pytest.raises(VaultNotFoundError):
        Vault.open(dest)
    assert [e["path"] for e in cli("ls", prefix, "--json")] == [src]
    assert Vault.open(src).fingerprint() == fingerprint
    assert cli("unlock", dest, "--yes", "--json")["broken"] is True
    made = build(op, src, dest)
    values, want_fingerprint, want_episodes = local_source[2][op]
    assert_model(made.read_numpy(), values, op)
    assert made.fingerprint() == want_fingerprint
    assert episodes_of(made.episodes()) == want_episodes
    report = vault.verify(dest)
    assert report.ok, report.problems


# ----------------------------------------------------------------- an OGBench import, killed
IMPORT = """
from vault.converters import import_ogbench

src, dest, point, nth = sys.argv[1:5]
arm(point, int(nth))
import_ogbench(src, dest, block_bytes=1 << 16)
print("imported", flush=True)
"""
TRAIN, VAL = 23, 11  # timesteps of the training and validation files


def ogbench_arrays(n: int, salt: int) -> dict[str, np.ndarray]:
    t = np.arange(n)
    return {
        "observations": np.stack([100_000 * salt + t, t + 0.5], 1).astype(np.float32),
        "actions": ((t % 3) - 1).astype(np.float32)[:, None],
        "terminals": (t % 5 == 4).astype(np.float32),
    }


@pytest.fixture(scope="module")
def ogbench_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("crash-ogbench")
    for name, (n, salt) in {"maze-tiny-v0": (TRAIN, 0), "maze-tiny-v0-val": (VAL, 1)}.items():
        arrays: dict[str, Any] = ogbench_arrays(n, salt)
        np.savez(folder / f"{name}.npz", **arrays)
    return folder / "maze-tiny-v0.npz"


def check_import(dest: Path) -> None:
    for where, n, salt in [(dest, TRAIN, 0), (Path(f"{dest}-val"), VAL, 1)]:
        got = Vault.open(str(where)).read_numpy()
        assert_model({k: x[0] for k, x in got.items()}, ogbench_arrays(n, salt), str(where))
        assert vault.verify(str(where)).ok


@pytest.mark.parametrize(
    ("point", "nth"),
    [("commit", 1), ("trim", 1)],
    ids=["training-commit", "validation-trim"],
)
def test_an_ogbench_import_killed_before_its_vaults_are_published_runs_again(
    tmp_path: Path, ogbench_file: Path, point: str, nth: int
) -> None:
    """Killed while either vault is built (both staged): neither is at its destination, and
    the import runs again to the file's exact arrays."""
    dest = tmp_path / "out" / "maze"
    killed(run_child(tmp_path, IMPORT, ogbench_file, dest, point, nth))
    for where in (dest, Path(f"{dest}-val")):
        with pytest.raises(VaultNotFoundError):
            Vault.open(str(where))
    assert cli("ls", tmp_path / "out", "--json") == []
    import_ogbench(ogbench_file, dest, block_bytes=1 << 16)
    check_import(dest)


def test_an_ogbench_import_killed_between_its_two_vaults_runs_again(
    tmp_path: Path, ogbench_file: Path
) -> None:
    """The validation vault is renamed into place first, then the training vault closes (its
    trim): a kill there leaves ``<dest>-val`` without ``<dest>``. The docs promise nothing
    is left at either if the import is interrupted; at the least it must run again."""
    dest = tmp_path / "out" / "maze"
    killed(run_child(tmp_path, IMPORT, ogbench_file, dest, "trim", 2))
    with pytest.raises(VaultNotFoundError):
        Vault.open(str(dest))
    try:
        import_ogbench(ogbench_file, dest, block_bytes=1 << 16)
    except VaultExistsError as err:
        pytest.fail(f"the import cannot run again: {err}")
    check_import(dest)
