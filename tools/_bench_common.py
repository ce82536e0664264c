"""Helpers shared by the benchmark scripts in ``tools/`` (memory probes, versions, logging)."""

from __future__ import annotations

import importlib.metadata
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np


def log(msg: str) -> None:
    """Progress to stderr, so stdout stays for the table or JSON."""
    print(msg, file=sys.stderr, flush=True)


def write_json(path: Path, result: dict[str, Any]) -> None:
    """Write a benchmark's result as indented JSON (creating the parent folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    log(f"JSON written to {path}")


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


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
