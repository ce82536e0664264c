"""Where the writer lock meets other features: a local vault's ``flock`` and an S3 vault's
lease (``lock/lease.json``, docs/format.md 4.8) against stalled, forked, threaded and
foreign writers, ``vault unlock``, readers and datasets of shards.

* A real writer process stopped (SIGSTOP) inside its commit until its lease ran out and
  another writer took over and appended: once resumed (SIGCONT) it is refused with
  ``VaultLockedError`` and writes, replaces or deletes nothing at all; readers meanwhile see
  its last commit.
* A writer whose lease was broken (``vault unlock``) and taken over at once must not destroy
  the new holder's commits with its next append.
* The lease's writer record (``pid``, ``host``, ``thread``, ``since``) as ``vault info`` shows
  it, against who took the lock and when, also after the lease was renewed.
* A local writer that forks (a helper process, a data-loader worker): the child's exit must
  not free the parent's lock, and a child that outlives a killed writer must not keep the
  vault locked.
* Threads of one process racing to open one vault (several spellings of its path): exactly
  one writer, and the record names its thread.
* A live lease of a writer on another host: writers refused naming it, every reader works,
  ``vault unlock`` (asks without ``--yes``; ``--json``) breaks it; an expired one is taken over.
* A dataset on S3: each shard has its own lease; breaking one shard's touches no other;
  ``vault.break_lock`` of the dataset's root.

Lease tests use the real S3 server of ``tests/conftest.py`` and short leases
(``storage={"lease_seconds": ...}``, at least 1 s). The data say where they belong
(``obs = 1000 * row + t``), so the model of ``n`` committed timesteps is ``data(0, n)``.
Child processes run this file as a script.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vault
from vault import Dataset, Vault, VaultLockedError, parse_location

ROWS = 2
EXAMPLE = {"obs": np.zeros(2, np.float32), "done": np.zeros((), bool)}
HERE = str(Path(__file__).resolve())
REPO = str(Path(__file__).resolve().parents[2])
LEASE_KEY = "lock/lease.json"  # docs/format.md 4.8.2


def data(t0: int, n: int) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)`` of every row: ``obs = 1000 * row + t`` (and ``t + 0.5``)."""
    t = np.arange(t0, t0 + n)[None, :]
    r = np.arange(ROWS)[:, None]
    code = 1000 * r + t
    return {
        "obs": np.stack([code, code + 0.5], axis=-1).astype(np.float32),
        "done": (t + r) % 4 == 3,
    }


def equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray], where: str = "") -> None:
    assert sorted(got) == sorted(want), where
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=f"{where} {name}", strict=True)


def model_episodes(n: int) -> list[tuple[int, int, int]]:
    """(row, start, length) of every complete episode of ``data(0, n)``, by brute force."""
    done = data(0, n)["done"]
    out = []
    for r in range(ROWS):
        start = 0
        for t in range(n):
            if done[r, t]:
                out.append((r, start, t + 1 - start))
                start = t + 1
    return out


def s3(server: Any, name: str = "v") -> str:
    return f"s3://{server.bucket}/leases-{uuid.uuid4().hex[:10]}/{name}"


def cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from vault.cli.app import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def generations(loc: str) -> dict[bytes, bytes]:
    """Every object under ``loc`` with its generation (what changes when it is written)."""
    kv = parse_location(loc).kvstore()
    return {bytes(k): bytes(kv.read(k).result().stamp.generation) for k in kv.list().result()}


def lease_doc(loc: str) -> dict[str, Any] | None:
    raw = parse_location(loc).read(LEASE_KEY)
    return None if raw is None else json.loads(raw)


def spawn(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join([REPO, env.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, HERE, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def next_line(proc: subprocess.Popen[str]) -> str:
    """The child's next line (its stderr when it ended instead)."""
    assert proc.stdout is not None
    assert proc.stderr is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        raise AssertionError(f"the child ended ({proc.returncode}): {proc.stderr.read()[-3000:]}")
    return line.strip()


def reap(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc`` if it still runs, wait for it and close its pipes."""
    if proc.poll() is None:
        proc.kill()
    try:
        proc.communicate(timeout=30)
    finally:
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def open_when_free(loc: str, seconds: float = 15) -> Vault:
    """``Vault.open(loc, "a")`` once the lock can be taken (a lease running out)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return Vault.open(loc, "a")
        except VaultLockedError:
            assert time.monotonic() < deadline, f"{loc} stayed locked for {seconds} s"
            time.sleep(0.05)


# --------------------------------------------------- 1. a writer stopped inside its commit
def test_a_writer_stopped_past_its_lease_inside_its_commit_writes_nothing_once_resumed(
    s3_env: Any,
) -> None:
    """docs/guides/object-storage.md: "a writer that lost its lease (paused, ...) can never
    commit: it gets VaultLockedError". The child writes its data, then SIGSTOPs itself at
    the commit of its second append; its lease runs out (2 s), this process takes over and
    appends. Resumed, the child's commit is refused, so is its next append, and it closes:
    none of that writes, replaces or deletes an object (not the new holder's lease either).
    Readers see the child's last commit while it is stopped."""
    loc = s3(s3_env)
    with Vault.create(loc, EXAMPLE, rows=ROWS, done_leaf="done", chunk={"obs": [2, 2, 2]}) as v:
        v.append(data(0, 3))
    proc = spawn("stop-in-commit", loc)
    try:
        assert next_line(proc) == "committed 6"
        assert next_line(proc) == "stopping"
        holder = vault.lock_holder(loc)  # the stopped process holds the lease until it expires
        assert holder is None or holder.pid == proc.pid
        equal(Vault.open(loc).read_numpy(), data(0, 6), "reader while stopped")
        new = open_when_free(loc)  # the lease ran out: a takeover (and a fence)
        assert proc.poll() is None  # still alive, only stopped
        equal(Vault.open(loc).read_numpy(), data(0, 6), "reader at the takeover")
        new.append(data(6, 2))
        new.append(data(8, 2))
        before = generations(loc)
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=30)
    finally:
        reap(proc)
    assert proc.returncode == 0, err[-3000:]
    lines = out.splitlines()
    assert lines[0].startswith("refused VaultLockedError"), out + err[-2000:]
    assert "lost its lock" in lines[0]
    assert lines[1].startswith("refused VaultLockedError"), out
    assert lines[2] == "closed", out
    assert generations(loc) == before  # the resumed writer wrote nothing at all
    mine = vault.lock_holder(loc)
    assert mine is not None
    assert mine.pid == os.getpid()
    new.append(data(10, 1))
    new.close()
    v = Vault.open(loc)
    equal(v.read_numpy(), data(0, 11))
    table = v.episodes()
    got = sorted(zip(table.row.tolist(), table.start.tolist(), table.length.tolist(), strict=True))
    assert got == model_episodes(11)
    assert vault.verify(loc).problems == []


# ------------------------------------ 2. a broken lease taken over at once (vault unlock)
def test_a_writer_whose_lease_was_broken_never_overwrites_the_new_holders_commits(
    s3_env: Any,
) -> None:
    """``vault unlock`` / ``vault.break_lock``: "A writer that is in fact still running loses
    the lock: its next commit fails, and nothing it wrote after its last commit is kept"; the
    guide: "Each append also checks the lease before it writes data". Here the old writer
    is alive and not paused; a new writer breaks its lease and appends, and the old writer
    appends once more. That append must be refused without harming the new writer's
    committed timesteps (chunks of 2 timesteps: a chunk it overwrote is never rewritten)."""
    stale = {"obs": -data(3, 4)["obs"], "done": data(3, 4)["done"]}  # never to be read
    for _attempt in range(2):  # at once after its commit (it once reused that commit's check)
        loc = s3(s3_env)
        old = Vault.create(loc, EXAMPLE, rows=ROWS, chunk={"obs": [2, 2, 2], "done": [2, 2]})
        old.append(data(0, 3))
        assert vault.break_lock(loc)
        new = Vault.open(loc, "a")
        new.append(data(3, 2))
        with pytest.raises(VaultLockedError, match="lost its lock"):
            old.append(stale)
        new.append(data(5, 2))
        new.close()
        old.close()
        problems = vault.verify(loc).problems
        assert problems == [], problems
        equal(Vault.open(loc).read_numpy(), data(0, 7))


# ---------------------------------------------------- 3. the lease's record of its holder
def test_the_lease_names_the_thread_and_time_that_took_it_also_after_renewals(
    s3_env: Any,
) -> None:
    """docs/format.md 4.8.2: the lease's ``writer`` is "pid, host, thread, since of the
    holder" (``LockHolder.since``: when it took the lock). ``vault info`` and the error a
    second writer gets show it; a lease renewed every third of a second must keep saying
    who took the lock and when, not when it was last renewed and by which thread (a lease of
    1.5 s is renewed every half second)."""
    loc = s3(s3_env)
    w = Vault.create(loc, EXAMPLE, rows=ROWS, storage={"lease_seconds": 1.5})
    try:
        taken = vault.lock_holder(loc)
        assert taken is not None
        assert taken.since is not None
        assert (taken.pid, taken.host) == (os.getpid(), socket.gethostname())
        assert taken.thread == threading.current_thread().name
        # a renewal sent in a later second than the one the lock was taken in
        later = dt.datetime.fromisoformat(taken.since).timestamp() + 1.0
        time.sleep(max(0.0, later - time.time()))
        doc = lease_doc(loc)
        assert doc is not None
        deadline = time.monotonic() + 10
        # two renewals more: the second was surely sent after `later`
        while (lease_doc(loc) or {}).get("renewals", 0) < doc["renewals"] + 2:
            assert time.monotonic() < deadline, "the lease was not renewed"
            time.sleep(0.05)
        now = vault.lock_holder(loc)
        info = cli("info", loc, "--json")
        assert info.exit_code == 0, info.output
        shown = json.loads(info.stdout)["writer"]
        with pytest.raises(VaultLockedError) as second:
            Vault.open(loc, "a")
    finally:
        w.close()
    assert now is not None
    assert (now.thread, now.since) == (taken.thread, taken.since)
    assert shown == {
        "held": True,
        "holder": {"pid": os.getpid(), "host": taken.host, "since": taken.since,
                   "thread": taken.thread},
    }  # fmt: skip
    assert f"since {taken.since}" in str(second.value)


# -------------------------------------------------------- 4. a local writer that forks
def test_a_forked_child_that_exits_leaves_its_parents_writer_lock_held(tmp_path: Path) -> None:
    """docs/format.md 4.8.1: the lock is held "until it closes"; one writer at a time. The
    writer forks a helper that ends normally (``sys.exit``); the writer still holds the lock,
    so a second writer must be refused."""
    path = str(tmp_path / "v")
    proc = spawn("fork-exit", path)
    second = None
    try:
        assert next_line(proc) == "child exited"
        holder = vault.lock_holder(path)
        with contextlib.suppress(VaultLockedError):
            second = Vault.open(path, "a")
        assert holder is not None, "the live writer's lock was freed"
        assert holder.pid == proc.pid, holder
        assert second is None, "a second writer got the lock of a live writer"
    finally:
        if second is not None:
            second.close()
        out, err = proc.communicate("\n", timeout=30)
    assert proc.returncode == 0, err[-3000:]
    assert out.split() == ["closed", "6"]
    equal(Vault.open(path).read_numpy(), data(0, 6))


def test_a_killed_writer_whose_forked_worker_lives_on_leaves_the_vault_unlocked(
    tmp_path: Path,
) -> None:
    """vault/storage/_file.py: "The kernel drops a flock when its process dies however it
    dies, so a crashed writer never leaves a vault locked"; ``vault unlock`` of a local vault
    says there is nothing to break. A writer that started a worker process (multiprocessing,
    fork: as data loaders do) and was SIGKILLed must leave the vault free for the next
    writer, whatever its worker does."""
    path = str(tmp_path / "v")
    proc = spawn("fork-worker", path)
    worker = 0
    try:
        worker = int(next_line(proc))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert os.path.exists(f"/proc/{worker}")  # the worker lives on
        assert vault.lock_holder(path) is None
        with Vault.open(path, "a") as w:  # the next writer, at once
            w.append(data(3, 2))
        equal(Vault.open(path).read_numpy(), data(0, 5))
    finally:
        if worker:  # first: it holds the writer's pipes open
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGKILL)
        reap(proc)


# ------------------------------------------------ 5. threads of one process racing to write
def test_threads_racing_to_open_one_vault_get_one_writer_named_by_its_thread(
    vault_url: str,
) -> None:
    """Two ``Vault`` objects in one process on one vault must not both write, whatever the
    spelling of its path; the lock's record names the winning thread, this process and this
    host, from when it took the lock, as ``vault info`` shows; closed, nobody holds it."""
    Vault.create(vault_url, EXAMPLE, rows=ROWS, done_leaf="done").close()
    with Vault.open(vault_url, "a") as v:
        v.append(data(0, 3))
    if vault_url.startswith("s3://"):
        spellings = [vault_url, vault_url + "/", vault_url, vault_url + "/"]
    else:
        folder = Path(vault_url)
        spellings = [vault_url, vault_url + "/", str(folder.parent / ".." / folder.parent.name
                     / folder.name), str(folder.resolve())]  # fmt: skip
    barrier = threading.Barrier(len(spellings))
    got: dict[str, Any] = {}
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)

    def race(spelling: str) -> None:
        barrier.wait()
        try:
            got[threading.current_thread().name] = Vault.open(spelling, "a")
        except VaultLockedError as err:
            got[threading.current_thread().name] = err

    threads = [
        threading.Thread(target=race, args=(s,), name=f"collector-{i}")
        for i, s in enumerate(spellings)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    after = dt.datetime.now(dt.UTC)
    winners = {name: w for name, w in got.items() if isinstance(w, Vault)}
    try:
        assert len(got) == len(spellings)
        assert len(winners) == 1, got
        (name, writer), = winners.items()  # fmt: skip
        for err in got.values():
            if isinstance(err, VaultLockedError):
                assert f"pid {os.getpid()} on {socket.gethostname()}" in str(err)
        holder = vault.lock_holder(vault_url)
        assert holder is not None
        assert (holder.pid, holder.host, holder.thread) == (
            os.getpid(), socket.gethostname(), name
        )  # fmt: skip
        assert holder.since is not None
        assert before <= dt.datetime.fromisoformat(holder.since) <= after
        info = cli("info", vault_url, "--json")
        assert info.exit_code == 0, info.output
        assert json.loads(info.stdout)["writer"] == {
            "held": True,
            "holder": {"pid": holder.pid, "host": holder.host, "since": holder.since,
                       "thread": name},
        }  # fmt: skip
        writer.append(data(3, 2))
    finally:
        for w in winners.values():
            w.close()
    assert vault.lock_holder(vault_url) is None
    info = cli("info", vault_url, "--json")
    assert json.loads(info.stdout)["writer"] == {"held": False, "holder": None}
    equal(Vault.open(vault_url).read_numpy(), data(0, 5))


# ----------------------------------------------- 6. a lease held by a writer on another host
def forge_lease(loc: str, expires: float) -> dict[str, Any]:
    """The lease a writer on another machine leaves (docs/format.md 4.8.2); its holder."""
    holder = {"pid": 4242, "host": "actor-host-7", "thread": "MainThread",
              "since": "2026-01-02T03:04:05+00:00"}  # fmt: skip
    doc = {"writer": holder, "nonce": "ab" * 16, "renewals": 3, "seconds": 30.0,
           "expires": expires}  # fmt: skip
    parse_location(loc).kvstore().write(LEASE_KEY, json.dumps(doc).encode()).result()
    return holder


def test_a_lease_held_on_another_host_stops_writers_not_readers_until_unlocked(
    s3_env: Any,
) -> None:
    """A live lease of a writer on another machine: a writer here is refused naming it and
    ``vault unlock``; reads, streams, episodes, verify and the CLI work as usual and show the
    holder; ``vault unlock`` without ``--yes`` (no terminal) breaks nothing, with ``--yes
    --json`` it names the holder it broke; then a writer here appends exactly. An expired
    lease of that host is shown as not held and taken over by the next writer."""
    loc = s3(s3_env)
    with Vault.create(loc, EXAMPLE, rows=ROWS, done_leaf="done") as v:
        v.append(data(0, 6))
    holder = forge_lease(loc, time.time() + 60)
    with pytest.raises(VaultLockedError, match="pid 4242 on actor-host-7") as refused:
        Vault.open(loc, "a")
    assert f"vault unlock {loc}" in str(refused.value)
    # readers take no lock
    v = Vault.open(loc)
    equal(v.read_numpy(), data(0, 6))
    table = v.episodes()
    got = sorted(zip(table.row.tolist(), table.start.tolist(), table.length.tolist(), strict=True))
    assert got == model_episodes(6)
    stream = v.as_dataset(4, 3, shuffle=False, epochs=1)
    starts = []
    for batch in stream:
        for i, (row, start) in enumerate(
            zip(batch.row.tolist(), batch.start.tolist(), strict=True)
        ):
            want = data(start, 3)["obs"][row]
            np.testing.assert_array_equal(batch.experience["obs"][i], want)
            starts.append((row, start))
    stream.close()
    assert sorted(starts) == [(r, s) for r in range(ROWS) for s in range(4)]
    assert vault.verify(loc).problems == []
    checked = cli("verify", loc, "--json")
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["ok"] is True
    info = cli("info", loc, "--json")
    assert json.loads(info.stdout)["writer"] == {"held": True, "holder": holder}
    # vault unlock: asks first (no terminal here: refused, nothing broken)
    asked = cli("unlock", loc)
    assert asked.exit_code == 1
    assert "held by pid 4242 on actor-host-7" in asked.output
    assert "pass --yes" in asked.output
    assert lease_doc(loc) is not None
    broken = cli("unlock", loc, "--yes", "--json")
    assert broken.exit_code == 0, broken.output
    assert json.loads(broken.stdout) == {"path": loc, "holder": holder, "broken": True}
    assert vault.lock_holder(loc) is None
    with Vault.open(loc, "a") as w:
        w.append(data(6, 2))
    assert lease_doc(loc) is None  # released at close
    # an expired lease of that host: not held, and the next writer takes it over
    forge_lease(loc, time.time() - 5)
    assert json.loads(cli("info", loc, "--json").stdout)["writer"] == {
        "held": False,
        "holder": None,
    }
    with Vault.open(loc, "a") as w:
        mine = vault.lock_holder(loc)
        assert mine is not None
        assert (mine.pid, mine.host) == (os.getpid(), socket.gethostname())
        w.append(data(8, 1))
    assert lease_doc(loc) is None
    equal(Vault.open(loc).read_numpy(), data(0, 9))


# ----------------------------------------------------- 7. a dataset's shards, one lease each
def test_each_shard_of_a_dataset_on_s3_has_its_own_lease(s3_env: Any) -> None:
    """docs/guides/many-writers.md: "`vault unlock` takes a shard (each has its own writer
    lock)". Two shard writers; ``vault unlock`` of the dataset's root is refused naming the
    shards, of one shard breaks only that one: a new writer takes that shard over, the old
    one is refused (typed) and its close leaves the new lease alone, the other shard's writer
    goes on. The dataset then reads every shard's exact model."""
    root = s3(s3_env, "ds")
    ds = Dataset.create(root, EXAMPLE, rows=ROWS, done_leaf="done")
    a, b = ds.shard("a"), ds.shard("b")
    try:
        a.append(data(0, 3))
        b.append(data(100, 2))
        refused = cli("unlock", root, "--yes")
        assert refused.exit_code == 1
        assert f"vault unlock {root}/shards/NAME" in refused.output
        assert vault.lock_holder(f"{root}/shards/a") is not None
        broken = cli("unlock", f"{root}/shards/a", "--yes", "--json")
        assert broken.exit_code == 0, broken.output
        assert json.loads(broken.stdout)["holder"]["pid"] == os.getpid()
        assert vault.lock_holder(f"{root}/shards/b") is not None  # untouched
        a2 = Dataset.open(root).shard("a")
        with pytest.raises(VaultLockedError, match="lost its lock"):
            a.append(data(3, 1))
        a2.append(data(3, 2))
        b.append(data(102, 2))
        a.close()
        held = vault.lock_holder(f"{root}/shards/a")
        assert held is not None
        assert held.pid == os.getpid()
        a2.close()
    finally:
        a.close()
        b.close()
    d = Dataset.open(root)
    assert d.committed_lengths == {"a": 5, "b": 4}
    equal(d.read_numpy("a"), data(0, 5), "shard a")
    equal(d.read_numpy("b"), data(100, 4), "shard b")
    for name in ("a", "b"):
        assert vault.verify(d.vault(name)).problems == []


def test_break_lock_of_a_dataset_root_is_refused_naming_its_shards(s3_env: Any) -> None:
    """``vault.break_lock``: "Raises VaultNotFoundError: neither a vault nor a lock at
    location". A dataset's root is neither; ``vault unlock`` of it is refused, naming the
    shards to unlock. The function returns False ("there was no lock to break") while a
    shard's writer holds its lease, which tells a script that nothing is locked."""
    root = s3(s3_env, "ds")
    ds = Dataset.create(root, EXAMPLE, rows=ROWS, done_leaf="done")
    with ds.shard("a") as a:
        a.append(data(0, 2))
        with pytest.raises(vault.VaultError, match="shard"):
            vault.break_lock(root)
        assert vault.lock_holder(f"{root}/shards/a") is not None


# ------------------------------------------------------------------------- child processes
def _stop_in_commit(loc: str) -> None:
    """Append ``[3, 6)``, then SIGSTOP inside the commit of ``[6, 9)``; once continued,
    print what the rest of that append, one more append and ``close()`` did."""
    seen = [0]

    def hook(point: str, info: dict[str, Any], step: Any) -> Any:
        if point == "commit":
            seen[0] += 1
            if seen[0] == 2:  # its data are written; its commit goes out once continued
                print("stopping", flush=True)
                os.kill(os.getpid(), signal.SIGSTOP)
        return step()

    vault.set_fault_hook(hook)
    v = Vault.open(loc, "a", storage={"lease_seconds": 2})
    v.append(data(3, 3))
    print("committed", v.committed_length, flush=True)
    for t0 in (6, 6):
        try:
            v.append(data(t0, 3))
            print("committed", v.committed_length, flush=True)
        except Exception as err:
            print("refused", type(err).__name__, str(err).replace("\n", " "), flush=True)
    v.close()
    print("closed", flush=True)


def _fork_exit(path: str) -> None:
    """A writer that forks a helper which ends normally, then keeps writing."""
    v = Vault.create(path, EXAMPLE, rows=ROWS, done_leaf="done")
    v.append(data(0, 3))
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # the helper's interpreter ends normally: its atexit hooks run
    os.waitpid(pid, 0)
    print("child exited", flush=True)
    sys.stdin.readline()
    v.append(data(3, 3))
    v.close()
    print("closed", v.committed_length, flush=True)


def _fork_worker(path: str) -> None:
    """A writer that starts a worker process (fork), prints its pid and waits to be killed."""
    import multiprocessing

    v = Vault.create(path, EXAMPLE, rows=ROWS, done_leaf="done")
    v.append(data(0, 3))
    worker = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    worker.start()
    print(worker.pid, flush=True)
    time.sleep(120)
    v.close()


if __name__ == "__main__":
    mode, where = sys.argv[1:3]
    {"stop-in-commit": _stop_in_commit, "fork-exit": _fork_exit, "fork-worker": _fork_worker}[mode](
        where
    )
