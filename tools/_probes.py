"""Machine probes shared by the benchmark scripts in ``tools/``: the machine and the code under
test, load, files and the page cache, disk bandwidth, and this process's memory."""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import math
import os
import platform
import resource
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np

MB = 1e6
MIB = 1 << 20

# --------------------------------------------------------------------------------------------
# CPU time
# --------------------------------------------------------------------------------------------


def process_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` and of its running children, every thread, from
    ``/proc`` (each thread's time on a CPU, in nanoseconds: exact for short sections, where
    ``/proc/<pid>/stat`` counts in ticks of 10 ms); 0.0 where they cannot be read (another OS,
    a process gone)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        total = 0
        for p in [pid, *map(int, children)]:
            for task in Path(f"/proc/{p}/task").iterdir():
                with contextlib.suppress(FileNotFoundError):  # a thread that just ended
                    total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


class CpuClock:
    """Wall seconds and CPU seconds summed over timed sections (``with clock: ...``): this
    process's (every thread) and, separately, those of ``others`` (pids: a server on the same
    machine, with its children). On a machine whose cores both sides share, the CPU tells
    where wall time goes when the sections are CPU-bound."""

    def __init__(self, others: tuple[int, ...] = ()) -> None:
        self.others = others
        self.wall = self.cpu = self.others_cpu = 0.0
        self._start = (0.0, 0.0, 0.0)

    def _now(self) -> tuple[float, float, float]:
        own = resource.getrusage(resource.RUSAGE_SELF)
        return (
            time.perf_counter(),
            own.ru_utime + own.ru_stime,
            sum(process_cpu(pid) for pid in self.others),
        )

    def __enter__(self) -> CpuClock:
        self._start = self._now()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self._now()
        self.wall += end[0] - self._start[0]
        self.cpu += end[1] - self._start[1]
        self.others_cpu += end[2] - self._start[2]


# --------------------------------------------------------------------------------------------
# The machine and the code
# --------------------------------------------------------------------------------------------


def loadavg() -> list[float] | None:
    """The 1/5/15-minute load averages (other work may share the machine)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """CPU, memory, platform and the versions of everything that is measured."""
    import jax

    cpu_model = mem_total = None
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            cpu_model = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None
            )
        with open("/proc/meminfo") as f:
            mem_total = next(
                (int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemTotal")), None
            )
    return {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": cpu_model,
        "mem_total_bytes": mem_total,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": package_version("jaxlib"),
        "numpy": np.__version__,
        "tensorstore": package_version("tensorstore"),
        "flashbax": package_version("flashbax"),
        "rlvault": package_version("rlvault"),
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "xla_flags": os.environ.get("XLA_FLAGS"),
    }


def code_provenance(package: str, watched: tuple[str, ...]) -> dict[str, Any]:
    """Where ``package`` is imported from, the commit of that checkout and whether the
    ``watched`` folders have uncommitted changes (results are only comparable for the same
    code). Keys: ``{package}_path``, ``git_commit``, ``{watched joined by _or_}_dirty``."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"{package} is not importable")
    folder = Path(spec.origin).resolve().parent
    root = folder.parent

    def git(*cmd: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(root), *cmd],
                capture_output=True,
                text=True,
                check=True,
                timeout=10,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    status = git("status", "--porcelain", "--", *watched)
    return {
        f"{package}_path": str(folder),
        "git_commit": git("rev-parse", "HEAD"),
        f"{'_or_'.join(watched)}_dirty": None if status is None else bool(status),
    }


# --------------------------------------------------------------------------------------------
# Files and the page cache
# --------------------------------------------------------------------------------------------


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def total_file_bytes(path: Path) -> int:
    """Summed sizes of every file under ``path`` (a file freed while we look is skipped)."""
    total = 0
    for p in files_under(path):
        with contextlib.suppress(FileNotFoundError):
            total += p.stat().st_size
    return total


def dir_usage(path: Path) -> dict[str, int]:
    """File count, summed sizes and allocated bytes (``st_blocks * 512``, as ``du`` counts).

    rlvault's ``trash/`` (old versions of replaced files that a live writer frees in the
    background, see ``vault/storage/_reclaim.py``) is counted apart, as ``trash_*``: it is
    transient.
    """
    out = {"files": 0, "bytes": 0, "allocated_bytes": 0, "trash_files": 0, "trash_bytes": 0}
    for p in files_under(path):
        try:
            st = p.stat()
        except FileNotFoundError:  # freed while we looked
            continue
        if p.parent.name == "trash" and p.name != "zarr.json":
            out["trash_files"] += 1
            out["trash_bytes"] += st.st_size
            continue
        out["files"] += 1
        out["bytes"] += st.st_size
        out["allocated_bytes"] += st.st_blocks * 512
    return out


def resident_bytes(files: list[Path]) -> int | None:
    """Bytes of ``files`` in the page cache, from ``fincore`` (None when unavailable)."""
    exe = shutil.which("fincore")
    if exe is None or not files:
        return None if exe is None else 0
    total = 0
    for i in range(0, len(files), 400):
        cmd = [exe, "--bytes", "--noheadings", "--raw", "--output", "RES"]
        done = subprocess.run(
            cmd + [str(p) for p in files[i : i + 400]], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            return None
        total += sum(int(x) for x in done.stdout.split())
    return total


def drop_page_cache(path: Path) -> dict[str, Any]:
    """``fsync`` + ``posix_fadvise(DONTNEED)`` every file under ``path`` (or ``path`` itself)."""
    files = [path] if path.is_file() else files_under(path)
    before = resident_bytes(files)
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return {
        "method": "fsync + posix_fadvise(POSIX_FADV_DONTNEED) per file",
        "files": len(files),
        "resident_before_bytes": before,
        "resident_after_bytes": resident_bytes(files),
    }


def warm_page_cache(path: Path) -> dict[str, Any]:
    """Read every file under ``path`` once, so that the next reader finds them in the page
    cache; the bytes read and, where ``fincore`` is available, the bytes resident after."""
    files = files_under(path)
    buf = bytearray(4 * MIB)
    read = 0
    for p in files:
        try:
            with open(p, "rb", buffering=0) as f:
                while n := f.readinto(buf):
                    read += n
        except FileNotFoundError:  # freed while we looked (a writer's trash/)
            continue
    return {"files": len(files), "bytes_read": read, "resident_after_bytes": resident_bytes(files)}


def measure_disk(workdir: Path, nbytes: int) -> dict[str, Any]:
    """Sequential write of ``nbytes`` (random bytes, 16 MiB blocks) + ``fsync``, then a cold
    read-back after dropping the file's pages."""
    block_bytes = 16 * MIB
    data = np.random.default_rng(0).integers(0, 256, block_bytes, dtype=np.uint8).tobytes()
    n_blocks = max(1, nbytes // block_bytes)
    path = workdir / "disk_bandwidth.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        for _ in range(n_blocks):
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        os.fsync(fd)
        write_s = time.perf_counter() - t0
    finally:
        os.close(fd)
    written = n_blocks * block_bytes
    drop = drop_page_cache(path)
    buf = bytearray(block_bytes)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass
    read_s = time.perf_counter() - t0
    path.unlink()
    return {
        "bytes": written,
        "write_fsync_s": write_s,
        "write_fsync_mb_s": written / write_s / MB,
        "cold_read_s": read_s,
        "cold_read_mb_s": written / read_s / MB,
        "cache_drop": drop,
    }


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------


def proc_status_bytes(field: str) -> int | None:
    """``VmRSS`` / ``VmHWM`` of this process in bytes (``None`` where /proc is unavailable)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def peak_rss_bytes() -> int:
    """Peak resident set size: ``VmHWM``, else ``getrusage`` (KiB on Linux)."""
    hwm = proc_status_bytes("VmHWM")
    if hwm is not None:
        return hwm
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def reset_peak_rss() -> bool:
    """Reset this process's ``VmHWM`` to its current RSS (Linux ``clear_refs``); False if not."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def tree_nbytes(tree: Any) -> int:
    """Bytes of every array leaf of ``tree``."""
    import jax

    return int(sum(np.dtype(x.dtype).itemsize * math.prod(x.shape) for x in jax.tree.leaves(tree)))
