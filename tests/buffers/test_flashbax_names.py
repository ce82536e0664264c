"""Code written for Flashbax 0.1.3 imports unchanged but for the package name.

Every public name of every reference module resolves in our module of the same name
(``_flashbax_names`` defines the names, the module map and what "resolves" means), checked
against the stored table in every run and against a live walk of the reference where it is
installed; and the names that only this compatibility brought work as the reference's do.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import warnings
from typing import Any

import _flashbax_names as names
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers
from buffers import flat_buffer, item_buffer, mixer, sum_tree, trajectory_queue, utils
from buffers import prioritised_trajectory_buffer as ptb
from buffers import trajectory_buffer as tb

STORED = json.loads(names.TABLE.read_text())


def reference_or_skip() -> Any:
    flashbax = pytest.importorskip("flashbax")
    if importlib.metadata.version("flashbax") != "0.1.3":
        pytest.skip("the table is Flashbax 0.1.3's")
    return flashbax


def walked(flashbax: Any) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference's modules warn on import with new jax
        return names.walk(flashbax)


def test_every_stored_reference_name_resolves_in_our_module_of_the_same_name() -> None:
    assert STORED["format"] == 1
    assert STORED["flashbax"] == "0.1.3"
    assert len(STORED["modules"]) == 14
    assert sum(len(m["names"]) for m in STORED["modules"].values()) >= 180
    assert names.problems(STORED["modules"]) == []


def test_the_stored_table_is_the_reference_walked_now() -> None:
    flashbax = reference_or_skip()
    table = walked(flashbax)
    assert table == STORED["modules"], "run tools/make_flashbax_names.py"
    assert names.problems(table) == []


def test_the_issue_s_import_works() -> None:
    from buffers.trajectory_buffer import BufferState  # was: from flashbax.buffers...

    assert BufferState.__bound__ is buffers.TrajectoryBufferState
    sample_state = buffers.make_item_buffer(4, 1, 1).init(jnp.zeros(2))
    assert isinstance(sample_state, BufferState.__bound__)


def test_the_check_fails_for_what_is_not_an_equivalent() -> None:
    table = {
        "flashbax.utils": {
            "ours": "buffers.utils",
            "names": {
                "absent_name": {"kind": "value", "type": "number"},
                "get_tree_shape_prefix": {
                    "kind": "function",
                    "of": "flashbax.utils.get_tree_shape_prefix",
                    "params": [["pytree", "POSITIONAL_OR_KEYWORD", False]],
                },
                "add_dim_to_args": {"kind": "class", "of": "flashbax.utils.add_dim_to_args"},
                "jnp": {"kind": "module", "module": "flashbax.nowhere"},
            },
        }
    }
    found = "\n".join(names.problems(table))
    assert "absent_name: missing" in found
    assert "parameter 0 is not `pytree`" in found
    assert "add_dim_to_args: is <function add_dim_to_args" in found
    assert "not a class" in found
    assert "module buffers.nowhere does not import" in found


# ------------------------------------------------------------------ the names work
def test_utils_work_as_the_reference_s() -> None:
    tree = {"a": jnp.zeros((2, 5, 3)), "b": jnp.zeros((2, 5), jnp.int32)}
    assert utils.get_tree_shape_prefix(tree, 2) == (2, 5)
    with pytest.raises(buffers.BatchStructureError, match=re.escape("b: expected leading")):
        utils.get_tree_shape_prefix({"a": jnp.zeros((2, 5)), "b": jnp.zeros((3, 5))})

    buffer = buffers.make_trajectory_buffer(1, 2, 2, 1, 2, max_length_time_axis=6)
    add_one_row = utils.add_dim_to_args(buffer.add, axis=0, starting_arg_index=1)
    state = buffer.init(jnp.zeros(3))
    state = add_one_row(state, jnp.ones((4, 3)))  # [L, ...] for one row
    assert int(utils.get_timestep_count(state)) == 4
    state = add_one_row(state, jnp.ones((4, 3)))
    assert int(utils.get_timestep_count(state)) == 6  # full: rows x T
    assert int(jax.jit(utils.get_timestep_count)(state)) == 6


def test_validators_refuse_what_the_factories_refuse() -> None:
    bad = buffers.BufferConfigError
    cases = [
        (lambda: flat_buffer.validate_sample_batch_size(9, 8), "`sample_batch_size` (9)"),
        (lambda: flat_buffer.validate_min_length(8, 2, 8), "`min_length` (8) is too large"),
        (lambda: flat_buffer.validate_max_length_add_batch_size(3, 2), "must be >= 2"),
        (lambda: flat_buffer.validate_flat_buffer_args(8, 0, 9, None), "`sample_batch_size`"),
        (lambda: item_buffer.validate_sample_batch_size(9, 8), "`sample_batch_size` (9)"),
        (lambda: item_buffer.validate_min_length(9, 8), "`min_length` (9) must be <="),
        (lambda: item_buffer.validate_item_buffer_args(8, 9, 1), "`min_length` (9)"),
        (lambda: tb.validate_size(10, 10, 2), "give exactly one of `max_size`"),
        (lambda: tb.validate_trajectory_buffer_args(4, 1, 2, 5, 1, None), "must be <="),
        (lambda: ptb.validate_priority_exponent(1.5), "`priority_exponent` must be in [0, 1]"),
        (lambda: trajectory_queue.validate_trajectory_queue_args(4, 1, 5, None), "must be <="),
    ]
    for call, message in cases:
        with pytest.raises(bad, match=re.escape(message)):
            call()
    assert flat_buffer.validate_flat_buffer_args(8, 2, 4, 2) is None
    assert item_buffer.validate_item_buffer_args(8, 2, 4) is None
    assert tb.validate_trajectory_buffer_args(None, 1, 2, 2, 1, 8) is None
    assert trajectory_queue.validate_trajectory_queue_args(4, 1, 4, None) is None
    with pytest.warns(UserWarning, match="not a multiple of add_batch_size"):
        tb.validate_size(None, 9, 2)
    assert ptb.validate_device("cpu") is True
    with pytest.warns(UserWarning, match="device must be one of"):
        assert ptb.validate_device("npu") is False
    with pytest.warns(UserWarning, match="not available here"):
        assert ptb.validate_device("tpu") is False


def test_create_functions_are_the_factories() -> None:
    assert flat_buffer.create_flat_buffer is buffers.make_flat_buffer
    assert item_buffer.create_item_buffer is buffers.make_item_buffer
    made = buffers.prioritised_item_buffer.create_prioritised_item_buffer(
        8, 1, 2, False, False, 0.6, "cpu"
    )
    assert isinstance(made, buffers.PrioritisedTrajectoryBuffer)


def test_prioritised_layout_functions() -> None:
    assert ptb.get_max_divisible_length(10, 3) == 9
    assert ptb.get_num_items_in_row(10, 3) == 3
    assert ptb.get_sum_tree_capacity(10, 3, 4) == 12
    assert ptb.get_tree_depth(12) == 4
    assert ptb.get_tree_depth(1) == 0
    assert set(ptb.SET_BATCH_FN) == {"cpu", "gpu", "tpu"}
    tree = sum_tree.init(5)
    idx, values = jnp.array([0, 3, 3]), jnp.array([1.0, 2.0, 4.0])
    trees = [jax.jit(fn)(tree, idx, values) for fn in ptb.SET_BATCH_FN.values()]
    for t in trees:
        np.testing.assert_array_equal(t.nodes, trees[0].nodes)
    np.testing.assert_array_equal(sum_tree.get_batch(trees[0], jnp.arange(5)), [1, 0, 0, 4, 0])


def _reference_tree(flashbax: Any, leaves: np.ndarray) -> Any:
    fst = flashbax.buffers.sum_tree
    return fst.set_batch_scan(fst.init(len(leaves)), jnp.arange(len(leaves)), jnp.asarray(leaves))


def test_sum_tree_functions_match_the_reference_s() -> None:
    flashbax = reference_or_skip()
    fst = flashbax.buffers.sum_tree
    leaves = np.array([0.5, 0, 2, 1, 0.25, 3, 0, 1.25, 4, 0.5], np.float32)  # sums exact
    ref = _reference_tree(flashbax, leaves)
    ours = sum_tree.set_batch_scan(sum_tree.init(len(leaves)), jnp.arange(10), jnp.asarray(leaves))
    ours1 = jax.lax.fori_loop(
        0,
        10,
        lambda i, t: sum_tree.set_non_batched(t, i, jnp.asarray(leaves)[i]),
        sum_tree.init(10),
    )
    np.testing.assert_array_equal(ours1.nodes, ours.nodes)
    depth = sum_tree.get_tree_depth(10)
    assert depth == fst.get_tree_depth(10) == ref.tree_depth
    i = jnp.arange(10)
    np.testing.assert_array_equal(sum_tree.get_batch(ours, i), fst.get_batch(ref, i))
    np.testing.assert_array_equal(ours.nodes[sum_tree.get_tree_index(depth, i)], leaves)
    np.testing.assert_array_equal(sum_tree.get(ours, i), fst.get(ref, i))
    np.testing.assert_array_equal(sum_tree.get_probability(ours, i), fst.get_probability(ref, i))
    queries = jnp.linspace(0, 0.999, 37, dtype=jnp.float32)
    np.testing.assert_array_equal(
        jax.jit(jax.vmap(lambda q: sum_tree.sample(ours, query_value=q)))(queries),
        jax.jit(jax.vmap(lambda q: fst.sample(ref, query_value=q)))(queries),
    )
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    np.testing.assert_array_equal(
        jax.jit(jax.vmap(lambda k: sum_tree.stratified_sample(ours, 16, k)))(keys),
        jax.jit(jax.vmap(lambda k: fst.stratified_sample(ref, 16, k)))(keys),
    )
    np.testing.assert_array_equal(
        jax.jit(jax.vmap(lambda k: sum_tree.sample(ours, k)))(keys),
        jax.jit(jax.vmap(lambda k: fst.sample(ref, k)))(keys),
    )
    with pytest.raises(buffers.ArgumentTypeError, match="give `rng_key`"):
        sum_tree.sample(ours)


def test_get_invalid_indices_match_the_reference_s() -> None:
    flashbax = reference_or_skip()
    ref_fn = flashbax.buffers.prioritised_trajectory_buffer.get_invalid_indices
    buffer = buffers.make_prioritised_trajectory_buffer(2, 2, 3, 2, 3, max_length_time_axis=10)
    add = jax.jit(buffer.add)
    ours_fn = jax.jit(lambda s: ptb.get_invalid_indices(s, 3, 2, 2, 10))
    ref_jit = jax.jit(lambda s: ref_fn(s, 3, 2, 2, 10))
    state = buffer.init(jnp.zeros(()))
    for step in range(14):
        state = add(state, jnp.full((2, 1), step, jnp.float32))
        got = ours_fn(state)
        np.testing.assert_array_equal(got, ref_jit(state), err_msg=f"step {step}")
        # every item whose window holds the write position (so straddles it) is masked
        cur = int(state.current_index)
        straddling = {
            row * 5 + slot // 2
            for row in range(2)
            for slot in range(0, 10, 2)
            if 0 < (cur - slot) % 10 < 3
        }
        assert straddling <= set(np.asarray(got).ravel().tolist()), f"step {step}"


def test_mixer_and_queue_functions_take_the_reference_s_arguments() -> None:
    flat = buffers.make_flat_buffer(8, 0, 4)
    state = flat.init({"x": jnp.float32(0)})
    add = jax.jit(flat.add)
    for i in range(4):
        state = add(state, {"x": jnp.float32(i)})
    m = buffers.make_mixer([flat, flat], 4, [1, 1])
    key = jax.random.PRNGKey(3)
    direct = jax.jit(
        lambda s, k: mixer.sample_mixer_fn([s, s], k, [2, 2], [flat.sample, flat.sample])
    )(state, key)
    mixed = jax.jit(lambda s, k: m.sample([s, s], k))(state, key)
    np.testing.assert_array_equal(direct.experience.first["x"], mixed.experience.first["x"])
    assert bool(mixer.can_sample_mixer_fn([state, state], [flat.can_sample, flat.can_sample]))
    assert mixer.state_types == [
        buffers.TrajectoryBufferState,
        buffers.PrioritisedTrajectoryBufferState,
    ]

    q = trajectory_queue.init(jnp.zeros(()), 1, 4)
    assert bool(trajectory_queue.can_add(q, 3, 4))
    assert not bool(trajectory_queue.can_sample(q, 2, 4))
    q = jax.jit(trajectory_queue.add)(q, jnp.arange(3.0)[None])
    q, out = jax.jit(trajectory_queue.sample, static_argnums=1)(q, 2)
    np.testing.assert_array_equal(out.experience, [[0.0, 1.0]])
    with pytest.raises(buffers.BufferConfigError, match=re.escape("`max_length_time_axis` is 5")):
        trajectory_queue.can_add(q, 1, 5)


def test_vault_module_constants_are_the_vault_s(tmp_path: Any) -> None:
    import tensorstore as ts

    from vault import vault as vault_module

    buffer = buffers.make_flat_buffer(8, 0, 2)
    state = buffer.add(buffer.init({"x": jnp.float32(0)}), {"x": jnp.float32(1)})
    v = vault_module.Vault(
        "run",
        state.experience,
        rel_dir=vault_module.DRIVER + str(tmp_path),
        vault_uid="a",
        compression=vault_module.COMPRESSION_DEFAULT,
    )
    assert v.write(state) == 1
    v.close()
    root = tmp_path / "run" / "a"
    assert (root / vault_module.METADATA_FILE).is_file()
    assert v.manifest.format_version == 5 == vault_module.VERSION
    assert ts.inf == vault_module.TIME_AXIS_MAX_LENGTH
    assert vault_module.get_tree_shape_prefix(state.experience, 2) == (1, 8)
