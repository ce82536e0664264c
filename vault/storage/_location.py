"""Where a vault lives: one parser for paths, URLs and kvstore specs, and the location type.

``vault/storage/_kinds.py`` turns a plain path, a ``file://`` or ``memory://`` URL, or a raw
TensorStore kvstore spec (a dict) into a :class:`Location`. A location knows its kvstore spec,
how to show itself, its TensorStore context, and what it can do (:class:`Capabilities`); it
provides the writer lock, the reclaimer of replaced files (or none), staging of derived vaults,
recovery after a crash, disk usage and discovery of vaults under it. Code asks a location what
it can do; it never branches on a driver name. A new storage kind is one new module with a
:class:`Location` subclass, registered in ``vault/storage/_kinds.py``.

Failures of the storage itself (a full disk, no permission, a read-only file system, a
symbolic-link loop) leave a location as typed errors naming the path (:func:`storage_error`):
``VaultAccessError`` (a ``PermissionError``), ``VaultNotFoundError`` (a path that leads nowhere)
or ``VaultStorageError`` (an ``OSError``), each with the cause's ``errno``.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from vault._errors import (
    VaultError,
    VaultExistsError,
    VaultLocationError,
    VaultLockedError,
)
from vault.format._records import (
    COMMIT_KEY,
    DATASET_ATTR,
    MANIFEST_ATTR,
    MANIFEST_KEY,
    SHARDS,
    ZARR_JSON,
)
from vault.storage._failures import storage_error

ABSENT = b"\x02"  # TensorStore's generation of a key that has no value: create if absent

if TYPE_CHECKING:
    import tensorstore as ts

    from vault.storage._reclaim import Reclaimer


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a location can do; code asks these rather than the kind of location.

    Attributes:
        exclusive_lock: a writer lock that excludes other writers (and is released when the
            holder dies).
        hard_links: old file versions can be held and freed off the write path.
        atomic_rename: a directory can be renamed into place (staging of derived vaults).
        listing: keys can be listed (discovery, verify's missing-chunk check).
        conditional_writes: compare-and-swap writes.
        persistent: data outlives the process.
        lease: the writer lock is a lease that can outlive a dead holder until it expires
            (``break_lock`` / ``vault unlock`` frees it at once); False where the lock ends
            with its holder's process and there is never one to break.
    """

    exclusive_lock: bool
    hard_links: bool
    atomic_rename: bool
    listing: bool
    conditional_writes: bool
    persistent: bool
    lease: bool = False


@dataclasses.dataclass(frozen=True)
class LockHolder:
    """Who holds a writer lock, as recorded by the holder.

    Attributes:
        pid: the holder's process id.
        host: the holder's host name.
        since: when it took the lock (ISO 8601).
        thread: the holder's thread, where recorded.
    """

    pid: int | None
    host: str | None
    since: str | None
    thread: str | None = None

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host} since {self.since}"

    @classmethod
    def from_json(cls, doc: Any) -> LockHolder | None:
        """Returns the holder a lock record names, or None for a record that is not an object.

        Args:
            doc: the lock record's JSON.
        """
        if not isinstance(doc, dict):
            return None
        return cls(doc.get("pid"), doc.get("host"), doc.get("since"), doc.get("thread"))


class WriterLock(Protocol):
    """An acquired writer lock; ``release()`` is idempotent.

    ``replace(key, value)`` replaces a record (the commit record) as the lock's holder. Where
    exclusion cannot rest on the operating system (a lease on an object store: ``fences``
    true), it is conditional on what this holder last wrote or read, and raises
    ``VaultLockedError`` once the lock was lost; ``fence(key, rewrite)`` rewrites the record
    on the version just read, so that every earlier holder's ``replace`` fails from then on;
    ``check()`` raises ``VaultLockedError`` if the lock was lost (before an append writes).
    """

    fences: bool

    def release(self) -> None: ...
    def check(self) -> None: ...
    def replace(self, key: str, value: bytes) -> None: ...
    def fence(self, key: str, rewrite: Callable[[bytes | None], bytes]) -> bytes | None: ...


class OsExclusiveLock:
    """Shared part of locks whose exclusion the operating system or the process enforces
    (``flock``, an in-process table): a replacement is a plain write, there is nothing to
    fence."""

    fences = False
    location: Location

    def check(self) -> None:
        """Held until released: nothing to check."""

    def replace(self, key: str, value: bytes) -> None:
        self.location.kvstore().write(key, value).result()

    def fence(self, key: str, rewrite: Callable[[bytes | None], bytes]) -> bytes | None:
        return None


class Location(abc.ABC):
    """A vault root: a directory-like prefix of a kvstore (a folder, a memory store, S3).

    Made by :func:`~vault.parse_location`. One subclass per storage kind; the read and write
    paths ask its :attr:`capabilities`, never its kind.

    Attributes:
        capabilities: what this kind of location can do.
        remote: each request is a network round trip (independent ones go out together).
        gates_files: :meth:`check_files` has something to refuse (a file system: symbolic
            links, FIFOs, devices); false for stores of plain objects (memory, S3).
    """

    capabilities: Capabilities
    remote = False

    @property
    @abc.abstractmethod
    def spec(self) -> dict[str, Any]:
        """The kvstore spec of the root (``path`` ends with ``/`` unless empty)."""

    @abc.abstractmethod
    def __str__(self) -> str:
        """How the location is shown to people (a path or URL, never credentials)."""

    @abc.abstractmethod
    def context(self) -> ts.Context:
        """Returns the TensorStore context every handle of this location shares."""

    @abc.abstractmethod
    def child(self, name: str) -> Location:
        """Returns the location of a relative key under this one.

        Args:
            name: the relative key (``shards/a``).
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Location) and type(other) is type(self) and other.spec == self.spec

    def __hash__(self) -> int:
        return hash((type(self).__name__, str(self)))

    def child_spec(self, name: str) -> dict[str, Any]:
        """Returns the kvstore spec of a relative key under the root.

        Args:
            name: the relative key (no leading slash).
        """
        spec = dict(self.spec)
        spec["path"] = f"{spec.get('path', '')}{name.strip('/')}/"
        return spec

    def kvstore(self) -> Any:
        """Returns the root as an open TensorStore ``KvStore`` (opened once)."""
        kv = self.__dict__.get("_kvstore")
        if kv is None:
            import tensorstore as ts

            kv = ts.KvStore.open(self.spec, context=self.context()).result()
            self.__dict__["_kvstore"] = kv
        return kv

    def read(self, key: str) -> bytes | None:
        """Returns the value of a key under the root, or None when it is absent.

        Args:
            key: the key (``zarr.json``).

        Raises:
            VaultStorageError: the storage failed (or another typed storage error).
        """
        with self.failures("read the vault"):
            value = self.kvstore().read(key).result()
        return bytes(value.value) if value.state == "value" else None

    def read_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Returns the values of keys under the root (None where absent), read concurrently.

        Args:
            keys: the keys.
        """
        if not keys:
            return []
        kv = self.kvstore()
        with self.failures("read the vault"):
            futures = [kv.read(key) for key in keys]
            values = [f.result() for f in futures]
        return [bytes(v.value) if v.state == "value" else None for v in values]

    def child_names(self) -> list[str]:
        """Returns the names of the folders under the root that hold a ``zarr.json``, sorted.

        A kind that lists one level cheaply may name every folder: callers read the
        ``zarr.json``. This default lists every key.
        """
        with self.failures("list the location"):
            keys = self.kvstore().list().result()
        names = set()
        for raw in keys:
            name, _, rest = bytes(raw).decode().partition("/")
            if rest == ZARR_JSON:
                names.add(name)
        return sorted(names)

    def read_tails(self, keys: list[str], size: int = 4) -> list[bytes | None]:
        """Returns the last bytes of each key's value (None where absent): a chunk's crc32c.

        This default reads whole values (concurrently); a kind that can read a byte range
        cheaply (a local file, an object store's ranged GET) overrides it.

        Args:
            keys: the keys.
            size: bytes from the end.
        """
        kv = self.kvstore()
        with self.failures("read the vault"):
            futures = [kv.read(key) for key in keys]
            values = [f.result() for f in futures]
        return [bytes(v.value)[-size:] if v.state == "value" else None for v in values]

    gates_files = False

    def check_files(
        self, keys: Sequence[str], max_bytes: int, blosc_bytes: int | None = None
    ) -> list[str]:
        """Refuse, before TensorStore reads them, keys that are not plain values.

        Where a store has symbolic links, FIFOs and devices (a file system), reading one
        could leave the vault, block, or fill memory. A store of plain objects (memory, S3:
        ``gates_files`` false) has nothing to refuse (what it returns is what is stored)
        and lists nothing.

        Args:
            keys: the keys to check, relative to this location.
            max_bytes: the largest value accepted.
            blosc_bytes: when given, each value must be a blosc frame that declares this
                decoded size.

        Returns:
            The keys that are absent.

        Raises:
            VaultCorruptError: naming the first key refused.
        """
        return []

    def contains(self, other: Location) -> bool:
        """Returns whether another location is this one or lies inside it.

        Args:
            other: the other location (the same store and a path under this one's is inside).
        """
        mine, theirs = dict(self.spec), dict(other.spec)
        path, other_path = str(mine.pop("path", "")), str(theirs.pop("path", ""))
        return type(other) is type(self) and mine == theirs and other_path.startswith(path)

    @contextlib.contextmanager
    def failures(self, doing: str, remedy: str | None = None) -> Iterator[None]:
        """A context in which storage failures become typed errors naming this location.

        An ``OSError``, or a TensorStore error the OS caused, is raised as
        :func:`~vault.storage_error` types it; every other error passes unchanged.

        Args:
            doing: what is being done, for the message (``"read the vault"``).
            remedy: what to do (default: the remedy of the cause).

        Yields:
            Nothing: the block runs inside.
        """
        try:
            yield
        except (OSError, ValueError) as err:
            typed = self.typed_failure(err, doing, remedy)
            if typed is None:
                raise
            raise typed from err

    def typed_failure(
        self, err: BaseException, doing: str | None, remedy: str | None = None
    ) -> VaultError | None:
        """Returns ``err`` as a typed error naming this location if the storage caused it.

        See :func:`~vault.storage_error`; None when the storage did not cause ``err``.

        Args:
            err: the exception caught.
            doing: what was being done.
            remedy: what to do.
        """
        return storage_error(err, str(self), doing, remedy)

    def prepare(self) -> None:  # noqa: B027 (optional hook: most stores need nothing)
        """Make the root exist before a vault is created there."""

    def writer_lock(self) -> WriterLock:
        """Take the writer lock.

        Returns:
            The lock held (release it with ``release()``).

        Raises:
            VaultLockedError: another writer holds it.
            VaultLocationError: this kind of location offers no writer lock.
        """
        raise VaultLocationError(
            f"{self}: this kind of location offers no writer lock, so it can only be read"
        )

    def lock_holder(self) -> LockHolder | None:
        """Returns who holds the writer lock now (None: nobody, or the location cannot tell)."""
        return None

    def break_lock(self) -> bool:
        """Remove the writer lock whoever holds it, where a lock can outlive its holder (a lease).

        Returns:
            Whether there was one.

        Raises:
            VaultLocationError: a lock that ends with its holder's process (nothing to break).
        """
        raise VaultLocationError(
            f"{self}: its writer lock is released when the writer's process ends, so there is "
            "no lock to break; if a writer is still running, stop it"
        )

    def reclaimer(self) -> Reclaimer | None:
        """Returns what frees replaced files off the write path, where the location can."""
        return None

    def drop_stale_temp(self, key: str) -> None:  # noqa: B027 (optional hook)
        """Remove a temporary file of ``key`` left by a writer of it that died.

        Only where the store keeps such files; called before a key is written without the
        writer lock (a tag).

        Args:
            key: the key about to be written.
        """

    def recover(self) -> int:
        """Clean up after a writer that died (called with the writer lock held).

        Returns:
            How many leftovers were removed.
        """
        return 0

    def disk_usage(self, prefix: str = "") -> int | None:
        """Returns the bytes stored under a prefix (None when the location cannot tell cheaply).

        Args:
            prefix: a relative key prefix (default: the whole root).
        """
        return None

    @contextlib.contextmanager
    def staging(self) -> Iterator[Location]:
        """Where to build a new vault that must appear whole or not at all.

        This default (locations that cannot rename a folder atomically) builds in place: the
        builder writes the manifest (the root ``zarr.json``) last, so an interrupted build is
        never opened or listed as a vault. What a failed build wrote is removed; one that
        was killed leaves data without a manifest (:meth:`abandoned_build`), which the next
        build there removes first.

        Yields:
            The location to build in.

        Raises:
            VaultExistsError: something other than an abandoned build is there.
        """
        if self.read(MANIFEST_KEY) is not None:
            raise VaultExistsError(f"{self} already exists; choose a new destination")
        if not self.is_empty():
            if not self.abandoned_build():
                _refuse_occupied(self)
            self.clear()
        done = False
        try:
            yield self
            done = True
        finally:
            if not done:
                with contextlib.suppress(Exception):
                    self.clear()

    def abandoned_build(self) -> bool:
        """Returns whether this holds what an interrupted build of a vault or a dataset left.

        A vault's: a commit record without a manifest, and no writer at work. A dataset's:
        shards without the dataset's root ``zarr.json`` (which a dataset's creator writes
        first, and a derive last), none with a writer at work and none a whole vault (a derive
        publishes its shards' manifests only once every shard is copied, then the root: a
        shard whose manifest says a derive made it is part of the build).
        """
        if self.read(MANIFEST_KEY) is not None:
            return False
        if self.read(COMMIT_KEY) is not None:
            return self.lock_holder() is None
        shards = [self.child(f"{SHARDS}/{n}") for n in _shard_build(self)]
        return bool(shards) and all(
            s.lock_holder() is None and derived_shard(s.read(MANIFEST_KEY), True) for s in shards
        )

    def clear(self) -> None:
        """Remove everything stored under the root: what a create that failed half-way left.

        It is called only where the root was empty before.
        """
        import tensorstore as ts

        with self.failures("remove a half-made vault"):
            self.kvstore().delete_range(ts.KvStore.KeyRange("", "")).result()

    def top_names(self) -> set[str]:
        """Returns the names directly under the root.

        Those of keys, and of folders where the store has folders (an empty one left by a
        killed process is named too).
        """
        with self.failures("list the location"):
            keys = self.kvstore().list().result()
        return {bytes(k).decode(errors="replace").partition("/")[0] for k in keys}

    def is_empty(self) -> bool:
        """Returns whether nothing is stored under the root."""
        with self.failures("list the location"):
            keys = self.kvstore().list().result()
        return not keys

    def find_vaults(self) -> list[tuple[Location, str | None]]:
        """Returns every vault under this location (not searched inside), sorted.

        Each comes with None, or why it looks broken.
        """
        return [(where, why) for where, kind, why in self.find_roots() if kind == "vault"]

    def find_roots(self) -> list[tuple[Location, str, str | None]]:
        """Returns every vault and dataset root under this location, sorted.

        Vaults (kind ``"vault"``) are not searched inside; dataset roots (``"dataset"``) are
        (their shards are vaults). Each comes with None, or why it looks broken. This default
        lists every ``zarr.json`` key.
        """
        with self.failures("list the location"):
            keys = sorted(bytes(k).decode() for k in self.kvstore().list().result())
        roots = sorted(
            {k[: -len(ZARR_JSON)] for k in keys if k.endswith(ZARR_JSON) or k == ZARR_JSON}
        )
        found: list[tuple[Location, str, str | None]] = []
        taken: list[str] = []
        datasets: list[str] = []
        for prefix in roots:
            if any(prefix.startswith(t) for t in taken) or "/." in f"/{prefix}":
                continue
            here = self.child(prefix) if prefix else self
            kind = vault_kind(here.read, looks_like=f"{prefix}{COMMIT_KEY}" in keys)
            if not note_root(found, datasets, here, prefix, kind):
                taken.append(prefix)
        return sorted(found, key=lambda item: str(item[0]))  # as listed on disk: by location


NO_MANIFEST = (
    "no manifest (zarr.json): a vault being created, what a killed create left (the next "
    "create there removes it), or a vault whose manifest was removed"
)


def _shard_build(where: Location) -> list[str]:
    """The shards of a dataset being built at ``where`` (every key lies under ``shards/``),
    sorted; none where it holds anything else, nothing, or cannot be listed (a file)."""
    prefix = f"{SHARDS}/"
    try:
        keys = [bytes(k).decode(errors="replace") for k in where.kvstore().list().result()]
    except (OSError, ValueError):  # a file where the folder would be: nobody's build
        return []
    if not keys or not all(k.startswith(prefix) for k in keys):
        return []
    return sorted({k[len(prefix) :].split("/", 1)[0] for k in keys})


def _refuse_occupied(where: Location) -> None:
    """The error for a build into ``where``, which holds something that is not a build left
    by a dead builder: a build whose writer lock is still held (at work, or killed less than
    its lease ago: :class:`VaultLockedError` naming it), or anything else."""
    held = where.lock_holder() if where.read(COMMIT_KEY) is not None else None
    if held is None and where.read(MANIFEST_KEY) is None:
        shards = (where.child(f"{SHARDS}/{name}").lock_holder() for name in _shard_build(where))
        held = next((h for h in shards if h is not None), None)
    if held is not None:
        raise VaultLockedError(
            f"{where}: a build there is at work, or was killed less than its lease ago (its "
            f"writer lock is held by {held}); wait for it, or if it died break the lock "
            f"(`vault unlock {where}`, or the shard's) or let it expire, then run this again"
        )
    raise VaultExistsError(f"{where} is not empty; choose a new destination")


def vault_kind(read: Callable[[str], bytes | None], looks_like: bool) -> str | None:
    """``"ok"`` for a vault, ``"dataset"`` for a dataset's root, a reason for something that
    looks like a broken vault (:data:`NO_MANIFEST` where it has no manifest), None for
    anything else."""
    raw = read(MANIFEST_KEY)
    if raw is None:
        return NO_MANIFEST if looks_like else None
    try:
        doc = json.loads(raw)
    except ValueError as err:
        return f"corrupt manifest: {err}" if looks_like else None
    attrs = doc.get("attributes") if isinstance(doc, dict) else None
    if isinstance(attrs, dict) and MANIFEST_ATTR in attrs:
        return "ok"
    if isinstance(attrs, dict) and isinstance(attrs.get(DATASET_ATTR), dict):
        return "dataset"
    return "zarr.json has no 'rlvault' attributes" if looks_like else None


def note_root(
    found: list[tuple[Location, str, str | None]],
    datasets: list[str],
    here: Location,
    path: str,
    kind: str | None,
) -> bool:
    """Note in ``found`` what ``kind`` (:func:`vault_kind`) says is at ``here`` (``path``: its
    path or key prefix; a dataset root's also goes into ``datasets``); returns whether a search
    goes on inside it (not inside a vault, nor a shard being created, which is not shown)."""
    if kind == "dataset":
        found.append((here, kind, None))
        datasets.append(path)
        return True
    if kind == NO_MANIFEST and shard_of(path, datasets):
        return False  # a shard being created (or whose create was killed)
    if (
        kind == "ok"
        and not shard_of(path, datasets)  # no dataset root above it
        and at_shard_place(path)
        and derived_shard(here.read(MANIFEST_KEY), False)
    ):
        found.append((here, "vault", INTERRUPTED_DERIVE))
        return False
    if kind is not None:
        found.append((here, "vault", None if kind == "ok" else kind))
        return False
    return True


def shard_of(path: str, datasets: Sequence[str]) -> bool:
    """Whether ``path`` is a shard's place in one of the dataset roots ``datasets`` (paths or
    key prefixes, each with or without a trailing ``/``): ``ROOT/shards/NAME``. Such a place
    without a manifest is a shard being created, which a dataset does not show (format 5.2)."""
    parent = path.rstrip("/").rpartition("/")[0]
    return any(
        parent == (f"{d.rstrip('/')}/{SHARDS}" if d.rstrip("/") else SHARDS) for d in datasets
    )


INTERRUPTED_DERIVE = (
    "a shard of a dataset derive that was interrupted (no dataset root above it): not a "
    "vault; the next derive there removes it"
)


def at_shard_place(path: str) -> bool:
    """Whether ``path`` (a path or key prefix) is laid out as a shard's: ``.../shards/NAME``."""
    return path.rstrip("/").rpartition("/")[0].rpartition("/")[2] == SHARDS


def derived_shard(raw: bytes | None, absent: bool) -> bool:
    """Whether the manifest ``raw`` is that of a shard a dataset derive made (its
    ``derived_from`` names a shard); ``absent`` when there is none (a shard being copied)."""
    if raw is None:
        return absent
    try:
        doc = json.loads(raw)["attributes"][MANIFEST_ATTR]["user_metadata"]["derived_from"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(doc, dict) and "shard" in doc


def dataset_above(target: Location) -> str | None:
    """The dataset root whose shard ``target`` would be (``ROOT/shards/NAME``), or None."""
    import tensorstore as ts

    spec = dict(target.spec)
    head = str(spec.get("path", "")).rstrip("/").rpartition("/")[0]
    root, _, folder = head.rpartition("/")
    if folder != SHARDS:
        return None
    spec["path"] = f"{root}/" if root else ""
    with target.failures("read the folder above"):
        kv = ts.KvStore.open(spec, context=target.context()).result()
        raw = kv.read(MANIFEST_KEY).result()
    if raw.state != "value" or vault_kind(lambda _key: bytes(raw.value), False) != "dataset":
        return None
    return str(target).rstrip("/").rpartition("/")[0].rpartition("/")[0]
