"""Pinned versions (issue 22): commit ids, reads at a pin in other processes after later
appends (file, memory, S3), pins the vault cannot serve, tags, fingerprints and verify,
streams and episode tables at a pin, and a stream checkpoint resumed after appends."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vault
from vault import Vault, VaultPinError, parse_location

ROWS = 3
EXAMPLE = {
    "obs": np.zeros(2, np.float32),
    "reward": np.zeros((), np.float32),
    "done": np.zeros((), bool),
}
CHUNK = {"obs": [ROWS, 8, 2], "reward": [ROWS, 8], "done": [ROWS, 8]}


def block(start: int, n: int) -> dict[str, np.ndarray]:
    t = np.arange(start, start + n)
    obs = (t[None, :, None] * 10 + np.arange(ROWS)[:, None, None] + np.zeros(2)).astype(np.float32)
    reward = np.broadcast_to((t % 3).astype(np.float32), (ROWS, n)).copy()
    done = np.broadcast_to(t % 5 == 4, (ROWS, n)).copy()
    return {"obs": obs, "reward": reward, "done": done}


def make(where: Any, steps: int = 12, every: int = 4) -> Vault:
    v = Vault.create(where, EXAMPLE, rows=ROWS, done_leaf="done", reward_leaf="reward", chunk=CHUNK)
    for t in range(0, steps, every):
        v.append(block(t, every))
    return v


def run(code: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
        env=env or dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


READ_AT = """
import sys, hashlib, numpy as np
from vault import Vault
v = Vault.open(sys.argv[1] if len(sys.argv) > 1 else {loc!r}, at={pin!r})
data = v.read_numpy()
h = hashlib.sha256()
for name in sorted(data):
    h.update(np.ascontiguousarray(data[name]).tobytes())
print(v.committed_length, len(v.episodes()), h.hexdigest(), v.fingerprint())
"""

APPEND = """
import sys
sys.path.insert(0, {here!r})
from test_pins import block
from vault import Vault
v = Vault.open({loc!r}, "a")
n0 = v.committed_length
for i in range(10):
    v.append(block(n0 + 3 * i, 3))
v.close()
print(v.committed_length)
"""


def digest(v: Vault) -> str:
    import hashlib

    data = v.read_numpy()
    h = hashlib.sha256()
    for name in sorted(data):
        h.update(np.ascontiguousarray(data[name]).tobytes())
    return h.hexdigest()


@pytest.fixture(params=["file", "s3"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "s3":
        server = request.getfixturevalue("s3_env")
        return f"s3://{server.bucket}/pins-{uuid.uuid4().hex[:10]}/v"
    return str(tmp_path / "v")


def test_a_pin_reads_the_same_data_in_another_process_after_ten_commits_elsewhere(
    place: str,
) -> None:
    v = make(place)
    pin = v.commit_id
    first = (v.committed_length, len(v.episodes()), digest(v), v.fingerprint())
    v.close()
    assert run(APPEND.format(loc=place, here=str(Path(__file__).parent))).strip() == str(
        first[0] + 30
    )
    later = Vault.open(place)
    assert later.committed_length == first[0] + 30
    assert later.commit_id != pin
    out = run(READ_AT.format(loc=place, pin=pin)).split()
    assert (int(out[0]), int(out[1]), out[2], out[3]) == first
    pinned = Vault.open(place, at=pin)
    assert pinned.refresh() == first[0]  # a pinned vault stays at its commit
    assert pinned.fingerprint() == first[3]


def test_pins_on_the_memory_location() -> None:
    where = f"memory://pins-{uuid.uuid4().hex}"
    v = make(where)
    pin, before = v.commit_id, digest(v)
    for t in range(12, 42, 3):
        v.append(block(t, 3))
    assert digest(Vault.open(where, at=pin)) == before
    assert Vault.open(where, at=pin).committed_length == 12
    assert Vault.open(where).committed_length == 42


def test_commit_numbers_ids_and_pins_that_cannot_be_served(tmp_path: Path) -> None:
    where = tmp_path / "v"
    v = make(where)  # commits 0 (created) .. 3
    ids = []
    for seq in range(4):
        ids.append(Vault.open(where, at=seq).commit_id)
        assert ids[-1].startswith(f"{seq}-")
        assert Vault.open(where, at=seq).committed_length == 4 * seq
    assert len(set(ids)) == 4
    assert Vault.open(where, at=ids[2]).committed_length == 8
    assert Vault.open(where, at=np.int64(2)).commit_id == ids[2]  # a number from numpy too
    with pytest.raises(vault.VaultArgumentError, match="commit number"):
        Vault.open(where, at=np.bool_(True))  # type: ignore[arg-type]
    with pytest.raises(VaultPinError, match="no commit 9: the latest commit is 3-"):
        Vault.open(where, at=9)
    with pytest.raises(VaultPinError, match=r"'2-0000aaaa' is not this vault's commit 2-"):
        Vault.open(where, at="2-0000aaaa")
    with pytest.raises(vault.VaultArgumentError, match="use mode='r'"):
        Vault.open(where, "a", at=1)
    with pytest.raises(vault.VaultArgumentError, match="commit number"):
        Vault.open(where, at=1.5)  # type: ignore[arg-type]
    v.close()
    # the location rewritten: a new vault there has commits with the same numbers
    shutil.rmtree(where)
    make(where).close()
    with pytest.raises(VaultPinError, match="rewritten or replaced"):
        Vault.open(where, at=ids[2])
    # a history record lost: the pin cannot be served (never other data)
    (where / "history" / "1").unlink()
    with pytest.raises(VaultPinError, match="not in the vault's history"):
        Vault.open(where, at=1)


def test_tags_name_commits_and_never_move(tmp_path: Path) -> None:
    where = tmp_path / "v"
    v = make(where)
    first = v.tag("baseline")
    assert v.tag("baseline") == first  # the same tag again: nothing moves
    v.append(block(12, 4))
    reader = Vault.open(where)
    with pytest.raises(vault.VaultExistsError, match="already names commit"):
        reader.tag("baseline")
    reader.tag("more")
    assert Vault.open(where).tags() == {"baseline": first, "more": reader.commit_id}
    at = Vault.open(where, at="baseline")
    assert at.committed_length == 12
    assert at.commit_id == first
    with pytest.raises(VaultPinError, match="no tag 'nope'"):
        Vault.open(where, at="nope")
    for bad in ("12", "3-abcdef", "", "a b", "x" * 101, "-x", "zarr.json"):
        with pytest.raises(vault.VaultArgumentError, match="a tag name is"):
            reader.tag(bad)
    v.close()


def test_fingerprints_copies_appends_and_an_edited_value(tmp_path: Path) -> None:
    where = tmp_path / "v"
    v = make(where, steps=12)  # 12 steps, chunks of 8: one complete chunk, one partly filled
    pin, fp = v.commit_id, v.fingerprint()
    assert fp.startswith("sha256:")
    v.append(block(12, 9))
    v.close()
    assert Vault.open(where, at=pin).fingerprint() == fp  # later appends change no old pin's
    assert Vault.open(where).fingerprint() != fp
    copy = tmp_path / "copy"
    shutil.copytree(where, copy)
    assert Vault.open(copy, at=pin).fingerprint() == fp  # a byte-for-byte copy
    assert Vault.open(copy).fingerprint() == Vault.open(where).fingerprint()
    report = vault.verify(copy, at=pin, fingerprint=fp)
    assert report.ok, report.problems

    import tensorstore as ts

    for leaf, index in (("reward", (1, 3)), ("obs", (2, 10, 0))):  # a complete chunk, then the edge
        edited = tmp_path / f"edited-{leaf}"
        shutil.copytree(where, edited)
        arr = ts.open(
            {
                "driver": "zarr3",
                "kvstore": {"driver": "file", "path": str(edited / "experience" / leaf)},
            }
        ).result()
        value = arr[index].read().result()
        arr[index].write(value + 1).result()  # a proper re-encode: the chunk's own checksum holds
        assert Vault.open(edited, at=pin).fingerprint() != fp
        report = vault.verify(edited, at=pin, fingerprint=fp)
        assert not report.ok
        places = " ".join(p.place + " " + p.message for p in report.problems)
        assert f"experience/{leaf}" in places
        assert "fingerprint" in places


def test_reads_streams_episodes_and_stats_honour_the_pin(tmp_path: Path) -> None:
    where = tmp_path / "v"
    v = make(where, steps=20)
    pin = v.commit_id
    episodes_then = len(v.episodes())
    v.append(block(20, 10))
    pinned = Vault.open(where, at=pin)
    assert len(pinned.episodes()) == episodes_then
    assert len(Vault.open(where).episodes()) > episodes_then
    starts = set()
    for batch in pinned.as_dataset(4, 2, shuffle=True, seed=1, drop_remainder=False):
        starts.update((int(r), int(s)) for r, s in zip(batch.row, batch.start, strict=True))
    assert starts == {(r, t) for r in range(ROWS) for t in range(19)}
    stats = {s.name: s for s in vault.leaf_stats(pinned)}
    assert stats["obs"].count == ROWS * 20 * 2


def test_a_stream_checkpoint_resumes_the_same_batches_after_appends(tmp_path: Path) -> None:
    where = tmp_path / "v"
    v = make(where, steps=40, every=8)
    kwargs: dict[str, Any] = {"shuffle": True, "seed": 3, "epochs": 2, "prefetch": 1,
                              "block_timesteps": 8, "interleave": 2}  # fmt: skip
    reference = [(b.epoch, b.row.tolist(), b.start.tolist()) for b in v.as_dataset(5, 3, **kwargs)]
    assert len(reference) > 10
    stream = v.as_dataset(5, 3, **kwargs)
    taken = [next(stream) for _ in range(len(reference) // 2 + 1)]
    state = stream.state()
    stream.close()
    saved = json.dumps(state)  # what a training job writes into its checkpoint
    v.append(block(40, 16))  # more data lands while the job is preempted
    v.close()
    out = run(
        "import json, sys; import vault\n"
        f"s = vault.resume_stream(json.loads({saved!r}))\n"
        "print(json.dumps([(b.epoch, b.row.tolist(), b.start.tolist()) for b in s]))"
    )
    rest = [tuple(x) for x in json.loads(out)]
    got = [(b.epoch, b.row.tolist(), b.start.tolist()) for b in taken]
    assert got + [(e, r, s) for e, r, s in rest] == reference
    with pytest.raises(vault.VaultArgumentError, match="not a stream state"):
        vault.resume_stream({"format": "other"})


def test_a_pin_through_parse_location_and_verify_at_a_pin(tmp_path: Path) -> None:
    where = parse_location(tmp_path / "v")
    v = make(where)
    pin = v.commit_id
    v.append(block(12, 4))
    report = vault.verify(where, at=pin)
    assert report.ok
    assert report.committed_length == 12
    with pytest.raises(VaultPinError):
        vault.verify(where, at=99)
