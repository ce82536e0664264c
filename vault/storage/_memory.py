"""``memory://`` vaults: in-process TensorStore memory kvstores, for tests and scratch data.

Every handle of one ``memory://`` location shares one TensorStore context (a memory store
lives inside a context), and the writer lock is a per-process table.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from vault._errors import VaultLocationError, VaultLockedError
from vault.storage._location import Capabilities, Location, LockHolder, OsExclusiveLock
from vault.storage._writer_id import holder_record, locked_message

_HOLDERS: dict[str, dict[str, Any]] = {}
_GUARD = threading.Lock()
_CONTEXTS: dict[str, Any] = {}


class MemoryLocation(Location):
    """A prefix of a process-wide memory store named by its path."""

    capabilities = Capabilities(
        exclusive_lock=True,
        hard_links=False,
        atomic_rename=False,
        listing=True,
        conditional_writes=False,
        persistent=False,
    )

    def __init__(self, path: str) -> None:
        path = path.strip("/")
        self.path = f"{path}/" if path else ""

    @classmethod
    def from_url(cls, text: str) -> MemoryLocation:
        """From ``memory://NAME``: everything after ``://`` (``#`` and ``?`` included)."""
        if text[:9].lower() != "memory://":
            raise VaultLocationError(f"{text!r} is not a memory URL: write memory://NAME")
        return cls(text[9:])

    @property
    def spec(self) -> dict[str, Any]:
        return {"driver": "memory", "path": self.path}

    def __str__(self) -> str:
        return f"memory://{self.path}"

    def context(self) -> Any:
        """One context per top-level name, so every handle sees the same store."""
        import tensorstore as ts

        key = self.path
        with _GUARD:
            if key not in _CONTEXTS:
                _CONTEXTS[key] = ts.Context()
            return _CONTEXTS[key]

    def child(self, name: str) -> MemoryLocation:
        return MemoryLocation(f"{self.path}{name.strip('/')}")

    def contains(self, other: Location) -> bool:
        """Only itself: each memory location is a store of its own (see :meth:`context`;
        ``memory://a/b`` does not share ``memory://a``'s store), so nothing lies inside it."""
        return other == self

    def writer_lock(self) -> _MemoryLock:
        return _MemoryLock(self)

    def lock_holder(self) -> LockHolder | None:
        with _GUARD:
            holder = _HOLDERS.get(self.path)
        return None if holder is None else LockHolder.from_json(holder)

    def find_roots(self) -> list[tuple[Location, str, str | None]]:
        # Each memory location has its own context (store): children share the parent's name
        # as a prefix but not its store, so only this location itself can be a vault here.
        from vault.storage._location import vault_kind

        kind = vault_kind(self.read, looks_like=False)
        if kind is None:
            return []
        return [
            (self, "dataset", None)
            if kind == "dataset"
            else (self, "vault", None if kind == "ok" else kind)
        ]


class _MemoryLock(OsExclusiveLock):
    def __init__(self, location: MemoryLocation) -> None:
        self.location = location
        key = location.path
        with _GUARD:
            if key in _HOLDERS:
                holder = LockHolder.from_json(_HOLDERS[key])
                raise VaultLockedError(locked_message(str(location), holder))
            _HOLDERS[key] = holder_record()
        self._finalizer = weakref.finalize(self, _unlock, key)

    def release(self) -> None:
        self._finalizer()


def _unlock(key: str) -> None:
    with _GUARD:
        _HOLDERS.pop(key, None)
