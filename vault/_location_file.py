"""Vaults on a local file system: ``flock`` writer lock, hard-link reclaimer, rename staging.

The writer lock is an exclusive ``flock`` on the vault's ``lock/`` directory, held from
``Vault.create`` / ``Vault.open(mode="a")`` until ``close()``. The kernel drops a ``flock``
when its process dies however it dies, so a crashed writer never leaves a vault locked: no pid
guessing, no timeouts (this needs a local file system; ``flock`` over NFS is not reliable). Who
holds it is recorded in ``lock/zarr.json`` (an empty Zarr group's attributes) for the error
that a second writer gets.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
import shutil
import uuid
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from vault._errors import VaultExistsError, VaultLockedError
from vault._format import LOCK_DIR, MANIFEST_KEY, ZARR_JSON, group_json
from vault._location import Capabilities, Location, LockHolder, vault_kind
from vault._reclaim import Reclaimer
from vault._writer_id import holder_record, locked_message

_log = logging.getLogger(__name__)


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
        parsed = urlparse(text)
        if parsed.scheme == "file":
            text = parsed.netloc + parsed.path
        return cls(Path(text).expanduser().absolute())

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
        try:
            return (self.path / key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def prepare(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def is_empty(self) -> bool:
        return not self.path.exists() or not any(self.path.iterdir())

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
        total = 0
        for dirpath, _dirs, files in os.walk(self.path / prefix):
            for name in files:
                with contextlib.suppress(FileNotFoundError):
                    total += os.lstat(os.path.join(dirpath, name)).st_size
        return total

    @contextlib.contextmanager
    def staging(self) -> Iterator[Location]:
        """A hidden sibling (``.NAME.partial-XXXX``) renamed into place on success and removed
        on any failure, so the vault appears whole or not at all."""
        final = self.path
        if (final / MANIFEST_KEY).exists() or (final.exists() and any(final.iterdir())):
            raise VaultExistsError(f"{final} already exists; choose a new destination")
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.parent / f".{final.name}.partial-{uuid.uuid4().hex[:8]}"
        try:
            yield FileLocation(tmp)
            if final.exists() and any(final.iterdir()):
                raise VaultExistsError(f"{final} appeared while it was being built; left as is")
            os.replace(tmp, final)  # a directory onto an absent or empty one: atomic
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def find_vaults(self) -> list[tuple[Location, str | None]]:
        """Every vault under the directory (recursively, hidden folders skipped), sorted by
        path; vaults are not searched inside."""
        found: list[tuple[Location, str | None]] = []
        for dirpath, dirs, files in os.walk(self.path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            here = FileLocation(Path(dirpath))
            looks_like = {"commit", "experience"} <= set(dirs)
            kind = vault_kind(here.read, looks_like) if ZARR_JSON in files or looks_like else None
            if kind is not None:
                found.append((here, None if kind == "ok" else kind))
                dirs[:] = []
        return sorted(found, key=lambda item: str(item[0]))


class _FlockLock:
    """An exclusive ``flock`` on ``lock/``; released by :meth:`release`, by garbage
    collection, at interpreter exit, or by the kernel when the process dies."""

    def __init__(self, location: FileLocation) -> None:
        lock_dir = location.path / LOCK_DIR
        lock_dir.mkdir(exist_ok=True)
        meta = lock_dir / ZARR_JSON
        fd = os.open(lock_dir, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise VaultLockedError(locked_message(str(location), _read_holder(meta))) from None
        self._finalizer = weakref.finalize(self, _unlock, fd)
        tmp = lock_dir / f".zarr.json.{os.getpid()}.tmp"
        tmp.write_bytes(group_json({"writer": holder_record()}))
        os.replace(tmp, meta)

    def release(self) -> None:
        self._finalizer()


def _unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _read_holder(meta: Path) -> LockHolder | None:
    try:
        doc = json.loads(meta.read_text())
        return LockHolder.from_json(doc.get("attributes", {}).get("writer"))
    except (OSError, ValueError, AttributeError):
        return None


@functools.cache
def _shared_context() -> Any:
    """One context for every file vault of the process: TensorStore's I/O and decoding
    resources are started once (opening the first vault of a fresh context cost about 5 ms
    more, measured cold)."""
    import tensorstore as ts

    return ts.Context()
