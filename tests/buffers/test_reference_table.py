"""Same key, same state: ``buffers`` draws what the reference (Flashbax 0.1.3) drew.

``data/reference_draws.json`` holds, for each scenario of :mod:`_draw_scenarios` (a buffer of
every kind the reference has, states from partial to wrapped several times, re-prioritised
states, mixers), the reference's draws for several keys; it was written by
``tools/make_reference_draws.py`` with Flashbax installed. This test needs no Flashbax, so the
default test run checks that a run migrated by changing the import draws the same samples.
"""

from __future__ import annotations

import json
from typing import Any

import _draw_scenarios
import numpy as np
import pytest
from _draw_scenarios import TABLE, prng_probe

import buffers

STORED = json.loads(TABLE.read_text())
BY_NAME = {s["name"]: s for s in STORED["scenarios"]}


def decode(entry: dict[str, Any]) -> np.ndarray:
    return np.asarray(entry["values"], entry["dtype"]).reshape(entry["shape"])


def test_table_covers_every_scenario() -> None:
    assert STORED["format"] == 1
    assert STORED["flashbax"] == "0.1.3"
    assert sorted(BY_NAME) == sorted(_draw_scenarios.SCENARIOS)
    kinds = {s["kind"] for s in STORED["scenarios"]}
    assert kinds == {
        "trajectory",
        "flat",
        "item",
        "n_step",
        "prioritised_trajectory",
        "prioritised_flat",
        "prioritised_item",
        "mixer",
    }


@pytest.mark.parametrize("name", sorted(_draw_scenarios.SCENARIOS))
def test_draws_equal_the_stored_reference_draws(name: str) -> None:
    if prng_probe() != STORED["prng_probe"]:
        pytest.skip(
            f"this jax ({STORED['jax']} made the table) gives other random bits for the same "
            "key; regenerate the table with tools/make_reference_draws.py"
        )
    spec = _draw_scenarios.SCENARIOS[name]
    assert {k: v for k, v in BY_NAME[name].items() if k != "draws"} == spec, (
        "the scenario changed since the table was made: run tools/make_reference_draws.py"
    )
    ours = _draw_scenarios.run(buffers, spec)
    assert len(ours) == len(BY_NAME[name]["draws"])
    for seed, got, stored in zip(spec["keys"], ours, BY_NAME[name]["draws"], strict=True):
        assert sorted(got) == sorted(stored), f"key {seed}"
        for leaf, value in stored.items():
            want = decode(value)
            assert got[leaf].dtype == want.dtype, f"key {seed}: {leaf}"
            np.testing.assert_array_equal(got[leaf], want, err_msg=f"key {seed}: {leaf}")
