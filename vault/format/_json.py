"""JSON documents as a vault stores them: parsed within the limits of
``vault/format/_limits.py``, the digest a record keeps of its own content, and the int rule of
every count, length and checksum in them.

Pure data: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, TypeGuard

from vault._errors import VaultCorruptError
from vault.format._limits import (
    MAX_EXTENT,
    MAX_RECORD_BYTES,
    MAX_RECORD_DEPTH,
    json_depth,
    max_json_depth,
)

DIGEST = "digest"  # a record's checksum of its own content


def is_int(value: Any, minimum: int) -> TypeGuard[int]:
    """An int (not a bool) in ``[minimum, MAX_EXTENT]``."""
    if type(value) is int:  # what JSON gives: no subclass (a bool) to refuse
        return minimum <= value <= MAX_EXTENT
    return isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= MAX_EXTENT


def is_int_list(value: Any, minimum: int) -> TypeGuard[list[int]]:
    """A list of ints as :func:`is_int` takes them."""
    if not isinstance(value, list):
        return False
    for x in value:
        if type(x) is not int or not minimum <= x <= MAX_EXTENT:
            return all(is_int(y, minimum) for y in value)  # the rest of the rule decides
    return True


def group_json(attributes: dict[str, Any] | None = None, compact: bool = False) -> bytes:
    """A Zarr v3 group's ``zarr.json`` with these attributes: indented for a person to read,
    or ``compact`` (no whitespace: the commit record, written by every append, which Python's
    JSON encoder writes about five times faster without indentation)."""
    doc: dict[str, Any] = {"zarr_format": 3, "node_type": "group"}
    if attributes:
        doc["attributes"] = attributes
    if compact:
        return _COMPACT.encode(doc).encode()
    return json.dumps(doc, indent=1, sort_keys=True).encode()


def digest(doc: dict[str, Any]) -> str:
    """The checksum a record keeps of its own content (every key but ``digest``)."""
    body = {k: v for k, v in doc.items() if k != DIGEST}
    return hashlib.sha256(_CANONICAL.encode(body).encode()).hexdigest()[:32]


_COMPACT = json.JSONEncoder(sort_keys=True, separators=(",", ":"), check_circular=False)

_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), allow_nan=True, check_circular=False
)
"""What a digest is taken of: ``json.dumps(body, sort_keys=True, separators=(",", ":"))``
(records are trees of JSON values: no cycle to look for)."""


def digest_problems(doc: dict[str, Any], required: bool) -> list[str]:
    """Why ``doc`` does not match its own digest (none when it does, or when it has none and
    none is ``required``)."""
    stored = doc.get(DIGEST)
    if stored is None:
        return [f"it has no {DIGEST} (every record of this format version has one)"] * required
    if stored != digest(doc):
        got = digest(doc)
        return [
            f"its content does not match its {DIGEST} (edited or damaged): {stored!r} != {got!r}"
        ]
    return []


def parse_json(raw: bytes, where: object, key: str = "") -> dict[str, Any]:
    """A JSON object from ``raw``; anything else (not JSON, larger than
    ``MAX_RECORD_BYTES``, nested deeper than ``MAX_RECORD_DEPTH``) is VaultCorruptError naming
    ``where`` (a location, or anything that prints as one: made into text only for a message)
    and ``key``."""
    if len(raw) > MAX_RECORD_BYTES:
        raise VaultCorruptError(
            f"{_named(where, key)} is {len(raw)} bytes, more than a metadata document can be "
            f"({MAX_RECORD_BYTES}): not a vault's record. Restore the vault from a copy."
        )
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise VaultCorruptError(f"{_named(where, key)} is not valid JSON: {err}") from None
    except RecursionError:
        doc = None
    # the walk over the parsed document only where the text's brackets could nest too deep
    shallow = doc is not None and max_json_depth(raw) <= MAX_RECORD_DEPTH
    if not shallow and (doc is None or json_depth(doc) > MAX_RECORD_DEPTH):
        raise VaultCorruptError(
            f"{_named(where, key)} nests objects and lists more than {MAX_RECORD_DEPTH} levels "
            "deep: not a vault's record. Restore the vault from a copy."
        )
    if not isinstance(doc, dict):
        raise VaultCorruptError(f"{_named(where, key)}: expected a JSON object")
    return doc


def _named(where: object, key: str) -> str:
    return f"{where}/{key}" if key else str(where)
