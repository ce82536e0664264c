"""One writer per vault, any number of readers; a dead writer never leaves the vault locked."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jax.numpy as jnp
import pytest

import buffers as fbx
from vault import Vault, VaultLockedError, VaultModeError

BUFFER = fbx.make_trajectory_buffer(2, 1, 1, 1, 1, max_length_time_axis=4)


def _state():
    state = BUFFER.init({"x": jnp.int32(0)})
    return BUFFER.add(state, {"x": jnp.ones((2, 3), jnp.int32)})


def test_second_writer_in_the_same_process_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "v")
    writer = Vault.create(path, _state())
    with pytest.raises(VaultLockedError, match=re.escape(f"being written by pid {_pid()} on")):
        Vault.open(path, mode="a")
    reader = Vault.open(path)  # readers need no lock
    writer.write(_state())
    assert reader.refresh() == 3
    writer.close()
    with pytest.raises(VaultModeError, match="closed"):
        writer.write(_state())
    with Vault.open(path, mode="a") as again:
        assert again.committed_length == 3
    Vault.open(path, mode="a").close()  # the with-block released it
    assert issubclass(VaultLockedError, BlockingIOError)


def test_memory_vaults_are_locked_too() -> None:
    writer = Vault.create("memory://lock-test", _state())
    with pytest.raises(VaultLockedError):
        Vault.open("memory://lock-test", mode="a")
    writer.close()
    Vault.open("memory://lock-test", mode="a").close()


def _pid() -> int:
    import os

    return os.getpid()


HOLDER = textwrap.dedent(
    """
    import sys, time
    from vault import Vault
    v = Vault.open(sys.argv[1], mode="a")
    print("holding", flush=True)
    time.sleep(600)
    """
)


def test_a_killed_writer_releases_the_lock(tmp_path: Path) -> None:
    path = str(tmp_path / "v")
    Vault.create(path, _state()).close()
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, path], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "holding"
        with pytest.raises(VaultLockedError, match=f"pid {child.pid} on"):
            Vault.open(path, mode="a")
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        with Vault.open(path, mode="a") as taken_over:  # no waiting, no manual cleanup
            assert taken_over.write(_state(), new_buffer=True) == 3
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_taking_the_lock_removes_temp_files_a_dead_writer_left(tmp_path: Path) -> None:
    """TensorStore reuses a leftover ``<key>.__lock`` temp file without truncating it; the new
    writer must delete them, or a shorter commit record would be renamed into place corrupt."""
    path = tmp_path / "v"
    Vault.create(str(path), _state()).close()
    stale = path / "commit" / "zarr.json.__lock"
    stale.write_bytes(b"Z" * 4096)
    with Vault.open(str(path), mode="a") as writer:
        assert not stale.exists()
        assert writer.write(_state()) == 3
    assert Vault.open(str(path)).committed_length == 3
