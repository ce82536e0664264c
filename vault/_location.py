"""Locations: plain paths, ``file://`` and ``memory://`` URLs, turned into TensorStore kvstore
specs in this one place (object storage will come through here too)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


def kvstore_spec(location: str | os.PathLike[str]) -> dict[str, Any]:
    """The kvstore spec of the vault root (a directory-like prefix ending in ``/``)."""
    text = os.fspath(location)
    parsed = urlparse(text)
    if parsed.scheme == "memory":
        path = (parsed.netloc + parsed.path).strip("/")
        return {"driver": "memory", "path": f"{path}/" if path else ""}
    if parsed.scheme == "file":
        text = parsed.netloc + parsed.path
    elif parsed.scheme and len(parsed.scheme) > 1:
        raise ValueError(f"unsupported vault location scheme {parsed.scheme!r} in {text!r}")
    absolute = Path(text).expanduser().absolute()
    return {"driver": "file", "path": f"{absolute.as_posix().rstrip('/')}/"}


def child_spec(root: dict[str, Any], name: str) -> dict[str, Any]:
    """The kvstore spec of ``name`` (a relative key, no leading slash) under ``root``."""
    spec = dict(root)
    spec["path"] = f"{root['path']}{name.strip('/')}/"
    return spec


def display(root: dict[str, Any]) -> str:
    if root["driver"] == "memory":
        return f"memory://{root['path']}"
    return str(root["path"]).rstrip("/")
