"""Write the table of Flashbax 0.1.3's public names that the default test run checks.

Walks every module of the installed Flashbax (``tests/buffers/_flashbax_names.py`` says which
names count and how modules map to ours) and stores, for each public name, what it is (module,
class with its fields, function with its parameters, type variable, constant) in
``tests/buffers/data/flashbax_names.json``. ``tests/buffers/test_flashbax_names.py`` checks
that every one resolves in our module of the same name, from the stored table (no Flashbax
needed) and from a live walk where Flashbax is installed.

Usage::

    python tools/make_flashbax_names.py            # needs `pip install -e ".[bench]"`
    python tools/make_flashbax_names.py --check    # exit 1 if the stored table is stale
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "buffers"))
import _flashbax_names as names  # noqa: E402 (the test helper that defines the walk)

FORMAT = 1


def table() -> dict[str, object]:
    """The stored document: the reference's version and its walked names."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference's imports warn on newer jax
        import flashbax

        walked = names.walk(flashbax)
    return {"format": FORMAT, "flashbax": importlib.metadata.version("flashbax"), "modules": walked}


def dumps(doc: dict[str, object]) -> str:
    """The table as JSON with one line per name (readable diffs when Flashbax changes)."""
    modules = doc["modules"]
    assert isinstance(modules, dict)
    blocks = []
    for module, spec in modules.items():
        lines = [
            f"    {json.dumps(name)}: {json.dumps(entry)}" for name, entry in spec["names"].items()
        ]
        blocks.append(
            f'  {json.dumps(module)}: {{"ours": {json.dumps(spec["ours"])}, "names": {{\n'
            + ",\n".join(lines)
            + "\n  }}"
        )
    head = (
        f'{{"format": {doc["format"]}, "flashbax": {json.dumps(doc["flashbax"])}, "modules": {{\n'
    )
    return head + ",\n".join(blocks) + "\n}}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    doc = table()
    text = dumps(doc)
    assert json.loads(text) == doc
    if args.check:
        stale = not names.TABLE.exists() or names.TABLE.read_text() != text
        print(f"{names.TABLE}: {'stale' if stale else 'up to date'}")
        return int(stale)
    names.TABLE.write_text(text)
    print(f"wrote {names.TABLE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
