"""Crash trials: SIGKILL a process that is appending to a vault, then check what survived.

Each trial starts a writer process that fills a trajectory buffer with values encoding
(row, timestep), writes to the vault every few adds and reports every commit on stdout. The
parent kills it (SIGKILL) at a random moment, then checks that:

* the vault opens, and its committed length is at least the last commit the writer reported;
* the committed prefix is bit-identical to what was added (every leaf);
* a new writer can take the lock at once and append, and the result is again exact.

Usage: ``python tools/crash_trials.py --trials 200`` (prints JSON: trials, failures, kill
points). The test suite runs 50 trials through this script.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROWS, T, STEP = 3, 64, 7  # buffer rows, time axis, timesteps per add


def expected(start: int, stop: int) -> dict[str, np.ndarray]:
    t = np.arange(start, stop, dtype=np.int64)
    code = np.arange(ROWS, dtype=np.int64)[:, None] * 1_000_000 + t[None]
    return {
        "code": code.astype(np.int32),
        "obs": np.repeat(code[..., None].astype(np.float32), 5, axis=-1),
        "flag": (code % 2 == 0),
    }


def _buffer_and_add() -> tuple[Any, Any]:
    import jax

    import buffers as fbx

    buf = fbx.make_trajectory_buffer(ROWS, 1, 1, 1, 1, max_length_time_axis=T)
    return buf, jax.jit(buf.add)


def child(path: str, start: int) -> None:
    """Append forever (until killed), continuing from ``start`` timesteps per row."""
    import jax.numpy as jnp

    from vault import Vault

    buf, add = _buffer_and_add()
    example = {"code": jnp.int32(0), "obs": jnp.zeros(5, jnp.float32), "flag": jnp.bool_(False)}
    state = buf.init(example)
    vault = Vault.open(path, mode="a") if start else Vault.create(path, state)
    t = start
    first = True
    while True:
        batch = {k: jnp.asarray(v) for k, v in expected(t, t + STEP).items()}
        state = add(state, batch)
        t += STEP
        vault.write(state, new_buffer=first)
        first = False
        print(vault.committed_length, flush=True)


def trial(workdir: Path, rng: random.Random, index: int) -> dict[str, Any]:
    path = workdir / f"v{index}"
    resume = 0
    if rng.random() < 0.3:  # sometimes kill a writer that appends to an existing vault
        from vault import Vault

        _run_child(path, 0, stop_after=3)
        resume = Vault.open(str(path)).committed_length
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", str(path), str(resume)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    reported = resume
    deadline_commits = rng.randint(1, 12)
    kill_delay = rng.uniform(0.0, 0.02)
    for commits, line in enumerate(proc.stdout, start=1):
        reported = int(line)
        if commits >= deadline_commits:
            break
    time.sleep(kill_delay)  # land somewhere inside the next write
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert proc.stderr is not None
    proc.stderr.close()
    return {"path": str(path), "reported": reported, **_check(path, reported)}


def _run_child(path: Path, start: int, stop_after: int) -> None:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", str(path), str(start)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for n, _ in enumerate(proc.stdout, start=1):
        if n >= stop_after:
            break
    proc.kill()
    proc.wait()
    proc.stdout.close()


def _check(path: Path, reported: int) -> dict[str, Any]:
    from vault import Vault

    problems: list[str] = []
    vault = Vault.open(str(path))
    length = vault.committed_length
    if length < reported:
        problems.append(f"committed {length} < last reported commit {reported}")
    if length % STEP:
        problems.append(f"committed length {length} is not a whole number of writes")
    data = vault.read_numpy()
    want = expected(0, length)
    for leaf in ("code", "obs", "flag"):
        if not np.array_equal(data[leaf], want[leaf]):
            problems.append(f"leaf {leaf}: committed prefix differs from what was added")
    # Take over at once (the dead writer's lock is gone) and append again.
    try:
        _append_more(path, length)
        after = Vault.open(str(path)).read_numpy()
        if not np.array_equal(after["code"], expected(0, length + STEP)["code"]):
            problems.append("append after the crash is not exact")
    except Exception as err:  # report, don't stop the other trials
        problems.append(f"append after the crash failed: {type(err).__name__}: {err}")
    return {"committed": length, "problems": problems}


def _append_more(path: Path, length: int) -> None:
    import jax.numpy as jnp

    from vault import Vault

    buf, add = _buffer_and_add()
    example = {"code": jnp.int32(0), "obs": jnp.zeros(5, jnp.float32), "flag": jnp.bool_(False)}
    state = add(
        buf.init(example), {k: jnp.asarray(v) for k, v in expected(length, length + STEP).items()}
    )
    with Vault.open(str(path), mode="a") as vault:
        vault.write(state, new_buffer=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--child", nargs=2, metavar=("PATH", "START"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]))
        return 0
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        started = time.perf_counter()
        results = [trial(Path(tmp), rng, i) for i in range(args.trials)]
    failures = [r for r in results if r["problems"]]
    summary = {
        "trials": len(results),
        "failures": len(failures),
        "seconds": round(time.perf_counter() - started, 1),
        "committed_lengths": [r["committed"] for r in results],
        "problems": failures[:10],
        "pid": os.getpid(),
    }
    print(json.dumps(summary))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
