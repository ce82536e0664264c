"""The records :func:`~vault.verify` returns: every finding with its place."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Problem:
    """One finding of :func:`verify`.

    Attributes:
        place: a file, array, chunk or index entry (``experience/obs chunk 0.1.0``).
        message: what is wrong there.
    """

    place: str
    message: str

    def __str__(self) -> str:
        return f"{self.place}: {self.message}"


@dataclasses.dataclass
class VerifyReport:
    """The outcome of :func:`verify`.

    Warnings (old versions of replaced files waiting to be freed, chunks that may
    legitimately be absent) do not make a vault unsound.

    Attributes:
        location: the vault checked.
        problems: every problem found, with its place.
        warnings: findings that do not make the vault unsound.
        committed_length: the committed length checked (None: the commit record is unreadable).
        chunks_checked: chunks read and checked.
        episodes_checked: episodes of the index compared with the data (None: no index).
    """

    location: str
    problems: list[Problem] = dataclasses.field(default_factory=list)
    warnings: list[Problem] = dataclasses.field(default_factory=list)
    committed_length: int | None = None
    chunks_checked: int = 0
    episodes_checked: int | None = None

    @property
    def ok(self) -> bool:
        """Whether no problem was found."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict.

        Returns:
            ``location``, ``ok``, ``committed_length``, ``chunks_checked``,
            ``episodes_checked``, and ``problems`` and ``warnings`` as ``{place, message}``.
        """
        return {
            "location": self.location,
            "ok": self.ok,
            "committed_length": self.committed_length,
            "chunks_checked": self.chunks_checked,
            "episodes_checked": self.episodes_checked,
            "problems": [dataclasses.asdict(p) for p in self.problems],
            "warnings": [dataclasses.asdict(p) for p in self.warnings],
        }
