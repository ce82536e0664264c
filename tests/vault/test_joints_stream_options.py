"""Where the options of a stream (``as_dataset``) meet each other and meet checkpoints: shuffle
or not, seeds, ``epochs``, ``drop_remainder``, ``stack`` with a short last stack and the
incomplete batch after it, ``cut_on_device`` on CPU, prefetch depths, JAX or numpy leaves,
``episode_aware``, ``stride``, ``rows`` and ``leaves`` selections, over a dataset whose shards
differ in rows and length, read at a tag after they grew; ``state()`` / ``resume_stream`` and
``resume_at`` at every position (inside a stack, at an epoch's end), a refresh between save
and resume, ``close()`` mid-epoch; the memory refusal and the checks of a saved state.

Every batch is compared with a trivially correct model: the data say where they belong
(``obs = 100_000 * shard + 1000 * row + t``), the valid starts of an epoch are enumerated by
brute force (episode ends included), and the order without shuffling is the documented one
(source by source, then time, then row).
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from vault import (
    Dataset,
    Vault,
    VaultArgumentError,
    VaultError,
    VaultReadError,
    resume_stream,
)

EXAMPLE = {"obs": np.int64(0), "done": np.bool_(False)}
# small, uneven chunks: many blocks, partly filled last chunks rewritten by the growth
CHUNK: dict[str, Any] = {"obs": [2, 4], "done": [3, 3]}
SEQ = 3
# the shards at the tag: (rows, timesteps); s2 is shorter than a sequence (no window)
SHARDS = {"s0": (1, 9), "s1": (3, 14), "s2": (2, 2)}


def data(salt: int, rows: int, t0: int, n: int) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)`` of every row of shard ``salt``: obs says where it belongs."""
    t = np.arange(t0, t0 + n)[None, :]
    r = np.arange(rows)[:, None]
    return {
        "obs": (100_000 * salt + 1000 * r + t).astype(np.int64),
        "done": (7 * t + 3 * r + salt) % 9 == 4,
    }


def valid_starts(
    models: list[dict[str, np.ndarray]],
    seq: int,
    *,
    stride: int = 1,
    aware: bool = False,
    rows: list[int] | None = None,
) -> list[tuple[int, int, int]]:
    """(source, row, t) of every window an epoch must yield, by brute force, in the documented
    order without shuffling (one row group per shard: source, then time, then row)."""
    out = []
    for s, model in enumerate(models):
        n_rows, n = model["done"].shape
        for t in range(0, n - seq + 1, stride):
            for r in range(n_rows) if rows is None else rows:
                if aware and model["done"][r, t : t + seq - 1].any():
                    continue
                out.append((s, r, t))
    return out


def per_batch(items: list[Any]) -> list[tuple[int, list[tuple[int, int, int]], np.ndarray]]:
    """Each batch of the items (stacked or not): (epoch, its (source, row, start), its obs)."""
    out = []
    for item in items:
        obs = np.asarray(item.experience["obs"])
        row, start, source = (np.asarray(x) for x in (item.row, item.start, item.source))
        if row.ndim == 1:
            obs, row, start, source = obs[None], row[None], start[None], source[None]
        for j in range(row.shape[0]):
            where = list(zip(source[j].tolist(), row[j].tolist(), start[j].tolist(), strict=True))
            out.append((item.epoch, where, obs[j]))
    return out


def check_against_model(
    batches: list[tuple[int, list[tuple[int, int, int]], np.ndarray]],
    models: list[dict[str, np.ndarray]],
    seq: int,
) -> None:
    for epoch, where, obs in batches:
        want = np.array([models[s]["obs"][r, t : t + seq] for s, r, t in where])
        np.testing.assert_array_equal(obs, want, err_msg=f"epoch {epoch}: {where}")


def same_batches(got: list[Any], want: list[Any]) -> None:
    assert [(e, w) for e, w, _ in got] == [(e, w) for e, w, _ in want]
    for (_, _, a), (_, _, b) in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Dataset, list[dict[str, np.ndarray]]]:
    """A dataset of shards that differ in rows and length, tagged, then grown (every partly
    filled last chunk rewritten) and given a new shard: the dataset at the tag, its model."""
    root = tmp_path_factory.mktemp("options") / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=3, chunk=CHUNK, done_leaf="done")
    for name, (rows, n) in SHARDS.items():
        with ds.shard(name, rows=rows) as w:
            w.append(data(int(name[1:]), rows, 0, n))
    Dataset.open(str(root)).tag("pin")
    for name, (rows, n) in SHARDS.items():
        with ds.shard(name) as w:
            w.append(data(int(name[1:]), rows, n, 5))
    with ds.shard("s3", rows=2) as w:
        w.append(data(3, 2, 0, 8))
    models = [data(int(name[1:]), rows, 0, n) for name, (rows, n) in SHARDS.items()]
    return Dataset.open(str(root), at="pin"), models


@pytest.fixture(scope="module")
def one(tmp_path_factory: pytest.TempPathFactory) -> Vault:
    path = tmp_path_factory.mktemp("one") / "v"
    with Vault.create(str(path), EXAMPLE, rows=3, chunk=CHUNK, done_leaf="done") as v:
        v.append(data(0, 3, 0, 20))
    return Vault.open(str(path))


# ------------------------------------------------------------- options together, at the model
CASES: dict[str, tuple[int, dict[str, Any]]] = {
    # shuffled, episode-aware, stacks cut on the device with a short last stack and the
    # incomplete batch alone after it, two blocks resident, read one group ahead
    "shuffled-stacked-on-device": (
        4,
        {
            "shuffle": True, "seed": 5, "episode_aware": True, "stack": 3,
            "cut_on_device": True, "drop_remainder": False, "epochs": 2, "interleave": 2,
            "block_timesteps": 4, "prefetch": 1,
        },
    ),
    # in order, strided, one row of each shard, JAX leaves put by the thread, deep prefetch
    "ordered-strided-rows": (
        3,
        {
            "shuffle": False, "stride": 2, "rows": [0], "device_put": True, "epochs": 3,
            "block_timesteps": 5, "prefetch": 4,
        },
    ),
    # in order, numpy leaves, no thread, stacks of 3 cut on the host (10 whole batches: a
    # short last stack of 1), the remainder dropped
    "ordered-stacked-host": (
        4,
        {
            "shuffle": False, "stack": 3, "device_put": False, "epochs": 2, "prefetch": 0,
            "block_timesteps": 3,
        },
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_every_batch_is_the_models_and_resumes_at_every_position(
    pinned: tuple[Dataset, list[dict[str, np.ndarray]]], case: str
) -> None:
    """Each epoch yields every valid start of every shard at the tag exactly once (the whole
    batches of them with ``drop_remainder``), in the documented order without shuffling,
    reshuffled per epoch with it; items are stacks of the epoch's batches, never across
    epochs; a stream resumed at any batch (``resume_at``: inside a stack too) or from
    ``state()`` after any item (as JSON) yields exactly the rest."""
    ds, models = pinned
    batch, options = CASES[case]
    stack, drop = options.get("stack"), options.get("drop_remainder", True)
    want = valid_starts(
        models,
        SEQ,
        stride=options.get("stride", 1),
        aware=options.get("episode_aware", False),
        rows=options.get("rows"),
    )
    with ds.as_dataset(batch, SEQ, **options) as stream:
        items = list(stream)
    batches = per_batch(items)
    check_against_model(batches, models, SEQ)
    whole, rest = divmod(len(want), batch)
    orders = []
    for epoch in range(options["epochs"]):
        got = [w for e, where, _ in batches if e == epoch for w in where]
        if drop:
            assert len(got) == whole * batch
            assert len(set(got)) == len(got)
            assert set(got) <= set(want)
        else:
            assert sorted(got) == sorted(want)
        if not options["shuffle"]:
            assert got == want[: len(got)]
        orders.append(got)
        shapes = [it.row.shape for it in items if it.epoch == epoch]
        if stack is None:
            assert shapes == [(batch,)] * whole + ([(rest,)] if rest and not drop else [])
        else:
            assert shapes == [(stack, batch)] * (whole // stack) + (
                [(whole % stack, batch)] if whole % stack else []
            ) + ([(1, rest)] if rest and not drop else [])
    if options["shuffle"]:
        assert orders[0] != orders[1]
    leaf = items[0].experience["obs"]
    if options.get("cut_on_device") or options.get("device_put"):
        assert isinstance(leaf, jax.Array)
    else:
        assert isinstance(leaf, np.ndarray)

    # every batch position, inside stacks and at the epochs' ends (first batch of the next)
    per_epoch = [sum(1 for e, _, _ in batches if e == epoch) for epoch in range(options["epochs"])]
    for epoch, count in enumerate(per_epoch):
        done_before = sum(per_epoch[:epoch])
        for k in range(count + 1):
            with ds.as_dataset(batch, SEQ, resume_at=(epoch, k), **options) as stream:
                again = per_batch(list(stream))
            same_batches(again, batches[done_before + k :])
    # a checkpoint after every item, through JSON
    for taken in range(len(items) + 1):
        stream = ds.as_dataset(batch, SEQ, **options)
        with stream:
            handed = list(itertools.islice(stream, taken))
            state = json.loads(json.dumps(stream.state()))
        with resume_stream(state) as resumed:
            again = per_batch(list(resumed))
        same_batches(again, batches[len(per_batch(handed)) :])


def test_close_mid_epoch_keeps_the_position_and_a_refreshed_source_changes_nothing(
    tmp_path: Path,
) -> None:
    """A stream closed mid-epoch (with batches read ahead) yields nothing more, keeps its
    position; the vault grows and its reader is refreshed; the checkpoint resumes on the
    pinned commit with exactly the batches the closed stream would have given next."""
    path = tmp_path / "v"
    with Vault.create(str(path), EXAMPLE, rows=3, chunk=CHUNK, done_leaf="done") as v:
        v.append(data(0, 3, 0, 12))
    reader = Vault.open(str(path))
    options: dict[str, Any] = {"seed": 3, "epochs": 2, "block_timesteps": 4, "stack": 2}
    for prefetch in (0, 4):
        whole = per_batch(list(reader.as_dataset(2, SEQ, **options)))
        stream = reader.as_dataset(2, SEQ, prefetch=prefetch, **options)
        taken = per_batch([next(stream) for _ in range(3)])  # 6 batches: mid-epoch 0
        before = stream.state()
        stream.close()
        with pytest.raises(StopIteration):
            next(stream)
        assert list(stream) == []
        assert stream.state() == before
        assert (before["epoch"], before["batch"]) == (0, len(taken))
        length = reader.committed_length
        with Vault.open(str(path), mode="a") as w:
            w.append(data(0, 3, length, 3))
        assert reader.refresh() == length + 3  # the next stream reads more; this one not
        with resume_stream(json.loads(json.dumps(before))) as rest:
            same_batches(per_batch(list(rest)), whole[len(taken) :])


# ------------------------------------------------------------------------------------ bugs
@pytest.mark.parametrize("case", ["vault-rows", "vault-leaves", "dataset-rows"])
def test_rows_and_leaves_given_as_iterators_work_for_every_source_and_checkpoint(
    one: Vault, pinned: tuple[Dataset, list[dict[str, np.ndarray]]], case: str
) -> None:
    """``rows`` and ``leaves`` are "as :meth:`Vault.read_numpy`", which takes a generator of
    row indices; a stream must read the same as with a list, on every shard, and resume."""
    if case == "dataset-rows":
        ds, models = pinned
        with ds.as_dataset(2, SEQ, rows=iter([0]), drop_remainder=False, seed=1) as stream:
            got = per_batch(list(stream))
        check_against_model(got, models, SEQ)
        assert sorted(w for _, where, _ in got for w in where) == sorted(
            valid_starts(models, SEQ, rows=[0])
        )
        return
    key, value, listed = (
        ("rows", (r for r in [2, 0]), [2, 0])
        if case == "vault-rows"
        else ("leaves", (x for x in ["obs"]), ["obs"])
    )
    with one.as_dataset(4, SEQ, seed=1, **{key: listed}) as stream:
        want = per_batch(list(stream))
    stream = one.as_dataset(4, SEQ, seed=1, **{key: value})
    with stream:
        first = per_batch([next(stream)])
        state = json.loads(json.dumps(stream.state()))
    same_batches(first, want[:1])
    assert state["args"][key] == listed
    with resume_stream(state) as rest:
        same_batches(per_batch(list(rest)), want[1:])


@pytest.mark.parametrize(
    "option",
    [
        "device_put",
        "cut_on_device",
    ],
)
def test_jax_batches_never_hold_wrapped_64_bit_integers(tmp_path: Path, option: str) -> None:
    """``StreamBatch``: sequence ``i`` is ``read_numpy(...)`` at its place. JAX without 64-bit
    types would store an int64 beyond 32 bits wrapped, which ``read`` and ``iter_windows``
    refuse naming the leaf: a stream of JAX arrays must refuse too, or hand the values over
    unchanged, never wrapped."""
    if jax.config.read("jax_enable_x64"):
        pytest.skip("64-bit JAX types are enabled: nothing is narrowed")
    path = tmp_path / "v"
    example = {"stamp": np.int64(0), "obs": np.float32(0)}
    stamps = (1 << 40) + np.arange(2)[:, None] * 1000 + np.arange(8)[None]
    with Vault.create(str(path), example, rows=2) as v:
        v.append({"stamp": stamps, "obs": stamps.astype(np.float32)})
    r = Vault.open(str(path))
    with pytest.raises(VaultReadError, match="'stamp'"):
        r.read()  # the documented refusal of the same leaf
    refused: VaultReadError | None = None
    batches = []
    try:
        with r.as_dataset(4, 2, shuffle=False, prefetch=0, **{option: True}) as stream:
            batches = list(stream)
    except VaultReadError as err:  # a refusal is fine if it names the leaf
        refused = err
    if refused is not None:
        assert "stamp" in str(refused)
    for b in batches:
        want = stamps[b.row[:, None], b.start[:, None] + np.arange(2)[None]]
        np.testing.assert_array_equal(np.asarray(b.experience["stamp"]), want)


def test_a_stack_too_large_for_memory_is_refused_naming_stack(one: Vault) -> None:
    """A stream that would hold more than the machine's memory is refused before anything is
    allocated; when what makes it too large is ``stack``, the message must name it (the
    call as shown and the remedy name every other option but this one)."""
    with pytest.raises(VaultReadError, match="would allocate") as err:
        one.as_dataset(256, SEQ, stack=10**9)
    assert "stack" in str(err.value)


@pytest.mark.parametrize("extra", ["shuffle_buffer", "resume_at"])
def test_a_state_with_an_option_it_cannot_hold_is_a_typed_error_naming_it(
    one: Vault, extra: str
) -> None:
    """``read_state``: a state is checked, and VaultArgumentError names what is wrong (a
    checkpoint from a newer version with another option, or edited by hand)."""
    stream = one.as_dataset(4, SEQ, seed=0)
    with stream:
        next(stream)
        state = copy.deepcopy(stream.state())
    state["args"][extra] = [0, 1]
    with pytest.raises(VaultArgumentError, match=re.escape(extra)):
        resume_stream(state)


def test_resume_at_past_an_epochs_end_is_refused_naming_it(one: Vault) -> None:
    """``resume_at`` is a position a state holds: at most the epoch's batch count (then the
    next epoch comes whole). A position past it cannot be one; silently skipping batches of
    the next epoch hands over an epoch that misses its first batches."""
    options: dict[str, Any] = {"seed": 0, "epochs": 2}
    items = list(one.as_dataset(4, SEQ, **options))
    count = sum(1 for b in items if b.epoch == 0)
    with (
        pytest.raises(VaultError, match="resume_at"),
        one.as_dataset(4, SEQ, resume_at=(0, count + 3), **options) as stream,
    ):
        list(stream)


def test_a_stream_whose_every_sequence_crosses_a_seam_says_so(tmp_path: Path) -> None:
    """Long enough, but a seam between every pair of timesteps: no sequence of 2 is whole.
    The refusal (at the stream's start, as the docstring says) names the seams and the
    remedy that helps, not a smaller batch or drop_remainder, which cannot."""
    with Vault.create(str(tmp_path / "v"), {"x": np.float32(0)}, rows=1) as v:
        for _ in range(3):
            v.append({"x": np.zeros((1, 1), np.float32)}, continues=False)
        stream = v.as_dataset(1, 2, shuffle=False, prefetch=0)
        with pytest.raises(VaultReadError, match="between two seams: use shorter sequences"):
            next(iter(stream))
