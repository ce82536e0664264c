"""Every kind of location, and the one parser from paths, URLs and kvstore specs to them.

A new storage kind is one module with a :class:`~vault.storage._location.Location` subclass, added
to :data:`SCHEMES` (its URL scheme) and :data:`DRIVERS` (its TensorStore kvstore driver).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlparse

from vault._errors import VaultLocationError
from vault.storage._file import FileLocation
from vault.storage._location import Location
from vault.storage._memory import MemoryLocation

LocationLike = str | os.PathLike[str] | dict[str, Any] | Location
"""What every function that takes a vault location accepts."""

Storage = Mapping[str, Any] | None
"""Per-call storage settings (``storage=``): for ``s3://``, see ``S3Config``."""


def _local(factory: Callable[[str], Location]) -> Callable[[str, Storage], Location]:
    def parse(text: str, storage: Storage) -> Location:
        if storage:
            raise VaultLocationError(
                f"storage= settings apply to object-store locations (s3://), not to {text!r}"
            )
        return factory(text)

    return parse


def _s3_url(text: str, storage: Storage) -> Location:
    from vault.storage._s3 import S3Location  # only object-store users pay for it

    return S3Location.from_url(text, storage)


def _s3_spec(spec: dict[str, Any], storage: Storage) -> Location:
    from vault.storage._s3 import S3Location

    return S3Location.from_spec(spec, storage)


SCHEMES: dict[str, Callable[[str, Storage], Location]] = {
    "": _local(FileLocation.from_url),
    "file": _local(FileLocation.from_url),
    "memory": _local(MemoryLocation.from_url),
    "s3": _s3_url,
}
DRIVERS: dict[str, Callable[[dict[str, Any], Storage], Location]] = {
    "file": lambda spec, storage: _local(FileLocation.from_url)(str(spec.get("path", "")), storage),
    "memory": lambda spec, storage: _local(MemoryLocation)(str(spec.get("path", "")), storage),
    "s3": _s3_spec,
}


def parse_location(
    location: LocationLike, storage: Storage = None, *, argument: str = "location"
) -> Location:
    """The :class:`Location` a path, URL or kvstore spec names.

    Args:
        location: a path, a ``file://`` / ``memory://`` / ``s3://`` URL, a TensorStore
            kvstore spec (a dict), or a location (returned as it is).
        storage: settings of an object-store location (``endpoint``, ``region``,
            credentials, ``retries``, ...) over the environment's.
        argument: the caller's name for ``location``, named in errors.

    Returns:
        The location, with its declared capabilities.

    Raises:
        VaultLocationError: anything else (a NUL byte included), or ``storage`` given with a
            location; it names ``argument``.

    Examples:
        >>> import vault
        >>> vault.parse_location("memory://demo").capabilities.persistent
        False
    """
    if isinstance(location, Location):
        if storage:
            raise VaultLocationError(
                f"storage= cannot change the settings of an existing location ({location})"
            )
        return location
    if storage is not None and not isinstance(storage, Mapping):
        raise VaultLocationError(f"storage must be a mapping, got {type(storage).__name__}")
    if isinstance(location, dict):
        for key, value in location.items():
            if isinstance(value, str):
                check_name(f"{argument}[{key!r}]", value)
        if location.get("driver") == "file" and not location.get("path"):
            raise VaultLocationError(
                f"{argument}['path'] is missing or empty: a file kvstore spec needs the "
                "folder's path"
            )
        if "path" in location and not isinstance(location["path"], str):
            raise VaultLocationError(
                f"{argument}['path'] must be a str, got {type(location['path']).__name__} "
                f"{location['path']!r}"
            )
        driver = location.get("driver")
        factory = DRIVERS.get(str(driver))
        if factory is None:
            raise VaultLocationError(
                f"unsupported kvstore driver {driver!r} in {location!r}; supported: "
                f"{sorted(DRIVERS)}"
            )
        return factory(location, storage)
    try:
        text = os.fspath(location)
    except TypeError:
        raise VaultLocationError(
            f"{argument}: a vault location is a path, a URL or a kvstore spec, got "
            f"{type(location).__name__}"
        ) from None
    if not isinstance(text, str):
        raise VaultLocationError(
            f"{argument}: a vault location is a path or URL as text (str or os.PathLike of "
            f"str), got bytes {text!r}: decode it (os.fsdecode)"
        )
    check_name(argument, text)
    if not text:
        raise VaultLocationError(
            f'{argument} is empty: give a path ("." for the current folder) or a URL'
        )
    parsed = urlparse(text)
    scheme = parsed.scheme if len(parsed.scheme) > 1 else ""  # "C:" is a drive, not a scheme
    from_url = SCHEMES.get(scheme)
    if from_url is None:
        raise VaultLocationError(
            f"unsupported vault location scheme {scheme!r} in {text!r}; supported: a path, "
            + ", ".join(f"{s}://" for s in sorted(SCHEMES) if s)
        )
    return from_url(text, storage)


def check_name(argument: str, text: str) -> None:
    """Refuse a path, URL or name that no storage can hold: one with a NUL byte
    (:class:`VaultLocationError` naming ``argument``, where the byte is, and the fix)."""
    at = text.find("\0")
    if at >= 0:
        raise VaultLocationError(
            f"{argument} {text!r} holds a NUL byte (\\x00, at character {at}): no path, URL or "
            "object key can hold one; remove it"
        )
