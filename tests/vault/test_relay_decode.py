"""Chunks decoded by the S3 relay itself (``vault/storage/_relay_decode.py``) are bit-identical to
TensorStore's decoding, for every codec a vault can be created with, and a chunk that is
damaged never decodes silently.

The decoder is checked against chunks TensorStore encoded (a real in-memory zarr3 array); the
relay against the data written and against TensorStore decoding the same vault
(``vault.storage._relay.DIRECT = False``) on the real S3 server (``s3_env``): dtypes of every kind a
vault takes, items of several dimensions, chunks that cut item axes and row blocks that do
not divide the rows, partial chunks at the committed end and at the item axes' ends, subsets
and reorderings of rows, ranges of timesteps, and streams.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import google_crc32c
import numpy as np
import pytest
import tensorstore as ts

from vault import Vault, VaultCorruptError
from vault.storage import _relay, _relay_decode
from vault.storage._arrays import CODECS, codec_chain
from vault.testing import S3TestServer
from vault.write._create import LEVELS

COMPRESSORS = [None, *sorted(LEVELS)]  # every codec of Vault.create(codec=...)
DTYPES = ["bool", "uint8", "int16", "uint32", "int64", "float16", "float32", "float64"]


def random_bits(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Values of ``dtype`` from random bytes (floats: NaNs with payloads, infinities,
    subnormals); booleans 0 or 1."""
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    kind = np.dtype(dtype)
    raw = rng.integers(0, 256, (*shape, kind.itemsize), np.uint8)
    return raw.view(kind).reshape(shape)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def stored_chunk(
    values: np.ndarray, codecs: list[dict[str, Any]], chunk: list[int]
) -> tuple[bytes, np.ndarray]:
    """Chunk ``0...`` of a TensorStore zarr3 array (in memory) holding ``values``: its stored
    bytes, and TensorStore's decoding of the chunk (its part inside the array)."""
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "memory"},
        "metadata": {
            "shape": list(values.shape),
            "data_type": values.dtype.name,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}},
            "codecs": codecs,
        },
        "store_data_equal_to_fill_value": True,
    }
    array = ts.open(spec, create=True, context=ts.Context()).result()
    array.write(values).result()
    key = "c/" + "/".join("0" * len(chunk))
    raw = array.kvstore.read(key).result().value
    inside = tuple(slice(0, min(n, c)) for n, c in zip(values.shape, chunk, strict=True))
    whole = array[inside].read().result()
    return bytes(raw), np.asarray(whole)


def compressor_levels() -> Iterator[tuple[str | None, int | None]]:
    yield None, None
    for name, (low, high) in sorted(LEVELS.items()):
        yield name, max(low, -5)
        yield name, high


@pytest.mark.parametrize(("compressor", "level"), list(compressor_levels()))
def test_the_decoder_gives_tensorstores_bits(compressor: str | None, level: int | None) -> None:
    rng = np.random.default_rng(7)
    for dtype in DTYPES:
        chunk = [3, 8, 2, 3]
        values = random_bits(rng, (3, 8, 2, 3), dtype)
        values.flat[:5] = values.flat[0]  # some runs: compressors take another path
        codecs = codec_chain(compressor, level)
        raw, want = stored_chunk(values, codecs, chunk)
        codec = _relay_decode.chunk_codec(dtype, tuple(chunk), codecs)
        assert codec is not None
        got = _relay_decode.decode(codec, raw)
        assert isinstance(got, np.ndarray), got
        assert same_bits(got, want), (compressor, dtype)
        assert same_bits(got, values), (compressor, dtype)
        into = np.empty(chunk, dtype)
        assert _relay_decode.decode(codec, raw, into) is into
        assert same_bits(into, want)


def test_an_edge_chunk_decodes_whole_with_its_fill() -> None:
    """A chunk past the array's end (time or item axes) is stored whole: the decoder gives
    TensorStore's full chunk, fill included."""
    values = np.arange(2 * 5 * 3, dtype=np.int32).reshape(2, 5, 3) + 1
    for compressor in COMPRESSORS:
        codecs = codec_chain(compressor, None)
        raw, _ = stored_chunk(values, codecs, [2, 8, 4])
        codec = _relay_decode.chunk_codec("int32", (2, 8, 4), codecs)
        assert codec is not None
        got = _relay_decode.decode(codec, raw)
        assert isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got[:, :5, :3], values)
        assert not got[:, 5:].any()
        assert not got[:, :, 3:].any()


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_a_damaged_chunk_is_refused_not_decoded(compressor: str | None) -> None:
    values = np.arange(4 * 16, dtype=np.float32).reshape(4, 16)
    codecs = codec_chain(compressor, None)
    raw, _ = stored_chunk(values, codecs, [4, 16])
    codec = _relay_decode.chunk_codec("float32", (4, 16), codecs)
    assert codec is not None
    for i in (0, len(raw) // 2, len(raw) - 5, len(raw) - 1):
        flipped = bytearray(raw)
        flipped[i] ^= 0x10
        assert _relay_decode.decode(codec, bytes(flipped)) == "its crc32c does not match"
    assert _relay_decode.decode(codec, raw[:3]) == "it is 3 bytes long"

    def resealed(body: bytes) -> bytes:  # a body with a valid checksum of its own
        return body + google_crc32c.value(body).to_bytes(4, "little")

    body = raw[:-4]
    for bad in (body[: len(body) // 2], body + b"\0" * 8, b"\0" * 16, b""):
        problem = _relay_decode.decode(codec, resealed(bad))
        assert isinstance(problem, str), (compressor, len(bad))
    # a sound frame of another size: the chunk of another array
    other, _ = stored_chunk(np.zeros((4, 8), np.float32), codecs, [4, 8])
    problem = _relay_decode.decode(codec, other)
    assert isinstance(problem, str)
    assert "not" in problem, problem


def test_only_known_codec_chains_are_decoded_here() -> None:
    crc = {"name": "crc32c"}
    little = {"name": "bytes", "configuration": {"endian": "little"}}
    assert _relay_decode.chunk_codec("int16", (2, 4), [little, crc]) is not None
    for name in CODECS:
        chain = codec_chain(name, 1)
        assert _relay_decode.chunk_codec("int16", (2, 4), chain) is not None
    unknown = [
        [little],  # no checksum
        [{"name": "bytes", "configuration": {"endian": "big"}}, crc],
        [{"name": "transpose", "configuration": {"order": [1, 0]}}, little, crc],
        [little, {"name": "zstd", "configuration": {"level": 1}}, CODECS["gzip"](1), crc],
        [little, {"name": "lzma"}, crc],
        [{"name": "sharding_indexed", "configuration": {}}],
    ]
    for chain in unknown:
        assert _relay_decode.chunk_codec("int16", (2, 4), chain) is None, chain


def test_the_zstd_content_size_is_read_from_the_frame_header() -> None:
    from numcodecs import Zstd

    for n in (0, 1, 255, 256, 300, 65791, 65792, 70000, 5 << 20):
        frame = memoryview(Zstd(level=1).encode(np.zeros(n, np.uint8)))
        assert _relay_decode.zstd_content_size(frame) == n
    assert _relay_decode.zstd_content_size(memoryview(b"not a zstd frame")) is None


# ---------------------------------------------------------------------------- on S3
ROWS = 7
LENGTH = 37  # time chunks of 8: four complete, one partly filled


def example() -> dict[str, np.ndarray]:
    return {
        "flag": np.zeros((), bool),
        "pixels": np.zeros((4,), np.uint8),
        "grid": np.zeros((2, 5), np.int16),
        "count": np.zeros((), np.uint32),
        "big": np.zeros((3,), np.int64),
        "half": np.zeros((5,), np.float16),
        "value": np.zeros((), np.float32),
        "vec": np.zeros((2, 3), np.float64),
    }


CHUNK = {
    "flag": [7, 8],
    "pixels": [1, 8, 4],  # one row per chunk, whole items: decoded straight into place
    "grid": [3, 8, 1, 2],  # cuts both item axes (5 = 2 + 2 + 1) and the rows (7 = 3 + 3 + 1)
    "count": [2, 8],
    "big": [7, 8, 2],
    "half": [4, 8, 5],
    "value": [7, 8],
    "vec": [1, 8, 2, 3],
}


def written(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        name: random_bits(rng, (ROWS, LENGTH, *leaf.shape), leaf.dtype.name)
        for name, leaf in example().items()
    }


def read_all_ways(loc: str) -> list[Any]:
    """Every read of the tests, each from a fresh open (nothing checked or decoded yet)."""
    out = [Vault.open(loc).read_numpy()]
    for rows in ([6, 0, 3], [2, 2, 5], slice(1, 7, 2), slice(None, None, -1), [4]):
        out.append(Vault.open(loc).read_numpy(rows=rows, start=3, stop=35))
    out.append(Vault.open(loc).read_numpy(start=16, stop=24))  # one whole time chunk
    out.append(Vault.open(loc).read_numpy(last=5))  # the partly filled chunk only
    batches = []
    with Vault.open(loc).as_dataset(4, 3, shuffle=False, epochs=1) as stream:
        for batch in stream:
            batches.append({k: np.asarray(v) for k, v in batch.experience.items()})
    out.append(batches)
    return out


def expected_reads(data: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    def pick(rows: Any, t0: int, t1: int) -> dict[str, np.ndarray]:
        return {k: v[rows, t0:t1] for k, v in data.items()}

    out = [pick(slice(None), 0, LENGTH)]
    for rows in ([6, 0, 3], [2, 2, 5], slice(1, 7, 2), slice(None, None, -1), [4]):
        out.append(pick(rows, 3, 35))
    out.append(pick(slice(None), 16, 24))
    out.append(pick(slice(None), LENGTH - 5, LENGTH))
    return out


@pytest.fixture
def direct_and_tensorstore() -> Iterator[None]:
    yield
    _relay.DIRECT = True


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_reads_from_s3_are_bit_identical_for_every_codec(
    s3_env: S3TestServer, compressor: str | None, direct_and_tensorstore: None
) -> None:
    data = written(np.random.default_rng(COMPRESSORS.index(compressor)))
    loc = f"s3://{s3_env.bucket}/relay-{uuid.uuid4().hex[:10]}/v"
    with Vault.create(loc, example(), rows=ROWS, chunk=CHUNK, codec=compressor) as v:
        for t0, t1 in ((0, 11), (11, 30), (30, LENGTH)):
            v.append({k: x[:, t0:t1] for k, x in data.items()})
    assert all(_relay.leaf_codec(Vault.open(loc).snapshot, f"experience/{k}") for k in data)

    direct = read_all_ways(loc)
    _relay.DIRECT = False
    through_tensorstore = read_all_ways(loc)
    _relay.DIRECT = True

    for got, other, want in zip(direct, through_tensorstore, expected_reads(data), strict=False):
        for name in data:
            assert same_bits(got[name], want[name]), (compressor, name)
            assert same_bits(other[name], want[name]), (compressor, name)
    streamed, other_stream = direct[-1], through_tensorstore[-1]
    assert len(streamed) == len(other_stream) > 0
    for a, b in zip(streamed, other_stream, strict=True):
        for name in data:
            assert same_bits(a[name], b[name]), (compressor, name)


def test_a_chunk_damaged_on_s3_never_reads_back(s3_env: S3TestServer) -> None:
    """A byte flipped inside a stored chunk (its stored checksum and its place unchanged),
    in a complete chunk and in the partly filled one at the end."""
    data = written(np.random.default_rng(3))
    loc = f"s3://{s3_env.bucket}/relay-{uuid.uuid4().hex[:10]}/v"
    with Vault.create(loc, example(), rows=ROWS, chunk=CHUNK) as v:
        v.append(data)
    kv = Vault.open(loc).snapshot.location.kvstore()
    for key in ("experience/vec/c/2/1/0/0", "experience/grid/c/1/4/1/0"):
        raw = bytearray(kv.read(key).result().value)
        raw[len(raw) // 2] ^= 0x01
        kv.write(key, bytes(raw)).result()
        name = key.split("/c/")[1].replace("/", r"\.")
        with pytest.raises(VaultCorruptError, match=f"chunk {name} is corrupt"):
            Vault.open(loc).read_numpy()
        with pytest.raises(VaultCorruptError, match="corrupt"):
            Vault.open(loc).read_numpy(rows=[2, 3, 4])
        raw[len(raw) // 2] ^= 0x01
        kv.write(key, bytes(raw)).result()
        Vault.open(loc).read_numpy()
