"""The examples and tools as a new user runs them: the variations their ``--help`` offers (a
path with spaces, a trailing slash, an existing folder), their smallest modes, and bad
arguments. What the other files of tests/tools and tests/examples check is not repeated.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from vault import Dataset, Vault

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
EXAMPLES = ROOT / "examples"


def _tool(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOLS / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"joints_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------ examples' hints


@pytest.mark.parametrize(
    ("name", "made"),
    [
        ("quickstart_flat", "v"),
        ("quickstart_trajectory", "v"),
        ("record_gymnasium", "v"),
        ("offline_sub_buffer", "walks"),
    ],
)
def test_the_delete_hint_runs_as_printed_for_a_path_with_a_space(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, made: str
) -> None:
    root = tmp_path / "my runs"
    (root / made).mkdir(parents=True)
    out = root if name == "offline_sub_buffer" else root / made
    with pytest.raises(SystemExit) as exited:
        _example(name).main(["--out", str(out)])
    assert exited.value.code == 2
    taken = str(root / made)
    assert f"rm -r {shlex.quote(taken)})" in capsys.readouterr().err


def _fake_record(path: str, cfg: Any, seed: int) -> dict[str, Any]:
    """A tiny gridworld-shaped vault in place of the recording (seconds of JAX saved)."""
    example: dict[str, Any] = {
        "obs": np.zeros(4, np.uint8),
        "action": np.int32(0),
        "reward": np.float32(0),
        "done": np.bool_(False),
        "truncated": np.bool_(False),
    }
    steps = {k: np.zeros((2, 8, *np.shape(v)), np.asarray(v).dtype) for k, v in example.items()}
    steps["done"][:, 3] = True
    steps["reward"][:, 3] = 1.0
    with Vault.create(
        path, example, rows=2, done_leaf="done", truncated_leaf="truncated", reward_leaf="reward"
    ) as v:
        v.append(steps)
    return {"episodes_seen": 2, "timesteps": 8}


def _fake_train(path: str, cfg: Any, seed: int, at: str | None = None) -> dict[str, Any]:
    returns = {"bc": 0.3, "cql": 0.7, "random": -0.5, "behaviour": 0.15, "recorded_mean": 0.2}
    return {f"{k}_return": v for k, v in returns.items()} | {"history": {}}


def test_the_plot_hint_of_the_main_job_is_beside_a_vault_given_with_a_slash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _example("record_and_train")
    monkeypatch.setattr(module, "record", _fake_record)
    monkeypatch.setattr(module, "train", _fake_train)
    given = f"{tmp_path / 'gridworld'}/"  # as a shell's completion of a folder name gives it
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        module.main(["--quick", "--out", given])
    hints = printed.getvalue().split("look at the data:\n", 1)[1].splitlines()
    plot = shlex.split(next(h for h in hints if " plot " in h))
    png = Path(plot[plot.index("--out") + 1])
    assert png.suffix == ".png"
    assert tmp_path / "gridworld" not in png.resolve().parents  # not written into the vault


def test_the_closing_hint_of_the_actors_example_runs_as_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _example("distributed_record")

    class Finished:
        returncode = 0

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def poll(self) -> int:
            return 0

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(module.subprocess, "Popen", Finished)  # no actor processes
    result = {"shards": ["actor-0"], "timesteps": 1, "episodes_per_shard": {}, "bc_return": 0.0}
    monkeypatch.setattr(module, "learn", lambda *args: result)
    out = str(tmp_path / "my actors")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        module.main(["--quick", "--actors", "1", "--out", out])
    assert f"vault info {shlex.quote(out)};" in printed.getvalue()


def test_the_actors_example_never_removes_what_is_not_a_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--overwrite`` replaces an earlier run's dataset only: a vault (or any other folder)
    at ``--out`` is refused, and left as it was."""
    module = _example("distributed_record")
    taken = tmp_path / "runs"
    Vault.create(str(taken), {"x": np.zeros(2, np.float32)}, rows=1).close()
    with pytest.raises(SystemExit) as exited:
        module.main(["--quick", "--out", str(taken)])
    assert exited.value.code == 2
    assert f"{taken} exists: pass --overwrite to replace it" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        module.main(["--quick", "--out", str(taken), "--overwrite"])
    assert exited.value.code == 2
    assert f"{taken} is not a dataset; not removing it" in capsys.readouterr().err
    assert Vault.open(str(taken)).rows == 1


# ------------------------------------------------------------------ episode-aware sampling


@pytest.fixture(scope="module")
def episode_sampling(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """One ``--quick`` run of tools/bench_episode_sampling.py (per xdist worker)."""
    out = tmp_path_factory.mktemp("episode_sampling") / "r.json"
    run = _tool("bench_episode_sampling.py", "--quick", "--out", str(out), timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.read_text()), run.stdout


def test_episode_sampling_prints_the_json_it_writes_and_its_table(
    episode_sampling: tuple[dict[str, Any], str],
) -> None:
    doc, stdout = episode_sampling
    printed, _, _ = stdout.partition("\n\n| op |")
    assert json.loads(printed) == doc  # stdout starts with the same JSON as --out
    assert doc["config"]["seqs"] == [2]
    assert [(r["op"], r["mode"]) for r in doc["rows"]] == [
        ("sample_256 (L=2)", "loop"),
        ("sample_256 (L=2)", "scan"),
        ("add_128 (1 step x 128 rows)", "loop"),
    ]
    for row in doc["rows"]:
        assert row["ratio"] == pytest.approx(row["plain_us"] / row["episode_us"])
        if row["op"].startswith("sample"):
            assert (row["target"], row["met"]) == (">= 0.5", row["ratio"] >= 0.5)
        else:
            assert (row["target"], row["met"]) == (None, None)
        cells = f"| {row['plain_us']:.1f} | {row['episode_us']:.1f} | {row['ratio']:.2f} |"
        assert f"| {row['op']} | {row['mode']} {cells}" in stdout


def test_episode_sampling_times_the_python_loop_after_its_compile(
    episode_sampling: tuple[dict[str, Any], str],
) -> None:
    doc, _ = episode_sampling
    loop = next(r for r in doc["rows"] if r["op"].startswith("sample") and r["mode"] == "loop")
    # the same sampler runs in both modes: a plain/episode-aware ratio far beyond the scan's
    # (about 1) is a one-off cost charged to one side
    assert loop["ratio"] < 3, loop


# --------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    "args",
    [
        ["crash_trials.py", "--trials", "1", "--workdir", "{missing}"],
        ["crash_trials.py", "--trials", "-1"],
        ["bench_convert.py", "--quick", "--formats", "d4rl,bogus"],
        ["spec_reader.py", "{missing}"],
    ],
    ids=["crash-workdir", "crash-trials", "convert-formats", "spec-missing"],
)
def test_a_bad_argument_is_an_error_not_a_traceback(tmp_path: Path, args: list[str]) -> None:
    name, *rest = (a.format(missing=tmp_path / "missing" / "x") for a in args)
    run = _tool(name, *rest)
    assert run.returncode != 0, run.stdout[-2000:]
    assert "Traceback" not in run.stderr, run.stderr[-2000:]


def test_soak_refuses_an_s3_url_that_is_not_one(tmp_path: Path) -> None:
    place = tmp_path / "not-a-url"
    run = _tool(
        "soak.py",
        *("--location", "s3", "--s3-url", str(place), "--minutes", "0.01"),
        *("--kill-every", "0", "--fill-every", "0", "--workdir", str(tmp_path / "work")),
    )
    assert run.returncode == 2, run.stdout[-2000:]
    assert not place.exists()


def test_spec_reader_takes_a_dataset_root(tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    example = {"x": np.zeros(2, np.float32), "done": np.bool_(False)}
    dataset = Dataset.create(root, example, rows=1, done_leaf="done")
    with dataset.shard("a") as shard:
        shard.append({"x": np.ones((1, 3, 2), np.float32), "done": np.zeros((1, 3), bool)})
    run = _tool("spec_reader.py", root)
    assert "Traceback" not in run.stderr, run.stderr[-2000:]
