"""Background writing: an ordered queue of jobs on one thread, with back-pressure and an error
latch.

Jobs run one at a time, in the order they were submitted. At most ``max_pending`` wait; a
submit beyond that blocks until the oldest is done (back-pressure). Once a job fails, the jobs
queued after it do nothing (nothing after a failed write is committed) and the error is raised
once, by the next :meth:`submit`, :meth:`flush` or :meth:`close`. An error that nothing raised
before the queue was dropped (the process ended, or the writer was let go, with no later write,
flush or close) is logged then, so that it is never lost without a word.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import weakref
from collections.abc import Callable
from typing import Any

from vault._args import int_arg

_log = logging.getLogger(__name__)


class BackgroundQueue:
    """The queue of one writer's background writes (see the module docstring); ``where``
    names the vault in the message of an error that nothing raised."""

    def __init__(self, max_pending: int = 2, name: str = "vault-write", where: str = "") -> None:
        self._max_pending = int_arg("max_pending", max_pending, 1)
        self._name = name
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: collections.deque[concurrent.futures.Future[None]] = collections.deque()
        self._error: BaseException | None = None
        # failed, not raised to a caller yet: the error in words only (the error itself holds
        # its traceback, whose frames hold this queue, which the finalizer must not keep alive)
        self._unseen: list[str | None] = [None]
        weakref.finalize(self, _report_unseen, self._unseen, where or "a vault")

    @property
    def max_pending(self) -> int:
        """Jobs that may wait before :meth:`submit` blocks (at least 1: with none, no job
        could ever be queued)."""
        return self._max_pending

    @max_pending.setter
    def max_pending(self, value: int) -> None:
        self._max_pending = int_arg("max_pending", value, 1)

    def __len__(self) -> int:
        return len(self._pending)

    def submit(self, job: Callable[[], Any]) -> None:
        """Queue ``job``; blocks while ``max_pending`` jobs wait."""
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=self._name)
        while len(self._pending) >= self.max_pending:
            self._pending[0].result()  # back-pressure: wait for the oldest
            self._pending.popleft()  # (only once done: an interrupted wait keeps it listed)
        self._pending.append(self._pool.submit(self._run, job))

    def _run(self, job: Callable[[], Any]) -> None:
        if self._error is not None:
            return  # an earlier job failed: do nothing after it
        try:
            job()
        except BaseException as err:
            self._error = err
            self._unseen[0] = f"{type(err).__name__}: {err}"

    def wait(self) -> BaseException | None:
        """Wait for every queued job; returns (and clears) the first error, if any."""
        while self._pending:
            self._pending[0].result()
            self._pending.popleft()
        err, self._error = self._error, None
        self._unseen[0] = None  # the caller raises it
        return err

    def take_error(self) -> BaseException | None:
        """The first error of a finished job, once every job has ended (None: none failed)."""
        if self._error is None:
            return None
        return self.wait()

    def close(self) -> None:
        """Stop the thread (after the queued jobs)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _report_unseen(unseen: list[str | None], where: str) -> None:
    """Log the error of a background write that no caller saw (the queue is being dropped)."""
    err = unseen[0]
    if err is not None:
        unseen[0] = None
        _log.error(
            "%s: a background write failed, and the writer was dropped (or the process ended) "
            "before a later write, flush() or close() could raise it: %s. The vault is at "
            "its last commit: that write and every one queued after it were not committed.",
            where,
            err,
        )
