"""Every way to read a vault agrees with ``read_numpy`` on the same selection.

Tiny vaults are drawn with hypothesis: 1-3 rows, 0-20 timesteps, time chunks of 1-7 (and a
row chunk below the row count), leaves of several shapes and a nested dict/tuple leaf, a done
leaf (an episode index), and seams: an ``append(..., continues=False)``, a buffer written
after appended arrays, and a buffer overrun saved with ``on_overrun="save_surviving"`` (which
loses timesteps). Every stored value encodes where it came from (``1000 * row + serial``, the
serial counting every timestep ever generated, lost ones included), so ``read_numpy`` is
checked against a trivially correct model first; then, for drawn selections:

* ``Vault.read`` (and with ``capacity=``): the state's experience against ``read_numpy``, its
  ``current_index``/``is_full``/``write_counter`` against docs/guides/train-offline.md;
* ``iter_windows``: each window's state against ``read_numpy`` of its range, and the ranges;
* ``as_dataset`` without and with shuffling (stacked or not, any block shape): every sequence
  of every ``StreamBatch`` is ``read_numpy(rows=[row], start=start, stop=start + L)``, an
  epoch is exactly the valid starts (brute force over the model: stride, seams,
  ``episode_aware``), and a ``state()`` taken after any item resumes with exactly the rest;
* ``episodes()`` against a brute-force episode model, and ``read_episode``/``iter_episodes``
  against slices of ``read_numpy``;
* ``to_xarray`` (values, dims, the episode variables), its dask arrays sliced and computed,
  and a plain ``xarray.open_zarr`` of the vault at rest;
* ``grain_source`` records and ``where``;
* ``vault show --json`` and ``vault export`` (npz) through the typer app.

The last test pins a disagreement (strict xfail): a state read with a ``capacity`` below the
data is refused when written again.

No JAX compilation happens here: buffer states are built from numpy arrays, streams on CPU
yield numpy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buffers import TrajectoryBufferState, timesteps_added
from vault import Seam, Vault, grain_source, resume_stream

xr = pytest.importorskip("xarray")
pytest.importorskip("dask")

LEAVES = ["act", "done", "nest/pair/0", "nest/pair/1", "obs"]  # jax.tree order
EXAMPLE = {
    "obs": np.zeros(2, np.float32),
    "act": np.int16(0),
    "done": np.bool_(False),
    "nest": {"pair": (np.float32(0), np.zeros(2, np.int16))},
}
RING = 3  # the time axis of the buffer states written


def timesteps(serials: list[int], rows: int) -> dict[str, Any]:
    """The leaves of timesteps ``serials`` of every row: each value says where it belongs."""
    code = 1000 * np.arange(rows)[:, None] + np.asarray(serials, np.int64).reshape(1, -1)
    return {
        "obs": np.stack([code, -code], -1).astype(np.float32),
        "act": code.astype(np.int16),
        "done": code % 7 == 3,
        "nest": {"pair": ((code / 4).astype(np.float32), np.stack([code, code + 1], -1) % 30000)},
    }


def typed(tree: dict[str, Any]) -> dict[str, Any]:
    tree["nest"]["pair"] = (tree["nest"]["pair"][0], tree["nest"]["pair"][1].astype(np.int16))
    return tree


def flat(tree: Any) -> dict[str, np.ndarray]:
    """A vault-structured tree as ``{path: array}``."""
    return {
        "act": np.asarray(tree["act"]),
        "done": np.asarray(tree["done"]),
        "nest/pair/0": np.asarray(tree["nest"]["pair"][0]),
        "nest/pair/1": np.asarray(tree["nest"]["pair"][1]),
        "obs": np.asarray(tree["obs"]),
    }


def ring_state(serials: list[int], rows: int) -> TrajectoryBufferState:
    """A trajectory-buffer state of time axis RING to which ``serials`` were added in order
    (built from numpy: no JAX compilation)."""
    n = len(serials)
    data = flat(typed(timesteps(serials, rows)))
    places = np.arange(n) % RING
    keep = slice(max(0, n - RING), n)
    out = {}
    for name, x in data.items():
        ring = np.zeros((rows, RING, *x.shape[2:]), x.dtype)
        ring[:, places[keep]] = x[:, keep]
        out[name] = ring
    experience = {
        "obs": out["obs"],
        "act": out["act"],
        "done": out["done"],
        "nest": {"pair": (out["nest/pair/0"], out["nest/pair/1"])},
    }
    index: Any = np.asarray(n % RING, np.int32)
    full: Any = np.asarray(n >= RING)
    counter: Any = np.array([0, n], np.uint32)
    return TrajectoryBufferState(
        experience=experience, current_index=index, is_full=full, write_counter=counter
    )


# --------------------------------------------------------------------------------- the model
@dataclass
class Model:
    rows: int
    serials: list[int] = field(default_factory=list)  # per stored timestep (every row)
    commits: list[int] = field(default_factory=list)  # the write that stored each timestep
    seams: list[Seam] = field(default_factory=list)
    restarts: set[int] = field(default_factory=set)  # seams where rows start episodes

    @property
    def length(self) -> int:
        return len(self.serials)

    def data(self) -> dict[str, np.ndarray]:
        return flat(typed(timesteps(self.serials, self.rows)))

    def episodes(self) -> list[tuple[int, int, int, int, bool, bool]]:
        """``(commit, row, start, length, complete, start_known)`` of every episode, complete
        ones in commit order then the open ones by row."""
        done = self.data()["done"]
        # after a seam the next episode's start is known only where the rows were marked as
        # starting one (append(..., continues=False)); docs/format.md section 4.4
        cuts = {s.at: s.at in self.restarts for s in self.seams if s.at < self.length}
        done_ones, open_ones = [], []
        for row in range(self.rows):
            start, known = 0, True
            for t in range(self.length):
                if t in cuts and t > start:  # the open episode is dropped at a seam
                    start, known = t, cuts[t]
                elif t in cuts:
                    known = cuts[t]
                if done[row, t]:
                    done_ones.append((self.commits[t], row, start, t + 1 - start, True, known))
                    start, known = t + 1, True
            if start < self.length:
                open_ones.append((0, row, start, self.length - start, False, known))
        return sorted(done_ones) + open_ones


@st.composite
def vault_specs(draw: st.DrawFn) -> dict[str, Any]:
    rows = draw(st.integers(1, 3))
    chunk = {
        "obs": [draw(st.integers(1, rows)), draw(st.integers(1, 7)), 2],
        "act": [rows, draw(st.integers(1, 7))],
        "done": [draw(st.integers(1, rows)), draw(st.integers(1, 7))],
        "nest/pair/1": [1, draw(st.integers(1, 7)), 1],
    }
    op = st.one_of(
        st.tuples(st.just("append"), st.integers(0, 6), st.booleans()),
        # a buffer of RING timesteps written after `first` adds, then overrun by `more`
        st.tuples(st.just("ring"), st.integers(1, RING + 2), st.integers(RING + 1, RING + 3)),
    )
    ops = draw(st.lists(op, min_size=1, max_size=4))
    return {"rows": rows, "chunk": chunk, "ops": ops}


def build(path: str, spec: dict[str, Any]) -> Model:
    """Write the vault ``spec`` describes at ``path``; returns the model of what it holds."""
    rows = spec["rows"]
    model = Model(rows)
    serial = 0
    writes = 0

    def store(serials: list[int]) -> None:
        nonlocal writes
        model.serials += serials
        model.commits += [writes] * len(serials)
        writes += 1

    with Vault.create(
        path, EXAMPLE, rows=rows, done_leaf="done", reward_leaf="nest/pair/0", chunk=spec["chunk"]
    ) as v:
        last_was_ring = False
        for op in spec["ops"]:
            if op[0] == "append":
                _, n, continues = op
                serials = list(range(serial, serial + n))
                serial += n
                if n == 0:
                    continue
                if not continues and model.length:
                    model.seams.append(Seam(at=model.length, lost=0))
                    model.restarts.add(model.length)
                v.append(typed(timesteps(serials, rows)), continues=continues)
                store(serials)
                last_was_ring = False
            else:
                _, first, more = op
                serials = list(range(serial, serial + first))
                held = serials[-RING:]
                if model.length or first > RING:  # another source, or one that had wrapped
                    model.seams.append(Seam(at=model.length, lost=first - len(held)))
                assert v.write(ring_state(serials, rows), new_buffer=last_was_ring) == len(held)
                store(held)
                serials += list(range(serial + first, serial + first + more))
                serial += first + more
                model.seams.append(Seam(at=model.length, lost=more - RING))
                state = ring_state(serials, rows)
                assert v.write(state, on_overrun="save_surviving") == RING
                store(serials[-RING:])
                last_was_ring = True
    return model


# ------------------------------------------------------------------------------ selections
def rows_strategy(rows: int) -> st.SearchStrategy[Any]:
    listed = st.lists(st.integers(0, rows - 1), min_size=1, max_size=rows, unique=True)
    sliced = st.tuples(st.integers(0, rows - 1), st.integers(1, rows)).map(
        lambda ab: slice(min(ab), max(ab[0] + 1, ab[1]))
    )
    stepped = st.sampled_from([slice(None, None, 2), slice(None, None, -1)])
    return st.one_of(st.none(), listed, sliced, stepped)


def picked(rows: Any, n: int) -> list[int]:
    if rows is None:
        return list(range(n))
    if isinstance(rows, slice):
        return list(range(n))[rows]
    return list(rows)


@st.composite
def time_choice(draw: st.DrawFn, length: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(["range", "last", "percentiles", "all"]))
    if kind == "range":
        a, b = sorted((draw(st.integers(0, length)), draw(st.integers(0, length))))
        return {"start": a, "stop": b}
    if kind == "last":
        return {"last": draw(st.integers(0, length))}
    if kind == "percentiles":
        cut: st.SearchStrategy[float] = st.one_of(
            st.integers(0, 100), st.sampled_from([0.5, 12.5, 29.0, 33.3, 66.7, 99.9])
        )
        low, high = sorted((draw(cut), draw(cut)))
        return {"percentiles": (low, high)}
    return {}


def span(choice: dict[str, Any], length: int) -> tuple[int, int]:
    """The model of a time choice: ``[lo, hi)``."""
    if "last" in choice:
        return length - choice["last"], length
    if "percentiles" in choice:
        a, b = choice["percentiles"]
        return (
            math.floor(Fraction(repr(a)) * length / 100),
            math.floor(Fraction(repr(b)) * length / 100),
        )
    return choice.get("start", 0), choice.get("stop", length)


leaf_choice = st.one_of(
    st.none(), st.lists(st.sampled_from(LEAVES), min_size=1, max_size=3, unique=True)
)


def examples(n: int) -> Any:
    """Hypothesis settings for ``n`` examples: deterministic, no deadline, no database."""
    return settings(
        max_examples=n,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        database=None,
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("readers")


_count = [0]


def fresh(workdir: Path, spec: dict[str, Any]) -> tuple[str, Model, Vault]:
    _count[0] += 1
    path = str(workdir / f"v{_count[0]}")
    model = build(path, spec)
    return path, model, Vault.open(path)


def as_flat(tree: Any, leaves: list[str] | None) -> dict[str, np.ndarray]:
    return {k: np.asarray(x) for k, x in tree.items()} if leaves is not None else flat(tree)


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray], what: str) -> None:
    assert sorted(got) == sorted(want), what
    for name in want:
        assert got[name].dtype == want[name].dtype, (what, name, got[name].dtype)
        np.testing.assert_array_equal(got[name], want[name], err_msg=f"{what}: {name}")


def valid_starts(
    model: Model, seams: list[Seam], rows: list[int], seq: int, stride: int, aware: bool
) -> list[tuple[int, int]]:
    """Brute force: every ``(row, start)`` an epoch yields, row by row in time order."""
    done = model.data()["done"]
    out = []
    for row in rows:
        for t in range(0, model.length - seq + 1, stride):
            if any(t < s.at < t + seq for s in seams):
                continue
            if aware and done[row, t : t + seq - 1].any():
                continue
            out.append((row, t))
    return out


# ---------------------------------------------------------------------------------- tests
@examples(5)
@given(spec=vault_specs(), data=st.data())
def test_read_numpy_and_read_states_agree_with_the_model(
    workdir: Path, spec: dict[str, Any], data: st.DataObject
) -> None:
    _, model, v = fresh(workdir, spec)
    assert v.committed_length == model.length
    assert v.seams == model.seams
    whole = model.data()
    assert_same(flat(v.read_numpy()), whole, "read_numpy()")
    for _ in range(3):
        rows = data.draw(rows_strategy(spec["rows"]))
        choice = data.draw(time_choice(model.length))
        leaves = data.draw(leaf_choice)
        lo, hi = span(choice, model.length)
        ids = picked(rows, spec["rows"])
        names = LEAVES if leaves is None else leaves
        want = {n: whole[n][ids, lo:hi] for n in names}
        got = as_flat(v.read_numpy(rows=rows, leaves=leaves, **choice), leaves)
        assert_same(got, want, f"read_numpy({rows}, {choice}, {leaves})")
        capacity = data.draw(st.one_of(st.none(), st.integers(1, 25)))
        n = hi - lo
        if capacity is None and n == 0:
            continue
        state = v.read(rows=rows, leaves=leaves, capacity=capacity, **choice)
        cap = n if capacity is None else capacity
        keep = min(cap, n)
        what = f"read({rows}, {choice}, {leaves}, capacity={capacity})"
        full = cap <= n
        assert bool(state.is_full) == full, what
        index = int(state.current_index)
        if not full:  # the data fill the state's start; add continues after them
            assert index == n, what
        # in the ring's logical order (oldest first: from current_index when full) the state
        # holds the last `keep` timesteps read, then the fill value
        order = (np.arange(cap) + (index if full else 0)) % cap
        wanted = {}
        for name, x in want.items():
            ring = np.zeros((x.shape[0], cap, *x.shape[2:]), x.dtype)
            ring[:, :keep] = x[:, n - keep :]
            wanted[name] = ring
        logical = {k: x[:, order] for k, x in as_flat(state.experience, leaves).items()}
        assert_same(logical, wanted, what)
        counter = timesteps_added(state)
        if cap >= n:  # nothing dropped: every timestep read was added
            assert counter == n, what
        else:  # the ring dropped its oldest: a buffer that wrapped
            assert counter >= n, what


@examples(4)
@given(spec=vault_specs(), data=st.data())
def test_windows_agree_with_read_numpy(
    workdir: Path, spec: dict[str, Any], data: st.DataObject
) -> None:
    _, model, v = fresh(workdir, spec)
    if model.length == 0:
        return
    window = data.draw(st.integers(1, 8))
    capacity = data.draw(st.one_of(st.none(), st.integers(window, window + 3)))
    shuffle = data.draw(st.booleans())
    drop = data.draw(st.booleans())
    rows = data.draw(rows_strategy(spec["rows"]))
    leaves = data.draw(leaf_choice)
    if drop and model.length < window:
        return
    epochs = data.draw(st.integers(1, 2))
    stream = v.iter_windows(
        window,
        shuffle=shuffle,
        seed=3,
        capacity=capacity,
        rows=rows,
        leaves=leaves,
        drop_remainder=drop,
        epochs=epochs,
        prefetch=data.draw(st.integers(0, 2)),
    )
    cap = window if capacity is None else capacity
    ranges = [r for epoch in range(epochs) for r in stream.ranges(epoch)]
    bounds = [(t, min(t + window, model.length)) for t in range(0, model.length, window)]
    if drop and bounds[-1][1] - bounds[-1][0] < window:
        bounds.pop()
    for epoch in range(epochs):  # every timestep once per epoch
        assert sorted(stream.ranges(epoch)) == bounds
        if not shuffle:
            assert stream.ranges(epoch) == bounds
    with stream:
        states = list(stream)
    assert len(states) == len(ranges)
    for (lo, hi), state in zip(ranges, states, strict=True):
        want = as_flat(v.read_numpy(rows=rows, start=lo, stop=hi, leaves=leaves), leaves)
        padded = {}
        for name, x in want.items():
            ring = np.zeros((x.shape[0], cap, *x.shape[2:]), x.dtype)
            ring[:, : hi - lo] = x
            padded[name] = ring
        assert_same(as_flat(state.experience, leaves), padded, f"window {lo}:{hi}")
        full = hi - lo == cap
        assert bool(state.is_full) == full
        assert int(state.current_index) == (0 if full else hi - lo)
        assert timesteps_added(state) == hi - lo


def stream_options(draw: Callable[..., Any], spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "rows": draw(rows_strategy(spec["rows"])),
        "leaves": draw(leaf_choice),
        "stride": draw(st.integers(1, 3)),
        "episode_aware": draw(st.booleans()),
        "block_timesteps": draw(st.one_of(st.none(), st.integers(1, 9))),
        "block_rows": draw(st.one_of(st.none(), st.integers(1, 3))),
        "run_blocks": draw(st.one_of(st.none(), st.integers(1, 3))),
        "interleave": draw(st.integers(1, 3)),
        "shuffle": draw(st.booleans()),
        "stack": draw(st.one_of(st.none(), st.integers(1, 3))),
        "prefetch": draw(st.integers(0, 2)),
    }


def sequences(item: Any, leaves: list[str] | None) -> Iterator[tuple[int, int, int, dict]]:
    """``(source, row, start, leaves)`` of every sequence of a StreamBatch (stacked or not)."""
    got = as_flat(item.experience, leaves)
    row, start, source = (np.asarray(x) for x in (item.row, item.start, item.source))
    if row.ndim == 1:
        row, start, source = row[None], start[None], source[None]
        got = {n: x[None] for n, x in got.items()}
    for k in range(row.shape[0]):
        for i in range(row.shape[1]):
            one = {n: np.asarray(x[k, i]) for n, x in got.items()}
            yield int(source[k, i]), int(row[k, i]), int(start[k, i]), one


@examples(6)
@given(spec=vault_specs(), data=st.data())
def test_streams_and_grain_agree_with_read_numpy(
    workdir: Path, spec: dict[str, Any], data: st.DataObject
) -> None:
    _, model, v = fresh(workdir, spec)
    seq = data.draw(st.integers(1, 4))
    if model.length < seq:
        return
    options = stream_options(data.draw, spec)
    if options["block_timesteps"] is not None:
        options["block_timesteps"] = max(seq, options["block_timesteps"])
    ids = picked(options["rows"], spec["rows"])
    aware = options["episode_aware"]
    expected = valid_starts(model, v.seams, ids, seq, options["stride"], aware)
    leaves = options["leaves"]
    whole = model.data()
    names = LEAVES if leaves is None else leaves

    # grain: records numbered row by row in time order, each the window read_numpy reads
    if not expected:
        return
    source = grain_source(
        v, seq, stride=options["stride"], rows=options["rows"], leaves=leaves, episode_aware=aware
    )
    assert len(source) == len(expected)
    for i, (row, t) in enumerate(expected):
        assert source.where(i) == (0, row, t)
        got = as_flat(source[i], leaves)
        assert_same(got, {n: whole[n][row, t : t + seq] for n in names}, f"grain[{i}]")

    # as_dataset: every start once per epoch, each sequence read_numpy's
    batch = data.draw(st.integers(1, 4))
    drop = data.draw(st.booleans())
    epochs = data.draw(st.integers(1, 2))
    stream = v.as_dataset(batch, seq, seed=7, drop_remainder=drop, epochs=epochs, **options)
    if drop and len(expected) < batch:
        return
    seen: list[list[tuple[int, int]]] = [[] for _ in range(epochs)]
    order: list[tuple[int, int]] = []
    items = []
    for item in stream:
        items.append(item)
        for src, row, t, one in sequences(item, leaves):
            assert src == 0
            seen[item.epoch].append((row, t))
            order.append((row, t))
            assert_same(one, {n: whole[n][row, t : t + seq] for n in names}, f"seq {row}@{t}")
    for epoch in range(epochs):
        yielded = sorted(seen[epoch])
        if drop:
            assert len(yielded) == len(expected) // batch * batch
            assert set(yielded) <= set(expected)
            assert len(set(yielded)) == len(yielded)
        else:
            assert yielded == sorted(expected), epoch
    # the same arguments stream the same batches (deterministic for a seed) and a checkpoint
    # after any item resumes with exactly the rest
    if items:
        k = data.draw(st.integers(0, len(items) - 1))
        again = v.as_dataset(batch, seq, seed=7, drop_remainder=drop, epochs=epochs, **options)
        it = iter(again)
        replay = [next(it) for _ in range(k)]
        state = json.loads(json.dumps(again.state()))
        rest = [(r, t) for item in it for _, r, t, _ in sequences(item, leaves)]
        before = [(r, t) for item in replay for _, r, t, _ in sequences(item, leaves)]
        assert before + rest == order
        resumed = resume_stream(state)
        after = [(r, t) for item in resumed for _, r, t, _ in sequences(item, leaves)]
        assert after == rest


@examples(4)
@given(spec=vault_specs())
def test_episode_readers_agree_with_read_numpy(workdir: Path, spec: dict[str, Any]) -> None:
    _, model, v = fresh(workdir, spec)
    whole = model.data()
    table = v.episodes(include_open=True)
    got = list(
        zip(
            table.row.tolist(),
            table.start.tolist(),
            table.length.tolist(),
            table.complete.tolist(),
            table.start_known.tolist(),
            strict=True,
        )
    )
    want = [(r, s, n, c, k) for _, r, s, n, c, k in model.episodes()]
    assert got == want
    for (row, start, n, *_), ret in zip(got, table.returns.tolist(), strict=True):
        assert ret == pytest.approx(float(whole["nest/pair/0"][row, start : start + n].sum()))
    complete = v.episodes()
    assert len(complete) == sum(c for *_, c, _ in want)
    episodes = list(v.iter_episodes())
    assert len(episodes) == len(complete)
    for i, one in enumerate(episodes):
        row, start, n = int(complete.row[i]), int(complete.start[i]), int(complete.length[i])
        want_one = {
            k: x[0] for k, x in flat(v.read_numpy(rows=[row], start=start, stop=start + n)).items()
        }
        assert_same(flat(one), want_one, f"iter_episodes[{i}]")
        assert_same(flat(v.read_episode(i)), want_one, f"read_episode({i})")
        assert_same(v.read_episode(complete[i], leaves=["obs"]), {"obs": want_one["obs"]}, "")


@examples(3)
@given(spec=vault_specs(), data=st.data())
def test_xarray_agrees_with_read_numpy(
    workdir: Path, spec: dict[str, Any], data: st.DataObject
) -> None:
    path, model, v = fresh(workdir, spec)
    whole = model.data()
    ds = v.to_xarray()
    assert ds.attrs["committed_length"] == model.length
    for name in LEAVES:
        var = ds[name.replace("/", ".")]
        item_dims = tuple(f"{name.replace('/', '.')}_{i}" for i in range(whole[name].ndim - 2))
        assert var.dims == ("row", "time", *item_dims)
        assert var.attrs["leaf"] == name
        np.testing.assert_array_equal(var.values, whole[name], err_msg=name)
    table = v.episodes()
    for var, column in (
        ("episode_row", "row"),
        ("episode_start", "start"),
        ("episode_length", "length"),
        ("episode_start_known", "start_known"),
    ):
        np.testing.assert_array_equal(ds[var].values, getattr(table, column), err_msg=var)
    np.testing.assert_allclose(ds["episode_return"].values, table.returns)
    assert not ds["episode_truncated"].values.any()  # no truncated leaf
    assert ds.sizes["episode"] == len(table)
    # dask slices of any block (rows, time) read exactly what read_numpy reads
    rows = data.draw(rows_strategy(spec["rows"]))
    choice = data.draw(time_choice(model.length))
    lo, hi = span(choice, model.length)
    ids = picked(rows, spec["rows"])
    for name in ("obs", "nest/pair/1", "done"):
        arr = ds[name.replace("/", ".")].data
        got = arr[ids][:, lo:hi].compute(scheduler="synchronous")
        want = v.read_numpy(rows=ids, start=lo, stop=hi, leaves=[name])[name]
        np.testing.assert_array_equal(got, want, err_msg=f"dask {name} {ids} {lo}:{hi}")
    # a plain reader of the vault at rest
    plain = xr.open_zarr(path, group="experience", consolidated=False)
    np.testing.assert_array_equal(plain["obs"].values, whole["obs"])
    np.testing.assert_array_equal(plain["done"].values, whole["done"])


@st.composite
def cli_selection(draw: st.DrawFn, rows: int, length: int) -> tuple[list[str], list[int], int, int]:
    """``vault show``/``export`` options and the rows and time range they select."""
    args: list[str] = []
    ids = list(range(rows))
    how = draw(st.sampled_from(["none", "list", "span"]))
    if how == "list":
        ids = draw(st.lists(st.integers(0, rows - 1), min_size=1, max_size=rows, unique=True))
        args += ["--rows", ",".join(str(r) for r in ids)]
    elif how == "span":
        a = draw(st.integers(0, rows - 1))
        b = draw(st.integers(a + 1, rows))
        ids = list(range(a, b))
        args += ["--rows", f"{a}:{b}"]
    lo, hi = 0, length
    how = draw(st.sampled_from(["none", "span", "negative", "one"]))
    if how == "span":
        lo, hi = sorted((draw(st.integers(0, length)), draw(st.integers(0, length))))
        args += ["--time", f"{lo}:{hi}"]
    elif how == "negative" and length:
        k = draw(st.integers(1, length))
        lo = length - k
        args += ["--time", f"-{k}:"]
    elif how == "one" and length:
        lo = draw(st.integers(0, length - 1))
        hi = lo + 1
        args += ["--time", str(lo)]
    return args, ids, lo, hi


@examples(3)
@given(spec=vault_specs(), data=st.data())
def test_cli_show_and_export_agree_with_read_numpy(
    workdir: Path, spec: dict[str, Any], data: st.DataObject
) -> None:
    from typer.testing import CliRunner

    from vault.cli.app import app

    path, model, v = fresh(workdir, spec)
    args, ids, lo, hi = data.draw(cli_selection(spec["rows"], model.length))
    leaves = data.draw(leaf_choice)
    names = LEAVES if leaves is None else leaves
    for name in leaves or []:
        args += ["--leaf", name]
    want = v.read_numpy(rows=ids, start=lo, stop=hi, leaves=names)
    runner = CliRunner()
    shown = runner.invoke(app, ["show", path, *args, "--json"])
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert doc["rows_selected"] == ids
    assert doc["time"] == [lo, hi]
    assert [leaf["name"] for leaf in doc["leaves"]] == names
    for leaf in doc["leaves"]:
        x = want[leaf["name"]]
        assert leaf["shape"] == list(x.shape)
        assert leaf["dtype"] == str(x.dtype)
        np.testing.assert_array_equal(np.asarray(leaf["values"], x.dtype).reshape(x.shape), x)
    out = workdir / f"export{_count[0]}.npz"
    exported = runner.invoke(app, ["export", path, "--out", str(out), *args])
    assert exported.exit_code == 0, exported.output
    with np.load(out, allow_pickle=False) as npz:
        header = json.loads(str(npz["__manifest__"]))
        assert header["rows"] == ids
        assert header["time"] == [lo, hi]
        assert header["leaves"] == names
        # the seams inside the selection (one at its first timestep may be named too)
        inside = [s.to_json() for s in v.seams if lo < s.at < hi]
        edge = [s.to_json() for s in v.seams if s.at == lo]
        assert header["seams"] in (inside, edge + inside)
        assert_same({n: npz[n] for n in names}, want, "vault export")


def test_a_state_read_with_a_smaller_capacity_can_be_written_again(workdir: Path) -> None:
    # train-offline.md: a state read with `capacity` is one to keep adding to, which "any
    # buffer of that shape takes"; recording it again (to another vault) must work too
    path = str(workdir / "five")
    with Vault.create(path, {"x": np.int32(0)}, rows=1) as v:
        v.append({"x": np.arange(5, dtype=np.int32)[None]})
    state = Vault.open(path).read(capacity=3)  # keeps timesteps 2, 3, 4
    # a ring buffer's invariant: its position is the count of timesteps added, modulo the ring
    assert int(state.current_index) == timesteps_added(state) % 3
    with Vault.create(str(workdir / "again"), state) as again:
        assert again.write(state) == 3
    assert Vault.open(str(workdir / "again")).read_numpy()["x"].tolist() == [[2, 3, 4]]
