"""The prose of the guides (``docs/guides/*.md``) and of the API reference's member lists
(``docs/api/*.md``, the one-line summaries of the docstrings), checked sentence by sentence
where no other test pins the promise. Their code blocks run in ``tests/docs/test_pages.py``;
what is checked here is what the sentences around them promise, at the joints of two
features:

* a non-blocking write that fails, with the writer let go (record-buffer: the failure is
  logged as the writer goes);
* the catalog of a dataset of shards, with a plain reader (many-writers: readers rewrite a
  damaged one unless told not to);
* the commit history, with the rows of the tour's vault (pins: a record under 1 KiB);
* ``leaf_names`` (API reference: sorted), with a named-tuple structure;
* ``vault verify``, with a corrupt and a missing chunk (cli-tour, pins: the problem names the
  array, the chunk and the time range);
* the ``--json`` keys, with a dataset's root given to ``subsample`` and ``combine``
  (cli-tour: ``kind`` for every command given a dataset's root);
* ``derived_from``, with a slice of some rows and a time range (train-offline: the
  operation and its arguments);
* a Minari export, with a vault whose first episode's beginning was lost and with a leaf
  Minari has no field for (migrate-minari);
* the converters' optional dependencies, with ``import vault.converters`` (API reference:
  imported when a converter runs);
* JAX's extra dtypes, with every way to create a vault (migrate-flashbax: refused at
  creation, each such leaf named).

Every value read is compared with a trivially correct model: the data say where they belong
(``obs = 1000 * row + t``). A test that exposes a bug is ``xfail(strict=True)``; its reason
says ``BUG:`` where the code is wrong and ``DOC:`` where the page is.
"""

from __future__ import annotations

import gc
import json
import logging
import re
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

import buffers
import vault
from vault import Dataset, Vault, VaultStructureError, derive_slice
from vault.cli.app import app

EXAMPLE = {"obs": np.zeros(2, np.float32), "reward": np.float32(0), "done": np.bool_(False)}


def data(rows: int, t0: int, n: int) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)`` of every row: obs says where it belongs; every 5th ends."""
    t = np.arange(t0, t0 + n)[None, :]
    code = 1000 * np.arange(rows)[:, None] + t
    return {
        "obs": (code[..., None] + np.array([0.0, 0.5])).astype(np.float32),
        "reward": (code % 7).astype(np.float32),
        "done": np.broadcast_to(t % 5 == 4, (rows, n)).copy(),
    }


def cli_json(*args: Any, code: int = 0) -> Any:
    result = CliRunner().invoke(app, [str(a) for a in args] + ["--json"])
    assert result.exit_code == code, (args, result.exit_code, result.output)
    return json.loads(result.stdout)


# ------------------------------------------------------------------------ record-buffer.md
# "a background failure is raised by the next call and nothing after it is committed. If no
# call comes after it (the process ends, or the vault object is let go, without `flush()` or
# `close()`), the failure is logged as an error (logger `vault.write._background`) as the
# writer goes, naming the vault."
def test_a_background_failure_is_logged_as_the_writer_is_let_go(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    buffer = buffers.make_trajectory_buffer(
        add_batch_size=2,
        sample_batch_size=2,
        sample_sequence_length=2,
        period=1,
        min_length_time_axis=2,
        max_length_time_axis=8,
    )
    state = buffer.init({"x": jnp.float32(0)})
    state = buffer.add(state, {"x": jnp.arange(6, dtype=jnp.float32).reshape(2, 3)})
    path = tmp_path / "v"
    writer = Vault.create(str(path), state)
    failed = threading.Event()

    def hook(point: str, info: Any, step: Any) -> Any:
        if point == "commit":
            failed.set()
            raise OSError("the disk went away")
        return step()

    vault.set_fault_hook(hook)
    try:
        writer.write(state, block=False)
        assert failed.wait(30)
        time.sleep(0.3)  # the background job records its error
        with caplog.at_level(logging.ERROR, logger="vault.write._background"):
            del writer
            gc.collect()
        logged = [r.getMessage() for r in caplog.records if r.name == "vault.write._background"]
    finally:
        vault.set_fault_hook(None)
    assert Vault.open(str(path)).committed_length == 0  # nothing after the failure committed
    assert any(str(path) in m and "the disk went away" in m for m in logged), logged


# -------------------------------------------------------------------------- many-writers.md
# "A reader opened with `Dataset.open(..., write_catalog=True)` also rewrites it, when it has 8
# shards or more and a quarter of them moved; by default a reader writes nothing." and "a
# damaged or foreign one is ignored (and rewritten by the next shard writer to close, or by a
# reader with `write_catalog=True`)"
def test_a_damaged_catalog_is_ignored_and_rewritten_only_when_asked(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=1, done_leaf="done", reward_leaf="reward")
    for i in range(8):
        with ds.shard(f"s{i}") as shard:
            shard.append(data(1, 0, 6))
    catalog = root / "catalog"
    raw = bytearray(catalog.read_bytes())  # each shard's writer put its entry in
    raw[len(raw) // 2] ^= 0xFF
    damaged = bytes(raw)
    catalog.write_bytes(damaged)
    reader = Dataset.open(str(root))
    table = reader.episodes()  # the damaged catalog is ignored: every shard read
    reader.close()
    assert len(table) == 8  # one complete episode (t 0..4) per shard
    assert catalog.read_bytes() == damaged, "a plain reader wrote the catalog"
    writer = Dataset.open(str(root), write_catalog=True)
    assert len(writer.episodes()) == 8
    writer.close()
    assert catalog.read_bytes() != damaged, "write_catalog=True left the damaged catalog"
    again = Dataset.open(str(root))
    assert len(again.episodes()) == 8
    again.close()


# ---------------------------------------------------------------------------------- pins.md
# "Each append stores the commit record it replaces under `history/<number>` (written
# alongside the data, one small file per commit, under 1 KiB for a few rows and a few KiB for
# 64 ...)"
def test_a_history_record_is_a_few_kib_for_the_tours_64_rows(tmp_path: Path) -> None:
    example: dict[str, Any] = {name: np.float32(0) for name in ("action", "obs", "reward")}
    example |= {"done": np.bool_(False), "truncated": np.bool_(False)}
    path = tmp_path / "gridworld"  # the tour's shape: 64 rows, 5 leaves
    with Vault.create(
        str(path), example, rows=64, done_leaf="done", truncated_leaf="truncated",
        reward_leaf="reward",
    ) as writer:  # fmt: skip
        for t0 in (0, 20):
            block = {name: np.full((64, 20), t0, np.float32) for name in ("action", "obs")}
            block["reward"] = np.ones((64, 20), np.float32)
            block["done"] = np.zeros((64, 20), bool)
            block["done"][:, 7] = True
            block["truncated"] = np.zeros((64, 20), bool)
            writer.append(block)
    sizes = {p.name: p.stat().st_size for p in (path / "history").iterdir()}
    assert {"0", "1"} <= set(sizes)
    assert 1024 < sizes["1"] < 8192, sizes  # "a few KiB for 64"


# ------------------------------------------------------------------------- docs/api/vault.md
# Vault/Dataset/Manifest.leaf_names: "Every leaf's path, in the structure's leaf order (a
# dict's keys sorted, a tuple's or named tuple's fields in order: the order ``jax.tree_util``
# flattens it in)." (and record-arrays.md: "The example fixes the structure (a dict, a named
# tuple, ...)")
class Step(NamedTuple):
    reward: Any
    obs: Any
    done: Any


def test_leaf_names_follow_the_structures_leaf_order(tmp_path: Path) -> None:
    example = Step(np.float32(0), np.zeros(2, np.float32), np.bool_(False))
    block = data(2, 0, 6)
    step = Step(block["reward"], block["obs"], block["done"])
    with Vault.create(str(tmp_path / "v"), example, rows=2, done_leaf="done") as writer:
        writer.append(step)
    ds = Dataset.create(str(tmp_path / "ds"), example, rows=2, done_leaf="done")
    with ds.shard("a") as shard:
        shard.append(step)
    back = Vault.open(str(tmp_path / "v"))
    got = back.read_numpy()
    assert type(got) is Step  # the structure comes back as given
    np.testing.assert_array_equal(got.obs, block["obs"])
    names = {
        "Vault.leaf_names": back.leaf_names,
        "Manifest.leaf_names": back.manifest.leaf_names,
        "Dataset.leaf_names": Dataset.open(str(tmp_path / "ds")).leaf_names,
    }
    assert names == {key: ["reward", "obs", "done"] for key in names}  # the fields' order
    flat = jax.tree_util.tree_flatten_with_path(example)[0]
    paths = [jax.tree_util.keystr(path, simple=True) for path, _ in flat]
    assert paths == names["Vault.leaf_names"]
    dict_example = {"b": np.float32(0), "a": {"z": np.float32(0), "c": np.float32(0)}}
    with Vault.create(str(tmp_path / "d"), dict_example, rows=1) as writer:
        assert writer.leaf_names == ["a/c", "a/z", "b"]  # a dict's keys sorted


# --------------------------------------------------------------------- cli-tour.md, pins.md
# cli-tour: "`vault verify` exits 3 when it finds a problem, naming the array, chunk and time
# range"; pins: "its chunk problems name the array and the time range"
def test_verify_names_the_time_range_of_a_corrupt_and_of_a_missing_chunk(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v"
    chunk: dict[str, Sequence[int]] = {"obs": [2, 4, 2], "reward": [2, 4], "done": [2, 4]}
    with Vault.create(str(path), EXAMPLE, rows=2, chunk=chunk, done_leaf="done") as writer:
        writer.append(data(2, 0, 16))
    corrupt = path / "experience" / "reward" / "c" / "0" / "2"  # timesteps 8..11
    raw = bytearray(corrupt.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    corrupt.write_bytes(bytes(raw))
    (path / "experience" / "obs" / "c" / "0" / "3" / "0").unlink()  # timesteps 12..15
    report = cli_json("verify", path, code=3)
    assert report["ok"] is False
    found = {}
    for problem in report["problems"]:
        text = f"{problem['place']}: {problem['message']}"
        text = re.sub(r"0x[0-9a-f]+|\S*/c/\S*", "", text)  # no digests, no chunk paths
        found[problem["place"].split(" ")[0]] = text
    assert set(found) == {"experience/reward", "experience/obs"}, report["problems"]
    assert re.search(r"\b8\D{1,8}1[12]\b", found["experience/reward"]), found
    assert re.search(r"\b12\D{1,8}1[56]\b", found["experience/obs"]), found


# ----------------------------------------------------------------------------- cli-tour.md
# "| `kind` | string | `"vault"` or `"dataset"` (a dataset of shards) (`ls`, `info`, and every
# command given a dataset's root) |"
@pytest.mark.parametrize("command", ["subsample", "combine"])
def test_a_command_given_a_datasets_root_says_its_kind(tmp_path: Path, command: str) -> None:
    root = tmp_path / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=2, done_leaf="done", reward_leaf="reward")
    for name, n in (("a", 12), ("b", 9)):
        with ds.shard(name) as shard:
            shard.append(data(2, 0, n))
    doc = cli_json(command, root, "--out", tmp_path / "out")
    out = Vault.open(str(tmp_path / "out"))
    if command == "combine":  # the shards one after another, in time
        assert (doc["rows"], doc["committed"]) == (2, 21)
        np.testing.assert_array_equal(
            out.read_numpy()["obs"],
            np.concatenate([data(2, 0, 12)["obs"], data(2, 0, 9)["obs"]], axis=1),
        )
    else:  # every complete episode of every shard, in one row
        assert (doc["rows"], doc["episodes"]) == (1, 2 * 2 + 2 * 1)
    assert doc.get("kind") in ("dataset", "vault"), sorted(doc)


# ------------------------------------------------------------------------- train-offline.md
# "The new vault's metadata records `derived_from`: the source's location, the operation
# (`op`) and its arguments"
def test_derived_from_records_a_slices_arguments(tmp_path: Path) -> None:
    with Vault.create(str(tmp_path / "v"), EXAMPLE, rows=3, done_leaf="done") as writer:
        writer.append(data(3, 0, 20))
    derive_slice(str(tmp_path / "v"), str(tmp_path / "s"), rows=[2, 0], start=3, stop=17)
    out = Vault.open(str(tmp_path / "s"))
    want = data(3, 0, 20)["obs"][[2, 0], 3:17]
    np.testing.assert_array_equal(out.read_numpy()["obs"], want)
    record = out.metadata["derived_from"]
    assert (record["op"], record["start"]) == ("slice", 3)
    assert Path(record["source"]).resolve() == (tmp_path / "v").resolve()
    # the arguments that made it, so that the slice can be told (and made) again
    assert record.get("rows") == [2, 0], record
    assert record.get("stop") == 17, record


# ------------------------------------------------------------------------ migrate-minari.md
# "What a Minari export does not carry: the open (unfinished) last episode of each row and
# any episode whose beginning was lost (...: only complete, whole episodes are written),
# leaves other than the Minari fields above (they are left out)"
def test_a_minari_export_writes_whole_episodes_only_and_leaves_out_other_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    from vault.converters import export_minari

    example = {
        "observations": np.zeros(2, np.float32),
        "next_observations": np.zeros(2, np.float32),
        "actions": np.int64(0),
        "rewards": np.float32(0),
        "terminations": np.bool_(False),
        "truncations": np.bool_(False),
        "extra": np.int32(0),  # no Minari field: left out
    }
    n, t = 33, np.arange(33)
    obs = np.stack([t, -t], axis=1).astype(np.float32)[None]
    with Vault.create(
        str(tmp_path / "v"), example, rows=1, done_leaf="terminations",
        truncated_leaf="truncations", reward_leaf="rewards",
    ) as writer:  # fmt: skip
        writer.append(
            {
                "observations": obs,
                "next_observations": obs + 0.5,
                "actions": (t % 3)[None].astype(np.int64),
                "rewards": t[None].astype(np.float32),
                "terminations": (t % 10 == 9)[None],
                "truncations": np.zeros((1, n), bool),
                "extra": t[None].astype(np.int32),
            }
        )
    derive_slice(str(tmp_path / "v"), str(tmp_path / "cut"), start=4)  # the first loses 0..3
    cut = Vault.open(str(tmp_path / "cut"))
    table = cut.episodes(include_open=True)
    columns = (table.start.tolist(), table.start_known.tolist(), table.complete.tolist())
    assert list(zip(*columns, strict=True)) == [
        (0, False, True), (6, True, True), (16, True, True), (26, True, False),
    ]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Minari's own warnings (author, casts)
        export_minari(cut, "rlvault/cut-v0")
        import minari

        back = minari.load_dataset("rlvault/cut-v0")
        episodes = list(back.iterate_episodes())
    assert (back.total_episodes, back.total_steps) == (2, 20)
    for episode, first in zip(episodes, (10, 20), strict=True):  # source timesteps 10.., 20..
        steps = np.arange(first, first + 10)
        np.testing.assert_array_equal(episode.rewards, steps.astype(np.float32))
        np.testing.assert_array_equal(episode.observations[:-1, 0], steps.astype(np.float32))
        assert episode.terminations.tolist() == [False] * 9 + [True]
        assert "extra" not in (episode.infos or {})


# ----------------------------------------------------------------------- docs/api/converters.md
# "A converter's optional dependency (`rlvault[minari]`, `rlvault[d4rl]`, `rlvault[rlds]`) is
# imported when it runs."
def test_importing_the_converters_imports_no_optional_dependency() -> None:
    optional = ("h5py", "minari", "tensorflow_datasets", "simplejpeg", "ogbench", "gymnasium")
    code = (
        "import sys, vault, vault.converters as c\n"
        "assert c.IMPORT_FORMATS and c.EXPORT_FORMATS\n"
        "for fmt in c.IMPORT_FORMATS: c.converter(fmt, 'import')\n"
        f"print([m for m in {optional!r} if m in sys.modules])\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]"


# ---------------------------------------------------------------------- migrate-flashbax.md
# "a vault stores bool, integer and float16/32/64 leaves only, and refuses the others when it
# is created, naming each such leaf: cast them to `float32` (or `float16`) to record them."
def test_jax_extra_dtypes_are_refused_at_creation_naming_each_leaf(tmp_path: Path) -> None:
    buffer = buffers.make_flat_buffer(max_length=8, min_length=2, sample_batch_size=2)
    state = buffer.init(
        {
            "obs": jnp.zeros(3, jnp.bfloat16),
            "q": jnp.zeros((), jnp.float8_e4m3fn),
            "ok": jnp.zeros((), jnp.float32),
        }
    )
    creators = {
        "create": lambda: Vault.create(str(tmp_path / "a"), state),
        "dataset": lambda: Dataset.create(str(tmp_path / "b"), state),
        "reference": lambda: Vault("run", state.experience, rel_dir=str(tmp_path), vault_uid="c"),
    }
    for how, create in creators.items():
        with pytest.raises(VaultStructureError) as err:
            create()
        text = str(err.value)
        assert "experience/obs: dtype bfloat16 is not supported" in text, how
        assert "experience/q: dtype float8_e4m3fn is not supported" in text, how
        assert "cast it to float32" in text, how
        assert "experience/ok" not in text, how
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["run"])  # no vault was made
    assert not any(p.is_file() for p in tmp_path.rglob("*"))
