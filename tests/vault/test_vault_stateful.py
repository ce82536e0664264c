"""One local vault driven by a Hypothesis state machine, compared after every step with a
trivially correct model (numpy arrays of every committed timestep, a list of seams, a list of
episodes and each row's open one).

Rules: adds to a trajectory buffer (one jitted add of one timestep, so one compile; the ring
wraps at 5), ``write`` of the buffer (blocking or not, either overrun policy, a new buffer
with ``new_buffer=True``, ``max_pending`` 1-3), ``append`` of 0..7 timesteps with
``continues`` true or false, close (arrays cut to the committed length, no held file left)
and reopen with ``mode="a"``, tags (also while background writes run) and reads at them by
tag, commit id and number with their fingerprint and ``verify(at=, fingerprint=)``, a tag
that would move refused, a reader that stays at its commit until ``refresh()``, and reads:
``read_numpy`` (row lists and slices, time ranges, ``last``, a subset of leaves), ``read`` as
a buffer state, ``verify``, ``leaf_stats``, ``iter_windows``, ``read_episode`` and
``iter_episodes``, streams (shuffled or not, ``episode_aware``, ``stride``) whose every
sequence is the model's and whose starts are exactly the model's valid ones, each once, and
whose checkpoint resumes with the very batches that followed after more appends.

After every step: the length, every leaf's data, the seams and the episode table (with the
open episodes) equal the model's, also through a new read-only ``Vault.open`` (same commit id
and fingerprint); while background writes are queued the committed length is one the model
went through. Which buffer a write is taken for follows the writer's documented rules
(``vault/write/_writer.py`` ``Writer._is_fresh``), mirrored in ``VaultMachine.write``.

Timesteps encode where they belong (``action = 1000 * row + n`` for the n-th timestep made),
so a timestep stored twice, lost or misplaced shows up. The machine runs without shrinking
(a failure prints the whole sequence; shrinking one took minutes): failures it found are
minimised by hand into plain regression tests at the end of the file, with a fixed session
that takes the paths few random examples reach.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, currently_in_test_context, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import buffers as fbx
import vault
from vault import (
    UnsavedDataLostError,
    Vault,
    VaultExistsError,
    VaultModeError,
    VaultReadError,
)

ROWS, T = 3, 5
LEAVES = ["action", "done", "info/0", "info/1", "obs", "reward"]
EXAMPLE = {
    "obs": np.zeros(2, np.float32),
    "action": np.int32(0),
    "reward": np.float32(0),
    "done": np.bool_(False),
    "info": (np.int32(0), np.bool_(False)),  # (code, truncated): a leaf inside a tuple
}
# chunks of a few timesteps (one of them also cutting the rows), so that appends start and end
# inside chunks and cross their boundaries
CHUNK: dict[str, Sequence[int]] = {"obs": [2, 3, 2], "action": [3, 2], "info/0": [1, 4]}

BUFFER = fbx.make_trajectory_buffer(
    add_batch_size=ROWS,
    sample_batch_size=1,
    sample_sequence_length=1,
    period=1,
    min_length_time_axis=1,
    max_length_time_axis=T,
)
ADD = jax.jit(BUFFER.add)  # always [ROWS, 1, ...]: one compile


def new_buffer() -> Any:
    return BUFFER.init(jax.tree.map(jnp.asarray, EXAMPLE))


def make_vault(path: str) -> Vault:
    return Vault.create(
        path, EXAMPLE, rows=ROWS, chunk=CHUNK,
        done_leaf="done", truncated_leaf="info/1", reward_leaf="reward",
    )  # fmt: skip


def timesteps(first: int, n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` timesteps of every row, flat by leaf path, numbered from ``first``: ``action`` and
    ``info/0`` are ``1000 * row + number``, ``obs`` that and a half more; done and truncated
    flags at random (from ``seed``); rewards of halves (sums exact)."""
    code = 1000 * np.arange(ROWS)[:, None] + np.arange(first, first + n)[None, :]
    rng = np.random.default_rng(seed)
    return {
        "action": code.astype(np.int32),
        "done": rng.random((ROWS, n)) < 0.3,
        "info/0": (-code).astype(np.int32),
        "info/1": rng.random((ROWS, n)) < 0.15,
        "obs": np.stack([code, code + 0.5], axis=-1).astype(np.float32),
        "reward": ((code % 4) * 0.5).astype(np.float32),
    }


def tree(flat: dict[str, Any]) -> dict[str, Any]:
    """The vault's structure of flat leaves."""
    out = {k: v for k, v in flat.items() if "/" not in k}
    out["info"] = (flat["info/0"], flat["info/1"])
    return out


def flat(data: Any) -> dict[str, np.ndarray]:
    """Flat leaves of the vault's structure (the tuple checked to stay a tuple)."""
    assert isinstance(data["info"], tuple), type(data["info"])
    out = {k: np.asarray(v) for k, v in data.items() if k != "info"}
    out["info/0"], out["info/1"] = (np.asarray(x) for x in data["info"])
    return out


def empty_data() -> dict[str, np.ndarray]:
    return {k: v[:, :0] for k, v in timesteps(0, 0, 0).items()}


@dataclasses.dataclass
class Model:
    """What the vault must hold: the committed data, seams, complete episodes (in the order
    they were committed: by append, then row, then time) and each row's open episode
    ``[start, return so far, start known]``."""

    data: dict[str, np.ndarray] = dataclasses.field(default_factory=empty_data)
    seams: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    episodes: list[tuple[int, int, int, float, bool, bool]] = dataclasses.field(
        default_factory=list
    )
    open: list[list[Any]] = dataclasses.field(
        default_factory=lambda: [[0, 0.0, True] for _ in range(ROWS)]
    )

    @property
    def length(self) -> int:
        return int(self.data["action"].shape[1])

    def seam(self, lost: int, known: bool) -> None:
        """A seam at the end (merged with one there), after which no open episode continues."""
        at = self.length
        if at > 0 or lost > 0:
            if self.seams and self.seams[-1][0] == at:
                self.seams[-1] = (at, self.seams[-1][1] + lost)
            else:
                self.seams.append((at, lost))
        self.open = [[at, 0.0, known] for _ in range(ROWS)]

    def extend(self, block: dict[str, np.ndarray]) -> None:
        begin, n = self.length, int(block["action"].shape[1])
        for r in range(ROWS):
            for t in range(n):
                o = self.open[r]
                o[1] += float(block["reward"][r, t])
                done, cut = bool(block["done"][r, t]), bool(block["info/1"][r, t])
                if done or cut:
                    start = o[0]
                    self.episodes.append(
                        (r, start, begin + t + 1 - start, o[1], cut and not done, o[2])
                    )
                    self.open[r] = [begin + t + 1, 0.0, True]
        self.data = {k: np.concatenate([self.data[k], block[k]], axis=1) for k in self.data}

    def table(self) -> dict[str, np.ndarray]:
        """The episode table with the open episodes (``episodes(include_open=True)``)."""
        rows = list(self.episodes)
        rows += [
            (r, o[0], self.length - o[0], o[1], False, o[2])
            for r, o in enumerate(self.open)
            if o[0] < self.length
        ]
        complete = [True] * len(self.episodes) + [False] * (len(rows) - len(self.episodes))
        cols = list(zip(*rows, strict=True)) if rows else [()] * 6
        return {
            "row": np.asarray(cols[0], np.int64),
            "start": np.asarray(cols[1], np.int64),
            "length": np.asarray(cols[2], np.int64),
            "returns": np.asarray(cols[3], np.float64),
            "truncated": np.asarray(cols[4], bool),
            "start_known": np.asarray(cols[5], bool),
            "complete": np.asarray(complete, bool),
        }

    def valid_starts(self, seq: int, episode_aware: bool) -> set[tuple[int, int]]:
        """(row, start) of every sequence a stream must yield once."""
        ended = self.data["done"] | self.data["info/1"]
        out = set()
        for r in range(ROWS):
            for t in range(self.length - seq + 1):
                if any(t < at <= t + seq - 1 for at, _ in self.seams):
                    continue
                if episode_aware and ended[r, t : t + seq - 1].any():
                    continue
                out.add((r, t))
        return out


def check(v: Vault, model: Model) -> None:
    """``v`` holds exactly the model: length, every leaf, seams, episodes with open ones."""
    assert v.committed_length == model.length
    got = flat(v.read_numpy())
    for leaf in LEAVES:
        assert got[leaf].dtype == model.data[leaf].dtype, leaf
        np.testing.assert_array_equal(got[leaf], model.data[leaf], err_msg=leaf)
    assert [(s.at, s.lost) for s in v.seams] == model.seams
    table = v.episodes(include_open=True)
    for name, want in model.table().items():
        np.testing.assert_array_equal(getattr(table, name), want, err_msg=f"episodes.{name}")


@dataclasses.dataclass
class Pin:
    model: Model
    commit: str
    fingerprint: str


class VaultMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="vault-stateful-")
        self.path = str(Path(self.tmp) / "v")
        self.vault = make_vault(self.path)
        self.model = Model()
        self.made = 0  # timesteps numbered so far (appended or added)
        self.buffer = new_buffer()
        self.buffer_steps: list[dict[str, np.ndarray]] = []  # every add to this buffer
        self.buffer_id = 0
        self.source: tuple[int, int] | None = None  # (buffer, its counter) of the last write
        self.known = False  # this Vault object wrote that buffer (not read from the record)
        self.queued: list[Model] | None = None  # commits the vault may show while writes run
        self.pins: dict[str, Pin] = {}
        self.reader: tuple[Vault, Model] | None = None  # a reader and the commit it opened at

    def teardown(self) -> None:
        try:
            self.vault.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def settle(self) -> None:
        self.vault.flush()
        self.queued = None

    # ----------------------------------------------------------------------------- rules
    @rule(n=st.integers(0, 7), seed=st.integers(0, 2**16))
    def add(self, n: int, seed: int) -> None:
        for i in range(n):
            step = timesteps(self.made, 1, seed + i)
            self.made += 1
            self.buffer = ADD(self.buffer, jax.tree.map(jnp.asarray, tree(step)))
            self.buffer_steps.append(step)

    @rule()
    def fresh_buffer(self) -> None:
        """A new buffer (a new run); its first write passes ``new_buffer=True``."""
        self.buffer = new_buffer()
        self.buffer_steps = []
        self.buffer_id += 1

    @rule(
        block=st.booleans(),
        on_overrun=st.sampled_from(["error", "save_surviving"]),
        say_new=st.booleans(),
    )
    def write(self, block: bool, on_overrun: str, say_new: bool) -> None:
        c = len(self.buffer_steps)
        stored = min(c, T)
        held = self.buffer_steps[c - stored :]
        before = copy.deepcopy(self.model)
        length = self.model.length
        src = self.source
        new_flag = src is not None and src[0] != self.buffer_id and src[1] > 0
        # which buffer the vault takes this one for (vault/write/_writer.py Writer._is_fresh)
        if src is None or (src[1] == 0 and length > 0):
            same = False  # no buffer written since the last append (or since creation)
        elif src[1] == 0 or src[0] == self.buffer_id:
            same = True
        elif c < src[1] or c - src[1] < stored:
            same = False  # it does not hold the vault's last timestep where its counter says
        else:
            # exactly a ring past the recorded counter: taken for that buffer, written on
            # time; more than a ring past it, by the writer that wrote it: that buffer overrun
            # (documented at plan_write's UnsavedDataLostError: "a new buffer this far on had
            # also overwritten timesteps before its first write")
            same = c - src[1] == stored or self.known
        expect_lost = None
        if same:
            unsaved = c - (src[1] if src is not None else 0)
            # new_buffer=True is safe on every write of the same buffer ("never a timestep
            # twice"); where it overran, a reopened writer cannot tell it from a new buffer
            new_flag = new_flag or (say_new and unsaved <= stored)
            if unsaved > stored:
                if on_overrun == "error":
                    expect_lost = unsaved - stored
                else:
                    self.model.seam(unsaved - stored, known=False)
                    self.model.extend(cat(held))
            elif unsaved:
                self.model.extend(cat(held[stored - unsaved :]))
            written = min(unsaved, stored)
        elif c == 0:
            written = 0  # an empty buffer: nothing to append, nothing changes
        else:
            if c > stored:  # what this buffer overwrote before its first write
                self.model.seam(c - stored, known=False)
            elif length:  # another run: its rows do not continue the vault's
                self.model.seam(0, known=False)
            self.model.extend(cat(held))
            written = stored
        args: dict[str, Any] = {"on_overrun": on_overrun, "new_buffer": new_flag, "block": block}
        if currently_in_test_context():  # --hypothesis-show-statistics tells what ran
            event("write", f"{'same' if same else 'fresh'}, wrapped={c > T}, lost={expect_lost}")
        if expect_lost is not None:
            with pytest.raises(UnsavedDataLostError) as info:
                self.vault.write(self.buffer, **args)
            assert info.value.lost == expect_lost
            return
        assert self.vault.write(self.buffer, **args) == written
        if c == 0:
            return  # nothing committed, nothing the writer knows changed
        self.known = True
        self.source = (self.buffer_id, c)
        if block:
            self.queued = None
        else:
            self.queued = (self.queued or [before]) + [copy.deepcopy(self.model)]

    @rule(
        n=st.integers(1, 7),
        seed=st.integers(0, 2**16),
        block=st.booleans(),
        on_overrun=st.sampled_from(["error", "save_surviving"]),
    )
    def add_and_write(self, n: int, seed: int, block: bool, on_overrun: str) -> None:
        """The recording loop: adds, then a write (more than the ring holds, sometimes)."""
        self.add(n, seed)
        self.write(block, on_overrun, say_new=False)

    @rule(n=st.integers(0, 7), continues=st.booleans(), seed=st.integers(0, 2**16))
    def append(self, n: int, continues: bool, seed: int) -> None:
        block = timesteps(self.made, n, seed)
        self.made += n
        if not continues:
            self.model.seam(0, known=True)
        self.model.extend(block)
        assert self.vault.append(tree(block), continues=continues) == n
        self.source = None  # append forgets the buffer's counter
        self.known = False
        self.queued = None

    @rule(pending=st.integers(1, 3))
    def flush(self, pending: int) -> None:
        self.settle()
        self.vault.max_pending = pending  # background writes queued before write() waits
        assert self.vault.max_pending == pending

    @rule()
    def reopen(self) -> None:
        self.vault.close()
        self.queued = None
        check(self.vault, self.model)  # a closed Vault still reads
        # at rest: every array cut back to the committed length, no replaced file left over
        root = Path(self.path)
        for leaf in LEAVES:
            meta = json.loads((root / "experience" / leaf / "zarr.json").read_text())
            assert meta["shape"][:2] == [ROWS, self.model.length], leaf
        trash = root / "trash"
        assert not trash.exists() or {p.name for p in trash.iterdir()} <= {"zarr.json"}
        self.vault = Vault.open(self.path, mode="a")
        self.known = False

    @rule()
    def tag(self) -> None:
        self.settle()
        name = f"t{len(self.pins)}"
        commit = self.vault.tag(name)
        assert commit == self.vault.commit_id
        self.pins[name] = Pin(copy.deepcopy(self.model), commit, self.vault.fingerprint())
        assert self.vault.tags() == {k: p.commit for k, p in self.pins.items()}

    @precondition(lambda self: self.pins)
    @rule(data=st.data(), by=st.sampled_from(["tag", "id", "number"]))
    def read_pin(self, data: st.DataObject, by: str) -> None:
        name = data.draw(st.sampled_from(sorted(self.pins)))
        pin = self.pins[name]
        at: str | int = {"tag": name, "id": pin.commit}.get(by) or int(pin.commit.split("-")[0])
        pinned = Vault.open(self.path, at=at)
        assert pinned.pinned
        assert pinned.commit_id == pin.commit
        check(pinned, pin.model)
        assert pinned.fingerprint() == pin.fingerprint
        assert pinned.refresh() == pin.model.length  # a pinned Vault stays at its commit
        report = vault.verify(self.path, at=at, fingerprint=pin.fingerprint)
        assert report.ok, report.problems
        assert report.committed_length == pin.model.length
        self.retag_moved(data)

    def retag_moved(self, data: st.DataObject) -> None:
        """A tag never moves: naming another commit with it is refused."""
        self.settle()
        # drawn from every tag (which commit a tag taken during background writes names
        # depends on timing; the draws must not)
        name = data.draw(st.sampled_from(sorted(self.pins)))
        if self.pins[name].model.length == self.model.length:
            return  # maybe the same commit: nothing to refuse
        with pytest.raises(VaultExistsError):
            self.vault.tag(name)
        assert self.vault.tags()[name] == self.pins[name].commit

    @rule(
        data=st.data(),
        kind=st.sampled_from(["part", "state", "verify", "stats", "windows", "episodes"]),
    )
    def read(self, data: st.DataObject, kind: str) -> None:
        """One of the ways to read the vault back, after a flush."""
        self.settle()
        getattr(self, f"read_{kind}")(data)

    def read_part(self, data: st.DataObject) -> None:
        """``read_numpy`` with rows (a list, maybe repeated or unsorted, or a slice) and a
        time range (``start``/``stop`` or ``last``), then a subset of the leaves."""
        length = self.model.length
        kind = data.draw(st.sampled_from(["list", "slice", "none"]))
        if kind == "list":
            rows: Any = data.draw(st.lists(st.integers(0, ROWS - 1), min_size=1, max_size=4))
        elif kind == "slice":
            a, b = sorted(data.draw(st.tuples(st.integers(0, ROWS), st.integers(0, ROWS))))
            rows = slice(a, b)
        else:
            rows = None
        picked = np.arange(ROWS)[rows] if rows is not None else np.arange(ROWS)
        if data.draw(st.booleans()):
            last = data.draw(st.integers(1, max(length, 1)))
            if last > length:
                with pytest.raises(VaultReadError):
                    self.vault.read_numpy(rows=rows, last=last)
                return
            got = flat(self.vault.read_numpy(rows=rows, last=last))
            lo, hi = length - last, length
        else:
            lo, hi = sorted(data.draw(st.tuples(st.integers(0, length), st.integers(0, length))))
            got = flat(self.vault.read_numpy(rows=rows, start=lo, stop=hi))
        for leaf in LEAVES:
            want = self.model.data[leaf][picked][:, lo:hi]
            np.testing.assert_array_equal(got[leaf], want, err_msg=leaf)
        some = data.draw(st.lists(st.sampled_from(LEAVES), min_size=1, max_size=3, unique=True))
        part = self.vault.read_numpy(rows=rows, start=lo, stop=hi, leaves=some)
        assert sorted(part) == sorted(some)
        for leaf in some:
            np.testing.assert_array_equal(part[leaf], self.model.data[leaf][picked][:, lo:hi])

    def read_state(self, data: st.DataObject) -> None:
        """``read(last=, capacity=T)``: a buffer state holding the most recent timesteps."""
        length = self.model.length
        if not length:
            return
        last = data.draw(st.integers(1, 2 * T))
        last = min(last, length)
        state = self.vault.read(last=last, capacity=T)
        kept = min(last, T)
        got = flat(jax.tree.map(np.asarray, state.experience))
        for leaf in LEAVES:
            np.testing.assert_array_equal(
                got[leaf][:, :kept], self.model.data[leaf][:, length - kept :], err_msg=leaf
            )
        assert int(state.current_index) == kept % T
        assert bool(state.is_full) == (kept == T)

    def read_verify(self, data: st.DataObject) -> None:
        report = vault.verify(self.path)
        assert report.ok, report.problems
        assert report.committed_length == self.model.length

    @rule(
        seq=st.integers(1, 3),
        episode_aware=st.booleans(),
        stride=st.integers(1, 2),
        shuffle=st.booleans(),
        cut=st.integers(0, 3),
    )
    def stream(self, seq: int, episode_aware: bool, stride: int, shuffle: bool, cut: int) -> None:
        """An epoch yields every valid start once, each sequence the model's; a checkpoint
        taken after ``cut`` batches resumes with the very batches that followed, also after
        later appends (it carries the pin)."""
        self.settle()
        want = {(r, t) for r, t in self.model.valid_starts(seq, episode_aware) if t % stride == 0}
        options = {
            "shuffle": shuffle, "seed": 3, "drop_remainder": False, "prefetch": 0,
            "device_put": False, "episode_aware": episode_aware, "stride": stride,
        }  # fmt: skip
        if not want:
            with pytest.raises(VaultReadError):
                self.vault.as_dataset(2, seq, **options)
            return
        seen: list[tuple[int, int]] = []
        checkpoint, after = None, []
        stream = self.vault.as_dataset(2, seq, **options)
        try:
            for k, batch in enumerate(stream):
                if k == cut:
                    checkpoint = stream.state()
                if k > cut:  # what follows the checkpoint
                    after.append(list(zip(batch.row.tolist(), batch.start.tolist(), strict=True)))
                got = flat(batch.experience)
                for i, (r, t) in enumerate(zip(batch.row, batch.start, strict=True)):
                    seen.append((int(r), int(t)))
                    for leaf in LEAVES:
                        np.testing.assert_array_equal(
                            got[leaf][i], self.model.data[leaf][r, t : t + seq], err_msg=leaf
                        )
        finally:
            stream.close()
        assert sorted(seen) == sorted(want)
        assert len(seen) == len(set(seen))
        if checkpoint is None:
            return
        self.append(2, True, cut)  # more data arrives before the resume
        rest = vault.resume_stream(checkpoint)
        try:
            again = [list(zip(b.row.tolist(), b.start.tolist(), strict=True)) for b in rest]
        finally:
            rest.close()
        assert again == after

    @precondition(lambda self: self.queued is not None)
    @rule()
    def tag_while_writing(self) -> None:
        """A tag taken while writes run names a commit the model went through."""
        name = f"t{len(self.pins)}"
        commit = self.vault.tag(name)
        pinned = Vault.open(self.path, at=name)
        assert pinned.commit_id == commit
        assert self.queued is not None
        models = [m for m in self.queued if m.length == pinned.committed_length]
        assert models, (pinned.committed_length, [m.length for m in self.queued])
        check(pinned, models[-1])
        self.pins[name] = Pin(copy.deepcopy(models[-1]), commit, pinned.fingerprint())

    @rule(refresh=st.booleans())
    def open_reader(self, refresh: bool) -> None:
        """A read-only Vault stays at the commit it opened at until ``refresh()``."""
        self.settle()
        if refresh and self.reader is not None:
            reader = self.reader[0]
            assert reader.refresh() == self.model.length
        else:
            reader = Vault.open(self.path)
        with pytest.raises(VaultModeError):  # read-only: no lock, no writes
            reader.append(tree(timesteps(0, 1, 0)))
        self.reader = (reader, copy.deepcopy(self.model))

    def read_stats(self, data: st.DataObject) -> None:
        """``leaf_stats`` (read in blocks of one time-chunk, a few, or all)."""
        block_bytes = data.draw(st.sampled_from([1, 40, 1 << 20]))
        got = {s.name: s for s in vault.leaf_stats(self.vault, block_bytes=block_bytes)}
        assert list(got) == LEAVES
        for leaf in LEAVES:
            values = self.model.data[leaf].reshape(-1)
            if values.dtype == np.bool_:
                values = values.astype(np.uint8)
            s = got[leaf]
            assert s.count == values.size, leaf
            if values.size == 0:
                assert (s.min, s.max, s.mean) == (None, None, None), leaf
                continue
            assert (s.min, s.max) == (values.min().item(), values.max().item()), leaf
            assert s.mean == pytest.approx(values.astype(np.float64).mean(), rel=1e-12), leaf
            assert s.std == pytest.approx(values.astype(np.float64).std(), rel=1e-9, abs=1e-9)

    def read_windows(self, data: st.DataObject) -> None:
        """``iter_windows``: windows [0, w), [w, 2w), ... in order, each a state."""
        window, extra = data.draw(st.integers(1, 4)), data.draw(st.integers(0, 2))
        drop = data.draw(st.booleans())
        length, cap = self.model.length, window + extra
        want = [(t, min(t + window, length)) for t in range(0, length, window)]
        if drop and want and want[-1][1] - want[-1][0] < window:
            want.pop()
        options = {"capacity": cap, "prefetch": 0, "drop_remainder": drop}
        if not want:
            with pytest.raises(VaultReadError):
                self.vault.iter_windows(window, **options)
            return
        got = list(self.vault.iter_windows(window, **options))
        assert len(got) == len(want)
        for state, (lo, hi) in zip(got, want, strict=True):
            n = hi - lo
            assert int(state.current_index) == n % cap
            assert bool(state.is_full) == (n == cap)
            held = flat(jax.tree.map(np.asarray, state.experience))
            for leaf in LEAVES:
                assert held[leaf].shape[1] == cap
                np.testing.assert_array_equal(
                    held[leaf][:, :n], self.model.data[leaf][:, lo:hi], err_msg=leaf
                )

    def read_episodes(self, data: st.DataObject) -> None:
        """``read_episode`` (by position and by table) and ``iter_episodes`` read each
        episode's timesteps."""
        want = self.model.table()
        table = self.vault.episodes(include_open=True)
        if len(table) == 0:
            return
        i = data.draw(st.integers(0, len(table) - 1))
        r, start, n = (int(want[k][i]) for k in ("row", "start", "length"))
        one = flat(self.vault.read_episode(table[i : i + 1]))
        for leaf in LEAVES:
            np.testing.assert_array_equal(one[leaf], self.model.data[leaf][r, start : start + n])
        if want["complete"][i]:
            again = flat(self.vault.read_episode(i))
            for leaf in LEAVES:
                np.testing.assert_array_equal(again[leaf], one[leaf])
        every = list(self.vault.iter_episodes(table, leaves=["action"]))
        assert len(every) == len(table)
        for k, ep in enumerate(every):
            r, start, n = (int(want[c][k]) for c in ("row", "start", "length"))
            np.testing.assert_array_equal(
                ep["action"], self.model.data["action"][r, start : start + n]
            )

    # ----------------------------------------------------------------------------- invariants
    @invariant()
    def matches_model(self) -> None:
        if self.reader is not None:  # a reader stays at the commit it opened at
            check(self.reader[0], self.reader[1])
        if self.queued is not None:  # background writes: some commit the model went through
            assert self.vault.committed_length in [m.length for m in self.queued]
            return
        check(self.vault, self.model)
        reader = Vault.open(self.path)  # a new reader sees the same latest commit
        assert reader.commit_id == self.vault.commit_id
        check(reader, self.model)
        assert reader.fingerprint() == self.vault.fingerprint()


def cat(steps: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Timesteps of several adds, in order, as one block."""
    return {k: np.concatenate([s[k] for s in steps], axis=1) for k in LEAVES}


VaultMachine.TestCase.settings = settings(
    max_examples=15,
    stateful_step_count=15,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_vault_state_machine = VaultMachine.TestCase


class _Fixed:
    """Draws for the fixed scenario: each ``draw`` takes the next value given."""

    def __init__(self, *values: Any) -> None:
        self.values = list(values)

    def draw(self, strategy: Any) -> Any:
        return self.values.pop(0)


def test_a_fixed_recording_session_matches_the_model() -> None:
    """The paths the machine's few examples may miss, in one session: overruns refused and
    saved, writes in the background across ring wraps, a reopened writer continuing its
    buffer, a new buffer, restarts, tags read back after more appends, streams resumed."""
    m = VaultMachine()
    steps: list[tuple[str, tuple[Any, ...]]] = [
        ("add_and_write", (3, 1, True, "error")),
        ("add_and_write", (6, 2, False, "error")),  # 6 > 5: refused, nothing written
        ("add_and_write", (1, 3, False, "save_surviving")),  # 7 > 5: saved, 2 lost (a seam)
        ("add_and_write", (4, 4, False, "error")),  # queued behind it
        ("tag_while_writing", ()),
        ("add_and_write", (5, 5, True, "error")),  # exactly a ring's worth
        ("reopen", ()),
        ("add_and_write", (2, 6, True, "error")),  # the reopened writer continues the buffer
        ("append", (3, False, 7)),
        ("add_and_write", (2, 8, True, "error")),  # after arrays: all the buffer holds
        ("tag", ()),
        ("fresh_buffer", ()),
        ("add", (7, 9)),
        ("write", (False, "save_surviving", False)),  # a new buffer that wrapped
        ("flush", (1,)),
        ("read_pin", (_Fixed("t0", "t0"), "number")),
        ("read_pin", (_Fixed("t1", "t1"), "id")),
        ("stream", (2, True, 1, True, 1)),
        ("read", (_Fixed(3, 1, False), "windows")),
        ("read", (_Fixed("list", [2, 0, 2], False, (1, 6), ["obs", "info/1"]), "part")),
    ]
    try:
        for name, args in steps:
            getattr(m, name)(*args)
            m.matches_model()
        # the overrun (2 lost), the restart, the buffer after arrays (counted from its first
        # add: 18 before the 5 it holds), the new buffer that wrapped (2 before its 5)
        assert [lost for _, lost in m.model.seams] == [2, 0, 18, 2]
    finally:
        m.teardown()


# ------------------------------------------------------------------------------ regressions
# Failures the machine found, minimised. The machine skips these paths (see ``write``), so that
# it keeps checking the rest.


def quiet(first: int, n: int, end: bool = False) -> dict[str, Any]:
    """``n`` timesteps without episode ends (``end``: every row's last one ends one)."""
    block = timesteps(first, n, 0)
    block["done"] = np.zeros((ROWS, n), bool)
    block["info/1"] = np.zeros((ROWS, n), bool)
    if end:
        block["done"][:, -1] = True
    return tree(block)


def filled(n: int) -> Any:
    """A buffer with ``n`` adds (timesteps numbered 100, 101, ...)."""
    state = new_buffer()
    for i in range(n):
        state = ADD(state, jax.tree.map(jnp.asarray, quiet(100 + i, 1)))
    return state


def test_writing_an_empty_buffer_changes_nothing(tmp_path: Path) -> None:
    v = make_vault(str(tmp_path / "v"))
    v.append(quiet(0, 3))
    assert v.write(new_buffer()) == 0  # a buffer nothing was added to yet: nothing to save
    v.append(quiet(3, 2, end=True), continues=True)
    table = v.episodes()
    assert v.seams == []
    assert table.start.tolist() == [0] * ROWS
    assert table.length.tolist() == [5] * ROWS
    assert table.start_known.all()


def test_an_empty_new_buffer_does_not_make_the_vault_forget_its_buffer(tmp_path: Path) -> None:
    v = make_vault(str(tmp_path / "v"))
    state = filled(3)
    assert v.write(state) == 3
    assert v.write(new_buffer(), new_buffer=True) == 0  # nothing to save
    state = ADD(state, jax.tree.map(jnp.asarray, quiet(103, 1)))
    assert v.write(state) == 1  # only the timestep added since
    assert v.read_numpy()["action"][0].tolist() == [100, 101, 102, 103]
    assert v.seams == []
