"""The recording examples at their joints: a run killed (SIGKILL, a real process) and run
again as documented, an existing vault on S3 at ``--out``, ``--help`` against the flags, a
learner whose actors stopped early, and ``tools/spec_reader.py`` on what the runs made.

The kills are placed with the library's fault hook (``vault.set_fault_hook``) in a child
process, so that each lands at the same step every time: an actor of
``distributed_record.py``, run as ``python examples/distributed_record.py --role actor ...``
(``runpy``), at its third commit; and the main job's first write (``Vault.create`` of its
gridworld steps at ``--out``, without the JAX start before it) as its manifest is published.
Everything else is in-process, and no fixture is shared between tests (pytest-xdist never
runs a child twice). What tests/examples/*.py and tests/tools/test_tools_joints.py check
(refusals of a local ``--out``, the hints) is not repeated.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import vault
from vault import Dataset, Vault
from vault._errors import VaultExistsError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TOOLS = ROOT / "tools"

# A child that installs a fault hook SIGKILLing its own process at the ``nth`` call of fault
# point ``point`` (before the step runs) and prints every completed call of that point; then
# ``_RUN_SCRIPT`` runs a script with the rest of the arguments as ``python SCRIPT ARGS...``
# would, or ``_CREATE_JOB_VAULT`` creates the main job's vault.
_HOOK = """
import os, signal, sys
import vault
point, nth = sys.argv[1], int(sys.argv[2])
calls = []
def hook(p, info, step):
    if p == point:
        calls.append(info)
        if len(calls) == nth:
            os.kill(os.getpid(), signal.SIGKILL)
    result = step()
    if p == point:
        print("completed", p, info.get("length"), flush=True)
    return result
vault.set_fault_hook(hook)
"""
_RUN_SCRIPT = """
import runpy
sys.argv = sys.argv[3:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
# The main job's first write, ``Vault.create`` of its gridworld steps at ``--out`` (episode
# leaves as it names them), without the seconds of JAX before it.
_CREATE_JOB_VAULT = """
import numpy as np
example = {"obs": np.zeros(4, np.uint8), "action": np.int32(0), "reward": np.float32(0),
           "done": np.bool_(False), "truncated": np.bool_(False)}
vault.Vault.create(sys.argv[3], example, rows=32, done_leaf="done", truncated_leaf="truncated",
                   reward_leaf="reward")
"""


def _load(name: str) -> ModuleType:
    """A fresh copy of ``examples/NAME.py``."""
    spec = importlib.util.spec_from_file_location(
        f"joints_{name}_{uuid.uuid4().hex[:6]}", EXAMPLES / f"{name}.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _spec_reader() -> ModuleType:
    sys.path.insert(0, str(TOOLS))  # spec_reader imports its sibling _spec_layout
    try:
        spec = importlib.util.spec_from_file_location(
            "joints_spec_reader", TOOLS / "spec_reader.py"
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(TOOLS))
    return module


def _killed_child(point: str, nth: int, code: str, *args: str) -> tuple[int, str, str]:
    """Run a child killed at the ``nth`` call of ``point``: its status, stdout, stderr."""
    run = subprocess.run(
        [sys.executable, "-c", _HOOK + code, point, str(nth), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return run.returncode, run.stdout, run.stderr


# ------------------------------------------------------------- the main job killed early


def test_a_main_job_killed_creating_its_vault_is_replaced_by_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "gridworld")
    code, _, err = _killed_child("create", 1, _CREATE_JOB_VAULT, path)
    assert code == -9, err[-2000:]  # SIGKILLed at the fault point, as placed
    assert os.path.isdir(path)
    module = _load("record_and_train")
    parser = argparse.ArgumentParser(prog="record_and_train.py")
    for overwrite in (False, True):  # a plain re-run, and one with --overwrite: both go on
        try:  # (what the killed create left is taken over by Vault.create, as a vault is not)
            module._make_room(parser, path, overwrite)
            refused = ""
        except SystemExit:
            refused = capsys.readouterr().err
        assert not refused, (overwrite, refused)
    # and the run goes on: its vault is created there
    Vault.create(path, {"x": np.zeros(2, np.float32)}, rows=1).close()


_LIVE_WRITER = """
import sys
import numpy as np
from vault import Vault
v = Vault.create(sys.argv[1], {"x": np.zeros(2, np.float32)}, rows=1)
v.append({"x": np.ones((1, 3, 2), np.float32)})
print("recording", flush=True)
sys.stdin.read()  # until the test lets it go on
v.close()
"""


def test_overwrite_leaves_a_vault_that_a_live_run_is_recording(tmp_path: Path) -> None:
    """A run still recording into ``--out`` (another terminal, a job in the background) keeps
    its vault: deleting it under the live writer loses that run, and the live writer's next
    commit lands in the new run's vault."""
    path = str(tmp_path / "gridworld")
    writer = subprocess.Popen(
        [sys.executable, "-c", _LIVE_WRITER, path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "recording"
        assert Vault.open(path).lock_holder() is not None  # the library can tell
        module = _load("record_and_train")
        parser = argparse.ArgumentParser(prog="record_and_train.py")
        with contextlib.suppress(SystemExit):
            module._make_room(parser, path, True)
        assert os.path.isdir(path), "the live run's vault was deleted"
        assert Vault.open(path).committed_length == 3
    finally:
        writer.communicate("", timeout=60)


# -------------------------------------------------------------- an actor killed, run again


class EpisodeAcrossJoinError(AssertionError):
    """An episode runs across the join of a killed run and its re-run (the known bug): only
    this is the expected failure; any other failed check of the test is a real one."""


def test_an_actor_killed_mid_recording_and_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python examples/distributed_record.py --role actor --quick --actors 1 --out ROOT``
    killed at its third commit, then run again (in-process, as the learner starts one): the
    commits it reported are kept and verify, the re-run appends after them with the killed
    data untouched, writes nothing in its working directory, the specification's reader agrees,
    and the re-run's fresh environments start new episodes."""
    root = str(tmp_path / "actors")
    script = str(EXAMPLES / "distributed_record.py")
    args = ("--role", "actor", "--quick", "--actors", "1", "--out", root)
    code, out, err = _killed_child("commit", 3, _RUN_SCRIPT, script, *args)
    assert code == -9, err[-2000:]
    reported = [int(line.split()[2]) for line in out.splitlines() if line.startswith("completed")]
    assert reported == [50, 100]  # two appends of 50 steps committed, the third killed
    shard = Dataset.open(root).vault("actor-0")
    assert shard.committed_length == 100
    report = vault.verify(shard)
    assert report.ok, [str(p) for p in report.problems]
    assert shard.episodes(include_open=True).transitions == 8 * 100  # the index tiles it
    before = shard.read_numpy()

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        _load("distributed_record").main(list(args))
    assert printed.getvalue().strip() == "actor 0: 200 steps x 8 environments"
    assert os.listdir(cwd) == []  # nothing written where it ran
    dataset = Dataset.open(root)
    assert dataset.shards == ["actor-0"]
    shard = dataset.vault("actor-0")
    assert shard.committed_length == 100 + 200
    after = shard.read_numpy()
    for name, old in before.items():  # the committed steps, untouched
        np.testing.assert_array_equal(after[name][:, :100], old, err_msg=name)
    report = vault.verify(shard)
    assert report.ok, [str(p) for p in report.problems]
    # the reader written from the format specification alone reads the same dataset
    assert _spec_reader().main([root]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["timesteps"] == dataset.timesteps == 8 * 300
    assert shown["shards"]["actor-0"]["committed_length"] == 300
    assert shown["shards"]["actor-0"]["fingerprint"] == shard.fingerprint()

    # The re-run reset its environments: no episode runs across the join at t = 100.
    table = shard.episodes(include_open=True)
    spanning = [
        (int(r), int(s), int(n))
        for r, s, n in zip(table.row, table.start, table.length, strict=True)
        if s < 100 < s + n
    ]
    if spanning:
        raise EpisodeAcrossJoinError(f"episodes (row, start, length) across t=100: {spanning}")


# ----------------------------------------------------------------- a learner left alone


def test_a_learner_whose_actors_stopped_early_says_so(tmp_path: Path) -> None:
    module = _load("distributed_record")
    root = str(tmp_path / "actors")
    example = {
        "obs": np.zeros(4, np.uint8),
        "action": np.int32(0),
        "reward": np.float32(0),
        "done": np.bool_(False),
        "truncated": np.bool_(False),
    }
    Dataset.create(
        root, example, rows=8, done_leaf="done", truncated_leaf="truncated", reward_leaf="reward"
    )  # the dataset an actor created before it failed
    actor = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])  # a failed actor
    actor.wait(timeout=60)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.suppress(SystemExit):
        module.learn(root, [actor], module.QUICK)  # main then reports "actors [0] failed"


# ------------------------------------------------------------------------------ on S3


@pytest.mark.parametrize("name", ["record_and_train", "record_gymnasium"])
def test_an_existing_s3_vault_at_out_is_refused_with_a_usage_error(
    s3_env: Any, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """As an existing local ``--out`` is refused (exit 2, saying what to do) before anything
    runs. The main job is checked through its guard (``_make_room``, what ``main`` calls
    first; its recording would start otherwise), the Gymnasium example through ``main``."""
    url = f"s3://{s3_env.bucket}/joints-{uuid.uuid4().hex[:8]}/earlier"
    Vault.create(url, {"x": np.zeros(2, np.float32)}, rows=1).close()
    module = _load(name)
    outcome: int | str | None
    try:
        if name == "record_and_train":
            module._make_room(argparse.ArgumentParser(prog=name), url, False)
        else:
            with contextlib.redirect_stdout(io.StringIO()):
                module.main(["--out", url])
        outcome = None  # went on
    except SystemExit as exited:
        outcome = exited.code
    except VaultExistsError as error:
        outcome = f"traceback: VaultExistsError: {error}"
    assert Vault.open(url).rows == 1  # left as it was, whatever happened
    assert outcome == 2, outcome
    assert f"{url} already exists" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- --help


def _options(help_text: str) -> dict[str, str]:
    """Each option of an argparse help's ``options:`` section -> its description."""
    lines = help_text.split("options:\n", 1)[1].splitlines()
    found: dict[str, str] = {}
    current = None
    for line in lines:
        if not line.strip():
            break
        head = re.match(r"  (-\S+(?: [^-\s]\S*)?(?:, -\S+(?: [^-\s]\S*)?)*)(?:\s{2,}(.*))?$", line)
        if head:
            current = head.group(1).split(", ")[-1].split()[0]
            found[current] = head.group(2) or ""
        elif current is not None:
            found[current] = (found[current] + " " + line.strip()).strip()
    return found


@pytest.mark.parametrize(
    ("name", "flags"),
    [
        ("record_and_train", ["--quick", "--out", "--overwrite", "--seed"]),
        ("distributed_record", ["--quick", "--out", "--actors", "--overwrite", "--role"]),
        ("record_gymnasium", ["--out"]),
        ("offline_sub_buffer", ["--out"]),
        ("quickstart_flat", ["--out"]),
        ("quickstart_trajectory", ["--out"]),
        ("quickstart_n_step", []),
        ("quickstart_prioritised", []),
    ],
)
def test_help_describes_every_flag(
    capsys: pytest.CaptureFixture[str], name: str, flags: list[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        _load(name).main(["--help"])
    assert exited.value.code == 0
    options = _options(capsys.readouterr().out)
    assert sorted(options) == sorted(["--help", *flags])
    undescribed = [flag for flag, text in options.items() if not text]
    assert undescribed == [], f"{name}.py --help: no description for {undescribed}"
