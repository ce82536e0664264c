"""Where episodes meet the other features: appends of any size over small uneven chunks,
buffer writes across ring wraps (blocking or not, resumed writers, overruns), pins, the
``vault episodes``/``vault stats`` commands, episode-aware streams and Grain sources, derived
slices that cut episodes, ``derive_episodes`` and ``combine``, converters (Minari round trips,
D4RL and OGBench flags), the episode buffer (live, and rebuilt by ``from_state``), and the edge
cases: episodes of one step, an end on the very first step, ``done`` and ``truncated`` on the
same step, every row ending on the same step, and a vault with no episode end at all.

Every value is compared with a trivially correct model: a brute-force walk over the done,
truncated and reward arrays written (and the seams recorded), enumerating each row's episodes
step by step. The data say where they belong (``t`` holds ``1000 * row + time``), so a window
or an episode read back is checked against its place. Three tests are marked ``xfail``: they
pin bugs (see their reasons).
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from vault import (
    Seam,
    Vault,
    VaultReadError,
    combine,
    derive_episodes,
    derive_slice,
    episode_stats,
    grain_source,
)
from vault.cli import app

ROWS = 3
EXAMPLE = {
    "t": np.int32(0),
    "obs": np.zeros(2, np.float32),
    "done": np.bool_(False),
    "trunc": np.bool_(False),
    "rew": np.float32(0),
}
# small uneven chunks: an episode spans several chunks and appends, appends cut chunks
CHUNK = {"t": [2, 3], "obs": [1, 4, 2], "done": [3, 2], "trunc": [2, 5], "rew": [1, 7]}
ROLES = {"done_leaf": "done", "truncated_leaf": "trunc", "reward_leaf": "rew"}
Record = tuple[int, int, int, float | None, bool, bool, bool]


# ------------------------------------------------------------------------------- the model
def flags(rows: int, n: int, seed: int) -> dict[str, np.ndarray]:
    """Timesteps ``[0, n)`` of every row, with the edge cases placed on purpose: an end on
    the very first step (done in row 0, truncated in row 1), done and truncated on one step,
    episodes of one step, every row ending on the same step, the last step an end in row 0."""
    rng = np.random.default_rng(seed)
    done = rng.random((rows, n)) < 0.15
    trunc = rng.random((rows, n)) < 0.1
    done[0, 0] = True
    trunc[min(1, rows - 1), 0] = True
    if rows > 2 and n > 9:
        done[2, 5] = trunc[2, 5] = True  # both: terminated
        done[0, 6:9] = True  # three one-step episodes in a row
        done[:, n // 2] = True  # every row on the same step
        done[0, n - 1] = True  # row 0 has no open episode at the end
    t = (1000 * np.arange(rows)[:, None] + np.arange(n)[None]).astype(np.int32)
    return {
        "t": t,
        "obs": np.repeat(t[..., None], 2, axis=2).astype(np.float32) + np.float32(0.5),
        "done": done,
        "trunc": trunc,
        "rew": rng.integers(-3, 5, (rows, n)).astype(np.float32),
    }


def cut(data: dict[str, np.ndarray], lo: int, hi: int) -> dict[str, np.ndarray]:
    return {k: v[:, lo:hi] for k, v in data.items()}


def model_episodes(
    data: dict[str, np.ndarray],
    cuts: list[int] | None = None,
    seams: dict[int, bool] | None = None,
    known0: list[bool] | None = None,
) -> tuple[list[Record], list[Record]]:
    """(complete episodes in index order, open episodes in row order) by brute force.

    ``cuts``: the append boundaries (the index is ordered by write, then row, then end time);
    ``seams``: ``{at: start known}``: the rows' open episodes are dropped there and new ones
    start (with a known start or not); ``known0``: whether each row's first episode starts at
    a known place (default: yes)."""
    done, trunc = data["done"], data.get("trunc")
    reward = data.get("rew")
    rows, n = done.shape
    cuts = [0, n] if cuts is None else cuts
    seams = seams or {}
    closed: list[tuple[int, int, int, Record]] = []
    opened: list[Record] = []
    for r in range(rows):
        start, known = 0, True if known0 is None else known0[r]
        for t in range(n):
            if t in seams and t > 0:
                start, known = t, seams[t]
            d = bool(done[r, t])
            tr = bool(trunc[r, t]) if trunc is not None else False
            if d or tr:
                ret = (
                    None
                    if reward is None
                    else float(reward[r, start : t + 1].sum(dtype=np.float64))
                )
                write = int(np.searchsorted(cuts, t, side="right")) - 1
                closed.append(
                    (write, r, t, (r, start, t + 1 - start, ret, tr and not d, True, known))
                )
                start, known = t + 1, True
        if start < n:
            ret = None if reward is None else float(reward[r, start:].sum(dtype=np.float64))
            opened.append((r, start, n - start, ret, False, False, known))
    return [rec for *_, rec in sorted(closed)], opened


def records(table: Any) -> list[Record]:
    return [
        (r["row"], r["start"], r["length"], r["return"], r["truncated"], r["complete"],
         r["start_known"])
        for r in table.to_records()
    ]  # fmt: skip


def check_index(v: Vault, data: dict[str, np.ndarray], **model: Any) -> list[Record]:
    """The vault's episode table (complete, then with the open ones) is the model's."""
    closed, opened = model_episodes(data, **model)
    assert records(v.episodes()) == closed
    assert records(v.episodes(include_open=True)) == closed + opened
    return closed


def model_stats(closed: list[Record], opened: list[Record]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "episodes": len(closed) + len(opened),
        "complete": len(closed),
        "open": len(opened),
        "truncated": sum(rec[4] for rec in closed),
    }
    for key, col in (("return", 3), ("length", 2)):
        values = np.array([rec[col] for rec in closed], np.float64)
        out[key] = (
            None
            if not closed
            else {
                "min": values.min(),
                "max": values.max(),
                "mean": values.mean(),
                "std": values.std(),
            }
        )
    return out


def same_stats(got: dict[str, Any], want: dict[str, Any]) -> None:
    for key in ("episodes", "complete", "open", "truncated"):
        assert got[key] == want[key], key
    for key in ("return", "length"):
        if want[key] is None:
            assert got[key] is None
        else:
            assert got[key] == pytest.approx(want[key], rel=1e-12), key


def cli(*args: Any, code: int = 0) -> Any:
    result = CliRunner().invoke(
        app, [str(a) for a in args], env={"COLUMNS": "200", "NO_COLOR": "1"}
    )
    assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
    return result


def make_vault(
    path: Path, data: dict[str, np.ndarray], cuts: list[int], restarts: tuple[int, ...] = ()
) -> Vault:
    """A vault of ``data`` appended in the pieces ``cuts``; ``restarts``: the appends made
    with ``continues=False`` (by their first timestep)."""
    with Vault.create(str(path), EXAMPLE, rows=data["t"].shape[0], chunk=CHUNK, **ROLES) as v:
        for a, b in itertools.pairwise(cuts):
            v.append(cut(data, a, b), continues=a not in restarts)
    return Vault.open(str(path))


N = 41
CUTS = [0, 1, 2, 9, 10, 17, 21, 33, 41]  # one-step appends, an episode over many chunks


# ----------------------------------------------------------------------- appends and pins
def test_appends_of_any_size_give_the_model_index_at_every_commit(tmp_path: Path) -> None:
    """Every commit's table (pinned), in index order, with the open episodes, its statistics,
    and every episode read by position, by table row and by iteration."""
    data = flags(ROWS, N, seed=1)
    v = make_vault(tmp_path / "v", data, CUTS)
    for i, stop in enumerate(CUTS):
        pinned = Vault.open(str(tmp_path / "v"), at=i)
        part = cut(data, 0, stop)
        closed = check_index(pinned, part, cuts=CUTS)
        _, opened = model_episodes(part, cuts=CUTS)
        same_stats(episode_stats(pinned.episodes(include_open=True)), model_stats(closed, opened))
    closed, opened = model_episodes(data, cuts=CUTS)
    assert len(closed) > 20
    assert {1, 3} <= {rec[2] for rec in closed}
    assert not any(rec[0] == 0 for rec in opened)  # row 0 ended on the last step
    table = v.episodes()
    for i, (row, start, length, *_) in enumerate(closed):
        for one in (v.read_episode(i), v.read_episode(table[i]), v.read_episode(i - len(closed))):
            for key in data:
                np.testing.assert_array_equal(one[key], data[key][row, start : start + length])
    iterated = list(v.iter_episodes(table[table.truncated], leaves=["t"]))
    want = [data["t"][r, s : s + n] for r, s, n, _, tr, *_ in closed if tr]
    assert len(iterated) == len(want) > 0
    for got, expect in zip(iterated, want, strict=True):
        np.testing.assert_array_equal(got["t"], expect)
    with pytest.raises(
        VaultReadError,
        match=re.escape(
            f"episode {len(closed)} out of range; {len(closed)} complete episodes are committed"
        ),
    ):
        v.read_episode(len(closed))


def test_the_episodes_and_stats_commands_agree_with_the_model(tmp_path: Path) -> None:
    data = flags(ROWS, N, seed=2)
    make_vault(tmp_path / "v", data, CUTS)
    for at, stop in ((None, N), (3, CUTS[3]), (6, CUTS[6])):
        pin = [] if at is None else ["--at", at]
        closed, opened = model_episodes(cut(data, 0, stop), cuts=CUTS)
        doc = json.loads(
            cli("episodes", tmp_path / "v", "--json", "--open", "--head", 0, *pin).stdout
        )
        assert (doc["episodes"], doc["open_episodes"]) == (len(closed), len(opened))
        assert [tuple(r.values()) for r in doc["records"]] == closed + opened
        stats = json.loads(cli("stats", tmp_path / "v", "--json", *pin).stdout)
        want = model_stats(closed, opened)
        assert (stats["episodes"], stats["open_episodes"], stats["truncated_episodes"]) == (
            want["complete"], want["open"], want["truncated"],
        )  # fmt: skip
        assert stats["episode_length"] == pytest.approx(want["length"], rel=1e-12)
        assert stats["episode_return"] == pytest.approx(want["return"], rel=1e-12)
    closed, _ = model_episodes(data, cuts=CUTS)
    longest = sorted(closed, key=lambda rec: -rec[2])[:4]  # a stable sort, as the table's
    doc = json.loads(
        cli("episodes", tmp_path / "v", "--json", "--sort", "length", "--head", 4).stdout
    )
    assert [tuple(r.values()) for r in doc["records"]] == longest
    text = cli("episodes", tmp_path / "v", "--open").stdout
    assert f"{len(closed)} complete episodes and {ROWS - 1} open" in text


def test_a_vault_without_any_episode_end(tmp_path: Path) -> None:
    data = flags(2, 12, seed=3)
    data["done"][:] = False
    data["trunc"][:] = False
    v = make_vault(tmp_path / "v", data, [0, 5, 12])
    check_index(v, data)
    assert len(v.episodes()) == 0
    assert len(v.episodes(include_open=True)) == 2
    same_stats(episode_stats(v.episodes(include_open=True)), model_stats(*model_episodes(data)))
    with pytest.raises(
        VaultReadError, match=re.escape("episode 0 out of range; 0 complete episodes are committed")
    ):
        v.read_episode(0)
    assert list(v.iter_episodes()) == []
    # every window is inside the one open episode of its row
    with v.as_dataset(1, 12, episode_aware=True, shuffle=False) as stream:
        assert sorted((int(b.row[0]), int(b.start[0])) for b in stream) == [(0, 0), (1, 0)]
    doc = json.loads(cli("stats", tmp_path / "v", "--json").stdout)
    assert doc["episodes"] == 0
    assert doc["open_episodes"] == 2
    assert doc["episode_return"] is None
    assert doc["episode_length"] is None
    out = cli("subsample", tmp_path / "v", "--out", tmp_path / "sub", code=1).output
    assert "no complete episode passes the filters; nothing written" in out
    assert not (tmp_path / "sub").exists()


def test_restart_seams_drop_the_open_episodes(tmp_path: Path) -> None:
    """``append(..., continues=False)`` drops every row's open episode; the new ones start
    there with a known start, and no episode runs across."""
    data = flags(ROWS, 30, seed=4)
    v = make_vault(tmp_path / "v", data, [0, 7, 12, 19, 30], restarts=(12, 19))
    assert v.seams == [Seam(12, 0), Seam(19, 0)]
    closed = check_index(v, data, cuts=[0, 7, 12, 19, 30], seams={12: True, 19: True})
    assert not any(s < a < s + n for _, s, n, *_ in closed for a in (12, 19))


# ----------------------------------------------------------------------------- buffers
def test_buffer_writes_across_ring_wraps_resumes_and_an_overrun(tmp_path: Path) -> None:
    """A trajectory buffer of 7 slots per row, 3 timesteps per add, written after one or two
    adds (its ring wraps between writes), blocking or not, the writer closed and reopened,
    then an overrun saved with ``on_overrun="save_surviving"``: the vault holds the history
    less what was lost, and its index is the model's over what it holds, with the seam."""
    import jax
    import jax.numpy as jnp

    import buffers as fbx

    buf = fbx.make_trajectory_buffer(
        add_batch_size=ROWS, sample_batch_size=1, sample_sequence_length=1, period=1,
        min_length_time_axis=1, max_length_time_axis=7,
    )  # fmt: skip
    add = jax.jit(buf.add)
    history = flags(ROWS, 3 * 16, seed=5)
    state = buf.init(jax.tree.map(jnp.asarray, EXAMPLE))
    path = str(tmp_path / "v")
    v = Vault.create(path, state, chunk=CHUNK, **ROLES)
    step = 0

    def add_one() -> None:
        nonlocal state, step
        state = add(state, jax.tree.map(jnp.asarray, cut(history, 3 * step, 3 * step + 3)))
        step += 1

    for i, adds in enumerate([1, 2, 1, 1, 2, 2, 1, 2]):  # at most 6 timesteps between writes
        for _ in range(adds):
            add_one()
        v.write(state, block=i % 2 == 1)
        if i in (2, 5):
            v.close()
            v = Vault.open(path, mode="a")
    saved = 3 * step
    for _ in range(3):  # 9 timesteps: the oldest 2 are overwritten before the write
        add_one()
    assert v.write(state, on_overrun="save_surviving") == 7
    add_one()
    v.write(state, block=False)
    v.close()
    r = Vault.open(path)
    kept = np.r_[0:saved, saved + 2 : 3 * step]
    stored = {k: x[:, kept] for k, x in history.items()}
    assert r.seams == [Seam(saved, 2)]
    for key, x in r.read_numpy().items():
        np.testing.assert_array_equal(x, stored[key], err_msg=key)
    closed, opened = model_episodes(stored, seams={saved: False})
    assert sorted(records(r.episodes())) == sorted(closed)
    assert records(r.episodes(include_open=True))[len(closed) :] == opened
    assert not r.episodes().start_known.all()  # the episodes that began in the lost steps


def two_runs() -> tuple[Any, Any]:
    """Two one-row trajectory buffers of 8 slots, 4 timesteps each: the first run (t 0..3, no
    end) and a second, new one (t 100..103, an episode ending at 102)."""
    import jax
    import jax.numpy as jnp

    import buffers as fbx

    buf = fbx.make_trajectory_buffer(
        add_batch_size=1, sample_batch_size=1, sample_sequence_length=1, period=1,
        min_length_time_axis=1, max_length_time_axis=8,
    )  # fmt: skip
    add = jax.jit(buf.add)
    empty = buf.init({"t": jnp.int32(0), "done": jnp.bool_(False)})
    first = add(empty, {"t": jnp.arange(4)[None], "done": jnp.zeros((1, 4), bool)})
    ends = jnp.array([[False, False, True, False]])
    return first, add(empty, {"t": jnp.arange(100, 104)[None], "done": ends})


def test_a_new_buffer_written_after_a_buffer_starts_apart(tmp_path: Path) -> None:
    """The reference case: after a buffer's writes, a new buffer written with
    ``new_buffer=True`` is joined by a seam, its rows do not continue the vault's open
    episode (dropped), and the first episode it ends has an unknown start."""
    first, second = two_runs()
    with Vault.create(str(tmp_path / "v"), first, done_leaf="done") as v:
        v.write(first)
        v.write(second, new_buffer=True)
        assert v.seams == [Seam(4, 0)]
        assert records(v.episodes(include_open=True)) == [
            (0, 4, 3, None, False, True, False),
            (0, 7, 1, None, False, False, True),
        ]


def test_a_new_buffer_written_after_arrays_starts_apart(tmp_path: Path) -> None:
    """As above, with the vault's first timesteps appended as arrays: ``append`` forgets the
    buffer counter "so a later write(state) saves all that buffer holds (as with
    new_buffer=True)"; the buffer's rows must not continue the arrays' open episode."""
    first, second = two_runs()
    with Vault.create(str(tmp_path / "v"), first, done_leaf="done") as v:
        v.append({"t": np.arange(4, dtype=np.int32)[None], "done": np.zeros((1, 4), bool)})
        v.write(second, new_buffer=True)
        # t 0..3 (appended) and 100..102 (the new buffer) are not one episode
        assert records(v.episodes(include_open=True)) == [
            (0, 4, 3, None, False, True, False),
            (0, 7, 1, None, False, False, True),
        ]
        assert v.seams == [Seam(4, 0)]


# ------------------------------------------------------------------------ episode buffers
def window_model(done: np.ndarray, total: int, t_len: int, seq: int, pad: bool) -> set[Any]:
    """(row, slot) where a sampleable window ends, by brute force over the whole history of
    ``total`` timesteps (the ring holds the last ``t_len``)."""
    out = set()
    for r in range(done.shape[0]):
        starts = [0] + [i + 1 for i in range(total) if done[r, i]]
        for end in range(max(0, total - t_len), total):
            step = end - max(s for s in starts if s <= end)
            if end - min(step, seq - 1) < total - t_len:  # its first step was overwritten
                continue
            if step >= seq - 1 or (pad and done[r, end]):
                out.add((r, end % t_len))
    return out


def window_ends(state: Any, rows: int, t_len: int) -> set[Any]:
    nodes = np.asarray(state.sum_tree_state.nodes)
    leaves = nodes[nodes.size // 2 :][: rows * t_len].reshape(rows, t_len)
    assert set(np.unique(leaves).tolist()) <= {0.0, 1.0}
    return {(r, s) for r, s in zip(*np.nonzero(leaves), strict=True)}


def episode_buffer(rows: int, t_len: int, seq: int, pad: bool) -> Any:
    import buffers as fbx

    return fbx.make_episode_buffer(
        add_batch_size=rows, sample_batch_size=32, sample_sequence_length=seq,
        min_length_time_axis=seq, max_length_time_axis=t_len, pad=pad,
    )  # fmt: skip


def test_the_episode_buffer_over_ring_wraps_samples_the_model_windows(tmp_path: Path) -> None:
    """Two rows ending episodes at different times, the ring wrapping over episodes: the
    windows that can be drawn are the model's after every add, and every drawn window (the
    padded ones too) lies in one episode, its data contiguous; a vault written from it holds
    the model's episodes."""
    import jax
    import jax.numpy as jnp

    rows, t_len, seq = 2, 6, 3
    eb = episode_buffer(rows, t_len, seq, pad=True)
    add, sample = jax.jit(eb.add), jax.jit(eb.sample)
    history = flags(rows, 2 * 9, seed=6)
    done = history["done"] | history["trunc"]
    state = eb.init(jax.tree.map(jnp.asarray, EXAMPLE))
    v = Vault.create(str(tmp_path / "v"), state, **ROLES)
    for k in range(9):
        batch = cut(history, 2 * k, 2 * k + 2)
        batch["done"] = batch["done"] | batch["trunc"]  # the buffer's one end flag
        state = add(state, jax.tree.map(jnp.asarray, batch))
        assert window_ends(state, rows, t_len) == window_model(done, 2 * k + 2, t_len, seq, True)
        if k % 3 == 2:
            v.write(state)
        if not bool(eb.can_sample(state)):
            continue
        drawn = sample(state, jax.random.key(k))
        t, mask = np.asarray(drawn.experience["t"]), np.asarray(drawn.mask)
        for w, m in zip(t, mask, strict=True):
            got = w[m]
            row, first = divmod(int(got[0]), 1000)
            assert np.array_equal(got, 1000 * row + np.arange(first, first + got.size))
            assert not done[row, first : first + got.size - 1].any()
            assert m.all() or done[row, first + got.size - 1]  # padding only after an end
    v.close()
    written = Vault.open(str(tmp_path / "v"))
    assert written.committed_length == 18
    assert written.seams == []
    # the vault's done leaf is the buffer's (done or truncated): nothing ends by truncation
    check_index(written, dict(history, done=done), cuts=[0, 6, 12, 18])


def test_from_state_of_a_wrapped_state_samples_no_partial_episode_whole() -> None:
    """``pad=True`` samples "whole episodes shorter than the window". A trajectory buffer
    whose ring wrapped has lost the beginning of its oldest episode: rebuilt by
    ``from_state``, it must offer the windows the live episode buffer offers after the same
    adds (the model's), not that fragment padded."""
    import jax
    import jax.numpy as jnp

    import buffers as fbx

    rows, t_len, seq = 1, 6, 4
    eb = episode_buffer(rows, t_len, seq, pad=True)
    tb = fbx.make_trajectory_buffer(
        add_batch_size=rows, sample_batch_size=1, sample_sequence_length=1, period=1,
        min_length_time_axis=1, max_length_time_axis=t_len,
    )  # fmt: skip
    example = {"t": jnp.int32(0), "done": jnp.bool_(False)}
    done = np.zeros((1, 9), bool)
    done[0, [4, 8]] = True  # episodes t 0..4 and 5..8; the ring keeps t 3..8
    batch = {"t": jnp.arange(9, dtype=jnp.int32)[None], "done": jnp.asarray(done)}
    live = eb.init(example)
    traj = tb.init(example)
    live_add, traj_add = jax.jit(eb.add), jax.jit(tb.add)
    for lo, hi in ((0, 5), (5, 9)):
        part = jax.tree.map(lambda x, lo=lo, hi=hi: x[:, lo:hi], batch)
        live, traj = live_add(live, part), traj_add(traj, part)
    want = window_model(done, 9, t_len, seq, pad=True)
    assert window_ends(live, rows, t_len) == want == {(0, 2)}  # t 5..8; not t 3..4
    rebuilt = jax.jit(eb.from_state)(traj)
    drawn = jax.jit(eb.sample)(rebuilt, jax.random.key(0))
    firsts = {int(w[0]) for w in np.asarray(drawn.experience["t"])}
    assert firsts == {5}, firsts  # never the fragment t 3..4 (its t 0..2 were overwritten)
    assert window_ends(rebuilt, rows, t_len) == want


def test_from_state_of_a_vault_read_never_crosses_a_seam(tmp_path: Path) -> None:
    """The offline path of the docs (``episodes.from_state(vault.read())``, "windows that
    never cross an episode end") over a vault with a restart seam: the vault's index drops the
    episode open at the seam and starts a new one there, and its episode-aware stream draws
    no window across it; the episode buffer given the seams (``restarts=``) must not either."""
    import jax

    data = flags(1, 12, seed=7)
    data["done"][:] = False
    data["trunc"][:] = False
    v = make_vault(tmp_path / "v", data, [0, 6, 12], restarts=(6,))
    assert v.seams == [Seam(6, 0)]
    assert records(v.episodes(include_open=True)) == [
        (0, 6, 6, float(data["rew"][0, 6:].sum(dtype=np.float64)), False, False, True)
    ]
    with v.as_dataset(1, 3, episode_aware=True, shuffle=False) as stream:
        starts = [int(b.start[0]) for b in stream]
    assert starts == [0, 1, 2, 3, 6, 7, 8, 9]  # none across the seam
    eb = episode_buffer(1, 12, 3, pad=False)
    state = jax.jit(eb.from_state)(v.read(), restarts=[s.at for s in v.seams])
    drawn = jax.jit(eb.sample)(state, jax.random.key(0))
    firsts = sorted({int(w[0]) for w in np.asarray(drawn.experience["t"])})
    assert firsts == starts, firsts  # 4 and 5 are windows t 4..6 and 5..7, across the seam


# ------------------------------------------------------------------------------- streams
def test_episode_aware_streams_and_grain_sources_yield_the_model_windows(
    tmp_path: Path,
) -> None:
    """Every window of an epoch once, none across an episode end or a seam, each holding the
    data of its place: options varied (sequence length, stride, rows, block shape, shuffle,
    interleave) and two processes sharing the epoch."""
    data = flags(ROWS, 37, seed=8)
    v = make_vault(tmp_path / "v", data, [0, 5, 11, 20, 26, 37], restarts=(11, 26))
    seams = [11, 26]
    ends = data["done"] | data["trunc"]

    def brute(seq: int, stride: int, rows: list[int] | None) -> set[tuple[int, int]]:
        return {
            (r, t)
            for r in (range(ROWS) if rows is None else rows)
            for t in range(0, 37 - seq + 1, stride)
            if not any(t < a < t + seq for a in seams) and not ends[r, t : t + seq - 1].any()
        }

    cases = [
        (1, 1, None, None, False, 1), (2, 1, None, 4, True, 2), (3, 2, [2, 0], 5, True, 1),
        (4, 1, [1], None, False, 2), (4, 3, None, 8, True, 1), (6, 1, None, 6, False, 1),
    ]  # fmt: skip
    for seq, stride, rows, block, shuffle, interleave in cases:
        want = brute(seq, stride, rows)
        got = []
        options = {"stride": stride, "rows": rows, "block_timesteps": block, "prefetch": 0}
        with v.as_dataset(
            4, seq, shuffle=shuffle, seed=seq, episode_aware=True, interleave=interleave,
            drop_remainder=False, **options,
        ) as stream:  # fmt: skip
            for b in stream:
                for i, (r, t) in enumerate(zip(b.row.tolist(), b.start.tolist(), strict=True)):
                    np.testing.assert_array_equal(b.experience["t"][i], data["t"][r, t : t + seq])
                    got.append((r, t))
        assert sorted(got) == sorted(want), (seq, stride, rows, block)
        shared: list[tuple[int, int]] = []
        for p in range(2):
            with v.as_dataset(
                2, seq, seed=1, episode_aware=True, process_index=p, process_count=2, **options
            ) as stream:
                shared += [(r, t) for b in stream for r, t in zip(b.row, b.start, strict=True)]
        assert len(set(shared)) == len(shared)
        assert set(shared) <= want
        assert len(want) - len(shared) < 2  # fewer than one per process are dropped
        source = grain_source(v, seq, stride=stride, rows=rows, episode_aware=True)
        assert sorted(source.where(i)[1:] for i in range(len(source))) == sorted(want)
        last = source[len(source) - 1]
        _, r, t = source.where(len(source) - 1)
        np.testing.assert_array_equal(last["t"], data["t"][r, t : t + seq])


# ------------------------------------------------------------------------------- derive
def test_derived_slices_cut_episodes_as_the_model_says(tmp_path: Path) -> None:
    """A slice's first episode of each row has a known start exactly where the step before
    ended an episode (or at 0, or at a restart seam); one running at its stop stays open;
    the returns are those of the steps inside; the ``vault slice`` command gives the same."""
    data = flags(ROWS, 30, seed=9)
    src = make_vault(tmp_path / "src", data, [0, 8, 14, 30], restarts=(14,))
    ends = data["done"] | data["trunc"]
    spans = [(0, 30), (1, 30), (5, 6), (6, 21), (9, 17), (14, 30), (15, 16), (29, 30)]
    for k, (lo, hi) in enumerate(spans):
        for rows in ([0, 1, 2], [2, 0])[k % 2 :]:
            out = derive_slice(src, tmp_path / f"s{k}-{len(rows)}", rows=rows, start=lo, stop=hi)
            part = {key: x[rows, lo:hi] for key, x in data.items()}
            known0 = [lo in (0, 14) or bool(ends[r, lo - 1]) for r in rows]
            seams = {14 - lo: True} if lo < 14 < hi else {}
            assert out.seams == [Seam(at, 0) for at in seams]
            closed, opened = model_episodes(part, seams=seams, known0=known0)
            assert sorted(records(out.episodes())) == sorted(closed), (lo, hi, rows)
            assert records(out.episodes(include_open=True))[len(closed) :] == opened
    cli("slice", tmp_path / "src", "--out", tmp_path / "cli", "--rows", "2,0", "--time", "6:21")
    by_cli = Vault.open(str(tmp_path / "cli"))
    by_api = Vault.open(str(tmp_path / "s3-2"))  # the same slice by the API
    assert records(by_cli.episodes(include_open=True)) == records(
        by_api.episodes(include_open=True)
    )


def test_derive_episodes_and_combine_keep_every_episode(tmp_path: Path) -> None:
    """Selected episodes (terminated or truncated, one step long, both flags) copied into one
    row come back with their lengths, returns and truncation, in start order, each holding its
    source data; combining two vaults keeps both indexes and drops the first's open ones."""
    data = flags(ROWS, N, seed=10)
    src = make_vault(tmp_path / "src", data, CUTS)
    table = src.episodes()
    for name, chosen in (
        ("all", table), ("truncated", table[table.truncated]), ("short", table[table.length == 1]),
        ("both", table[(table.row == 2) & (table.start + table.length == 6)]),
    ):  # fmt: skip
        assert len(chosen) > 0, name
        out = derive_episodes(src, tmp_path / name, chosen)
        ordered = chosen[np.lexsort((chosen.row, chosen.start))]
        got = out.episodes()
        assert out.rows == 1
        assert out.committed_length == ordered.transitions
        assert got.length.tolist() == ordered.length.tolist(), name
        assert got.returns.tolist() == ordered.returns.tolist(), name
        assert got.truncated.tolist() == ordered.truncated.tolist(), name
        assert len(out.episodes(include_open=True)) == len(got)
        for i in range(len(ordered)):
            np.testing.assert_array_equal(
                out.read_episode(i)["t"], src.read_episode(ordered[i])["t"]
            )
    second = flags(ROWS, 12, seed=11)
    make_vault(tmp_path / "b", second, [0, 12])
    both = combine([tmp_path / "src", tmp_path / "b"], tmp_path / "c")
    assert both.seams == [Seam(N, 0)]
    joined = {k: np.concatenate([data[k], second[k]], axis=1) for k in data}
    check_index(both, joined, cuts=[0, N, N + 12], seams={N: True})


# ---------------------------------------------------------------------------- converters
def test_a_minari_round_trip_keeps_terminated_and_truncated_episodes(tmp_path: Path) -> None:
    """A vault of three rows (an end on the first step, both flags on one step, one-step
    episodes, a restart seam) exported to Minari and imported back: the same complete
    episodes in the index's order, terminated and truncated told apart, the open ones out."""
    pytest.importorskip("minari")
    from vault.converters import export_minari, import_minari

    data = flags(ROWS, 24, seed=12)
    obs = np.arange(ROWS * 25, dtype=np.float32).reshape(ROWS, 25, 1)
    arrays = {
        "observations": obs[:, :-1], "next_observations": obs[:, 1:],
        "actions": data["obs"], "rewards": data["rew"],
        "terminations": data["done"], "truncations": data["trunc"],
    }  # fmt: skip
    example = {k: np.zeros(x.shape[2:], x.dtype) for k, x in arrays.items()}
    roles = {"done_leaf": "terminations", "truncated_leaf": "truncations", "reward_leaf": "rewards"}
    with Vault.create(str(tmp_path / "v"), example, rows=ROWS, **roles) as v:
        v.append({k: x[:, :9] for k, x in arrays.items()})
        v.append({k: x[:, 9:] for k, x in arrays.items()}, continues=False)
    v = Vault.open(str(tmp_path / "v"))
    model = {"done": data["done"], "trunc": data["trunc"], "rew": data["rew"]}
    closed = check_index(v, model, cuts=[0, 9, 24], seams={9: True})
    where = export_minari(v, "joints/episodes-v0", root=tmp_path / "minari")
    back = import_minari(where, str(tmp_path / "back"))
    got = records(back.episodes(include_open=True))
    assert [rec[2:6] for rec in got] == [rec[2:6] for rec in closed]
    assert any(rec[4] for rec in got)
    assert not all(rec[4] for rec in got)
    both = [i for i, rec in enumerate(closed) if rec[0] == 2 and rec[1] + rec[2] == 6]
    assert len(both) == 1
    assert not got[both[0]][4]
    for i, (row, start, length, *_) in enumerate(closed):
        episode = back.read_episode(i)
        np.testing.assert_array_equal(episode["actions"], data["obs"][row, start : start + length])


def test_d4rl_and_ogbench_flags_on_edge_steps(tmp_path: Path) -> None:
    """D4RL: a terminal on the first step, both flags on one step, a timeout right after,
    then no end: the model's episodes, the last one open. OGBench: trajectories of zero
    transitions (one state) are episodes of one step."""
    h5py = pytest.importorskip("h5py")
    from vault.converters import import_d4rl, import_ogbench

    n = 10
    terminals, timeouts = np.zeros(n, bool), np.zeros(n, bool)
    terminals[[0, 3, 6]] = True
    timeouts[[3, 4]] = True
    with h5py.File(tmp_path / "d.hdf5", "w") as f:
        f["observations"] = np.arange(n, dtype=np.float32)[:, None]
        f["actions"] = np.zeros((n, 1), np.float32)
        f["rewards"] = np.arange(n, dtype=np.float32)
        f["terminals"], f["timeouts"] = terminals, timeouts
    v = import_d4rl(tmp_path / "d.hdf5", str(tmp_path / "d4rl"))
    model = {"done": terminals[None], "trunc": timeouts[None], "rew": np.arange(n)[None] * 1.0}
    closed = check_index(v, model)
    assert [rec[2] for rec in closed] == [1, 3, 1, 2]
    assert [rec[4] for rec in closed] == [
        False,
        False,
        True,
        False,
    ]
    lengths = [0, 2, 0, 3]  # transitions per trajectory: each has one state more
    count = sum(k + 1 for k in lengths)
    ends = np.zeros(count, bool)
    ends[np.cumsum([k + 1 for k in lengths]) - 1] = True
    np.savez_compressed(
        tmp_path / "og.npz", observations=np.arange(count, dtype=np.float32)[:, None],
        actions=np.zeros((count, 1), np.float32), terminals=ends,
    )  # fmt: skip
    og = import_ogbench(tmp_path / "og.npz", str(tmp_path / "og"), val_dest=False)
    assert [(rec[1], rec[2]) for rec in records(og.episodes(include_open=True))] == [
        (0, 1), (1, 3), (4, 1), (5, 4),
    ]  # fmt: skip
