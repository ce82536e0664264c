"""Where reading features meet each other and meet a writer in another process: streams,
Grain sources, pins, tags, fingerprints, verify, xarray and multi-process shares over vaults
and datasets of shards that grow (or are trimmed by a closing writer) while they are read.

Every value read is compared with a trivially correct model: the data say where they belong
(``1000 * row + t``, a salt per shard), so the model of any commit of ``n`` timesteps is
``data(0, n)``, and the valid starts of an epoch are enumerated by brute force over it (seams
and episode ends of that commit included). Writers run as real subprocesses (their code is
written to ``tmp_path`` from this file), so the readers share no TensorStore state with them.
"""

from __future__ import annotations

import inspect
import json
import os
import pickle
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vault
from vault import Dataset, Vault, VaultReadError, resume_stream

ROWS = 3
EXAMPLE = {
    "obs": np.zeros(2, np.float32),
    "done": np.zeros((), bool),
    "trunc": np.zeros((), bool),
}
# small, uneven chunks: a few timesteps per append rewrite the last, partly filled chunk
CHUNK = {"obs": [2, 4, 1], "done": [3, 3], "trunc": [2, 5]}
ROLES = {"done_leaf": "done", "truncated_leaf": "trunc"}
REPO = Path(vault.__file__).resolve().parents[1]


def data(salt: int, rows: int, t0: int, n: int) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)`` of every row of shard ``salt``: obs says where it belongs."""
    t = np.arange(t0, t0 + n)[None, :]
    r = np.arange(rows)[:, None]
    code = 100_000 * salt + 1000 * r + t
    return {
        "obs": (code[..., None] + np.array([0.0, 0.5])).astype(np.float32),
        "done": (7 * t + 3 * r + salt) % 9 == 4,
        "trunc": (t + 2 * r + salt) % 13 == 12,
    }


# What a writer process runs starts with the model, as defined here.
MODEL = "import numpy as np\n\n\n" + inspect.getsource(data)

VAULT_WRITER = """
import sys
from vault import Vault
from vault.format import _tags

_tags.PENDING_MAX = 4  # place tags flushed from the commit record every few appends
path, appends = sys.argv[1], int(sys.argv[2])
sizes = [1, 3, 2, 5, 1, 4, 7, 2]
v = Vault.open(path, mode="a")
t0 = v.committed_length
for i in range(appends):
    n = sizes[i % len(sizes)]
    v.append(data(0, 3, t0, n), continues=i % 11 != 10)  # a restart seam now and then
    t0 += n
    if i % 9 == 8:  # a writer that closes (trims the arrays) and reopens (grows them)
        v.close()
        v = Vault.open(path, mode="a")
v.close()
"""

DATASET_WRITER = """
import sys
from vault import Dataset
from vault.format import _tags

_tags.PENDING_MAX = 4
root, shards = sys.argv[1], int(sys.argv[2])
example = {k: x[0, 0] for k, x in data(0, 1, 0, 1).items()}
chunk = {"obs": [2, 4, 1], "done": [3, 3], "trunc": [2, 5]}
ds = Dataset.create(
    root, example, rows=3, chunk=chunk, done_leaf="done", truncated_leaf="trunc", exist_ok=True
)
sizes = [1, 3, 2, 5, 1, 4, 7, 2]
for s in range(shards):
    rows = 1 + s % 4
    with ds.shard(f"s{s:02d}", rows=rows) as w:
        t0 = 0
        for i in range(2 + s % 5):
            n = sizes[(i + s) % len(sizes)]
            w.append(data(s, rows, t0, n))
            t0 += n
"""

SIZES = [1, 3, 2, 5, 1, 4, 7, 2]
STARTS = np.cumsum([0] + [SIZES[i % 8] for i in range(160)]).tolist()  # of VAULT_WRITER's appends
RESTARTS = [STARTS[i] for i in range(160) if i % 11 == 10]  # its appends with continues=False

STEP_WRITER = """
import json, sys
from vault import Vault

path = sys.argv[1]
w = None
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "open":
        w = Vault.open(path, mode="a")
    elif cmd[0] == "append":
        t0 = w.committed_length
        w.append(data(0, 3, t0, int(cmd[1])))
    elif cmd[0] == "close":
        w.close()
        w = None
    shape = json.load(open(path + "/experience/obs/zarr.json"))["shape"]
    print(json.dumps({"committed": None if w is None else w.committed_length, "shape": shape}))
    sys.stdout.flush()
"""


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(MODEL + textwrap.dedent(body))
    return path


def child_env() -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *sys.path])
    return env


def start(tmp_path: Path, name: str, body: str, *args: Any, **kw: Any) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(script(tmp_path, name, body)), *map(str, args)],
        env=child_env(),
        text=True,
        **kw,
    )


def finish(child: subprocess.Popen, timeout: float = 60) -> None:
    try:
        child.wait(timeout=timeout)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0


def new_vault(path: Path) -> None:
    Vault.create(str(path), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES).close()


def valid_starts(
    model: dict[str, np.ndarray],
    seams: list[int],
    seq: int,
    stride: int = 1,
    aware: bool = False,
    rows: Any = None,
) -> set[tuple[int, int]]:
    """(row, t) of every window an epoch must yield, by brute force."""
    n = model["done"].shape[1]
    out = set()
    for r in range(model["done"].shape[0]) if rows is None else rows:
        for t in range(0, n - seq + 1, stride):
            if any(t < a <= t + seq - 1 for a in seams):
                continue
            ends = model["done"][r, t : t + seq - 1] | model["trunc"][r, t : t + seq - 1]
            if aware and ends.any():
                continue
            out.add((r, t))
    return out


def flat_items(batch: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """source, row, start ``[k]`` and leaves ``[k, seq, ...]`` of a batch or a stack."""
    stacked = np.asarray(batch.row).ndim == 2
    lead = 2 if stacked else 1
    exp = {}
    for key, x in batch.experience.items():
        x = np.asarray(x)
        exp[key] = x.reshape(-1, *x.shape[lead:])
    meta = (np.asarray(m).ravel() for m in (batch.source, batch.row, batch.start))
    return (*meta, exp)


def check_windows(batches: list[Any], models: list[dict[str, np.ndarray]], seq: int) -> list[Any]:
    """Every window equals the model of its source at its place; (epoch, source, row, start)."""
    seen = []
    for b in batches:
        source, row, start, exp = flat_items(b)
        for i in range(source.size):
            s, r, t = int(source[i]), int(row[i]), int(start[i])
            for key, x in exp.items():
                np.testing.assert_array_equal(
                    x[i], models[s][key][r, t : t + seq], err_msg=f"{key} {s} {r} {t}"
                )
            seen.append((b.epoch, s, r, t))
    return seen


# ------------------------------------------------------------------ a writer in another process
def test_readers_streams_and_grain_sources_see_whole_commits_while_a_process_appends(
    tmp_path: Path,
) -> None:
    """Each reader opened during the appends reads one commit, whole: its data, every stream
    (options varied) and Grain source made from it hold exactly that commit's windows, and
    every commit seen keeps its fingerprint and verifies at its pin once the vault has grown."""
    path = tmp_path / "v"
    new_vault(path)
    child = start(tmp_path, "writer", VAULT_WRITER, path, 160)
    seen_commits: list[tuple[str, int, str]] = []
    streamed = 0
    try:
        deadline = time.monotonic() + 60
        while Vault.open(str(path)).committed_length == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        it = 0
        while child.poll() is None or it < 2:
            it += 1
            r = Vault.open(str(path))
            n = r.committed_length
            model = data(0, ROWS, 0, n)
            seams = [t for t in RESTARTS if 0 < t < n]  # the writer's restart seams
            assert [(x.at, x.lost) for x in r.seams] == [(t, 0) for t in seams]
            got = r.read_numpy()
            for key in model:
                np.testing.assert_array_equal(got[key], model[key], err_msg=key)
            part = r.read_numpy(rows=[0, 2], start=n // 2)  # chunk-crossing, a row block cut
            for key in model:
                np.testing.assert_array_equal(part[key], model[key][[0, 2], n // 2 :])
            seq = 1 + it % 4
            if n < seq:
                continue
            stride, aware = 1 + (it // 2) % 2, bool(it % 2)
            options: dict[str, Any] = {
                "shuffle": bool(it % 3), "seed": it, "episode_aware": aware, "stride": stride,
                "drop_remainder": False, "block_timesteps": seq + it % 5,
                "prefetch": it % 3, "interleave": 1 + it % 2,
            }  # fmt: skip
            if it % 4 == 0:
                options["stack"] = 2
            want = valid_starts(model, seams, seq, stride, aware)
            try:
                with r.as_dataset(5, seq, **options) as stream:
                    windows = check_windows(list(stream), [model], seq)
            except VaultReadError:  # every window crosses a seam or an episode end
                assert not want
                continue
            starts = [(row, t) for _, _, row, t in windows]
            assert len(starts) == len(set(starts))
            assert set(starts) == want, options
            source = vault.grain_source(r, seq, stride=stride, episode_aware=aware)
            assert len(source) == len(want)
            for i in range(0, len(source), 3):
                _, row, t = source.where(i)
                assert (row, t) in want
                np.testing.assert_array_equal(source[i]["obs"], model["obs"][row, t : t + seq])
            seen_commits.append((r.commit_id, n, r.fingerprint()))
            streamed += 1
            if it % 3 == 0:  # the latest commit, checked while the writer goes on
                report = vault.verify(str(path))
                assert report.ok, report.problems
    finally:
        finish(child)
    assert streamed >= 2
    assert Vault.open(str(path)).committed_length == STARTS[160]
    for commit, n, fingerprint in seen_commits[:: max(1, len(seen_commits) // 6)]:
        pinned = Vault.open(str(path), at=commit)
        assert pinned.committed_length == n
        assert pinned.fingerprint() == fingerprint
        np.testing.assert_array_equal(pinned.read_numpy()["obs"], data(0, ROWS, 0, n)["obs"])
        report = vault.verify(str(path), at=commit, fingerprint=fingerprint)
        assert report.ok, report.problems


def test_a_dataset_read_and_tagged_while_a_process_adds_shards_keeps_every_tag(
    tmp_path: Path,
) -> None:
    """A learner refreshes a dataset whose shards another process adds and appends to: every
    shard reads as its model, every stream over the shards holds exactly their windows, and
    every tag set meanwhile opens later as exactly the commits it named (data and xarray)."""
    root = tmp_path / "ds"
    Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    child = start(tmp_path, "shards", DATASET_WRITER, root, 14)
    tags: list[tuple[str, dict[str, int], dict[str, str]]] = []
    live = Dataset.open(str(root))
    try:
        it = 0
        while child.poll() is None or it < 2:
            it += 1
            live.refresh()
            lens = live.committed_lengths
            models = [data(int(n[1:]), live.vault(n).rows, 0, lens[n]) for n in live.shards]
            for name, model in zip(live.shards, models, strict=True):
                got = live.vault(name).read_numpy()
                for key in model:
                    np.testing.assert_array_equal(got[key], model[key], err_msg=f"{name} {key}")
            if not lens or max(lens.values()) < 2:
                continue
            aware = bool(it % 2)
            with live.as_dataset(
                4, 2, seed=it, episode_aware=aware, drop_remainder=False, block_timesteps=4
            ) as stream:
                windows = check_windows(list(stream), models, 2)
            want = {
                (s, r, t) for s, m in enumerate(models) for r, t in valid_starts(m, [], 2, 1, aware)
            }
            got_starts = [(s, r, t) for _, s, r, t in windows]
            assert len(got_starts) == len(set(got_starts))
            assert set(got_starts) == want
            tag = f"t{it}"
            tags.append((tag, dict(lens), live.tag(tag)))
    finally:
        finish(child)
    assert len(tags) >= 2
    assert Dataset.open(str(root)).shards == [f"s{s:02d}" for s in range(14)]
    pytest.importorskip("xarray")
    for tag, lens, ids in tags[:: max(1, len(tags) // 4)]:
        pinned = Dataset.open(str(root), at=tag)
        assert pinned.committed_lengths == lens
        assert pinned.commit_ids == ids
        tree = pinned.to_xarray(episodes=False)
        for name in pinned.shards:
            model = data(int(name[1:]), pinned.vault(name).rows, 0, lens[name])
            node = tree[f"shards/{name}"]
            for key in model:
                np.testing.assert_array_equal(np.asarray(node[key].values), model[key])


@pytest.mark.parametrize("how", ["read_numpy", "stream"])
def test_a_refreshed_reader_reads_after_a_trim_and_regrowth_seen_by_another_reader(
    tmp_path: Path, how: str
) -> None:
    """Reader A opens while the writer (another process) has grown the arrays past the commit;
    the writer closes (trimming them to the commit), reader B opens the vault in A's process,
    the writer reopens and appends; A refreshes: it must read the new commit."""
    path = tmp_path / "v"
    new_vault(path)
    child = start(
        tmp_path, "steps", STEP_WRITER, path, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert child.stdin is not None
    assert child.stdout is not None

    def do(command: str) -> dict[str, Any]:
        child.stdin.write(command + "\n")
        child.stdin.flush()
        return json.loads(child.stdout.readline())

    try:
        do("open")
        assert do("append 3") == {"committed": 3, "shape": [ROWS, 4, 2]}  # grown ahead
        a = Vault.open(str(path))
        assert do("close")["shape"] == [ROWS, 3, 2]  # trimmed to the commit
        Vault.open(str(path))  # another reader of the same vault in this process
        do("open")
        assert do("append 1")["committed"] == 4
        assert a.refresh() == 4
        model = data(0, ROWS, 0, 4)
        if how == "read_numpy":
            got = a.read_numpy()
            for key in model:
                np.testing.assert_array_equal(got[key], model[key])
        else:
            with a.as_dataset(ROWS * 3, 2, shuffle=False) as stream:
                windows = check_windows(list(stream), [model], 2)
            assert {(r, t) for _, _, r, t in windows} == valid_starts(model, [], 2)
    finally:
        child.stdin.close()
        finish(child)
        child.stdout.close()


@pytest.mark.parametrize("rows", [[1, 0, 2], slice(None, None, -1), [2, 2, 0]])
@pytest.mark.parametrize("reader", ["pinned", "live"])
def test_rows_in_any_order_at_a_commit_whose_last_chunk_was_rewritten(
    tmp_path: Path, rows: Any, reader: str
) -> None:
    """A commit whose last chunk is partly filled, read after another append rewrote that
    chunk (a pinned reader, or a reader of the latest commit while the writer goes on), with a
    selection of as many rows as the vault has but not in order."""
    path = tmp_path / "v"
    writer = Vault.create(str(path), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    writer.append(data(0, ROWS, 0, 6))  # obs chunks of 4 timesteps: 4-5 partly filled
    pin = writer.commit_id
    live = {kind: Vault.open(str(path)) for kind in ("read_numpy", "read")}  # at that commit
    writer.append(data(0, ROWS, 6, 1))  # rewrites the partly filled chunk
    model = data(0, ROWS, 0, 6)
    picked = np.arange(ROWS)[rows] if isinstance(rows, slice) else np.asarray(rows)
    try:
        for kind in ("read_numpy", "read"):
            r = Vault.open(str(path), at=pin) if reader == "pinned" else live[kind]
            assert r.committed_length == 6
            if kind == "read_numpy":
                got = r.read_numpy(rows=rows)
            else:
                got = {k: np.asarray(x) for k, x in r.read(rows=rows).experience.items()}
            for key in model:
                np.testing.assert_array_equal(got[key], model[key][picked], err_msg=key)
    finally:
        writer.close()


# ------------------------------------------------------------------------- stream checkpoints
@pytest.mark.parametrize(
    "option",
    [
        {"seed": np.int64(3)},
        {"stride": np.int32(2)},
        {"epochs": np.int64(2)},
        {"shuffle": np.bool_(False)},
        {"rows": slice(np.int64(0), np.int64(2))},
    ],
    ids=["seed", "stride", "epochs", "shuffle", "rows-slice"],
)
def test_a_stream_made_with_numpy_scalars_checkpoints_and_resumes(
    tmp_path: Path, option: dict[str, Any]
) -> None:
    path = tmp_path / "v"
    with Vault.create(str(path), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES) as v:
        v.append(data(0, ROWS, 0, 20))
    r = Vault.open(str(path))
    with r.as_dataset(4, 3, **option) as stream:
        whole = [b.start.tolist() for b in stream]
    with r.as_dataset(4, 3, **option) as stream:
        next(stream)
        state = json.loads(json.dumps(stream.state()))
    with resume_stream(state) as rest:
        assert [b.start.tolist() for b in rest] == whole[1:]


def test_a_stream_of_a_dataset_resumes_on_its_shards_after_growth_and_new_shards(
    tmp_path: Path,
) -> None:
    """An unpinned dataset's stream checkpoint names each shard's commit: shards appended to,
    added (a zero-length one too) and derived from since change nothing of the rest."""
    root = tmp_path / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    for s, (rows, n) in enumerate([(1, 11), (3, 7), (2, 2)]):
        with ds.shard(f"s{s:02d}", rows=rows) as w:
            w.append(data(s, rows, 0, n))
    reader = Dataset.open(str(root))
    options: dict[str, Any] = {
        "seed": 5, "episode_aware": True, "drop_remainder": False, "block_timesteps": 4,
        "epochs": 2, "stack": 2,
    }  # fmt: skip
    with reader.as_dataset(3, 3, **options) as stream:
        whole = list(stream)
    models = [data(s, rows, 0, n) for s, (rows, n) in enumerate([(1, 11), (3, 7), (2, 2)])]
    seen = check_windows(whole, models, 3)
    for epoch in (0, 1):
        got = [(s, r, t) for e, s, r, t in seen if e == epoch]
        want = {(s, r, t) for s, m in enumerate(models) for r, t in valid_starts(m, [], 3, 1, True)}
        assert len(got) == len(set(got))
        assert set(got) == want
    with reader.as_dataset(3, 3, **options) as stream:
        for _ in range(3):
            next(stream)
        state = json.loads(json.dumps(stream.state()))
    more = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, exist_ok=True, **ROLES)
    with more.shard("s00") as w:
        w.append(data(0, 1, 11, 5))
    with more.shard("s03", rows=2) as w:
        w.append(data(3, 2, 0, 9))
    vault.derive_slice(Dataset.open(str(root)), str(tmp_path / "sliced"), start=1)
    more.shard("s04").close()  # a shard with no data
    with resume_stream(state) as rest:
        tail = list(rest)
    flat_whole = [flat_items(b)[:3] for b in whole]
    flat_tail = [flat_items(b)[:3] for b in tail]
    # resumed after 3 items of stacks of 2: the 4th item first
    assert len(flat_tail) == len(flat_whole) - 3
    for a, b in zip(flat_tail, flat_whole[3:], strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)


# --------------------------------------------------------------------------- pinned datasets
def test_a_tagged_dataset_reads_the_same_everywhere_after_growth_new_shards_and_derives(
    tmp_path: Path,
) -> None:
    """``Dataset.open(at=tag)`` and each shard's ``Vault.open(at=tag)``: data, xarray, Grain
    (pickled), windows of one shard, episodes, fingerprints and verify stay the tagged ones."""
    root = tmp_path / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    shapes = {"s00": (1, 9), "s01": (3, 11), "s02": (2, 0)}  # s02: no data when tagged
    for name, (rows, n) in shapes.items():
        with ds.shard(name, rows=rows) as w:
            if n:
                w.append(data(int(name[1:]), rows, 0, n))
    tagged = Dataset.open(str(root))
    tagged.tag("first")
    fingerprints = {name: v.fingerprint() for name, v in tagged.vaults()}
    episodes = tagged.episodes(include_open=True)
    more = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, exist_ok=True, **ROLES)
    for name, (rows, n) in shapes.items():  # every partly filled last chunk rewritten
        with more.shard(name) as w:
            w.append(data(int(name[1:]), rows, n, 6))
    with more.shard("s03", rows=2) as w:
        w.append(data(3, 2, 0, 5))
    vault.derive_slice(Dataset.open(str(root)), str(tmp_path / "copy"), start=2)

    pinned = Dataset.open(str(root), at="first")
    assert pinned.shards == ["s00", "s01", "s02"]
    assert pinned.committed_lengths == {name: n for name, (_, n) in shapes.items()}
    models = {name: data(int(name[1:]), rows, 0, n) for name, (rows, n) in shapes.items()}
    for name, model in models.items():
        again = Vault.open(str(root / "shards" / name), at="first")
        assert again.fingerprint() == fingerprints[name] == pinned.vault(name).fingerprint()
        report = vault.verify(
            str(root / "shards" / name), at="first", fingerprint=fingerprints[name]
        )
        assert report.ok, report.problems
        got = again.read_numpy()
        for key in model:
            np.testing.assert_array_equal(got[key], model[key])
    table = pinned.episodes(include_open=True)
    for column in ("shard", "row", "start", "length", "returns", "complete"):
        np.testing.assert_array_equal(getattr(table, column), getattr(episodes, column))
    source = pickle.loads(pickle.dumps(vault.grain_source(pinned, 3, episode_aware=True)))
    names = pinned.shards
    want = {
        (s, r, t)
        for s, name in enumerate(names)
        for r, t in valid_starts(models[name], [], 3, 1, True)
    }
    assert len(source) == len(want)
    assert {source.where(i) for i in range(len(source))} == want
    for i in range(len(source)):
        s, r, t = source.where(i)
        for key, x in source[i].items():
            np.testing.assert_array_equal(x, models[names[s]][key][r, t : t + 3])
    with pinned.vault("s01").iter_windows(4, shuffle=True, drop_remainder=False) as windows:
        ranges = windows.ranges()
        states = list(windows)
    assert sorted(ranges) == [(0, 4), (4, 8), (8, 11)]
    for (lo, hi), state in zip(ranges, states, strict=True):
        obs = np.asarray(state.experience["obs"])[:, : hi - lo]
        np.testing.assert_array_equal(obs, models["s01"]["obs"][:, lo:hi])
    pytest.importorskip("xarray")
    tree = pinned.to_xarray()
    for name, model in models.items():
        node = tree[f"shards/{name}"]
        assert node.sizes["time"] == shapes[name][1]
        for key in model:
            np.testing.assert_array_equal(np.asarray(node[key].values), model[key])


# --------------------------------------------------------------- seeded streams against the model
def build_pinned_dataset(root: Path, rng: np.random.Generator) -> tuple[Dataset, dict[str, Any]]:
    """A dataset of 1 to 3 shards (1 to 4 rows, 0 to 24 timesteps, random seams), tagged, then
    appended to (every last chunk rewritten); the dataset at the tag and its model."""
    chunk = {
        "obs": [int(rng.integers(1, 4)), int(rng.choice([1, 2, 3, 4])), int(rng.choice([1, 2]))],
        "done": [3, int(rng.choice([2, 4]))],
        "trunc": [2, 3],
    }
    ds = Dataset.create(str(root), EXAMPLE, rows=3, chunk=chunk, **ROLES)
    shapes = {}
    for s in range(int(rng.integers(1, 4))):
        rows = int(rng.integers(1, 5))
        t0, seams = 0, []
        with ds.shard(f"s{s}", rows=rows) as w:
            for _ in range(int(rng.integers(0, 4))):
                n = int(rng.integers(1, 9))
                continues = bool(rng.random() < 0.7)
                w.append(data(s, rows, t0, n), continues=continues)
                if not continues and t0:
                    seams.append(t0)
                t0 += n
        shapes[f"s{s}"] = (rows, t0, seams)
    Dataset.open(str(root)).tag("pin")
    more = Dataset.create(str(root), EXAMPLE, rows=3, chunk=chunk, exist_ok=True, **ROLES)
    for name, (rows, n, _) in shapes.items():
        with more.shard(name) as w:
            w.append(data(int(name[1:]), rows, n, int(rng.integers(1, 6))))
    return Dataset.open(str(root), at="pin"), shapes


@pytest.mark.parametrize("seed", range(10))
def test_seeded_streams_over_a_pinned_dataset_equal_the_model(tmp_path: Path, seed: int) -> None:
    """Random options (shuffle, stride, episode_aware, rows, leaves, block shape, interleave,
    run_blocks, stack, cut_on_device, epochs, 1 to 3 processes, batches larger than the data)
    over a tagged dataset whose shards grew since: every process's windows equal the model,
    the shares are disjoint, equal and cover each epoch but for fewer than ``P``, and a
    checkpoint at a random batch resumes with exactly the rest."""
    rng = np.random.default_rng(seed)
    pinned, shapes = build_pinned_dataset(tmp_path / "ds", rng)
    names = pinned.shards
    models = [data(int(n[1:]), shapes[n][0], 0, shapes[n][1]) for n in names]
    seq, stride = int(rng.integers(1, 5)), int(rng.integers(1, 3))
    aware = bool(rng.random() < 0.5)
    processes = int(rng.choice([1, 2, 3]))
    batch = int(rng.choice([1, 2, 3, 5, 64])) * processes
    fewest = min(shapes[n][0] for n in names)
    rows = None
    if rng.random() < 0.3:
        rows = rng.choice(fewest, size=int(rng.integers(1, fewest + 1)), replace=False).tolist()
    options: dict[str, Any] = {
        "shuffle": bool(rng.random() < 0.6), "seed": int(rng.integers(0, 100)),
        "episode_aware": aware, "stride": stride, "drop_remainder": False,
        "prefetch": int(rng.integers(0, 3)), "interleave": int(rng.integers(1, 3)),
        "block_timesteps": int(seq + rng.integers(0, 6)), "epochs": int(rng.integers(1, 3)),
        "rows": rows,
    }  # fmt: skip
    if rng.random() < 0.3:
        options["leaves"] = ["obs"] if rng.random() < 0.5 else ["trunc", "obs"]
    if rng.random() < 0.3:
        options["block_rows"] = int(rng.integers(1, 4))
    if rng.random() < 0.3:
        options["run_blocks"] = int(rng.integers(1, 3))
    if rng.random() < 0.4:
        options["stack"] = int(rng.integers(1, 4))
    if rng.random() < 0.3:
        options["cut_on_device"] = True
    want = {
        (s, r, t)
        for s, name in enumerate(names)
        for r, t in valid_starts(models[s], shapes[name][2], seq, stride, aware, rows)
    }
    if max(shapes[n][1] for n in names) < seq:
        with pytest.raises(VaultReadError, match="need at least"):
            pinned.as_dataset(batch, seq, **options)
        return
    shares = []
    for p in range(processes):
        kw = dict(options)
        if processes > 1:
            kw.update(process_index=p, process_count=processes)
        with pinned.as_dataset(batch, seq, **kw) as stream:
            items = list(stream)
        shares.append(check_windows(items, models, seq))
        if items:
            cut = int(rng.integers(0, len(items) + 1))
            with pinned.as_dataset(batch, seq, **kw) as stream:
                for _ in range(cut):
                    next(stream)
                state = json.loads(json.dumps(stream.state()))
            with resume_stream(state, process_index=p if processes > 1 else None) as rest:
                tail = [flat_items(b)[:3] for b in rest]
            assert len(tail) == len(items) - cut
            for a, b in zip(tail, [flat_items(b)[:3] for b in items[cut:]], strict=True):
                for x, y in zip(a, b, strict=True):
                    np.testing.assert_array_equal(x, y)
    for epoch in range(options["epochs"]):
        parts = [[w[1:] for w in share if w[0] == epoch] for share in shares]
        union = [w for part in parts for w in part]
        assert len(union) == len(set(union))
        assert set(union) <= want
        assert len(want) - len(union) < processes
        assert len({len(part) for part in parts}) == 1


# ------------------------------------------------------------------------------- odd sizes
def one_vault(path: Path, n: int, rows: int = 2) -> tuple[Vault, dict[str, np.ndarray]]:
    with Vault.create(str(path), EXAMPLE, rows=rows, chunk=CHUNK, **ROLES) as v:
        if n:
            v.append(data(0, rows, 0, n))
    return Vault.open(str(path)), data(0, rows, 0, n)


@pytest.mark.parametrize(
    ("n", "batch", "seq", "drop", "stack", "batches"),
    [
        (3, 6, 3, True, None, 0),  # fewer windows (2) than a batch: an error, not nothing
        (3, 6, 3, False, None, 1),  # ...kept: one short batch
        (4, 4, 3, True, None, 1),  # exactly one batch
        (4, 4, 3, True, 3, 1),  # exactly one batch, stacked: a stack of one
        (5, 64, 1, False, 2, 1),  # a batch larger than rows x time
        (5, 2, 5, True, 2, 1),  # a sequence as long as the vault
    ],
)
def test_odd_sizes_yield_what_the_model_says(
    tmp_path: Path,
    n: int,
    batch: int,
    seq: int,
    drop: bool,
    stack: int | None,
    batches: int,
) -> None:
    v, model = one_vault(tmp_path / "v", n)
    want = valid_starts(model, [], seq)
    for cut_on_device in (False, True):
        with v.as_dataset(
            batch, seq, drop_remainder=drop, stack=stack, cut_on_device=cut_on_device, seed=1
        ) as stream:
            if batches == 0:  # (as_dataset's docstring: too little data for one batch)
                with pytest.raises(VaultReadError, match="yields no batch of 6"):
                    list(stream)
                continue
            items = list(stream)
        assert len(items) == batches
        seen = check_windows(items, [model], seq)
        assert len(seen) == len(set(seen))
        got = {(r, t) for _, _, r, t in seen}
        assert got == want if not drop else got <= want
        assert len(got) == (len(want) if not drop else len(want) // batch * batch)
    source = vault.grain_source(v, seq)
    assert len(source) == len(want)
    assert {source.where(i)[1:] for i in range(len(source))} == want


def test_too_short_vaults_and_shards_are_errors_or_skipped_never_hangs(tmp_path: Path) -> None:
    v, _ = one_vault(tmp_path / "v", 2)
    with pytest.raises(VaultReadError, match="need at least 3"):
        v.as_dataset(1, 3)
    with pytest.raises(VaultReadError):
        vault.grain_source(v, 3)
    with pytest.raises(VaultReadError, match="yields no batch"):  # forever, never a batch
        next(v.as_dataset(64, 2, epochs=None))
    # a dataset: a zero-length shard and a shard shorter than the sequence are skipped
    root = tmp_path / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    ds.shard("a", rows=2).close()
    with ds.shard("b", rows=1) as w:
        w.append(data(1, 1, 0, 2))
    with ds.shard("c", rows=3) as w:
        w.append(data(2, 3, 0, 7))
    opened = Dataset.open(str(root))
    assert opened.committed_lengths == {"a": 0, "b": 2, "c": 7}
    models = [data(0, 2, 0, 0), data(1, 1, 0, 2), data(2, 3, 0, 7)]
    with opened.as_dataset(2, 3, drop_remainder=False, seed=3, epochs=2, stack=2) as stream:
        seen = check_windows(list(stream), models, 3)
    want = {(2, r, t) for r, t in valid_starts(models[2], [], 3)}
    for epoch in (0, 1):
        got = [(s, r, t) for e, s, r, t in seen if e == epoch]
        assert len(got) == len(set(got))
        assert set(got) == want
    source = vault.grain_source(opened, 2)
    want2 = {(1, 0, 0)} | {(2, r, t) for r, t in valid_starts(models[2], [], 2)}
    assert {source.where(i) for i in range(len(source))} == want2
    with pytest.raises(VaultReadError, match="the longest has 7"):
        Dataset.open(str(root)).as_dataset(1, 8)


# ----------------------------------------------------------------------- several JAX processes
DISTRIBUTED_CHILD = """
import json, sys
config, pid = json.loads(sys.argv[1]), int(sys.argv[2])
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

address = f"127.0.0.1:{config['port']}"
jax.distributed.initialize(
    coordinator_address=address, num_processes=2, process_id=pid,
    coordinator_bind_address=address, initialization_timeout=60,
)
import vault

sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))
batch, seq = config["batch"], config["seq"]
weights = jnp.arange(1, batch + 1, dtype=jnp.float32)[:, None]
step = jax.jit(lambda obs: jnp.sum(obs[..., 0] * weights))
data_ = vault.Dataset.open(config["root"], at="pin")
out = {"batches": [], "count": jax.process_count()}
stream = data_.as_dataset(batch, seq, sharding=sharding, **config["kwargs"])
for i, b in enumerate(stream):
    out["batches"].append({
        "epoch": b.epoch, "source": b.source.tolist(), "row": b.row.tolist(),
        "start": b.start.tolist(), "value": float(step(b.experience["obs"])),
    })
    if i + 1 == config["state_after"]:
        out["state"] = stream.state()
stream.close()
with open(f"{config['out']}/{pid}.json", "w") as f:
    json.dump(out, f)
jax.distributed.shutdown()
"""


def test_two_jax_processes_split_a_pinned_dataset_of_uneven_shards(tmp_path: Path) -> None:
    """Two processes under ``jax.distributed`` (loopback, one CPU device each) stream a tagged
    dataset whose shards differ in rows and length (one empty, one shorter than a sequence)
    and grew since the tag: each epoch's windows are split disjointly, cover it but for the
    last incomplete batches, the global batches hold them in process order, and both
    processes' checkpoints are the same."""
    root = tmp_path / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    shapes = {"s0": (1, 13), "s1": (3, 0), "s2": (2, 2), "s3": (3, 21)}
    for name, (rows, n) in shapes.items():
        with ds.shard(name, rows=rows) as w:
            if n:
                w.append(data(int(name[1:]), rows, 0, n))
    Dataset.open(str(root)).tag("pin")
    with ds.shard("s3") as w:
        w.append(data(3, 3, 21, 4))
    with ds.shard("s4", rows=1) as w:
        w.append(data(4, 1, 0, 9))
    batch, seq = 6, 3
    kwargs = {"seed": 4, "epochs": 2, "episode_aware": True, "block_timesteps": 4}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    config = {
        "port": port, "root": str(root), "batch": batch, "seq": seq, "kwargs": kwargs,
        "state_after": 2, "out": str(tmp_path),
    }  # fmt: skip
    path = script(tmp_path, "distributed", DISTRIBUTED_CHILD)
    env = child_env()
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    children = [
        subprocess.Popen(
            [sys.executable, str(path), json.dumps(config), str(i)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        outputs = [c.communicate(timeout=120) for c in children]
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.wait()
    for c, (_, err) in zip(children, outputs, strict=True):
        assert c.returncode == 0, err[-3000:]
    ran = [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(2)]
    assert [r["count"] for r in ran] == [2, 2]
    pinned = Dataset.open(str(root), at="pin")
    names = pinned.shards
    assert names == ["s0", "s1", "s2", "s3"]
    models = [data(int(n[1:]), shapes[n][0], 0, shapes[n][1]) for n in names]
    want = {(s, r, t) for s, m in enumerate(models) for r, t in valid_starts(m, [], seq, 1, True)}
    assert len(ran[0]["batches"]) == len(ran[1]["batches"]) > 2
    assert ran[0]["state"] == ran[1]["state"]
    local = batch // 2
    weights = np.arange(1, batch + 1, dtype=np.float64)[:, None]
    for b0, b1 in zip(ran[0]["batches"], ran[1]["batches"], strict=True):
        assert b0["epoch"] == b1["epoch"]
        windows = [
            models[s]["obs"][r, t : t + seq, 0]
            for b in (b0, b1)
            for s, r, t in zip(b["source"], b["row"], b["start"], strict=True)
        ]
        assert len(windows) == batch
        value = float((np.stack(windows).astype(np.float64) * weights).sum())
        assert b0["value"] == b1["value"] == pytest.approx(value, rel=1e-6)
    for epoch in (0, 1):
        parts = [
            [
                (s, r, t)
                for b in run["batches"]
                if b["epoch"] == epoch
                for s, r, t in zip(b["source"], b["row"], b["start"], strict=True)
            ]
            for run in ran
        ]
        union = parts[0] + parts[1]
        assert len(union) == len(set(union))
        assert set(union) <= want
        assert len(parts[0]) == len(parts[1]) == len(want) // 2 // local * local
        assert len(want) - len(union) < 2 + 2 * local
    # the checkpoint resumes both shares here (process_index given) with the same batches
    for p in range(2):
        with resume_stream(ran[0]["state"], process_index=p) as rest:
            tail = [(b.epoch, b.source.tolist(), b.row.tolist(), b.start.tolist()) for b in rest]
        full = [(b["epoch"], b["source"], b["row"], b["start"]) for b in ran[p]["batches"]]
        assert tail == full[2:]
