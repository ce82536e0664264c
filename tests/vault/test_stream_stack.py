"""Stacked streams: ``as_dataset(..., stack=S)`` hands over ``S`` consecutive batches per item,
stacked on a new leading axis, for a ``lax.scan`` over them (one dispatch per stack). The
batches and their order are exactly the unstacked stream's (real files, real TensorStore)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vault import Dataset, Vault, VaultArgumentError, resume_stream
from vault.stream._device_cut import _cut, on_accelerator
from vault.stream._stream import StreamBatch

ROWS, LENGTH, BATCH, SEQ, STACK = 3, 70, 6, 2, 4
# 3 rows x 69 starts = 207 sequences: 34 whole batches (8 stacks of 4 and a short one of 2),
# then 3 sequences (a batch of 3 with drop_remainder=False)
EPOCH_BATCHES, REST = 34, 3


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Vault:
    """``code`` is ``row * 1000 + t``; small time chunks, so a stream crosses many groups."""
    path = tmp_path_factory.mktemp("stack") / "v"
    example = {"code": np.int64(0), "obs": np.zeros(2, np.float32)}
    v = Vault.create(str(path), example, rows=ROWS, chunk={"code": [ROWS, 8], "obs": [ROWS, 8, 2]})
    code = np.arange(ROWS, dtype=np.int64)[:, None] * 1000 + np.arange(LENGTH)[None]
    v.append({"code": code, "obs": np.stack([code, -code], -1).astype(np.float32)})
    v.close()
    return Vault.open(str(path))


def per_batch(items: list[StreamBatch]) -> list[tuple[Any, ...]]:
    """Each batch of stacked items as (epoch, row, start, source, code, obs), numpy."""
    out = []
    for item in items:
        code, obs = np.asarray(item.experience["code"]), np.asarray(item.experience["obs"])
        assert code.ndim == 3  # [stack, batch, seq]
        assert item.row.ndim == 2  # [stack, batch]
        for j in range(item.row.shape[0]):
            out.append((item.epoch, item.row[j], item.start[j], item.source[j], code[j], obs[j]))
    return out


def unstacked(items: list[StreamBatch]) -> list[tuple[Any, ...]]:
    return [
        (b.epoch, b.row, b.start, b.source, *(np.asarray(b.experience[k]) for k in ("code", "obs")))
        for b in items
    ]


def assert_same_batches(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g[0] == w[0]
        for a, b in zip(g[1:], w[1:], strict=True):
            assert a.shape == b.shape
            np.testing.assert_array_equal(a, b)


# The device path compiles a gather per group shape: the cases share block shapes (16
# timesteps, interleave 1 or 2) with each other and with the tests below.
@pytest.mark.parametrize(
    ("cut_on_device", "kw"),
    [
        (False, {"drop_remainder": True, "block_timesteps": 16, "interleave": 2}),
        (False, {"drop_remainder": False, "block_timesteps": 16}),
        (False, {"drop_remainder": True, "block_timesteps": 1000, "prefetch": 0}),  # one group
        (True, {"drop_remainder": True, "block_timesteps": 16, "interleave": 2}),
        (True, {"drop_remainder": False, "block_timesteps": 16}),
    ],
)
def test_stacks_hold_exactly_the_unstacked_batches_in_order(
    vault: Vault, cut_on_device: bool, kw: dict[str, Any]
) -> None:
    kw = {"seed": 3, "epochs": 2, "shuffle": True, **kw}
    # the reference: the unstacked stream cut on the host (tests/vault/test_stream.py checks
    # that cut_on_device=True yields the same batches unstacked)
    want = list(vault.as_dataset(BATCH, SEQ, **kw))
    items = list(vault.as_dataset(BATCH, SEQ, stack=STACK, cut_on_device=cut_on_device, **kw))
    assert_same_batches(per_batch(items), unstacked(want))
    # per epoch: whole stacks, then a short stack of the whole batches left, then (without
    # drop_remainder) the incomplete batch alone
    tail = [(1, REST)] if not kw["drop_remainder"] else []
    shapes = [(STACK, BATCH)] * (EPOCH_BATCHES // STACK) + [(EPOCH_BATCHES % STACK, BATCH)]
    assert [it.row.shape for it in items] == (shapes + tail) * 2
    assert [it.epoch for it in items] == [0] * len(shapes + tail) + [1] * len(shapes + tail)
    for item in items:
        k, b = item.row.shape
        assert item.experience["code"].shape == (k, b, SEQ)
        assert item.experience["obs"].shape == (k, b, SEQ, 2)
        assert item.start.shape == item.source.shape == (k, b)
        if cut_on_device:
            assert isinstance(item.experience["code"], jax.Array)
        elif not on_accelerator():  # numpy: one contiguous array per leaf, cut straight into
            assert item.experience["obs"].flags.c_contiguous  # (on a GPU: put there, as JAX's)
    if cut_on_device:
        # the whole stacks inside a group came out of the gather as [stack, batch, ...] arrays
        pack = max(1, min(64, (2 << 20) // (STACK * BATCH * SEQ * 16)))
        assert _cut(pack, (STACK, BATCH), SEQ)._cache_size() > 0  # type: ignore[attr-defined]


def test_a_scanned_step_over_each_stack_sees_every_batch(vault: Vault) -> None:
    @jax.jit
    def scanned(total: jax.Array, stacked: Any) -> jax.Array:
        def step(acc: jax.Array, batch: Any) -> tuple[jax.Array, None]:
            return acc + jnp.sum(batch["code"]), None

        return jax.lax.scan(step, total, stacked)[0]

    total = jnp.zeros((), jnp.int64 if jax.config.jax_enable_x64 else jnp.int32)
    kw = {"seed": 1, "block_timesteps": 16}
    stream = vault.as_dataset(BATCH, SEQ, stack=STACK, cut_on_device=True, **kw)
    for item in stream:
        total = scanned(total, item.experience)
    batches = vault.as_dataset(BATCH, SEQ, **kw)
    want = sum(int(np.asarray(b.experience["code"]).sum()) for b in batches)
    assert int(total) == want


@pytest.mark.parametrize("cut_on_device", [False, True])
def test_resuming_a_stacked_stream_continues_with_the_next_batches(
    vault: Vault, cut_on_device: bool
) -> None:
    kw = {"seed": 7, "epochs": 2, "drop_remainder": False, "cut_on_device": cut_on_device}
    whole = list(vault.as_dataset(BATCH, SEQ, stack=STACK, block_timesteps=16, **kw))
    n_epoch = len(whole) // 2
    for taken in (3, n_epoch - 1, n_epoch):  # inside an epoch, before its last item, at its end
        stream = vault.as_dataset(BATCH, SEQ, stack=STACK, block_timesteps=16, **kw)
        for _ in itertools.islice(stream, taken):
            pass
        state = stream.state()
        stream.close()
        assert state["args"]["stack"] == STACK
        rest = list(resume_stream(state))
        assert [it.row.shape for it in rest] == [it.row.shape for it in whole[taken:]]
        assert_same_batches(per_batch(rest), per_batch(whole[taken:]))


def test_resumed_inside_a_stack_the_rest_of_it_comes_first(vault: Vault) -> None:
    # a position that is not a whole number of stacks (an unstacked stream's checkpoint)
    kw = {"seed": 2, "epochs": 1, "block_timesteps": 16}
    flat = unstacked(list(vault.as_dataset(BATCH, SEQ, **kw)))
    items = list(vault.as_dataset(BATCH, SEQ, stack=STACK, resume_at=(0, 6), **kw))
    assert items[0].row.shape == (2, BATCH)  # batches 6 and 7: the rest of the second stack
    assert items[1].row.shape == (STACK, BATCH)  # then stacks aligned to the epoch again
    assert_same_batches(per_batch(items), flat[6:])


def test_several_processes_stack_their_own_batches(vault: Vault) -> None:
    kw = {"seed": 4, "process_count": 2, "block_timesteps": 16}
    for index in (0, 1):
        want = list(vault.as_dataset(2 * BATCH, SEQ, process_index=index, **kw))
        items = list(vault.as_dataset(2 * BATCH, SEQ, process_index=index, stack=3, **kw))
        assert all(it.row.shape[1] == BATCH for it in items)
        assert_same_batches(per_batch(items), unstacked(want))


def test_a_dataset_streams_stacks_of_every_shard(tmp_path: Path) -> None:
    example = {"code": np.int64(0), "obs": np.zeros(2, np.float32)}
    dataset = Dataset.create(str(tmp_path / "ds"), example, rows=2)
    for s in range(2):
        with dataset.shard(f"w-{s}") as w:
            code = np.arange(40, dtype=np.int64).reshape(2, 20) + 100 * s
            w.append({"code": code, "obs": np.stack([code, code], -1).astype(np.float32)})
    dataset = Dataset.open(str(tmp_path / "ds"))
    want = list(dataset.as_dataset(4, 3, seed=0))
    items = list(dataset.as_dataset(4, 3, seed=0, stack=5))
    assert {int(s) for it in items for s in it.source.ravel()} == {0, 1}
    assert_same_batches(per_batch(items), unstacked(want))


def test_stack_argument_errors(vault: Vault) -> None:
    for bad, got in ((0, "0"), (-2, "-2"), (2.0, "2.0 (a float)"), (True, "True (a bool)")):
        with pytest.raises(
            VaultArgumentError, match=re.escape(f"stack must be an int >= 1, got {got}")
        ):
            vault.as_dataset(BATCH, SEQ, stack=bad)
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    with pytest.raises(VaultArgumentError, match=re.escape("stack=2 hands over")):
        vault.as_dataset(BATCH, SEQ, stack=2, sharding=sharding)
    with pytest.raises(VaultArgumentError, match="stacks"):
        vault.as_dataset(BATCH, SEQ, stacks=2)  # an unknown option is named
