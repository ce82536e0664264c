"""Write the table of the reference's draws that the default test run checks ``buffers`` against.

Plays every scenario of ``tests/buffers/_draw_scenarios.py`` (a buffer, the adds and
re-prioritisations that build its state, the keys to sample with) on Flashbax 0.1.3 and
stores the scenarios with the reference's draws in ``tests/buffers/data/reference_draws.json``.
``tests/buffers/test_reference_table.py`` replays them on ``buffers`` without needing Flashbax;
``tests/buffers/test_reference_draws.py`` compares with Flashbax itself where it is installed.

The table also records a probe of jax's random bits: a jax whose PRNG gives other bits for the
same key would make other draws in both libraries, and the table test then skips (regenerate
the table with this script).

Usage::

    python tools/make_reference_draws.py            # needs `pip install -e ".[bench]"`
    python tools/make_reference_draws.py --check    # exit 1 if the stored table is stale
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests" / "buffers"
FORMAT = 1

sys.path.insert(0, str(TESTS))
import _draw_scenarios as scenarios  # noqa: E402 (the test helper that defines the scenarios)

TABLE = scenarios.TABLE


def encode(array: np.ndarray) -> dict[str, Any]:
    """An array as JSON: dtype name, shape and values (float32 values are exact as doubles)."""
    return {"dtype": array.dtype.name, "shape": list(array.shape), "values": array.ravel().tolist()}


def build_table() -> dict[str, Any]:
    import flashbax  # optional (the bench and dev extras): imported only here

    entries = []
    for name, spec in scenarios.SCENARIOS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the reference's advice on period and sizes
            draws = scenarios.run(flashbax, spec)
        for i, d in enumerate(draws):
            probs = d.get("probabilities")
            if probs is not None and not (probs > 0).all():
                raise SystemExit(
                    f"{name}, key {spec['keys'][i]}: the reference drew a zero-priority item; "
                    "such draws are not valid by our rules, choose another key or state"
                )
        entries.append({**spec, "draws": [{k: encode(v) for k, v in d.items()} for d in draws]})
    return {
        "format": FORMAT,
        "generated_by": "tools/make_reference_draws.py",
        "flashbax": importlib.metadata.version("flashbax"),
        "jax": importlib.metadata.version("jax"),
        "prng_probe": scenarios.prng_probe(),
        "scenarios": entries,
    }


def dumps(table: dict[str, Any]) -> str:
    """Compact JSON with one scenario per line (readable diffs, small file)."""
    head = {k: v for k, v in table.items() if k != "scenarios"}
    lines = [json.dumps(s, separators=(",", ":")) for s in table["scenarios"]]
    return json.dumps(head)[:-1] + ', "scenarios": [\n' + ",\n".join(lines) + "\n]}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the stored table")
    args = parser.parse_args(argv)
    table = build_table()
    text = dumps(table)
    if args.check:
        stored = json.loads(TABLE.read_text())
        same = stored["scenarios"] == table["scenarios"]
        print("table is current" if same else f"{TABLE} is stale: regenerate it")
        return 0 if same else 1
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    TABLE.write_text(text)
    n = sum(len(s["draws"]) for s in table["scenarios"])
    print(f"wrote {TABLE.relative_to(ROOT)}: {len(table['scenarios'])} scenarios, {n} draws")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
