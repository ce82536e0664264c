"""The Vault against a trivially correct model: a list of every timestep ever committed.

Random sequences of adds (of random lengths, including more than the buffer holds between
writes), writes (with either overrun policy), reopenings and reads; after every step the
vault's committed content equals the model, and reads of any range equal the model's slice.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import buffers as fbx
from vault import UnsavedDataLostError, Vault

ROWS, T = 2, 6
BUFFER = fbx.make_trajectory_buffer(ROWS, 1, 1, 1, 1, max_length_time_axis=T)
ADD = {n: jax.jit(BUFFER.add) for n in (1, 2, 3, 5, 6)}
EXAMPLE = {"x": jnp.int32(0), "pair": (jnp.zeros(2, jnp.float32), jnp.bool_(False))}

step = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(sorted(ADD))),
    st.tuples(st.just("write"), st.sampled_from(["error", "save_surviving"])),
    st.tuples(st.just("reopen"), st.just(0)),
    st.tuples(st.just("read"), st.integers(0, 100), st.integers(0, 100)),
)


def batch(t0: int, n: int) -> dict:
    codes = np.arange(ROWS)[:, None] * 10_000 + np.arange(t0, t0 + n)[None]
    return {
        "x": jnp.asarray(codes, jnp.int32),
        "pair": (
            jnp.asarray(np.repeat(codes[..., None], 2, axis=-1), jnp.float32),
            jnp.asarray(codes % 3 == 0),
        ),
    }


# chunks of a few timesteps (and row blocks of one row), so that appends start and end inside
# chunks and cross their boundaries (the default chunks hold thousands of timesteps)
SMALL_CHUNKS = {"x": [2, 4], "pair/0": [1, 3, 2], "pair/1": [2, 5]}


@settings(max_examples=40)
@given(
    st.lists(step, min_size=1, max_size=25),
    st.sampled_from([None, SMALL_CHUNKS]),
    st.booleans(),
)
def test_vault_matches_the_model(steps: list[tuple], chunk: dict | None, block: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "v")
        state = BUFFER.init(EXAMPLE)
        vault = Vault.create(path, state, chunk=chunk)
        added = 0  # timesteps per row ever added
        saved_upto = 0  # buffer counter at the last successful write
        model: list[int] = []  # committed timestep indices (row 0 codes)
        first = True
        for op, *args in steps:
            if op == "add":
                n = args[0]
                state = ADD[n](state, batch(added, n))
                added += n
            elif op == "write":
                held = min(added, T)
                unsaved = held if first else added - saved_upto
                if unsaved > held and args[0] == "error":
                    with pytest.raises(UnsavedDataLostError) as info:
                        vault.write(state, on_overrun="error")
                    assert info.value.lost == unsaved - held
                    continue
                written = vault.write(state, on_overrun=args[0], block=block)
                vault.flush()
                assert written == min(unsaved, held)
                model += list(range(added - written, added))
                saved_upto, first = added, False
            elif op == "reopen":
                vault.close()
                vault = Vault.open(path, mode="a")
            else:
                lo, hi = sorted((args[0] % (len(model) + 1), args[1] % (len(model) + 1)))
                got = vault.read_numpy(start=lo, stop=hi)
                np.testing.assert_array_equal(got["x"][0], np.asarray(model[lo:hi]))
            assert vault.committed_length == len(model)
        data = Vault.open(path).read_numpy()
        expected = np.arange(ROWS)[:, None] * 10_000 + np.asarray(model, np.int64)[None]
        np.testing.assert_array_equal(data["x"], expected.reshape(ROWS, -1))
        np.testing.assert_array_equal(data["pair"][0][..., 1], expected.reshape(ROWS, -1))
        np.testing.assert_array_equal(data["pair"][1], (expected % 3 == 0).reshape(ROWS, -1))
