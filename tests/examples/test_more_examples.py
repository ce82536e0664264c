"""The short examples run as a user runs them (no options) and do what they say.

Each example's ``main(argv)`` is called in-process with no arguments (the examples have no
other mode; a vault goes to a new temporary directory, here under ``tmp_path``); its returned
numbers are checked against what the buffers and the vault promise, and vaults it wrote are
verified. ``--out`` is checked once per example that takes it: an existing path is refused
with a message that says what to do.
"""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from vault import Vault, verify

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tempfile.mkdtemp`` makes its folders under ``tmp_path`` (an example's default)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _made(root: Path, prefix: str) -> Path:
    """The one folder an example made with ``tempfile.mkdtemp(prefix=prefix)``."""
    (made,) = root.glob(f"{prefix}*")
    return made


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("quickstart_flat", ["--out", "{x}"]),
        ("quickstart_trajectory", ["--out", "{x}"]),
        ("record_gymnasium", ["--out", "{x}"]),
        ("offline_sub_buffer", ["--out", "{root}"]),
    ],
)
def test_an_existing_out_is_refused_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, args: list[str]
) -> None:
    taken = tmp_path / "x"
    (tmp_path / "walks").mkdir()
    taken.mkdir()
    argv = [a.format(x=taken, root=tmp_path) for a in args]
    with pytest.raises(SystemExit) as exited:
        _load(name).main(argv)
    assert exited.value.code == 2
    where = taken if "{x}" in args else tmp_path / "walks"
    assert (
        f"{where} already exists; pass another --out, or delete it first (rm -r {where})"
        in capsys.readouterr().err
    )


def test_offline_sub_buffer_names_every_folder_in_the_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both of its vaults there: both named, so one deletion makes the next run work."""
    for name in ("walks", "best"):
        (tmp_path / name).mkdir()
    with pytest.raises(SystemExit) as exited:
        _load("offline_sub_buffer").main(["--out", str(tmp_path)])
    assert exited.value.code == 2
    walks, best = tmp_path / "walks", tmp_path / "best"
    assert (
        f"{walks} and {best} already exist; pass another --out, or delete them first "
        f"(rm -r {walks} {best})" in capsys.readouterr().err
    )


def test_quickstart_flat(temp_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = _load("quickstart_flat").main([])
    path = _made(temp_dir, "rlvault-flat-") / "vault"
    assert result["valid"]
    assert result["consecutive"]  # (s, s') pairs are one environment at t and t + 1
    steps = result["steps"]
    assert steps > 64  # the buffer (64 steps per row) wrapped; the vault kept everything
    assert result["committed_length"] == steps
    assert result["episodes"] == 4 * (steps // 8)  # every 8th step of each env ends one
    # Read back with the buffer's capacity: the last 64 steps, sampled by the same functions.
    assert result["offline_valid"]
    assert result["offline_consecutive"]
    assert result["offline_min_t"] >= steps - 64
    assert verify(str(path)).ok
    assert f"vault: {steps} steps per row" in capsys.readouterr().out


def test_quickstart_n_step() -> None:
    result = _load("quickstart_n_step").main([])
    assert result["valid"]
    assert np.all(result["steps_apart"] == 3)  # s_{t+n} is n = 3 steps after s_t
    assert result["matches"]  # every return and bootstrap factor equals the hand computation
    assert 0 < result["bootstrap_zero"] < 64  # some windows are cut by an episode end


def test_quickstart_trajectory(temp_dir: Path) -> None:
    result = _load("quickstart_trajectory").main([])
    path = _made(temp_dir, "rlvault-trajectory-") / "vault"
    assert result["valid"]
    assert result["contiguous"]
    assert result["starts_on_period"]
    assert result["oldest_in_buffer"] >= result["vault_steps"] - 64  # only the last 64 held
    assert result["vault_steps"] == 128
    assert result["vault_complete"]  # every step ever added, in order, with write(block=False)
    # Returns-to-go inside each sequence, checked with a plain loop.
    dones = result["dones"].astype(float)
    expected = np.zeros_like(dones)
    running = np.zeros(dones.shape[0])
    for t in reversed(range(dones.shape[1])):
        running = 1.0 + 0.9 * running * (1.0 - dones[:, t])
        expected[:, t] = running
    np.testing.assert_allclose(result["returns"], expected, rtol=1e-5)
    assert verify(str(path)).ok


def test_quickstart_prioritised() -> None:
    result = _load("quickstart_prioritised").main([])
    share = result["share"]
    assert 0.05 < share < 0.2
    # Priority updates turn sampling towards the rewarding sequences.
    assert result["last_batches"] > 3 * share
    assert result["last_batches"] > result["first_batch"] + 0.3
    rewarding, probs = result["final_rewarding"], result["final_probabilities"]
    assert rewarding.any()
    assert (~rewarding).any()
    assert probs[rewarding].mean() > 5 * probs[~rewarding].mean()


def test_record_gymnasium(temp_dir: Path) -> None:
    result = _load("record_gymnasium").main([])
    path = _made(temp_dir, "rlvault-gym-") / "vault"
    assert result["path"] == str(path)
    assert result["committed_length"] == result["steps"] == 300
    # The vault's episode index agrees with the episodes counted while stepping Gymnasium.
    assert result["episodes"] == len(result["returns_counted"]) > 3
    np.testing.assert_allclose(result["returns_indexed"], result["returns_counted"])
    assert result["lengths_equal_returns"]  # CartPole pays 1 per step
    report = verify(str(path))
    assert report.ok, [str(p) for p in report.problems]
    assert Vault.open(str(path)).metadata["env"] == "CartPole-v1"


def test_offline_sub_buffer(temp_dir: Path) -> None:
    result = _load("offline_sub_buffer").main([])
    root = _made(temp_dir, "rlvault-sub-")
    lo, hi = result["sub_times"]
    assert 256 <= lo <= hi < 768  # samples come only from the block that was read
    assert result["sub_valid"]
    assert result["best"] == result["episodes"] // 4 > 10
    # The best quarter really is the top of the returns.
    returns = np.sort(result["all_returns"])
    assert result["best_min_return"] == pytest.approx(returns[-result["best"]])
    assert result["best_steps"] == result["best_transitions"]
    assert result["episode_valid"]
    assert result["crossing"] == 0  # episode-aware windows never cross an episode end
    assert sorted(result["window_starts"]) == list(range(0, 1024, 256))
    assert result["window_starts"] != sorted(result["window_starts"])  # shuffled
    assert result["windows_valid"]
    for name in ("walks", "best"):
        assert verify(str(root / name)).ok
