"""Where the options of the read entry points meet each other and the vault's history.

Joints covered: ``read_numpy`` / ``read`` (a buffer state, with ``capacity=``) with rows given
as lists, numpy arrays, ranges, slices (negative steps), duplicates and nothing; time ranges
by ``start``/``stop``, ``last`` and ``percentiles``; nested leaf subsets; each of them on a
vault with seams (an overrun saved with ``save_surviving``, a restart by a resumed writer),
wrapped ring writes, and pins by number, id and tag. A state read with ``capacity=`` fed to
``make_trajectory_buffer`` (``add`` continues after the data, samples stay inside it) and to
``make_episode_buffer(...).from_state`` (with the seams as ``restarts``, as
docs/guides/train-offline.md says). Streams (``iter_windows``, ``as_dataset``, ``to_xarray``)
made by a writer and consumed after it appended more. Episodes read by a table
(``read_episode`` / ``iter_episodes``) on a pinned vault. Options given as one-shot
iterables, 0-d arrays, and 64-bit integer leaves read into a JAX state.

Every value read is compared with a trivially correct model: the data say where they belong
(``obs = 1000 * row + step`` of the row's history), so the model of what a vault stores is
the list of history steps it kept.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers as fbx
import vault
from vault import Dataset, Vault, VaultArgumentError, VaultCorruptError, VaultError

ROWS = 3
EXAMPLE = {
    "obs": np.zeros(2, np.float32),
    "done": np.zeros((), bool),
    "info": {"k": np.zeros((), np.int32), "h": np.zeros((), np.float16)},
    "pair": (np.zeros((), np.uint8), np.zeros((), bool)),
}
# small, uneven chunks: most reads cut chunks, most appends rewrite a partly filled one
CHUNK: dict[str, Sequence[int]] = {
    "obs": [2, 4, 1],
    "done": [3, 3],
    "info/k": [1, 5],
    "info/h": [3, 8],
    "pair/0": [2, 2],
    "pair/1": [3, 4],
}


def history(lo: int, hi: int, rows: int = ROWS) -> dict[str, Any]:
    """History steps ``[lo, hi)`` of every row: each leaf says (row, step)."""
    k = np.arange(lo, hi)[None, :]
    r = np.arange(rows)[:, None]
    code = 1000 * r + k
    return {
        "obs": (code[..., None] + np.array([0.0, 0.5])).astype(np.float32),
        "done": (k + 2 * r) % 5 == 4,
        "info": {"k": code.astype(np.int32), "h": (k % 64 + r / 4).astype(np.float16)},
        "pair": ((code % 251).astype(np.uint8), code % 3 == 0),
    }


def flat(tree: Any) -> dict[str, np.ndarray]:
    """``{leaf path: array}`` of a tree shaped like ``history``'s."""
    return {
        "obs": tree["obs"],
        "done": tree["done"],
        "info/k": tree["info"]["k"],
        "info/h": tree["info"]["h"],
        "pair/0": tree["pair"][0],
        "pair/1": tree["pair"][1],
    }


def model_of(steps: list[int]) -> dict[str, np.ndarray]:
    """What a vault that kept history ``steps`` stores, per leaf path ``[rows, time, ...]``."""
    parts = [flat(history(s, s + 1)) for s in steps]
    return {key: np.concatenate([p[key] for p in parts], axis=1) for key in parts[0]}


def assert_tree_equal(got: Any, want: dict[str, np.ndarray], what: str) -> None:
    """``got`` (the vault's structure, or ``{path: array}``) equals ``want`` leaf by leaf."""
    leaves = got if all(isinstance(k, str) and k in want for k in got) else flat(got)
    assert set(leaves) <= set(want), (what, set(leaves))
    for key, value in leaves.items():
        arr = np.asarray(value)
        assert arr.dtype == want[key].dtype, (what, key, arr.dtype)
        np.testing.assert_array_equal(arr, want[key], err_msg=f"{what}: {key}")


Overrun = Literal["error", "save_surviving"]
TB_ADD: dict[int, Any] = {}


def ring_add(time_len: int) -> Any:
    """A jitted ``add`` of a trajectory buffer of ``ROWS`` rows and ``time_len`` slots."""
    if time_len not in TB_ADD:
        buf = fbx.make_trajectory_buffer(ROWS, 1, 1, 1, 1, max_length_time_axis=time_len)
        TB_ADD[time_len] = (buf, jax.jit(buf.add))
    return TB_ADD[time_len]


@pytest.fixture(scope="module")
def seamed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A vault written from a ring of 4 slots (a wrapped ring, an overrun of 3 saved with
    ``save_surviving``), appended to, closed, resumed by a new writer that restarts (a seam)
    and tags a commit; the model of every commit ``(pin, steps kept)``."""
    path = str(tmp_path_factory.mktemp("seamed") / "v")
    buf, add = ring_add(4)
    state = buf.init(jax.tree.map(lambda x: jnp.asarray(x[0, 0]), history(0, 1)))
    v = Vault.create(path, state, chunk=CHUNK, done_leaf="done")
    steps: list[int] = []
    commits: list[tuple[Any, list[int]]] = []
    k = 0
    writes: list[tuple[int, Overrun, list[int]]] = [
        (3, "error", [0, 1, 2]),
        (7, "save_surviving", [6, 7, 8, 9]),
    ]
    for n, how, kept in writes:
        for _ in range(n):
            state = add(state, jax.tree.map(jnp.asarray, history(k, k + 1)))
            k += 1
        v.write(state, on_overrun=how)
        steps += kept
        commits.append((v.commit_id, list(steps)))
    v.append(history(10, 15))
    steps += list(range(10, 15))
    commits.append((int(v.commit_id.split("-")[0]), list(steps)))  # pinned by number
    v.close()
    w = Vault.open(path, mode="a")
    w.append(history(15, 22), continues=False)
    steps += list(range(15, 22))
    w.tag("restarted")
    commits.append(("restarted", list(steps)))
    w.append(history(22, 31))
    steps += list(range(22, 31))
    w.close()
    commits.append((None, list(steps)))
    live = Vault.open(path)
    assert [(s.at, s.lost) for s in live.seams] == [(3, 3), (12, 0)]
    return {"path": path, "commits": commits, "steps": steps}


# -------------------------------------------------------------------------- guards (hold today)
ROW_CHOICES: list[Any] = [
    None,
    [2, 0],
    [1, 1, 2],
    [],
    np.array([2], np.int64),
    np.array([0, 2], np.uint8),
    range(2, -1, -1),
    slice(1, None),
    slice(None, None, -2),
    slice(0, 3, 2),
]


def picked(rows: Any) -> np.ndarray:
    """The model's row indices that ``rows`` picks."""
    if rows is None:
        return np.arange(ROWS)
    if isinstance(rows, slice):
        return np.arange(ROWS)[rows]
    return np.asarray(list(rows), np.int64).reshape(-1)


def test_every_row_and_time_choice_on_every_pin_reads_the_model(seamed: dict[str, Any]) -> None:
    """read_numpy with each row choice (lists, duplicates, none, numpy ints of two widths, a
    reversed range, slices with steps) times each way of choosing time (start/stop, equal,
    last, percentiles), at every commit pinned by id, number or tag and at the latest, equals
    the model of that commit exactly: structure, dtypes and values."""
    for pin, steps in seamed["commits"]:
        v = Vault.open(seamed["path"], at=pin) if pin is not None else Vault.open(seamed["path"])
        length = len(steps)
        assert v.committed_length == length
        model = model_of(steps)
        times: list[tuple[dict[str, Any], int, int]] = [
            ({}, 0, length),
            ({"start": 1, "stop": length - 1}, 1, length - 1),
            ({"start": length - 1}, length - 1, length),
            ({"stop": 2}, 0, 2),
            ({"start": 2, "stop": 2}, 2, 2),
            ({"last": 2}, length - 2, length),
            ({"percentiles": (0, 50)}, 0, length // 2),
        ]
        for rows, (when, lo, hi) in itertools.product(ROW_CHOICES, times):
            what = f"pin {pin} rows {rows!r} {when}"
            want = {key: x[picked(rows)][:, lo:hi] for key, x in model.items()}
            assert_tree_equal(v.read_numpy(rows=rows, **when), want, what)
        got = v.read_numpy(rows=[2, 0], leaves=["pair/0", "info/h"], last=3)
        assert list(got) == ["pair/0", "info/h"]
        assert_tree_equal(got, {k: model[k][[2, 0], -3:] for k in model}, f"pin {pin} leaves")


@pytest.mark.parametrize("capacity", [40, 5])
def test_a_state_of_any_capacity_adds_on_and_samples_inside_the_data(
    seamed: dict[str, Any], capacity: int
) -> None:
    """``read(rows=, start=, stop=, capacity=)`` holds the most recent ``capacity`` steps of
    the range (then zeros; fewer slots than steps: where a ring that had them all added holds
    them), with ``current_index``/``is_full`` such that a trajectory buffer of that shape adds
    right after the data (docs: "add continues after the data") and samples only stored
    steps; every sequence it samples is two consecutive stored steps of one row."""
    model = model_of(seamed["steps"])
    length = len(seamed["steps"])
    rows, lo, hi = [2, 0, 1], 2, length
    state = Vault.open(seamed["path"]).read(rows=rows, start=lo, stop=hi, capacity=capacity)
    keep = min(capacity, hi - lo)
    shift = (hi - lo) % capacity if capacity <= keep else 0  # slot of the oldest kept step
    got = flat(state.experience)
    for key, x in model.items():
        want = np.zeros((3, capacity, *x.shape[2:]), x.dtype)
        want[:, :keep] = x[rows][:, hi - keep : hi]
        want = np.roll(want, shift, axis=1)
        np.testing.assert_array_equal(np.asarray(got[key]), want, err_msg=f"{capacity} {key}")
    assert int(state.current_index) == (keep if capacity > keep else shift)
    assert bool(state.is_full) == (capacity <= keep)
    assert fbx.timesteps_added(state) == hi - lo  # every step read, kept or not
    buf = fbx.make_trajectory_buffer(3, 64, 2, 1, 2, max_length_time_axis=capacity)
    more = jax.tree.map(lambda x: x[rows], history(100, 102))
    after = jax.jit(buf.add)(state, jax.tree.map(jnp.asarray, more))
    obs = np.asarray(after.experience["obs"])[..., 0]
    slots = np.zeros((3, capacity), np.float32)  # the ring's slots: the data, then the adds
    slots[:, :keep] = model["obs"][rows][:, hi - keep : hi, 0]
    slots = np.roll(slots, shift, axis=1)
    for i in range(2):
        slots[:, (int(state.current_index) + i) % capacity] = more["obs"][:, i, 0]
    np.testing.assert_array_equal(obs, slots)
    stored = np.concatenate([model["obs"][rows][:, hi - keep : hi, 0], more["obs"][..., 0]], 1)
    ring = stored[:, -capacity:]  # in time order
    sample = jax.jit(buf.sample)(after, jax.random.key(capacity))
    assert bool(np.asarray(sample.valid).all())
    drawn = np.asarray(sample.experience["obs"])[..., 0]
    for a, b in drawn:
        row = np.flatnonzero((ring == a).any(axis=1))
        assert row.size == 1, (a, b)
        t = int(np.flatnonzero(ring[row[0]] == a)[0])
        assert t + 1 < ring.shape[1], (a, b)
        assert ring[row[0], t + 1] == b, (a, b)


def test_streams_a_writer_made_stay_at_its_commit_while_it_appends(tmp_path: Path) -> None:
    """A writer's own ``iter_windows``, ``as_dataset`` and ``to_xarray``, made before it
    appends more (growing its arrays and rewriting the partly filled last chunks) and consumed
    after, read exactly the commit they were made at; the writer itself reads its new
    commit."""
    path = str(tmp_path / "v")
    w = Vault.create(path, jax.tree.map(lambda x: x[0, 0], history(0, 1)), rows=ROWS, chunk=CHUNK)
    w.append(history(0, 7))
    windows = w.iter_windows(3, capacity=4, prefetch=0)
    stream = w.as_dataset(4, 2, shuffle=False, prefetch=0, leaves=["info/k"], drop_remainder=False)
    xr = w.to_xarray(leaves=["obs", "pair/0"])
    w.append(history(7, 20))
    w.append(history(20, 21), continues=False)
    model = model_of(list(range(7)))
    got = [np.asarray(s.experience["info"]["k"]) for s in windows]
    assert [g.shape for g in got] == [(ROWS, 4)] * 3
    np.testing.assert_array_equal(
        np.concatenate([got[0][:, :3], got[1][:, :3], got[2][:, :1]], 1), model["info/k"]
    )
    starts = set()
    for batch in stream:
        for i, (row, t) in enumerate(zip(batch.row, batch.start, strict=True)):
            want = model["info/k"][row, t : t + 2]
            np.testing.assert_array_equal(batch.experience["info/k"][i], want)
            starts.add((int(row), int(t)))
    assert starts == {(r, t) for r in range(ROWS) for t in range(6)}
    np.testing.assert_array_equal(xr["obs"].values, model["obs"])
    np.testing.assert_array_equal(xr["pair.0"].values, model["pair/0"])
    assert_tree_equal(w.read_numpy(), model_of(list(range(21))), "writer")
    w.close()


# ----------------------------------------------------------------------------- bugs (xfail)
def test_percentiles_cut_at_the_exact_percent_of_the_length(tmp_path: Path) -> None:
    """``percentiles=(a, b)``: "the timesteps between a and b percent of the committed
    length". On a vault of 100 steps, whole percents are whole steps: (a, b) is ``[a, b)``
    for every a, b (floats like 0.29 * 100 = 28.999999999999996 must not move a cut)."""
    path = str(tmp_path / "hundred")
    with Vault.create(path, {"t": np.int32(0)}, rows=1) as w:
        w.append({"t": np.arange(100, dtype=np.int32)[None]})
    v = Vault.open(path)
    wrong = []
    for a in range(101):
        got = v.read_numpy(percentiles=(a, 100), leaves=["t"])["t"][0]
        if got.tolist() != list(range(a, 100)):
            wrong.append((a, 100))
        got = v.read_numpy(percentiles=(0, a), leaves=["t"])["t"][0]
        if got.tolist() != list(range(a)):
            wrong.append((0, a))
    assert wrong == [], f"percentiles read from or to another step: {wrong}"


@pytest.mark.parametrize("entry", ["read_numpy", "read", "iter_windows", "as_dataset"])
def test_rows_as_a_0d_array_is_a_typed_refusal(seamed: dict[str, Any], entry: str) -> None:
    """``rows=np.array(1)`` (what ``np.argmax`` gives) is refused as ``rows=1`` is: a
    :class:`VaultArgumentError` that names ``rows``, by every entry point taking rows."""
    v: Any = Vault.open(seamed["path"])  # arguments outside the annotations, on purpose
    calls = {
        "read_numpy": lambda: v.read_numpy(rows=np.array(1)),
        "read": lambda: v.read(rows=np.array(1)),
        "iter_windows": lambda: v.iter_windows(4, rows=np.array(1)),
        "as_dataset": lambda: v.as_dataset(2, 2, rows=np.array(1)),
    }
    with pytest.raises(VaultArgumentError, match="rows"):
        calls[entry]()


def one_shot_cases(v: Any, ds: Any) -> dict[str, tuple[Any, Any]]:
    """(the call given a one-shot iterator, the same call given a list): name -> pair."""
    grain_source: Any = vault.grain_source  # iterators are outside its annotations, on purpose
    return {
        "iter_windows-rows": (
            lambda: [s.experience["obs"] for s in v.iter_windows(8, rows=iter([2, 0]))],
            lambda: [s.experience["obs"] for s in v.iter_windows(8, rows=[2, 0])],
        ),
        "iter_windows-leaves": (
            lambda: [s.experience for s in v.iter_windows(8, leaves=iter(["info/k"]))],
            lambda: [s.experience for s in v.iter_windows(8, leaves=["info/k"])],
        ),
        "iter_episodes-leaves": (
            lambda: list(v.iter_episodes(leaves=iter(["info/k"]))),
            lambda: list(v.iter_episodes(leaves=["info/k"])),
        ),
        "grain_source-leaves": (
            lambda: grain_source(v, 3, leaves=iter(["obs"]))[5],
            lambda: grain_source(v, 3, leaves=["obs"])[5],
        ),
        "dataset-to_xarray-leaves": (
            lambda: ds.to_xarray(leaves=iter(["obs"]))["shards/a"].to_dataset()["obs"].values,
            lambda: ds.to_xarray(leaves=["obs"])["shards/a"].to_dataset()["obs"].values,
        ),
    }


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    root = str(tmp_path_factory.mktemp("ds") / "ds")
    example = jax.tree.map(lambda x: x[0, 0], history(0, 1))
    ds = Dataset.create(root, example, rows=ROWS, chunk=CHUNK, done_leaf="done")
    for name, n in (("a", 9), ("b", 5)):
        with ds.shard(name) as s:
            s.append(history(0, n))
    return Dataset.open(root)


@pytest.mark.parametrize(
    "case",
    [
        "iter_windows-rows",
        "iter_windows-leaves",
        "iter_episodes-leaves",
        "grain_source-leaves",
        "dataset-to_xarray-leaves",
    ],
)
def test_an_iterator_of_rows_or_leaves_reads_what_the_list_reads(
    seamed: dict[str, Any], two_shards: Dataset, case: str
) -> None:
    """``read_numpy`` and ``as_dataset`` take ``rows``/``leaves`` as any iterable (a
    generator, ``iter(...)``) and read what the list reads. Every other entry point must do
    the same, or refuse it at the call with a :class:`VaultArgumentError` naming the
    argument: never read an empty selection, never a misleading ``leaves=[]``."""
    v = Vault.open(seamed["path"])
    given, as_list = one_shot_cases(v, two_shards)[case]
    refused = ""
    try:
        got = given()
    except VaultArgumentError as err:  # refused at the call as a type: fine
        refused = str(err)
    except VaultError as err:
        pytest.fail(f"{case}: an iterator of valid choices refused as {err!r}")
    if refused:
        assert "rows" in refused or "leaves" in refused
        return
    want = as_list()
    assert str(jax.tree.structure(got)) == str(jax.tree.structure(want))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def swapped_vault(path: str) -> str:
    """A closed vault whose row 1 has its first two complete time-chunks swapped on disk
    (each still passes its own checksum; only the place check catches it)."""
    with Vault.create(path, {"x": np.int64(0)}, rows=2, chunk={"x": [1, 4]}) as w:
        t = np.arange(10)[None, :]
        w.append({"x": (1000 * np.arange(2)[:, None] + t).astype(np.int64)})
    chunks = Path(path) / "experience" / "x" / "c" / "1"
    a, b = (chunks / "0").read_bytes(), (chunks / "1").read_bytes()
    (chunks / "0").write_bytes(b)
    (chunks / "1").write_bytes(a)
    return path


@pytest.mark.parametrize("how", ["read_numpy", "read"])
def test_rows_as_an_iterator_still_check_each_chunk_s_place(tmp_path: Path, how: str) -> None:
    """ "What comes back is what was committed, or an error": with ``rows=[1]`` the swapped
    chunks are a :class:`VaultCorruptError`; ``rows=iter([1])`` must not return them as
    data."""
    path = swapped_vault(str(tmp_path / "v"))
    with pytest.raises(VaultCorruptError, match="is not the chunk written there"):
        getattr(Vault.open(path), how)(rows=[1])
    try:
        got = getattr(Vault.open(path), how)(rows=iter([1]))
    except (VaultCorruptError, VaultArgumentError):
        return
    x = np.asarray(got["x"] if how == "read_numpy" else got.experience["x"])
    np.testing.assert_array_equal(x, 1000 + np.arange(10)[None])


def test_rows_as_an_iterator_on_s3_read_those_rows(s3_env: Any) -> None:
    """On object storage every chunk is fetched once and decoded into the destination by row
    (``vault/storage/_relay.py``): ``rows=iter([2, 1])`` must read rows 2 and 1 as
    ``rows=[2, 1]`` does (or be refused at the call), never unwritten memory."""
    url = f"s3://{s3_env.bucket}/read-options-{uuid.uuid4().hex[:8]}/v"
    x = (1000 * np.arange(3)[:, None] + np.arange(10)[None]).astype(np.int64)
    with Vault.create(url, {"x": np.int64(0)}, rows=3, chunk={"x": [1, 4]}) as w:
        w.append({"x": x})
    v = Vault.open(url)
    for how in ("read_numpy", "read"):
        try:
            got = getattr(v, how)(rows=iter([2, 1]), start=3)
        except VaultArgumentError:
            continue
        arr = got["x"] if how == "read_numpy" else got.experience["x"]
        np.testing.assert_array_equal(np.asarray(arr), x[[2, 1], 3:], err_msg=how)
    np.testing.assert_array_equal(v.read_numpy(rows=[2, 1], start=3)["x"], x[[2, 1], 3:])


def test_a_pinned_vault_reads_no_episode_past_its_commit(seamed: dict[str, Any]) -> None:
    """A pinned vault "returns exactly that commit's data" and readers "never look past the
    committed length": an episode of the latest table that lies past the pin (or reaches
    past it) is refused (:class:`VaultError`, as ``derive_episodes`` refuses "one outside
    the data"), never read from the later commits."""
    pin, steps = seamed["commits"][1]  # 7 steps
    pinned = Vault.open(seamed["path"], at=pin)
    table = Vault.open(seamed["path"]).episodes()
    late = table[table.start + table.length > len(steps)]
    assert len(late) > 0
    leaked = []
    for i in range(len(late)):
        try:
            got = pinned.read_episode(late[i], leaves=["info/k"])["info/k"]
        except VaultError:
            continue
        leaked.append(got.tolist())
    with contextlib.suppress(VaultError):
        leaked += [e["info/k"].tolist() for e in pinned.iter_episodes(late, leaves=["info/k"])]
    assert leaked == [], f"pinned at {len(steps)} steps, read {leaked}"


def test_a_64_bit_leaf_read_as_a_state_keeps_its_values_or_is_refused(tmp_path: Path) -> None:
    """A vault made from an example with a Python int (int64; record-arrays.md stores actions
    as int64) holding step counters past 2**31: ``read`` gives those values, or refuses with a
    :class:`VaultError` naming the leaf; never other numbers (``read_numpy`` is exact)."""
    path = str(tmp_path / "v")
    steps = np.array([[2**31 + 5, 3_000_000_000, 7]], np.int64)
    with Vault.create(path, {"step": 0, "x": np.float32(0)}, rows=1) as w:
        w.append({"step": steps, "x": np.zeros((1, 3), np.float32)})
    v = Vault.open(path)
    np.testing.assert_array_equal(v.read_numpy()["step"], steps)
    refused = ""
    try:
        state = v.read()
    except VaultError as err:
        refused = str(err)
    if refused:
        assert "step" in refused
        return
    np.testing.assert_array_equal(np.asarray(state.experience["step"]).astype(np.int64), steps)


EPISODE_T = {"t": np.int32(0), "done": np.bool_(False)}


def episode_vault(path: str, appends: list[tuple[int, int, bool]], every: int) -> Vault:
    """One row, ``t`` = history step, an episode ending at every ``every``-th step; appends
    of history ``[lo, hi)`` (``continues``)."""
    with Vault.create(path, EPISODE_T, rows=1, done_leaf="done") as w:
        for lo, hi, continues in appends:
            t = np.arange(lo, hi, dtype=np.int32)[None]
            w.append({"t": t, "done": t % every == every - 1}, continues=continues)
    return Vault.open(path)


EB_CACHE: dict[int, tuple[Any, Any]] = {}
EB_T = 24  # the time axis of every episode state below (one compilation)


def padded_episode_buffer(time_len: int) -> tuple[Any, Any]:
    """Jitted ``from_state`` and ``sample`` of an episode buffer with ``pad=True``, windows of
    4, ``time_len`` slots."""
    if time_len not in EB_CACHE:
        eb = fbx.make_episode_buffer(
            add_batch_size=1, sample_batch_size=256, sample_sequence_length=4,
            min_length_time_axis=1, max_length_time_axis=time_len, episode_end="done", pad=True,
        )  # fmt: skip
        EB_CACHE[time_len] = (jax.jit(eb.from_state), jax.jit(eb.sample))
    return EB_CACHE[time_len]


def padded_firsts(sample: Any) -> set[tuple[int, int]]:
    """(first step, steps) of each sampled window shorter than 4 (a padded whole episode)."""
    t = np.asarray(sample.experience["t"])
    mask = np.asarray(sample.mask)
    return {(int(w[0]), int(m.sum())) for w, m in zip(t, mask, strict=True) if m.sum() < 4}


def test_a_state_cut_by_capacity_never_offers_its_cut_episode_whole(tmp_path: Path) -> None:
    """``read(capacity=C)`` with fewer slots than steps "keeps the most recent C": a ring that
    dropped its oldest steps, which ``from_state`` must take as such ("a state whose ring has
    wrapped is taken so by itself"), so that the first, partial episode "is never sampled as
    a whole one". Episodes of 6 steps end at 5, 11, 17, 23; capacity 8 keeps steps 16..23:
    steps 16..17 are the tail of an episode that began at 12."""
    v = episode_vault(str(tmp_path / "v"), [(0, 40, True)], every=6)
    from_state, sample = padded_episode_buffer(EB_T)
    state = v.read(capacity=EB_T)
    kept = np.roll(np.arange(16, 40), 40 % EB_T)  # timestep t at t % capacity
    np.testing.assert_array_equal(np.asarray(state.experience["t"])[0], kept)
    drawn = sample(from_state(state), jax.random.key(0))
    assert (16, 2) not in padded_firsts(drawn)


def test_the_fragment_after_an_overrun_seam_is_never_sampled_whole(tmp_path: Path) -> None:
    """After a seam that lost steps, the vault marks the next episode ``start_known=False``
    and ``select`` skips it; the episode buffer built the documented way (train-offline.md:
    ``restarts=`` the seams that lost nothing, ``gaps=`` those that lost steps) must not
    sample that fragment as a whole padded episode either. History 0..7 is stored, 8..14 lost,
    then 15..23: steps 15..17 are the tail of the episode 12..17."""
    path = str(tmp_path / "v")
    buf = fbx.make_trajectory_buffer(1, 1, 1, 1, 1, max_length_time_axis=9)
    add = jax.jit(buf.add)
    state = buf.init(jax.tree.map(jnp.asarray, EPISODE_T))
    v = Vault.create(path, state, done_leaf="done")
    writes: list[tuple[int, int, Overrun]] = [(0, 8, "error"), (8, 24, "save_surviving")]
    for lo, hi, how in writes:
        for k in range(lo, hi):
            t = jnp.full((1, 1), k, jnp.int32)
            state = add(state, {"t": t, "done": t % 6 == 5})
        v.write(state, on_overrun=how)
    v.close()
    v = Vault.open(path)
    assert [(s.at, s.lost) for s in v.seams] == [(8, 7)]
    table = v.episodes()
    columns = zip(table.start, table.length, table.start_known, strict=True)
    unknown = [(int(s), int(n)) for s, n, known in columns if not known]
    assert unknown == [(8, 3)]  # steps 15..17, its start lost
    assert len(table.select()) == len(table) - 1
    from_state, sample = padded_episode_buffer(EB_T)
    first = max(0, v.committed_length - EB_T)  # the state holds the last EB_T timesteps
    episodes = from_state(
        v.read(capacity=EB_T),
        restarts=[s.at - first for s in v.seams if not s.lost],
        gaps=[s.at - first for s in v.seams if s.lost],
    )
    drawn = sample(episodes, jax.random.key(0))
    assert (15, 3) not in padded_firsts(drawn)
    # the same state, restarted there as if nothing was lost: the fragment is offered whole
    assumed = from_state(v.read(capacity=EB_T), restarts=[s.at - first for s in v.seams])
    assert (15, 3) in padded_firsts(sample(assumed, jax.random.key(0)))
