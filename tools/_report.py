"""Reporting helpers shared by the benchmark scripts in ``tools/``: progress log, JSON output,
ratios, number formatting and the rlvault-vs-Flashbax comparison table."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TABLE_HEAD = (
    "| variant | metric | unit | rlvault | flashbax | ratio | target | met |",
    "|---|---|---|---:|---:|---:|---|---|",
)


def log(msg: str) -> None:
    """Progress to stderr, so stdout stays for the table or JSON."""
    print(msg, file=sys.stderr, flush=True)


def write_json(path: Path, result: dict[str, Any]) -> None:
    """Write a benchmark's result as indented JSON (creating the parent folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    log(f"JSON written to {path}")


def ratio(rl: float | None, fb: float | None, higher_is_better: bool) -> float | None:
    """rlvault advantage: > 1 means rlvault is better."""
    if rl is None or fb is None or rl == 0 or fb == 0:
        return None
    return rl / fb if higher_is_better else fb / rl


def fmt(x: float | None, unit: str = "") -> str:
    """A table cell: integers with thousands separators, ratios with 2 decimals, else 3
    significant-ish digits."""
    if x is None:
        return "-"
    if unit == "" and float(x).is_integer():
        return f"{int(x):,}"
    if unit == "x":
        return f"{x:.2f}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


class Rows:
    """The comparison table's rows: variant, metric, unit, rlvault, flashbax, ratio (rlvault
    advantage), target, met."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(
        self,
        variant: str,
        metric: str,
        unit: str,
        rl: float | None,
        fb: float | None,
        higher_is_better: bool,
        target: str | None = None,
        met: bool | None = None,
    ) -> None:
        self.rows.append(
            {
                "variant": variant,
                "metric": metric,
                "unit": unit,
                "rlvault": rl,
                "flashbax": fb,
                "ratio": ratio(rl, fb, higher_is_better),
                "target": target,
                "met": met,
            }
        )


def table_lines(rows: list[dict[str, Any]]) -> Iterator[str]:
    """The markdown table of :class:`Rows`' rows."""
    yield from TABLE_HEAD
    for r in rows:
        met = "-" if r["met"] is None else ("yes" if r["met"] else "**no**")
        yield (
            f"| {r['variant']} | {r['metric']} | {r['unit']} | {fmt(r['rlvault'], r['unit'])} | "
            f"{fmt(r['flashbax'], r['unit'])} | {fmt(r['ratio'], 'x')} | {r['target'] or ''} | "
            f"{met} |"
        )


def dig(tree: Any, *keys: str) -> Any:
    """``tree[k0][k1]...``, or None where a level is missing (a library or step not run)."""
    cur = tree
    for k in keys:
        if not isinstance(cur, dict) or k not in cur:
            return None
        cur = cur[k]
    return cur
