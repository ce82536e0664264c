"""Where two features meet (issue 31): a failed write at any step of the commit protocol and
its retry, on every location kind.

A write can fail inside any step of the commit protocol (a full disk, a dead server): the
test stops it there through the protocol's named fault points (``vault.set_fault_hook``),
once before and once after each step ran, for a blocking and a background write; then the
same writer writes the buffer again, or (separately) the writer closes and a new one
(``Vault.open(path, "a")``) does. Every committed timestep and episode must equal the model,
bit for bit, and the vault must keep taking appends.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import subprocess
import sys
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers as fbx
import vault
from vault import Location, Vault, parse_location
from vault.format import _tags

ROWS, CAP = 2, 64
EXAMPLE = {
    "obs": np.zeros(3, np.float32),
    "done": np.zeros((), bool),
    "reward": np.zeros((), np.float32),
}
CHUNK = {"obs": [ROWS, 4, 3], "done": [ROWS, 4], "reward": [ROWS, 4]}
EPISODES = {"done_leaf": "done", "reward_leaf": "reward"}


def data(n: int) -> dict[str, np.ndarray]:
    """The model: timesteps ``[0, n)`` of every row (each value says where it belongs)."""
    t = np.arange(n)[None, :]
    r = np.arange(ROWS)[:, None]
    obs = (t + 1000 * r)[..., None] + np.array([0.0, 0.25, 0.5])
    return {
        "obs": obs.astype(np.float32),
        "done": (t + r) % 3 == 2,
        "reward": (0.5 * t + r).astype(np.float32),
    }


def state(n: int) -> Any:
    """A trajectory buffer (rows x ``CAP``) after ``n`` timesteps were added (no wrap)."""
    experience = {}
    for key, values in data(n).items():
        ring = np.zeros((ROWS, CAP, *values.shape[2:]), values.dtype)
        ring[:, :n] = values
        experience[key] = ring
    return fbx.TrajectoryBufferState(
        experience=experience, current_index=jnp.int32(n), is_full=jnp.bool_(False)
    )


def model_episodes(n: int) -> list[tuple[int, int, int, float]]:
    """(row, start, length, return) of every complete episode in ``data(n)``."""
    d = data(n)
    out = []
    for r in range(ROWS):
        start = 0
        for t in np.flatnonzero(d["done"][r]):
            ret = float(np.sum(d["reward"][r, start : t + 1], dtype=np.float64))
            out.append((r, start, int(t) - start + 1, ret))
            start = int(t) + 1
    return sorted(out)


def assert_model(where: Location, n: int) -> None:
    v = Vault.open(where)
    assert v.committed_length == n
    got, want = v.read_numpy(), data(n)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], strict=True)
    table = v.episodes()
    episodes = zip(table.row, table.start, table.length, table.returns, strict=True)
    assert sorted((int(a), int(b), int(c), float(d)) for a, b, c, d in episodes) == (
        model_episodes(n)
    )
    report = vault.verify(where)
    assert report.ok, report.problems


@pytest.fixture(params=["file", "memory", "s3"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    if request.param == "file":
        return parse_location(tmp_path)
    if request.param == "s3":
        server = request.getfixturevalue("s3_env")
        return parse_location(f"s3://{server.bucket}/joints-{uuid.uuid4().hex}")
    return parse_location(f"memory://joints-{uuid.uuid4().hex}")


class Injected(RuntimeError):
    pass


@pytest.fixture
def hook() -> Iterator[Callable[[Callable[..., Any] | None], None]]:
    yield vault.set_fault_hook
    vault.set_fault_hook(None)


# the lengths committed: before the failed write (then the writer closes, so the next one
# must grow every array and the episode index again), by the failed write, and after it
BEFORE, FAILED, AFTER = 12, 40, 48


def base(where: Location) -> Vault:
    with Vault.create(where, state(0), chunk=CHUNK, **EPISODES) as v:
        v.write(state(BEFORE))
    return Vault.open(where, "a")


def steps_of_a_write(where: Location, set_hook: Callable[..., Any]) -> list[str]:
    """The fault points one write runs through, in order (``grow`` named by array)."""
    seen: list[str] = []

    def record(point: str, info: dict[str, Any], step: Callable[[], Any]) -> Any:
        seen.append(f"{point}:{info['key']}" if point == "grow" else point)
        return step()

    v = base(where)
    set_hook(record)
    v.write(state(FAILED))
    set_hook(None)
    v.close()
    return seen


def test_a_write_failed_at_any_step_is_retried_by_the_same_or_a_new_writer(
    where: Location, hook: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On memory every step x before/after x blocking/background x same/new writer; on the
    slower kinds (file, S3) every step x before/after, the four ways to write and retry
    taken in turn. (The commit record keeps at most 4 place tags here, so the write also
    writes the tags it kept to each tag array: ``"tags"``.)"""
    monkeypatch.setattr(_tags, "PENDING_MAX", 4)
    steps = steps_of_a_write(where.child("steps"), hook)
    # every step of the protocol is there, each array's growth on its own
    assert steps[0] == "append", steps
    assert steps[-1] == "commit", steps
    assert {"resize", "index", "tags"} <= set(steps), steps
    if where.spec["driver"] != "s3":  # a remote location grows every array in one step
        keys = [s.split(":", 1)[1] for s in steps if s.startswith("grow:")]
        leaves = sorted(f"experience/{k}" for k in EXAMPLE)
        assert keys == [*leaves, "episodes/bounds", "episodes/returns"], steps
    ways = [(block, new) for block in (True, False) for new in (False, True)]
    failures = []
    for at, step in enumerate(steps):
        for after in (False, True):
            turn = 2 * at + after
            chosen = ways if where.spec["driver"] == "memory" else [ways[turn % len(ways)]]
            for block, new in chosen:
                case = (
                    f"{step} #{at} {'after' if after else 'instead of'} it, "
                    f"{'blocking' if block else 'background'}, {'new' if new else 'same'} writer"
                )
                place = where.child(f"c{at}-{int(after)}-{int(block)}-{int(new)}")
                try:
                    fail_and_retry(place, hook, at, after, block, new)
                except Exception as err:  # every case is run; all failures are reported
                    failures.append(f"{case}: {type(err).__name__}: {str(err)[:300]}")
    assert not failures, "\n".join(failures)


def fail_and_retry(
    where: Location, set_hook: Callable[..., Any], at: int, after: bool, block: bool, new: bool
) -> None:
    v = base(where)
    count = [0]

    def fail(point: str, info: dict[str, Any], step: Callable[[], Any]) -> Any:
        count[0] += 1
        if count[0] - 1 != at:
            return step()
        if after:
            step()
        raise Injected(f"injected failure at {point}")

    set_hook(fail)
    try:
        if block:
            with pytest.raises(vault.VaultError, match="injected failure"):
                v.write(state(FAILED))
        else:
            v.write(state(FAILED), block=False)
            with pytest.raises(vault.VaultError, match=r"a background write failed.*injected"):
                (v.close if new else v.flush)()  # reported by the next call that waits
    finally:
        set_hook(None)
    if new:
        v.close()  # (after a background failure: closed already, a no-op)
        v = Vault.open(where, "a")
    v.write(state(FAILED))
    v.write(state(AFTER), block=block)
    v.close()
    assert_model(where, AFTER)


# ------------------------------------------------------- reference-style constructor x overrun
FLAT = fbx.make_flat_buffer(max_length=16, min_length=1, sample_batch_size=1)
FLAT_ADD = jax.jit(FLAT.add)


def flat_added(state: Any, start: int, n: int) -> Any:
    for t in range(start, start + n):
        state = FLAT_ADD(state, {"t": jnp.int32(t)})
    return state


@pytest.mark.parametrize("constructor", ["reference", "open"])
def test_an_overrun_of_the_buffer_this_object_wrote_is_refused_with_its_count(
    tmp_path: Path, constructor: str
) -> None:
    """One flat buffer of 16: written after 4 adds, then 19 more adds. Timesteps 4-6 were
    overwritten before being saved: 3 lost, whichever constructor made the Vault."""
    state = flat_added(FLAT.init({"t": jnp.int32(0)}), 0, 4)
    if constructor == "reference":
        v = Vault("run", state, rel_dir=str(tmp_path), vault_uid="a")
    else:
        Vault.create(tmp_path / "run" / "a", state).close()
        v = Vault.open(tmp_path / "run" / "a", "a")
    assert v.write(state) == 4
    state = flat_added(state, 4, 19)
    with pytest.raises(vault.UnsavedDataLostError, match="3 were overwritten") as lost:
        v.write(state)
    assert lost.value.lost == 3
    assert v.committed_length == 4  # nothing written
    assert v.write(state, on_overrun="save_surviving") == 16
    assert v.seams == [vault.Seam(4, 3)]
    np.testing.assert_array_equal(v.read_numpy()["t"][0], [0, 1, 2, 3, *range(7, 23)])
    v.close()


# --------------------------------------------------------------- a chunk file it may not read
def unreadable_chunks(path: Path) -> None:
    """Run without the capabilities that let root read any file: every read that reaches a
    chunk file this user may not read is VaultAccessError naming that file and the fix."""
    v = Vault.open(path)
    assert v.committed_length == 10
    v.read_numpy()  # (complete chunks' checksums are checked now, and not again)
    v.episodes()
    middle = path / "experience" / "obs" / "c" / "0" / "1" / "0"  # complete: tagged
    edge = path / "experience" / "obs" / "c" / "0" / "2" / "0"  # the committed end
    index = path / "episodes" / "returns" / "c" / "0"
    for chunk in (middle, edge, index):
        chunk.chmod(0)

    def denied(*files: Path) -> str:  # a read of several denied chunks names one of them
        return (
            re.escape(f"{path}: cannot read the vault: permission denied at ")
            + "("
            + "|".join(re.escape(str(f)) for f in files)
            + ")"
            + re.escape("; give this user permission there, or use another place")
        )

    both = (middle, edge)  # reads of every chunk: TensorStore fetches them concurrently
    reads: list[tuple[tuple[Path, ...], Callable[[], object]]] = [
        (both, lambda: Vault.open(path).read_numpy()),
        (both, lambda: v.read_numpy()),
        (both, lambda: v.read(last=6)),
        ((edge,), lambda: v.read_numpy(start=8)),
        # the stream reads a block of the whole vault at once: either chunk's error first
        (both, lambda: next(iter(v.as_dataset(1, 2, shuffle=False)))),
        ((index,), lambda: Vault.open(path).episodes()),
        (both, lambda: vault.verify(path)),
    ]
    for files, read in reads:
        with pytest.raises(vault.VaultAccessError, match=denied(*files)) as caught:
            read()
        assert caught.value.errno == 13  # EACCES
    done = verify_cli(path)
    assert done.exit_code == 2, (done.exit_code, done.stdout, done.stderr)  # not 3: corrupt
    assert done.stderr.startswith(f"vault: {path}: cannot read the vault: permission denied")


def test_a_chunk_file_this_user_may_not_read_is_an_access_error(tmp_path: Path) -> None:
    """Root reads any file: the reads run in a process without the capabilities that allow
    it (``setpriv``), as any other user would."""
    path = tmp_path / "v"
    chunk = {"obs": [ROWS, 4, 3], "done": [ROWS, 4], "reward": [ROWS, 4]}
    with Vault.create(path, EXAMPLE, rows=ROWS, chunk=chunk, **EPISODES) as v:
        v.append(data(10))
    wrap: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.fail("`setpriv` (util-linux) is needed to read as a user without rights")
        caps = "-dac_override,-dac_read_search"
        wrap = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]
    done = subprocess.run(
        [*wrap, sys.executable, __file__, "unreadable_chunks", str(path)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"


# ------------------------------------------------------------------------ a NUL byte in a path
NUL_CALLS: list[tuple[str, str, Callable[[Path], object]]] = [
    ("open", "location", lambda d: Vault.open(f"{d}/a\0b")),
    ("open a Path for appending", "location", lambda d: Vault.open(d / "a\0b", "a")),
    ("create", "location", lambda d: Vault.create(f"{d}/a\0b", EXAMPLE, rows=ROWS)),
    ("a file URL", "location", lambda d: Vault.open(f"file://{d}/a\0b")),
    ("a memory URL", "location", lambda d: Vault.open("memory://a\0b")),
    ("an S3 URL", "location", lambda d: Vault.open("s3://bucket/a\0b")),
    ("a kvstore spec", "location['path']", lambda d: Vault.open({"driver": "file", "path": f"{d}/a\0b"})),  # noqa: E501
    ("verify", "location", lambda d: vault.verify(f"{d}/a\0b")),
    ("find_vaults", "prefix", lambda d: vault.find_vaults(f"{d}/a\0b")),
    ("Dataset.create", "location", lambda d: vault.Dataset.create(f"{d}/a\0b", EXAMPLE, rows=ROWS)),
    ("derive_slice's source", "source", lambda d: vault.derive_slice(f"{d}/a\0b", d / "out")),
    ("derive_slice's dest", "dest", lambda d: vault.derive_slice(d / "src", f"{d}/a\0b")),
    ("Vault(rel_dir=)", "rel_dir", lambda d: Vault("run", EXAMPLE, rel_dir=f"{d}/a\0b")),
    ("Vault(vault_name)", "vault_name", lambda d: Vault("a\0b", EXAMPLE, rel_dir=str(d))),
    ("Vault(vault_uid=)", "vault_uid", lambda d: Vault("r", EXAMPLE, str(d), "a\0b")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "argument"), [c[:2] for c in NUL_CALLS], ids=[c[0] for c in NUL_CALLS]
)
def test_a_nul_byte_in_a_location_is_a_location_error_naming_the_argument(
    tmp_path: Path, call: str, argument: str
) -> None:
    Vault.create(tmp_path / "src", EXAMPLE, rows=ROWS).close()
    before = sorted(tmp_path.rglob("*"))
    run = next(c[2] for c in NUL_CALLS if c[0] == call)
    with pytest.raises(vault.VaultLocationError) as refused:
        run(tmp_path)
    message = str(refused.value)
    assert message.startswith(f"{argument} '"), message
    assert re.search(
        r"a\\x00b' holds a NUL byte \(\\x00, at character \d+\): no path, URL or object key "
        r"can hold one; remove it$",
        message,
    ), message
    assert isinstance(refused.value, ValueError)
    assert sorted(tmp_path.rglob("*")) == before  # nothing made


# ------------------------------------------------------------------- fingerprint x growth
def verify_cli(*args: object) -> Any:
    """``vault verify ARGS`` run in-process: its ``exit_code``, ``stdout`` and ``stderr``."""
    from typer.testing import CliRunner

    from vault.cli.app import app

    return CliRunner().invoke(app, ["verify", *map(str, args)], env={"COLUMNS": "300"})


def grown_vault(path: Path) -> list[tuple[str, str, int]]:
    """A vault grown by appends inside a chunk, across chunks and past episode ends; the
    (fingerprint, commit id, length) of every commit, taken as it was made."""
    taken = []
    with Vault.create(path, EXAMPLE, rows=ROWS, chunk=CHUNK, **EPISODES) as v:
        for stop in (3, 5, 9, 16, 17):
            v.append({k: x[:, v.committed_length :] for k, x in data(stop).items()})
            taken.append((v.fingerprint(), v.commit_id, stop))
    return taken


def test_a_fingerprint_taken_before_growth_checks_its_own_commit(tmp_path: Path) -> None:
    path = tmp_path / "v"
    taken = grown_vault(path)
    latest = taken[-1][1]
    for f, commit, length in taken:  # each commit found, bit-exact, from the latest back
        report = vault.verify(path, fingerprint=f)
        assert report.ok, report.problems
        assert report.committed_length == length
        grown = [w.message for w in report.warnings if w.place == "fingerprint"]
        if commit == latest:
            assert grown == []
        else:
            assert grown == [
                (
                    f"the vault has grown since fingerprint {f}: it is commit {commit}'s "
                    f"({length} timesteps), and the latest is {latest} (17 timesteps); commit "
                    f"{commit} was checked"
                )
            ]
    f, commit, _ = taken[1]
    done = verify_cli(path, "--fingerprint", f)
    assert done.exit_code == 0, (done.stdout, done.stderr)  # growth is not corruption
    assert f"commit {commit} was checked" in " ".join(done.stdout.split())
    # a fingerprint of no commit of this vault: its data differs (exit 3)
    other = "sha256:" + "0" * 64
    done = verify_cli(path, "--fingerprint", other)
    assert done.exit_code == 3, (done.stdout, done.stderr)
    assert f"expected {other}, nor does any earlier commit" in " ".join(done.stdout.split())


def test_a_fingerprinted_commit_whose_data_changed_is_corrupt_after_growth(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v"
    f = grown_vault(path)[2][0]  # 9 timesteps: chunks 0 and 1 complete
    chunk = path / "experience" / "obs" / "c" / "0" / "1" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[-5] ^= 0x40  # a changed value inside the fingerprinted commit's data
    chunk.write_bytes(bytes(raw))
    report = vault.verify(path, fingerprint=f)
    assert report.committed_length == 9  # that commit was found and checked
    assert [p.place for p in report.problems] == ["experience/obs chunk 0.1.0"]
    assert verify_cli(path, "--fingerprint", f).exit_code == 3


def test_a_fingerprint_that_history_cannot_reach_asks_for_a_pin(tmp_path: Path) -> None:
    path = tmp_path / "v"
    taken = grown_vault(path)
    for record in (path / "history").iterdir():  # as written by an rlvault before pins
        if record.name != "zarr.json":
            record.unlink()
    f = taken[0][0]
    with pytest.raises(vault.VaultPinError) as asked:
        vault.verify(path, fingerprint=f)
    assert str(asked.value) == (
        f"{path}: no commit from 5 to the latest ({taken[-1][1]}) has fingerprint {f}, and the "
        "records of older commits are not in the history (an earlier rlvault wrote them): the "
        f"vault has grown since {f}, or its data differs. Pass --at PIN (at=PIN: the commit "
        "id or tag the fingerprint was taken at) to check that commit"
    )
    done = verify_cli(path, "--fingerprint", f)
    assert done.exit_code == 2, (done.stdout, done.stderr)  # not 3: nothing is corrupt
    assert vault.verify(path, fingerprint=taken[-1][0]).ok  # the latest needs no history


# --------------------------------------------------------------------------- pin x naming
@pytest.mark.parametrize("pin", ["99-abc", "99-ABCD", "2-", "-1", "x y", "", "12-3f9a0c1b2d4e!"])
def test_a_pin_that_is_neither_a_commit_id_nor_a_tag_name_shows_both_forms(
    tmp_path: Path, pin: str
) -> None:
    path = tmp_path / "v"
    latest = grown_vault(path)[-1][1]
    with pytest.raises(vault.VaultArgumentError) as refused:
        Vault.open(path, at=pin)
    assert str(refused.value) == (
        f"{path}: at={pin!r} is neither a commit id of this vault nor a valid tag name. A commit "
        f"id is '<number>-<uid>' (the uid: 4-64 lowercase hex digits) or just the number, such "
        f"as {latest!r} (the latest commit); a tag name is 1-100 letters, digits, '.', '_' or "
        "'-', starting with a letter or '_', such as 'baseline'"
    )
    with pytest.raises(vault.VaultArgumentError, match=re.escape(f"at={pin!r} is neither")):
        vault.verify(path, at=pin)


def test_a_well_formed_pin_this_vault_lacks_names_what_it_has(tmp_path: Path) -> None:
    path = tmp_path / "v"
    latest = grown_vault(path)[-1][1]
    Vault.open(path).tag("baseline")
    with pytest.raises(vault.VaultPinError) as missing:
        Vault.open(path, at="nope")
    assert str(missing.value) == (
        f"{path}: no tag 'nope' (tags: baseline); a commit is named by its id, such as "
        f"{latest!r} (the latest commit)"
    )
    with pytest.raises(vault.VaultPinError, match=re.escape(f"the latest commit is {latest}")):
        Vault.open(path, at="99-abcd")


# ------------------------------------------------------------- a dataset shard x a full disk
FULL = "no space left on device"


def fill(folder: Path, leave: int = 0) -> Path:
    """Fill the file system of ``folder`` up to ``leave`` free bytes."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        st = os.statvfs(folder)
        with contextlib.suppress(OSError):  # (full before the end: tmpfs counts pages)
            f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    return filler


def noise(t0: int, n: int) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)`` of hardly compressible data (each value says where it is)."""
    t = np.arange(t0, t0 + n, dtype=np.float64)
    place = t[None, :, None] * 64 + np.arange(64)[None, None, :] + np.arange(ROWS)[:, None, None]
    return {
        "obs": (np.sin(place * 12.9898) * 43758.5453 % 1).astype(np.float32),
        "done": np.broadcast_to(t % 7 == 6, (ROWS, n)).copy(),
    }


def dataset_shard_on_a_full_disk(d: Path) -> None:
    """A shard made, appended to and closed on a full disk: each failure typed (errno
    ENOSPC) naming the file and the fix; the dataset reads as committed throughout, and
    every shard takes appends again once space is freed."""
    example = {"obs": np.zeros(64, np.float32), "done": np.bool_(False)}
    chunk = {"obs": [1, 16, 64], "done": [ROWS, 16]}
    root = d / "ds"
    ds = vault.Dataset.create(root, example, rows=ROWS, chunk=chunk, done_leaf="done")
    with ds.shard("a") as a:
        a.append(noise(0, 40))
    model = {"a": 40}

    def holds() -> None:
        back = vault.Dataset.open(root)
        assert {k: n for k, n in back.committed_lengths.items() if n} == model
        for name, n in model.items():
            np.testing.assert_array_equal(back.read_numpy(name)["obs"], noise(0, n)["obs"])
        assert len(back.episodes()) == sum(ROWS * (n // 7) for n in model.values())

    filler = fill(d)
    with pytest.raises(vault.VaultStorageError, match=re.escape(f"{root}/shards/b: cannot")) as no:
        ds.shard("b")
    assert no.value.errno == errno.ENOSPC
    holds()
    filler.unlink()
    b = ds.shard("b")
    b.append(noise(0, 8))
    model["b"] = 8
    filler = fill(d, leave=16 << 10)
    with pytest.raises(vault.VaultStorageError) as full:
        b.append(noise(8, 200))
    message = str(full.value)
    assert full.value.errno == errno.ENOSPC
    assert message.startswith(f"{root}/shards/b: the write failed ({FULL} at {root}/"), message
    assert message.endswith(
        "; free space there and try again); the vault is at its last commit (8 timesteps). "
        "Writing the same buffer again appends what is missing."
    ), message
    holds()
    filler.unlink()
    filler = fill(d)
    with warnings.catch_warnings(record=True):  # (its shapes may stay longer: a warning)
        b.close()  # its catalog entry cannot be written: never an error
    holds()
    filler.unlink()
    with ds.shard("b") as b:
        b.append(noise(8, 200))
    model["b"] = 208
    holds()
    assert vault.verify(root / "shards" / "b").ok


def test_a_dataset_shard_on_a_full_disk(tmp_path: Path) -> None:
    """On a real 1 MiB tmpfs, mounted in a private mount namespace (``unshare``) around the
    scenario, run in a child process."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail("`unshare` (util-linux) is needed to mount a small real file system")
    folder = tmp_path / "fs"
    folder.mkdir()
    namespace = [unshare, "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        namespace[1:1] = ["--user", "--map-root-user"]
    mount = 'mount -t tmpfs -o size=1m tmpfs "$1" && shift && exec "$@"'
    done = subprocess.run(
        [*namespace, "sh", "-c", mount, "sh", str(folder),
         sys.executable, __file__, "dataset_shard_on_a_full_disk", str(folder)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"


# ------------------------------------------------------------------- a tag x S3 lease loss
def test_a_writer_that_lost_its_lease_fails_typed_and_its_tags_hold(s3_env: Any) -> None:
    where = parse_location(f"s3://{s3_env.bucket}/lease-{uuid.uuid4().hex}")
    a = Vault.create(where, state(0), chunk=CHUNK, **EPISODES)
    a.write(state(4))
    first = a.tag("before")
    assert vault.break_lock(where)  # (its holder hangs, say): another writer takes over
    b = Vault.open(where, "a")
    b.write(state(8))
    with pytest.raises(vault.VaultLockedError, match="this writer lost its lock") as lost:
        a.write(state(12))
    assert not hasattr(lost.value, "__notes__")
    a.write(state(12), block=False)  # queued: the failure comes from the background
    with pytest.raises(vault.VaultLockedError, match="this writer lost its lock") as lost:
        a.flush()  # (before: a plain VaultError quoting it)
    assert lost.value.__notes__ == [
        "(raised by a background write; the vault is at its last commit (8 timesteps))"
    ]
    a.close()
    b.write(state(12))
    b.tag("after")
    b.close()
    assert_model(where, 12)
    pinned = Vault.open(where, at="before")
    assert pinned.commit_id == first
    np.testing.assert_array_equal(pinned.read_numpy()["obs"], data(4)["obs"], strict=True)
    assert Vault.open(where, at="after").committed_length == 12


# ---------------------------------------------------- another buffer x episodes and streams
TRAJ = fbx.make_trajectory_buffer(1, 1, 1, 1, 1, max_length_time_axis=16)
TRAJ_ADD = jax.jit(TRAJ.add)


def run_buffer(t0: int, n: int, done_at: list[int]) -> Any:
    """A new buffer (one row) that got timesteps ``t0 .. t0 + n - 1``."""
    t = np.arange(t0, t0 + n)
    batch = {"x": jnp.asarray(t[None], jnp.int32), "done": jnp.asarray(np.isin(t, done_at)[None])}
    return TRAJ_ADD(TRAJ.init({"x": jnp.int32(0), "done": jnp.bool_(False)}), batch)


@pytest.mark.parametrize("how", ["new_buffer", "reference"])
def test_another_buffer_starts_afresh_for_episodes_and_streams(tmp_path: Path, how: str) -> None:
    """A first run's buffer (no episode ended), then another run's (a new process: its own
    buffer, an episode ending at its third step): no episode and no streamed sequence joins
    the two runs."""
    first, second = run_buffer(0, 5, []), run_buffer(100, 3, [102])
    path = tmp_path / "run" / "u"
    with Vault.create(path, first, done_leaf="done") as v:
        v.write(first)
    if how == "reference":  # (which adopts a buffer it has not written)
        v = Vault("run", rel_dir=str(tmp_path), vault_uid="u")
        assert v.write(second) == 3
    else:
        v = Vault.open(path, "a")
        assert v.write(second, new_buffer=True) == 3
    v.close()
    v = Vault.open(path)
    np.testing.assert_array_equal(v.read_numpy()["x"][0], [0, 1, 2, 3, 4, 100, 101, 102])
    assert v.seams == [vault.Seam(5, 0)]
    assert v.episodes().to_records() == [
        {"row": 0, "start": 5, "length": 3, "return": None, "truncated": False,
         "complete": True, "start_known": False},
    ]  # fmt: skip
    windows = [np.asarray(b.experience["x"])[0].tolist() for b in v.as_dataset(1, 3, seed=0)]
    assert sorted(windows) == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [100, 101, 102]]


# ------------------------------------------ a lazily locked reference writer x a closing writer
def test_a_reference_vault_writes_after_another_writer_closed_under_it(tmp_path: Path) -> None:
    """``Vault(name, ...)`` takes the writer lock at its first write. Opened while another
    writer ran (and had grown the arrays), it writes after that writer closed (and cut the
    arrays' shapes to the committed length)."""
    state0 = flat_added(FLAT.init({"t": jnp.int32(0)}), 0, 4)
    writer = Vault("run", state0, rel_dir=str(tmp_path), vault_uid="u")
    writer.write(state0)
    state = flat_added(state0, 4, 6)
    writer.write(state)
    later = Vault("run", rel_dir=str(tmp_path), vault_uid="u")  # reads; no lock yet
    writer.close()
    state = flat_added(state, 10, 2)
    assert later.write(state) == 2
    later.close()
    np.testing.assert_array_equal(
        Vault.open(tmp_path / "run" / "u").read_numpy()["t"][0], range(12)
    )


if __name__ == "__main__":
    scenarios = [unreadable_chunks, dataset_shard_on_a_full_disk]
    {f.__name__: f for f in scenarios}[sys.argv[1]](Path(sys.argv[2]))
