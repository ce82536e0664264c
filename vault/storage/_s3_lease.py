"""The writer lock of a vault on S3: a lease with fencing (see ``vault/storage/_s3.py``'s
module docstring): ``lock/lease.json``, created only if absent, renewed by a background
thread, checked before each append's data goes out, and every replacement of a fenced record
(the commit record, the arrays' metadata) conditional on the generation this writer last wrote
or read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from vault._errors import VaultLocationError, VaultLockedError
from vault.format._records import LOCK_DIR, group_json
from vault.storage._location import ABSENT, Location, LockHolder
from vault.storage._writer_id import holder_record, locked_message

_log = logging.getLogger(__name__)

LEASE_KEY = f"{LOCK_DIR}/lease.json"
LOCK_GROUP = f"{LOCK_DIR}/zarr.json"


class S3Lease:
    """The writer lock of an S3 vault (see the module docstring); ``replace`` and ``fence``
    make every commit-record replacement conditional. ``seconds``: the lease's duration;
    ``store``: the store's endpoint and bucket (where conditional writes were checked)."""

    fences = True

    def __init__(self, location: Location, seconds: float, store: tuple[str | None, str]) -> None:
        self.location = location
        self.seconds = seconds
        self._kv = location.kvstore()
        self._generations: dict[str, bytes] = {}
        self._guard = threading.Lock()
        self._lost: str | None = None
        self._nonce = uuid.uuid4().hex
        self._writer = holder_record()  # who took the lock, and when: the same in renewals
        self._renewals = 0
        self._deadline = 0.0  # monotonic time until which the lease is surely ours
        self._stop = threading.Event()
        self._holding = [b""]  # the lease's generation while held (shared with the finalizer)
        self._generation = self._holding[0] = self._acquire()
        self._finalizer = weakref.finalize(self, _release, self._kv, self._stop, self._holding)
        try:
            _check_enforced(location, store, self._kv)
        except BaseException:
            self._finalizer()
            raise
        self._thread = threading.Thread(
            target=_renew_loop, args=(weakref.ref(self), self._stop, self.seconds / 3),
            name="rlvault-lease", daemon=True,
        )  # fmt: skip
        self._thread.start()

    # -- taking, renewing, giving back
    def _record(self) -> bytes:
        self._renewals += 1
        return json.dumps(
            {
                "writer": self._writer,
                "nonce": self._nonce,
                "renewals": self._renewals,
                "seconds": self.seconds,
                "expires": time.time() + self.seconds,
            },
            sort_keys=True,
        ).encode()

    def _acquire(self) -> bytes:
        where = str(self.location)
        with self.location.failures("take the writer lock"):
            for _ in range(5):
                current = self._kv.read(LEASE_KEY).result()
                expect = ABSENT
                if current.state == "value":
                    doc = _parse_lease(bytes(current.value))
                    if doc is not None and doc.get("expires", 0) >= time.time():
                        holder = LockHolder.from_json(doc.get("writer"))
                        left = doc["expires"] - time.time()
                        raise VaultLockedError(
                            locked_message(where, holder).replace(
                                " (a writer that died releases the lock with its process)",
                                "",
                            )
                            + f" Its lease runs {left:.0f} s more unless renewed; if that "
                            f"writer is dead, wait, or break the lock: `vault unlock {where}`."
                        )
                    expect = bytes(current.stamp.generation)
                    if doc is not None:
                        _log.warning(
                            "%s: taking over the expired writer lease of %s",
                            where,
                            LockHolder.from_json(doc.get("writer")),
                        )
                started = time.monotonic()
                written = self._kv.write(LEASE_KEY, self._record(), if_equal=expect).result()
                if written.generation:
                    # lock/ as an empty Zarr group (zarr-python lists every folder as a node)
                    self._kv.write(LOCK_GROUP, group_json(), if_equal=ABSENT).result()
                    self._deadline = started + self.seconds
                    return bytes(written.generation)
        raise VaultLockedError(locked_message(where, None))

    def renew(self) -> None:
        """Extend the lease (the background thread calls this)."""
        with self._guard:
            if self._lost is not None or self._stop.is_set():
                return
            started = time.monotonic()
            try:
                written = self._kv.write(
                    LEASE_KEY, self._record(), if_equal=self._generation
                ).result()
            except ValueError as err:  # the store is unreachable for now: try again soon
                _log.warning("%s: cannot renew the writer lease yet: %s", self.location, err)
                return
            if not written.generation:
                self._lost = "another process broke or took over its lease"
                _log.error("%s: this writer lost its lock: %s", self.location, self._lost)
                return
            self._generation = bytes(written.generation)
            self._holding[0] = self._generation
            self._deadline = started + self.seconds

    def _check_held(self) -> None:
        if self._lost is None and time.monotonic() > self._deadline - min(5.0, self.seconds / 6):
            self._lost = "its lease ran out before it could be renewed"
        if self._lost is not None:
            raise VaultLockedError(
                f"{self.location}: this writer lost its lock ({self._lost}), so it cannot "
                "commit; nothing past its last commit is kept. Open the vault again to write."
            )

    def check(self) -> None:
        """Raise :class:`VaultLockedError` if the lease is no longer this writer's (broken,
        taken over, run out): one GET, before an append writes any data."""
        self.start_check()()

    def start_check(self) -> Callable[[], None]:
        """Send :meth:`check`'s GET; returns what waits for it and raises (work that writes
        nothing, such as encoding chunks in memory, can go on meanwhile). Each append sends
        its own: a check sent with the previous commit, answered before the append began,
        would let a writer whose lease was broken meanwhile PUT its chunks over the new
        holder's (measured: no cost beyond noise, the GET overlapping the encode)."""
        with self._guard:
            self._check_held()
            ours = self._generation
            with self.location.failures("check the writer lock"):
                pending = self._kv.read(LEASE_KEY)

        def finish() -> None:
            with self._guard:
                with self.location.failures("check the writer lock"):
                    current = pending.result()
                seen = bytes(current.stamp.generation) if current.state == "value" else None
                if seen not in (ours, self._generation):  # renewed meanwhile: either is ours
                    self._lost = "its lease was broken or taken over by another writer"
                self._check_held()

        return finish

    # -- fenced replacement of records
    def replace(self, key: str, value: bytes) -> None:
        """Replace ``key`` only if nobody replaced it since this writer last did (or read it
        in :meth:`fence`), and only while the lease holds."""
        self.replace_all({key: value}, "commit")

    def replace_all(self, values: Mapping[str, bytes], doing: str = "write the vault") -> None:
        """:meth:`replace` of several records at once (the requests go out together); a
        record replaced by another writer meanwhile loses the lock (VaultLockedError), the
        others are replaced."""
        self.start_replace_all(values, doing)()

    def start_replace_all(
        self, values: Mapping[str, bytes], doing: str = "write the vault"
    ) -> Callable[[], None]:
        """Send :meth:`replace_all`'s requests; returns what waits for them (and raises)."""
        with self._guard:
            self._check_held()
            missing = [key for key in values if key not in self._generations]
            if missing:
                raise VaultLockedError(
                    f"{self.location}: {missing[0]} was not fenced by this writer"
                )
            with self.location.failures(doing):
                pending = {
                    key: self._kv.write(key, value, if_equal=self._generations[key])
                    for key, value in values.items()
                }

        def finish() -> None:
            with self._guard:
                with self.location.failures(doing):
                    written = {key: future.result() for key, future in pending.items()}
                lost = sorted(key for key, w in written.items() if not w.generation)
                for key, w in written.items():
                    if w.generation:
                        self._generations[key] = bytes(w.generation)
                if lost:
                    self._lost = f"another writer replaced {lost[0]} since this writer last did"
                self._check_held()

        return finish

    def fence(self, key: str, rewrite: Callable[[bytes | None], bytes]) -> bytes:
        """Rewrite ``key`` (``rewrite(current) -> new``, which must differ from it) on the
        generation just read, so that every earlier holder's :meth:`replace` fails; returns
        what was written."""
        return self.fence_all({key: rewrite}, "take the writer lock")[key]

    def fence_all(
        self,
        rewrites: Mapping[str, Callable[[bytes | None], bytes]],
        doing: str = "write the vault",
    ) -> dict[str, bytes]:
        """:meth:`fence` of several records at once (reads, then conditional writes, each
        round of requests sent together; a record that changed between the two is read and
        rewritten again); returns what was written to each."""
        return self.start_fence_all(rewrites, doing)[1]()

    def start_fence_all(
        self,
        rewrites: Mapping[str, Callable[[bytes | None], bytes]],
        doing: str = "write the vault",
        reads: Mapping[str, Any] | None = None,
    ) -> tuple[dict[str, bytes], Callable[[], dict[str, bytes]]]:
        """The first round of :meth:`fence_all` sent: the reads waited for (``reads``: sent
        earlier by the caller), the conditional writes sent. Returns what they write to each
        key, and what waits for them and returns what was written to each key: a key that
        another writer replaced between the read and the write is read and rewritten again
        (up to ten rounds)."""
        first = self._fence_round(rewrites, doing, reads)

        def finish() -> dict[str, bytes]:
            done: dict[str, bytes] = {}
            todo, pending = dict(rewrites), first
            for _ in range(10):
                done.update(self._fenced(pending, doing))
                todo = {key: rewrite for key, rewrite in todo.items() if key not in done}
                if not todo:
                    return done
                pending = self._fence_round(todo, doing, None)
            raise VaultLockedError(
                f"{self.location}: {next(iter(todo))} kept changing while this writer took the "
                "lock; another writer is still committing"
            )

        return {key: new for key, (new, _) in first.items()}, finish

    def _fence_round(
        self,
        rewrites: Mapping[str, Callable[[bytes | None], bytes]],
        doing: str,
        reads: Mapping[str, Any] | None,
    ) -> dict[str, tuple[bytes, Any]]:
        """Read each key (``reads``: already sent), rewrite it and send the write conditional
        on the generation read; by key, what is written and its write's future."""
        sent = dict(reads or {})
        with self._guard:
            self._check_held()
            with self.location.failures(doing):
                got = {key: sent.pop(key, None) or self._kv.read(key) for key in rewrites}
                writes = {}
                for key, future in got.items():
                    current = future.result()
                    raw = bytes(current.value) if current.state == "value" else None
                    new = rewrites[key](raw)
                    expect = bytes(current.stamp.generation) if raw is not None else ABSENT
                    writes[key] = (new, self._kv.write(key, new, if_equal=expect))
        return writes

    def _fenced(self, writes: Mapping[str, tuple[bytes, Any]], doing: str) -> dict[str, bytes]:
        """What :meth:`_fence_round`'s writes wrote (a key replaced meanwhile is left out)."""
        done: dict[str, bytes] = {}
        with self._guard, self.location.failures(doing):
            for key, (new, future) in writes.items():
                written = future.result()
                if written.generation:
                    self._generations[key] = bytes(written.generation)
                    done[key] = new
        return done

    def read_all(self, keys: list[str], doing: str = "read the vault") -> dict[str, bytes | None]:
        """Read records (together), remembering their generations: a later :meth:`replace_all`
        of them is conditional on what was read here."""
        with self._guard:
            self._check_held()
            with self.location.failures(doing):
                reads = {key: self._kv.read(key) for key in keys}
                got = {key: future.result() for key, future in reads.items()}
            out: dict[str, bytes | None] = {}
            for key, current in got.items():
                present = current.state == "value"
                self._generations[key] = bytes(current.stamp.generation) if present else ABSENT
                out[key] = bytes(current.value) if present else None
            return out

    def release(self) -> None:
        self._finalizer()


def _renew_loop(ref: Any, stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        lease = ref()
        if lease is None:
            return
        lease.renew()
        del lease


def _release(kv: Any, stop: threading.Event, holding: list[bytes]) -> None:
    """Stop renewing and delete the lease if it is still this writer's."""
    stop.set()
    if holding[0]:
        with contextlib.suppress(Exception):
            kv.write(LEASE_KEY, None, if_equal=holding[0]).result()
        holding[0] = b""


def _parse_lease(raw: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("expires"), (int, float)):
        return None
    return doc


def read_lease(location: Location) -> tuple[dict[str, Any], bytes] | None:
    with location.failures("read the writer lock"):
        current = location.kvstore().read(LEASE_KEY).result()
    if current.state != "value":
        return None
    doc = _parse_lease(bytes(current.value))
    return None if doc is None else (doc, bytes(current.stamp.generation))


_ENFORCED: set[tuple[str | None, str]] = set()


def _check_enforced(location: Location, store: tuple[str | None, str], kv: Any) -> None:
    """Refuse to write where the store ignores conditional writes (a stale generation must
    fail): without them two writers could both commit. Checked once per store and process."""
    if store in _ENFORCED:
        return
    key = f"{LOCK_DIR}/conditional-write-check"
    with location.failures("check that the store enforces conditional writes"):
        first = kv.write(key, uuid.uuid4().bytes, if_equal=ABSENT).result()
        stale = kv.write(key, uuid.uuid4().bytes, if_equal=b'\x00"rlvault-stale"').result()
        kv.write(key, None).result()
    if not first.generation or stale.generation:
        raise VaultLocationError(
            f"{location}: this object store does not enforce conditional writes (a write "
            "conditional on a stale generation succeeded), so one writer per vault cannot be "
            "guaranteed; use a store that supports If-Match / If-None-Match (AWS S3, MinIO, "
            "SeaweedFS, recent Ceph)"
        )
    _ENFORCED.add(store)
