"""The vault's behaviour, the same over every location kind: file, memory and S3 (a real
SeaweedFS server on loopback, ``s3_env`` in ``tests/conftest.py``).

Each test takes ``where``: a fresh, empty location of one kind. Crash recovery here is a
write that fails inside a step of the commit protocol (through the public fault hook), which
every kind supports in-process; kills of real processes are in ``test_vault_crash.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vault
from vault import Location, Vault, VaultLockedError, parse_location

ROWS = 2
EXAMPLE = {"obs": np.zeros(3, np.float32), "done": np.zeros((), bool)}


def block(start: int, n: int, done_every: int = 4) -> dict[str, np.ndarray]:
    t = np.arange(start, start + n, dtype=np.float32)
    obs = t[None, :, None] + 100 * np.arange(ROWS, dtype=np.float32)[:, None, None]
    done = (np.arange(start, start + n) % done_every == done_every - 1)[None, :]
    return {"obs": np.repeat(obs, 3, axis=2), "done": np.repeat(done, ROWS, axis=0)}


@pytest.fixture(params=["file", "memory", "s3"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    if request.param == "file":
        return parse_location(tmp_path / "v")
    if request.param == "s3":
        server = request.getfixturevalue("s3_env")
        return parse_location(f"s3://{server.bucket}/conformance-{uuid.uuid4().hex}/v")
    return parse_location(f"memory://conformance-{uuid.uuid4().hex}")


@pytest.fixture
def fault() -> Iterator[Callable[[str, bool], None]]:
    """``fault(point, after)`` makes that fault point raise, after its step ran or instead of
    it."""

    def arm(point: str, after: bool) -> None:
        def hook(name: str, info: dict[str, Any], step: Callable[[], Any]) -> Any:
            if name != point:
                return step()
            if after:
                step()
            raise RuntimeError(f"injected failure at {name} {info}")

        vault.set_fault_hook(hook)

    yield arm
    vault.set_fault_hook(None)


def test_create_write_reopen_read(where: Location) -> None:
    with Vault.create(where, EXAMPLE, rows=ROWS, done_leaf="done") as v:
        assert v.append(block(0, 6)) == 6
        assert v.append(block(6, 5)) == 5
    reopened = Vault.open(where)
    assert reopened.location == str(where)
    assert reopened.committed_length == 11
    np.testing.assert_array_equal(reopened.read_numpy()["obs"], block(0, 11)["obs"])
    np.testing.assert_array_equal(reopened.read(last=3).experience["obs"], block(8, 3)["obs"])
    assert len(reopened.episodes()) == ROWS * 2  # ends at t=3 and t=7 in each row


def test_creating_over_an_existing_vault_is_refused(where: Location) -> None:
    Vault.create(where, EXAMPLE, rows=ROWS).close()
    with pytest.raises(vault.VaultExistsError, match="already exists"):
        Vault.create(where, EXAMPLE, rows=ROWS)


def test_opening_nothing_is_not_found(where: Location) -> None:
    with pytest.raises(vault.VaultNotFoundError, match="no vault at"):
        Vault.open(where)


def test_one_writer_at_a_time_and_the_lock_names_its_holder(where: Location) -> None:
    writer = Vault.create(where, EXAMPLE, rows=ROWS)
    holder = vault.lock_holder(where)
    assert holder is not None
    assert holder.pid is not None
    with pytest.raises(VaultLockedError, match="only one writer at a time"):
        Vault.open(where, "a")
    reader = Vault.open(where)  # readers need no lock
    writer.append(block(0, 2))
    assert reader.refresh() == 2
    writer.close()
    assert vault.lock_holder(where) is None
    again = Vault.open(where, "a")
    again.append(block(2, 2))
    again.close()
    assert Vault.open(where).committed_length == 4


@pytest.mark.parametrize(("point", "after"), [("resize", True), ("index", True), ("commit", False)])
def test_a_write_that_fails_inside_the_protocol_leaves_the_last_commit(
    where: Location, fault: Callable[[str, bool], None], point: str, after: bool
) -> None:
    v = Vault.create(where, EXAMPLE, rows=ROWS, done_leaf="done", chunk={"obs": [ROWS, 2, 3]})
    v.append(block(0, 3))
    fault(point, after)  # data written (and, for resize, arrays grown), never committed
    with pytest.raises(vault.VaultError, match=f"injected failure at {point}"):
        v.append(block(3, 6))
    vault.set_fault_hook(None)
    assert v.committed_length == 3
    fresh = Vault.open(where)  # what another process sees: exactly the last commit
    assert fresh.committed_length == 3
    np.testing.assert_array_equal(fresh.read_numpy()["obs"], block(0, 3)["obs"])
    assert len(fresh.episodes()) == 0
    # the next appends overwrite the partial tail; the first is shorter than the failed one,
    # whose resize (when it ran) left the stored arrays longer than this writer's handles
    v.append(block(3, 2))
    v.append(block(5, 4))
    v.close()
    again = Vault.open(where)
    np.testing.assert_array_equal(again.read_numpy()["obs"], block(0, 9)["obs"])
    assert len(again.episodes()) == ROWS * 2
    assert vault.verify(where).ok


def test_verify_finds_a_sound_vault_sound(where: Location) -> None:
    with Vault.create(where, EXAMPLE, rows=ROWS, done_leaf="done") as v:
        v.append(block(0, 9))
    report = vault.verify(where)
    assert report.ok, report.problems
    assert report.committed_length == 9
    assert report.episodes_checked == ROWS * 2


def test_derived_vaults_appear_whole(where: Location, tmp_path: Path) -> None:
    source = where.child("source")  # the destination is a sibling: never inside the source
    with Vault.create(source, EXAMPLE, rows=ROWS, done_leaf="done") as v:
        v.append(block(0, 8))
    dest = where.child("sliced")
    out = vault.derive_slice(source, dest, rows=[1], start=2, stop=7)
    np.testing.assert_array_equal(out.read_numpy()["obs"], block(2, 5)["obs"][1:])
    with pytest.raises(vault.VaultExistsError):
        vault.derive_slice(source, dest, rows=[0])


def test_discovery_and_capabilities(where: Location) -> None:
    Vault.create(where, EXAMPLE, rows=ROWS).close()
    found = vault.find_vaults(where)
    assert [f.location for f in found] == [str(where)]
    assert found[0].problem is None
    caps = where.capabilities
    assert caps.exclusive_lock
    assert caps.listing
    usage = vault.disk_usage(where)
    assert usage is None or usage > 0
    # sizes are cheap to sum on a local disk; an object listing here carries none
    assert (usage is not None) == (where.spec["driver"] == "file")


def test_unsupported_locations_are_typed_errors() -> None:
    with pytest.raises(vault.VaultLocationError, match="unsupported vault location scheme 'gs'"):
        Vault.open("gs://bucket/prefix")
    with pytest.raises(vault.VaultLocationError, match="unsupported kvstore driver 'gcs'"):
        Vault.open({"driver": "gcs", "bucket": "b"})
    with pytest.raises(vault.VaultLocationError, match="storage= settings apply to object-store"):
        Vault.open("/tmp/x", storage={"endpoint": "http://127.0.0.1:1"})


def test_dataset_roots_are_found_with_and_without_shards(where: Location) -> None:
    from vault import Dataset

    Dataset.create(where, EXAMPLE, rows=ROWS)
    assert vault.find_vaults(where) == []  # a dataset root is not a vault
    found = vault.find_vaults(where, datasets=True)
    assert [(f.location, f.kind, f.problem) for f in found] == [(str(where), "dataset", None)]
    if where.spec["driver"] == "memory":
        return  # one store per memory location: a shard there is another location's
    with Dataset.open(where).shard("a") as shard:
        shard.append(block(0, 4))
    found = vault.find_vaults(where, datasets=True)
    assert [f.kind for f in found] == ["dataset", "vault"]
    assert found[1].location.rstrip("/").endswith("/shards/a")
    assert [f.location for f in vault.find_vaults(where)] == [found[1].location]
