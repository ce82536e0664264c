"""Every kind of location, and the one parser from paths, URLs and kvstore specs to them.

A new storage kind is one module with a :class:`~vault._location.Location` subclass, added to
:data:`SCHEMES` (its URL scheme) and :data:`DRIVERS` (its TensorStore kvstore driver).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from vault._errors import VaultLocationError
from vault._location import Location
from vault._location_file import FileLocation
from vault._location_memory import MemoryLocation

LocationLike = str | os.PathLike[str] | dict[str, Any] | Location
"""What every function that takes a vault location accepts."""

SCHEMES: dict[str, Callable[[str], Location]] = {
    "": FileLocation.from_url,
    "file": FileLocation.from_url,
    "memory": MemoryLocation.from_url,
}
DRIVERS: dict[str, Callable[[dict[str, Any]], Location]] = {
    "file": lambda spec: FileLocation.from_url(str(spec.get("path", ""))),
    "memory": lambda spec: MemoryLocation(str(spec.get("path", ""))),
}


def parse_location(location: LocationLike) -> Location:
    """A :class:`Location` from a path, ``file://`` / ``memory://`` URL, kvstore spec or a
    location; anything else is :class:`VaultLocationError`."""
    if isinstance(location, Location):
        return location
    if isinstance(location, dict):
        driver = location.get("driver")
        factory = DRIVERS.get(str(driver))
        if factory is None:
            raise VaultLocationError(
                f"unsupported kvstore driver {driver!r} in {location!r}; supported: "
                f"{sorted(DRIVERS)}"
            )
        return factory(location)
    try:
        text = os.fspath(location)
    except TypeError:
        raise VaultLocationError(
            f"a vault location is a path, a URL or a kvstore spec, got {type(location).__name__}"
        ) from None
    parsed = urlparse(text)
    scheme = parsed.scheme if len(parsed.scheme) > 1 else ""  # "C:" is a drive, not a scheme
    from_url = SCHEMES.get(scheme)
    if from_url is None:
        raise VaultLocationError(
            f"unsupported vault location scheme {scheme!r} in {text!r}; supported: a path, "
            + ", ".join(f"{s}://" for s in sorted(SCHEMES) if s)
        )
    return from_url(text)
