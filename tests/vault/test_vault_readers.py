"""Readers in other processes see consistent committed prefixes while a writer appends."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

from vault import Vault

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "crash_trials.py"
_spec = importlib.util.spec_from_file_location("crash_trials", SCRIPT)
assert _spec is not None
assert _spec.loader is not None
trials = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trials)

READER = textwrap.dedent(
    f"""
    import sys, time, importlib.util
    import numpy as np
    from vault import Vault
    spec = importlib.util.spec_from_file_location("crash_trials", {str(SCRIPT)!r})
    trials = importlib.util.module_from_spec(spec); spec.loader.exec_module(trials)
    v = Vault.open(sys.argv[1])
    reads, last, end = 0, -1, time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        n = v.refresh()
        data = v.read_numpy()
        want = trials.expected(0, n)
        for leaf in ("code", "obs", "flag"):
            assert np.array_equal(data[leaf], want[leaf]), (leaf, n)
        assert n >= last
        reads, last = reads + 1, n
    print(reads, last)
    """
)


def test_readers_see_consistent_prefixes_while_a_writer_appends(tmp_path: Path) -> None:
    path = str(tmp_path / "v")
    writer = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--child", path, "0"], stdout=subprocess.PIPE, text=True
    )
    readers: list[subprocess.Popen[str]] = []
    try:
        assert writer.stdout is not None
        writer.stdout.readline()  # the vault exists and has a first commit
        readers = [
            subprocess.Popen(
                [sys.executable, "-c", READER, path, "4"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        vault = Vault.open(path)
        lengths = []
        end = time.monotonic() + 4
        while time.monotonic() < end:
            n = vault.refresh()
            data = vault.read_numpy()
            want = trials.expected(0, n)
            for leaf in ("code", "obs", "flag"):
                np.testing.assert_array_equal(data[leaf], want[leaf])
            lengths.append(n)
        assert lengths == sorted(lengths)
        assert lengths[-1] > lengths[0]  # it really was appending meanwhile
        for reader in readers:
            out, err = reader.communicate(timeout=120)
            assert reader.returncode == 0, err
            reads, last = map(int, out.split())
            assert reads > 0
            assert last > 0
    finally:
        writer.kill()
        writer.wait()
        if writer.stdout is not None:
            writer.stdout.close()
        for reader in readers:
            if reader.poll() is None:
                reader.kill()
                reader.wait()
