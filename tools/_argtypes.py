"""``type=`` functions for the tools' argparse options: a bad value is an argparse error
(usage, one line, exit status 2), never a traceback and never silently accepted.

The tools import it as they import their other helpers (``from _argtypes import ...``: a
script's folder is first on ``sys.path``); a tool that is also loaded by file path (as the
tests load ``crash_trials.py``) puts its folder on ``sys.path`` first.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _number(text: str, kind: type[int] | type[float]) -> int | float:
    try:
        value = kind(text)
    except ValueError:
        name = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{text!r} is not {name}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _bound(kind: type[int] | type[float], low: float, above: bool) -> Callable[[str], Any]:
    """A number of ``kind`` that is at least ``low`` (``above``: greater than ``low``)."""
    rule = f"{'>' if above else 'at least'} {low:g}"

    def parse(text: str) -> int | float:
        value = kind(_number(text, kind))
        if value < low or (above and value == low):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
        return value

    parse.__name__ = f"{'integer' if kind is int else 'number'} {rule}"  # argparse names it
    return parse


def at_least(low: int) -> Callable[[str], int]:
    """An integer >= ``low``."""
    return _bound(int, low, above=False)


positive_int = at_least(1)  # an integer >= 1
non_negative_int = at_least(0)  # an integer >= 0
positive_float = _bound(float, 0.0, above=True)  # a finite number > 0
non_negative_float = _bound(float, 0.0, above=False)  # a finite number >= 0


def positive_ints(text: str) -> tuple[int, ...]:
    """A comma-separated list of integers >= 1 (``256,4096``)."""
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers")
    return tuple(positive_int(p) for p in parts)


def existing_dir(text: str) -> Path:
    """A folder that exists (where a tool makes its temporary folder)."""
    path = Path(text)
    if not path.is_dir():
        why = "is not a folder" if path.exists() else "does not exist"
        raise argparse.ArgumentTypeError(f"{text} {why}")
    return path


def out_file(text: str) -> Path:
    """A file to write at the end of a run: its folder must exist, and it must not be one
    (checked before the run, not after it)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name")
    parent = path.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"the folder {parent} does not exist")
    return path


def choices_list(known: tuple[str, ...] | list[str]) -> Callable[[str], list[str]]:
    """A comma-separated list of names, each one of ``known``."""

    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",")]
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(map(repr, unknown))}; choose from {','.join(known)}"
            )
        return names

    parse.__name__ = "list"
    return parse
