"""Stateful runs (``hypothesis.stateful``) of the buffers side by side with Flashbax 0.1.3.

Each machine drives this package's buffers and the reference's (in the ``dev`` extra) through
the same random interleaving of ``add`` (the fixed add batch, several time-axis lengths),
``sample`` with explicit PRNG keys, ``can_sample`` and ``set_priorities``, and checks after
every step what is promised equal and, where the packages differ on purpose, a trivially
correct model (every timestep carries ``code = offset + 1000 * row + t``, ``t`` its index in its
row over everything ever added, so a sampled value names where it came from):

* uniform buffers (two trajectory buffers drawn through a mixer, and an item buffer): the
  states' common fields and every sample are the reference's, bit for bit, and every window
  is one of the reference's candidate windows; a state that cannot be sampled raises
  ``NotReadyError`` eagerly and gives ``valid`` false under ``jit`` (the reference returns a
  sample), per buffer in a mixed batch;
* prioritised buffers: in the reference-exact mode (a trajectory buffer, adds of several
  lengths) the sum tree, the running index and every draw are the reference's, bit for bit,
  with ``set_priorities`` on the drawn, possibly stale, indices; in the default mode with
  ``priority_exponent=0`` (a flat buffer) the trees and draws are too (migrate-flashbax.md),
  the sums are exact and only whole windows have a positive priority;
* the trajectory queue: a FIFO per row; ``can_add`` / ``can_sample`` agree with the model and
  the reference; a refused add or read raises eagerly and changes nothing under ``jit``;
* the episode buffer (beyond the reference): its sum tree marks exactly the windows of a
  brute-force model (never across an episode end or a restart, padded whole short episodes),
  also after ``from_state`` (with restarts) in the middle of a run and the adds that follow.
  ``from_state(gaps=...)`` is left out of the machine: its bug is pinned below.

Every jitted function is built once at import and called with fixed shapes (compilation, not
the examples, dominates the run time). Bugs found are pinned by plain regression tests at the
end (strict ``xfail``).
"""

from __future__ import annotations

import importlib.metadata
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import buffers

flashbax = pytest.importorskip("flashbax")
if importlib.metadata.version("flashbax") != "0.1.3":
    pytest.skip("the draws are matched to Flashbax 0.1.3", allow_module_level=True)

MACHINE_SETTINGS = settings(
    max_examples=10,
    stateful_step_count=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
SEEDS = st.integers(0, 2**16)
ROW = 1000  # code = offset + ROW * row + t
OTHER = 100_000  # offset of the codes of a second buffer


def key_of(seed: int, stream: int = 0) -> jax.Array:
    """A PRNG key (``uint32[2]``, as ``jax.random.PRNGKey`` makes them), made without a
    compiled call."""
    return jnp.asarray(np.array([stream, seed], np.uint32))


def quiet(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call the reference without its advice warnings (period, min length)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


TIMESTEP = {"code": jnp.int32(0), "obs": jnp.zeros((2,), jnp.float32)}


def experience_of(codes: Any) -> dict[str, jax.Array]:
    """The experience for ``codes`` (any shape): every leaf an exact function of them."""
    codes = np.asarray(codes, np.int64)
    obs = np.stack([codes * 0.5, -codes.astype(np.float64)], axis=-1)
    return {"code": jnp.asarray(codes, jnp.int32), "obs": jnp.asarray(obs, jnp.float32)}


def decode(tree: Any) -> np.ndarray:
    """The codes of sampled experience, after checking every leaf against them."""
    codes = np.asarray(tree["code"]).astype(np.int64)
    want = experience_of(codes)
    np.testing.assert_array_equal(np.asarray(tree["obs"]), np.asarray(want["obs"]))
    return codes


def row_codes(offset: int, rows: int, start: int, length: int) -> np.ndarray:
    """Codes ``[rows, length]`` of timesteps ``start .. start + length - 1`` of every row."""
    return offset + np.arange(rows)[:, None] * ROW + np.arange(start, start + length)[None, :]


def strong(state: Any) -> Any:
    """A reference state with strongly typed positions: its ``init`` leaves them weakly typed
    and its jitted ``add`` returns them strong, which would trace every function twice."""
    fields = ("current_index", "running_index", "write_index", "read_index")
    out = {f: jnp.asarray(getattr(state, f), jnp.int32) for f in fields if hasattr(state, f)}
    tree = getattr(state, "sum_tree_state", None)
    if tree is not None:
        best = jnp.asarray(tree.max_recorded_priority, jnp.float32)
        out["sum_tree_state"] = tree.replace(max_recorded_priority=best)
    return state.replace(**out)


def assert_same_leaves(got: Any, want: Any, what: str) -> None:
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got_leaves) == len(want_leaves), what
    for g, w in zip(got_leaves, want_leaves, strict=True):
        assert np.asarray(g).dtype == np.asarray(w).dtype, what
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=what)


def assert_same_ring(ours: Any, theirs: Any, what: str) -> None:
    """The fields both states have: experience, position and fullness."""
    assert_same_leaves(ours.experience, theirs.experience, f"{what}: experience")
    assert int(ours.current_index) == int(theirs.current_index), f"{what}: current_index"
    assert bool(ours.is_full) == bool(theirs.is_full), f"{what}: is_full"


# --------------------------------------------------------------------------------------------
# Uniform buffers: trajectory, item, mixer
# --------------------------------------------------------------------------------------------

B, T, L, PERIOD = 2, 8, 3, 2
TRAJ_ARGS: dict[str, Any] = {
    "add_batch_size": B,
    "sample_batch_size": 4,
    "sample_sequence_length": L,
    "period": PERIOD,
    "min_length_time_axis": L,
    "max_length_time_axis": T,
}
ITEM_ARGS: dict[str, Any] = {
    "max_length": T,
    "min_length": 2,
    "sample_batch_size": 4,
    "add_batches": True,
}

OURS_TRAJ = buffers.make_trajectory_buffer(**TRAJ_ARGS)
THEIRS_TRAJ = quiet(flashbax.make_trajectory_buffer, **TRAJ_ARGS)
OURS_ITEM = buffers.make_item_buffer(**ITEM_ARGS)
THEIRS_ITEM = quiet(flashbax.make_item_buffer, **ITEM_ARGS)
# two trajectory buffers of the same settings, mixed half and half (shares 2 and 2 in both)
OURS_MIXER = buffers.make_mixer([OURS_TRAJ, buffers.make_trajectory_buffer(**TRAJ_ARGS)], 4, [1, 1])
THEIRS_MIXER = quiet(
    flashbax.make_mixer,
    [THEIRS_TRAJ, quiet(flashbax.make_trajectory_buffer, **TRAJ_ARGS)],
    4,
    [1, 1],
)

U_JIT = {
    "ours_traj_add": jax.jit(OURS_TRAJ.add),
    "theirs_traj_add": jax.jit(THEIRS_TRAJ.add),
    "ours_item_add": jax.jit(OURS_ITEM.add),
    "theirs_item_add": jax.jit(THEIRS_ITEM.add),
    "ours_item_sample": jax.jit(OURS_ITEM.sample),
    "theirs_item_sample": jax.jit(THEIRS_ITEM.sample),
    "ours_mix": jax.jit(OURS_MIXER.sample),
    "theirs_mix": jax.jit(THEIRS_MIXER.sample),
}


def check_windows(codes: np.ndarray, offset: int, added: int, length: int, period: int) -> None:
    """Every sampled window is ``length`` consecutive stored timesteps of one row, starting a
    multiple of ``period`` after the oldest stored one (the reference's candidate windows)."""
    oldest = max(0, added - T)
    local = codes - offset
    rows, t = local // ROW, local % ROW
    assert (rows == rows[:, :1]).all(), codes
    assert ((rows >= 0) & (rows < B)).all(), codes
    np.testing.assert_array_equal(t, t[:, :1] + np.arange(length)[None, :])
    assert (t[:, 0] >= oldest).all(), (codes, added)
    assert (t[:, -1] < added).all(), (codes, added)
    assert ((t[:, 0] - oldest) % period == 0).all(), (codes, added)


@jax.jit
def uniform_probe(ours: Any, theirs: Any, ours_items: Any, theirs_items: Any) -> Any:
    """Every ``can_sample`` of the uniform machine, in one compiled call."""
    return (
        jnp.stack([OURS_TRAJ.can_sample(s) for s in ours]),
        jnp.stack([THEIRS_TRAJ.can_sample(s) for s in theirs]),
        OURS_MIXER.can_sample(ours),
        OURS_ITEM.can_sample(ours_items),
        THEIRS_ITEM.can_sample(theirs_items),
    )


class UniformAgainstFlashbax(RuleBasedStateMachine):
    """Two trajectory buffers (mixed by a mixer) and an item buffer, with their twins."""

    def __init__(self) -> None:
        super().__init__()
        self.ours = [OURS_TRAJ.init(TIMESTEP), OURS_TRAJ.init(TIMESTEP)]
        self.theirs = [strong(THEIRS_TRAJ.init(TIMESTEP)), strong(THEIRS_TRAJ.init(TIMESTEP))]
        self.added = [0, 0]
        self.ours_items = OURS_ITEM.init(TIMESTEP)
        self.theirs_items = strong(THEIRS_ITEM.init(TIMESTEP))
        self.items = 0

    @initialize(adds=st.lists(st.tuples(st.integers(0, 1), st.sampled_from([1, L])), max_size=10))
    def fill(self, adds: list[tuple[int, int]]) -> None:
        """Start from a random run of adds (so that the draws start deep in the run)."""
        for which, length in adds:
            self.add(which, length)

    @rule(which=st.integers(0, 1), length=st.sampled_from([1, L]))
    def add(self, which: int, length: int) -> None:
        """``length`` timesteps to trajectory buffer ``which``, two items to the item buffer."""
        batch = experience_of(row_codes(which * OTHER, B, self.added[which], length))
        self.ours[which] = U_JIT["ours_traj_add"](self.ours[which], batch)
        self.theirs[which] = U_JIT["theirs_traj_add"](self.theirs[which], batch)
        self.added[which] += length
        items = experience_of(np.arange(self.items, self.items + 2))
        self.ours_items = U_JIT["ours_item_add"](self.ours_items, items)
        self.theirs_items = U_JIT["theirs_item_add"](self.theirs_items, items)
        self.items += 2

    @rule(seed=SEEDS)
    def sample(self, seed: int) -> None:
        self._sample_items(key_of(seed, 0))
        self._sample_mixer(key_of(seed, 1))

    def _sample_items(self, key: jax.Array) -> None:
        got = U_JIT["ours_item_sample"](self.ours_items, key)
        if self.items < 2:
            assert not np.asarray(got.valid).any()
            return
        want = U_JIT["theirs_item_sample"](self.theirs_items, key)
        assert np.asarray(got.valid).all()
        assert_same_leaves(got.experience, want.experience, "item sample")
        codes = decode(got.experience)
        assert ((codes >= max(0, self.items - T)) & (codes < self.items)).all(), codes

    def _sample_mixer(self, key: jax.Array) -> None:
        """Half the batch from each trajectory buffer: the start of its own draw with its part
        of the key (as the reference's mixer), so this checks both buffers' draws too."""
        got = U_JIT["ours_mix"](self.ours, key)
        ready = [n >= L for n in self.added]
        np.testing.assert_array_equal(np.asarray(got.valid), np.repeat(ready, 2))
        if not all(ready):
            return
        want = U_JIT["theirs_mix"](self.theirs, key)
        assert_same_leaves(got.experience, want.experience, "mixer sample")
        codes = decode(got.experience)
        for which in range(2):
            part = codes[2 * which : 2 * which + 2]
            check_windows(part, which * OTHER, self.added[which], L, PERIOD)

    @precondition(lambda self: min(self.added) < L)
    @rule(seed=SEEDS)
    def sample_eagerly_before_ready(self, seed: int) -> None:
        which = int(np.argmin(self.added))
        with pytest.raises(buffers.NotReadyError):
            OURS_TRAJ.sample(self.ours[which], key_of(seed))

    @invariant()
    def states_are_the_references(self) -> None:
        ours, theirs, mixed, items, their_items = uniform_probe(
            self.ours, self.theirs, self.ours_items, self.theirs_items
        )
        ready = np.array([n >= L for n in self.added])
        np.testing.assert_array_equal(np.asarray(ours), ready)
        np.testing.assert_array_equal(np.asarray(theirs), ready)
        assert bool(mixed) == ready.all()
        assert bool(items) == bool(their_items) == (self.items >= 2)
        for which in range(2):
            assert_same_ring(self.ours[which], self.theirs[which], f"trajectory {which}")
            assert buffers.timesteps_added(self.ours[which]) == self.added[which]
        assert_same_ring(self.ours_items, self.theirs_items, "items")
        assert buffers.timesteps_added(self.ours_items) == self.items


TestUniformAgainstFlashbax = UniformAgainstFlashbax.TestCase
TestUniformAgainstFlashbax.settings = MACHINE_SETTINGS


# --------------------------------------------------------------------------------------------
# Prioritised buffers: reference-exact mode, and the default mode with priority_exponent=0
# --------------------------------------------------------------------------------------------

ALPHA = 0.7
ITEMS_PER_ROW = T // PERIOD
FLAT_ARGS: dict[str, Any] = {
    "max_length": B * T,
    "min_length": 4,
    "sample_batch_size": 4,
    "add_batch_size": B,
}
FLAT_READY = FLAT_ARGS["min_length"] // B + 1  # timesteps per row before can_sample

P_EXACT = buffers.make_prioritised_trajectory_buffer(
    **TRAJ_ARGS, priority_exponent=ALPHA, reference_exact=True
)
P_THEIRS = quiet(flashbax.make_prioritised_trajectory_buffer, **TRAJ_ARGS, priority_exponent=ALPHA)
F_ZERO = buffers.make_prioritised_flat_buffer(**FLAT_ARGS, priority_exponent=0.0)
F_THEIRS_ZERO = quiet(flashbax.make_prioritised_flat_buffer, **FLAT_ARGS, priority_exponent=0.0)

P_JIT = {
    "exact_add": jax.jit(P_EXACT.add),
    "exact_sample": jax.jit(P_EXACT.sample),
    "exact_set": jax.jit(P_EXACT.set_priorities),
    "theirs_add": jax.jit(P_THEIRS.add),
    "theirs_sample": jax.jit(P_THEIRS.sample),
    "theirs_set": jax.jit(P_THEIRS.set_priorities),
    "zero_add": jax.jit(F_ZERO.add),
    "zero_sample": jax.jit(F_ZERO.sample),
    "zero_set": jax.jit(F_ZERO.set_priorities),
    "theirs_zero_add": jax.jit(F_THEIRS_ZERO.add),
    "theirs_zero_sample": jax.jit(F_THEIRS_ZERO.sample),
    "theirs_zero_set": jax.jit(F_THEIRS_ZERO.set_priorities),
}

PRIORITIES = st.lists(
    st.one_of(
        st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 2.7, 3.3]),
        st.floats(0.0, 8.0, width=32, allow_subnormal=False),
    ),
    min_size=4,
    max_size=4,
)


def valid_items(added: int, t_len: int, length: int, period: int, rows: int) -> np.ndarray:
    """Which items (``row * (t_len // period) + slot // period``) hold a whole window now:
    the window of ``length`` starting at the timestep the slot holds lies in the last ``t_len``
    timesteps added (bool ``[rows * t_len // period]``)."""
    per_row = np.zeros(t_len // period, bool)
    for k in range(t_len // period):
        slot = k * period
        if added <= slot:
            continue
        t = added - 1 - ((added - 1 - slot) % t_len)  # the newest timestep at that slot
        per_row[k] = t >= max(0, added - t_len) and t + length <= added
    return np.tile(per_row, rows)


def assert_exact_sums(nodes: np.ndarray) -> None:
    """Every parent the float32 sum of its two children (our layout, root at 1)."""
    parents = np.arange(1, nodes.size // 2)
    np.testing.assert_array_equal(
        nodes[parents], (nodes[2 * parents] + nodes[2 * parents + 1]).astype(np.float32)
    )


def assert_same_tree(ours: Any, theirs: Any, what: str) -> None:
    """Bit for bit: ours is the reference's array shifted by one place (root at 1)."""
    mine, ref = ours.sum_tree_state, theirs.sum_tree_state
    np.testing.assert_array_equal(
        np.asarray(mine.nodes)[1:], np.asarray(ref.nodes), err_msg=f"{what}: sum tree"
    )
    assert float(mine.max_recorded_priority) == float(ref.max_recorded_priority), what
    running = buffers.to_flashbax_state(ours)["running_index"]
    assert int(running) == int(theirs.running_index), f"{what}: running_index"


def assert_same_draw(got: Any, want: Any, what: str) -> None:
    np.testing.assert_array_equal(np.asarray(got.indices), np.asarray(want.indices), what)
    np.testing.assert_array_equal(
        np.asarray(got.probabilities), np.asarray(want.probabilities), what
    )
    assert_same_leaves(got.experience, want.experience, f"{what}: experience")


@jax.jit
def prioritised_probe(exact: Any, theirs: Any, zero: Any) -> Any:
    """The machine's ``can_sample`` calls, in one compiled call."""
    return P_EXACT.can_sample(exact), P_THEIRS.can_sample(theirs), F_ZERO.can_sample(zero)


class PrioritisedAgainstFlashbax(RuleBasedStateMachine):
    """An exact-mode trajectory buffer and a default-mode flat buffer with exponent 0, each
    with its reference twin, re-prioritised from what they draw."""

    def __init__(self) -> None:
        super().__init__()
        self.exact, self.theirs = P_EXACT.init(TIMESTEP), strong(P_THEIRS.init(TIMESTEP))
        self.added = 0
        self.drawn: jax.Array | None = None  # the exact pair's last draw (maybe stale by now)
        self.zero = F_ZERO.init(TIMESTEP)
        self.theirs_zero = strong(F_THEIRS_ZERO.init(TIMESTEP))
        self.zero_added = 0
        self.drawn_zero: jax.Array | None = None  # the flat pair's draw of this step

    @initialize(lengths=st.lists(st.sampled_from([1, 5]), max_size=6))
    def fill(self, lengths: list[int]) -> None:
        """Start from a random run of adds (so that the draws start deep in the run)."""
        for length in lengths:
            self.add(length)

    @rule(length=st.sampled_from([1, 5]))
    def add(self, length: int) -> None:
        """``length`` timesteps to the trajectory buffers, one to the flat buffers."""
        batch = experience_of(row_codes(0, B, self.added, length))
        self.exact = P_JIT["exact_add"](self.exact, batch)
        self.theirs = P_JIT["theirs_add"](self.theirs, batch)
        self.added += length
        flat = experience_of(row_codes(0, B, self.zero_added, 1)[:, 0])
        self.zero = P_JIT["zero_add"](self.zero, flat)
        self.theirs_zero = P_JIT["theirs_zero_add"](self.theirs_zero, flat)
        self.zero_added += 1

    @rule(seed=SEEDS, priorities=PRIORITIES)
    def learn(self, seed: int, priorities: list[float]) -> None:
        """A learner's step in every pair: draw, then give the drawn items new priorities."""
        exact_ready, theirs_ready, zero_ready = map(
            bool, prioritised_probe(self.exact, self.theirs, self.zero)
        )
        # exact pair: ready as the reference, unless every priority was set to 0
        total = float(np.asarray(self.exact.sum_tree_state.nodes)[1])
        assert exact_ready == (theirs_ready and total > 0)
        got = P_JIT["exact_sample"](self.exact, key_of(seed, 0))
        if exact_ready:
            want = P_JIT["theirs_sample"](self.theirs, key_of(seed, 0))
            assert_same_draw(got, want, "exact trajectory draw")
            # valid exactly where the drawn item has a positive priority (the reference's
            # unguarded descent may reach a zero-priority item; ours marks it invalid)
            np.testing.assert_array_equal(np.asarray(got.valid), np.asarray(got.probabilities) > 0)
            codes = decode(got.experience)
            starts = (np.asarray(got.indices) % ITEMS_PER_ROW) * PERIOD
            np.testing.assert_array_equal(codes[:, 0] % ROW % T, starts)  # the drawn item's window
            self.drawn = got.indices
        else:
            assert not np.asarray(got.valid).any()
        self._sample_zero(key_of(seed, 1), zero_ready)
        p = jnp.asarray(priorities, jnp.float32)
        if exact_ready:
            self.exact = P_JIT["exact_set"](self.exact, got.indices, p)
            self.theirs = P_JIT["theirs_set"](self.theirs, got.indices, p)
        if self.drawn_zero is not None:
            self.zero = P_JIT["zero_set"](self.zero, self.drawn_zero, p)
            self.theirs_zero = P_JIT["theirs_zero_set"](self.theirs_zero, self.drawn_zero, p)
            self.drawn_zero = None

    def _sample_zero(self, key: jax.Array, ready: bool) -> None:
        valid = valid_items(self.zero_added, T, 2, 1, B)
        nodes = np.asarray(self.zero.sum_tree_state.nodes)
        leaves = nodes[nodes.size // 2 :]
        assert ready == (self.zero_added >= FLAT_READY and bool((leaves > 0).any()))
        got = P_JIT["zero_sample"](self.zero, key)
        if not ready:
            assert not np.asarray(got.valid).any()
            return
        want = P_JIT["theirs_zero_sample"](self.theirs_zero, key)
        assert_same_draw(got, want, "default-mode flat draw, exponent 0")
        indices = np.asarray(got.indices)
        assert np.asarray(got.valid).all()
        assert valid[indices].all(), indices
        assert (leaves[indices] > 0).all(), indices
        first, second = decode(got.experience.first), decode(got.experience.second)
        np.testing.assert_array_equal(second, first + 1)  # (s_t, s_t+1) of one row
        np.testing.assert_array_equal(first // ROW, indices // T)
        np.testing.assert_array_equal(first % ROW % T, indices % T)
        self.drawn_zero = got.indices

    @precondition(lambda self: self.drawn is not None)
    @rule(length=st.sampled_from([1, 5]), priorities=PRIORITIES)
    def reprioritise_late(self, length: int, priorities: list[float]) -> None:
        """An add, then the exact pair's last drawn items get their priorities (a learner
        behind its actors): an index whose window was overwritten meanwhile is set as the
        reference sets it (any leaf)."""
        self.add(length)
        p = jnp.asarray(priorities, jnp.float32)
        self.exact = P_JIT["exact_set"](self.exact, self.drawn, p)
        self.theirs = P_JIT["theirs_set"](self.theirs, self.drawn, p)

    @invariant()
    def exact_state_is_the_reference_s(self) -> None:
        assert_same_ring(self.exact, self.theirs, "exact trajectory")
        assert_same_tree(self.exact, self.theirs, "exact trajectory")
        assert buffers.timesteps_added(self.exact) == self.added

    @invariant()
    def default_tree_is_exact_and_holds_only_whole_windows(self) -> None:
        assert_same_ring(self.zero, self.theirs_zero, "default flat")
        assert_same_tree(self.zero, self.theirs_zero, "default flat, exponent 0")
        nodes = np.asarray(self.zero.sum_tree_state.nodes)
        assert_exact_sums(nodes)
        leaves = nodes[nodes.size // 2 :]
        assert np.isin(leaves, [0.0, 1.0]).all(), leaves
        valid = valid_items(self.zero_added, T, 2, 1, B)
        assert not (leaves[: valid.size] > 0)[~valid].any(), (leaves, valid)
        assert not leaves[valid.size :].any(), "a padding leaf beyond the items"
        assert buffers.timesteps_added(self.zero) == self.zero_added


TestPrioritisedAgainstFlashbax = PrioritisedAgainstFlashbax.TestCase
TestPrioritisedAgainstFlashbax.settings = MACHINE_SETTINGS


# --------------------------------------------------------------------------------------------
# Trajectory queue: FIFO against a model and the reference
# --------------------------------------------------------------------------------------------

Q_T, Q_ADD, Q_READ = 6, 2, 3
Q_ARGS = {
    "max_length_time_axis": Q_T,
    "add_batch_size": B,
    "add_sequence_length": Q_ADD,
    "sample_sequence_length": Q_READ,
}
OURS_QUEUE = buffers.make_trajectory_queue(**Q_ARGS)
THEIRS_QUEUE = quiet(flashbax.make_trajectory_queue, **Q_ARGS)
Q_JIT = {
    "ours_add": jax.jit(OURS_QUEUE.add),
    "ours_sample": jax.jit(OURS_QUEUE.sample),
    "theirs_add": jax.jit(THEIRS_QUEUE.add),
    "theirs_sample": jax.jit(THEIRS_QUEUE.sample),
}


@jax.jit
def queue_probe(ours: Any, theirs: Any) -> Any:
    """``can_add`` and ``can_sample`` of both queues, in one compiled call."""
    return jnp.stack(
        [
            OURS_QUEUE.can_add(ours),
            THEIRS_QUEUE.can_add(theirs),
            OURS_QUEUE.can_sample(ours),
            THEIRS_QUEUE.can_sample(theirs),
        ]
    )


class QueueAgainstFlashbax(RuleBasedStateMachine):
    """Adds (also until full) and reads; refused ones must change nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.ours, self.theirs = OURS_QUEUE.init(TIMESTEP), strong(THEIRS_QUEUE.init(TIMESTEP))
        self.written = 0
        self.read = 0

    def _batch(self) -> dict[str, jax.Array]:
        return experience_of(row_codes(0, B, self.written, Q_ADD))

    def _add(self) -> None:
        batch = self._batch()
        self.ours = Q_JIT["ours_add"](self.ours, batch)
        self.theirs = Q_JIT["theirs_add"](self.theirs, batch)
        self.written += Q_ADD

    @rule()
    def add(self) -> None:
        if self.written - self.read + Q_ADD <= Q_T:
            self._add()
            return
        before = self.ours
        with pytest.raises(buffers.QueueFullError):
            OURS_QUEUE.add(self.ours, self._batch())
        after = Q_JIT["ours_add"](self.ours, self._batch())  # refused: the state unchanged
        assert_same_leaves(after, before, "refused add")

    @rule()
    def add_until_full(self) -> None:
        while bool(np.asarray(queue_probe(self.ours, self.theirs))[0]):  # our can_add
            self._add()
        assert self.written - self.read + Q_ADD > Q_T

    @rule()
    def sample(self) -> None:
        if self.written - self.read < Q_READ:
            with pytest.raises(buffers.NotReadyError):
                OURS_QUEUE.sample(self.ours)
            state, got = Q_JIT["ours_sample"](self.ours)
            assert not np.asarray(got.valid).any()
            assert_same_leaves(state, self.ours, "refused read")
            return
        self.ours, got = Q_JIT["ours_sample"](self.ours)
        self.theirs, want = Q_JIT["theirs_sample"](self.theirs)
        assert np.asarray(got.valid).all()
        assert_same_leaves(got.experience, want.experience, "queue read")
        np.testing.assert_array_equal(decode(got.experience), row_codes(0, B, self.read, Q_READ))
        self.read += Q_READ

    @invariant()
    def positions_follow_the_fifo(self) -> None:
        unread = self.written - self.read
        can_add = unread + Q_ADD <= Q_T
        can_read = unread >= Q_READ
        np.testing.assert_array_equal(
            np.asarray(queue_probe(self.ours, self.theirs)), [can_add, can_add, can_read, can_read]
        )
        for field in ("write_index", "read_index", "is_full"):
            assert int(getattr(self.ours, field)) == int(getattr(self.theirs, field)), field
        assert int(self.ours.write_index) == self.written % Q_T
        assert int(self.ours.read_index) == self.read % Q_T
        assert bool(self.ours.is_full) == (unread == Q_T)
        assert buffers.timesteps_added(self.ours) == self.written


TestQueueAgainstFlashbax = QueueAgainstFlashbax.TestCase
TestQueueAgainstFlashbax.settings = MACHINE_SETTINGS


# --------------------------------------------------------------------------------------------
# Episode buffer (beyond the reference): windows against a brute-force model
# --------------------------------------------------------------------------------------------

EP_TIMESTEP = {**TIMESTEP, "done": jnp.bool_(False)}
EPISODES = buffers.make_episode_buffer(
    add_batch_size=B,
    sample_batch_size=16,
    sample_sequence_length=L,
    min_length_time_axis=1,
    max_length_time_axis=T,
    pad=True,
)


def _from_state(state: Any, restarts: jax.Array, known: jax.Array) -> Any:
    plain = buffers.TrajectoryBufferState(
        experience=state.experience,
        current_index=state.current_index,
        is_full=state.is_full,
        write_counter=state.write_counter,
    )
    return EPISODES.from_state(plain, restarts=restarts, start_known=known)


E_JIT = {
    "add": jax.jit(EPISODES.add),
    "sample": jax.jit(EPISODES.sample),
    "from_state": jax.jit(_from_state),
}


class EpisodeModel:
    """Every step of every row ever added, with its done flag and where episodes start."""

    def __init__(self) -> None:
        self.done: list[bool] = []  # per timestep t (the same flags in every row)
        self.starts: set[int] = {0}  # t where an episode starts

    @property
    def added(self) -> int:
        return len(self.done)

    def add(self, flags: list[bool]) -> None:
        for flag in flags:
            if self.done and self.done[-1]:
                self.starts.add(self.added)
            self.done.append(flag)

    def rebuilt(self, known: bool, restart: int | None) -> None:
        """``from_state``: the episode starts it can know are those of the flags, the oldest
        stored step if told so, and the restart given (earlier restarts are forgotten)."""
        oldest = max(0, self.added - T)
        self.starts = {-1} | {t for t in range(oldest + 1, self.added) if self.done[t - 1]}
        if known:
            self.starts.add(oldest)
        if restart is not None:
            self.starts.add(restart)

    def episode_start(self, t: int) -> int:
        return max(s for s in self.starts if s <= t)

    def window_ends(self) -> set[int]:
        """``t`` of the last step of every window the buffer may sample (in any row)."""
        oldest = max(0, self.added - T)
        ends = set()
        for e in range(oldest, self.added):
            start = self.episode_start(e)
            whole = e - L + 1 >= max(oldest, start)
            short = e - start + 1 < L and start >= oldest and self.done[e]
            if whole or short:
                ends.add(e)
        return ends


def flags_of(n: int) -> st.SearchStrategy[list[bool]]:
    """Episode-end flags of ``n`` steps, ends being rare enough for whole windows."""
    return st.lists(st.sampled_from([False, False, True]), min_size=n, max_size=n)


class EpisodeBufferMachine(RuleBasedStateMachine):
    """Adds with random episode ends, draws, and ``from_state`` (with a restart) mid-run."""

    def __init__(self) -> None:
        super().__init__()
        self.state = EPISODES.init(EP_TIMESTEP)
        self.model = EpisodeModel()

    @initialize(runs=st.lists(st.sampled_from([1, 3]).flatmap(flags_of), max_size=5))
    def fill(self, runs: list[list[bool]]) -> None:
        """Start from a random run of adds."""
        for flags in runs:
            self.add(flags)

    @rule(flags=st.sampled_from([1, 3]).flatmap(flags_of))
    def add(self, flags: list[bool]) -> None:
        t0 = self.model.added
        codes = row_codes(0, B, t0, len(flags))
        batch = {**experience_of(codes), "done": jnp.asarray(np.tile(flags, (B, 1)))}
        self.state = E_JIT["add"](self.state, batch)
        self.model.add(flags)

    @rule(seed=SEEDS)
    def sample(self, seed: int) -> None:
        key = key_of(seed)
        ends = self.model.window_ends()
        ready = bool(ends) and self.model.added >= L  # min_length_time_axis is raised to L
        assert bool(EPISODES.can_sample(self.state)) == ready
        got = E_JIT["sample"](self.state, key)
        if not ready:
            assert not np.asarray(got.valid).any()
            return
        assert np.asarray(got.valid).all()
        mask = np.asarray(got.mask)
        codes = decode({k: got.experience[k] for k in ("code", "obs")})
        assert (codes[~mask] == 0).all(), "padding is zeros"
        for row_codes_, row_mask in zip(codes, mask, strict=True):
            n = int(row_mask.sum())
            assert row_mask[:n].all(), row_mask  # the mask is a prefix
            t = row_codes_[:n] % ROW
            assert (row_codes_[:n] // ROW == row_codes_[0] // ROW).all()
            np.testing.assert_array_equal(t, t[0] + np.arange(n))
            assert int(t[-1]) in ends, (t, sorted(ends))
            assert n == L or self.model.episode_start(int(t[-1])) == int(t[0]), t

    @precondition(lambda self: self.model.added >= 2)
    @rule(data=st.data())
    def rebuild_with_from_state(self, data: st.DataObject) -> None:
        """The state through ``from_state``, told the truth (where each row's oldest stored
        step starts an episode), optionally with a restart; the run goes on from it."""
        oldest = max(0, self.model.added - T)
        filled = self.model.added - oldest
        restart = data.draw(st.sampled_from([-1, *range(1, filled)]), label="restart")
        known = oldest in self.model.starts
        self.state = E_JIT["from_state"](
            self.state, jnp.asarray([restart], jnp.int32), jnp.asarray(known)
        )
        self.model.rebuilt(known, oldest + restart if restart > 0 else None)

    @invariant()
    def tree_marks_exactly_the_model_windows(self) -> None:
        nodes = np.asarray(self.state.sum_tree_state.nodes)
        leaves = nodes[nodes.size // 2 :]
        assert not leaves[B * T :].any(), "a padding leaf beyond the slots"
        leaves = leaves[: B * T].reshape(B, T)
        ends = self.model.window_ends()
        want = np.zeros((B, T), np.float32)
        for e in ends:
            want[:, e % T] = 1.0
        np.testing.assert_array_equal(leaves, want, err_msg=f"window ends {sorted(ends)}")
        assert_exact_sums(np.asarray(self.state.sum_tree_state.nodes))
        assert buffers.timesteps_added(self.state) == self.model.added


TestEpisodeBufferMachine = EpisodeBufferMachine.TestCase
TestEpisodeBufferMachine.settings = MACHINE_SETTINGS


# --------------------------------------------------------------------------------------------
# Bugs found by the machines, as plain regression tests (xfail, strict)
# --------------------------------------------------------------------------------------------


@jax.jit
def _from_state_with_gap(state: Any, gap: jax.Array) -> Any:
    plain = buffers.TrajectoryBufferState(
        experience=state.experience,
        current_index=state.current_index,
        is_full=state.is_full,
        write_counter=state.write_counter,
    )
    return EPISODES.from_state(plain, gaps=gap)


def _episode_state(flags: list[bool]) -> Any:
    """An episode state holding steps ``0 .. len(flags) - 1`` of both rows (adds of 1 step)."""
    state = EPISODES.init(EP_TIMESTEP)
    for t, flag in enumerate(flags):
        step = {**experience_of(row_codes(0, B, t, 1)), "done": jnp.full((B, 1), flag)}
        state = E_JIT["add"](state, step)
    return state


def _window_end_slots(state: Any) -> set[int]:
    """The slots where the state's sum tree says a sampleable window ends (row 0; both rows
    hold the same flags here)."""
    nodes = np.asarray(state.sum_tree_state.nodes)
    leaves = nodes[nodes.size // 2 :][: B * T].reshape(B, T)
    np.testing.assert_array_equal(leaves[0], leaves[1])
    return {int(s) for s in np.flatnonzero(leaves[0])}


def test_from_state_never_pads_the_episode_after_a_gap_ending_at_the_newest_step() -> None:
    # steps 0..3; data were lost just before step 2 (a vault seam with lost > 0), and the
    # episode that goes on there ends at step 3, the newest: its start is not known, so
    # (make_episode_buffer docs, `gaps`) it "is never sampled as a whole padded one"; no
    # window of 3 fits on either side of the gap: nothing can be sampled
    state = _from_state_with_gap(_episode_state([False, False, False, True]), jnp.array([2]))
    assert _window_end_slots(state) == set(), "the episode after the gap was made sampleable"
    assert not bool(EPISODES.can_sample(state))


def test_adds_after_from_state_never_pad_the_episode_after_a_gap() -> None:
    # steps 0..5, a gap before step 1; the episode after it (step 1 alone) ends at 1, its
    # start unknown. The episode 2.. starts after a done: windows [2, 3, 4] and [3, 4, 5]
    state = _from_state_with_gap(
        _episode_state([False, True, False, False, False, False]), jnp.array([1])
    )
    assert _window_end_slots(state) == {4, 5}  # from_state itself gets this right
    step = {**experience_of(row_codes(0, B, 6, 1)), "done": jnp.zeros((B, 1), bool)}
    state = E_JIT["add"](state, step)
    # one more window, [4, 5, 6]; never step 1 as a whole padded episode (the add
    # recomputes the windows ending at the L - 1 oldest slots, slot 1 among them)
    assert _window_end_slots(state) == {4, 5, 6}
    drawn = E_JIT["sample"](state, key_of(0))
    first = np.asarray(drawn.experience["code"])[:, 0] % ROW
    assert set(first.tolist()) <= {2, 3, 4}, first
