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
    """An argument cannot describe a working buffer or call.

    For example a ``make_*`` factory's settings, the example timestep given to ``init``, the
    episode-end leaf, a mixer's states.
    """


class ArgumentTypeError(BufferConfigError, TypeError):
    """An argument has the wrong type.

    A float or bool where an integer size is expected, a string leaf in a timestep, a state of
    another buffer kind, an integer where a PRNG key is expected. Also a
    :class:`BufferConfigError`, so code that catches that keeps working.
    """


class BufferTooLargeError(BufferConfigError, MemoryError):
    """A state or a sample would need more memory than the limit, checked before allocating.

    The limit is the total memory of the default JAX backend's local devices (the host's
    physical memory for the CPU backend; the sum of ``memory_stats()["bytes_limit"]`` of the
    accelerators, unchecked where a backend does not report it). Shapes are static, so this is
    checked inside ``jit`` too (at trace time).

    Attributes:
        nbytes: the size asked for, in bytes.
        limit: the limit, in bytes.
    """

    def __init__(self, message: str, nbytes: int, limit: int) -> None:
        super().__init__(message)
        self.nbytes = nbytes
        self.limit = limit


class LeafMismatch:
    """One bad leaf found while comparing a batch against a buffer state.

    Attributes:
        path: the leaf's path in the batch (``experience/obs``).
        expected: what the buffer expected (shape and dtype).
        got: what the batch had.
    """

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

    Attributes:
        mismatches: every bad leaf (not only the first), each with its path, what the buffer
            expected and what the batch had.
    """

    def __init__(self, what: str, mismatches: Sequence[LeafMismatch], remedy: str) -> None:
        self.mismatches = list(mismatches)
        lines = "\n".join(f"  - {m}" for m in self.mismatches)
        super().__init__(f"{what}: {len(self.mismatches)} bad leaf/leaves\n{lines}\n{remedy}")


class PriorityError(BufferError, ValueError):
    """``set_priorities`` was given bad ``indices`` or ``priorities``.

    Shapes and dtypes are checked always (also at ``jit`` trace time); values (NaN, infinite or
    negative priorities, indices that name no item) only when they are concrete, outside
    ``jit``. Inside ``jit`` such entries are ignored instead (see ``set_priorities``).
    """


class NotReadyError(BufferError, RuntimeError):
    """``sample`` was called on a state for which ``can_sample`` is false.

    Raised eagerly (outside ``jit``). Inside ``jit`` the sample's ``valid`` mask is false
    instead.
    """


class QueueFullError(BufferError, RuntimeError):
    """``add`` on a trajectory queue would overwrite timesteps that were not read yet."""
