"""Against the reference itself (Flashbax 0.1.3, in the ``dev`` and ``bench`` extras): the same
adds build the same state, and the same key then draws the same samples, for every buffer kind
the reference has (README: "Same draws as the reference"). Also pins the documented
differences: inexact priorities, new items' priority, and the mixer's shares.
"""

from __future__ import annotations

import importlib.metadata
import json
import warnings
from types import ModuleType
from typing import Any

import _draw_scenarios as sc
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers

flashbax = pytest.importorskip("flashbax")
if importlib.metadata.version("flashbax") != "0.1.3":
    pytest.skip("the draws are matched to Flashbax 0.1.3", allow_module_level=True)


def reference(fn: Any, *args: Any) -> Any:
    """Call into the reference, whose advice (``period`` > sequence length ...) warns."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


def assert_same_draws(spec: dict[str, Any], ours: list[Any], ref: list[Any]) -> None:
    for seed, got, want in zip(spec["keys"], ours, ref, strict=True):
        assert sorted(got) == sorted(want), f"{spec['name']}, key {seed}"
        for leaf in want:
            np.testing.assert_array_equal(
                got[leaf], want[leaf], err_msg=f"{spec['name']}, key {seed}: {leaf}"
            )
            assert got[leaf].dtype == want[leaf].dtype


def assert_same_state(spec: dict[str, Any]) -> None:
    ours = sc.state_arrays(spec, sc.build(buffers, spec)[1])
    ref = sc.state_arrays(spec, reference(sc.build, flashbax, spec)[1])
    assert sorted(ours) == sorted(ref)
    for name in ref:
        np.testing.assert_array_equal(ours[name], ref[name], err_msg=f"{spec['name']}: {name}")


@pytest.mark.parametrize("name", sorted(sc.SCENARIOS))
def test_same_state_and_key_draw_the_same_samples(name: str) -> None:
    spec = sc.SCENARIOS[name]
    for part in spec.get("buffers", [spec]):
        assert_same_state(part)
    ref = reference(sc.run, flashbax, spec)
    assert_same_draws(spec, sc.run(buffers, spec), ref)


@pytest.mark.parametrize("name", sorted(sc.SCENARIOS))
def test_stored_table_is_the_reference_draws(name: str) -> None:
    """The default test run's table (``tools/make_reference_draws.py``) is current."""
    stored = {s["name"]: s for s in json.loads(sc.TABLE.read_text())["scenarios"]}[name]
    spec = sc.SCENARIOS[name]
    ref = reference(sc.run, flashbax, spec)
    for d, want in zip(stored["draws"], ref, strict=True):
        for leaf, value in d.items():
            got = np.asarray(value["values"], value["dtype"]).reshape(value["shape"])
            np.testing.assert_array_equal(got, want[leaf])


def random_trajectory_spec(rng: np.random.Generator, kind: str) -> dict[str, Any]:
    """A random layout and random adds that fill it from part-way to several wraps."""
    rows = int(rng.integers(1, 4))
    t_len = int(rng.integers(4, 13))
    seq = int(rng.integers(1, t_len + 1))
    period = int(rng.integers(1, seq + 2))
    if kind == "prioritised_trajectory":
        t_len = max(t_len - t_len % period, period)
        seq = min(seq, t_len)
    args = {
        "add_batch_size": rows,
        "sample_batch_size": int(rng.integers(1, 9)),
        "sample_sequence_length": seq,
        "period": period,
        "min_length_time_axis": seq,
        "max_length_time_axis": t_len,
    }
    total = int(rng.integers(seq, 4 * t_len))
    adds, steps = 0, []
    while adds < total:
        n = int(rng.integers(1, t_len + 1))
        steps.append(["add", [rows, n]])
        adds += n
        if kind == "prioritised_trajectory" and rng.random() < 0.5:
            # whole priorities: exact sums, and a whole largest priority (see the README)
            priorities = rng.integers(0, 9, args["sample_batch_size"]).astype(float).tolist()
            step = ["reprioritise", int(rng.integers(1 << 20)), priorities]
            spec = {"kind": kind, "args": {**args, "priority_exponent": 1.0}, "steps": steps}
            buf, state = sc.build(buffers, spec)
            if bool(buf.can_sample(state)):  # re-prioritise only what can be drawn
                steps.append(step)
    if kind == "prioritised_trajectory":
        args["priority_exponent"] = 1.0
    return {
        "name": f"random {kind}",
        "kind": kind,
        "args": args,
        "steps": steps,
        "keys": [int(k) for k in rng.integers(0, 1 << 30, 3)],
    }


@pytest.mark.parametrize("kind", ["trajectory", "prioritised_trajectory"])
@pytest.mark.parametrize("seed", range(6))
def test_random_states_draw_the_same_samples(kind: str, seed: int) -> None:
    spec = random_trajectory_spec(np.random.default_rng([seed, len(kind)]), kind)
    _, state = sc.build(buffers, spec)
    assume_valid = kind != "prioritised_trajectory" or bool(
        buffers.make_prioritised_trajectory_buffer(**spec["args"]).can_sample(state)
    )
    assert_same_state(spec)
    if not assume_valid:  # nothing can be drawn: ours refuses rather than drawing padding
        buf = buffers.make_prioritised_trajectory_buffer(**spec["args"])
        with pytest.raises(buffers.NotReadyError):
            buf.sample(state, jax.random.key(0))
        return
    ours, ref = sc.run(buffers, spec), reference(sc.run, flashbax, spec)
    if kind == "prioritised_trajectory":  # draws of zero-priority items are not ours to match
        for got, want in zip(ours, ref, strict=True):
            keep = want["probabilities"] > 0
            assert keep.mean() > 0.5
            for leaf in want:
                got[leaf], want[leaf] = got[leaf][keep], want[leaf][keep]
    assert_same_draws(spec, ours, ref)


@pytest.mark.parametrize("name", sorted(sc.INEXACT))
def test_inexact_priorities_draw_the_same_items(name: str) -> None:
    """Priorities that are not exact in float32: the reference's leaves drift by a rounding
    step (it adds ``new - old``); the same items are drawn, probabilities agree to rounding."""
    spec = sc.INEXACT[name]
    ours, ref = sc.run(buffers, spec), reference(sc.run, flashbax, spec)
    for got, want in zip(ours, ref, strict=True):
        for leaf in want:
            if leaf == "probabilities":
                np.testing.assert_allclose(got[leaf], want[leaf], rtol=1e-6)
            else:
                np.testing.assert_array_equal(got[leaf], want[leaf])


def _after_high_priority(lib: ModuleType) -> np.ndarray:
    buf = lib.make_prioritised_item_buffer(8, 1, 4, add_sequences=True, priority_exponent=1.0)
    state = buf.add(buf.init(sc.TIMESTEP), sc.batch_of([3], 0))
    state = buf.set_priorities(state, jnp.array([0]), jnp.array([2.5]))
    state = buf.add(state, sc.batch_of([2], 3))
    return np.asarray(sc.state_arrays({"kind": "prioritised_item"}, state)["priorities"])


def test_new_items_get_the_largest_priority_the_reference_its_whole_part() -> None:
    """Documented difference: the reference gives new items ``int(max priority)`` (its fill
    array is an integer array); ours give the maximum itself, as the PER paper does."""
    np.testing.assert_array_equal(_after_high_priority(buffers)[:5], [2.5, 1, 1, 2.5, 2.5])
    np.testing.assert_array_equal(_after_high_priority(flashbax)[:5], [2.5, 1, 1, 2, 2])


def test_mixer_shares_differ_only_in_size() -> None:
    """Documented difference: shares that are not whole numbers are rounded by largest
    remainder (each share is its exact share rounded down or up); the reference gives the
    first buffer all the leftovers. Each buffer's part is still the start of the same draw."""
    parts = [
        {**b, "args": {**b["args"], "sample_batch_size": 10}}
        for b in sc.SCENARIOS["mixer/trajectory"]["buffers"]
    ]
    ours_b = [sc.build(buffers, b) for b in parts]
    ref_b = [reference(sc.build, flashbax, b) for b in parts]
    ours = buffers.make_mixer([b for b, _ in ours_b], 10, [1, 2])
    ref = reference(flashbax.make_mixer, [b for b, _ in ref_b], 10, [1, 2])
    assert ours.batch_sizes == (3, 7)  # exact shares 3.33 and 6.67; the reference's: 4 and 6
    key = jax.random.PRNGKey(5)
    got = ours.sample([s for _, s in ours_b], key).experience["code"]
    want = reference(ref.sample, [s for _, s in ref_b], key).experience["code"]
    np.testing.assert_array_equal(got[:3], want[:3])  # buffer 0: 3 of the reference's 4
    np.testing.assert_array_equal(got[3:9], want[4:])  # buffer 1: the reference's 6, then 1
