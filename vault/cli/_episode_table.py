"""The text table of ``vault episodes``, for a vault and for a dataset's shards."""

from __future__ import annotations

from typing import Any

from vault.cli._common import count, natural_width, number, print_titled, stdout

_COLUMNS: list[tuple[str, Any]] = [
    ("row", lambda r: str(r["row"])),
    ("start", lambda r: str(r["start"])),
    ("length", lambda r: str(r["length"])),
    ("return", lambda r: number(r["return"], 6)),
    ("truncated", lambda r: "yes" if r["truncated"] else "no"),
    ("complete", lambda r: "yes" if r["complete"] else "open"),
    ("stop", lambda r: str(r["start"] + r["length"])),
    ("start known", lambda r: "yes" if r["start_known"] else "no (after a seam)"),
]


def render_episode_table(
    location: str,
    records: list[dict[str, Any]],
    total: int,
    counts: dict[str, Any],
    *,
    shards: int | None = None,
) -> None:
    """The text table of ``vault episodes`` (``shards``: a dataset's, with a shard column)."""
    from rich.markup import escape
    from rich.table import Table

    console = stdout()
    location = escape(location)
    opened = "" if total == counts["episodes"] else f" and {total - counts['episodes']} open"
    title = f"{location}: {count(counts['episodes'], 'complete episode')}{opened}"
    columns = _COLUMNS
    if shards is not None:
        title += f" in {count(shards, 'shard')}"
        columns = [("shard", lambda r: escape(r["shard"])), *_COLUMNS]
    for n in range(len(columns), len(columns) - len(_COLUMNS) + 5, -1):  # optional ones if room
        table = Table()
        for name, _ in columns[:n]:
            table.add_column(name, justify="left" if name == "shard" else "right", no_wrap=True)
        for r in records:
            table.add_row(*(cell(r) for _, cell in columns[:n]))
        if natural_width(console, table) <= console.width:
            break
    print_titled(title, table, console)
    if len(records) < total:
        console.print(f"... {total - len(records)} more (--head 0 shows all)")
