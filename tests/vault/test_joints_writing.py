"""Where writer features meet: background writes x close / exit / exceptions, failed appends x
retries x pins x trash, metadata x pins x derive, the writer lock x second writers x readers,
shard writers x SIGKILL x the catalog, and unusual structures x background writes x derive.

Every value a test stores is a function of where it belongs (row, time), so what is read back
is compared with a model, bit for bit; crashes and second writers are real processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import buffers as fbx
import vault
from vault import Dataset, Vault

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ROWS, CAP = 2, 64
EXAMPLE = {
    "obs": np.zeros(3, np.float32),
    "done": np.zeros((), bool),
    "reward": np.zeros((), np.float32),
}
CHUNK = {"obs": [ROWS, 4, 3], "done": [ROWS, 4], "reward": [ROWS, 4]}
EPISODES = {"done_leaf": "done", "reward_leaf": "reward"}


def data(n: int, lo: int = 0, salt: float = 0.0) -> dict[str, np.ndarray]:
    """Timesteps ``[lo, n)`` of every row (each value says where it belongs; ``salt`` makes
    another run's data)."""
    t = np.arange(lo, n)[None, :]
    r = np.arange(ROWS)[:, None]
    obs = (t + 1000 * r + salt)[..., None] + np.array([0.0, 0.25, 0.5])
    return {
        "obs": obs.astype(np.float32),
        "done": (t + r) % 3 == 2,
        "reward": (0.5 * t + r + salt).astype(np.float32),
    }


def state(n: int) -> Any:
    """A trajectory buffer (rows x ``CAP``) after ``n`` timesteps of :func:`data` (no wrap)."""
    experience = {}
    for key, values in data(n).items():
        ring = np.zeros((ROWS, CAP, *values.shape[2:]), values.dtype)
        ring[:, :n] = values
        experience[key] = ring
    return fbx.TrajectoryBufferState(
        experience=experience, current_index=jnp.int32(n), is_full=jnp.bool_(False)
    )


def joined(*parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}


def assert_holds(where: Any, want: dict[str, np.ndarray], at: Any = None) -> None:
    """The vault (at ``at``) holds exactly ``want`` and verifies clean."""
    v = Vault.open(where, at=at)
    n = next(iter(want.values())).shape[1]
    assert v.committed_length == n
    got = v.read_numpy()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], strict=True)
    report = vault.verify(where) if at is None else vault.verify(where, at=at)
    assert report.ok, report.problems


def child(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new Python process (this file's helpers importable); ``args`` go to
    ``sys.argv[1:]``."""
    prelude = f"import sys; sys.path.insert(0, {str(HERE)!r}); sys.path.insert(0, {str(ROOT)!r})\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def spawn(code: str, *args: str) -> subprocess.Popen[str]:
    prelude = f"import sys; sys.path.insert(0, {str(HERE)!r}); sys.path.insert(0, {str(ROOT)!r})\n"
    return subprocess.Popen(
        [sys.executable, "-c", prelude + textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def wait_for_line(proc: subprocess.Popen[str], prefix: str, timeout: float = 90) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            return line.strip()
    raise AssertionError(f"no {prefix!r} from the child: {reap(proc)[-3000:]}")


def reap(proc: subprocess.Popen[str]) -> str:
    """Stop ``proc`` if it still runs (by its id), wait for it, close its pipes; its stderr."""
    if proc.poll() is None:
        proc.kill()
    _, err = proc.communicate(timeout=60)
    return err or ""


class Injected(RuntimeError):
    pass


@pytest.fixture
def hook() -> Iterator[Callable[..., Any]]:
    yield vault.set_fault_hook
    vault.set_fault_hook(None)


def trash_files(where: Path) -> list[str]:
    trash = where / "trash"
    if not trash.exists():
        return []
    return sorted(p.name for p in trash.iterdir() if p.name != "zarr.json")


# ------------------------------------------------------------- 1. background writes x endings
@pytest.mark.parametrize("where", ["file", "memory"])
def test_background_writes_then_close_commit_all_and_a_reopen_continues(
    tmp_path: Path, where: str
) -> None:
    place: Any = tmp_path / "v" if where == "file" else f"memory://jw-bg-{tmp_path.name}"
    v = Vault.create(place, state(0), chunk=CHUNK, **EPISODES)
    v.max_pending = 8
    for n in (3, 7, 8, 13, 21):
        assert v.write(state(n), block=False) > 0
    v.close()
    assert_holds(place, data(21))
    with pytest.raises(vault.VaultModeError):
        v.write(state(22))
    w = Vault.open(place, "a")
    assert w.write(state(30), block=False) == 9  # the same buffer goes on where it stopped
    w.append(data(35, 30))  # a blocking append after a background one waits for it
    w.close()
    assert_holds(place, data(35))


WRITE_AND_LEAVE = """
import sys, vault
from vault import Vault
from test_joints_writing import state, CHUNK, EPISODES
path, how = sys.argv[1], sys.argv[2]
v = Vault.create(path, state(0), chunk=CHUNK, **EPISODES)
v.max_pending = 16
for n in range(2, 42, 3):
    v.write(state(n), block=False)
print("queued", flush=True)
if how == "del":
    del v
elif how == "exit":
    sys.exit(0)
elif how == "raise":
    raise SystemExit(3)
"""


@pytest.mark.parametrize("how", ["del", "exit", "fall-off"])
def test_background_writes_pending_when_the_process_ends_normally_are_committed(
    tmp_path: Path, how: str
) -> None:
    """No close(): the queued writes are still committed as the interpreter exits, the lock
    goes with the process, and the next writer continues the same buffer exactly."""
    done = child(WRITE_AND_LEAVE, str(tmp_path / "v"), how)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_holds(tmp_path / "v", data(41))
    with Vault.open(tmp_path / "v", "a") as w:
        assert w.write(state(50)) == 9
    assert_holds(tmp_path / "v", data(50))


FAIL_IN_BACKGROUND_AND_LEAVE = """
import sys, vault
from vault import Vault
from test_joints_writing import state, CHUNK, EPISODES
path = sys.argv[1]
v = Vault.create(path, state(0), chunk=CHUNK, **EPISODES)
v.write(state(4))
count = [0]
def fail(point, info, step):
    if point == "commit":
        count[0] += 1
        if count[0] == 2:
            raise RuntimeError("injected: the disk went away")
    return step()
vault.set_fault_hook(fail)
v.max_pending = 8
for n in (8, 12, 16):
    v.write(state(n), block=False)
print("queued", flush=True)
"""


def test_a_background_write_failing_as_the_process_ends_is_reported(tmp_path: Path) -> None:
    """Two of three queued writes are lost (the second failed, the third is skipped after
    it), and no write, flush or close comes after them to raise it: the process says so on
    stderr as it ends (it once said nothing). The vault itself is sound."""
    done = child(FAIL_IN_BACKGROUND_AND_LEAVE, str(tmp_path / "v"))
    assert_holds(tmp_path / "v", data(8))  # the first queued write only
    assert "a background write failed" in done.stderr, (done.returncode, done.stderr[-2000:])
    assert "injected" in done.stderr, done.stderr
    assert "were not committed" in done.stderr, done.stderr
    assert str(tmp_path / "v") in done.stderr, done.stderr


def test_an_exception_inside_with_create_commits_queued_writes_and_propagates(
    tmp_path: Path,
) -> None:
    def run() -> None:
        with Vault.create(tmp_path / "v", state(0), chunk=CHUNK, **EPISODES) as v:
            v.max_pending = 8
            v.write(state(5), block=False)
            v.write(state(11), block=False)
            raise KeyError("user bug")

    with pytest.raises(KeyError, match="user bug"):
        run()
    assert_holds(tmp_path / "v", data(11))
    assert Vault.open(tmp_path / "v").lock_holder() is None
    with Vault.open(tmp_path / "v", "a") as w:
        assert w.write(state(14), block=False) == 3
    assert_holds(tmp_path / "v", data(14))


def test_a_failed_background_write_and_a_user_exception_in_with_are_both_told(
    tmp_path: Path, hook: Callable[..., Any]
) -> None:
    """close() raises the background failure (typed, saying where the vault stands), with
    the user's exception chained, and the vault is at the last good commit."""

    def fail(point: str, info: dict[str, Any], step: Callable[[], Any]) -> Any:
        if point == "commit" and info["length"] == 11:
            raise Injected("injected commit failure")
        return step()

    def run() -> None:
        with Vault.create(tmp_path / "v", state(0), chunk=CHUNK, **EPISODES) as v:
            v.max_pending = 8
            v.write(state(5), block=False)
            hook(fail)
            v.write(state(11), block=False)
            v.write(state(13), block=False)  # after a failed one: nothing is committed
            raise KeyError("user bug")

    with pytest.raises(vault.VaultError, match="injected commit failure") as caught:
        run()
    hook(None)
    assert isinstance(caught.value.__context__, KeyError)
    assert "5 timesteps" in str(caught.value) + "".join(getattr(caught.value, "__notes__", []))
    assert_holds(tmp_path / "v", data(5))
    assert trash_files(tmp_path / "v") == []
    with Vault.open(tmp_path / "v", "a") as w:
        assert w.write(state(13)) == 8
    assert_holds(tmp_path / "v", data(13))


# ------------------------------------------------------- 2. failed appends x pins x trash x retry
def steps_of_an_append(tmp_path: Path, hook: Callable[..., Any]) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []

    def record(point: str, info: dict[str, Any], step: Callable[[], Any]) -> Any:
        seen.append((point, str(info.get("key", ""))))
        return step()

    with Vault.create(tmp_path / "steps", EXAMPLE, rows=ROWS, chunk=CHUNK, **EPISODES) as v:
        v.append(data(6))
        hook(record)
        v.append(data(22, 6))
        hook(None)
    return seen


def test_a_failed_different_append_then_close_leaves_pins_trash_and_a_new_process_sound(
    tmp_path: Path, hook: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """For every step of an append, failed instead of or after it: a reader pinned at each
    earlier commit still reads it, the writer appends *other* data than the failed append's,
    closes with an empty trash, and another process appends and verifies."""
    from vault.format import _tags

    monkeypatch.setattr(_tags, "PENDING_MAX", 2)  # the failed append writes tags too
    steps = steps_of_an_append(tmp_path, hook)
    assert {p for p, _ in steps} >= {"append", "resize", "grow", "index", "tags", "commit"}
    failures = []
    for at, (point, key) in enumerate(steps):
        for after in (False, True):
            case = f"{point}:{key} #{at} {'after' if after else 'instead'}"
            place = tmp_path / f"c{at}-{int(after)}"
            try:
                # another process appends in every fourth case (a process costs a second)
                in_child = (2 * at + after) % 4 == 1
                fail_then_append_other(place, hook, at, after, point, in_child)
            except Exception as err:
                failures.append(f"{case}: {type(err).__name__}: {str(err)[:400]}")
            finally:
                hook(None)
    assert not failures, "\n".join(failures)


def fail_then_append_other(
    place: Path, hook: Callable[..., Any], at: int, after: bool, point: str, in_child: bool
) -> None:
    v = Vault.create(place, EXAMPLE, rows=ROWS, chunk=CHUNK, **EPISODES)
    v.append(data(6))
    first = v.commit_id
    pinned = Vault.open(place, at=first)
    count = [0]

    def fail(point: str, info: dict[str, Any], step: Callable[[], Any]) -> Any:
        count[0] += 1
        if count[0] - 1 != at:
            return step()
        if after:
            step()
        raise Injected(f"injected failure at {point}")

    hook(fail)
    with pytest.raises(vault.VaultError, match="injected failure"):
        v.append(data(22, 6))
    hook(None)
    n = v.committed_length  # 22 only where the commit (or the whole append) ran
    assert n == (22 if (after and point in ("append", "commit")) else 6), n
    model = data(22) if n == 22 else data(6)
    other = data(n + 9, n, salt=0.5)  # not the failed append's values
    v.append(other)
    model = joined(model, other)
    second = v.commit_id
    v.close()
    assert trash_files(place) == []
    np.testing.assert_array_equal(pinned.read_numpy()["obs"], data(6)["obs"], strict=True)
    assert_holds(place, data(6), at=first)
    assert_holds(place, model)
    n = model["obs"].shape[1]
    if in_child:
        extra = child(
            """
            import sys
            from vault import Vault
            from test_joints_writing import data
            with Vault.open(sys.argv[1], "a") as v:
                n = v.committed_length
                v.append(data(n + 5, n, salt=0.75))
            """,
            str(place),
        )
        assert extra.returncode == 0, extra.stderr[-2000:]
    else:
        with Vault.open(place, "a") as w:
            w.append(data(n + 5, n, salt=0.75))
    model = joined(model, data(n + 5, n, salt=0.75))
    assert_holds(place, model)
    assert_holds(place, data(6), at=first)
    mid = Vault.open(place, at=second)
    assert mid.committed_length == n
    assert trash_files(place) == []


def test_a_background_write_failing_at_tags_then_other_data_keeps_every_pin_sound(
    tmp_path: Path, hook: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A background write that wrote its tags to the tag arrays and then failed; the retry
    writes other data into those chunks: every commit before and after reads and verifies."""
    from vault.format import _tags

    monkeypatch.setattr(_tags, "PENDING_MAX", 1)
    place = tmp_path / "v"
    v = Vault.create(place, state(0), chunk=CHUNK, **EPISODES)
    v.write(state(6))
    pins = [(v.commit_id, data(6))]

    def fail(point: str, info: dict[str, Any], step: Callable[[], Any]) -> Any:
        result = step()
        if point == "tags":
            raise Injected("injected after tags")
        return result

    hook(fail)
    v.write(state(30), block=False)
    with pytest.raises(vault.VaultError, match="injected after tags"):
        v.flush()
    hook(None)
    assert v.committed_length == 6
    model = joined(data(6), data(30, 6, salt=0.5))
    v.append(data(30, 6, salt=0.5))
    pins.append((v.commit_id, model))
    more = data(41, 30, salt=0.5)
    v.append(more)
    model = joined(model, more)
    v.close()
    assert_holds(place, model)
    for commit, want in pins:
        assert_holds(place, want, at=commit)


# ------------------------------------------------------------- 3. metadata x pins x derive
def test_metadata_is_the_same_at_every_pin_and_is_copied_by_derive(tmp_path: Path) -> None:
    meta = {"env": "grid", "seed": 7, "nested": {"list": [1, 2.5, None], "ok": True}}
    place = tmp_path / "v"
    with Vault.create(place, state(0), chunk=CHUNK, metadata=meta, **EPISODES) as v:
        v.write(state(5), block=False)
        v.flush()
        first = v.commit_id
        v.tag("five")
        v.write(state(17), block=False)
    assert Vault.open(place).metadata == meta
    assert Vault.open(place, at=first).metadata == meta
    assert Vault.open(place, at="five").metadata == meta
    with Vault.open(place, "a") as w:
        w.write(state(20), block=False)
        assert w.metadata == meta
    sliced = vault.derive_slice(Vault.open(place, at="five"), tmp_path / "s", start=1, stop=4)
    got = sliced.metadata
    assert {k: got[k] for k in meta} == meta
    assert sliced.committed_length == 3
    np.testing.assert_array_equal(sliced.read_numpy()["obs"], data(4, 1)["obs"], strict=True)
    assert vault.verify(tmp_path / "s").ok
    again = vault.derive_slice(sliced, tmp_path / "s2", start=1)
    assert {k: again.metadata[k] for k in meta} == meta
    np.testing.assert_array_equal(again.read_numpy()["reward"], data(4, 2)["reward"], strict=True)


@pytest.mark.parametrize(
    "bad", [{"x": np.float32(1)}, {"x": (1, 2)}, {1: "a"}, {"x": float("nan")}]
)
def test_metadata_json_would_change_is_refused_before_anything_is_written(
    tmp_path: Path, bad: dict[Any, Any]
) -> None:
    with pytest.raises(vault.VaultMetadataError):
        Vault.create(tmp_path / "v", state(0), metadata=bad)
    with Vault.create(tmp_path / "v", state(0), metadata={"ok": 1}) as v:  # nothing was left
        v.write(state(3), block=False)
    assert_holds(tmp_path / "v", data(3))


# ------------------------------------------------- 4. a second writer, unlock, refreshed readers
HOLD_AND_WRITE = """
import sys, time
from vault import Vault
from test_joints_writing import state, CHUNK, EPISODES
path = sys.argv[1]
v = Vault.open(path, "a")
v.max_pending = 16
n = v.committed_length
for k in range(1, 4):
    v.write(state(n + 3 * k), block=False)
print("pending", n + 9, flush=True)
v.flush()
print("flushed", v.committed_length, flush=True)
time.sleep(600)
"""


def test_a_second_writer_while_one_holds_the_lock_then_a_killed_holder(tmp_path: Path) -> None:
    place = tmp_path / "v"
    with Vault.create(place, state(0), chunk=CHUNK, **EPISODES) as v:
        v.write(state(3))
    reader = Vault.open(place)
    holder = spawn(HOLD_AND_WRITE, str(place))
    try:
        wait_for_line(holder, "pending")
        with pytest.raises(vault.VaultLockedError, match=f"pid {holder.pid}"):
            Vault.open(place, "a")
        second = child(
            """
            import sys
            import vault
            try:
                vault.Vault.open(sys.argv[1], "a")
            except vault.VaultLockedError as err:
                print("locked", err)
            """,
            str(place),
        )
        assert f"locked {place}" in second.stdout, second.stdout + second.stderr[-2000:]
        assert str(holder.pid) in second.stdout, second.stdout
        seen = [reader.refresh()]
        assert wait_for_line(holder, "flushed") == "flushed 12"
        seen.append(reader.refresh())
        assert seen == sorted(seen)
        assert seen[-1] == 12
        np.testing.assert_array_equal(reader.read_numpy()["obs"], data(12)["obs"], strict=True)
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
        unlock = subprocess.run(
            [sys.executable, "-m", "vault", "unlock", str(place), "--yes"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        # a local vault's lock went with the process: nothing to break, said so
        assert unlock.returncode != 0
        assert "no lock to break" in unlock.stderr, unlock.stderr
        with Vault.open(place, "a") as w:  # at once, and the killed writer's buffer continues
            assert w.write(state(20), block=False) == 8
            assert reader.refresh() in (12, 20)
        assert reader.refresh() == 20
        np.testing.assert_array_equal(reader.read_numpy()["done"], data(20)["done"], strict=True)
        assert_holds(place, data(20))
        assert trash_files(place) == []
    finally:
        reap(holder)


# ---------------------------------------------------------- 5. shard writers x SIGKILL x catalog
def test_shard_writers_one_killed_then_continued_and_the_catalog(tmp_path: Path) -> None:
    sys.path.insert(0, str(HERE))
    import _dataset_child as dc

    root = tmp_path / "ds"
    script = str(HERE / "_dataset_child.py")

    def writer(shard: str, index: int, appends: int, pause: float) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, script, "write", str(root), shard, str(index), str(appends), "4",
             str(pause)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def committed(proc: subprocess.Popen[str], at_least: int) -> int:
        while True:
            line = wait_for_line(proc, "committed")
            if int(line.split()[-1]) >= at_least:
                return int(line.split()[-1])

    steady = writer("steady", 1, 12, 0.02)
    victim = writer("victim", 2, 1000, 0.0)
    try:
        committed(victim, 12)
        mid = Dataset.open(root)  # while both write
        for name in mid.shards:
            n = mid.committed_lengths[name]
            got = mid.read_numpy(name)
            want = dc.expected(1 if name == "steady" else 2, dc.ROWS, 0, n)
            np.testing.assert_array_equal(got["obs"], want["obs"], strict=True)
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
        assert steady.wait(120) == 0
    finally:
        for p in (steady, victim):
            reap(p)
    killed_at = Vault.open(root / "shards" / "victim").committed_length
    assert killed_at >= 12
    again = writer("victim", 2, 3, 0.0)
    assert wait_for_line(again, "ready") == f"ready victim {killed_at}"
    assert again.wait(120) == 0, reap(again)
    reap(again)
    ds = Dataset.open(root, write_catalog=True)
    assert ds.committed_lengths == {"steady": 48, "victim": killed_at + 12}
    for name, index in (("steady", 1), ("victim", 2)):
        want = dc.expected(index, dc.ROWS, 0, ds.committed_lengths[name])
        got = ds.read_numpy(name)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], strict=True)
        assert vault.verify(ds.vault(name)).ok
    episodes = ds.episodes()
    assert sorted(set(episodes.shard.tolist())) == ["steady", "victim"]
    reread = Dataset.open(root)
    check = reread.check_catalog()
    assert check["state"] == "valid", check
    assert not check["problems"], check
    assert reread.committed_lengths == ds.committed_lengths
    assert len(reread.episodes()) == len(episodes)


# ------------------------------------------- 6. unusual structures x background writes x derive
def test_one_row_scalar_only_vault_written_in_the_background_and_derived(tmp_path: Path) -> None:
    buffer = fbx.make_flat_buffer(max_length=8, min_length=1, sample_batch_size=1)
    s = buffer.init({"x": jnp.float32(0), "done": jnp.bool_(False)})
    place = tmp_path / "v"
    with Vault.create(place, s, done_leaf="done") as v:
        assert v.rows == 1
        for i in range(20):
            s = buffer.add(s, {"x": jnp.float32(i), "done": jnp.bool_(i % 4 == 3)})
            if i % 3 == 2:
                v.write(s, block=False)
        v.write(s, block=False)
    want = {"x": np.arange(20, dtype=np.float32)[None], "done": (np.arange(20) % 4 == 3)[None]}
    assert_holds(place, want)
    assert len(Vault.open(place).episodes()) == 5
    d = vault.derive_slice(Vault.open(place), tmp_path / "d", start=2, stop=13)
    np.testing.assert_array_equal(d.read_numpy()["x"], want["x"][:, 2:13], strict=True)
    e = vault.derive_episodes(Vault.open(place), tmp_path / "e", Vault.open(place).episodes())
    np.testing.assert_array_equal(e.read_numpy()["x"], want["x"], strict=True)
    assert vault.verify(tmp_path / "d").ok
    assert vault.verify(tmp_path / "e").ok


def test_zero_size_item_axes_are_refused_naming_the_leaf(tmp_path: Path) -> None:
    example = {"empty": np.zeros((2, 0), np.float32), "x": np.float32(0)}
    with pytest.raises(vault.VaultStructureError, match="empty"):
        Vault.create(tmp_path / "v", example, rows=1)
    with Vault.create(tmp_path / "v", {"x": np.float32(0)}, rows=1) as v:  # nothing was left
        v.append({"x": np.ones((1, 2), np.float32)})
    assert Vault.open(tmp_path / "v").committed_length == 2


ODD = 'weird key/é %:*?"<>|\\ .. ~'


def test_long_and_unusual_leaf_names_with_background_writes_and_derive(tmp_path: Path) -> None:
    long = "n" * 200  # a node name is at most 255 bytes
    rows = 3

    def steps(lo: int, hi: int) -> dict[str, Any]:
        t = np.arange(lo, hi)[None, :] + 100 * np.arange(rows)[:, None]
        return {
            ODD: np.stack([t % 100, -(t % 100)], -1).astype(np.int8),
            long: {
                "zarr.json": t.astype(np.int32),
                ".hidden": (t * 0.5).astype(np.float32),
                "__x": (t % 256).astype(np.uint8),
            },
            "": t.astype(np.int16),
            "tail.__lock": t % 2 == 0,
        }

    place = tmp_path / "v"
    buffer = fbx.make_trajectory_buffer(
        add_batch_size=rows, sample_batch_size=1, sample_sequence_length=1, period=1,
        min_length_time_axis=1, max_length_time_axis=16,
    )  # fmt: skip
    s = buffer.init(jax_tree(steps(0, 1), first=True))
    with Vault.create(place, s) as v:
        for lo in range(0, 12, 3):
            s = buffer.add(s, jax_tree(steps(lo, lo + 3)))
            assert v.write(s, block=False) == 3
    got = Vault.open(place).read_numpy()
    assert_tree_equal(got, steps(0, 12))
    assert vault.verify(place).ok
    d = vault.derive_slice(Vault.open(place), tmp_path / "d", rows=[2, 0], start=5, stop=11)
    want = steps(0, 12)
    assert_tree_equal(d.read_numpy(), tree_map(lambda a: a[[2, 0], 5:11], want))
    assert vault.verify(tmp_path / "d").ok
    with Vault.open(place, "a") as w:  # a reopened writer continues the same buffer
        s = buffer.add(s, jax_tree(steps(12, 14)))
        assert w.write(s, block=False) == 2
    assert_tree_equal(Vault.open(place).read_numpy(), steps(0, 14))


def tree_map(f: Callable[[Any], Any], tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: tree_map(f, v) for k, v in tree.items()}
    return f(tree)


def jax_tree(tree: Any, first: bool = False) -> Any:
    return tree_map(lambda a: jnp.asarray(a[0, 0] if first else a), tree)


def assert_tree_equal(got: Any, want: Any) -> None:
    assert isinstance(got, dict), type(got)
    assert set(got) == set(want), (sorted(got), sorted(want))
    for k in want:
        if isinstance(want[k], dict):
            assert_tree_equal(got[k], want[k])
        else:
            np.testing.assert_array_equal(np.asarray(got[k]), want[k], strict=True)


def test_with_create_on_a_path_that_exists_refuses_and_keeps_the_old_vault(tmp_path: Path) -> None:
    place = tmp_path / "v"
    with Vault.create(place, state(0), chunk=CHUNK, **EPISODES) as v:
        v.write(state(9), block=False)
    with pytest.raises(vault.VaultExistsError):
        Vault.create(place, state(0))
    assert_holds(place, data(9))
    assert os.path.isdir(place)
