"""Leaves of JAX's extra numeric types (``bfloat16``, ``float8``), which Flashbax's buffers take:
every buffer kind stores and returns them unchanged; a vault refuses them by name."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers
from vault import Vault, VaultStructureError

ROWS, T = 2, 8
EXAMPLE = {
    "obs": jnp.zeros(3, jnp.bfloat16),
    "q": jnp.zeros((), jnp.float8_e4m3fn),
    "reward": jnp.float32(0),
}
MAKERS = {
    "flat": lambda: buffers.make_flat_buffer(T, 2, 4, add_batch_size=ROWS),
    "trajectory": lambda: buffers.make_trajectory_buffer(ROWS, 4, 2, 1, 2, max_length_time_axis=T),
    "item": lambda: buffers.make_item_buffer(T, 2, 4, add_batches=True),
    "prioritised_trajectory": lambda: buffers.make_prioritised_trajectory_buffer(
        ROWS, 4, 2, 1, 2, max_length_time_axis=T
    ),
}


def step(t: int, rows: int) -> dict[str, jax.Array]:
    """Timestep ``t`` of ``rows`` rows, tied together exactly in every leaf's dtype:
    ``obs = reward + [0, 0.25, 0.125]`` and ``q = reward / 8``."""
    reward = jnp.arange(rows, dtype=jnp.float32) * 0.5 + t
    return {
        "obs": (reward[:, None] + jnp.array([0.0, 0.25, 0.125])).astype(jnp.bfloat16),
        "q": (reward / 8).astype(jnp.float8_e4m3fn),
        "reward": reward,
    }


SHAPED = {  # a step as each kind's add takes it
    "flat": lambda b: b,
    "trajectory": lambda b: jax.tree.map(lambda x: x[:, None], b),
    "item": lambda b: b,
    "prioritised_trajectory": lambda b: jax.tree.map(lambda x: x[:, None], b),
}


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_every_buffer_kind_stores_bfloat16_and_float8_leaves(kind: str) -> None:
    buffer = MAKERS[kind]()
    state = buffer.init(EXAMPLE)
    rewards = set()
    for t in range(5):
        batch = step(t, ROWS)
        rewards |= {float(r) for r in batch["reward"]}
        state = buffer.add(state, SHAPED[kind](batch))
    for seed in range(3):
        drawn = buffer.sample(state, jax.random.PRNGKey(seed)).experience
        leaves = jax.tree.leaves(drawn)
        assert {str(x.dtype) for x in leaves} == {"bfloat16", "float8_e4m3fn", "float32"}
        for part in [drawn] if isinstance(drawn, dict) else [drawn.first, drawn.second]:
            reward = np.asarray(part["reward"], np.float32)
            assert set(reward.ravel().tolist()) <= rewards
            obs = np.asarray(part["obs"]).astype(np.float32)
            np.testing.assert_array_equal(obs, reward[..., None] + [0.0, 0.25, 0.125])
            np.testing.assert_array_equal(np.asarray(part["q"]).astype(np.float32), reward / 8)


def test_a_vault_refuses_them_by_leaf_and_says_what_to_cast(tmp_path: Path) -> None:
    state = MAKERS["trajectory"]().init(EXAMPLE)
    with pytest.raises(VaultStructureError) as err:
        Vault.create(tmp_path / "v", state)
    text = str(err.value)
    assert "experience/obs: dtype bfloat16 is not supported" in text
    assert "experience/q: dtype float8_e4m3fn is not supported" in text
    assert "cast it to float32" in text
    assert "reward" not in text
    assert not (tmp_path / "v").exists()
