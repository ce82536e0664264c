"""The sum tree's two exact update strategies agree, and parents always equal child sums."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from buffers import _sum_tree

CAPACITY = 37  # not a power of two: padding leaves exist


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
    idx = jnp.asarray([i for i, _ in updates], jnp.int32)
    val = jnp.asarray([v for _, v in updates], jnp.float32)
    mask = idx < CAPACITY
    state = _sum_tree.init(CAPACITY)
    cpu = _sum_tree.set_batch(state, idx, val, mask, device="cpu")
    gpu = _sum_tree.set_batch(state, idx, val, mask, device="gpu")
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
