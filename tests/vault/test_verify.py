"""``vault.read._verify.verify`` against sound vaults and deliberately damaged ones.

Each damage is done to the files of a real vault (written with the public API): a flipped
byte or a truncated chunk file, deleted chunks, a corrupt or malformed manifest, a commit
record ahead of the data, and an episode index that disagrees with the done/reward leaves.
Every problem must be reported with its place, and problems elsewhere must not hide it.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts

from vault import Vault, VaultNotFoundError
from vault.format._records import FILL_CHUNKS_KEY, FORMAT_VERSION, digest, manifest_problems
from vault.read._verify import verify
from vault.read._verify_episodes import MAX_PER_KIND

ROWS = 3
EXAMPLE = {
    "obs": np.zeros(2, np.float32),
    "done": np.bool_(False),
    "trunc": np.bool_(False),
    "reward": np.float32(0),
}
CHUNK = {"obs": [1, 8, 2], "done": [ROWS, 8], "trunc": [ROWS, 8], "reward": [ROWS, 8]}


def build(
    path: Path, writes: tuple[int, ...] = (13, 14, 15), episodes: bool = True, marks: bool = True
) -> None:
    rng = np.random.default_rng(7)
    kw: dict[str, Any] = {}
    if episodes:
        kw = {"done_leaf": "done", "truncated_leaf": "trunc", "reward_leaf": "reward"}
    t0 = 0
    with Vault.create(str(path), EXAMPLE, rows=ROWS, chunk=CHUNK, **kw) as vault:
        for n in writes:
            # with marks, every 8-step chunk of `done` and `trunc` holds a True (no chunk
            # holds only the fill value, so a writer that leaves such chunks out writes all)
            t = (t0 + np.arange(n)) % 8 if marks else np.full(n, -1)
            done = (rng.random((ROWS, n)) < 0.2) | (t == 1)
            trunc = (rng.random((ROWS, n)) < 0.05) | (t == 0)
            vault.append(
                {
                    "obs": rng.normal(size=(ROWS, n, 2)).astype(np.float32),
                    "done": done,
                    "trunc": trunc,
                    "reward": rng.normal(size=(ROWS, n)).astype(np.float32),
                }
            )
            t0 += n


@pytest.fixture
def vault_path(tmp_path: Path) -> Path:
    build(tmp_path / "v")
    return tmp_path / "v"


def places(report: Any) -> list[str]:
    return [p.place for p in report.problems]


def edit_json(path: Path, edit: Any, redigest: bool = True) -> None:
    """Edit a JSON file; by default the manifest's or commit record's digest is recomputed,
    as a writer with a bug would have written it (so the checks behind the digest run)."""
    doc = json.loads(path.read_text())
    edit(doc)
    for attr in ("rlvault", "rlvault_commit"):
        record = doc.get("attributes", {}).get(attr)
        if redigest and isinstance(record, dict) and "digest" in record:
            record["digest"] = digest(record)
    path.write_text(json.dumps(doc))


def rewrite(path: Path, key: str, edit: Any) -> None:
    """Rewrite a stored array through TensorStore (valid checksums, changed values)."""
    arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{path}/{key}/"}})
    arr = arr.result()
    values = arr.read().result()
    edit(values)
    arr.write(values).result()


def test_a_sound_vault_has_no_problems(vault_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    report = verify(str(vault_path), progress=lambda done, total: calls.append((done, total)))
    assert report.ok, report.problems
    assert report.committed_length == 42
    # obs: 3 rows x 6 time-chunks; done/trunc/reward: 6 each; index: 1 chunk each
    assert report.chunks_checked + _absent(report) == 3 * 6 + 3 * 6 + 2
    assert report.episodes_checked == len(Vault.open(str(vault_path)).episodes())
    assert calls[-1][0] == calls[-1][1] > 0
    assert all(b >= a for (a, _), (b, _) in itertools.pairwise(calls))
    assert report.to_dict()["ok"] is True


def _absent(report: Any) -> int:
    """Chunk files a writer left out because they held only the fill value (warned about)."""
    total = 0
    for w in report.warnings:
        if "chunk files absent" in w.message:
            total += int(w.message.split()[0])
    return total


def test_an_open_vault_can_be_verified(vault_path: Path) -> None:
    vault = Vault.open(str(vault_path))
    assert verify(vault).ok


def test_flipped_byte_and_truncated_chunk_are_each_reported(vault_path: Path) -> None:
    flipped = vault_path / "experience" / "obs" / "c" / "1" / "2" / "0"
    raw = bytearray(flipped.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    flipped.write_bytes(bytes(raw))
    cut = vault_path / "experience" / "reward" / "c" / "0" / "3"
    cut.write_bytes(cut.read_bytes()[:-9])
    report = verify(str(vault_path))
    assert places(report)[:2] == ["experience/obs chunk 1.2.0", "experience/reward chunk 0.3"]
    assert all("corrupt" in p.message for p in report.problems[:2])
    assert "experience/obs/c/1/2/0" in report.problems[0].message
    # The unreadable reward chunk stops the episode comparison (warned), nothing else.
    assert len(report.problems) == 2
    assert any("flags unreadable" in w.message for w in report.warnings)


def test_deleted_chunk_of_a_vault_that_stores_every_chunk(vault_path: Path) -> None:
    edit_json(
        vault_path / "zarr.json",
        lambda d: d["attributes"]["rlvault"].update({FILL_CHUNKS_KEY: True}),
    )
    (vault_path / "experience" / "obs" / "c" / "2" / "4" / "0").unlink()
    report = verify(str(vault_path))
    assert places(report) == ["experience/obs chunk 2.4.0"]
    assert "chunk file experience/obs/c/2/4/0 is missing" in report.problems[0].message


def test_deleted_chunk_without_the_flag_is_a_warning_naming_it(vault_path: Path) -> None:
    # a vault whose writer did not promise to store chunks that hold only the fill value
    def older(doc: dict[str, Any]) -> None:  # format 2, written without the flag
        doc["attributes"]["rlvault"].pop(FILL_CHUNKS_KEY, 0)
        doc["attributes"]["rlvault"]["format_version"] = 2

    edit_json(vault_path / "zarr.json", older)
    (vault_path / "experience" / "obs" / "c" / "2" / "4" / "0").unlink()
    report = verify(str(vault_path))
    assert report.ok
    [warning] = [w for w in report.warnings if w.place == "experience/obs"]
    assert warning.message.startswith("1 chunk files absent (c/2/4/0)")


def test_deleted_done_chunk_is_caught_by_the_episode_index(vault_path: Path) -> None:
    (vault_path / "experience" / "done" / "c" / "0" / "1").unlink()  # t = 8..15
    report = verify(str(vault_path))
    assert not report.ok
    # the missing file itself (this writer stores every chunk) and the index mismatch
    assert report.problems[0].place == "experience/done chunk 0.1"
    rest = report.problems[1:]
    assert rest
    assert all(p.place.startswith("episodes/bounds entry") for p in rest)
    assert any("where neither done nor truncated is set" in p.message for p in rest)


def test_corrupt_manifest_json(vault_path: Path) -> None:
    (vault_path / "zarr.json").write_text('{"zarr_format": 3, "attributes": {"rlvault": ')
    report = verify(str(vault_path))
    assert places(report) == ["zarr.json (manifest)"]
    assert report.problems[0].message.startswith("not valid JSON")


def test_malformed_manifest_lists_every_problem(vault_path: Path) -> None:
    def damage(doc: dict[str, Any]) -> None:
        manifest = doc["attributes"]["rlvault"]
        manifest["rows"] = 0
        manifest["leaves"][1]["chunk"] = [1, 8]
        manifest["leaves"][2]["dtype"] = "float99"
        manifest["episodes"]["reward"] = "nope"

    edit_json(vault_path / "zarr.json", damage)
    report = verify(str(vault_path))
    messages = [p.message for p in report.problems]
    assert set(places(report)) == {"zarr.json (manifest)"}
    assert messages == [
        "rows must be an int >= 1, got 0",
        "leaves[1]: chunk must be [rows, time, *shape] ints >= 1, got [1, 8]",
        (
            "leaves[2]: dtype 'float99' is not one a vault stores (bool, int8, int16, int32, "
            "int64, uint8, uint16, uint32, uint64, float16, float32, float64)"
        ),
        "episodes.reward names 'nope', which is not a leaf",
    ]


def test_manifest_schema_checker_on_its_own() -> None:
    assert manifest_problems([]) == ["the 'rlvault' attributes must be an object, got list"]
    problems = manifest_problems({"format_version": 99, "structure": {"kind": "set"}})
    assert f"format_version 99 is not one of 1..{FORMAT_VERSION}" in problems
    assert "structure: unknown node 'set'" in problems
    assert "leaves must be a list, got NoneType" in problems


def test_commit_record_ahead_of_the_data(vault_path: Path) -> None:
    held = json.loads((vault_path / "experience" / "obs" / "zarr.json").read_text())["shape"][1]

    def ahead(doc: dict[str, Any]) -> None:
        doc["attributes"]["rlvault_commit"]["committed_length"] = held + 5

    edit_json(vault_path / "commit" / "zarr.json", ahead)
    report = verify(str(vault_path))
    ahead_of = [p for p in report.problems if "commit record ahead of the data" in p.message]
    assert {p.place for p in ahead_of} == {f"experience/{n}" for n in CHUNK}
    assert ahead_of[0].message.startswith(f"the commit record says {held + 5} timesteps")


def test_commit_record_past_the_written_chunks(tmp_path: Path) -> None:
    """Arrays resized and the record committed, but the data chunks never landed."""
    path = tmp_path / "v"
    build(path, writes=(12,), episodes=False)  # time chunks 0 and 1 (t = 8..11) written
    edit_json(
        path / "zarr.json", lambda d: d["attributes"]["rlvault"].update({FILL_CHUNKS_KEY: True})
    )
    for name in CHUNK:
        edit_json(
            path / "experience" / name / "zarr.json",
            lambda d: d.update(shape=[ROWS, 24, *d["shape"][2:]]),
        )
    edit_json(  # (without the record of the partly filled chunk at 8, now a complete one,
        # nor the tags of complete chunks the record keeps: they would be too few for 20)
        path / "commit" / "zarr.json",
        lambda d: d["attributes"]["rlvault_commit"].update(committed_length=20, edges={}, tags={}),
    )
    report = verify(str(path))
    assert sorted(places(report)) == sorted(
        ["experience/done chunk 0.2", "experience/reward chunk 0.2", "experience/trunc chunk 0.2"]
        + [f"experience/obs chunk {r}.2.0" for r in range(ROWS)]
    )


def test_missing_or_broken_commit_record(vault_path: Path) -> None:
    (vault_path / "commit" / "zarr.json").unlink()
    assert places(verify(str(vault_path))) == ["commit/zarr.json (commit record)"]
    (vault_path / "commit" / "zarr.json").write_text(
        json.dumps({"attributes": {"rlvault_commit": {"committed_length": -1}}})
    )
    report = verify(str(vault_path))
    assert [p.message for p in report.problems] == ["committed_length must be an int >= 0, got -1"]


def test_array_metadata_and_group_problems(vault_path: Path) -> None:
    edit_json(vault_path / "experience" / "obs" / "zarr.json", lambda d: d.update(data_type="int8"))
    (vault_path / "experience" / "zarr.json").unlink()
    report = verify(str(vault_path))
    assert places(report) == ["experience/zarr.json", "experience/obs/zarr.json"]
    assert report.problems[1].message == "data_type 'int8', expected 'float32'"


def test_episode_index_against_the_flags(vault_path: Path) -> None:
    count = len(Vault.open(str(vault_path)).episodes())

    def damage_bounds(b: np.ndarray) -> None:
        b[2, 2] += 1  # entry 2 one step longer: ends where no flag is set
        b[5, 3] ^= 1  # entry 5 flips terminated/truncated

    rewrite(vault_path, "episodes/bounds", damage_bounds)
    rewrite(vault_path, "episodes/returns", lambda r: r.__setitem__(7, r[7] + 1.0))
    report = verify(str(vault_path))
    assert report.episodes_checked == count
    by_place: dict[str, list[str]] = {}
    for p in report.problems:
        by_place.setdefault(p.place.split(" (")[0], []).append(p.message)
    assert "ends at t=" in " ".join(by_place["episodes/bounds entry 2"])
    assert any(m.startswith("indexed as") for m in by_place["episodes/bounds entry 5"])
    assert any("but the reward leaf sums to" in m for m in by_place["episodes/bounds entry 7"])
    assert any(p.startswith("experience/done row") for p in by_place)  # the end it lost


def test_done_flag_inside_the_open_episode(tmp_path: Path) -> None:
    vault_path = tmp_path / "v"
    build(vault_path, marks=False)
    table = Vault.open(str(vault_path)).episodes(include_open=True)
    row, start = int(table.row[-1]), int(table.start[-1])
    assert not table.complete[-1]
    assert start < 41
    rewrite(vault_path, "experience/done", lambda d: d.__setitem__((row, 41), True))
    report = verify(str(vault_path))
    # the rewritten chunk is not the one written there (its tag differs), and the scan says why
    assert places(report) == ["experience/done", f"experience/done row {row}, t=41"]
    assert "written there" in report.problems[0].message


def test_mismatches_are_capped_per_kind(tmp_path: Path) -> None:
    build(tmp_path / "v", writes=(200,))
    count = len(Vault.open(str(tmp_path / "v")).episodes())
    assert count > MAX_PER_KIND + 10
    rewrite(tmp_path / "v", "episodes/returns", lambda r: r.__iadd__(5.0))
    report = verify(str(tmp_path / "v"))
    scan = [p for p in report.problems if "written there" not in p.message]
    assert len(scan) == MAX_PER_KIND + 1
    assert report.problems[-1].message == f"... and {count - MAX_PER_KIND} more return problems"


def restart(path: Path) -> None:
    """Append 6 timesteps to the 10 of ``build(path, writes=(10,))`` with continues=False."""
    vault = Vault.open(str(path), mode="a")
    rng = np.random.default_rng(1)
    more = {
        "obs": rng.normal(size=(ROWS, 6, 2)).astype(np.float32),
        "done": np.zeros((ROWS, 6), bool),
        "trunc": np.zeros((ROWS, 6), bool),
        "reward": np.ones((ROWS, 6), np.float32),
    }
    more["done"][:, 3] = True
    vault.append(more, continues=False)
    vault.close()


def test_a_restart_is_a_recorded_seam_and_verifies_clean(tmp_path: Path) -> None:
    path = tmp_path / "v"
    build(path, writes=(10,), marks=False)
    restart(path)
    assert Vault.open(str(path)).gaps == [{"at": 10, "lost": 0}]
    report = verify(str(path))
    assert report.ok
    assert [w for w in report.warnings if w.place == "episodes"] == []


def forget_seams(doc: dict[str, Any]) -> None:
    doc["attributes"]["rlvault_commit"]["gaps"] = []


def test_an_unrecorded_restart_leaves_a_warning_not_a_problem(tmp_path: Path) -> None:
    # vaults written before restarts were recorded: the same data without the seam
    path = tmp_path / "v"
    build(path, writes=(10,), marks=False)
    restart(path)
    edit_json(path / "commit/zarr.json", forget_seams)
    assert Vault.open(str(path)).gaps == []
    report = verify(str(path))
    assert report.ok
    [warning] = [w for w in report.warnings if w.place == "episodes"]
    assert "stretches of timesteps belong to no episode" in warning.message
    assert "row 0 t=" in warning.message


def test_not_a_vault_raises(tmp_path: Path) -> None:
    with pytest.raises(VaultNotFoundError, match="no vault at"):
        verify(str(tmp_path))
    (tmp_path / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group"}))
    with pytest.raises(VaultNotFoundError, match="not an rlvault vault"):
        verify(str(tmp_path))


def test_memory_vault(tmp_path: Path) -> None:
    location = f"memory://verify-{tmp_path.name}"
    vault = Vault.create(location, EXAMPLE, rows=ROWS, done_leaf="done")
    vault.append(
        {
            "obs": np.ones((ROWS, 5, 2), np.float32),
            "done": np.eye(ROWS, 5, dtype=bool),
            "trunc": np.zeros((ROWS, 5), bool),
            "reward": np.ones((ROWS, 5), np.float32),
        }
    )
    report = verify(location)
    assert report.ok
    assert report.episodes_checked == ROWS
    vault.close()
