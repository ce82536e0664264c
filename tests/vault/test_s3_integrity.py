"""Integrity and request economy of vaults on a real S3 server (SeaweedFS on loopback, the
``s3_env`` fixture of ``tests/conftest.py``).

On S3 a read fetches each chunk object once and checks its place from the very bytes it
decodes, and an append writes chunks it encoded in memory (``vault/storage/_relay.py``,
``vault/storage/_relay_write.py``). These tests hold that to the same guarantees as on disk: a chunk
swapped with another, deleted, or put back as an older version never reads back silently (by
``read_numpy``, ``read``, a stream or ``verify``); they count the requests (one GET per chunk
object on a read; one GET, the lease check, per append); and they show that a writer closing
after a takeover cannot cut the new holder's arrays (its trim is fenced).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tensorstore as ts

import vault
from vault import Vault, VaultCorruptError, parse_location
from vault.format import _tags
from vault.testing import S3TestServer

ROWS = 4
CHUNK = {"obs": [2, 8, 3], "item": [4, 8, 1, 2], "done": [4, 8]}
EXAMPLE = {
    "obs": np.zeros(3, np.float32),
    "item": np.zeros((2, 2), np.int16),
    "done": np.zeros((), bool),
}


def data(t0: int, n: int) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)``: every value a function of (row, t)."""
    t = np.arange(t0, t0 + n)[None, :]
    rows = np.arange(ROWS)[:, None]
    return {
        "obs": (t[..., None] * 10.0 + rows[..., None] + np.arange(3) / 4).astype(np.float32),
        "item": ((t + 7 * rows)[..., None, None] + np.arange(4).reshape(2, 2)).astype(np.int16),
        "done": (t + rows) % 5 == 4,
    }


def make(server: S3TestServer, *sizes: int) -> str:
    loc = f"s3://{server.bucket}/integrity-{uuid.uuid4().hex[:10]}/v"
    with Vault.create(loc, EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done") as v:
        start = 0
        for n in sizes:
            v.append(data(start, n))
            start += n
    return loc


def kv(loc: str) -> Any:
    return parse_location(loc).kvstore()


def get(loc: str, key: str) -> bytes:
    got = kv(loc).read(key).result()
    assert got.state == "value", key
    return bytes(got.value)


def put(loc: str, key: str, value: bytes | None) -> None:
    kv(loc).write(key, value).result()


def reads_of_every_kind(loc: str) -> list[Callable[[], Any]]:
    """Fresh readers (nothing checked yet) reading everything: numpy, a buffer state, one
    epoch of a stream, and ``verify`` (raising for a problem, as the reads do)."""

    def stream() -> None:
        with Vault.open(loc).as_dataset(8, 1, shuffle=False, epochs=1) as batches:
            for _ in batches:
                pass

    def verified() -> None:
        report = vault.verify(loc)
        if not report.ok:
            raise VaultCorruptError("; ".join(p.message for p in report.problems))

    return [
        lambda: Vault.open(loc).read_numpy(),
        lambda: Vault.open(loc).read(),
        stream,
        verified,
    ]


def all_fail(loc: str, message: str) -> None:
    for read in reads_of_every_kind(loc):
        with pytest.raises(VaultCorruptError, match=message):
            read()


def test_a_sound_vault_reads_back_exactly(s3_env: S3TestServer) -> None:
    loc = make(s3_env, 10, 13, 7)
    want = data(0, 30)
    got = Vault.open(loc).read_numpy()
    for name, values in want.items():
        np.testing.assert_array_equal(got[name], values)
    rows = Vault.open(loc).read_numpy(rows=[3, 0], start=5, stop=29)
    np.testing.assert_array_equal(rows["item"], want["item"][[3, 0], 5:29])
    for read in reads_of_every_kind(loc):
        read()


def test_a_chunk_swapped_with_another_never_reads_back(s3_env: S3TestServer) -> None:
    loc = make(s3_env, 10, 13, 7)  # 30 timesteps: chunks 0-2 complete, 3 the edge
    put(loc, "experience/obs/c/1/0/0", get(loc, "experience/obs/c/1/2/0"))
    all_fail(loc, re.escape("experience/obs/c/1/0/0 (timesteps 0-7) is not the chunk written"))


def test_a_deleted_chunk_never_reads_back(s3_env: S3TestServer) -> None:
    loc = make(s3_env, 10, 13, 7)
    put(loc, "experience/item/c/0/1/1/0", None)  # the second item chunk of a column
    all_fail(loc, re.escape("experience/item/c/0/1/1/0") + ".* is missing")
    loc = make(s3_env, 10, 13, 7)
    put(loc, "experience/done/c/0/3", None)  # the partly filled last chunk
    all_fail(loc, re.escape("experience/done/c/0/3") + ".* is missing")


def test_a_stale_chunk_never_reads_back(s3_env: S3TestServer) -> None:
    """A chunk put back as it was at an earlier commit: completed since (its tag binds the
    complete version), or the partly filled last chunk rewritten since."""
    loc = make(s3_env, 10, 13)  # 23: chunk 2 is the edge
    old = get(loc, "experience/obs/c/0/2/0")
    with Vault.open(loc, "a") as v:
        v.append(data(23, 4))  # 27: chunk 2 complete
    put(loc, "experience/obs/c/0/2/0", old)
    all_fail(loc, re.escape("experience/obs/c/0/2/0 (timesteps 16-23) is not the chunk written"))

    loc = make(s3_env, 10, 15)  # 25: chunk 3 is the edge
    old = get(loc, "experience/item/c/0/3/0/0")
    with Vault.open(loc, "a") as v:
        v.append(data(25, 4))  # 29: still chunk 3
    put(loc, "experience/item/c/0/3/0/0", old)
    all_fail(loc, "partly filled chunk")


def test_a_damaged_checksum_chunk_never_passes(s3_env: S3TestServer) -> None:
    loc = make(s3_env, 600, 600)  # more place tags than the commit record keeps: written
    key = "tags/experience/obs/c/0/0"
    raw = bytearray(get(loc, key))
    raw[0] ^= 1
    put(loc, key, bytes(raw))
    all_fail(loc, re.escape(f"checksum chunk {key} is corrupt"))


# ---------------------------------------------------------------------------- requests
def requests() -> dict[str, int]:
    """TensorStore's counts of S3 requests in this process so far."""
    out = {}
    for metric in ts.experimental_collect_matching_metrics("/tensorstore/kvstore/s3/"):
        values = metric.get("values", [{}])
        if values and "value" in values[0]:
            out[metric["name"].rsplit("/", 1)[-1]] = int(values[0]["value"])
    return out


def test_a_read_gets_each_chunk_once_and_an_append_checks_only_the_lease(
    s3_env: S3TestServer,
) -> None:
    loc = make(s3_env, 40, 40, 40)  # 120 timesteps: 15 time chunks
    keys = [bytes(k).decode() for k in kv(loc).list().result()]
    chunks = [k for k in keys if k.startswith("experience/") and "/c/" in k]
    arrays = 3 + 2  # leaves and the episode index
    before = requests()
    out = Vault.open(loc).read_numpy()
    gets = requests()["read"] - before.get("read", 0)
    np.testing.assert_array_equal(out["obs"], data(0, 120)["obs"])
    # each chunk once; then the manifest, the commit record, each array's metadata and
    # each leaf's tag chunk (a ranged GET per chunk would double the count)
    assert len(chunks) <= gets <= len(chunks) + 2 + arrays + 3, (gets, len(chunks))

    with Vault.open(loc, "a") as v:
        v.append(data(120, 5))  # the first append of a writer fetches what it keeps
        for t in range(125, 165, 8):
            before = requests()
            v.append(data(t, 8))
            after = requests()
            assert after["read"] - before["read"] == 1  # the lease check, nothing read back
    np.testing.assert_array_equal(Vault.open(loc).read_numpy()["item"], data(0, 165)["item"])
    assert vault.verify(loc).ok


# ---------------------------------------------------------------------------- writers
def shapes(loc: str) -> dict[str, int]:
    return {
        name: json.loads(get(loc, f"experience/{name}/zarr.json"))["shape"][1] for name in EXAMPLE
    }


@pytest.mark.parametrize("new_writer_appends_first", [True, False])
def test_a_writer_closing_after_a_takeover_cannot_cut_the_new_holders_arrays(
    s3_env: S3TestServer, new_writer_appends_first: bool
) -> None:
    """The old writer passed its checks (lease held, commit record its own) and is about to
    cut its arrays to its 10 timesteps when its lease is broken and a new writer appends
    past them: the cut must not land on the new writer's arrays."""
    loc = make(s3_env)
    old = Vault.open(loc, "a")
    old.append(data(0, 10))  # arrays grown past 10 timesteps
    assert min(shapes(loc).values()) > 10
    taken: list[Vault] = []

    def takeover(point: str, info: dict[str, Any], step: Callable[[], Any]) -> Any:
        if point == "trim" and not taken:
            assert vault.break_lock(loc)
            taken.append(Vault.open(loc, "a"))
            if new_writer_appends_first:
                taken[0].append(data(10, 14))
        return step()

    previous = vault.set_fault_hook(takeover)
    try:
        old.close()
    finally:
        vault.set_fault_hook(previous)
    (new,) = taken
    new.append(data(24 if new_writer_appends_first else 10, 6))
    length = 30 if new_writer_appends_first else 16
    assert min(shapes(loc).values()) >= length
    reader = Vault.open(loc)
    assert reader.committed_length == length
    np.testing.assert_array_equal(reader.read_numpy()["obs"], data(0, length)["obs"])
    new.close()  # the holder's own trim: exactly the committed length
    assert shapes(loc) == dict.fromkeys(EXAMPLE, length)
    assert vault.verify(loc).ok


def test_a_claim_whose_metadata_changed_after_it_was_read_claims_it_again(
    s3_env: S3TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer's first append reads every array's metadata early and claims it with
    conditional writes while its chunks go out. If the metadata changed in between (the
    previous holder's close landing late), the claim reads it again and claims what is there
    now: the writer's later growth, fenced on the generations it claimed, still succeeds."""
    from vault.storage._relay_write import WRITER_ATTR, WriteRelay

    loc = make(s3_env, 10)
    key = "experience/obs/zarr.json"
    stage = WriteRelay.stage
    moved: list[str] = []

    def stage_after_a_late_write(self: WriteRelay, *args: Any) -> None:
        if not moved:  # after the claim's reads, before its writes
            doc = json.loads(get(loc, key))
            doc["attributes"] = {**doc.get("attributes", {}), "late": True}
            kv(loc).write(key, json.dumps(doc).encode()).result()
            moved.append(key)
        stage(self, *args)

    monkeypatch.setattr(WriteRelay, "stage", stage_after_a_late_write)
    with Vault.open(loc, "a") as v:
        v.append(data(10, 3))
        claimed = json.loads(get(loc, key))["attributes"]
        assert claimed["late"] is True  # claimed again from what was there
        assert claimed[WRITER_ATTR] == v._writer._relay.nonce  # type: ignore[union-attr]
        v.append(data(13, 60))  # grows every array: conditional on the claimed generations
    got = Vault.open(loc).read_numpy()
    for name, values in data(0, 73).items():
        np.testing.assert_array_equal(got[name], values)
    assert vault.verify(loc).ok


@pytest.mark.parametrize("point", ["resize", "index", "tags", "commit"])
def test_an_append_that_fails_part_way_leaves_the_next_one_exact(
    s3_env: S3TestServer, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the writer keeps in memory between appends (the partly filled chunks, the last
    tag chunk, the arrays' metadata) is dropped when an append fails: the next append and a
    new writer continue from what is stored. (At most 4 tags kept in the commit record, so
    that appends write tag chunks: ``"tags"``.)"""
    monkeypatch.setattr(_tags, "PENDING_MAX", 4)
    loc = make(s3_env, 10)
    failed: list[str] = []

    def fail_once(name: str, info: dict[str, Any], step: Callable[[], Any]) -> Any:
        if name == point and not failed:
            failed.append(name)
            if name == "commit":
                step()  # the record replaced, then the writer is told it failed
            raise OSError(f"injected failure at {name}")
        return step()

    with Vault.open(loc, "a") as v:
        v.append(data(10, 3))
        previous = vault.set_fault_hook(fail_once)
        try:
            with pytest.raises(vault.VaultError):
                v.append(data(13, 40))  # grows every array, ends episodes, completes chunks
        finally:
            vault.set_fault_hook(previous)
        assert failed == [point]
        at = v.committed_length
        assert at in (13, 53)
        v.append(data(at, 9))
        v.append(data(at + 9, 2))
    with Vault.open(loc, "a") as v:  # a new writer: what it keeps comes from the store
        v.append(data(at + 11, 5))
    end = at + 16
    got = Vault.open(loc).read_numpy()
    for name, values in data(0, end).items():
        np.testing.assert_array_equal(got[name], values)
    episodes = Vault.open(loc).episodes()
    assert len(episodes) == int(data(0, end)["done"].sum())
    assert vault.verify(loc).ok
