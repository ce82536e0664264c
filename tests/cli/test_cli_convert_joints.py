"""``vault import`` / ``vault export --format minari`` at their joints with the library and
with the places they write.

* The command against the API: the same import by ``vault import`` (to the S3 test server)
  and by ``import_dataset`` (to disk) is the same vault (fingerprint, episode table,
  ``imported_from``), and ``--json`` speaks the CLI tour's key table.
* Destinations: a shard's place inside a dataset (on disk and on S3, a vault and an RLDS
  ``--shards`` import), a dataset's root, a destination whose parent is a file, relative paths
  and ``~`` (of the destination and of the source), ``OUT/.`` for an OGBench import with a
  validation file, and the validation vault's location as the training vault records it.
* Derive and back: a D4RL file whose values say where they belong (``observations[t] = (t,
  -t)``, ``actions[t] = (t, r_t)``) imported, sliced twice (unknown starts, open last
  episodes), combined (a seam), exported to Minari, imported again, then ``subsample``-d,
  exported and imported again, each time compared with a model walked from the file's flags.
* Progress on a terminal ends at its total; an import or export interrupted (Ctrl-C, simulated
  by a progress callback raising ``KeyboardInterrupt`` at each of its calls) exits 130 in one
  line and leaves nothing; bad sources of every format exit with their documented code in one
  line naming the source; a malformed Minari dataset id says what an id looks like.

Sources are written here (h5py, numpy) or are the repository's RLDS fixture (copied into
``tmp_path`` where a test needs it elsewhere); nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from _cli_vaults import Cli, one_error_line
from _convert_sources import write_ogbench
from test_cli_ux import check_schema, vocabulary
from typer.testing import CliRunner

from vault import Dataset, Vault, VaultError
from vault.cli import app
from vault.converters import import_dataset

RLDS = Path(__file__).resolve().parents[1] / "data" / "rlds" / "tf_toy" / "1.0.0"

# D4RL model: n timesteps, flags at ENDS (terminal, timeout alternately), the last one open
N = 40
ENDS = (3, 8, 9, 15, 21, 28, 33)


def model_file(path: Path) -> dict[str, np.ndarray]:
    """A D4RL-style file whose values say where they belong; returns its arrays."""
    t = np.arange(N)
    rewards = ((t * 7) % 11).astype(np.float32)  # distinct episode returns
    data = {
        "observations": np.stack([t, -t], 1).astype(np.float32),
        "next_observations": np.stack([t + 1, -t - 1], 1).astype(np.float32),
        "actions": np.stack([t, rewards], 1).astype(np.float32),
        "rewards": rewards,
        "terminals": np.isin(t, ENDS[0::2]),
        "timeouts": np.isin(t, ENDS[1::2]),
    }
    with h5py.File(path, "w") as f:
        for key, value in data.items():
            f.create_dataset(key, data=value)
    return data


def model_episodes(lo: int, hi: int) -> list[tuple[int, int]]:
    """The whole, ended episodes ``(start, stop)`` of the file's timesteps ``[lo, hi)``: an
    episode whose start lies before ``lo`` (its beginning not in the slice) or whose end lies
    at or after ``hi`` (open) is not one."""
    starts = [0, *(e + 1 for e in ENDS)]
    return [(s, e + 1) for s, e in zip(starts, ENDS, strict=False) if s >= lo and e < hi]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The sources every test reads (never written to)."""
    root = tmp_path_factory.mktemp("sources")
    d4rl = model_file(root / "model.hdf5")
    write_ogbench(root / "maze-v0.npz", [3, 2])
    write_ogbench(root / "maze-v0-val.npz", [2], seed=1)
    return {"root": root, "d4rl": d4rl}


def tree(folder: Path) -> list[str]:
    """Every path under ``folder`` (hidden ones too), relative, sorted."""
    if not folder.exists():
        return []
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def episode_rows(vault: Vault) -> list[tuple[Any, ...]]:
    table = vault.episodes(include_open=True)
    return list(
        zip(
            table.row.tolist(),
            table.start.tolist(),
            table.length.tolist(),
            table.truncated.tolist(),
            table.complete.tolist(),
            table.start_known.tolist(),
            strict=True,
        )
    )


# ------------------------------------------------------------ the command against the API
def test_cli_import_to_s3_is_the_api_import_to_disk(
    files: dict[str, Any], tmp_path: Path, s3_env: Any
) -> None:
    cli, vocab = Cli(), vocabulary()
    base = f"s3://{s3_env.bucket}/convert-{uuid.uuid4().hex[:8]}"
    src = files["root"]
    for fmt, source in (("d4rl", src / "model.hdf5"), ("ogbench", src / "maze-v0.npz")):
        doc = cli.json("import", fmt, source, "--out", f"{base}/{fmt}")
        api = import_dataset(fmt, source, tmp_path / fmt)
        made = Vault.open(f"{base}/{fmt}")
        assert doc["path"] == made.location == f"{base}/{fmt}"
        assert (doc["committed"], doc["episodes"]) == (
            api.committed_length,
            len(api.episodes()),
        )
        assert made.fingerprint() == api.fingerprint()
        assert cli.json("info", f"{base}/{fmt}")["fingerprint"] == api.fingerprint()
        assert episode_rows(made) == episode_rows(api)
        origin, api_origin = made.metadata["imported_from"], api.metadata["imported_from"]
        assert origin.pop("validation", None) == (f"{base}/{fmt}-val" if fmt == "ogbench" else None)
        api_origin.pop("validation", None)
        assert origin == api_origin
        assert origin["source"] == str(source)
        check_schema(doc, vocab)
        if fmt == "ogbench":
            check_schema(doc["validation"], vocab)
            assert doc["validation"]["path"] == f"{base}/ogbench-val"
            val = Vault.open(f"{base}/ogbench-val")
            assert val.fingerprint() == Vault.open(tmp_path / "ogbench-val").fingerprint()
    # an existing destination on S3: one line naming it, exit 1, and it is left as it was
    before = Vault.open(f"{base}/d4rl").fingerprint()
    line = one_error_line(
        cli("import", "d4rl", src / "model.hdf5", "--out", f"{base}/d4rl", code=1)
    )
    assert f"{base}/d4rl already exists" in line
    assert Vault.open(f"{base}/d4rl").fingerprint() == before


def test_rlds_shards_json_speaks_the_tours_vocabulary(tmp_path: Path) -> None:
    doc = Cli().json("import", "rlds", RLDS, "--out", tmp_path / "ds", "--shards")
    vocab = vocabulary()
    check_schema(doc, vocab)
    dataset = Dataset.open(tmp_path / "ds")
    assert doc["kind"] == "dataset"
    assert [s["shard"] for s in doc["shards"]] == dataset.shards
    for entry in doc["shards"]:
        assert set(entry) == {"shard", "rows", "committed", "commit"}, entry
        assert entry["committed"] == dataset.vault(entry["shard"]).committed_length
    assert doc["timesteps"] == dataset.timesteps == 24


# --------------------------------------------------------------------------- destinations
@pytest.mark.parametrize("case", ["d4rl", "d4rl-s3", "rlds-shards"])
def test_an_import_into_a_shards_place_leaves_the_dataset_as_it_was(
    files: dict[str, Any], tmp_path: Path, request: pytest.FixtureRequest, case: str
) -> None:
    if case.endswith("s3"):
        server = request.getfixturevalue("s3_env")
        root = f"s3://{server.bucket}/ds-{uuid.uuid4().hex[:8]}/ds"
    else:
        root = str(tmp_path / "ds")
    dataset = Dataset.create(root, {"x": np.zeros(2, np.float32)}, rows=1)
    with dataset.shard("a") as shard:
        shard.append({"x": np.arange(6, dtype=np.float32).reshape(1, 3, 2)})
    if case == "rlds-shards":
        args: tuple[Any, ...] = ("rlds", RLDS, "--out", f"{root}/shards/b", "--shards")
    else:
        args = ("d4rl", files["root"] / "model.hdf5", "--out", f"{root}/shards/b")
    result = Cli()("import", *args, code=None)
    try:
        after = Dataset.open(root)
    except VaultError as err:
        pytest.fail(f"the dataset no longer opens after the import: {err}")
    assert after.shards == ["a"]
    np.testing.assert_array_equal(after.read_numpy("a")["x"], np.arange(6).reshape(1, 3, 2))
    assert result.exit_code == 1, result.stdout
    assert f"{root}/shards/b" in one_error_line(result)


def test_destinations_that_are_taken_or_cannot_be_made(
    files: dict[str, Any], tmp_path: Path
) -> None:
    cli, src = Cli(), files["root"] / "model.hdf5"
    # a dataset's root, a file, a path under a file: one line naming it, nothing written
    dataset = Dataset.create(str(tmp_path / "ds"), {"x": np.zeros(2, np.float32)}, rows=1)
    with dataset.shard("a") as shard:
        shard.append({"x": np.zeros((1, 2, 2), np.float32)})
    (tmp_path / "file").write_bytes(b"keep")
    before = tree(tmp_path)
    for out, says in (
        (tmp_path / "ds", "already exists"),
        (tmp_path / "file", "already exists"),
        (tmp_path / "file" / "v", "expected a directory, got a file"),
        (tmp_path / "file" / "a" / "v", "expected a directory, got a file"),
    ):
        line = one_error_line(cli("import", "d4rl", src, "--out", out, code=1))
        assert str(out) in line, line
        assert says in line, line
    assert tree(tmp_path) == before
    assert (tmp_path / "file").read_bytes() == b"keep"
    assert Dataset.open(tmp_path / "ds").shards == ["a"]


def test_relative_and_home_destinations_land_where_they_say(
    files: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = Cli()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    shutil.copy(files["root"] / "maze-v0.npz", "maze-v0.npz")
    shutil.copy(files["root"] / "maze-v0-val.npz", "maze-v0-val.npz")
    doc = cli.json("import", "d4rl", files["root"] / "model.hdf5", "--out", "~/runs/d")
    assert doc["path"] == str(tmp_path / "home" / "runs" / "d")
    assert not Path("~").exists()
    doc = cli.json("import", "ogbench", "maze-v0.npz", "--out", "runs/o")
    assert doc["path"] == str(tmp_path / "cwd" / "runs" / "o")
    assert doc["validation"]["path"] == str(tmp_path / "cwd" / "runs" / "o-val")
    origin = Vault.open(doc["path"]).metadata["imported_from"]
    assert origin["source"] == str(tmp_path / "cwd" / "maze-v0.npz")
    np.testing.assert_array_equal(
        Vault.open("~/runs/d").read_numpy()["observations"][0],
        files["d4rl"]["observations"],
    )


def test_the_validation_vault_recorded_is_found_from_anywhere(
    files: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    Cli()("import", "ogbench", files["root"] / "maze-v0.npz", "--out", "maze")
    monkeypatch.chdir(tmp_path / "b")
    origin = Vault.open(tmp_path / "a" / "maze").metadata["imported_from"]
    assert origin["source"] == str(files["root"] / "maze-v0.npz")  # absolute, as every source
    try:
        val = Vault.open(origin["validation"])
    except VaultError as err:
        pytest.fail(f"imported_from.validation {origin['validation']!r} opens nothing: {err}")
    assert val.location == str(tmp_path / "a" / "maze-val")


def test_an_ogbench_destination_ending_in_dot_gets_its_validation_beside_it(
    files: dict[str, Any], tmp_path: Path
) -> None:
    result = Cli()("import", "ogbench", files["root"] / "maze-v0.npz", "--out", f"{tmp_path}/o/.",
                   code=None)  # fmt: skip
    if result.exit_code == 0:  # the destination is the folder o: its validation is o-val
        assert Vault.open(tmp_path / "o").committed_length == 7
        assert Vault.open(tmp_path / "o-val").committed_length == 3
    else:  # or refused in one line, leaving nothing
        one_error_line(result)
        assert tree(tmp_path) == [], tree(tmp_path)


def test_an_rlds_source_under_home_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copytree(RLDS, tmp_path / "tfds" / "tf_toy" / "1.0.0")
    result = Cli()("import", "rlds", "~/tfds/tf_toy/1.0.0", "--out", tmp_path / "v", code=None)
    assert result.exit_code == 0, result.stderr
    origin = Vault.open(tmp_path / "v").metadata["imported_from"]
    assert origin["source"] == str(tmp_path / "tfds" / "tf_toy" / "1.0.0")


# ------------------------------------------------------------------ derive, export, again
def test_import_derive_export_import_again_against_the_model(
    files: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    cli, data = Cli(), files["d4rl"]
    cli("import", "d4rl", files["root"] / "model.hdf5", "--out", tmp_path / "v")
    spans = [(6, N), (16, 30)]  # an unknown start and an open end each; joined by a seam
    for i, (lo, hi) in enumerate(spans):
        cli("slice", tmp_path / "v", "--out", tmp_path / f"s{i}", "--time", f"{lo}:{hi}")
    cli("combine", tmp_path / "s0", tmp_path / "s1", "--out", tmp_path / "c")
    doc = cli.json("export", tmp_path / "c", "--format", "minari", "--out", "rt/c-v0")
    assert "warnings" not in doc
    cli("import", "minari", "rt/c-v0", "--out", tmp_path / "back")

    def check(vault: Vault, episodes: list[tuple[int, int]]) -> None:
        index = np.concatenate([np.arange(s, e) for s, e in episodes])
        got = vault.read_numpy()
        for leaf in ("observations", "next_observations", "actions", "rewards"):
            np.testing.assert_array_equal(got[leaf][0], data[leaf][index], err_msg=leaf)
        ends = [e - 1 for _, e in episodes]
        np.testing.assert_array_equal(got["terminations"][0], np.isin(index, ENDS[0::2]))
        np.testing.assert_array_equal(got["truncations"][0], np.isin(index, ENDS[1::2]))
        table = vault.episodes(include_open=True)
        assert table.length.tolist() == [e - s for s, e in episodes]
        assert table.truncated.tolist() == [e in ENDS[1::2] for e in ends]
        assert all(table.complete)
        assert all(table.start_known)
        np.testing.assert_allclose(table.returns, [data["rewards"][s:e].sum() for s, e in episodes])

    whole = [ep for lo, hi in spans for ep in model_episodes(lo, hi)]
    check(Vault.open(tmp_path / "back"), whole)
    # and once more through subsample: the two best episodes, in their order
    cli("subsample", tmp_path / "back", "--out", tmp_path / "best", "--top-k", "2")
    cli("export", tmp_path / "best", "--format", "minari", "--out", "rt/best-v0")
    cli("import", "minari", "rt/best-v0", "--out", tmp_path / "best-back")
    returns = [float(data["rewards"][s:e].sum()) for s, e in whole]
    order = np.argsort(returns, kind="stable")[::-1]
    assert returns[order[1]] > returns[order[2]]  # (the model's top two are unambiguous)
    check(Vault.open(tmp_path / "best-back"), [whole[i] for i in sorted(order[:2])])


# --------------------------------------------------------------- progress and interruption
def _frames(text: str) -> list[tuple[str, str]]:
    """The ``done/total`` of every frame of a rich download column in ``text``."""
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    return re.findall(r"([\d.]+|\?)/([\d.?]+) (?:bytes|[kMG]B)", plain)


def test_progress_on_a_terminal_ends_at_its_total(
    files: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    runner, env = CliRunner(), {"TTY_COMPATIBLE": "1", "COLUMNS": "200", "NO_COLOR": "1"}
    out = tmp_path / "o"
    result = runner.invoke(app, ["import", "ogbench", str(files["root"] / "maze-v0.npz"),
                                 "--out", str(out)], env=env)  # fmt: skip
    assert result.exit_code == 0, result.output
    frames = _frames(result.stderr)
    assert frames, result.stderr
    assert frames[-1][0] == frames[-1][1], frames  # training + validation
    Cli()("import", "d4rl", files["root"] / "model.hdf5", "--out", tmp_path / "v")
    result = runner.invoke(
        app, ["export", str(tmp_path / "v"), "--format", "minari", "--out", "pg/v-v0"], env=env
    )
    assert result.exit_code == 0, result.output
    frames = _frames(result.stderr)
    assert frames, result.stderr
    assert frames[-1][0] == frames[-1][1], frames


def test_an_interrupted_import_or_export_leaves_nothing(
    files: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vault.cli import _convert

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    calls = {"at": 0, "n": 0}

    @contextlib.contextmanager
    def progress_bar(description: str, **kw: Any) -> Iterator[Any]:
        def update(done: int, total: int) -> None:
            calls["n"] += 1
            if calls["n"] == calls["at"]:
                raise KeyboardInterrupt

        yield update

    monkeypatch.setattr(_convert, "progress_bar", progress_bar)
    cli = Cli()
    ogbench = files["root"] / "maze-v0.npz"
    jobs = {  # what runs, and the folder it writes into (empty until the job completes)
        "ogbench": (("import", "ogbench", ogbench, "--out", tmp_path / "out/o"), tmp_path / "out"),
        "minari": (
            ("export", tmp_path / "v", "--format", "minari", "--out", "ns/x-v0"),
            tmp_path / "minari",
        ),
    }
    cli("import", "d4rl", files["root"] / "model.hdf5", "--out", tmp_path / "v")
    # the calls: ogbench (0, total) then the training file's one block, the validation
    # file's start and its one block; the export (0, total) then (total, total)
    for name, (args, place), stops in zip(jobs, jobs.values(), ([4], [2]), strict=True):
        for at in stops:
            calls.update(at=at, n=0)
            result = cli(*args, code=130)
            assert calls["n"] == at, (name, at)
            assert "interrupted" in one_error_line(result)
            assert tree(place) == [], (name, at)
        calls.update(at=0, n=0)
        cli(*args)  # and run again, whole
        assert calls["n"] == stops[-1], name  # the last call was interrupted above
        assert tree(place) != [], name
    assert Vault.open(tmp_path / "out" / "o-val").committed_length == 3


# ----------------------------------------------------------------------- one-line errors
def test_bad_sources_exit_with_their_code_in_one_line_naming_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    (tmp_path / "junk.bin").write_bytes(b"junk" * 16)
    (tmp_path / "folder").mkdir()
    cli, out = Cli(), tmp_path / "out"
    cases = [
        ("d4rl", tmp_path / "nope.hdf5", 2),
        ("d4rl", tmp_path / "junk.bin", 3),  # not HDF5: corrupt
        ("ogbench", tmp_path / "nope.npz", 2),
        ("ogbench", tmp_path / "junk.bin", 3),  # not a zip: corrupt
        ("minari", tmp_path / "folder", 2),
        ("minari", "nobody/none-v0", 2),
        ("flashbax", tmp_path / "folder", 2),
        ("rlds", tmp_path / "folder", 2),
    ]
    for fmt, source, code in cases:
        result = cli("import", fmt, source, "--out", out, code=None)
        assert result.exit_code == code, (fmt, source, result.exit_code, result.stderr)
        line = one_error_line(result)
        assert str(source) in line, line
        assert "a bug in rlvault" not in line, line
        assert not out.exists()


def test_a_dataset_id_without_a_version_says_what_an_id_looks_like(
    files: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    cli = Cli()
    cli("import", "d4rl", files["root"] / "model.hdf5", "--out", tmp_path / "v")
    line = one_error_line(
        cli("export", tmp_path / "v", "--format", "minari", "--out", "cartpole", code=1)
    )
    assert "cartpole" in line, line
    assert "-v" in line, line
    assert not (tmp_path / "minari" / "cartpole").exists()
