"""Episode-aware reading compared across every path that offers it, on the same data.

One dataset of three shards, written the ways a vault can be written: arrays appended,
``append(continues=False)`` (a restart seam), a trajectory buffer's first write with
``new_buffer=True`` (a seam after which every row's episode start is unknown), later writes of
that buffer, an overrun saved with ``on_overrun="save_surviving"`` (a seam that lost
timesteps), and a last append that leaves episodes open. The rows end their episodes at
different times (done and truncated, one-step episodes, episodes longer than every window,
an end on the first step, done and truncated on one step); one shard has fewer rows, one is
shorter than most windows.

A trivially correct model (the data say where they belong: ``t = 100_000 * salt + 1000 *
row + time``; the flags and seams are those written) enumerates the valid windows of length
``L`` (and stride ``s``): inside one row of one shard, ``t % s == 0``, across no seam, no
done/truncated flag before the window's last step. Every path must offer exactly that set:
the stream (``as_dataset(episode_aware=True)``, with its options: shuffle, stride, rows,
leaves, block shapes, interleave, stack, cut_on_device, epochs, resume, process shares), the
Grain source, the episode buffer rebuilt with ``from_state`` from ``read`` and
``episode_seams`` (whole reads, partial reads, wrapped states, ``iter_windows`` states; with
``pad=True`` also the whole short episodes, only where their start is known), and the episode
table with ``read_episode``/``iter_episodes``, whose episodes (and the pieces a seam cut off)
hold the same windows. Counts agree between paths. One test is marked ``xfail``: it pins a
bug (see its reason).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pytest

from vault import Dataset, Vault, grain_source, resume_stream

EXAMPLE = {"t": np.int32(0), "done": np.bool_(False), "trunc": np.bool_(False)}
CHUNK: dict[str, Sequence[int]] = {
    "t": [2, 3],
    "done": [3, 5],
    "trunc": [1, 4],
}  # uneven: windows span chunks
ROLES: dict[str, Any] = {"done_leaf": "done", "truncated_leaf": "trunc"}
RING = 8  # the trajectory buffer's slots per row
CAP = 48  # the time axis of every episode-buffer state (one shape: compiled once)

Window = tuple[int, int, int]  # (source, row, start)


# ------------------------------------------------------------------------------- the model
class Shard(NamedTuple):
    name: str
    salt: int
    data: dict[str, np.ndarray]  # what the shard holds, [rows, n]
    seams: dict[int, bool]  # seam position -> whether the episode going on there is known
    lost: dict[int, int]  # seam position -> timesteps lost there

    @property
    def rows(self) -> int:
        return int(self.data["t"].shape[0])

    @property
    def n(self) -> int:
        return int(self.data["t"].shape[1])

    @property
    def ends(self) -> np.ndarray:
        return self.data["done"] | self.data["trunc"]


def history(salt: int, rows: int, n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    done = rng.random((rows, n)) < 0.14
    trunc = rng.random((rows, n)) < 0.07
    done[:, n - 1] = False
    trunc[:, n - 1] = False
    if n > 12:
        done[0, 0] = True  # an end on the very first step
        done[0, 1:3] = True  # one-step episodes
        done[1, 4] = trunc[1, 4] = True  # both on one step: terminated
        done[rows - 1, : n - 2] = False  # the last row: episodes longer than every window
        trunc[rows - 1, : n - 2] = False
        done[rows - 1, n // 2] = True
    t = 100_000 * salt + 1000 * np.arange(rows)[:, None] + np.arange(n)[None, :]
    return {"t": t.astype(np.int32), "done": done, "trunc": trunc}


def code(salt: int, row: int, start: int, length: int) -> np.ndarray:
    return (100_000 * salt + 1000 * row + np.arange(start, start + length)).astype(np.int32)


def model_windows(
    shards: list[Shard], seq: int, stride: int = 1, rows: list[int] | None = None
) -> list[Window]:
    """Every valid window, sorted: one row, ``t % stride == 0``, no seam inside, no episode
    end before its last step."""
    out = []
    for s, sh in enumerate(shards):
        ends = sh.ends
        for r in range(sh.rows) if rows is None else rows:
            for t in range(0, sh.n - seq + 1, stride):
                if any(t < a <= t + seq - 1 for a in sh.seams):
                    continue
                if not ends[r, t : t + seq - 1].any():
                    out.append((s, r, t))
    return sorted(out)


class Piece(NamedTuple):
    row: int
    start: int
    length: int
    kind: str  # "complete", "open" (at the end of the data) or "cut" (ends at a seam)
    known: bool  # its start is known
    truncated: bool  # ended by truncation only


def model_pieces(sh: Shard) -> list[Piece]:
    """Each row's timeline split by episode ends and seams, by brute force."""
    out = []
    for r in range(sh.rows):
        start, known = 0, sh.seams.get(0, True)
        for t in range(sh.n):
            if t in sh.seams and t > 0:
                if start < t:
                    out.append(Piece(r, start, t - start, "cut", known, False))
                start, known = t, sh.seams[t]
            if sh.ends[r, t]:
                cut = bool(sh.data["trunc"][r, t] and not sh.data["done"][r, t])
                out.append(Piece(r, start, t + 1 - start, "complete", known, cut))
                start, known = t + 1, True
        if start < sh.n:
            out.append(Piece(r, start, sh.n - start, "open", known, False))
    return out


def short_whole(sh: Shard, seq: int, lo: int = 0, hi: int | None = None) -> set[tuple[int, int]]:
    """(row, last step) of the complete episodes shorter than ``seq`` with a known start that
    lie in ``[lo, hi)``: what ``pad=True`` adds."""
    hi = sh.n if hi is None else hi
    return {
        (p.row, p.start + p.length - 1)
        for p in model_pieces(sh)
        if p.kind == "complete" and p.known and p.length < seq and lo <= p.start
        if p.start + p.length <= hi
    }


# ------------------------------------------------------------------------------- writing
def build_shard(ds: Dataset, name: str, salt: int, rows: int, n: int, ops: list[Any]) -> Shard:
    """Write ``ops`` into shard ``name``: ``(how, lo, hi)`` with ``how`` one of ``append``,
    ``restart`` (``continues=False``), ``new`` (a fresh buffer, ``new_buffer=True``),
    ``write`` (that buffer again) and ``overrun`` (``lost`` junk steps added first, saved
    with ``save_surviving``)."""
    import jax
    import jax.numpy as jnp

    data = history(salt, rows, n, seed=salt)
    seams: dict[int, bool] = {}
    lost: dict[int, int] = {}
    add, init = _buffer(rows)
    state = None
    with ds.shard(name, rows=rows) as v:
        for how, lo, hi, *extra in ops:
            part = {k: x[:, lo:hi] for k, x in data.items()}
            if how in ("append", "restart"):
                v.append(part, continues=how == "append")
                if how == "restart":
                    seams[lo], lost[lo] = True, 0
                continue
            if how == "new":
                state = init()
            steps = [part]
            if how == "overrun":
                junk = {k: np.zeros((rows, extra[0]), x.dtype) for k, x in data.items()}
                junk["t"] -= 1
                steps.insert(0, junk)
            for block in steps:
                for i in range(block["t"].shape[1]):
                    state = add(
                        state, jax.tree.map(lambda x, i=i: jnp.asarray(x[:, i : i + 1]), block)
                    )
            if how == "new":
                assert v.write(state, new_buffer=True) == hi - lo
                if lo > 0:
                    seams[lo], lost[lo] = False, 0
            elif how == "write":
                assert v.write(state) == hi - lo
            else:
                assert v.write(state, on_overrun="save_surviving") == hi - lo
                seams[lo], lost[lo] = False, extra[0]
    return Shard(name, salt, data, seams, lost)


@functools.cache
def _buffer(rows: int) -> Any:
    import jax
    import jax.numpy as jnp

    import buffers as fbx

    tb = fbx.make_trajectory_buffer(
        add_batch_size=rows, sample_batch_size=1, sample_sequence_length=1, period=1,
        min_length_time_axis=1, max_length_time_axis=RING,
    )  # fmt: skip
    return jax.jit(tb.add), lambda: tb.init(jax.tree.map(jnp.asarray, EXAMPLE))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("episode-windows") / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=3, chunk=CHUNK, **ROLES)
    a = build_shard(ds, "a", 1, 3, 40, [
        ("append", 0, 10), ("restart", 10, 16), ("new", 16, 24), ("write", 24, 27),
        ("overrun", 27, 35, 2), ("append", 35, 40),
    ])  # fmt: skip
    b = build_shard(ds, "b", 2, 2, 25, [
        ("new", 0, 8), ("overrun", 8, 16, 3), ("restart", 16, 19), ("append", 19, 25),
    ])  # fmt: skip
    c = build_shard(ds, "c", 3, 3, 2, [("append", 0, 2)])
    data = Dataset.open(str(root))
    assert data.shards == ["a", "b", "c"]
    return {"root": str(root), "data": data, "shards": [a, b, c]}


def test_the_shards_hold_the_model_data_and_seams(world: dict[str, Any]) -> None:
    """The fixture wrote what the model says (so every later mismatch is a reader's)."""
    data = world["data"]
    for sh in world["shards"]:
        v = data.vault(sh.name)
        got = v.read_numpy()
        for key, x in sh.data.items():
            np.testing.assert_array_equal(got[key], x, err_msg=f"{sh.name}/{key}")
        assert {s.at: s.lost for s in v.seams} == sh.lost, sh.name


# ------------------------------------------------------------------------------- reading
def drain(stream: Any, shards: list[Shard], seq: int, source: int | None = None) -> list[Window]:
    """Every window a stream yields (stacked items unstacked), each checked against the
    data of its place."""
    out = []
    with stream:
        for item in stream:
            t = np.asarray(item.experience["t"]).reshape(-1, seq)
            rows, starts = np.ravel(item.row), np.ravel(item.start)
            sources = np.ravel(item.source)
            for i, (s, r, t0) in enumerate(
                zip(sources.tolist(), rows.tolist(), starts.tolist(), strict=True)
            ):
                s = s if source is None else source
                np.testing.assert_array_equal(t[i], code(shards[s].salt, r, t0, seq))
                out.append((s, r, t0))
    return out


def grain_windows(
    src: Any, shards: list[Shard], seq: int, source: int | None = None
) -> list[Window]:
    """Every record of a Grain source in index order (a few read back and checked)."""
    out = []
    for i in range(len(src)):
        s, r, t0 = src.where(i)
        s = s if source is None else source
        out.append((s, r, t0))
    for i in sorted({0, len(src) // 2, len(src) - 1}):  # a few records read back
        s, r, t0 = src.where(i)
        s = s if source is None else source
        np.testing.assert_array_equal(src[i]["t"], code(shards[s].salt, r, t0, seq))
    return out


@functools.cache
def episode_buffer(rows: int, seq: int, pad: bool) -> Any:
    """An episode buffer of ``CAP`` slots whose episodes end at done or truncated, with its
    ``from_state`` and ``sample`` jitted once."""
    import jax

    import buffers as fbx

    eb = fbx.make_episode_buffer(
        add_batch_size=rows, sample_batch_size=64, sample_sequence_length=seq,
        min_length_time_axis=1, max_length_time_axis=CAP,
        episode_end=lambda b: b["done"] | b["trunc"], pad=pad,
    )  # fmt: skip
    return eb.replace(from_state=jax.jit(eb.from_state), sample=jax.jit(eb.sample))


def window_ends(state: Any) -> set[tuple[int, int]]:
    """(row, slot) where the episode buffer state can draw a window (its sum tree's leaves)."""
    rows = state.episode_step.shape[0]
    nodes = np.asarray(state.sum_tree_state.nodes)
    leaves = nodes[nodes.size // 2 :][: rows * CAP].reshape(rows, CAP)
    assert set(np.unique(leaves).tolist()) <= {0.0, 1.0}
    return {(int(r), int(s)) for r, s in zip(*np.nonzero(leaves), strict=True)}


def rebuilt(v: Vault, seq: int, pad: bool, **where: Any) -> tuple[Any, int, int]:
    """``from_state(v.read(**where, capacity=CAP), **v.episode_seams(**where, capacity=CAP))``
    with the time its oldest slot holds and that slot's index."""
    state = v.read(capacity=CAP, **where)
    seams = v.episode_seams(capacity=CAP, **where)
    eb = episode_buffer(v.rows, seq, pad)
    out = eb.from_state(state, **seams)
    stop = where.get("stop", v.committed_length)
    held = stop - min(CAP, stop - where.get("start", 0))
    oldest = int(state.current_index) if bool(state.is_full) else 0
    return out, held, oldest


def model_ends(
    sh: Shard, seq: int, pad: bool, held: int, stop: int, oldest: int
) -> set[tuple[int, int]]:
    """(row, slot) of the model's windows inside ``[held, stop)`` (and, with ``pad``, the
    whole short episodes there) for a state whose slot ``oldest`` holds time ``held``."""
    ends = {
        (r, t + seq - 1) for _, r, t in model_windows([sh], seq) if held <= t and t + seq <= stop
    }
    if pad:
        ends |= short_whole(sh, seq, held, stop)
    return {(r, (e - held + oldest) % CAP) for r, e in ends}


# ------------------------------------------------------------------------ one vault, all paths
@pytest.mark.parametrize(("seq", "stride"), [(1, 1), (2, 1), (3, 1), (3, 2), (5, 1), (8, 3)])
def test_stream_grain_and_episode_buffer_offer_exactly_the_model_windows(
    world: dict[str, Any], seq: int, stride: int
) -> None:
    """Shard ``a`` as one vault (restart, new-buffer and lost seams, one-step and long
    episodes): an unshuffled epoch, a shuffled one and the Grain source are each exactly the
    model's windows, once; the episode buffer rebuilt from the whole read offers the same
    windows (by their last slot)."""
    sh = world["shards"][0]
    v = world["data"].vault("a")
    want = model_windows([sh], seq, stride)
    assert want
    for shuffle in (False, True):
        stream = v.as_dataset(
            2, seq, stride=stride, episode_aware=True, shuffle=shuffle, seed=seq,
            drop_remainder=False, prefetch=0, block_timesteps=max(seq, 6),
        )  # fmt: skip
        assert sorted(drain(stream, [sh], seq, source=0)) == want, shuffle
    src = grain_source(v, seq, stride=stride, episode_aware=True)
    assert len(src) == len(want)
    assert grain_windows(src, [sh], seq, source=0) == want  # numbered row by row, in time
    if (seq, stride) == (3, 1):  # one shape of episode buffer: compiled once for the file
        state, held, oldest = rebuilt(v, seq, pad=False)
        assert window_ends(state) == model_ends(sh, seq, False, held, sh.n, oldest)


def check_draws(state: Any, sh: Shard, seq: int, pad: bool, key: int) -> None:
    """A jitted draw: every window (its unmasked part) is data of one place, holds no episode
    end before its last step and crosses no seam; padding only after a whole episode."""
    import jax

    eb = episode_buffer(sh.rows, seq, pad)
    drawn = eb.sample(state, jax.random.key(key))
    assert bool(np.asarray(drawn.valid).all())
    t, mask = np.asarray(drawn.experience["t"]), np.asarray(drawn.mask)
    whole = {
        (p.row, p.start, p.length) for p in model_pieces(sh) if p.kind == "complete" and p.known
    }
    for w, m in zip(t, mask, strict=True):
        got = w[m]
        assert got.size >= 1
        assert m[: got.size].all()  # the padding comes last
        row, first = divmod(int(got[0]) - 100_000 * sh.salt, 1000)
        np.testing.assert_array_equal(got, code(sh.salt, row, first, got.size))
        assert not sh.ends[row, first : first + got.size - 1].any()
        assert not any(first < a < first + got.size for a in sh.seams)
        if got.size < seq:
            assert pad
            assert (row, first, got.size) in whole
            assert not w[~m].any()  # zero padding


@pytest.mark.parametrize("name", ["a", "b"])
def test_pad_adds_only_whole_short_episodes_whose_start_is_known(
    world: dict[str, Any], name: str
) -> None:
    """``pad=True`` offers the model's windows plus the complete episodes shorter than the
    window whose start is known: never one that begins at a new buffer's first write or after
    lost timesteps, nor a piece cut off by a seam or the open last episode; the draws say so
    too."""
    sh = next(s for s in world["shards"] if s.name == name)
    v = world["data"].vault(name)
    seq = 3
    for pad in (False, True):
        state, held, oldest = rebuilt(v, seq, pad)
        assert window_ends(state) == model_ends(sh, seq, pad, held, sh.n, oldest), pad
    check_draws(state, sh, seq, True, key=sh.salt)
    # the data have such episodes on both sides of the rule
    pieces = [p for p in model_pieces(sh) if p.length < seq]
    assert any(p.kind == "complete" and p.known for p in pieces)
    assert any(p.kind == "complete" and not p.known for p in pieces) or name == "b"


@pytest.mark.parametrize(
    ("start", "stop"),
    [(0, 40), (5, 40), (10, 33), (16, 40), (17, 30), (27, 40), (28, 34), (3, 21), (0, 12)],
)
def test_partial_reads_with_their_episode_seams_offer_the_model_windows_inside(
    world: dict[str, Any], start: int, stop: int
) -> None:
    """``from_state(read(start=, stop=), **episode_seams(start=, stop=))`` as the docs show it:
    the windows inside the range, and (``pad=True``) the whole short episodes that begin
    inside it at a known start: a range that begins mid-episode, at a restart, at a new
    buffer's first write or just after lost timesteps."""
    sh = world["shards"][0]
    v = world["data"].vault("a")
    state, held, oldest = rebuilt(v, 3, True, start=start, stop=stop)
    assert window_ends(state) == model_ends(sh, 3, True, held, stop, oldest)


def test_a_state_that_holds_only_the_last_timesteps_offers_the_model_windows(
    world: dict[str, Any],
) -> None:
    """A read whose capacity is smaller than the range keeps its last ``capacity`` timesteps
    in a full, wrapped state: ``episode_seams`` with the same capacity counts from there."""
    import jax

    import buffers as fbx

    sh = world["shards"][0]
    v = world["data"].vault("a")
    cap = 23  # holds t 17..39: rows 0 and 1 begin after an end, row 2 mid-episode
    eb = fbx.make_episode_buffer(
        add_batch_size=3, sample_batch_size=8, sample_sequence_length=3,
        min_length_time_axis=1, max_length_time_axis=cap,
        episode_end=lambda b: b["done"] | b["trunc"], pad=True,
    )  # fmt: skip
    state = v.read(capacity=cap)
    assert bool(state.is_full)
    out = jax.jit(eb.from_state)(state, **v.episode_seams(capacity=cap))
    nodes = np.asarray(out.sum_tree_state.nodes)
    leaves = nodes[nodes.size // 2 :][: 3 * cap].reshape(3, cap)
    got = {(int(r), int(s)) for r, s in zip(*np.nonzero(leaves), strict=True)}
    held, oldest = sh.n - cap, int(state.current_index)
    ends = {(r, t + 2) for _, r, t in model_windows([sh], 3) if t >= held}
    ends |= short_whole(sh, 3, held, sh.n)
    assert got == {(r, (e - held + oldest) % cap) for r, e in ends}


# ------------------------------------------------------------------------------ iter_windows
def test_iter_windows_states_offer_the_model_windows_inside_each_window(
    world: dict[str, Any],
) -> None:
    """``iter_windows`` over the dataset (two rows of every shard, windows of 8 in states of
    ``CAP`` slots, shuffled, two epochs): every epoch lists each window once and yields its
    data; each state, rebuilt with ``episode_seams`` of its range, offers exactly the model's
    windows inside that range (padded short episodes too), so over an epoch the windows that
    do not straddle two ranges."""
    data, shards = world["data"], world["shards"]
    seq, width, rows = 3, 8, [0, 1]
    eb = episode_buffer(2, seq, True)
    stream = data.iter_windows(width, capacity=CAP, rows=rows, shuffle=True, seed=5, epochs=2)
    ranges = [
        (s, lo, min(lo + width, sh.n))
        for s, sh in enumerate(shards)
        for lo in range(0, sh.n, width)
    ]
    assert sorted(stream.windows(0)) == sorted(ranges) == sorted(stream.windows(1))
    assert stream.windows(0) != stream.windows(1)
    order = stream.windows(0) + stream.windows(1)
    offered: list[collections.Counter[Window]] = [collections.Counter(), collections.Counter()]
    with stream:
        states = list(stream)
    assert len(states) == len(order)
    for k, (state, (s, lo, hi)) in enumerate(zip(states, order, strict=True)):
        sh = shards[s]
        np.testing.assert_array_equal(
            np.asarray(state.experience["t"])[:, : hi - lo], sh.data["t"][rows, lo:hi]
        )
        every = data.vault(sh.name).episode_seams(start=lo, stop=hi, capacity=CAP)
        seams = data.vault(sh.name).episode_seams(start=lo, stop=hi, capacity=CAP, rows=rows)
        if every["start_known"] is not None:  # rows=: one flag per row read, in its order
            assert seams["start_known"] == [every["start_known"][r] for r in rows]
            flipped = data.vault(sh.name).episode_seams(start=lo, stop=hi, rows=rows[::-1])
            assert flipped["start_known"] == seams["start_known"][::-1]
        got = window_ends(eb.from_state(state, **seams))
        inside = {
            (rows.index(r), t + seq - 1 - lo)
            for _, r, t in model_windows([sh], seq, rows=rows)
            if lo <= t and t + seq <= hi
        }
        short = {(rows.index(r), e - lo) for r, e in short_whole(sh, seq, lo, hi) if r in rows}
        assert got == inside | short, (sh.name, lo, hi)
        if hi - lo < seq:  # shard c: only a one-step episode, padded
            assert not inside
        for r, e in inside:
            offered[k // len(ranges)][(s, rows[r], lo + e - seq + 1)] += 1
    apart = [
        (s, r, t)
        for s, r, t in model_windows(shards, seq, rows=rows)
        if (t // width) == ((t + seq - 1) // width)
    ]
    for epoch in (0, 1):
        assert sorted(offered[epoch].elements()) == apart, epoch


def test_a_rebuilt_state_that_adds_the_next_timesteps_offers_the_longer_reads_windows(
    world: dict[str, Any],
) -> None:
    """``from_state`` "samples and adds as usual": a state rebuilt from the first part of a
    range (after a restart, after a new buffer's first write, after lost timesteps), then
    given the rest of the range by ``add``, offers the windows of the whole range rebuilt at
    once (padded short episodes included, none whose start is unknown)."""
    import jax
    import jax.numpy as jnp

    sh = world["shards"][0]
    v = world["data"].vault("a")
    eb = episode_buffer(3, 3, True)
    add = jax.jit(eb.add)
    for lo, mid, hi in [(0, 12, 16), (16, 20, 24), (17, 19, 27), (27, 31, 35), (28, 32, 40)]:
        state, held, oldest = rebuilt(v, 3, True, start=lo, stop=mid)
        for k in range(mid, hi, 4):
            state = add(state, {n: jnp.asarray(x[:, k : k + 4]) for n, x in sh.data.items()})
        assert window_ends(state) == model_ends(sh, 3, True, held, hi, oldest), (lo, mid, hi)


# ------------------------------------------------------------------------ a dataset of shards
STREAM_OPTIONS = [
    {"shuffle": False},
    {"shuffle": True, "seed": 3, "interleave": 2, "block_timesteps": 5},
    {"shuffle": True, "seed": 4, "block_timesteps": 3, "run_blocks": 2, "interleave": 3},
    {"shuffle": True, "seed": 5, "stride": 2, "rows": [1, 0], "block_rows": 1},
    {"shuffle": False, "leaves": ["t"], "block_timesteps": 7, "prefetch": 0},
    {"shuffle": True, "seed": 1, "stack": 3, "leaves": ["t"], "cut_on_device": True},
    {"shuffle": True, "seed": 2, "stack": 2, "block_timesteps": 4, "interleave": 2},
]


@pytest.mark.parametrize("options", STREAM_OPTIONS, ids=lambda o: "-".join(map(str, o)))
def test_every_path_over_the_dataset_agrees_with_the_model_and_each_other(
    world: dict[str, Any], options: dict[str, Any]
) -> None:
    """Over the three shards (3, 2 and 3 rows; one shorter than a window): an episode-aware
    epoch of the stream is exactly the model's windows (multiset, each with its data), for
    every option; the Grain source numbers exactly those records; and the episode buffer
    rebuilt from each shard offers as many windows as both (stride 1, every row)."""
    data, shards = world["data"], world["shards"]
    seq, stride, rows = 3, options.get("stride", 1), options.get("rows")
    want = model_windows(shards, seq, stride, rows)
    stream = data.as_dataset(4, seq, episode_aware=True, drop_remainder=False, **options)
    assert sorted(drain(stream, shards, seq)) == want
    src = grain_source(
        data, seq, stride=stride, rows=rows, episode_aware=True, leaves=options.get("leaves")
    )
    assert len(src) == len(want)
    numbered = grain_windows(src, shards, seq)  # source by source, row by row, in time
    assert (sorted(numbered) if rows else numbered) == want  # rows in the order selected
    if stride == 1 and rows is None:
        offered = 0
        for sh in shards:
            state, held, oldest = rebuilt(data.vault(sh.name), seq, False)
            got = window_ends(state)
            assert got == model_ends(sh, seq, False, held, sh.n, oldest), sh.name
            offered += len(got)
        assert offered == len(want) == len(src)


def test_several_epochs_each_yield_the_model_windows_and_resume_anywhere(
    world: dict[str, Any],
) -> None:
    """Two shuffled epochs of stacks: each epoch is the model's windows once (reshuffled),
    and a state saved after any item resumes with exactly the rest."""
    data, shards = world["data"], world["shards"]
    seq = 3
    want = model_windows(shards, seq)
    options = {"shuffle": True, "seed": 11, "epochs": 2, "drop_remainder": False, "stack": 2}

    def flat(items: list[Any]) -> list[tuple[int, int, int, int]]:
        return [
            (item.epoch, s, r, t)
            for item in items
            for s, r, t in zip(
                np.ravel(item.source).tolist(), np.ravel(item.row).tolist(),
                np.ravel(item.start).tolist(), strict=True,
            )
        ]  # fmt: skip

    with data.as_dataset(4, seq, episode_aware=True, **options) as stream:
        items = list(stream)
    every = flat(items)
    epochs = [[w[1:] for w in every if w[0] == e] for e in (0, 1)]
    assert sorted(epochs[0]) == want == sorted(epochs[1])
    assert epochs[0] != epochs[1]
    for k in (1, 6, len(items) // 2, len(items) - 1):
        with data.as_dataset(4, seq, episode_aware=True, **options) as stream:
            head = [next(stream) for _ in range(k)]
            saved = stream.state()
        with resume_stream(saved) as rest:
            assert flat(head) + flat(list(rest)) == every, k


@pytest.mark.parametrize(("processes", "seq", "stride"), [(2, 3, 1), (3, 3, 1), (3, 2, 2)])
def test_process_shares_of_the_dataset_split_the_model_windows(
    world: dict[str, Any], processes: int, seq: int, stride: int
) -> None:
    """``process_count`` processes (given, in one process) share each episode-aware epoch:
    disjoint, as many windows each, together the model's less fewer than one per process."""
    data, shards = world["data"], world["shards"]
    want = set(model_windows(shards, seq, stride))
    shares = []
    for p in range(processes):
        stream = data.as_dataset(
            processes * 2, seq, episode_aware=True, stride=stride, shuffle=True, seed=6,
            block_timesteps=5, interleave=2, process_index=p, process_count=processes,
        )  # fmt: skip
        shares.append(drain(stream, shards, seq))
    every = [w for share in shares for w in share]
    assert len(set(every)) == len(every)
    assert set(every) <= want
    assert len({len(share) for share in shares}) == 1
    assert len(want) - len(every) < processes * 2  # the epoch's last partial global batch


# ------------------------------------------------------------------------ the episode table
def test_the_episode_table_holds_the_model_episodes_and_their_windows(
    world: dict[str, Any],
) -> None:
    """The dataset's table (and each shard's own) is the model's complete and open episodes
    (a piece that a seam cut off is in neither); ``read_episode`` and ``iter_episodes`` give
    their data; the windows inside the table's episodes plus those inside the cut pieces are
    exactly the stream's, and ``select`` keeps no episode of unknown start."""
    data, shards = world["data"], world["shards"]
    seq = 3
    table = data.episodes(include_open=True)
    counted: collections.Counter[Window] = collections.Counter()
    for s, sh in enumerate(shards):
        pieces = model_pieces(sh)
        v = data.vault(sh.name)
        listed = [
            (r["row"], r["start"], r["length"], r["truncated"], r["complete"], r["start_known"])
            for r in table.to_records()
            if r["shard"] == sh.name
        ]
        own = v.episodes(include_open=True)
        want = sorted(
            (p.row, p.start, p.length, p.truncated, p.kind == "complete", p.known)
            for p in pieces
            if p.kind != "cut"
        )
        assert (
            sorted(listed)
            == want
            == sorted(
                (r["row"], r["start"], r["length"], r["truncated"], r["complete"], r["start_known"])
                for r in own.to_records()
            )
        ), sh.name
        complete = v.episodes()
        for i, episode in enumerate(v.iter_episodes(own)):
            r, t0, n = int(own.row[i]), int(own.start[i]), int(own.length[i])
            np.testing.assert_array_equal(episode["t"], code(sh.salt, r, t0, n))
        for i in range(len(complete)):
            r, t0, n = int(complete.row[i]), int(complete.start[i]), int(complete.length[i])
            np.testing.assert_array_equal(v.read_episode(i)["t"], code(sh.salt, r, t0, n))
        assert all(complete.select().start_known)
        spans = [
            (int(r), int(t0), int(n))
            for r, t0, n in zip(own.row, own.start, own.length, strict=True)
        ]
        spans += [(p.row, p.start, p.length) for p in pieces if p.kind == "cut"]
        for r, t0, n in spans:
            for t in range(t0, t0 + n - seq + 1):
                counted[(s, r, t)] += 1
    assert sorted(counted.elements()) == model_windows(shards, seq)
    stream = data.as_dataset(5, seq, episode_aware=True, drop_remainder=False)
    assert sorted(drain(stream, shards, seq)) == sorted(counted.elements())


def test_a_shard_refuses_episodes_that_the_dataset_table_places_in_another_shard(
    world: dict[str, Any],
) -> None:
    """A Dataset has no ``read_episode``: its table's episodes are read from the shard they
    name (``data.vault(name)``). The table says which shard each is in, and
    ``derive_episodes`` refuses a table naming another shard ("not the shard they name");
    ``read_episode``/``iter_episodes`` of another shard must not hand back their own
    timesteps for it."""
    from vault import VaultArgumentError, VaultReadError

    refused = (VaultReadError, VaultArgumentError)
    data, shards = world["data"], world["shards"]
    table = data.episodes()
    of_b = table[table.shard == "b"]
    a = data.vault("a")
    of_a = table[table.shard == "a"]  # its own episodes: read as the index says
    np.testing.assert_array_equal(a.read_episode(of_a[0])["t"], code(shards[0].salt, 0, 0, 1))
    assert (int(of_b.row[0]), int(of_b.start[0])) == (0, 0)  # shard b's row 0 at t 0
    assert a.read_numpy()["t"][0, 0] == code(shards[0].salt, 0, 0, 1)  # shard a has one too
    with pytest.raises(refused, match="shard"):
        a.read_episode(of_b[0])  # today: shard a's timesteps [0, n) of row 0
    with pytest.raises(refused, match="shard"):
        a.iter_episodes(of_b)  # checked at the call, as the docstring says
