"""The latest place tags kept in the commit record (format 5).

An append that completes chunks used to write each array's last tag chunk every time: on an
object store, one more request per array per append. From format 5 the commit record keeps the
tags of the latest complete chunks (``tags``: per array, the time chunk they start at and one
uint32 per chunk) and the writer writes them to the tag array all at once when more than
``PENDING_MAX`` are held (docs/format.md, section 4.5). Every read takes the tags from both
places; these tests hold every reader (rlvault's on a disk and through the S3 relay, ``verify``,
a pinned read of an earlier commit, the specification's reader) to that, across writers that
reopen the vault mid-tag-chunk.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vault
from vault import Vault, VaultCorruptError, parse_location
from vault.format import _tags
from vault.format._records import COMMIT_KEY
from vault.write import _create

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import spec_reader

KEY = "experience/x"
STEPS = (100, 100, 100, 30)  # one timestep per chunk: 100 tags per append (PENDING_MAX: 256)


def data(t0: int, n: int) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)`` of two rows, every value a function of (row, t)."""
    t = np.arange(t0, t0 + n, dtype=np.float32)[None]
    return {"x": np.concatenate([t, t + 0.5])}


@pytest.fixture
def where(vault_url: str) -> str:
    """The test's vault location: on a disk, then on S3 (``vault_url``)."""
    return vault_url


def build(where: str) -> list[str]:
    """:data:`STEPS` appended, each by a writer that reopened the vault (so each takes up the
    record's pending tags, and the tag chunk where the last flush left it); the commit ids."""
    ids = []
    t0 = 0
    Vault.create(where, {"x": np.zeros((), np.float32)}, rows=2, chunk={"x": [2, 1]}).close()
    for n in STEPS:
        with Vault.open(where, "a") as v:
            v.append(data(t0, n))
            ids.append(v.commit_id)
        t0 += n
    return ids


def kept(where: str, at: str | None = None) -> Any:
    """The pending tags of :data:`KEY` in the commit record (of commit ``at``)."""
    return (Vault.open(where, at=at).snapshot.commit.tags or {}).get(KEY)


def stored_crcs(where: str, ks: range) -> list[int]:
    """The stored crc32c (last four bytes) of chunks ``c/0/k``."""
    kv = parse_location(where).kvstore()
    raws = [bytes(kv.read(f"{KEY}/c/0/{k}").result().value) for k in ks]
    return [int.from_bytes(raw[-4:], "little") for raw in raws]


def test_tags_go_to_the_record_then_to_the_tag_array_all_at_once(where: str) -> None:
    ids = build(where)
    # 100, 200: held in the record; 300 > PENDING_MAX: all written, none held; then 30 held
    assert [None if (p := kept(where, at)) is None else (p.start, len(p.values)) for at in ids] == [
        (0, 100), (0, 200), None, (300, 30),
    ]  # fmt: skip
    assert kept(where).values == tuple(stored_crcs(where, range(300, 330)))
    snap = Vault.open(where).snapshot
    tags = _tags.read_tags(snap, snap.grids[KEY], 330)
    np.testing.assert_array_equal(tags[0, :, 0], stored_crcs(where, range(330)))
    want = data(0, 330)["x"]
    np.testing.assert_array_equal(Vault.open(where).read_numpy()["x"], want)
    assert vault.verify(where).ok
    theirs = spec_reader.open_vault(where)  # the specification's reader agrees
    np.testing.assert_array_equal(theirs.read()["x"], want)
    assert theirs.fingerprint() == Vault.open(where).fingerprint()


def test_a_chunk_moved_over_a_place_whose_tag_the_record_keeps_is_caught(where: str) -> None:
    build(where)
    kv = parse_location(where).kvstore()
    moved = kv.read(f"{KEY}/c/0/310").result().value
    kv.write(f"{KEY}/c/0/320", bytes(moved)).result()
    wrong = re.escape(f"{KEY}/c/0/320 (timesteps 320-320) is not the chunk written there")
    with pytest.raises(VaultCorruptError, match=wrong):
        Vault.open(where).read_numpy()
    report = vault.verify(where)
    assert any(re.search(wrong, p.message) for p in report.problems), report.problems
    with pytest.raises(spec_reader.SpecError, match="not the chunk written there"):
        spec_reader.open_vault(where).read()
    # and one over a place whose tag is in the tag array
    kv.write(f"{KEY}/c/0/320", bytes(kv.read(f"{KEY}/c/0/321").result().value)).result()
    kv.write(f"{KEY}/c/0/20", bytes(moved)).result()
    with pytest.raises(VaultCorruptError, match=re.escape(f"{KEY}/c/0/20 (timesteps 20-20)")):
        Vault.open(where).read_numpy()


def test_a_pinned_read_takes_the_tags_its_own_record_kept(where: str) -> None:
    """Commit 2's record held 200 tags that commit 3 wrote to the tag array: read at commit 2,
    its tags come from its own record, and a chunk moved there is still caught."""
    ids = build(where)
    old = Vault.open(where, at=ids[1])
    np.testing.assert_array_equal(old.read_numpy()["x"], data(0, 200)["x"])
    kv = parse_location(where).kvstore()
    kv.write(f"{KEY}/c/0/150", bytes(kv.read(f"{KEY}/c/0/151").result().value)).result()
    with pytest.raises(VaultCorruptError, match="is not the chunk written there"):
        Vault.open(where, at=ids[1]).read_numpy()


def edit_record(where: str, change: Any) -> None:
    """Rewrite the commit record through ``change`` (its digest made to match again)."""
    from vault.format._json import digest

    kv = parse_location(where).kvstore()
    doc = json.loads(bytes(kv.read(COMMIT_KEY).result().value))
    record = doc["attributes"]["rlvault_commit"]
    change(record)
    record["digest"] = digest({k: v for k, v in record.items() if k != "digest"})
    kv.write(COMMIT_KEY, json.dumps(doc).encode()).result()


def test_pending_tags_that_do_not_fit_the_record_are_a_typed_error(where: str) -> None:
    build(where)
    before = Vault.open(where).read_numpy()["x"]
    edit_record(where, lambda r: r["tags"][KEY]["tags"].pop())  # 29 tags for 30 chunks
    message = f"tags['{KEY}']['tags'] must be 30 uint32 tags"
    with pytest.raises(VaultCorruptError, match=re.escape(message)):
        Vault.open(where)
    with pytest.raises(VaultCorruptError, match=re.escape(message)):
        Vault.open(where, "a")  # nor appended to
    report = vault.verify(where)
    assert any(message in p.message for p in report.problems), report.problems
    with pytest.raises(spec_reader.SpecError, match="wrong count of experience/x's tags"):
        spec_reader.open_vault(where).read()
    edit_record(where, lambda r: r["tags"][KEY]["tags"].append(7))  # the count, a wrong tag
    with pytest.raises(VaultCorruptError, match=re.escape(f"{KEY}/c/0/329 (timesteps 329")):
        Vault.open(where).read_numpy()
    [crc] = stored_crcs(where, range(329, 330))
    edit_record(where, lambda r: r["tags"][KEY]["tags"].__setitem__(-1, crc))  # restored
    np.testing.assert_array_equal(Vault.open(where).read_numpy()["x"], before)
    assert vault.verify(where).ok


def test_a_format_4_vault_keeps_writing_every_tag_to_its_tag_array(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vault written before format 5 is appended to as its format says: no tags kept in the
    record (which older rlvault would not read), every tag in the tag array at once."""
    monkeypatch.setattr(_create, "version_for", lambda leaves: 4)
    build(where)
    v = Vault.open(where)
    assert v.manifest.format_version == 4
    assert v.snapshot.commit.tags is None
    record = json.loads(bytes(parse_location(where).kvstore().read(COMMIT_KEY).result().value))
    assert "tags" not in record["attributes"]["rlvault_commit"]
    snap = v.snapshot
    np.testing.assert_array_equal(
        _tags.read_tags(snap, snap.grids[KEY], 330)[0, :, 0], stored_crcs(where, range(330))
    )
    assert vault.verify(where).ok
