"""Storage failures as typed errors: an ``OSError`` or a TensorStore error that carries an OS
error code or a status becomes the :class:`~vault.VaultError` a caller catches (no space,
no permission, no such place), naming the place and saying what to do."""

from __future__ import annotations

import errno
import os
import re

from vault._errors import VaultAccessError, VaultError, VaultNotFoundError, VaultStorageError

_TS_OS_CODE = re.compile(r"\[os_error_code='(\d+)'\]")
_TS_STATUS = re.compile(r"([A-Z_]+): ")
_TS_PATH = re.compile(r'"(/[^"]+)"')
_STATUS_ERRNO = {"PERMISSION_DENIED": errno.EACCES, "RESOURCE_EXHAUSTED": errno.ENOSPC}
_ACCESS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
_NOWHERE = frozenset({errno.ENOENT, errno.ELOOP, errno.ENAMETOOLONG})
_REMEDY = {
    errno.ENOSPC: "free space there and try again",
    errno.EDQUOT: "free space (or raise the quota) there and try again",
    errno.EROFS: "the file system is mounted read-only: write somewhere writable (a vault on "
    "it can still be opened with mode='r')",
    errno.EACCES: "give this user permission there, or use another place",
    errno.EPERM: "give this user permission there, or use another place",
    errno.ELOOP: "fix or remove the symbolic link",
    errno.ENOTDIR: "a file is in the way where a directory must be: choose another path",
}


def failed_os_call(err: BaseException) -> tuple[int, str | None] | None:
    """``(errno, path)`` of a storage failure: an ``OSError`` with an errno, or a TensorStore
    error carrying an OS error code (or a ``PERMISSION_DENIED`` / ``RESOURCE_EXHAUSTED``
    status); None for anything else, a :class:`VaultError` among them (already typed)."""
    if isinstance(err, VaultError):
        return None
    if isinstance(err, OSError):
        if err.errno is None:
            return None
        return err.errno, None if err.filename is None else os.fsdecode(err.filename)
    if not isinstance(err, ValueError):
        return None
    text = str(err)
    found = _TS_OS_CODE.search(text)
    status = _TS_STATUS.match(text)
    code = int(found.group(1)) if found else None
    if code is None and status is not None:
        code = _STATUS_ERRNO.get(status.group(1))
    if code is None:
        return None
    paths = _TS_PATH.findall(text.split(" [", 1)[0])  # before the "[tensorstore_spec=...]"
    path = paths[-1].removesuffix(".__lock") if paths else None
    return code, path


def storage_error(
    err: BaseException, where: str | None, doing: str | None, remedy: str | None = None
) -> VaultError | None:
    """A storage failure (an OS error, or TensorStore's report of one) as a typed error.

    The message names the location, what it was doing, the cause, the path that failed and
    the remedy.

    Args:
        err: the exception caught.
        where: the location, to name first.
        doing: what was being done (``"write the tag"``).
        remedy: what to do (default: the remedy of the cause, e.g. free space for ENOSPC).

    Returns:
        :class:`VaultAccessError` (no permission, a read-only file system),
        :class:`VaultNotFoundError` (a path that leads nowhere) or
        :class:`VaultStorageError` (a full disk, an I/O error), with ``errno`` set; None
        when ``err`` is not a storage failure.
    """
    found = failed_os_call(err)
    if found is None:
        return None
    code, path = found
    lead = f"{where}: " if where else ""
    lead += f"cannot {doing}: " if doing else ""
    place = f" at {path}" if path and path.rstrip("/") != (where or "").rstrip("/") else ""
    return os_failure(code, f"{lead}{reason_of(code)}{place}; {remedy or remedy_of(code)}")


def os_failure(code: int, message: str) -> VaultError:
    """The typed error of OS error ``code``, keeping it as ``errno``: no permission or a
    read-only file system is :class:`VaultAccessError`; a path that leads nowhere (missing, a
    symbolic-link loop) :class:`VaultNotFoundError`; anything else (a full disk, a file where a
    directory must be, an I/O error) :class:`VaultStorageError`."""
    if code in _ACCESS:
        return VaultAccessError(message, code)
    if code in _NOWHERE:
        nowhere = VaultNotFoundError(message)
        nowhere.errno = code
        return nowhere
    return VaultStorageError(message, code)


def reason_of(code: int) -> str:
    """What OS error ``code`` means, in words (``"no space left on device"``)."""
    text = os.strerror(code)
    text = text[:1].lower() + text[1:]
    return f"{text} (a symbolic link loop)" if code == errno.ELOOP else text


def remedy_of(code: int) -> str:
    """What to do about OS error ``code``."""
    return _REMEDY.get(code, "check the storage")
