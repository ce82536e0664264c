"""The episode index: exact boundaries across writes, reopen, gaps; the episode table API."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import buffers as fbx
import vault as vlt
from vault import EpisodeTable, Vault, VaultReadError, VaultStructureError

ROWS = 3
EXAMPLE = {
    "obs": np.zeros(2, np.float32),
    "done": np.bool_(False),
    "trunc": np.bool_(False),
    "reward": np.float32(0),
}


def make(path, **kw):
    kw.setdefault("done_leaf", "done")
    kw.setdefault("truncated_leaf", "trunc")
    kw.setdefault("reward_leaf", "reward")
    return Vault.create(str(path), EXAMPLE, rows=ROWS, **kw)


def data(done, trunc=None, reward=None, t0=0):
    done = np.asarray(done, bool)
    rows, n = done.shape
    t = np.arange(t0, t0 + n, dtype=np.float32)
    return {
        "obs": np.stack([np.broadcast_to(t, (rows, n)), np.arange(rows)[:, None] + 0 * t], -1)
        .astype(np.float32)
        .copy(),
        "done": done,
        "trunc": np.zeros_like(done) if trunc is None else np.asarray(trunc, bool),
        "reward": np.ones(done.shape, np.float32)
        if reward is None
        else np.asarray(reward, np.float32),
    }


def reference(done, trunc, reward):
    """Trivially correct model: walk every row step by step."""
    complete, opened = [], []
    for r in range(done.shape[0]):
        start, ret = 0, 0.0
        for t in range(done.shape[1]):
            ret += float(reward[r, t])
            if done[r, t] or trunc[r, t]:
                complete.append(
                    (r, start, t + 1 - start, ret, bool(trunc[r, t] and not done[r, t]))
                )
                start, ret = t + 1, 0.0
        if start < done.shape[1]:
            opened.append((r, start, done.shape[1] - start, ret))
    return sorted(complete), sorted(opened)


def as_tuples(table: EpisodeTable, complete: bool = True):
    out = []
    for rec in table.to_records():
        if rec["complete"] != complete:
            continue
        item = (rec["row"], rec["start"], rec["length"], pytest.approx(rec["return"]))
        out.append(item + ((rec["truncated"],) if complete else ()))
    return sorted(out, key=lambda x: (x[0], x[1]))


def test_hand_built_episodes_across_writes(tmp_path):
    # row 0: length-1 episodes back to back; row 1: one episode spanning all three writes,
    # ending exactly on the last write boundary; row 2: ends on the first write boundary.
    done = np.zeros((ROWS, 9), bool)
    done[0, [0, 1, 2, 5]] = True
    done[1, 8] = True
    done[2, 2] = True
    trunc = np.zeros_like(done)
    trunc[2, 6] = True
    reward = np.arange(ROWS * 9, dtype=np.float32).reshape(ROWS, 9)
    v = make(tmp_path / "v")
    for a, b in ((0, 3), (3, 7), (7, 9)):
        v.append(data(done[:, a:b], trunc[:, a:b], reward[:, a:b], a))
    table = v.episodes()
    assert [
        (int(r), int(s), int(n))
        for r, s, n in zip(table.row, table.start, table.length, strict=True)
    ] == [
        (0, 0, 1),
        (0, 1, 1),
        (0, 2, 1),
        (2, 0, 3),
        (0, 3, 3),
        (2, 3, 4),
        (1, 0, 9),
    ]  # committed order: by write, then row, then time
    assert table.returns.tolist() == [
        0.0,
        1.0,
        2.0,
        18 + 19 + 20,
        3 + 4 + 5,
        21 + 22 + 23 + 24,
        sum(range(9, 18)),
    ]
    assert table.truncated.tolist() == [False] * 5 + [True, False]
    want_complete, want_open = reference(done, trunc, reward)
    assert as_tuples(table) == want_complete
    with_open = v.episodes(include_open=True)
    assert as_tuples(with_open, complete=False) == [
        (r, s, n, pytest.approx(ret)) for r, s, n, ret in want_open
    ]
    # reopened (by another handle) the index is the same, and appends continue it exactly
    v.close()
    w = Vault.open(str(tmp_path / "v"), "a")
    more = np.zeros((ROWS, 2), bool)
    more[:, 1] = True
    w.append(data(more, None, np.ones((ROWS, 2)), 9))
    done2 = np.concatenate([done, more], 1)
    trunc2 = np.concatenate([trunc, np.zeros_like(more)], 1)
    reward2 = np.concatenate([reward, np.ones((ROWS, 2), np.float32)], 1)
    assert (
        as_tuples(Vault.open(str(tmp_path / "v")).episodes())
        == reference(done2, trunc2, reward2)[0]
    )


def test_read_and_iterate_episodes(tmp_path):
    done = np.zeros((ROWS, 6), bool)
    done[1, [1, 4]] = True
    v = make(tmp_path / "v")
    v.append(data(done))
    first = v.read_episode(0)
    assert first["obs"].shape == (2, 2)
    np.testing.assert_array_equal(first["obs"][:, 0], [0, 1])
    np.testing.assert_array_equal(first["obs"][:, 1], [1, 1])  # row 1
    assert first["done"].tolist() == [False, True]
    episodes = list(v.iter_episodes())
    assert [e["obs"][:, 0].tolist() for e in episodes] == [[0, 1], [2, 3, 4]]
    only = v.read_episode(v.episodes()[1], leaves=["reward"])
    assert list(only) == ["reward"]
    assert only["reward"].shape == (3,)
    with pytest.raises(VaultReadError, match="episode 2 out of range; 2 complete"):
        v.read_episode(2)


def test_episode_index_from_buffer_writes_with_wraps(tmp_path):
    """Through the buffer path: several wraps between writes, odd write sizes."""
    t_len = 5
    buf = fbx.make_trajectory_buffer(
        add_batch_size=ROWS,
        sample_batch_size=1,
        sample_sequence_length=1,
        period=1,
        min_length_time_axis=1,
        max_length_time_axis=t_len,
    )
    add = jax.jit(buf.add)
    state = buf.init(jax.tree.map(jnp.asarray, EXAMPLE))
    rng = np.random.default_rng(3)
    total = 40
    done = rng.random((ROWS, total)) < 0.3
    trunc = rng.random((ROWS, total)) < 0.1
    reward = rng.normal(size=(ROWS, total)).astype(np.float32)
    everything = data(done, trunc, reward)
    v = Vault.create(
        str(tmp_path / "v"), state, done_leaf="done", truncated_leaf="trunc", reward_leaf="reward"
    )
    t = 0
    for step in (1, 2, 5, 3, 4, 5, 1, 5, 5, 2, 3, 4):  # every burst <= the buffer's 5
        for _ in range(step):
            state = add(state, jax.tree.map(lambda x, t=t: x[:, t : t + 1], everything))
            t += 1
        v.write(state)
    assert t == total
    complete, opened = reference(done, trunc, reward)
    table = v.episodes(include_open=True)
    assert as_tuples(table) == complete
    assert as_tuples(table, complete=False) == [
        (r, s, n, pytest.approx(x)) for r, s, n, x in opened
    ]


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    cuts=st.lists(st.integers(0, 7), min_size=1, max_size=6),
    p_done=st.sampled_from([0.0, 0.2, 0.6, 1.0]),
)
def test_index_matches_reference_model(tmp_path_factory, seed, cuts, p_done):
    rng = np.random.default_rng(seed)
    total = sum(cuts)
    done = rng.random((ROWS, total)) < p_done
    trunc = rng.random((ROWS, total)) < 0.1
    reward = rng.integers(-3, 4, (ROWS, total)).astype(np.float32)
    v = make(tmp_path_factory.mktemp("p") / "v")
    t = 0
    for n in cuts:
        assert v.append(data(done[:, t : t + n], trunc[:, t : t + n], reward[:, t : t + n])) == n
        t += n
    complete, opened = reference(done, trunc, reward)
    table = v.episodes(include_open=True)
    assert as_tuples(table) == complete
    assert as_tuples(table, complete=False) == [
        (r, s, n, pytest.approx(x)) for r, s, n, x in opened
    ]
    assert table.transitions == ROWS * total  # complete + open episodes tile every row


def test_gap_marks_the_start_unknown(tmp_path):
    buf = fbx.make_trajectory_buffer(ROWS, 1, 1, 1, 1, max_length_time_axis=4)
    add = jax.jit(buf.add)
    state = buf.init(jax.tree.map(jnp.asarray, EXAMPLE))
    v = Vault.create(str(tmp_path / "v"), state, done_leaf="done")
    step = data(np.zeros((ROWS, 1), bool))
    end = data(np.ones((ROWS, 1), bool))
    state = add(state, step)
    v.write(state)
    for _ in range(6):  # overrun: of these 7 adds the buffer keeps 4, 3 are lost
        state = add(state, step)
    state = add(state, end)
    v.write(state, on_overrun="save_surviving")
    table = v.episodes()
    assert len(table) == ROWS
    assert not table.start_known.any()
    assert table.start.tolist() == [1] * ROWS  # starts at the gap, recorded at timestep 1
    assert v.gaps == [{"at": 1, "lost": 3}]
    assert table.length.tolist() == [4] * ROWS
    assert np.isnan(table.returns).all()  # no reward leaf
    assert len(table.select()) == 0  # select skips episodes whose start is unknown


def test_episode_seams_split_restarts_from_gaps_with_and_without_an_index(tmp_path):
    """``episode_seams``: a seam that lost timesteps is a gap; one that lost nothing a restart,
    unless the index marks the episode starting there unknown (a new buffer's first write);
    counted from the first timestep the read holds; ``start_known`` from the index (None
    without one)."""
    example = {"x": np.float32(0), "done": np.bool_(False)}
    buf = fbx.make_trajectory_buffer(2, 1, 1, 1, 1, max_length_time_axis=3)

    def steps(n, done_at=()):
        done = np.zeros((2, n), bool)
        done[:, list(done_at)] = True
        return {"x": np.zeros((2, n), np.float32), "done": done}

    def buffer_of(n):
        state = buf.init(jax.tree.map(jnp.asarray, example))
        for _ in range(n):
            state = buf.add(state, jax.tree.map(jnp.asarray, steps(1)))
        return state

    for index in (True, False):
        v = Vault.create(str(tmp_path / f"v{index}"), example, rows=2,
                         done_leaf="done" if index else None)  # fmt: skip
        v.append(steps(4, [1]))  # timesteps 0..3, an episode end at 1
        v.append(steps(3), continues=False)  # 4..6: a restart at 4
        v.write(buffer_of(5), on_overrun="save_surviving")  # 7..9, 2 lost before: a gap
        v.write(buffer_of(2), new_buffer=True)  # 10..11: another buffer, nothing lost
        assert [(s.at, s.lost) for s in v.seams] == [(4, 0), (7, 2), (10, 0)]
        new_buffer = "gaps" if index else "restarts"  # the index marks its starts unknown
        want = {"restarts": [4], "gaps": [7]}
        want[new_buffer].append(10)
        known = (lambda k: [k, k]) if index else (lambda k: None)
        assert v.episode_seams() == {**want, "start_known": known(True)}
        want = {"restarts": [2], "gaps": [5]}  # from timestep 2, just after an episode end
        want[new_buffer].append(8)
        assert v.episode_seams(start=2) == {**want, "start_known": known(True)}
        want = {"restarts": [], "gaps": []}  # the last 5 of 1..11: 7..11, a gap at 7
        want[new_buffer].append(3)
        assert v.episode_seams(start=1, capacity=5) == {**want, "start_known": known(False)}
        assert v.episode_seams(start=4, stop=7)["start_known"] == known(True)  # a restart
        assert v.episode_seams(start=5, stop=7)["start_known"] == known(False)  # mid-episode
        assert v.episode_seams(start=10)["start_known"] == known(False)  # the new buffer
        with pytest.raises(VaultReadError, match="capacity must be >= 1"):
            v.episode_seams(capacity=0)
        v.close()
    # a slice that begins mid-episode: its first episodes' starts are unknown at timestep 0
    cut = vlt.derive_slice(str(tmp_path / "vTrue"), str(tmp_path / "cut"), start=5)
    assert cut.episode_seams(stop=2)["start_known"] == [False, False]


def test_table_sort_and_select():
    bounds = np.array([[0, 0, 5, 0], [1, 0, 2, 1], [0, 5, 9, 0], [1, 2, 1, 0], [0, 14, 3, 2]])
    table = EpisodeTable.from_bounds(bounds, np.array([1.0, 7.0, -2.0, 4.0, 9.0]), True)
    assert table.sort().returns.tolist() == [9.0, 7.0, 4.0, 1.0, -2.0]
    assert table.sort("length", descending=False).length.tolist() == [1, 2, 3, 5, 9]
    assert table.select(min_return=0).returns.tolist() == [1.0, 7.0, 4.0]  # 9.0: start unknown
    assert table.select(max_length=2).length.tolist() == [2, 1]
    assert table.select(top_k=2).returns.tolist() == [7.0, 4.0]  # index order kept
    assert table.select(min_length=3, max_return=5).returns.tolist() == [1.0, -2.0]
    picked = table.select(transitions=6, seed=1)
    assert picked.transitions >= 6
    assert len(picked) < 4
    assert picked.start.tolist() == table.select(transitions=6, seed=1).start.tolist()
    assert len(table.select(transitions=0)) == 0
    assert table.select(transitions=10**6).transitions == 17
    assert table[1:3].row.tolist() == [1, 0]
    assert len(table[np.array([0, 4])]) == 2
    assert table.to_records()[1] == {
        "row": 1,
        "start": 0,
        "length": 2,
        "return": 7.0,
        "truncated": True,
        "complete": True,
        "start_known": True,
    }
    with pytest.raises(ValueError, match="sort by one of"):
        table.sort("bogus")


def test_episode_errors(tmp_path):
    with pytest.raises(VaultStructureError, match="bad episode leaves") as err:
        make(tmp_path / "a", done_leaf="finished", reward_leaf="obs")
    assert err.value.problems == [
        "done_leaf 'finished': no such leaf; leaves: ['done', 'obs', 'reward', 'trunc']",
        "reward_leaf 'obs': expected one value per timestep, got (2,)",
    ]
    with pytest.raises(VaultStructureError, match=re.escape("['reward'] given without done_leaf")):
        make(tmp_path / "b", done_leaf=None, truncated_leaf=None)
    plain = Vault.create(str(tmp_path / "c"), EXAMPLE, rows=ROWS)
    assert not plain.has_episodes
    with pytest.raises(VaultReadError, match="has no episode index: create the vault with"):
        plain.episodes()
    v = make(tmp_path / "d")
    assert v.has_episodes
    assert v.episode_leaves == {
        "done": "done",
        "truncated": "trunc",
        "reward": "reward",
    }
    assert len(v.episodes()) == 0
    assert len(v.episodes(include_open=True)) == 0


def test_zarr_python_reads_the_index(tmp_path):
    import zarr

    done = np.zeros((ROWS, 4), bool)
    done[:, 1] = True
    v = make(tmp_path / "v")
    v.append(data(done))
    group = zarr.open_group(str(tmp_path / "v"), mode="r")
    count = v.episodes().row.shape[0]
    bounds = group["episodes/bounds"][:count]
    assert group["episodes/bounds"].attrs["fields"] == ["row", "start", "length", "flags"]
    np.testing.assert_array_equal(bounds[:, :3], [[0, 0, 2], [1, 0, 2], [2, 0, 2]])


def test_nonblocking_writes_with_refresh_keep_the_index_exact(tmp_path):
    """refresh() on a writer with writes pending waits for them; the index stays exact."""
    buf = fbx.make_trajectory_buffer(ROWS, 1, 1, 1, 1, max_length_time_axis=8)
    add = jax.jit(buf.add)
    state = buf.init(jax.tree.map(jnp.asarray, EXAMPLE))
    rng = np.random.default_rng(11)
    done = rng.random((ROWS, 40)) < 0.3
    everything = data(done)
    v = Vault.create(str(tmp_path / "v"), state, done_leaf="done", reward_leaf="reward")
    for t in range(40):
        state = add(state, jax.tree.map(lambda x, t=t: x[:, t : t + 1], everything))
        if t % 5 == 4:
            v.write(state, block=False)
            v.refresh()
    v.close()
    want = reference(done, np.zeros_like(done), np.ones(done.shape, np.float32))[0]
    assert as_tuples(Vault.open(str(tmp_path / "v")).episodes()) == want
