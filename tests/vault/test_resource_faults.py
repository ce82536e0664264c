"""Resource faults: a full disk, a read-only file system, a folder this user may not read, a
symbolic-link loop, a file where a folder must be, a destination inside its source.

Each is a typed error naming the path (``VaultStorageError``, ``VaultAccessError``,
``VaultNotFoundError``, ``VaultLocationError``), leaves nothing behind (no temp file, no held
lock, no partial destination), and the ``vault`` command reports it in one line with its exit
code. Full and read-only file systems are real ones: a small ``tmpfs`` mounted in a private
mount namespace (``unshare``) around a scenario run in a subprocess, so nothing leaks out of
it. Where that cannot be done the test fails, saying why; it never skips. A folder that root
may not read: the check runs without the capabilities that let root read anything
(``setpriv``).

The scenarios are functions of this module: ``python test_resource_faults.py NAME DIR`` runs
one (the tests do, inside the namespace).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pytest

import vault as vlt
from vault import (
    Vault,
    VaultAccessError,
    VaultError,
    VaultExistsError,
    VaultLocationError,
    VaultNotFoundError,
    VaultStorageError,
)

ROWS = 2
EXAMPLE = {"obs": np.zeros(64, np.float32), "done": np.bool_(False)}
CHUNK: dict[str, Sequence[int]] = {"obs": [1, 16, 64], "done": [ROWS, 16]}
COMMAND = str(Path(sys.executable).with_name("vault"))
FULL = "no space left on device"
READ_ONLY = "read-only file system"
READ_ONLY_FIX = (
    "the file system is mounted read-only: write somewhere writable (a vault on it can "
    "still be opened with mode='r')"
)
LOOP_FIX = "too many levels of symbolic links (a symbolic link loop)"


# ------------------------------------------------------------------------------ helpers
def block(t0: int, n: int) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)``: every value says where it belongs."""
    t = np.arange(t0, t0 + n, dtype=np.float64)
    place = t[None, :, None] * 64 + np.arange(64)[None, None, :] + np.arange(ROWS)[:, None, None]
    noise = np.sin(place * 12.9898) * 43758.5453 % 1  # hardly compressible
    return {
        "obs": noise.astype(np.float32),
        "done": np.broadcast_to(t % 7 == 6, (ROWS, n)).copy(),
    }


def build(path: Path, steps: int) -> None:
    with Vault.create(path, EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done") as v:
        v.append(block(0, steps))


def assert_holds(path: Path, steps: int) -> None:
    with Vault.open(path) as v:
        assert v.committed_length == steps
        got = v.read_numpy()
        want = block(0, steps)
        np.testing.assert_array_equal(got["obs"], want["obs"])
        np.testing.assert_array_equal(got["done"], want["done"])


def fill(folder: Path, leave: int = 0) -> Path:
    """Fill the file system of ``folder`` up to ``leave`` free bytes (0: completely)."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        if leave:
            st = os.statvfs(folder)
            f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
        else:
            with pytest.raises(OSError, match=re.escape("No space left on device")):
                write_forever(f)
    return filler


def write_forever(f: BinaryIO) -> None:
    while True:
        f.write(b"\0" * 4096)


def leftovers(folder: Path) -> list[str]:
    """Temp files and staged copies anywhere under ``folder``."""
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.name.endswith((".tmp", ".__lock")) or ".partial-" in p.name
    )


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COMMAND, *(str(a) for a in args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


def one_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    """The single ``vault: ...`` line of a failed command with exit ``code``."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("vault: "), done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr.rstrip("\n")


# ------------------------------------------------------------ scenarios on a small tmpfs
def full_disk_create_and_open(d: Path) -> None:
    """``create`` and ``open(mode="a")`` on a full disk: typed, no temp file, lock not held;
    both work once space is freed."""
    build(d / "src", 20)
    filler = fill(d)
    new = d / "new"
    with pytest.raises(
        VaultStorageError,
        match=re.escape(
            f"{new}: cannot take the writer lock: {FULL} at {new / 'lock' / 'zarr.json'}; free "
            "space there and try again"
        ),
    ) as created:  # kept: before the fix its traceback kept the lock held
        Vault.create(new, EXAMPLE, rows=ROWS, chunk=CHUNK)
    assert created.value.errno == errno.ENOSPC
    src = d / "src"
    with pytest.raises(
        VaultStorageError,
        match=re.escape(
            f"{src}: cannot take the writer lock: {FULL} at {src / 'lock' / 'zarr.json'}; free "
            "space there and try again"
        ),
    ) as opened:
        Vault.open(src, mode="a")
    assert isinstance(opened.value, OSError)
    assert leftovers(d) == [], leftovers(d)
    assert vlt.lock_holder(src) is None
    assert vlt.lock_holder(new) is None
    filler.unlink()
    with Vault.create(new, EXAMPLE, rows=ROWS, chunk=CHUNK) as v:
        v.append(block(0, 5))
    with Vault.open(src, mode="a") as v:
        v.append(block(20, 4))
    assert_holds(new, 5)
    assert_holds(src, 24)
    assert leftovers(d) == [], leftovers(d)


def full_disk_during_create(d: Path) -> None:
    """The disk fills after the lock is taken, while the arrays are being made: a typed error
    naming the location, nothing half-made left (the folder is empty again), the lock not
    held; with a page more free each time, the same create is retried until it works."""
    new = d / "new"
    new.mkdir()
    failures = 0
    for pages in range(2, 64):  # tmpfs counts 4 KiB pages
        filler = fill(d, leave=pages * 4096)
        try:
            vault = Vault.create(new, EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done")
        except VaultStorageError as err:
            message = str(err)
            assert message.startswith(f"{new}: cannot create the vault: {FULL}"), message
            assert list(new.iterdir()) == [], sorted(p.name for p in new.rglob("*"))
            assert vlt.lock_holder(new) is None
            failures += 1
            filler.unlink()
            continue
        filler.unlink()
        with vault:
            vault.append(block(0, 5))
        break
    assert failures >= 3, failures  # it failed part-way through making the arrays
    assert_holds(new, 5)


def full_disk_writes_resume(d: Path) -> None:
    """An append on a full disk fails typed, the last commit stays readable and whole, and
    the same writer appends again once space is freed."""
    path = d / "v"
    writer = Vault.create(path, EXAMPLE, rows=ROWS, chunk=CHUNK)
    writer.append(block(0, 20))
    filler = fill(d, leave=16 << 10)
    with pytest.raises(
        VaultError,
        match=re.escape(f"{path}: the write failed")
        + ".*"
        + re.escape("the vault is at its last commit (20 timesteps)"),
    ):
        writer.append(block(20, 400))
    assert writer.committed_length == 20
    assert_holds(path, 20)
    filler.unlink()
    writer.append(block(20, 400))
    writer.close()
    assert_holds(path, 420)
    assert leftovers(d) == [], leftovers(d)


def full_disk_derive(d: Path) -> None:
    """``derive_slice`` (and ``vault slice``) into a full disk: typed, one line, nothing left
    at the destination; it works once space is freed."""
    src = d / "src"
    build(src, 300)
    for leave in (0, 8 << 10, 128 << 10):  # it fails taking the lock, making arrays, copying
        filler = fill(d, leave)
        out = d / "out"
        with pytest.raises(
            VaultStorageError,
            match=re.escape(f"{out}: cannot write the new vault: {FULL}")
            + ".*"
            + re.escape(f"; nothing was left at {out}; free space there and try again"),
        ) as failed:
            vlt.derive_slice(src, out, start=0, stop=300)
        assert failed.value.errno == errno.ENOSPC, leave
        assert not out.exists(), leave
        assert leftovers(d) == [], (leave, leftovers(d))
        line = one_line(cli("slice", src, "-o", out), 1)
        assert line.startswith(f"vault: {out}: cannot write the new vault: {FULL}"), line
        assert line.endswith(f"; nothing was left at {out}; free space there and try again")
        assert not out.exists()
        assert leftovers(d) == [], (leave, leftovers(d))
        filler.unlink()
    vlt.derive_slice(src, d / "out").close()
    assert_holds(d / "out", 300)
    assert_holds(src, 300)


def read_only_file_system(d: Path) -> None:
    """Appending to (or creating) a vault on a read-only file system is ``VaultAccessError``
    naming the path; reading works."""
    src = d / "src"
    build(src, 10)
    subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
    with pytest.raises(
        VaultAccessError,
        match=re.escape(
            f"{src}: cannot take the writer lock: {READ_ONLY} at {src / 'lock' / 'zarr.json'}; "
            f"{READ_ONLY_FIX}"
        ),
    ) as opened:
        Vault.open(src, mode="a")
    assert opened.value.errno == errno.EROFS
    assert isinstance(opened.value, PermissionError)
    new = d / "new"
    with pytest.raises(
        VaultAccessError,
        match=re.escape(f"{new}: cannot create the vault: {READ_ONLY}; {READ_ONLY_FIX}"),
    ):
        Vault.create(new, EXAMPLE, rows=ROWS, chunk=CHUNK)
    assert_holds(src, 10)
    line = one_line(cli("slice", src, "-o", d / "out"), 2)
    assert line == (
        f"vault: {d / 'out'}: cannot write the new vault: {READ_ONLY}; nothing was left at "
        f"{d / 'out'}; {READ_ONLY_FIX}"
    )


def unreadable_folder(d: Path) -> None:
    """Run without the right to read ``d / "v"`` (mode 000)."""
    path = d / "v"
    with pytest.raises(
        VaultAccessError,
        match=re.escape(
            f"{path}: cannot read the vault: permission denied at {path / 'zarr.json'}; give "
            "this user permission there, or use another place"
        ),
    ) as opened:
        Vault.open(path)
    assert opened.value.errno == errno.EACCES
    with pytest.raises(VaultAccessError, match=re.escape(f"{path}: cannot read the vault")):
        vlt.verify(path)
    with pytest.raises(
        VaultAccessError, match=re.escape(f"{path}: cannot search for vaults: permission denied")
    ):
        vlt.find_vaults(path)
    line = one_line(cli("info", path), 2)
    assert line == f"vault: {opened.value}"


SCENARIOS: dict[str, Callable[[Path], None]] = {
    f.__name__: f
    for f in (
        full_disk_create_and_open,
        full_disk_during_create,
        full_disk_writes_resume,
        full_disk_derive,
        read_only_file_system,
        unreadable_folder,
    )
}


def run_scenario(name: str, folder: Path, wrap: list[str]) -> None:
    """Run scenario ``name`` on ``folder`` in a subprocess wrapped by ``wrap``; its failure
    (with its output) is this test's failure."""
    done = subprocess.run(
        [*wrap, sys.executable, __file__, name, str(folder)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"scenario {name} failed:\n{done.stdout}\n{done.stderr}"


def on_small_tmpfs(name: str, folder: Path, size: str = "1m") -> None:
    """Run scenario ``name`` with a ``size`` tmpfs mounted at ``folder``, in a private mount
    namespace (nothing leaks out; it is gone when the scenario ends)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail("`unshare` (util-linux) is needed to mount a small real file system")
    folder.mkdir()
    namespace = [unshare, "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        namespace[1:1] = ["--user", "--map-root-user"]
    mount = 'mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"'
    run_scenario(name, folder, [*namespace, "sh", "-c", mount, "sh", size, str(folder)])


# ------------------------------------------------------------------------------ tests
def test_full_disk_create_and_open_release_everything(tmp_path: Path) -> None:
    on_small_tmpfs("full_disk_create_and_open", tmp_path / "fs")


def test_full_disk_while_creating_leaves_nothing(tmp_path: Path) -> None:
    on_small_tmpfs("full_disk_during_create", tmp_path / "fs")


def test_full_disk_appends_keep_the_last_commit_and_resume(tmp_path: Path) -> None:
    on_small_tmpfs("full_disk_writes_resume", tmp_path / "fs")


def test_full_disk_derive_leaves_no_destination(tmp_path: Path) -> None:
    on_small_tmpfs("full_disk_derive", tmp_path / "fs", size="2m")


def test_read_only_file_system(tmp_path: Path) -> None:
    on_small_tmpfs("read_only_file_system", tmp_path / "fs")


def test_unreadable_folder(tmp_path: Path) -> None:
    build(tmp_path / "v", 5)
    (tmp_path / "v").chmod(0)
    try:
        wrap: list[str] = []
        if os.geteuid() == 0:  # root reads any folder: drop the capabilities that let it
            setpriv = shutil.which("setpriv")
            if setpriv is None:
                pytest.fail("`setpriv` (util-linux) is needed to test an unreadable folder")
            caps = "-dac_override,-dac_read_search"
            wrap = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]
        run_scenario("unreadable_folder", tmp_path, wrap)
    finally:
        (tmp_path / "v").chmod(0o755)


def test_symbolic_link_loop(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    message = (
        f"{loop}: cannot read the vault: {LOOP_FIX} at {loop / 'zarr.json'}; fix or remove "
        "the symbolic link"
    )
    with pytest.raises(VaultNotFoundError, match=re.escape(message)) as opened:
        Vault.open(loop)
    assert opened.value.errno == errno.ELOOP
    with pytest.raises(VaultNotFoundError, match=re.escape(message)):
        Vault.open(loop, mode="a")
    with pytest.raises(VaultNotFoundError, match=re.escape(message)):
        vlt.verify(loop)
    with pytest.raises(VaultNotFoundError, match=re.escape(message)):
        Vault.create(loop, EXAMPLE, rows=ROWS)
    with pytest.raises(
        VaultNotFoundError, match=re.escape(f"{loop}: cannot search for vaults: {LOOP_FIX}")
    ):
        vlt.find_vaults(loop)
    for args in (("info", loop), ("verify", loop), ("show", loop)):
        assert one_line(cli(*args), 2) == f"vault: {message}"


def test_create_under_a_file(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("not a folder")
    for path in (file / "v", file / "a" / "b"):
        with pytest.raises(
            VaultStorageError,
            match=re.escape(
                f"{path}: cannot create the vault: expected a directory, got a file at {file}; "
                "choose a path whose parent folders are directories"
            ),
        ) as created:
            Vault.create(path, EXAMPLE, rows=ROWS)
        assert created.value.errno == errno.ENOTDIR
        assert isinstance(created.value, OSError)
    build(tmp_path / "src", 5)
    with pytest.raises(
        VaultStorageError,
        match=re.escape(f"{file / 'v'}: cannot create the vault: expected a directory, got a"),
    ):
        vlt.derive_slice(tmp_path / "src", file / "v")
    assert file.read_text() == "not a folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "src"]


@pytest.mark.parametrize("how", ["child", "grandchild", "through a link", "itself"])
def test_derive_into_its_own_source_is_refused(tmp_path: Path, how: str) -> None:
    src = tmp_path / "src"
    build(src, 30)
    (tmp_path / "link").symlink_to(src)
    dest = {
        "child": src / "copy",
        "grandchild": src / "experience" / "copy",
        "through a link": tmp_path / "link" / "copy",
        "itself": tmp_path / "link",
    }[how]
    before = sorted(str(p) for p in src.rglob("*"))
    message = (
        f"{dest}: the destination is inside the source vault {src}; choose a destination "
        "outside every source (nothing was written)"
    )
    with pytest.raises(VaultLocationError, match=re.escape(message)):
        vlt.derive_slice(src, dest)
    with Vault.open(src) as v, pytest.raises(VaultLocationError, match=re.escape(message)):
        vlt.derive_episodes(v, dest, v.episodes())
    with pytest.raises(VaultLocationError, match=re.escape(message)):
        vlt.combine([src, tmp_path / "link"], dest)
    assert sorted(str(p) for p in src.rglob("*")) == before
    assert_holds(src, 30)
    if how != "itself":
        assert one_line(cli("slice", src, "-o", dest), 1) == f"vault: {message}"
    assert sorted(str(p) for p in src.rglob("*")) == before


def test_derive_into_its_own_memory_source_is_refused() -> None:
    src = "memory://resource-faults-derive"
    with Vault.create(src, EXAMPLE, rows=ROWS, chunk=CHUNK) as v:
        v.append(block(0, 10))
    with pytest.raises(
        VaultLocationError,
        match=re.escape(f"{src}/: the destination is inside the source vault {src}/; choose"),
    ):
        vlt.derive_slice(src, src)
    vlt.derive_slice(src, f"{src}/copy").close()  # a memory location is a store of its own
    with Vault.open(f"{src}/copy") as copy:
        np.testing.assert_array_equal(copy.read_numpy()["obs"], block(0, 10)["obs"])


def test_derive_next_to_its_source_is_fine(tmp_path: Path) -> None:
    build(tmp_path / "src", 30)
    vlt.derive_slice(tmp_path / "src", tmp_path / "src-copy").close()
    assert_holds(tmp_path / "src-copy", 30)


def test_the_new_errors_are_public_and_builtin_compatible() -> None:
    assert issubclass(VaultAccessError, PermissionError)
    assert issubclass(VaultStorageError, OSError)
    assert {"VaultAccessError", "VaultStorageError"} <= set(vlt.__all__)
    assert not issubclass(VaultExistsError, VaultStorageError)


if __name__ == "__main__":
    SCENARIOS[sys.argv[1]](Path(sys.argv[2]))
