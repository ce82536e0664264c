"""Ctrl-C while a writer appends: a real process, a real SIGINT at a random moment.

The writer appends in a loop (blocking writes; or ``block=False`` inside a ``with Vault...``
block) and prints what it committed or issued. The parent sends SIGINT after a random number
of writes plus a random delay (fixed seed), then checks that the writer dies of the
KeyboardInterrupt without hanging, that the vault reopens at a committed prefix >= the last
one the writer reported, bit-identical, that the writer lock is free at once, and that
appending continues exactly.
"""

from __future__ import annotations

import importlib.util
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from vault import Vault

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "crash_trials.py"
_spec = importlib.util.spec_from_file_location("crash_trials", SCRIPT)
assert _spec is not None
assert _spec.loader is not None
trials = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trials)

TRIALS = 4
EXIT_TIMEOUT_S = 60.0

WRITER = textwrap.dedent(
    f"""
    import importlib.util, signal, sys
    # As in a terminal (even when the test runner started us with SIGINT ignored), and
    # remembered: an interrupt that lands in a gc callback (JAX has one) is swallowed by Python
    # ("Exception ignored in ..."), and the loops then stop as after a second Ctrl-C.
    interrupted = []
    def on_sigint(*_):
        interrupted.append(True)
        signal.default_int_handler(*_)
    signal.signal(signal.SIGINT, on_sigint)
    spec = importlib.util.spec_from_file_location("crash_trials", {str(SCRIPT)!r})
    trials = importlib.util.module_from_spec(spec); spec.loader.exec_module(trials)
    from vault import Vault
    path, mode = sys.argv[1], sys.argv[2]
    # "continue" goes on with the same state after the interrupt, so it must survive an
    # interrupt that lands in the user's own `add`: no donation, and the state and its step
    # count change together (one assignment)
    buf, add = trials._buffer_and_add(donate=mode != "continue")
    state = buf.init(trials.example())
    t = 0
    if mode == "block":
        vault = Vault.create(path, state)
        while not interrupted:
            state = add(state, trials.batch(t))
            t += trials.STEP
            vault.write(state)
            print("committed", vault.committed_length, flush=True)
        raise KeyboardInterrupt
    elif mode == "continue":  # as after an interrupted notebook cell: keep the same object
        vault = Vault.create(path, state)
        try:
            while not interrupted:
                state, t = add(state, trials.batch(t)), t + trials.STEP
                vault.write(state, block=False)
                print("issued", t, flush=True)
        except KeyboardInterrupt:
            pass
        for _ in range(3):
            state, t = add(state, trials.batch(t)), t + trials.STEP
            vault.write(state, block=False)
        vault.close()
        print("added", t, flush=True)
    else:
        try:
            with Vault.create(path, state) as vault:
                while not interrupted:
                    state = add(state, trials.batch(t))  # donates the previous state
                    t += trials.STEP
                    vault.write(state, block=False)
                    print("issued", t, flush=True)
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            # Leaving the block waited for the pending writes and released the lock.
            with Vault.open(path, mode="a") as again:
                print("reopened", again.committed_length, flush=True)
            raise
    """
)


def interrupt_writer(path: Path, mode: str, rng: random.Random) -> tuple[list[str], str]:
    """Start a writer, SIGINT it after a random number of writes; its output lines, stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    writes = rng.randint(1, 10)
    for line in proc.stdout:
        lines.append(line)
        if len(lines) >= writes:
            break
    time.sleep(rng.uniform(0.0, 0.01))
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the writer did not exit within {EXIT_TIMEOUT_S:.0f} s of SIGINT: {err}")
    if mode == "continue":
        assert proc.returncode == 0, err
    else:
        assert proc.returncode == -signal.SIGINT, err  # died of the uncaught KeyboardInterrupt
        assert "KeyboardInterrupt" in err
    return lines + out.splitlines(), err


def reports(lines: list[str], word: str) -> list[int]:
    """The numbers the writer printed after ``word``. An interrupt inside a ``print`` leaves
    the start of a report in the buffer ("issued" with no number), written out before the
    next print or at exit: such pieces are no report."""
    return [int(n) for line in lines for n in re.findall(rf"{word} (\d+)", line)]


def check_vault(path: Path, at_least: int) -> int:
    """The committed prefix is exact; the lock is free; appending continues exactly."""
    vault = Vault.open(str(path))
    length = vault.committed_length
    assert length >= at_least
    assert length % trials.STEP == 0
    data = vault.read_numpy()
    for leaf, want in trials.expected(0, length).items():
        np.testing.assert_array_equal(data[leaf], want, err_msg=leaf)
    buf, add = trials._buffer_and_add()
    state = add(buf.init(trials.example()), trials.batch(length))
    with Vault.open(str(path), mode="a") as writer:  # VaultLockedError if still held
        assert writer.write(state, new_buffer=True) == trials.STEP
    after = Vault.open(str(path)).read_numpy()
    for leaf, want in trials.expected(0, length + trials.STEP).items():
        np.testing.assert_array_equal(after[leaf], want, err_msg=leaf)
    return length


def test_ctrl_c_during_blocking_writes(tmp_path: Path) -> None:
    rng = random.Random(3)
    for i in range(TRIALS):
        path = tmp_path / f"v{i}"
        lines, _ = interrupt_writer(path, "block", rng)
        reported = reports(lines, "committed")
        assert reported, "the writer reported no commit"
        check_vault(path, reported[-1])


def test_ctrl_c_during_non_blocking_writes_in_a_with_block(tmp_path: Path) -> None:
    rng = random.Random(5)
    for i in range(TRIALS):
        path = tmp_path / f"v{i}"
        lines, _ = interrupt_writer(path, "non-blocking", rng)
        issued = reports(lines, "issued")
        reopened = reports(lines, "reopened")
        assert issued, "the writer issued no write"
        # Every write that returned was committed before the lock was released.
        assert len(reopened) == 1
        assert reopened[0] >= issued[-1]
        assert check_vault(path, issued[-1]) == reopened[0]


def test_writing_on_after_ctrl_c_with_the_same_vault_object(tmp_path: Path) -> None:
    """An interrupted write (often inside the back-pressure wait) must not leave the writer
    believing it appended: later writes of the same object commit exactly what was added."""
    rng = random.Random(9)
    for i in range(TRIALS):
        path = tmp_path / f"v{i}"
        lines, _ = interrupt_writer(path, "continue", rng)
        [added] = reports(lines, "added")
        assert check_vault(path, added) == added
