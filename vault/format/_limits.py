"""The limits within which a vault is opened, whatever its metadata says (``docs/safety.md``):
the size and nesting of metadata documents, the size of a chunk, ranks, dtypes and codec
chains. ``Vault.create`` never makes a vault beyond them.

Pure data: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

MAX_RECORD_BYTES = 16 << 20
"""The largest metadata document read (a manifest, a commit record, an array's ``zarr.json``,
a tag, a history record): a larger one is :class:`~vault.VaultCorruptError` before it is
parsed."""
MAX_RECORD_DEPTH = 96
"""The deepest nesting of objects and lists in a metadata document (user metadata is at
most 64 levels deep, the structure at most ``MAX_STRUCTURE_DEPTH``)."""
MAX_STRUCTURE_DEPTH = 32
"""The deepest nesting of containers in a stored pytree structure."""
MAX_CHUNK_BYTES = 1 << 30
"""The largest decoded chunk (a chunk is encoded and decoded whole; blosc stops at 2 GiB)."""
MAX_EXTENT = 1 << 53
"""The largest number of rows, timesteps, episodes or values along an item axis (exact as a
float64; TensorStore's indices stop at 2**62)."""
MAX_RANK = 32  # TensorStore's largest rank: [rows, time, *item] holds at most 30 item axes
DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
)
"""The leaf dtypes a vault stores (numpy names)."""
COMPRESSOR_CODECS = ("zstd", "gzip", "blosc")


def max_encoded_bytes(decoded: int) -> int:
    """The most bytes a chunk of ``decoded`` bytes takes encoded by any codec chain a vault
    uses (zstd, gzip and blosc expand incompressible data by well under 1/64; plus a header
    and the crc32c): a larger chunk file is not a chunk."""
    return decoded + decoded // 64 + 4096


def indices(counts: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every index of a grid of ``counts``, in C order, one at a time: a claimed grid of
    any size costs only what is taken from it (``itertools.product`` and ``np.ndindex`` list
    each axis's range first)."""
    if any(n <= 0 for n in counts):
        return
    at = [0] * len(counts)
    while True:
        yield tuple(at)
        axis = len(at) - 1
        while axis >= 0:
            at[axis] += 1
            if at[axis] < counts[axis]:
                break
            at[axis] = 0
            axis -= 1
        if axis < 0:
            return


def json_depth(doc: Any) -> int:
    """How deep objects and lists nest in ``doc`` (a scalar: 0), without recursion: one level
    at a time, only containers visited twice (a scalar is looked at once, never queued)."""
    level = [doc] if isinstance(doc, _CONTAINERS) else []
    depth = 0
    while level:
        depth += 1
        below = []
        for node in level:
            for child in node.values() if isinstance(node, dict) else node:
                if isinstance(child, _CONTAINERS):
                    below.append(child)
        level = below
    return depth


_CONTAINERS = (dict, list)


def max_json_depth(raw: bytes | str) -> int:
    """An upper bound of how deep objects and lists can nest in the JSON text ``raw``, from
    its text alone: every object and list opens with a ``{`` or ``[`` outside strings, and the
    byte of each is in the text whatever its encoding (UTF-8, -16 or -32), so their count bounds
    the nesting (and any bracket inside a string only raises the bound)."""
    if isinstance(raw, str):
        return raw.count("{") + raw.count("[")
    return raw.count(b"{") + raw.count(b"[")


def codec_problems(codecs: Any) -> list[str]:
    """Why ``codecs`` is not a chain a vault writes: ``bytes``, at most one of zstd, gzip or
    blosc, then ``crc32c`` (every chunk carries its checksum)."""
    names = (
        [c.get("name") for c in codecs]
        if isinstance(codecs, list) and all(isinstance(c, dict) for c in codecs)
        else None
    )
    if (
        names is None
        or len(names) not in (2, 3)
        or names[0] != "bytes"
        or names[-1] != "crc32c"
        or (len(names) == 3 and names[1] not in COMPRESSOR_CODECS)
    ):
        allowed = ", ".join(COMPRESSOR_CODECS)
        return [f"codecs must be bytes, at most one of {allowed}, then crc32c; got {codecs!r}"]
    return []
