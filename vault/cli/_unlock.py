"""``vault unlock``: break the writer lease of a vault on an object store."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from vault.cli._common import (
    EXIT_USAGE,
    JsonOpt,
    PathArg,
    check_vault_path,
    emit_json,
    exit_with,
    fail,
    say_error,
    stdout,
)


def unlock(
    path: PathArg,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Break it without asking (for scripts).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Break the writer lock (lease) of a vault on object storage whose writer died.

    A lease whose holder stopped renewing it can also be taken over once it expires; this
    frees it at once. A writer that is in fact still running loses the lock: its next
    commit fails, and nothing it wrote after its last commit is kept. Local vaults need no
    unlocking (a dead writer's lock goes with its process): they are refused at once.
    With --json: {"path", "holder" (pid, host, since, thread; null if none recorded),
    "broken" (whether there was a lock)}.
    """
    import vault

    check_vault_path(path)
    if vault.is_dataset(path):
        fail(
            f"{path} is a dataset of shards, each with its own writer lock: unlock the shard "
            f"whose writer died, `vault unlock {path.rstrip('/')}/shards/NAME` (`vault ls "
            f"{path}` lists the shards)"
        )
    holder = vault.lock_holder(path)
    location = vault.parse_location(path)
    path = str(location)  # as every other command names it: s3://b/p, not S3://b/p/
    if not location.capabilities.lease:
        fail(
            f"{path}: its writer lock is released when the writer's process ends, so there is "
            "no lock to break; "
            + ("nobody holds it" if holder is None else f"it is held by {holder}: stop that "
               "process if it is stuck")
        )  # fmt: skip
    who = "nobody holds it (or the lease expired)" if holder is None else f"held by {holder}"
    if not yes:
        console = stdout()
        if not console.is_terminal:
            say_error(f"`vault unlock`: {path}: {who}; pass --yes to break the lock")
            exit_with(EXIT_USAGE)
        if not _confirm(f"{path}: writer lock {who}. Break it?"):
            say_error("not unlocked")
            exit_with(EXIT_USAGE)
    had = vault.break_lock(path)
    if as_json:
        from vault.cli._facts import holder_doc

        held = None if holder is None else holder_doc(holder)
        emit_json({"path": path, "holder": held, "broken": had})
        return
    stdout().print(
        f"{path}: " + ("writer lock broken" if had else "no writer lock was held"), markup=False
    )


def _confirm(question: str) -> bool:
    """Ask ``question`` (yes/no, default no) on the terminal. Waits in short steps, so that
    Ctrl-C interrupts it at once even when the signal reached one of TensorStore's threads
    (CPython acts on a signal in the main thread, once that thread runs: a blocking read
    would wait for a key); the end of input is an interruption too."""
    import select

    sys.stdout.write(f"{question} [y/N]: ")
    sys.stdout.flush()
    while not select.select([sys.stdin], [], [], 0.1)[0]:
        pass  # a pending Ctrl-C is raised here, as KeyboardInterrupt
    answer = sys.stdin.readline()
    if not answer:
        raise typer.Abort()
    return answer.strip().lower() in ("y", "yes")
