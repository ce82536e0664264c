"""Vaults on a local file system: ``flock`` writer lock, hard-link reclaimer, rename staging.

The writer lock is an exclusive ``flock`` on the vault's ``lock/`` directory, held from
``Vault.create`` / ``Vault.open(mode="a")`` until ``close()``. The kernel drops a ``flock``
when its process dies however it dies, so a crashed writer never leaves a vault locked: no pid
guessing, no timeouts (this needs a local file system; ``flock`` over NFS is not reliable). Who
holds it is recorded in ``lock/zarr.json`` (an empty Zarr group's attributes) for the error
that a second writer gets. A lock that cannot be taken (a full disk, a read-only file system)
leaves no temp file behind and is not held.

Failures of the file system are typed errors naming the path (``Location.failures``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import logging
import os
import shutil
import stat
import time
import uuid
import weakref
from collections.abc import Iterator, Sequence
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

from vault._errors import (
    VaultCorruptError,
    VaultError,
    VaultExistsError,
    VaultLocationError,
    VaultLockedError,
    VaultStorageError,
)
from vault.format._limits import MAX_RECORD_BYTES
from vault.format._records import LOCK_DIR, MANIFEST_KEY, ZARR_JSON, group_json
from vault.storage._location import (
    Capabilities,
    Location,
    LockHolder,
    OsExclusiveLock,
    note_root,
    vault_kind,
)
from vault.storage._reclaim import Reclaimer
from vault.storage._writer_id import holder_record, locked_message

_log = logging.getLogger(__name__)
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class FileLocation(Location):
    """A directory on a local file system."""

    capabilities = Capabilities(
        exclusive_lock=True,
        hard_links=True,
        atomic_rename=True,
        listing=True,
        conditional_writes=False,
        persistent=True,
    )

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def from_url(cls, text: str) -> FileLocation:
        """From a path or a ``file://`` URL (``#`` and ``?`` included: they are a file name's
        characters), made absolute and normalised (TensorStore refuses ``../runs/v``). As
        TensorStore reads a URL (RFC 8089), ``file://localhost/tmp/v`` is ``/tmp/v`` and any
        other host (``file://runs/v`` too) is a :class:`VaultLocationError`."""
        return cls(_local_path(text))

    @property
    def spec(self) -> dict[str, Any]:
        return {"driver": "file", "path": f"{self.path.as_posix().rstrip('/')}/"}

    def __str__(self) -> str:
        return self.path.as_posix()

    def context(self) -> Any:
        return _shared_context()

    def child(self, name: str) -> FileLocation:
        return FileLocation(self.path / name.strip("/"))

    def read(self, key: str) -> bytes | None:
        """The file ``key`` under the root (None when absent), read only if it is a regular
        file inside the vault of at most ``MAX_RECORD_BYTES`` (:meth:`open_inside`): a
        symbolic link, a FIFO or a device there is never followed, waited on or read."""
        with self.failures("read the vault"):
            return self._read(key)

    def _read(self, key: str) -> bytes | None:
        opened = self.open_inside(key, MAX_RECORD_BYTES)
        if opened is None:
            return None
        fd, size = opened
        try:
            data = os.read(fd, size + 1)  # a byte more than it holds: its end seen in one call
            if len(data) == size:
                return data
            chunks = [data]  # it changed size since: read to its end
            while sum(map(len, chunks)) <= MAX_RECORD_BYTES and (data := os.read(fd, 1 << 20)):
                chunks.append(data)
            if sum(map(len, chunks)) > MAX_RECORD_BYTES:  # it grew while read
                raise self.corrupt(key, "it grew past the size a record can be")
            return b"".join(chunks)
        finally:
            os.close(fd)

    def read_tails(self, keys: list[str], size: int = 4) -> list[bytes | None]:
        out: list[bytes | None] = []
        with self.failures("read the vault"):
            for key in keys:
                opened = self.open_inside(key, None)
                if opened is None:
                    out.append(None)
                    continue
                fd = opened[0]
                try:  # system calls per chunk: open, fstat, seek from the end, read
                    try:
                        os.lseek(fd, -size, os.SEEK_END)
                    except OSError as err:  # shorter than ``size``: all of it
                        if err.errno != errno.EINVAL:
                            raise
                        os.lseek(fd, 0, os.SEEK_SET)
                    out.append(os.read(fd, size))
                finally:
                    os.close(fd)
        return out

    gates_files = True

    def check_files(
        self, keys: Sequence[str], max_bytes: int, blosc_bytes: int | None = None
    ) -> list[str]:
        """Refuse (:class:`VaultCorruptError` naming the file) any of ``keys`` that TensorStore
        must not read: a symbolic link, a FIFO, a device or a folder; a file reached through a
        linked folder; a file of more than ``max_bytes``; with ``blosc_bytes``, a blosc frame
        whose header declares another decoded size (TensorStore would allocate what it
        declares, up to 2 GiB, before finding the frame wrong). Returns the absent keys."""
        absent = []
        with self.failures("read the vault"):
            for key in keys:
                if blosc_bytes is None:  # one system call per chunk (and per new folder)
                    parent = key.rpartition("/")[0]
                    if parent and parent not in self._inside:
                        self._check_folders(parent)
                    try:
                        info = os.lstat(self._root + key)
                    except (FileNotFoundError, NotADirectoryError):
                        absent.append(key)
                        continue
                    if stat.S_ISLNK(info.st_mode):
                        raise self.not_a_chunk(key, "is a symbolic link")
                    if stat.S_ISDIR(info.st_mode):
                        absent.append(key)  # a folder holds no value
                    else:
                        self._check_info(key, info, max_bytes)
                    continue
                opened = self.open_inside(key, max_bytes)  # open, fstat, read the header, close
                if opened is None:
                    absent.append(key)
                    continue
                fd = opened[0]
                try:
                    head = os.pread(fd, 16, 0)
                finally:
                    os.close(fd)
                if len(head) < 16:
                    raise self.corrupt(key, f"{len(head)} bytes, too short for a blosc frame")
                declared = int.from_bytes(head[4:8], "little")
                if declared != blosc_bytes:
                    raise self.corrupt(
                        key,
                        f"its blosc frame declares {declared} bytes; the chunk holds {blosc_bytes}",
                    )
        return absent

    def _check_info(self, key: str, info: os.stat_result, max_bytes: int | None) -> None:
        """Refuse ``key`` (neither a folder nor a link) unless it is a regular file of at most
        ``max_bytes``."""
        if not stat.S_ISREG(info.st_mode):
            raise self.not_a_chunk(key, "is not a regular file (a FIFO or a device)")
        if max_bytes is not None and info.st_size > max_bytes:
            raise self.corrupt(
                key, f"{info.st_size} bytes, more than any encoding of it takes ({max_bytes})"
            )

    @functools.cached_property
    def _root(self) -> str:
        return f"{self.path.as_posix().rstrip('/')}/"

    def read_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of ``keys`` (None where absent), each read as :meth:`read` reads."""
        with self.failures("read the vault"):
            return [self._read(key) for key in keys]

    def open_inside(self, key: str, max_bytes: int | None) -> tuple[int, int] | None:
        """A read-only descriptor of the regular file ``key`` inside the vault, and its size
        (None when there is no such file, or a folder there): never through a symbolic link
        (its last part or a folder on the way, which could lead out of the vault), never
        blocking (a FIFO), never a device, and (``max_bytes``) never larger than that. Anything
        else is :class:`VaultCorruptError` naming the file: a vault's writer makes none."""
        parent = key.rpartition("/")[0]
        if parent and parent not in self._inside:
            self._check_folders(parent)
        try:
            fd = os.open(self._root + key, _READ_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as err:
            if err.errno == errno.ELOOP and _is_link(self._root + key):  # O_NOFOLLOW met it
                raise self.not_a_chunk(key, "is a symbolic link") from None
            raise  # (a loop in the vault's own path: the caller's typed error says so)
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):  # a folder holds no value (as for TensorStore)
                os.close(fd)
                return None
            self._check_info(key, info, max_bytes)
        except BaseException:
            os.close(fd)
            raise
        return fd, info.st_size

    def _check_folders(self, parent: str) -> None:
        """Every folder on the way from the root to ``parent`` is a real folder (not a
        symbolic link): noted once per location."""
        unchecked = []  # from ``parent`` up to the first folder already checked
        while parent and parent not in self._inside:
            unchecked.append(parent)
            parent = parent.rpartition("/")[0]
        for done in reversed(unchecked):  # from the top down
            try:
                info = os.lstat(self._root + done)
            except (FileNotFoundError, NotADirectoryError):
                return  # nothing there: the read finds nothing either
            if stat.S_ISLNK(info.st_mode):
                raise self.not_a_chunk(done, "is a symbolic link to a folder")
            if not stat.S_ISDIR(info.st_mode):
                return  # a file in the way: the read fails on it
            self._inside.add(done)

    @functools.cached_property
    def _inside(self) -> set[str]:
        return set()

    def not_a_chunk(self, key: str, what: str) -> VaultCorruptError:
        """A file that is not one (a link, a FIFO, a device), refused unread."""
        return VaultCorruptError(
            f"{self}: {key} {what}; a vault's writer never makes one, and it is not read (it "
            "could lead out of the vault or block the reader). Restore the vault from a copy; "
            "see docs/safety.md."
        )

    def corrupt(self, key: str, what: str) -> VaultCorruptError:
        """A file whose size or header cannot be the chunk's, refused before it is decoded."""
        return VaultCorruptError(
            f"{self}: {key} is corrupt ({what}). Its data cannot be trusted; restore the vault "
            "from a copy."
        )

    def child_names(self) -> list[str]:
        with self.failures("list the location"):
            try:
                entries = list(os.scandir(self.path))
            except (FileNotFoundError, NotADirectoryError):
                return []
        # callers read their zarr.json; a link to a folder is not followed (out of the root)
        return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))

    def kvstore(self) -> Any:
        """The root as an open ``KvStore``, once the root is known to be reachable: a path
        that cannot be (a symbolic-link loop, a folder this user may not enter) is a typed
        error here rather than a TensorStore one at the first read."""
        if "_kvstore" not in self.__dict__:
            # nothing there (yet) is fine: reads find nothing, a writer creates it
            missing = contextlib.suppress(FileNotFoundError, NotADirectoryError)
            with self.failures("read the vault"), missing:
                os.stat(self.path / ZARR_JSON)
        return super().kvstore()

    def contains(self, other: Location) -> bool:
        """Whether ``other`` is this directory or lies under it, symbolic links resolved."""
        if not isinstance(other, FileLocation):
            return False
        mine, theirs = os.path.realpath(self.path), os.path.realpath(other.path)
        return theirs == mine or theirs.startswith(mine.rstrip("/") + "/")

    def prepare(self) -> None:
        with self.failures("create the vault"):
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise self._in_the_way() from None

    def _in_the_way(self) -> Exception:
        """The error for a file where the vault's directory (or one of its parents) must be."""
        if self.path.is_symlink() or self.path.exists():
            return VaultExistsError(
                f"{self}: cannot create the vault: expected a directory, got a file at this "
                "path; choose another path (a vault is a directory)"
            )
        blocker = next(
            (p for p in self.path.parents if p.is_symlink() or (p.exists() and not p.is_dir())),
            self.path.parent,
        )
        return VaultStorageError(
            f"{self}: cannot create the vault: expected a directory, got a file at {blocker}; "
            "choose a path whose parent folders are directories",
            errno.ENOTDIR,
        )

    def top_names(self) -> set[str]:
        with self.failures("list the location"):
            try:
                return {entry.name for entry in os.scandir(self.path)}
            except FileNotFoundError:
                return set()

    def is_empty(self) -> bool:
        with self.failures("list the location"):
            try:
                return not any(self.path.iterdir())
            except FileNotFoundError:
                return True
            except NotADirectoryError:  # a file at the path holds something; above it, not
                return not os.path.lexists(self.path)

    # ------------------------------------------------------------------------- writer lock
    def writer_lock(self) -> _FlockLock:
        return _FlockLock(self)

    def lock_holder(self) -> LockHolder | None:
        """The holder, when a writer holds the lock: a non-blocking shared ``flock`` on a
        separate open file description fails while the writer's exclusive one is held (when it
        succeeds it is dropped at once)."""
        lock_dir = self.path / LOCK_DIR
        try:
            fd = os.open(lock_dir, os.O_RDONLY)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            held = True
        else:
            held = False
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        if not held:
            return None
        return _read_holder(lock_dir / ZARR_JSON) or LockHolder(None, None, None)

    def reclaimer(self) -> Reclaimer:
        return Reclaimer(self.path)

    def recover(self) -> int:
        """Delete ``*.__lock`` files: temp files of a writer that died mid-write.

        TensorStore's file kvstore writes ``<key>.__lock`` and renames it over ``<key>``; a
        later write of the same key reuses a leftover ``<key>.__lock`` *without truncating it*,
        so a shorter new value would keep the stale tail and be renamed into place corrupt
        (measured: the commit record of 4 in 200 crash trials). Holding the writer lock means
        no live writer owns these files, so they are safe to delete.
        """
        removed = 0
        with self.failures("clean up after a writer that died"):
            for dirpath, _dirs, files in os.walk(self.path):
                for name in files:
                    if name.endswith(".__lock"):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(os.path.join(dirpath, name))
                            removed += 1
        if removed:
            _log.warning("%s: removed %d temp files left by a writer that died", self, removed)
        return removed

    # ------------------------------------------------------------------------- the rest
    def disk_usage(self, prefix: str = "") -> int:
        """Sum of the sizes of every file under ``prefix`` (links are not followed)."""
        return _disk_usage(self.path / prefix)

    @contextlib.contextmanager
    def staging(self) -> Iterator[Location]:
        """A hidden sibling (``.NAME.partial-XXXX``) renamed into place on success and removed
        on any failure, so the vault appears whole or not at all."""
        final = self.path
        if self.read(MANIFEST_KEY) is not None or not self.is_empty():
            raise VaultExistsError(f"{final} already exists; choose a new destination")
        with self.failures("create the vault"):
            try:
                final.parent.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise self._in_the_way() from None
        sweep_partials(final)  # what builds killed here before left
        tmp = final.parent / f".{final.name}.partial-{uuid.uuid4().hex[:8]}"
        done, held = False, held_folder(tmp)  # held while it is built: not swept
        try:
            yield FileLocation(tmp)
            if not self.is_empty():
                raise VaultExistsError(f"{final} appeared while it was being built; left as is")
            with self.failures("create the vault"):
                os.replace(tmp, final)  # a directory onto an absent or empty one: atomic
            done = True
        finally:
            _remove_staged(tmp, settle=not done)
            if held is not None:
                os.close(held)

    def clear(self) -> None:
        # the folder stays (it may have existed, empty, before); writes still in flight when
        # the create failed may bring a sub-folder back: removed again after each pause
        for pause in (0.0, *STAGING_SWEEPS):
            time.sleep(pause)
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                for child in list(self.path.iterdir()):
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child, ignore_errors=True)
                    else:
                        child.unlink(missing_ok=True)

    def find_roots(self) -> list[tuple[Location, str, str | None]]:
        """Every vault and dataset root under the directory (recursively, hidden folders
        skipped), sorted by path; vaults are not searched inside, dataset roots are."""
        found: list[tuple[Location, str, str | None]] = []
        datasets: list[str] = []
        with self.failures("search for vaults"):
            walk_error = functools.partial(_walk_error, self)
            for dirpath, dirs, files in os.walk(self.path, onerror=walk_error):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                here = FileLocation(Path(dirpath))
                looks_like = {"commit", "experience"} <= set(dirs)
                if ZARR_JSON not in files and not looks_like:
                    continue
                try:
                    kind = vault_kind(here.read, looks_like)
                except VaultError as err:  # a vault (or not) that cannot be read: say why
                    kind = str(err)
                if not note_root(found, datasets, here, dirpath, kind):
                    dirs[:] = []
        return sorted(found, key=lambda item: str(item[0]))

    def drop_stale_temp(self, key: str) -> None:
        """Remove ``key``'s temporary file if its writer is gone (:func:`_drop_stale_temp`)."""
        _drop_stale_temp(self.path / f"{key}.__lock")


def _walk_error(root: FileLocation, err: OSError) -> None:
    """The search's root must be readable (a missing one, or a file, holds no vaults); a
    folder under it that cannot be read is skipped with a warning."""
    if isinstance(err, (FileNotFoundError, NotADirectoryError)):
        return
    if err.filename is not None and Path(os.fsdecode(err.filename)) == root.path:
        raise err
    _log.warning("%s: skipped %s: %s", root, err.filename, err.strerror)


def _drop_stale_temp(temp: Path) -> None:
    """Remove TensorStore's temporary file of a key (``<key>.__lock``) whose writer was
    killed: a later write of the key reuses it without truncating it, so a shorter value would
    keep the old tail (a tag written again after a killed tagger: malformed for good). A
    writer at work holds a POSIX lock on it (checked without waiting): then it stays. Within
    this process, only a concurrent write of the same key could hold it."""
    try:
        fd = os.open(temp, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return  # none (or not a file we may touch)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        temp.unlink(missing_ok=True)
    except OSError:
        pass  # its writer is at work
    finally:
        os.close(fd)


STAGING_SWEEPS = (0.02, 0.1, 0.3)
"""Pauses (seconds) after which a failed build's staged folder is removed again."""


def _local_path(text: str) -> Path:
    """The absolute path a path or a ``file://`` URL names; see ``FileLocation.from_url``.
    A backslash is refused: TensorStore's file driver takes it for a separator, so a vault
    there would be written to (and read from) another folder than Python's file calls use."""
    path = Path(os.path.abspath(Path(_url_path(text)).expanduser()))
    if "\\" in str(path):
        raise VaultLocationError(
            f"{path}: the path holds a backslash, which TensorStore's file driver reads as a "
            "folder separator (it would read and write another folder than this one): rename "
            "the folder without it, or use another place"
        )
    return path


def _url_path(text: str) -> str:
    """The path of a ``file://`` URL (a plain path as it is)."""
    if text[:5].lower() != "file:":
        return text
    rest = text[5:]
    if not rest.startswith("//"):
        raise VaultLocationError(
            f"{text!r} is not a file URL (file:///ABSOLUTE/PATH); for a relative path pass the "
            f"plain path (./{text})"
        )
    host, slash, path = rest[2:].partition("/")
    if host.lower() not in ("", "localhost"):
        raise VaultLocationError(
            f"{text!r} names the host {host!r}: a file URL names a file on this machine "
            "(file:///ABSOLUTE/PATH or file://localhost/ABSOLUTE/PATH); for a relative path pass "
            f"the plain path ({host}/{path}), for another machine's store an s3:// URL"
        )
    return slash + path


def _disk_usage(root: Path) -> int:
    """Sum of the sizes of every file under ``root`` (links are not followed)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def held_folder(folder: Path) -> int | None:
    """Make ``folder`` and hold an exclusive ``flock`` on it (the descriptor returned: close
    it to let go), so that :func:`sweep_partials` leaves it to its builder. None where it
    cannot be made (a read-only file system): the build then fails as it writes, naming why."""
    try:
        folder.mkdir()
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def sweep_partials(final: Path) -> None:
    """Remove the staged folders (``.NAME.partial-*``) of builds of ``final`` whose builder
    is gone (a killed derive or import): no process holds their ``flock``."""
    for stale in final.parent.glob(f".{glob_escape(final.name)}.partial-*"):
        try:
            fd = os.open(stale, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a build at work
        else:
            shutil.rmtree(stale, ignore_errors=True)
        finally:
            os.close(fd)


def _remove_staged(tmp: Path, settle: bool) -> None:
    """Remove a staged folder. After a failure (``settle``) it is removed again after each
    of ``STAGING_SWEEPS``: a write that failed or was interrupted may leave TensorStore writes
    of the same append still in flight, and the file kvstore makes a key's folders as it
    writes, so one of them landing after the first removal would bring the folder back
    (measured on a full disk: 1 run in 6)."""
    shutil.rmtree(tmp, ignore_errors=True)
    if not settle:
        return
    for pause in STAGING_SWEEPS:
        time.sleep(pause)
        if os.path.lexists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


class _FlockLock(OsExclusiveLock):
    """An exclusive ``flock`` on ``lock/``; released by :meth:`release`, by garbage
    collection, at interpreter exit, or by the kernel when the process dies."""

    def __init__(self, location: FileLocation) -> None:
        self.location = location
        lock_dir = location.path / LOCK_DIR
        meta = lock_dir / ZARR_JSON
        with location.failures("take the writer lock"):
            created = _mkdir(lock_dir)
            fd = os.open(lock_dir, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise VaultLockedError(locked_message(str(location), _read_holder(meta))) from None
            except BaseException:
                os.close(fd)
                raise
        _HELD.add(fd)
        self._finalizer = weakref.finalize(self, _unlock, fd, os.getpid())
        try:
            with location.failures("take the writer lock"):
                _write_holder(meta)
        except BaseException:
            self._finalizer()  # not held: a retry (once the cause is fixed) takes it
            if created:  # as it was; only while empty (a holder's record is never deleted)
                with contextlib.suppress(OSError):
                    lock_dir.rmdir()
            raise

    def release(self) -> None:
        self._finalizer()


def _mkdir(path: Path) -> bool:
    """Make the directory ``path``; whether it was made (False: it was there)."""
    try:
        path.mkdir()
    except FileExistsError:
        return False
    return True


def _write_holder(meta: Path) -> None:
    """Record this writer in ``meta`` atomically; on failure no temp file is left."""
    tmp = meta.with_name(f".{meta.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(group_json({"writer": holder_record()}))
        os.replace(tmp, meta)
    except BaseException as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(err, OSError):  # name the record (a failed write() names nothing)
            err.filename = os.fspath(meta)
        raise


_HELD: set[int] = set()
"""The descriptors of the writer locks this process holds."""


def _unlock(fd: int, pid: int) -> None:
    """Release the lock on ``fd`` taken by process ``pid`` (in another, a forked child, the
    descriptor was closed at the fork and the lock stays its owner's)."""
    if os.getpid() != pid or fd not in _HELD:
        return
    _HELD.discard(fd)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _close_inherited() -> None:
    """In a child made by ``fork`` (a multiprocessing worker, say): close the descriptors of
    the parent's writer locks without unlocking them. A ``flock`` belongs to the open file
    description that parent and child share: unlocking here would free the parent's lock,
    and a descriptor kept open would hold it after the parent died."""
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_close_inherited)


def _read_holder(meta: Path) -> LockHolder | None:
    try:
        doc = json.loads(meta.read_text())
        return LockHolder.from_json(doc.get("attributes", {}).get("writer"))
    except (OSError, ValueError, AttributeError):
        return None


def _is_link(path: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


@functools.cache
def _shared_context() -> Any:
    """One context for every file vault of the process: TensorStore's I/O and decoding
    resources are started once (opening the first vault of a fresh context cost about 5 ms
    more, measured cold)."""
    import tensorstore as ts

    return ts.Context()
