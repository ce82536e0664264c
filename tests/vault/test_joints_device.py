"""Where writes of a buffer on an accelerator (``vault/write/_device.py``: the new timesteps
cut on the device; ``write(block=False)`` copying and staging them in the writer's background
thread, the tails it leaves pending until then) meet the vault's other features.

Every scenario runs twice: on the host path (jax arrays on the CPU, read in place) and on the
device path (``on_accelerator`` answering for those arrays, as ``tests/vault/test_write_device.py``
does), and what a user relies on must come out the same, bit for bit: the stored data, the
seams, the episode index, ``verify``. Most are also held to a numpy model of the timesteps the
buffer was given (add number ``t`` gives row ``r`` values that say where they belong).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers as fbx
import vault
from vault import Seam, Vault, VaultError
from vault.write import _device

T = 8  # time axis of every buffer here
ROWS = 2
EPISODES = {"done_leaf": "done", "truncated_leaf": "trunc", "reward_leaf": "reward"}


# ------------------------------------------------------------------------------ the model
def history(start: int, stop: int, rows: int = ROWS, run: int = 0) -> dict[str, Any]:
    """Timesteps ``[start, stop)`` of every row, ``[rows, n, ...]`` per leaf; ``run`` shifts
    the values (another run of the environment)."""
    t = np.arange(start, stop)[None, :]
    r = np.arange(rows)[:, None]
    tt, rr = np.broadcast_arrays(t, r)
    return {
        "obs": np.stack([tt + 0.25 + 1000 * run, rr.astype(float)], -1).astype(np.float32),
        "act": ((7 * tt + rr + run) % 251).astype(np.uint8),
        "done": (tt + rr) % 5 == 4,
        "trunc": ((tt + 2 * rr) % 7 == 6) & ((tt + rr) % 5 != 4),
        "reward": (0.5 * tt - rr + run).astype(np.float32),
    }


def one_step() -> dict[str, Any]:
    return jax.tree.map(lambda x: jnp.asarray(x[0, 0]), history(0, 1, 1))


def concat(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *parts)


def assert_tree_equal(got: Any, want: Any) -> None:
    """Same structure, dtypes, shapes and bytes."""
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype
        assert g.shape == w.shape
        assert g.tobytes() == w.tobytes(), (g, w)


def model_episodes(data: dict[str, Any], seams: list[tuple[int, int]] = ()) -> set[Any]:
    """Complete episodes of ``data`` (as in tests/vault/test_joints_buffers.py): one ends at a
    done or truncation flag; none runs across a seam; after a loss the start is unknown."""
    out = set()
    done, trunc, reward = data["done"], data["trunc"], data["reward"]
    cut = dict(seams)
    for row in range(done.shape[0]):
        start, known = 0, cut.get(0, 0) == 0
        for t in range(done.shape[1]):
            if t in cut and t > 0:
                start, known = t, cut[t] == 0
            if done[row, t] or trunc[row, t]:
                ret = float(np.sum(reward[row, start : t + 1], dtype=np.float32))
                out.add((row, start, t + 1 - start, ret, known, bool(trunc[row, t])))
                start, known = t + 1, True
    return out


def episodes_of(table: Any) -> set[tuple[int, int, int, float, bool, bool]]:
    cols = (table.row, table.start, table.length, table.returns, table.start_known)
    return {
        (int(r), int(s), int(n), float(g), bool(k), bool(tr))
        for r, s, n, g, k, tr in zip(*cols, table.truncated, strict=True)
    }


# ------------------------------------------------------------------------------ the device
@dataclasses.dataclass
class Device:
    """Whether writes take the device path, and the cuts made there ``(start, n)``."""

    on: bool
    cuts: list[tuple[int, int]] = dataclasses.field(default_factory=list)


@contextlib.contextmanager
def path_of(on: bool) -> Iterator[Device]:
    """The device path (``on``; on a CPU-only machine jax arrays on the CPU taken for device
    leaves, as the fixture ``cuts`` of tests/vault/test_write_device.py does) or the host
    path (every leaf read whole with ``np.asarray``, wherever it is)."""
    device = Device(on)
    with pytest.MonkeyPatch.context() as m:
        if not on:  # on an accelerator too: the whole leaf copied with ``np.asarray``
            m.setattr(_device, "on_accelerator", lambda v: False)
        else:
            real_cut = _device.cut

            def cut(value: Any, lead: int, start: int, n: int) -> Any:
                device.cuts.append((start, n))
                return real_cut(value, lead, start, n)

            m.setattr(_device, "cut", cut)
            if jax.default_backend() == "cpu":
                m.setattr(
                    _device,
                    "on_accelerator",
                    lambda v: _device.device_memory_of(v) is not None,
                )
        yield device


@dataclasses.dataclass
class Outcome:
    data: Any
    seams: list[Seam]
    episodes: Any
    ok: bool


def outcome(path: Path | str) -> Outcome:
    r = Vault.open(path)
    table = r.episodes(include_open=True) if r.has_episodes else None
    rows = None
    if table is not None:
        cols = (table.row, table.start, table.length, table.truncated)
        rows = sorted(
            (int(a), int(b), int(c), bool(d), bool(e), bool(f), float(g).hex())
            for a, b, c, d, e, f, g in zip(
                *cols, table.complete, table.start_known, table.returns, strict=True
            )
        )
    return Outcome(r.read_numpy(), r.seams, rows, vault.verify(path).ok)


def both_paths(
    tmp_path: Path, scenario: Callable[[Path, Device], Any], cut: bool = True
) -> tuple[Any, Any]:
    """``scenario`` on the host path and on the device path (where the leaves are cut on the
    device unless ``cut=False``); their outcomes must be the same (stored bytes, seams,
    episodes, both verified); returns what each scenario returned."""
    got = []
    for on in (False, True):
        path = tmp_path / ("device" if on else "host")
        with path_of(on) as device:
            got.append(scenario(path, device))
            if on:
                assert bool(device.cuts) == cut, device.cuts
    host, dev = outcome(tmp_path / "host"), outcome(tmp_path / "device")
    assert host.ok
    assert dev.ok
    assert_tree_equal(dev.data, host.data)
    assert dev.seams == host.seams
    assert dev.episodes == host.episodes
    return got[0], got[1]


# ------------------------------------------------------------------------------ the kinds
@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    make: Callable[[], Any]
    rows: int
    seq: int
    shape_batch: Callable[[Any], Any]


def _seq(x: Any) -> Any:
    return x


def _step(x: Any) -> Any:
    return x[:, 0]


def _item(x: Any) -> Any:
    return x[0, 0]


def _trajectory(rows: int = ROWS) -> Any:
    return fbx.make_trajectory_buffer(
        add_batch_size=rows,
        sample_batch_size=2,
        sample_sequence_length=2,
        period=1,
        min_length_time_axis=2,
        max_length_time_axis=T,
    )


KINDS = {
    k.name: k
    for k in [
        Kind("trajectory", _trajectory, ROWS, 1, _seq),
        Kind("trajectory_seq3", _trajectory, ROWS, 3, _seq),
        Kind("trajectory_rows3", lambda: _trajectory(3), 3, 1, _seq),
        Kind(
            "flat",
            lambda: fbx.make_flat_buffer(
                max_length=ROWS * T, min_length=2, sample_batch_size=2, add_batch_size=ROWS
            ),
            ROWS,
            1,
            _step,
        ),
        Kind(
            "item",
            lambda: fbx.make_item_buffer(max_length=T, min_length=2, sample_batch_size=2),
            1,
            1,
            _item,
        ),
        Kind(
            "prioritised_flat",
            lambda: fbx.make_prioritised_flat_buffer(
                max_length=ROWS * T, min_length=2, sample_batch_size=2, add_batch_size=ROWS
            ),
            ROWS,
            1,
            _step,
        ),
        Kind(
            "prioritised_trajectory",
            lambda: fbx.make_prioritised_trajectory_buffer(
                add_batch_size=ROWS,
                sample_batch_size=2,
                sample_sequence_length=2,
                period=1,
                min_length_time_axis=2,
                max_length_time_axis=T,
            ),
            ROWS,
            1,
            _seq,
        ),
        Kind(
            "n_step",
            lambda: fbx.make_n_step_buffer(
                max_length=ROWS * T,
                min_length=3,
                sample_batch_size=2,
                add_batch_size=ROWS,
                n_step=2,
            ),
            ROWS,
            1,
            _step,
        ),
        Kind(
            "episode",
            lambda: fbx.make_episode_buffer(
                add_batch_size=ROWS,
                sample_batch_size=2,
                sample_sequence_length=2,
                min_length_time_axis=2,
                max_length_time_axis=T,
                episode_end="done",
            ),
            ROWS,
            1,
            _seq,
        ),
    ]
}


@functools.cache
def add_of(name: str) -> Any:
    """The kind's jitted ``add``, its state donated (compiled once per file)."""
    return jax.jit(KINDS[name].make().add, donate_argnums=0)


class Run:
    """A buffer of one kind being filled with the model's timesteps (adds donate the state)."""

    def __init__(self, name: str = "trajectory", run: int = 0) -> None:
        self.kind = KINDS[name]
        self.add_fn = add_of(name)
        self.state = self.kind.make().init(one_step())
        self.run = run
        self.t = 0  # timesteps added per row

    def add(self, n_adds: int = 1) -> None:
        for _ in range(n_adds):
            data = history(self.t, self.t + self.kind.seq, self.kind.rows, self.run)
            batch = jax.tree.map(lambda x: jnp.asarray(self.kind.shape_batch(x)), data)
            self.state = self.add_fn(self.state, batch)
            self.t += self.kind.seq

    def model(self, start: int, stop: int) -> dict[str, Any]:
        return history(start, stop, self.kind.rows, self.run)


def is_block(mode: str, i: int) -> bool:
    return mode == "block" or (mode == "alternating" and i % 2 == 1)


MODES = ["block", "background", "alternating"]
# adds between writes: within a ring, a whole ring, and overruns (twice round and more)
SCHEDULE = (1, 3, T, 2, 2 * T + 3, 5, 1, T + 1, 4)


# ------------------------------------------------------------------------------ 1. kinds
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(KINDS))
def test_every_kind_on_the_device_path_stores_what_the_host_path_stores(
    tmp_path: Path, name: str, mode: str
) -> None:
    """Writes every few adds, a whole ring, and overruns saved as they survive (seams), with
    up to 3 background writes queued behind each other: the same bytes, seams and episodes as
    the host path, and as the model."""
    kind = KINDS[name]

    def scenario(path: Path, device: Device) -> Any:
        run = Run(name)
        v = Vault.create(path, run.state, **EPISODES)
        v.max_pending = 3
        parts, seams, length = [], [], 0
        for i, adds in enumerate(SCHEDULE):
            before = run.t
            run.add(-(-adds // kind.seq))
            n = v.write(run.state, block=is_block(mode, i), on_overrun="save_surviving")
            assert n == min(run.t - before, T)
            if run.t - before > T:
                seams.append((length, run.t - before - T))
            length += n
            parts.append(run.model(run.t - n, run.t))
        v.close()
        return concat(parts), seams

    (data, seams), _ = both_paths(tmp_path, scenario)
    r = Vault.open(tmp_path / "device")
    assert_tree_equal(r.read_numpy(), data)
    assert [(s.at, s.lost) for s in r.seams] == seams
    assert episodes_of(r.episodes()) == model_episodes(data, seams)


@pytest.mark.parametrize("block", [True, False], ids=["block", "background"])
def test_a_trajectory_queue_on_the_device_path(tmp_path: Path, block: bool) -> None:
    """A queue (its position is ``write_index``) read and refilled between writes."""
    queue = fbx.make_trajectory_queue(
        max_length_time_axis=T, add_batch_size=ROWS, add_sequence_length=2, sample_sequence_length=2
    )
    add, sample = jax.jit(queue.add), jax.jit(queue.sample)

    def scenario(path: Path, device: Device) -> int:
        state = queue.init(one_step())
        v = Vault.create(path, state, **EPISODES)
        t = 0
        for w in range(6):
            for _ in range(1 + w % 3):
                state = add(state, jax.tree.map(jnp.asarray, history(t, t + 2)))
                state, _ = sample(state)
                t += 2
            assert v.write(state, block=block) == 2 * (1 + w % 3)
        v.close()
        return t

    t, _ = both_paths(tmp_path, scenario)
    assert_tree_equal(Vault.open(tmp_path / "device").read_numpy(), history(0, t))


# ------------------------------------------------------------------------------ 2. flashbax
@pytest.mark.parametrize("name", ["trajectory", "prioritised_flat"])
def test_flashbax_shaped_states_on_the_device_path(tmp_path: Path, name: str) -> None:
    """``to_flashbax_state`` of a state (its counter derived from the position; a prioritised
    one's from ``running_index``) written every 3 adds, background and blocking."""

    def scenario(path: Path, device: Device) -> int:
        run = Run(name)
        v = Vault.create(path, run.state, **EPISODES)  # create takes ours
        for i in range(7):
            run.add(3)
            assert v.write(fbx.to_flashbax_state(run.state), block=i % 3 == 2) == 3
        v.close()
        return run.t

    t, _ = both_paths(tmp_path, scenario)
    r = Vault.open(tmp_path / "device")
    assert r.seams == []
    assert_tree_equal(r.read_numpy(), history(0, t, KINDS[name].rows))


def test_the_reference_constructor_on_the_device_path(tmp_path: Path) -> None:
    """``vault.vault.Vault(vault_name=..., experience_structure=..., rel_dir=...)``: the buffer
    it wrote continues (a whole ring since, in the background), another buffer is appended
    whole; ``read()`` gives it all back."""
    from vault.vault import Vault as ReferenceVault

    def scenario(path: Path, device: Device) -> Any:
        first = Run("flat")
        first.add(5)
        v = ReferenceVault(
            vault_name="run",
            experience_structure=first.state.experience,
            rel_dir=str(path),
            vault_uid="u",
        )
        assert v.write(first.state, block=False) == 5
        first.add(2)
        assert v.write(first.state, block=False) == 2
        second = Run("flat", run=1)
        second.add(4)
        assert v.write(second.state, block=False) == 4
        second.add(T)
        assert v.write(second.state, block=False) == T
        second.add(1)
        assert v.write(second.state) == 1
        v.close()
        again = ReferenceVault(vault_name="run", rel_dir=str(path), vault_uid="u")
        return jax.tree.map(np.asarray, again.read().experience)

    with path_of(False) as device:
        host = scenario(tmp_path / "host", device)
    with path_of(True) as device:
        dev = scenario(tmp_path / "device", device)
        assert device.cuts
    want = concat([history(0, 7), history(0, 5 + T, run=1)])
    assert_tree_equal(host, want)
    assert_tree_equal(dev, want)
    got = Vault.open(tmp_path / "device" / "run" / "u")
    assert got.seams == Vault.open(tmp_path / "host" / "run" / "u").seams
    assert vault.verify(tmp_path / "device" / "run" / "u").ok


# ------------------------------------------------------------------------------ 3. overruns
def test_overruns_queued_behind_each_other_record_the_host_path_s_seams(tmp_path: Path) -> None:
    """Several overruns in a row, each saved in the background while up to 3 wait, with odd
    chunks: seams at the same places with the same losses as the host path."""
    chunk = {"obs": [1, 3, 1], "act": [2, 5], "done": [1, 3], "trunc": [2, 7], "reward": [1, 1]}

    def scenario(path: Path, device: Device) -> list[int]:
        run = Run()
        v = Vault.create(path, run.state, chunk=chunk, **EPISODES)
        v.max_pending = 3
        counts = []
        for adds in (3, 2 * T + 1, T + 2, 1, 3 * T, T + 5, 2):
            run.add(adds)
            counts.append(v.write(run.state, block=False, on_overrun="save_surviving"))
        v.close()
        return counts

    host, dev = both_paths(tmp_path, scenario)
    assert dev == host == [3, T, T, 1, T, T, 2]
    assert Vault.open(tmp_path / "device").seams == [
        Seam(3, T + 1),
        Seam(3 + T, 2),
        Seam(4 + 2 * T, 2 * T),
        Seam(4 + 3 * T, 5),
    ]


# ------------------------------------------------------------------------------ 4. buffers
def test_new_buffer_and_a_reopened_writer_after_background_device_writes(tmp_path: Path) -> None:
    """``new_buffer=True`` on every write (the same buffer: only the new timesteps), a writer
    reopened after background writes, then another buffer appended whole with a restart
    seam."""

    def scenario(path: Path, device: Device) -> Any:
        run = Run()
        v = Vault.create(path, run.state, **EPISODES)
        v.max_pending = 3
        for adds in (3, 2, T):
            run.add(adds)
            v.write(run.state, new_buffer=True, block=False)
        v.close()
        v = Vault.open(path, mode="a")
        run.add(4)
        assert v.write(run.state, block=False) == 4
        assert v.write(run.state, new_buffer=True, block=False) == 0
        run.add(1)
        assert v.write(run.state, new_buffer=True, block=False) == 1
        other = Run(run=1)
        other.add(5)
        assert v.write(other.state, new_buffer=True, block=False) == 5
        other.add(2)
        assert v.write(other.state, new_buffer=True) == 2
        v.close()
        return run.t

    t, _ = both_paths(tmp_path, scenario)
    r = Vault.open(tmp_path / "device")
    assert r.seams == [Seam(t, 0)]
    assert_tree_equal(r.read_numpy(), concat([history(0, t), history(0, 7, run=1)]))


@pytest.mark.parametrize("pattern", ["DHDH", "HDHD", "DDHH", "HHDD"])
def test_a_device_state_and_its_host_copy_written_in_turn(tmp_path: Path, pattern: str) -> None:
    """The same buffer written as its device state (``D``) or as its numpy copy (``H``,
    ``jax.device_get``), blocking and in the background, one vault: each timestep once."""

    def scenario(path: Path, device: Device) -> int:
        run = Run()
        v = Vault.create(path, run.state, chunk={"obs": [1, 3, 2], "done": [2, 5]}, **EPISODES)
        v.max_pending = 3
        for i, adds in enumerate((3, 1, T, 2, 5, 3, 6, 1)):
            run.add(adds)
            state = run.state if pattern[i % 4] == "D" else jax.device_get(run.state)
            assert v.write(state, block=i % 3 == 2) == adds
        v.close()
        return run.t

    t, _ = both_paths(tmp_path, scenario)
    assert_tree_equal(Vault.open(tmp_path / "device").read_numpy(), history(0, t))


# ------------------------------------------------------------------------------ 5. lifecycle
def train_then_fail(path: Path, run: Run) -> None:
    """Background writes in a ``with`` block of a reopened writer, then an exception."""
    with Vault.open(path, mode="a") as v:
        v.max_pending = 3
        for adds in (T, 1, 4):
            run.add(adds)
            v.write(run.state, block=False)
        raise RuntimeError("the training step failed")


def test_with_blocks_flush_and_an_exception_inside_keep_what_was_written(tmp_path: Path) -> None:
    """Background writes left in a ``with`` block that raises are committed by its exit; a
    later ``with`` block continues the buffer; ``flush`` in between changes nothing."""

    def scenario(path: Path, device: Device) -> int:
        run = Run()
        with Vault.create(path, run.state, **EPISODES) as v:
            run.add(3)
            v.write(run.state, block=False)
            v.flush()
            run.add(2)
            v.write(run.state, block=False)
        with pytest.raises(RuntimeError, match="the training step"):
            train_then_fail(path, run)
        assert Vault.open(path).committed_length == run.t
        with Vault.open(path, mode="a") as v:
            run.add(6)
            assert v.write(run.state, block=False) == 6
            v.flush()
            assert v.committed_length == run.t
        return run.t

    t, _ = both_paths(tmp_path, scenario)
    assert_tree_equal(Vault.open(tmp_path / "device").read_numpy(), history(0, t))


SCHEDULE_FAILING = (1, 2, 1, 1, 2, 1, 2)  # any 5 writes in a row fit the ring


@pytest.mark.parametrize("error", [OSError, KeyboardInterrupt])
@pytest.mark.parametrize("failing", [0, 1, 3])
def test_a_failed_host_copy_in_the_background_then_the_next_write_appends_what_is_missing(
    tmp_path: Path, failing: int, error: type[BaseException]
) -> None:
    """The host copy of write ``failing`` fails in the background, up to 3 writes queued
    (odd chunks, so the tails the failed staging never set matter): a later write (or the
    flush) raises it, the vault stays at the commit before it, and writing the same state
    again appends exactly what is missing, as a training loop that catches the error does."""
    chunk = {"obs": [1, 3, 2], "act": [2, 5], "done": [1, 3], "reward": [2, 7]}
    with path_of(True) as device:
        run = Run()
        path = tmp_path / "v"
        v = Vault.create(path, run.state, chunk=chunk, **EPISODES)
        v.max_pending = 3
        real = _device.to_host
        calls = [0]

        def to_host(values: Any) -> Any:
            calls[0] += 1  # a write copies each leaf's pieces in one call: 5 per write
            if calls[0] == 5 * failing + 1:
                raise error("the host copy failed")
            return real(values)

        raised = 0
        with pytest.MonkeyPatch.context() as m:
            m.setattr(_device, "to_host", to_host)
            for adds in SCHEDULE_FAILING:
                run.add(adds)
                try:
                    v.write(run.state, block=False)
                except VaultError as err:
                    assert "background write failed" in str(err)  # noqa: PT017
                    raised += 1
                    committed = Vault.open(path).committed_length
                    assert committed == sum(SCHEDULE_FAILING[:failing])
                    assert v.committed_length == committed
                    assert v.write(run.state, block=False) == run.t - committed
        if not raised:
            with pytest.raises(VaultError, match="background write failed"):
                v.flush()
            assert v.write(run.state, block=False) == run.t - v.committed_length
        run.add(2)
        assert v.write(run.state) == 2
        v.close()
        assert raised <= 1
        assert device.cuts
    r = Vault.open(path)
    assert r.seams == []
    data = history(0, run.t)
    assert_tree_equal(r.read_numpy(), data)
    assert episodes_of(r.episodes()) == model_episodes(data)
    assert vault.verify(path).ok


@pytest.mark.parametrize("block", [True, False], ids=["block", "background"])
def test_an_interrupt_in_the_host_copy_of_a_write_leaves_the_tip_for_the_next(
    tmp_path: Path, block: bool
) -> None:
    """Ctrl-C while a write copies the cut to the host (in the caller for a blocking write,
    in the background thread else): the next write appends exactly what is missing."""
    with path_of(True):
        run = Run()
        path = tmp_path / "v"
        v = Vault.create(path, run.state, chunk={"obs": [1, 3, 2]}, **EPISODES)
        run.add(4)
        v.write(run.state, block=block)
        v.flush()
        with pytest.MonkeyPatch.context() as m:

            def to_host(values: Any) -> Any:
                raise KeyboardInterrupt

            m.setattr(_device, "to_host", to_host)
            run.add(3)
            if block:
                with pytest.raises(KeyboardInterrupt):
                    v.write(run.state, block=True)
            else:
                v.write(run.state, block=False)
                with pytest.raises(VaultError, match="background write failed"):
                    v.flush()
        assert v.committed_length == 4
        run.add(2)
        assert v.write(run.state, block=block) == 5
        v.close()
    assert_tree_equal(Vault.open(path).read_numpy(), history(0, run.t))
    assert vault.verify(path).ok


# ------------------------------------------------------------------------------ 6. chunks
CHUNKS = {  # row blocks of 2 or 1 of 3 rows; time chunks of 3, 5 and 7 against T = 8
    "obs": [2, 3, 1],
    "act": [2, 5],
    "done": [1, 3],
    "trunc": [3, 16],
    "reward": [2, 1],
}


@pytest.mark.parametrize("mode", MODES)
def test_odd_chunks_and_episodes_across_pending_tails_and_a_reopen(
    tmp_path: Path, mode: str
) -> None:
    def scenario(path: Path, device: Device) -> Any:
        run = Run("trajectory_rows3")
        v = Vault.create(path, run.state, chunk=CHUNKS, **EPISODES)
        v.max_pending = 3
        parts, seams, length = [], [], 0
        for i, adds in enumerate((1, 3, T, 2, 5, 2 * T + 1, 7, 1, 4)):
            run.add(adds)
            n = v.write(run.state, block=is_block(mode, i), on_overrun="save_surviving")
            if adds > T:
                seams.append((length, adds - T))
            length += n
            parts.append(history(run.t - n, run.t, 3))
            if i == 4:  # a new writer mid-way, which has not kept the partly filled chunks
                v.close()
                v = Vault.open(path, mode="a")
                v.max_pending = 3
        v.close()
        return concat(parts), seams

    (data, seams), _ = both_paths(tmp_path, scenario)
    r = Vault.open(tmp_path / "device")
    assert_tree_equal(r.read_numpy(), data)
    assert [(s.at, s.lost) for s in r.seams] == seams
    assert episodes_of(r.episodes()) == model_episodes(data, seams)


# ------------------------------------------------------------------------------ 7. pins
def test_tags_taken_while_background_device_writes_are_queued_pin_a_prefix(tmp_path: Path) -> None:
    """A tag taken after each background write names a commit already made (whichever it
    is): read at that tag, or at its commit id, the vault is the prefix of the final data that
    that commit committed, and stays so after later writes."""
    with path_of(True):
        run = Run()
        path = tmp_path / "v"
        v = Vault.create(path, run.state, chunk={"obs": [1, 3, 2], "done": [2, 5]}, **EPISODES)
        v.max_pending = 3
        pins, ends = [], [0]
        for i, adds in enumerate((3, 2, T, 1, 5, 4)):
            run.add(adds)
            ends.append(run.t)
            v.write(run.state, block=False)
            # (the tag names the commit made when it runs: a background write may land
            # between it and any later look at the vault, so its length is read back below)
            pins.append((f"t{i}", v.tag(f"t{i}"), ends[: i + 2]))
        v.close()
    final = history(0, run.t)
    lengths = []
    for name, commit, possible in pins:
        for at in (name, commit):
            r = Vault.open(path, at=at)
            assert r.commit_id == commit
            length = r.committed_length
            assert length in possible  # the end of one of the writes made so far
            assert_tree_equal(r.read_numpy(), jax.tree.map(lambda x, n=length: x[:, :n], final))
        lengths.append(length)
    assert lengths == sorted(lengths)  # later tags never name earlier commits
    assert Vault.open(path).tags() == {name: commit for name, commit, _ in pins}
    assert vault.verify(path).ok


# ------------------------------------------------------------------------------ 8. stacked
@pytest.mark.parametrize("block", [True, False], ids=["block", "background"])
def test_a_vmapped_batch_as_a_flashbax_state_on_the_device_path(
    tmp_path: Path, block: bool
) -> None:
    """Two buffers stacked by ``vmap``, written as Flashbax-shaped states (counters derived
    per buffer) with a new buffer appended whole after them."""
    buffer = _trajectory()
    init = jax.jit(jax.vmap(buffer.init, in_axes=None, axis_size=2))
    add = jax.jit(jax.vmap(buffer.add), donate_argnums=0)

    def batch(t: int, runs: tuple[int, int]) -> Any:
        parts = [history(t, t + 1, ROWS, r) for r in runs]
        return jax.tree.map(lambda *x: jnp.stack(x), *parts)

    def scenario(path: Path, device: Device) -> int:
        state = init(one_step())
        v = Vault.create(path, state, **EPISODES)
        t = 0
        for adds in (3, T, 1, 5):
            for _ in range(adds):
                state = add(state, batch(t, (0, 1)))
                t += 1
            assert v.write(fbx.to_flashbax_state(state), block=block) == adds
        v.close()
        return t

    t, _ = both_paths(tmp_path, scenario)
    per = [history(0, t, ROWS, r) for r in (0, 1)]
    want = jax.tree.map(lambda a, b: np.concatenate([a, b], axis=0), *per)
    assert_tree_equal(Vault.open(tmp_path / "device").read_numpy(), want)


# ------------------------------------------------------------------------------ 9. placement
def _placed(state: Any, how: str) -> Any:
    """``state`` with its experience placed as ``how`` says."""
    devices = jax.devices()
    exp = state.experience
    if how == "second_device":
        exp = jax.device_put(exp, devices[-1])
    elif how == "leaves_on_two_devices":
        exp = {
            k: jax.device_put(x, devices[i % len(devices)]) for i, (k, x) in enumerate(exp.items())
        }
    elif how == "some_leaves_numpy":
        exp = {k: np.asarray(x) if k in ("obs", "done") else x for k, x in exp.items()}
    return state.replace(experience=exp)


@pytest.mark.parametrize("how", ["second_device", "leaves_on_two_devices", "some_leaves_numpy"])
def test_states_placed_otherwise_store_what_the_host_path_stores(tmp_path: Path, how: str) -> None:
    def scenario(path: Path, device: Device) -> int:
        run = Run()
        v = Vault.create(path, run.state, chunk={"obs": [1, 3, 2]}, **EPISODES)
        v.max_pending = 3
        for i, adds in enumerate((3, T, 2, 5, 1, 7)):
            run.add(adds)
            assert v.write(_placed(run.state, how), block=i % 3 == 1) == adds
        v.close()
        return run.t

    t, _ = both_paths(tmp_path, scenario)
    assert_tree_equal(Vault.open(tmp_path / "device").read_numpy(), history(0, t))


def test_a_pmapped_state_on_one_device(tmp_path: Path) -> None:
    buffer = _trajectory()
    init, add = jax.pmap(buffer.init), jax.pmap(buffer.add)

    def scenario(path: Path, device: Device) -> int:
        state = init(jax.tree.map(lambda x: x[None], one_step()))
        v = Vault.create(path, state, **EPISODES)
        for t in range(13):
            step = jax.tree.map(lambda x: jnp.asarray(x)[None], history(t, t + 1))
            state = add(state, step)
            if t % 3 == 2:
                assert v.write(state, block=t % 2 == 0) == 3
        v.close()
        return 12

    t, _ = both_paths(tmp_path, scenario)
    assert_tree_equal(Vault.open(tmp_path / "device").read_numpy(), history(0, t))


def test_a_ring_of_one_timestep_written_after_every_add(tmp_path: Path) -> None:
    buffer = fbx.make_trajectory_buffer(
        add_batch_size=ROWS, sample_batch_size=1, sample_sequence_length=1, period=1,
        min_length_time_axis=1, max_length_time_axis=1,
    )  # fmt: skip
    add = jax.jit(buffer.add, donate_argnums=0)

    def scenario(path: Path, device: Device) -> int:
        state = buffer.init(one_step())
        v = Vault.create(path, state, chunk={"obs": [1, 3, 2]}, **EPISODES)
        v.max_pending = 3
        for t in range(9):
            state = add(state, jax.tree.map(jnp.asarray, history(t, t + 1)))
            assert v.write(state, block=t % 4 == 3) == 1
        v.close()
        return 9

    t, _ = both_paths(tmp_path, scenario)
    assert_tree_equal(Vault.open(tmp_path / "device").read_numpy(), history(0, t))


def test_a_state_of_the_flashbax_package_on_the_device_path(tmp_path: Path) -> None:
    """A state made by Flashbax 0.1.3 itself (its flat buffer), written every 3 adds."""
    flashbax = pytest.importorskip("flashbax")
    buffer = flashbax.make_flat_buffer(
        max_length=ROWS * T, min_length=2, sample_batch_size=2, add_batch_size=ROWS
    )
    add = jax.jit(buffer.add)

    def scenario(path: Path, device: Device) -> int:
        state = buffer.init(jax.tree.map(lambda x: x, one_step()))
        v = Vault.create(path, fbx.from_flashbax_state(state), **EPISODES)
        t = 0
        for i in range(7):
            for _ in range(3):
                state = add(state, jax.tree.map(lambda x: jnp.asarray(x[:, 0]), history(t, t + 1)))
                t += 1
            assert v.write(state, block=i % 2 == 1) == 3
        v.close()
        return t

    t, _ = both_paths(tmp_path, scenario)
    r = Vault.open(tmp_path / "device")
    assert r.seams == []
    assert_tree_equal(r.read_numpy(), history(0, t))


def test_dataset_shards_written_in_the_background_on_the_device_path(tmp_path: Path) -> None:
    """Two shards of a dataset, each a writer of its own with background writes queued; the
    dataset's reads and episode table see every timestep once."""
    with path_of(True) as device:
        runs = [Run(), Run(run=1)]
        ds = vault.Dataset.create(tmp_path / "d", runs[0].state, **EPISODES)
        shards = [ds.shard("a"), ds.shard("b")]
        for adds in (3, T, 2, 5):
            for run, v in zip(runs, shards, strict=True):
                run.add(adds)
                v.write(run.state, block=False)
        for v in shards:
            v.close()
        assert device.cuts
    got = vault.Dataset.open(tmp_path / "d")
    eps = set()
    for name, run in zip("ab", runs, strict=True):
        data = history(0, run.t, run=run.run)
        assert_tree_equal(got.read_numpy(name), data)
        eps |= {(name, *e) for e in model_episodes(data)}
        assert vault.verify(tmp_path / "d" / "shards" / name).ok
    table = got.episodes()
    assert len(table) == len(eps)


SCHEDULE_INTERRUPTED = ((2, False), (1, True), (3, False), (1, False), (2, True), (1, False))


@pytest.mark.parametrize("call", range(0, 40, 3))
def test_an_interrupt_at_any_host_copy_then_retrying_the_write_loses_and_repeats_nothing(
    tmp_path: Path, call: int
) -> None:
    """``to_host`` (every copy of a cut to the host: a write's pieces, in the caller or the
    background thread, and the timestep ``new_buffer=True`` compares) raises
    KeyboardInterrupt at its ``call``-th use; a training loop that catches it (or the
    VaultError that reports it from the background) and writes the same state again must
    end with every timestep stored once."""
    chunk = {"obs": [1, 3, 2], "act": [2, 5], "done": [1, 3]}
    with path_of(True) as device:
        run = Run()
        path = tmp_path / "v"
        v = Vault.create(path, run.state, chunk=chunk, **EPISODES)
        v.max_pending = 3
        real = _device.to_host
        calls = [0]

        def to_host(values: Any) -> Any:
            calls[0] += 1
            if calls[0] == call + 1:
                raise KeyboardInterrupt
            return real(values)

        with pytest.MonkeyPatch.context() as m:
            m.setattr(_device, "to_host", to_host)
            for adds, block in SCHEDULE_INTERRUPTED:
                run.add(adds)
                for _ in range(3):
                    try:
                        v.write(run.state, block=block, new_buffer=True)
                        break
                    except (KeyboardInterrupt, VaultError):
                        continue
        with contextlib.suppress(VaultError):
            v.flush()
        v.write(run.state)
        v.close()
        assert device.cuts
    r = Vault.open(path)
    assert r.seams == []
    data = history(0, run.t)
    assert_tree_equal(r.read_numpy(), data)
    assert episodes_of(r.episodes()) == model_episodes(data)
    assert vault.verify(path).ok


def test_background_writes_to_s3_with_a_failed_host_copy_then_recovery(s3_env: Any) -> None:
    """On S3 (no staging: the relay keeps the partly filled chunks) with odd chunks and
    episodes: the host copy of the second of several queued writes fails in the background;
    the loop that catches the error goes on, and every timestep is stored once."""
    url = f"s3://{s3_env.bucket}/device-{uuid.uuid4().hex[:10]}/v"
    chunk = {"obs": [1, 3, 2], "act": [2, 5], "done": [1, 3], "reward": [2, 7]}
    with path_of(True) as device:
        run = Run()
        v = Vault.create(url, run.state, chunk=chunk, **EPISODES)
        v.max_pending = 3
        real = _device.to_host
        calls = [0]

        def to_host(values: Any) -> Any:
            calls[0] += 1
            if calls[0] == 5 + 1:  # the first leaf of the second write
                raise OSError("the host copy failed")
            return real(values)

        with pytest.MonkeyPatch.context() as m:
            m.setattr(_device, "to_host", to_host)
            for adds in (3, 2, 1, 2):
                run.add(adds)
                with contextlib.suppress(VaultError):
                    v.write(run.state, block=False)
        with contextlib.suppress(VaultError):
            v.flush()
        # the failure raised by a later write, which (caught) left the tip at the last commit
        # for the next one: what is missing written, once
        assert v.write(run.state, block=False) == run.t - v.committed_length
        run.add(T)
        assert v.write(run.state, block=False) == T
        v.close()
        assert device.cuts
    r = Vault.open(url)
    assert r.seams == []
    data = history(0, run.t)
    assert_tree_equal(r.read_numpy(), data)
    assert episodes_of(r.episodes()) == model_episodes(data)
    assert vault.verify(url).ok


# ------------------------------------------------------------ 10. bugs found here, fixed
def _memory_kinds() -> list[str]:
    return [m.kind for m in jax.devices()[0].addressable_memories()]


@pytest.mark.skipif("pinned_host" not in _memory_kinds(), reason="no pinned host memory")
@pytest.mark.parametrize("block", [True, False], ids=["block", "background"])
def test_a_buffer_offloaded_to_pinned_host_memory_is_written(tmp_path: Path, block: bool) -> None:
    """A large ring kept in the accelerator's pinned host memory
    (``jax.device_put(x, SingleDeviceSharding(device, memory_kind="pinned_host"))``) is a
    single-device jax array: written as the host path writes it."""
    from jax.sharding import SingleDeviceSharding

    def scenario(path: Path, device: Device) -> int:
        run = Run()
        v = Vault.create(path, run.state, **EPISODES)
        host = SingleDeviceSharding(jax.devices()[0], memory_kind="pinned_host")
        for adds in (3, T, 2):
            run.add(adds)
            state = run.state.replace(experience=jax.device_put(run.state.experience, host))
            assert v.write(state, block=block) == adds
        v.close()
        return run.t

    t, _ = both_paths(tmp_path, scenario, cut=False)  # host memory: read as the host path
    assert_tree_equal(Vault.open(tmp_path / "device").read_numpy(), history(0, t))


@pytest.mark.parametrize("block", [True, False], ids=["block", "background"])
def test_a_write_under_a_host_to_device_transfer_guard(tmp_path: Path, block: bool) -> None:
    """A training loop that forbids implicit host-to-device transfers (to catch a stray
    numpy array fed to the step) writes its buffer there: nothing a write must do moves data
    to the device implicitly, as on the host path (which only reads the device)."""

    def scenario(path: Path, device: Device) -> int:
        run = Run()
        v = Vault.create(path, run.state, **EPISODES)
        for adds in (3, T, 2, 5):
            run.add(adds)
            jax.block_until_ready(run.state)
            with jax.transfer_guard_host_to_device("disallow"):
                assert v.write(run.state, block=block) == adds
        v.close()
        return run.t

    t, _ = both_paths(tmp_path, scenario)
    assert_tree_equal(Vault.open(tmp_path / "device").read_numpy(), history(0, t))
