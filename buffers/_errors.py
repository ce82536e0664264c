"""The buffers' error hierarchy.

Every error is a :class:`BufferError` and also a subclass of the builtin that a caller would
catch without knowing this package (``ValueError``, ``RuntimeError``), following zarr's
``NodeNotFoundError(BaseZarrError, FileNotFoundError)`` model.
"""

from __future__ import annotations

from collections.abc import Sequence


class BufferError(Exception):
    """Root of every error raised by :mod:`buffers`."""


class BufferConfigError(BufferError, ValueError):
    """A ``make_*`` factory was given arguments that cannot describe a working buffer."""


class LeafMismatch:
    """One bad leaf found while comparing a batch against a buffer state."""

    __slots__ = ("expected", "got", "path")

    def __init__(self, path: str, expected: str, got: str) -> None:
        self.path = path
        self.expected = expected
        self.got = got

    def __str__(self) -> str:
        return f"{self.path}: expected {self.expected}, got {self.got}"

    def __repr__(self) -> str:
        return f"LeafMismatch({self.path!r}, expected={self.expected!r}, got={self.got!r})"


class BatchStructureError(BufferError, ValueError):
    """A batch given to ``add`` does not match the buffer's structure, shapes or dtypes.

    ``mismatches`` lists every bad leaf (not only the first), each with its path, what the
    buffer expected and what the batch had.
    """

    def __init__(self, what: str, mismatches: Sequence[LeafMismatch], remedy: str) -> None:
        self.mismatches = list(mismatches)
        lines = "\n".join(f"  - {m}" for m in self.mismatches)
        super().__init__(f"{what}: {len(self.mismatches)} bad leaf/leaves\n{lines}\n{remedy}")


class NotReadyError(BufferError, RuntimeError):
    """``sample`` was called on a state for which ``can_sample`` is false.

    Raised eagerly (outside ``jit``). Inside ``jit`` the sample's ``valid`` mask is false
    instead.
    """


class QueueFullError(BufferError, RuntimeError):
    """``add`` on a trajectory queue would overwrite timesteps that were not read yet."""
