"""examples/distributed_record.py: actor processes record into one dataset while the learner
trains from it, seeing new shards and commits as they land (quick mode, as users run it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

import vault
from vault import Dataset

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "distributed_record.py"


def test_actors_record_while_the_learner_trains(tmp_path: Path) -> None:
    out = tmp_path / "actors"
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--quick", "--actors", "3", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rounds = [line for line in run.stdout.splitlines() if line.startswith("learner round")]
    assert rounds, run.stdout
    seen = [int(line.split()[5]) for line in rounds]  # "learner round N: S shards, T timesteps"
    dataset = Dataset.open(str(out))
    assert dataset.shards == ["actor-0", "actor-1", "actor-2"]
    total = 3 * 8 * 200  # actors x environments x steps (quick settings)
    assert dataset.timesteps == total
    assert seen == sorted(seen)  # the learner saw the dataset grow, round after round
    assert seen[-1] == total  # and trained on all of it at the end
    assert f"{total} timesteps" in run.stdout.splitlines()[-2]
    for name in dataset.shards:
        assert vault.verify(dataset.vault(name)).ok
    table = dataset.episodes()
    assert set(np.unique(table.shard)) == set(dataset.shards)
    # the actors differ: the least noisy one reaches the goal more often
    returns = {n: float(table.returns[table.shard == n].mean()) for n in dataset.shards}
    assert returns["actor-0"] > returns["actor-2"]
    # the printed command works
    assert "vault info " + str(out) in run.stdout
