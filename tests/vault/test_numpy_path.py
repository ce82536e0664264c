"""Numpy data never loads jax: a process that writes and reads numpy arrays (a Gymnasium loop, a
converter, many writer processes starting at once) does not pay jax's import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from vault import Vault

CHILD = """
import json, sys
import numpy as np
from vault import Vault

path = sys.argv[1]
example = {"obs": np.zeros((3,), np.float32), "done": np.zeros((), bool), "reward": np.float32(0)}
v = Vault.create(path, example, rows=2, done_leaf="done", reward_leaf="reward")
loaded = {"create": "jax" in sys.modules}
done = np.zeros((2, 5), bool)
done[0, 2] = True
v.append({"obs": np.ones((2, 5, 3), np.float32), "done": done,
          "reward": np.ones((2, 5), np.float32)})
v.append({"obs": np.full((2, 4, 3), 2, np.float32), "done": np.zeros((2, 4), bool),
          "reward": np.zeros((2, 4), np.float32)})
loaded["append"] = "jax" in sys.modules
v.close()
r = Vault.open(path)
data = r.read_numpy()
episodes = r.episodes()
loaded["read"] = "jax" in sys.modules
print(json.dumps({"loaded": loaded, "obs": data["obs"][:, :, 0].tolist(),
                  "lengths": episodes.length.tolist()}))
"""


def test_numpy_appends_and_reads_never_import_jax(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", CHILD, str(tmp_path / "v")],
        capture_output=True,
        text=True,
        check=True,
    )
    doc = json.loads(out.stdout.splitlines()[-1])
    assert doc["loaded"] == {"create": False, "append": False, "read": False}
    assert doc["obs"] == [[1.0] * 5 + [2.0] * 4] * 2
    assert doc["lengths"] == [3]  # row 0's episode ended at its third timestep
    # the data is what was written, also as seen by a process that has jax loaded
    got = Vault.open(str(tmp_path / "v")).read_numpy()
    assert got["obs"].shape == (2, 9, 3)
    np.testing.assert_array_equal(got["done"][0], [0, 0, 1, 0, 0, 0, 0, 0, 0])
