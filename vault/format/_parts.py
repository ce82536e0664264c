"""The parts of a commit record: seams, the episode index's state and open episodes, the
edge of each array (its partly filled last chunk) and its place tags not yet in its tag
array. Plain frozen records (docs/format.md, 4.3), and the checks of the seams' and the
episode state's JSON; the commit record itself is :class:`vault.format._records.CommitRecord`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, TypeGuard

from vault.format._json import is_int, is_int_list

SEAMS_KEY = "gaps"  # the commit record's list of seams (named "gaps" in format 1 and 2)


@dataclasses.dataclass(frozen=True)
class Seam:
    """A place where the timesteps at ``at - 1`` and ``at`` are not consecutive.

    Attributes:
        at: the first timestep after the seam.
        lost: timesteps per row lost there (``on_overrun="save_surviving"``), or 0 for a
            restart (``append(..., continues=False)``, the seams of ``combine``).
    """

    at: int
    lost: int = 0

    def to_json(self) -> dict[str, int]:
        """Returns ``{"at", "lost"}``, as the commit record stores it."""
        return {"at": self.at, "lost": self.lost}


@dataclasses.dataclass(frozen=True)
class OpenEpisodes:
    """Per row, the episode still running at the committed length: its start, return so far
    and flags."""

    start: tuple[int, ...]
    returns: tuple[float, ...]
    flags: tuple[int, ...]

    @classmethod
    def fresh(cls, rows: int, begin: int = 0, flags: Sequence[int] | int = 0) -> OpenEpisodes:
        per_row = [int(flags)] * rows if isinstance(flags, int) else [int(f) for f in flags]
        return cls((begin,) * rows, (0.0,) * rows, tuple(per_row))

    def to_json(self) -> dict[str, list[Any]]:
        return {"start": list(self.start), "return": list(self.returns), "flags": list(self.flags)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> OpenEpisodes:
        return cls(
            tuple(map(int, doc["start"])),
            tuple(map(float, doc["return"])),
            tuple(map(int, doc["flags"])),
        )


@dataclasses.dataclass(frozen=True)
class EpisodeState:
    """The episode index as committed: ``count`` indexed episodes and the open ones."""

    count: int
    open: OpenEpisodes

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "open": self.open.to_json()}


@dataclasses.dataclass(frozen=True)
class Edge:
    """The partly filled chunk at an array's committed end: it starts at ``start`` (time, or
    episode for the index); ``crc`` per row is the crc32 of its committed part's decoded
    bytes (see ``vault/format/_tags.py``)."""

    start: int
    crc: tuple[int, ...]
    tails: tuple[int, ...] = ()  # the stored crc32c of the edge chunk, per row block

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"from": self.start, "crc": list(self.crc)}
        if self.tails:
            doc["tail"] = list(self.tails)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Edge:
        tails = tuple(map(int, doc.get("tail", ())))
        return cls(int(doc["from"]), tuple(map(int, doc["crc"])), tails)


@dataclasses.dataclass(frozen=True)
class PendingTags:
    """The place tags of an array's complete chunks not yet in its tag array (format 5): the
    tags of time chunks ``[start, complete)``, ``values`` in the tag array's order (row
    block, then time chunk, then item chunk). See ``vault/format/_tags.py``."""

    start: int
    values: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"from": self.start, "tags": list(self.values)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PendingTags:
        return cls(int(doc["from"]), tuple(map(int, doc["tags"])))


# ------------------------------------------------------------------------------ validation
def seam_problems(seams: Any, length: int | None = None) -> list[str]:
    """Why ``seams`` is not a list of seams (each inside the ``length`` committed)."""
    if isinstance(seams, list) and all(
        isinstance(g, dict)
        and is_int(g.get("at"), 0)
        and is_int(g.get("lost"), 0)
        and (length is None or g["at"] <= length)
        for g in seams
    ):
        return []
    shown = repr(seams) if len(repr(seams)) < 200 else f"{repr(seams)[:200]}..."
    within = "" if length is None else f" with 'at' <= {length}"
    return [f"{SEAMS_KEY} must be a list of {{'at': int, 'lost': int}}{within}, got {shown}"]


def episode_record_problems(record: Any, rows: int, length: int) -> list[str]:
    if not isinstance(record, dict):
        return [f"the vault keeps an episode index but the record has {record!r} for it"]
    out = []
    if not is_int(record.get("count"), 0):
        out.append(f"episodes.count must be an int >= 0, got {record.get('count')!r}")
    elif record["count"] > rows * length:  # an episode is at least one timestep long
        out.append(
            f"episodes.count {record['count']} is more than {rows} rows of {length} committed "
            "timesteps can hold"
        )
    opened = record.get("open")
    columns = ("start", "return", "flags")
    starts, returns, flags = (
        (opened.get("start"), opened.get("return"), opened.get("flags"))
        if isinstance(opened, dict)
        else (None, None, None)
    )
    if not (_has_rows(starts, rows) and _has_rows(returns, rows) and _has_rows(flags, rows)):
        return [*out, f"episodes.open must hold {columns} lists of {rows} entries"]
    if not is_int_list(starts, 0) or (starts and max(starts) > length):
        out.append(f"episodes.open.start must be ints in [0, {length}], got {starts}")
    if not is_int_list(flags, 0):
        out.append(f"episodes.open.flags must be ints >= 0, got {flags}")
    for x in returns:
        if not isinstance(x, (int, float)):
            out.append(f"episodes.open.return must be numbers, got {returns}")
            break
    return out


def _has_rows(column: Any, rows: int) -> TypeGuard[list[Any]]:
    return isinstance(column, list) and len(column) == rows
