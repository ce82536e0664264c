"""Draw scenarios shared by the reference-draw tests and ``tools/make_reference_draws.py``.

A scenario is plain JSON: a buffer (``kind`` and constructor ``args``), the ``steps`` that
build its state (adds of timesteps with unique codes, and re-prioritisations of what a key
draws), and the ``keys`` (seeds of ``jax.random.PRNGKey``) to sample with. :func:`run`
plays a scenario on a library with the reference's API (``buffers`` or ``flashbax``, which
is the point) and returns every draw as numpy arrays. The table in ``data/reference_draws.json``
holds the reference's draws for :data:`SCENARIOS`.

Every scenario only samples states that ``can_sample`` and whose draws are valid by our rules,
so the reference's draws are exactly the ones ours must reproduce (README: "Same draws as the
reference").
"""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

TABLE = Path(__file__).parent / "data" / "reference_draws.json"
TIMESTEP = {"code": jnp.int32(0), "obs": jnp.zeros((2,), jnp.float32)}
PRIORITISED = ("prioritised_trajectory", "prioritised_flat", "prioritised_item")


def prng_probe() -> list[int]:
    """Random bits that change exactly when jax's PRNG does (split and bits of one key)."""
    key = jax.random.PRNGKey(0)
    left, right = jax.random.split(key)
    bits = [np.asarray(jax.random.bits(k, (2,), jnp.uint32)) for k in (key, left, right)]
    return [int(b) for b in np.concatenate(bits)]


def batch_of(shape: list[int], first_code: int) -> dict[str, jax.Array]:
    """Timesteps with leading axes ``shape``, coded ``first_code, first_code + 1, ...``."""
    code = first_code + np.arange(math.prod(shape), dtype=np.int32).reshape(shape)
    obs = np.stack([code, -0.5 * code], axis=-1).astype(np.float32)
    return {"code": jnp.asarray(code), "obs": jnp.asarray(obs)}


def make(lib: ModuleType, kind: str, args: dict[str, Any]) -> Any:
    """The buffer ``kind`` of ``lib``; the reference has no n-step buffer, so there an n-step
    buffer is the trajectory buffer it is made of (windows of ``n_step + 1``, period 1)."""
    if kind == "n_step" and not hasattr(lib, "make_n_step_buffer"):
        rows = args["add_batch_size"]
        return lib.make_trajectory_buffer(
            add_batch_size=rows,
            sample_batch_size=args["sample_batch_size"],
            sample_sequence_length=args["n_step"] + 1,
            period=1,
            min_length_time_axis=args["min_length"] // rows + 1,
            max_length_time_axis=args["max_length"] // rows,
        )
    return getattr(lib, f"make_{kind}_buffer")(**args)


def draw(kind: str, buffer: Any, state: Any, seed: int) -> Any:
    return buffer.sample(state, jax.random.PRNGKey(seed))


def leaves(kind: str, sample: Any) -> dict[str, np.ndarray]:
    """A sample as ``{name: array}``: its experience (transition pairs as ``first`` and
    ``second``), and its indices and probabilities if it has them."""
    experience = sample.experience
    if hasattr(experience, "first"):
        experience = {"first": experience.first, "second": experience.second}
    elif kind == "n_step":  # the reference's trajectory buffer standing in for n-step
        experience = {
            "first": jax.tree.map(lambda x: x[:, 0], experience),
            "second": jax.tree.map(lambda x: x[:, -1], experience),
        }
    out = {
        "experience" + jax.tree_util.keystr(path): np.asarray(leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(experience)[0]
    }
    for name in ("indices", "probabilities"):
        if getattr(sample, name, None) is not None:
            out[name] = np.asarray(getattr(sample, name))
    return out


def build(lib: ModuleType, spec: dict[str, Any]) -> tuple[Any, Any]:
    """The buffer of ``spec`` and the state its ``steps`` build."""
    buffer = make(lib, spec["kind"], spec["args"])
    state = buffer.init(TIMESTEP)
    code = 0
    for step in spec["steps"]:
        if step[0] == "add":
            shape = step[1]
            state = buffer.add(state, batch_of(shape, code))
            code += math.prod(shape)
        elif step[0] == "reprioritise":  # set the priorities of what a key draws
            _, seed, priorities = step
            indices = draw(spec["kind"], buffer, state, seed).indices
            state = buffer.set_priorities(state, indices, jnp.asarray(priorities, jnp.float32))
        else:
            raise ValueError(f"unknown step {step!r}")
    return buffer, state


def run(lib: ModuleType, spec: dict[str, Any]) -> list[dict[str, np.ndarray]]:
    """Every draw of a scenario (one dict per key), played on ``lib``."""
    if spec["kind"] == "mixer":
        built = [build(lib, part) for part in spec["buffers"]]
        mixer = lib.make_mixer([b for b, _ in built], **spec["args"])
        states = [s for _, s in built]
        kind = spec["buffers"][0]["kind"]
        return [
            leaves(kind, mixer.sample(states, jax.random.PRNGKey(seed))) for seed in spec["keys"]
        ]
    buffer, state = build(lib, spec)
    return [leaves(spec["kind"], draw(spec["kind"], buffer, state, seed)) for seed in spec["keys"]]


def state_arrays(spec: dict[str, Any], state: Any) -> dict[str, np.ndarray]:
    """The parts of a state both libraries share: experience, position, and for prioritised
    buffers the item priorities (the sum tree's leaves, in item order)."""
    out = {
        "experience" + jax.tree_util.keystr(p): np.asarray(x)
        for p, x in jax.tree_util.tree_flatten_with_path(state.experience)[0]
    }
    out["current_index"] = np.asarray(state.current_index)
    out["is_full"] = np.asarray(state.is_full)
    if spec["kind"] in PRIORITISED:
        nodes = np.asarray(state.sum_tree_state.nodes)
        rows, t_len = out["experience['code']"].shape[:2]
        period = spec.get("args", {}).get("period", 1)
        items = rows * (t_len // period)
        leaves_at = (len(nodes) + 1) // 2 - 1 if len(nodes) % 2 else len(nodes) // 2
        out["priorities"] = nodes[leaves_at : leaves_at + items]
    return out


KEYS = [0, 1, 7, 42, 2024]


def _trajectory(rows: int, t_len: int, seq: int, period: int, adds: list[int]) -> dict[str, Any]:
    return {
        "kind": "trajectory",
        "args": {
            "add_batch_size": rows,
            "sample_batch_size": 8,
            "sample_sequence_length": seq,
            "period": period,
            "min_length_time_axis": seq,
            "max_length_time_axis": t_len,
        },
        "steps": [["add", [rows, n]] for n in adds],
        "keys": KEYS,
    }


def _prioritised(
    rows: int, t_len: int, seq: int, period: int, steps: list[Any], exponent: float
) -> dict[str, Any]:
    return {
        "kind": "prioritised_trajectory",
        "args": {
            "add_batch_size": rows,
            "sample_batch_size": 8,
            "sample_sequence_length": seq,
            "period": period,
            "min_length_time_axis": seq,
            "max_length_time_axis": t_len,
            "priority_exponent": exponent,
        },
        "steps": steps,
        "keys": KEYS,
    }


# Exact in float32, and so are their sums and differences; the largest is a whole number.
P8 = [0.5, 1.0, 2.0, 3.0, 0.25, 4.0, 1.5, 6.0]
# Inexact, at most 1 (so the largest priority recorded stays 1.0).
P8_ODD = [0.37, 0.9, 0.01, 0.71, 0.5, 0.33, 1.0, 0.2]


def _scenarios() -> dict[str, dict[str, Any]]:
    s: dict[str, dict[str, Any]] = {
        "trajectory/partial": _trajectory(3, 10, 4, 1, [6]),
        "trajectory/full-exactly": _trajectory(3, 10, 4, 1, [4, 6]),
        "trajectory/wrapped": _trajectory(3, 10, 4, 2, [7, 5, 3]),
        "trajectory/wrapped-many": _trajectory(2, 8, 3, 3, [5, 8, 7, 6, 1]),
        "trajectory/one-row": _trajectory(1, 16, 5, 1, [9, 9]),
        "flat/single": {
            "kind": "flat",
            "args": {"max_length": 12, "min_length": 3, "sample_batch_size": 8},
            "steps": [["add", []] for _ in range(17)],
            "keys": KEYS,
        },
        "flat/batches": {
            "kind": "flat",
            "args": {
                "max_length": 24,
                "min_length": 4,
                "sample_batch_size": 8,
                "add_batch_size": 4,
            },
            "steps": [["add", [4]] for _ in range(9)],
            "keys": KEYS,
        },
        "flat/sequences": {
            "kind": "flat",
            "args": {
                "max_length": 30,
                "min_length": 2,
                "sample_batch_size": 8,
                "add_sequences": True,
                "add_batch_size": 3,
            },
            "steps": [["add", [3, 4]], ["add", [3, 7]], ["add", [3, 2]]],
            "keys": KEYS,
        },
        "item/single": {
            "kind": "item",
            "args": {"max_length": 10, "min_length": 2, "sample_batch_size": 8},
            "steps": [["add", []] for _ in range(14)],
            "keys": KEYS,
        },
        "item/batches-sequences": {
            "kind": "item",
            "args": {
                "max_length": 20,
                "min_length": 1,
                "sample_batch_size": 8,
                "add_sequences": True,
                "add_batches": True,
            },
            "steps": [["add", [2, 3]], ["add", [3, 4]], ["add", [2, 5]]],
            "keys": KEYS,
        },
        "n_step/3": {
            "kind": "n_step",
            "args": {
                "max_length": 24,
                "min_length": 4,
                "sample_batch_size": 8,
                "add_sequences": True,
                "add_batch_size": 2,
                "n_step": 3,
            },
            "steps": [["add", [2, 5]], ["add", [2, 6]], ["add", [2, 4]]],
            "keys": KEYS,
        },
        "prioritised_trajectory/adds-only": _prioritised(
            3, 10, 4, 1, [["add", [3, 7]], ["add", [3, 5]]], 0.6
        ),
        "prioritised_trajectory/exact-priorities": _prioritised(
            2,
            12,
            3,
            2,
            [
                ["add", [2, 8]],
                ["reprioritise", 11, P8],
                ["add", [2, 3]],
                ["reprioritise", 12, P8[::-1]],
                ["add", [2, 4]],
            ],
            1.0,
        ),
        "prioritised_flat/batches": {
            "kind": "prioritised_flat",
            "args": {
                "max_length": 24,
                "min_length": 4,
                "sample_batch_size": 8,
                "add_batch_size": 4,
                "priority_exponent": 1.0,
            },
            "steps": [
                *[["add", [4]] for _ in range(5)],
                ["reprioritise", 3, P8],
                *[["add", [4]] for _ in range(3)],
            ],
            "keys": KEYS,
        },
        "prioritised_item/sequences": {
            "kind": "prioritised_item",
            "args": {
                "max_length": 16,
                "min_length": 1,
                "sample_batch_size": 8,
                "add_sequences": True,
                "priority_exponent": 1.0,
            },
            "steps": [
                ["add", [6]],
                ["reprioritise", 9, P8[::-1]],
                ["add", [13]],
                ["reprioritise", 10, P8],
            ],
            "keys": KEYS,
        },
    }
    s["mixer/trajectory"] = {
        "kind": "mixer",
        "args": {"sample_batch_size": 8, "proportions": [1, 3]},
        "buffers": [_trajectory(3, 10, 4, 1, [7, 5]), _trajectory(3, 10, 4, 2, [10, 3])],
        "keys": KEYS,
    }
    s["mixer/prioritised"] = {
        "kind": "mixer",
        "args": {"sample_batch_size": 8, "proportions": [0.5, 0.5]},
        "buffers": [
            s["prioritised_trajectory/adds-only"],
            _prioritised(3, 10, 4, 1, [["add", [3, 8]], ["reprioritise", 2, P8]], 1.0),
        ],
        "keys": KEYS,
    }
    for name, spec in s.items():
        spec["name"] = name
        if "buffers" in spec:  # copies: a part may be another scenario
            spec["buffers"] = [{**p, "name": f"{name}[{i}]"} for i, p in enumerate(spec["buffers"])]
    return s


def _inexact() -> dict[str, dict[str, Any]]:
    """Priorities whose powers are not exact in float32: the reference's leaves drift by a
    rounding step when it sets them (it adds ``new - old``), ours hold ``p ** alpha`` exactly."""
    s = {
        "prioritised_trajectory/odd-priorities": _prioritised(
            3,
            9,
            2,
            3,
            [
                ["add", [3, 6]],
                ["reprioritise", 5, P8_ODD],
                ["add", [3, 5]],
                ["reprioritise", 6, P8_ODD[::-1]],
            ],
            0.6,
        ),
        "prioritised_item/odd-priorities": {
            "kind": "prioritised_item",
            "args": {
                "max_length": 16,
                "min_length": 1,
                "sample_batch_size": 8,
                "add_sequences": True,
            },
            "steps": [
                ["add", [6]],
                ["reprioritise", 9, P8_ODD],
                ["add", [13]],
                ["reprioritise", 10, P8_ODD[::-1]],
            ],
            "keys": KEYS,
        },
    }
    for name, spec in s.items():
        spec["name"] = name
    return s


SCENARIOS = _scenarios()
"""Scenarios whose draws are identical to the reference's (the stored table holds these)."""
INEXACT = _inexact()
"""Scenarios with inexact priorities: same items drawn, probabilities equal to rounding."""
