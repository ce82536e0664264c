"""How long the read-only operations take on hostile vaults, side by side with a sound one.

    python tools/bench_hostile.py [--rounds 5] [--out tools/bench_hostile_results.json]

``tests/vault/test_hostile.py`` checks that no operation on a vault made by an attacker
hangs, writes, reads outside the vault, runs code or grows memory; this measures the time
bound: for each hostile variant of a sound vault (4 rows x 4,096 timesteps, 4 leaves with an
episode index, 4.3 MB of data), each operation (open, a full read, 10 streamed batches, the
episode table, leaf statistics, verify, the fingerprint) is timed on the sound vault and on
the hostile one in turn, ``--rounds`` times, in a child process per variant (killed after
``--timeout`` seconds: reported as a hang). The table gives the medians and their ratio; a
claim (a length, a count, rows) never costs time in proportion to what it claims, so every
hostile operation ends in about the time of the sound one, or much less (it stops at the
first thing that is wrong).

The variants forge their records as an attacker would: edit, then recompute the digests
(sha256 of the record's canonical JSON; the format spec defines it). Only the public API is
used to read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _argtypes import out_file, positive_float, positive_int

ROWS, STEPS = 4, 4096
OPS = ("open", "read", "stream", "episodes", "stats", "verify", "fingerprint")


def _data(t0: int, n: int) -> dict[str, np.ndarray]:
    t = np.arange(t0, t0 + n)
    rows = np.arange(ROWS)[:, None]
    return {
        "obs": (np.sin(t[None, :, None] * 0.01 + rows[..., None] + np.arange(64))).astype(
            np.float32
        ),
        "action": ((t[None] * 7 + rows) % 5).astype(np.int32),
        "reward": np.cos(t[None] + rows).astype(np.float32),
        "done": (t[None] + rows) % 97 == 96,
    }


def build(path: Path) -> None:
    from vault import Vault

    example = {k: v[0, 0] for k, v in _data(0, 1).items()}
    with Vault.create(str(path), example, rows=ROWS, done_leaf="done", reward_leaf="reward") as v:
        for t0 in range(0, STEPS, 1024):
            v.append(_data(t0, 1024))


# ------------------------------------------------------------------------------ forging
def _digest(record: dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _edit(path: Path, attr: str | None, edit: Callable[[dict[str, Any]], None]) -> None:
    doc = json.loads(path.read_text())
    target = doc["attributes"][attr] if attr else doc
    edit(target)
    if attr:
        target["digest"] = _digest(target)
    path.write_text(json.dumps(doc))


def _claim_length(root: Path, length: int) -> None:
    def edit(r: dict[str, Any]) -> None:
        r["committed_length"] = length
        r["edges"] = {k: e for k, e in r["edges"].items() if k.startswith("episodes/")}

    _edit(root / "commit" / "zarr.json", "rlvault_commit", edit)
    for leaf in ("obs", "action", "reward", "done"):
        _edit(
            root / "experience" / leaf / "zarr.json",
            None,
            lambda a: a["shape"].__setitem__(1, length),
        )


def _claim_count(root: Path, count: int) -> None:
    def edit(r: dict[str, Any]) -> None:
        r["episodes"]["count"] = count
        r["edges"] = {k: e for k, e in r["edges"].items() if not k.startswith("episodes/")}

    _edit(root / "commit" / "zarr.json", "rlvault_commit", edit)
    for key in ("bounds", "returns"):
        _edit(
            root / "episodes" / key / "zarr.json", None, lambda a: a["shape"].__setitem__(0, count)
        )


def _chunk(root: Path) -> Path:
    """A complete chunk of the obs leaf (the second in key order)."""
    return sorted(p for p in (root / "experience" / "obs" / "c").rglob("*") if p.is_file())[1]


def _crc(data: bytes) -> bytes:
    import google_crc32c

    return struct.pack("<I", google_crc32c.value(data))


def _zstd_bomb(size: int) -> bytes:
    body = bytearray(b"\x28\xb5\x2f\xfd\x00\x38")
    left = size
    while left:
        n = min(left, 1 << 17)
        left -= n
        body += ((n << 3) | 2 | (left == 0)).to_bytes(3, "little") + b"\x00"
    return bytes(body) + _crc(bytes(body))


def _fifo(root: Path) -> None:
    chunk = _chunk(root)
    chunk.unlink()
    os.mkfifo(chunk)


def _link_out(root: Path) -> None:
    chunk = _chunk(root)
    chunk.unlink()
    chunk.symlink_to("/dev/zero")


def _bomb(root: Path) -> None:
    _chunk(root).write_bytes(_zstd_bomb(1 << 30))


def _deep(root: Path) -> None:
    value: Any = 0
    for _ in range(200):
        value = [value]
    _edit(root / "zarr.json", "rlvault", lambda m: m.update(user_metadata={"x": value}))


VARIANTS: dict[str, Callable[[Path], None]] = {
    "length x1000 claimed": lambda r: _claim_length(r, STEPS * 1000),
    "length 2**53 claimed": lambda r: _claim_length(r, 2**53),
    "episode count 2**40 claimed": lambda r: _claim_count(r, 2**40),
    "chunk is a FIFO": _fifo,
    "chunk links to /dev/zero": _link_out,
    "chunk is a 1 GiB zstd bomb": _bomb,
    "metadata nested 200 deep": _deep,
}


# ------------------------------------------------------------------------------ the child
def _run_op(op: str, path: str) -> str:
    import vault
    from vault import Vault, VaultError

    try:
        if op == "open":
            _ = Vault.open(path).committed_length
        elif op == "read":
            Vault.open(path).read_numpy()
        elif op == "stream":
            stream = Vault.open(path).as_dataset(64, 8, shuffle=True, seed=0, device_put=False)
            for _, _batch in zip(range(10), stream, strict=False):
                pass
            stream.close()
        elif op == "episodes":
            Vault.open(path).episodes()
        elif op == "stats":
            vault.leaf_stats(Vault.open(path))
        elif op == "verify":  # a report, not an exception: its verdict is the outcome
            report = vault.verify(path)
            n = len(report.problems)
            return "sound" if report.ok else f"{n} problem{'' if n == 1 else 's'} found"
        else:
            Vault.open(path).fingerprint()
    except VaultError as err:
        return type(err).__name__
    return "ok"


def child(sound: str, hostile: str, rounds: int) -> None:
    out: dict[str, Any] = {}
    for op in OPS:
        times: dict[str, list[float]] = {"sound": [], "hostile": []}
        outcome = ""
        for _ in range(rounds):  # side by side: sound, hostile, sound, hostile, ...
            for which, path in (("sound", sound), ("hostile", hostile)):
                began = time.perf_counter()
                got = _run_op(op, path)
                times[which].append(time.perf_counter() - began)
                if which == "hostile":
                    outcome = got
        out[op] = {
            "sound_ms": 1e3 * statistics.median(times["sound"]),
            "hostile_ms": 1e3 * statistics.median(times["hostile"]),
            "outcome": outcome,
        }
    print(json.dumps(out))


# ------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rounds", type=positive_int, default=5, help="timed rounds per operation (default 5)"
    )
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=300,
        help="seconds before a variant's child process is killed as a hang (default 300)",
    )
    parser.add_argument("--out", type=out_file, default=None, help="write the results as JSON here")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    try:
        sound = work / "sound"
        build(sound)
        results: dict[str, Any] = {"load_before": os.getloadavg(), "rounds": args.rounds}
        for name, forge in VARIANTS.items():
            hostile = work / name.replace(" ", "_").replace("*", "")
            shutil.copytree(sound, hostile)
            forge(hostile)
            argv_ = [
                sys.executable,
                __file__,
                "--child",
                str(sound),
                str(hostile),
                str(args.rounds),
            ]
            try:
                done = subprocess.run(argv_, capture_output=True, text=True, timeout=args.timeout)
                results[name] = json.loads(done.stdout.strip().splitlines()[-1])
            except subprocess.TimeoutExpired:
                results[name] = "HANG"
            except (IndexError, json.JSONDecodeError):
                results[name] = f"FAILED: {done.stderr[-500:]}"
        results["load_after"] = os.getloadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _table(results)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    bad = [n for n in VARIANTS if not isinstance(results[n], dict)]
    return 1 if bad else 0


def _table(results: dict[str, Any]) -> None:
    print(f"load average before {results['load_before']}, after {results['load_after']}")
    print(
        f"{'variant':30} {'operation':12} {'sound ms':>9} {'hostile ms':>11} {'ratio':>6}  outcome"
    )
    for name in VARIANTS:
        row = results[name]
        if not isinstance(row, dict):
            print(f"{name:30} {row}")
            continue
        for op, r in row.items():
            ratio = r["hostile_ms"] / max(r["sound_ms"], 1e-9)
            print(
                f"{name:30} {op:12} {r['sound_ms']:9.1f} {r['hostile_ms']:11.1f} {ratio:6.2f}  "
                f"{r['outcome']}"
            )


if __name__ == "__main__":
    sys.exit(main())
