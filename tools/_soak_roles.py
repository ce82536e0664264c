"""The processes of ``tools/soak.py`` other than its conductor: the content every value is
checked against, the files the processes share, the writer and the four readers."""

from __future__ import annotations

import argparse
import errno
import json
import os
import random
import shutil
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

ROWS = 4
RING = 512  # the writer's buffer: timesteps per row
OBS = 3
ROLES = ("tip", "pins", "stream", "episodes")


# ------------------------------------------------------------------------------ content
def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (uint64 in, uint64 out; wraps by design)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def content(rows: np.ndarray, source: np.ndarray) -> dict[str, np.ndarray]:
    """The leaves at ``rows`` (``[R]``) and source timesteps ``source`` (``[R, n]`` or
    ``[n]``): ``[R, n, ...]`` arrays, every value exact in its dtype."""
    r = np.asarray(rows, np.uint64).reshape(-1, 1)
    s = np.broadcast_to(np.asarray(source, np.int64), (r.shape[0], np.shape(source)[-1]))
    with np.errstate(over="ignore"):
        h = _mix(r * np.uint64(0x9E3779B97F4A7C15) + s.astype(np.uint64) + np.uint64(1))
        j = np.arange(OBS, dtype=np.uint64)
        obs = _mix(h[..., None] + j) % np.uint64(1 << 24)
    return {
        "obs": obs.astype(np.float32),
        "reward": ((h % np.uint64(2001)).astype(np.float32) - 1000) / 8,
        "done": (h >> np.uint64(40)) % np.uint64(23) == 0,
        "action": ((h >> np.uint64(20)) % np.uint64(7)).astype(np.int32),
    }


def sources(seams: list[Any], t0: int, t1: int) -> np.ndarray:
    """Source timesteps of stored timesteps ``[t0, t1)``: each plus the timesteps lost at the
    seams at or before it."""
    t = np.arange(t0, t1, dtype=np.int64)
    out = t.copy()
    for seam in seams:
        out[t >= seam.at] += seam.lost
    return out


def expected(seams: list[Any], rows: np.ndarray, t0: int, t1: int) -> dict[str, np.ndarray]:
    return content(rows, sources(seams, t0, t1))


def differences(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> list[str]:
    """Leaves whose values differ (with the first place), for an inconsistency line."""
    out = []
    for name, have in got.items():
        value = want[name]
        have = np.asarray(have)
        if have.shape != value.shape or have.dtype != value.dtype:
            out.append(
                f"{name}: {have.dtype}{list(have.shape)} != {value.dtype}{list(value.shape)}"
            )
        elif not np.array_equal(have, value):
            where = np.argwhere(have != value)[0].tolist()
            out.append(f"{name}: first difference at {where}")
    return out


# ------------------------------------------------------------------------------ shared state
class Board:
    """Files the processes share (outside the data disk, so a full disk never hides them):
    the current generation, each process's figures, and the inconsistencies."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def put(self, name: str, doc: Any) -> None:
        tmp = self.root / f".{name}.{os.getpid()}"
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.root / name)

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return json.loads((self.root / name).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return default

    def report(self, who: str, message: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {who}: {message}"
        with (self.root / "inconsistencies.log").open("a") as f:
            f.write(line.replace("\n", " | ") + "\n")

    def inconsistencies(self) -> list[str]:
        path = self.root / "inconsistencies.log"
        return path.read_text().splitlines() if path.exists() else []


def generation_location(base: str, gen: int) -> str:
    return f"{base.rstrip('/')}/gen-{gen:05d}"


# ------------------------------------------------------------------------------ writer
class Ring:
    """A trajectory-buffer state in numpy whose timestep ``c`` (counted from 0) holds the
    content of source timestep ``base + c``."""

    def __init__(self, base: int) -> None:
        self.base, self.count = base, 0
        self.start = -1  # the vault's committed length when this buffer began (set by callers)
        self.data = {
            k: np.zeros((ROWS, RING, *v.shape[2:]), v.dtype) for k, v in self._at(0, 1).items()
        }

    def _at(self, c0: int, c1: int) -> dict[str, np.ndarray]:
        return content(np.arange(ROWS), np.arange(self.base + c0, self.base + c1))

    def add(self, n: int) -> None:
        values = self._at(self.count, self.count + n)
        where = (self.count + np.arange(n)) % RING
        for name, array in self.data.items():
            array[:, where] = values[name]
        self.count += n

    def state(self) -> Any:
        from buffers.trajectory_buffer import TrajectoryBufferState

        counter = np.array([self.count >> 32, self.count & 0xFFFFFFFF], np.uint32)
        return TrajectoryBufferState(
            experience={k: v.copy() for k, v in self.data.items()},
            current_index=np.int32(self.count % RING),
            is_full=np.bool_(self.count >= RING),
            write_counter=counter,
        )


def _open_generation(location: str, gen: int, storage: dict[str, Any] | None) -> Any:
    from vault import Vault, VaultLockedError, VaultNotFoundError, break_lock

    where = generation_location(location, gen)
    try:
        return Vault.open(where, "a", storage=storage)
    except VaultNotFoundError:
        pass
    except VaultLockedError:
        if not location.startswith("s3://"):
            raise
        break_lock(where)  # the conductor killed its writer: its lease outlives it
        return Vault.open(where, "a", storage=storage)
    example = {k: v[0, 0] for k, v in content(np.arange(1), np.arange(1)).items()}

    def create() -> Any:
        return Vault.create(
            where, example, rows=ROWS, done_leaf="done", reward_leaf="reward", storage=storage
        )

    try:
        try:
            return create()
        except VaultLockedError:  # a creation killed half-way: its lease outlives it
            if not location.startswith("s3://"):
                raise
            break_lock(where)
            return create()  # (takes the interrupted creation over)
    except Exception:
        if location.startswith("s3://"):
            raise
        shutil.rmtree(where, ignore_errors=True)  # a creation the full disk cut short
        raise


def run_writer(args: argparse.Namespace, board: Board) -> None:
    from vault import VaultError

    rng = random.Random(args.seed * 1000 + os.getpid())
    stats = board.get("writer", {"disk_full": 0, "restarts": -1, "seams": 0, "restart_seams": 0})
    stats["restarts"] += 1
    board.put("writer", stats)
    gen = board.get("generation", 0)
    vault = _retry_full(lambda: _open_generation(args.location, gen, args.storage), stats, board)
    board.put("generation", gen)
    ring = _ring(vault)
    writes = 0
    while True:
        if vault.committed_length >= args.generation_steps:
            try:
                vault.close()  # a background write that failed is reported here
            except VaultError as err:
                if not disk_full(err):
                    raise
                _disk_full(stats, board)  # (the lock is released: close frees it in any case)
            gen += 1
            vault = _retry_full(
                lambda g=gen: _open_generation(args.location, g, args.storage), stats, board
            )
            board.put("generation", gen)
            ring = _ring(vault)
        roll = rng.random()
        try:
            if roll < 0.01:  # a restart: arrays appended directly, a new buffer after them
                vault.flush()
                n = rng.randint(1, 40)
                lost = sum(seam.lost for seam in vault.seams)
                start = vault.committed_length + lost
                vault.append(content(np.arange(ROWS), np.arange(start, start + n)), continues=False)
                stats["restart_seams"] += 1
                ring = _ring(vault)
                continue
            if roll < 0.03 and vault.committed_length > ring.start:
                vault.flush()  # an overrun of a buffer whose writes are all committed
                over = True
            else:
                over = False
            ring.add(rng.randint(RING + 1, 2 * RING) if over else rng.randint(1, 96))
            stats["seams"] += over
            # new_buffer=True only while nothing of this buffer is committed: on an overrun
            # (intended, or after failed writes) it would count the buffer's whole past as
            # lost, not only what was never saved (the vault cannot tell it is the same one)
            vault.write(
                ring.state(),
                block=rng.random() < 0.5,
                on_overrun="save_surviving",
                new_buffer=vault.committed_length == ring.start,
            )
            writes += 1
            if writes % 16 == 1:
                board.put("writer-alive", {"pid": os.getpid(), "writes": writes})
                board.put("writer", stats)  # its seams so far (a kill loses at most 16 writes')
        except VaultError as err:
            if not disk_full(err):
                raise
            _disk_full(stats, board)


def _disk_full(stats: dict[str, Any], board: Board) -> None:
    """Count a write refused by the full disk and wait until the conductor frees it."""
    stats["disk_full"] += 1
    board.put("writer", stats)
    board.put("disk_full_seen", time.time())
    _wait_for_space(board)


def _ring(vault: Any) -> Ring:
    """A new buffer that continues the vault's source timesteps."""
    ring = Ring(vault.committed_length + sum(seam.lost for seam in vault.seams))
    ring.start = vault.committed_length
    return ring


def disk_full(err: BaseException) -> bool:
    """Whether a write failed because the disk is full (``VaultStorageError`` with
    ``errno.ENOSPC``; an untyped failure that says so is counted too, and noted)."""
    if getattr(err, "errno", None) == errno.ENOSPC:
        return True
    return "No space left on device" in str(err)


def _retry_full(make: Any, stats: dict[str, Any], board: Board) -> Any:
    from vault import VaultError

    while True:
        try:
            return make()
        except VaultError as err:
            if not disk_full(err):
                raise
            _disk_full(stats, board)


def _wait_for_space(board: Board) -> None:
    deadline = time.time() + 30
    while board.get("ballast", False) and time.time() < deadline:
        time.sleep(0.05)


# ------------------------------------------------------------------------------ readers
class Reader:
    def __init__(self, role: str, args: argparse.Namespace, board: Board) -> None:
        self.role, self.args, self.board = role, args, board
        self.rng = random.Random(args.seed * 7919 + ROLES.index(role))
        self.stats = {"reads": 0, "values": 0, "errors": 0}
        self.gen = -1
        self.vault: Any = None
        self.pins: list[tuple[str, int, int, int]] = []
        self.last_length = 0

    def bad(self, message: str) -> None:
        self.stats["errors"] += 1
        self.board.report(f"{self.role} gen {self.gen}", message)

    def current(self) -> Any:
        from vault import Vault

        gen = self.board.get("generation", 0)
        if gen != self.gen or self.vault is None:
            where = generation_location(self.args.location, gen)
            try:
                self.vault = Vault.open(where, storage=self.args.storage)
            except Exception as err:  # created but not yet complete, or not yet created
                if type(err).__name__ != "VaultNotFoundError":
                    self.bad(f"open {where}: {type(err).__name__}: {err}")
                return None
            self.gen, self.pins, self.last_length = gen, [], 0
            self.board.put(f"using-{self.role}", gen)
        return self.vault

    def check(
        self, got: dict[str, np.ndarray], seams: list[Any], rows: Any, t0: int, t1: int, what: str
    ) -> None:
        want = expected(seams, np.asarray(rows), t0, t1)
        problems = differences(got, want)
        if problems:
            self.bad(f"{what} [{t0}, {t1}): {'; '.join(problems)}")
        self.stats["reads"] += 1
        self.stats["values"] += sum(int(np.size(v)) for v in want.values())

    def loop(self) -> None:
        step = getattr(self, f"step_{self.role}")
        while True:
            vault = self.current()
            if vault is None:
                time.sleep(0.05)
                continue
            try:
                step(vault)
            except Exception as err:
                self.bad(f"{type(err).__name__}: {err} ({traceback.format_exc(limit=3)[-600:]})")
                self.vault = None
            self.board.put(f"reader-{self.role}", self.stats)

    def step_tip(self, vault: Any) -> None:
        vault.refresh()
        length = vault.committed_length
        if length < self.last_length:
            self.bad(f"the committed length went back from {self.last_length} to {length}")
        self.last_length = length
        if length == 0:
            time.sleep(0.01)
            return
        t0 = max(0, length - self.rng.randint(1, 200))
        self.check(
            vault.read_numpy(start=t0, stop=length), vault.seams, np.arange(ROWS), t0, length, "tip"
        )

    def step_pins(self, vault: Any) -> None:
        from vault import Vault

        vault.refresh()
        length = vault.committed_length
        if length and (not self.pins or self.pins[-1][1] != length):
            t0 = self.rng.randrange(length)
            t1 = min(length, t0 + self.rng.randint(1, 300))
            self.pins.append((vault.commit_id, length, t0, t1))
            self.check(
                vault.read_numpy(start=t0, stop=t1), vault.seams, np.arange(ROWS), t0, t1, "read"
            )
        if not self.pins:
            time.sleep(0.01)
            return
        commit, length, t0, t1 = self.rng.choice(self.pins[-50:])
        pinned = Vault.open(vault.location, at=commit, storage=self.args.storage)
        if pinned.committed_length != length:
            self.bad(f"pin {commit}: committed_length {pinned.committed_length}, pinned {length}")
        row = self.rng.randrange(ROWS)
        got = pinned.read_numpy(rows=[row], start=t0, stop=t1)
        self.check(got, pinned.seams, [row], t0, t1, f"pin {commit}")

    def step_stream(self, vault: Any) -> None:
        vault.refresh()
        if vault.committed_length < 16:
            time.sleep(0.01)
            return
        aware = self.rng.random() < 0.5
        seams = vault.seams
        stream = vault.as_dataset(
            8,
            4,
            shuffle=True,
            seed=self.rng.randrange(1 << 30),
            epochs=1,
            episode_aware=aware,
            device_put=False,
        )
        try:
            for i, batch in enumerate(stream):
                for j in range(len(batch.row)):
                    row, start = int(batch.row[j]), int(batch.start[j])
                    got = {k: v[j : j + 1] for k, v in batch.experience.items()}
                    self.check(got, seams, [row], start, start + 4, "stream")
                    if any(start < s.at < start + 4 for s in seams):
                        self.bad(f"stream: a sequence at row {row}, {start} crosses a seam")
                    if aware and bool(np.any(got["done"][0, :-1])):
                        self.bad(
                            f"stream (episode_aware): the sequence at row {row}, {start} "
                            "crosses an episode end"
                        )
                if i >= 20:
                    break
        finally:
            stream.close()

    def step_episodes(self, vault: Any) -> None:
        vault.refresh()
        length = vault.committed_length
        table = vault.episodes(include_open=True)
        data = vault.read_numpy(leaves=["done", "reward"], stop=length)
        seams = vault.seams
        self.check(data, seams, np.arange(ROWS), 0, length, "episode leaves")
        cuts = sorted({s.at for s in seams})
        for row in range(ROWS):
            mine = np.flatnonzero(table.row == row)
            done = np.flatnonzero(data["done"][row])
            ends = [int(table.start[i] + table.length[i] - 1) for i in mine if table.complete[i]]
            if ends != done.tolist():
                self.bad(
                    f"episodes: row {row}: episode ends {ends[:8]}... != done flags at "
                    f"{done[:8].tolist()}..."
                )
                continue
            prev_end = -1
            for i in mine:
                start, n = int(table.start[i]), int(table.length[i])
                seam = max([c for c in cuts if c <= start + max(n, 1) - 1 and c > prev_end] or [0])
                first = max(prev_end + 1, seam)
                if start != first:
                    self.bad(f"episodes: row {row} episode at {start} should start at {first}")
                total = float(np.sum(data["reward"][row, start : start + n], dtype=np.float64))
                if abs(total - float(table.returns[i])) > 1e-6 * max(1.0, abs(total)):
                    self.bad(
                        f"episodes: row {row} at {start}: return {table.returns[i]} != {total}"
                    )
                if table.complete[i]:
                    prev_end = start + n - 1
        self.stats["reads"] += 1
