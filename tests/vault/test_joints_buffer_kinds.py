"""Where the buffer kinds meet the vault in both directions: states of every kind written
(prioritised with rounded capacities, a queue written at every fill, states stacked by
``vmap`` on two axes, a state traced by ``jit``), and a vault read back as a state of each
kind (``Vault.read(..., capacity=)``, ``read_numpy``) and sampled by trajectory,
prioritised, n-step, episode-aware buffers and a mixer of two vaults, including reads across
seams (a gap from an overrun, a new buffer, an ``append(continues=False)``), part ranges and
capacities below the range.

The model: a value says where it belongs, ``x = 1000 * row + 100 * run + t`` (``t`` counting
one run's timesteps from 0), so a timestep stored twice, lost, or sampled from anywhere but
its place shows as a mismatch; the windows an episode-aware buffer may draw are computed by
brute force from the stored flags and the vault's seams.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers as fbx
from vault import Seam, Vault, VaultError

R = 2  # rows of every vault here
L = 3  # window of the episode-aware buffers
C = 12  # the capacity the episode-aware reads use (one compiled shape)
EXAMPLE = {
    "x": jnp.int32(0),
    "done": jnp.bool_(False),
    "reward": jnp.float32(0),
    "discount": jnp.float32(0),
}


def steps(run: int, t0: int, n: int, done: np.ndarray | None = None, rows: int = R) -> Any:
    """Timesteps ``t0 .. t0 + n`` of run ``run``, ``[rows, n]`` per leaf (numpy)."""
    t = np.arange(t0, t0 + n)[None, :]
    x = 1000 * np.arange(rows)[:, None] + 100 * run + t
    done = np.zeros((rows, n), bool) if done is None else done
    return {
        "x": x.astype(np.int32),
        "done": done,
        "reward": (x % 7 - 2.5).astype(np.float32),
        "discount": np.where(done, 0.0, 0.5).astype(np.float32),
    }


def as_jax(tree: Any) -> Any:
    return jax.tree.map(jnp.asarray, tree)


def trajectory_buffer(t_len: int, seq: int = 1, batch: int = 1) -> Any:
    return fbx.make_trajectory_buffer(
        add_batch_size=R, sample_batch_size=batch, sample_sequence_length=seq, period=1,
        min_length_time_axis=seq, max_length_time_axis=t_len,
    )  # fmt: skip


@functools.cache
def jitted_add(t_len: int) -> Any:
    """A trajectory buffer of ``t_len`` slots' ``add``, jitted once per shape."""
    return jax.jit(trajectory_buffer(t_len).add)


def place_of(data: dict[str, np.ndarray]) -> dict[int, tuple[int, int]]:
    """``x`` value -> ``(row, vault timestep)``; asserts every value is stored once."""
    x = data["x"]
    where = {int(v): (r, t) for (r, t), v in np.ndenumerate(x)}
    assert len(where) == x.size, "a timestep is stored twice"
    return where


# ------------------------------------------------------------------------ the seam vault
# Positions (vault timesteps) of the vault every episode test reads, and what fills them:
#   0..8   run 0, t 0..8     (a buffer of 8 slots, written after t 4 and t 8)
#   9..16  run 0, t 12..19   (t 9..11 overwritten before the write: Seam(9, 3), a gap)
#   17..22 run 1, t 0..5     (a new buffer, new_buffer=True: Seam(17, 0))
#   23..27 run 2, t 0..4     (append(continues=False): Seam(23, 0))
N = 28
DONE_AT = {  # row -> vault timesteps whose done flag is set
    0: [2, 3, 7, 10, 14, 18, 24, 26],
    1: [0, 5, 9, 12, 13, 20, 22, 23, 27],
}
SEAMS = [Seam(9, 3), Seam(17, 0), Seam(23, 0)]
NEW_BUFFER_AT = 17  # where episodes begin with an unknown start though nothing was lost


def vault_done() -> np.ndarray:
    done = np.zeros((R, N), bool)
    for row, ats in DONE_AT.items():
        done[row, ats] = True
    return done


def run_done(run: int, t0: int, n: int) -> np.ndarray:
    """The done flags of run ``run``'s timesteps ``t0 .. t0 + n`` (where they are stored)."""
    done, out = vault_done(), np.zeros((R, n), bool)
    for i, t in enumerate(range(t0, t0 + n)):
        pos = {0: t if t < 9 else (t - 3 if t >= 12 else None), 1: 17 + t, 2: 23 + t}[run]
        if pos is not None:
            out[:, i] = done[:, pos]
    return out


def run_steps(run: int, t0: int, n: int) -> Any:
    return steps(run, t0, n, run_done(run, t0, n))


@pytest.fixture(scope="module")
def seam_vault(tmp_path_factory: pytest.TempPathFactory) -> Vault:
    path = tmp_path_factory.mktemp("buffer-kinds") / "seams"
    add = jitted_add(8)
    buffer = trajectory_buffer(8)
    state = buffer.init(EXAMPLE)
    v = Vault.create(path, state, done_leaf="done", reward_leaf="reward")
    for t in range(20):
        state = add(state, as_jax(run_steps(0, t, 1)))
        if t in (4, 8):
            v.write(state, block=t == 4)
    assert v.write(state, on_overrun="save_surviving") == 8
    state = buffer.init(EXAMPLE)
    for t in range(6):
        state = add(state, as_jax(run_steps(1, t, 1)))
    assert v.write(state, new_buffer=True, block=False) == 6
    v.append(run_steps(2, 0, 5), continues=False)
    v.close()
    r = Vault.open(path)
    assert r.seams == SEAMS
    stored = r.read_numpy()
    parts = [run_steps(0, 0, 9), run_steps(0, 12, 8), run_steps(1, 0, 6), run_steps(2, 0, 5)]
    want = {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}
    assert sorted(stored) == sorted(want)
    for key in stored:
        np.testing.assert_array_equal(stored[key], want[key], err_msg=key)
    np.testing.assert_array_equal(stored["done"], vault_done())
    return r


# ------------------------------------------------------------------------ episode model
def model_windows(
    lo: int, hi: int, pad: bool, known: Any, seams: list[Seam] = SEAMS
) -> set[tuple[int, int, int]]:
    """``(row, first, last)`` vault timesteps of every window an episode buffer holding vault
    timesteps ``[lo, hi)`` may draw, as ``from_state`` documents it: a window of ``L`` lies in
    one episode (an end only at its last step) and crosses no seam; with ``pad``, a whole
    episode shorter than ``L`` that ended, whose start is known (``known[row]`` at ``lo``,
    after a done flag, at a seam that lost nothing; not at one that lost timesteps, nor at
    the new buffer's seam)."""
    done = vault_done()
    out = set()
    for row in range(R):
        for p in range(lo, hi - L + 1):
            if any(p < s.at <= p + L - 1 for s in seams) or done[row, p : p + L - 1].any():
                continue
            out.add((row, p, p + L - 1))
        if not pad:
            continue
        start, start_known = lo, known[row]
        for t in range(lo, hi):
            seam = next((s for s in seams if s.at == t and t > lo), None)
            if seam is not None:
                start, start_known = t, seam.lost == 0 and seam.at != NEW_BUFFER_AT
            if done[row, t]:
                if start_known and t - start + 1 < L:
                    out.add((row, start, t))
                start, start_known = t + 1, True
    return out


EPISODES = fbx.make_episode_buffer(
    add_batch_size=R,
    sample_batch_size=64,
    sample_sequence_length=L,
    min_length_time_axis=1,
    max_length_time_axis=C,
    pad=True,
)
FROM_STATE = jax.jit(EPISODES.from_state)
SAMPLE_MANY = jax.jit(jax.vmap(EPISODES.sample, in_axes=(None, 0)))  # 16 draws of 64 windows
KEYS = jax.random.split(jax.random.key(0), 16)


def drawn(sample: Any, where: dict[int, tuple[int, int]]) -> set[tuple[int, int, int]]:
    """``(row, first, last)`` vault timesteps of every drawn window, after checking that it
    holds consecutive stored timesteps of one row, zeros after them, all marked valid."""
    assert np.asarray(sample.valid).all()
    out = set()
    x = np.asarray(sample.experience["x"]).reshape(-1, L)
    mask = np.asarray(sample.mask).reshape(-1, L)
    for window, keep in zip(x, mask, strict=True):
        n = int(keep.sum())
        assert keep[:n].all(), (window, keep)
        assert (window[n:] == 0).all(), (window, keep)
        places = [where[int(v)] for v in window[:n]]
        row, first = places[0]
        assert places == [(row, first + i) for i in range(n)], window
        out.add((row, first, first + n - 1))
    return out


def episode_read(v: Vault, start: int, stop: int) -> tuple[Any, int, list[bool] | None]:
    """The documented recipe (train-offline.md): ``from_state(v.read(**where),
    **v.episode_seams(**where))``; the first timestep the state holds, and the
    ``start_known`` given."""
    where = {"start": start, "stop": stop, "capacity": C}
    seams = v.episode_seams(**where)
    held = max(start, stop - C)
    assert sorted(seams["restarts"] + seams["gaps"]) == sorted(
        s.at - held for s in v.seams if held < s.at < stop
    )
    return FROM_STATE(v.read(**where), **seams), held, seams["start_known"]


def known_at(v: Vault, lo: int) -> list[bool]:
    """Whether each row's timestep ``lo`` begins an episode whose start is known: the start
    of the vault, after a done flag, or at a seam that lost nothing but the new buffer's."""
    done = vault_done()
    restart = any(s.at == lo and not s.lost and s.at != NEW_BUFFER_AT for s in v.seams)
    return [lo == 0 or restart or bool(done[row, lo - 1]) for row in range(R)]


# ------------------------------------------------------------------------ episode tests
READS = [  # (start, stop): C = 12 timesteps per row, or fewer, or the last 12 of more
    (0, 12),  # the vault's start and the gap
    (4, 16),  # from mid-episode, across the gap
    (10, 22),  # just after the gap, across the new buffer's seam
    (14, 24),  # fewer than C, across two restarts
    (0, N),  # the last 12 of the vault: a state whose ring wrapped
    (2, 20),  # the last 12 of a range: timesteps 8..19, the gap near its start
]


def test_from_state_of_vault_reads_draws_exactly_the_model_windows(seam_vault: Vault) -> None:
    """``from_state`` (``pad=True``) of a vault's reads (part ranges, from mid-episode,
    capacities below the range), given the seams as documented (``restarts``, ``gaps``,
    counted from the first timestep held): the windows drawn are exactly the model's (none
    across a seam, an episode end, or the start of the held data; whole short episodes only
    from a known start, never the one after a gap, nor the first of a wrapped state); and the
    vault's own episode-aware stream yields the model's windows of length ``L``."""
    v = seam_vault
    where = place_of(v.read_numpy())
    for start, stop in READS:
        state, held, given = episode_read(v, start, stop)
        known = known_at(v, held)
        assert given == known, (start, stop, given)
        got = drawn(SAMPLE_MANY(state, KEYS), where)
        want = model_windows(held, stop, True, known)
        assert got == want, (start, stop, sorted(got ^ want))
    with v.as_dataset(1, L, episode_aware=True, shuffle=False, prefetch=0) as stream:
        starts = {(int(b.row[0]), int(b.start[0])) for b in stream}
    assert starts == {(r, p) for r, p, _ in model_windows(0, N, False, [True] * R)}


def test_the_documented_recipe_pads_no_episode_whose_start_the_index_calls_unknown(
    seam_vault: Vault,
) -> None:
    """Train offline, "Episode-aware sampling": ``episode_seams`` gives ``restarts`` and
    ``gaps`` (where the index marks the next episode's start unknown), and "an episode whose
    start is not known is never sampled as a whole one". The vault's index says which
    episodes have a known start (``start_known``): a new buffer written with
    ``new_buffer=True`` starts its rows' episodes with an unknown start (format 4.4), an
    ``append(continues=False)`` with a known one. Every episode the buffer pads whole must be
    one the index knows the start of."""
    v = seam_vault
    table = v.episodes()
    index = {
        (int(table.row[i]), int(table.start[i]), int(table.start[i] + table.length[i] - 1)):
        bool(table.start_known[i])
        for i in range(len(table))
    }  # fmt: skip
    assert index[(1, 23, 23)] is True  # the first after append(continues=False)
    where = place_of(v.read_numpy())
    padded = set()
    for start, stop in [(0, N), (14, 26), (0, 20)]:
        state, _, _ = episode_read(v, start, stop)
        padded |= {w for w in drawn(SAMPLE_MANY(state, KEYS), where) if w[2] - w[1] < L - 1}
    assert padded, "no episode was padded: the test lost its point"
    unknown = sorted(w for w in padded if not index[w])
    assert unknown == [], f"padded whole, start unknown to the vault: {unknown}"


# ------------------------------------------------------------------------ the mixer
MIX = [trajectory_buffer(C, seq=2, batch=8), trajectory_buffer(C, seq=2, batch=8)]
MIXER = fbx.make_mixer(MIX, sample_batch_size=8, proportions=[3, 1])
MIX_SAMPLE = jax.jit(MIXER.sample)


def test_a_mixer_of_two_vaults_reads_draws_each_share_from_its_vault(
    seam_vault: Vault, tmp_path: Path
) -> None:
    """A mixer over the states read from two vaults (the last 12 timesteps of one, 5 of
    another): its batch is 6 windows of the first and 2 of the second, each two consecutive
    timesteps stored in that vault; a second vault too short to sample gives its share
    ``valid`` false under ``jit`` while the first share stays valid (and ``can_sample`` is
    false)."""
    other = tmp_path / "other"
    with Vault.create(other, EXAMPLE, rows=R) as w:
        w.append(steps(7, 0, 5))
    second = Vault.open(other)
    assert MIXER.batch_sizes == (6, 2)
    places = [place_of(seam_vault.read_numpy()), place_of(second.read_numpy())]
    states = [seam_vault.read(capacity=C), second.read(capacity=C)]
    for k in range(4):
        mixed = MIX_SAMPLE(states, jax.random.key(k))
        assert np.asarray(mixed.valid).all()
        x = np.asarray(mixed.experience["x"])
        for i, window in enumerate(x):
            row, t = places[0 if i < 6 else 1][int(window[0])]
            assert places[0 if i < 6 else 1][int(window[1])] == (row, t + 1), (i, window)
            if i < 6:
                assert t >= N - C  # only what the first state holds
    short = second.read(stop=1, capacity=C)  # one timestep: no window of 2
    mixed = MIX_SAMPLE([states[0], short], jax.random.key(9))
    assert np.asarray(mixed.valid).tolist() == [True] * 6 + [False] * 2
    assert not bool(MIXER.can_sample([states[0], short]))


# ------------------------------------------------------------------------ n-step
N_STEP = 2
N_STEP_BUFFER = fbx.make_n_step_buffer(
    max_length=R * C, min_length=2, sample_batch_size=24, add_batch_size=R, n_step=N_STEP,
    n_step_functional_map={
        ("reward", "reward", "discount"): lambda r, d: fbx.n_step_returns(r, d, N_STEP),
        ("discount", "discount"): lambda d: fbx.n_step_discounts(d, N_STEP),
    },
)  # fmt: skip
N_STEP_SAMPLE = jax.jit(N_STEP_BUFFER.sample)


def test_an_n_step_buffer_over_a_vault_read_gives_the_stored_n_step_returns(
    tmp_path: Path,
) -> None:
    """A vault read with ``capacity=max_length // rows`` given to an n-step buffer: each
    transition pairs a stored timestep with the one ``n`` later in its row, and its reward
    and discount are the n-step return and discount of the stored rewards (the helpers
    applied to the vault's numpy data)."""
    done = np.zeros((R, 9), bool)
    done[0, 4] = done[1, 1] = True
    with Vault.create(tmp_path / "v", EXAMPLE, rows=R) as v:
        v.append(steps(3, 0, 9, done))
    r = Vault.open(tmp_path / "v")
    data = r.read_numpy()
    where = place_of(data)
    returns = np.asarray(fbx.n_step_returns(data["reward"], data["discount"], N_STEP))
    discounts = np.asarray(fbx.n_step_discounts(data["discount"], N_STEP))
    seen = set()
    for k in range(3):
        pair = N_STEP_SAMPLE(r.read(capacity=C), jax.random.key(k)).experience
        for i, x in enumerate(np.asarray(pair.first["x"])):
            row, t = where[int(x)]
            assert where[int(pair.second["x"][i])] == (row, t + N_STEP)
            assert t + N_STEP < 9  # never past the stored data
            assert float(pair.first["reward"][i]) == pytest.approx(returns[row, t])
            assert float(pair.first["discount"][i]) == pytest.approx(discounts[row, t])
            seen.add((row, t))
    assert len(seen) > 8


# ------------------------------------------------------------------------ prioritised
PRIO = fbx.make_prioritised_trajectory_buffer(
    add_batch_size=R, sample_batch_size=64, sample_sequence_length=2, period=1,
    min_length_time_axis=2, max_length_time_axis=C,
)  # fmt: skip
PRIO_ADD, PRIO_SAMPLE = jax.jit(PRIO.add), jax.jit(PRIO.sample)


def test_a_prioritised_buffer_filled_from_read_numpy_samples_only_the_vault_s_data(
    tmp_path: Path,
) -> None:
    """The vault's last 12 timesteps (``read_numpy(last=12)``) added to a prioritised
    buffer: every item holding two stored timesteps has the default priority (the recorded
    maximum, 1), so draws are uniform (probability ``1 / items``) over real windows only;
    the state written to a new vault stores exactly those timesteps, then the next ones."""
    with Vault.create(tmp_path / "src", EXAMPLE, rows=R) as v:
        v.append(steps(4, 0, 15))
    data = Vault.open(tmp_path / "src").read_numpy(last=C)
    where = place_of(data)
    state = PRIO_ADD(PRIO.init(EXAMPLE), as_jax(data))
    sample = PRIO_SAMPLE(state, jax.random.key(1))
    items = R * (C - 1)  # windows of 2 that do not straddle the write position
    np.testing.assert_allclose(np.asarray(sample.probabilities), 1 / items, rtol=1e-6)
    leaves = np.asarray(state.sum_tree_state.nodes)[-(state.sum_tree_state.nodes.size // 2) :]
    assert sorted(set(leaves.tolist())) == [0.0, 1.0]
    assert leaves.sum() == items
    for window in np.asarray(sample.experience["x"]):
        row, t = where[int(window[0])]
        assert where[int(window[1])] == (row, t + 1)
    with Vault.create(tmp_path / "copy", state) as copy:
        assert copy.write(state) == C
        state = PRIO_ADD(state, as_jax(steps(5, 0, 3)))
        assert copy.write(state, block=False) == 3
    stored = Vault.open(tmp_path / "copy").read_numpy()["x"]
    np.testing.assert_array_equal(stored, np.concatenate([data["x"], steps(5, 0, 3)["x"]], 1))


@pytest.mark.parametrize("block", [True, False], ids=["block", "background"])
def test_a_prioritised_buffer_of_a_rounded_time_axis_stores_every_timestep(
    tmp_path: Path, block: bool
) -> None:
    """``max_length_time_axis=9`` with ``period=2`` holds 8 timesteps per row (a warning
    says so): written every 1 to 8 adds, across several wraps, the vault holds every
    timestep once, in order, and no seam."""
    with pytest.warns(UserWarning, match="using 8"):
        buffer = fbx.make_prioritised_trajectory_buffer(
            add_batch_size=R, sample_batch_size=2, sample_sequence_length=3, period=2,
            min_length_time_axis=3, max_length_time_axis=9,
        )  # fmt: skip
    add = jax.jit(buffer.add)
    state = buffer.init(EXAMPLE)
    v = Vault.create(tmp_path / "v", state)
    t = 0
    for adds in (1, 3, 8, 2, 5, 8, 1):
        for _ in range(adds):
            state = add(state, as_jax(steps(8, t, 1)))
            t += 1
        assert v.write(state, block=block) == adds
    v.close()
    r = Vault.open(tmp_path / "v")
    assert r.seams == []
    np.testing.assert_array_equal(r.read_numpy()["x"], steps(8, 0, t)["x"])


# ------------------------------------------------------------------------ read, add, write back
def recorded(path: Path, n: int) -> None:
    """A vault at ``path`` written from a buffer of 16 slots given ``n`` timesteps."""
    add = jitted_add(16)
    state = trajectory_buffer(16).init(EXAMPLE)
    with Vault.create(path, state) as v:
        for t in range(n):
            state = add(state, as_jax(steps(9, t, 1)))
        assert v.write(state) == n


@pytest.mark.parametrize("capacity", [24, 4])
def test_a_read_state_added_to_and_written_back_appends_only_the_new_timesteps(
    tmp_path: Path, capacity: int
) -> None:
    """``read(capacity=)`` sets ``current_index``/``is_full``/``write_counter`` "so that
    ``add`` continues after the data" and "the state can be added to and written to a vault
    as any buffer's": a capacity above the committed length, and one dividing it, continued
    with 3 adds and written to the vault it came from append exactly those 3 timesteps."""
    recorded(tmp_path / "v", 12)
    state = Vault.open(tmp_path / "v").read(capacity=capacity)
    add = jitted_add(capacity)
    for t in range(12, 15):
        state = add(state, as_jax(steps(9, t, 1)))
    with Vault.open(tmp_path / "v", mode="a") as v:
        assert v.write(state) == 3
        assert v.write(state) == 0
    r = Vault.open(tmp_path / "v")
    assert r.seams == []
    np.testing.assert_array_equal(r.read_numpy()["x"], steps(9, 0, 15)["x"])


def test_a_read_state_whose_capacity_does_not_divide_the_vault_is_never_stored_twice(
    tmp_path: Path,
) -> None:
    """12 committed timesteps read with ``capacity=5``: the state holds 7..11 where a ring of
    5 that had 12 added holds them (the next add at slot 2) and says 12 were added. Two adds
    later, written back to its vault, only the 2 new timesteps are stored (it once said 15,
    rounded up: the write took it for a whole ring since the vault's record of 12 and stored
    9, 10, 11 a second time, with no seam); and so again after a wrap of its ring (7 adds)."""
    recorded(tmp_path / "v", 12)
    state = Vault.open(tmp_path / "v").read(capacity=5)
    add = jitted_add(5)
    t = 12
    for n in (2, 4):
        for _ in range(n):
            state = add(state, as_jax(steps(9, t, 1)))
            t += 1
        with Vault.open(tmp_path / "v", mode="a") as v:
            assert v.write(state) == n
        stored = Vault.open(tmp_path / "v").read_numpy()["x"]
        np.testing.assert_array_equal(stored, steps(9, 0, t)["x"])
    assert list(Vault.open(tmp_path / "v").seams) == []


# ------------------------------------------------------------------------ queue
QUEUE = fbx.make_trajectory_queue(
    max_length_time_axis=4, add_batch_size=R, add_sequence_length=2, sample_sequence_length=4
)
QUEUE_ADD, QUEUE_SAMPLE = jax.jit(QUEUE.add), jax.jit(QUEUE.sample)


def test_a_queue_written_at_every_fill_and_refused_adds_stores_each_timestep_once(
    tmp_path: Path,
) -> None:
    """A queue of 4 filled to full, given an add it refuses (inside ``jit``: the state is
    unchanged), written, then emptied by ``sample``: three rounds store each added timestep
    once, the refused ones never."""
    state = QUEUE.init(EXAMPLE)
    v = Vault.create(tmp_path / "v", state)
    t = 0
    for round_ in range(3):
        for _ in range(2):
            state = QUEUE_ADD(state, as_jax(steps(10, t, 2)))
            t += 2
        refused = QUEUE_ADD(state, as_jax(steps(11, 0, 2)))  # full: no room
        assert fbx.timesteps_added(refused) == t
        assert v.write(refused, block=round_ != 1) == 4
        assert v.write(state) == 0
        state, got = QUEUE_SAMPLE(state)
        np.testing.assert_array_equal(got.experience["x"], steps(10, t - 4, 4)["x"])
    v.close()
    np.testing.assert_array_equal(
        Vault.open(tmp_path / "v").read_numpy()["x"], steps(10, 0, t)["x"]
    )


# ------------------------------------------------------------------------ transformed states
def test_a_state_stacked_on_two_axes_is_written_buffer_major(tmp_path: Path) -> None:
    """``BufferView`` folds any number of leading stacking axes into rows; a 3 x 2 batch of
    buffers (``vmap`` of ``vmap``) makes a vault of ``3 * 2 * R`` rows, each buffer's rows
    in C order, every write exact."""
    buffer = trajectory_buffer(4)
    init = jax.vmap(jax.vmap(buffer.init, in_axes=None, axis_size=2), in_axes=None, axis_size=3)
    state = init(EXAMPLE)
    v = Vault.create(tmp_path / "v", state)
    assert v.rows == 3 * 2 * R
    add = jax.jit(jax.vmap(jax.vmap(buffer.add)))
    t = 0
    for adds in (3, 4, 1):
        for _ in range(adds):
            batch = [steps(run, t, 1) for run in range(6)]
            stacked = jax.tree.map(lambda *xs: np.stack(xs).reshape(3, 2, *xs[0].shape), *batch)
            state = add(state, as_jax(stacked))
            t += 1
        assert v.write(state) == adds
    v.close()
    want = np.concatenate([steps(run, 0, t)["x"] for run in range(6)], axis=0)
    np.testing.assert_array_equal(Vault.open(tmp_path / "v").read_numpy()["x"], want)


def test_a_state_traced_by_jit_is_refused_with_a_typed_error(tmp_path: Path) -> None:
    """``write`` inside ``jit`` cannot see the state's values: a typed error naming the
    cause, nothing written, and the vault takes the same state outside ``jit``."""
    buffer = trajectory_buffer(4)
    state = jitted_add(4)(buffer.init(EXAMPLE), as_jax(steps(12, 0, 1)))
    v = Vault.create(tmp_path / "v", state)

    @jax.jit
    def step(s: Any) -> Any:
        v.write(s)
        return s

    try:
        with pytest.raises(VaultError, match=r"jit|trace"):
            step(state)
        assert v.committed_length == 0
        assert v.write(state) == 1
    finally:
        v.close()
