"""Vaults on S3 and S3-compatible object stores (AWS, GCS's S3 endpoint, MinIO, Ceph, R2...).

``s3://bucket/prefix`` is configured the way the AWS tools are: the endpoint from
``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` (none: AWS itself), the region from
``AWS_REGION`` / ``AWS_DEFAULT_REGION`` (default ``us-east-1``), credentials from
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, else the profile
``AWS_PROFILE`` of ``~/.aws``, else the AWS default chain. A ``storage=`` mapping overrides any
of them per call (:data:`STORAGE_KEYS`). Secrets never enter a spec, a manifest, an error or a
log: keys given in ``storage=`` go to a private credentials file that TensorStore reads.

Requests are retried a bounded number of times (``retries``, default 3, with 0.1-1 s delays),
and a location first checks that its endpoint accepts a connection within
``connect_timeout`` seconds (default 5), so a dead endpoint fails in seconds rather than after
TensorStore's default retry policy (measured: 897 s).

**One writer: a lease with fencing.** ``flock`` does not exist on a bucket. The writer lock is
the object ``lock/lease.json``, created only if absent (a conditional PUT), renewed by a
background thread every third of its duration (``lease_seconds``, default 30), and deleted on
``close()``. Another writer gets :class:`VaultLockedError` naming the holder; a lease whose
holder died (not renewed for ``lease_seconds``, by the holder's clock as written in the lease)
can be taken over, or broken at once with :func:`break_lease` (``vault unlock``). Every
replacement of the commit record is conditional on the generation (ETag) this writer last
wrote or read, and a writer that takes the lock first rewrites the commit record with a fresh
token, so a writer that lost its lease can never commit: it gets :class:`VaultLockedError`.
Before an append PUTs any data the writer checks that the lease is still its own (a GET sent
with its previous commit, if that was less than :data:`CHECK_FRESH` seconds ago, else a new
one): a writer whose lease was broken writes nothing.
Data it wrote past the commit is overwritten by the next append; a paused writer's data writes
landing after a new writer's are caught by the chunk checksums bound to their places
(``VaultCorruptError`` on read, a problem in ``vault verify``), never read as data. Both lease
and commit record carry a nonce or counter: an S3 generation is a content hash, so equal bytes
would bring an old generation back. The store must enforce conditional writes; a writer checks
that once per store and refuses to write where it does not.

No hard links (nothing to reclaim: a PUT replaces an object), no atomic rename (derived vaults
are built in place behind a ``.rlvault-partial`` marker, see ``Location.staging``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import socket
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlparse

from vault._errors import (
    VaultAccessError,
    VaultError,
    VaultLocationError,
    VaultLockedError,
    VaultNotFoundError,
    VaultStorageError,
)
from vault.format._records import LOCK_DIR, group_json
from vault.storage._location import ABSENT, Capabilities, Location, LockHolder
from vault.storage._writer_id import holder_record, locked_message

_log = logging.getLogger(__name__)

LEASE_KEY = f"{LOCK_DIR}/lease.json"
LOCK_GROUP = f"{LOCK_DIR}/zarr.json"

STORAGE_KEYS = frozenset(
    {
        "endpoint",
        "region",
        "access_key_id",
        "secret_access_key",
        "session_token",
        "profile",
        "anonymous",
        "retries",
        "request_concurrency",
        "connect_timeout",
        "lease_seconds",
    }
)
"""What a ``storage=`` mapping may set for ``s3://`` locations."""


@dataclasses.dataclass(frozen=True)
class S3Config:
    """How to reach a bucket (no secrets: ``credentials`` is a TensorStore credentials spec
    that names where they are)."""

    endpoint: str | None
    region: str
    credentials: tuple[tuple[str, str], ...]
    retries: int = 3
    request_concurrency: int = 32
    connect_timeout: float = 5.0
    lease_seconds: float = 30.0

    @classmethod
    def resolve(cls, storage: Mapping[str, Any] | None) -> S3Config:
        """The configuration from ``storage`` over the AWS environment variables."""
        given = dict(storage or {})
        unknown = sorted(set(given) - STORAGE_KEYS)
        if unknown:
            raise VaultLocationError(
                f"unknown storage setting(s) {unknown} for s3://; expected some of "
                f"{sorted(STORAGE_KEYS)}"
            )
        env = os.environ
        endpoint = (
            given.get("endpoint") or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        )
        if endpoint is not None:
            endpoint = str(endpoint).rstrip("/")
            if urlparse(endpoint).scheme not in ("http", "https") or not urlparse(endpoint).netloc:
                raise VaultLocationError(
                    f"the S3 endpoint must be an http:// or https:// URL, got {endpoint!r}"
                )
        region = (
            str(given.get("region") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "")
            or "us-east-1"
        )
        return cls(
            endpoint=endpoint,
            region=region,
            credentials=tuple(sorted(_credentials(given).items())),
            retries=_number(given, "retries", 3, int, 0, 100),
            request_concurrency=_number(given, "request_concurrency", 32, int, 1, 1024),
            connect_timeout=_number(given, "connect_timeout", 5.0, float, 0.1, 600),
            lease_seconds=_number(given, "lease_seconds", 30.0, float, 1.0, 86_400),
        )


def _number(given: dict[str, Any], key: str, default: Any, kind: type, lo: float, hi: float) -> Any:
    value = given.get(key, default)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        ok = ok and float(value).is_integer()
    if not ok or not lo <= value <= hi:
        raise VaultLocationError(
            f"storage setting {key!r} must be a number in [{lo}, {hi}], got {value!r}"
        )
    return kind(value)


def _credentials(given: dict[str, Any]) -> dict[str, str]:
    """The TensorStore ``aws_credentials`` spec: keys in ``given`` go to a private file."""
    if given.get("anonymous"):
        return {"type": "anonymous"}
    key, secret = given.get("access_key_id"), given.get("secret_access_key")
    if (key is None) != (secret is None):
        raise VaultLocationError(
            "storage needs both 'access_key_id' and 'secret_access_key' (or neither)"
        )
    if key is not None:
        path = _credentials_file(str(key), str(secret), given.get("session_token"))
        return {"type": "profile", "profile": "rlvault", "credentials_file": path,
                "config_file": os.devnull}  # fmt: skip
    if given.get("profile"):
        return {"type": "profile", "profile": str(given["profile"])}
    if os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
        return {"type": "environment"}
    if os.environ.get("AWS_PROFILE"):
        return {"type": "profile", "profile": os.environ["AWS_PROFILE"]}
    return {"type": "default"}


@functools.cache
def _credentials_dir() -> str:
    return tempfile.mkdtemp(prefix="rlvault-aws-")  # 0700, this process's


def _credentials_file(key: str, secret: str, token: Any) -> str:
    """A 0600 credentials file (profile ``rlvault``) holding these keys; named by a hash."""
    lines = ["[rlvault]", f"aws_access_key_id = {key}", f"aws_secret_access_key = {secret}"]
    if token:
        lines.append(f"aws_session_token = {token}")
    text = "\n".join(lines) + "\n"
    name = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = os.path.join(_credentials_dir(), f"{name}.ini")
    if not os.path.exists(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
    return path


class S3Location(Location):
    """A prefix of an S3 bucket."""

    capabilities = Capabilities(
        exclusive_lock=True,
        hard_links=False,
        atomic_rename=False,
        listing=True,
        conditional_writes=True,
        persistent=True,
    )
    remote = True

    def __init__(self, bucket: str, path: str, config: S3Config) -> None:
        if not bucket:
            raise VaultLocationError("an s3:// location needs a bucket: s3://BUCKET/PREFIX")
        path = path.strip("/")
        self.bucket = bucket
        self.path = f"{path}/" if path else ""
        self.config = config

    @classmethod
    def from_url(cls, text: str, storage: Mapping[str, Any] | None = None) -> S3Location:
        parsed = urlparse(text)
        return cls(parsed.netloc, parsed.path, S3Config.resolve(storage))

    @classmethod
    def from_spec(
        cls, spec: dict[str, Any], storage: Mapping[str, Any] | None = None
    ) -> S3Location:
        """From a raw ``{"driver": "s3", ...}`` kvstore spec (its endpoint, region and
        credentials win over the environment)."""
        given = dict(storage or {})
        if spec.get("endpoint"):
            given.setdefault("endpoint", spec["endpoint"])
        if spec.get("aws_region"):
            given.setdefault("region", spec["aws_region"])
        config = S3Config.resolve(given)
        if isinstance(spec.get("aws_credentials"), dict):
            config = dataclasses.replace(
                config, credentials=tuple(sorted(spec["aws_credentials"].items()))
            )
        return cls(str(spec.get("bucket", "")), str(spec.get("path", "")), config)

    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "driver": "s3",
            "bucket": self.bucket,
            "path": self.path,
            "aws_region": self.config.region,
            "aws_credentials": dict(self.config.credentials),
            "use_conditional_write": True,
        }
        if self.config.endpoint is not None:
            spec["endpoint"] = self.config.endpoint
        return spec

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.path.rstrip('/')}"

    def context(self) -> Any:
        return _context(self.config.retries, self.config.request_concurrency)

    def child(self, name: str) -> S3Location:
        return S3Location(self.bucket, f"{self.path}{name.strip('/')}", self.config)

    def kvstore(self) -> Any:
        if "_kvstore" not in self.__dict__:
            self.check_reachable()
        return super().kvstore()

    def check_reachable(self) -> None:
        """The endpoint accepts a TCP connection within ``connect_timeout`` (a host that
        drops packets would otherwise cost libcurl's 30 s connect timeout per attempt)."""
        endpoint = self.config.endpoint or f"https://s3.{self.config.region}.amazonaws.com"
        _reachable(endpoint, self.config.connect_timeout, str(self))

    def typed_failure(
        self, err: BaseException, doing: str | None, remedy: str | None = None
    ) -> VaultError | None:
        return s3_error(err, str(self), doing, self.config.endpoint) or super().typed_failure(
            err, doing, remedy
        )

    def read_tails(self, keys: list[str], size: int = 4) -> list[bytes | None]:
        """The last ``size`` bytes of each key (a chunk's crc32c) by ranged GETs, in
        parallel: the place checks never fetch a whole chunk twice."""
        kv = self.kvstore()
        with self.failures("read the vault"):
            futures = [kv.read(key, byte_range=slice(-size, None)) for key in keys]
            values = [f.result() for f in futures]
        return [bytes(v.value) if v.state == "value" else None for v in values]

    def is_empty(self) -> bool:
        with self.failures("list the location"):
            keys = self.kvstore().list().result()
        return not keys

    def disk_usage(self, prefix: str = "") -> int | None:
        return None  # a listing has no sizes here; reading every object is not cheap

    # ------------------------------------------------------------------------- writer lock
    def writer_lock(self) -> S3Lease:
        return S3Lease(self)

    def lock_holder(self) -> LockHolder | None:
        lease = _read_lease(self)
        if lease is None or lease[0].get("expires", 0) < time.time():
            return None
        return LockHolder.from_json(lease[0].get("writer")) or LockHolder(None, None, None)

    def break_lock(self) -> bool:
        """Delete the lease whoever holds it (``vault unlock``); whether there was one. A
        writer that still runs loses its lock: its next commit fails."""
        with self.failures("break the writer lock"):
            kv = self.kvstore()
            had = kv.read(LEASE_KEY).result().state == "value"
            kv.write(LEASE_KEY, None).result()
        return had


# ----------------------------------------------------------------------------- the lease
CHECK_FRESH = 0.1
"""Seconds for which a lease check sent with a commit stands for the next append's check: an
append's data PUTs go out only once the lease was seen held by a GET sent at most this long
before (or during the append itself)."""


class S3Lease:
    """The writer lock of an S3 vault (see the module docstring); ``replace`` and ``fence``
    make every commit-record replacement conditional."""

    fences = True

    def __init__(self, location: S3Location) -> None:
        self.location = location
        self.seconds = location.config.lease_seconds
        self._kv = location.kvstore()
        self._generations: dict[str, bytes] = {}
        self._guard = threading.Lock()
        self._lost: str | None = None
        self._nonce = uuid.uuid4().hex
        self._renewals = 0
        self._deadline = 0.0  # monotonic time until which the lease is surely ours
        self._sent: tuple[float, bytes, Any] | None = None  # send_check's (when, ours, GET)
        self._stop = threading.Event()
        self._holding = [b""]  # the lease's generation while held (shared with the finalizer)
        self._generation = self._holding[0] = self._acquire()
        self._finalizer = weakref.finalize(self, _release, self._kv, self._stop, self._holding)
        try:
            _check_enforced(location, self._kv)
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
                "writer": holder_record(),
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

    def send_check(self) -> None:
        """Send the next :meth:`start_check`'s GET now (a writer sends it with each commit
        record's PUT, so that the answer is back when its next append starts): an append that
        starts less than :data:`CHECK_FRESH` seconds after it was sent waits for that answer
        instead of a new round trip, and one that starts later sends its own."""
        with self._guard:
            if self._lost is not None:
                return
            with self.location.failures("check the writer lock"):
                self._sent = (time.monotonic(), self._generation, self._kv.read(LEASE_KEY))

    def start_check(self) -> Callable[[], None]:
        """Send :meth:`check`'s GET (or take the one :meth:`send_check` sent, if recent);
        returns what waits for it and raises (work that writes nothing, such as encoding
        chunks in memory, can go on meanwhile)."""
        with self._guard:
            self._check_held()
            sent, self._sent = self._sent, None
            if sent is not None and time.monotonic() - sent[0] < CHECK_FRESH:
                _, ours, pending = sent
            else:
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
        reads: Mapping[str, Any] | None = None,
    ) -> dict[str, bytes]:
        """:meth:`fence` of several records at once (reads, then conditional writes, each
        round of requests sent together; a record that changed between the two is read and
        rewritten again); returns what was written to each. ``reads``: the first round's
        reads (TensorStore read futures of those keys), sent earlier by the caller."""
        done: dict[str, bytes] = {}
        sent = dict(reads or {})
        with self._guard:
            self._check_held()
            todo = list(rewrites)
            for _ in range(10):
                with self.location.failures(doing):
                    reads = {key: sent.pop(key, None) or self._kv.read(key) for key in todo}
                    writes = {}
                    for key, future in reads.items():
                        current = future.result()
                        raw = bytes(current.value) if current.state == "value" else None
                        new = rewrites[key](raw)
                        expect = bytes(current.stamp.generation) if raw is not None else ABSENT
                        writes[key] = (new, self._kv.write(key, new, if_equal=expect))
                    for key, (new, future) in writes.items():
                        written = future.result()
                        if written.generation:
                            self._generations[key] = bytes(written.generation)
                            done[key] = new
                todo = [key for key in todo if key not in done]
                if not todo:
                    return done
        raise VaultLockedError(
            f"{self.location}: {todo[0]} kept changing while this writer took the lock; another "
            "writer is still committing"
        )

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


def _read_lease(location: S3Location) -> tuple[dict[str, Any], bytes] | None:
    with location.failures("read the writer lock"):
        current = location.kvstore().read(LEASE_KEY).result()
    if current.state != "value":
        return None
    doc = _parse_lease(bytes(current.value))
    return None if doc is None else (doc, bytes(current.stamp.generation))


_ENFORCED: set[tuple[str | None, str]] = set()


def _check_enforced(location: S3Location, kv: Any) -> None:
    """Refuse to write where the store ignores conditional writes (a stale generation must
    fail): without them two writers could both commit. Checked once per store and process."""
    store = (location.config.endpoint, location.bucket)
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


# ------------------------------------------------------------------------------ plumbing
@functools.cache
def _context(retries: int, concurrency: int) -> Any:
    import tensorstore as ts

    return ts.Context(
        {
            "s3_request_retries": {
                "max_retries": retries,
                "initial_delay": "0.1s",
                "max_delay": "1s",
            },
            "s3_request_concurrency": {"limit": concurrency},
        }
    )


_REACHED: set[str] = set()


def _reachable(endpoint: str, timeout: float, where: str) -> None:
    if endpoint in _REACHED:
        return
    parsed = urlparse(endpoint)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname or "", port), timeout=timeout):
            pass
    except OSError as err:
        raise VaultStorageError(
            f"{where}: cannot reach the S3 endpoint {endpoint} ({err.strerror or err}) within "
            f"{timeout:g} s; check AWS_ENDPOINT_URL (or storage={{'endpoint': ...}}) and that "
            "the server runs",
            err.errno,
        ) from None
    _REACHED.add(endpoint)


def s3_error(
    err: BaseException, where: str, doing: str | None, endpoint: str | None = None
) -> VaultError | None:
    """A TensorStore error from an S3 request as a typed error naming ``where``, or None."""
    if isinstance(err, VaultError) or not isinstance(err, ValueError):
        return None
    text = str(err)
    lead = f"{where}: cannot {doing}: " if doing else f"{where}: "
    head = text.split(" [", 1)[0]
    if "NoSuchBucket" in text:
        bucket = where.removeprefix("s3://").split("/", 1)[0]
        return VaultNotFoundError(
            f"{lead}the bucket {bucket!r} does not exist at "
            f"{endpoint or 'AWS'}; create it first or check the bucket name"
        )
    if text.startswith(("PERMISSION_DENIED", "UNAUTHENTICATED")):
        reason = (
            "the credentials were refused"
            if ("Signature" in text or "InvalidAccessKeyId" in text)
            else "access denied"
        )
        return VaultAccessError(
            f"{lead}{reason} ({head}); check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or "
            "AWS_PROFILE, or storage=) and the bucket's policy"
        )
    if "CURL error" in text or text.startswith(("UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED")):
        return VaultStorageError(
            f"{lead}the object store did not answer ({head}); check that "
            f"{endpoint or 'the endpoint'} is reachable and try again"
        )
    return None
