"""The Vault's error hierarchy: every error is a :class:`VaultError` and the matching builtin."""

from __future__ import annotations

from collections.abc import Sequence


class VaultError(Exception):
    """Root of every error raised by :mod:`vault`."""


class VaultNotFoundError(VaultError, FileNotFoundError):
    """No vault at the location (or the directory is not a vault)."""


class VaultExistsError(VaultError, FileExistsError):
    """``Vault.create`` found a vault (or other data) at the location."""


class VaultLockedError(VaultError, BlockingIOError):
    """Another writer holds the vault (the message names it)."""


class VaultModeError(VaultError, PermissionError):
    """A write on a vault opened read-only."""


class VaultCorruptError(VaultError, OSError):
    """Stored data or metadata failed validation (checksum, schema, commit record)."""


class VaultStructureError(VaultError, ValueError):
    """A state's structure, shapes or dtypes differ from the vault's; lists every bad leaf.

    Attributes:
        problems: one line per bad leaf (its path, what was expected, what was got).
    """

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        self.problems = list(problems)
        lines = "".join(f"\n  - {p}" for p in self.problems)
        super().__init__(message + lines)


class UnsavedDataLostError(VaultError, ValueError):
    """More timesteps were added since the last write than the buffer holds.

    Attributes:
        lost: the timesteps (per row) overwritten before they could be saved.
    """

    def __init__(self, message: str, lost: int) -> None:
        self.lost = lost
        super().__init__(message)


class VaultReadError(VaultError, ValueError):
    """A read asked for something the vault does not have (rows, timesteps, leaves)."""


class VaultMetadataError(VaultError, ValueError):
    """User metadata that cannot be stored as given, or that would overwrite a reserved key.

    Metadata that is not JSON (or would come back changed), is nested more than 64 levels
    deep, or takes more than 8 MiB of JSON.
    """


class VaultVersionError(VaultError, ValueError):
    """The vault was written in a newer on-disk format than this rlvault reads: upgrade."""


class VaultLocationError(VaultError, ValueError):
    """A location that cannot be parsed, or that cannot do what was asked of it.

    For example a writer lock on a store that offers none.
    """


class VaultArgumentError(VaultError, ValueError, TypeError):
    """An argument of the wrong type or out of range (a mode, codec, policy or sort key)."""


class VaultAccessError(VaultError, PermissionError):
    """The storage refuses this process.

    No permission to read or write the path, or a read-only file system under a writer.

    Attributes:
        errno: the cause's (``errno.EACCES``, ``errno.EPERM`` or ``errno.EROFS``), or None.
    """

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class VaultStorageError(VaultError, OSError):
    """The storage failed an operation.

    A full disk, a file where a directory must be, an I/O error. The message names the path.

    Attributes:
        errno: the cause's (``errno.ENOSPC`` ...), or None.
    """

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class VaultPinError(VaultNotFoundError):
    """A pinned commit (a number, id or tag given as ``at=``) that the vault cannot serve.

    It never existed, its record is gone, or the vault was rewritten since; the message names
    the pin. Never answered with different data.
    """


class VaultDependencyError(VaultError, ImportError):
    """An optional dependency is not installed (the message names the extra to install)."""
