"""The sum tree's two exact update strategies agree, and parents always equal child sums."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from buffers import _sum_tree

CAPACITY = 37  # not a power of two: padding leaves exist
_SET = jax.jit(_sum_tree.set_batch, static_argnames="device")


def _check_sums(nodes: np.ndarray) -> None:
    leaves = nodes.shape[0] // 2
    for i in range(1, leaves):
        assert nodes[i] == np.float32(nodes[2 * i] + nodes[2 * i + 1])


@given(
    st.lists(
        st.tuples(st.integers(0, CAPACITY + 5), st.floats(0, 1e6, width=32, allow_subnormal=False)),
        min_size=1,
        max_size=8,
    )
)
def test_cpu_and_accelerator_paths_agree(updates: list[tuple[int, float]]) -> None:
    # Duplicate indices included: both paths keep the last value given for an index.
    seen: dict[int, float] = dict(updates)
    pad = 8 - len(updates)  # one batch shape: each path compiles once
    idx = jnp.asarray([i for i, _ in updates] + [0] * pad, jnp.int32)
    val = jnp.asarray([v for _, v in updates] + [5.0] * pad, jnp.float32)
    mask = (idx < CAPACITY) & (jnp.arange(8) < len(updates))  # padding is masked out
    state = _sum_tree.init(CAPACITY)
    cpu = _SET(state, idx, val, mask, device="cpu")
    gpu = _SET(state, idx, val, mask, device="gpu")
    np.testing.assert_array_equal(np.asarray(cpu.nodes), np.asarray(gpu.nodes))
    _check_sums(np.asarray(cpu.nodes))
    leaves = np.asarray(_sum_tree.get(cpu, jnp.arange(CAPACITY + 3)))
    expected = np.zeros(CAPACITY + 3, np.float32)
    for i, v in seen.items():
        if i < CAPACITY:
            expected[i] = v
    np.testing.assert_array_equal(leaves, expected)
    given = [v for i, v in updates if i < CAPACITY]  # overwritten values were set too
    assert float(cpu.max_recorded_priority) == max([1.0, *given])
    assert float(gpu.max_recorded_priority) == float(cpu.max_recorded_priority)


@given(st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=1, max_size=8))
def test_the_level_wide_path_keeps_only_the_last_of_duplicates(
    items: list[tuple[int, bool]],
) -> None:
    # XLA's scatter on CPU happens to apply duplicates in order; on a GPU it need not, so the
    # level-wide path drops every duplicate but the last before it scatters.
    indices = [i for i, _ in items]
    valid = [ok for _, ok in items]
    kept = np.asarray(_sum_tree._last_of_each(jnp.asarray(indices), jnp.asarray(valid)))
    expected = [
        ok and all(not (indices[j] == i and valid[j]) for j in range(k + 1, len(items)))
        for k, (i, ok) in enumerate(items)
    ]
    assert kept.tolist() == expected
