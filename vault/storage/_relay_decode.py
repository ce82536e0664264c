"""Chunk objects of a leaf decoded in Python, for the S3 relay (``vault/storage/_relay.py``).

A vault's leaves are written with the codec chain of ``vault.storage._arrays.codec_chain``:
``bytes`` (little endian), then at most one of zstd, gzip or blosc, then ``crc32c``. For such a
chain the relay decodes a chunk it fetched itself: its crc32c checked (``google_crc32c``), its body
decompressed (numcodecs for zstd and blosc, ``zlib`` for gzip) into a buffer this thread
reuses (fresh buffers of a chunk's size cost more in page faults than the decoding) or, where
the chunk's region of the destination is one contiguous block, straight into it; the decoded
size must be the chunk's. Any other chain (a vault written by other tools) is decoded by
TensorStore (:func:`chunk_codec` returns None).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import threading
import zlib
from typing import Any

import numpy as np

COMPRESSORS = ("zstd", "gzip", "blosc")
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# crc32c of any bytes followed by their own crc32c (little endian): checking a stored chunk
# whole this way needs no copy of its body
CRC32C_RESIDUE = 0x48674BC7
BLOSC_HEADER = 16  # version, versionlz, flags, typesize, nbytes, blocksize, cbytes (uint32 LE)

_local = threading.local()


@dataclasses.dataclass(frozen=True)
class ChunkCodec:
    """How one leaf's chunk objects are decoded: its compressor (None: raw little-endian
    bytes), the dtype and shape of a chunk, and a chunk's decoded size."""

    compressor: str | None
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def chunk_codec(dtype: str, chunk: tuple[int, ...], codecs: Any) -> ChunkCodec | None:
    """The decoder of a leaf of ``dtype`` with chunk shape ``chunk`` and codec chain
    ``codecs`` (zarr v3 JSON), or None when the chain is not one this module decodes (or
    this machine is big-endian)."""
    if sys.byteorder != "little":
        return None
    chain = [dict(c) for c in codecs]
    if len(chain) not in (2, 3) or chain[-1] != {"name": "crc32c"}:
        return None
    first = chain[0]
    if first.get("name") != "bytes" or (first.get("configuration") or {}).get(
        "endian", "little"
    ) not in ("little", None):
        return None
    compressor = chain[1].get("name") if len(chain) == 3 else None
    if compressor is not None and compressor not in COMPRESSORS:
        return None
    kind = np.dtype(dtype)
    if kind.kind not in "biuf":
        return None
    return ChunkCodec(compressor, kind.newbyteorder("<"), tuple(int(n) for n in chunk))


def buffer(nbytes: int) -> np.ndarray:
    """This thread's reusable decode buffer, at least ``nbytes`` long (``uint8``)."""
    held = getattr(_local, "buffer", None)
    if held is None or held.nbytes < nbytes:
        held = np.empty(nbytes, np.uint8)
        _local.buffer = held
    return held[:nbytes]


def decode(codec: ChunkCodec, raw: bytes, into: np.ndarray | None = None) -> np.ndarray | str:
    """The chunk stored as ``raw`` (body, then its crc32c), decoded: an array of
    ``codec.shape``, written into ``into`` (a C-contiguous array of that shape and dtype)
    when given, else a view of this thread's buffer (valid until its next decode) or of
    ``raw``. A string says what is wrong instead: the checksum does not match, or the body
    does not decode to exactly one chunk."""
    import google_crc32c

    if len(raw) < 4:
        return f"it is {len(raw)} bytes long"
    if google_crc32c.value(raw) != CRC32C_RESIDUE:
        return "its crc32c does not match"
    body = memoryview(raw)[:-4]
    nbytes = codec.nbytes
    if codec.compressor is None:
        if len(body) != nbytes:
            return f"it holds {len(body)} bytes, not {nbytes}"
        flat = np.frombuffer(body, codec.dtype).reshape(codec.shape)
        if into is None:
            return flat
        into[...] = flat
        return into
    out = buffer(nbytes) if into is None else into.reshape(-1).view(np.uint8)
    try:
        problem = _decompress(codec.compressor, body, out)
    except (RuntimeError, ValueError, EOFError, zlib.error) as err:  # a damaged frame
        problem = f"it does not decode ({type(err).__name__}: {err})"
    if problem is not None:
        return problem
    return out.view(codec.dtype).reshape(codec.shape) if into is None else into


def _decompress(compressor: str, body: memoryview, out: np.ndarray) -> str | None:
    """Decompress ``body`` into ``out`` (uint8, the chunk's exact decoded size): None when
    done, else what is wrong."""
    nbytes = out.nbytes
    if compressor == "blosc":
        from numcodecs import Blosc

        if len(body) < BLOSC_HEADER:
            return f"its blosc frame is {len(body)} bytes long"
        size = int.from_bytes(body[4:8], "little")
        cbytes = int.from_bytes(body[12:16], "little")
        if size != nbytes or cbytes != len(body):
            return f"its blosc frame holds {size} bytes in {cbytes}, not {nbytes} in {len(body)}"
        Blosc().decode(body, out=out)
        return None
    if compressor == "zstd":
        from numcodecs import Zstd

        declared = zstd_content_size(body)
        if declared is not None and declared != nbytes:
            return f"its zstd frame holds {declared} bytes, not {nbytes}"
        # into the chunk's buffer, whether or not the frame says its size: a frame that
        # decodes to more (or less) fails here, so a small object never expands without bound
        Zstd().decode(body, out=out)
        return None
    inflate = zlib.decompressobj(31)  # gzip: header, deflate stream, trailer
    whole = np.frombuffer(inflate.decompress(body, nbytes + 1), np.uint8)
    if not inflate.eof or inflate.unused_data or inflate.unconsumed_tail:
        return "its gzip stream does not end where the chunk does"
    if whole.nbytes != nbytes:
        return f"it decodes to {whole.nbytes} bytes, not {nbytes}"
    out[:] = whole
    return None


def zstd_content_size(body: memoryview) -> int | None:
    """The content size a zstd frame's header declares (RFC 8878, 3.1.1.1), or None when the
    header has none (or ``body`` does not start with a zstd frame: decoding then fails)."""
    if len(body) < 6 or bytes(body[:4]) != ZSTD_MAGIC:
        return None
    descriptor = body[4]
    flag, single = descriptor >> 6, (descriptor >> 5) & 1
    size = (1 if single else 0, 2, 4, 8)[flag]
    if size == 0:
        return None
    at = 5 + (0 if single else 1) + (0, 1, 2, 4)[descriptor & 3]
    if len(body) < at + size:
        return None
    value = int.from_bytes(body[at : at + size], "little")
    return value + 256 if size == 2 else value
