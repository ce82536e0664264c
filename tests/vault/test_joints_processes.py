"""Where several real processes meet one vault or dataset: a writer process paused inside
its commit step while this process reads it every way there is (library, streams, windows,
snapshots, verify, the ``vault`` command) and then refreshes and resumes a stream saved
meanwhile; a writer SIGKILLed on S3 while it holds the lease, its lock broken with ``vault
unlock`` and its vault resumed by a new writer while a reader streams the dead writer's last
commit; two processes opening the same shard name at once; a creator killed right after it
made its lock folder; a ``derive_slice`` of a dataset killed half-way on S3, then listed and
run again; an actor that joins a dataset (``exist_ok``) with other arguments than its creator.

Every value read is compared with a trivially correct model: the data say where they belong
(``obs = 100_000 * salt + 1000 * row + t``), so the model of a commit of ``n`` timesteps is
``data(rows, 0, n)``, and its episodes are enumerated by brute force. Other processes run code
written to ``tmp_path`` from this file; they use numpy only (no jax), and share no TensorStore
state with the readers here.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import vault
from vault import Dataset, Vault, VaultLockedError, VaultNotFoundError, resume_stream
from vault.cli.app import app

ROWS = 3
EXAMPLE = {
    "obs": np.zeros(2, np.float32),
    "rew": np.zeros((), np.float32),
    "done": np.zeros((), bool),
}
# small, uneven chunks: most appends rewrite a partly filled last chunk
CHUNK: dict[str, Sequence[int]] = {"obs": [2, 4, 1], "rew": [3, 4], "done": [3, 3]}
ROLES: dict[str, Any] = {"done_leaf": "done", "reward_leaf": "rew"}
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


MODEL = "import numpy as np\n\nROWS = 3\n\n\n" + inspect.getsource(data)


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(MODEL + textwrap.dedent(body))
    return path


def child_env() -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *sys.path])
    return env


def start(
    tmp_path: Path, name: str, body: str, *args: Any, stdin: Any = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(script(tmp_path, name, body)), *map(str, args)],
        env=child_env(),
        text=True,
        stdin=stdin,
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


def line_of(child: subprocess.Popen[str]) -> Any:
    """The next line the child printed, as JSON (its stderr when it died instead)."""
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:
        child.wait(timeout=60)
        assert child.stderr is not None
        raise AssertionError(f"the child ended ({child.returncode}): {child.stderr.read()[-3000:]}")
    return json.loads(line)


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


def assert_model(got: dict[str, Any], rows: int, length: int, salt: int = 0, t0: int = 0) -> None:
    want = {k: x[:, t0:] for k, x in data(rows, 0, length, salt).items()}
    for key in want:
        np.testing.assert_array_equal(np.asarray(got[key]), want[key], err_msg=key)


def cli(*args: Any, code: int | None = 0) -> Any:
    result = CliRunner().invoke(
        app, [str(a) for a in args], env={"COLUMNS": "200", "NO_COLOR": "1"}
    )
    if code is not None:
        assert result.exit_code == code, (result.output, result.exception)
    else:
        assert result.exit_code != 0, result.output
    return json.loads(result.output) if "--json" in args and code == 0 else result.output


def batches_of(stream: Any) -> list[tuple[list[int], list[int]]]:
    return [(b.row.tolist(), b.start.tolist()) for b in stream]


# ------------------------------------------------------ a writer paused inside its commit step
# Appends 3 timesteps (prints [commit id, length, fingerprint]), then a second append of 5
# that stops inside its commit step (prints {"paused": ...}) until a line comes on stdin;
# then prints the new commit and closes.
PAUSED_WRITER = """
import json, sys
import vault
from vault import Vault

path = sys.argv[1]


def hook(name, info, step):
    if name == "commit" and info["length"] == 13:
        print(json.dumps({"paused": info["length"]}), flush=True)
        sys.stdin.readline()
    return step()


vault.set_fault_hook(hook)
w = Vault.open(path, mode="a")
w.append(data(ROWS, 5, 3))
print(json.dumps([w.commit_id, w.committed_length, w.fingerprint()]), flush=True)
w.append(data(ROWS, 8, 5))
print(json.dumps([w.commit_id, w.committed_length, w.fingerprint()]), flush=True)
w.close()
"""


def test_every_reader_sees_the_last_commit_while_a_writer_process_is_inside_its_commit(
    tmp_path: Path,
) -> None:
    """format.md 8.5: while the writer is at any step, a reader sees the previous commit
    whole. The writer (another process) has grown the arrays, written the new chunks, the
    index and history/ and is stopped just before replacing the commit record: every reader
    entry point shows exactly the last commit, the lock is held (and ``vault unlock`` of a
    local vault breaks nothing); once the writer commits, the snapshot refreshes, the reader
    refreshes, and a stream saved meanwhile resumes on the commit it was made of."""
    path = tmp_path / "v"
    with Vault.create(str(path), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES) as first:
        first.append(data(ROWS, 0, 5))
    child = start(tmp_path, "paused", PAUSED_WRITER, path, stdin=subprocess.PIPE)
    assert child.stdin is not None
    try:
        pin, length, fingerprint = line_of(child)
        assert length == 8
        assert line_of(child) == {"paused": 13}
        grown = json.loads((path / "experience" / "obs" / "zarr.json").read_text())["shape"]
        assert grown[1] >= 13  # the paused append had grown the arrays and written its data

        reader = Vault.open(str(path))
        snap = reader.snapshot
        assert (reader.committed_length, reader.commit_id) == (8, pin)
        assert reader.fingerprint() == fingerprint
        assert_model(reader.read_numpy(), ROWS, 8)
        part = reader.read_numpy(rows=[2, 0], start=3)
        for key, x in data(ROWS, 0, 8).items():
            np.testing.assert_array_equal(part[key], x[[2, 0], 3:], err_msg=key)
        assert episodes_of(reader.episodes()) == model_episodes(ROWS, 8)
        assert snap.refreshed() is snap  # nothing committed since
        windows = list(reader.iter_windows(3, shuffle=False, drop_remainder=False))
        sizes = [3 if bool(w.is_full) else int(w.current_index) for w in windows]
        assert sizes == [3, 3, 2]  # windows of the last commit: 8 timesteps, not 13
        joined = np.concatenate(
            [np.asarray(w.experience["obs"])[:, :n] for w, n in zip(windows, sizes, strict=True)],
            axis=1,
        )
        np.testing.assert_array_equal(joined, data(ROWS, 0, 8)["obs"])
        options: dict[str, Any] = {"shuffle": True, "seed": 3, "drop_remainder": False}
        with reader.as_dataset(2, 2, **options) as stream:
            whole = batches_of(stream)
        assert sorted((r, t) for rows, ts in whole for r, t in zip(rows, ts, strict=True)) == [
            (r, t) for r in range(ROWS) for t in range(7)
        ]
        saved = reader.as_dataset(2, 2, **options)
        batches_of([next(saved), next(saved)])
        state = json.loads(json.dumps(saved.state()))
        saved.close()

        report = vault.verify(str(path))
        assert (report.ok, report.committed_length) == (True, 8), report.problems
        info = cli("info", path, "--json")
        assert (info["committed"], info["commit"], info["fingerprint"]) == (8, pin, fingerprint)
        assert [leaf["shape"][1] for leaf in info["leaves"]] == [8] * 3
        assert (info["writer"]["held"], info["writer"]["holder"]["pid"]) == (True, child.pid)
        doc = cli("verify", path, "--json")
        assert (doc["ok"], doc["committed"]) == (True, 8)
        assert [(e["path"], e["committed"]) for e in cli("ls", tmp_path, "--json")] == [
            (str(path), 8)
        ]
        eps = cli("episodes", path, "--head", "0", "--json")
        got = sorted((r["row"], r["start"], r["length"], r["return"]) for r in eps["records"])
        assert got == model_episodes(ROWS, 8)
        with pytest.raises(VaultLockedError, match=re.escape(f"pid {child.pid}")):
            Vault.open(str(path), mode="a")
        cli("unlock", path, "--yes", code=None)  # a local lock goes with its process
        holder = vault.lock_holder(str(path))
        assert holder is not None
        assert holder.pid == child.pid

        child.stdin.write("go\n")
        child.stdin.flush()
        latest, length, _ = line_of(child)
        assert length == 13
    except BaseException:
        child.kill()
        raise
    finish(child)  # it closed
    assert snap.length == 8  # a snapshot never changes
    assert snap.refreshed().length == 13
    assert reader.committed_length == 8  # until it refreshes
    assert reader.refresh() == 13
    assert reader.commit_id == latest
    assert_model(reader.read_numpy(), ROWS, 13)
    assert episodes_of(reader.episodes()) == model_episodes(ROWS, 13)
    with resume_stream(state) as rest:  # the commit it was saved on, not the latest
        assert batches_of(rest) == whole[2:]
    pinned = Vault.open(str(path), at=pin)
    assert pinned.fingerprint() == fingerprint
    assert_model(pinned.read_numpy(), ROWS, 8)
    assert vault.verify(str(path), at=pin, fingerprint=fingerprint).ok


# --------------------------------------------------------- two processes and one shard name
# Opens shard argv[2] of the dataset at argv[1] for writing and prints what came of it. Its
# first look finds no shard there; then it is descheduled (as any process may be) until the
# other process has published the shard's manifest, and goes on: the interleaving of two
# actors that open the same shard name at once, made certain. (Without the private name it
# waits on, it runs unpaused.)
SHARD_OPENER = """
import json, sys, time
from pathlib import Path
import vault
from vault import Dataset
from vault.storage import _file

root, name, marker = sys.argv[1], sys.argv[2], Path(sys.argv[3])
real = getattr(getattr(_file, "FileLocation", None), "is_empty", None)
if real is not None:

    def is_empty(self):
        if self.path.name == name and not (self.path / "zarr.json").exists():
            marker.touch()
            deadline = time.monotonic() + 60
            while not (self.path / "zarr.json").exists() and time.monotonic() < deadline:
                time.sleep(0.005)
        return real(self)

    _file.FileLocation.is_empty = is_empty
else:
    marker.touch()
ds = Dataset.open(root)
try:
    w = ds.shard(name)
except vault.VaultError as err:
    print(json.dumps([type(err).__name__, str(err)]), flush=True)
else:
    t0 = w.committed_length
    w.append(data(ROWS, t0, 2, 1))
    w.close()
    print(json.dumps(["appended", t0]), flush=True)
"""


def test_a_shard_opened_while_another_process_creates_it_is_locked_not_foreign(
    tmp_path: Path,
) -> None:
    """Two actors open the same shard name at once (a restarted actor, a name reused): the
    one that comes second finds the shard being created. ``Dataset.shard``: "an existing one
    is opened for appending ... (its writer lock keeps it to one writer)"; raises
    ``VaultLockedError``: "another writer holds the shard". It must not call the other's new
    shard a foreign folder to be moved away, and nothing the first writes may be lost."""
    root = tmp_path / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    marker = tmp_path / "looked"
    child = start(tmp_path, "opener", SHARD_OPENER, root, "s0", marker)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        with ds.shard("s0") as first:  # this process creates it, and holds it
            first.append(data(ROWS, 0, 4))
            kind, message = json.loads(finish(child))
    except BaseException:
        child.kill()
        raise
    assert_model(Dataset.open(str(root)).read_numpy("s0"), ROWS, 4)
    assert "holds no vault" not in message, message
    assert kind == "VaultLockedError", message
    assert f"pid {os.getpid()}" in message  # names the holder


# ------------------------------------------------- a creator killed right after its lock folder
@pytest.mark.parametrize("how", ["vault", "shard"])
def test_a_creator_killed_right_after_making_its_lock_folder_is_taken_over(
    tmp_path: Path, how: str
) -> None:
    """format.md 8.1: a location that holds only what a creation stopped before its manifest
    leaves is taken over by the next create (holding the writer lock, so never while its
    creator runs). A creator killed between making ``lock/`` and writing ``lock/zarr.json``
    (its holder record) leaves exactly an empty ``lock/`` folder (made here as that process
    leaves it; the kernel dropped its ``flock`` with it). An actor restarted with the same
    shard name must be able to create its shard there."""
    if how == "vault":
        where = tmp_path / "v"
    else:
        root = tmp_path / "ds"
        ds = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
        where = root / "shards" / "s0"
    (where / "lock").mkdir(parents=True)  # what the killed creator left
    assert vault.lock_holder(str(where)) is None  # nobody holds it
    if how == "vault":
        writer = Vault.create(str(where), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    else:
        writer = ds.shard("s0")
    with writer:
        writer.append(data(ROWS, 0, 3))
    assert_model(Vault.open(str(where)).read_numpy(), ROWS, 3)
    assert vault.verify(str(where)).ok


# ---------------------------------------------------------- an actor joining with other arguments
@pytest.mark.parametrize(
    "other",
    [{"codec": "lz4"}, {"chunk": {"obs": [1, 8, 2]}}, {"rows": 5}],
    ids=["codec", "chunk", "rows"],
)
def test_an_actor_joining_a_dataset_with_other_arguments_is_told(
    tmp_path: Path, other: dict[str, Any]
) -> None:
    """Every actor calls ``Dataset.create(..., exist_ok=True)`` (many-writers guide); the
    dataset's root "fixes the structure, leaves (shapes, dtypes, codecs, chunks), default rows"
    (format.md 5.1). An actor restarted with other settings (a new codec, chunk shape or rows)
    should be refused with a typed error naming the setting (as another structure is), or
    get what it asked for (a shard's rows may differ); not the creator's settings, unsaid.
    What the creator's actor wrote stays as it was."""
    root = tmp_path / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    with ds.shard("s0") as w:
        w.append(data(ROWS, 0, 4))
    asked: dict[str, Any] = {"rows": ROWS, "chunk": CHUNK, "codec": "auto", **other}
    name = next(iter(other))
    refused: vault.VaultError | None = None
    try:
        joined = Dataset.create(str(root), EXAMPLE, exist_ok=True, **ROLES, **asked)
    except vault.VaultError as err:
        refused = err
    if refused is not None:  # a refusal is fine when it names what differs
        assert name in str(refused), refused
    else:
        with joined.shard("s1") as w:
            if name == "rows":
                assert w.rows == 5
                w.append(data(5, 0, 3, 1))
            else:
                leaf = next(leaf for leaf in w.manifest.leaves if leaf.name == "obs")
                if name == "codec":
                    assert "lz4" in json.dumps(leaf.codecs), leaf.codecs
                else:
                    assert list(leaf.chunk) == [1, 8, 2], leaf.chunk
        if name == "rows":
            assert_model(Dataset.open(str(root)).read_numpy("s1"), 5, 3, 1)
    assert_model(Dataset.open(str(root)).read_numpy("s0"), ROWS, 4)


# ------------------------------------------------------------------------ S3: killed, unlocked
# Resumes the vault at argv[1], appends 3 timesteps (prints [commit id, length]), then dies
# by SIGKILL inside the next append's commit step (its chunks written, its record not), the
# lease still held.
KILLED_S3_WRITER = """
import json, os, signal, sys
import vault
from vault import Vault


def hook(name, info, step):
    if name == "commit" and info["length"] > 9:
        os.kill(os.getpid(), signal.SIGKILL)
    return step()


vault.set_fault_hook(hook)
w = Vault.open(sys.argv[1], mode="a")
w.append(data(ROWS, 6, 3))
print(json.dumps([w.commit_id, w.committed_length]), flush=True)
w.append(data(ROWS, 9, 4))
"""


def test_a_writer_killed_on_s3_is_unlocked_and_resumed_while_a_reader_streams(
    s3_env: Any, tmp_path: Path
) -> None:
    """A writer process dies holding its lease, inside an append (its chunks written past the
    commit). The vault stays locked (named, with the dead holder) until ``vault unlock``
    breaks it; a new writer resumes at the last commit and appends. Meanwhile a reader that
    opened before streams on: its stream, a stream resumed from its saved state, its pin and
    fingerprint all stay on its commit; after ``refresh`` it reads the new writer's commit."""
    url = f"s3://{s3_env.bucket}/procs-{uuid.uuid4().hex[:8]}/v"
    with Vault.create(url, EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES) as first:
        first.append(data(ROWS, 0, 6))
    reader = Vault.open(url)
    pin, fingerprint = reader.commit_id, reader.fingerprint()
    with reader.as_dataset(2, 2, shuffle=True, seed=1, drop_remainder=False) as stream:
        whole = batches_of(stream)
    stream = reader.as_dataset(2, 2, shuffle=True, seed=1, drop_remainder=False)
    it = iter(stream)
    assert batches_of([next(it)]) == whole[:1]
    state = json.loads(json.dumps(stream.state()))

    out = finish(start(tmp_path, "killed", KILLED_S3_WRITER, url), killed=True)
    dead_commit, length = json.loads(out.splitlines()[0])
    assert length == 9
    info = cli("info", url, "--json")
    assert (info["committed"], info["commit"]) == (9, dead_commit)
    assert info["writer"]["held"] is True  # the dead writer's lease has not run out
    with pytest.raises(VaultLockedError, match=re.escape("vault unlock")):
        Vault.open(url, mode="a")
    assert "writer lock broken" in cli("unlock", url, "--yes")
    assert cli("info", url, "--json")["writer"]["held"] is False
    with Vault.open(url, mode="a") as resumed:
        assert resumed.committed_length == 9
        resumed.append(data(ROWS, 9, 2))
    try:
        assert batches_of(it) == whole[1:]  # the reader's stream went on at its commit
    finally:
        stream.close()
    assert (reader.committed_length, reader.fingerprint()) == (6, fingerprint)
    assert_model(reader.read_numpy(), ROWS, 6)
    with resume_stream(state) as rest:
        assert batches_of(rest) == whole[1:]
    assert reader.refresh() == 11
    assert_model(reader.read_numpy(), ROWS, 11)
    assert episodes_of(reader.episodes()) == model_episodes(ROWS, 11)
    assert Vault.open(url, at=dead_commit).committed_length == 9
    assert vault.verify(url, at=pin, fingerprint=fingerprint).ok
    report = vault.verify(url)
    assert (report.ok, report.committed_length) == (True, 11), report.problems


# ------------------------------------------------------------ S3: a dataset derive killed
# Derives a slice (start=1) of the dataset at argv[1] into argv[2]; SIGKILLs itself inside
# the commit step of the second shard it copies (the first one complete, the second begun).
KILLED_DERIVE = """
import os, signal, sys
import vault
from vault import Dataset

commits = {"n": 0}


def hook(name, info, step):
    if name == "commit":
        commits["n"] += 1
        if commits["n"] == 2:
            os.kill(os.getpid(), signal.SIGKILL)
    return step()


vault.set_fault_hook(hook)
vault.derive_slice(Dataset.open(sys.argv[1]), sys.argv[2], start=1)
"""


def test_a_dataset_derive_killed_on_s3_is_never_listed_and_runs_again(
    s3_env: Any, tmp_path: Path
) -> None:
    """``derive_slice`` of a dataset into an S3 prefix (no atomic rename: built in place),
    killed while copying its second shard. ``Location.staging``: "an interrupted build is
    never opened or listed as a vault ... one that was killed leaves data without a manifest,
    which the next build there removes first"; derive's module: "a destination is complete
    or absent". After ``vault unlock`` of the shard the dead process was writing, ``vault
    ls`` shows only the source, and the same derive runs again to the same destination."""
    prefix = f"s3://{s3_env.bucket}/procs-{uuid.uuid4().hex[:8]}"
    root, dest = f"{prefix}/ds", f"{prefix}/cut"
    ds = Dataset.create(root, EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    lengths = {"s0": 5, "s1": 6, "s2": 4}
    for name, n in lengths.items():
        with ds.shard(name) as w:
            w.append(data(ROWS, 0, n, int(name[1:])))
    finish(start(tmp_path, "derive", KILLED_DERIVE, root, dest), killed=True)
    with pytest.raises(VaultNotFoundError):
        Dataset.open(dest)
    cli("unlock", f"{dest}/shards/s1", "--yes")  # the dead builder's lease
    listed = [e["path"].rstrip("/") for e in cli("ls", prefix, "--json")]
    assert listed == [root], listed
    cut = vault.derive_slice(Dataset.open(root), dest, start=1)
    assert cut.committed_lengths == {name: n - 1 for name, n in lengths.items()}
    for name, n in lengths.items():
        assert_model(cut.read_numpy(name), ROWS, n, int(name[1:]), t0=1)
