"""The parts of a commit record: seams, the episode index's state and open episodes, the
edge of each array (its partly filled last chunk) and its place tags not yet in its tag
array. Plain frozen records (docs/format.md, 4.3); the commit record itself is
:class:`vault.format._records.CommitRecord`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any


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
