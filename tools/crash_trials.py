"""Crash trials: SIGKILL a process that is appending to a vault, then check what survived.

Each trial starts a writer process that fills a trajectory buffer with values encoding
(row, timestep), writes to the vault after every add and reports every commit on stdout. The
writer is killed (SIGKILL), then the parent checks that:

* the vault opens, and its committed length is at least the last commit the writer reported;
* the committed prefix is bit-identical to what was added (every leaf);
* a new writer can take the lock at once and append, and the result is again exact.

Where the kill lands (``--fault``):

* ``random`` (default): the parent kills the writer after a random number of commits plus a
  random 0-20 ms: anywhere in its loop, mostly outside the short resize and commit steps.
* ``resize``: inside the array resize step of an append (one TensorStore metadata rewrite
  per array that grows, all in flight at once).
* ``commit``: inside the replacement of the commit record.
* ``background``: as ``random``, but the writer queues every write with ``block=False`` and
  flushes (and reports) every other one, so kills land while its background thread writes
  (chunk by chunk, ``vault/write/_commit.py`` ``write_parts``) and commits.
* ``tags``: inside the write of the place tags the commit record kept (format 5) to a tag
  array; the writer keeps at most ``TRIAL_PENDING_MAX`` tags in the record (not 256), so an
  append writes them every few appends.

The writer sees the steps of each append through the library's fault-injection hook
(``vault.set_fault_hook``; points ``vault.FAULT_POINTS``): the hook is called around each
step with a ``step`` function that it must call once. For ``resize`` and ``commit`` the writer
kills itself: after ``skip`` calls of the targeted step (drawn by the parent) every call starts
a thread that sleeps a random fraction of the previous call's duration, then, holding a lock
that the hook must take to mark the step's return, sends SIGKILL to its own process if the
step has not returned. A step that returns first was a miss (reported); the next call is armed
again. TensorStore releases the GIL while it waits, so the kill lands while the operation is
in flight. These trials use 4-step time chunks, so that an append resizes the arrays often.

The writer prints markers (``> resize length=.. shapes=..`` on entry, ``< resize`` on return;
likewise ``> append`` and ``> commit length=..``; the episode-index step is not marked), so
each trial records where the kill landed: for the targeted faults exactly (the kill is sent
only before the hook has seen the step return), for ``random`` the last marker printed before
the kill (approximate). Each trial also records what the kill left on disk before anything
reopens the vault: for ``resize`` how many of the arrays that had to grow had their new shape
written, for ``commit`` whether the old or the new record is in place, and the TensorStore
temp files (``*.__lock``) left behind.

Usage: ``python tools/crash_trials.py --trials 200 [--fault resize]`` (prints JSON: trials,
failures, where the kills landed, trials/s). The test suite runs 30 random trials and 10 of
each targeted fault through this script.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # loaded by file path in the tests
from _argtypes import existing_dir, non_negative_int, positive_int

ROWS, T, STEP = 3, 64, 7  # buffer rows, time axis, timesteps per add (one write per add)
FAULTS = ("random", "resize", "commit", "background", "tags")
FAULT_CHUNK_TIME = 4  # time chunk of the targeted-fault vaults: frequent resizes
MAX_SKIP = {"resize": 4, "commit": 11, "tags": 3}  # targeted calls let through before arming
TRIAL_PENDING_MAX = 6  # place tags a ``tags`` trial's writer keeps in the commit record
CHILD_TIMEOUT_S = 120.0  # a targeted-fault writer that has not died by then is a failure
FIRST_GUESS_S = 0.002  # kill-delay scale before a call of the target has been timed


def expected(start: int, stop: int) -> dict[str, np.ndarray]:
    t = np.arange(start, stop, dtype=np.int64)
    code = np.arange(ROWS, dtype=np.int64)[:, None] * 1_000_000 + t[None]
    return {
        "code": code.astype(np.int32),
        "obs": np.repeat(code[..., None].astype(np.float32), 5, axis=-1),
        "flag": (code % 2 == 0),
        "frame": np.repeat((code % 251).astype(np.uint8)[..., None, None], 4, -2).repeat(4, -1),
    }


def example() -> dict[str, Any]:
    """One timestep of the trials' experience (JAX scalars/arrays)."""
    import jax.numpy as jnp

    return {
        "code": jnp.int32(0),
        "obs": jnp.zeros(5, jnp.float32),
        "flag": jnp.bool_(False),
        "frame": jnp.zeros((4, 4), jnp.uint8),
    }


def batch(start: int) -> dict[str, Any]:
    """``STEP`` timesteps from ``start``, as the ``add`` batch ``[ROWS, STEP, ...]``."""
    import jax.numpy as jnp

    return {k: jnp.asarray(v) for k, v in expected(start, start + STEP).items()}


def chunks(chunk_time: int) -> dict[str, list[int]] | None:
    """``Vault.create``'s ``chunk`` argument for ``chunk_time``-step chunks (0: default)."""
    if not chunk_time:
        return None
    return {
        "code": [ROWS, chunk_time],
        "obs": [ROWS, chunk_time, 5],
        "flag": [ROWS, chunk_time],
        "frame": [ROWS, chunk_time, 4, 4],
    }


@functools.cache
def _buffer_and_add(donate: bool = False) -> tuple[Any, Any]:
    """The trials' trajectory buffer and its jitted ``add`` (one per process: no recompiles)."""
    import jax

    import buffers as fbx

    buf = fbx.make_trajectory_buffer(ROWS, 1, 1, 1, 1, max_length_time_axis=T)
    return buf, jax.jit(buf.add, donate_argnums=0 if donate else ())


# --------------------------------------------------------------------------------------------
# The writer process
# --------------------------------------------------------------------------------------------


MARKED = ("append", "resize", "tags", "commit")  # fault points the writer prints markers for


def describe(point: str, info: dict[str, Any]) -> str | None:
    """The marker text of a step, what the parent parses (see ``_parse`` and ``_on_disk``);
    None for a step that is not marked."""
    if point not in MARKED:
        return None
    if point == "resize":
        length, shapes = int(info["length"]), {k: int(v) for k, v in info["shapes"].items()}
        if all(n >= length for n in shapes.values()):
            return None  # no array has to grow: nothing is resized
        return f"length={length} shapes=" + ",".join(f"{k}:{n}" for k, n in shapes.items())
    if point == "commit":
        return f"length={int(info['length'])}"
    if point == "tags":
        return f"key={info['key']} from={int(info['from'])} count={int(info['count'])}"
    return ""


class FaultInjector:
    """The writer's fault hook (``vault.set_fault_hook``): markers around the marked steps of
    every append and, for a targeted fault, the self-kill inside the targeted step (see the
    module docstring)."""

    def __init__(self, fault: str, skip: int, rng: random.Random) -> None:
        self.fault, self.skip, self.rng = fault, skip, rng
        self.guard = threading.Lock()
        self.inside = 0  # token of the targeted call in progress (0: none)
        self.calls = 0
        self.last_s = FIRST_GUESS_S

    def __call__(self, point: str, info: dict[str, Any], step: Callable[[], Any]) -> Any:
        text = describe(point, info)
        if text is None:
            return step()
        if point != self.fault:
            print(f"> {point} {text}".rstrip(), flush=True)
            out = step()
            print(f"< {point}", flush=True)
            return out
        return self.targeted(point, text, step)

    def targeted(self, point: str, text: str, step: Callable[[], Any]) -> Any:
        self.calls += 1
        armed = self.calls > self.skip
        delay = self.rng.random() * self.last_s if armed else 0.0
        note = f" armed={delay * 1e3:.3f}" if armed else ""
        print(f"> {point} {text}{note}", flush=True)
        with self.guard:
            self.inside = self.calls
        if armed:
            threading.Thread(target=self.kill_later, args=(self.calls, delay), daemon=True).start()
        t0 = time.perf_counter()
        try:
            out = step()
        finally:
            with self.guard:  # from here on no kill can come for this call
                self.inside = 0
        self.last_s = time.perf_counter() - t0
        print(f"< {point}", flush=True)
        return out

    def kill_later(self, token: int, delay: float) -> None:
        time.sleep(delay)
        with self.guard:
            if self.inside == token:  # the step is still in progress (it cannot return now)
                os.kill(os.getpid(), signal.SIGKILL)


def child(
    path: str,
    start: int,
    *,
    fault: str = "random",
    skip: int = 0,
    seed: int = 0,
    chunk_time: int = 0,
    markers: bool = False,
    background: bool = False,
) -> None:
    """Append forever (until killed), continuing from ``start`` timesteps per row; print every
    commit's length (and, with ``markers`` or a targeted fault, the step markers).
    ``background``: every write is ``block=False``, and every other one is followed by a
    ``flush()`` and the length then committed. The ``tags`` fault keeps at most
    ``TRIAL_PENDING_MAX`` place tags in the commit record."""
    from vault import Vault

    if fault == "tags":
        from vault.format import _tags

        _tags.PENDING_MAX = TRIAL_PENDING_MAX

    if markers or fault in MAX_SKIP:
        from vault import FAULT_POINTS, set_fault_hook

        unknown = [p for p in MARKED if p not in FAULT_POINTS]
        if unknown:
            raise RuntimeError(f"vault.FAULT_POINTS {FAULT_POINTS} lacks the points {unknown}")
        set_fault_hook(FaultInjector(fault, skip, random.Random(seed)))
    buf, add = _buffer_and_add()
    state = buf.init(example())
    if start:
        vault = Vault.open(path, mode="a")
    else:
        # ``flag`` (true at even timesteps) delimits episodes: the index is checked too
        vault = Vault.create(path, state, chunk=chunks(chunk_time), done_leaf="flag")
    t = start
    first = True
    while True:
        state = add(state, batch(t))
        t += STEP
        vault.write(state, new_buffer=first, block=not background)
        first = False
        if background and t // STEP % 2:
            continue
        if background:
            vault.flush()
        print(vault.committed_length, flush=True)


# --------------------------------------------------------------------------------------------
# The parent: one trial
# --------------------------------------------------------------------------------------------


def _child_cmd(path: Path, start: int, *extra: str) -> list[str]:
    return [sys.executable, __file__, "--child", str(path), str(start), *extra]


def trial(workdir: Path, rng: random.Random, index: int, fault: str = "random") -> dict[str, Any]:
    path = workdir / f"v{index}"
    chunk_time = 0 if fault == "random" else FAULT_CHUNK_TIME
    resume = 0
    if rng.random() < 0.3:  # sometimes kill a writer that appends to an existing vault
        from vault import Vault

        _run_child(path, 0, stop_after=3, chunk_time=chunk_time)
        resume = Vault.open(str(path)).committed_length
    extra = ["--markers", "--chunk-time", str(chunk_time)]
    problems: list[str] = []
    if fault == "background":
        extra += ["--background"]
    if fault not in MAX_SKIP:
        lines, returncode, err = _kill_at_random(_child_cmd(path, resume, *extra), rng)
    else:
        skip, seed = rng.randint(0, MAX_SKIP[fault]), rng.randrange(1 << 31)
        extra += ["--fault", fault, "--skip", str(skip), "--seed", str(seed)]
        lines, returncode, err, timed_out = _wait_for_self_kill(_child_cmd(path, resume, *extra))
        if timed_out:
            problems.append(f"no kill landed inside {fault} within {CHILD_TIMEOUT_S:.0f} s")
    if returncode != -signal.SIGKILL:
        problems.append(f"writer exited with {returncode}, not SIGKILL: {err[-2000:]}")
    events = _parse(lines)
    reported = max([resume, *events["commits"]])
    where = _where(events["last"])
    if fault in MAX_SKIP and where != fault and not problems:
        problems.append(f"the kill landed in {where!r}, not in {fault!r}")
    record = {
        "path": str(path),
        "fault": fault,
        "resumed_at": resume,
        "reported": reported,
        "kill_in": where,
        "armed": events["armed"],
        "missed": events["missed"],
        "delay_ms": events["delay_ms"],
        "on_disk": _on_disk(path, events["last"]),
    }
    if not Path(path, "zarr.json").exists():
        problems.append("the writer died before the vault was created")
        return {**record, "committed": 0, "problems": problems}
    checked = _check(path, reported)
    return {**record, **checked, "problems": problems + checked["problems"]}


def _kill_at_random(cmd: list[str], rng: random.Random) -> tuple[list[str], int, str]:
    """The ``random`` fault: SIGKILL after a random number of commits plus 0-20 ms."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    deadline_commits = rng.randint(1, 12)
    kill_delay = rng.uniform(0.0, 0.02)
    lines: list[str] = []
    commits = 0
    for line in proc.stdout:
        lines.append(line)
        commits += line[:1] not in ("<", ">")
        if commits >= deadline_commits:
            break
    time.sleep(kill_delay)  # land somewhere inside the next write
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate()
    return lines + out.splitlines(), proc.returncode, err


def _wait_for_self_kill(cmd: list[str]) -> tuple[list[str], int, str, bool]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        timed_out = True
    return out.splitlines(), proc.returncode, err, timed_out


def _parse(lines: list[str]) -> dict[str, Any]:
    """Commits, the last marker, and how often the targeted call was armed and returned."""
    commits: list[int] = []
    last: list[str] | None = None
    armed = missed = 0
    delay_ms = None
    pending = False
    for line in lines:
        parts = line.split()
        if not parts:
            continue
        if parts[0] not in ("<", ">"):
            commits.append(int(parts[0]))
            continue
        last = parts
        fields = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
        if parts[0] == ">" and "armed" in fields:
            armed, pending, delay_ms = armed + 1, True, float(fields["armed"])
        elif parts[0] == "<" and pending:
            missed, pending = missed + 1, False
    return {
        "commits": commits,
        "last": last,
        "armed": armed,
        "missed": missed,
        "delay_ms": delay_ms,
    }


def _where(last: list[str] | None) -> str:
    """Where the writer was when it died, from the last marker it printed."""
    if last is None:
        return "before the first append"
    entered, name = last[0] == ">", last[1]
    if entered and name in ("resize", "tags", "commit"):
        return name
    if (entered and name == "append") or (not entered and name == "resize"):
        return "data write"
    return "between writes"


def _on_disk(path: Path, last: list[str] | None) -> dict[str, Any]:
    """What the kill left, read from the files before anything reopens the vault."""
    temp = sorted(str(p.relative_to(path)) for p in path.rglob("*.__lock")) if path.exists() else []
    found: dict[str, Any] = {"temp_files": temp}
    if last is None or last[0] != ">":
        return found
    fields = dict(p.split("=", 1) for p in last[2:] if "=" in p)
    if last[1] == "resize":
        length = int(fields["length"])
        before = {k: int(v) for k, v in (s.split(":") for s in fields["shapes"].split(","))}
        needed = [n for n, s in before.items() if s < length]
        grown = [n for n in needed if _array_length(path, n) > before[n]]
        found["resized"] = f"{len(grown)} of {len(needed)} arrays"
    elif last[1] == "commit":
        record = json.loads((path / "commit" / "zarr.json").read_text())
        now = record["attributes"]["rlvault_commit"]["committed_length"]
        found["commit_record"] = "new" if now == int(fields["length"]) else "old"
        found["commit_temp_file"] = (path / "commit" / "zarr.json.__lock").exists()
    elif last[1] == "tags":  # one row block and one chunk per place in these trials
        start, count = int(fields["from"]), int(fields["count"])
        chunk = path / "tags" / fields["key"] / "c" / "0" / str(start // 1024)
        stored = np.frombuffer(chunk.read_bytes()[:-4], "<u4") if chunk.exists() else None
        got = 0 if stored is None else np.count_nonzero(stored[start % 1024 :][:count])
        found["tags_written"] = "all" if got == count else "some" if got else "none"
    return found


def _array_length(path: Path, leaf: str) -> int:
    return int(json.loads((path / "experience" / leaf / "zarr.json").read_text())["shape"][1])


def _run_child(path: Path, start: int, stop_after: int, chunk_time: int = 0) -> None:
    proc = subprocess.Popen(
        _child_cmd(path, start, "--chunk-time", str(chunk_time)),
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
    for leaf in ("code", "obs", "flag", "frame"):
        if not np.array_equal(data[leaf], want[leaf]):
            problems.append(f"leaf {leaf}: committed prefix differs from what was added")
    # The episode index committed with the data: an episode ends at every even timestep.
    episodes = len(vault.episodes())
    if episodes != ROWS * ((length + 1) // 2):
        problems.append(f"{episodes} indexed episodes, expected {ROWS * ((length + 1) // 2)}")
    from vault import verify

    report = verify(str(path))  # every chunk's checksum, commit vs arrays, index vs flags
    problems += [f"verify: {p.place}: {p.message}" for p in report.problems]
    # Take over at once (the dead writer's lock is gone) and append again.
    try:
        _append_more(path, length)
        after = Vault.open(str(path)).read_numpy()
        if not all(
            np.array_equal(after[leaf], want_leaf)
            for leaf, want_leaf in expected(0, length + STEP).items()
        ):
            problems.append("append after the crash is not exact")
    except Exception as err:  # report, don't stop the other trials
        problems.append(f"append after the crash failed: {type(err).__name__}: {err}")
    return {"committed": length, "problems": problems}


def _append_more(path: Path, length: int) -> None:
    from vault import Vault

    buf, add = _buffer_and_add()
    state = add(buf.init(example()), batch(length))
    with Vault.open(str(path), mode="a") as vault:
        vault.write(state, new_buffer=True)


# --------------------------------------------------------------------------------------------
# Many trials
# --------------------------------------------------------------------------------------------


def run_trials(
    trials: int, seed: int = 0, fault: str = "random", workdir: Path | None = None
) -> dict[str, Any]:
    """Run ``trials`` trials of one fault mode; the summary that ``main`` prints as JSON.

    ``timesteps_verified`` sums the committed prefixes (timesteps per row, every leaf) that
    were compared bit for bit after the kills.
    """
    if fault not in FAULTS:
        raise ValueError(f"fault must be one of {FAULTS}, got {fault!r}")
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        started = time.perf_counter()
        results = [trial(Path(tmp), rng, i, fault) for i in range(trials)]
        seconds = time.perf_counter() - started
    failures = [r for r in results if r["problems"]]
    verified = sum(r["committed"] for r in results)
    on_disk: collections.Counter[str] = collections.Counter()
    for r in results:
        found = r["on_disk"]
        if "resized" in found:
            on_disk[f"resized {found['resized']}"] += 1
        if "commit_record" in found:
            on_disk[f"{found['commit_record']} commit record in place"] += 1
            on_disk["commit temp file left"] += found["commit_temp_file"]
        if "tags_written" in found:
            on_disk[f"tags written: {found['tags_written']}"] += 1
        on_disk["trials with temp files left"] += bool(found["temp_files"])
    return {
        "fault": fault,
        "seed": seed,
        "trials": len(results),
        "failures": len(failures),
        "kill_in": dict(collections.Counter(r["kill_in"] for r in results)),
        "armed": sum(r["armed"] for r in results),
        "missed": sum(r["missed"] for r in results),
        "on_disk": dict(on_disk),
        "resumed": sum(bool(r["resumed_at"]) for r in results),
        "seconds": round(seconds, 2),
        "trials_per_s": len(results) / seconds,
        "timesteps_verified": verified,
        "timesteps_verified_per_s": verified / seconds,
        "committed_lengths": [r["committed"] for r in results],
        "problems": failures[:10],
        "pid": os.getpid(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=positive_int, default=50, help="trials (default 50)")
    parser.add_argument("--seed", type=int, default=0, help="the trials' random seed")
    parser.add_argument(
        "--fault", choices=FAULTS, default="random", help="where the kill lands (default random)"
    )
    parser.add_argument(
        "--workdir",
        type=existing_dir,
        default=None,
        help="an existing folder for the trials' temporary folder (default: the system's)",
    )
    parser.add_argument("--child", nargs=2, metavar=("PATH", "START"), help=argparse.SUPPRESS)
    parser.add_argument("--skip", type=non_negative_int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--chunk-time", type=non_negative_int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--markers", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--background", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(
            args.child[0],
            int(args.child[1]),
            fault=args.fault,
            skip=args.skip,
            seed=args.seed,
            chunk_time=args.chunk_time,
            markers=args.markers,
            background=args.background,
        )
        return 0
    summary = run_trials(args.trials, args.seed, args.fault, args.workdir)
    print(json.dumps(summary))
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
