"""The child process of ``test_hostile.py``: runs every read-only operation on vaults made by
an attacker and says how each ended.

Run as ``python _hostile_worker.py PRISTINE``: it learns the true content from the pristine
vault, then reads one job per line on stdin (a JSON object: ``path``, the hostile vault) and
answers one line per job: ``{"outcomes": {op: outcome}, "peak_kib": ..., "marker": ...}``.
An outcome is ``ok``, ``typed: <VaultError subclass>``, ``UNTYPED: ...`` (any other
exception) or ``WRONG: ...`` (data returned that is not the vault's true content).
``grown_kib`` is how far this process's peak resident memory during the job rose above what
it held when the job began (``VmHWM`` after resetting it through ``/proc/self/clear_refs``:
Linux). A module
named in a vault's structure that got imported leaves ``PWNED`` in the job's folder (the
attacker's payload), which ``marker`` reports.

The vault's parent folder is put first on ``sys.path`` during a job, as ``python -c`` or a
notebook started there would have it: a module the attacker placed beside the vault is
importable, so only the rule "never import a module named by a vault" keeps it from running.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

import vault
from vault import Vault, VaultError
from vault.cli.app import app

PRISTINE = sys.argv[1]


def _truth() -> tuple[dict[str, np.ndarray], set[tuple[int, int, int, float]]]:
    """The pristine vault's data, as its files hold it: the committed timesteps, then the
    rest of each leaf's last chunk (written whole; the fill value past the committed end:
    a record that claims more timesteps, with its checksums forged to match, reads those),
    and its episodes."""
    v = Vault.open(PRISTINE)
    table = v.episodes()
    episodes = {
        (int(r), int(s), int(n), float(ret))
        for r, s, n, ret in zip(table.row, table.start, table.length, table.returns, strict=True)
    }
    data = v.read_numpy()
    stored = -(-v.committed_length // 8) * 8  # every leaf's chunks hold 8 timesteps
    pad = stored - v.committed_length
    return {
        k: np.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2)) for k, x in data.items()
    }, episodes


DATA, EPISODES = _truth()


class Wrong(Exception):
    """Data that is not the vault's true content."""


def _same(got: dict[str, Any], rows: Any, t0: int, t1: int, what: str) -> None:
    """``got`` is the truth at ``[rows, t0:t1]``, or a box of it from its first indices (a
    lie that shrinks rows, timesteps or items still reads true values), or the truth's bytes
    as another dtype of the same size (a lie about the dtype describes the same bytes
    otherwise: any reader of the format reads them so)."""
    if set(got) != set(DATA):
        raise Wrong(f"{what}: leaves {sorted(got)}")
    for name, value in got.items():
        want = DATA[name][rows, t0:t1]
        have = np.asarray(value)
        if have.dtype != want.dtype and have.dtype.itemsize == want.dtype.itemsize:
            want = want.view(have.dtype)
        box = tuple(slice(0, n) for n in have.shape)
        if (
            have.dtype != want.dtype
            or have.ndim != want.ndim
            or any(h > w for h, w in zip(have.shape, want.shape, strict=True))
            or not np.array_equal(have, want[box], equal_nan=have.dtype.kind == "f")
        ):
            raise Wrong(f"{what}: {name} {have.dtype}{list(have.shape)} is not the truth")


def _flat(tree: Any) -> dict[str, Any]:
    """A read's structure as ``{leaf path: array}`` (a dict, or fields given back as one)."""
    if isinstance(tree, dict):
        return tree
    return dict(tree._asdict()) if hasattr(tree, "_asdict") else vars(tree)


def op_open(path: str) -> Any:
    v = Vault.open(path)
    return [v.committed_length, v.rows, v.leaf_names, v.metadata, v.seams, v.tags(), v.commit_id]


def op_read(path: str) -> Any:
    v = Vault.open(path)
    length = v.committed_length
    if length > DATA["obs"].shape[1]:  # more than there is: the read must fail
        v.read_numpy()
        raise Wrong(f"read {length} timesteps; {DATA['obs'].shape[1]} exist")
    _same(_flat(v.read_numpy()), slice(None), 0, length, "read_numpy")


def op_window(path: str) -> Any:
    v = Vault.open(path)
    length = min(v.committed_length, DATA["obs"].shape[1])
    got = v.read_numpy(rows=[0], start=max(0, length - 3), stop=length)
    _same(_flat(got), [0], max(0, length - 3), length, "a window")


def op_state(path: str) -> Any:
    v = Vault.open(path)
    length = min(v.committed_length, DATA["obs"].shape[1])
    state = v.read(start=max(0, length - 4), stop=length)
    got = {k: np.asarray(x) for k, x in _flat(state.experience).items()}
    _same(got, slice(None), max(0, length - 4), length, "read (state)")


def op_stream(path: str) -> Any:
    v = Vault.open(path)
    stream = v.as_dataset(2, 2, shuffle=True, seed=0, epochs=1, device_put=False)
    try:
        for i, batch in enumerate(stream):
            for j in range(len(batch.row)):
                row, start = int(batch.row[j]), int(batch.start[j])
                got = {k: np.asarray(x)[j : j + 1] for k, x in _flat(batch.experience).items()}
                _same(got, [row], start, start + 2, "a streamed sequence")
            if i >= 8:
                break
    finally:
        stream.close()


def op_episodes(path: str) -> Any:
    table = Vault.open(path).episodes(include_open=True)
    for r, s, n, ret, complete in zip(
        table.row, table.start, table.length, table.returns, table.complete, strict=True
    ):
        if complete and (int(r), int(s), int(n), float(ret)) not in EPISODES:
            raise Wrong(f"episode (row {r}, start {s}, length {n}, return {ret}) is not one")


def op_stats(path: str) -> Any:
    return len(vault.leaf_stats(Vault.open(path)))


def op_verify(path: str) -> Any:
    return vault.verify(path).ok


def op_fingerprint(path: str) -> Any:
    return Vault.open(path).fingerprint()


def op_pinned(path: str) -> Any:
    v = Vault.open(path, at=1)
    length = min(v.committed_length, DATA["obs"].shape[1])
    _same(_flat(v.read_numpy(stop=length)), slice(None), 0, length, "a pinned read")


def _cli(*args: str) -> Any:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            app(list(args), standalone_mode=False)
        except SystemExit as exit_:
            if exit_.code not in (0, None, 2, 3):
                raise RuntimeError(f"exit status {exit_.code}: {out.getvalue()[-400:]}") from None
    if "a bug in rlvault" in out.getvalue():
        raise RuntimeError(out.getvalue()[-400:])


OPS = {
    "open": op_open,
    "read": op_read,
    "window": op_window,
    "state": op_state,
    "stream": op_stream,
    "episodes": op_episodes,
    "stats": op_stats,
    "verify": op_verify,
    "fingerprint": op_fingerprint,
    "pinned": op_pinned,
    "cli info": lambda p: _cli("info", p),
    "cli stats": lambda p: _cli("stats", p),
    "cli episodes": lambda p: _cli("episodes", p),
    "cli verify": lambda p: _cli("verify", p),
    "cli ls": lambda p: _cli("ls", str(Path(p).parent)),
}


def run(path: str) -> dict[str, str]:
    outcomes = {}
    for name, op in OPS.items():
        began, held = time.monotonic(), _reset_peak()
        try:
            op(path)
            outcomes[name] = "ok"
        except Wrong as err:
            outcomes[name] = f"WRONG: {err}"
        except VaultError as err:
            outcomes[name] = f"typed: {type(err).__name__}"
        except Exception as err:
            tail = traceback.format_exc(limit=-4)[-1200:]
            outcomes[name] = f"UNTYPED: {type(err).__name__}: {str(err)[:300]} | {tail}"
        COSTS[name] = (time.monotonic() - began, _peak() - held)
    return outcomes


COSTS: dict[str, tuple[float, int]] = {}  # the last job's seconds and peak KiB, per operation


def main() -> None:
    for line in sys.stdin:
        path = json.loads(line)["path"]
        folder = str(Path(path).parent)
        start = _reset_peak()
        sys.path.insert(0, folder)
        try:
            outcomes = run(path)
        finally:
            sys.path.remove(folder)
        grown = max([_status("VmRSS") - start, *(kib for _, kib in COSTS.values())])
        marker = (Path(folder) / "PWNED").exists()
        costs = {op: [round(t, 3), kib] for op, (t, kib) in COSTS.items()}
        answer = {"outcomes": outcomes, "grown_kib": grown, "marker": marker, "costs": costs}
        print(json.dumps(answer), flush=True)


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> int:
    """Reset this process's peak resident memory to what it holds now (Linux: ``5`` into
    ``/proc/self/clear_refs``, since 4.0) and return that (KiB)."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status("VmRSS")


def _peak() -> int:
    """The peak resident memory since :func:`_reset_peak` (KiB)."""
    return _status("VmHWM")


if __name__ == "__main__":
    main()
