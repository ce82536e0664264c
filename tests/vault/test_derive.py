"""derive_slice / derive_episodes / combine: exact content, rebuilt episode index, atomic
destinations, sources untouched."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pytest

import vault as vlt
from vault import Vault, VaultExistsError, VaultReadError, VaultStructureError

ROWS = 3
EXAMPLE = {"obs": np.zeros(2, np.float32), "done": np.bool_(False), "reward": np.float32(0)}


def fill(path: Path, total: int = 40, seed: int = 0, rows: int = ROWS) -> tuple[Vault, dict]:
    rng = np.random.default_rng(seed)
    t = np.arange(total, dtype=np.float32)
    data = {
        "obs": np.stack(
            [
                np.broadcast_to(t, (rows, total)),
                np.broadcast_to(np.arange(rows)[:, None], (rows, total)),
            ],
            -1,
        ).astype(np.float32)
        + seed * 1000,
        "done": rng.random((rows, total)) < 0.25,
        "reward": rng.integers(-2, 5, (rows, total)).astype(np.float32),
    }
    v = Vault.create(str(path), EXAMPLE, rows=rows, done_leaf="done", reward_leaf="reward")
    for a, b in ((0, 7), (7, 30), (30, total)):
        v.append({k: x[:, a:b] for k, x in data.items()})
    v.close()
    return Vault.open(str(path)), data


def reference(done: np.ndarray, reward: np.ndarray, known: np.ndarray) -> list[tuple]:
    out = []
    for r in range(done.shape[0]):
        start, ret, ok = 0, 0.0, bool(known[r])
        for t in range(done.shape[1]):
            ret += float(reward[r, t])
            if done[r, t]:
                out.append((r, start, t + 1 - start, ret, ok))
                start, ret, ok = t + 1, 0.0, True
    return sorted(out)


def rows_of(table: vlt.EpisodeTable) -> list[tuple]:
    return sorted(
        (int(r), int(s), int(n), float(x), bool(k))
        for r, s, n, x, k in zip(
            table.row, table.start, table.length, table.returns, table.start_known, strict=True
        )
    )


def digest(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(path.rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(path)).encode() + f.read_bytes())
    return h.hexdigest()


def test_slice_rows_and_time(tmp_path):
    src, data = fill(tmp_path / "src")
    before = digest(tmp_path / "src")
    out = vlt.derive_slice(tmp_path / "src", str(tmp_path / "out"), rows=[2, 0], start=5, stop=33)
    assert out.rows == 2
    assert out.committed_length == 28
    got = out.read_numpy()
    for k in data:
        np.testing.assert_array_equal(got[k], data[k][[2, 0], 5:33])
    # an episode running at t=5 has an unknown start; everything else is exact
    done, reward = data["done"][[2, 0], 5:33], data["reward"][[2, 0], 5:33]
    known = data["done"][[2, 0], 4]
    assert rows_of(out.episodes()) == reference(done, reward, known)
    assert out.metadata["derived_from"]["op"] == "slice"
    assert digest(tmp_path / "src") == before
    # a vault derived from a derived one records the whole chain, nearest first
    again = vlt.derive_slice(out, str(tmp_path / "again"), start=1)
    chain = again.metadata["derived_from"]
    assert (chain["source"], chain["op"]) == (out.location, "slice")
    assert chain["derived_from"] == out.metadata["derived_from"]
    with pytest.raises(VaultExistsError, match="already exists"):
        vlt.derive_slice(src, str(tmp_path / "out"))


def test_derive_selected_episodes(tmp_path):
    src, data = fill(tmp_path / "src", total=60)
    chosen = src.episodes().select(top_k=5)
    out = vlt.derive_episodes(src, str(tmp_path / "best"), chosen)
    assert out.rows == 1
    assert out.committed_length == chosen.transitions
    order = np.lexsort((chosen.row, chosen.start))
    expect = {
        k: np.concatenate(
            [
                x[r, s : s + n]
                for r, s, n in zip(
                    chosen.row[order], chosen.start[order], chosen.length[order], strict=True
                )
            ]
        )
        for k, x in data.items()
    }
    got = out.read_numpy()
    for k in data:
        np.testing.assert_array_equal(got[k][0], expect[k])
    table = out.episodes(include_open=True)
    assert table.complete.all()
    assert table.length.tolist() == chosen.length[order].tolist()
    np.testing.assert_allclose(table.returns, chosen.returns[order])
    with pytest.raises(VaultReadError, match="complete episodes"):
        vlt.derive_episodes(src, str(tmp_path / "x"), src.episodes(include_open=True))
    # a selection that no episode passed is refused, not made into an empty vault
    none = src.episodes().select(min_return=1e9)
    assert len(none) == 0
    with pytest.raises(vlt.VaultArgumentError, match=r"no episode.*nothing was written"):
        vlt.derive_episodes(src, str(tmp_path / "none"), none)
    assert not (tmp_path / "none").exists()


def test_combine_concatenates_in_time_and_cuts_episodes_at_seams(tmp_path):
    a, da = fill(tmp_path / "a", total=23, seed=1)
    b, db = fill(tmp_path / "b", total=40, seed=2)
    out = vlt.combine([str(tmp_path / "a"), b], str(tmp_path / "ab"))
    assert out.committed_length == 63
    got = out.read_numpy()
    for k in da:
        np.testing.assert_array_equal(got[k], np.concatenate([da[k], db[k]], axis=1))
    want = reference(da["done"], da["reward"], np.ones(ROWS, bool))
    want += [
        (r, s + 23, n, x, k)
        for r, s, n, x, k in reference(db["done"], db["reward"], np.ones(ROWS, bool))
    ]
    assert rows_of(out.episodes()) == sorted(want)
    assert out.gaps == [{"at": 23, "lost": 0}]  # the seam is recorded: a restart
    report = vlt.verify(out)
    assert report.ok
    assert report.warnings == []
    c = Vault.create(str(tmp_path / "c"), EXAMPLE, rows=ROWS + 1)
    with pytest.raises(VaultStructureError, match="the vaults to combine differ") as err:
        vlt.combine([a, c], str(tmp_path / "bad"))
    assert any(re.search(r"rows: expected 3, got 4", p) for p in err.value.problems)
    assert any("episode leaves" in p for p in err.value.problems)
    assert not (tmp_path / "bad").exists()


def test_interrupted_derive_leaves_no_destination(tmp_path):
    src, _ = fill(tmp_path / "src")

    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        vlt.derive_slice(src, str(tmp_path / "out"), progress=interrupt)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no partial directory left


def test_gaps_are_carried_and_cut_episodes(tmp_path):
    import jax
    import jax.numpy as jnp

    import buffers as fbx

    buf = fbx.make_trajectory_buffer(ROWS, 1, 1, 1, 1, max_length_time_axis=4)
    state = buf.init(jax.tree.map(jnp.asarray, EXAMPLE))
    v = Vault.create(str(tmp_path / "src"), state, done_leaf="done")
    step = {k: np.zeros((ROWS, 1), x.dtype) for k, x in EXAMPLE.items()}
    end = dict(step, done=np.ones((ROWS, 1), bool))
    for s in (step, step, end):
        state = buf.add(
            state,
            {
                k: x[:, :] if k != "obs" else np.zeros((ROWS, 1, 2), np.float32)
                for k, x in s.items()
            },
        )
    v.write(state)
    for _ in range(6):
        state = buf.add(state, dict(step, obs=np.zeros((ROWS, 1, 2), np.float32)))
    state = buf.add(state, dict(end, obs=np.zeros((ROWS, 1, 2), np.float32)))
    v.write(state, on_overrun="save_surviving")
    v.close()
    out = vlt.derive_slice(str(tmp_path / "src"), str(tmp_path / "out"), start=1)
    assert out.gaps == [{"at": 2, "lost": 3}]
    table = out.episodes()
    assert table.start.tolist() == [0] * ROWS + [2] * ROWS
    assert table.start_known.tolist() == [False] * (2 * ROWS)


def test_slices_carry_restart_seams_with_their_episode_starts(tmp_path):
    _, da = fill(tmp_path / "a", total=23, seed=1)
    _, db = fill(tmp_path / "b", total=40, seed=2)
    vlt.combine([str(tmp_path / "a"), str(tmp_path / "b")], str(tmp_path / "ab"))
    # across the seam: kept at its new place; episodes after it start there, known
    out = vlt.derive_slice(str(tmp_path / "ab"), str(tmp_path / "across"), rows=[2, 0], start=20)
    assert out.gaps == [{"at": 3, "lost": 0}]
    after = reference(db["done"][[2, 0]], db["reward"][[2, 0]], np.ones(2, bool))
    got = [e for e in rows_of(out.episodes()) if e[1] >= 3]
    assert got == sorted((r, s + 3, n, x, k) for r, s, n, x, k in after)
    report = vlt.verify(out)
    assert report.ok
    assert report.warnings == []
    # starting on the seam: every row starts a known episode at 0, whatever done was at 22
    assert not da["done"][:, 22].all()
    out = vlt.derive_slice(str(tmp_path / "ab"), str(tmp_path / "on"), start=23)
    assert out.gaps == []
    assert rows_of(out.episodes()) == reference(db["done"], db["reward"], np.ones(ROWS, bool))


def test_a_dataset_slice_past_a_short_shard_names_the_shard(tmp_path):
    ds = vlt.Dataset.create(str(tmp_path / "ds"), {"x": np.zeros(2, np.float32)}, rows=1)
    with ds.shard("a") as v:
        v.append({"x": np.zeros((1, 5, 2), np.float32)})
    ds.shard("b").close()  # nothing written yet
    with pytest.raises(vlt.VaultReadError, match=re.escape("shard 'b' (0 timesteps): start (1)")):
        vlt.derive_slice(vlt.Dataset.open(str(tmp_path / "ds")), str(tmp_path / "out"), start=1)
    assert not (tmp_path / "out").exists()
