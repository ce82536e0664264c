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
as the append starts, answered while its chunks are encoded): a writer whose lease was broken
before that writes nothing (the lease: ``vault/storage/_s3_lease.py``).
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

import dataclasses
import errno
import functools
import hashlib
import logging
import os
import re
import socket
import tempfile
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from vault._errors import (
    VaultAccessError,
    VaultError,
    VaultLocationError,
    VaultNotFoundError,
    VaultStorageError,
)
from vault.storage._location import Capabilities, Location, LockHolder
from vault.storage._s3_lease import LEASE_KEY, S3Lease, read_lease

_log = logging.getLogger(__name__)


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
    token = given.get("session_token")
    if key is None and not given.get("profile"):
        # the environment's keys, written as given ones are: TensorStore shares one resolved
        # {"type": "environment"} among the stores of a process, so keys changed in the
        # environment (a rotated session token, a corrected secret) went unseen while any
        # vault stayed open; a file named by the keys is a new credential when they change
        key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
        key, secret = (key, secret) if key and secret else (None, None)
        token = os.environ.get("AWS_SESSION_TOKEN")
    if key is not None:
        path = _credentials_file(str(key), str(secret), token)
        return {"type": "profile", "profile": "rlvault", "credentials_file": path,
                "config_file": os.devnull}  # fmt: skip
    if given.get("profile"):
        return {"type": "profile", "profile": str(given["profile"])}
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


# S3's bucket names as TensorStore checks them (legacy names: capitals and '_' allowed)
_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]+[A-Za-z0-9]")
_IPV4 = re.compile(r"\d{1,3}(\.\d{1,3}){3}")


class S3Location(Location):
    """A prefix of an S3 bucket."""

    capabilities = Capabilities(
        exclusive_lock=True,
        hard_links=False,
        atomic_rename=False,
        listing=True,
        conditional_writes=True,
        persistent=True,
        lease=True,
    )
    remote = True

    def __init__(self, bucket: str, path: str, config: S3Config) -> None:
        if not bucket:
            raise VaultLocationError("an s3:// location needs a bucket: s3://BUCKET/PREFIX")
        path = path.strip("/")
        where = f"s3://{bucket}/{path}"
        if not _BUCKET.fullmatch(bucket) or any(bad in bucket for bad in ("..", ".-", "-.")):
            raise VaultLocationError(
                f"{where}: {bucket!r} is not a valid S3 bucket name (at least 3 characters: "
                "letters, digits, '.', '-' and '_', beginning and ending with a letter or digit, "
                "no '..')"
            )
        if _IPV4.fullmatch(bucket) or bucket.startswith("xn--"):
            raise VaultLocationError(
                f"{where}: {bucket!r} is not a valid S3 bucket name (not an IP address, no "
                "'xn--' prefix)"
            )
        dots = [part for part in path.split("/") if part in (".", "..")]
        if dots:
            raise VaultLocationError(
                f"{where}: an object key cannot hold the path segment {dots[0]!r} (S3 keys are "
                "not paths: such a key is signed as written and sent normalised, so every "
                "request would be refused); write the prefix without it"
            )
        self.bucket = bucket
        self.path = f"{path}/" if path else ""
        self.config = config

    @classmethod
    def from_url(cls, text: str, storage: Mapping[str, Any] | None = None) -> S3Location:
        """From ``s3://BUCKET/PREFIX``: everything after the bucket is the prefix, ``#`` and
        ``?`` included (S3 keys may hold them; as a URL's fragment or query they would be cut
        off, and the vault would land at a shorter prefix)."""
        bucket, _, path = text.split("://", 1)[1].partition("/")
        return cls(bucket, path, S3Config.resolve(storage))

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

    def prepare(self) -> None:
        """The bucket exists: a listing of the prefix, which a missing bucket refuses
        (``VaultNotFoundError`` naming it; a PUT into it would create it on some servers)."""
        self.is_empty()

    def contains(self, other: Location) -> bool:
        """``other`` lies at or under this prefix of the same bucket on the same endpoint,
        whatever credentials either was opened with."""
        return (
            isinstance(other, S3Location)
            and (other.config.endpoint, other.bucket) == (self.config.endpoint, self.bucket)
            and other.path.startswith(self.path)
        )

    def is_empty(self) -> bool:
        with self.failures("list the location"):
            keys = self.kvstore().list().result()
        return not keys

    def disk_usage(self, prefix: str = "") -> int | None:
        return None  # a listing has no sizes here; reading every object is not cheap

    # ------------------------------------------------------------------------- writer lock
    def writer_lock(self) -> S3Lease:
        return S3Lease(self, self.config.lease_seconds, (self.config.endpoint, self.bucket))

    def lock_holder(self) -> LockHolder | None:
        lease = read_lease(self)
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


# ------------------------------------------------------------------------------ plumbing
def context_spec(retries: int, concurrency: int) -> dict[str, Any]:
    """The TensorStore context spec of an S3 location.

    Bounded retries with 0.1-1 s delays, at most ``concurrency`` requests in flight;
    ``tools/_s3_raw.py`` opens its raw arrays with it too.
    """
    return {
        "s3_request_retries": {"max_retries": retries, "initial_delay": "0.1s", "max_delay": "1s"},
        "s3_request_concurrency": {"limit": concurrency},
    }


@functools.cache
def _context(retries: int, concurrency: int) -> Any:
    import tensorstore as ts

    return ts.Context(context_spec(retries, concurrency))


_REACHED: set[str] = set()


def _reachable(endpoint: str, timeout: float, where: str) -> None:
    if endpoint in _REACHED:
        return
    parsed = urlparse(endpoint)
    host = parsed.hostname or ""
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            # a server that accepts connections but never answers (stopped, or hung) would
            # hold every request for the HTTP client's stall limit: ask for any answer at all
            # (a TLS handshake, an HTTP reply, a close) within the same time
            answered = _answers(conn, parsed.scheme == "https")
    except OSError as err:
        raise VaultStorageError(
            f"{where}: cannot reach the S3 endpoint {endpoint} ({err.strerror or err}) within "
            f"{timeout:g} s; check AWS_ENDPOINT_URL (or storage={{'endpoint': ...}}) and that "
            "the server runs",
            err.errno,
        ) from None
    if not answered:
        raise VaultStorageError(
            f"{where}: the S3 endpoint {endpoint} accepts connections but does not answer "
            f"within {timeout:g} s (connect_timeout); check that the server runs and is not "
            "overloaded",
            errno.ETIMEDOUT,
        )
    _REACHED.add(endpoint)


def _answers(conn: socket.socket, tls: bool) -> bool:
    """Whether anything (bytes, or the connection closed) comes back before the timeout: for
    ``tls``, the server's part of a TLS handshake (a certificate it would not pass is still
    an answer: only liveness is asked here), else a reply to an HTTP request."""
    try:
        if tls:
            import ssl

            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            with context.wrap_socket(conn, do_handshake_on_connect=True):
                return True
        conn.sendall(b"HEAD / HTTP/1.1\r\nHost: s3\r\nConnection: close\r\n\r\n")
        conn.recv(1)
    except TimeoutError:
        return False
    except OSError:
        return True  # reset or refused in TLS: an answer of sorts (the server is alive)
    return True


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
