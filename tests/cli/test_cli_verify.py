"""``vault verify`` on sound and deliberately damaged vaults: every problem listed with its
place, exit 0 when sound and 3 when corrupt (2 when there is no vault)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _cli_vaults import Cli, build

FILL_CHUNKS_KEY = "fill_chunks_stored"  # the manifest's flag, as stored on disk


def _flip(path: Path) -> None:
    chunk = path / "experience" / "obs" / "c" / "0" / "1" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[-5] ^= 0x40
    chunk.write_bytes(bytes(raw))


def _truncate(path: Path) -> None:
    chunk = path / "experience" / "reward" / "c" / "0" / "2"
    chunk.write_bytes(chunk.read_bytes()[:7])


def _delete(path: Path) -> None:
    manifest = json.loads((path / "zarr.json").read_text())
    manifest["attributes"]["rlvault"][FILL_CHUNKS_KEY] = True
    (path / "zarr.json").write_text(json.dumps(manifest))
    (path / "experience" / "obs" / "c" / "1" / "3" / "0").unlink()


def _manifest(path: Path) -> None:
    (path / "zarr.json").write_text((path / "zarr.json").read_text()[:-3])


def _ahead(path: Path) -> None:
    record = json.loads((path / "commit" / "zarr.json").read_text())
    record["attributes"]["rlvault_commit"]["committed_length"] = 10_000
    (path / "commit" / "zarr.json").write_text(json.dumps(record))


DAMAGE: dict[str, tuple[Any, str, str]] = {
    "flipped byte": (_flip, "experience/obs chunk 0.1.0", "is corrupt: its bytes do not decode"),
    "truncated chunk": (_truncate, "experience/reward chunk 0.2", "corrupt"),
    "deleted chunk": (_delete, "experience/obs chunk 1.3.0", "is missing"),
    "corrupt manifest": (_manifest, "zarr.json (manifest)", "not valid JSON"),
    "commit ahead": (_ahead, "experience/obs", "commit record ahead of the data"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_each_damage_is_reported_with_exit_3(cli: Cli, tmp_path: Path, damage: str) -> None:
    path = tmp_path / "v"
    build(path, episodes=False)
    assert cli("verify", path).stdout.splitlines()[-1].startswith("sound")  # before damage
    do, place, message = DAMAGE[damage]
    do(path)
    doc = cli.json("verify", path, code=3)
    assert doc["ok"] is False
    found = [p for p in doc["problems"] if p["place"] == place]
    assert found, doc["problems"]
    assert message in found[0]["message"]
    text = cli("verify", path, code=3).stdout
    assert place in text
    assert "corrupt:" in text


def test_several_problems_are_all_listed(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "v"
    build(path)
    _flip(path)
    _truncate(path)
    (path / "episodes" / "bounds" / "zarr.json").write_text("{")
    doc = cli.json("verify", path, code=3)
    places = [p["place"] for p in doc["problems"]]
    assert places == [
        "episodes/bounds/zarr.json",
        "experience/obs chunk 0.1.0",
        "experience/reward chunk 0.2",
    ]


def test_sound_vault_json_and_text(cli: Cli, vault_dir: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, _ = vault_dir
    doc = cli.json("verify", path)
    assert doc["ok"] is True
    assert doc["committed"] == 42
    assert doc["path"] == str(path)
    assert doc["chunks_checked"] > 0
    assert doc["episodes_checked"] > 0
    assert doc["problems"] == []
    line = cli("verify", path).stdout.strip().splitlines()[-1]
    assert line.startswith(f"sound: {path}: 42 timesteps; checked ")


def test_warnings_do_not_fail_verify(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "v"
    build(path, episodes=False)
    manifest = json.loads((path / "zarr.json").read_text())
    manifest["attributes"]["rlvault"].pop(FILL_CHUNKS_KEY, None)  # an older writer's vault
    manifest["attributes"]["rlvault"]["format_version"] = 2  # (format 2: no digest)
    manifest["attributes"]["rlvault"].pop("digest", None)
    (path / "zarr.json").write_text(json.dumps(manifest))
    (path / "experience" / "obs" / "c" / "1" / "3" / "0").unlink()
    result = cli("verify", path)
    assert "chunk files absent (c/1/3/0)" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("sound")
