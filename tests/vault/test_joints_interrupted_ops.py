"""Operations other than a plain append, SIGKILLed half-way in a real process, then checked
from this one: nothing committed is lost or changed, and the operation runs again.

- ``derive_episodes``/``derive_slice`` of a dataset of shards into a folder, killed at a
  shard's commit and after the first shard's manifest is published; ``derive_slice`` of a
  vault killed just after its staged copy is renamed into place; ``combine`` into S3 killed
  in the close of its copy; a dataset ``derive_slice`` into S3 killed between the
  publications of its shards' manifests (the kills of a single vault's derive at its commit,
  on a disk and on S3, are in ``test_joints_crash_points.py``). The
  source must read as its model with unchanged fingerprints, the destination be absent (not
  opened, not listed) or whole, and the derive run again to the operation's result.
- ``import_d4rl`` killed at a commit of its copy; ``export_minari`` killed just before its
  staged dataset is renamed into place; then each run again.
- ``Dataset.tag`` killed between its shards on S3, and again on a disk while the tagged
  shard keeps committing; the catalog rewrite of ``Dataset.open(write_catalog=True)`` killed
  with its new catalog written but not renamed into place, then a shard writer closing.
- A writer whose ``write(block=False)`` queue holds several writes, stopped inside the index
  step of one (``vault unlock`` and a second writer refused meanwhile) and SIGKILLed, then a
  NEW process that opens with ``mode="a"`` and writes on from the same (restored) buffer; the
  dead writer's held old files (``trash/``) are freed by it.
- ``vault unlock`` of an S3 vault whose writer is alive and paused inside its commit step; a
  new writer takes over and commits; the old writer's commit is refused and its close harms
  nothing.

Kill points are deterministic: a fault point of ``vault.set_fault_hook``, or, where an
operation has none (a publication, a rename, a tag, a catalog write), the child wraps the
library function it calls and SIGKILLs itself right after it returns (a watcher thread, for
the catalog's temporary file). Every value is compared with a model: the data say where they
belong (``obs = 100_000 * salt + 1000 * row + t``). The child scripts import numpy and vault
only (no jax).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import vault
from vault import (
    Dataset,
    Vault,
    VaultExistsError,
    VaultLockedError,
    VaultNotFoundError,
    VaultPinError,
    combine,
    derive_episodes,
    derive_slice,
)
from vault.cli.app import app

REPO = Path(vault.__file__).resolve().parents[1]
ROWS = 2
EXAMPLE = {
    "obs": np.zeros(2, np.float32),
    "rew": np.zeros((), np.float32),
    "done": np.zeros((), bool),
}
CHUNK: dict[str, Any] = {"obs": [2, 4, 2], "rew": [2, 4], "done": [2, 4]}
ROLES: dict[str, Any] = {"done_leaf": "done", "reward_leaf": "rew"}
SHARD_LENGTHS = {"s0": 6, "s1": 9, "s2": 7}  # a dataset's shards (salt: the digit)


def at_times(rows: int, t: np.ndarray, salt: int = 0) -> dict[str, np.ndarray]:
    """The model's value of every row at times ``t`` (1-D)."""
    r = np.arange(rows)[:, None]
    t = np.asarray(t)[None, :]
    code = 100_000 * salt + 1000 * r + t
    return {
        "obs": (code[..., None] + np.array([0.0, 0.5])).astype(np.float32),
        "rew": (code % 7).astype(np.float32),
        "done": (t + r + salt) % 4 == 3,  # every 3 timesteps end an episode of some row
    }


def model(rows: int, t0: int, n: int, salt: int = 0) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)`` of every row (of shard ``salt``)."""
    return at_times(rows, np.arange(t0, t0 + n), salt)


def model_episodes(rows: int, length: int, salt: int = 0) -> list[tuple[int, int, int, float]]:
    """(row, start, length, return) of every complete episode, by brute force."""
    m = model(rows, 0, length, salt)
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


# Every child starts with this: the model, and ways to die (SIGKILL) at a chosen step.
PRELUDE = f"""
import json, os, signal, sys, threading, time, types
import numpy as np
sys.path.insert(0, {str(REPO)!r})
import vault

{inspect.getsource(at_times)}
{inspect.getsource(model)}

def die():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def die_at(point, nth):
    # SIGKILL this process as the nth run of fault point ``point`` starts
    seen = {{"n": 0}}

    def hook(name, info, step):
        if name == point:
            seen["n"] += 1
            if seen["n"] == nth:
                die()
        return step()

    vault.set_fault_hook(hook)


def pause_at(point, nth, ready=None):
    # at the nth run of ``point`` (once ready() is set, if given): say so, wait for a line
    seen = {{"n": 0}}

    def hook(name, info, step):
        if name == point:
            seen["n"] += 1
            if seen["n"] == nth:
                if ready is not None:
                    ready.wait(30)
                print("paused", json.dumps(info), flush=True)
                sys.stdin.readline()
        return step()

    vault.set_fault_hook(hook)


def die_after_call(owner, attr, nth):
    # SIGKILL this process once the nth call of owner.attr has returned
    real = getattr(owner, attr)
    seen = {{"n": 0}}

    def wrapped(*args, **kwargs):
        out = real(*args, **kwargs)
        seen["n"] += 1
        if seen["n"] == nth:
            die()
        return out

    setattr(owner, attr, wrapped)


def die_after_rename_of_staged():
    # SIGKILL this process once a staged build (.NAME.partial-XXXX) is renamed into place
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        out = real(src, dst, *args, **kwargs)
        name = os.path.basename(os.fsdecode(src))
        if name.startswith(".") and ".partial-" in name:
            die()
        return out

    os.replace = replace
"""


def child_script(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / f"child-{uuid.uuid4().hex[:8]}.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    return [sys.executable, str(script)]


def child_env() -> dict[str, str]:
    return dict(os.environ, JAX_PLATFORMS="cpu")


def run_child(tmp_path: Path, body: str, *args: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*child_script(tmp_path, body), *map(str, args)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@contextlib.contextmanager
def running(tmp_path: Path, body: str, *args: Any) -> Iterator[subprocess.Popen[str]]:
    """A child process with pipes; SIGKILLed on leaving if it still runs, pipes closed."""
    child = subprocess.Popen(
        [*child_script(tmp_path, body), *map(str, args)],
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with child:
        try:
            yield child
        finally:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=60)


def line_of(child: subprocess.Popen[str], starts: str) -> str:
    """The first line the child prints that starts with ``starts`` (its stderr if it ends)."""
    assert child.stdout is not None
    assert child.stderr is not None
    while True:
        line = child.stdout.readline()
        if not line:
            child.wait(timeout=60)
            raise AssertionError(f"child ended ({child.returncode}): {child.stderr.read()[-3000:]}")
        if line.startswith(starts):
            return line.strip()


def say(child: subprocess.Popen[str], text: str) -> None:
    assert child.stdin is not None
    child.stdin.write(text + "\n")
    child.stdin.flush()


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


def listed(where: Any) -> list[str]:
    """The paths ``vault ls`` shows under ``where``."""
    return sorted(str(e["path"]).rstrip("/") for e in cli("ls", where, "--json"))


# ------------------------------------------------------------------- the sources and models
def make_dataset(root: str) -> dict[str, str]:
    """The dataset of ``SHARD_LENGTHS`` at ``root``; returns each shard's fingerprint."""
    ds = Dataset.create(root, EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    for name, n in SHARD_LENGTHS.items():
        with ds.shard(name) as writer:
            writer.append(model(ROWS, 0, n // 2, int(name[1:])))
            writer.append(model(ROWS, n // 2, n - n // 2, int(name[1:])))
    opened = Dataset.open(root)
    return {name: opened.vault(name).fingerprint() for name in opened.shards}


def check_dataset(root: str, prints: dict[str, str]) -> None:
    """The dataset at ``root`` is its model: data, episodes, fingerprints, verify."""
    live = Dataset.open(root)
    assert live.committed_lengths == SHARD_LENGTHS
    table = live.episodes()
    for name, n in SHARD_LENGTHS.items():
        salt = int(name[1:])
        assert_model(live.read_numpy(name), model(ROWS, 0, n, salt), name)
        assert episodes_of(table[table.shard == name]) == model_episodes(ROWS, n, salt)
        assert live.vault(name).fingerprint() == prints[name], name
        report = vault.verify(live.vault(name))
        assert report.ok, report.problems


SOURCE_LENGTH = 13


def make_vault(where: str) -> str:
    with Vault.create(where, EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES) as writer:
        writer.append(model(ROWS, 0, 6))
        writer.append(model(ROWS, 6, SOURCE_LENGTH - 6))
    return Vault.open(where).fingerprint()


def check_vault(where: str, fingerprint: str) -> None:
    live = Vault.open(where)
    assert live.committed_length == SOURCE_LENGTH
    assert_model(live.read_numpy(), model(ROWS, 0, SOURCE_LENGTH), where)
    assert episodes_of(live.episodes()) == model_episodes(ROWS, SOURCE_LENGTH)
    assert live.fingerprint() == fingerprint
    report = vault.verify(where)
    assert report.ok, report.problems


def build(op: str, src: str, dest: str) -> Vault | Dataset:
    """The derive ``op`` run whole, in this process (the children run the same calls)."""
    if op == "dataset-episodes":
        source = Dataset.open(src)
        return derive_episodes(source, dest, source.episodes().select(min_length=2))
    if op == "dataset-slice":
        return derive_slice(Dataset.open(src), dest, start=1, stop=5)
    if op == "vault-slice":
        return derive_slice(src, dest, rows=[1], start=2, stop=11)
    return combine([src, src], dest)


def result_of(made: Vault | Dataset) -> dict[str, Any]:
    """What a derive made: every shard's (or the vault's) data, episodes, fingerprint."""
    if isinstance(made, Dataset):
        table = made.episodes()
        return {
            name: (
                made.read_numpy(name),
                episodes_of(table[table.shard == name]),
                made.vault(name).fingerprint(),
            )
            for name in made.shards
        }
    return {"": (made.read_numpy(), episodes_of(made.episodes()), made.fingerprint())}


def same_result(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert sorted(got) == sorted(want)
    for name, (values, table, fingerprint) in want.items():
        assert_model(got[name][0], values, name)
        assert got[name][1] == table, name
        assert got[name][2] == fingerprint, name


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A local dataset and vault, their fingerprints, and each derive's result run whole."""
    folder = tmp_path_factory.mktemp("interrupted-sources")
    root, single = str(folder / "ds"), str(folder / "v")
    found: dict[str, Any] = {"dataset": root, "vault": single}
    found["dataset_prints"] = make_dataset(root)
    found["vault_print"] = make_vault(single)
    for op in ("dataset-episodes", "dataset-slice", "vault-slice", "combine"):
        src = root if op.startswith("dataset") else single
        found[op] = result_of(build(op, src, str(folder / f"whole-{op}")))
    # the models themselves, not only the operation run whole
    cut = found["dataset-slice"]
    for name, n in SHARD_LENGTHS.items():
        want = {k: x[:, 1:5] for k, x in model(ROWS, 0, n, int(name[1:])).items()}
        assert_model(cut[name][0], want, name)
    whole = model(ROWS, 0, SOURCE_LENGTH)
    assert_model(found["vault-slice"][""][0], {k: x[1:2, 2:11] for k, x in whole.items()})
    assert_model(found["combine"][""][0], {k: np.concatenate([x, x], 1) for k, x in whole.items()})
    # derive_episodes: shard by shard, each shard's episodes of 2+ steps by (start, row)
    parts = []
    for name, n in SHARD_LENGTHS.items():
        salt, data = int(name[1:]), model(ROWS, 0, n, int(name[1:]))
        picked = sorted((s, r, m) for r, s, m, _ in model_episodes(ROWS, n, salt) if m >= 2)
        parts += [{k: x[r : r + 1, s : s + m] for k, x in data.items()} for s, r, m in picked]
    joined = {k: np.concatenate([p[k] for p in parts], 1) for k in EXAMPLE}
    assert_model(found["dataset-episodes"][""][0], joined)
    return found


def check_sources(sources: dict[str, Any]) -> None:
    check_dataset(sources["dataset"], sources["dataset_prints"])
    check_vault(sources["vault"], sources["vault_print"])


# ------------------------------------------------------------- derive / combine, killed
DERIVE = """
from vault import Dataset, Vault, combine, derive_episodes, derive_slice
import vault.derive._derive as derive

op, src, dest, how, nth = sys.argv[1:6]
if how == "publish":
    die_after_call(derive, "publish_manifest", int(nth))
elif how == "rename":
    die_after_rename_of_staged()
else:
    die_at(how, int(nth))
if op == "dataset-episodes":
    source = Dataset.open(src)
    derive_episodes(source, dest, source.episodes().select(min_length=2))
elif op == "dataset-slice":
    derive_slice(Dataset.open(src), dest, start=1, stop=5)
elif op == "vault-slice":
    derive_slice(src, dest, rows=[1], start=2, stop=11)
else:
    combine([src, src], dest)
print("built", flush=True)
"""


def open_result(op: str, dest: str) -> Vault | Dataset:
    return Dataset.open(dest) if op == "dataset-slice" else Vault.open(dest)


@pytest.mark.parametrize(
    ("op", "how", "nth"),
    [
        ("dataset-episodes", "commit", 2),  # the second append of the new vault
        ("dataset-slice", "publish", 1),  # the first shard's manifest is published
        ("dataset-slice", "commit", 2),  # the second shard's copy
    ],
)
def test_a_local_derive_killed_half_way_leaves_nothing_and_runs_again(
    tmp_path: Path, sources: dict[str, Any], op: str, how: str, nth: int
) -> None:
    """Killed in its copy: no vault or dataset at the destination (``vault ls`` shows none;
    the parent folder holds nothing after the rerun, no staged copy either), the source
    dataset reads as its model with its fingerprints; run again, the result equals the
    operation run whole (data, episodes, fingerprints) and verifies."""
    out = tmp_path / "out"
    dest = str(out / "dest")
    killed(run_child(tmp_path, DERIVE, op, sources["dataset"], dest, how, nth))
    with pytest.raises(VaultNotFoundError):
        open_result(op, dest)
    assert listed(out) == []
    check_sources(sources)
    same_result(result_of(build(op, sources["dataset"], dest)), sources[op])
    assert cli("verify", dest, "--json")["ok"]
    assert sorted(os.listdir(out)) == ["dest"]


def test_a_local_derive_killed_after_its_rename_is_whole(
    tmp_path: Path, sources: dict[str, Any]
) -> None:
    """Killed just after the staged copy was renamed into place (before the call returned):
    the destination is a whole vault (the operation's result, verify sound), and running
    the derive again is refused as a taken destination, changing nothing."""
    dest = str(tmp_path / "out" / "dest")
    killed(run_child(tmp_path, DERIVE, "vault-slice", sources["vault"], dest, "rename", 0))
    same_result(result_of(Vault.open(dest)), sources["vault-slice"])
    report = vault.verify(dest)
    assert report.ok, report.problems
    assert not report.warnings, report.warnings
    with pytest.raises(VaultExistsError):
        build("vault-slice", sources["vault"], dest)
    same_result(result_of(Vault.open(dest)), sources["vault-slice"])
    check_sources(sources)


def test_a_combine_into_s3_killed_in_its_close_is_no_vault_and_runs_again(
    tmp_path: Path, s3_env: Any, sources: dict[str, Any]
) -> None:
    """``combine`` of local vaults into S3 (built in place, manifest last), killed in the
    trim of its writer's close (every timestep committed, the lease still held): not a
    vault, not listed; the rerun is refused as locked (naming ``vault unlock``) while the
    dead build's lease runs; after ``vault unlock`` it equals the operation run whole."""
    prefix = f"s3://{s3_env.bucket}/iops-{uuid.uuid4().hex[:8]}"
    dest = f"{prefix}/both"
    killed(run_child(tmp_path, DERIVE, "combine", sources["vault"], dest, "trim", 1))
    with pytest.raises(VaultNotFoundError):
        Vault.open(dest)
    assert listed(prefix) == []
    with pytest.raises(VaultLockedError, match="unlock"):
        build("combine", sources["vault"], dest)
    assert cli("unlock", dest, "--yes", "--json")["broken"] is True
    same_result(result_of(build("combine", sources["vault"], dest)), sources["combine"])
    report = vault.verify(dest)
    assert report.ok, report.problems
    check_vault(sources["vault"], sources["vault_print"])


@pytest.fixture
def s3_dataset(s3_env: Any) -> tuple[str, str, dict[str, str]]:
    """A dataset on the S3 test server: (prefix, root, fingerprints)."""
    prefix = f"s3://{s3_env.bucket}/iops-{uuid.uuid4().hex[:8]}"
    root = f"{prefix}/ds"
    return prefix, root, make_dataset(root)


def test_a_dataset_derive_into_s3_killed_between_publications_shows_no_vault(
    tmp_path: Path, s3_dataset: tuple[str, str, dict[str, str]]
) -> None:
    """docs/guides/object-storage.md: "an interrupted build is never opened or listed as a
    vault ... a shard published before a kill is no vault (`Vault.open` refuses it; `vault ls`
    shows it as a broken entry that says so)". Killed after the first shard's manifest was
    written, before the others' and the root's: no shard of the destination opens, one that
    is listed is a broken entry naming the interrupted derive; the source is unchanged."""
    prefix, root, prints = s3_dataset
    dest = f"{prefix}/cut"
    killed(run_child(tmp_path, DERIVE, "dataset-slice", root, dest, "publish", 1))
    check_dataset(root, prints)
    with pytest.raises(VaultNotFoundError):
        Dataset.open(dest)
    entries = {str(e["path"]).rstrip("/"): e for e in cli("ls", prefix, "--json")}
    leftovers = sorted(p for p in entries if p != root)  # shown as broken, saying what it is
    assert all("interrupted" in str(entries[p].get("error")) for p in leftovers), entries
    assert all(p.startswith(f"{dest}/shards/") for p in leftovers), leftovers
    with pytest.raises(VaultNotFoundError, match="interrupted"):
        Vault.open(f"{dest}/shards/s0")


def test_a_dataset_derive_into_s3_killed_between_publications_runs_again(
    tmp_path: Path, s3_dataset: tuple[str, str, dict[str, str]], sources: dict[str, Any]
) -> None:
    """ "The next build into the same place removes it": every shard's writer had closed
    (no lease is held), so the same derive must run again at once, to the result the
    operation gives run whole (data, episodes and fingerprints: as from the local copy of
    the dataset)."""
    prefix, root, prints = s3_dataset
    dest = f"{prefix}/cut"
    killed(run_child(tmp_path, DERIVE, "dataset-slice", root, dest, "publish", 1))
    try:
        made = build("dataset-slice", root, dest)
    except VaultExistsError as err:
        pytest.fail(f"the derive cannot run again: {err}")
    same_result(result_of(made), sources["dataset-slice"])  # as from the local copy
    check_dataset(root, prints)


# -------------------------------------------------------------------- converters, killed
D4RL = """
from vault.converters import import_d4rl

src, dest, point, nth = sys.argv[1:5]
die_at(point, int(nth))
import_d4rl(src, dest, block_bytes=1 << 16)
print("imported", flush=True)
"""
D4RL_LENGTH = 9000  # 18 bytes a timestep: three blocks of 64 KiB, three commits


def d4rl_arrays(n: int) -> dict[str, np.ndarray]:
    t = np.arange(n)
    return {
        "observations": np.stack([1000 * (t % 5) + t, t + 0.5], 1).astype(np.float32),
        "actions": (t % 3).astype(np.float32)[:, None],
        "rewards": (t % 7).astype(np.float32),
        "terminals": t % 11 == 10,
        "timeouts": t % 17 == 16,
    }


def d4rl_episodes(arrays: dict[str, np.ndarray]) -> list[tuple[int, int, int, float]]:
    """(row, start, length, return) of every episode the file ends, by brute force."""
    out, begin = [], 0
    ends = arrays["terminals"] | arrays["timeouts"]
    for t in range(len(ends)):
        if ends[t]:
            ret = float(arrays["rewards"][begin : t + 1].astype(np.float64).sum())
            out.append((0, begin, t - begin + 1, ret))
            begin = t + 1
    return out


def test_a_d4rl_import_killed_at_a_commit_leaves_nothing_and_runs_again(tmp_path: Path) -> None:
    """Killed at the commit of its second block: nothing at the destination (not a vault,
    not listed), the source file unchanged; run again, the vault holds the file's exact
    arrays and episodes, and no staged copy of the killed import is left beside it."""
    import h5py

    src = tmp_path / "hopper.hdf5"
    arrays = d4rl_arrays(D4RL_LENGTH)
    with h5py.File(src, "w") as f:
        for key, x in arrays.items():
            f.create_dataset(key, data=x)
    before = src.read_bytes()
    out = tmp_path / "out"
    dest = out / "hopper"
    killed(run_child(tmp_path, D4RL, src, dest, "commit", 2))
    with pytest.raises(VaultNotFoundError):
        Vault.open(str(dest))
    assert listed(out) == []
    assert src.read_bytes() == before
    from vault.converters import import_d4rl

    made = import_d4rl(src, dest, block_bytes=1 << 16)
    assert made.committed_length == D4RL_LENGTH
    back = made.read_numpy()
    assert_model({k: x[0] for k, x in back.items()}, arrays, "d4rl")
    assert episodes_of(made.episodes()) == d4rl_episodes(arrays)
    assert vault.verify(str(dest)).ok
    assert sorted(os.listdir(out)) == ["hopper"]


MINARI = """
from vault.converters import export_minari

src, root = sys.argv[1:3]
real = os.replace


def replace(a, b, *args, **kwargs):
    name = os.path.basename(os.fsdecode(a))
    if name.startswith(".") and ".partial-" in name:
        die()  # every episode is written to the staged dataset; it is not in place yet
    return real(a, b, *args, **kwargs)


os.replace = replace
export_minari(src, "ns/toy-v0", root=root, block_bytes=1 << 16)
print("exported", flush=True)
"""
MINARI_LENGTH = 120  # one row; an episode every 10 timesteps


def minari_source(where: Path) -> dict[str, np.ndarray]:
    t = np.arange(MINARI_LENGTH)[None]
    data = {
        "observations": np.stack([t, t + 0.5], -1).astype(np.float32),
        "next_observations": np.stack([t + 1, t + 1.5], -1).astype(np.float32),
        "actions": (t % 3).astype(np.float32)[..., None],
        "rewards": (t % 7).astype(np.float32),
        "terminations": t % 10 == 9,
        "truncations": np.zeros_like(t, bool),
    }
    example = {k: np.zeros(x.shape[2:], x.dtype) for k, x in data.items()}
    with Vault.create(
        str(where),
        example,
        rows=1,
        done_leaf="terminations",
        truncated_leaf="truncations",
        reward_leaf="rewards",
    ) as writer:
        writer.append(data)
    return {k: x[0] for k, x in data.items()}


@pytest.fixture(scope="module")
def minari_killed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """``export_minari`` killed just before its rename, what it left, then the rerun."""
    pytest.importorskip("minari")
    from vault.converters import export_minari

    folder = tmp_path_factory.mktemp("interrupted-minari")
    src, root = folder / "src", folder / "minari"
    data = minari_source(src)
    killed(run_child(folder, MINARI, src, root))
    left = sorted(os.listdir(root / "ns"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINARI_DATASETS_PATH", str(root))
        import minari

        before = sorted(minari.list_local_datasets())
        made = export_minari(src, "ns/toy-v0", root=root, block_bytes=1 << 16)
        yield {"data": data, "root": root, "left": left, "before": before, "made": made}


def test_a_minari_export_killed_before_its_rename_is_absent_and_runs_again(
    minari_killed: dict[str, Any],
) -> None:
    """Killed with every episode written to the staged dataset, before it was renamed into
    place: no dataset is there (Minari lists none); run again, the export holds the vault's
    episodes exactly (observations with the last next observation, actions, rewards)."""
    import minari

    assert not any(not name.startswith(".") for name in minari_killed["left"])
    assert minari_killed["before"] == []
    assert minari_killed["made"] == minari_killed["root"] / "ns" / "toy-v0"
    data = minari_killed["data"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINARI_DATASETS_PATH", str(minari_killed["root"]))
        assert sorted(minari.list_local_datasets()) == ["ns/toy-v0"]
        episodes = list(minari.load_dataset("ns/toy-v0").iterate_episodes())
    assert len(episodes) == MINARI_LENGTH // 10
    for k, episode in enumerate(episodes):
        span = slice(10 * k, 10 * k + 10)
        obs = np.concatenate([data["observations"][span], data["next_observations"][span][-1:]])
        np.testing.assert_array_equal(episode.observations, obs)
        np.testing.assert_array_equal(episode.actions, data["actions"][span])
        np.testing.assert_array_equal(episode.rewards, data["rewards"][span])
        np.testing.assert_array_equal(episode.terminations, data["terminations"][span])


def test_a_minari_export_killed_and_run_again_leaves_no_hidden_copy(
    minari_killed: dict[str, Any],
) -> None:
    """A killed export's staged dataset is as large as the export. Derive and the importers
    sweep the staged copies of killed builds at their next build there
    (``FileLocation.staging``); after the rerun of the export only the dataset is left."""
    assert sorted(os.listdir(minari_killed["root"] / "ns")) == ["toy-v0"]


# ------------------------------------------------------------------------ tags, killed
TAG_DATASET = """
from vault import Dataset
import vault.dataset._dataset as datasets

root, name = sys.argv[1:3]
die_after_call(datasets, "create_tag", 1)  # the first shard's tag is written
Dataset.open(root).tag(name)
print("tagged", flush=True)
"""


def tagged_shards(root: str, name: str) -> list[str]:
    live = Dataset.open(root)
    return [s for s in live.shards if name in live.vault(s).tags()]


def test_a_dataset_tag_on_s3_killed_between_shards_is_refused_then_completed(
    tmp_path: Path, s3_dataset: tuple[str, str, dict[str, str]]
) -> None:
    """A dataset tag is all or nothing (docs/format.md 4.7): killed after its first shard's
    tag, the tag is refused (library and CLI, naming it), every shard still reads as its
    model; tagging again completes it: every shard pinned at its commit, read as the model."""
    _, root, prints = s3_dataset
    killed(run_child(tmp_path, TAG_DATASET, root, "nightly"))
    assert len(tagged_shards(root, "nightly")) == 1
    with pytest.raises(VaultPinError, match="nightly"):
        Dataset.open(root, at="nightly")
    assert "nightly" in cli("info", root, "--at", "nightly", code=2)
    check_dataset(root, prints)
    live = Dataset.open(root)
    assert live.tag("nightly") == live.commit_ids
    pinned = Dataset.open(root, at="nightly")
    assert pinned.committed_lengths == SHARD_LENGTHS
    for name, n in SHARD_LENGTHS.items():
        assert_model(pinned.read_numpy(name), model(ROWS, 0, n, int(name[1:])), name)


def test_an_interrupted_dataset_tag_is_completed_while_its_shards_keep_writing(
    tmp_path: Path,
) -> None:
    """The refusal of an interrupted tag says "tag the dataset again ... which completes it"
    (docs/guides/many-writers.md: "it only completes a tag that was interrupted"). In a
    dataset that actors keep writing, the shard tagged before the kill has committed again
    by then: completing the tag must keep that shard at the commit it was tagged at and tag
    the others, not refuse the name for good."""
    root = str(tmp_path / "ds")
    make_dataset(root)
    killed(run_child(tmp_path, TAG_DATASET, root, "nightly"))
    (first,) = tagged_shards(root, "nightly")
    salt, n = int(first[1:]), SHARD_LENGTHS[first]
    with Dataset.open(root).shard(first) as actor:  # the actor writes on meanwhile
        actor.append(model(ROWS, n, 3, salt))
    with pytest.raises(VaultPinError, match="nightly"):
        Dataset.open(root, at="nightly")
    try:
        Dataset.open(root).tag("nightly")
    except VaultExistsError as err:
        pytest.fail(f"the interrupted tag cannot be completed: {err}")
    pinned = Dataset.open(root, at="nightly")
    assert pinned.committed_lengths == SHARD_LENGTHS  # the first shard as it was tagged
    for name, length in SHARD_LENGTHS.items():
        assert_model(pinned.read_numpy(name), model(ROWS, 0, length, int(name[1:])), name)


# ------------------------------------------------------------- the catalog rewrite, killed
CATALOG = """
from vault import Dataset
import vault.dataset._catalog as catalogs

root = sys.argv[1]
temp = os.path.join(root, "catalog.__lock")  # TensorStore's temporary file of the catalog
real, calls = catalogs.encode, []


def encode(*args, **kwargs):
    data = real(*args, **kwargs)
    calls.append(len(data))
    if len(calls) == 2:  # the rewrite with the episode tables: killed before its rename
        def watch():
            while True:
                try:
                    if os.stat(temp).st_size >= len(data):
                        die()
                except FileNotFoundError:
                    pass

        threading.Thread(target=watch, daemon=True).start()
    return data


catalogs.encode = encode
live = Dataset.open(root, write_catalog=True)  # rewrites the catalog: shards changed
live.episodes()  # and again, with every shard's episode table
print("rewritten", calls, flush=True)
"""
CATALOG_SHARDS = 8  # vault.dataset._dataset.CATALOG_MIN_SHARDS


def test_a_catalog_rewrite_killed_before_its_rename_leaves_a_valid_catalog(
    tmp_path: Path,
) -> None:
    """A reader with ``write_catalog=True`` killed after its new catalog's bytes are written
    to TensorStore's temporary file, before the rename: the dataset reads as its model and
    verifies. A shard writer then closes and merges its entry; the catalog must be valid
    (``vault/dataset/_catalog.py``: "whatever the interleaving ... any result is a valid
    catalog"; ``vault verify`` says "damaged" otherwise, and every reader reads every shard
    the long way). The killed rewrite held every shard's episode table, so it was longer
    than the merged one: TensorStore keeps the stale file's tail (as it did for tags,
    ``FileLocation.drop_stale_temp``)."""
    root = tmp_path / "ds"
    lengths = {f"s{i}": 4 + i for i in range(CATALOG_SHARDS)}
    ds = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    for name, n in lengths.items():
        with ds.shard(name) as writer:
            writer.append(model(ROWS, 0, n, int(name[1:])))
    for _attempt in range(3):
        for name in ("s0", "s1", "s2"):  # written past the catalog (not through the dataset)
            with Vault.open(str(root / "shards" / name), mode="a") as writer:
                writer.append(model(ROWS, lengths[name], 2, int(name[1:])))
            lengths[name] += 2
        killed(run_child(tmp_path, CATALOG, root))
        if (root / "catalog.__lock").exists():
            break
    else:
        pytest.skip("the kill never landed before the catalog's rename")

    def check() -> None:
        live = Dataset.open(str(root))
        assert live.committed_lengths == lengths
        table = live.episodes()
        for name, n in lengths.items():
            assert_model(live.read_numpy(name), model(ROWS, 0, n, int(name[1:])), name)
            assert episodes_of(table[table.shard == name]) == model_episodes(ROWS, n, int(name[1:]))
        assert cli("verify", root, "--json")["ok"]

    check()
    with Dataset.open(str(root)).shard("s5") as writer:  # a writer closes: merges its entry
        writer.append(model(ROWS, lengths["s5"], 3, 5))
    lengths["s5"] += 3
    check()
    assert Dataset.open(str(root)).check_catalog()["state"] == "valid"


# ------------------------------------- background writes queued, killed; a new process on
# A buffer's state as a function of its add count: a ring of CAP slots, slot i holding the
# latest time = i (mod CAP), with the counter the vault checks (no jax needed).
RING = """
CAP, STEP = 16, 3
CHUNKS = {"obs": [2, 4, 2], "rew": [2, 4], "done": [2, 4]}


def state(n):
    base = n - n % CAP
    times = np.where(np.arange(CAP) < n % CAP, base, base - CAP) + np.arange(CAP)
    return types.SimpleNamespace(
        experience=at_times(2, times),
        current_index=np.int32(n % CAP),
        is_full=np.bool_(n >= CAP),
        write_counter=np.array([0, n], np.uint32),
    )
"""

QUEUED = (
    RING
    + """
from vault import Vault

path, point, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
writer = Vault.create(path, state(0), chunk=CHUNKS, done_leaf="done", reward_leaf="rew")
writer.max_pending = 4
queued = threading.Event()  # set once three writes wait behind the paused one
pause_at(point, nth, queued)
for k in range(1, 9):
    writer.write(state(STEP * k), block=False)
    print("issued", STEP * k, flush=True)
    if k == nth + 3:
        queued.set()
writer.close()
print("closed", flush=True)
"""
)

RESUME = (
    RING
    + """
from vault import Vault

path = sys.argv[1]
with Vault.open(path, mode="a") as writer:  # the same buffer, restored from a checkpoint
    print("resumed", writer.committed_length, flush=True)
    for n in map(int, sys.argv[2:]):
        writer.write(state(n), block=False)
print("closed", flush=True)
"""
)


def test_a_writer_killed_with_writes_queued_is_resumed_by_a_new_process(tmp_path: Path) -> None:
    """Eight ``write(block=False)`` of 3 timesteps each; the background thread is held in
    the episode-index step of the fourth (its chunks written, old files held in ``trash/``)
    with three more queued. Meanwhile ``vault unlock`` refuses (a local lock dies with its
    process; it names the writer) and a second writer is refused. SIGKILLed there: the
    vault is at the third commit (9 timesteps). A new process opens it with ``mode="a"``
    and writes on from the same buffer (restored, 24 then 30 adds): the timesteps the dead
    writer lost are still in the ring and are saved, with no seam (docs: record-buffer.md,
    "Resuming in a new process"). Every commit reads as its model, the dead writer's held
    files are freed and nothing is left over."""
    path = tmp_path / "v"
    with running(tmp_path, QUEUED, path, "index", 4) as child:
        line_of(child, "issued 21")  # writes 5 to 7 wait behind the fourth
        paused = line_of(child, "paused")
        assert Vault.open(str(path)).committed_length == 9
        refused = cli("unlock", path, "--yes", code=1)
        assert f"pid {child.pid}" in refused, refused
        with pytest.raises(VaultLockedError, match=f"pid {child.pid}"):
            Vault.open(str(path), mode="a")
        held = [p for p in os.listdir(path / "trash") if p != "zarr.json"]
        assert held, "the paused append holds no old file"
        child.kill()  # inside the index step, three writes queued
    assert child.returncode == -signal.SIGKILL
    assert json.loads(paused.split(" ", 1)[1])["count"] > 0
    live = Vault.open(str(path))
    assert (live.committed_length, live.seams) == (9, [])
    assert_model(live.read_numpy(), model(ROWS, 0, 9))

    done = run_child(tmp_path, RESUME, path, 24, 30)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resumed 9" in done.stdout
    live = Vault.open(str(path))
    assert (live.committed_length, live.seams) == (30, [])
    assert_model(live.read_numpy(), model(ROWS, 0, 30))
    assert episodes_of(live.episodes()) == model_episodes(ROWS, 30)
    for k, n in enumerate([3, 6, 9, 24, 30], start=1):  # every commit pins its own data
        pinned = Vault.open(str(path), at=k)
        assert pinned.committed_length == n
        assert_model(pinned.read_numpy(), model(ROWS, 0, n), f"commit {k}")
    report = vault.verify(str(path))
    assert report.ok, report.problems
    assert not report.warnings, report.warnings
    assert os.listdir(path / "trash") == ["zarr.json"]
    assert not list(path.rglob("*.__lock"))


# --------------------------------------------------- `vault unlock` while an S3 writer runs
ZOMBIE = """
from vault import Vault, VaultError

path = sys.argv[1]
writer = Vault.create(path, {"obs": np.zeros(2, np.float32), "rew": np.float32(0),
                             "done": np.bool_(False)}, rows=2, done_leaf="done",
                      reward_leaf="rew")
pause_at("commit", 4)  # the fourth append: its chunks are written, its commit is not
for k in range(4):
    try:
        writer.append(model(2, 3 * k, 3))
        print("committed", writer.committed_length, flush=True)
    except VaultError as err:
        print("refused", type(err).__name__, json.dumps(str(err)), flush=True)
try:
    writer.close()
    print("closed", flush=True)
except VaultError as err:
    print("close refused", type(err).__name__, json.dumps(str(err)), flush=True)
"""


def test_vault_unlock_of_a_running_s3_writer_lets_a_new_writer_take_over(
    tmp_path: Path, s3_env: Any
) -> None:
    """``vault unlock`` says "a writer that is in fact still running loses the lock: its next
    commit fails, and nothing it wrote after its last commit is kept". The writer is held
    inside the commit step of its fourth append (its chunks PUT); the lock is broken, a new
    writer opens at the third commit and appends over the same timesteps; the old writer's
    commit is then refused (typed), its close harms nothing, and the vault holds exactly
    the new writer's data after the old writer's three commits."""
    path = f"s3://{s3_env.bucket}/iops-{uuid.uuid4().hex[:8]}/v"
    with running(tmp_path, ZOMBIE, path) as child:
        assert line_of(child, "committed") == "committed 3"
        line_of(child, "paused")
        broken = cli("unlock", path, "--yes", "--json")
        assert (broken["broken"], broken["holder"]["pid"]) == (True, child.pid)
        with Vault.open(path, mode="a") as writer:
            assert writer.committed_length == 9
            writer.append(model(ROWS, 9, 4))
            say(child, "go on")
            refused = line_of(child, "refused")
            assert refused.startswith("refused VaultLockedError"), refused
            assert line_of(child, "close") == "closed"
            assert child.wait(timeout=60) == 0
            writer.append(model(ROWS, 13, 5))
    live = Vault.open(path)
    assert (live.committed_length, live.seams) == (18, [])
    assert_model(live.read_numpy(), model(ROWS, 0, 18))
    assert episodes_of(live.episodes()) == model_episodes(ROWS, 18)
    for k, n in enumerate([3, 6, 9, 13, 18], start=1):
        assert_model(Vault.open(path, at=k).read_numpy(), model(ROWS, 0, n), f"commit {k}")
    report = vault.verify(path)
    assert report.ok, report.problems
    assert vault.lock_holder(path) is None
