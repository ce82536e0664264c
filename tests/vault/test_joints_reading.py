"""Where reading features meet: streams, derived vaults, converters, xarray and the CLI over
vaults with seams (restarts and overrun losses), open episodes, pins and datasets of shards.

Every test builds a tiny vault from a model whose values say where they belong (row and
history step), and compares what a feature returns with ``read_numpy`` or the model exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

import buffers as fbx
import vault
from vault import Dataset, Vault, resume_stream
from vault.cli.app import app

ROWS = 2
EXAMPLE = {
    "obs": np.zeros(3, np.float32),
    "reward": np.zeros((), np.float32),
    "done": np.zeros((), bool),
    "trunc": np.zeros((), bool),
}
CHUNK = {"obs": [ROWS, 4, 3], "reward": [ROWS, 4], "done": [ROWS, 4], "trunc": [ROWS, 4]}
ROLES = {"done_leaf": "done", "truncated_leaf": "trunc", "reward_leaf": "reward"}


def history(lo: int, hi: int, rows: int = ROWS) -> dict[str, np.ndarray]:
    """History steps ``[lo, hi)`` of every row: obs says (row, step), done/trunc a pattern."""
    k = np.arange(lo, hi)[None, :]
    r = np.arange(rows)[:, None]
    obs = (1000 * r + k)[..., None] + np.array([0.0, 0.25, 0.5])
    return {
        "obs": obs.astype(np.float32),
        "reward": (0.5 * k + r + 1).astype(np.float32),
        "done": (k + r) % 5 == 4,
        "trunc": (k + 2 * r) % 11 == 10,
    }


def cat(*parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {key: np.concatenate([p[key] for p in parts], axis=1) for key in parts[0]}


def seamed(path: Path) -> tuple[Vault, dict[str, np.ndarray]]:
    """A closed vault of 30 steps per row with an overrun seam (at 3, 3 lost) and a restart
    seam (at 16), its last episodes open; and the model of what it stores."""
    buf = fbx.make_trajectory_buffer(ROWS, 1, 1, 1, 1, max_length_time_axis=4)
    add = jax.jit(buf.add)
    state = buf.init(jax.tree.map(jnp.asarray, EXAMPLE))
    v = Vault.create(str(path), state, chunk=CHUNK, **ROLES)
    k = 0
    for n, how in ((3, "error"), (7, "save_surviving")):
        for _ in range(n):
            state = add(state, jax.tree.map(jnp.asarray, history(k, k + 1)))
            k += 1
        v.write(state, on_overrun=how)
    assert v.committed_length == 7
    assert v.gaps == [{"at": 3, "lost": 3}]
    v.append(history(10, 19))
    v.append(history(19, 27), continues=False)
    v.append(history(27, 33))
    v.close()
    model = cat(history(0, 3), history(6, 10), history(10, 33))
    return Vault.open(str(path)), model


def seams_of(v: Any) -> list[int]:
    return [s.at for s in v.seams]


def valid_starts(
    d: dict[str, np.ndarray], seams: list[int], seq: int, stride: int, aware: bool, rows: Any
) -> set[tuple[int, int]]:
    """The model of an epoch's starts: (row, t) of windows inside the data, on the stride,
    across no seam and (episode-aware) with no episode end before their last step."""
    n = d["obs"].shape[1]
    out = set()
    for r in rows:
        for t in range(0, n - seq + 1, stride):
            if any(t < s <= t + seq - 1 for s in seams):
                continue
            ends = d["done"][r, t : t + seq - 1] | d["trunc"][r, t : t + seq - 1]
            if aware and ends.any():
                continue
            out.add((r, t))
    return out


def check_batches(batches: list[Any], sources: list[Any], seq: int) -> list[tuple[int, int, int]]:
    """Every sequence equals ``read_numpy`` at the place it names; returns the places."""
    whole = [s.read_numpy() for s in sources]
    seen = []
    for b in batches:
        for i in range(len(b.row)):
            src, row, t = int(b.source[i]), int(b.row[i]), int(b.start[i])
            for key, x in b.experience.items():
                want = whole[src][key][row, t : t + seq]
                np.testing.assert_array_equal(
                    np.asarray(x[i]), want, err_msg=f"{key} {src} {row} {t}"
                )
            seen.append((src, row, t))
    return seen


# ------------------------------------------------------------------------------ streams
def test_the_seamed_vault_stores_the_model(tmp_path: Path) -> None:
    v, model = seamed(tmp_path / "v")
    got = v.read_numpy()
    for key in model:
        np.testing.assert_array_equal(got[key], model[key])
    assert [(s.at, s.lost) for s in v.seams] == [(3, 3), (16, 0)]


@pytest.mark.parametrize("aware", [False, True])
@pytest.mark.parametrize("stride", [1, 2])
def test_a_shuffled_stream_over_seams_yields_each_valid_window_once(
    tmp_path: Path, aware: bool, stride: int
) -> None:
    v, model = seamed(tmp_path / "v")
    seq = 3
    with v.as_dataset(
        2, seq, shuffle=True, seed=3, episode_aware=aware, stride=stride, drop_remainder=False
    ) as stream:
        batches = list(stream)
    seen = check_batches(batches, [v], seq)
    assert len(seen) == len(set(seen))
    want = valid_starts(model, [3, 16], seq, stride, aware, range(ROWS))
    assert {(r, t) for _, r, t in seen} == want


def test_a_stream_of_some_rows_reversed_yields_those_rows_only(tmp_path: Path) -> None:
    v, model = seamed(tmp_path / "v")
    with v.as_dataset(3, 4, rows=[1], episode_aware=True, drop_remainder=False) as stream:
        seen = check_batches(list(stream), [v], 4)
    assert {(r, t) for _, r, t in seen} == valid_starts(model, [3, 16], 4, 1, True, [1])
    assert len(seen) == len(set(seen))


def test_a_pinned_stream_reads_only_its_commit(tmp_path: Path) -> None:
    v, model = seamed(tmp_path / "v")
    pin = v.commit_id
    w = Vault.open(str(tmp_path / "v"), mode="a")
    w.append(history(33, 40), continues=False)
    w.close()
    pinned = Vault.open(str(tmp_path / "v"), at=pin)
    assert pinned.committed_length == 30
    assert seams_of(pinned) == [3, 16]
    with pinned.as_dataset(4, 2, seed=1, episode_aware=True, drop_remainder=False) as stream:
        seen = check_batches(list(stream), [pinned], 2)
    assert {(r, t) for _, r, t in seen} == valid_starts(model, [3, 16], 2, 1, True, range(ROWS))


def test_a_stream_over_shards_of_different_lengths_and_seams(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    data = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    with data.shard("a") as a:
        a.append(history(0, 13))
    with data.shard("b") as b:
        b.append(history(100, 109))
        b.append(history(200, 221), continues=False)
    data = Dataset.open(str(root))
    assert data.shards == ["a", "b"]
    shards = [data.vault(name) for name in data.shards]
    seq = 3
    with data.as_dataset(
        3, seq, shuffle=True, seed=5, episode_aware=True, stride=2, drop_remainder=False
    ) as stream:
        seen = check_batches(list(stream), shards, seq)
    assert len(seen) == len(set(seen))
    want = {(0, r, t) for r, t in valid_starts(history(0, 13), [], seq, 2, True, range(ROWS))}
    b_model = cat(history(100, 109), history(200, 221))
    want |= {(1, r, t) for r, t in valid_starts(b_model, [9], seq, 2, True, range(ROWS))}
    assert set(seen) == want


def test_stacks_cut_on_the_device_equal_the_host_stream(tmp_path: Path) -> None:
    v, _ = seamed(tmp_path / "v")
    options = {"shuffle": True, "seed": 7, "episode_aware": True, "drop_remainder": False}
    with v.as_dataset(2, 3, **options) as stream:
        plain = list(stream)
    with v.as_dataset(2, 3, stack=3, cut_on_device=True, block_timesteps=8, **options) as s:
        stacked = list(s)
    with v.as_dataset(2, 3, block_timesteps=8, **options) as stream:
        small_blocks = list(stream)
    # the stacks hold the unstacked stream's batches (same blocks), in order
    flat = []
    for item in stacked:
        for j in range(item.row.shape[0]):
            flat.append(
                (
                    item.row[j],
                    item.start[j],
                    {k: np.asarray(x[j]) for k, x in item.experience.items()},
                )
            )
    assert len(flat) == len(small_blocks)
    for (row, start, exp), b in zip(flat, small_blocks, strict=True):
        np.testing.assert_array_equal(row, b.row)
        np.testing.assert_array_equal(start, b.start)
        for key in exp:
            np.testing.assert_array_equal(exp[key], np.asarray(b.experience[key]))
    check_batches(small_blocks, [v], 3)
    assert sorted(check_batches(plain, [v], 3)) == sorted(check_batches(small_blocks, [v], 3))


@pytest.mark.parametrize("stack", [None, 2])
def test_a_resumed_stream_yields_exactly_the_remaining_batches(
    tmp_path: Path, stack: int | None
) -> None:
    v, _ = seamed(tmp_path / "v")
    options = {
        "shuffle": True, "seed": 11, "episode_aware": True, "stride": 1, "block_timesteps": 8,
        "epochs": 2, "drop_remainder": False, "stack": stack,
    }  # fmt: skip
    with v.as_dataset(2, 3, **options) as stream:
        whole = list(stream)
    assert len(whole) > 6
    for cut in (1, 3, len(whole) // 2 + 1):
        with v.as_dataset(2, 3, **options) as stream:
            for _ in range(cut):
                next(stream)
            state = json.loads(json.dumps(stream.state()))
        # more data arrives; the checkpoint carries the pin
        w = Vault.open(str(tmp_path / "v"), mode="a")
        w.append(history(500, 502))
        w.close()
        with resume_stream(state) as rest:
            tail = list(rest)
        assert len(tail) == len(whole) - cut
        for a, b in zip(tail, whole[cut:], strict=True):
            np.testing.assert_array_equal(a.start, b.start)
            np.testing.assert_array_equal(a.row, b.row)
            assert a.epoch == b.epoch
            for key in a.experience:
                np.testing.assert_array_equal(
                    np.asarray(a.experience[key]), np.asarray(b.experience[key])
                )


def test_a_stream_over_a_derived_slice_across_both_seams(tmp_path: Path) -> None:
    v, model = seamed(tmp_path / "v")
    out = vault.derive_slice(v, str(tmp_path / "s"), rows=[1, 0], start=2, stop=25)
    got = out.read_numpy()
    for key in model:
        np.testing.assert_array_equal(got[key], model[key][[1, 0], 2:25])
    assert [(s.at, s.lost) for s in out.seams] == [(1, 3), (14, 0)]
    sub = {k: x[[1, 0], 2:25] for k, x in model.items()}
    with out.as_dataset(2, 3, seed=2, episode_aware=True, drop_remainder=False) as stream:
        seen = check_batches(list(stream), [out], 3)
    assert {(r, t) for _, r, t in seen} == valid_starts(sub, [1, 14], 3, 1, True, range(ROWS))


# ------------------------------------------------------------------------------ derive
def episodes_model(
    d: dict[str, np.ndarray], seams: list[tuple[int, int]], lo: int = 0
) -> list[tuple[int, int, int, float, bool, bool, bool]]:
    """(row, start, length, return, truncated, complete, start_known) of every episode
    (open ones too) of data ``d`` whose first stored step is ``lo`` of the source."""
    out = []
    n = d["done"].shape[1]
    for r in range(d["done"].shape[0]):
        start, known = 0, lo == 0
        for t in range(n):
            for at, lost in seams:
                if at == t and t > start:
                    start, known = t, lost == 0
                elif at == t and t == start and lost:
                    known = False
                elif at == t and t == start:
                    known = True
            if d["done"][r, t] or d["trunc"][r, t]:
                ret = float(np.sum(d["reward"][r, start : t + 1], dtype=np.float64))
                trunc = bool(d["trunc"][r, t] and not d["done"][r, t])
                out.append((r, start, t + 1 - start, ret, trunc, True, known))
                start, known = t + 1, True
        if start < n:
            ret = float(np.sum(d["reward"][r, start:n], dtype=np.float64))
            out.append((r, start, n - start, ret, False, False, known))
    return sorted(out)


def table_rows(table: Any) -> list[tuple[int, int, int, float, bool, bool, bool]]:
    return sorted(
        (int(r), int(s), int(n), float(x), bool(t), bool(c), bool(k))
        for r, s, n, x, t, c, k in zip(
            table.row, table.start, table.length, table.returns, table.truncated,
            table.complete, table.start_known, strict=True,
        )
    )  # fmt: skip


def test_the_episode_index_of_the_seamed_vault_matches_the_model(tmp_path: Path) -> None:
    v, model = seamed(tmp_path / "v")
    got = table_rows(v.episodes(include_open=True))
    want = episodes_model(model, [(3, 3), (16, 0)])
    assert got == want


@pytest.mark.parametrize(("lo", "hi"), [(0, 30), (2, 25), (3, 16), (4, 17), (16, 30), (5, 9)])
def test_a_slice_keeps_the_episodes_the_source_has_in_its_range(
    tmp_path: Path, lo: int, hi: int
) -> None:
    v, model = seamed(tmp_path / "v")
    out = vault.derive_slice(v, str(tmp_path / "s"), start=lo, stop=hi)
    sub = {k: x[:, lo:hi] for k, x in model.items()}
    seams = [(at - lo, lost) for at, lost in [(3, 3), (16, 0)] if lo < at < hi]
    # an episode running at lo has an unknown start, unless lo is on a restart seam
    want = episodes_model(sub, seams, lo=0 if lo in (0, 16) else lo)
    assert table_rows(out.episodes(include_open=True)) == want
    src = {
        (r, s - lo, n, x, t, c, k)
        for r, s, n, x, t, c, k in table_rows(v.episodes())
        if s >= lo and s + n <= hi and (s > lo or k)
    }
    assert src <= set(table_rows(out.episodes()))


def test_a_slice_of_a_pinned_vault_is_the_pinned_data(tmp_path: Path) -> None:
    v, model = seamed(tmp_path / "v")
    pin = v.commit_id
    w = Vault.open(str(tmp_path / "v"), mode="a")
    w.append(history(33, 37))
    w.close()
    pinned = Vault.open(str(tmp_path / "v"), at=pin)
    out = vault.derive_slice(pinned, str(tmp_path / "s"), start=10)
    assert out.committed_length == 20
    np.testing.assert_array_equal(out.read_numpy()["obs"], model["obs"][:, 10:])
    want = episodes_model({k: x[:, 10:] for k, x in model.items()}, [(6, 0)], lo=10)
    assert table_rows(out.episodes(include_open=True)) == want


def check_derived(src: Vault, table: Any, out: Vault, model: dict[str, np.ndarray]) -> None:
    """``out`` holds ``table``'s episodes of ``src`` back to back by start time, then row,
    and its index says what the source's says of each (returns recomputed exactly)."""
    order = np.lexsort((table.row, table.start))  # by start time, then row
    got = out.episodes()
    assert len(got) == len(table)
    assert got.length.tolist() == table.length[order].tolist()
    assert got.truncated.tolist() == table.truncated[order].tolist()
    data = out.read_numpy()
    t = 0
    for i in order:
        r, s, n = int(table.row[i]), int(table.start[i]), int(table.length[i])
        for key in model:
            np.testing.assert_array_equal(data[key][0, t : t + n], model[key][r, s : s + n])
        t += n
    assert out.committed_length == t
    rewards = data["reward"][0]
    starts = np.concatenate([[0], np.cumsum(got.length)[:-1]])
    sums = [
        float(np.sum(rewards[a : a + n], dtype=np.float64))
        for a, n in zip(starts, got.length, strict=False)
    ]
    assert got.returns.tolist() == sums
    assert got.returns.tolist() == table.returns[order].tolist()
    assert got.start_known.tolist() == table.start_known[order].tolist()


def pinned_seamed(tmp_path: Path) -> tuple[Vault, dict[str, np.ndarray]]:
    """The seamed vault pinned at its 30 steps, after 12 more were appended."""
    v, model = seamed(tmp_path / "v")
    pin = v.commit_id
    w = Vault.open(str(tmp_path / "v"), mode="a")
    w.append(history(33, 45))
    w.close()
    pinned = Vault.open(str(tmp_path / "v"), at=pin)
    assert pinned.committed_length == 30
    return pinned, model


def test_derived_selected_episodes_of_a_seamed_pinned_vault_are_exact(tmp_path: Path) -> None:
    pinned, model = pinned_seamed(tmp_path)
    table = pinned.episodes().select()  # complete, known start
    assert int((table.start + table.length).max()) <= 30
    check_derived(pinned, table, vault.derive_episodes(pinned, str(tmp_path / "e"), table), model)


def test_derived_episodes_keep_an_unknown_start_unknown(tmp_path: Path) -> None:
    pinned, model = pinned_seamed(tmp_path)
    table = pinned.episodes()  # every complete episode, two of them after the lost steps
    assert table.start_known.tolist().count(False) == ROWS
    check_derived(pinned, table, vault.derive_episodes(pinned, str(tmp_path / "e"), table), model)


# ------------------------------------------------------------------------------ converters
def minari_vault(path: Path, open_tail: bool) -> tuple[Vault, dict[str, np.ndarray]]:
    """A one-row vault with Minari's leaf names: episodes of next_obs[t] == obs[t + 1]."""
    example = {
        "observations": np.zeros(2, np.float32),
        "next_observations": np.zeros(2, np.float32),
        "actions": np.zeros(1, np.float32),
        "rewards": np.zeros((), np.float32),
        "terminations": np.zeros((), bool),
        "truncations": np.zeros((), bool),
    }
    lengths, ends = [4, 3, 5, 2], ["term", "trunc", "term", "trunc"]
    obs, nxt, act, rew, term, trunc = [], [], [], [], [], []
    base = 0
    for e, (n, how) in enumerate(zip(lengths, ends, strict=True)):
        o = (base + np.arange(n + 1))[:, None] + np.array([0.0, 0.5]) + 100 * e
        obs.append(o[:-1])
        nxt.append(o[1:])
        act.append((np.full((n, 1), e) + np.arange(n)[:, None]).astype(np.float32))
        rew.append(np.arange(n, dtype=np.float32) * 0.25 + e)
        te, tr = np.zeros(n, bool), np.zeros(n, bool)
        (te if how == "term" else tr)[-1] = True
        term.append(te)
        trunc.append(tr)
        base += n + 1
    if open_tail:  # an episode that has not ended yet
        o = np.arange(4)[:, None] + np.array([0.0, 0.5]) + 900
        obs.append(o[:-1])
        nxt.append(o[1:])
        act.append(np.zeros((3, 1), np.float32))
        rew.append(np.ones(3, np.float32))
        term.append(np.zeros(3, bool))
        trunc.append(np.zeros(3, bool))
    model = {
        "observations": np.concatenate(obs)[None].astype(np.float32),
        "next_observations": np.concatenate(nxt)[None].astype(np.float32),
        "actions": np.concatenate(act)[None],
        "rewards": np.concatenate(rew)[None],
        "terminations": np.concatenate(term)[None],
        "truncations": np.concatenate(trunc)[None],
    }
    v = Vault.create(
        str(path), example, rows=1, done_leaf="terminations", truncated_leaf="truncations",
        reward_leaf="rewards", metadata={"note": "joints"},
    )  # fmt: skip
    v.append(model)
    v.close()
    return Vault.open(str(path)), model


@pytest.mark.parametrize("fmt", ["hdf5", "arrow"])
def test_a_minari_export_imports_back_to_the_same_episodes(tmp_path: Path, fmt: str) -> None:
    pytest.importorskip("minari")
    v, model = minari_vault(tmp_path / "v", open_tail=False)
    where = vault.converters.export_minari(
        v, "joints/rt-v0", root=tmp_path / "minari", data_format=fmt
    )
    back = vault.converters.import_minari(where, str(tmp_path / "back"))
    got = back.read_numpy()
    for key in model:
        np.testing.assert_array_equal(got[key], model[key], err_msg=key)
    assert table_rows(back.episodes(include_open=True)) == table_rows(v.episodes(include_open=True))


def test_a_minari_export_leaves_out_the_open_last_episode(tmp_path: Path) -> None:
    pytest.importorskip("minari")
    v, model = minari_vault(tmp_path / "v", open_tail=True)
    assert len(v.episodes(include_open=True)) == 5
    where = vault.converters.export_minari(v, "joints/open-v0", root=tmp_path / "minari")
    back = vault.converters.import_minari(where, str(tmp_path / "back"))
    assert back.committed_length == 14
    got = back.read_numpy()
    for key in model:
        np.testing.assert_array_equal(got[key], model[key][:, :14], err_msg=key)
    assert table_rows(back.episodes(include_open=True)) == table_rows(v.episodes())


def test_a_minari_export_of_a_seamed_vault_keeps_no_partial_episode(tmp_path: Path) -> None:
    """The episode after the overrun lost its first steps: a Minari episode must be whole."""
    pytest.importorskip("minari")
    v, _model = seamed(tmp_path / "v")
    # Minari's field names as leaves: obs -> observations, next_observations from obs
    table = v.episodes()
    assert not table.start_known.all()
    known = table.select()  # complete, known start
    with pytest.warns(UserWarning, match="next observations"):  # "obs" stands in for them
        where = vault.converters.export_minari(
            v, "joints/seamed-v0", root=tmp_path / "minari", observations="obs",
            next_observations="obs", actions="reward", rewards="reward",
            terminations="done", truncations="trunc",
        )  # fmt: skip
    back = vault.converters.import_minari(where, str(tmp_path / "back"))
    lengths = back.episodes().length.tolist()
    assert sum(lengths) == back.committed_length
    assert len(lengths) == len(known), (len(lengths), len(known), len(table))


# ------------------------------------------------------------------------------ xarray, CLI
def test_xarray_of_a_pinned_vault_with_item_cut_chunks_is_the_pinned_data(tmp_path: Path) -> None:
    pytest.importorskip("xarray")
    chunk = dict(CHUNK, obs=[1, 4, 2])  # chunks cut rows and the item axis
    v = Vault.create(str(tmp_path / "v"), EXAMPLE, rows=ROWS, chunk=chunk, **ROLES)
    v.append(history(0, 9))
    v.append(history(9, 14), continues=False)
    pin = v.commit_id
    v.append(history(14, 21))
    v.close()
    pinned = Vault.open(str(tmp_path / "v"), at=pin)
    ds = pinned.to_xarray()
    want = pinned.read_numpy()
    for key in EXAMPLE:
        np.testing.assert_array_equal(np.asarray(ds[key].values), want[key], err_msg=key)
    assert want["obs"].shape == (ROWS, 14, 3)
    np.testing.assert_array_equal(want["obs"], history(0, 14)["obs"])


def test_xarray_of_a_dataset_is_every_shard_s_data(tmp_path: Path) -> None:
    pytest.importorskip("xarray")
    root = tmp_path / "ds"
    data = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=dict(CHUNK, obs=[1, 4, 2]), **ROLES)
    with data.shard("a") as a:
        a.append(history(0, 7))
    with data.shard("b") as b:
        b.append(history(50, 61))
    data = Dataset.open(str(root))
    tree = data.to_xarray()
    for name, lo, hi in (("a", 0, 7), ("b", 50, 61)):
        node = tree[f"shards/{name}"]
        for key in EXAMPLE:
            np.testing.assert_array_equal(np.asarray(node[key].values), history(lo, hi)[key])


def cli(*args: Any) -> Any:
    result = CliRunner().invoke(
        app, [str(a) for a in args], env={"COLUMNS": "200", "NO_COLOR": "1"}
    )
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def records_of(table: Any) -> list[dict[str, Any]]:
    keys = ("row", "start", "length", "return", "truncated", "complete", "start_known")
    out = []
    for rec in table.to_records():
        out.append({k: rec[k] for k in keys} | ({"shard": rec["shard"]} if "shard" in rec else {}))
    return out


def test_cli_info_at_a_pin_and_episodes_of_a_seamed_vault_match_the_api(tmp_path: Path) -> None:
    v, _ = seamed(tmp_path / "v")
    pin, fp = v.commit_id, v.fingerprint()
    w = Vault.open(str(tmp_path / "v"), mode="a")
    w.append(history(33, 40))
    w.close()
    info = json.loads(cli("info", tmp_path / "v", "--at", pin, "--json").stdout)
    assert info["fingerprint"] == fp
    latest = Vault.open(str(tmp_path / "v"))
    got = json.loads(cli("episodes", tmp_path / "v", "--open", "--head", 0, "--json").stdout)
    assert got["episodes"] == len(latest.episodes())
    assert_same_records(got["records"], records_of(latest.episodes(include_open=True)))


def assert_same_records(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    """The CLI's episode records are the API's (the fields the API gives, in any order)."""

    def key(e: dict[str, Any]) -> tuple[Any, ...]:
        return (e.get("shard", ""), e["row"], e["start"])

    fields = list(want[0])
    assert sorted(({k: e[k] for k in fields} for e in got), key=key) == sorted(want, key=key)


def test_cli_episodes_and_stats_of_a_dataset_match_the_api(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    data = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    with data.shard("a") as a:
        a.append(history(0, 13))
    with data.shard("b") as b:
        b.append(history(100, 109))
        b.append(history(200, 221), continues=False)
    data = Dataset.open(str(root))
    got = json.loads(cli("episodes", root, "--open", "--head", 0, "--json").stdout)
    assert_same_records(got["records"], records_of(data.episodes(include_open=True)))
    stats = json.loads(cli("stats", root, "--json").stdout)
    whole = cat(history(0, 13), history(100, 109), history(200, 221))
    assert stats["timesteps"] == ROWS * 43
    for leaf in stats["leaves"]:
        x = whole[leaf["name"]].astype(np.float64)
        assert leaf["count"] == x.size
        assert leaf["min"] == x.min()
        assert leaf["max"] == x.max()
        assert leaf["mean"] == pytest.approx(x.mean(), rel=1e-12)
        assert leaf["std"] == pytest.approx(x.std(), rel=1e-9)
    complete = data.episodes()
    assert stats["episodes"] == len(complete)
    assert stats["open_episodes"] == len(data.episodes(include_open=True)) - len(complete)
    assert stats["episode_return"]["mean"] == pytest.approx(complete.returns.mean())
    assert stats["episode_length"]["max"] == int(complete.length.max())


def test_xarray_of_a_pinned_vault_carries_the_pinned_episode_index(tmp_path: Path) -> None:
    pytest.importorskip("xarray")
    v, _ = seamed(tmp_path / "v")
    pin = v.commit_id
    w = Vault.open(str(tmp_path / "v"), mode="a")
    w.append(history(33, 51))
    w.close()
    pinned = Vault.open(str(tmp_path / "v"), at=pin)
    ds = pinned.to_xarray()
    table = pinned.episodes()
    assert ds.attrs["committed_length"] == 30
    dim = [d for d in ds.dims if d not in ("row", "time") and not d.startswith("obs")]
    assert dim, ds.dims
    assert {ds.sizes[d] for d in dim} == {len(table)}


# ------------------------------------------------------------------------------ datasets
def two_shards(root: Path) -> Dataset:
    data = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, **ROLES)
    with data.shard("a") as a:
        a.append(history(0, 13))
    with data.shard("b") as b:
        b.append(history(100, 109))
        b.append(history(200, 221), continues=False)
    return Dataset.open(str(root))


def test_a_tagged_dataset_streams_and_resumes_on_its_tagged_data(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    data = two_shards(root)
    data.tag("first")
    more = Dataset.create(str(root), EXAMPLE, rows=ROWS, chunk=CHUNK, exist_ok=True, **ROLES)
    with more.shard("a") as a:
        a.append(history(13, 20))
    with more.shard("c") as c:
        c.append(history(300, 310))
    pinned = Dataset.open(str(root), at="first")
    assert pinned.committed_lengths == {"a": 13, "b": 30}
    options = {
        "shuffle": True,
        "seed": 4,
        "episode_aware": True,
        "stride": 1,
        "drop_remainder": False,
    }
    with pinned.as_dataset(3, 2, **options) as stream:
        whole = list(stream)
    shards = [pinned.vault(name) for name in pinned.shards]
    seen = check_batches(whole, shards, 2)
    want = {(0, r, t) for r, t in valid_starts(history(0, 13), [], 2, 1, True, range(ROWS))}
    b_model = cat(history(100, 109), history(200, 221))
    want |= {(1, r, t) for r, t in valid_starts(b_model, [9], 2, 1, True, range(ROWS))}
    assert set(seen) == want
    assert len(seen) == len(want)
    with pinned.as_dataset(3, 2, **options) as stream:
        next(stream)
        next(stream)
        state = json.loads(json.dumps(stream.state()))
    with resume_stream(state) as rest:
        tail = list(rest)
    assert [b.start.tolist() for b in tail] == [b.start.tolist() for b in whole[2:]]
    assert [b.source.tolist() for b in tail] == [b.source.tolist() for b in whole[2:]]


def test_derived_episodes_of_a_dataset_are_its_episodes_shard_by_shard(tmp_path: Path) -> None:
    data = two_shards(tmp_path / "ds")
    table = data.episodes().select(min_length=2)
    out = vault.derive_episodes(data, str(tmp_path / "e"), table)
    got = out.episodes()
    models = {"a": history(0, 13), "b": cat(history(100, 109), history(200, 221))}
    placed = out.read_numpy()
    t = 0
    keyed = sorted(
        range(len(table)),
        key=lambda i: (data.shards.index(table.shard[i]), int(table.start[i]), int(table.row[i])),
    )
    for j, i in enumerate(keyed):
        m, r, s, n = (
            models[table.shard[i]],
            int(table.row[i]),
            int(table.start[i]),
            int(table.length[i]),
        )
        assert int(got.start[j]) == t
        assert int(got.length[j]) == n
        assert float(got.returns[j]) == float(table.returns[i])
        assert bool(got.truncated[j]) == bool(table.truncated[i])
        for key in EXAMPLE:
            np.testing.assert_array_equal(placed[key][0, t : t + n], m[key][r, s : s + n])
        t += n
    assert out.committed_length == t
    assert len(got) == len(table)


def test_a_dataset_sliced_by_spans_keeps_each_shard_s_seams_and_episodes(tmp_path: Path) -> None:
    data = two_shards(tmp_path / "ds")
    out = vault.derive_slice(data, str(tmp_path / "s"), spans={"a": (2, 11), "b": (5, 27)})
    assert out.committed_lengths == {"a": 9, "b": 22}
    models = {"a": history(0, 13), "b": cat(history(100, 109), history(200, 221))}
    for name, (lo, hi), seams in (("a", (2, 11), []), ("b", (5, 27), [(4, 0)])):
        shard = out.vault(name)
        sub = {k: x[:, lo:hi] for k, x in models[name].items()}
        got = shard.read_numpy()
        for key in EXAMPLE:
            np.testing.assert_array_equal(got[key], sub[key])
        assert [(s.at, s.lost) for s in shard.seams] == seams
        assert table_rows(shard.episodes(include_open=True)) == episodes_model(sub, seams, lo=lo)


def test_an_episode_aware_stream_over_derived_episodes_stays_inside_each(tmp_path: Path) -> None:
    v, _ = seamed(tmp_path / "v")
    out = vault.derive_episodes(v, str(tmp_path / "e"), v.episodes().select(min_length=3))
    d = out.read_numpy()
    with out.as_dataset(2, 3, seed=9, episode_aware=True, drop_remainder=False) as stream:
        seen = check_batches(list(stream), [out], 3)
    assert {(r, t) for _, r, t in seen} == valid_starts(d, [], 3, 1, True, [0])
    assert len(seen) == len({(r, t) for _, r, t in seen})


def test_a_dataset_stream_cut_on_device_in_stacks_resumes_inside_a_stack(tmp_path: Path) -> None:
    data = two_shards(tmp_path / "ds")
    options = {
        "shuffle": True, "seed": 6, "episode_aware": True, "block_timesteps": 8,
        "drop_remainder": False, "cut_on_device": True, "stack": 3,
    }  # fmt: skip
    with data.as_dataset(2, 2, **{**options, "stack": None, "cut_on_device": False}) as s:
        plain = list(s)
    with data.as_dataset(2, 2, **options) as stream:
        items = list(stream)
    flat = [
        (int(it.epoch), it.source[j], it.start[j], it.row[j])
        for it in items
        for j in range(len(it.row))
    ]
    assert len(flat) == len(plain)
    for (_, src, start, row), b in zip(flat, plain, strict=True):
        np.testing.assert_array_equal(src, b.source)
        np.testing.assert_array_equal(start, b.start)
        np.testing.assert_array_equal(row, b.row)
    check_batches(plain, [data.vault(n) for n in data.shards], 2)
    with data.as_dataset(2, 2, **options) as stream:
        next(stream)
        state = json.loads(json.dumps(stream.state()))
    # a checkpoint after the first stack resumes with the second
    with resume_stream(state) as rest:
        tail = list(rest)
    assert [t.start.tolist() for t in tail] == [t.start.tolist() for t in items[1:]]
