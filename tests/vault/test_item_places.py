"""Every chunk of a place is bound to it where a leaf's chunks cut its item axes.

A leaf ``[rows, T, 4]`` stored in chunks ``[2, 4, 2]`` has two chunks per place (row block,
time chunk): ``c/b/k/0`` and ``c/b/k/1``. Format 3 bound only the first to its place (tags,
edge tails, fingerprint): the second, copied over another place, read as data, passed
``verify`` and kept the fingerprint. Such vaults are now written in format 4, which binds every
item chunk (docs/format.md, sections 4.5 and 9); on a local disk and on the real S3 test server
(the relay's reads and writes). A format-3 vault with cut items, written as rlvault 0.1.0 wrote
it (the format-3 writing path, which rlvault still takes when it appends to such a vault), stays
readable with format 3's binding, except that its partly filled last chunk is now always checked
value by value.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vault
from vault import Vault, VaultCorruptError, parse_location
from vault.facade._vault import vault_of_writer
from vault.storage import _relay
from vault.write._create import create_vault, plan_manifest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import spec_reader

ROWS = 3
EXAMPLE = {"obs": np.zeros(4, np.float32), "done": np.zeros((), bool)}
CHUNK = {"obs": [2, 4, 2]}  # 2 row blocks x 4 timesteps x 2 item chunks per place
SIZES = (6, 5)  # 11 timesteps: time chunks 0 and 1 complete, 2 partly filled (the edge)


def data(t0: int, n: int) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)``: every value a function of (row, t, item)."""
    t = np.arange(t0, t0 + n)[None, :, None]
    rows = np.arange(ROWS)[:, None, None]
    obs = (t * 10.0 + rows + np.arange(4) / 8).astype(np.float32)
    return {"obs": obs, "done": (t[..., 0] + rows[..., 0]) % 5 == 4}


@pytest.fixture
def where(vault_url: str) -> str:
    """The test's vault location: on a disk, then on S3 (``vault_url``)."""
    return vault_url


def build(loc: str, version: int | None = None) -> None:
    """A vault at ``loc`` with :data:`SIZES` appended, the last by a writer that reopened it
    (which takes up the tags and the edge where the first left them); ``version``: written in
    that format version (rlvault writes 5)."""
    manifest = plan_manifest(
        EXAMPLE, rows=ROWS, codec="auto", level=None, chunk=CHUNK, metadata=None,
        episodes={"done": "done", "truncated": None, "reward": None},
    )  # fmt: skip
    if version is None:
        v = Vault.create(loc, EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done")
        assert v.manifest == dataclasses.replace(manifest, created=v.manifest.created)
    else:
        manifest = dataclasses.replace(manifest, format_version=version)
        v = vault_of_writer(create_vault(parse_location(loc), manifest))
    with v:
        v.append(data(0, SIZES[0]))
    with Vault.open(loc, "a") as v:
        v.append(data(SIZES[0], SIZES[1]))


def copy(loc: str, source: str, target: str) -> None:
    """Copy the object ``source`` of the vault at ``loc`` over ``target``."""
    kv = parse_location(loc).kvstore()
    got = kv.read(source).result()
    assert got.state == "value", source
    kv.write(target, got.value).result()


def spec_read(loc: str) -> spec_reader.SpecVault:
    """The vault as ``tools/spec_reader.py`` (a reader from docs/format.md alone) opens it (on
    S3 through s3fs, configured by the AWS environment of ``s3_env``)."""
    return spec_reader.open_vault(loc)


def caught(loc: str, message: str) -> None:
    """A fresh reader's read refuses the vault, and so does ``verify``, naming ``message``."""
    with pytest.raises(VaultCorruptError, match=message):
        Vault.open(loc).read_numpy()
    report = vault.verify(loc)
    assert not report.ok
    assert any(re.search(message, p.message) for p in report.problems), report.problems


@pytest.mark.parametrize("version", [None, 4])
def test_an_item_chunk_copied_over_another_complete_place_is_caught(
    where: str, version: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Caught where the tags are in the commit record (format 5) and in the tag array (4)."""
    build(where, version)
    before = Vault.open(where).fingerprint()
    theirs = spec_read(where)  # the tags and edges written as the specification says
    np.testing.assert_array_equal(theirs.read()["obs"], data(0, 11)["obs"])
    assert theirs.fingerprint() == before
    copy(where, "experience/obs/c/0/0/1", "experience/obs/c/1/1/1")
    wrong = re.escape("experience/obs/c/1/1/1 (timesteps 4-7) is not the chunk written there")
    caught(where, wrong)
    with pytest.raises(spec_reader.SpecError, match="not the chunk written there"):
        spec_read(where).read()
    assert Vault.open(where).fingerprint() != before
    if where.startswith("s3://"):  # chunks decoded by TensorStore from memory instead
        monkeypatch.setattr(_relay, "DIRECT", False)
        with pytest.raises(VaultCorruptError, match=wrong):
            Vault.open(where).read_numpy()
    assert Vault.open(where).manifest.format_version == (version or 5)


def test_an_item_chunk_copied_over_the_partly_filled_place_is_caught(where: str) -> None:
    build(where)
    before = Vault.open(where).fingerprint()
    copy(where, "experience/obs/c/0/0/1", "experience/obs/c/0/2/1")
    caught(where, "partly filled chunk")
    assert Vault.open(where).fingerprint() != before


def test_a_format_3_vault_with_cut_items_stays_readable(where: str) -> None:
    """Written with format 3's binding (rlvault 0.1.0 wrote the same bytes), read and appended
    to by this rlvault, in format 3; the spec reader reads the same data and fingerprint."""
    build(where, version=3)
    with Vault.open(where, "a") as v:
        v.append(data(11, 3))  # 14 timesteps: time chunk 2 complete, 3 the edge
    ours = Vault.open(where)
    assert ours.manifest.format_version == 3
    want = data(0, 14)
    got = ours.read_numpy()
    for name, values in want.items():
        np.testing.assert_array_equal(got[name], values, err_msg=name)
    report = vault.verify(where)
    assert report.ok, report.problems
    assert [w.place for w in report.warnings] == ["experience/obs"]
    assert "only the first item chunk of each place is bound" in report.warnings[0].message
    theirs = spec_read(where)
    np.testing.assert_array_equal(theirs.read()["obs"], want["obs"])
    assert theirs.fingerprint() == ours.fingerprint()
    # the edge's tails bind its first item chunk only: its committed part is checked instead
    copy(where, "experience/obs/c/0/0/1", "experience/obs/c/0/3/1")
    with pytest.raises(VaultCorruptError, match="partly filled chunk"):
        Vault.open(where).read_numpy()


def test_a_new_vault_is_format_5_whatever_its_chunks(tmp_path: Path) -> None:
    """Whole items per chunk or cut ones: a new vault is written in format 5 (its latest
    place tags in the commit record); older rlvault refuses it."""
    whole: dict[str, Any] = {"obs": [2, 4, 4]}
    kept = Vault.create(str(tmp_path / "a"), EXAMPLE, rows=ROWS, chunk=whole)
    cut = Vault.create(str(tmp_path / "b"), EXAMPLE, rows=ROWS, chunk=CHUNK)
    assert (kept.manifest.format_version, cut.manifest.format_version) == (5, 5)
    kept.close()
    cut.close()
