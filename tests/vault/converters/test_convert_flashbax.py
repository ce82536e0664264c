"""Flashbax / og-marl vaults -> vault, against vaults written by Flashbax 0.1.3 itself.

The importer reads Flashbax's files through TensorStore without importing flashbax; here
Flashbax writes the sources (several structures, ring wraps between writes, custom
compressors) and reads them back, and the imported vault must hold the same data, leaf by
leaf, as Flashbax's own ``Vault.read`` and as what was handed to it.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from _convert_sources import read_with_flashbax, write_flashbax

from vault import (
    Vault,
    VaultCorruptError,
    VaultExistsError,
    VaultNotFoundError,
    VaultStructureError,
    VaultVersionError,
)
from vault.converters import import_flashbax

F32, I32, U8, B = np.float32, np.int32, np.uint8, np.bool_


class Step(NamedTuple):
    obs: Any
    extra: Any


AGENTS = ("agent_0", "agent_1")
SOURCES: dict[str, dict[str, Any]] = {
    # rows, ring capacity, steps, write every: 45 steps through a ring of 16 (wraps twice)
    "flat": {
        "spec": {"obs": ((3,), F32), "action": ((), I32), "reward": ((), F32), "done": ((), B)},
        "rows": 4, "capacity": 16, "steps": 45, "write_every": 10,
        "metadata": {"env": "toy", "seed": 3},
    },
    # og-marl's layout: per-agent dicts under each field, a global state in infos
    "marl": {
        "spec": {
            "observations": dict.fromkeys(AGENTS, ((5,), F32)),
            "actions": dict.fromkeys(AGENTS, ((), I32)),
            "rewards": dict.fromkeys(AGENTS, ((), F32)),
            "terminals": dict.fromkeys(AGENTS, ((), B)),
            "truncations": dict.fromkeys(AGENTS, ((), B)),
            "infos": {"state": ((7,), F32)},
        },
        "rows": 2, "capacity": 64, "steps": 40, "write_every": 40,
    },
    # a NamedTuple with a nested dict; blosc-zstd instead of the default gzip; wraps
    "namedtuple": {
        "spec": Step(obs=((2, 2), U8), extra={"a": ((), np.int16), "b": ((3,), np.int8)}),
        "rows": 3, "capacity": 8, "steps": 20, "write_every": 5,
        "compression": {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 1},
    },
    # frames compressed with zstd; 230 KB, several import blocks at the smallest block size
    "image": {
        "spec": {"obs": ((8, 8, 3), U8), "reward": ((), F32)},
        "rows": 2, "capacity": 1000, "steps": 600, "write_every": 200,
        "compression": {"id": "zstd", "level": 3},
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    root = tmp_path_factory.mktemp("flashbax")
    out = {}
    for name, cfg in SOURCES.items():
        options = {k: v for k, v in cfg.items() if k != "spec"}
        out[name] = write_flashbax(root, name, cfg["spec"], **options)
    return out


def _flat(tree: Any, prefix: str = "") -> dict[str, np.ndarray]:
    if isinstance(tree, tuple) and hasattr(type(tree), "_fields"):
        tree = tree._asdict()
    if isinstance(tree, dict):
        return {k: v for key in tree for k, v in _flat(tree[key], f"{prefix}{key}/").items()}
    return {prefix.rstrip("/"): np.asarray(tree)}


@pytest.mark.parametrize("name", list(SOURCES))
def test_import_matches_flashbax_leaf_by_leaf(
    sources: dict[str, tuple[Path, Any]], tmp_path: Path, name: str
) -> None:
    path, handed_over = sources[name]
    cfg = SOURCES[name]
    vault = import_flashbax(path, tmp_path / "out")
    by_flashbax = _flat(read_with_flashbax(path))
    want = _flat(handed_over)
    assert sorted(vault.leaf_names) == sorted(want) == sorted(by_flashbax)
    assert vault.rows == cfg["rows"]
    assert vault.committed_length == cfg["steps"]
    got = _flat(vault.read_numpy())
    for leaf in want:
        assert got[leaf].dtype == want[leaf].dtype, leaf
        np.testing.assert_array_equal(got[leaf], by_flashbax[leaf], err_msg=leaf)
        np.testing.assert_array_equal(got[leaf], want[leaf], err_msg=leaf)
    meta = vault.metadata
    for key, value in cfg.get("metadata", {}).items():
        assert meta[key] == value
    assert meta["imported_from"]["format"] == "flashbax"
    assert meta["imported_from"]["vault_index"] == cfg["steps"]


def test_nested_structure_comes_back_as_nested_dicts(
    sources: dict[str, tuple[Path, Any]], tmp_path: Path
) -> None:
    vault = import_flashbax(sources["marl"][0], tmp_path / "out")
    data = vault.read_numpy(start=0, stop=2)
    assert sorted(data) == sorted(SOURCES["marl"]["spec"])
    assert sorted(data["observations"]) == list(AGENTS)
    assert data["observations"]["agent_1"].shape == (2, 2, 5)
    nt = import_flashbax(sources["namedtuple"][0], tmp_path / "nt").read_numpy(stop=1)
    assert sorted(nt) == ["extra", "obs"]
    assert sorted(nt["extra"]) == ["a", "b"]


def _reference_episodes(done: np.ndarray, trunc: np.ndarray, reward: np.ndarray) -> list[tuple]:
    out = []
    for row in range(done.shape[0]):
        start = 0
        for t in range(done.shape[1]):
            if done[row, t] or trunc[row, t]:
                ret = float(reward[row, start : t + 1].sum(dtype=np.float64))
                out.append(
                    (
                        row,
                        start,
                        t + 1 - start,
                        round(ret, 4),
                        bool(trunc[row, t] and not done[row, t]),
                    )
                )
                start = t + 1
    return sorted(out)


def test_named_episode_leaves_give_an_episode_index(
    sources: dict[str, tuple[Path, Any]], tmp_path: Path
) -> None:
    path, data = sources["marl"]
    vault = import_flashbax(
        path,
        tmp_path / "out",
        done="terminals/agent_0",
        truncated="truncations/agent_0",
        reward="rewards/agent_0",
    )
    table = vault.episodes()
    got = sorted(
        (int(r), int(s), int(n), round(float(x), 4), bool(tr))
        for r, s, n, x, tr in zip(
            table.row, table.start, table.length, table.returns, table.truncated, strict=True
        )
    )
    want = _reference_episodes(
        data["terminals"]["agent_0"], data["truncations"]["agent_0"], data["rewards"]["agent_0"]
    )
    assert len(want) > 5
    assert got == want


def test_small_blocks_cut_chunks_and_give_the_same_data(
    sources: dict[str, tuple[Path, Any]], tmp_path: Path
) -> None:
    path, data = sources["image"]
    calls: list[tuple[int, int]] = []
    vault = import_flashbax(
        path, tmp_path / "out", block_bytes=1 << 16, progress=lambda d, t: calls.append((d, t))
    )
    total = 600 * 2 * (8 * 8 * 3 + 4)
    assert len(calls) >= 5
    assert calls[0] == (0, total)
    assert calls[-1] == (total, total)
    assert all(a[0] < b[0] for a, b in itertools.pairwise(calls))
    np.testing.assert_array_equal(vault.read_numpy()["obs"], data["obs"])


def test_memory_destination(sources: dict[str, tuple[Path, Any]]) -> None:
    path, data = sources["flat"]
    vault = import_flashbax(path, "memory://converted/flat")
    np.testing.assert_array_equal(vault.read_numpy()["obs"], data["obs"])


def test_interrupted_import_leaves_nothing(
    sources: dict[str, tuple[Path, Any]], tmp_path: Path
) -> None:
    def stop(done: int, total: int) -> None:
        if done:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_flashbax(sources["image"][0], tmp_path / "out", block_bytes=1 << 16, progress=stop)
    assert list(tmp_path.iterdir()) == []


def test_an_existing_destination_is_refused(
    sources: dict[str, tuple[Path, Any]], tmp_path: Path
) -> None:
    import_flashbax(sources["flat"][0], tmp_path / "out")
    with pytest.raises(VaultExistsError, match="already exists"):
        import_flashbax(sources["flat"][0], tmp_path / "out")


def test_bad_episode_leaf_is_named_and_nothing_is_left(
    sources: dict[str, tuple[Path, Any]], tmp_path: Path
) -> None:
    with pytest.raises(VaultStructureError, match=re.escape("done_leaf 'terminals': no such leaf")):
        import_flashbax(sources["marl"][0], tmp_path / "out", done="terminals")
    with pytest.raises(VaultStructureError, match=re.escape("expected one value per timestep")):
        import_flashbax(sources["marl"][0], tmp_path / "out", done="infos/state")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------ bad input
def _copy(sources: dict[str, tuple[Path, Any]], tmp_path: Path, name: str = "flat") -> Path:
    target = tmp_path / "src" / "uid"
    shutil.copytree(sources[name][0], target)
    return target


def _edit_metadata(path: Path, edit: Any) -> None:
    doc = json.loads((path / "metadata.json").read_text())
    edit(doc)
    (path / "metadata.json").write_text(json.dumps(doc))


def test_not_a_flashbax_vault(sources: dict[str, tuple[Path, Any]], tmp_path: Path) -> None:
    with pytest.raises(VaultNotFoundError, match="no such directory"):
        import_flashbax(tmp_path / "nowhere", tmp_path / "out")
    # the vault's parent (<rel_dir>/<name>) is not the vault: the uids inside are suggested
    parent = sources["flat"][0].parent
    with pytest.raises(VaultNotFoundError, match=re.escape(f"give one of them ({parent}/uid)")):
        import_flashbax(parent, tmp_path / "out")


def test_bad_metadata_is_named(sources: dict[str, tuple[Path, Any]], tmp_path: Path) -> None:
    path = _copy(sources, tmp_path)
    (path / "metadata.json").write_text("{not json")
    with pytest.raises(VaultCorruptError, match=re.escape(f"{path}/metadata.json: not JSON")):
        import_flashbax(path, tmp_path / "out")
    (path / "metadata.json").write_text(json.dumps({"version": 1.2}))
    with pytest.raises(
        VaultCorruptError, match="missing \\['structure_shape', 'structure_dtype'\\]"
    ):
        import_flashbax(path, tmp_path / "out")


def test_a_newer_format_is_a_version_error(
    sources: dict[str, tuple[Path, Any]], tmp_path: Path
) -> None:
    path = _copy(sources, tmp_path)
    _edit_metadata(path, lambda d: d.update(version=2.0))
    with pytest.raises(VaultVersionError, match=re.escape("Flashbax vault format 2.0")):
        import_flashbax(path, tmp_path / "out")


def test_every_bad_leaf_of_the_structure_is_named(
    sources: dict[str, tuple[Path, Any]], tmp_path: Path
) -> None:
    path = _copy(sources, tmp_path)

    def edit(doc: dict[str, Any]) -> None:
        doc["structure_shape"]["obs"] = "(4,)"
        doc["structure_dtype"]["reward"] = "no-such-dtype"

    _edit_metadata(path, edit)
    with pytest.raises(VaultCorruptError) as err:
        import_flashbax(path, tmp_path / "out")
    text = str(err.value)
    assert "obs: expected a shape [rows, time, ...], got [4]" in text
    assert "structure_dtype/reward: expected a dtype name, got 'no-such-dtype'" in text


def test_metadata_that_disagrees_with_an_array_is_named(
    sources: dict[str, tuple[Path, Any]], tmp_path: Path
) -> None:
    path = _copy(sources, tmp_path)
    _edit_metadata(path, lambda d: d["structure_dtype"].update(obs="float64"))
    with pytest.raises(
        VaultCorruptError,
        match=re.escape(
            "leaf obs (array 'obs.'): expected [4, T, 3] float64 as metadata.json says, got"
        ),
    ):
        import_flashbax(path, tmp_path / "out")


def test_list_elements_that_flashbax_stored_in_one_array_are_refused(
    sources: dict[str, tuple[Path, Any]], tmp_path: Path
) -> None:
    path = _copy(sources, tmp_path)

    def edit(doc: dict[str, Any]) -> None:
        doc["structure_shape"]["pair"] = ["(4, 16)", "(4, 16)"]
        doc["structure_dtype"]["pair"] = ["float32", "float32"]

    _edit_metadata(path, edit)
    with pytest.raises(
        VaultCorruptError, match=re.escape("Flashbax stored both in the one array 'pair..'")
    ):
        import_flashbax(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_importer_does_not_import_flashbax(
    sources: dict[str, tuple[Path, Any]], tmp_path: Path
) -> None:
    import subprocess
    import sys

    code = (
        "import sys; from vault.converters import import_flashbax; "
        f"v = import_flashbax({str(sources['flat'][0])!r}, {str(tmp_path / 'o')!r}); "
        "bad = [m for m in sys.modules if m.startswith(('flashbax', 'orbax'))]; "
        "assert not bad, bad; "
        "print(v.committed_length)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "45"


def test_an_imported_vault_opens_with_vault_open(
    sources: dict[str, tuple[Path, Any]], tmp_path: Path
) -> None:
    import_flashbax(sources["flat"][0], tmp_path / "out").close()
    assert Vault.open(tmp_path / "out").committed_length == 45
