"""One writer per vault: an exclusive ``flock`` on the vault's ``lock/`` directory.

The lock is held from ``Vault.create`` / ``Vault.open(mode="a")`` until ``close()`` (or the
end of a ``with`` block, or garbage collection). The kernel drops a ``flock`` when its process
dies however it dies, so a crashed writer never leaves a vault locked: no pid guessing, no
timeouts (this needs a local file system; ``flock`` over NFS is not reliable). Who holds the
lock is recorded in ``lock/zarr.json`` (an empty Zarr group's attributes) for the error that a
second writer gets. ``memory://`` vaults are locked within the process.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import logging
import os
import socket
import threading
import weakref
from pathlib import Path
from typing import Any

from vault._errors import VaultLockedError

LOCK_DIR = "lock"
_log = logging.getLogger(__name__)
_MEMORY_HOLDERS: dict[str, dict[str, Any]] = {}
_MEMORY_GUARD = threading.Lock()


def _holder() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "thread": threading.current_thread().name,
        "since": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def _describe(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "another writer"
    return f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('since')}"


class WriterLock:
    """An acquired writer lock; ``release()`` is idempotent."""

    def __init__(self, root: dict[str, Any], display: str) -> None:
        self._display = display
        self._fd: int | None = None
        self._memory_key: str | None = None
        if root["driver"] == "memory":
            self._acquire_memory(root["path"])
        else:
            self._acquire_file(Path(root["path"]) / LOCK_DIR)
        # Released by release(), by garbage collection, or at interpreter exit (before module
        # teardown), whichever comes first; the kernel releases it if the process dies.
        self._finalizer = weakref.finalize(self, _release, self._fd, self._memory_key)

    def _acquire_memory(self, key: str) -> None:
        with _MEMORY_GUARD:
            if key in _MEMORY_HOLDERS:
                raise VaultLockedError(self._message(_MEMORY_HOLDERS[key]))
            _MEMORY_HOLDERS[key] = _holder()
        self._memory_key = key

    def _acquire_file(self, lock_dir: Path) -> None:
        lock_dir.mkdir(exist_ok=True)
        meta = lock_dir / "zarr.json"
        fd = os.open(lock_dir, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise VaultLockedError(self._message(_read_holder(meta))) from None
        self._fd = fd
        _remove_stale_temp_files(lock_dir.parent)
        doc = {"zarr_format": 3, "node_type": "group", "attributes": {"writer": _holder()}}
        tmp = lock_dir / f".zarr.json.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, meta)

    def _message(self, holder: dict[str, Any] | None) -> str:
        return (
            f"{self._display} is being written by {_describe(holder)}; only one writer at a "
            "time. Open it with mode='r' to read while it is written, or close the other "
            "writer (a writer that died releases the lock with its process)."
        )

    def release(self) -> None:
        self._finalizer()

    @property
    def held(self) -> bool:
        return self._finalizer.alive


def _remove_stale_temp_files(root: Path) -> int:
    """Delete ``*.__lock`` files: temp files of a writer that died mid-write.

    TensorStore's file kvstore writes ``<key>.__lock`` and renames it over ``<key>``; a later
    write of the same key reuses a leftover ``<key>.__lock`` *without truncating it*, so a
    shorter new value would keep the stale tail and be renamed into place corrupt (measured:
    the commit record of 4 in 200 crash trials). Holding the writer lock means no live writer
    owns these files, so they are safe to delete.
    """
    removed = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(".__lock"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(dirpath, name))
                    removed += 1
    if removed:
        _log.warning("%s: removed %d temp files left by a writer that died", root, removed)
    return removed


def _release(fd: int | None, memory_key: str | None) -> None:
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    if memory_key is not None:
        with _MEMORY_GUARD:
            _MEMORY_HOLDERS.pop(memory_key, None)


def _read_holder(meta: Path) -> dict[str, Any] | None:
    try:
        return json.loads(meta.read_text()).get("attributes", {}).get("writer")
    except (OSError, ValueError):
        return None
