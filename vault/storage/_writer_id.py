"""Who a writer is: the record a writer lock keeps, and the message a second writer gets."""

from __future__ import annotations

import datetime as _dt
import os
import socket
import threading
from typing import Any


def holder_record() -> dict[str, Any]:
    """This process and thread, as recorded by the writer lock it takes."""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "thread": threading.current_thread().name,
        "since": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def locked_message(where: str, holder: object | None) -> str:
    who = "another writer" if holder is None else str(holder)
    return (
        f"{where} is being written by {who}; only one writer at a time. Open it with mode='r' "
        "to read while it is written, or close the other writer (a writer that died releases "
        "the lock with its process)."
    )
